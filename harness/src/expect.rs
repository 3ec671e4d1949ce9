//! A scenario's `[expect]` checked against a run ([`Report::check`]): what
//! a node observed, in virtual time, handed to the scenario crate's
//! evaluator ([`uroce_faults::scenario::evaluate`]), the one `uroce run
//! --check` uses.

use crate::report::Report;
use std::fmt;
use std::time::Duration;
use uroce_device::types::EventType;
use uroce_faults::scenario::{
    evaluate, Device, Exit, ExpectLine, FirstFiring, Observed, Raised, ASYNC_EVENTS, WC_STATUSES,
};
use uroce_hca::async_log::RaisedEvent;
use uroce_sim::Scenario;

/// A node's run checked against its `[expect]` table ([`Report::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The scenario's name.
    pub scenario: String,
    /// The table checked: `[expect]` or `[expect.<role>]`.
    pub table: String,
    /// The node.
    pub node: usize,
    /// Each expectation, in the evaluator's order.
    pub lines: Vec<ExpectLine>,
}

impl Checked {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.lines.iter().all(|l| l.ok)
    }

    /// The expectations that did not hold.
    pub fn failed(&self) -> impl Iterator<Item = &ExpectLine> {
        self.lines.iter().filter(|l| !l.ok)
    }
}

/// `check ok: <expectation>: <seen>` and `check FAILED: <table>
/// <expectation> of scenario <name>: saw <seen>` lines, as `uroce run
/// --check` prints them, then `check: <name> passed (N expectations)` or
/// `check: <name> failed`.
impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.lines {
            if l.ok {
                writeln!(f, "check ok: {}: {}", l.expected, l.seen)?;
            } else {
                writeln!(
                    f,
                    "check FAILED: {} {} of scenario {}: saw {}",
                    self.table, l.expected, self.scenario, l.seen
                )?;
            }
        }
        if self.passed() {
            let n = self.lines.len();
            let s = if n == 1 { "" } else { "s" };
            write!(f, "check: {} passed ({n} expectation{s}) on node{}", self.scenario, self.node)
        } else {
            write!(f, "check: {} failed on node{}", self.scenario, self.node)
        }
    }
}

/// Virtual µs.
fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What an event concerns, as the runtime's report writes it.
fn element(e: &RaisedEvent) -> String {
    match e.event {
        EventType::CqErr => format!("cq={}", e.element),
        EventType::SrqErr | EventType::SrqLimitReached => format!("srq={}", e.element),
        EventType::PortActive | EventType::PortErr => format!("port={}", e.element),
        _ => format!("qp=0x{:06x}", e.element),
    }
}

fn event_name(event: EventType) -> String {
    let raw = event.raw();
    ASYNC_EVENTS.get(usize::from(raw)).map_or_else(|| format!("event{raw}"), |s| (*s).to_owned())
}

impl Report {
    /// Checks node `node`'s run against `scenario`'s `[expect]` table for
    /// `role` (`[expect.<role>]` when the scenario has one, else
    /// `[expect]`), with the evaluator `uroce run --check` uses. Times are
    /// virtual: `within_ms` runs from the first firing (on any node) to
    /// the node's first error. `exit = "killed"` holds when a `crash` with
    /// `exit` killed the node's tasks ([`Report::killed`]). The counters
    /// are the HCA's: one of the real runtime's (`rx_dropped`, ...) is not
    /// counted here, and an expectation on it fails saying so. Unlike
    /// `uroce run --check`, no "a rule fired" line: assert
    /// [`Report::fired`] for that.
    ///
    /// # Panics
    ///
    /// If `node` is not one of the run's nodes.
    pub fn check(&self, scenario: &Scenario, node: usize, role: Option<&str>) -> Checked {
        let expect = scenario.expect.for_role(role);
        let table = match role {
            Some(r) if scenario.expect.roles.iter().any(|(n, _)| n == r) => {
                format!("[expect.{r}]")
            }
            _ => "[expect]".to_owned(),
        };
        Checked {
            scenario: scenario.name.clone(),
            table,
            node,
            lines: evaluate(expect, &self.observed(node)),
        }
    }

    /// What node `node` observed, for the evaluator (times in virtual µs).
    pub fn observed(&self, node: usize) -> Observed {
        let tally = &self.completions[node];
        let log = &self.async_logs[node];
        let device = Device {
            success: tally.successes(),
            errors: tally.errors(),
            first_error: tally.first_error().map(|e| {
                let raw = e.status.raw();
                let name = WC_STATUSES
                    .get(usize::from(raw))
                    .map_or_else(|| format!("status{raw}"), |s| (*s).to_owned());
                (name, e.at.as_nanos() / 1000)
            }),
            counters: self.counters[node]
                .named()
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            uncounted: Some("the harness has the HCA's counters only".to_owned()),
            async_events: Ok(log.by_type().map(|(e, n)| (event_name(e), n)).collect()),
            raised: log
                .kept()
                .iter()
                .map(|e| Raised {
                    name: event_name(e.event),
                    element: element(e),
                    at_us: e.at.as_nanos() / 1000,
                })
                .collect(),
        };
        let killed: Vec<&String> =
            self.killed.iter().filter(|k| k.contains(&format!(" (node {node}) at "))).collect();
        let exit = Exit {
            killed: !killed.is_empty(),
            text: if killed.is_empty() {
                format!("node{node}'s tasks not killed")
            } else {
                format!(
                    "killed by a crash: {}",
                    killed.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
                )
            },
        };
        let first = self.firing_times.iter().zip(&self.firings).min_by_key(|((_, at), _)| *at);
        let first_firing = first
            .map(|((n, at), text)| FirstFiring {
                at_us: us(*at),
                rule: text.split(": ").nth(1).unwrap_or("").to_owned(),
                place: format!("node{n}"),
            })
            .ok_or_else(|| "no firing in the run".to_owned());
        Observed { exit: Some(exit), device: Ok(device), first_firing }
    }
}
