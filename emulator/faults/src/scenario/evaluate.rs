//! `[expect]` evaluated against what a device observed ([`evaluate`]): the
//! one evaluator of `uroce run --check` (which reads [`Observed`] from the
//! scenario report) and of the Rust harness (`uroce_harness::Report::check`,
//! which reads it from the simulated world). Plain names and numbers: the
//! caller names statuses (`IBV_WC_*`), events (`IBV_EVENT_*`) and counters,
//! and puts every time on one clock in µs (the wall clock, or virtual time).

use super::expect::{ExpectExit, Outcome, RoleExpect};
use std::collections::BTreeMap;

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Whether a crash (or a signal) killed it: `exit = "killed"` holds.
    pub killed: bool,
    /// What to print (`exit status 1`, `killed by SIGKILL`).
    pub text: String,
}

/// The first firing of any rule, on any device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstFiring {
    /// When (µs).
    pub at_us: u64,
    /// Which (`rule down fired 1`).
    pub rule: String,
    /// Where (the device's address, `node0`).
    pub place: String,
}

/// One asynchronous event a device raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    /// Its `IBV_EVENT_*` name.
    pub name: String,
    /// What it concerns: `qp=0x..`, `cq=N`, `srq=N` or `port=N`.
    pub element: String,
    /// When (µs).
    pub at_us: u64,
}

/// What one device (or a process's devices together) came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Successful completions.
    pub success: u64,
    /// Completions in error (flushes included).
    pub errors: u64,
    /// The first error: its `IBV_WC_*` name and time (µs).
    pub first_error: Option<(String, u64)>,
    /// Counters by name (the HCA's, the runtime's).
    pub counters: BTreeMap<String, u64>,
    /// `None`: a counter absent from `counters` is 0. `Some(why)`: it was
    /// not counted here, and an expectation on it fails saying why.
    pub uncounted: Option<String>,
    /// Every asynchronous event raised, by name (`Err`: why they are not
    /// known).
    pub async_events: Result<BTreeMap<String, u64>, String>,
    /// The events raised one by one (the first few), in order.
    pub raised: Vec<Raised>,
}

/// What a device observed under a scenario, for [`evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// How the process ended (`None`: not known).
    pub exit: Option<Exit>,
    /// The device (`Err`: why nothing is known of it, as printed).
    pub device: Result<Device, String>,
    /// The first firing (`Err`: what to print when there was none).
    pub first_firing: Result<FirstFiring, String>,
}

/// One expectation evaluated: what it said, what was seen, whether it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectLine {
    /// `outcome = "success"`, `completer_retry_err >= 1`, ...
    pub expected: String,
    /// What was observed.
    pub seen: String,
    /// Whether it held.
    pub ok: bool,
}

