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
use crate::handles::QpIndex;
use crate::hca::Hca;
use crate::qp::EntryState;
use crate::send_op::SendOp;
use crate::time::Instant;
use uroce_device::types::{QpState, SendFlags, WcStatus};

mod fetch;
mod packet;

pub(crate) use packet::emit_frame;

impl Hca {
    /// Builds the next request packet of QP `index`, if it may send one.
    pub(crate) fn next_request_packet(
        &mut self,
        now: Instant,
        index: QpIndex,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let qp = self.qps.get(index)?;
        if !qp.can_send() || qp.comp.rnr_until.is_some() {
            return None;
        }
        if qp.req.index == qp.fetched {
            self.fetch_send_wqes(now, index);
        }
        // Local operations and refused WQEs complete without a packet; a
        // bounded number of them per turn.
        for _ in 0..self.config.max_packets_per_turn {
            let qp = self.qps.get(index)?;
            if qp.req.index == qp.fetched || !qp.can_send() {
                return None;
            }
            let req_index = qp.req.index;
            let entry = qp.entry(req_index)?;
            // SQD starts no new WQE, but finishes (and resends) the ones
            // that already have PSNs.
            if qp.state == QpState::Sqd && qp.req.sent_pkts == 0 && !entry.psn_assigned {
                self.sq_drained_check(index);
                return None;
            }
            if matches!(entry.state, EntryState::Done(_)) {
                // Acknowledged while queued for a resend: skip it.
                let qp = self.qps.get_mut(index)?;
                qp.req.index = req_index.wrapping_add(1);
                qp.req.sent_pkts = 0;
                continue;
            }
            if let Some(status) = entry.fetch_error {
                self.finish_without_packet(now, index, status);
                continue;
            }
            if entry.opcode.is_local() {
                if entry.flags.contains(SendFlags::FENCE) && qp.req.rd_atomic_outstanding > 0 {
                    return None;
                }
                let status = self.execute_local(index, req_index);
                self.finish_without_packet(now, index, status);
                continue;
            }
            return self.build_request(now, index, buf);
        }
        // More local work remains: come back next turn.
        None
    }

    /// Completes the current WQE without sending anything.
    pub(super) fn finish_without_packet(&mut self, now: Instant, index: QpIndex, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(index) else { return };
        let req_index = qp.req.index;
        if let Some(entry) = qp.entry_mut(req_index) {
            entry.state = EntryState::Done(status);
        }
        qp.req.index = req_index.wrapping_add(1);
        qp.req.sent_pkts = 0;
        self.retire(now, index);
    }

    /// LOCAL_INV and BIND_MW.
    fn execute_local(&mut self, index: QpIndex, req_index: u32) -> WcStatus {
        let Some(qp) = self.qps.get(index) else { return WcStatus::LocQpOpErr };
        let (pd, qpn) = (qp.pd, qp.qpn);
        let Some(entry) = qp.entry(req_index) else { return WcStatus::LocQpOpErr };
        match entry.op {
            SendOp::LocalInv { key } => match self.mem.invalidate_for(key, pd) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            SendOp::BindMw { window, window_key, region, va, len, access } => {
                let bound = self.mem.bind_window(
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
