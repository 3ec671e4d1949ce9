//! Responses that answer nothing outstanding have no effect.
//!
//! A requester acts on an ACK, NAK, READ response or atomic ACK only when
//! its PSN is one it sent and is still waiting for (`[comp.psn,
//! next_psn)`). Here a forger on the fabric sends well-formed responses
//! with valid ICRCs, from the peer's address to the requester's QP, with
//! PSNs behind that window: long gone, just acknowledged, or replayed.
//! The outstanding work must complete as if they had never arrived, and
//! the drops must show in `rcvd_ghost_response`.

use std::net::IpAddr;
use uroce_sim::{FabricConfig, NodeId};
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{
    Mr, Qp, QpState, QpType, RemoteTarget, SendWr, WcStatus, WorkCompletion, WrOpcode,
};
use uroce_wire::aeth::{self, NakCode, Syndrome};
use uroce_wire::frame::FrameRepr;
use uroce_wire::{atomic_ack_eth, bth, roce, Opcode, Psn};

const MS: u64 = 1_000_000;
/// The requester's first PSN: near the wrap, so "behind" crosses it.
const FIRST_PSN: u32 = 0x00ff_fff0;

struct Pair {
    w: World,
    a: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

/// Node 0's QP `a` (the requester under attack) connected to node 1's QP
/// `b` over RC, with 64 KiB regions on both sides.
fn rc_pair(retry_cnt: u8, rnr_retry: u8) -> Pair {
    let w = World::new(2, FabricConfig::new(11));
    let a = w.qp(0, QpType::Rc, cap(64, 2, 64));
    let b = w.qp(1, QpType::Rc, cap(64, 2, 64));
    let t = uroce_verbs::connect::Tuning { sq_psn: FIRST_PSN, retry_cnt, rnr_retry, ..tuning() };
    w.connect(0, &a, 1, &b, &t);
    let mr_a = w.nodes[0].pd.alloc_mr(64 * 1024, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(64 * 1024, ALL_ACCESS).unwrap();
    Pair { w, a, mr_a, mr_b }
}

impl Pair {
    /// The oldest PSN `a` has not seen acknowledged.
    fn comp_psn(&self) -> Psn {
        self.w.nodes[0].hca.borrow().qp(self.a.qpn()).unwrap().comp.psn
    }

    fn ghosts(&self) -> u64 {
        self.w.nodes[0].hca.borrow().counters().rcvd_ghost_response
    }

    fn counters(&self) -> uroce_hca::counters::Counters {
        self.w.nodes[0].hca.borrow().counters().clone()
    }

    fn state(&self) -> QpState {
        self.w.nodes[0].hca.borrow().qp(self.a.qpn()).unwrap().state
    }

    /// Sends a response to `a` as node 1 would: from node 1's address, with
    /// a valid ICRC.
    fn forge(&mut self, opcode: Opcode, psn: Psn, ext: roce::ExtHeaders, payload: &[u8]) {
        let (from, to) = (self.w.nodes[1].ip, self.w.nodes[0].ip);
        let bth = bth::Repr::new(opcode, self.a.qpn(), psn, payload.len());
        let repr = roce::Repr { bth, ext, payload };
        let frame = FrameRepr::ipv4((from, to), 0, 0xc000, repr).expect("frame");
        let mut bytes = vec![0; frame.buffer_len()];
        frame.emit(&mut bytes).expect("emit");
        self.w.fabric.inject(NodeId(1), IpAddr::V4(to), bytes);
    }

    /// An RC_ACKNOWLEDGE with `syndrome` at `psn`.
    fn forge_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let ext = roce::ExtHeaders {
            aeth: Some(aeth::Repr { syndrome, msn: 1 }),
            ..roce::ExtHeaders::default()
        };
        self.forge(Opcode::RC_ACKNOWLEDGE, psn, ext, &[]);
    }

    /// Runs one SEND of `len` bytes, with `forge` called once it is posted
    /// (the forged packets arrive before the real ACK), and returns its
    /// completion.
    fn send_under_attack(&mut self, wr_id: u64, forge: impl FnOnce(&mut Pair)) -> WorkCompletion {
        let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite);
        wr.sg_list = vec![self.mr_a.sge(0, 3000)];
        wr.remote = RemoteTarget { addr: self.mr_b.addr(), rkey: self.mr_b.rkey() };
        self.a.post_send(&[wr]).unwrap();
        forge(self);
        one(self.w.wait(0, 1, 100 * MS))
    }

