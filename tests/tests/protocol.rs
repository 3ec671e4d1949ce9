//! One named scenario per protocol rule, on the simulated fabric with
//! targeted faults. Each test reads as the rule it checks.

use uroce_sim::{Action, FabricConfig, Matcher, NodeId, Rule};
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{
    Mr, Qp, QpState, QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::{Mask, Opcode, Psn};

const MS: u64 = 1_000_000;

struct Pair {
    w: World,
    a: Qp,
    b: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

/// Node 0 (requester side, QP `a`) connected to node 1 (QP `b`), RC, with
/// 256 KiB regions on both sides. `adjust` edits the connection tuning.
fn rc_pair(adjust: impl FnOnce(&mut uroce_verbs::connect::Tuning)) -> Pair {
    let w = World::new(2, FabricConfig::new(7));
    let a = w.qp(0, QpType::Rc, cap(128, 4, 128));
    let b = w.qp(1, QpType::Rc, cap(128, 4, 128));
    let mut t = tuning();
    adjust(&mut t);
    w.connect(0, &a, 1, &b, &t);
    let mr_a = w.nodes[0].pd.alloc_mr(256 * 1024, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(256 * 1024, ALL_ACCESS).unwrap();
    Pair { w, a, b, mr_a, mr_b }
}

fn send(wr_id: u64, mr: &Mr, offset: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr
}

fn write(wr_id: u64, mr: &Mr, offset: u64, len: u32, target: &Mr, at: u64) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr.remote = RemoteTarget { addr: target.addr() + at, rkey: target.rkey() };
    wr
}

fn read(wr_id: u64, mr: &Mr, offset: u64, len: u32, source: &Mr, at: u64) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaRead);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr.remote = RemoteTarget { addr: source.addr() + at, rkey: source.rkey() };
    wr
}

fn fetch_add(wr_id: u64, mr: &Mr, offset: u64, target: &Mr, at: u64, add: u64) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::AtomicFetchAndAdd);
    wr.sg_list = vec![mr.sge(offset, 8)];
    wr.remote = RemoteTarget { addr: target.addr() + at, rkey: target.rkey() };
    wr.compare_add = add;
    wr
}

fn recv(wr_id: u64, mr: &Mr, offset: u64, len: u32) -> RecvWr {
    RecvWr { wr_id, sg_list: vec![mr.sge(offset, len)] }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn counters(w: &World, n: usize) -> uroce_hca::counters::Counters {
    w.nodes[n].hca.borrow().counters().clone()
}

fn qp_state(w: &World, n: usize, qp: &Qp) -> QpState {
    w.nodes[n].hca.borrow().qp(qp.qpn()).unwrap().state
}

#[test]
fn a_lost_ack_makes_a_send_duplicate_that_is_re_acked_not_delivered_twice() {
    let mut p = rc_pair(|_| {});
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_ACKNOWLEDGE).from(NodeId(1)), Action::Drop)
            .nth(1),
    );
    let data = pattern(2000, 1);
    p.mr_a.write(0, &data).unwrap();
    p.b.post_recv(&[recv(10, &p.mr_b, 0, 4096), recv(11, &p.mr_b, 4096, 4096)]).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 2000)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    p.w.settle(10 * MS);
    let at_b = p.w.nodes[1].cq.poll(10).unwrap();
    assert_eq!(statuses(&at_b), vec![(10, WcStatus::Success)], "delivered once");
    assert_eq!(p.mr_b.read_vec(0, 2000).unwrap(), data);
    assert_eq!(p.mr_b.read_vec(4096, 16).unwrap(), vec![0; 16], "second receive untouched");
    assert!(counters(&p.w, 1).duplicate_request >= 1, "the retransmission was a duplicate");
    assert!(counters(&p.w, 0).completer_retry_err >= 1, "the requester timed out and retried");
}

#[test]
fn a_lost_read_response_makes_the_read_re_execute() {
    let mut p = rc_pair(|_| {});
    // Drop the MIDDLE response of a 3-packet READ, once.
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE), Action::Drop).nth(1),
    );
    let data = pattern(3000, 2);
    p.mr_b.write(100, &data).unwrap();
    p.a.post_send(&[read(1, &p.mr_a, 0, 3000, &p.mr_b, 100)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(done[0].byte_len, 3000);
    assert_eq!(p.mr_a.read_vec(0, 3000).unwrap(), data);
    assert!(counters(&p.w, 1).duplicate_request >= 1, "the responder saw the READ again");
}

#[test]
fn a_partially_answered_read_resumes_from_the_missing_packet() {
    let mut p = rc_pair(|_| {});
    // 4 response packets; lose the LAST one, once: the requester asks again
    // for the bytes still missing only.
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_RDMA_READ_RESPONSE_LAST), Action::Drop).nth(1),
    );
    let data = pattern(4000, 3);
    p.mr_b.write(0, &data).unwrap();
    p.a.post_send(&[read(1, &p.mr_a, 0, 4000, &p.mr_b, 0)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_a.read_vec(0, 4000).unwrap(), data);
}

#[test]
fn a_lost_atomic_ack_is_answered_from_the_saved_result_and_the_atomic_ran_once() {
    let mut p = rc_pair(|_| {});
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_ATOMIC_ACKNOWLEDGE), Action::Drop).nth(1),
    );
    p.mr_b.write(64, &100u64.to_le_bytes()).unwrap();
    p.a.post_send(&[fetch_add(1, &p.mr_a, 0, &p.mr_b, 64, 5)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_a.read_vec(0, 8).unwrap(), 100u64.to_le_bytes(), "original value");
    assert_eq!(p.mr_b.read_vec(64, 8).unwrap(), 105u64.to_le_bytes(), "added once, not twice");
    assert!(counters(&p.w, 1).duplicate_request >= 1);
}

#[test]
fn rnr_retry_0_gives_rnr_retry_exc_err() {
    let mut p = rc_pair(|t| t.rnr_retry = 0);
    p.a.post_send(&[send(1, &p.mr_a, 0, 64), send(2, &p.mr_a, 0, 64)]).unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(
        statuses(&done),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
        "the first fails, the rest flush"
    );
    assert_eq!(qp_state(&p.w, 0, &p.a), QpState::Err);
    assert_eq!(counters(&p.w, 0).retry_rnr_exceeded_err, 1);
    assert!(counters(&p.w, 1).send_rnr_err >= 1);
}

#[test]
fn rnr_retry_7_waits_until_a_receive_is_posted() {
    let mut p = rc_pair(|t| {
        t.rnr_retry = 7;
        t.min_rnr_timer = 14; // 1.28 ms
    });
    let data = pattern(100, 4);
    p.mr_a.write(0, &data).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 100)]).unwrap();
    // Far longer than 7 RNR waits: still not failed.
    let early = p.w.wait(0, 1, 50 * MS);
    assert!(early.is_empty(), "nothing completes while no receive is posted: {early:?}");
    assert!(counters(&p.w, 0).rcvd_rnr_err > 7, "more than 7 RNR NAKs: infinite retries");
    p.b.post_recv(&[recv(9, &p.mr_b, 0, 256)]).unwrap();
    let done = p.w.wait(0, 1, 50 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_b.read_vec(0, 100).unwrap(), data);
}

