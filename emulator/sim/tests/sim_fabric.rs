//! Scenario tests of the simulated fabric, driven by a toy endpoint that
//! sends numbered RoCEv2 packets (built with the wire crate), counts what it
//! receives and keeps a timer.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use uroce_hca::{Endpoint, Instant, Transmit};
use uroce_sim::{
    Action, CapturePoint, DropReason, Fabric, FabricConfig, FabricCounters, FaultConfig, Matcher,
    NodeId, Probability, Rule, SharedBuffer, TraceEvent,
};
use uroce_wire::aeth::{self, Syndrome};
use uroce_wire::frame::{classify, Classified, FrameRepr, Link};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::roce::{self, ExtHeaders};
use uroce_wire::{bth, Mask, Opcode, Psn, Qpn};

const LATENCY_NS: u64 = 2_000;

fn ns(n: u64) -> Instant {
    Instant::from_nanos(n)
}

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000)
}

fn ipv4(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, u8::try_from(node + 1).unwrap())
}

fn ip(node: usize) -> IpAddr {
    IpAddr::V4(ipv4(node))
}

/// A RoCEv2 packet (IPv4, no Ethernet) with a valid ICRC.
fn build(
    from: Ipv4Addr,
    to: Ipv4Addr,
    opcode: Opcode,
    qpn: u32,
    psn: u32,
    payload: &[u8],
) -> Vec<u8> {
    let bth = bth::Repr::new(opcode, Qpn::new(qpn), Psn::new(psn), payload.len());
    let mut ext = ExtHeaders::default();
    if opcode == Opcode::RC_ACKNOWLEDGE {
        ext.aeth = Some(aeth::Repr { syndrome: Syndrome::Ack { credit_code: 31 }, msn: psn });
    }
    let frame =
        FrameRepr::ipv4((from, to), psn as u16, 0xc000, roce::Repr { bth, ext, payload }).unwrap();
    let mut buf = vec![0; frame.buffer_len()];
    frame.emit(&mut buf).unwrap();
    buf
}

/// What the toy saw of one received packet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    at: Instant,
    src: IpAddr,
    opcode: Opcode,
    qpn: u32,
    psn: u32,
    icrc_ok: bool,
}

/// Sends one packet every `interval_ns`.
#[derive(Debug, Clone)]
struct Ticker {
    next_at: Instant,
    interval_ns: u64,
    left: u32,
    to: usize,
    qpn: u32,
    next_psn: u32,
}

/// The toy endpoint.
#[derive(Debug, Clone)]
struct Toy {
    node: usize,
    addrs: [IpAddr; 1],
    outbox: VecDeque<(IpAddr, Vec<u8>)>,
    got: Vec<Got>,
    not_roce: u64,
    /// Answer every intact RC SEND_ONLY with an ACK of the same PSN.
    echo: bool,
    ticker: Option<Ticker>,
}

impl Toy {
    fn new(node: usize) -> Toy {
        Toy {
            node,
            addrs: [ip(node)],
            outbox: VecDeque::new(),
            got: Vec::new(),
            not_roce: 0,
            echo: false,
            ticker: None,
        }
    }

    fn queue(&mut self, to: usize, opcode: Opcode, qpn: u32, psn: u32, payload_len: usize) {
        let payload: Vec<u8> = (0..payload_len).map(|i| (psn as usize + i) as u8).collect();
        self.outbox
            .push_back((ip(to), build(ipv4(self.node), ipv4(to), opcode, qpn, psn, &payload)));
    }

    fn queue_raw(&mut self, to: IpAddr, bytes: Vec<u8>) {
        self.outbox.push_back((to, bytes));
    }

    fn psns(&self) -> Vec<u32> {
        self.got.iter().map(|g| g.psn).collect()
    }
}

