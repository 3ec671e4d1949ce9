//! The `dma_faults` counter: every host-memory fault the HCA meets on its
//! DMA path (registered memory the application freed behind the device's
//! back) is counted once, by the device that met it, whichever engine met
//! it: the requester gathering a SEND or WRITE payload, the responder
//! placing a WRITE or a SEND, generating a READ response or running an
//! atomic, the completer placing a READ response or an atomic's original
//! value. The work request completes with an error as before.

use std::sync::Arc;
use uroce_device::mem::SimMemory;
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Mr, Qp, QpType, RecvWr, RemoteTarget, SendWr, WcStatus, WrOpcode};

const MS: u64 = 1_000_000;
const MR_LEN: u64 = 64 * 1024;

/// Node 0 (QP `a`) connected to node 1 (QP `b`), RC, each with a region
/// that stays (`keep_*`) and one whose memory a scenario frees (`doomed_*`).
/// The host memory is not strict: a fault is an error, not a panic.
struct Pair {
    w: World,
    a: Qp,
    b: Qp,
    keep_a: Mr,
    keep_b: Mr,
    doomed_a: Mr,
    doomed_b: Mr,
}

fn rc_pair(seed: u64) -> Pair {
    let w = World::with_memory(2, FabricConfig::new(seed), || Arc::new(SimMemory::new(1 << 26)));
    let a = w.qp(0, QpType::Rc, cap(16, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(16, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let region = |n: usize| w.nodes[n].pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    let (keep_a, keep_b, doomed_a, doomed_b) = (region(0), region(1), region(0), region(1));
    Pair { w, a, b, keep_a, keep_b, doomed_a, doomed_b }
}

impl Pair {
    /// Frees the memory behind node `n`'s doomed region; the region stays
    /// registered.
    fn free_doomed(&self, n: usize) {
        let mr = if n == 0 { &self.doomed_a } else { &self.doomed_b };
        let freed = self.w.nodes[n].hca.borrow().memory().host().free(mr.addr());
        assert!(freed, "the region's memory was an allocation");
    }

    fn dma_faults(&self, n: usize) -> u64 {
        self.w.nodes[n].hca.borrow().counters().dma_faults
    }

    /// Posts `wr` on A and returns the status it completed with.
    fn post_and_wait(&mut self, wr: SendWr) -> WcStatus {
        let wr_id = wr.wr_id;
        self.a.post_send(&[wr]).unwrap();
        let done = self.w.wait(0, 1, 100 * MS);
        assert_eq!(done.len(), 1, "one completion for the WR");
        assert_eq!(done[0].wr_id, wr_id);
        done[0].status
    }
}

fn with_remote(opcode: WrOpcode, local: &Mr, len: u32, target: &Mr) -> SendWr {
    let mut wr = SendWr::new(7, opcode);
    wr.sg_list = vec![local.sge(0, len)];
    wr.remote = RemoteTarget { addr: target.addr(), rkey: target.rkey() };
    wr
}

#[test]
fn a_remote_write_into_freed_memory_is_counted_by_the_responder() {
    let mut p = rc_pair(1);
    assert_eq!((p.dma_faults(0), p.dma_faults(1)), (0, 0));
    p.free_doomed(1);
    let wr = with_remote(WrOpcode::RdmaWrite, &p.keep_a, 3000, &p.doomed_b);
    assert_eq!(p.post_and_wait(wr), WcStatus::RemOpErr);
    assert_eq!(p.dma_faults(1), 1, "B met the fault placing the WRITE");
    assert_eq!(p.dma_faults(0), 0, "A's own memory is fine");
}

#[test]
fn a_send_from_freed_memory_is_counted_by_the_requester() {
    let mut p = rc_pair(2);
    p.b.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![p.keep_b.sge(0, 4096)] }]).unwrap();
    p.free_doomed(0);
    let mut wr = SendWr::new(7, WrOpcode::Send);
    wr.sg_list = vec![p.doomed_a.sge(0, 100)];
    assert_eq!(p.post_and_wait(wr), WcStatus::LocProtErr);
    assert_eq!(p.dma_faults(0), 1, "A met the fault gathering the payload");
    assert_eq!(p.dma_faults(1), 0);
}

