//! The device's lines in a scenario's summary (after the port's own), each
//! written behind `scenario <name> <address> `:
//!
//! - `completions success=N errors=N [IBV_WC_...=N]... first_error=none|IBV_WC_... qp=0x.. wr_id=N at_us=N`
//! - `async_events total=N [IBV_EVENT_...=N]...`: every asynchronous event
//!   the device raised, taken by the application or not;
//! - `async_event IBV_EVENT_... qp=0x..|cq=N|srq=N|port=N at_us=N`: one line
//!   per event, in the order raised (the first
//!   [`uroce_hca::async_log::KEPT_EVENTS`]);
//! - `counters k=v ...`: the HCA's non-zero counters;
//! - `runtime_counters k=v ...`: the runtime's non-zero counters
//!   ([`super::UdpStats::named`]).
//!
//! Times (`at_us`) are the device's clock, µs since it opened; `uroce run`
//! puts them on the wall clock with the device's `loaded` line.

use super::UdpStats;
use uroce_device::types::EventType;
use uroce_faults::scenario::{ASYNC_EVENTS, WC_STATUSES};
use uroce_hca::async_log::{AsyncLog, RaisedEvent};
use uroce_hca::counters::Counters;
use uroce_hca::tally::CompletionTally;

/// The device's summary lines, without the `scenario <name> <address> `
/// in front.
pub(super) fn device_lines(
    tally: &CompletionTally,
    events: &AsyncLog,
    counters: &Counters,
    stats: &UdpStats,
) -> Vec<String> {
    let mut lines = vec![completions_line(tally), async_events_line(events)];
    lines.extend(events.kept().iter().map(async_event_line));
    lines.push(nonzero_line("counters", &counters.named()));
    lines.push(nonzero_line("runtime_counters", &stats.named()));
    lines
}

/// `completions success=N errors=N [IBV_WC_...=N ...] first_error=...`.
pub(super) fn completions_line(tally: &CompletionTally) -> String {
    let mut line = format!("completions success={} errors={}", tally.successes(), tally.errors());
    for (status, n) in tally.by_status() {
        if n > 0 && status.raw() != 0 {
            line.push_str(&format!(" {}={n}", status_name(status.raw())));
        }
    }
    match tally.first_error() {
        None => line.push_str(" first_error=none"),
        Some(e) => line.push_str(&format!(
            " first_error={} qp=0x{:06x} wr_id={} at_us={}",
            status_name(e.status.raw()),
            e.qpn.value(),
            e.wr_id,
            e.at.as_nanos() / 1_000
        )),
    }
    line
}

/// `async_events total=N [IBV_EVENT_...=N ...]`.
fn async_events_line(events: &AsyncLog) -> String {
    let mut line = format!("async_events total={}", events.total());
    for (event, n) in events.by_type() {
        line.push_str(&format!(" {}={n}", event_name(event)));
    }
    line
}

/// `async_event IBV_EVENT_... <element> at_us=N`.
fn async_event_line(e: &RaisedEvent) -> String {
    format!(
        "async_event {} {} at_us={}",
        event_name(e.event),
        element(e.event, e.element),
        e.at.as_nanos() / 1_000
    )
}

/// What an event concerns: `qp=0x..` (affiliated with a QP), `cq=N`,
/// `srq=N`, or `port=N` (unaffiliated).
fn element(event: EventType, element: u32) -> String {
    match event {
        EventType::CqErr => format!("cq={element}"),
        EventType::SrqErr | EventType::SrqLimitReached => format!("srq={element}"),
        EventType::PortActive | EventType::PortErr => format!("port={element}"),
        EventType::QpFatal
        | EventType::QpReqErr
        | EventType::QpAccessErr
        | EventType::CommEst
        | EventType::SqDrained
        | EventType::QpLastWqeReached => format!("qp=0x{element:06x}"),
    }
}

/// `name k=v ...` of the non-zero values.
fn nonzero_line(name: &str, named: &[(&'static str, u64)]) -> String {
    let nonzero: Vec<String> =
        named.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name} {}", nonzero.join(" "))
}

fn status_name(raw: u8) -> String {
    WC_STATUSES.get(usize::from(raw)).map_or_else(|| format!("status{raw}"), |s| (*s).to_owned())
}

/// The `IBV_EVENT_*` name (`ibv_event_type` order, as [`EventType`]'s
/// values).
fn event_name(event: EventType) -> String {
    let raw = event.raw();
    ASYNC_EVENTS.get(usize::from(raw)).map_or_else(|| format!("event{raw}"), |s| (*s).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_has_its_libibverbs_name() {
        let pairs = [
            (EventType::CqErr, "IBV_EVENT_CQ_ERR"),
            (EventType::QpFatal, "IBV_EVENT_QP_FATAL"),
            (EventType::QpReqErr, "IBV_EVENT_QP_REQ_ERR"),
            (EventType::QpAccessErr, "IBV_EVENT_QP_ACCESS_ERR"),
            (EventType::CommEst, "IBV_EVENT_COMM_EST"),
            (EventType::SqDrained, "IBV_EVENT_SQ_DRAINED"),
            (EventType::PortActive, "IBV_EVENT_PORT_ACTIVE"),
            (EventType::PortErr, "IBV_EVENT_PORT_ERR"),
            (EventType::SrqErr, "IBV_EVENT_SRQ_ERR"),
            (EventType::SrqLimitReached, "IBV_EVENT_SRQ_LIMIT_REACHED"),
            (EventType::QpLastWqeReached, "IBV_EVENT_QP_LAST_WQE_REACHED"),
        ];
        for (event, name) in pairs {
            assert_eq!(event_name(event), name);
        }
    }

    #[test]
    fn the_lines_name_events_and_skip_zero_counters() {
        let stats = UdpStats { rx_dropped: 2, tx_packets: 7, ..UdpStats::default() };
        let lines = device_lines(
            &CompletionTally::default(),
            &AsyncLog::default(),
            &Counters::default(),
            &stats,
        );
        assert_eq!(
            lines,
            vec![
                "completions success=0 errors=0 first_error=none".to_owned(),
                "async_events total=0".to_owned(),
                "counters ".to_owned(),
                "runtime_counters rx_dropped=2 tx_packets=7".to_owned(),
            ]
        );
        assert_eq!(element(EventType::QpAccessErr, 0x11), "qp=0x000011");
        assert_eq!(element(EventType::CqErr, 3), "cq=3");
        assert_eq!(element(EventType::PortActive, 1), "port=1");
    }
}
