//! What `uroce run --scenario` reads back after the program ends: the
//! scenario report the device wrote (`UROCE_SCENARIO_REPORT`; design note
//! fault-scenarios.md §10b), summarized on one screen, and with `--check`
//! compared against the scenario's `[expect]` for the run's role.
//!
//! A report line is `<wall clock µs since the epoch> <line>`, the line one
//! of: `scenario <name> <addr> loaded at_us=0 from ...` (a device opened:
//! its device clock, µs since it opened, starts at that wall clock), `scenario <addr> <µs> rule ...
//! fired ...` (a firing, in device µs), `scenario <addr> <µs> crash: ...`,
//! and the summary (`scenario <name> <addr> completions ...`, `... counters
//! k=v ...`, `... runtime_counters k=v ...`, `... async_events total=N
//! NAME=N ...`, `... async_event NAME qp=0x.. at_us=N`, the port's lines:
//! `... rule NAME matched N fired M`, ...).
//! Times of different devices (and processes) are compared on the wall
//! clock: a device's µs plus its `loaded` line's wall clock.
//!
//! `async_event = "NAME"` holds when this process's device raised at least
//! one event of that name during the run, whenever it came and whether or
//! not the program read it (every device raises `IBV_EVENT_PORT_ACTIVE`
//! first, as it opens, so "the first event" would say nothing).

use std::collections::BTreeMap;
use std::net::IpAddr;
use uroce_faults::scenario::{ExpectExit, Outcome, RoleExpect, Scenario};

/// One firing, on the wall clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// µs since the epoch.
    pub wall_us: u64,
    /// The device's address.
    pub addr: IpAddr,
    /// The firing as logged (`rule NAME fired N: ...`).
    pub text: String,
}

/// One asynchronous event a device raised (an `async_event` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaisedEvent {
    /// Its `IBV_EVENT_*` name.
    pub name: String,
    /// What it concerns: `qp=0x..`, `cq=N`, `srq=N` or `port=N`.
    pub element: String,
    /// µs since the epoch.
    pub wall_us: u64,
}

/// A device's summary (`completions`, `async_events`, `async_event`,
/// `counters` and `runtime_counters` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSummary {
    /// `success=`.
    pub success: u64,
    /// `errors=`.
    pub errors: u64,
    /// The first error: its `IBV_WC_*` name and wall clock (µs).
    pub first_error: Option<(String, u64)>,
    /// The `counters` line: the HCA's (zeros are absent).
    pub counters: BTreeMap<String, u64>,
    /// The `runtime_counters` line: the runtime's (`UdpStats`; zeros are
    /// absent).
    pub runtime_counters: BTreeMap<String, u64>,
    /// The `async_events` line: every asynchronous event raised, by name
    /// (`None`: the report has no such line).
    pub async_events: Option<BTreeMap<String, u64>>,
    /// The `async_event` lines (the first 64 events of each device), by
    /// wall clock.
    pub raised: Vec<RaisedEvent>,
}

impl DeviceSummary {
    /// A counter of the HCA's or the runtime's (0 when absent).
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).or_else(|| self.runtime_counters.get(name)).copied().unwrap_or(0)
    }
}

/// `k=v` fields into a map (others skipped).
fn key_values(fields: &str) -> impl Iterator<Item = (String, u64)> + '_ {
    fields.split_whitespace().filter_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        Some((k.to_owned(), v.parse::<u64>().ok()?))
    })
}

/// The latest summary of `addr` in `summaries`, a new one if it has none.
fn latest_of(summaries: &mut Vec<(IpAddr, DeviceSummary)>, addr: IpAddr) -> &mut DeviceSummary {
    let at = match summaries.iter().rposition(|(a, _)| *a == addr) {
        Some(at) => at,
        None => {
            summaries.push((addr, DeviceSummary::default()));
            summaries.len() - 1
        }
    };
    &mut summaries[at].1
}

/// A report read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every firing, by wall clock.
    pub firings: Vec<Fired>,
    /// The summaries, by device address, in file order (a process may open
    /// several devices; their summaries add up).
    pub summaries: Vec<(IpAddr, DeviceSummary)>,
    /// `crash: killing the process` lines seen.
    pub kills: usize,
    /// The devices that opened with the scenario (their `loaded` lines,
    /// however old), by address.
    pub devices: Vec<IpAddr>,
    /// The port's `rule NAME matched N fired M` lines: (device, rule,
    /// packets matched).
    pub matched: Vec<(IpAddr, String, u64)>,
}

