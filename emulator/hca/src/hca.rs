//! The HCA: tables, the control path, doorbells, and the sans-IO loop that
//! drives the engines.
//!
//! ```text
//!  command() ──▶ tables (PD, MPT/MTT, CQC, QPC, SRQ, AH)
//!  doorbell() ─▶ marks a QP runnable          poll_event() ◀── events
//!  receive() ──▶ responder (requests) / completer (responses)
//!  poll_transmit() ◀── responder queue first, then the requester,
//!                      round-robin over runnable QPs
//!  poll_timeout() / handle_timeout() ◀▶ retransmit, RNR and stall timers
//!  inject_fault() ──▶ device-side faults (see [`crate::fault`])
//! ```

use crate::config::{HcaConfig, FIRST_QPN};
use crate::counters::Counters;
use crate::cq::Arm;
use crate::endpoint::{Endpoint, Transmit};
use crate::handles::{CqIndex, PdIndex, QpIndex, TableIndex};
use crate::mr::MemoryTables;
use crate::qp::{Path, QpContext};
use crate::ring::{ConsumerRing, SCHEDULED_OFFSET};
use crate::tables::Table;
use crate::time::Instant;
use crate::trace::{Step, StepLog};
use core::net::IpAddr;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use uroce_device::command::Gid;
pub use uroce_device::doorbell::{Doorbell, Event};
use uroce_device::mem::HostMemory;
use uroce_device::types::{EventType, Qpn};

mod budget;
mod cm_command;
mod command;
mod completion;
mod qp_command;
mod step;

pub(crate) use step::{CqeWrite, Device, QpStep};

/// A protection domain.
#[derive(Debug, Default)]
struct PdContext {
    users: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct SrqContext {
    /// Protection domain.
    pub pd: PdIndex,
    /// The ring.
    pub ring: ConsumerRing,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Limit event threshold (0 = disarmed).
    pub limit: u32,
    /// QPs attached.
    pub users: u32,
}

/// An address handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AhContext {
    pd: PdIndex,
    path: Path,
}

/// Which per-QP timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// Retransmit timer (requester).
    Retransmit,
    /// End of an RNR wait (requester).
    Rnr,
    /// End of an injected responder stall ([`crate::fault::DeviceFault::StallResponder`]).
    StallEnd,
    /// Look whether an ACK probe is due (requester, ACKs on demand).
    AckProbe,
}

impl TimerKind {
    /// Every kind: what a QP that goes away must stop.
    pub(crate) const ALL: [TimerKind; 4] =
        [TimerKind::Retransmit, TimerKind::Rnr, TimerKind::StallEnd, TimerKind::AckProbe];
}

/// Puts QP `index`, whose context is `qp`, in the transmit schedule
/// `sched` (see [`QpStep::schedule`]).
pub(crate) fn schedule_qp(
    sched: &mut VecDeque<QpIndex>,
    mem: &MemoryTables,
    index: QpIndex,
    qp: &mut QpContext,
) {
    if qp.scheduled {
        return;
    }
    qp.scheduled = true;
    sched.push_back(index);
    raise_scheduled_flag(mem, qp);
}

/// Raises QP `qp`'s send queue's device-scheduled flag: the driver may
/// post without a doorbell until it comes down.
pub(crate) fn raise_scheduled_flag(mem: &MemoryTables, qp: &QpContext) {
    // A fault here (the application freed its ring) is met again, and
    // reported, when the queue is read.
    let _ = mem.host().store_release_u32(qp.sq.desc.base + SCHEDULED_OFFSET, 1);
}

/// Sets QP `qp`'s receive queue's device-scheduled flag (a QP on an SRQ
/// has none): up (1) while the HCA reads the queue whenever a SEND needs a
/// WQE, so a `post_recv` needs no kick; down (0) in the error state, where
/// new WQEs must be flushed and each post kicks (device-interface.md §2.3).
pub(crate) fn set_recv_flag(mem: &MemoryTables, qp: &QpContext, up: bool) {
    if let Some(rq) = &qp.rq {
        // A fault (the application freed its ring) is met again, and
        // reported, when the queue is read.
        let _ = mem.host().store_release_u32(rq.desc.base + SCHEDULED_OFFSET, u32::from(up));
    }
}

/// Armed timers, in firing order: (when, QP, which).
#[derive(Debug, Default)]
pub(crate) struct Timers(BTreeSet<(Instant, QpIndex, TimerKind)>);

