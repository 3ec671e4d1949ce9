//! Fault scenarios on the simulated fabric (issue 16, step 9), on the
//! harness's [`Sim`]: each node's port runs the scenario, device faults
//! reach the HCAs, and a run is a function of its seed. The program is two
//! node tasks: the client (node 0) sends `MESSAGES` SENDs over RC, each
//! after the previous completed; the server (node 1) has a receive posted
//! for each, takes them, waits `SETTLE` and checks nothing more came. They
//! connect over the side channel ([`uroce_harness::connect_rc`]) and await their
//! completions. Virtual time only.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use uroce_harness::{connect_rc, Env, JoinHandle, Node, Report, Sim, SimOob};
use uroce_hca::counters::Counters;
use uroce_hca::SharedHca;
use uroce_sim::SharedBuffer;
use uroce_sim::{CapturePoint, Cut, DeviceActionKind, Fabric, FabricConfig, NodeId, Scenario};
use uroce_tests::world::{cap, tuning, ALL_ACCESS};
use uroce_verbs::connect::Endpoint;
use uroce_verbs::{RecvWr, SendWr, WcStatus, WorkCompletion, WrOpcode};
use uroce_wire::pcap::CaptureReader;

/// What a node task fails with.
type TaskError = Box<dyn std::error::Error>;

const MS: u64 = 1_000_000;
/// SENDs each run makes, one at a time.
const MESSAGES: u64 = 20;
/// Receive buffers' size: a 4-packet message at path MTU 1024.
const RECV_LEN: u64 = 4096;
/// The virtual time one SEND may take to complete.
const SEND_LIMIT: Duration = Duration::from_millis(500);
/// How long the server waits, after its last receive, for more.
const SETTLE: Duration = Duration::from_millis(100);
/// The virtual time a whole run may take.
const RUN_LIMIT: Duration = Duration::from_secs(30);
/// The client's first PSN; the server's is 1000 further.
const CLIENT_PSN: u32 = 0;

/// The bytes every SEND carries (its first `len`).
fn payload() -> Vec<u8> {
    (0..RECV_LEN).map(|i| (i * 7) as u8).collect()
}

/// What the server received.
#[derive(Debug)]
struct Received {
    /// The completions of its `MESSAGES` receives, in order.
    completions: Vec<WorkCompletion>,
    /// Completions that came in the `SETTLE` after them (none, if each
    /// message arrived once).
    late: Vec<WorkCompletion>,
    /// Its receive buffers, one `RECV_LEN` slot per receive.
    slots: Vec<u8>,
}

/// Whether the run waits for the server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    /// The server must take every message (and the run waits for it).
    Returns,
    /// The server may wait forever (a link down for good).
    Daemon,
}

type Client = JoinHandle<Result<Vec<WorkCompletion>, TaskError>>;

/// How a run goes.
#[derive(Clone, Copy)]
struct Options {
    /// Bytes per SEND.
    len: u32,
    /// Whether the run waits for the server.
    server: Server,
    /// How long the client waits, connected, before its first SEND.
    start: Duration,
}

impl Options {
    /// SENDs of 200 bytes, sent at once; the server takes every one.
    fn new() -> Options {
        Options { len: 200, server: Server::Returns, start: Duration::ZERO }
    }
}

/// Where the client is, for the test's thread.
#[derive(Default)]
struct Watch {
    /// Connected (waiting `Options::start`, or sending).
    connected: Cell<bool>,
    /// The SEND under way (0: none yet).
    sending: Cell<u64>,
}

struct Pair {
    sim: Sim,
    client: Client,
    server: JoinHandle<Result<Received, TaskError>>,
    /// Bytes per SEND.
    len: u32,
}

