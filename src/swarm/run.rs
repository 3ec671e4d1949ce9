//! The run's state and its driver: what the application knows of every
//! node, QP, message and window, the faulty phase that posts the workload
//! ([`Sim::workload`]), and the report. The other parts of a run live
//! beside it: [`super::world`] builds nodes and connections,
//! [`super::workload`] posts, [`super::checker`] checks completions and
//! the final state against the model, [`super::liveness`] heals the
//! fabric and drains every WR.

use super::adversary::Adversary;
use super::arena::{Arena, Layout};
use super::disrupt::Disruption;
use super::model::{Counter, Window};
use super::plan::Plan;
use super::workload::{Knobs, Op};
use super::world::Member;
use super::{Log, Stats, SwarmReport};
use crate::world::{self, Stop};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;
use uroce_device::mem::SimMemory;
use uroce_hca::trace::Step;
use uroce_hca::{Instant, SharedHca};
use uroce_sim::{Fabric, NodeId, Probability, SimRng};
use uroce_verbs::{Ah, Context, Cq, Mr, Pd, Qp, QpCap, QpType, Qpn};

/// Q_Key of every UD QP.
pub(super) const QKEY: u32 = 0x1111_2222;
/// A Q_Key no QP has: datagrams sent with it must be dropped.
pub(super) const BAD_QKEY: u32 = 0x3333_4444;
/// Entries per CQ; QPs share a CQ while their queues fit in it.
pub(super) const CQ_ENTRIES: u32 = 4096;
/// Bytes of each node's READ source region (read-only data).
pub(super) const SRC_LEN: u64 = 256 * 1024;
/// Bytes of the region each RC/UC QP WRITEs into on its peer.
pub(super) const WINDOW_LEN: u64 = 192 * 1024;
/// Bytes of each QP's send-side buffer ring.
pub(super) const LOCAL_ARENA: u64 = 1 << 20;
/// Bytes of each QP's receive buffer ring.
pub(super) const RECV_ARENA: u64 = 1 << 20;
/// The largest message.
pub(super) const MAX_MSG: u64 = 65_536;
/// FETCH_ADD counters per node.
pub(super) const FA_PER_NODE: usize = 4;
/// COMPARE_SWAP words per node.
pub(super) const CAS_PER_NODE: usize = 4;
/// Bytes between atomic words (the bytes between must never change).
pub(super) const COUNTER_STRIDE: u64 = 64;
/// Virtual time the liveness phase allows for every WR to finish.
pub(super) const LIVENESS_NS: u64 = 2_000_000_000;
/// With the adversary on, the chance (ppm) that the application closes a
/// healthy RC connection at one turn of the workload.
pub(super) const CLOSE_PPM: u32 = 10_000;
/// Virtual time the faulty phase may last at most.
pub(super) const FAULT_PHASE_MAX_NS: u64 = 600_000_000_000;

pub(super) struct Node {
    pub(super) hca: SharedHca,
    pub(super) ctx: Context,
    pub(super) pd: Pd,
    pub(super) ip: Ipv4Addr,
    pub(super) mem: Arc<SimMemory>,
    /// CQs and the queue depth attached to each.
    pub(super) cqs: Vec<(Cq, u32)>,
    /// READ sources: never written by anyone.
    pub(super) src: Mr,
    pub(super) src_data: Vec<u8>,
    /// FETCH_ADD and COMPARE_SWAP words, with filler between them.
    pub(super) atomics: Mr,
    pub(super) atomics_initial: Vec<u8>,
    /// Address handles by destination node.
    pub(super) ahs: Vec<Option<Ah>>,
    /// QPN to side.
    pub(super) sides: BTreeMap<u32, usize>,
}

/// What the model must do when a send WR retires.
pub(super) enum SendKind {
    Plain,
    /// An RC WRITE into a window.
    Write {
        window: usize,
        tag: u64,
    },
    /// A READ of `len` bytes from a node's source region.
    Read {
        layout: Layout,
        src_node: usize,
        src_off: u64,
    },
    /// An atomic whose original value lands in `layout`.
    Atomic {
        layout: Layout,
        cas: bool,
        counter: usize,
        op: usize,
    },
}