#[test]
fn an_exhausted_retry_cnt_gives_retry_exc_err_within_the_timeout_bound() {
    // timeout 10: 4.096 us * 2^10 = 4.19 ms; retry_cnt 3: 4 transmissions.
    let mut p = rc_pair(|t| {
        t.timeout = 10;
        t.retry_cnt = 3;
    });
    p.w.fabric.add_rule(Rule::new(Matcher::any().from(NodeId(0)), Action::Drop));
    let start = p.w.now();
    p.a.post_send(&[write(1, &p.mr_a, 0, 64, &p.mr_b, 0), write(2, &p.mr_a, 0, 64, &p.mr_b, 0)])
        .unwrap();
    let done = p.w.wait(0, 2, 1_000 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]);
    let took = p.w.now().nanos_since(start);
    let timeout_ns = 4096u64 << 10;
    assert!(took >= 4 * timeout_ns, "not before 1 + retry_cnt timeouts: {took} ns");
    assert!(took <= 4 * timeout_ns + MS, "promptly after them: {took} ns");
    assert_eq!(counters(&p.w, 0).retry_exceeded_err, 1);
    assert_eq!(qp_state(&p.w, 0, &p.a), QpState::Err);
}

#[test]
fn a_bad_rkey_gives_rem_access_err_both_qps_go_to_error_and_later_wrs_flush() {
    let mut p = rc_pair(|_| {});
    p.b.post_recv(&[recv(20, &p.mr_b, 0, 64)]).unwrap();
    let mut bad = write(1, &p.mr_a, 0, 64, &p.mr_b, 0);
    bad.remote.rkey = uroce_verbs::Rkey(p.mr_b.rkey().0 ^ 0x55);
    p.a.post_send(&[bad, send(2, &p.mr_a, 0, 8)]).unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
    p.w.settle(10 * MS);
    assert_eq!(qp_state(&p.w, 0, &p.a), QpState::Err);
    assert_eq!(qp_state(&p.w, 1, &p.b), QpState::Err);
    let at_b = p.w.nodes[1].cq.poll(10).unwrap();
    assert_eq!(
        statuses(&at_b),
        vec![(20, WcStatus::WrFlushErr)],
        "the responder's receive flushes"
    );
    // Work posted after the error flushes too.
    p.a.post_send(&[send(3, &p.mr_a, 0, 8)]).unwrap();
    let later = p.w.wait(0, 1, 10 * MS);
    assert_eq!(statuses(&later), vec![(3, WcStatus::WrFlushErr)]);
}

#[test]
fn psn_wraps_at_2_pow_24() {
    let mut p = rc_pair(|t| t.sq_psn = 0xff_fffe);
    let data = pattern(5000, 5); // 5 packets: PSNs 0xfffffe, 0xffffff, 0, 1, 2
    p.mr_a.write(0, &data).unwrap();
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 8192)]).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 5000), write(2, &p.mr_a, 0, 5000, &p.mr_b, 10_000)])
        .unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(p.mr_b.read_vec(0, 5000).unwrap(), data);
    assert_eq!(p.mr_b.read_vec(10_000, 5000).unwrap(), data);
    let qp = p.w.nodes[0].hca.borrow();
    assert_eq!(qp.qp(p.a.qpn()).unwrap().req.next_psn, Psn::new(8), "10 packets from 0xfffffe");
}

#[test]
fn one_psn_sequence_nak_per_gap_then_go_back_n() {
    let mut p = rc_pair(|_| {});
    // Lose the 2nd packet of a 6-packet WRITE: packets 3..6 arrive ahead of
    // the expected PSN; the responder NAKs once, the requester goes back.
    p.w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_RDMA_WRITE_MIDDLE), Action::Drop).nth(1),
    );
    let data = pattern(6000, 6);
    p.mr_a.write(0, &data).unwrap();
    p.a.post_send(&[write(1, &p.mr_a, 0, 6000, &p.mr_b, 0)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_b.read_vec(0, 6000).unwrap(), data);
    assert_eq!(counters(&p.w, 1).send_nak, 1, "one NAK for the gap, not one per packet");
    assert_eq!(counters(&p.w, 0).rcvd_seq_err, 1);
    assert_eq!(counters(&p.w, 1).out_of_seq_request, 1, "counted once per gap, as rxe does");
}

#[test]
fn go_back_n_resumes_a_partially_acknowledged_send() {
    // Coalesced ACKs every 2 packets make a long SEND partly acknowledged
    // before its 7th packet is lost.
    let mut p = rc_pair(|_| {});
    p.w.fabric
        .add_rule(Rule::new(Matcher::any().opcode(Opcode::RC_SEND_MIDDLE), Action::Drop).nth(5));
    let data = pattern(10 * 1024, 7);
    p.mr_a.write(0, &data).unwrap();
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 16 * 1024)]).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 10 * 1024)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(statuses(&at_b), vec![(1, WcStatus::Success)]);
    assert_eq!(at_b[0].byte_len, 10 * 1024);
    assert_eq!(p.mr_b.read_vec(0, 10 * 1024).unwrap(), data);
    // Resumed at the lost packet: far fewer than 10 packets sent again.
    let sent = p.w.nodes[0].hca.borrow().qp(p.a.qpn()).unwrap().sent_pkts;
    assert!(sent < 10 + 10, "resumed, not restarted from scratch: {sent} packets");
}

