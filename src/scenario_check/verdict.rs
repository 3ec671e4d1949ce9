//! A run compared against its role's `[expect]` ([`check`]).
//!
//! `async_event = "NAME"` holds when this process's device raised at least
//! one event of that name during the run, whenever it came and whether or
//! not the program read it (every device raises `IBV_EVENT_PORT_ACTIVE`
//! first, as it opens, so "the first event" would say nothing).

use super::report::{DeviceSummary, Fired};
use uroce_faults::scenario::{ExpectExit, Outcome, RoleExpect};

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

#[cfg(test)]
mod tests {
    use super::super::report::Report;
    use super::super::test_report::REPORT;
    use super::*;
    use std::collections::BTreeMap;
    use std::net::IpAddr;

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
}
