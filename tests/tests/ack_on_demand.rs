//! ACKs on demand (`HcaConfig::ack_probe_ns`): the last packet of an
//! unsignaled SEND or WRITE that nothing waits behind goes without AckReq,
//! a later message's ACK covers it, and a requester that then falls
//! silent sends that packet again asking for an ACK (an ACK probe).

use std::sync::Arc;
use uroce::world::WorldBuilder;
use uroce_device::mem::{DriverMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::counters::Counters;
use uroce_hca::trace::{ResponseVerdict, Step};
use uroce_hca::Instant;
use uroce_sim::{Action, FabricConfig, Matcher, NodeId, Probability, Rule};
use uroce_tests::world::{cap, World, ALL_ACCESS};
use uroce_verbs::connect::Tuning;
use uroce_verbs::{Mr, Qp, QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};
use uroce_wire::Opcode;

const MS: u64 = 1_000_000;
/// Messages each way in a ping-pong.
const ROUNDS: u64 = 64;
/// Send queue depth: half of it (16) is the most WQEs that go without
/// AckReq in a row.
const SQ_DEPTH: u32 = 32;
/// Timer code 14: 67 ms, long enough for a 1 ms probe.
const LONG_TIMEOUT: u8 = 14;
/// Bytes per message.
const MSG: u64 = 64;
/// Each MR: messages sent from `[0, AREA)`, received into `[AREA, 2 AREA)`,
/// each at its own offset.
const AREA: u64 = ROUNDS * MSG;

struct Pair {
    w: World,
    a: Qp,
    b: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

fn pair(config: HcaConfig, timeout: u8) -> Pair {
    pair_on(FabricConfig::new(11), config, Tuning::with_timeout(timeout))
}

fn pair_on(fabric: FabricConfig, config: HcaConfig, tuning: Tuning) -> Pair {
    let memory = |_| Arc::new(SimMemory::strict(1 << 30)) as Arc<dyn DriverMemory>;
    let builder = WorldBuilder::new(2, fabric).hca_config(config).memory(memory);
    let w = World::from_builder(builder);
    let a = w.qp(0, QpType::Rc, cap(SQ_DEPTH, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(SQ_DEPTH, 1, 0));
    w.connect(0, &a, 1, &b, &tuning);
    let mr_a = w.nodes[0].pd.alloc_mr(2 * AREA, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(2 * AREA, ALL_ACCESS).unwrap();
    for node in &w.nodes {
        node.hca.lock().trace_steps(4096);
    }
    Pair { w, a, b, mr_a, mr_b }
}

/// SEND number `i`, its bytes `tag` and `i` (written before the post).
fn send(mr: &Mr, i: u64, tag: u8, flags: SendFlags) -> SendWr {
    mr.write(i * MSG, &[tag; MSG as usize]).unwrap();
    mr.write(i * MSG, &i.to_le_bytes()).unwrap();
    let mut wr = SendWr::new(i, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(i * MSG, MSG as u32)];
    wr.flags = flags;
    wr
}

fn recv(mr: &Mr, i: u64) -> RecvWr {
    RecvWr { wr_id: i, sg_list: vec![mr.sge(AREA + i * MSG, MSG as u32)] }
}

/// Checks that receive `i` in `mr` holds SEND `i` with `tag`.
fn check_received(mr: &Mr, i: u64, tag: u8) {
    let got = mr.read_vec(AREA + i * MSG, MSG as usize).unwrap();
    let mut want = vec![tag; MSG as usize];
    want[..8].copy_from_slice(&i.to_le_bytes());
    assert_eq!(got, want, "message {i}");
}

/// Runs the fabric until node `n` completes receive `i`; returns the send
/// completions met on the way.
fn wait_recv(w: &mut World, n: usize, i: u64) -> usize {
    let mut sends = 0;
    for _ in 0..1000 {
        for wc in w.wait(n, 1, 10 * MS) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.wr_id, i, "receives complete in order, once each");
                return sends;
            }
            sends += 1;
        }
    }
    panic!("node {n}: no receive completion");
}

/// A SEND ping-pong of `ROUNDS` messages each way, every `signal_every`-th
/// WR (and the last) signaled; returns the send completions each side saw.
fn ping_pong(p: &mut Pair, signal_every: u64) -> [usize; 2] {
    let flags = |i: u64| {
        if (i + 1) % signal_every == 0 || i + 1 == ROUNDS {
            SendFlags::SIGNALED
        } else {
            SendFlags::EMPTY
        }
    };
    let mut completed = [0; 2];
    for i in 0..ROUNDS {
        p.b.post_recv(&[recv(&p.mr_b, i)]).unwrap();
        p.a.post_recv(&[recv(&p.mr_a, i)]).unwrap();
        p.a.post_send(&[send(&p.mr_a, i, 0xa, flags(i))]).unwrap();
        completed[1] += wait_recv(&mut p.w, 1, i);
        check_received(&p.mr_b, i, 0xa);
        p.b.post_send(&[send(&p.mr_b, i, 0xb, flags(i))]).unwrap();
        completed[0] += wait_recv(&mut p.w, 0, i);
        check_received(&p.mr_a, i, 0xb);
    }
    p.w.settle(200 * MS);
    for (n, c) in completed.iter_mut().enumerate() {
        *c += p.w.nodes[n].cq.poll(64).unwrap().len();
    }
    completed
}

fn counters(w: &World, n: usize) -> Counters {
    w.nodes[n].hca.lock().counters().clone()
}

/// Node `n`'s decisions, with their times.
fn steps(w: &World, n: usize) -> Vec<(Instant, Step)> {
    let mut hca = w.nodes[n].hca.lock();
    std::iter::from_fn(|| hca.poll_step()).collect()
}

/// ACKs node `n` received that moved its completer.
fn acks_received(steps: &[(Instant, Step)]) -> usize {
    steps
        .iter()
        .filter(|(_, s)| {
            matches!(
                s,
                Step::Response {
                    opcode: Opcode::RC_ACKNOWLEDGE,
                    verdict: ResponseVerdict::Ack { progressed: true },
                    ..
                }
            )
        })
        .count()
}

#[test]
fn a_ping_pong_of_unsignaled_sends_asks_for_one_ack_in_sixteen() {
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    let completed = ping_pong(&mut p, 16);
    assert_eq!(completed, [4, 4], "the signaled WRs complete");
    for n in 0..2 {
        let c = counters(&p.w, n);
        // Each side: 64 requests, and an ACK for the peer's 16th, 32nd,
        // 48th and 64th (the signaled ones).
        assert_eq!(c.sent_pkts, ROUNDS + 4, "node {n}: {c:?}");
        assert_eq!((c.ack_probes, c.completer_retry_err, c.duplicate_request), (0, 0, 0));
        assert_eq!(acks_received(&steps(&p.w, n)), 4, "node {n}");
    }
}

#[test]
fn with_probes_off_every_message_asks_for_an_ack_as_rxe_does() {
    let config = HcaConfig { ack_probe_ns: 0, ..HcaConfig::default() };
    let mut p = pair(config, LONG_TIMEOUT);
    assert_eq!(ping_pong(&mut p, 16), [4, 4]);
    for n in 0..2 {
        let c = counters(&p.w, n);
        assert_eq!(c.sent_pkts, 2 * ROUNDS, "node {n}: {c:?}");
        assert_eq!(acks_received(&steps(&p.w, n)) as u64, ROUNDS, "node {n}");
    }
}

#[test]
fn signaled_sends_and_short_timeouts_keep_an_ack_per_message() {
    // Every WR signaled: its completion needs its ACK.
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    assert_eq!(ping_pong(&mut p, 1), [ROUNDS as usize; 2]);
    assert_eq!(counters(&p.w, 0).sent_pkts, 2 * ROUNDS);
    // Timer code 8 (1 ms): too short for a 1 ms probe to come first.
    let mut p = pair(HcaConfig::default(), 8);
    assert_eq!(ping_pong(&mut p, 16), [4, 4]);
    assert_eq!(counters(&p.w, 0).sent_pkts, 2 * ROUNDS);
    assert_eq!(counters(&p.w, 0).ack_probes, 0);
}

#[test]
fn a_requester_that_falls_silent_probes_for_its_ack() {
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::EMPTY)]).unwrap();
    wait_recv(&mut p.w, 1, 1);
    let delivered_at = p.w.now();
    p.w.settle(200 * MS);
    let (ca, cb) = (counters(&p.w, 0), counters(&p.w, 1));
    assert_eq!(ca.ack_probes, 1, "{ca:?}");
    assert_eq!(ca.sent_pkts, 2, "the SEND and its probe");
    assert_eq!(ca.completer_retry_err, 0, "a probe is no go-back");
    assert_eq!(cb.duplicate_request, 1, "the probe is a duplicate: answered, not executed");
    assert_eq!(cb.sent_pkts, 1, "one ACK");
    let steps = steps(&p.w, 0);
    let probe_at = steps
        .iter()
        .find_map(|&(at, s)| matches!(s, Step::AckProbe { .. }).then_some(at))
        .expect("an AckProbe step");
    let waited_ns = probe_at.as_nanos() - delivered_at.as_nanos();
    assert!(
        (900_000..2 * MS).contains(&waited_ns),
        "the probe goes about ack_probe_ns (1 ms) after the send: {waited_ns} ns"
    );
    assert_eq!(acks_received(&steps), 1, "the probe's ACK retires the WQE");
    // Nothing more: no probe, no retransmission.
    p.w.settle(200 * MS);
    assert_eq!(counters(&p.w, 0).sent_pkts, 2);
}

