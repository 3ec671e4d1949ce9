//! Completions and the error state: writing CQEs (and the events they
//! raise), QP_FATAL, and flushing a QP's queues once it is in error.

use super::{Hca, TimerKind};
use crate::cq::PostOutcome;
use crate::handles::{CqIndex, QpIndex};
use crate::time::Instant;
use crate::trace::Step;
use uroce_device::cqe::Cqe;
use uroce_device::doorbell::Event;
use uroce_device::types::{EventType, QpState, WcStatus};

impl Hca {
    /// Writes a CQE to CQ `cq`, raising the events it calls for. An
    /// overrun raises CQ_ERR and moves the QP to the error state.
    pub(crate) fn post_cqe(&mut self, now: Instant, cq: CqIndex, cqe: &Cqe, solicited: bool) {
        let (qpn, wr_id, status, opcode) = (cqe.qp_num, cqe.wr_id, cqe.status, cqe.opcode);
        self.step(now, Step::Completion { qpn, cq: cq.value(), wr_id, status, opcode });
        let outcome = match self.cqs.get_mut(cq) {
            Some(ctx) => ctx.post(self.mem.host().as_ref(), cqe, solicited),
            None => PostOutcome::Overrun,
        };
        match outcome {
            PostOutcome::Written { notify: true } => {
                self.push_event(Event::Completion { cq: cq.value() })
            }
            PostOutcome::Written { notify: false } => {}
            PostOutcome::Overrun => {
                self.counters.cq_overrun += 1;
                self.push_event(Event::Async { event: EventType::CqErr, element: cq.value() });
                if let Some(index) = self.qp_slot(cqe.qp_num) {
                    let is_live = self.qps.get(index).is_some_and(|q| q.state != QpState::Err);
                    if is_live {
                        self.fatal(now, index);
                    }
                }
            }
        }
    }

    /// A QP hit an error it cannot report through a completion: QP_FATAL.
    pub(crate) fn fatal(&mut self, now: Instant, index: QpIndex) {
        let Some(qp) = self.qps.get_mut(index) else { return };
        let qpn = qp.qpn.value();
        qp.state = QpState::Err;
        self.push_event(Event::Async { event: EventType::QpFatal, element: qpn });
        self.enter_error(now, index);
    }

    /// The QP entered the error state: stop its timers and flush its queues.
    pub(crate) fn enter_error(&mut self, now: Instant, index: QpIndex) {
        self.cancel_timer(index, TimerKind::Retransmit);
        self.cancel_timer(index, TimerKind::Rnr);
        if let Some(qp) = self.qps.get_mut(index) {
            // Nothing more is answered, except a NAK that explains the
            // error to the peer.
            qp.resp.queue.retain(|r| {
                matches!(
                    r,
                    crate::qp::Response::Ack { syndrome: uroce_wire::aeth::Syndrome::Nak(_), .. }
                )
            });
            qp.resp.msg = None;
            if qp.srq.is_some() {
                let qpn = qp.qpn.value();
                self.push_event(Event::Async { event: EventType::QpLastWqeReached, element: qpn });
            }
        }
        self.flush(now, index);
    }

    /// Completes every outstanding and newly posted WQE of a QP in the
    /// error state with WR_FLUSH_ERR (send queue, then receive queue).
    pub(crate) fn flush(&mut self, now: Instant, index: QpIndex) {
        self.flush_send_queue(now, index);
        self.flush_recv_queue(now, index);
    }

    fn flush_recv_queue(&mut self, now: Instant, index: QpIndex) {
        let Some(qp) = self.qps.get_mut(index) else { return };
        let (qpn, cq) = (qp.qpn, qp.recv_cq);
        let Some(mut rq) = qp.rq else { return };
        let host = self.mem.host().clone();
        if rq.refresh(host.as_ref()).is_err() {
            // A bogus producer index: nothing can be trusted in this ring.
            return;
        }
        self.wqe_slot.clear();
        self.wqe_slot.resize(rq.desc.stride as usize, 0);
        while rq.available() > 0 {
            // A WQE that decodes has its wr_id where one that does not is
            // looked for: the first 8 bytes of the slot.
            let wr_id = match rq.read_entry(host.as_ref(), rq.consumer, &mut self.wqe_slot) {
                Ok(()) => uroce_device::wqe::slot_wr_id(&self.wqe_slot),
                Err(_) => break,
            };
            if rq.consume(host.as_ref(), 1).is_err() {
                break;
            }
            let cqe =
                Cqe::new(wr_id, WcStatus::WrFlushErr, uroce_device::types::WcOpcode::Recv, qpn);
            self.post_cqe(now, cq, &cqe, true);
        }
        if let Some(qp) = self.qps.get_mut(index) {
            qp.rq = Some(rq);
        }
    }
}