impl Endpoint for Toy {
    fn addresses(&self) -> &[IpAddr] {
        &self.addrs
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        let Classified::Roce(frame) = classify(packet, Link::RawIp) else {
            self.not_roce += 1;
            return;
        };
        let Ok(header) = bth::Packet::new_checked(frame.transport()) else {
            self.not_roce += 1;
            return;
        };
        let got = Got {
            at: now,
            src: frame.ip.source(),
            opcode: header.opcode(),
            qpn: header.dest_qpn().value(),
            psn: header.psn().value(),
            icrc_ok: frame.icrc_ok(),
        };
        if self.echo && got.icrc_ok && got.opcode == Opcode::RC_SEND_ONLY {
            if let IpAddr::V4(src) = got.src {
                let ack =
                    build(ipv4(self.node), src, Opcode::RC_ACKNOWLEDGE, got.qpn, got.psn, &[]);
                self.outbox.push_back((got.src, ack));
            }
        }
        self.got.push(got);
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (destination, bytes) = self.outbox.pop_front()?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        Some(Transmit::new(destination, bytes.len()))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ticker.as_ref().filter(|t| t.left > 0).map(|t| t.next_at)
    }

    fn handle_timeout(&mut self, now: Instant) {
        let Some(mut t) = self.ticker.take() else { return };
        while t.left > 0 && t.next_at <= now {
            self.queue(t.to, Opcode::RC_SEND_ONLY, t.qpn, t.next_psn, 16);
            t.next_psn += 1;
            t.left -= 1;
            t.next_at = t.next_at.plus_nanos(t.interval_ns);
        }
        self.ticker = Some(t);
    }
}

fn config(seed: u64) -> FabricConfig {
    FabricConfig { latency_ns: LATENCY_NS, ..FabricConfig::new(seed) }
}

fn fabric(config: FabricConfig, nodes: usize) -> Fabric<Toy> {
    Fabric::new(config, (0..nodes).map(Toy::new).collect())
}

/// Node `from` sends `count` packets, one every `interval_ns` from `start`.
fn tick(f: &mut Fabric<Toy>, from: usize, to: usize, start: Instant, interval_ns: u64, count: u32) {
    f.endpoint_mut(NodeId(from)).ticker =
        Some(Ticker { next_at: start, interval_ns, left: count, to, qpn: 17, next_psn: 0 });
}

/// Node `from` queues `count` RC SEND_ONLY packets to QP 17, PSNs 0.., now.
fn burst(f: &mut Fabric<Toy>, from: usize, to: usize, count: u32) {
    let node = f.endpoint_mut(NodeId(from));
    for psn in 0..count {
        node.queue(to, Opcode::RC_SEND_ONLY, 17, psn, 16);
    }
}

#[test]
fn lossless_delivery_in_order_after_the_latency() {
    let mut f = fabric(config(1), 2);
    f.endpoint_mut(NodeId(1)).echo = true;
    burst(&mut f, 0, 1, 100);
    assert!(f.run_until_idle(us(1_000)));

    let rx = &f.endpoint(NodeId(1)).got;
    assert_eq!(rx.len(), 100);
    assert!(rx.iter().all(|g| g.at == ns(LATENCY_NS) && g.icrc_ok && g.src == ip(0)));
    assert_eq!(f.endpoint(NodeId(1)).psns(), (0..100).collect::<Vec<_>>());
    let acks = &f.endpoint(NodeId(0)).got;
    assert_eq!(acks.len(), 100);
    assert!(acks.iter().all(|g| g.at == ns(2 * LATENCY_NS) && g.opcode == Opcode::RC_ACKNOWLEDGE));
    assert_eq!(f.endpoint(NodeId(0)).psns(), (0..100).collect::<Vec<_>>());

    let c = f.counters();
    assert_eq!((c.sent, c.delivered, c.dropped()), (200, 200, 0));
    assert_eq!(f.now(), ns(2 * LATENCY_NS));
    assert_eq!(f.step(), None, "nothing left to do");
}