#[test]
fn a_lost_unsignaled_send_is_recovered_by_the_probe_before_the_retransmit_timer() {
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_SEND_ONLY).from(NodeId(0)), Action::Drop).nth(1),
    );
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    let sent_at = p.w.now();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::EMPTY)]).unwrap();
    wait_recv(&mut p.w, 1, 1);
    check_received(&p.mr_b, 1, 0xa);
    let took_ns = p.w.now().as_nanos() - sent_at.as_nanos();
    assert!(took_ns < 3 * MS, "delivered by the 1 ms probe, not the 67 ms timer: {took_ns} ns");
    p.w.settle(200 * MS);
    let (ca, cb) = (counters(&p.w, 0), counters(&p.w, 1));
    assert_eq!((ca.ack_probes, ca.completer_retry_err), (1, 0), "{ca:?}");
    assert_eq!(cb.duplicate_request, 0, "the probe was the first copy to arrive");
}

#[test]
fn an_unsignaled_ping_pong_survives_loss_duplication_and_reordering() {
    let (mut probes, mut go_backs) = (0, 0);
    for seed in 0..12 {
        let mut fabric = FabricConfig::new(100 + seed);
        fabric.faults.loss = Probability::from_ppm(50_000);
        fabric.faults.duplicate = Probability::from_ppm(30_000);
        fabric.faults.reorder = Probability::from_ppm(30_000);
        fabric.faults.reorder_max_delay_ns = 2 * MS;
        let mut p = pair_on(fabric, HcaConfig::default(), Tuning::with_timeout(LONG_TIMEOUT));
        // Every receive arrives once, in order, with its bytes (checked in
        // `ping_pong`); every signaled WR completes.
        assert_eq!(ping_pong(&mut p, 16), [4, 4], "seed {seed}");
        for n in 0..2 {
            let c = counters(&p.w, n);
            assert_eq!(c.retry_exceeded_err, 0, "seed {seed} node {n}: {c:?}");
            probes += c.ack_probes;
            go_backs += c.completer_retry_err;
        }
    }
    // Lost replies and ACKs leave requesters silent: probes answer them,
    // long before a retransmit timer (67 ms) would go back.
    assert!(probes > 0, "no ACK probe in 12 faulty runs");
    assert!(go_backs < probes, "{go_backs} go-backs against {probes} probes");
}

