//! The completer (rxe_comp.c): matches responses to outstanding WQEs and
//! writes send completions, in order.
//!
//! * An ACK for PSN p completes every SEND/WRITE whose last PSN is at or
//!   before p; a READ or atomic still waiting for its response when an ACK
//!   passes it lost that response (an implied NAK): go back to it.
//! * READ responses are placed by PSN into the READ's SGEs; a response
//!   ahead of the expected PSN means one was lost: go back.
//! * NAK PSN sequence error: go back to the NAKed PSN. RNR NAK: wait the
//!   RNR timer, then go back. Other NAKs end the WQE with the matching
//!   status and move the QP to the error state.
//! * The retransmit timer (4.096 us * 2^timeout) goes back to the oldest
//!   unacknowledged PSN; `retry_cnt` consecutive failures without progress
//!   end the WQE with RETRY_EXC_ERR (the spec's count: 7 means seven
//!   retries, where rxe treats 7 as infinite). `rnr_retry` 7 is infinite.
//!
//! Going back (go-back-N) resumes a partially acknowledged SEND/WRITE at
//! its first unacknowledged packet and a partially answered READ with a
//! new request for the bytes still missing.

use crate::hca::{QpStep, TimerKind};
use crate::qp::EntryState;
use crate::time::Instant;
use crate::trace::{GoBackCause, ResponseVerdict, Step};
use uroce_device::types::{QpState, QpType, WcStatus, WrOpcode};
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::{roce, Mask, Opcode, Psn};

mod complete;
mod place;
mod retry;

pub(crate) use place::scatter;

