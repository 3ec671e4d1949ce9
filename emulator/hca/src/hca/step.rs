//! One engine step's borrows (rxe hands its tasks a `struct rxe_qp *` that
//! reaches the device): the QP's context from the QP table and, disjoint
//! from it, the rest of the device state a step touches. A step looks its
//! QP up once, when it starts; completions, the error state and flushing
//! then work on the context in hand.

use super::{push_event, schedule_qp, AhContext, Hca, Ipv4Ids, SrqContext, TimerKind, Timers};
use crate::config::HcaConfig;
use crate::counters::Counters;
use crate::cq::{CqContext, PostOutcome};
use crate::handles::{AhIndex, CqIndex, QpIndex, SrqIndex};
use crate::mr::MemoryTables;
use crate::qp::QpContext;
use crate::ring::{PRODUCER_OFFSET, SCHEDULED_OFFSET};
use crate::tables::Table;
use crate::time::Instant;
use crate::trace::{Step, StepLog};
use std::collections::VecDeque;
use uroce_device::cqe::Cqe;
use uroce_device::doorbell::Event;
use uroce_device::types::{EventType, QpState};

/// The device state beside the QP table: what a step reaches besides its
/// QP's context. It lies in the HCA as one struct, so that a step borrows
/// it with one reference, apart from the QP table.
pub(crate) struct Device {
    pub(crate) config: HcaConfig,
    pub(crate) mem: MemoryTables,
    pub(crate) cqs: Table<CqContext, CqIndex>,
    pub(crate) srqs: Table<SrqContext, SrqIndex>,
    /// QPs (table indices) that may have packets to send, in turn order.
    pub(crate) sched: VecDeque<QpIndex>,
    /// The QP whose turn it is and the packets it has sent in it (see
    /// `HcaConfig::max_burst_packets`).
    pub(crate) turn: (QpIndex, u32),
    /// The RC requesters' unacknowledged PSNs, all QPs together (each
    /// QP's share is `QpContext::charged_psns`).
    pub(crate) unacked_psns: u32,
    /// QPs that would start a WQE but the device-wide budget
    /// (`HcaConfig::max_device_unacked_psns`) is spent, in order: out of
    /// `sched` (a response they owe schedules them as usual), their send
    /// queue's flag left up, and scheduled again, as many as the budget
    /// has room for, once ACKs free it (`Hca::poll_transmit`).
    pub(crate) budget_waiters: VecDeque<QpIndex>,
    /// Set by a requester that held a WQE back for the device's budget.
    pub(crate) budget_blocked: bool,
    /// Set by a requester that ended its turn with work it can still do
    /// (more local operations than one turn takes): it goes to the back
    /// of `sched` instead of out.
    pub(crate) turn_cut_short: bool,
    /// Armed timers.
    pub(crate) timers: Timers,
    pub(crate) events: VecDeque<Event>,
    pub(crate) counters: Counters,
    /// The decisions kept for the driver (off unless asked for).
    pub(crate) steps: StepLog,
    /// One WQE's bytes as read from a ring (grown to the largest stride
    /// seen, then reused).
    pub(crate) wqe_slot: Vec<u8>,
    pub(crate) ahs: Table<AhContext, AhIndex>,
    /// UDP source ports the runtime cannot send from.
    pub(crate) source_ports: crate::ports::SourcePorts,
    pub(crate) ip_ids: Ipv4Ids,
    /// The latest time the HCA was given.
    pub(crate) last_now: Instant,
    /// The completions written, by status ([`Hca::completion_tally`]).
    pub(crate) tally: crate::tally::CompletionTally,
    /// The asynchronous events raised ([`Hca::async_log`]).
    pub(crate) async_log: crate::async_log::AsyncLog,
}

/// The QP a step works on, with the device state it needs.
pub(crate) struct QpStep<'a> {
    pub(crate) index: QpIndex,
    pub(crate) qp: &'a mut QpContext,
    pub(crate) dev: &'a mut Device,
}

/// What writing a CQE came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum CqeWrite {
    /// Written (with its event, if one was due).
    Written,
    /// The CQ overflowed: CQ_ERR is raised, the QP that wrote goes fatal.
    Overrun,
}

impl Hca {
    /// QP `index` and the rest of the device, borrowed apart for one step.
    pub(crate) fn qp_step(&mut self, index: QpIndex) -> Option<QpStep<'_>> {
        let qp = self.qps.get_mut(index)?;
        Some(QpStep { index, qp, dev: &mut self.dev })
    }
}

