//! The responder (rxe_resp.c): executes incoming requests and answers
//! them.
//!
//! For each request: check the PSN (RC: ahead → one PSN sequence NAK per
//! gap; behind → a duplicate; UC: resynchronise on the next FIRST/ONLY),
//! check the opcode sequence, find a receive WQE for a SEND (none: RNR NAK
//! on RC, drop on UC/UD), check the R_Key for WRITE/READ/atomics, execute,
//! then owe an ACK when AckReq is set. Duplicates are never executed
//! twice: a SEND or WRITE is acknowledged again, a READ is read again from
//! memory, an atomic is answered from its saved result.
//!
//! What is owed goes into one queue per QP, in PSN order, so an ACK never
//! overtakes the READ responses before it; consecutive ACKs coalesce.

use crate::counters::Counters;
use crate::hca::{schedule_qp, QpStep};
use crate::mr::AccessError;
use crate::qp::{Responder, Response};
use crate::time::Instant;
use crate::trace::{RequestVerdict, Step};
use uroce_device::types::{QpState, QpType};
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::frame::RoceDatagram;
use uroce_wire::opcode::OpcodeInfo;
use uroce_wire::{Mask, Psn};

mod execute;
mod recv_wqe;
mod reply;

/// How the responder must answer a request it cannot execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// RNR NAK: no receive WQE yet.
    NotReady,
    /// NAK invalid request, QP to error.
    InvalidRequest,
    /// NAK remote access error, QP to error.
    AccessError,
    /// NAK remote operational error, QP to error.
    OperationalError,
    /// Drop silently (UC/UD, or an unusable duplicate).
    Drop,
}