pub(super) struct SendRec {
    pub(super) wr_id: u64,
    pub(super) op: Op,
    pub(super) signaled: bool,
    pub(super) len: u64,
    /// Holds a buffer in the side's send ring.
    pub(super) alloc: bool,
    pub(super) kind: SendKind,
}

/// What a receive WR must end up holding.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect {
    /// RC: exactly this message.
    Msg(usize),
    /// UC, UD: some message sent to this QP.
    Any,
}

pub(super) struct RecvRec {
    pub(super) wr_id: u64,
    pub(super) layout: Layout,
    pub(super) expect: Expect,
}

/// A receive the application will post once `not_before` has come.
pub(super) struct RecvNeed {
    pub(super) capacity: u64,
    pub(super) expect: Expect,
    pub(super) not_before: Instant,
}

/// A message that consumes a receive WR (SEND, SEND with immediate,
/// WRITE with immediate).
pub(super) struct Msg {
    pub(super) dest: usize,
    pub(super) write_imm: bool,
    pub(super) len: u32,
    pub(super) imm: Option<u32>,
    /// The payload, kept until an RC receive has checked it.
    pub(super) data: Option<Rc<Vec<u8>>>,
    /// UD only: sent with the right Q_Key.
    pub(super) deliverable: bool,
    pub(super) deliveries: u32,
    /// UC and UD: sent to a paused node, whose receive may come too late.
    pub(super) may_lose: bool,
}

/// (source side, WRITE with immediate, length, immediate, data hash).
pub(super) type MsgKey = (usize, bool, u32, Option<u32>, u64);

/// One QP and the application's view of it.
pub(super) struct Side {
    pub(super) node: usize,
    pub(super) conn: usize,
    pub(super) ty: QpType,
    /// `None` once destroyed (an RC connection lost or closed, and replaced).
    pub(super) qp: Option<Qp>,
    pub(super) qpn: Qpn,
    pub(super) peer: usize,
    pub(super) cap: QpCap,
    pub(super) sig_all: bool,
    pub(super) send_cq: usize,
    pub(super) recv_cq: usize,
    pub(super) local: Arena,
    pub(super) recv: Arena,
    /// The window this side WRITEs into (RC, UC).
    pub(super) window: Option<usize>,
    /// Largest message this side sends.
    pub(super) max_msg: u64,
    /// Receives this side can hold at once (UC/UD reservation).
    pub(super) recv_slots: usize,
    /// Receives reserved by WRs planned but not yet committed.
    pub(super) reserved: usize,
    pub(super) next_seq: u64,
    pub(super) next_recv: u64,
    pub(super) sq: VecDeque<SendRec>,
    pub(super) rq: VecDeque<RecvRec>,
    pub(super) pending: VecDeque<RecvNeed>,
    /// A send WR failed: every later one flushes.
    pub(super) sq_failed: bool,
    /// A receive was flushed.
    pub(super) recv_flushed: bool,
    /// The application moved the QP to the error state.
    pub(super) torn_down: bool,
    /// COMPARE_SWAP: the value this side last saw in each word of its peer.
    pub(super) cas_seen: Vec<u64>,
    /// UC/UD: the messages that may arrive here.
    pub(super) catalog: BTreeMap<MsgKey, Vec<usize>>,
}

impl Side {
    pub(super) fn qp(&self) -> &Qp {
        self.qp.as_ref().expect("a QP not destroyed")
    }

    pub(super) fn dead(&self) -> bool {
        self.sq_failed || self.recv_flushed || self.torn_down
    }
}

/// A pair of QPs.
pub(super) struct Conn {
    pub(super) sides: (usize, usize),
    /// An RC QP of the pair failed; the pair was torn down.
    pub(super) lost: bool,
    /// A new pair replaced it.
    pub(super) replaced: bool,
}

pub(super) struct WindowSlot {
    pub(super) node: usize,
    pub(super) mr: Mr,
    pub(super) model: Window,
}

