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

use crate::hca::{Hca, TimerKind};
use crate::mr::Origin;
use crate::qp::EntryState;
use crate::time::Instant;
use crate::trace::{GoBackCause, ResponseVerdict, Step};
use uroce_device::cqe::Cqe;
use uroce_device::types::{Access, QpState, QpType, WcStatus, WrOpcode};
use uroce_device::wqe::Payload;
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::{roce, Mask, Opcode, Psn};

impl Hca {
    /// Takes a response packet (ACK, NAK, READ response, ATOMIC ACK) for
    /// QP `index`.
    pub(crate) fn completer_receive(
        &mut self,
        now: Instant,
        index: u32,
        packet: &roce::Packet<&[u8]>,
    ) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        let (qpn, psn, opcode) = (qp.qpn, packet.bth().psn(), packet.bth().opcode());
        // The step goes first: what the response completes or raises
        // follows it.
        let at = self.steps_recorded();
        let verdict = self.complete_response(now, index, packet);
        self.step_before(at, now, Step::Response { qpn, psn, opcode, verdict });
    }

    fn complete_response(
        &mut self,
        now: Instant,
        index: u32,
        packet: &roce::Packet<&[u8]>,
    ) -> ResponseVerdict {
        let Some(qp) = self.qps.get(index as usize) else { return ResponseVerdict::NotPlaced };
        let psn = packet.bth().psn();
        // Only a response to something outstanding may have an effect: a
        // PSN sent and not yet acknowledged, on an RC QP that sends.
        // Everything else (a duplicate or delayed response, one for a PSN
        // never sent, a forged one) is dropped here, before its syndrome is
        // looked at.
        if qp.qp_type != QpType::Rc || !qp.can_send() || !qp.awaits_response(psn) {
            self.counters.rcvd_ghost_response += 1;
            return ResponseVerdict::NotOutstanding;
        }
        let opcode = packet.bth().opcode();
        let syndrome = packet.aeth().map(|a| a.syndrome());
        match opcode {
            Opcode::RC_ACKNOWLEDGE => match syndrome {
                Some(Syndrome::Ack { .. }) => self.on_ack(now, index, psn),
                Some(s @ Syndrome::RnrNak { timer_code }) => {
                    self.on_rnr_nak(now, index, psn, timer_code).verdict(s)
                }
                Some(s @ Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    self.on_seq_nak(now, index, psn).verdict(s)
                }
                Some(s @ Syndrome::Nak(code)) => {
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                        _ => WcStatus::BadRespErr,
                    };
                    self.on_fatal_nak(now, index, psn, status).verdict(s)
                }
                Some(Syndrome::Reserved(_)) | None => {
                    self.counters.rcvd_malformed += 1;
                    ResponseVerdict::NotPlaced
                }
            },
            Opcode::RC_ATOMIC_ACKNOWLEDGE => {
                let orig = packet.atomic_ack_eth().map(|a| a.orig()).unwrap_or(0);
                self.on_atomic_ack(now, index, psn, orig)
            }
            op if op.info().is_some_and(|i| i.is(Mask::RESP.union(Mask::READ))) => {
                self.on_read_response(now, index, psn, packet)
            }
            _ => {
                self.counters.rcvd_ghost_response += 1;
                ResponseVerdict::NotPlaced
            }
        }
    }

    /// An ACK (or the AETH of a READ response) acknowledges every PSN up to
    /// and including `psn`.
    fn on_ack(&mut self, now: Instant, index: u32, psn: Psn) -> ResponseVerdict {
        // A stale or duplicate ACK must not postpone the retransmit timer.
        let progressed = self.ack_up_to(now, index, psn);
        if progressed {
            self.after_progress(now, index);
        }
        ResponseVerdict::Ack { progressed }
    }

    /// Completes SEND/WRITE/ATOMIC WRITE/FLUSH WQEs acknowledged by `psn`;
    /// a READ or atomic passed by the ACK lost its response.
    /// Returns whether the oldest unacknowledged PSN moved forward.
    fn ack_up_to(&mut self, now: Instant, index: u32, psn: Psn) -> bool {
        let Some(qp) = self.qps.get_mut(index as usize) else { return false };
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
                    entry.wqe.opcode,
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
                    if entry.wqe.opcode.is_read_or_atomic() {
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
            qp.comp.psn = acked;
            qp.comp.retry_left = qp.attr.retry_cnt;
            qp.comp.rnr_retry_left = qp.attr.rnr_retry;
            qp.comp.started_retry = false;
        }
        if let Some(resume) = resume {
            // The response to a READ/atomic before `psn` was lost: send the
            // request again, once per go-back (rxe's started_retry), not once
            // per ACK that passes it.
            if !qp.comp.started_retry && self.consume_retry(now, index) {
                self.retry(now, index, resume, GoBackCause::ImpliedNak);
                if let Some(qp) = self.qps.get_mut(index as usize) {
                    qp.comp.started_retry = true;
                }
            }
        }
        self.retire(now, index);
        progressed
    }

    /// A NAK at `psn` acknowledges every PSN before it. Its own syndrome
    /// applies only if `psn` is then the oldest unacknowledged PSN: if a
    /// READ or atomic before it still lacks its response, the NAK passed a
    /// lost response, acknowledging up to it started the go-back for that
    /// one (an implied NAK; rxe's COMPST_ERROR_RETRY), and the resent
    /// requests will meet whatever the NAK was about again.
    fn nak_applies(&mut self, now: Instant, index: u32, psn: Psn) -> bool {
        self.ack_up_to(now, index, psn.wrapping_sub(1));
        self.qps
            .get(index as usize)
            .is_some_and(|qp| qp.comp.psn == psn && qp.state != QpState::Err)
    }

    /// PSN sequence error: go back to `psn`. A go-back already under way
    /// from this point (a duplicated NAK, or the timer fired first) is not
    /// started or paid for again: the responder NAKs a gap once, so a
    /// second NAK without progress adds nothing.
    fn on_seq_nak(&mut self, now: Instant, index: u32, psn: Psn) -> Applied {
        self.counters.rcvd_seq_err += 1;
        if !self.nak_applies(now, index, psn) {
            return Applied(false);
        }
        if self.qps.get(index as usize).is_some_and(|qp| qp.comp.started_retry) {
            return Applied(false);
        }
        if self.consume_retry(now, index) {
            self.retry(now, index, psn, GoBackCause::SequenceNak);
            if let Some(qp) = self.qps.get_mut(index as usize) {
                qp.comp.started_retry = true;
            }
            self.rearm(now, index);
        }
        Applied(true)
    }

    /// Receiver not ready: wait the RNR timer, then go back to `psn`.
    fn on_rnr_nak(&mut self, now: Instant, index: u32, psn: Psn, timer_code: u8) -> Applied {
        self.counters.rcvd_rnr_err += 1;
        if !self.nak_applies(now, index, psn) {
            return Applied(false);
        }
        let Some(qp) = self.qps.get_mut(index as usize) else { return Applied(false) };
        let qpn = qp.qpn;
        if qp.attr.rnr_retry != 7 {
            if qp.comp.rnr_retry_left == 0 {
                self.counters.retry_rnr_exceeded_err += 1;
                self.step(now, Step::RetriesExhausted { qpn, rnr: true });
                self.fail_oldest(now, index, WcStatus::RnrRetryExcErr);
                return Applied(true);
            }
            qp.comp.rnr_retry_left -= 1;
        }
        let wait_us = Syndrome::RnrNak { timer_code }.rnr_wait_us().unwrap_or(655_360);
        self.step(now, Step::RnrWait { qpn, wait_us });
        self.retry(now, index, psn, GoBackCause::RnrNak);
        self.cancel_timer(index, TimerKind::Retransmit);
        self.set_timer(index, TimerKind::Rnr, Some(now.plus_nanos(u64::from(wait_us) * 1_000)));
        Applied(true)
    }

    /// A NAK the requester cannot recover from (invalid request, remote
    /// access or operational error) ends the WQE that holds `psn`, the
    /// oldest one not done.
    fn on_fatal_nak(&mut self, now: Instant, index: u32, psn: Psn, status: WcStatus) -> Applied {
        let applies = self.nak_applies(now, index, psn);
        if applies {
            self.fail_oldest(now, index, status);
        }
        Applied(applies)
    }

    /// The send-queue entry a READ response or atomic ACK at `psn` belongs
    /// to, if `psn` is the one the completer expects. A response ahead of
    /// it means something before it was lost: go back (once). One behind is
    /// a duplicate: dropped. An expected PSN no WQE owns is a ghost:
    /// counted and dropped.
    fn expected_response_entry(&mut self, now: Instant, index: u32, psn: Psn) -> Option<u32> {
        let expected = self.qps.get(index as usize)?.comp.psn;
        if psn != expected {
            if psn.is_after(expected) {
                self.go_back_once(now, index);
            }
            return None;
        }
        let entry = self.entry_at_psn(index, psn);
        if entry.is_none() {
            self.counters.rcvd_ghost_response += 1;
        }
        entry
    }

    fn on_atomic_ack(&mut self, now: Instant, index: u32, psn: Psn, orig: u64) -> ResponseVerdict {
        const NOT_PLACED: ResponseVerdict = ResponseVerdict::NotPlaced;
        if self.qps.get(index as usize).is_some_and(|qp| psn.is_after(qp.comp.psn)) {
            // Its AETH acknowledges everything before it.
            self.ack_up_to(now, index, psn.wrapping_sub(1));
        }
        let Some(entry_index) = self.expected_response_entry(now, index, psn) else {
            return NOT_PLACED;
        };
        let qp = self.qps.get_mut(index as usize).expect("checked");
        let pd = qp.pd;
        let Some(entry) = qp.entry(entry_index) else { return NOT_PLACED };
        if !matches!(entry.wqe.opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) {
            self.counters.rcvd_ghost_response += 1;
            return NOT_PLACED;
        }
        let status = match &entry.wqe.payload {
            Payload::Sges(sges) if sges.len() == 1 => {
                let sge = sges[0];
                match self.mem.check(
                    sge.lkey.0,
                    pd,
                    sge.addr,
                    8,
                    Access::LOCAL_WRITE,
                    Origin::Local,
                ) {
                    Ok(range) => match self.mem.write(&range, &orig.to_le_bytes()) {
                        Ok(()) => WcStatus::Success,
                        Err(_) => WcStatus::LocProtErr,
                    },
                    Err(_) => WcStatus::LocProtErr,
                }
            }
            _ => WcStatus::LocLenErr,
        };
        self.ack_up_to(now, index, psn.wrapping_sub(1));
        let qp = self.qps.get_mut(index as usize).expect("checked");
        if let Some(entry) = qp.entry_mut(entry_index) {
            entry.state = EntryState::Done(status);
        }
        qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        qp.comp.psn = psn.next();
        qp.comp.retry_left = qp.attr.retry_cnt;
        qp.comp.rnr_retry_left = qp.attr.rnr_retry;
        qp.comp.started_retry = false;
        self.retire(now, index);
        self.after_progress(now, index);
        ResponseVerdict::AtomicPlaced
    }

    fn on_read_response(
        &mut self,
        now: Instant,
        index: u32,
        psn: Psn,
        packet: &roce::Packet<&[u8]>,
    ) -> ResponseVerdict {
        const NOT_PLACED: ResponseVerdict = ResponseVerdict::NotPlaced;
        // The AETH of a READ response acknowledges every request before
        // the READ (an ACK for them may have been lost; rxe completes them
        // too), never the READ's own response PSNs.
        if packet.aeth().is_some() {
            if let Some(first) = self
                .entry_at_psn(index, psn)
                .and_then(|i| self.qps.get(index as usize)?.entry(i).map(|e| e.first_psn))
            {
                self.ack_up_to(now, index, first.wrapping_sub(1));
            }
        }
        let Some(entry_index) = self.expected_response_entry(now, index, psn) else {
            return NOT_PLACED;
        };
        let qp = self.qps.get(index as usize).expect("checked");
        let (pd, mtu) = (qp.pd, u64::from(qp.mtu()));
        let Some(entry) = qp.entry(entry_index) else { return NOT_PLACED };
        if entry.wqe.opcode != WrOpcode::RdmaRead {
            self.counters.rcvd_ghost_response += 1;
            return NOT_PLACED;
        }
        let offset = u64::from(entry.first_psn.distance_to(psn) as u32) * mtu;
        let total = entry.wqe.length();
        let payload = packet.payload();
        let is_last = psn == entry.last_psn();
        let expected_len = if is_last { total - offset.min(total) } else { mtu };
        let opcode = packet.bth().opcode();
        let ends = opcode.info().is_some_and(|i| i.is(Mask::END));
        let status = if payload.len() as u64 != expected_len || ends != is_last {
            Some(WcStatus::BadRespErr)
        } else {
            match &entry.wqe.payload {
                Payload::Sges(sges) => scatter(&self.mem, pd, sges, offset, payload).err(),
                Payload::Inline(_) => Some(WcStatus::LocQpOpErr),
            }
        };
        let qp = self.qps.get_mut(index as usize).expect("checked");
        qp.comp.psn = psn.next();
        qp.comp.retry_left = qp.attr.retry_cnt;
        qp.comp.rnr_retry_left = qp.attr.rnr_retry;
        qp.comp.started_retry = false;
        let Some(entry) = qp.entry_mut(entry_index) else { return NOT_PLACED };
        entry.read_placed = offset + payload.len() as u64;
        if let Some(status) = status {
            entry.state = EntryState::Done(status);
            qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        } else if is_last {
            entry.state = EntryState::Done(WcStatus::Success);
            qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        }
        self.retire(now, index);
        self.after_progress(now, index);
        ResponseVerdict::ReadPlaced
    }

    /// The shadow index of the WQE whose PSN range holds `psn`.
    fn entry_at_psn(&self, index: u32, psn: Psn) -> Option<u32> {
        let qp = self.qps.get(index as usize)?;
        let mut i = qp.sq.consumer;
        while i != qp.fetched {
            let entry = qp.entry(i)?;
            if !entry.psn_assigned {
                return None;
            }
            if psn.in_window(entry.first_psn, entry.npkts.max(1)) {
                return Some(i);
            }
            i = i.wrapping_add(1);
        }
        None
    }

    /// After an ACK made progress: restart or stop the retransmit timer,
    /// and let the requester send more.
    fn after_progress(&mut self, now: Instant, index: u32) {
        self.rearm(now, index);
        self.schedule(index);
    }

    /// Arms the retransmit timer while PSNs are outstanding.
    fn rearm(&mut self, now: Instant, index: u32) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        let outstanding = qp.comp.psn != qp.req.next_psn && qp.state != QpState::Err;
        let at = match (outstanding, qp.ack_timeout_ns()) {
            (true, Some(ns)) => Some(now.plus_nanos(ns)),
            _ => None,
        };
        self.set_timer(index, TimerKind::Retransmit, at);
    }

    /// Spends one transport retry; with none left, fails the oldest WQE with
    /// RETRY_EXC_ERR and returns false.
    fn consume_retry(&mut self, now: Instant, index: u32) -> bool {
        let Some(qp) = self.qps.get_mut(index as usize) else { return false };
        if qp.state == QpState::Err {
            return false;
        }
        if qp.comp.retry_left == 0 {
            self.counters.retry_exceeded_err += 1;
            let qpn = qp.qpn;
            self.step(now, Step::RetriesExhausted { qpn, rnr: false });
            self.fail_oldest(now, index, WcStatus::RetryExcErr);
            return false;
        }
        qp.comp.retry_left -= 1;
        true
    }

    /// A response arrived ahead of the expected PSN: one before it was
    /// lost. Go back once; the responses still in flight behind the lost one
    /// will arrive out of sequence too and must not spend more retries.
    fn go_back_once(&mut self, now: Instant, index: u32) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        if qp.comp.started_retry {
            return;
        }
        let from = qp.comp.psn;
        if self.consume_retry(now, index) {
            self.retry(now, index, from, GoBackCause::ResponseAhead);
            if let Some(qp) = self.qps.get_mut(index as usize) {
                qp.comp.started_retry = true;
            }
        }
    }

    /// The retransmit timer fired.
    pub(crate) fn retransmit_timeout(&mut self, now: Instant, index: u32) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        if qp.comp.psn == qp.req.next_psn || qp.state == QpState::Err {
            return;
        }
        let from = qp.comp.psn;
        if self.consume_retry(now, index) {
            self.retry(now, index, from, GoBackCause::Timeout);
            if let Some(qp) = self.qps.get_mut(index as usize) {
                qp.comp.started_retry = true;
            }
            self.rearm(now, index);
        }
    }

    /// An RNR wait ended: resume sending.
    pub(crate) fn rnr_wait_over(&mut self, now: Instant, index: u32) {
        self.rearm(now, index);
        self.schedule(index);
    }

    /// Go-back-N: the requester resumes at PSN `from`.
    pub(crate) fn retry(&mut self, now: Instant, index: u32, from: Psn, cause: GoBackCause) {
        let Some(start) = self.entry_at_psn(index, from) else { return };
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let Some(entry) = qp.entry(start) else { return };
        let resume_pkts = match entry.wqe.opcode {
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
            return;
        }
        // Every go-back, whatever caused it (rxe's completer_retry_err).
        self.counters.completer_retry_err += 1;
        let qpn = qp.qpn;
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
        self.step(now, Step::GoBack { qpn, from, cause });
        self.schedule(index);
    }

    /// Ends the oldest incomplete WQE with an error status; retiring it
    /// moves the QP to the error state and flushes the rest.
    fn fail_oldest(&mut self, now: Instant, index: u32, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let mut i = qp.sq.consumer;
        while i != qp.fetched {
            if let Some(entry) = qp.entry_mut(i) {
                if !matches!(entry.state, EntryState::Done(_)) {
                    entry.state = EntryState::Done(status);
                    break;
                }
            }
            i = i.wrapping_add(1);
        }
        self.retire(now, index);
    }

    /// Writes completions for finished WQEs at the head of the send queue,
    /// in order, and gives their slots back to the application. An error
    /// completion moves the QP to ERR (RC) or SQE (UC, UD).
    pub(crate) fn retire(&mut self, now: Instant, index: u32) {
        loop {
            let Some(qp) = self.qps.get_mut(index as usize) else { return };
            if qp.sq.consumer == qp.fetched {
                break;
            }
            let consumer = qp.sq.consumer;
            let Some(entry) = qp.entry(consumer) else { break };
            let EntryState::Done(status) = entry.state else { break };
            let cqe = (status != WcStatus::Success || entry.signaled).then(|| {
                let mut cqe =
                    Cqe::new(entry.wqe.wr_id, status, entry.wqe.opcode.completion(), qp.qpn);
                if status == WcStatus::Success {
                    cqe.byte_len = match entry.wqe.opcode {
                        WrOpcode::RdmaRead => entry.wqe.length() as u32,
                        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 8,
                        _ => 0,
                    };
                }
                cqe
            });
            let slot = qp.slot(consumer);
            qp.sq_shadow[slot] = None;
            let host = self.mem.host().clone();
            let _ = qp.sq.consume(host.as_ref(), 1);
            if qp.req.index == consumer {
                // Completed before the requester moved past it (local ops,
                // errors): keep the requester behind the consumer.
                qp.req.index = consumer.wrapping_add(1);
                qp.req.sent_pkts = 0;
            }
            let (send_cq, qp_type, state) = (qp.send_cq, qp.qp_type, qp.state);
            if let Some(cqe) = cqe {
                self.post_cqe(now, send_cq, &cqe, false);
            }
            if status != WcStatus::Success && state != QpState::Err {
                let next = if qp_type == QpType::Rc { QpState::Err } else { QpState::Sqe };
                if let Some(qp) = self.qps.get_mut(index as usize) {
                    qp.state = next;
                }
                if next == QpState::Err {
                    self.enter_error(now, index);
                } else {
                    self.flush_send_queue(now, index);
                }
                return;
            }
        }
        self.sq_drained_check(index);
    }

    pub(crate) fn sq_drained_check(&mut self, index: u32) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        if qp.state == QpState::Sqd && qp.sq.consumer == qp.req.index && qp.attr.en_sqd_async_notify
        {
            let qpn = qp.qpn.value();
            self.push_event(crate::hca::Event::Async {
                event: uroce_device::types::EventType::SqDrained,
                element: qpn,
            });
            if let Some(qp) = self.qps.get_mut(index as usize) {
                qp.attr.en_sqd_async_notify = false;
            }
        }
    }

    /// Completes every send WQE not yet retired with WR_FLUSH_ERR (the QP
    /// is in ERR or SQE), including WQEs posted after the error.
    pub(crate) fn flush_send_queue(&mut self, now: Instant, index: u32) {
        self.fetch_send_wqes(now, index);
        loop {
            let Some(qp) = self.qps.get_mut(index as usize) else { return };
            if qp.sq.consumer == qp.fetched {
                qp.req.index = qp.fetched;
                qp.req.sent_pkts = 0;
                qp.req.rd_atomic_outstanding = 0;
                break;
            }
            let consumer = qp.sq.consumer;
            let (wr_id, opcode) = match qp.entry(consumer) {
                Some(e) => (e.wqe.wr_id, e.wqe.opcode),
                None => break,
            };
            let slot = qp.slot(consumer);
            qp.sq_shadow[slot] = None;
            let host = self.mem.host().clone();
            let _ = qp.sq.consume(host.as_ref(), 1);
            let (cq, qpn) = (qp.send_cq, qp.qpn);
            let cqe = Cqe::new(wr_id, WcStatus::WrFlushErr, opcode.completion(), qpn);
            self.post_cqe(now, cq, &cqe, false);
        }
        self.cancel_timer(index, TimerKind::Retransmit);
        self.cancel_timer(index, TimerKind::Rnr);
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
    match entry.wqe.opcode {
        WrOpcode::RdmaRead => entry.first_psn + (entry.read_placed / u64::from(mtu)) as u32,
        _ => entry.first_psn,
    }
}

/// Writes `data` at byte `offset` of a WQE's SGE list (READ responses),
/// checking LOCAL_WRITE on every SGE.
pub(crate) fn scatter(
    mem: &crate::mr::MemoryTables,
    pd: u32,
    sges: &[uroce_device::wqe::Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), WcStatus> {
    uroce_device::wqe::walk_sges(sges, offset, data.len(), |sge, skip, at, piece| {
        let range = mem
            .check(
                sge.lkey.0,
                pd,
                sge.addr + skip,
                piece as u64,
                Access::LOCAL_WRITE,
                Origin::Local,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        mem.write(&range, &data[at..at + piece]).map_err(|_| WcStatus::LocProtErr)
    })
}