#[test]
fn a_write_from_freed_memory_is_counted_by_the_requester() {
    let mut p = rc_pair(3);
    p.free_doomed(0);
    let wr = with_remote(WrOpcode::RdmaWrite, &p.doomed_a, 5000, &p.keep_b);
    assert_eq!(p.post_and_wait(wr), WcStatus::LocProtErr);
    assert_eq!(p.dma_faults(0), 1);
    assert_eq!(p.dma_faults(1), 0);
}

#[test]
fn a_send_received_into_freed_memory_is_counted_by_the_receiver() {
    let mut p = rc_pair(4);
    p.b.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![p.doomed_b.sge(0, 4096)] }]).unwrap();
    p.free_doomed(1);
    let mut wr = SendWr::new(7, WrOpcode::Send);
    wr.sg_list = vec![p.keep_a.sge(0, 100)];
    assert_ne!(p.post_and_wait(wr), WcStatus::Success);
    let at_b = p.w.wait(1, 1, 10 * MS);
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].status, WcStatus::LocProtErr);
    assert_eq!(p.dma_faults(1), 1, "B met the fault placing the SEND");
    assert_eq!(p.dma_faults(0), 0);
}

#[test]
fn a_read_of_freed_memory_is_counted_by_the_responder() {
    let mut p = rc_pair(5);
    p.free_doomed(1);
    let wr = with_remote(WrOpcode::RdmaRead, &p.keep_a, 3000, &p.doomed_b);
    // The responder NAKs a READ whose memory went away after it was
    // accepted as a remote access error, like an invalidated key.
    let status = p.post_and_wait(wr);
    assert!(matches!(status, WcStatus::RemAccessErr | WcStatus::RemOpErr), "{status:?}");
    assert_eq!(p.dma_faults(1), 1, "B met the fault generating the response");
    assert_eq!(p.dma_faults(0), 0);
}

#[test]
fn a_read_response_into_freed_memory_is_counted_by_the_requester() {
    let mut p = rc_pair(6);
    p.free_doomed(0);
    let wr = with_remote(WrOpcode::RdmaRead, &p.doomed_a, 3000, &p.keep_b);
    assert_eq!(p.post_and_wait(wr), WcStatus::LocProtErr);
    assert_eq!(p.dma_faults(0), 1, "A met the fault placing the response");
    assert_eq!(p.dma_faults(1), 0);
}

#[test]
fn an_atomic_on_freed_memory_is_counted_by_the_responder() {
    for (seed, opcode) in [(7, WrOpcode::AtomicFetchAndAdd), (8, WrOpcode::AtomicCmpAndSwp)] {
        let mut p = rc_pair(seed);
        p.free_doomed(1);
        let wr = with_remote(opcode, &p.keep_a, 8, &p.doomed_b);
        assert_eq!(p.post_and_wait(wr), WcStatus::RemOpErr, "{opcode:?}");
        assert_eq!(p.dma_faults(1), 1, "{opcode:?}: B met the fault");
        assert_eq!(p.dma_faults(0), 0, "{opcode:?}");
    }
}

#[test]
fn an_atomic_result_into_freed_memory_is_counted_by_the_requester() {
    let mut p = rc_pair(9);
    p.free_doomed(0);
    let wr = with_remote(WrOpcode::AtomicFetchAndAdd, &p.doomed_a, 8, &p.keep_b);
    assert_eq!(p.post_and_wait(wr), WcStatus::LocProtErr);
    assert_eq!(p.dma_faults(0), 1, "A met the fault placing the original value");
    assert_eq!(p.dma_faults(1), 0);
}
