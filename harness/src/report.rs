//! What a run came to ([`Report`]).

use crate::world::World;
use std::fmt;
use std::time::Duration;
use uroce_hca::async_log::AsyncLog;
use uroce_hca::counters::Counters;
use uroce_hca::tally::CompletionTally;
use uroce_hca::SharedHca;
use uroce_sim::NodeId;

/// One scenario rule on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCount {
    /// The node.
    pub node: usize,
    /// The rule's name.
    pub rule: String,
    /// Whether it applies on this node (its `role`).
    pub here: bool,
    /// Packets it matched.
    pub matched: u64,
    /// Times it fired.
    pub fired: u64,
}

/// What a run came to ([`crate::Sim::run`], [`crate::Sim::report`]).
#[derive(Debug, Clone)]
pub struct Report {
    /// The fabric's trace hash ([`crate::Sim::trace_hash`]).
    pub trace_hash: u64,
    /// The virtual time at the end.
    pub elapsed: Duration,
    /// Each scenario rule on each node (node order, then file order); empty
    /// without a scenario.
    pub rules: Vec<RuleCount>,
    /// Every firing, in order: `node<n>: <firing>`.
    pub firings: Vec<String>,
    /// Each firing's node and virtual time, in [`Report::firings`]' order.
    pub firing_times: Vec<(usize, Duration)>,
    /// Each node's completions by status and its first error.
    pub completions: Vec<CompletionTally>,
    /// Each node's HCA counters (retries, RNR NAKs, injected faults...).
    pub counters: Vec<Counters>,
    /// Each node's asynchronous events (every one raised, whether or not
    /// a task took it).
    pub async_logs: Vec<AsyncLog>,
    /// The tasks that had not returned (daemons), `name (node n)`.
    pub unfinished: Vec<String>,
    /// The tasks stopped because a `crash` with `exit` killed their node's
    /// process: `name (node n) at <virtual time>`.
    pub killed: Vec<String>,
}

impl Report {
    pub(crate) fn of(
        world: &World<SharedHca>,
        unfinished: Vec<String>,
        killed: Vec<String>,
    ) -> Report {
        let fabric = &world.fabric;
        let mut rules = Vec::new();
        for node in 0..world.hosts.len() {
            if let Some(port) = fabric.port(NodeId(node)) {
                for r in port.summary().rules {
                    rules.push(RuleCount {
                        node,
                        rule: r.name,
                        here: r.here,
                        matched: r.matched,
                        fired: r.fired,
                    });
                }
            }
        }
        Report {
            trace_hash: fabric.trace_hash(),
            elapsed: Duration::from_nanos(fabric.now().as_nanos()),
            rules,
            firings: fabric.firings().iter().map(|(n, f)| format!("node{}: {f}", n.0)).collect(),
            firing_times: fabric
                .firings()
                .iter()
                .map(|(n, f)| (n.0, Duration::from_nanos(f.at_ns)))
                .collect(),
            completions: world
                .hosts
                .iter()
                .map(|h| h.hca.lock().completion_tally().clone())
                .collect(),
            counters: world.hosts.iter().map(|h| h.hca.lock().counters()).collect(),
            async_logs: world.hosts.iter().map(|h| h.hca.lock().async_log().clone()).collect(),
            unfinished,
            killed,
        }
    }

    /// How often rule `rule` fired, on every node together.
    pub fn fired(&self, rule: &str) -> u64 {
        self.rules.iter().filter(|r| r.rule == rule).map(|r| r.fired).sum()
    }

    /// How often rule `rule` fired on node `node`.
    pub fn fired_at(&self, node: usize, rule: &str) -> u64 {
        self.rules.iter().filter(|r| r.node == node && r.rule == rule).map(|r| r.fired).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "run: {:?} virtual, trace_hash={:016x}", self.elapsed, self.trace_hash)?;
        for r in &self.rules {
            let here = if r.here { "" } else { " (not here)" };
            writeln!(
                f,
                "rule {} node{}: matched {} fired {}{here}",
                r.rule, r.node, r.matched, r.fired
            )?;
        }
        for line in &self.firings {
            writeln!(f, "{line}")?;
        }
        for (node, t) in self.completions.iter().enumerate() {
            write!(f, "node{node} completions success={} errors={}", t.successes(), t.errors())?;
            if let Some(e) = t.first_error() {
                write!(f, " first_error={:?} wr_id={}", e.status, e.wr_id)?;
            }
            writeln!(f)?;
        }
        if !self.killed.is_empty() {
            writeln!(f, "killed (crash with exit): {}", self.killed.join(", "))?;
        }
        if !self.unfinished.is_empty() {
            writeln!(f, "unfinished: {}", self.unfinished.join(", "))?;
        }
        Ok(())
    }
}
