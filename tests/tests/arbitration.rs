//! The HCA's transmit arbitration: busy QPs take turns, each sending up to
//! `max_burst_packets` packets in a row, and start no new WQE while the
//! device's unacknowledged PSNs are at `max_device_unacked_psns`
//! (`HcaConfig`), as the responder's trace shows them arriving on a
//! lossless fabric.

use std::sync::Arc;
use uroce::world::WorldBuilder;
use uroce_device::mem::{DriverMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::trace::Step;
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Qp, QpType, Qpn, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};

const MS: u64 = 1_000_000;
/// Each SEND: 8 packets at the tests' path MTU of 1024.
const SEND_BYTES: u32 = 8 * 1024;

/// Two QP pairs from node 0 to node 1 each post one 8-packet SEND before
/// the fabric runs; returns the responders' QPNs in the order their request
/// packets arrived.
fn arrival_order(max_burst_packets: u32) -> (Vec<Qpn>, [Qpn; 2]) {
    arrival_order_with(HcaConfig { max_burst_packets, ..HcaConfig::default() })
}

fn arrival_order_with(config: HcaConfig) -> (Vec<Qpn>, [Qpn; 2]) {
    let memory = |_| Arc::new(SimMemory::strict(1 << 30)) as Arc<dyn DriverMemory>;
    let builder = WorldBuilder::new(2, FabricConfig::new(5)).hca_config(config).memory(memory);
    let mut w = World::from_builder(builder);
    let pair = |w: &World| -> (Qp, Qp) {
        let a = w.qp(0, QpType::Rc, cap(16, 4, 0));
        let b = w.qp(1, QpType::Rc, cap(16, 4, 0));
        w.connect(0, &a, 1, &b, &tuning());
        (a, b)
    };
    let (a1, b1) = pair(&w);
    let (a2, b2) = pair(&w);
    let mr_a = w.nodes[0].pd.alloc_mr(u64::from(SEND_BYTES), ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(2 * u64::from(SEND_BYTES), ALL_ACCESS).unwrap();
    w.nodes[1].hca.lock().trace_steps(1024);
    for (i, (a, b)) in [(&a1, &b1), (&a2, &b2)].into_iter().enumerate() {
        let offset = i as u64 * u64::from(SEND_BYTES);
        b.post_recv(&[RecvWr { wr_id: i as u64, sg_list: vec![mr_b.sge(offset, SEND_BYTES)] }])
            .unwrap();
        let mut send = SendWr::new(i as u64, WrOpcode::Send);
        send.sg_list = vec![mr_a.sge(0, SEND_BYTES)];
        send.flags = SendFlags::SIGNALED;
        a.post_send(&[send]).unwrap();
    }
    let done = w.wait(0, 2, 100 * MS);
    assert_eq!(done.len(), 2, "both SENDs complete");
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    let mut hca = w.nodes[1].hca.lock();
    let order = std::iter::from_fn(|| hca.poll_step())
        .filter_map(|(_, step)| match step {
            Step::Request { qpn, .. } => Some(qpn),
            _ => None,
        })
        .collect();
    (order, [b1.qpn(), b2.qpn()])
}

#[test]
fn busy_qps_take_turns_of_four_packets_by_default() {
    assert_eq!(HcaConfig::default().max_burst_packets, 4);
    let (order, [q1, q2]) = arrival_order(4);
    let turn = |q| std::iter::repeat_n(q, 4);
    let expected: Vec<Qpn> = turn(q1).chain(turn(q2)).chain(turn(q1)).chain(turn(q2)).collect();
    assert_eq!(order, expected);
}

#[test]
fn one_packet_per_turn_alternates() {
    let (order, [q1, q2]) = arrival_order(1);
    let expected: Vec<Qpn> = (0..16).map(|i| if i % 2 == 0 { q1 } else { q2 }).collect();
    assert_eq!(order, expected);
}

#[test]
fn a_turn_longer_than_a_message_sends_it_whole() {
    let (order, [q1, q2]) = arrival_order(64);
    let expected: Vec<Qpn> = std::iter::repeat_n(q1, 8).chain(std::iter::repeat_n(q2, 8)).collect();
    assert_eq!(order, expected);
}

#[test]
fn a_spent_device_budget_holds_the_next_wqe_until_acks_free_it() {
    assert_eq!(HcaConfig::default().max_device_unacked_psns, 1024);
    // The first SEND takes all 8 PSNs of the budget when it starts: the
    // second QP's SEND waits for its ACK, then goes whole.
    let config = HcaConfig { max_device_unacked_psns: 8, ..HcaConfig::default() };
    let (order, [q1, q2]) = arrival_order_with(config);
    let expected: Vec<Qpn> = std::iter::repeat_n(q1, 8).chain(std::iter::repeat_n(q2, 8)).collect();
    assert_eq!(order, expected);
}

#[test]
fn a_budget_of_one_psn_still_completes_every_qps_work() {
    let config = HcaConfig { max_device_unacked_psns: 1, ..HcaConfig::default() };
    let memory = |_| Arc::new(SimMemory::strict(1 << 30)) as Arc<dyn DriverMemory>;
    let builder = WorldBuilder::new(2, FabricConfig::new(9)).hca_config(config).memory(memory);
    let mut w = World::from_builder(builder);
    let mr_a = w.nodes[0].pd.alloc_mr(u64::from(SEND_BYTES), ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4 * u64::from(SEND_BYTES), ALL_ACCESS).unwrap();
    let mut qps = Vec::new();
    for q in 0..4u64 {
        let a = w.qp(0, QpType::Rc, cap(16, 4, 0));
        let b = w.qp(1, QpType::Rc, cap(16, 4, 0));
        w.connect(0, &a, 1, &b, &tuning());
        let sge = mr_b.sge(q * u64::from(SEND_BYTES), SEND_BYTES);
        b.post_recv(&[RecvWr { wr_id: q, sg_list: vec![sge] }]).unwrap();
        b.post_recv(&[RecvWr { wr_id: q, sg_list: vec![sge] }]).unwrap();
        qps.push((a, b));
    }
    // Each QP posts two SENDs: 8 WQEs of 8 packets, one WQE in flight at a
    // time on the whole device.
    for (q, (a, _)) in qps.iter().enumerate() {
        let wrs: Vec<SendWr> = (0..2)
            .map(|i| {
                let mut send = SendWr::new((q * 2 + i) as u64, WrOpcode::Send);
                send.sg_list = vec![mr_a.sge(0, SEND_BYTES)];
                send.flags = SendFlags::SIGNALED;
                send
            })
            .collect();
        a.post_send(&wrs).unwrap();
    }
    let done = w.wait(0, 8, 1_000 * MS);
    assert_eq!(done.len(), 8, "every SEND completes");
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    let received = w.wait(1, 8, 100 * MS);
    assert_eq!(received.len(), 8, "every receive completes");
}