#[test]
fn latency_jitter_spreads_arrivals_keeps_each_link_in_order_and_follows_the_seed() {
    let run = |seed: u64, jitter_ns: u64| {
        let mut f = fabric(FabricConfig { latency_jitter_ns: jitter_ns, ..config(seed) }, 2);
        tick(&mut f, 0, 1, us(10), 300, 40);
        f.run_until(us(100));
        let got = &f.endpoint(NodeId(1)).got;
        (got.iter().map(|g| g.at.as_nanos()).collect::<Vec<u64>>(), f.endpoint(NodeId(1)).psns())
    };
    let (at, psns) = run(1, 1_000);
    assert_eq!(psns, (0..40).collect::<Vec<_>>(), "one link: in order, every packet");
    for (k, t) in at.iter().enumerate() {
        let sent = 10_000 + 300 * k as u64;
        assert!(*t >= sent + LATENCY_NS && *t <= sent + LATENCY_NS + 1_000, "packet {k} at {t}");
    }
    assert!(at.windows(2).all(|w| w[0] <= w[1]));
    assert!(at.iter().enumerate().any(|(k, t)| *t != 10_000 + 300 * k as u64 + LATENCY_NS));
    assert_eq!(run(1, 1_000), (at.clone(), psns.clone()), "the same seed, the same arrivals");
    assert_ne!(run(2, 1_000).0, at, "another seed, other arrivals");
    let exact: Vec<u64> = (0..40).map(|k| 10_000 + 300 * k + LATENCY_NS).collect();
    assert_eq!(run(1, 0).0, exact, "no jitter: the latency exactly");
}

#[test]
fn timers_pace_the_sender_and_latency_is_exact() {
    let mut f = fabric(config(1), 2);
    tick(&mut f, 0, 1, us(10), 1_000, 5);
    f.run_until(us(100));
    assert_eq!(f.now(), us(100));
    let at: Vec<u64> = f.endpoint(NodeId(1)).got.iter().map(|g| g.at.as_nanos()).collect();
    assert_eq!(at, [12_000, 13_000, 14_000, 15_000, 16_000]);
    assert_eq!(f.counters().timeouts, 5);
}

#[test]
fn port_rate_spaces_packets_by_their_size() {
    // 8 Gbit/s: one byte per nanosecond.
    let mut f =
        fabric(FabricConfig { port_rate_bits_per_sec: Some(8_000_000_000), ..config(1) }, 2);
    burst(&mut f, 0, 1, 3);
    assert!(f.run_until_idle(us(100)));
    let len = build(ipv4(0), ipv4(1), Opcode::RC_SEND_ONLY, 17, 0, &[0; 16]).len() as u64;
    let at: Vec<u64> = f.endpoint(NodeId(1)).got.iter().map(|g| g.at.as_nanos()).collect();
    assert_eq!(at, [len + LATENCY_NS, 2 * len + LATENCY_NS, 3 * len + LATENCY_NS]);
}

/// A faulty three-node run: each node pings the next, which answers.
fn chaotic_run(seed: u64) -> (u64, FabricCounters, Vec<Vec<Got>>) {
    let faults = FaultConfig {
        loss: Probability::from_percent(10),
        duplicate: Probability::from_percent(5),
        reorder: Probability::from_percent(20),
        reorder_max_delay_ns: 5_000,
        corrupt: Probability::from_percent(5),
        mtu_bytes: None,
    };
    let mut f = fabric(FabricConfig { faults, ..config(seed) }, 3);
    for node in 0..3 {
        f.endpoint_mut(NodeId(node)).echo = true;
        tick(&mut f, node, (node + 1) % 3, us(1), 700 + node as u64 * 100, 200);
    }
    assert!(f.run_until_idle(us(10_000)));
    let got = f.endpoints().iter().map(|e| e.got.clone()).collect();
    (f.trace_hash(), *f.counters(), got)
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let (hash_a, counters_a, got_a) = chaotic_run(7);
    let (hash_b, counters_b, got_b) = chaotic_run(7);
    let (hash_c, counters_c, _) = chaotic_run(8);
    println!("seed 7 trace hash {hash_a:016x}, seed 8 trace hash {hash_c:016x}");
    assert_eq!(hash_a, hash_b);
    // Pinned: the hash is the same on every machine and toolchain. Change it
    // only on purpose (a new trace encoding, fault model or draw order; last:
    // the word-wise packet digest, 2026-11-25).
    assert_eq!(hash_a, 0xcdc8_02c6_b308_4909);
    assert_eq!(counters_a, counters_b);
    assert_eq!(got_a, got_b);
    assert_ne!(hash_a, hash_c);
    assert_ne!(counters_a, counters_c);
    // Every fault really happened.
    let c = counters_a;
    assert!(c.dropped_loss > 0 && c.duplicated > 0 && c.delayed_reorder > 0 && c.corrupted > 0);
    assert_eq!(c.sent + c.duplicated, c.delivered + c.dropped(), "{c:?}");
}