impl Report {
    /// Parses a report's text, keeping lines written at or after
    /// `since_us` (a report shared by runs, or kept from an earlier one).
    pub fn parse(text: &str, since_us: u64) -> Report {
        let mut report = Report::default();
        // Each address's device clock origin (its latest `loaded` line).
        let mut base: BTreeMap<IpAddr, u64> = BTreeMap::new();
        for line in text.lines() {
            let Some((wall, rest)) = line.split_once(' ') else { continue };
            let Ok(wall) = wall.parse::<u64>() else { continue };
            let t: Vec<&str> = rest.splitn(5, ' ').collect();
            if t.len() < 4 || t[0] != "scenario" {
                continue;
            }
            // A device's `loaded` line counts even before `since_us`: the
            // other process of a shared report may have opened its device
            // before this run started.
            let what = rest.splitn(4, ' ').nth(3).unwrap_or("");
            // `loaded at_us=0 from ...` (`0 loaded from ...` before it was
            // labelled).
            let loaded = what.starts_with("loaded ") || what.starts_with("0 loaded ");
            if let (Ok(addr), true) = (t[2].parse::<IpAddr>(), loaded) {
                base.insert(addr, wall);
                if !report.devices.contains(&addr) {
                    report.devices.push(addr);
                }
                continue;
            }
            if wall < since_us {
                continue;
            }
            if let (Ok(addr), Ok(us)) = (t[1].parse::<IpAddr>(), t[2].parse::<u64>()) {
                // `scenario <addr> <µs> ...`: a firing or a device line.
                // A firing's time is its device's clock, as an error's or
                // an event's (the line's own wall clock, written a little
                // later, when the device's `loaded` line is missing).
                if what.starts_with("rule ") {
                    let wall_us = base.get(&addr).map_or(wall, |b| b.saturating_add(us));
                    report.firings.push(Fired { wall_us, addr, text: what.to_owned() });
                } else if what.starts_with("crash:") {
                    report.kills += 1;
                }
                continue;
            }
            let Ok(addr) = t[2].parse::<IpAddr>() else { continue };
            if let Some(rule) = what.strip_prefix("rule ") {
                // `rule NAME matched N fired M`.
                let w: Vec<&str> = rule.split(' ').collect();
                if let [name, "matched", n, "fired", _] = w[..] {
                    if let Ok(n) = n.parse() {
                        report.matched.push((addr, name.to_owned(), n));
                    }
                }
            } else if let Some(fields) = what.strip_prefix("completions ") {
                let origin = base.get(&addr).copied().unwrap_or(wall);
                let mut s = DeviceSummary::default();
                let mut first = None;
                let mut at = None;
                for field in fields.split(' ') {
                    match field.split_once('=') {
                        Some(("success", v)) => s.success = v.parse().unwrap_or(0),
                        Some(("errors", v)) => s.errors = v.parse().unwrap_or(0),
                        Some(("first_error", v)) if v != "none" => first = Some(v.to_owned()),
                        Some(("at_us", v)) => at = v.parse::<u64>().ok(),
                        _ => {}
                    }
                }
                s.first_error = first.map(|f| (f, origin + at.unwrap_or(0)));
                report.summaries.push((addr, s));
            } else if let Some(fields) = field_line(what, "counters") {
                latest_of(&mut report.summaries, addr).counters.extend(key_values(fields));
            } else if let Some(fields) = field_line(what, "runtime_counters") {
                let s = latest_of(&mut report.summaries, addr);
                s.runtime_counters.extend(key_values(fields));
            } else if let Some(fields) = field_line(what, "async_events") {
                let by_name = key_values(fields).filter(|(k, _)| k != "total");
                let s = latest_of(&mut report.summaries, addr);
                s.async_events.get_or_insert_with(BTreeMap::new).extend(by_name);
            } else if let Some(fields) = field_line(what, "async_event") {
                let origin = base.get(&addr).copied().unwrap_or(wall);
                if let Some(event) = raised_event(fields, origin) {
                    latest_of(&mut report.summaries, addr).raised.push(event);
                }
            }
        }
        report.firings.sort_by_key(|f| f.wall_us);
        report
    }

    /// The summaries of the devices at `addr` added up (`None`: none
    /// wrote one).
    pub fn summary_of(&self, addr: IpAddr) -> Option<DeviceSummary> {
        let mut total: Option<DeviceSummary> = None;
        for (_, s) in self.summaries.iter().filter(|(a, _)| *a == addr) {
            let t = total.get_or_insert_with(DeviceSummary::default);
            t.success += s.success;
            t.errors += s.errors;
            if let Some((name, at)) = &s.first_error {
                if t.first_error.as_ref().is_none_or(|(_, t0)| at < t0) {
                    t.first_error = Some((name.clone(), *at));
                }
            }
            for (k, v) in &s.counters {
                *t.counters.entry(k.clone()).or_insert(0) += v;
            }
            for (k, v) in &s.runtime_counters {
                *t.runtime_counters.entry(k.clone()).or_insert(0) += v;
            }
            if let Some(events) = &s.async_events {
                let all = t.async_events.get_or_insert_with(BTreeMap::new);
                for (k, v) in events {
                    *all.entry(k.clone()).or_insert(0) += v;
                }
            }
            t.raised.extend(s.raised.iter().cloned());
        }
        if let Some(t) = total.as_mut() {
            t.raised.sort_by_key(|e| e.wall_us);
        }
        total
    }
}

