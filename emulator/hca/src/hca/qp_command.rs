//! The QP commands: create, modify (the state machine's transitions and
//! the attributes each sets), destroy.

use super::{Hca, TimerKind};
use crate::config::{HcaConfig, SourcePortPolicy};
use crate::handles::{CqIndex, PdIndex, SrqIndex, TableIndex};
use crate::qp::{Completer, Path, QpContext, Requester, Responder, SqSlot};
use crate::qp_state::modify_is_ok;
use crate::ring::ConsumerRing;
use crate::time::Instant;
use uroce_device::command::{CmdError, QpAttr, QpInit, Reply};
use uroce_device::types::{AttrMask, QpState, QpType, Qpn};
use uroce_device::wqe::{recv_stride, send_stride};
use uroce_wire::udp_port;

impl Hca {
    pub(super) fn create_qp(&mut self, init: QpInit) -> Result<Reply, CmdError> {
        let c = &self.dev.config;
        // The handles the command names, typed.
        let pd = PdIndex(init.pd);
        let (send_cq, recv_cq) = (CqIndex(init.send_cq), CqIndex(init.recv_cq));
        let srq = init.srq.map(SrqIndex);
        self.pd_exists(pd)?;
        let cap = init.cap;
        if cap.max_send_wr == 0 || cap.max_send_wr > c.max_qp_wr {
            return Err(CmdError::Invalid("max_send_wr"));
        }
        if cap.max_send_sge > c.max_sge || cap.max_inline_data > c.max_inline_data {
            return Err(CmdError::Invalid("max_send_sge or max_inline_data"));
        }
        if init.sq.entries < cap.max_send_wr {
            return Err(CmdError::Invalid("SQ ring smaller than max_send_wr"));
        }
        init.sq
            .validate(c.max_qp_wr, send_stride(cap.max_send_sge, cap.max_inline_data))
            .map_err(|_| CmdError::Invalid("SQ ring shape"))?;
        let rq = match (srq, init.rq) {
            (Some(srq), None) => {
                if self.dev.srqs.get(srq).is_none_or(|s| s.pd != pd) {
                    return Err(CmdError::Invalid("no such SRQ in this PD"));
                }
                None
            }
            (None, Some(rq)) => {
                if cap.max_recv_wr == 0
                    || cap.max_recv_wr > c.max_qp_wr
                    || rq.entries < cap.max_recv_wr
                {
                    return Err(CmdError::Invalid("max_recv_wr"));
                }
                if cap.max_recv_sge == 0 || cap.max_recv_sge > c.max_sge {
                    return Err(CmdError::Invalid("max_recv_sge"));
                }
                rq.validate(c.max_qp_wr, recv_stride(cap.max_recv_sge))
                    .map_err(|_| CmdError::Invalid("RQ ring shape"))?;
                Some(ConsumerRing::new(rq))
            }
            _ => return Err(CmdError::Invalid("a QP has an RQ or an SRQ, not both or neither")),
        };
        for cq in [send_cq, recv_cq] {
            if self.dev.cqs.get(cq).is_none() {
                return Err(CmdError::Invalid("no such CQ"));
            }
        }
        let entries = init.sq.entries as usize;
        let index = self
            .qps
            .insert_with(|_| QpContext {
                qpn: Qpn::new(0),
                qp_type: init.qp_type,
                state: QpState::Reset,
                pd,
                send_cq,
                recv_cq,
                srq,
                sq: ConsumerRing::new(init.sq),
                rq,
                cap,
                sq_sig_all: init.sq_sig_all,
                attr: QpAttr::default(),
                path: None,
                sport: 0,
                sq_shadow: std::iter::repeat_with(SqSlot::default).take(entries).collect(),
                fetched: 0,
                req: Requester::default(),
                comp: Completer::default(),
                resp: Responder::default(),
                scheduled: false,
                charged_psns: 0,
                waiting_for_budget: false,
                sq_doorbell_seen: 0,
                sent_pkts: 0,
                injected: crate::fault::Injected::default(),
            })
            .map_err(|_| CmdError::NoResources("QP table full"))?;
        self.pd_use(pd, 1);
        for cq in [send_cq, recv_cq] {
            if let Some(ctx) = self.dev.cqs.get_mut(cq) {
                ctx.users += 1;
            }
        }
        if let Some(srq) = srq.and_then(|s| self.dev.srqs.get_mut(s)) {
            srq.users += 1;
        }
        let qpn = self.qpn_of_slot(index);
        if let Some(qp) = self.qps.get_mut(index) {
            qp.qpn = qpn;
            // A receive posted before any SEND arrives is read then.
            super::set_recv_flag(&self.dev.mem, qp, true);
            if init.qp_type == QpType::Ud {
                qp.sport = match self.dev.config.source_ports {
                    SourcePortPolicy::PerQp => udp_port::datagram_sport(qpn),
                    SourcePortPolicy::Shared => udp_port::SPORT_BASE,
                };
                self.dev.source_ports.take(qp.sport);
            }
        }
        Ok(Reply::Qp { qpn })
    }