/// The client: an RC QP (cap 128 WRs) connected to the server's, then,
/// `start` later, `MESSAGES` SENDs of `len` bytes, each after the previous
/// completed and within `SEND_LIMIT`; returns every completion (stops at
/// the first error: the rest would flush). It keeps `watch` up to date.
async fn client(
    node: Node,
    oob: SimOob,
    len: u32,
    start: Duration,
    watch: Rc<Watch>,
) -> Result<Vec<WorkCompletion>, TaskError> {
    let side = Endpoint::rc(&node.ctx, 256, cap(128, 1, 0), RECV_LEN, ALL_ACCESS)?;
    side.mr.write(0, &payload())?;
    connect_rc(&side, &node.ctx, &oob, CLIENT_PSN, &tuning(), ALL_ACCESS, |_| Ok(())).await?;
    watch.connected.set(true);
    if !start.is_zero() {
        node.env.sleep(start).await;
    }
    let mut done = Vec::new();
    for i in 1..=MESSAGES {
        watch.sending.set(i);
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![side.mr.sge(0, len)];
        side.qp.post_send(&[wr]).map_err(|(_, e)| e)?;
        let posted = node.env.now();
        let wc = side.cq.next().await?;
        let took = node.env.now() - posted;
        assert!(took <= SEND_LIMIT, "SEND {i} took {took:?}");
        let failed = wc.status != WcStatus::Success;
        done.push(wc);
        if failed {
            break;
        }
    }
    Ok(done)
}

/// The server: an RC QP with a receive of `RECV_LEN` bytes posted for each
/// of the `MESSAGES` SENDs before the client may send; takes their
/// completions, then whatever else comes within `SETTLE`.
async fn server(node: Node, oob: SimOob) -> Result<Received, TaskError> {
    let side = Endpoint::rc(&node.ctx, 256, cap(128, 1, 0), MESSAGES * RECV_LEN, ALL_ACCESS)?;
    let psn = CLIENT_PSN + 1000;
    connect_rc(&side, &node.ctx, &oob, psn, &tuning(), ALL_ACCESS, |s| {
        let recvs: Vec<RecvWr> = (0..MESSAGES)
            .map(|i| RecvWr {
                wr_id: 100 + i,
                sg_list: vec![s.mr.sge(i * RECV_LEN, RECV_LEN as u32)],
            })
            .collect();
        s.qp.post_recv(&recvs).map_err(|(_, e)| e)
    })
    .await?;
    let mut completions = Vec::new();
    for _ in 0..MESSAGES {
        completions.push(side.cq.next().await?);
    }
    node.env.sleep(SETTLE).await;
    let late = side.cq.poll(2 * MESSAGES as usize)?;
    let slots = side.mr.read_vec(0, (MESSAGES * RECV_LEN) as usize)?;
    Ok(Received { completions, late, slots })
}

/// The simulation: 2 nodes, `seed`, `scenario` (if any) with node 0 the
/// client and node 1 the server.
fn sim(seed: u64, scenario: Option<Scenario>) -> Sim {
    // No latency jitter: what a seed changes here is the scenario's draws
    // alone (the jitter's own exploring is the harness's test).
    let mut builder = Sim::builder(seed).nodes(2).latency_jitter(Duration::ZERO);
    if let Some(s) = scenario {
        builder = builder.scenario(s).role(0, "client").role(1, "server");
    }
    builder.build()
}

/// The client and the server spawned on `sim`; the client keeps `watch`
/// up to date.
fn spawn(mut sim: Sim, options: Options, watch: Rc<Watch>) -> Pair {
    let Options { len, server: server_kind, start } = options;
    let (a, b) = sim.oob_pair(0, 1);
    let client = sim.spawn(0, "client", move |node| client(node, a, len, start, watch));
    let server = match server_kind {
        Server::Returns => sim.spawn(1, "server", move |node| server(node, b)),
        Server::Daemon => sim.spawn_daemon(1, "server", move |node| server(node, b)),
    };
    Pair { sim, client, server, len }
}

/// [`spawn`] with [`Options::new`].
fn pair(seed: u64, scenario: Option<Scenario>) -> Pair {
    spawn(sim(seed, scenario), Options::new(), Rc::default())
}