pub(super) struct Sim {
    pub(super) plan: Plan,
    pub(super) fabric: Fabric<Member>,
    /// The adversary's node, when it runs.
    pub(super) adversary: Option<NodeId>,
    pub(super) rng: SimRng,
    pub(super) knobs: Knobs,
    pub(super) nodes: Vec<Node>,
    pub(super) sides: Vec<Side>,
    pub(super) ud_sides: Vec<usize>,
    pub(super) conns: Vec<Conn>,
    pub(super) windows: Vec<WindowSlot>,
    pub(super) fa: Vec<Counter>,
    pub(super) cas: Vec<Counter>,
    pub(super) next_swap: u64,
    pub(super) msgs: Vec<Msg>,
    pub(super) stats: Stats,
    pub(super) log: Log,
    pub(super) healed_at: Instant,
    pub(super) done_at: Option<Instant>,
    /// Disruptions not started yet.
    pub(super) disruptions: VecDeque<Disruption>,
    /// Until when each node's application is paused.
    pub(super) paused_until: Vec<Instant>,
    /// Node pairs (lower first) an outage or a partition ever cut.
    pub(super) cut_paths: BTreeSet<(usize, usize)>,
    /// Every HCA's decisions, in time order, when the run is traced.
    pub(super) steps: Option<Steps>,
}

/// The HCAs' decisions of a traced run.
#[derive(Debug, Clone, Default)]
pub struct Steps {
    /// (when, node, decision), oldest first; at most [`MAX_TRACED_STEPS`].
    pub kept: VecDeque<(Instant, usize, Step)>,
    /// Decisions dropped (the oldest, past the bound, or lost in an HCA).
    pub lost: u64,
}

/// The most decisions a traced run keeps (the newest).
pub const MAX_TRACED_STEPS: usize = 1 << 20;
/// Decisions each HCA keeps between two collections.
const HCA_TRACE_CAPACITY: usize = 1 << 16;