    pub(super) fn destroy_qp(&mut self, qpn: Qpn) -> Result<Reply, CmdError> {
        let index = self.qp_slot(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        let mut qp = self.qps.remove(index).ok_or(CmdError::NotFound("no such QP"))?;
        self.detach_mcast_all(qpn);
        let generation = &mut self.qp_slot_generation[index.slot()];
        *generation = generation.wrapping_add(1);
        // Its timers go with it: left in the set, they would fire on the
        // next QP given this slot.
        for kind in TimerKind::ALL {
            self.dev.timers.set(index, &mut qp, kind, None);
        }
        self.dev.sched.retain(|&i| i != index);
        self.dev.unacked_psns = self.dev.unacked_psns.saturating_sub(qp.charged_psns);
        self.pd_use(qp.pd, -1);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(ctx) = self.dev.cqs.get_mut(cq) {
                ctx.users = ctx.users.saturating_sub(1);
            }
        }
        if let Some(srq) = qp.srq.and_then(|s| self.dev.srqs.get_mut(s)) {
            srq.users = srq.users.saturating_sub(1);
        }
        Ok(Reply::Done)
    }

    pub(super) fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<Reply, CmdError> {
        let index = self.qp_slot(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        let path = if mask.contains(AttrMask::AV) {
            Some(self.resolve_path(&attr.ah_attr)?)
        } else {
            None
        };
        let mut step = self.qp_step(index).ok_or(CmdError::NotFound("no such QP"))?;
        let config = &step.dev.config;
        let qp = &mut *step.qp;
        let from = qp.state;
        let to = if mask.contains(AttrMask::STATE) {
            attr.qp_state.ok_or(CmdError::Invalid("STATE in the mask without a qp_state"))?
        } else {
            from
        };
        if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != Some(from) {
            return Err(CmdError::Invalid("cur_qp_state is not the QP's state"));
        }
        if !modify_is_ok(from, to, qp.qp_type, mask) {
            return Err(CmdError::Invalid("attribute mask not allowed for this transition"));
        }
        validate_attr_values(attr, mask, config)?;
        apply_attrs(qp, attr, mask, path);
        qp.state = to;
        let mut took_port = None;
        match to {
            QpState::Reset => {
                // Its timers go with its state: left in the set, one would
                // fire on the QP connected again (a retry spent, a go-back).
                for kind in TimerKind::ALL {
                    step.dev.timers.set(step.index, qp, kind, None);
                }
                reset_qp(qp);
                // Out of the error state: posts need no kick again.
                super::set_recv_flag(&step.dev.mem, qp, true);
            }
            QpState::Rtr if from == QpState::Init => {
                qp.resp.epsn = uroce_wire::Psn::new(qp.attr.rq_psn);
                let slots = usize::from(qp.attr.max_dest_rd_atomic.max(1));
                qp.resp.resources = vec![None; slots];
                if qp.qp_type != QpType::Ud {
                    let remote = Qpn::new(qp.attr.dest_qp_num);
                    qp.sport = match config.source_ports {
                        SourcePortPolicy::PerQp => {
                            udp_port::connected_sport(qpn, remote, qp.attr.ah_attr.flow_label)
                        }
                        SourcePortPolicy::Shared => udp_port::SPORT_BASE,
                    };
                    took_port = Some(qp.sport);
                }
            }
            QpState::Rts if from == QpState::Rtr => {
                let psn = uroce_wire::Psn::new(qp.attr.sq_psn);
                qp.req.next_psn = psn;
                qp.comp.psn = psn;
                qp.comp.retry_left = qp.attr.retry_cnt;
                qp.comp.rnr_retry_left = qp.attr.rnr_retry;
            }
            _ => {}
        }
        if to == QpState::Err && from != QpState::Err {
            step.enter_error(now);
        } else if matches!(to, QpState::Rts | QpState::Sqe | QpState::Sqd) {
            step.schedule();
            if to == QpState::Sqd {
                // Draining waits for the ACKs of what went without AckReq.
                if step.qp.req.unrequested_wqes > 0 {
                    step.send_ack_probe(now);
                }
                step.sq_drained_check();
            }
        }
        if let Some(port) = took_port {
            step.dev.source_ports.take(port);
        }
        Ok(Reply::Done)
    }
}

fn validate_attr_values(attr: &QpAttr, mask: AttrMask, config: &HcaConfig) -> Result<(), CmdError> {
    let bad = |ok: bool, why| if ok { Ok(()) } else { Err(CmdError::Invalid(why)) };
    if mask.contains(AttrMask::PATH_MTU) {
        let mtu = attr.path_mtu.ok_or(CmdError::Invalid("path_mtu missing"))?;
        bad(mtu.bytes() <= config.active_mtu.bytes(), "path_mtu above the port's active MTU")?;
    }
    if mask.contains(AttrMask::PORT) {
        bad(attr.port_num == 1, "port_num must be 1")?;
    }
    if mask.contains(AttrMask::PKEY_INDEX) {
        bad(attr.pkey_index == 0, "pkey_index must be 0 (one partition)")?;
    }
    if mask.contains(AttrMask::TIMEOUT) {
        bad(attr.timeout <= 31, "timeout above 31")?;
    }
    if mask.contains(AttrMask::RETRY_CNT) {
        bad(attr.retry_cnt <= 7, "retry_cnt above 7")?;
    }
    if mask.contains(AttrMask::RNR_RETRY) {
        bad(attr.rnr_retry <= 7, "rnr_retry above 7")?;
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) {
        bad(attr.min_rnr_timer <= 31, "min_rnr_timer above 31")?;
    }
    if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) {
        bad(attr.max_rd_atomic <= config.max_qp_init_rd_atom, "max_rd_atomic above the device's")?;
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
        bad(
            attr.max_dest_rd_atomic <= config.max_qp_rd_atom,
            "max_dest_rd_atomic above the device's",
        )?;
    }
    if mask.contains(AttrMask::DEST_QPN) {
        bad(attr.dest_qp_num <= Qpn::MAX, "dest_qp_num above 24 bits")?;
    }
    if mask.contains(AttrMask::ACCESS_FLAGS) {
        bad(!attr.qp_access_flags.has_unknown_bits(), "unknown access flags")?;
    }
    bad(!mask.contains(AttrMask::ALT_PATH), "alternate paths are not supported on RoCE")?;
    bad(!mask.contains(AttrMask::RATE_LIMIT), "rate limits are not supported")?;
    Ok(())
}

