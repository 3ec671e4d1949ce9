//! Timers and going back (rxe_comp.c's retry paths, rxe_req.c's
//! req_retry): the retransmit timer, RNR waits, the retry budget, and
//! go-back-N itself.

use crate::hca::{QpStep, TimerKind};
use crate::qp::EntryState;
use crate::time::Instant;
use crate::trace::{GoBackCause, Step};
use uroce_device::types::{QpState, WcStatus, WrOpcode};
use uroce_wire::Psn;

impl QpStep<'_> {
    /// After an ACK made progress: restart or stop the retransmit timer,
    /// and let the requester send more.
    pub(crate) fn after_progress(&mut self, now: Instant) {
        self.rearm(now);
        self.schedule();
    }

    /// Arms the retransmit timer while PSNs are outstanding.
    pub(crate) fn rearm(&mut self, now: Instant) {
        let qp = &*self.qp;
        let outstanding = qp.comp.psn != qp.req.next_psn && qp.state != QpState::Err;
        let at = match (outstanding, qp.ack_timeout_ns()) {
            (true, Some(ns)) => Some(now.plus_nanos(ns)),
            _ => None,
        };
        self.set_timer(TimerKind::Retransmit, at);
        if !outstanding {
            self.qp.req.unrequested_wqes = 0;
            self.qp.req.probe_wanted = false;
            self.cancel_timer(TimerKind::AckProbe);
        }
    }

    /// The ACK-probe timer fired. When the end of a message went without
    /// AckReq `ack_probe_ns` ago or more, is still unacknowledged, and no
    /// packet asked since, the probe goes ([`QpStep::send_ack_probe`]).
    pub(crate) fn ack_probe_due(&mut self, now: Instant) {
        let qp = &*self.qp;
        let psn = qp.req.unrequested_psn;
        if qp.req.unrequested_wqes == 0 {
            return;
        }
        if !qp.awaits_response(psn) {
            // An ACK covered them.
            self.qp.req.unrequested_wqes = 0;
            return;
        }
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) || qp.comp.rnr_until.is_some() {
            // Resending waits for the RNR wait's go-back, or never comes.
            return;
        }
        let due = qp.req.unrequested_since.plus_nanos(self.dev.config.ack_probe_ns);
        if due > now {
            self.set_timer(TimerKind::AckProbe, Some(due));
            return;
        }
        self.send_ack_probe(now);
    }

    /// Asks for the ACK of the messages that went without AckReq: the last
    /// of them goes again with AckReq (the responder answers a duplicate
    /// with an ACK, IBA C9-105). Not a go-back: no retry is spent and
    /// nothing after it is resent. When something was sent after it (a
    /// message under way, or a go-back), the next packet asks instead, and
    /// the timer looks again a probe time later in case none comes.
    pub(crate) fn send_ack_probe(&mut self, now: Instant) {
        let qp = &mut *self.qp;
        let psn = qp.req.unrequested_psn;
        qp.req.probe_wanted = true;
        let last_sent = qp.req.sent_pkts == 0 && qp.req.last_sent_psn == psn;
        if last_sent && self.rewind(psn) {
            self.dev.counters.ack_probes += 1;
            let qpn = self.qp.qpn;
            self.step(now, Step::AckProbe { qpn, psn });
        } else {
            let at = now.plus_nanos(self.dev.config.ack_probe_ns);
            self.set_timer(TimerKind::AckProbe, Some(at));
        }
    }

    /// Spends one transport retry; with none left, fails the oldest WQE with
    /// RETRY_EXC_ERR and returns false.
    pub(crate) fn consume_retry(&mut self, now: Instant) -> bool {
        if self.qp.state == QpState::Err {
            return false;
        }
        if self.qp.comp.retry_left == 0 {
            self.dev.counters.retry_exceeded_err += 1;
            let qpn = self.qp.qpn;
            self.step(now, Step::RetriesExhausted { qpn, rnr: false });
            self.fail_oldest(now, WcStatus::RetryExcErr);
            return false;
        }
        self.qp.comp.retry_left -= 1;
        true
    }

    /// A response arrived ahead of the expected PSN: one before it was
    /// lost. Go back once; the responses still in flight behind the lost one
    /// will arrive out of sequence too and must not spend more retries.
    pub(crate) fn go_back_once(&mut self, now: Instant) {
        if self.qp.comp.started_retry {
            return;
        }
        let from = self.qp.comp.psn;
        if self.consume_retry(now) {
            self.retry(now, from, GoBackCause::ResponseAhead);
            self.qp.comp.started_retry = true;
        }
    }

    /// The retransmit timer fired.
    pub(crate) fn retransmit_timeout(&mut self, now: Instant) {
        let qp = &*self.qp;
        if qp.comp.psn == qp.req.next_psn || qp.state == QpState::Err {
            return;
        }
        let from = qp.comp.psn;
        if self.consume_retry(now) {
            self.retry(now, from, GoBackCause::Timeout);
            self.qp.comp.started_retry = true;
            self.rearm(now);
        }
    }

    /// Go-back-N: the requester resumes at PSN `from`.
    pub(crate) fn retry(&mut self, now: Instant, from: Psn, cause: GoBackCause) {
        if !self.rewind(from) {
            return;
        }
        // rxe's completer_retry_err counts the go-backs of its
        // COMPST_ERROR_RETRY (a timeout, a sequence NAK, a response ahead
        // of the one expected), not those after an RNR NAK's wait
        // (COMPST_RNR_RETRY: rcvd_rnr_err counts those NAKs).
        if cause != GoBackCause::RnrNak {
            self.dev.counters.completer_retry_err += 1;
        }
        let qpn = self.qp.qpn;
        self.step(now, Step::GoBack { qpn, from, cause });
    }

    /// Moves the requester back to PSN `from` and schedules it; false when
    /// `from` is not in an outstanding WQE or not behind where the
    /// requester is.
    fn rewind(&mut self, from: Psn) -> bool {
        let qp = &mut *self.qp;
        let Some(start) = super::place::entry_at_psn(qp, from) else { return false };
        let Some(entry) = qp.entry(start) else { return false };
        let resume_pkts = match entry.opcode {
            WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
            | WrOpcode::AtomicWrite
            | WrOpcode::Flush => 0,
            _ => entry.first_psn.distance_to(from).max(0) as u32,
        };
        // Positions in the send queue, counted from its head. A go-back
        // never moves the requester forward: when it is already rewound to
        // an earlier point (an implied NAK for a READ before this PSN, say),
        // that point stands.
        let consumer = qp.sq.consumer;
        let position = |i: u32| i.wrapping_sub(consumer);
        if (position(start), resume_pkts) >= (position(qp.req.index), qp.req.sent_pkts) {
            return false;
        }
        let end = qp.req.index.wrapping_add(u32::from(qp.req.sent_pkts > 0));
        // start is at or before end, both within [consumer, fetched].
        let span = position(end).saturating_sub(position(start));
        for k in 0..span {
            if let Some(entry) = qp.entry_mut(start.wrapping_add(k)) {
                if entry.state == EntryState::Pending {
                    entry.state = EntryState::Posted;
                }
            }
        }
        qp.req.index = start;
        qp.req.sent_pkts = resume_pkts;
        if from.is_before(qp.comp.psn) {
            qp.comp.psn = from;
        }
        self.schedule();
        true
    }
}
