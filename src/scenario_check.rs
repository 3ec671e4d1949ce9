//! What `uroce run --scenario` reads back after the program ends: the
//! scenario report the device wrote (`UROCE_SCENARIO_REPORT`; design note
//! fault-scenarios.md §10b), summarized on one screen, and with `--check`
//! compared against the scenario's `[expect]` for the run's role.
//!
//! A report line is `<wall clock µs since the epoch> <line>`, the line one
//! of: `scenario <name> <addr> 0 loaded from ...` (a device opened: its
//! device clock starts at that wall clock), `scenario <addr> <µs> rule ...
//! fired ...` (a firing, in device µs), `scenario <addr> <µs> crash: ...`,
//! and the summary (`scenario <name> <addr> completions ...`, `... counters
//! k=v ...`, the port's lines). Times of different devices (and processes)
//! are compared on the wall clock: a device's µs plus its `loaded` line's
//! wall clock.

use std::collections::BTreeMap;
use std::net::IpAddr;
use uroce_faults::scenario::{ExpectExit, Outcome, RoleExpect};

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

/// A device's summary (`completions` and `counters` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSummary {
    /// `success=`.
    pub success: u64,
    /// `errors=`.
    pub errors: u64,
    /// The first error: its `IBV_WC_*` name and wall clock (µs).
    pub first_error: Option<(String, u64)>,
    /// The `counters` line (zeros are absent).
    pub counters: BTreeMap<String, u64>,
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
            if wall < since_us {
                continue;
            }
            let t: Vec<&str> = rest.splitn(5, ' ').collect();
            if t.len() < 4 || t[0] != "scenario" {
                continue;
            }
            if let (Ok(addr), Ok(_)) = (t[1].parse::<IpAddr>(), t[2].parse::<u64>()) {
                // `scenario <addr> <µs> ...`: a firing or a device line.
                // A firing's line is written as it fires: its wall clock
                // is the firing's (the device's µs need the device's
                // `loaded` line, which may predate `since_us`).
                let what = rest.splitn(4, ' ').nth(3).unwrap_or("");
                if what.starts_with("rule ") {
                    report.firings.push(Fired { wall_us: wall, addr, text: what.to_owned() });
                } else if what.starts_with("crash:") {
                    report.kills += 1;
                }
                continue;
            }
            let Ok(addr) = t[2].parse::<IpAddr>() else { continue };
            let what = rest.splitn(4, ' ').nth(3).unwrap_or("");
            if what.starts_with("0 loaded ") {
                base.insert(addr, wall);
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
            } else if let Some(fields) = what.strip_prefix("counters") {
                let counters = fields.split_whitespace().filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_owned(), v.parse::<u64>().ok()?))
                });
                match report.summaries.iter_mut().rev().find(|(a, _)| *a == addr) {
                    Some((_, s)) => s.counters.extend(counters),
                    None => report.summaries.push((
                        addr,
                        DeviceSummary { counters: counters.collect(), ..Default::default() },
                    )),
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
        }
        total
    }
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

/// The counter names `min_counters`/`max_counters` may use (the HCA's).
pub fn counter_names() -> Vec<&'static str> {
    uroce_hca::counters::Counters::default().named().iter().map(|(n, _)| *n).collect()
}

/// The expectation's counters that the HCA does not have.
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
/// every firing in the report; `ended`) against `expect`.
pub fn check(
    expect: &RoleExpect,
    summary: Option<&DeviceSummary>,
    firings: &[Fired],
    ended: Ended,
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
            (None, _) => {
                ("no firing in the report (share one --report between the processes)".into(), false)
            }
            (_, None) => ("no error completion".into(), false),
        };
        push(format!("within_ms = {ms}"), seen, ok);
    }
    let count = |name: &str| summary.and_then(|s| s.counters.get(name).copied()).unwrap_or(0);
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

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
1000000 scenario x 10.0.0.1 0 loaded from library seed 0
1000000 scenario x 10.0.0.2 0 loaded from library seed 0
1500000 scenario 10.0.0.2 500000 rule down fired 1: link_down on in SEND_ONLY
2100000 scenario x 10.0.0.1 completions success=9 errors=2 IBV_WC_RETRY_EXC_ERR=1 IBV_WC_WR_FLUSH_ERR=1 first_error=IBV_WC_RETRY_EXC_ERR qp=0x000011 wr_id=9 at_us=1040000
2100000 scenario x 10.0.0.1 counters sent_pkts=30 completer_retry_err=7
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
        let v = check(&expect, Some(&s), &r.firings, Ended::Code(1));
        assert!(v.iter().all(|v| v.ok), "{v:?}");
        let strict = RoleExpect { within_ms: Some(500), ..expect };
        let v = check(&strict, Some(&s), &r.firings, Ended::Code(1));
        let bad: Vec<_> = v.iter().filter(|v| !v.ok).collect();
        assert_eq!(bad.len(), 1);
        assert!(bad[0].seen.starts_with("540.000 ms"), "{bad:?}");
        let killed = RoleExpect { exit: Some(ExpectExit::Killed), ..RoleExpect::default() };
        assert!(check(&killed, None, &[], Ended::Signal(9))[0].ok);
        assert!(!check(&killed, None, &[], Ended::Code(0))[0].ok);
    }

    #[test]
    fn counter_names_are_the_hcas() {
        assert!(counter_names().contains(&"completer_retry_err"));
        let e = RoleExpect { min_counters: vec![("no_such".into(), 1)], ..RoleExpect::default() };
        assert_eq!(unknown_counters(&e), vec!["no_such".to_owned()]);
    }
}