#[test]
fn loss_rate_is_near_the_configured_one() {
    let faults = FaultConfig { loss: Probability::from_percent(10), ..FaultConfig::NONE };
    let mut f = fabric(FabricConfig { faults, ..config(3) }, 2);
    const N: u32 = 20_000;
    burst(&mut f, 0, 1, N);
    assert!(f.run_until_idle(us(1_000)));
    let c = f.counters();
    assert_eq!(c.sent, u64::from(N));
    // Binomial(20000, 0.1): sd ≈ 42; ±1 % is ±200.
    assert!((1_800..=2_200).contains(&c.dropped_loss), "{c:?}");
    assert_eq!(c.delivered + c.dropped_loss, c.sent);
    assert_eq!(f.endpoint(NodeId(1)).got.len() as u64, c.delivered);
    // Survivors still arrive in order (no reordering configured).
    let psns = f.endpoint(NodeId(1)).psns();
    assert!(psns.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn duplication_and_reordering_happen_and_are_counted() {
    let faults = FaultConfig {
        duplicate: Probability::from_percent(20),
        reorder: Probability::from_percent(30),
        reorder_max_delay_ns: 10_000,
        ..FaultConfig::NONE
    };
    let mut f = fabric(FabricConfig { faults, trace_log_capacity: 4_096, ..config(5) }, 2);
    tick(&mut f, 0, 1, us(1), 500, 500);
    assert!(f.run_until_idle(us(10_000)));
    let c = *f.counters();
    assert_eq!(c.sent, 500);
    assert!(c.duplicated > 50 && c.duplicated < 150, "{c:?}");
    assert_eq!(c.delivered, 500 + c.duplicated);
    assert!(c.delayed_reorder > 0);
    let psns = f.endpoint(NodeId(1)).psns();
    assert_eq!(psns.len() as u64, c.delivered);
    let inversions = psns.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 0, "reordering never reordered");
    let mut seen = psns.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (0..500).collect::<Vec<_>>(), "every PSN arrives at least once");
    // The duplicates are the ones the trace says.
    let dups = f.trace().events().filter(|e| matches!(e, TraceEvent::Duplicate { .. })).count();
    assert_eq!(dups as u64, c.duplicated);
}

