//! The HCA fuzz bodies (`uroce_tests::hca_fuzz`) under proptest, checks that
//! they reach deep into the engines, checks of the guarded memory itself,
//! and regressions found by fuzzing.
//!
//! The proptest runs use fixed seeds: the same inputs every time, a few
//! seconds in a debug build. (With random seeds an unlucky input could hit
//! the open bug below, which spins for minutes in a debug build.) Change a
//! seed, or run the cargo-fuzz targets, to explore further.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::net::Ipv4Addr;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use uroce_device::mem::{DriverMemory, HostMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::{Endpoint, Hca, Instant, SharedHca};
use uroce_tests::hca_fuzz::{
    hca_packets, hca_packets_report, hca_wqes, hca_wqes_report, AllocKind, GuardedMemory, RunReport,
};
use uroce_tests::world::{cap, tuning, ALL_ACCESS};
use uroce_verbs::connect::{self, Remote};
use uroce_verbs::{Context, Gid, QpInitAttr, QpType, RemoteTarget, Rkey, SendWr, WrOpcode};
use uroce_wire::frame::FrameRepr;
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{aeth, bth, Opcode, Psn, Qpn};

fn config(cases: u32, seed: u64) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Deterministic pseudo-random inputs (xorshift), for the reach checks.
fn inputs(seed: u64, count: usize, max_len: u64) -> Vec<Vec<u8>> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = next() % max_len;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect()
}

fn total(reports: impl Iterator<Item = RunReport>) -> RunReport {
    let mut t = RunReport::default();
    for r in reports {
        t.fed += r.fed;
        t.sent += r.sent;
        t.actions += r.actions;
        t.checked_accesses += r.checked_accesses;
        for (status, n) in r.completions {
            *t.completions.entry(status).or_default() += n;
        }
        let (c, tc) = (&r.counters, &mut t.counters);
        tc.rcvd_pkts += c.rcvd_pkts;
        tc.duplicate_request += c.duplicate_request;
        tc.out_of_seq_request += c.out_of_seq_request;
        tc.rcvd_rnr_err += c.rcvd_rnr_err;
        tc.send_rnr_err += c.send_rnr_err;
        tc.completer_retry_err += c.completer_retry_err;
        tc.rcvd_ghost_response += c.rcvd_ghost_response;
        tc.send_nak += c.send_nak;
        tc.cq_overrun += c.cq_overrun;
        tc.bad_wqe += c.bad_wqe;
    }
    t
}

#[test]
fn empty_inputs_run() {
    hca_packets(&[]);
    hca_wqes(&[]);
}

/// Random inputs already get past the receive checks into every engine:
/// the harness is not testing only the drop paths.
#[test]
fn the_packet_harness_reaches_the_engines() {
    let t = total(inputs(1, 48, 3000).iter().map(|d| hca_packets_report(d)));
    let c = &t.counters;
    assert!(c.rcvd_pkts > 100, "{t:#?}");
    assert!(c.duplicate_request > 0 && c.out_of_seq_request > 0, "{t:#?}");
    assert!(c.send_nak > 0 && c.rcvd_ghost_response > 0, "{t:#?}");
    assert!(c.completer_retry_err > 0 && c.cq_overrun > 0, "{t:#?}");
    assert!(t.sent > 0 && t.checked_accesses > 1000, "{t:#?}");
    for status in ["Success", "WrFlushErr", "LocProtErr", "RemInvReqErr"] {
        assert!(t.completions.contains_key(status), "no {status} completion: {t:#?}");
    }
}

/// Hostile WQEs get refused, and proper ones mixed in still complete.
#[test]
fn the_wqe_harness_reaches_the_engines() {
    let t = total(inputs(2, 24, 3000).iter().map(|d| hca_wqes_report(d)));
    let c = &t.counters;
    assert!(c.bad_wqe > 0 && c.rcvd_pkts > 100, "{t:#?}");
    assert!(t.sent > 100 && t.fed > 100, "{t:#?}");
    for status in ["Success", "LocQpOpErr", "LocProtErr", "RemAccessErr"] {
        assert!(t.completions.contains_key(status), "no {status} completion: {t:#?}");
    }
}