#[test]
fn a_trickle_of_unsignaled_sends_spends_no_retry_at_the_shortest_timeout_allowed() {
    // Timer code 10 (4.2 ms) is the shortest that allows a 1 ms probe,
    // and no retry at all: a retransmit timeout would fail the QP.
    let tuning = Tuning { retry_cnt: 0, ..Tuning::with_timeout(10) };
    let mut p = pair_on(FabricConfig::new(12), HcaConfig::default(), tuning);
    const TRICKLE: u64 = 20;
    for i in 0..TRICKLE {
        p.b.post_recv(&[recv(&p.mr_b, i)]).unwrap();
    }
    // A post every 0.9 ms: each alone would wait ~1 ms for a probe, and
    // 15 of them ~13 ms, past the timer, if the probe time ran from the
    // last send instead of the first without AckReq.
    for i in 0..TRICKLE {
        let flags = if i + 1 == TRICKLE { SendFlags::SIGNALED } else { SendFlags::EMPTY };
        p.a.post_send(&[send(&p.mr_a, i, 0xa, flags)]).unwrap();
        let until = p.w.now().plus_nanos(900_000);
        p.w.fabric.run_until(until);
    }
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, WcStatus::Success, "{done:?}");
    let c = counters(&p.w, 0);
    assert_eq!((c.completer_retry_err, c.retry_exceeded_err), (0, 0), "{c:?}");
    for i in 0..TRICKLE {
        assert_eq!(wait_recv(&mut p.w, 1, i), 0);
        check_received(&p.mr_b, i, 0xa);
    }
}