#[test]
fn corruption_flips_a_bit_the_icrc_covers_and_is_counted() {
    let faults = FaultConfig { corrupt: Probability::ALWAYS, ..FaultConfig::NONE };
    let mut f = fabric(FabricConfig { faults, trace_log_capacity: 1_000, ..config(9) }, 2);
    let capture = SharedBuffer::new();
    f.start_capture(Box::new(capture.clone()), CapturePoint::Delivered);
    f.endpoint_mut(NodeId(0)).queue(1, Opcode::RC_ACKNOWLEDGE, 17, 0, 0);
    burst(&mut f, 0, 1, 300);
    assert!(f.run_until_idle(us(100)));
    let c = f.counters();
    assert_eq!((c.sent, c.corrupted, c.delivered), (301, 301, 301));
    let rx = f.endpoint(NodeId(1));
    assert_eq!(rx.not_roce, 0, "only transport bits are flipped");
    assert_eq!(rx.got.len(), 301);
    assert!(rx.got.iter().all(|g| !g.icrc_ok), "every flip is caught by the ICRC");

    // The flipped bits lie in the transport packet (after IPv4 20 + UDP 8),
    // never in BTH byte 4, and spread over it.
    let bits: Vec<usize> = f
        .trace()
        .events()
        .filter_map(|e| match e {
            TraceEvent::Corrupt { bit_index, .. } => Some(*bit_index),
            _ => None,
        })
        .collect();
    assert_eq!(bits.len(), 301);
    assert!(bits.iter().all(|&b| b >= 28 * 8 && b / 8 != 28 + 4), "{bits:?}");
    assert!(bits.iter().any(|&b| b / 8 == 28), "the opcode byte can be hit");

    // The capture of delivered packets says the same.
    drop(f.finish_capture().unwrap().unwrap());
    let bytes = capture.bytes();
    let mut frames = 0;
    for frame in CaptureReader::new(&bytes).unwrap() {
        let frame = frame.unwrap();
        let Classified::Roce(roce) = classify(frame.data, Link::Ethernet) else { panic!() };
        assert!(!roce.icrc_ok());
        frames += 1;
    }
    assert_eq!(frames, 301);
}

#[test]
fn packets_above_the_mtu_are_dropped() {
    let faults = FaultConfig { mtu_bytes: Some(1_024), ..FaultConfig::NONE };
    let mut f = fabric(FabricConfig { faults, ..config(1) }, 2);
    let node = f.endpoint_mut(NodeId(0));
    node.queue(1, Opcode::RC_SEND_ONLY, 17, 0, 512);
    node.queue(1, Opcode::RC_SEND_ONLY, 17, 1, 2_048);
    node.queue(1, Opcode::RC_SEND_ONLY, 17, 2, 1_024 - 20 - 8 - 12 - 4);
    node.queue(1, Opcode::RC_SEND_ONLY, 17, 3, 1_024 - 20 - 8 - 12 - 4 + 4);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.endpoint(NodeId(1)).psns(), [0, 2]);
    assert_eq!(f.counters().dropped_mtu, 2);
    // Healing does not lift the MTU.
    f.heal();
    f.endpoint_mut(NodeId(0)).queue(1, Opcode::RC_SEND_ONLY, 17, 4, 2_048);
    assert!(f.run_until_idle(us(200)));
    assert_eq!(f.counters().dropped_mtu, 3);
}

#[test]
fn link_down_drops_exactly_the_packets_sent_in_its_window() {
    let mut f = fabric(config(1), 3);
    // One packet per µs at t = 0..20 µs; link down for [5 µs, 10 µs).
    tick(&mut f, 0, 1, us(0), 1_000, 20);
    tick(&mut f, 2, 1, us(0), 1_000, 20);
    f.link_down(NodeId(1), NodeId(0), us(5)..us(10));
    assert!(f.run_until_idle(us(1_000)));
    let from0: Vec<u32> =
        f.endpoint(NodeId(1)).got.iter().filter(|g| g.src == ip(0)).map(|g| g.psn).collect();
    let expected: Vec<u32> = (0..5).chain(10..20).collect();
    assert_eq!(from0, expected);
    let from2 = f.endpoint(NodeId(1)).got.iter().filter(|g| g.src == ip(2)).count();
    assert_eq!(from2, 20, "other links are untouched");
    assert_eq!(f.counters().dropped_partition, 5);
}

#[test]
fn packets_in_flight_when_the_link_goes_down_still_arrive() {
    let mut f = fabric(config(1), 2);
    burst(&mut f, 0, 1, 1);
    f.link_down(NodeId(0), NodeId(1), ns(1)..us(100));
    assert!(f.run_until_idle(us(200)));
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 1);
}

