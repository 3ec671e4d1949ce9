//! Queue pairs ([`Qp`]): creation, state changes, posting work.

use crate::context::Context;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::mr::{Mr, Mw};
use crate::pd::Pd;
use crate::srq::Srq;
use crate::wr::{RecvWr, SendWr};
use std::cell::Cell;
use uroce_device::command::{Command, DeviceAttr, QpAttr, QpCap, QpInit, Reply};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET};
use uroce_device::types::{Access, AttrMask, QpState, QpType, Qpn, Rkey};
use uroce_device::wqe::{RecvWqe, SendWqe};
use uroce_device::Doorbell;
use uroce_hca::hca::{recv_ring_shape, send_ring_shape};

/// QP creation attributes (`ibv_qp_init_attr`).
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// Send completions go here.
    pub send_cq: &'a Cq,
    /// Receive completions go here.
    pub recv_cq: &'a Cq,
    /// Receives come from this SRQ instead of an RQ.
    pub srq: Option<&'a Srq>,
    /// Sizes.
    pub cap: QpCap,
    /// Every send WR is signaled.
    pub sq_sig_all: bool,
}

impl Pd {
    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        let cap = init.cap;
        check_qp_cap(&cap, init.srq.is_some(), &self.ctx.limits)?;
        let sq = self.ctx.alloc_ring(send_ring_shape(
            cap.max_send_wr,
            cap.max_send_sge,
            cap.max_inline_data,
        ))?;
        let rq = match init.srq {
            Some(_) => None,
            None => Some(self.ctx.alloc_ring(recv_ring_shape(cap.max_recv_wr, cap.max_recv_sge))?),
        };
        let cmd = Command::CreateQp(QpInit {
            pd: self.index,
            qp_type: init.qp_type,
            send_cq: init.send_cq.index,
            recv_cq: init.recv_cq.index,
            srq: init.srq.map(|s| s.index),
            sq,
            rq,
            cap,
            sq_sig_all: init.sq_sig_all,
        });
        match self.ctx.command(cmd) {
            Ok(Reply::Qp { qpn }) => Ok(Qp {
                ctx: self.ctx.clone(),
                qpn,
                qp_type: init.qp_type,
                cap,
                sq,
                rq,
                sq_producer: Cell::new(0),
                rq_producer: Cell::new(0),
                state: Cell::new(QpState::Reset),
            }),
            Ok(_) => unreachable!("CreateQp answers Qp"),
            Err(e) => {
                let host = self.ctx.host();
                host.free(sq.base);
                if let Some(rq) = rq {
                    host.free(rq.base);
                }
                Err(e)
            }
        }
    }
}

/// rxe's `rxe_qp_chk_cap`: every size within the device's limits (EINVAL),
/// checked before the rings are allocated.
fn check_qp_cap(cap: &QpCap, has_srq: bool, limits: &DeviceAttr) -> Result<()> {
    if cap.max_send_wr > limits.max_qp_wr || cap.max_send_sge > limits.max_sge {
        return Err(Error::Invalid(
            "QP size: max_send_wr or max_send_sge above the device's limit",
        ));
    }
    if cap.max_inline_data > limits.max_inline_data {
        return Err(Error::Invalid("QP size: max_inline_data above the device's limit"));
    }
    if !has_srq && (cap.max_recv_wr > limits.max_qp_wr || cap.max_recv_sge > limits.max_sge) {
        return Err(Error::Invalid(
            "QP size: max_recv_wr or max_recv_sge above the device's limit",
        ));
    }
    Ok(())
}