/// The fields of a summary line named `name` (`name k=v ...`; `name`
/// alone has none).
fn field_line<'a>(what: &'a str, name: &str) -> Option<&'a str> {
    let rest = what.strip_prefix(name)?;
    if rest.is_empty() {
        Some(rest)
    } else {
        rest.strip_prefix(' ')
    }
}

/// `IBV_EVENT_... <element> at_us=N` on the wall clock of a device that
/// opened at `origin` (µs since the epoch).
fn raised_event(fields: &str, origin: u64) -> Option<RaisedEvent> {
    let mut words = fields.split_whitespace();
    let name = words.next()?.to_owned();
    let element = words.next()?.to_owned();
    let at = words.next()?.strip_prefix("at_us=")?.parse::<u64>().ok()?;
    Some(RaisedEvent { name, element, wall_us: origin.saturating_add(at) })
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// A signal's name (`SIGKILL`), or its number.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// The counter names `min_counters`/`max_counters` may use: the HCA's,
/// then the runtime's (`UdpStats`).
pub fn counter_names() -> Vec<&'static str> {
    let hca = uroce_hca::counters::Counters::default().named();
    let runtime = uroce_net::udp::UdpStats::default().named();
    hca.iter().chain(&runtime).map(|(n, _)| *n).collect()
}

/// The expectation's counters that neither the HCA nor the runtime has.
pub fn unknown_counters(expect: &RoleExpect) -> Vec<String> {
    let names = counter_names();
    expect
        .min_counters
        .iter()
        .chain(&expect.max_counters)
        .filter(|(n, _)| !names.contains(&n.as_str()))
        .map(|(n, _)| n.clone())
        .collect()
}

/// One expectation checked: what it said, what was seen, whether it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `outcome = "success"`, `completer_retry_err >= 1`, ...
    pub expected: String,
    /// What the report (or the exit status) says.
    pub seen: String,
    /// Whether it held.
    pub ok: bool,
}

/// Compares what happened (`summary`: this process's devices; `firings`:
/// every firing in the report; `ended`) against `expect`. `no_firing`:
/// why the report may hold no firing ([`why_no_firing`]), for `within_ms`.
pub fn check(
    expect: &RoleExpect,
    summary: Option<&DeviceSummary>,
    firings: &[Fired],
    ended: Ended,
    no_firing: &str,
) -> Vec<Verdict> {
    let mut v = Vec::new();
    let mut push =
        |expected: String, seen: String, ok: bool| v.push(Verdict { expected, seen, ok });
    let ended_text = match ended {
        Ended::Code(c) => format!("exit status {c}"),
        Ended::Signal(s) => format!("killed by {}", signal_name(s)),
    };
    if let Some(ExpectExit::Killed) = expect.exit {
        push("exit = \"killed\"".into(), ended_text.clone(), ended == Ended::Signal(9));
    }
    let none = || format!("no summary in the report ({ended_text})");
    if let Some(outcome) = expect.outcome {
        let (want, seen, ok) = match (outcome, summary) {
            (Outcome::Success, Some(s)) => {
                ("success", format!("success={} errors={}", s.success, s.errors), s.errors == 0)
            }
            (Outcome::Error, Some(s)) => {
                ("error", format!("success={} errors={}", s.success, s.errors), s.errors > 0)
            }
            (Outcome::Success, None) => ("success", none(), false),
            (Outcome::Error, None) => ("error", none(), false),
        };
        push(format!("outcome = \"{want}\""), seen, ok);
    }
    if let Some(status) = &expect.status {
        let seen = summary.map_or_else(none, |s| {
            s.first_error
                .as_ref()
                .map_or("first_error=none".to_owned(), |(n, _)| format!("first_error={n}"))
        });
        let ok = summary.and_then(|s| s.first_error.as_ref()).is_some_and(|(n, _)| n == status);
        push(format!("status = \"{status}\""), seen, ok);
    }
    if let Some(ms) = expect.within_ms {
        let error = summary.and_then(|s| s.first_error.as_ref());
        let (seen, ok) = match (firings.first(), error) {
            (Some(f), Some((_, at))) => {
                let took = at.saturating_sub(f.wall_us);
                (
                    format!(
                        "{}.{:03} ms from the first firing ({} at {}) to the first error",
                        took / 1000,
                        took % 1000,
                        f.text.split(':').next().unwrap_or(""),
                        f.addr
                    ),
                    took <= ms * 1000,
                )
            }
            (None, _) => (format!("no firing in the report ({no_firing})"), false),
            (_, None) => ("no error completion".into(), false),
        };
        push(format!("within_ms = {ms}"), seen, ok);
    }
    if let Some(name) = &expect.async_event {
        let (seen, ok) = async_seen(summary, name, firings.first());
        push(format!("async_event = \"{name}\""), seen.unwrap_or_else(none), ok);
    }
    let count = |name: &str| summary.map_or(0, |s| s.counter(name));
    for (name, min) in &expect.min_counters {
        let n = count(name);
        let seen = if summary.is_some() { format!("{name}={n}") } else { none() };
        push(format!("{name} >= {min}"), seen, summary.is_some() && n >= *min);
    }
    for (name, max) in &expect.max_counters {
        let n = count(name);
        let seen = if summary.is_some() { format!("{name}={n}") } else { none() };
        push(format!("{name} <= {max}"), seen, summary.is_some() && n <= *max);
    }
    v
}