#[test]
fn duplicated_packets_are_harmless() {
    let mut p = rc_pair(|_| {});
    p.w.fabric.add_rule(Rule::new(Matcher::any(), Action::Duplicate));
    let data = pattern(3000, 8);
    p.mr_a.write(0, &data).unwrap();
    p.mr_b.write(512, &7u64.to_le_bytes()).unwrap();
    p.b.post_recv(&[recv(1, &p.mr_b, 4096, 4096), recv(2, &p.mr_b, 8192, 4096)]).unwrap();
    p.a.post_send(&[
        send(1, &p.mr_a, 0, 3000),
        write(2, &p.mr_a, 0, 3000, &p.mr_b, 20_000),
        fetch_add(3, &p.mr_a, 8000, &p.mr_b, 512, 1),
        read(4, &p.mr_a, 10_000, 3000, &p.mr_b, 20_000),
    ])
    .unwrap();
    let done = p.w.wait(0, 4, 100 * MS);
    assert_eq!(statuses(&done), (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
    p.w.settle(10 * MS);
    let at_b = p.w.nodes[1].cq.poll(10).unwrap();
    assert_eq!(statuses(&at_b), vec![(1, WcStatus::Success)], "one receive consumed");
    assert_eq!(p.mr_b.read_vec(512, 8).unwrap(), 8u64.to_le_bytes(), "the atomic ran once");
    assert_eq!(p.mr_a.read_vec(10_000, 3000).unwrap(), data);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = rc_pair(|t| t.rd_atomic = 2);
    let data = pattern(8 * 512, 9);
    p.mr_b.write(0, &data).unwrap();
    let reads: Vec<SendWr> =
        (0..8).map(|i| read(i, &p.mr_a, i * 512, 512, &p.mr_b, i * 512)).collect();
    p.a.post_send(&reads).unwrap();
    let mut max_outstanding = 0;
    let mut done = Vec::new();
    for _ in 0..10_000 {
        let out = p.w.nodes[0].hca.borrow().qp(p.a.qpn()).unwrap().req.rd_atomic_outstanding;
        max_outstanding = max_outstanding.max(out);
        done.extend(p.w.nodes[0].cq.poll(16).unwrap());
        if done.len() == 8 || p.w.fabric.step().is_none() {
            break;
        }
    }
    assert_eq!(done.len(), 8);
    assert!(done.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(max_outstanding, 2, "never more than max_rd_atomic READs in flight");
    assert_eq!(p.mr_a.read_vec(0, 8 * 512).unwrap(), data);
}

#[test]
fn a_fence_waits_for_earlier_reads() {
    let mut p = rc_pair(|_| {});
    // READ old contents, then a fenced WRITE over them: the READ must see
    // the old bytes.
    let old = pattern(2048, 10);
    let new = pattern(2048, 11);
    p.mr_b.write(0, &old).unwrap();
    p.mr_a.write(4096, &new).unwrap();
    let mut fenced = write(2, &p.mr_a, 4096, 2048, &p.mr_b, 0);
    fenced.flags = SendFlags::SIGNALED | SendFlags::FENCE;
    p.a.post_send(&[read(1, &p.mr_a, 0, 2048, &p.mr_b, 0), fenced]).unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(p.mr_a.read_vec(0, 2048).unwrap(), old);
    assert_eq!(p.mr_b.read_vec(0, 2048).unwrap(), new);
}

#[test]
fn unsignaled_wrs_complete_silently_but_errors_always_report() {
    let mut p = rc_pair(|_| {});
    let mut quiet = write(1, &p.mr_a, 0, 64, &p.mr_b, 0);
    quiet.flags = SendFlags::EMPTY;
    let loud = write(2, &p.mr_a, 0, 64, &p.mr_b, 64);
    let mut quiet_bad = write(3, &p.mr_a, 0, 64, &p.mr_b, 0);
    quiet_bad.flags = SendFlags::EMPTY;
    quiet_bad.remote.addr = p.mr_b.addr() + 256 * 1024; // past the region
    p.a.post_send(&[quiet, loud, quiet_bad]).unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(2, WcStatus::Success), (3, WcStatus::RemAccessErr)]);
}

#[test]
fn inline_data_is_sent_from_the_wqe() {
    let mut p = rc_pair(|_| {});
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 256)]).unwrap();
    let mut wr = SendWr::new(1, WrOpcode::SendWithImm);
    wr.inline_data = Some(b"carried in the WQE itself".to_vec());
    wr.imm_or_inv = 99;
    p.a.post_send(&[wr]).unwrap();
    let at_b = p.w.wait(1, 1, 100 * MS);
    assert_eq!(statuses(&at_b), vec![(1, WcStatus::Success)]);
    assert_eq!(at_b[0].imm_or_inv, 99);
    assert_eq!(p.mr_b.read_vec(0, 25).unwrap(), b"carried in the WQE itself");
}

#[test]
fn write_with_immediate_consumes_a_receive_and_reports_the_immediate() {
    let mut p = rc_pair(|_| {});
    let data = pattern(1500, 12);
    p.mr_a.write(0, &data).unwrap();
    p.b.post_recv(&[recv(5, &p.mr_b, 100_000, 16)]).unwrap();
    let mut wr = write(1, &p.mr_a, 0, 1500, &p.mr_b, 0);
    wr.opcode = WrOpcode::RdmaWriteWithImm;
    wr.imm_or_inv = 0x1234_5678;
    p.a.post_send(&[wr]).unwrap();
    let at_b = p.w.wait(1, 1, 100 * MS);
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(at_b[0].imm_or_inv, 0x1234_5678);
    assert_eq!(at_b[0].byte_len, 1500);
    assert_eq!(p.mr_b.read_vec(0, 1500).unwrap(), data);
}

#[test]
fn a_send_longer_than_the_receive_buffer_is_a_local_length_error_and_a_nak() {
    let mut p = rc_pair(|_| {});
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 100)]).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 200)]).unwrap();
    let at_a = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&at_a), vec![(1, WcStatus::RemInvReqErr)]);
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(statuses(&at_b), vec![(1, WcStatus::LocLenErr)]);
}

#[test]
fn a_malformed_wqe_gets_a_local_error_completion_not_a_panic() {
    let mut p = rc_pair(|_| {});
    let mut bad_key = send(1, &p.mr_a, 0, 64);
    bad_key.sg_list[0].lkey.0 ^= 0x0100_0000;
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 64)]).unwrap();
    p.a.post_send(&[bad_key, send(2, &p.mr_a, 0, 64)]).unwrap();
    let done = p.w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]);
    let mut past_end = send(3, &p.mr_a, 256 * 1024 - 10, 64);
    past_end.wr_id = 3;
    let q = p.w.qp(0, QpType::Rc, cap(8, 1, 0));
    let r = p.w.qp(1, QpType::Rc, cap(8, 1, 0));
    p.w.connect(0, &q, 1, &r, &tuning());
    q.post_send(&[past_end]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(3, WcStatus::LocProtErr)]);
}

#[test]
fn an_sge_offset_past_the_address_space_is_refused_by_the_hca_not_a_panic() {
    let mut p = rc_pair(|_| {});
    // `Mr::sge` builds what it is asked (as an `ibv_sge` is plain data);
    // an address that wraps past 2^64 reaches the HCA, which refuses it.
    let wrapped = send(1, &p.mr_a, u64::MAX - 16, 64);
    assert_eq!(wrapped.sg_list[0].addr, p.mr_a.addr().wrapping_add(u64::MAX - 16));
    p.a.post_send(&[wrapped]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::LocProtErr)]);
}

#[test]
fn uc_send_and_write_with_immediate() {
    let mut w = World::new(2, FabricConfig::new(3));
    let a = w.qp(0, QpType::Uc, cap(16, 2, 64));
    let b = w.qp(1, QpType::Uc, cap(16, 2, 64));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let data = pattern(3000, 13);
    mr_a.write(0, &data).unwrap();
    b.post_recv(&[recv(1, &mr_b, 0, 4096), recv(2, &mr_b, 60_000, 8)]).unwrap();
    let mut s = send(1, &mr_a, 0, 3000);
    s.opcode = WrOpcode::SendWithImm;
    s.imm_or_inv = 5;
    let mut wi = write(2, &mr_a, 0, 3000, &mr_b, 10_000);
    wi.opcode = WrOpcode::RdmaWriteWithImm;
    wi.imm_or_inv = 6;
    a.post_send(&[s, wi]).unwrap();
    let at_a = w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&at_a), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let at_b = w.wait(1, 2, 100 * MS);
    assert_eq!(
        at_b.iter().map(|c| (c.opcode, c.imm_or_inv)).collect::<Vec<_>>(),
        vec![(WcOpcode::Recv, 5), (WcOpcode::RecvRdmaWithImm, 6)]
    );
    assert_eq!(mr_b.read_vec(0, 3000).unwrap(), data);
    assert_eq!(mr_b.read_vec(10_000, 3000).unwrap(), data);
    assert!(w.nodes[1].hca.borrow().qp(b.qpn()).unwrap().resp.queue.is_empty(), "UC never ACKs");
}

