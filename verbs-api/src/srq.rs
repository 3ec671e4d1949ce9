//! Shared receive queues ([`Srq`]).

use crate::context::Context;
use crate::error::{Error, PostResult, Result};
use crate::pd::Pd;
use crate::ring::WorkRing;
use crate::wr::RecvWr;
use uroce_device::command::{Command, Reply};
use uroce_device::ring::recv_ring_shape;
use uroce_device::Doorbell;

impl Pd {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        let limits = &self.ctx.limits;
        if max_wr > limits.max_srq_wr || max_sge > limits.max_srq_sge {
            return Err(Error::Invalid("SRQ size: max_wr or max_sge above the device's limit"));
        }
        let ring = self.ctx.alloc_ring(recv_ring_shape(max_wr, max_sge))?;
        let cmd = Command::CreateSrq { pd: self.index, ring, max_sge, limit };
        match self.ctx.command(cmd) {
            Ok(Reply::Index(index)) => Ok(Srq {
                ctx: self.ctx.clone(),
                index,
                max_sge,
                // The SRQ takes as many WQEs as its ring holds.
                ring: WorkRing::new(ring, ring.entries, "SRQ full"),
            }),
            Ok(_) => unreachable!("CreateSrq answers Index"),
            Err(e) => {
                self.ctx.free_ring(ring);
                Err(e)
            }
        }
    }
}

/// A shared receive queue (`ibv_srq`).
pub struct Srq {
    ctx: Context,
    pub(crate) index: u32,
    max_sge: u32,
    ring: WorkRing,
}

impl Srq {
    /// `ibv_post_srq_recv`: posts a chain; on failure, the index of the WR
    /// that failed (the ones before it were posted) and why. One doorbell
    /// for the whole chain.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> PostResult {
        self.ctx.check_open().map_err(|e| (0, e))?;
        let (posted, result) = self.ring.post_chain(self.ctx.host().as_ref(), wrs, |wr, slot| {
            if wr.sg_list.len() > self.max_sge as usize {
                return Err(Error::Invalid("more SGEs than max_sge"));
            }
            wr.write_wqe(slot);
            Ok(())
        });
        if posted > 0 {
            self.ctx.doorbell(Doorbell::Srq(self.index));
            self.ctx.posted_receive();
        }
        result
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.ctx.command(Command::ModifySrq { srq: self.index, limit })?;
        Ok(())
    }

    /// The SRQ's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// `ibv_destroy_srq`: refused (EBUSY) while QPs use it. After it
    /// succeeds the SRQ is gone: drop it.
    pub fn destroy(&self) -> Result<()> {
        self.ctx.command(Command::DestroySrq { srq: self.index })?;
        self.ctx.free_ring(self.ring.desc());
        Ok(())
    }
}