    /// One plain WRITE, so that some PSNs are behind the window.
    fn warm_up(&mut self) {
        let c = self.send_under_attack(0, |_| {});
        assert_eq!(c.status, WcStatus::Success);
    }
}

fn one(mut completions: Vec<WorkCompletion>) -> WorkCompletion {
    assert_eq!(completions.len(), 1, "one completion: {completions:?}");
    completions.remove(0)
}

/// PSNs behind the window: the one just acknowledged, a few back, and far
/// back (a quarter of the PSN space, the edge the old check used).
fn stale_psns(comp_psn: Psn) -> [Psn; 4] {
    [comp_psn - 1, comp_psn - 3, comp_psn - (1 << 20), comp_psn - ((1 << 22) - 1)]
}

#[test]
fn a_stale_fatal_nak_fails_nothing() {
    for code in
        [NakCode::InvalidRequest, NakCode::RemoteAccessError, NakCode::RemoteOperationalError]
    {
        let mut p = rc_pair(7, 7);
        p.warm_up();
        let stale = stale_psns(p.comp_psn());
        let c = p.send_under_attack(1, |p| {
            for psn in stale {
                p.forge_ack(psn, Syndrome::Nak(code));
            }
        });
        assert_eq!((c.wr_id, c.status), (1, WcStatus::Success), "{code:?}");
        assert_eq!(p.state(), QpState::Rts, "{code:?}");
        assert_eq!(p.ghosts(), stale.len() as u64, "{code:?}: every forged NAK counted");
        // The connection goes on.
        let c = p.send_under_attack(2, |_| {});
        assert_eq!(c.status, WcStatus::Success);
    }
}

#[test]
fn eight_stale_sequence_naks_spend_no_retry() {
    let mut p = rc_pair(7, 7);
    p.warm_up();
    let comp_psn = p.comp_psn();
    let c = p.send_under_attack(1, |p| {
        for k in 0..8u32 {
            p.forge_ack(comp_psn - 1 - k * 1000, Syndrome::Nak(NakCode::PsnSequenceError));
        }
    });
    assert_eq!(c.status, WcStatus::Success);
    let counters = p.counters();
    assert_eq!(counters.rcvd_seq_err, 0, "no sequence NAK acted on");
    assert_eq!(counters.completer_retry_err, 0, "no go-back");
    assert_eq!(counters.rcvd_ghost_response, 8);
}

#[test]
fn stale_rnr_naks_cost_no_rnr_wait_and_no_rnr_retry() {
    // rnr_retry 0: one RNR NAK acted on would fail the WRITE.
    let mut p = rc_pair(7, 0);
    p.warm_up();
    let start = p.w.now();
    for i in 1..=20 {
        let comp_psn = p.comp_psn();
        let c = p.send_under_attack(i, |p| {
            // Timer code 0: 655 ms, were it obeyed.
            p.forge_ack(comp_psn - 1, Syndrome::RnrNak { timer_code: 0 });
        });
        assert_eq!((c.wr_id, c.status), (i, WcStatus::Success));
    }
    let elapsed_ns = p.w.now().nanos_since(start);
    assert!(elapsed_ns < 5 * MS, "20 WRITEs took {elapsed_ns} ns of virtual time");
    let counters = p.counters();
    assert_eq!(counters.rcvd_rnr_err, 0);
    assert_eq!(counters.rcvd_ghost_response, 20);
}

#[test]
fn a_stale_read_response_and_atomic_ack_are_not_placed() {
    let mut p = rc_pair(7, 7);
    p.warm_up();
    let source: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    p.mr_b.write(4096, &source).unwrap();
    p.mr_b.write(8192, &41u64.to_le_bytes()).unwrap();

    // A READ outstanding, and a forged READ RESPONSE ONLY of the right
    // length behind it.
    let mut read = SendWr::new(1, WrOpcode::RdmaRead);
    read.sg_list = vec![p.mr_a.sge(4096, 1000)];
    read.remote = RemoteTarget { addr: p.mr_b.addr() + 4096, rkey: p.mr_b.rkey() };
    p.a.post_send(&[read]).unwrap();
    let stale = p.comp_psn() - 1;
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr {
            syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
            msn: 1,
        }),
        ..roce::ExtHeaders::default()
    };
    p.forge(Opcode::RC_RDMA_READ_RESPONSE_ONLY, stale, ext, &[0xee; 1000]);
    let c = one(p.w.wait(0, 1, 100 * MS));
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 1000));
    assert_eq!(p.mr_a.read_vec(4096, 1000).unwrap(), source);

    // A FETCH_ADD outstanding, and a forged ATOMIC ACK behind it.
    let mut fetch_add = SendWr::new(2, WrOpcode::AtomicFetchAndAdd);
    fetch_add.sg_list = vec![p.mr_a.sge(0, 8)];
    fetch_add.remote = RemoteTarget { addr: p.mr_b.addr() + 8192, rkey: p.mr_b.rkey() };
    fetch_add.compare_add = 1;
    p.a.post_send(&[fetch_add]).unwrap();
    let stale = p.comp_psn() - 1;
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr {
            syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
            msn: 2,
        }),
        atomic_ack_eth: Some(atomic_ack_eth::Repr { orig: 0xdead_beef }),
        ..roce::ExtHeaders::default()
    };
    p.forge(Opcode::RC_ATOMIC_ACKNOWLEDGE, stale, ext, &[]);
    let c = one(p.w.wait(0, 1, 100 * MS));
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(p.mr_a.read_vec(0, 8).unwrap(), 41u64.to_le_bytes(), "the real original value");
    assert_eq!(p.mr_b.read_vec(8192, 8).unwrap(), 42u64.to_le_bytes(), "added once");
    assert_eq!(p.ghosts(), 2);
}