pub(super) fn pick<T: Copy>(rng: &mut SimRng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

pub(super) fn percent(p: u32) -> Probability {
    Probability::from_percent(p)
}

impl Sim {
    pub(super) fn now(&self) -> Instant {
        self.fabric.now()
    }

    pub(super) fn name(&self, s: usize) -> String {
        let side = &self.sides[s];
        format!("side{s} ({:?} node{} qpn {})", side.ty, side.node, side.qpn.value())
    }

    /// Posts the workload with faults on, until every operation is posted.
    pub(super) fn workload(&mut self) {
        let deadline = Instant::from_nanos(FAULT_PHASE_MAX_NS);
        let max_iterations = 5_000_000 + 500 * self.plan.ops;
        let mut extra_until: Option<Instant> = None;
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            self.disrupt();
            self.poll_all();
            self.replace_lost();
            if self.adversary.is_some()
                && self.stats.posted < self.plan.ops
                && self.rng.chance(Probability::from_ppm(CLOSE_PPM))
            {
                self.close_one();
            }
            self.post_receives_all();
            if self.stats.posted < self.plan.ops {
                for _ in 0..1 + self.rng.below(3) {
                    if self.stats.posted >= self.plan.ops {
                        break;
                    }
                    if let Some(s) = self.pick_side() {
                        self.post_chain(s);
                    }
                }
                self.post_receives_all();
            } else {
                let extra = self.rng.below(5_000_000);
                let until = *extra_until.get_or_insert(self.now().plus_nanos(extra));
                if self.now() >= until {
                    break;
                }
            }
            if self.now() >= deadline || iterations >= max_iterations {
                self.log.liveness(format!(
                    "the faulty phase did not post every operation within {} of virtual time \
                     and {max_iterations} iterations ({} of {} posted)",
                    deadline, self.stats.posted, self.plan.ops
                ));
                break;
            }
            let idle = !self.may_post();
            self.advance(idle);
        }
    }

    /// The adversary's node, when it runs.
    pub(super) fn adversary(&self) -> Option<&Adversary> {
        match self.fabric.endpoint(self.adversary?) {
            Member::Adversary(a) => Some(a),
            Member::Hca(_) => None,
        }
    }

    pub(super) fn report(self) -> SwarmReport {
        let mut hca: Vec<(&'static str, u64)> = Vec::new();
        for node in &self.nodes {
            for (i, (name, value)) in node.hca.borrow().counters().named().into_iter().enumerate() {
                match hca.get_mut(i) {
                    Some(slot) => slot.1 += value,
                    None => hca.push((name, value)),
                }
            }
        }
        let retransmits =
            hca.iter().find(|(name, _)| *name == "completer_retry_err").map_or(0, |c| c.1);
        let count = |ty| self.sides.iter().filter(|s| s.ty == ty).count() as u32 / 2;
        let adversary = self.adversary().map(|a| a.stats().clone()).unwrap_or_default();
        let firings = self
            .fabric
            .firings()
            .iter()
            .map(|(node, firing)| format!("node{}: {firing}", node.0))
            .collect();
        SwarmReport {
            scenario: self.plan.scenario.as_ref().map(|s| s.scenario.name.clone()),
            firings,
            firings_lost: self.fabric.firings_lost(),
            adversary,
            connections: [count(QpType::Rc), count(QpType::Uc), count(QpType::Ud)],
            stats: self.stats,
            mismatches: self.log.mismatches,
            mismatch_log: self.log.mismatch_log,
            liveness_log: self.log.liveness_log,
            retransmits,
            trace_hash: self.fabric.trace_hash(),
            healed_at: self.healed_at,
            done_at: self.done_at,
            ended_at: self.fabric.now(),
            fabric: *self.fabric.counters(),
            hca,
            plan: self.plan,
            steps: self.steps.map(|mut s| {
                s.lost += self.nodes.iter().map(|n| n.hca.lock().steps_lost()).sum::<u64>();
                s
            }),
        }
    }

    /// Turns tracing on: every HCA records its decisions, which the run
    /// collects as it goes.
    pub(super) fn trace(&mut self) {
        for node in &self.nodes {
            node.hca.lock().trace_steps(HCA_TRACE_CAPACITY);
        }
        self.steps = Some(Steps::default());
    }

    /// Takes the HCAs' decisions since the last call, in time order.
    pub(super) fn collect_steps(&mut self) {
        let Some(steps) = self.steps.as_mut() else { return };
        let mut batch = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let mut hca = node.hca.lock();
            batch.extend(std::iter::from_fn(|| hca.poll_step()).map(|(at, step)| (at, i, step)));
        }
        batch.sort_by_key(|&(at, node, _)| (at, node));
        for entry in batch {
            if steps.kept.len() == MAX_TRACED_STEPS {
                steps.kept.pop_front();
                steps.lost += 1;
            }
            steps.kept.push_back(entry);
        }
    }

    /// Runs the fabric for a random slice of virtual time; when the
    /// application has nothing to do (`idle`) until the fabric does
    /// something or a delayed receive is due, at least until then. The
    /// stepping is the world's ([`world::advance`], as the harness's `Sim`
    /// steps): the slices are this driver's choice.
    pub(super) fn advance(&mut self, idle: bool) {
        let q = match self.rng.below(10) {
            0..=3 => 1_000,
            4..=7 => 1_000 + self.rng.below(20_000),
            _ => 20_000 + self.rng.below(480_000),
        };
        let now = self.now();
        let mut deadline = now.plus_nanos(q);
        // The application rang doorbells: let the fabric take the packets
        // (and run what is due now).
        world::advance(&mut self.fabric, now, Stop::AtTime);
        if idle {
            let due = self
                .sides
                .iter()
                .filter_map(|s| s.pending.front().map(|n| n.not_before))
                .filter(|&t| t > now)
                .chain(self.next_resume())
                .min();
            let next = match (self.fabric.next_event(), due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(next) = next {
                deadline = deadline.max(next);
            }
        }
        world::advance(&mut self.fabric, deadline, Stop::AtTime);
        self.collect_steps();
    }

    /// Whether the application could post a send WR now.
    pub(super) fn may_post(&self) -> bool {
        self.stats.posted < self.plan.ops
            && self.sides.iter().any(|s| s.sq.len() < s.cap.max_send_wr as usize)
    }
}