#[test]
fn one_way_link_down_cuts_one_direction() {
    let mut f = fabric(config(1), 2);
    f.endpoint_mut(NodeId(1)).echo = true;
    f.link_down_one_way(NodeId(1), NodeId(0), us(0)..us(1_000));
    burst(&mut f, 0, 1, 10);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 10, "requests pass");
    assert_eq!(f.endpoint(NodeId(0)).got.len(), 0, "answers are cut");
    assert_eq!(f.counters().dropped_partition, 10);
}

#[test]
fn partition_then_heal() {
    let mut f = fabric(config(1), 3);
    f.partition(&[NodeId(0)], us(0)..Instant::FAR_FUTURE);
    burst(&mut f, 0, 1, 5);
    burst(&mut f, 0, 2, 5);
    burst(&mut f, 1, 2, 5);
    burst(&mut f, 2, 0, 5);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 0);
    assert_eq!(f.endpoint(NodeId(2)).got.len(), 5, "1 and 2 are on the same side");
    assert_eq!(f.endpoint(NodeId(0)).got.len(), 0);
    assert_eq!(f.counters().dropped_partition, 15);

    f.heal();
    assert!(f.outages().is_empty());
    burst(&mut f, 0, 1, 5);
    burst(&mut f, 2, 0, 5);
    assert!(f.run_until_idle(us(200)));
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 5);
    assert_eq!(f.endpoint(NodeId(0)).got.len(), 5);
}

#[test]
fn heal_turns_probabilistic_faults_and_rules_off() {
    let faults = FaultConfig {
        loss: Probability::from_percent(50),
        corrupt: Probability::from_percent(50),
        ..FaultConfig::NONE
    };
    let mut f = fabric(FabricConfig { faults, ..config(11) }, 2);
    let rule = f.add_rule(Rule::new(Matcher::any(), Action::Drop).nth(1_000_000));
    burst(&mut f, 0, 1, 100);
    assert!(f.run_until_idle(us(100)));
    assert!(f.counters().dropped_loss > 0);
    f.heal();
    assert!(!f.config().faults.any_probabilistic());
    assert!(!f.rule(rule).active);
    let before = *f.counters();
    burst(&mut f, 0, 1, 100);
    assert!(f.run_until_idle(us(200)));
    let after = f.counters();
    assert_eq!(after.delivered - before.delivered, 100);
    assert_eq!(after.corrupted, before.corrupted);
    assert_eq!(f.rule(rule).matches, 100, "matches stop counting once healed");
}

#[test]
fn rule_drops_the_third_send_to_one_qp() {
    let mut f = fabric(config(1), 2);
    let rule = f.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_SEND_ONLY).dest_qpn(Qpn::new(17)), Action::Drop)
            .nth(3),
    );
    let node = f.endpoint_mut(NodeId(0));
    // PSN n goes to QP 17 when n is even, else QP 18; PSN 9 is a UC send.
    for psn in 0..9 {
        node.queue(1, Opcode::RC_SEND_ONLY, if psn % 2 == 0 { 17 } else { 18 }, psn, 8);
    }
    node.queue(1, Opcode::UC_SEND_ONLY, 17, 9, 8);
    assert!(f.run_until_idle(us(100)));
    // Sends to QP 17: PSNs 0, 2, 4, 6, 8 → the third is PSN 4.
    assert_eq!(f.endpoint(NodeId(1)).psns(), [0, 1, 2, 3, 5, 6, 7, 8, 9]);
    let state = f.rule(rule);
    assert_eq!((state.matches, state.hits), (5, 1));
    assert_eq!(f.counters().dropped_rule, 1);
    assert_eq!(f.counters().rule_hits, 1);
}