#[test]
fn uc_drops_a_message_that_lost_a_packet_and_takes_the_next() {
    let mut w = World::new(2, FabricConfig::new(4));
    let a = w.qp(0, QpType::Uc, cap(16, 2, 0));
    let b = w.qp(1, QpType::Uc, cap(16, 2, 0));
    w.connect(0, &a, 1, &b, &tuning());
    w.fabric
        .add_rule(Rule::new(Matcher::any().opcode(Opcode::UC_SEND_MIDDLE), Action::Drop).nth(1));
    let mr_a = w.nodes[0].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let second = pattern(500, 14);
    mr_a.write(8192, &second).unwrap();
    b.post_recv(&[recv(1, &mr_b, 0, 8192)]).unwrap();
    a.post_send(&[send(1, &mr_a, 0, 3000), send(2, &mr_a, 8192, 500)]).unwrap();
    w.wait(0, 2, 100 * MS);
    let at_b = w.wait(1, 1, 10 * MS);
    assert_eq!(
        statuses(&at_b),
        vec![(1, WcStatus::Success)],
        "the receive took the second message"
    );
    assert_eq!(at_b[0].byte_len, 500);
    assert_eq!(mr_b.read_vec(0, 500).unwrap(), second);
}

#[test]
fn ud_send_delivers_the_grh_and_checks_the_qkey() {
    use uroce_verbs::{connect, AhAttr, Gid};
    let mut w = World::new(2, FabricConfig::new(5));
    let a = w.qp(0, QpType::Ud, cap(16, 1, 64));
    let b = w.qp(1, QpType::Ud, cap(16, 1, 64));
    connect::to_init(&a, ALL_ACCESS, 0x1111).unwrap();
    connect::to_init(&b, ALL_ACCESS, 0x2222).unwrap();
    connect::to_rts(&a, None, &tuning()).unwrap();
    connect::to_rts(&b, None, &tuning()).unwrap();
    let dgid = Gid::from_ip(std::net::IpAddr::V4(w.nodes[1].ip));
    let ah = w.nodes[0]
        .pd
        .create_ah(AhAttr { dgid, sgid_index: 1, port_num: 1, ..AhAttr::default() })
        .unwrap();
    let mr_a = w.nodes[0].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let data = pattern(512, 15);
    mr_a.write(0, &data).unwrap();
    b.post_recv(&[recv(1, &mr_b, 0, 40 + 1024), recv(2, &mr_b, 2048, 40 + 1024)]).unwrap();
    let mut wrong = SendWr::new(1, WrOpcode::Send);
    wrong.sg_list = vec![mr_a.sge(0, 512)];
    wrong.ud = Some((ah.index(), b.qpn(), uroce_verbs::Qkey(0x9999)));
    let mut right = SendWr::new(2, WrOpcode::SendWithImm);
    right.sg_list = vec![mr_a.sge(0, 512)];
    right.imm_or_inv = 77;
    right.ud = Some((ah.index(), b.qpn(), uroce_verbs::Qkey(0x2222)));
    a.post_send(&[wrong, right]).unwrap();
    let at_a = w.wait(0, 2, 10 * MS);
    assert_eq!(statuses(&at_a), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let at_b = w.wait(1, 1, 10 * MS);
    assert_eq!(statuses(&at_b), vec![(1, WcStatus::Success)], "the wrong Q_Key was dropped");
    assert_eq!(at_b[0].byte_len, 40 + 512);
    assert_eq!(at_b[0].src_qp, a.qpn());
    assert_eq!(at_b[0].imm_or_inv, 77);
    assert!(at_b[0].flags.contains(uroce_verbs::WcFlags::GRH));
    let grh = mr_b.read_vec(0, 40).unwrap();
    assert_eq!(grh[20] >> 4, 4, "an IPv4 header at byte 20 of the GRH");
    assert_eq!(&grh[32..36], &w.nodes[0].ip.octets(), "its source address");
    assert_eq!(mr_b.read_vec(40, 512).unwrap(), data);
    assert_eq!(counters(&w, 1).rcvd_bad_key_or_addr, 1);
}

#[test]
fn srq_feeds_several_qps_and_raises_the_limit_event() {
    let mut w = World::new(2, FabricConfig::new(6));
    let srq = w.nodes[1].pd.create_srq(16, 1, 0).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let mr_a = w.nodes[0].pd.alloc_mr(65536, ALL_ACCESS).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let a = w.qp(0, QpType::Rc, cap(8, 1, 0));
        let init = uroce_verbs::QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &w.nodes[1].cq,
            recv_cq: &w.nodes[1].cq,
            srq: Some(&srq),
            cap: cap(8, 1, 0),
            sq_sig_all: false,
        };
        let b = w.nodes[1].pd.create_qp(&init).unwrap();
        w.connect(0, &a, 1, &b, &tuning());
        pairs.push((a, b));
    }
    srq.post_recv(&(0..4).map(|i| recv(i, &mr_b, i * 1024, 1024)).collect::<Vec<_>>()).unwrap();
    srq.arm_limit(3).unwrap();
    while w.nodes[1].ctx.next_event().is_some() {}
    pairs[0].0.post_send(&[send(1, &mr_a, 0, 100)]).unwrap();
    pairs[1].0.post_send(&[send(2, &mr_a, 0, 200)]).unwrap();
    let at_b = w.wait(1, 2, 100 * MS);
    assert_eq!(at_b.len(), 2);
    let mut qpns: Vec<_> = at_b.iter().map(|c| c.qp_num).collect();
    qpns.sort();
    assert_eq!(qpns, vec![pairs[0].1.qpn(), pairs[1].1.qpn()]);
    let events: Vec<_> = std::iter::from_fn(|| w.nodes[1].ctx.next_event()).collect();
    assert!(
        events.iter().any(|e| matches!(
            e,
            uroce_verbs::Event::Async { event: uroce_verbs::EventType::SrqLimitReached, .. }
        )),
        "SRQ limit event: {events:?}"
    );
}

#[test]
fn cq_arming_raises_one_event_and_solicited_only_waits_for_a_solicited_send() {
    let mut p = rc_pair(|_| {});
    while p.w.nodes[1].ctx.next_event().is_some() {}
    p.b.post_recv(&(0..3).map(|i| recv(i, &p.mr_b, i * 512, 512)).collect::<Vec<_>>()).unwrap();
    p.w.nodes[1].cq.req_notify(true);
    p.a.post_send(&[send(1, &p.mr_a, 0, 10)]).unwrap();
    p.w.wait(1, 1, 10 * MS);
    assert_eq!(p.w.nodes[1].ctx.next_event(), None, "not solicited: no event");
    let mut solicited = send(2, &p.mr_a, 0, 10);
    solicited.flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    p.a.post_send(&[solicited]).unwrap();
    p.w.wait(1, 1, 10 * MS);
    let cq = p.w.nodes[1].cq.index();
    assert_eq!(p.w.nodes[1].ctx.next_event(), Some(uroce_verbs::Event::Completion { cq }));
    p.a.post_send(&[send(3, &p.mr_a, 0, 10)]).unwrap();
    p.w.wait(1, 1, 10 * MS);
    assert_eq!(p.w.nodes[1].ctx.next_event(), None, "disarmed after one event");
}