impl Timers {
    /// Sets the `kind` timer of QP `index` (whose context is `qp`) to fire
    /// at `at`, or with `None` stops it.
    pub(crate) fn set(
        &mut self,
        index: QpIndex,
        qp: &mut QpContext,
        kind: TimerKind,
        at: Option<Instant>,
    ) {
        let slot = match kind {
            TimerKind::Retransmit => &mut qp.comp.retransmit_at,
            TimerKind::Rnr => &mut qp.comp.rnr_until,
            TimerKind::StallEnd => &mut qp.injected.stalled_until,
            TimerKind::AckProbe => &mut qp.comp.probe_at,
        };
        if let Some(old) = slot.take() {
            self.0.remove(&(old, index, kind));
        }
        *slot = at;
        if let Some(at) = at {
            self.0.insert((at, index, kind));
        }
    }
}

/// The IPv4 identifications of the packets the HCA sends (rxe: the
/// kernel's per-destination counter; uroce: one counter per device).
#[derive(Debug)]
pub(crate) struct Ipv4Ids {
    policy: crate::config::Ipv4IdPolicy,
    last: u16,
}

impl Ipv4Ids {
    /// The next identification.
    pub(crate) fn next(&mut self) -> u16 {
        if self.policy == crate::config::Ipv4IdPolicy::Zero {
            return 0;
        }
        self.last = self.last.wrapping_add(1);
        self.last
    }
}

/// Events kept before the oldest is dropped.
const MAX_EVENTS: usize = 4096;

/// Queues an event, dropping the oldest when [`MAX_EVENTS`] wait; an
/// asynchronous one is recorded in `log` too (at `at`), taken or not.
pub(crate) fn push_event(
    events: &mut VecDeque<Event>,
    log: &mut crate::async_log::AsyncLog,
    at: Instant,
    event: Event,
) {
    if let Event::Async { event, element } = event {
        log.record(at, event, element);
    }
    if events.len() == MAX_EVENTS {
        events.pop_front();
    }
    events.push_back(event);
}

/// The node GUID: the EUI-64 of the link-local GID (rxe derives it from
/// the MAC), or the low 8 bytes of the first GID.
pub(crate) fn node_guid(gids: &[Gid]) -> u64 {
    let g = gids.first().map_or([0; 16], |g| g.0);
    u64::from_be_bytes([g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]])
}

/// The HCA.
pub struct Hca {
    gids: Vec<Gid>,
    pub(crate) addresses: Vec<IpAddr>,
    pds: Table<PdContext, PdIndex>,
    pub(crate) qps: Table<QpContext, QpIndex>,
    /// The device state beside the QP table (what a step reaches).
    pub(crate) dev: Device,
    /// How many times each QP table slot has been used: a slot's next QP
    /// gets a QPN it has not had for a long time (see [`Hca::qpn_of_slot`]).
    qp_slot_generation: Vec<u32>,
    /// QP1 and the CM behind it.
    pub(crate) gsi: crate::gsi::Gsi,
    /// Multicast groups and their QPs.
    pub(crate) mcast: crate::mcast::McastGroups,
    /// The device crashed ([`crate::fault::DeviceFault::Crash`]): it takes
    /// no packet, doorbell or timer and sends nothing.
    pub(crate) crashed: bool,
}

impl Hca {
    /// A new HCA with GID table `gids` (index order; rxe puts the
    /// link-local GID at 0 and the IPv4-mapped one at 1), reaching host
    /// memory through `host`.
    pub fn new(
        config: HcaConfig,
        gids: Vec<Gid>,
        host: Arc<dyn HostMemory>,
    ) -> Result<Hca, crate::config::ConfigError> {
        config.validate()?;
        if gids.is_empty() || gids.len() > 256 {
            return Err(crate::config::ConfigError("gids: between 1 and 256 entries"));
        }
        let addresses = gids.iter().map(|g| g.to_ip()).collect();
        let gsi = crate::gsi::Gsi::new(&config, &gids, node_guid(&gids));
        let mem =
            MemoryTables::new(host, config.max_mr as usize, config.page_shift, config.max_mr_size);
        let mut hca = Hca {
            pds: Table::new(config.max_pd as usize),
            qps: Table::new(config.max_qp as usize),
            qp_slot_generation: vec![0; config.max_qp as usize],
            gsi,
            mcast: crate::mcast::McastGroups::default(),
            crashed: false,
            gids,
            addresses,
            dev: Device {
                cqs: Table::new(config.max_cq as usize),
                srqs: Table::new(config.max_srq as usize),
                ahs: Table::new(config.max_ah as usize),
                sched: VecDeque::new(),
                turn: (QpIndex::default(), 0),
                unacked_psns: 0,
                budget_waiters: VecDeque::new(),
                budget_blocked: false,
                turn_cut_short: false,
                timers: Timers::default(),
                events: VecDeque::new(),
                counters: Counters::default(),
                steps: StepLog::default(),
                ip_ids: Ipv4Ids { policy: config.ipv4_id, last: 0 },
                last_now: Instant::ZERO,
                wqe_slot: Vec::new(),
                source_ports: crate::ports::SourcePorts::default(),
                tally: crate::tally::CompletionTally::default(),
                async_log: crate::async_log::AsyncLog::default(),
                mem,
                config,
            },
        };
        hca.push_event(Event::Async { event: EventType::PortActive, element: 1 });
        Ok(hca)
    }

