use super::*;
use crate::capture::node_mac;
use crate::fault::Cut;
use core::net::Ipv4Addr;
use uroce_faults::{FaultConfig, Probability};

/// Sends `left` packets of 40 bytes to `peer`, one per poll, and keeps
/// what it receives.
struct Probe {
    addr: Vec<IpAddr>,
    peer: Option<IpAddr>,
    left: u32,
    got: Vec<Vec<u8>>,
}

impl Endpoint for Probe {
    fn addresses(&self) -> &[IpAddr] {
        &self.addr
    }
    fn receive(&mut self, _now: Instant, packet: &[u8]) {
        self.got.push(packet.to_vec());
    }
    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<uroce_hca::Transmit> {
        let peer = self.peer?;
        self.left = self.left.checked_sub(1)?;
        buf[..40].fill(0x45);
        buf[39] = self.left as u8;
        Some(uroce_hca::Transmit::new(peer, 40))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

fn probes() -> Vec<Probe> {
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let probe = |addr: Vec<IpAddr>, peer, left| Probe { addr, peer, left, got: Vec::new() };
    vec![probe(vec![a], Some(b), 300), probe(vec![b], Some(a), 300), probe(vec![], None, 0)]
}

#[test]
fn a_mirror_port_sees_every_delivery_as_a_frame_and_changes_nothing() {
    let faults = FaultConfig {
        loss: Probability::from_percent(10),
        duplicate: Probability::from_percent(10),
        reorder: Probability::from_percent(20),
        reorder_max_delay_ns: 50_000,
        corrupt: Probability::from_percent(5),
        ..FaultConfig::NONE
    };
    let config = FabricConfig { faults, ..FabricConfig::new(9) };
    let run = |mirror: bool| {
        let mut fabric = Fabric::new(config.clone(), probes());
        if mirror {
            fabric.set_mirror(Some(NodeId(2)));
        }
        assert!(fabric.run_until_idle(Instant::from_nanos(100_000_000)));
        fabric
    };
    let (plain, mirrored) = (run(false), run(true));
    assert_eq!(plain.trace_hash(), mirrored.trace_hash(), "a passive mirror changes nothing");
    let c = mirrored.counters();
    assert_eq!(c.mirrored, c.delivered);
    assert_eq!(plain.counters().mirrored, 0);
    let nodes = mirrored.endpoints();
    let frames = &nodes[2].got;
    assert_eq!(frames.len() as u64, c.delivered);
    // In delivery order: each receiver's packets, in the order it got
    // them, with the receiver's and the sender's MACs.
    for (to, from) in [(0, 1), (1, 0)] {
        let seen: Vec<&[u8]> = frames
            .iter()
            .filter(|f| f[..6] == node_mac(NodeId(to)))
            .map(|f| {
                assert_eq!(f[6..12], node_mac(NodeId(from)));
                assert_eq!(f[12..14], [0x08, 0x00]);
                &f[14..]
            })
            .collect();
        let got: Vec<&[u8]> = nodes[to].got.iter().map(Vec::as_slice).collect();
        assert_eq!(seen, got);
    }
    let mut fabric = run(true);
    fabric.set_mirror(None);
    assert_eq!(fabric.mirror(), None);
}

#[test]
fn packet_digests_off_changes_only_the_digests() {
    let faults = FaultConfig {
        loss: Probability::from_percent(10),
        duplicate: Probability::from_percent(10),
        reorder: Probability::from_percent(20),
        reorder_max_delay_ns: 50_000,
        corrupt: Probability::from_percent(5),
        ..FaultConfig::NONE
    };
    let run = |digests: bool| {
        let config = FabricConfig {
            faults,
            trace_log_capacity: 2_000,
            trace_packet_digests: digests,
            ..FabricConfig::new(9)
        };
        let mut fabric = Fabric::new(config, probes());
        assert!(fabric.run_until_idle(Instant::from_nanos(100_000_000)));
        fabric
    };
    let (on, off) = (run(true), run(false));
    assert_eq!(on.counters(), off.counters());
    assert!(on.counters().corrupted > 0 && on.counters().duplicated > 0);
    assert_eq!(on.trace().event_count(), off.trace().event_count());
    assert_ne!(on.trace_hash(), off.trace_hash());
    let zero = |e: &TraceEvent| match *e {
        TraceEvent::Send { at, packet, from, len, .. } => {
            TraceEvent::Send { at, packet, from, len, digest: 0 }
        }
        TraceEvent::Deliver { at, packet, from, to, len, .. } => {
            TraceEvent::Deliver { at, packet, from, to, len, digest: 0 }
        }
        other => other,
    };
    let on_events: Vec<TraceEvent> = on.trace().events().map(zero).collect();
    let off_events: Vec<TraceEvent> = off.trace().events().copied().collect();
    assert_eq!(on_events, off_events);
    // With digests on, a delivery's digest is its bytes' as delivered
    // (the send digest reused unless the copy was corrupted).
    for e in on.trace().events() {
        if let TraceEvent::Deliver { packet, digest, .. } = *e {
            let corrupted = on
                .trace()
                .events()
                .any(|c| matches!(*c, TraceEvent::Corrupt { packet: p, .. } if p == packet));
            let sent = on.trace().events().find_map(|s| match *s {
                TraceEvent::Send { packet: p, digest: d, .. } if p == packet => Some(d),
                _ => None,
            });
            match (sent, corrupted) {
                (Some(sent), false) => assert_eq!(digest, sent),
                (Some(sent), true) => assert_ne!(digest, sent),
                (None, _) => {}
            }
        }
    }
}

fn scenario(text: &str) -> uroce_faults::Scenario {
    uroce_faults::Scenario::parse(text, "test").expect("scenario")
}

fn ports(s: &uroce_faults::Scenario, nodes: &[Probe]) -> Vec<uroce_faults::Port> {
    nodes
        .iter()
        .filter_map(|p| p.addr.first().copied())
        .map(|address| {
            let me = uroce_faults::scenario::DeviceInfo { address, role: None };
            uroce_faults::Port::new(s, me, 1)
        })
        .collect()
}

#[test]
fn ports_that_never_fire_leave_the_run_and_its_hash_as_they_were() {
    // Random faults on: a port that sees every packet and fires on none
    // draws nothing from the fabric's generator and records no event.
    let faults = FaultConfig {
        loss: Probability::from_percent(10),
        duplicate: Probability::from_percent(10),
        reorder: Probability::from_percent(20),
        reorder_max_delay_ns: 50_000,
        corrupt: Probability::from_percent(5),
        ..FaultConfig::NONE
    };
    let config = FabricConfig { faults, ..FabricConfig::new(4) };
    let s = scenario(
        "[scenario]\nname = \"idle\"\nsummary = \"never fires\"\n\
         [[rule]]\nclass = \"rnr_nak\"\naction = \"drop\"\n",
    );
    let run = |with: bool| {
        let nodes = probes();
        let ports = if with { ports(&s, &nodes) } else { Vec::new() };
        let mut fabric = Fabric::new(config.clone(), nodes).with_ports(ports);
        assert_eq!(fabric.has_ports(), with);
        assert!(fabric.run_until_idle(Instant::from_nanos(100_000_000)));
        fabric
    };
    let (plain, ported) = (run(false), run(true));
    assert_eq!(plain.trace_hash(), ported.trace_hash());
    assert_eq!(plain.counters(), ported.counters());
    let summary = ported.port(NodeId(0)).expect("a port").summary();
    assert_eq!(summary.packets_out, 300);
    assert!(summary.packets_in > 200, "{summary:?}");
    assert!(ported.firings().is_empty());
    assert!(ported.port(NodeId(2)).is_none(), "the third node has no address, no port");
}

#[test]
fn a_timed_link_down_is_an_outage_at_the_ports_deadline() {
    let s = scenario(
        "[scenario]\nname = \"blink\"\nsummary = \"node 1 down from 1 ms to 3 ms\"\n\
         [[rule]]\ndevice = \"10.0.0.2\"\nafter_ms = 1\naction = \"link_down\"\nfor_ms = 2\n",
    );
    let mut nodes = probes();
    for n in &mut nodes {
        n.left = 0;
    }
    let ports = ports(&s, &nodes);
    let mut fabric = Fabric::new(FabricConfig::new(1), nodes).with_ports(ports);
    let ms = |n: u64| Instant::from_nanos(n * 1_000_000);
    fabric.run_until(Instant::from_nanos(500_000));
    assert!(fabric.firings().is_empty() && fabric.outages().is_empty());
    assert_eq!(fabric.next_event(), Some(ms(1)), "the port's deadline");
    assert!(fabric.run_until_idle(ms(10)));
    assert_eq!(fabric.now(), ms(1));
    assert_eq!(fabric.next_event(), None);
    assert_eq!(fabric.outages().len(), 1);
    assert_eq!(fabric.outages()[0].cut, Cut::Partition { side: vec![NodeId(1)] });
    assert_eq!(fabric.outages()[0].during, ms(1)..ms(3));
    let (a, b) = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    fabric.inject(NodeId(0), b, vec![0x45; 40]);
    fabric.run_until(ms(3));
    fabric.inject(NodeId(1), a, vec![0x45; 40]);
    assert!(fabric.run_until_idle(ms(10)));
    let c = fabric.counters();
    assert_eq!((c.dropped_partition, c.delivered, c.scenario_firings), (1, 1, 1));
    let firings = fabric.firings();
    assert_eq!(firings.len(), 1);
    assert_eq!(
        (firings[0].0, firings[0].1.at_ns, firings[0].1.packet),
        (NodeId(1), 1_000_000, None)
    );
}