#[test]
fn rule_duplicates_and_delays_exactly_the_packets_named() {
    let mut f = fabric(config(1), 2);
    let dup = f.add_rule(Rule::new(Matcher::any().psn(Psn::new(2)), Action::Duplicate));
    let delay = f.add_rule(
        Rule::new(Matcher::any().from(NodeId(0)), Action::Delay { delay_ns: 10_000 }).nth(1),
    );
    burst(&mut f, 0, 1, 5);
    assert!(f.run_until_idle(us(100)));
    let rx = &f.endpoint(NodeId(1)).got;
    let order: Vec<(u32, u64)> = rx.iter().map(|g| (g.psn, g.at.as_nanos())).collect();
    assert_eq!(
        order,
        [
            (1, LATENCY_NS),
            (2, LATENCY_NS),
            (2, LATENCY_NS),
            (3, LATENCY_NS),
            (4, LATENCY_NS),
            (0, LATENCY_NS + 10_000)
        ]
    );
    assert_eq!((f.rule(dup).hits, f.rule(delay).hits), (1, 1));
    let c = f.counters();
    assert_eq!((c.duplicated, c.delayed_rule, c.delivered), (1, 1, 6));
}

#[test]
fn rule_by_opcode_facts_and_direction() {
    let mut f = fabric(config(1), 2);
    f.endpoint_mut(NodeId(1)).echo = true;
    // Drop every responder packet going from node 1 to node 0.
    let rule = f.add_rule(Rule::new(
        Matcher::any().opcode_mask(Mask::RESP).from(NodeId(1)).to(NodeId(0)),
        Action::Drop,
    ));
    burst(&mut f, 0, 1, 10);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 10);
    assert_eq!(f.endpoint(NodeId(0)).got.len(), 0);
    assert_eq!(f.rule(rule).hits, 10);
}

#[test]
fn pcap_capture_decodes_with_good_icrc() {
    let mut f = fabric(config(1), 2);
    let capture = SharedBuffer::new();
    f.start_capture(Box::new(capture.clone()), CapturePoint::Both);
    f.endpoint_mut(NodeId(1)).echo = true;
    tick(&mut f, 0, 1, us(3), 1_000, 4);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.captured_frames(), 16, "8 packets, each sent and delivered");
    drop(f.finish_capture().unwrap().unwrap());
    let bytes = capture.bytes();
    let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
    assert_eq!(frames.len(), 16);
    let mut times = Vec::new();
    for frame in &frames {
        let Classified::Roce(roce) = classify(frame.data, Link::Ethernet) else { panic!() };
        assert!(roce.integrity_ok());
        roce.packet().unwrap();
        times.push(frame.timestamp.as_nanos() as u64);
    }
    // Requests sent at 3 and 4 µs; the first delivered at 5 µs, and its ACK
    // sent at once.
    assert_eq!(&times[..4], [3_000, 4_000, 5_000, 5_000]);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    // Node 0 → node 1: made-up MACs from node ids.
    assert_eq!(&frames[0].data[..12], &[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0]);
}

#[test]
fn unknown_destination_is_dropped_and_counted() {
    let mut f = fabric(config(1), 2);
    let stray = build(ipv4(0), Ipv4Addr::new(10, 9, 9, 9), Opcode::RC_SEND_ONLY, 17, 0, &[]);
    f.endpoint_mut(NodeId(0)).queue_raw(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), stray);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.counters().dropped_no_route, 1);
    assert_eq!(f.route(ip(1)), Some(NodeId(1)));
    assert_eq!(f.route(IpAddr::V4(Ipv4Addr::LOCALHOST)), None);
}

#[test]
fn non_roce_packets_travel_and_do_not_match_bth_rules() {
    let mut f = fabric(config(1), 2);
    let rule = f.add_rule(Rule::new(Matcher::any().opcode(Opcode::RC_SEND_ONLY), Action::Drop));
    f.endpoint_mut(NodeId(0)).queue_raw(ip(1), vec![0xde, 0xad, 0xbe, 0xef]);
    assert!(f.run_until_idle(us(100)));
    assert_eq!(f.endpoint(NodeId(1)).not_roce, 1);
    assert_eq!(f.rule(rule).matches, 0);
}