    /// The latest time any call handed the HCA: what a same-thread driver
    /// (the simulated fabric's application side) uses as "now".
    pub fn now(&self) -> Instant {
        self.dev.last_now
    }

    pub(crate) fn saw(&mut self, now: Instant) {
        self.dev.last_now = self.dev.last_now.max(now);
    }

    /// The configuration.
    pub fn config(&self) -> &HcaConfig {
        &self.dev.config
    }

    /// The counters (`dma_faults` is kept by the memory tables, where
    /// every DMA meets host memory).
    pub fn counters(&self) -> Counters {
        Counters { dma_faults: self.dev.mem.dma_faults(), ..self.dev.counters.clone() }
    }

    /// The memory tables (MPT, MTT), for dumps.
    pub fn memory(&self) -> &MemoryTables {
        &self.dev.mem
    }

    /// A QP's context, for dumps and tests.
    pub fn qp(&self, qpn: Qpn) -> Option<&QpContext> {
        self.qps.get(self.qp_slot(qpn)?)
    }

    /// The table slot of the live QP numbered `qpn`. A QPN names a slot and
    /// that slot's generation: the number of a destroyed QP names nothing,
    /// even once its slot holds a new QP.
    pub(crate) fn qp_slot(&self, qpn: Qpn) -> Option<QpIndex> {
        let offset = qpn.value().checked_sub(FIRST_QPN)?;
        let max_qp = self.dev.config.max_qp;
        // A QP of the first generation needs no division.
        let slot = QpIndex(if offset < max_qp { offset } else { offset % max_qp });
        self.qps.get(slot).filter(|qp| qp.qpn == qpn).map(|_| slot)
    }

    /// The QPN of the next QP in table slot `slot`. QPNs are spread over
    /// the 24-bit space by slot generation (16 + slot + generation times
    /// max_qp), so a new QP does not take the number of one just destroyed:
    /// a delayed or replayed packet of the old connection finds no QP
    /// instead of the new one (rxe allocates QPNs cyclically for the same
    /// reason).
    fn qpn_of_slot(&self, slot: QpIndex) -> Qpn {
        let max_qp = self.dev.config.max_qp;
        let generations = (0x0100_0000 - FIRST_QPN) / max_qp;
        let generation = self.qp_slot_generation[slot.slot()] % generations;
        Qpn::new(FIRST_QPN + slot.value() + generation * max_qp)
    }

    /// Whether some QP may have a packet to send now: a driver that
    /// stopped [`Endpoint::poll_transmit`] early (a burst limit) must come
    /// back without waiting for a timer.
    pub fn has_transmit_ready(&self) -> bool {
        !self.crashed
            && (!self.dev.sched.is_empty()
                || (!self.dev.budget_waiters.is_empty() && self.dev.budget_left())
                || self.gsi_has_transmit())
    }