/// Runs the pair to the end; the client's completions.
fn send_all(p: &mut Pair) -> (Report, Vec<WorkCompletion>) {
    let report = p.sim.run(RUN_LIMIT).unwrap_or_else(|f| panic!("{f}"));
    let done = p.client.output().expect("the client returned").expect("the client");
    (report, done)
}

/// Every SEND arrived whole at node 1, once.
fn assert_delivered(p: &Pair) {
    let got = p.server.output().expect("the server returned").expect("the server");
    assert_eq!(got.completions.len() as u64, MESSAGES, "{got:?}");
    assert!(got.late.is_empty(), "more than one delivery: {:?}", got.late);
    let data = &payload()[..p.len as usize];
    for (i, wc) in got.completions.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (100 + i as u64, WcStatus::Success, p.len));
        let at = i * RECV_LEN as usize;
        assert_eq!(&got.slots[at..at + p.len as usize], data, "message {i}");
    }
}

fn all_succeeded(done: &[WorkCompletion]) {
    assert_eq!(done.len() as u64, MESSAGES, "{done:?}");
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (1..=MESSAGES).collect::<Vec<_>>());
}

fn load(name: &str) -> Scenario {
    Scenario::load(name).expect("a library scenario")
}

fn counters(report: &Report, n: usize) -> &Counters {
    &report.counters[n]
}

#[test]
fn lost_ack_fires_once_and_the_requester_retransmits() {
    let mut p = pair(1, Some(load("lost-ack")));
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);

    let fabric = &p.sim.world().fabric;
    let firings = fabric.firings();
    assert_eq!(firings.len(), 1, "{firings:?}");
    let (node, firing) = &firings[0];
    assert_eq!(*node, NodeId(0), "the requester receives the ACKs");
    assert_eq!((firing.rule_name.as_str(), firing.hit), ("lost-ack", 1));
    let summary = fabric.port(NodeId(0)).unwrap().summary();
    assert_eq!((summary.rules[0].fired, summary.dropped_rule), (1, 1));
    assert_eq!(fabric.port(NodeId(1)).unwrap().summary().rules[0].fired, 0);
    assert_eq!(fabric.counters().dropped_scenario, 1);
    assert_eq!(fabric.counters().scenario_firings, 1);
    assert_eq!((report.fired("lost-ack"), report.fired_at(0, "lost-ack")), (1, 1));
    assert!(counters(&report, 0).completer_retry_err >= 1, "the requester timed out");
    assert!(
        counters(&report, 1).duplicate_request >= 1,
        "the retransmission reached the responder"
    );
}

#[test]
fn a_link_down_for_good_ends_in_retry_exceeded() {
    let options = Options { server: Server::Daemon, ..Options::new() };
    let mut p = spawn(sim(1, Some(load("retry-exceeded"))), options, Rc::default());
    let (report, done) = send_all(&mut p);
    let statuses: Vec<(u64, WcStatus)> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    let mut want: Vec<(u64, WcStatus)> = (1..10).map(|i| (i, WcStatus::Success)).collect();
    want.push((10, WcStatus::RetryExcErr));
    assert_eq!(statuses, want);
    // The server got the nine, and waits for the rest forever.
    assert!(!p.server.is_finished());
    assert_eq!(report.unfinished, ["server (node 1)"]);
    // The port's link_down is the fabric's outage: node 1 isolated for good.
    let fabric = &p.sim.world().fabric;
    let outages = fabric.outages();
    assert!(outages.iter().any(|o| o.cut == Cut::Partition { side: vec![NodeId(1)] }));
    // The first SEND and its 7 retries, all lost.
    assert!(fabric.counters().dropped_partition >= 8, "{:?}", fabric.counters());
    assert_eq!(counters(&report, 0).completer_retry_err, 7);
}

