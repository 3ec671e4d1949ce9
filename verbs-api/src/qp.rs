//! Queue pairs ([`Qp`]): creation, state changes, posting work.

use crate::context::Context;
use crate::cq::Cq;
use crate::error::{Error, PostResult, Result};
use crate::mr::{Mr, Mw};
use crate::pd::Pd;
use crate::ring::WorkRing;
use crate::srq::Srq;
use crate::wr::{RecvWr, SendWr};
use std::cell::Cell;
use uroce_device::command::{Command, DeviceAttr, Gid, QpAttr, QpCap, QpInit, Reply};
use uroce_device::ring::{recv_ring_shape, send_ring_shape};
use uroce_device::types::{Access, AttrMask, QpState, QpType, Qpn, Rkey};
use uroce_device::Doorbell;

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
                sq: WorkRing::new(sq, cap.max_send_wr, "send queue full"),
                rq: rq.map(|rq| WorkRing::new(rq, cap.max_recv_wr, "receive queue full")),
                state: Cell::new(QpState::Reset),
            }),
            Ok(_) => unreachable!("CreateQp answers Qp"),
            Err(e) => {
                self.ctx.free_ring(sq);
                if let Some(rq) = rq {
                    self.ctx.free_ring(rq);
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
///
/// `Send` but not `Sync`: its work rings build each WQE in one reused
/// slot, so posts come from one thread (or task) at a time; move the `Qp`
/// to another thread, or wrap it in a `Mutex`, to post from several. Its
/// CQs ([`Cq`](crate::Cq)) are `Sync` and may be awaited from elsewhere.
pub struct Qp {
    ctx: Context,
    qpn: Qpn,
    qp_type: QpType,
    cap: QpCap,
    sq: WorkRing,
    /// None when the QP receives from an SRQ.
    rq: Option<WorkRing>,
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
                    // The HCA considers the rings empty again.
                    let host = self.ctx.host().as_ref();
                    self.sq.reset(host)?;
                    if let Some(rq) = &self.rq {
                        rq.reset(host)?;
                    }
                }
                self.state.set(state);
            }
        }
        Ok(())
    }

    /// `ibv_attach_mcast`: UD SENDs to the multicast group `gid` (QPN
    /// 0xFFFFFF) reach this UD QP from now on. `lid` is InfiniBand's and
    /// ignored on RoCE.
    pub fn attach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        self.ctx.command(Command::AttachMcast { qpn: self.qpn, gid, lid })?;
        Ok(())
    }

    /// `ibv_detach_mcast`: refused when the QP is not attached to `gid`.
    pub fn detach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        self.ctx.command(Command::DetachMcast { qpn: self.qpn, gid, lid })?;
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
    /// failed (the ones before it were posted) and why. The WQEs are
    /// published together and one doorbell is rung for the whole chain.
    pub fn post_send(&self, wrs: &[SendWr]) -> PostResult {
        self.ctx.check_open().map_err(|e| (0, e))?;
        if matches!(self.state.get(), QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err((0, Error::Invalid("post_send on a QP that is not ready to send")));
        }
        let (posted, result) = self.sq.post_chain(self.ctx.host().as_ref(), wrs, |wr, slot| {
            self.check_send_wr(wr)?;
            wr.write_wqe(slot);
            Ok(())
        });
        if posted > 0 {
            if self.sq.device_will_look(self.ctx.host().as_ref()) {
                self.ctx.posted_send_unkicked();
            } else {
                self.ctx.doorbell(Doorbell::SendQueue(self.qpn));
            }
        }
        result
    }

    /// The QP's checks of a send WR: opcode, SGE and inline limits, UD
    /// address (the HCA checks the rest when the WR runs).
    fn check_send_wr(&self, wr: &SendWr) -> Result<()> {
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
        Ok(())
    }

    /// `ibv_post_recv`: posts a chain; on failure, the index of the WR that
    /// failed (the ones before it were posted) and why. The WQEs are
    /// published together and one doorbell is rung for the whole chain.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> PostResult {
        let Some(rq) = &self.rq else {
            return Err((0, Error::Invalid("the QP receives from an SRQ")));
        };
        if self.state.get() == QpState::Reset {
            return Err((0, Error::Invalid("post_recv on a QP in RESET")));
        }
        self.ctx.check_open().map_err(|e| (0, e))?;
        let (posted, result) = rq.post_chain(self.ctx.host().as_ref(), wrs, |wr, slot| {
            if wr.sg_list.len() > self.cap.max_recv_sge as usize {
                return Err(Error::Invalid("more SGEs than max_recv_sge"));
            }
            wr.write_wqe(slot);
            Ok(())
        });
        if posted > 0 {
            // Outside the error state the HCA reads the RQ when a SEND
            // needs a WQE: no kick (device-interface.md §2.3).
            if !rq.device_will_look(self.ctx.host().as_ref()) {
                self.ctx.doorbell(Doorbell::RecvQueue(self.qpn));
            }
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
        self.ctx.free_ring(self.sq.desc());
        if let Some(rq) = &self.rq {
            self.ctx.free_ring(rq.desc());
        }
        Ok(())
    }
}

/// `Qp` is `Send` (posts may move to another thread).
const _: () = {
    const fn send<T: Send>() {}
    send::<Qp>();
};