impl Device {
    /// Records a decision (when tracing is on).
    pub(crate) fn step(&mut self, now: Instant, step: Step) {
        self.steps.record(now, step);
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        push_event(&mut self.events, &mut self.async_log, self.last_now, event);
    }

    /// Drops a received packet: its counter, and the step.
    pub(crate) fn drop_packet(
        &mut self,
        now: Instant,
        qpn: Option<uroce_device::types::Qpn>,
        reason: crate::trace::DropReason,
    ) {
        crate::rx::count_drop(&mut self.counters, &mut self.steps, now, qpn, reason);
    }

    /// Writes a CQE to CQ `cq`, raising the events it calls for. An
    /// overrun raises CQ_ERR; what it does to the QP is the caller's.
    pub(crate) fn post_cqe(
        &mut self,
        now: Instant,
        cq: CqIndex,
        cqe: &Cqe,
        solicited: bool,
    ) -> CqeWrite {
        let (qpn, wr_id, status, opcode) = (cqe.qp_num, cqe.wr_id, cqe.status, cqe.opcode);
        if self.steps.is_on() {
            self.step(now, Step::Completion { qpn, cq: cq.value(), wr_id, status, opcode });
        }
        self.tally.count(now, qpn, wr_id, status);
        let outcome = match self.cqs.get_mut(cq) {
            Some(ctx) => ctx.post(self.mem.host().as_ref(), cqe, solicited),
            None => PostOutcome::Overrun,
        };
        match outcome {
            PostOutcome::Written { notify: true } => {
                self.push_event(Event::Completion { cq: cq.value() });
                CqeWrite::Written
            }
            PostOutcome::Written { notify: false } => CqeWrite::Written,
            PostOutcome::Overrun => {
                self.counters.cq_overrun += 1;
                self.push_event(Event::Async { event: EventType::CqErr, element: cq.value() });
                CqeWrite::Overrun
            }
        }
    }
}

impl QpStep<'_> {
    /// Records a decision (when tracing is on).
    pub(crate) fn step(&mut self, now: Instant, step: Step) {
        self.dev.step(now, step);
    }

    /// Sets or (with `None`) stops one of the QP's timers.
    pub(crate) fn set_timer(&mut self, kind: TimerKind, at: Option<Instant>) {
        self.dev.timers.set(self.index, self.qp, kind, at);
    }

    pub(crate) fn cancel_timer(&mut self, kind: TimerKind) {
        self.set_timer(kind, None);
    }

    /// Puts the QP in the transmit schedule, and raises its send queue's
    /// device-scheduled flag: until it comes down the driver may skip the
    /// kick after a post, since the HCA will look at the queue anyway.
    pub(crate) fn schedule(&mut self) {
        schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, self.qp);
    }
}

impl QpStep<'_> {
    /// A doorbell for this QP's send queue (`send_queue`) or receive queue.
    pub(crate) fn doorbell(&mut self, now: Instant, send_queue: bool) {
        if send_queue && self.waits_at_doorbell() {
            return;
        }
        match self.qp.state {
            QpState::Err => self.flush(now),
            // SQE: sends flush, receives go on.
            QpState::Sqe if send_queue => self.flush_send_queue(now),
            _ => self.schedule(),
        }
    }

    /// Takes a QP with nothing to send out of the schedule and lowers the
    /// flag. A post published while the flag was still up was not kicked:
    /// after the fence the producer index is read again, and a post the
    /// HCA has not seen this way is taken as its doorbell would have been
    /// (the store-load pattern of `uroce_device::ring`).
    pub(crate) fn unschedule(&mut self, now: Instant) {
        // Borrowed, not cloned: an `Arc` clone is two atomic operations on
        // every send's path.
        let host = self.dev.mem.host().as_ref();
        let qp = &mut *self.qp;
        qp.scheduled = false;
        let base = qp.sq.desc.base;
        let _ = host.store_release_u32(base + SCHEDULED_OFFSET, 0);
        host.fence_seq_cst();
        let Ok(producer) = host.load_acquire_u32(base + PRODUCER_OFFSET) else { return };
        if producer != qp.sq_doorbell_seen {
            qp.sq_doorbell_seen = producer;
            // In RTS, a requester that has read every WQE up to this
            // index has them all in hand (they are sent, or wait for
            // something that schedules the QP again): no doorbell is owed.
            let all_read = qp.state == QpState::Rts && producer == qp.sq.producer_seen;
            if !all_read {
                self.doorbell(now, true);
            }
        }
    }
}