#[test]
fn injected_rnr_naks_then_success() {
    let mut p = pair(1, Some(load("rnr-retry")));
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);
    // Handed to node 1's HCA just before the 10th SEND arrived: that very
    // message was answered with three RNR NAKs.
    let fabric = &p.sim.world().fabric;
    assert_eq!(fabric.counters().device_faults, 1);
    assert_eq!(counters(&report, 1).send_rnr_err, 3);
    assert_eq!(counters(&report, 1).injected_rnr, 3);
    assert_eq!(counters(&report, 0).rcvd_rnr_err, 3);
    let firings = fabric.firings();
    assert_eq!(firings.len(), 1);
    assert_eq!(firings[0].0, NodeId(1));
    assert_eq!(firings[0].1.packet.and_then(|p| p.message), Some(10));
}

#[test]
fn a_timed_stall_is_a_deadline_of_the_fabric() {
    // At 2 ms the server's responder stops for 5 ms: no packet triggers it,
    // the fabric wakes for it; the requester retransmits and succeeds.
    let text = r#"
        [scenario]
        name = "timed-stall"
        summary = "the server's responder stalls at 2 ms for 5 ms"
        [[rule]]
        role = "server"
        after_ms = 2
        action = "stall"
        for_ms = 5
        target = "all"
    "#;
    let s = Scenario::parse(text, "inline").unwrap();
    // The client waits 2 ms, connected, before its first SEND.
    let options = Options { start: Duration::from_millis(2), ..Options::new() };
    let watch = Rc::new(Watch::default());
    let mut p = spawn(sim(3, Some(s)), options, watch.clone());
    // Both QPs exist (the stall is for every QP there is), at time 0.
    while !watch.connected.get() {
        assert!(p.sim.step(), "the pair did not connect");
    }
    assert_eq!((p.sim.now(), watch.sending.get()), (Duration::ZERO, 0));
    // Idle until the stall has begun: the timed rule fires on its own.
    let world = p.sim.world();
    let deadline = world.now().plus_nanos(10 * MS);
    assert!(world.fabric.run_until_condition(deadline, |f| f.counters().device_faults > 0));
    assert_eq!(world.fabric.counters().device_faults, 1);
    assert_eq!(world.now().as_nanos(), 2 * MS, "the fabric's next event was the port's deadline");
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);
    assert!(counters(&report, 1).rcvd_stalled_drop >= 1);
    assert!(counters(&report, 0).completer_retry_err >= 1);
    assert_eq!(p.sim.world().fabric.firings()[0].1.packet, None, "timed");
}

/// Half the requests held 30 µs at the client's port: a random part.
fn random_delays() -> Scenario {
    let text = r#"
        [scenario]
        name = "random-delays"
        summary = "half the requests the client sends are 30 us late"
        [[rule]]
        dir = "out"
        class = "request"
        chance = 0.5
        action = "delay"
        delay_us = 30
    "#;
    Scenario::parse(text, "inline").unwrap()
}

/// A run's trace hash, its firings (node, time, firing) and its length.
fn hash_and_log(seed: u64, scenario: Option<Scenario>) -> (u64, Vec<String>, Duration) {
    let mut p = pair(seed, scenario);
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);
    let fabric = &p.sim.world().fabric;
    let log = fabric.firings().iter().map(|(n, f)| format!("{n} {} {f}", f.at_ns)).collect();
    assert_eq!(report.trace_hash, fabric.trace_hash());
    (report.trace_hash, log, report.elapsed)
}

#[test]
fn a_seed_replays_exactly_and_another_seed_draws_differently() {
    for name in ["lost-ack", "rnr-retry"] {
        let first = hash_and_log(5, Some(load(name)));
        let again = hash_and_log(5, Some(load(name)));
        assert_eq!(first, again, "{name}: same seed, same hash, firings and length");
        assert!(!first.1.is_empty());
    }
    let one = hash_and_log(1, Some(random_delays()));
    let two = hash_and_log(2, Some(random_delays()));
    assert_eq!(one, hash_and_log(1, Some(random_delays())));
    assert_ne!(one.0, two.0, "the ports' draws follow the seed");
    assert_ne!(one.1, two.1);
    // Without a scenario this workload draws nothing: both seeds hash alike,
    // so the difference above is the scenario's.
    assert_eq!(hash_and_log(1, None).0, hash_and_log(2, None).0);
}