#[test]
fn local_invalidate_and_send_with_invalidate_revoke_keys() {
    let mut p = rc_pair(|_| {});
    // SEND with invalidate revokes the responder's own MR key.
    let victim = p.w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 64)]).unwrap();
    let mut inv = send(1, &p.mr_a, 0, 16);
    inv.opcode = WrOpcode::SendWithInv;
    inv.imm_or_inv = victim.rkey().0;
    p.a.post_send(&[inv]).unwrap();
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(at_b[0].imm_or_inv, victim.rkey().0);
    assert!(at_b[0].flags.contains(uroce_verbs::WcFlags::WITH_INV));
    p.w.wait(0, 1, 10 * MS);
    // A WRITE with the invalidated key now fails with a remote access error.
    p.a.post_send(&[write(2, &p.mr_a, 0, 16, &victim, 0)]).unwrap();
    let done = p.w.wait(0, 1, 10 * MS);
    assert_eq!(statuses(&done), vec![(2, WcStatus::RemAccessErr)]);
}

#[test]
fn type_2_window_bound_by_a_wr_gives_remote_access_to_part_of_a_region() {
    let mut p = rc_pair(|_| {});
    let mw = p.w.nodes[1].pd.alloc_mw(2).unwrap();
    // B binds the window over bytes 1024..2048 of its region, remote write
    // only, through its QP b.
    let (bind, rkey) =
        SendWr::bind_mw(1, &mw, &p.mr_b, 1024, 1024, uroce_verbs::Access::REMOTE_WRITE, 0x42);
    p.b.post_send(&[bind]).unwrap();
    let bound = p.w.wait(1, 1, 10 * MS);
    assert_eq!(statuses(&bound), vec![(1, WcStatus::Success)]);
    mw.set_rkey(rkey);
    let data = pattern(512, 16);
    p.mr_a.write(0, &data).unwrap();
    let mut inside = write(1, &p.mr_a, 0, 512, &p.mr_b, 1024 + 256);
    inside.remote.rkey = mw.rkey();
    p.a.post_send(&[inside]).unwrap();
    assert_eq!(statuses(&p.w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_b.read_vec(1024 + 256, 512).unwrap(), data);
    // Past the window (though inside the region): refused.
    let mut outside = write(2, &p.mr_a, 0, 512, &p.mr_b, 2048 - 256);
    outside.remote.rkey = mw.rkey();
    p.a.post_send(&[outside]).unwrap();
    assert_eq!(statuses(&p.w.wait(0, 1, 10 * MS)), vec![(2, WcStatus::RemAccessErr)]);
}

#[test]
fn qp_state_machine_refuses_wrong_masks_and_transitions() {
    use uroce_verbs::{AttrMask, Error, QpAttr};
    let w = World::new(1, FabricConfig::new(8));
    let qp = w.qp(0, QpType::Rc, cap(4, 1, 0));
    let to_rts = QpAttr { qp_state: Some(QpState::Rts), ..QpAttr::default() };
    let err = qp.modify(&to_rts, AttrMask::STATE).unwrap_err();
    assert!(matches!(err, Error::Command(_)) && err.errno() == 22, "RESET to RTS is EINVAL");
    let init = QpAttr { qp_state: Some(QpState::Init), port_num: 1, ..QpAttr::default() };
    let missing = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
    assert_eq!(qp.modify(&init, missing).unwrap_err().errno(), 22, "ACCESS_FLAGS is required");
    let extra = missing | AttrMask::ACCESS_FLAGS | AttrMask::QKEY;
    assert_eq!(qp.modify(&init, extra).unwrap_err().errno(), 22, "QKEY is not allowed for RC");
    qp.modify(&init, missing | AttrMask::ACCESS_FLAGS).unwrap();
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Init));
    let bad_port = QpAttr { port_num: 2, ..init };
    assert_eq!(qp.modify(&bad_port, missing | AttrMask::ACCESS_FLAGS).unwrap_err().errno(), 22);
    // Posting sends before RTS is refused by the driver.
    let (_, err) = qp.post_send(&[SendWr::new(1, WrOpcode::Send)]).unwrap_err();
    assert_eq!(err.errno(), 22);
}

#[test]
fn destroy_follows_the_busy_rules() {
    let w = World::new(1, FabricConfig::new(9));
    let node = &w.nodes[0];
    let mr = node.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    assert_eq!(node.pd.dealloc().unwrap_err().errno(), 16, "a PD with an MR is busy");
    let qp = w.qp(0, QpType::Rc, cap(4, 1, 0));
    let cq = node.ctx.create_cq(16).unwrap();
    let (cq, _) = {
        let init = uroce_verbs::QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(4, 1, 0),
            sq_sig_all: false,
        };
        let q2 = node.pd.create_qp(&init).unwrap();
        let (cq, err) = cq.destroy().unwrap_err();
        assert_eq!(err.errno(), 16, "a CQ used by a QP is busy");
        q2.destroy().unwrap();
        (cq, ())
    };
    cq.destroy().map_err(|(_, e)| e).unwrap();
    qp.destroy().unwrap();
    mr.dereg().map_err(|(_, e)| e).unwrap();
}

#[test]
fn cq_overrun_raises_cq_err_and_the_qp_goes_to_error() {
    let mut w = World::new(2, FabricConfig::new(10));
    let small = w.nodes[0].ctx.create_cq(1).unwrap(); // 2 entries
    let init = uroce_verbs::QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &small,
        recv_cq: &small,
        srq: None,
        cap: cap(16, 1, 0),
        sq_sig_all: true,
    };
    let a = w.nodes[0].pd.create_qp(&init).unwrap();
    let b = w.qp(1, QpType::Rc, cap(16, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    while w.nodes[0].ctx.next_event().is_some() {}
    let wrs: Vec<_> = (0..4).map(|i| write(i, &mr, 0, 8, &mr_b, 0)).collect();
    a.post_send(&wrs).unwrap();
    w.settle(50 * MS);
    let events: Vec<_> = std::iter::from_fn(|| w.nodes[0].ctx.next_event()).collect();
    assert!(
        events.iter().any(|e| matches!(
            e,
            uroce_verbs::Event::Async { event: uroce_verbs::EventType::CqErr, .. }
        )),
        "CQ_ERR: {events:?}"
    );
    assert_eq!(qp_state(&w, 0, &a), QpState::Err);
    assert!(counters(&w, 0).cq_overrun >= 1);
}

#[test]
fn a_naked_psn_sequence_error_syndrome_decodes() {
    // The wire-level facts the scenarios rely on.
    assert_eq!(Syndrome::from_u8(0x60), Syndrome::Nak(NakCode::PsnSequenceError));
    assert!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.info().unwrap().is(Mask::READ));
}