#[test]
fn a_signaled_local_operation_behind_unsignaled_sends_completes_at_once() {
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::EMPTY)]).unwrap();
    wait_recv(&mut p.w, 1, 1);
    // A LOCAL_INV completes in order, after the SEND's ACK: asked for now,
    // not a probe time later.
    let other = p.w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mut inv = SendWr::new(2, WrOpcode::LocalInv);
    inv.imm_or_inv = other.lkey().0;
    inv.flags = SendFlags::SIGNALED;
    let posted_at = p.w.now();
    p.a.post_send(&[inv]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].opcode), (2, WcOpcode::LocalInv), "{done:?}");
    let took_ns = p.w.now().as_nanos() - posted_at.as_nanos();
    assert!(took_ns < 100_000, "the LOCAL_INV completed {took_ns} ns after its post");
    assert_eq!(counters(&p.w, 0).ack_probes, 1);
}

#[test]
fn acks_on_demand_leave_the_device_budget_to_others() {
    // A budget of 16 PSNs: two QPs that trickle unsignaled SENDs must not
    // hold it with PSNs nobody asked an ACK for.
    let config = HcaConfig { max_device_unacked_psns: 16, ..HcaConfig::default() };
    let mut p = pair(config, LONG_TIMEOUT);
    let tuning = Tuning::with_timeout(LONG_TIMEOUT);
    let extra: Vec<(Qp, Qp)> = (0..2)
        .map(|_| {
            let a = p.w.qp(0, QpType::Rc, cap(SQ_DEPTH, 1, 0));
            let b = p.w.qp(1, QpType::Rc, cap(SQ_DEPTH, 1, 0));
            p.w.connect(0, &a, 1, &b, &tuning);
            (a, b)
        })
        .collect();
    for (q, (a, b)) in extra.iter().enumerate() {
        for i in 0..8 {
            let id = 100 * (q as u64 + 1) + i;
            b.post_recv(&[RecvWr { wr_id: id, sg_list: vec![p.mr_b.sge(AREA, 64)] }]).unwrap();
            let mut wr = SendWr::new(id, WrOpcode::Send);
            wr.sg_list = vec![p.mr_a.sge(0, 64)];
            wr.flags = SendFlags::EMPTY;
            a.post_send(&[wr]).unwrap();
            let until = p.w.now().plus_nanos(20_000);
            p.w.fabric.run_until(until);
        }
    }
    // The third QP's signaled SEND goes at once.
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    let posted_at = p.w.now();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::SIGNALED)]).unwrap();
    let done = loop {
        let wcs = p.w.wait(0, 1, 100 * MS);
        assert!(!wcs.is_empty(), "no completion");
        if wcs[0].wr_id == 1 {
            break wcs[0];
        }
    };
    assert_eq!(done.status, WcStatus::Success);
    let took_ns = p.w.now().as_nanos() - posted_at.as_nanos();
    assert!(took_ns < 200_000, "the SEND completed {took_ns} ns after its post");
}