impl QpStep<'_> {
    /// Takes a response packet (ACK, NAK, READ response, ATOMIC ACK).
    pub(crate) fn completer_receive(&mut self, now: Instant, packet: &roce::Packet<&[u8]>) {
        let (qpn, psn, opcode) = (self.qp.qpn, packet.bth().psn(), packet.bth().opcode());
        // The step goes first: what the response completes or raises
        // follows it.
        let at = self.dev.steps.recorded();
        let verdict = self.complete_response(now, packet);
        self.dev.steps.insert(at, now, Step::Response { qpn, psn, opcode, verdict });
    }

    fn complete_response(&mut self, now: Instant, packet: &roce::Packet<&[u8]>) -> ResponseVerdict {
        let qp = &*self.qp;
        let psn = packet.bth().psn();
        // Only a response to something outstanding may have an effect: a
        // PSN sent and not yet acknowledged, on an RC QP that sends.
        // Everything else (a duplicate or delayed response, one for a PSN
        // never sent, a forged one) is dropped here, before its syndrome is
        // looked at.
        if qp.qp_type != QpType::Rc || !qp.can_send() || !qp.awaits_response(psn) {
            self.dev.counters.rcvd_ghost_response += 1;
            return ResponseVerdict::NotOutstanding;
        }
        let opcode = packet.bth().opcode();
        let syndrome = packet.aeth().map(|a| a.syndrome());
        match opcode {
            Opcode::RC_ACKNOWLEDGE => match syndrome {
                Some(Syndrome::Ack { .. }) => self.on_ack(now, psn),
                Some(s @ Syndrome::RnrNak { timer_code }) => {
                    self.on_rnr_nak(now, psn, timer_code).verdict(s)
                }
                Some(s @ Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    self.on_seq_nak(now, psn).verdict(s)
                }
                Some(s @ Syndrome::Nak(code)) => {
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                        _ => WcStatus::BadRespErr,
                    };
                    self.on_fatal_nak(now, psn, status).verdict(s)
                }
                Some(Syndrome::Reserved(_)) | None => {
                    self.dev.counters.rcvd_malformed += 1;
                    ResponseVerdict::NotPlaced
                }
            },
            Opcode::RC_ATOMIC_ACKNOWLEDGE => {
                let orig = packet.atomic_ack_eth().map(|a| a.orig()).unwrap_or(0);
                self.on_atomic_ack(now, psn, orig)
            }
            op if op.info().is_some_and(|i| i.is(Mask::RESP.union(Mask::READ))) => {
                self.on_read_response(now, psn, packet)
            }
            _ => {
                self.dev.counters.rcvd_ghost_response += 1;
                ResponseVerdict::NotPlaced
            }
        }
    }

    /// An ACK (or the AETH of a READ response) acknowledges every PSN up to
    /// and including `psn`.
    fn on_ack(&mut self, now: Instant, psn: Psn) -> ResponseVerdict {
        // A stale or duplicate ACK must not postpone the retransmit timer.
        let progressed = self.ack_up_to(now, psn);
        if progressed {
            self.after_progress(now);
        }
        ResponseVerdict::Ack { progressed }
    }

    /// Completes SEND/WRITE/ATOMIC WRITE/FLUSH WQEs acknowledged by `psn`;
    /// a READ or atomic passed by the ACK lost its response.
    /// Returns whether the oldest unacknowledged PSN moved forward.
    fn ack_up_to(&mut self, now: Instant, psn: Psn) -> bool {
        let qp = &mut *self.qp;
        let mut i = qp.sq.consumer;
        let mut implied_nak = None;
        // Every entry with PSNs may be covered, including ones a go-back
        // queued to be sent again.
        while i != qp.fetched {
            let Some(entry) = qp.entry_mut(i) else { break };
            if !entry.psn_assigned || psn.is_before(entry.first_psn) {
                break;
            }
            if !matches!(entry.state, EntryState::Done(_)) {
                let response_needed = matches!(
                    entry.opcode,
                    WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
                );
                if response_needed {
                    // Only an acknowledgement of the READ's last PSN (or
                    // later) says its responses were lost; the AETH of a
                    // READ response acknowledges PSNs inside the READ.
                    if !psn.is_before(entry.last_psn()) {
                        implied_nak = Some(i);
                    }
                    break;
                }
                // Fully acknowledged: done, even if a go-back had queued it
                // to be sent again.
                if !psn.is_before(entry.last_psn()) {
                    entry.state = EntryState::Done(WcStatus::Success);
                    if entry.opcode.is_read_or_atomic() {
                        qp.req.rd_atomic_outstanding =
                            qp.req.rd_atomic_outstanding.saturating_sub(1);
                    }
                }
            }
            i = i.wrapping_add(1);
        }
        // The acknowledged point stops at a READ/atomic whose response was
        // lost: the PSNs after it are received, but not "done" in order.
        let resume = implied_nak.and_then(|i| qp.entry(i).map(|e| resume_psn(e, qp.mtu())));
        let acked = resume.unwrap_or(psn.next());
        let progressed = acked.is_after(qp.comp.psn);
        if progressed {
            qp.completer_progressed(acked);
        }
        if let Some(resume) = resume {
            // The response to a READ/atomic before `psn` was lost: send the
            // request again, once per go-back (rxe's started_retry), not once
            // per ACK that passes it.
            if !qp.comp.started_retry && self.consume_retry(now) {
                self.retry(now, resume, GoBackCause::ImpliedNak);
                self.qp.comp.started_retry = true;
            }
        }
        self.retire(now);
        progressed
    }

    /// A NAK at `psn` acknowledges every PSN before it. Its own syndrome
    /// applies only if `psn` is then the oldest unacknowledged PSN: if a
    /// READ or atomic before it still lacks its response, the NAK passed a
    /// lost response, acknowledging up to it started the go-back for that
    /// one (an implied NAK; rxe's COMPST_ERROR_RETRY), and the resent
    /// requests will meet whatever the NAK was about again.
    fn nak_applies(&mut self, now: Instant, psn: Psn) -> bool {
        self.ack_up_to(now, psn.wrapping_sub(1));
        self.qp.comp.psn == psn && self.qp.state != QpState::Err
    }

    /// PSN sequence error: go back to `psn`. A go-back already under way
    /// from this point (a duplicated NAK, or the timer fired first) is not
    /// started or paid for again: the responder NAKs a gap once, so a
    /// second NAK without progress adds nothing.
    fn on_seq_nak(&mut self, now: Instant, psn: Psn) -> Applied {
        self.dev.counters.rcvd_seq_err += 1;
        if !self.nak_applies(now, psn) {
            return Applied(false);
        }
        if self.qp.comp.started_retry {
            return Applied(false);
        }
        if self.consume_retry(now) {
            self.retry(now, psn, GoBackCause::SequenceNak);
            self.qp.comp.started_retry = true;
            self.rearm(now);
        }
        Applied(true)
    }

    /// Receiver not ready: wait the RNR timer, then go back to `psn`.
    fn on_rnr_nak(&mut self, now: Instant, psn: Psn, timer_code: u8) -> Applied {
        self.dev.counters.rcvd_rnr_err += 1;
        if !self.nak_applies(now, psn) {
            return Applied(false);
        }
        let qp = &mut *self.qp;
        let qpn = qp.qpn;
        if qp.attr.rnr_retry != 7 {
            if qp.comp.rnr_retry_left == 0 {
                self.dev.counters.retry_rnr_exceeded_err += 1;
                self.step(now, Step::RetriesExhausted { qpn, rnr: true });
                self.fail_oldest(now, WcStatus::RnrRetryExcErr);
                return Applied(true);
            }
            qp.comp.rnr_retry_left -= 1;
        }
        let wait_us = Syndrome::RnrNak { timer_code }.rnr_wait_us().unwrap_or(655_360);
        self.step(now, Step::RnrWait { qpn, wait_us });
        self.retry(now, psn, GoBackCause::RnrNak);
        self.cancel_timer(TimerKind::Retransmit);
        self.set_timer(TimerKind::Rnr, Some(now.plus_nanos(u64::from(wait_us) * 1_000)));
        Applied(true)
    }

    /// A NAK the requester cannot recover from (invalid request, remote
    /// access or operational error) ends the WQE that holds `psn`, the
    /// oldest one not done.
    fn on_fatal_nak(&mut self, now: Instant, psn: Psn, status: WcStatus) -> Applied {
        let applies = self.nak_applies(now, psn);
        if applies {
            self.fail_oldest(now, status);
        }
        Applied(applies)
    }
}

/// Whether a NAK's syndrome was acted on.
struct Applied(bool);

impl Applied {
    fn verdict(self, syndrome: Syndrome) -> ResponseVerdict {
        match self {
            Applied(true) => ResponseVerdict::Nak(syndrome),
            Applied(false) => ResponseVerdict::NakIgnored(syndrome),
        }
    }
}

/// The PSN from which a READ/atomic must be asked again.
fn resume_psn(entry: &crate::qp::SqEntry, mtu: u32) -> Psn {
    match entry.opcode {
        WrOpcode::RdmaRead => entry.first_psn + (entry.read_placed / u64::from(mtu)) as u32,
        _ => entry.first_psn,
    }
}