proptest! {
    #![proptest_config(config(1024, 0x5eed_0001))]

    #[test]
    fn packets_never_break_the_device(data in vec(any::<u8>(), 0..3000)) {
        hca_packets(&data);
    }
}

proptest! {
    #![proptest_config(config(512, 0x5eed_0002))]

    #[test]
    fn a_hostile_application_never_breaks_the_device(data in vec(any::<u8>(), 0..3000)) {
        hca_wqes(&data);
    }
}

// ---- the guard itself --------------------------------------------------

/// A guarded memory with one ring and one buffer of 4096 bytes whose bytes
/// 100..1100 are registered (read-write) and 2000..2100 read-only.
fn guarded() -> (GuardedMemory, u64, u64) {
    let mem = GuardedMemory::new(1 << 20);
    mem.set_mode(AllocKind::Ring);
    let ring = mem.allocate(512, 4096).unwrap();
    mem.set_mode(AllocKind::Buffer);
    let buf = mem.allocate(4096, 4096).unwrap();
    mem.add_region(1, buf + 100, 1000, true, true, "rw");
    mem.add_region(2, buf + 2000, 100, true, false, "ro");
    (mem, ring, buf)
}

#[test]
fn the_guard_lets_rings_and_regions_through() {
    let (mem, ring, buf) = guarded();
    let mut b = [0u8; 8];
    mem.read(ring + 504, &mut b).unwrap();
    mem.store_release_u32(ring, 7).unwrap();
    mem.write(buf + 100, &[1; 1000]).unwrap();
    mem.read(buf + 2000, &mut b).unwrap();
    assert_eq!(mem.fetch_add_u64(buf + 104, 1).unwrap(), 0x0101_0101_0101_0101);
    mem.read(0, &mut []).unwrap_or(());
    assert!(mem.checked() >= 5);
}

#[test]
#[should_panic(expected = "outside every ring and registered region")]
fn the_guard_catches_a_read_past_a_partial_registration() {
    let (mem, _, buf) = guarded();
    let mut b = [0u8; 8];
    let _ = mem.read(buf + 1096, &mut b);
}

#[test]
#[should_panic(expected = "outside every ring and registered region")]
fn the_guard_catches_a_read_before_a_partial_registration() {
    let (mem, _, buf) = guarded();
    let _ = mem.read(buf + 99, &mut [0u8; 1]);
}

#[test]
#[should_panic(expected = "may not write")]
fn the_guard_catches_a_write_to_a_read_only_region() {
    let (mem, _, buf) = guarded();
    let _ = mem.write(buf + 2000, &[0u8; 4]);
}

#[test]
#[should_panic(expected = "outside every ring and registered region")]
fn the_guard_catches_a_freed_ring() {
    let (mem, ring, _) = guarded();
    mem.free(ring);
    let _ = mem.load_acquire_u32(ring);
}

#[test]
#[should_panic(expected = "outside every ring and registered region")]
fn the_guard_catches_a_deregistered_region() {
    let (mem, _, buf) = guarded();
    mem.remove_region(1);
    let _ = mem.compare_swap_u64(buf + 104, 0, 1);
}

// ---- regressions found by fuzzing --------------------------------------

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// Runs `f` on another thread; fails if it panics or takes longer than
/// `limit` (the thread is left running: a hang cannot be stopped).
fn within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (done, wait) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match wait.recv_timeout(limit) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("still running after {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("panicked"),
    }
}

