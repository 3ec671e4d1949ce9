//! The targeted faults a driver sets on a fabric: the random faults'
//! rates, rules, and outages (a link down, a partition, a node isolated)
//! and their healing.

use super::{Fabric, MAX_OUTAGES, MAX_RULES};
use crate::fault::{Cut, Outage};
use crate::trace::TraceEvent;
use crate::NodeId;
use core::ops::Range;
use uroce_faults::{FaultConfig, Rule, RuleId, RuleState};
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;

impl<E: Endpoint> Fabric<E> {
    /// Replaces the probabilistic faults and the MTU.
    pub fn set_faults(&mut self, faults: FaultConfig) {
        faults.assert_valid();
        self.config.faults = faults;
    }

    /// Adds a targeted rule; rules are checked in the order added.
    pub fn add_rule(&mut self, rule: Rule) -> RuleId {
        assert!(self.rules.len() < MAX_RULES, "more than {MAX_RULES} rules");
        if let Some(n) = rule.matcher.from {
            self.check_node(n);
        }
        if let Some(n) = rule.matcher.to {
            self.check_node(n);
        }
        self.rules.push(RuleState::new(rule));
        RuleId(self.rules.len() - 1)
    }

    /// Takes the link between `a` and `b` down, both ways, for packets sent
    /// during `during`.
    pub fn link_down(&mut self, a: NodeId, b: NodeId, during: Range<Instant>) {
        self.check_node(a);
        self.check_node(b);
        self.add_outage(Cut::Link(a, b), during);
    }

    /// Cuts packets from `from` to `to` (that direction only) sent during
    /// `during`.
    pub fn link_down_one_way(&mut self, from: NodeId, to: NodeId, during: Range<Instant>) {
        self.check_node(from);
        self.check_node(to);
        self.add_outage(Cut::OneWay { from, to }, during);
    }

    /// Cuts every packet between a node in `side` and a node outside it
    /// sent during `during`.
    pub fn partition(&mut self, side: &[NodeId], during: Range<Instant>) {
        let mut side = side.to_vec();
        for &n in &side {
            self.check_node(n);
        }
        side.sort_unstable();
        side.dedup();
        self.add_outage(Cut::Partition { side }, during);
    }

    /// Cuts one node off from every other during `during`.
    pub fn isolate(&mut self, node: NodeId, during: Range<Instant>) {
        self.partition(&[node], during);
    }

    fn add_outage(&mut self, cut: Cut, during: Range<Instant>) {
        assert!(during.start <= during.end, "outage ends before it starts");
        let now = self.now;
        self.outages.retain(|o| o.during.end > now);
        assert!(self.outages.len() < MAX_OUTAGES, "more than {MAX_OUTAGES} outages");
        self.outages.push(Outage { cut, during });
    }

    /// Turns every fault off for a liveness phase: probabilistic faults
    /// (the MTU stays: it is the network's, not a fault), outages (running
    /// and scheduled) and rules (kept, with their counts, but no longer
    /// checked). Packets in flight still arrive as scheduled.
    pub fn heal(&mut self) {
        self.config.faults = self.config.faults.healed();
        self.outages.clear();
        for rule in &mut self.rules {
            rule.active = false;
        }
        self.trace.record(TraceEvent::Heal { at: self.now });
    }
}
