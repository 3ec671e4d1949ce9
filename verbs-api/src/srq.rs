//! Shared receive queues ([`Srq`]).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::wr::RecvWr;
use std::cell::Cell;
use uroce_device::command::{Command, Reply};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET};
use uroce_device::wqe::RecvWqe;
use uroce_device::Doorbell;
use uroce_hca::hca::recv_ring_shape;

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
            Ok(Reply::Index(index)) => {
                Ok(Srq { ctx: self.ctx.clone(), index, ring, max_sge, producer: Cell::new(0) })
            }
            Ok(_) => unreachable!("CreateSrq answers Index"),
            Err(e) => {
                self.ctx.host().free(ring.base);
                Err(e)
            }
        }
    }
}

/// A shared receive queue (`ibv_srq`).
pub struct Srq {
    ctx: Context,
    pub(crate) index: u32,
    ring: RingDesc,
    max_sge: u32,
    producer: Cell<u32>,
}

impl Srq {
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), (usize, Error)> {
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let mut producer = self.producer.get();
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge as usize {
                return Err((i, Error::Invalid("more SGEs than max_sge")));
            }
            let consumer = host
                .load_acquire_u32(self.ring.base + CONSUMER_OFFSET)
                .map_err(|e| (i, e.into()))?;
            if producer.wrapping_sub(consumer) >= self.ring.entries {
                return Err((i, Error::NoMemory("SRQ full")));
            }
            let wqe = RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.clone() };
            let mut slot = vec![0u8; self.ring.stride as usize];
            wqe.encode(&mut slot);
            host.write(self.ring.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
            producer = producer.wrapping_add(1);
            self.producer.set(producer);
            host.store_release_u32(self.ring.base + PRODUCER_OFFSET, producer)
                .map_err(|e| (i, e.into()))?;
        }
        self.ctx.doorbell(Doorbell::Srq(self.index));
        self.ctx.posted_receive();
        Ok(())
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.ctx.command(Command::ModifySrq { srq: self.index, limit })?;
        Ok(())
    }
}