    /// Whether events are waiting for [`Hca::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.dev.events.is_empty()
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.dev.events.pop_front()
    }

    /// Keeps up to `capacity` of the HCA's decisions for [`Hca::poll_step`]
    /// (0, the default, turns tracing off). See [`crate::trace`].
    pub fn trace_steps(&mut self, capacity: usize) {
        self.dev.steps.set_capacity(capacity);
    }

    /// The oldest decision kept, and when it was made.
    pub fn poll_step(&mut self) -> Option<(Instant, Step)> {
        self.dev.steps.pop()
    }

    /// Decisions dropped because nobody took them in time.
    pub fn steps_lost(&self) -> u64 {
        self.dev.steps.lost
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        push_event(&mut self.dev.events, &mut self.dev.async_log, self.dev.last_now, event);
    }

    /// The GID table.
    pub fn gids(&self) -> &[Gid] {
        &self.gids
    }

    // ---- doorbells and scheduling -------------------------------------

    /// Rings a doorbell.
    pub fn doorbell(&mut self, now: Instant, doorbell: Doorbell) {
        self.saw(now);
        if self.crashed {
            // A dead device reads no queue: what is posted stays there.
            return;
        }
        match doorbell {
            Doorbell::SendQueue(qpn) | Doorbell::RecvQueue(qpn) => {
                let Some(index) = self.qp_slot(qpn) else {
                    return;
                };
                if let Some(mut step) = self.qp_step(index) {
                    step.doorbell(now, matches!(doorbell, Doorbell::SendQueue(_)));
                }
            }
            Doorbell::Srq(_) => {}
            Doorbell::ArmCq { cq, solicited_only } => {
                if let Some(ctx) = self.dev.cqs.get_mut(CqIndex(cq)) {
                    ctx.arm = if solicited_only { Arm::SolicitedOnly } else { Arm::Next };
                }
            }
        }
    }
}

impl Endpoint for Hca {
    fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        self.saw(now);
        if self.crashed {
            return self.drop_packet(now, None, crate::trace::DropReason::Crashed);
        }
        self.receive_packet(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.saw(now);
        if self.crashed {
            return None;
        }
        // QP1's MADs first: rare, and the CM's retries are timed.
        if let Some(transmit) = self.gsi_transmit(now, buf) {
            return Some(transmit);
        }
        self.release_budget_waiters();
        let mut turns = self.dev.sched.len();
        while turns > 0 {
            turns -= 1;
            let index = self.dev.sched.pop_front()?;
            let Some(mut step) = self.qp_step(index) else { continue };
            let sent = if step.dev.turn.0 == index { step.dev.turn.1 } else { 0 };
            if let Some(transmit) = step.transmit(now, buf) {
                // A step never destroys its QP: it keeps its turn for up
                // to `max_burst_packets` packets, then goes to the back.
                let sent = sent + 1;
                if sent < step.dev.config.max_burst_packets {
                    step.dev.sched.push_front(index);
                    step.dev.turn = (index, sent);
                } else {
                    step.dev.sched.push_back(index);
                    step.dev.turn = (index, 0);
                }
                step.dev.counters.sent_pkts += 1;
                // Its requester's word, if no other QP waits (the schedule
                // holds only this one again, pushed above) and no response.
                let nothing_behind = transmit.nothing_behind
                    && step.dev.sched.len() == 1
                    && step.qp.resp.queue.is_empty();
                return Some(Transmit { nothing_behind, ..transmit });
            }
            step.dev.turn = (index, 0);
            if std::mem::take(&mut step.dev.turn_cut_short) {
                // Fetched local work left: after the others, in this same
                // call, which ends with `None` only when nothing is left to
                // do. Each such turn completes WQEs already fetched, and
                // none reads the ring again, so the call stays bounded.
                step.dev.sched.push_back(index);
                turns += 1;
            } else if std::mem::take(&mut step.dev.budget_blocked) {
                // It has a WQE to start: out of turn until the budget has
                // room (its flag stays up: the driver need not ring).
                step.qp.scheduled = false;
                step.wait_for_budget();
            } else {
                step.unschedule(now);
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.crashed {
            return None;
        }
        let qps = self.dev.timers.0.first().map(|&(at, _, _)| at);
        let cm = self.gsi.cm.poll_timeout().map(Instant::from_nanos);
        match (qps, cm) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.saw(now);
        if self.crashed {
            return;
        }
        self.gsi.cm.handle_timeout(now.as_nanos());
        while let Some(&(at, index, kind)) = self.dev.timers.0.first() {
            if at > now {
                break;
            }
            self.dev.timers.0.pop_first();
            let Some(mut step) = self.qp_step(index) else { continue };
            match kind {
                TimerKind::Retransmit => {
                    step.qp.comp.retransmit_at = None;
                    step.retransmit_timeout(now);
                }
                TimerKind::Rnr => {
                    // The RNR wait ended: resume sending.
                    step.qp.comp.rnr_until = None;
                    step.after_progress(now);
                }
                TimerKind::StallEnd => step.stall_ended(),
                TimerKind::AckProbe => {
                    step.qp.comp.probe_at = None;
                    step.ack_probe_due(now);
                }
            }
        }
    }
}