fn apply_attrs(qp: &mut QpContext, attr: &QpAttr, mask: AttrMask, path: Option<Path>) {
    let a = &mut qp.attr;
    let m = |bit| mask.contains(bit);
    if m(AttrMask::ACCESS_FLAGS) {
        a.qp_access_flags = attr.qp_access_flags;
    }
    if m(AttrMask::PKEY_INDEX) {
        a.pkey_index = attr.pkey_index;
    }
    if m(AttrMask::PORT) {
        a.port_num = attr.port_num;
    }
    if m(AttrMask::QKEY) {
        a.qkey = attr.qkey;
    }
    if m(AttrMask::AV) {
        a.ah_attr = attr.ah_attr;
        qp.path = path;
    }
    if m(AttrMask::PATH_MTU) {
        a.path_mtu = attr.path_mtu;
    }
    if m(AttrMask::TIMEOUT) {
        a.timeout = attr.timeout;
    }
    if m(AttrMask::RETRY_CNT) {
        a.retry_cnt = attr.retry_cnt;
        qp.comp.retry_left = attr.retry_cnt;
    }
    if m(AttrMask::RNR_RETRY) {
        a.rnr_retry = attr.rnr_retry;
        qp.comp.rnr_retry_left = attr.rnr_retry;
    }
    if m(AttrMask::RQ_PSN) {
        a.rq_psn = attr.rq_psn & 0x00ff_ffff;
    }
    if m(AttrMask::SQ_PSN) {
        a.sq_psn = attr.sq_psn & 0x00ff_ffff;
    }
    if m(AttrMask::MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = attr.max_rd_atomic;
    }
    if m(AttrMask::MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if m(AttrMask::MIN_RNR_TIMER) {
        a.min_rnr_timer = attr.min_rnr_timer;
    }
    if m(AttrMask::DEST_QPN) {
        a.dest_qp_num = attr.dest_qp_num;
    }
    if m(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        a.en_sqd_async_notify = attr.en_sqd_async_notify;
    }
}

/// Back to a freshly created QP: engines cleared, rings empty.
fn reset_qp(qp: &mut QpContext) {
    qp.attr = QpAttr::default();
    qp.path = None;
    qp.req = Requester::default();
    qp.comp = Completer::default();
    qp.resp = Responder::default();
    qp.sq = ConsumerRing::new(qp.sq.desc);
    qp.rq = qp.rq.map(|rq| ConsumerRing::new(rq.desc));
    qp.fetched = 0;
    qp.sq_doorbell_seen = 0;
    qp.sq_shadow.iter_mut().for_each(SqSlot::clear);
}