/// A small deterministic generator for the random workload below.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_unsignaled_sends_and_writes_under_faults_arrive_once_and_complete() {
    const MESSAGES: u64 = 40;
    const SLOT: u64 = 4096;
    const WRITES_AT: u64 = MESSAGES * SLOT;
    let mut probes = 0;
    for seed in 0..16 {
        let mut fabric = FabricConfig::new(300 + seed);
        fabric.faults.loss = Probability::from_ppm(30_000);
        fabric.faults.duplicate = Probability::from_ppm(20_000);
        fabric.faults.reorder = Probability::from_ppm(20_000);
        fabric.faults.reorder_max_delay_ns = MS;
        let memory = |_| Arc::new(SimMemory::strict(1 << 30)) as Arc<dyn DriverMemory>;
        let builder = WorldBuilder::new(2, fabric).hca_config(HcaConfig::default()).memory(memory);
        let mut w = World::from_builder(builder);
        let a = w.qp(0, QpType::Rc, cap(SQ_DEPTH, 1, 0));
        let b = w.qp(1, QpType::Rc, cap(64, 1, 0));
        // MTU 1024: 1500 and 3000 bytes are messages of 2 and 3 packets.
        w.connect(0, &a, 1, &b, &Tuning::with_timeout(LONG_TIMEOUT));
        let mr_a = w.nodes[0].pd.alloc_mr(2 * WRITES_AT, ALL_ACCESS).unwrap();
        let mr_b = w.nodes[1].pd.alloc_mr(2 * WRITES_AT, ALL_ACCESS).unwrap();
        let mut rng = Lcg(seed);
        let (mut sends, mut lens, mut early) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..MESSAGES {
            let len = [64, 1500, 3000][rng.below(3) as usize];
            let bytes: Vec<u8> = (0..len).map(|k| (k as u64 * 7 + i * 13 + seed) as u8).collect();
            mr_a.write(i * SLOT, &bytes).unwrap();
            let write = rng.below(3) == 0;
            lens.push(len as usize);
            let mut wr = if write {
                let mut wr = SendWr::new(i, WrOpcode::RdmaWrite);
                wr.remote = uroce_verbs::RemoteTarget {
                    addr: mr_b.addr() + WRITES_AT + i * SLOT,
                    rkey: mr_b.rkey(),
                };
                wr
            } else {
                b.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mr_b.sge(i * SLOT, SLOT as u32)] }])
                    .unwrap();
                sends.push((i, bytes.clone()));
                SendWr::new(i, WrOpcode::Send)
            };
            wr.sg_list = vec![mr_a.sge(i * SLOT, len as u32)];
            let signaled = i + 1 == MESSAGES || rng.below(8) == 0;
            wr.flags = if signaled { SendFlags::SIGNALED } else { SendFlags::EMPTY };
            // A full send queue waits for ACKs (a probe's, at worst).
            let mut tries = 0;
            while let Err((_, e)) = a.post_send(std::slice::from_ref(&wr)) {
                assert!(matches!(e, uroce_verbs::Error::NoMemory(_)), "{e}");
                tries += 1;
                assert!(tries < 100, "seed {seed}: the send queue never drained");
                let until = w.now().plus_nanos(MS / 2);
                w.fabric.run_until(until);
                early.extend(w.nodes[0].cq.poll(64).unwrap());
            }
            // Gaps of 0 to 1.5 ms: some long enough for a probe.
            let until = w.now().plus_nanos(rng.below(1_500_000));
            w.fabric.run_until(until);
        }
        w.settle(500 * MS);
        let mut at_a = early;
        at_a.extend(w.nodes[0].cq.poll(256).unwrap());
        assert!(at_a.iter().all(|wc| wc.status == WcStatus::Success), "seed {seed}: {at_a:?}");
        assert!(
            at_a.iter().any(|wc| wc.wr_id == MESSAGES - 1),
            "seed {seed}: the last WR completes"
        );
        let at_b = w.nodes[1].cq.poll(256).unwrap();
        let order: Vec<u64> = at_b.iter().map(|wc| wc.wr_id).collect();
        let expected: Vec<u64> = sends.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, expected, "seed {seed}: every SEND received once, in order");
        for (i, bytes) in &sends {
            assert_eq!(
                mr_b.read_vec(i * SLOT, bytes.len()).unwrap(),
                *bytes,
                "seed {seed} SEND {i}"
            );
        }
        for i in 0..MESSAGES {
            if expected.contains(&i) {
                continue;
            }
            let len = lens[i as usize];
            let src = mr_a.read_vec(i * SLOT, len).unwrap();
            let dst = mr_b.read_vec(WRITES_AT + i * SLOT, len).unwrap();
            assert_eq!(dst, src, "seed {seed} WRITE {i}");
        }
        let c = counters(&w, 0);
        assert_eq!(c.retry_exceeded_err, 0, "seed {seed}: {c:?}");
        probes += c.ack_probes;
    }
    assert!(probes > 0, "no ACK probe in 16 runs with gaps");
}