impl QpStep<'_> {
    /// Takes a request packet.
    pub(crate) fn responder_receive(
        &mut self,
        now: Instant,
        frame: &RoceDatagram<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let qp = &*self.qp;
        let qp_type = qp.qp_type;
        let psn = packet.bth().psn();
        if qp_type == QpType::Ud {
            self.receive_ud(now, frame, packet);
            return;
        }
        match self.check_psn(psn, packet.info()) {
            PsnCheck::InSequence => {}
            PsnCheck::Stop(verdict) => return self.request_step(now, packet, verdict),
            PsnCheck::Duplicate => {
                self.request_step(now, packet, RequestVerdict::Duplicate);
                return self.duplicate(now, psn, packet);
            }
        }
        // The step goes first: what executing it completes or raises
        // follows it.
        let verdict_at = self.dev.steps.recorded();
        let result = self.execute(now, frame, packet);
        let verdict = match result {
            Ok(()) => RequestVerdict::Executed,
            Err(Refusal::Drop) => RequestVerdict::Dropped,
            Err(refusal) if qp_type == QpType::Uc => {
                let _ = refusal;
                RequestVerdict::Dropped
            }
            Err(refusal) => RequestVerdict::Refused(self.refusal_syndrome(refusal)),
        };
        self.request_step_at(verdict_at, now, packet, verdict);
        if let Err(refusal) = result {
            if refusal != Refusal::Drop {
                self.refuse(now, psn, refusal, qp_type);
            }
        }
    }

    /// rxe's check_psn, on the QP's context borrowed once. RC: a request
    /// ahead of the expected PSN draws one PSN sequence NAK per gap, one
    /// behind it is a duplicate. UC resynchronises on every FIRST/ONLY: a
    /// message that lost a packet is dropped whole, silently, and counted
    /// once.
    fn check_psn(&mut self, psn: Psn, info: &OpcodeInfo) -> PsnCheck {
        let qp = &mut *self.qp;
        if qp.qp_type == QpType::Uc {
            return check_uc_psn(&mut self.dev.counters, &mut qp.resp, psn, info);
        }
        let epsn = qp.resp.epsn;
        if psn == epsn {
            return PsnCheck::InSequence;
        }
        if !psn.is_after(epsn) {
            self.dev.counters.duplicate_request += 1;
            return PsnCheck::Duplicate;
        }
        let nak = !qp.resp.nak_sent;
        if nak {
            // Counted once per gap, as rxe does.
            self.dev.counters.out_of_seq_request += 1;
            qp.resp.nak_sent = true;
            let msn = qp.resp.msn;
            let syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
            if qp.resp.owe(Response::Ack { psn: epsn, syndrome, msn }) {
                schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
            }
            self.dev.counters.send_nak += 1;
        }
        PsnCheck::Stop(RequestVerdict::OutOfSequence { expected: epsn, nak })
    }

    /// The syndrome `refuse` answers `refusal` with.
    fn refusal_syndrome(&self, refusal: Refusal) -> Syndrome {
        let timer_code = self.qp.attr.min_rnr_timer;
        match refusal {
            Refusal::NotReady => Syndrome::RnrNak { timer_code },
            Refusal::InvalidRequest | Refusal::Drop => Syndrome::Nak(NakCode::InvalidRequest),
            Refusal::AccessError => Syndrome::Nak(NakCode::RemoteAccessError),
            Refusal::OperationalError => Syndrome::Nak(NakCode::RemoteOperationalError),
        }
    }

    /// Records what the responder made of `packet`.
    fn request_step(
        &mut self,
        now: Instant,
        packet: &uroce_wire::roce::Packet<&[u8]>,
        verdict: RequestVerdict,
    ) {
        let at = self.dev.steps.recorded();
        self.request_step_at(at, now, packet, verdict);
    }

    /// Records what the responder made of `packet`, before the steps taken
    /// since `at` (the completions and NAKs it caused).
    fn request_step_at(
        &mut self,
        at: u64,
        now: Instant,
        packet: &uroce_wire::roce::Packet<&[u8]>,
        verdict: RequestVerdict,
    ) {
        if !self.dev.steps.is_on() {
            // Nothing to read out of the packet for a log that is off.
            return;
        }
        let qp = &*self.qp;
        let bth = packet.bth();
        let step = Step::Request { qpn: qp.qpn, psn: bth.psn(), opcode: bth.opcode(), verdict };
        self.dev.steps.insert(at, now, step);
    }

    /// Answers a request the responder will not execute.
    fn refuse(&mut self, now: Instant, psn: Psn, refusal: Refusal, qp_type: QpType) {
        let qp = &mut *self.qp;
        if qp_type == QpType::Uc {
            // UC never NAKs: drop the rest of the message.
            qp.resp.drop_msg = true;
            qp.resp.msg = None;
            return;
        }
        let msn = qp.resp.msn;
        let syndrome = match refusal {
            Refusal::NotReady => {
                self.dev.counters.send_rnr_err += 1;
                Syndrome::RnrNak { timer_code: qp.attr.min_rnr_timer }
            }
            Refusal::InvalidRequest => Syndrome::Nak(NakCode::InvalidRequest),
            Refusal::AccessError => Syndrome::Nak(NakCode::RemoteAccessError),
            Refusal::OperationalError => Syndrome::Nak(NakCode::RemoteOperationalError),
            Refusal::Drop => return,
        };
        if refusal == Refusal::NotReady {
            // The packets behind this one are out of sequence now; they
            // must not draw a PSN sequence NAK on top of the RNR NAK.
            qp.resp.nak_sent = true;
            if qp.resp.owe(Response::Ack { psn, syndrome, msn }) {
                schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
            }
            return;
        }
        self.dev.counters.send_nak += 1;
        // A class C error: NAK, then the QP goes to the error state (the
        // queue keeps only the NAK).
        qp.resp.queue.clear();
        qp.resp.queue.push_back(Response::Ack { psn, syndrome, msn });
        qp.state = QpState::Err;
        let qpn = qp.qpn.value();
        let event = match refusal {
            Refusal::AccessError => uroce_device::types::EventType::QpAccessErr,
            Refusal::InvalidRequest => uroce_device::types::EventType::QpReqErr,
            _ => uroce_device::types::EventType::QpFatal,
        };
        self.dev.push_event(crate::hca::Event::Async { event, element: qpn });
        self.enter_error(now);
        self.schedule();
    }
}

fn access_refusal(e: AccessError) -> Refusal {
    match e {
        AccessError::Fault(_) => Refusal::OperationalError,
        _ => Refusal::AccessError,
    }
}

/// What the PSN check made of a request.
enum PsnCheck {
    /// In sequence: execute it.
    InSequence,
    /// Not executed, with this verdict.
    Stop(RequestVerdict),
    /// Behind the expected PSN: answered from the responder's state.
    Duplicate,
}

/// The UC PSN check: a FIRST/ONLY always starts a message (a message cut
/// short by loss is abandoned, its receive WQE staying at the head of the
/// RQ for the next one); a packet after a gap drops the rest of its
/// message.
fn check_uc_psn(
    counters: &mut Counters,
    resp: &mut Responder,
    psn: Psn,
    info: &OpcodeInfo,
) -> PsnCheck {
    let epsn = resp.epsn;
    if info.is(Mask::START) {
        if psn != epsn || resp.msg.is_some() {
            counters.out_of_seq_request += 1;
        }
        resp.msg = None;
        resp.drop_msg = false;
        resp.epsn = psn;
        PsnCheck::InSequence
    } else if resp.drop_msg {
        resp.epsn = psn.next();
        PsnCheck::Stop(RequestVerdict::Dropped)
    } else if psn != epsn {
        counters.out_of_seq_request += 1;
        resp.drop_msg = true;
        resp.msg = None;
        resp.epsn = psn.next();
        PsnCheck::Stop(RequestVerdict::Dropped)
    } else {
        PsnCheck::InSequence
    }
}
