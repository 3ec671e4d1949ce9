//! Fetching send WQEs (rxe_req.c's req_next_wqe, as far as the ring is
//! concerned): newly posted WQEs are copied out of the application's ring
//! into the SQ shadow once, validated and decoded there.

use crate::hca::QpStep;
use crate::qp::SqEntry;
use crate::time::Instant;
use crate::trace::Step;
use uroce_device::ring::RingError;
use uroce_device::types::{QpState, QpType, SendFlags, WcStatus};
use uroce_device::wqe::{SendWqe, WqeLimits};

/// The most send WQEs a fetch reads in one access (what the slot buffer
/// grows to: this many strides).
const WQES_PER_READ: usize = 32;

impl QpStep<'_> {
    /// Copies newly posted send WQEs into the shadow, validating each once.
    /// A producer index that jumps past the ring is a fatal QP error.
    pub(crate) fn fetch_send_wqes(&mut self, now: Instant) {
        let max_msg_size = self.dev.config.max_msg_size;
        match self.qp.sq.refresh(self.dev.mem.host().as_ref()) {
            Ok(_) => {}
            Err(RingError::IndexJump { .. }) | Err(_) => {
                // Nothing in this ring can be trusted any more. A QP already
                // in error only flushes what it had fetched (going fatal
                // again would flush, fetch and fail here again).
                if self.qp.state != QpState::Err {
                    self.dev.counters.bad_wqe += 1;
                    let qpn = self.qp.qpn;
                    self.step(now, Step::WqeRefused { qpn, status: WcStatus::LocQpOpErr });
                    self.fatal(now);
                }
                return;
            }
        }
        // Borrowed, not cloned: an `Arc` clone is two atomic operations on
        // every send's path.
        let host = self.dev.mem.host().as_ref();
        let qp = &mut *self.qp;
        let limits = WqeLimits {
            max_sge: qp.cap.max_send_sge,
            max_inline: qp.cap.max_inline_data,
            max_msg_size,
        };
        // The WQEs are read into the HCA's slot buffer, a run of up to
        // `WQES_PER_READ` of them (before the ring's end) at a time; the read
        // fills all of it, so its old bytes need no zeroing. A WQE whose read faults is refused with
        // the wr_id of the last one read, 0 before any (what a slot buffer
        // zeroed for the fetch and filled one WQE at a time would hold).
        let stride = qp.sq.desc.stride as usize;
        let slots = &mut self.dev.wqe_slot;
        let mut last_wr_id = 0;
        while qp.fetched != qp.sq.producer_seen {
            let run = (qp.sq.run_from(qp.fetched) as usize).min(WQES_PER_READ);
            slots.resize(run * stride, 0);
            let read = qp.sq.read_run(host, qp.fetched, &mut slots[..run * stride]);
            for slot in slots[..run * stride].chunks_exact(stride) {
                let s = qp.slot(qp.fetched);
                let shadow = &mut qp.sq_shadow[s];
                shadow.clear();
                let decoded = match read {
                    Ok(()) => {
                        last_wr_id = uroce_device::wqe::slot_wr_id(slot);
                        // The WQE's data goes into the slot's spare buffers.
                        let (sges, inline) = (&mut shadow.spare_sges, &mut shadow.spare_inline);
                        SendWqe::decode_reusing(slot, &limits, sges, inline)
                            .map_err(|e| (last_wr_id, e.status))
                    }
                    Err(_) => Err((last_wr_id, WcStatus::LocQpOpErr)),
                };
                // Each entry is built where it lies, in its slot (moving
                // one is a copy of all of it).
                let fetch_error = match decoded {
                    Ok(wqe) => {
                        let legal = wqe.opcode.allowed_on(qp.qp_type);
                        let signaled = qp.sq_sig_all || wqe.flags.contains(SendFlags::SIGNALED);
                        let ud_too_long = qp.qp_type == QpType::Ud
                            && wqe.length() > u64::from(self.dev.config.active_mtu.bytes());
                        let fetch_error = if !legal {
                            Some(WcStatus::LocQpOpErr)
                        } else if ud_too_long {
                            Some(WcStatus::LocLenErr)
                        } else {
                            None
                        };
                        shadow.entry = Some(SqEntry::new(wqe, signaled, fetch_error));
                        fetch_error
                    }
                    Err((wr_id, status)) => {
                        shadow.entry = Some(SqEntry::refused(wr_id, status));
                        Some(status)
                    }
                };
                if let Some(status) = fetch_error {
                    self.dev.counters.bad_wqe += 1;
                    self.dev.steps.record(now, Step::WqeRefused { qpn: qp.qpn, status });
                }
                qp.fetched = qp.fetched.wrapping_add(1);
            }
        }
    }
}