#[test]
fn in_flight_is_bounded() {
    let mut f = fabric(FabricConfig { max_in_flight: 10, ..config(1) }, 2);
    burst(&mut f, 0, 1, 50);
    assert!(f.run_until_idle(us(100)));
    let c = f.counters();
    assert_eq!((c.delivered, c.dropped_overflow), (10, 40));
    assert_eq!(f.endpoint(NodeId(1)).psns(), (0..10).collect::<Vec<_>>());
}

#[test]
fn transmits_beyond_the_per_poll_bound_wait_for_the_next_step() {
    let mut f = fabric(FabricConfig { max_transmits_per_poll: 1, ..config(1) }, 2);
    burst(&mut f, 0, 1, 10);
    assert!(f.run_until_idle(us(100)));
    let rx = &f.endpoint(NodeId(1)).got;
    assert_eq!(rx.len(), 10);
    assert!(rx.iter().all(|g| g.at == ns(LATENCY_NS)), "all left at time 0");
}

#[test]
fn run_until_condition_stops_when_asked() {
    let mut f = fabric(config(1), 2);
    tick(&mut f, 0, 1, us(0), 1_000, 100);
    let done = f.run_until_condition(us(1_000), |f| f.endpoint(NodeId(1)).got.len() >= 3);
    assert!(done);
    assert_eq!(f.endpoint(NodeId(1)).got.len(), 3);
    assert_eq!(f.now(), ns(LATENCY_NS + 2_000));
    assert!(!f.run_until_condition(us(10), |_| false));
}

#[test]
fn run_until_idle_gives_up_at_max_time() {
    let faults = FaultConfig {
        reorder: Probability::ALWAYS,
        reorder_max_delay_ns: 1_000_000,
        ..FaultConfig::NONE
    };
    let mut f = fabric(FabricConfig { faults, ..config(1) }, 2);
    burst(&mut f, 0, 1, 10);
    assert!(!f.run_until_idle(us(1)));
    assert_eq!(f.now(), us(1));
    assert!(f.in_flight() > 0);
    assert!(f.run_until_idle(us(10_000)));
}

#[test]
fn trace_log_reads_like_a_story() {
    let mut f = fabric(FabricConfig { trace_log_capacity: 16, ..config(1) }, 2);
    f.add_rule(Rule::new(Matcher::any().psn(Psn::new(1)), Action::Drop));
    burst(&mut f, 0, 1, 2);
    assert!(f.run_until_idle(us(100)));
    let lines: Vec<String> = f.trace().events().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(lines[0].starts_with("0.000000s #0 send from node0 len="));
    assert_eq!(lines[2], "0.000000s #1 rule 0 fired");
    assert_eq!(lines[3], "0.000000s #1 drop Rule");
    assert!(lines[4].starts_with("0.000002s #0 deliver node0->node1"));
    assert!(matches!(
        f.trace().events().nth(3),
        Some(TraceEvent::Drop { reason: DropReason::Rule, .. })
    ));
    assert_eq!(f.trace().event_count(), 5);
}

/// An endpoint whose timer is always due: a bug the fabric must catch.
struct Stuck([IpAddr; 1]);

impl Endpoint for Stuck {
    fn addresses(&self) -> &[IpAddr] {
        &self.0
    }
    fn receive(&mut self, _: Instant, _: &[u8]) {}
    fn poll_transmit(&mut self, _: Instant, _: &mut [u8]) -> Option<Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(Instant::ZERO)
    }
    fn handle_timeout(&mut self, _: Instant) {}
}

#[test]
#[should_panic(expected = "livelock")]
fn a_timer_that_never_moves_is_a_livelock() {
    let config = FabricConfig { max_steps_per_instant: 100, ..FabricConfig::new(1) };
    let mut f = Fabric::new(config, vec![Stuck([ip(0)])]);
    f.run_until(us(1));
}