/// A queue pair (`ibv_qp`).
pub struct Qp {
    ctx: Context,
    qpn: Qpn,
    qp_type: QpType,
    cap: QpCap,
    sq: RingDesc,
    rq: Option<RingDesc>,
    sq_producer: Cell<u32>,
    rq_producer: Cell<u32>,
    state: Cell<QpState>,
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.ctx.command(Command::ModifyQp { qpn: self.qpn, attr: *attr, mask })?;
        if mask.contains(AttrMask::STATE) {
            if let Some(state) = attr.qp_state {
                if state == QpState::Reset {
                    self.sq_producer.set(0);
                    self.rq_producer.set(0);
                    let host = self.ctx.host();
                    for ring in std::iter::once(self.sq).chain(self.rq) {
                        host.store_release_u32(ring.base + PRODUCER_OFFSET, 0)?;
                        host.store_release_u32(ring.base + CONSUMER_OFFSET, 0)?;
                    }
                }
                self.state.set(state);
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        match self.ctx.command(Command::QueryQp { qpn: self.qpn })? {
            Reply::QpAttr(attr) => {
                if let Some(state) = attr.qp_state {
                    self.state.set(state);
                }
                Ok(attr)
            }
            _ => unreachable!("QueryQp answers QpAttr"),
        }
    }

    /// `ibv_post_send`: posts a chain; on failure, the index of the WR that
    /// failed (the ones before it were posted) and why. One doorbell for
    /// the whole chain.
    pub fn post_send(&self, wrs: &[SendWr]) -> core::result::Result<(), (usize, Error)> {
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let state = self.state.get();
        let mut posted = 0;
        let result = (|| {
            if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
                return Err((0, Error::Invalid("post_send on a QP that is not ready to send")));
            }
            let mut producer = self.sq_producer.get();
            for (i, wr) in wrs.iter().enumerate() {
                let wqe = self.build_send_wqe(wr).map_err(|e| (i, e))?;
                let consumer = host
                    .load_acquire_u32(self.sq.base + CONSUMER_OFFSET)
                    .map_err(|e| (i, e.into()))?;
                if producer.wrapping_sub(consumer) >= self.cap.max_send_wr {
                    return Err((i, Error::NoMemory("send queue full")));
                }
                let mut slot = vec![0u8; self.sq.stride as usize];
                wqe.encode(&mut slot);
                host.write(self.sq.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
                producer = producer.wrapping_add(1);
                self.sq_producer.set(producer);
                host.store_release_u32(self.sq.base + PRODUCER_OFFSET, producer)
                    .map_err(|e| (i, e.into()))?;
                posted += 1;
            }
            Ok(())
        })();
        if posted > 0 {
            self.ctx.doorbell(Doorbell::SendQueue(self.qpn));
            self.ctx.flush();
        }
        result
    }

    fn build_send_wqe(&self, wr: &SendWr) -> Result<SendWqe> {
        if !wr.opcode.allowed_on(self.qp_type) {
            return Err(Error::Invalid("opcode not allowed on this QP type"));
        }
        match &wr.inline_data {
            Some(data) if data.len() > self.cap.max_inline_data as usize => {
                return Err(Error::Invalid("inline data above max_inline_data"));
            }
            None if wr.sg_list.len() > self.cap.max_send_sge as usize => {
                return Err(Error::Invalid("more SGEs than max_send_sge"));
            }
            _ => {}
        }
        if self.qp_type == QpType::Ud && wr.ud.is_none() {
            return Err(Error::Invalid("a UD send needs an address handle"));
        }
        Ok(wr.to_wqe())
    }

    /// `ibv_post_recv`: posts a chain; on failure, the index of the WR that
    /// failed and why.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), (usize, Error)> {
        let Some(rq) = self.rq else {
            return Err((0, Error::Invalid("the QP receives from an SRQ")));
        };
        if self.state.get() == QpState::Reset {
            return Err((0, Error::Invalid("post_recv on a QP in RESET")));
        }
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let mut producer = self.rq_producer.get();
        let mut posted = 0;
        let result = (|| {
            for (i, wr) in wrs.iter().enumerate() {
                if wr.sg_list.len() > self.cap.max_recv_sge as usize {
                    return Err((i, Error::Invalid("more SGEs than max_recv_sge")));
                }
                let consumer =
                    host.load_acquire_u32(rq.base + CONSUMER_OFFSET).map_err(|e| (i, e.into()))?;
                if producer.wrapping_sub(consumer) >= self.cap.max_recv_wr {
                    return Err((i, Error::NoMemory("receive queue full")));
                }
                let wqe = RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.clone() };
                let mut slot = vec![0u8; rq.stride as usize];
                wqe.encode(&mut slot);
                host.write(rq.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
                producer = producer.wrapping_add(1);
                self.rq_producer.set(producer);
                host.store_release_u32(rq.base + PRODUCER_OFFSET, producer)
                    .map_err(|e| (i, e.into()))?;
                posted += 1;
            }
            Ok(())
        })();
        if posted > 0 {
            self.ctx.doorbell(Doorbell::RecvQueue(self.qpn));
            self.ctx.posted_receive();
        }
        result
    }

    /// `ibv_bind_mw` for a type-1 window: posts the bind through this QP's
    /// send queue (as libibverbs does) under the next 8-bit key, and updates
    /// the window's R_Key at once. The bind completes like any WR.
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &Mw,
        mr: &Mr,
        offset: u64,
        length: u64,
        access: Access,
    ) -> Result<Rkey> {
        if mw.mw_type() != 1 {
            return Err(Error::Invalid("ibv_bind_mw binds type-1 windows; use a BIND_MW WR"));
        }
        let next_key = (mw.rkey().0 as u8).wrapping_add(1);
        let (wr, rkey) = SendWr::bind_mw(wr_id, mw, mr, offset, length, access, next_key);
        self.post_send(&[wr]).map_err(|(_, e)| e)?;
        mw.set_rkey(rkey);
        Ok(rkey)
    }

    /// `ibv_destroy_qp`.
    pub fn destroy(self) -> Result<()> {
        self.ctx.command(Command::DestroyQp { qpn: self.qpn })?;
        let host = self.ctx.host();
        host.free(self.sq.base);
        if let Some(rq) = self.rq {
            host.free(rq.base);
        }
        Ok(())
    }
}
