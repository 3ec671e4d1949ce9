//! Send completions (rxe_comp.c's do_complete, complete_wqe): retiring
//! finished WQEs in order, failing the oldest, flushing the send queue,
//! and the SQ-drained event.

use crate::hca::{QpStep, TimerKind};
use crate::qp::EntryState;
use crate::time::Instant;
use uroce_device::cqe::Cqe;
use uroce_device::types::{QpState, QpType, WcStatus, WrOpcode};

impl QpStep<'_> {
    /// Ends the oldest incomplete WQE with an error status; retiring it
    /// moves the QP to the error state and flushes the rest.
    pub(crate) fn fail_oldest(&mut self, now: Instant, status: WcStatus) {
        let qp = &mut *self.qp;
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
        self.retire(now);
    }

    /// Writes completions for finished WQEs at the head of the send queue,
    /// in order, and gives their slots back to the application. An error
    /// completion moves the QP to ERR (RC) or SQE (UC, UD).
    pub(crate) fn retire(&mut self, now: Instant) {
        // The SQ's consumer index is published once for a run of retired
        // WQEs: before a completion the run writes (an application that
        // sees the CQE sees the slots before it given back) and at its end.
        let mut unpublished = false;
        loop {
            let qp = &mut *self.qp;
            if qp.sq.consumer == qp.fetched {
                break;
            }
            let consumer = qp.sq.consumer;
            let Some(entry) = qp.entry(consumer) else { break };
            let EntryState::Done(status) = entry.state else { break };
            let cqe = (status != WcStatus::Success || entry.signaled).then(|| {
                let mut cqe = Cqe::new(entry.wr_id, status, entry.opcode.completion(), qp.qpn);
                if status == WcStatus::Success {
                    cqe.byte_len = match entry.opcode {
                        WrOpcode::RdmaRead => entry.length() as u32,
                        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 8,
                        _ => 0,
                    };
                }
                cqe
            });
            let slot = qp.slot(consumer);
            qp.sq_shadow[slot].clear();
            qp.sq.advance(1);
            unpublished = true;
            if qp.req.index == consumer {
                // Completed before the requester moved past it (local ops,
                // errors): keep the requester behind the consumer.
                qp.req.index = consumer.wrapping_add(1);
                qp.req.sent_pkts = 0;
            }
            let (send_cq, qp_type, state) = (qp.send_cq, qp.qp_type, qp.state);
            if let Some(cqe) = cqe {
                // An error always has a completion: published before it.
                let _ = qp.sq.publish(self.dev.mem.host().as_ref());
                unpublished = false;
                self.post_cqe(now, send_cq, &cqe, false);
            }
            if status != WcStatus::Success && state != QpState::Err {
                let next = if qp_type == QpType::Rc { QpState::Err } else { QpState::Sqe };
                self.qp.state = next;
                if next == QpState::Err {
                    self.enter_error(now);
                } else {
                    self.flush_send_queue(now);
                }
                return;
            }
        }
        if unpublished {
            let _ = self.qp.sq.publish(self.dev.mem.host().as_ref());
        }
        self.sq_drained_check();
    }

    pub(crate) fn sq_drained_check(&mut self) {
        let qp = &mut *self.qp;
        // Drained: everything sent is retired, and the requester is not
        // rewound into a WQE it sent (a go-back, an ACK probe).
        if qp.state == QpState::Sqd
            && qp.sq.consumer == qp.req.index
            && qp.between_wqes()
            && qp.attr.en_sqd_async_notify
        {
            let qpn = qp.qpn.value();
            qp.attr.en_sqd_async_notify = false;
            self.dev.push_event(crate::hca::Event::Async {
                event: uroce_device::types::EventType::SqDrained,
                element: qpn,
            });
        }
    }

    /// Completes every send WQE not yet retired with WR_FLUSH_ERR (the QP
    /// is in ERR or SQE), including WQEs posted after the error.
    pub(crate) fn flush_send_queue(&mut self, now: Instant) {
        self.fetch_send_wqes(now);
        loop {
            let qp = &mut *self.qp;
            if qp.sq.consumer == qp.fetched {
                qp.req.index = qp.fetched;
                qp.req.sent_pkts = 0;
                qp.req.rd_atomic_outstanding = 0;
                break;
            }
            let consumer = qp.sq.consumer;
            let (wr_id, opcode) = match qp.entry(consumer) {
                Some(e) => (e.wr_id, e.opcode),
                None => break,
            };
            let slot = qp.slot(consumer);
            qp.sq_shadow[slot].clear();
            let _ = qp.sq.consume(self.dev.mem.host().as_ref(), 1);
            let (cq, qpn) = (qp.send_cq, qp.qpn);
            let cqe = Cqe::new(wr_id, WcStatus::WrFlushErr, opcode.completion(), qpn);
            self.post_cqe(now, cq, &cqe, false);
        }
        self.cancel_timer(TimerKind::Retransmit);
        self.cancel_timer(TimerKind::Rnr);
        self.cancel_timer(TimerKind::AckProbe);
    }
}
