//! What the tools print at exit about the devices they opened: the
//! `--counters` lines on standard error (`counter <address> <name>
//! <value>` for the HCA's, `runtime_counter <address> <name> <value>` for
//! the runtime's).

use std::collections::BTreeMap;

/// The first words of the counters lines.
const KINDS: [&str; 2] = ["counter", "runtime_counter"];

/// The counters lines of a tool's standard error, as (first word, device
/// address, counter name) → value. Other lines are skipped; a counters
/// line of another shape fails the test.
pub fn counter_lines(stderr: &str) -> BTreeMap<(String, String, String), u64> {
    let mut counters = BTreeMap::new();
    for line in stderr.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if !KINDS.contains(&fields[0]) {
            continue;
        }
        assert_eq!(fields.len(), 4, "a counters line is `<kind> <address> <name> <value>`: {line}");
        let value: u64 = fields[3].parse().unwrap_or_else(|_| panic!("not a count: {line}"));
        let key = (fields[0].to_string(), fields[1].to_string(), fields[2].to_string());
        assert!(counters.insert(key, value).is_none(), "printed twice: {line}");
    }
    counters
}

/// Checks the `--counters` lines of the device at `addr` in a tool's
/// standard error: its HCA sent and received packets (`sent_pkts`,
/// `rcvd_pkts` at least `min_packets`), so did its runtime (`tx_packets`,
/// `rx_datagrams`), and no zero value is printed. Returns the HCA's
/// counters by name.
pub fn assert_traffic_counted(stderr: &str, addr: &str, min_packets: u64) -> BTreeMap<String, u64> {
    let all = counter_lines(stderr);
    assert!(all.values().all(|&v| v > 0), "a zero counter is printed:\n{stderr}");
    let of = |kind: &str| -> BTreeMap<String, u64> {
        all.iter()
            .filter(|((k, a, _), _)| k == kind && a == addr)
            .map(|((_, _, name), &value)| (name.clone(), value))
            .collect()
    };
    let (hca, runtime) = (of("counter"), of("runtime_counter"));
    for (group, name) in [
        (&hca, "sent_pkts"),
        (&hca, "rcvd_pkts"),
        (&runtime, "tx_packets"),
        (&runtime, "rx_datagrams"),
    ] {
        let value = group.get(name).copied().unwrap_or(0);
        assert!(value >= min_packets, "{addr}: {name} = {value} < {min_packets}:\n{stderr}");
    }
    assert!(!hca.contains_key("dma_faults"), "{addr}: no fault was met:\n{stderr}");
    hca
}

/// Checks that a tool printed no counters lines (it was not asked to).
pub fn assert_no_counters(output: &str) {
    let lines = counter_lines(output);
    assert!(lines.is_empty(), "counters printed without --counters: {lines:?}");
}
