//! Disruptions: link outages, partitions and application pauses, drawn
//! from the seed (from a generator of their own, so that a run without
//! them draws everything else as before) and started during the faulty
//! phase, each once so many WRs are posted.
//!
//! What the model allows for them:
//!
//! * an outage or a partition loses every packet across the cut while it
//!   lasts: RC retransmits, and an RC QP whose path was cut may spend its
//!   retries (RETRY_EXC_ERR, then the connection is replaced), whatever
//!   the loss rates; UC and UD messages may be lost (the run is lossy:
//!   delivery is no longer exact);
//! * a paused application neither posts nor polls: its CQs fill (they
//!   are sized for every WR its QPs may hold, so they never overrun), its
//!   receives are posted late (RC requesters meet RNR NAKs and wait, UC
//!   and UD messages that find no receive are dropped: a message to a
//!   paused node may be lost), and its peers' WRs wait for their
//!   completions. Nothing else changes: every completion, byte and atomic
//!   is checked as always, and after the faults heal every WR must finish.

use super::plan::Plan;
use super::run::*;
use std::collections::VecDeque;
use uroce_hca::Instant;
use uroce_sim::{NodeId, SimRng};

/// What a disruption cuts or stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cut {
    /// The link between two nodes, both ways.
    Link(usize, usize),
    /// Packets from the first node to the second.
    OneWay(usize, usize),
    /// These nodes from the others.
    Partition(Vec<usize>),
    /// One node from every other.
    Isolate(usize),
    /// A node's application stops posting and polling.
    Pause(usize),
}

/// A disruption of the plan, not started yet.
#[derive(Debug, Clone)]
pub(super) struct Disruption {
    /// It starts once this many send WRs are posted.
    pub(super) at_posted: u64,
    pub(super) cut: Cut,
    /// How long it lasts (virtual time).
    pub(super) ns: u64,
}

/// The plan's disruptions, in the order they start.
pub(super) fn draw(plan: &Plan) -> VecDeque<Disruption> {
    let mut r = SimRng::new(plan.seed ^ 0x4449_5352_5550_5421);
    let nodes = u64::from(plan.nodes);
    // The shortest local ACK timeout of the run's connections (see
    // `Sim::tuning`): 2^8 x 4.096 us on infinitely fast ports, 2^12 x
    // 4.096 us at most on the others. Most cuts end within three of them,
    // which a connection survives; one in four lasts up to twelve, which
    // may spend an RC QP's seven retries.
    let t: u64 = if plan.port_rate_bits_per_sec.is_none() { 4_096 << 8 } else { 4_096 << 12 };
    let when = |r: &mut SimRng| r.below(plan.ops.max(1));
    let cut_ns = |r: &mut SimRng| {
        if r.chance(percent(75)) {
            r.range_inclusive(t / 10, 3 * t)
        } else {
            r.range_inclusive(3 * t, 12 * t)
        }
    };
    let mut list = Vec::new();
    if nodes > 1 {
        for _ in 0..plan.outages {
            let a = r.below(nodes) as usize;
            let b = (a + 1 + r.below(nodes - 1) as usize) % nodes as usize;
            let cut = if r.chance(percent(30)) { Cut::OneWay(a, b) } else { Cut::Link(a, b) };
            list.push(Disruption { at_posted: when(&mut r), cut, ns: cut_ns(&mut r) });
        }
        for _ in 0..plan.partitions {
            let cut = if nodes == 2 || r.chance(percent(40)) {
                Cut::Isolate(r.below(nodes) as usize)
            } else {
                // A proper subset of 1 to nodes - 1 nodes.
                let mut all: Vec<usize> = (0..nodes as usize).collect();
                let size = 1 + r.below(nodes - 1) as usize;
                for i in 0..size {
                    let j = i + r.below((all.len() - i) as u64) as usize;
                    all.swap(i, j);
                }
                all.truncate(size);
                all.sort_unstable();
                Cut::Partition(all)
            };
            list.push(Disruption { at_posted: when(&mut r), cut, ns: cut_ns(&mut r) });
        }
    }
    for _ in 0..plan.pauses {
        let cut = Cut::Pause(r.below(nodes) as usize);
        let ns = r.range_inclusive(t / 20, 10 * t);
        list.push(Disruption { at_posted: when(&mut r), cut, ns });
    }
    list.sort_by_key(|d| d.at_posted);
    list.into()
}

impl Sim {
    /// Starts the disruptions due at this many posted WRs.
    pub(super) fn disrupt(&mut self) {
        while self.disruptions.front().is_some_and(|d| d.at_posted <= self.stats.posted) {
            let d = self.disruptions.pop_front().expect("a front");
            let now = self.now();
            let during = now..now.plus_nanos(d.ns);
            let nodes = self.nodes.len();
            let mut cut_between = |pairs: &mut dyn Iterator<Item = (usize, usize)>| {
                for (a, b) in pairs {
                    self.cut_paths.insert((a.min(b), a.max(b)));
                }
            };
            match &d.cut {
                Cut::Link(a, b) => {
                    self.fabric.link_down(NodeId(*a), NodeId(*b), during);
                    cut_between(&mut [(*a, *b)].into_iter());
                    self.stats.outages += 1;
                }
                Cut::OneWay(a, b) => {
                    self.fabric.link_down_one_way(NodeId(*a), NodeId(*b), during);
                    cut_between(&mut [(*a, *b)].into_iter());
                    self.stats.outages += 1;
                }
                Cut::Partition(side) => {
                    let ids: Vec<NodeId> = side.iter().map(|&n| NodeId(n)).collect();
                    self.fabric.partition(&ids, during);
                    let outside: Vec<usize> = (0..nodes).filter(|n| !side.contains(n)).collect();
                    cut_between(
                        &mut side.iter().flat_map(|&a| outside.iter().map(move |&b| (a, b))),
                    );
                    self.stats.partitions += 1;
                }
                Cut::Isolate(n) => {
                    self.fabric.isolate(NodeId(*n), during);
                    cut_between(&mut (0..nodes).filter(|b| b != n).map(|b| (*n, b)));
                    self.stats.partitions += 1;
                }
                Cut::Pause(n) => {
                    self.paused_until[*n] = self.paused_until[*n].max(during.end);
                    self.stats.pauses += 1;
                }
            }
        }
    }

    /// Whether node `n`'s application is paused now.
    pub(super) fn paused(&self, n: usize) -> bool {
        self.now() < self.paused_until[n]
    }

    /// The end of the next pause, if one is running.
    pub(super) fn next_resume(&self) -> Option<Instant> {
        let now = self.now();
        self.paused_until.iter().copied().filter(|&t| t > now).min()
    }

    /// Whether an outage or a partition ever cut the path between side
    /// `s`'s node and its peer's.
    pub(super) fn path_cut(&self, s: usize) -> bool {
        let (a, b) = (self.sides[s].node, self.sides[self.sides[s].peer].node);
        self.cut_paths.contains(&(a.min(b), a.max(b)))
    }

    /// The faults heal: pauses end, and disruptions not started never
    /// will.
    pub(super) fn resume_all(&mut self) {
        self.disruptions.clear();
        let now = self.now();
        for t in &mut self.paused_until {
            *t = (*t).min(now);
        }
    }
}