/// Each expectation of `expect` against `seen`, in a fixed order: `exit`,
/// `outcome`, `status`, `within_ms` (from the first firing to the first
/// error), `async_event` (raised at least once, whenever), `min_counters`,
/// `max_counters`. `observe` (prose) is not evaluated.
pub fn evaluate(expect: &RoleExpect, seen: &Observed) -> Vec<ExpectLine> {
    let mut v = Vec::new();
    let mut push =
        |expected: String, seen: String, ok: bool| v.push(ExpectLine { expected, seen, ok });
    if let Some(ExpectExit::Killed) = expect.exit {
        let (text, ok) = match &seen.exit {
            Some(e) => (e.text.clone(), e.killed),
            None => ("the exit is not known".to_owned(), false),
        };
        push("exit = \"killed\"".into(), text, ok);
    }
    let device = seen.device.as_ref().ok();
    let none = || seen.device.as_ref().err().cloned().unwrap_or_default();
    if let Some(outcome) = expect.outcome {
        let (want, seen, ok) = match (outcome, device) {
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
        let seen = device.map_or_else(none, |s| {
            s.first_error
                .as_ref()
                .map_or("first_error=none".to_owned(), |(n, _)| format!("first_error={n}"))
        });
        let ok = device.and_then(|s| s.first_error.as_ref()).is_some_and(|(n, _)| n == status);
        push(format!("status = \"{status}\""), seen, ok);
    }
    if let Some(ms) = expect.within_ms {
        let error = device.and_then(|s| s.first_error.as_ref());
        let (seen, ok) = match (&seen.first_firing, error) {
            (Ok(f), Some((_, at))) => {
                let took = at.saturating_sub(f.at_us);
                (
                    format!(
                        "{}.{:03} ms from the first firing ({} at {}) to the first error",
                        took / 1000,
                        took % 1000,
                        f.rule,
                        f.place
                    ),
                    took <= ms * 1000,
                )
            }
            (Err(why), _) => (why.clone(), false),
            (_, None) => ("no error completion".into(), false),
        };
        push(format!("within_ms = {ms}"), seen, ok);
    }
    if let Some(name) = &expect.async_event {
        let first = seen.first_firing.as_ref().ok().map(|f| f.at_us);
        let (text, ok) = match device {
            Some(s) => async_seen(s, name, first),
            None => (none(), false),
        };
        push(format!("async_event = \"{name}\""), text, ok);
    }
    let count = |name: &str| -> Result<u64, String> {
        let Some(s) = device else { return Err(none()) };
        match (s.counters.get(name), &s.uncounted) {
            (Some(n), _) => Ok(*n),
            (None, None) => Ok(0),
            (None, Some(why)) => Err(format!("{name} not counted: {why}")),
        }
    };
    for (name, min) in &expect.min_counters {
        match count(name) {
            Ok(n) => push(format!("{name} >= {min}"), format!("{name}={n}"), n >= *min),
            Err(why) => push(format!("{name} >= {min}"), why, false),
        }
    }
    for (name, max) in &expect.max_counters {
        match count(name) {
            Ok(n) => push(format!("{name} <= {max}"), format!("{name}={n}"), n <= *max),
            Err(why) => push(format!("{name} <= {max}"), why, false),
        }
    }
    v
}

/// What `s` says of asynchronous event `name`, and whether it raised one.
/// `first`: the first firing's time, to time the event from.
fn async_seen(s: &Device, name: &str, first: Option<u64>) -> (String, bool) {
    let events = match &s.async_events {
        Ok(events) => events,
        Err(why) => return (why.clone(), false),
    };
    let n = events.get(name).copied().unwrap_or(0);
    if n == 0 {
        let all: Vec<String> = events.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let all = if all.is_empty() { "none".to_owned() } else { all.join(" ") };
        return (format!("async events {all}"), false);
    }
    let seen = match s.raised.iter().find(|e| e.name == name) {
        Some(e) => {
            format!("{name}={n}, the first on {}{}", e.element, after_first_firing(e.at_us, first))
        }
        None => format!("{name}={n}"),
    };
    (seen, true)
}

/// ` (+X ms after the first firing)` (` (X ms before the first firing)`
/// for what came first), or nothing without a firing (`first`: its time).
pub fn after_first_firing(at_us: u64, first: Option<u64>) -> String {
    match first {
        Some(f) if at_us < f => {
            let ms = (f - at_us) as f64 / 1000.0;
            format!(" ({ms:.3} ms before the first firing)")
        }
        Some(f) => {
            let ms = (at_us - f) as f64 / 1000.0;
            format!(" (+{ms:.3} ms after the first firing)")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Observed {
        Observed {
            exit: Some(Exit { killed: false, text: "exit status 1".into() }),
            device: Ok(Device {
                success: 9,
                errors: 2,
                first_error: Some(("IBV_WC_RETRY_EXC_ERR".into(), 2_040_000)),
                counters: [("completer_retry_err".to_owned(), 7)].into_iter().collect(),
                uncounted: None,
                async_events: Ok([("IBV_EVENT_QP_FATAL".to_owned(), 1)].into_iter().collect()),
                raised: vec![Raised {
                    name: "IBV_EVENT_QP_FATAL".into(),
                    element: "qp=0x000011".into(),
                    at_us: 1_520_000,
                }],
            }),
            first_firing: Ok(FirstFiring {
                at_us: 1_500_000,
                rule: "rule down fired 1".into(),
                place: "node0".into(),
            }),
        }
    }

    #[test]
    fn every_key_is_evaluated_in_order() {
        let expect = RoleExpect {
            outcome: Some(Outcome::Error),
            status: Some("IBV_WC_RETRY_EXC_ERR".into()),
            within_ms: Some(600),
            async_event: Some("IBV_EVENT_QP_FATAL".into()),
            min_counters: vec![("completer_retry_err".into(), 1)],
            max_counters: vec![("rcvd_rnr_err".into(), 0)],
            exit: Some(ExpectExit::Killed),
            observe: Some("prose".into()),
        };
        let v = evaluate(&expect, &seen());
        let got: Vec<(bool, &str, &str)> =
            v.iter().map(|l| (l.ok, l.expected.as_str(), l.seen.as_str())).collect();
        assert_eq!(
            got,
            [
                (false, "exit = \"killed\"", "exit status 1"),
                (true, "outcome = \"error\"", "success=9 errors=2"),
                (true, "status = \"IBV_WC_RETRY_EXC_ERR\"", "first_error=IBV_WC_RETRY_EXC_ERR"),
                (
                    true,
                    "within_ms = 600",
                    "540.000 ms from the first firing (rule down fired 1 at node0) to the first \
                     error"
                ),
                (
                    true,
                    "async_event = \"IBV_EVENT_QP_FATAL\"",
                    "IBV_EVENT_QP_FATAL=1, the first on qp=0x000011 (+20.000 ms after the first \
                     firing)"
                ),
                (true, "completer_retry_err >= 1", "completer_retry_err=7"),
                (true, "rcvd_rnr_err <= 0", "rcvd_rnr_err=0"),
            ]
        );
    }

    #[test]
    fn what_was_not_seen_fails_saying_why() {
        let expect = RoleExpect {
            outcome: Some(Outcome::Success),
            within_ms: Some(10),
            async_event: Some("IBV_EVENT_QP_FATAL".into()),
            min_counters: vec![("rx_dropped".into(), 1)],
            exit: Some(ExpectExit::Killed),
            ..RoleExpect::default()
        };
        let mut s = seen();
        s.exit = None;
        s.first_firing = Err("no firing in the run".into());
        if let Ok(d) = s.device.as_mut() {
            d.uncounted = Some("the harness has no runtime counters".into());
            d.async_events = Err("no async events recorded".into());
        }
        let v = evaluate(&expect, &s);
        let got: Vec<(bool, &str)> = v.iter().map(|l| (l.ok, l.seen.as_str())).collect();
        assert_eq!(
            got,
            [
                (false, "the exit is not known"),
                (false, "success=9 errors=2"),
                (false, "no firing in the run"),
                (false, "no async events recorded"),
                (false, "rx_dropped not counted: the harness has no runtime counters"),
            ]
        );
        s.device = Err("no summary".into());
        let v = evaluate(&expect, &s);
        assert!(v.iter().all(|l| !l.ok));
        assert_eq!(v[1].seen, "no summary");
        assert_eq!(v[2].seen, "no firing in the run");
        assert_eq!(v[4].seen, "no summary");
    }
}