#[test]
fn a_nak_for_an_already_acknowledged_psn_is_dropped() {
    let mut p = rc_pair(7, 7);
    p.warm_up();
    // The WRITE of warm_up was 3 packets; NAK its middle and last PSNs.
    let acked = p.comp_psn();
    let c = p.send_under_attack(1, |p| {
        p.forge_ack(acked - 2, Syndrome::Nak(NakCode::RemoteAccessError));
        p.forge_ack(acked - 1, Syndrome::Nak(NakCode::PsnSequenceError));
    });
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(p.ghosts(), 2);
    assert_eq!(p.counters().completer_retry_err, 0);
}

#[test]
fn responses_when_nothing_is_outstanding_are_dropped() {
    let mut p = rc_pair(7, 7);
    p.warm_up();
    let next = p.comp_psn();
    // At and past the next PSN to be sent: never sent.
    p.forge_ack(next, Syndrome::Nak(NakCode::InvalidRequest));
    p.forge_ack(next + 5, Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS));
    p.w.settle(10 * MS);
    assert_eq!(p.ghosts(), 2);
    assert_eq!(p.state(), QpState::Rts);
    let c = p.send_under_attack(1, |_| {});
    assert_eq!(c.status, WcStatus::Success);
}

#[test]
fn a_repeated_sequence_nak_starts_one_go_back() {
    // A real sequence NAK (the first packet of a WRITE lost), then the same
    // NAK again while the go-back it caused is still unanswered (a delayed
    // duplicate): the second adds no go-back and spends no retry.
    use uroce_sim::{Action, Matcher, Rule};
    let mut p = rc_pair(7, 7);
    p.warm_up();
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_RDMA_WRITE_FIRST).from(NodeId(0)), Action::Drop)
            .nth(1),
    );
    let c = p.send_under_attack(1, |p| {
        while p.counters().rcvd_seq_err == 0 {
            p.w.fabric.step().expect("the NAK comes");
        }
        let nak_psn = p.comp_psn();
        p.forge_ack(nak_psn, Syndrome::Nak(NakCode::PsnSequenceError));
    });
    assert_eq!(c.status, WcStatus::Success);
    let counters = p.counters();
    assert_eq!(counters.rcvd_seq_err, 2, "both NAKs seen");
    assert_eq!(counters.completer_retry_err, 1, "one go-back");
}