#[test]
fn a_firing_is_a_comment_in_the_pcapng_capture() {
    // As sent, and as delivered: there the dropped ACK is written at its drop.
    for point in [CapturePoint::Sent, CapturePoint::Delivered] {
        let mut p = pair(1, Some(load("lost-ack")));
        let buf = SharedBuffer::new();
        p.sim.world().fabric.start_capture(Box::new(buf.clone()), point);
        let (_, done) = send_all(&mut p);
        all_succeeded(&done);
        p.sim.world().fabric.finish_capture().unwrap().unwrap();
        let bytes = buf.bytes();
        let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().collect::<Result<_, _>>().unwrap();
        assert!(frames.len() as u64 > 2 * MESSAGES);
        let commented: Vec<&str> = frames.iter().filter_map(|f| f.comment).collect();
        assert_eq!(commented.len(), 1, "{point:?}: {commented:?}");
        let want = "uroce scenario node0: rule lost-ack fired 1: drop on in RC_ACKNOWLEDGE";
        assert!(commented[0].starts_with(want), "{point:?}: {}", commented[0]);
        assert!(commented[0].ends_with("; DROPPED at node0's port: Rule"), "{}", commented[0]);
    }
}

#[test]
fn a_short_partition_heals_through_retransmissions() {
    let s = load("partition-heals").with_params(&[("cut_ms".to_owned(), 3)]).unwrap();
    let mut p = pair(1, Some(s));
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);
    // Node 1's port cut it from the packet's sender: the fabric's outage.
    let fabric = &p.sim.world().fabric;
    let firings = fabric.firings();
    assert_eq!(firings.len(), 1);
    let at = uroce_hca::Instant::from_nanos(firings[0].1.at_ns);
    let cut = fabric.outages().iter().find(|o| o.cut == Cut::Link(NodeId(1), NodeId(0)));
    assert_eq!(cut.map(|o| o.during.clone()), Some(at..at.plus_nanos(3 * MS)));
    assert!(fabric.counters().dropped_partition >= 2, "the SEND and a retry");
    assert!(counters(&report, 0).completer_retry_err >= 2);
}

fn inline(rule: &str) -> Scenario {
    let text = format!("[scenario]\nname = \"inline\"\nsummary = \"one rule\"\n[[rule]]\n{rule}\n");
    Scenario::parse(&text, "inline").unwrap()
}

#[test]
fn a_reordered_first_packet_makes_a_sequence_nak_and_a_go_back() {
    // Held at the sender's port (egress), then at the receiver's (ingress).
    for (node, dir) in [
        (NodeId(0), "role = \"client\"\ndir = \"out\""),
        (NodeId(1), "role = \"server\"\ndir = \"in\""),
    ] {
        let rule = format!(
            "{dir}\nclass = \"request\"\nposition = \"first\"\nretransmit = false\n\
             action = \"reorder\"\nbehind = 1"
        );
        let options = Options { len: 4000, ..Options::new() };
        let mut p = spawn(sim(1, Some(inline(&rule))), options, Rc::default());
        let (report, done) = send_all(&mut p);
        all_succeeded(&done);
        assert_delivered(&p);
        let fabric = &p.sim.world().fabric;
        let c = fabric.counters();
        assert_eq!(c.held_scenario, MESSAGES, "{dir}: each message's FIRST, once");
        assert_eq!(c.scenario_firings, MESSAGES);
        assert!(fabric.firings().iter().all(|(n, _)| *n == node));
        assert!(counters(&report, 1).out_of_seq_request >= 1, "{dir}: a MIDDLE came first");
        assert!(counters(&report, 0).rcvd_seq_err >= 1, "{dir}: the requester went back");
    }
}