#[test]
fn a_wqe_refused_behind_an_unsignaled_send_completes_at_once() {
    // The refused WQE took PSNs it never sent: the probe still resends the
    // SEND, and the error completes in order right after its ACK.
    let tuning = Tuning { retry_cnt: 0, ..Tuning::with_timeout(10) };
    let mut p = pair_on(FabricConfig::new(13), HcaConfig::default(), tuning);
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::EMPTY)]).unwrap();
    wait_recv(&mut p.w, 1, 1);
    let mut bad = send(&p.mr_a, 2, 0xa, SendFlags::SIGNALED);
    bad.sg_list[0].lkey = uroce_verbs::Lkey(bad.sg_list[0].lkey.0 ^ 0xff00);
    let posted_at = p.w.now();
    p.a.post_send(&[bad]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].status), (2, WcStatus::LocProtErr), "{done:?}");
    let took_ns = p.w.now().as_nanos() - posted_at.as_nanos();
    assert!(took_ns < 100_000, "the refused WQE completed {took_ns} ns after its post");
    let c = counters(&p.w, 0);
    assert_eq!((c.ack_probes, c.completer_retry_err, c.retry_exceeded_err), (1, 0, 0), "{c:?}");
}

#[test]
fn a_qp_moved_to_sqd_reports_the_drain_only_after_the_ack() {
    use uroce_verbs::{AttrMask, Event, EventType, QpAttr, QpState};
    let mut p = pair(HcaConfig::default(), LONG_TIMEOUT);
    p.b.post_recv(&[recv(&p.mr_b, 1)]).unwrap();
    p.a.post_send(&[send(&p.mr_a, 1, 0xa, SendFlags::EMPTY)]).unwrap();
    wait_recv(&mut p.w, 1, 1);
    while p.w.nodes[0].ctx.next_event().is_some() {}
    let sqd =
        QpAttr { qp_state: Some(QpState::Sqd), en_sqd_async_notify: true, ..QpAttr::default() };
    p.a.modify(&sqd, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    let drained = Event::Async { event: EventType::SqDrained, element: p.a.qpn().value() };
    assert_eq!(p.w.nodes[0].ctx.next_event(), None, "the SEND is not acknowledged yet");
    let sqd_at = p.w.now();
    p.w.settle(10 * MS);
    assert_eq!(p.w.nodes[0].ctx.next_event(), Some(drained));
    let steps = steps(&p.w, 0);
    let probe_at = steps
        .iter()
        .find_map(|&(at, s)| matches!(s, Step::AckProbe { .. }).then_some(at))
        .expect("an AckProbe step");
    assert_eq!(probe_at, sqd_at, "the move to SQD probes at once");
    assert_eq!(acks_received(&steps), 1);
}