#[test]
fn type_1_window_bound_by_the_verb_gets_the_next_key() {
    let mut p = rc_pair(|_| {});
    let mw = p.w.nodes[1].pd.alloc_mw(1).unwrap();
    let old = mw.rkey();
    let rkey = p.b.bind_mw(1, &mw, &p.mr_b, 0, 4096, uroce_verbs::Access::REMOTE_READ).unwrap();
    assert_eq!(rkey.0 >> 8, old.0 >> 8, "same MPT entry");
    assert_eq!(rkey.0 as u8, (old.0 as u8).wrapping_add(1), "the next 8-bit key");
    let mut b_sends = SendWr::new(0, WrOpcode::Send);
    b_sends.flags = SendFlags::EMPTY;
    let _ = b_sends;
    assert_eq!(statuses(&p.w.wait(1, 1, 10 * MS)), vec![(1, WcStatus::Success)]);
    let data = pattern(4096, 17);
    p.mr_b.write(0, &data).unwrap();
    let mut r = read(2, &p.mr_a, 0, 4096, &p.mr_b, 0);
    r.remote.rkey = rkey;
    p.a.post_send(&[r]).unwrap();
    assert_eq!(statuses(&p.w.wait(0, 1, 10 * MS)), vec![(2, WcStatus::Success)]);
    assert_eq!(p.mr_a.read_vec(0, 4096).unwrap(), data);
    // The window allows READ only.
    let mut w2 = write(3, &p.mr_a, 0, 8, &p.mr_b, 0);
    w2.remote.rkey = rkey;
    p.a.post_send(&[w2]).unwrap();
    assert_eq!(statuses(&p.w.wait(0, 1, 10 * MS)), vec![(3, WcStatus::RemAccessErr)]);
}

#[test]
fn atomic_write_stores_eight_bytes_at_once() {
    let mut p = rc_pair(|_| {});
    let mut wr = SendWr::new(1, WrOpcode::AtomicWrite);
    wr.inline_data = Some(0x1122_3344_5566_7788u64.to_le_bytes().to_vec());
    wr.remote = RemoteTarget { addr: p.mr_b.addr() + 64, rkey: p.mr_b.rkey() };
    p.a.post_send(&[wr]).unwrap();
    let done = p.w.wait(0, 1, 10 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(done[0].opcode, WcOpcode::AtomicWrite);
    assert_eq!(p.mr_b.read_vec(64, 8).unwrap(), 0x1122_3344_5566_7788u64.to_le_bytes());
}

#[test]
fn atomic_write_is_answered_by_a_zero_length_read_response_as_iba_1_5_and_rxe() {
    // IBA 1.5 (rxe 6.12's send_read_response_ack): the answer to an
    // ATOMIC WRITE is an RDMA READ RESPONSE ONLY without payload. Losing
    // it makes the requester time out and send the ATOMIC WRITE again,
    // which the responder acknowledges as a duplicate (stored once).
    let mut p = rc_pair(|_| {});
    p.w.fabric.add_rule(
        Rule::new(
            Matcher::any().opcode(Opcode::RC_RDMA_READ_RESPONSE_ONLY).from(NodeId(1)),
            Action::Drop,
        )
        .nth(1),
    );
    let mut wr = SendWr::new(1, WrOpcode::AtomicWrite);
    wr.inline_data = Some(7u64.to_le_bytes().to_vec());
    wr.remote = RemoteTarget { addr: p.mr_b.addr() + 8, rkey: p.mr_b.rkey() };
    p.a.post_send(&[wr]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mr_b.read_vec(8, 8).unwrap(), 7u64.to_le_bytes());
    assert!(
        counters(&p.w, 0).completer_retry_err >= 1,
        "its READ-response answer was the one lost"
    );
    assert!(counters(&p.w, 1).duplicate_request >= 1, "the retransmission was a duplicate");
}

#[test]
fn flush_checks_rights_and_range_and_completes() {
    let mut p = rc_pair(|_| {});
    let flushable = p.w.nodes[1]
        .pd
        .alloc_mr(4096, uroce_verbs::Access(ALL_ACCESS.0 | uroce_verbs::Access::FLUSH_GLOBAL.0))
        .unwrap();
    let mut ok = SendWr::new(1, WrOpcode::Flush);
    ok.remote = RemoteTarget { addr: flushable.addr(), rkey: flushable.rkey() };
    ok.compare_add = 4096; // length
    ok.swap = 1; // placement type: global visibility
    let mut not_allowed = ok.clone();
    not_allowed.wr_id = 2;
    not_allowed.remote = RemoteTarget { addr: p.mr_b.addr(), rkey: p.mr_b.rkey() };
    p.a.post_send(&[ok, not_allowed]).unwrap();
    let done = p.w.wait(0, 2, 10 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]);
    assert_eq!(done[0].opcode, WcOpcode::Flush);
}

#[test]
fn a_producer_index_jumping_past_the_ring_is_fatal_for_the_qp_only() {
    let mut p = rc_pair(|_| {});
    while p.w.nodes[0].ctx.next_event().is_some() {}
    let sq = p.w.nodes[0].hca.borrow().qp(p.a.qpn()).unwrap().sq.desc;
    let host = p.w.nodes[0].hca.borrow().memory().host().clone();
    host.store_release_u32(sq.base, sq.entries + 5).unwrap(); // hostile
    p.w.nodes[0].hca.borrow_mut().doorbell(p.w.now(), uroce_device::Doorbell::SendQueue(p.a.qpn()));
    p.w.settle(10 * MS);
    assert_eq!(qp_state(&p.w, 0, &p.a), QpState::Err);
    let events: Vec<_> = std::iter::from_fn(|| p.w.nodes[0].ctx.next_event()).collect();
    assert!(events.contains(&uroce_verbs::Event::Async {
        event: uroce_verbs::EventType::QpFatal,
        element: p.a.qpn().value()
    }));
    // Another QP of the same device still works.
    let c = p.w.qp(0, QpType::Rc, cap(8, 1, 0));
    let d = p.w.qp(1, QpType::Rc, cap(8, 1, 0));
    p.w.connect(0, &c, 1, &d, &tuning());
    c.post_send(&[write(7, &p.mr_a, 0, 64, &p.mr_b, 0)]).unwrap();
    let done = p.w.wait(0, 1, 10 * MS);
    assert_eq!(statuses(&done), vec![(7, WcStatus::Success)]);
}