#[test]
fn a_new_qp_does_not_take_a_destroyed_qps_number() {
    // A replayed or delayed packet of a closed connection must find no QP,
    // not the next connection in the same table slot.
    let mut p = rc_pair(7, 7);
    p.warm_up();
    let old_qpn = p.a.qpn();
    let Pair { w, a, .. } = p;
    uroce_verbs::connect::to_error(&a).ok();
    a.destroy().unwrap();
    let mut seen = vec![old_qpn];
    for _ in 0..4 {
        let qp = w.qp(0, QpType::Rc, cap(4, 1, 0));
        assert!(!seen.contains(&qp.qpn()), "{:?} given again", qp.qpn());
        seen.push(qp.qpn());
        qp.destroy().unwrap();
    }
    let b = w.qp(1, QpType::Rc, cap(4, 1, 0));
    let new = w.qp(0, QpType::Rc, cap(4, 1, 0));
    w.connect(0, &new, 1, &b, &tuning());
    // An ACK for the old QPN, from the same peer, at the new QP's PSN.
    let hca = &w.nodes[0].hca;
    let before = hca.borrow().counters().rcvd_unknown_qp;
    let (from, to) = (w.nodes[1].ip, w.nodes[0].ip);
    let bth = bth::Repr::new(Opcode::RC_ACKNOWLEDGE, old_qpn, Psn::new(0), 0);
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr { syndrome: Syndrome::Nak(NakCode::InvalidRequest), msn: 0 }),
        ..roce::ExtHeaders::default()
    };
    let frame = FrameRepr::ipv4((from, to), 0, 0xc000, roce::Repr { bth, ext, payload: &[] })
        .expect("frame");
    let mut bytes = vec![0; frame.buffer_len()];
    frame.emit(&mut bytes).unwrap();
    let mut w = w;
    w.fabric.inject(NodeId(1), IpAddr::V4(to), bytes);
    w.settle(MS);
    assert_eq!(w.nodes[0].hca.borrow().counters().rcvd_unknown_qp, before + 1);
    assert_eq!(w.nodes[0].hca.borrow().qp(new.qpn()).unwrap().state, QpState::Rts);
}

#[test]
fn a_nak_that_passes_a_lost_read_response_ends_nothing() {
    // READ then WRITE; the READ's response is lost, so the WRITE's ACK is an
    // implied NAK for the READ and the READ goes out again. A fatal NAK for
    // the (acknowledged) WRITE, arriving meanwhile, is in the window but
    // passes the unanswered READ: it must not end the READ, nor the WRITE.
    use uroce_sim::{Action, Matcher, Rule};
    let mut p = rc_pair(7, 7);
    p.warm_up();
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_RDMA_READ_RESPONSE_ONLY), Action::Drop).nth(1),
    );
    let source: Vec<u8> = (0..512u32).map(|i| (i * 3) as u8).collect();
    p.mr_b.write(4096, &source).unwrap();
    let read_psn = p.comp_psn();
    let mut read = SendWr::new(1, WrOpcode::RdmaRead);
    read.sg_list = vec![p.mr_a.sge(4096, 512)];
    read.remote = RemoteTarget { addr: p.mr_b.addr() + 4096, rkey: p.mr_b.rkey() };
    let mut write = SendWr::new(2, WrOpcode::RdmaWrite);
    write.sg_list = vec![p.mr_a.sge(0, 100)];
    write.remote = RemoteTarget { addr: p.mr_b.addr(), rkey: p.mr_b.rkey() };
    p.a.post_send(&[read, write]).unwrap();
    while p.counters().completer_retry_err == 0 {
        p.w.fabric.step().expect("the implied NAK comes");
    }
    assert_eq!(p.comp_psn(), read_psn, "held at the READ");
    p.forge_ack(read_psn + 1, Syndrome::Nak(NakCode::RemoteAccessError));
    let done = p.w.wait(0, 2, 100 * MS);
    let got: Vec<_> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(p.mr_a.read_vec(4096, 512).unwrap(), source);
    assert_eq!(p.state(), QpState::Rts);
}

#[test]
fn a_destroyed_qps_timers_do_not_follow_the_next_qp_in_its_slot() {
    // A QP destroyed while its retransmit timer runs leaves nothing behind:
    // the next QP in its table slot must not be woken by that timer (a
    // spurious timeout would start a go-back and spend its retries).
    use uroce_hca::Endpoint;
    let mut p = rc_pair(7, 7);
    p.warm_up();
    let now = p.w.now();
    p.w.fabric.link_down(NodeId(0), NodeId(1), now..now + std::time::Duration::from_secs(60));
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
    wr.sg_list = vec![p.mr_a.sge(0, 3000)];
    wr.remote = RemoteTarget { addr: p.mr_b.addr(), rkey: p.mr_b.rkey() };
    p.a.post_send(&[wr]).unwrap();
    p.w.settle(MS);
    let old = p.a.qpn();
    let armed = p.w.nodes[0].hca.borrow().qp(old).unwrap().comp.retransmit_at;
    assert!(armed.is_some(), "the WRITE is outstanding, its timer armed");
    let Pair { w, a, .. } = p;
    a.destroy().unwrap();
    assert_eq!(w.nodes[0].hca.borrow().poll_timeout(), None, "no timer outlives its QP");
    let new = w.qp(0, QpType::Rc, cap(4, 1, 0));
    let hca = w.nodes[0].hca.borrow();
    assert_eq!(hca.qp(new.qpn()).unwrap().comp.retransmit_at, None);
    assert_eq!(hca.poll_timeout(), None, "the new QP has nothing outstanding to time");
}
