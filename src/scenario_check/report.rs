//! The scenario report read back, on the wall clock ([`Report::parse`]).
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

use std::collections::BTreeMap;
use std::net::IpAddr;

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
    /// The port's own summary lines as written (`rule NAME matched N
    /// fired M`, `packets in=N out=N ...`), by device.
    pub port_lines: Vec<(IpAddr, String)>,
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
            if what.starts_with("rule ") || what.starts_with("packets ") {
                report.port_lines.push((addr, what.to_owned()));
            }
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

#[cfg(test)]
mod tests {
    use super::super::test_report::REPORT;
    use super::*;

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
}