#[test]
fn rc_over_ipv6_link_local_gids() {
    use uroce_verbs::connect::{self, Remote};
    use uroce_verbs::Gid;
    let mut w = World::new(2, FabricConfig::new(11));
    let a = w.qp(0, QpType::Rc, cap(8, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(8, 1, 0));
    let gid = |n: usize| w.nodes[n].ctx.query_gid(0).unwrap();
    let (ga, gb): (Gid, Gid) = (gid(0), gid(1));
    assert!(ga.to_ip().is_ipv6());
    let mut t = tuning();
    t.sgid_index = 0;
    connect::to_init(&a, ALL_ACCESS, 0).unwrap();
    connect::to_init(&b, ALL_ACCESS, 0).unwrap();
    connect::to_rts(&a, Some(Remote { gid: gb, qpn: b.qpn(), psn: 0 }), &t).unwrap();
    connect::to_rts(&b, Some(Remote { gid: ga, qpn: a.qpn(), psn: 0 }), &t).unwrap();
    let mr_a = w.nodes[0].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let data = pattern(3000, 18);
    mr_a.write(0, &data).unwrap();
    a.post_send(&[write(1, &mr_a, 0, 3000, &mr_b, 0)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::Success)]);
    assert_eq!(mr_b.read_vec(0, 3000).unwrap(), data);
    // Odd lengths: each message's last packet carries pad, its payload
    // gathered (a WRITE) or read (READ responses) straight into the IPv6
    // frame, the headers written around it. A wrong offset or pad would
    // fail the ICRC, and the message would not complete.
    let odd = pattern(3001, 20);
    mr_a.write(4096, &odd).unwrap();
    a.post_send(&[write(2, &mr_a, 4096, 3001, &mr_b, 4096)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(2, WcStatus::Success)]);
    assert_eq!(mr_b.read_vec(4096, 3001).unwrap(), odd);
    let back = pattern(3001, 21);
    mr_b.write(0, &back).unwrap();
    a.post_send(&[read(3, &mr_a, 0, 3001, &mr_b, 0)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(3, WcStatus::Success)]);
    assert_eq!(mr_a.read_vec(0, 3001).unwrap(), back);
    assert_eq!(counters(&w, 0).rcvd_icrc_err + counters(&w, 1).rcvd_icrc_err, 0);
}

#[test]
fn a_multi_packet_read_on_a_slow_port_causes_no_spurious_retransmission() {
    let mut config = FabricConfig::new(12);
    config.port_rate_bits_per_sec = Some(1_000_000_000);
    let mut w = World::new(2, config);
    let a = w.qp(0, QpType::Rc, cap(16, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(16, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(16384, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(16384, ALL_ACCESS).unwrap();
    b.post_recv(&[recv(1, &mr_b, 8192, 64)]).unwrap();
    a.post_send(&[read(1, &mr_a, 0, 2500, &mr_b, 0), send(2, &mr_a, 0, 64)]).unwrap();
    let done = w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    w.settle(20 * MS);
    assert_eq!(counters(&w, 1).duplicate_request, 0, "nothing was sent twice");
    assert_eq!(counters(&w, 0).completer_retry_err, 0, "no go-back happened");
}

#[test]
fn rnr_on_the_last_packet_of_a_write_with_immediate_resumes_the_message() {
    let mut p = rc_pair(|t| {
        t.rnr_retry = 7;
        t.min_rnr_timer = 1;
    });
    let data = pattern(3000, 19);
    p.mr_a.write(0, &data).unwrap();
    let mut wi = write(1, &p.mr_a, 0, 3000, &p.mr_b, 0);
    wi.opcode = WrOpcode::RdmaWriteWithImm;
    wi.imm_or_inv = 3;
    p.a.post_send(&[wi]).unwrap();
    assert!(p.w.wait(0, 1, 5 * MS).is_empty(), "waiting for a receive");
    assert!(counters(&p.w, 1).send_rnr_err >= 1);
    p.b.post_recv(&[recv(1, &p.mr_b, 100_000, 8)]).unwrap();
    let done = p.w.wait(0, 1, 50 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(
        at_b.iter().map(|c| (c.opcode, c.imm_or_inv)).collect::<Vec<_>>(),
        vec![(WcOpcode::RecvRdmaWithImm, 3)]
    );
    assert_eq!(p.mr_b.read_vec(0, 3000).unwrap(), data);
    assert_eq!(qp_state(&p.w, 1, &p.b), QpState::Rts, "no invalid request");
}

#[test]
fn rnr_on_the_first_packet_of_a_long_send_costs_no_transport_retry() {
    let mut p = rc_pair(|t| {
        t.retry_cnt = 0;
        t.rnr_retry = 7;
        t.min_rnr_timer = 1;
    });
    let data = pattern(4000, 20);
    p.mr_a.write(0, &data).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 4000)]).unwrap();
    assert!(p.w.wait(0, 1, 5 * MS).is_empty());
    p.b.post_recv(&[recv(1, &p.mr_b, 0, 4096)]).unwrap();
    let done = p.w.wait(0, 1, 50 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)], "retry_cnt 0 is not spent by RNR");
    assert_eq!(counters(&p.w, 1).send_nak, 0, "no sequence NAK behind the RNR NAK");
    assert_eq!(p.mr_b.read_vec(0, 4000).unwrap(), data);
}

#[test]
fn send_with_invalidate_is_refused_on_uc() {
    let w = World::new(2, FabricConfig::new(13));
    let a = w.qp(0, QpType::Uc, cap(4, 1, 0));
    let b = w.qp(1, QpType::Uc, cap(4, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mut wr = SendWr::new(1, WrOpcode::SendWithInv);
    wr.imm_or_inv = 0x100;
    let (index, err) = a.post_send(&[wr]).unwrap_err();
    assert_eq!((index, err.errno()), (0, 22));
}

#[test]
fn sqd_still_retransmits_and_reports_the_drain() {
    use uroce_verbs::{AttrMask, QpAttr};
    let mut p = rc_pair(|_| {});
    p.w.fabric
        .add_rule(Rule::new(Matcher::any().opcode(Opcode::RC_ACKNOWLEDGE), Action::Drop).nth(1));
    p.a.post_send(&[write(1, &p.mr_a, 0, 64, &p.mr_b, 0)]).unwrap();
    // Step until the WRITE has left, then drain the send queue.
    for _ in 0..50 {
        if counters(&p.w, 1).rcvd_pkts > 0 {
            break;
        }
        p.w.fabric.step();
    }
    while p.w.nodes[0].ctx.next_event().is_some() {}
    let sqd =
        QpAttr { qp_state: Some(QpState::Sqd), en_sqd_async_notify: true, ..QpAttr::default() };
    p.a.modify(&sqd, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)], "the lost ACK was recovered in SQD");
    let events: Vec<_> = std::iter::from_fn(|| p.w.nodes[0].ctx.next_event()).collect();
    assert!(events.contains(&uroce_verbs::Event::Async {
        event: uroce_verbs::EventType::SqDrained,
        element: p.a.qpn().value()
    }));
}