#[test]
fn without_a_handler_device_faults_queue_for_the_caller() {
    // The world's fabric without its handler: the ports' device faults wait
    // in take_device_faults(). Handed out when the 10th SEND is delivered,
    // they are applied after that step: the 11th message meets the RNRs.
    let ports = uroce_harness::world::WorldBuilder::new(2, FabricConfig::new(1))
        .scenario(load("rnr-retry"))
        .ports();
    let watch = Rc::new(Watch::default());
    let mut p = spawn(sim(1, None), Options::new(), watch.clone());
    let world = p.sim.world();
    let hcas: Vec<SharedHca> = world.hosts.iter().map(|h| h.hca.clone()).collect();
    let placeholder = Fabric::new(FabricConfig::new(0), vec![hcas[0].clone()]);
    let fabric = core::mem::replace(&mut world.fabric, placeholder);
    world.fabric = fabric.with_ports(ports);
    // The requester's RNR NAKs when each SEND completed.
    let mut rnr_at = Vec::new();
    let mut completed = 0;
    let mut taken = Vec::new();
    while !(p.client.is_finished() && p.server.is_finished()) {
        assert!(p.sim.step(), "SEND {} stuck", watch.sending.get());
        if let Some(failure) = p.sim.failure() {
            panic!("{failure}");
        }
        let world = p.sim.world();
        for (node, action) in world.fabric.take_device_faults() {
            let now = world.now();
            let fault = uroce_harness::world::device_fault(&action, now);
            hcas[node.0].lock().inject_fault(now, fault).unwrap();
            taken.push((watch.sending.get(), node, action.kind, action.count));
        }
        let successes = hcas[0].lock().completion_tally().successes();
        if successes > completed {
            completed = successes;
            rnr_at.push(hcas[0].lock().counters().rcvd_rnr_err);
        }
    }
    let done = p.client.output().unwrap().expect("the client");
    all_succeeded(&done);
    assert_delivered(&p);
    assert_eq!(taken, [(10, NodeId(1), DeviceActionKind::Rnr, 3)]);
    // Every SEND up to the 10th completed without an RNR NAK; the 11th
    // met all three.
    assert_eq!(rnr_at.len() as u64, MESSAGES, "{rnr_at:?}");
    assert!(rnr_at[..10].iter().all(|&n| n == 0), "{rnr_at:?}");
    assert_eq!(rnr_at[10..], [3; MESSAGES as usize - 10]);
    assert_eq!(hcas[0].lock().counters().rcvd_rnr_err, 3);
    let world = p.sim.world();
    assert!(world.fabric.take_device_faults().is_empty());
}

#[test]
fn duplicated_acks_and_a_corrupted_request() {
    // Node 0 receives every ACK twice, 50 us apart; the third request it
    // sends has a bit flipped: node 1 drops it (ICRC), node 0 retries.
    let text = r#"
        [scenario]
        name = "dup-and-corrupt"
        summary = "ghost ACKs and one bad ICRC"
        [[rule]]
        role = "client"
        dir = "in"
        class = "ack"
        action = "duplicate"
        gap_us = 50
        [[rule]]
        role = "client"
        dir = "out"
        class = "request"
        nth = 3
        action = "corrupt"
    "#;
    let mut p = pair(1, Some(Scenario::parse(text, "inline").unwrap()));
    let (report, done) = send_all(&mut p);
    all_succeeded(&done);
    assert_delivered(&p);
    let fabric = &p.sim.world().fabric;
    let c = fabric.counters();
    assert_eq!(c.corrupted, 1);
    assert_eq!(counters(&report, 1).rcvd_icrc_err, 1);
    let acks = fabric.port(NodeId(0)).unwrap().summary().rules[0].fired;
    assert!(acks >= MESSAGES, "{acks}");
    assert_eq!(c.duplicated, acks);
    assert!(counters(&report, 0).completer_retry_err >= 1);
}