/// cargo fuzz (hca_packets) found 4 to 12 s timeouts (two artifacts, the
/// same stack); these are the same case written by hand in the harness's
/// input language: setup bytes, then a READ and a SEND posted on the RC QP
/// connected to the fake peer, both sent, then an ACK from the peer whose
/// AETH is a PSN sequence error NAK (first input) or an RNR NAK (second)
/// for the SEND's PSN. A run takes microseconds; with the bug, seconds in a
/// release build and minutes in a debug build.
#[test]
fn regression_seq_nak_behind_a_read_spins_in_retry() {
    let prefix = concat!(
        "020707070301000000000000000000000000",         // setup
        "ac0004000101020001000240010000010000000000",   // post READ on QP 0
        "ac000200010101020001000240010000010000000000", // post SEND on QP 0
        "8807",                                         // send both
    );
    let naks = [
        "000007000600050000000000c001000a", // NAK (PSN sequence error), PSN 1
        "00000700060004010000000000c001000a", // RNR NAK (timer 1), PSN 1
    ];
    for nak in naks {
        let input = unhex(&format!("{prefix}{nak}"));
        within(Duration::from_secs(5), move || hca_packets(&input));
    }
}

/// The same bug without the harness. QP 16 has a READ (PSN 0) and a SEND
/// (PSN 1) outstanding; a NAK "PSN sequence error" for PSN 1 arrives.
/// `on_seq_nak` first acknowledges PSN 0, which takes the READ as lost (an
/// implied NAK) and calls `retry(0)`: the requester goes back to the READ
/// (`req.index = 0`, `sent_pkts = 0`). Then `on_seq_nak` calls `retry(1)`:
/// `start` is the SEND (index 1) but `end` is `req.index` = 0, so
/// `while i != end` walks 2^32 - 1 ring indices (comp/retry.rs, `retry`).
#[test]
fn seq_nak_for_a_send_behind_an_unanswered_read_returns_promptly() {
    within(Duration::from_secs(5), || {
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let gids = vec![Gid::link_local_from_mac([2, 0, 0, 0, 0, 1]), Gid::from(ip)];
        let memory = Arc::new(SimMemory::strict(1 << 24));
        let hca = Hca::new(HcaConfig::default(), gids, memory.clone()).unwrap();
        let mut hca = SharedHca::new(hca, memory);
        let ctx = Context::open(&hca);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(8, 1, 0),
            sq_sig_all: false,
        };
        let qp = pd.create_qp(&init).unwrap();
        connect::to_init(&qp, ALL_ACCESS, 0).unwrap();
        let remote = Remote { gid: Gid::from(peer), qpn: Qpn::new(0x100), psn: 0 };
        connect::to_rts(&qp, Some(remote), &tuning()).unwrap();
        let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
        let mut read = SendWr::new(1, WrOpcode::RdmaRead);
        read.sg_list = vec![mr.sge(0, 64)];
        read.remote = RemoteTarget { addr: 0x1000, rkey: Rkey(0x1234) };
        let mut send = SendWr::new(2, WrOpcode::Send);
        send.sg_list = vec![mr.sge(0, 64)];
        qp.post_send(&[read, send]).unwrap();
        let mut buf = vec![0u8; uroce_hca::endpoint::MAX_PACKET_LEN];
        let now = Instant::from_nanos(1_000);
        let mut sent = 0;
        while hca.poll_transmit(now, &mut buf).is_some() {
            sent += 1;
        }
        assert_eq!(sent, 2, "the READ request and the SEND");
        let bth = bth::Repr::new(Opcode::RC_ACKNOWLEDGE, qp.qpn(), Psn::new(1), 0);
        let nak = aeth::Repr { syndrome: aeth::Syndrome::from_u8(0x60), msn: 0 };
        let ext = ExtHeaders { aeth: Some(nak), ..ExtHeaders::default() };
        let roce = Repr { bth, ext, payload: &[] };
        let frame = FrameRepr::ipv4((peer, ip), 1, 0xc000, roce).unwrap();
        let mut packet = vec![0; frame.buffer_len()];
        frame.emit(&mut packet).unwrap();
        hca.receive(now.plus_nanos(1_000), &packet);
    });
}
