//! The requester (rxe_req.c): turns send WQEs into request packets.
//!
//! WQEs are copied out of the application's ring into the SQ shadow once,
//! validated and decoded there (`fetch.rs`). The requester walks the
//! shadow in order: it assigns each WQE its PSNs on first transmission,
//! segments SENDs and WRITEs by the path MTU, sends one request per READ
//! (which reserves a PSN per response packet) and per atomic, honours
//! FENCE, `max_rd_atomic` and the unacknowledged-PSN window (`packet.rs`),
//! and executes local operations (LOCAL_INV, BIND_MW) in order (here).

use crate::endpoint::Transmit;
use crate::hca::QpStep;
use crate::qp::EntryState;
use crate::send_op::SendOp;
use crate::time::Instant;
use uroce_device::types::{QpState, SendFlags, WcStatus};

mod fetch;
mod packet;

pub(crate) use packet::{emit_frame, emit_frame_around, payload_room};

impl QpStep<'_> {
    /// Builds the next request packet, if the QP may send one.
    pub(crate) fn next_request_packet(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let qp = &*self.qp;
        if !qp.can_send() || qp.comp.rnr_until.is_some() {
            return None;
        }
        if qp.req.index == qp.fetched {
            self.fetch_send_wqes(now);
            self.qp.req.ring_read_at = now;
        } else if self.waits_for_budget() {
            // Known before reading the ring again (`build_request` checks
            // a freshly fetched WQE).
            return None;
        }
        // Local operations and refused WQEs complete without a packet; a
        // bounded number of them per turn.
        for _ in 0..self.dev.config.max_packets_per_turn {
            let qp = &mut *self.qp;
            if qp.req.index == qp.fetched || !qp.can_send() {
                return None;
            }
            let req_index = qp.req.index;
            let entry = qp.entry(req_index)?;
            // SQD starts no new WQE, but finishes (and resends) the ones
            // that already have PSNs.
            if qp.state == QpState::Sqd && qp.req.sent_pkts == 0 && !entry.psn_assigned {
                self.sq_drained_check();
                return None;
            }
            if matches!(entry.state, EntryState::Done(_)) {
                // Acknowledged while queued for a resend: skip it.
                qp.req.index = req_index.wrapping_add(1);
                qp.req.sent_pkts = 0;
                continue;
            }
            if let Some(status) = entry.fetch_error {
                self.finish_without_packet(now, status);
                continue;
            }
            if entry.opcode.is_local() {
                if entry.flags.contains(SendFlags::FENCE) && qp.req.rd_atomic_outstanding > 0 {
                    return None;
                }
                let status = self.execute_local(req_index);
                self.finish_without_packet(now, status);
                continue;
            }
            match self.build_request(now, buf) {
                // A WQE that failed without a packet behind unacknowledged
                // ones rewound the requester for an ACK probe: send it now.
                None if self.qp.req.probe_wanted && self.qp.req.index != req_index => continue,
                Some(transmit) => {
                    let qp = &*self.qp;
                    // The ring was read in this same round (the runtime
                    // passes one `now` per round) and all of it is sent.
                    let nothing_behind = qp.req.ring_read_at == now
                        && qp.req.index == qp.fetched
                        && !qp.req.probe_wanted;
                    return Some(Transmit { nothing_behind, ..transmit });
                }
                None => return None,
            }
        }
        // More local work fetched: come back next turn. (Work posted
        // after the fetch waits for a later call: the QP leaves the
        // schedule and its look at the ring takes it as a doorbell.)
        let qp = &*self.qp;
        self.dev.turn_cut_short = qp.req.index != qp.fetched;
        None
    }

    /// Completes the current WQE without sending anything.
    pub(super) fn finish_without_packet(&mut self, now: Instant, status: WcStatus) {
        let qp = &mut *self.qp;
        let req_index = qp.req.index;
        if let Some(entry) = qp.entry_mut(req_index) {
            entry.state = EntryState::Done(status);
        }
        qp.req.index = req_index.wrapping_add(1);
        qp.req.sent_pkts = 0;
        // Its completion comes after theirs: ask for the ACK now rather
        // than after `ack_probe_ns`.
        if qp.req.unrequested_wqes > 0 {
            self.send_ack_probe(now);
        }
        self.retire(now);
    }

    /// LOCAL_INV and BIND_MW.
    fn execute_local(&mut self, req_index: u32) -> WcStatus {
        let qp = &*self.qp;
        let (pd, qpn) = (qp.pd, qp.qpn);
        let Some(entry) = qp.entry(req_index) else { return WcStatus::LocQpOpErr };
        match entry.op {
            SendOp::LocalInv { key } => match self.dev.mem.invalidate_for(key, pd) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            SendOp::BindMw { window, window_key, region, va, len, access } => {
                let bound = self.dev.mem.bind_window(
                    window,
                    Some(window_key),
                    region,
                    va,
                    len,
                    access,
                    pd,
                    qpn,
                );
                match bound {
                    Ok(_) => WcStatus::Success,
                    Err(_) => WcStatus::MwBindErr,
                }
            }
            _ => WcStatus::LocQpOpErr,
        }
    }
}