/// What the report says of asynchronous event `name` (`None`: no
/// summary), and whether the device raised one. `first`: the first firing,
/// to time the event from.
fn async_seen(
    summary: Option<&DeviceSummary>,
    name: &str,
    first: Option<&Fired>,
) -> (Option<String>, bool) {
    let Some(s) = summary else { return (None, false) };
    let Some(events) = &s.async_events else {
        return (Some("no async_events line in the report".into()), false);
    };
    let n = events.get(name).copied().unwrap_or(0);
    if n == 0 {
        let all: Vec<String> = events.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let all = if all.is_empty() { "none".to_owned() } else { all.join(" ") };
        return (Some(format!("async events {all}")), false);
    }
    let seen = match s.raised.iter().find(|e| e.name == name) {
        Some(e) => {
            format!("{name}={n}, the first on {}{}", e.element, after_firing(e.wall_us, first))
        }
        None => format!("{name}={n}"),
    };
    (Some(seen), true)
}

/// ` (+X ms after the first firing)` (` (X ms before the first firing)`
/// for what came first), or nothing without a firing.
pub fn after_firing(wall_us: u64, first: Option<&Fired>) -> String {
    match first {
        Some(f) if wall_us < f.wall_us => {
            let ms = (f.wall_us - wall_us) as f64 / 1000.0;
            format!(" ({ms:.3} ms before the first firing)")
        }
        Some(f) => {
            let ms = (wall_us - f.wall_us) as f64 / 1000.0;
            format!(" (+{ms:.3} ms after the first firing)")
        }
        None => String::new(),
    }
}

/// `n thing` or `n things`.
pub fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// What `uroce run --scenario` checks of a loaded scenario before the
/// program starts, and `uroce scenarios --check` of a file: every
/// `[expect]` table's counters are ones the HCA or the runtime has. The
/// error is the message to print (after `uroce run: ` or `uroce
/// scenarios: `).
pub fn validate(s: &Scenario) -> Result<(), String> {
    let tables = std::iter::once(("[expect]".to_owned(), &s.expect.common))
        .chain(s.expect.roles.iter().map(|(r, e)| (format!("[expect.{r}]"), e)));
    for (table, expect) in tables {
        let unknown = unknown_counters(expect);
        if !unknown.is_empty() {
            return Err(format!(
                "scenario {}: {table} names counters neither the HCA nor the runtime has: {} \
                 (known: {})",
                s.origin,
                unknown.join(", "),
                counter_names().join(", ")
            ));
        }
    }
    Ok(())
}

/// The roles of a scenario: those its rules (`role`) and its
/// `[expect.<role>]` tables name, each once, completed to the usual pair
/// `server` and `client` when they are among it (a rule for the server
/// alone is run with the client's process as `--role client`).
pub fn roles(s: &Scenario) -> Vec<String> {
    let mut roles: Vec<String> = Vec::new();
    let named = s.rules.iter().filter_map(|r| r.scope.role.as_ref());
    for r in named.chain(s.expect.roles.iter().map(|(r, _)| r)) {
        if !roles.contains(r) {
            roles.push(r.clone());
        }
    }
    let usual = |r: &String| r == "server" || r == "client";
    if !roles.is_empty() && roles.iter().all(usual) {
        for usual in ["server", "client"] {
            if !roles.iter().any(|r| r == usual) {
                roles.push(usual.to_owned());
            }
        }
    }
    roles
}

/// The rules gated on a role other than `role` (every gated rule for no
/// role), by role: (role, the rules' names).
fn gated_elsewhere(s: &Scenario, role: Option<&str>) -> Vec<(String, Vec<String>)> {
    let mut by_role: Vec<(String, Vec<String>)> = Vec::new();
    for rule in &s.rules {
        let Some(r) = &rule.scope.role else { continue };
        if Some(r.as_str()) == role {
            continue;
        }
        match by_role.iter_mut().find(|(n, _)| n == r) {
            Some((_, names)) => names.push(rule.name.clone()),
            None => by_role.push((r.clone(), vec![rule.name.clone()])),
        }
    }
    by_role
}

