//! A QP's turns in the HCA's schedule: a requester that stops with work
//! left (more local operations than one turn takes) is looked at again
//! without another doorbell, and one that has sent everything posted
//! leaves the schedule at its first look that finds nothing.

use uroce_device::types::{SendFlags, WrOpcode};
use uroce_hca::Endpoint;
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, qpn, tuning, World, ALL_ACCESS};
use uroce_verbs::{RecvWr, SendWr, WcOpcode, WcStatus};

const MS: u64 = 1_000_000;

#[test]
fn more_local_operations_than_a_turn_takes_all_complete_from_one_post() {
    let mut w = World::new(2, FabricConfig::new(3));
    let (a, _b) = w.rc_pair(cap(512, 1, 0), cap(16, 1, 0), &tuning());
    // 300 LOCAL_INVs (each turn takes 64), each of its own MR, in one
    // post: only the last is signaled.
    let count = 300;
    let mrs: Vec<_> =
        (0..count).map(|_| w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap()).collect();
    let wrs: Vec<SendWr> = mrs
        .iter()
        .enumerate()
        .map(|(i, mr)| {
            let mut wr = SendWr::new(i as u64, WrOpcode::LocalInv);
            wr.imm_or_inv = mr.lkey().0;
            wr.flags = if i + 1 == count { SendFlags::SIGNALED } else { SendFlags::EMPTY };
            wr
        })
        .collect();
    a.post_send(&wrs).unwrap();
    let done = w.wait(0, 1, 10 * MS);
    assert_eq!(done.len(), 1, "the last LOCAL_INV completed: {done:?}");
    assert_eq!(done[0].wr_id, count as u64 - 1);
    assert_eq!((done[0].opcode, done[0].status), (WcOpcode::LocalInv, WcStatus::Success));
    w.settle(10 * MS);
    assert!(w.nodes[0].cq.poll(16).unwrap().is_empty(), "unsignaled: no other completion");
}

#[test]
fn local_operations_posted_in_batches_while_the_flag_is_up_all_complete() {
    let mut w = World::new(2, FabricConfig::new(4));
    let (a, _b) = w.rc_pair(cap(512, 1, 0), cap(16, 1, 0), &tuning());
    let mrs: Vec<_> = (0..400).map(|_| w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap()).collect();
    // Four posts of 100, back to back, each WR signaled.
    for batch in mrs.chunks(100) {
        let wrs: Vec<SendWr> = batch
            .iter()
            .map(|mr| {
                let mut wr = SendWr::new(u64::from(mr.lkey().0), WrOpcode::LocalInv);
                wr.imm_or_inv = mr.lkey().0;
                wr.flags = SendFlags::SIGNALED;
                wr
            })
            .collect();
        a.post_send(&wrs).unwrap();
    }
    let done = w.wait(0, 400, 10 * MS);
    assert_eq!(done.len(), 400, "every LOCAL_INV completed");
    assert!(done.iter().all(|wc| wc.status == WcStatus::Success), "{done:?}");
}

#[test]
fn a_qp_that_sent_all_it_read_leaves_the_schedule_at_its_first_empty_look() {
    let w = World::new(2, FabricConfig::new(5));
    let (a, b) = w.rc_pair(cap(16, 1, 0), cap(16, 1, 0), &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let now = w.now();
    let mut buf = vec![0u8; 9000];
    for i in 0..3 {
        b.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mr_b.sge(0, 64)] }]).unwrap();
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![mr_a.sge(0, 64)];
        a.post_send(&[wr]).unwrap();
        let mut hca = w.nodes[0].hca.lock();
        assert!(hca.qp(qpn(&a)).unwrap().scheduled, "the doorbell scheduled it");
        let sent = hca.poll_transmit(now, &mut buf).expect("the SEND");
        w.nodes[1].hca.lock().receive(now, &buf[..sent.len]);
        assert!(hca.poll_transmit(now, &mut buf).is_none(), "nothing more to send");
        // Its look at the ring found the index it had read: no doorbell
        // owed, no second look (the schedule is empty, the flag down).
        assert!(!hca.qp(qpn(&a)).unwrap().scheduled, "message {i}: still scheduled");
    }
}
