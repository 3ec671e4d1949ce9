//! Completions and the error state: writing CQEs (and the events they
//! raise), QP_FATAL, and flushing a QP's queues once it is in error.

use super::{CqeWrite, QpStep, TimerKind};
use crate::handles::CqIndex;
use crate::time::Instant;
use uroce_device::cqe::Cqe;
use uroce_device::doorbell::Event;
use uroce_device::types::{EventType, QpState, WcStatus};

impl QpStep<'_> {
    /// Writes a CQE of this QP to CQ `cq`, raising the events it calls
    /// for. An overrun raises CQ_ERR and moves the QP to the error state.
    pub(crate) fn post_cqe(&mut self, now: Instant, cq: CqIndex, cqe: &Cqe, solicited: bool) {
        let written = self.dev.post_cqe(now, cq, cqe, solicited);
        if written == CqeWrite::Overrun && self.qp.state != QpState::Err {
            self.fatal(now);
        }
    }

    /// The QP hit an error it cannot report through a completion: QP_FATAL.
    pub(crate) fn fatal(&mut self, now: Instant) {
        let qpn = self.qp.qpn.value();
        self.qp.state = QpState::Err;
        self.dev.push_event(Event::Async { event: EventType::QpFatal, element: qpn });
        self.enter_error(now);
    }

    /// The QP entered the error state: stop its timers and flush its queues.
    pub(crate) fn enter_error(&mut self, now: Instant) {
        self.cancel_timer(TimerKind::Retransmit);
        self.cancel_timer(TimerKind::Rnr);
        self.cancel_timer(TimerKind::AckProbe);
        let qp = &mut *self.qp;
        // Nothing more is answered, except a NAK that explains the error to
        // the peer.
        qp.resp.queue.retain(|r| {
            matches!(
                r,
                crate::qp::Response::Ack { syndrome: uroce_wire::aeth::Syndrome::Nak(_), .. }
            )
        });
        qp.resp.msg = None;
        if qp.srq.is_some() {
            let qpn = qp.qpn.value();
            self.dev.push_event(Event::Async { event: EventType::QpLastWqeReached, element: qpn });
        }
        self.flush(now);
    }

    /// Completes every outstanding and newly posted WQE of a QP in the
    /// error state with WR_FLUSH_ERR (send queue, then receive queue).
    pub(crate) fn flush(&mut self, now: Instant) {
        self.flush_send_queue(now);
        self.flush_recv_queue(now);
    }

    fn flush_recv_queue(&mut self, now: Instant) {
        let (qpn, cq) = (self.qp.qpn, self.qp.recv_cq);
        let Some(mut rq) = self.qp.rq else { return };
        let host = self.dev.mem.host().clone();
        // From now on every post kicks: the flag comes down, then (after
        // the fence) the producer index is read, so a post the kick of
        // which was skipped is flushed here (device-interface.md §2.3).
        super::set_recv_flag(&self.dev.mem, self.qp, false);
        host.fence_seq_cst();
        if rq.refresh(host.as_ref()).is_err() {
            // A bogus producer index: nothing can be trusted in this ring.
            return;
        }
        self.dev.wqe_slot.clear();
        self.dev.wqe_slot.resize(rq.desc.stride as usize, 0);
        while rq.available() > 0 {
            // A WQE that decodes has its wr_id where one that does not is
            // looked for: the first 8 bytes of the slot.
            let wr_id = match rq.read_entry(host.as_ref(), rq.consumer, &mut self.dev.wqe_slot) {
                Ok(()) => uroce_device::wqe::slot_wr_id(&self.dev.wqe_slot),
                Err(_) => break,
            };
            if rq.consume(host.as_ref(), 1).is_err() {
                break;
            }
            let cqe =
                Cqe::new(wr_id, WcStatus::WrFlushErr, uroce_device::types::WcOpcode::Recv, qpn);
            self.post_cqe(now, cq, &cqe, true);
        }
        self.qp.rq = Some(rq);
    }
}
