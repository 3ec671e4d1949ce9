//! First end-to-end checks of the HCA on a lossless simulated fabric.

use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};

#[test]
fn rc_send_write_read_and_atomics() {
    let mut w = World::new(2, FabricConfig::new(1));
    let a = w.qp(0, QpType::Rc, cap(64, 4, 64));
    let b = w.qp(1, QpType::Rc, cap(64, 4, 64));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(64 * 1024, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(64 * 1024, ALL_ACCESS).unwrap();

    // SEND of 3000 bytes (3 packets at MTU 1024) into a posted receive.
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    mr_a.write(0, &data).unwrap();
    b.post_recv(&[RecvWr { wr_id: 77, sg_list: vec![mr_b.sge(0, 4096)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::SendWithImm);
    send.sg_list = vec![mr_a.sge(0, 3000)];
    send.imm_or_inv = 0xabcd;
    a.post_send(&[send]).unwrap();
    let at_b = w.wait(1, 1, 10_000_000);
    assert_eq!(at_b.len(), 1, "receive completion");
    assert_eq!(at_b[0].status, WcStatus::Success);
    assert_eq!(at_b[0].opcode, WcOpcode::Recv);
    assert_eq!(at_b[0].wr_id, 77);
    assert_eq!(at_b[0].byte_len, 3000);
    assert_eq!(at_b[0].imm_or_inv, 0xabcd);
    assert_eq!(mr_b.read_vec(0, 3000).unwrap(), data);
    let at_a = w.wait(0, 1, 10_000_000);
    assert_eq!(at_a.len(), 1, "send completion");
    assert_eq!(
        (at_a[0].wr_id, at_a[0].status, at_a[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );

    // WRITE 5000 bytes to b at offset 8192, then READ them back into a.
    let pattern: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    mr_a.write(10_000, &pattern).unwrap();
    let mut write = SendWr::new(2, WrOpcode::RdmaWrite);
    write.sg_list = vec![mr_a.sge(10_000, 5000)];
    write.remote = RemoteTarget { addr: mr_b.addr() + 8192, rkey: mr_b.rkey() };
    let mut read = SendWr::new(3, WrOpcode::RdmaRead);
    read.sg_list = vec![mr_a.sge(20_000, 5000)];
    read.remote = RemoteTarget { addr: mr_b.addr() + 8192, rkey: mr_b.rkey() };
    read.flags = SendFlags::SIGNALED | SendFlags::FENCE;
    a.post_send(&[write, read]).unwrap();
    let done = w.wait(0, 2, 10_000_000);
    assert_eq!(done.len(), 2);
    assert_eq!((done[0].wr_id, done[0].status), (2, WcStatus::Success));
    assert_eq!(
        (done[1].wr_id, done[1].status, done[1].opcode),
        (3, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(mr_b.read_vec(8192, 5000).unwrap(), pattern);
    assert_eq!(mr_a.read_vec(20_000, 5000).unwrap(), pattern);

    // FETCH_ADD then COMPARE_SWAP on b's word at offset 0x100.
    mr_b.write(0x100, &40u64.to_le_bytes()).unwrap();
    let mut fa = SendWr::new(4, WrOpcode::AtomicFetchAndAdd);
    fa.sg_list = vec![mr_a.sge(0x200, 8)];
    fa.remote = RemoteTarget { addr: mr_b.addr() + 0x100, rkey: mr_b.rkey() };
    fa.compare_add = 2;
    let mut cs = SendWr::new(5, WrOpcode::AtomicCmpAndSwp);
    cs.sg_list = vec![mr_a.sge(0x208, 8)];
    cs.remote = RemoteTarget { addr: mr_b.addr() + 0x100, rkey: mr_b.rkey() };
    cs.compare_add = 42;
    cs.swap = 1000;
    a.post_send(&[fa, cs]).unwrap();
    let done = w.wait(0, 2, 10_000_000);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(4, WcStatus::Success), (5, WcStatus::Success)]
    );
    assert_eq!(mr_a.read_vec(0x200, 8).unwrap(), 40u64.to_le_bytes());
    assert_eq!(mr_a.read_vec(0x208, 8).unwrap(), 42u64.to_le_bytes());
    assert_eq!(mr_b.read_vec(0x100, 8).unwrap(), 1000u64.to_le_bytes());
    let hca_b = w.nodes[1].hca.borrow();
    assert_eq!(hca_b.counters().duplicate_request, 0);
}
