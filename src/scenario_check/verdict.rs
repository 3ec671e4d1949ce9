//! A run compared against its role's `[expect]` ([`check`]).
//!
//! `async_event = "NAME"` holds when this process's device raised at least
//! one event of that name during the run, whenever it came and whether or
//! not the program read it (every device raises `IBV_EVENT_PORT_ACTIVE`
//! first, as it opens, so "the first event" would say nothing).

use super::report::{DeviceSummary, Fired};
use uroce_faults::scenario::{
    after_first_firing, evaluate, Device, Exit, ExpectLine, FirstFiring, Observed, Raised,
    RoleExpect,
};

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

/// One expectation checked: what it said, what was seen, whether it held
/// (the scenario crate's evaluator's line).
pub type Verdict = ExpectLine;

/// Compares what happened (`summary`: this process's devices; `firings`:
/// every firing in the report; `ended`) against `expect`. `no_firing`:
/// why the report may hold no firing ([`why_no_firing`]), for `within_ms`.
/// The evaluation is [`uroce_faults::scenario::evaluate`]'s, of what the
/// report says ([`observed`]).
///
/// [`why_no_firing`]: super::why_no_firing
pub fn check(
    expect: &RoleExpect,
    summary: Option<&DeviceSummary>,
    firings: &[Fired],
    ended: Ended,
    no_firing: &str,
) -> Vec<Verdict> {
    evaluate(expect, &observed(summary, firings, ended, no_firing))
}

/// What the report says a process observed, for the evaluator: its
/// devices' summary (the HCA's and the runtime's counters together,
/// absent ones 0), the report's first firing, how the program ended.
pub fn observed(
    summary: Option<&DeviceSummary>,
    firings: &[Fired],
    ended: Ended,
    no_firing: &str,
) -> Observed {
    let ended_text = match ended {
        Ended::Code(c) => format!("exit status {c}"),
        Ended::Signal(s) => format!("killed by {}", signal_name(s)),
    };
    let device = summary.map(|s| Device {
        success: s.success,
        errors: s.errors,
        first_error: s.first_error.clone(),
        // A name is the HCA's or the runtime's, never both.
        counters: s
            .runtime_counters
            .iter()
            .chain(&s.counters)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        uncounted: None,
        async_events: s
            .async_events
            .clone()
            .ok_or_else(|| "no async_events line in the report".to_owned()),
        raised: s
            .raised
            .iter()
            .map(|e| Raised { name: e.name.clone(), element: e.element.clone(), at_us: e.wall_us })
            .collect(),
    });
    Observed {
        exit: Some(Exit { killed: ended == Ended::Signal(9), text: ended_text.clone() }),
        device: device.ok_or_else(|| format!("no summary in the report ({ended_text})")),
        first_firing: firings
            .first()
            .map(|f| FirstFiring {
                at_us: f.wall_us,
                rule: f.text.split(':').next().unwrap_or("").to_owned(),
                place: f.addr.to_string(),
            })
            .ok_or_else(|| format!("no firing in the report ({no_firing})")),
    }
}

/// ` (+X ms after the first firing)` (` (X ms before the first firing)`
/// for what came first), or nothing without a firing.
pub fn after_firing(wall_us: u64, first: Option<&Fired>) -> String {
    after_first_firing(wall_us, first.map(|f| f.wall_us))
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
    use uroce_faults::scenario::{ExpectExit, Outcome};

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
