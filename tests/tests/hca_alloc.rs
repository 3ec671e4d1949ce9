//! The HCA allocates nothing per packet or per WR once warm: a counting
//! allocator counts the allocations made inside the HCA's packet calls
//! (`poll_transmit`, `receive`) while RC SENDs, WRITEs, READs and atomics
//! stream between two HCAs whose packets this test carries by hand.
//!
//! This file is its own test binary, so the global allocator it installs
//! counts nothing of the other tests; it counts only while a call into an
//! HCA is under way on this thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use uroce_device::types::{QpType, SendFlags, WrOpcode};
use uroce_hca::{Endpoint, Instant};
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Mtu, Qp, RecvWr, RemoteTarget, SendWr, WcStatus};

struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn note_allocation() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on unchanged to the system allocator; the
// only addition is a counter.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Runs `f` counting the allocations it makes; returns its result.
fn counted<T>(f: impl FnOnce() -> T) -> T {
    COUNTING.with(|c| c.set(true));
    let result = f();
    COUNTING.with(|c| c.set(false));
    result
}

/// Carries packets between nodes 0 and 1 by hand until neither has one
/// to send; returns how many were carried.
fn pump(w: &World, now: Instant, buf: &mut [u8]) -> u64 {
    let mut carried = 0;
    loop {
        let mut moved = false;
        for (from, to) in [(0, 1), (1, 0)] {
            let sent = counted(|| w.nodes[from].hca.lock().poll_transmit(now, buf));
            if let Some(transmit) = sent {
                let packet = &buf[..transmit.len];
                counted(|| w.nodes[to].hca.lock().receive(now, packet));
                carried += 1;
                moved = true;
            }
        }
        if !moved {
            return carried;
        }
    }
}

/// One round: a receive and a SEND (two packets), a WRITE (two packets),
/// a READ (two response packets), a FETCH_ADD, each signaled.
fn round(a: &Qp, b: &Qp, wrs: &Round) {
    b.post_recv(std::slice::from_ref(&wrs.recv)).expect("post_recv");
    a.post_send(&wrs.sends).expect("post_send");
}

struct Round {
    recv: RecvWr,
    sends: Vec<SendWr>,
}

#[test]
fn no_allocation_per_packet_or_wr_once_warm() {
    let w = World::new(2, FabricConfig::new(5));
    let a = w.qp(0, QpType::Rc, cap(64, 2, 64));
    let b = w.qp(1, QpType::Rc, cap(64, 2, 64));
    let mut t = tuning();
    t.mtu = Mtu::Mtu1024;
    w.connect(0, &a, 1, &b, &t);
    let mr_a = w.nodes[0].pd.alloc_mr(16384, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(16384, ALL_ACCESS).unwrap();
    let remote = RemoteTarget { addr: mr_b.addr(), rkey: mr_b.rkey() };
    let signaled = |mut wr: SendWr| {
        wr.flags = SendFlags::SIGNALED;
        wr
    };
    let mut send = signaled(SendWr::new(1, WrOpcode::Send));
    send.sg_list = vec![mr_a.sge(0, 1500), mr_a.sge(2000, 500)];
    let mut write = signaled(SendWr::new(2, WrOpcode::RdmaWrite));
    write.sg_list = vec![mr_a.sge(4096, 2000)];
    write.remote = remote;
    let mut read = signaled(SendWr::new(3, WrOpcode::RdmaRead));
    read.sg_list = vec![mr_a.sge(8192, 1800)];
    read.remote = RemoteTarget { addr: mr_b.addr() + 8192, rkey: mr_b.rkey() };
    let mut add = signaled(SendWr::new(4, WrOpcode::AtomicFetchAndAdd));
    add.sg_list = vec![mr_a.sge(12288, 8)];
    add.remote = RemoteTarget { addr: mr_b.addr() + 12288, rkey: mr_b.rkey() };
    add.compare_add = 1;
    let mut inline = signaled(SendWr::new(5, WrOpcode::RdmaWrite));
    inline.inline_data = Some(vec![7u8; 48]);
    inline.remote = RemoteTarget { addr: mr_b.addr() + 14000, rkey: mr_b.rkey() };
    let wrs = Round {
        recv: RecvWr { wr_id: 9, sg_list: vec![mr_b.sge(0, 4096)] },
        sends: vec![send, write, read, add, inline],
    };
    let mut buf = vec![0u8; 9000];
    let now = w.now();
    let mut run = |rounds: usize| {
        let mut packets = 0;
        for _ in 0..rounds {
            round(&a, &b, &wrs);
            packets += pump(&w, now, &mut buf);
            let completions = w.nodes[0].cq.poll(16).expect("poll");
            assert_eq!(completions.len(), 5, "five send completions a round");
            assert!(completions.iter().all(|wc| wc.status == WcStatus::Success));
            let receives = w.nodes[1].cq.poll(16).expect("poll");
            assert_eq!(receives.len(), 1, "one receive completion a round");
        }
        packets
    };
    // Warm up: every ring slot and queue has held a WQE once. The first
    // WQEs do allocate (their slots' buffers), which shows the counter
    // sees the HCA's allocations.
    run(200);
    let warm_up = ALLOCATIONS.swap(0, Ordering::Relaxed);
    assert!(warm_up > 0, "the counter sees allocations inside the HCA");
    let packets = run(200);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(packets >= 200 * 10, "the rounds moved their packets ({packets})");
    assert_eq!(allocations, 0, "allocations inside the HCA for {packets} packets");
}