/// `rule(s) a, b apply only to role server; rule(s) c only to role client`.
fn gated_text(gated: &[(String, Vec<String>)]) -> String {
    gated
        .iter()
        .enumerate()
        .map(|(k, (role, names))| {
            let apply = if k == 0 { "apply only" } else { "only" };
            format!("rule(s) {} {apply} to role {role}", names.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The warnings `uroce run` prints as it loads scenario `s` for a process
/// of role `role`: rules gated on a role the process does not have (no
/// role given), or a role the scenario never names.
pub fn role_warnings(s: &Scenario, role: Option<&str>) -> Vec<String> {
    let roles = roles(s);
    let mut warnings = Vec::new();
    match role {
        None => {
            let gated = gated_elsewhere(s, None);
            if !gated.is_empty() {
                warnings.push(format!(
                    "scenario {}: {}; this process has no role (--role {})",
                    s.name,
                    gated_text(&gated),
                    roles.join("|")
                ));
            }
        }
        Some(r) if !roles.iter().any(|k| k == r) => {
            let known = if roles.is_empty() {
                "the scenario names none".to_owned()
            } else {
                format!("the known roles: {}", roles.join(", "))
            };
            warnings.push(format!(
                "scenario {}: no rule and no [expect.<role>] names role {r} ({known})",
                s.name
            ));
        }
        Some(_) => {}
    }
    warnings
}

/// Rule keys that say where a rule fires.
const FIRING_KEYS: [&str; 6] = ["nth", "message", "psn_offset", "qp", "times", "after_ms"];

/// The `[params]` that set where a rule fires (a rule's `nth`, `message`,
/// ... naming it): (param, its value, the rules' names). Read from the
/// file's text: `key = "param"` lines of its `[[rule]]`s.
pub fn firing_params(s: &Scenario) -> Vec<(String, i64, Vec<String>)> {
    let mut found: Vec<(String, i64, Vec<String>)> = Vec::new();
    let mut rule: Option<usize> = None;
    let mut next = 0;
    for line in s.text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            rule = (line == "[[rule]]").then_some(next);
            next += usize::from(line == "[[rule]]");
            continue;
        }
        let (Some(k), Some((key, value))) = (rule, line.split_once('=')) else { continue };
        let (key, value) = (key.trim(), value.trim().trim_matches('"'));
        let Some(v) = s.param(value) else { continue };
        let Some(r) = s.rules.get(k) else { continue };
        if !FIRING_KEYS.contains(&key) {
            continue;
        }
        match found.iter_mut().find(|(p, _, _)| p == value) {
            Some((_, _, names)) if !names.contains(&r.name) => names.push(r.name.clone()),
            Some(_) => {}
            None => found.push((value.to_owned(), v, vec![r.name.clone()])),
        }
    }
    found
}

/// How a run's report was shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// A temporary report of this process's own.
    Own,
    /// A report named by `--report` or `UROCE_SCENARIO_REPORT`.
    Named,
}

/// Why no rule of `s` fired in a run of `role` at `addr` whose report is
/// `report`: every likely reason, the likeliest first (no device opened,
/// a role the rules need, a param that sets the firing point, what the
/// rules here matched, a report the peer did not write to).
pub fn why_no_firing(
    s: &Scenario,
    role: Option<&str>,
    addr: IpAddr,
    sharing: Sharing,
    report: &Report,
) -> String {
    let mut why = Vec::new();
    if !report.devices.contains(&addr) {
        why.push(format!("no device opened at {addr} (the program opened none)"));
    }
    let gated = gated_elsewhere(s, role);
    let roles = roles(s);
    let here = |r: &uroce_faults::scenario::RuleSpec| {
        r.scope.role.as_deref().is_none_or(|x| Some(x) == role)
            && r.scope.device.is_none_or(|d| d == addr)
    };
    match role {
        None if !gated.is_empty() => why.push(format!(
            "{}; this process has no role (--role {})",
            gated_text(&gated),
            roles.join("|")
        )),
        Some(r) if !roles.iter().any(|k| k == r) => why.push(format!(
            "no rule names role {r} (the roles: {})",
            if roles.is_empty() { "none".to_owned() } else { roles.join(", ") }
        )),
        Some(r) if !gated.is_empty() && !s.rules.iter().any(here) => {
            why.push(format!("{}, not {r}: they fire in that process", gated_text(&gated)))
        }
        _ => {}
    }
    for (param, value, rules) in firing_params(s) {
        if s.rules.iter().any(|r| rules.contains(&r.name) && here(r)) {
            why.push(format!(
                "param {param} = {value} sets where rule(s) {} fire: set it for your program \
                 (--param {param}=N)",
                rules.join(", ")
            ));
        }
    }
    let mine: Vec<String> = report
        .matched
        .iter()
        .filter(|(a, _, _)| *a == addr)
        .map(|(_, rule, n)| format!("{rule} matched {}", plural(*n as usize, "packet")))
        .collect();
    if !mine.is_empty() {
        why.push(format!(
            "the program's traffic never reached a rule's firing point on this device ({})",
            mine.join(", ")
        ));
    }
    let others = report.devices.iter().any(|d| *d != addr);
    match sharing {
        Sharing::Own => why.push(
            "the report is this process's own: share one --report between the processes to \
             see the peer's firings"
                .to_owned(),
        ),
        Sharing::Named if !others => why.push(
            "no other device wrote to the report: give the peer's run the same --report".to_owned(),
        ),
        Sharing::Named => {}
    }
    if why.is_empty() {
        why.push("the program's traffic never reached a rule's firing point".to_owned());
    }
    why.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
1000000 scenario x 10.0.0.1 loaded at_us=0 from library seed 0
1000000 scenario x 10.0.0.2 0 loaded from library seed 0
1500000 scenario 10.0.0.2 500000 rule down fired 1: link_down on in SEND_ONLY
2100000 scenario x 10.0.0.1 completions success=9 errors=2 IBV_WC_RETRY_EXC_ERR=1 IBV_WC_WR_FLUSH_ERR=1 first_error=IBV_WC_RETRY_EXC_ERR qp=0x000011 wr_id=9 at_us=1040000
2100000 scenario x 10.0.0.1 async_events total=2 IBV_EVENT_QP_ACCESS_ERR=1 IBV_EVENT_PORT_ACTIVE=1
2100000 scenario x 10.0.0.1 async_event IBV_EVENT_PORT_ACTIVE port=1 at_us=0
2100000 scenario x 10.0.0.1 async_event IBV_EVENT_QP_ACCESS_ERR qp=0x000011 at_us=520000
2100000 scenario x 10.0.0.1 counters sent_pkts=30 completer_retry_err=7
2100000 scenario x 10.0.0.1 runtime_counters rx_datagrams=31 rx_dropped=2
";

    #[test]
    fn a_report_reads_back_on_the_wall_clock() {
        let r = Report::parse(REPORT, 0);
        assert_eq!(r.firings.len(), 1);
        assert_eq!(r.firings[0].wall_us, 1_500_000);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let s = r.summary_of(a).unwrap();
        assert_eq!((s.success, s.errors), (9, 2));
        assert_eq!(s.first_error, Some(("IBV_WC_RETRY_EXC_ERR".into(), 2_040_000)));
        assert_eq!(s.counters["completer_retry_err"], 7);
        assert!(r.summary_of("10.0.0.2".parse().unwrap()).is_none());
        // Lines before the run are ignored.
        assert!(Report::parse(REPORT, 1_600_000).firings.is_empty());

        let expect = RoleExpect {
            outcome: Some(Outcome::Error),
            status: Some("IBV_WC_RETRY_EXC_ERR".into()),
            within_ms: Some(600),
            min_counters: vec![("completer_retry_err".into(), 1)],
            max_counters: vec![("rcvd_rnr_err".into(), 0)],
            ..RoleExpect::default()
        };
        let v = check(&expect, Some(&s), &r.firings, Ended::Code(1), "");
        assert!(v.iter().all(|v| v.ok), "{v:?}");
        let strict = RoleExpect { within_ms: Some(500), ..expect };
        let v = check(&strict, Some(&s), &r.firings, Ended::Code(1), "");
        let bad: Vec<_> = v.iter().filter(|v| !v.ok).collect();
        assert_eq!(bad.len(), 1);
        assert!(bad[0].seen.starts_with("540.000 ms"), "{bad:?}");
        let killed = RoleExpect { exit: Some(ExpectExit::Killed), ..RoleExpect::default() };
        assert!(check(&killed, None, &[], Ended::Signal(9), "")[0].ok);
        assert!(!check(&killed, None, &[], Ended::Code(0), "")[0].ok);
    }

    #[test]
    fn async_events_and_runtime_counters_read_back() {
        let r = Report::parse(REPORT, 0);
        let s = r.summary_of("10.0.0.1".parse().unwrap()).unwrap();
        let events = s.async_events.as_ref().unwrap();
        assert_eq!(events["IBV_EVENT_QP_ACCESS_ERR"], 1);
        assert_eq!(events["IBV_EVENT_PORT_ACTIVE"], 1);
        assert!(!events.contains_key("total"));
        assert_eq!(s.raised.len(), 2);
        assert_eq!(
            s.raised[1],
            RaisedEvent {
                name: "IBV_EVENT_QP_ACCESS_ERR".into(),
                element: "qp=0x000011".into(),
                wall_us: 1_520_000
            }
        );
        assert_eq!(s.runtime_counters["rx_dropped"], 2);
        // `counters` and `runtime_counters` do not mix up.
        assert!(!s.counters.contains_key("rx_dropped"));
        assert_eq!(
            (s.counter("rx_dropped"), s.counter("sent_pkts"), s.counter("tx_errors")),
            (2, 30, 0)
        );
        // Two devices at one address add up.
        let twice = format!(
            "{REPORT}{}",
            REPORT.replace("1000000 scenario x 10.0.0.1 0", "1100000 scenario x 10.0.0.1 0")
        );
        let s2 = Report::parse(&twice, 0).summary_of("10.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(s2.async_events.as_ref().unwrap()["IBV_EVENT_QP_ACCESS_ERR"], 2);
        assert_eq!(s2.raised.len(), 4);
        assert_eq!(s2.runtime_counters["rx_dropped"], 4);
    }

    #[test]
    fn firings_are_timed_on_their_devices_clock() {
        // The firing's line was written 9 ms after the device's µs say it
        // fired (a slow batch); the device opened before this run began.
        let text = "\
1000000 scenario x 10.0.0.2 0 loaded from library seed 0
1509000 scenario 10.0.0.2 500000 rule r fired 1: fail_key x1 on in RC_RDMA_WRITE_FIRST
";
        let r = Report::parse(text, 1_200_000);
        assert_eq!(r.firings.len(), 1);
        assert_eq!(r.firings[0].wall_us, 1_500_000);
        // Without its `loaded` line, the line's own wall clock.
        let r = Report::parse(text.lines().nth(1).unwrap(), 0);
        assert_eq!(r.firings[0].wall_us, 1_509_000);
    }

    #[test]
    fn async_event_passes_fails_and_is_absent() {
        let r = Report::parse(REPORT, 0);
        let s = r.summary_of("10.0.0.1".parse().unwrap()).unwrap();
        let expect = |name: &str| RoleExpect {
            async_event: Some(name.into()),
            min_counters: vec![("rx_dropped".into(), 2)],
            max_counters: vec![("tx_errors".into(), 0)],
            ..RoleExpect::default()
        };
        // Raised (not the device's first event: PORT_ACTIVE is): passes,
        // timed from the first firing (1.5 s on the wall clock).
        let v = check(&expect("IBV_EVENT_QP_ACCESS_ERR"), Some(&s), &r.firings, Ended::Code(6), "");
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|v| v.ok), "{v:?}");
        assert_eq!(v[0].expected, "async_event = \"IBV_EVENT_QP_ACCESS_ERR\"");
        assert_eq!(
            v[0].seen,
            "IBV_EVENT_QP_ACCESS_ERR=1, the first on qp=0x000011 (+20.000 ms after the first firing)"
        );
        assert_eq!(v[1].seen, "rx_dropped=2");
        // Not raised: fails, listing what was.
        let v = check(&expect("IBV_EVENT_QP_FATAL"), Some(&s), &r.firings, Ended::Code(0), "");
        assert!(!v[0].ok);
        assert_eq!(v[0].seen, "async events IBV_EVENT_PORT_ACTIVE=1 IBV_EVENT_QP_ACCESS_ERR=1");
        // No summary (the program was killed), or a report without the
        // line: fails.
        let v = check(&expect("IBV_EVENT_QP_FATAL"), None, &[], Ended::Signal(9), "");
        assert!(!v[0].ok);
        assert_eq!(v[0].seen, "no summary in the report (killed by SIGKILL)");
        let old = DeviceSummary { async_events: None, ..s.clone() };
        let v = check(&expect("IBV_EVENT_QP_ACCESS_ERR"), Some(&old), &[], Ended::Code(0), "");
        assert!(!v[0].ok);
        assert_eq!(v[0].seen, "no async_events line in the report");
        // A device that raised none.
        let quiet =
            DeviceSummary { async_events: Some(BTreeMap::new()), ..DeviceSummary::default() };
        let v = check(&expect("IBV_EVENT_QP_ACCESS_ERR"), Some(&quiet), &[], Ended::Code(0), "");
        assert!(!v[0].ok);
        assert_eq!(v[0].seen, "async events none");
        // A runtime counter over its maximum fails like the HCA's.
        let mut noisy = s.clone();
        noisy.runtime_counters.insert("tx_errors".to_owned(), 3);
        let v = check(&expect("IBV_EVENT_QP_ACCESS_ERR"), Some(&noisy), &[], Ended::Code(0), "");
        assert!(v[0].ok && v[1].ok && !v[2].ok, "{v:?}");
        assert_eq!(v[2].seen, "tx_errors=3");
    }

    #[test]
    fn counter_names_are_the_hcas_and_the_runtimes() {
        let names = counter_names();
        assert!(names.contains(&"completer_retry_err"));
        assert!(names.contains(&"rx_dropped") && names.contains(&"faults_lost"));
        assert!(names.contains(&"link_rx_dropped"));
        // No name is both.
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        let e = RoleExpect {
            min_counters: vec![("no_such".into(), 1), ("tx_errors".into(), 0)],
            max_counters: vec![("rcvd_pkts".into(), 9)],
            ..RoleExpect::default()
        };
        assert_eq!(unknown_counters(&e), vec!["no_such".to_owned()]);
    }

    #[test]
    fn a_time_before_the_first_firing_reads_before() {
        let f = Fired { wall_us: 2_000_000, addr: "10.0.0.1".parse().unwrap(), text: "r".into() };
        assert_eq!(after_firing(1_500_000, Some(&f)), " (500.000 ms before the first firing)");
        assert_eq!(after_firing(2_020_000, Some(&f)), " (+20.000 ms after the first firing)");
        assert_eq!(after_firing(2_000_000, Some(&f)), " (+0.000 ms after the first firing)");
        assert_eq!(
            (plural(1, "rule"), plural(0, "rule"), plural(2, "rule")),
            ("1 rule".to_owned(), "0 rules".to_owned(), "2 rules".to_owned())
        );
    }

    #[test]
    fn roles_and_params_say_why_nothing_fired() {
        let me: IpAddr = "10.0.0.2".parse().unwrap();
        let rae = Scenario::load("remote-access-error").unwrap();
        assert_eq!(roles(&rae), ["server", "client"]);
        assert_eq!(
            role_warnings(&rae, None),
            ["scenario remote-access-error: rule(s) bad-key apply only to role server; this \
              process has no role (--role server|client)"]
        );
        assert!(role_warnings(&rae, Some("server")).is_empty());
        assert!(role_warnings(&rae, Some("client")).is_empty());
        let w = role_warnings(&rae, Some("srever"));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("names role srever (the known roles: server, client)"), "{w:?}");
        // No role in a scenario without roles: nothing to say.
        let lost = Scenario::load("lost-ack").unwrap();
        assert!(roles(&lost).is_empty() && role_warnings(&lost, None).is_empty());
        // Own report, no role: both reasons, the role first.
        let opened = Report::parse("1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n", 0);
        let why = why_no_firing(&rae, None, me, Sharing::Own, &opened);
        assert!(why.starts_with("rule(s) bad-key apply only to role server; this"), "{why}");
        assert!(why.contains("the report is this process's own"), "{why}");
        // A shared report the server wrote to, the client's role: the
        // rule is the server's.
        let shared = Report::parse(
            "1 scenario x 10.0.0.1 loaded at_us=0 from f seed 0\n\
             1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n",
            0,
        );
        let why = why_no_firing(&rae, Some("client"), me, Sharing::Named, &shared);
        assert_eq!(
            why,
            "rule(s) bad-key apply only to role server, not client: they fire in that process"
        );
        let why = why_no_firing(&lost, None, me, Sharing::Named, &shared);
        assert_eq!(why, "the program's traffic never reached a rule's firing point");
        let why = why_no_firing(&rae, Some("client"), me, Sharing::Named, &opened);
        assert!(why.contains("no other device wrote to the report"), "{why}");
        // The param that sets the firing point.
        let last = Scenario::load("lost-last-ack").unwrap();
        assert_eq!(
            firing_params(&last),
            [("messages".to_owned(), 1000, vec!["last-ack".to_owned()])]
        );
        let with_matches = Report::parse(
            "1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n\
             2 scenario lost-last-ack 10.0.0.2 rule last-ack matched 100 fired 0\n",
            0,
        );
        let why = why_no_firing(&last, None, me, Sharing::Named, &with_matches);
        assert!(
            why.starts_with(
                "param messages = 1000 sets where rule(s) last-ack fire: set it for your program \
                 (--param messages=N); the program's traffic never reached a rule's firing \
                 point on this device (last-ack matched 100 packets)"
            ),
            "{why}"
        );
        // No device opened.
        let why = why_no_firing(&lost, None, me, Sharing::Own, &Report::default());
        assert!(why.starts_with("no device opened at 10.0.0.2"), "{why}");
        assert!(firing_params(&Scenario::load("partition-heals").unwrap()).is_empty());
    }

    #[test]
    fn validate_names_unknown_counters_of_every_table() {
        for name in uroce_faults::scenario::library::NAMES {
            validate(&Scenario::load(name).unwrap()).unwrap();
        }
        let text = "[scenario]\nname = \"x\"\nsummary = \"s\"\n[expect]\noutcome = \"success\"\n\
                    [expect.client]\noutcome = \"success\"\nmax_counters = { nope = 1 }\n";
        let e = validate(&Scenario::parse(text, "f.toml").unwrap()).unwrap_err();
        assert!(
            e.starts_with(
                "scenario f.toml: [expect.client] names counters neither the HCA nor \
                           the runtime has: nope (known: "
            ),
            "{e}"
        );
    }
}