#[test]
fn an_idle_qp_entering_sqd_reports_the_drain_at_once() {
    use uroce_verbs::{AttrMask, QpAttr};
    let p = rc_pair(|_| {});
    while p.w.nodes[0].ctx.next_event().is_some() {}
    let sqd =
        QpAttr { qp_state: Some(QpState::Sqd), en_sqd_async_notify: true, ..QpAttr::default() };
    p.a.modify(&sqd, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    assert_eq!(
        p.w.nodes[0].ctx.next_event(),
        Some(uroce_verbs::Event::Async {
            event: uroce_verbs::EventType::SqDrained,
            element: p.a.qpn().value()
        })
    );
}

#[test]
fn uc_in_sqe_flushes_new_sends_and_keeps_receiving() {
    let mut w = World::new(2, FabricConfig::new(14));
    let a = w.qp(0, QpType::Uc, cap(8, 1, 0));
    let b = w.qp(1, QpType::Uc, cap(8, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mut bad = send(1, &mr_a, 0, 64);
    bad.sg_list[0].lkey.0 ^= 0x0100_0000;
    a.post_send(&[bad]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::LocProtErr)]);
    assert_eq!(qp_state(&w, 0, &a), QpState::Sqe);
    a.post_send(&[send(2, &mr_a, 0, 64)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(2, WcStatus::WrFlushErr)]);
    // Receives still work in SQE.
    a.post_recv(&[recv(3, &mr_a, 1024, 64)]).unwrap();
    b.post_send(&[send(4, &mr_b, 0, 32)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(3, WcStatus::Success)]);
}

#[test]
fn a_malformed_receive_wqe_completes_with_loc_qp_op_err() {
    let mut p = rc_pair(|_| {});
    // Write a receive WQE claiming 200 SGEs straight into the RQ ring.
    let rq = p.w.nodes[1].hca.borrow().qp(p.b.qpn()).unwrap().rq.unwrap().desc;
    let host = p.w.nodes[1].hca.borrow().memory().host().clone();
    let mut slot = vec![0u8; rq.stride as usize];
    slot[..8].copy_from_slice(&0xbad_u64.to_le_bytes());
    slot[8] = 200;
    host.write(rq.entry_addr(0), &slot).unwrap();
    host.store_release_u32(rq.base, 1).unwrap();
    p.a.post_send(&[send(1, &p.mr_a, 0, 64)]).unwrap();
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(statuses(&at_b), vec![(0xbad, WcStatus::LocQpOpErr)]);
    assert_eq!(statuses(&p.w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::RemOpErr)]);
    assert_eq!(qp_state(&p.w, 1, &p.b), QpState::Err);
}

#[test]
fn a_completion_channel_descriptor_becomes_readable_for_an_armed_cq() {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut w = World::new(2, FabricConfig::new(15));
    let channel = w.nodes[1].ctx.create_comp_channel().unwrap();
    let cq = w.nodes[1].ctx.create_cq_with_channel(16, &channel).unwrap();
    let init = uroce_verbs::QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: cap(8, 1, 0),
        sq_sig_all: false,
    };
    let b = w.nodes[1].pd.create_qp(&init).unwrap();
    let a = w.qp(0, QpType::Rc, cap(8, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let readable = |channel: &uroce_verbs::CompChannel| {
        let mut fds = [PollFd::new(channel, PollFlags::IN)];
        let no_wait = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        poll(&mut fds, Some(&no_wait)).unwrap() == 1
    };
    b.post_recv(&[recv(1, &mr_b, 0, 64), recv(2, &mr_b, 64, 64)]).unwrap();
    cq.req_notify(false);
    assert!(!readable(&channel), "nothing yet");
    a.post_send(&[send(1, &mr_a, 0, 16)]).unwrap();
    w.settle(10 * MS);
    assert!(readable(&channel), "the armed CQ got a completion");
    assert_eq!(channel.get_cq_event(), Some(cq.index()));
    assert!(!readable(&channel), "drained");
    assert_eq!(statuses(&cq.poll(4).unwrap()), vec![(1, WcStatus::Success)]);
    // Not re-armed: the next completion raises no event.
    a.post_send(&[send(2, &mr_a, 0, 16)]).unwrap();
    w.settle(10 * MS);
    assert!(!readable(&channel));
    assert_eq!(statuses(&cq.poll(4).unwrap()), vec![(2, WcStatus::Success)]);
}

#[test]
fn raw_registration_of_the_applications_own_memory() {
    use uroce_net::process_mem::ProcessMemory;
    let mut w = World::with_memory(2, FabricConfig::new(16), || {
        std::sync::Arc::new(ProcessMemory::new(1 << 30).expect("process memory"))
    });
    let a = w.qp(0, QpType::Rc, cap(8, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(8, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let data = pattern(3000, 21);
    mr_a.write(0, &data).unwrap();
    // Node 1's application owns this buffer and lends it to its HCA.
    let mut mine = vec![0u8; 4096];
    // SAFETY: `mine` outlives the registration (deregistered below before
    // it is read or dropped), and nothing touches it while registered.
    let mr_b =
        unsafe { w.nodes[1].pd.reg_mr_raw(mine.as_mut_ptr(), mine.len(), ALL_ACCESS).unwrap() };
    a.post_send(&[write(1, &mr_a, 0, 3000, &mr_b, 100)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::Success)]);
    mr_b.dereg().map_err(|(_, e)| e).unwrap();
    assert_eq!(&mine[100..3100], &data[..], "the WRITE landed in the application's buffer");
    // A device on the simulated arena refuses raw registration.
    let sim = World::new(1, FabricConfig::new(17));
    let mut other = vec![0u8; 64];
    // SAFETY: as above; the call is refused and registers nothing.
    let refused = unsafe { sim.nodes[0].pd.reg_mr_raw(other.as_mut_ptr(), 64, ALL_ACCESS) };
    assert_eq!(refused.err().map(|e| e.errno()), Some(22));
}

#[test]
fn a_qp_reset_and_connected_again_keeps_no_timer_of_its_past() {
    // Timer code 8: 1.05 ms. The first SEND is lost, the QP reset before
    // its timer fires, connected again, and its next SEND lost too: the one
    // go-back comes a timeout after that SEND, not at the old timer's time.
    let mut p = rc_pair(|_| {});
    for nth in [1, 2] {
        p.w.fabric.add_rule(
            Rule::new(Matcher::any().opcode(Opcode::RC_SEND_ONLY).from(NodeId(0)), Action::Drop)
                .nth(nth),
        );
    }
    p.a.post_send(&[send(1, &p.mr_a, 0, 64)]).unwrap();
    let until = p.w.now().plus_nanos(MS / 5);
    p.w.fabric.run_until(until);
    let reset = uroce_verbs::QpAttr { qp_state: Some(QpState::Reset), ..Default::default() };
    for qp in [&p.a, &p.b] {
        qp.modify(&reset, uroce_verbs::AttrMask::STATE).unwrap();
    }
    p.w.connect(0, &p.a, 1, &p.b, &tuning());
    p.b.post_recv(&[recv(10, &p.mr_b, 0, 4096)]).unwrap();
    let sent_at = p.w.now();
    p.a.post_send(&[send(2, &p.mr_a, 0, 64)]).unwrap();
    let done = p.w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(2, WcStatus::Success)]);
    let took_ns = p.w.now().as_nanos() - sent_at.as_nanos();
    assert!(took_ns >= MS, "retransmitted {took_ns} ns after the post: the old timer fired");
    assert_eq!(counters(&p.w, 0).completer_retry_err, 1);
}
