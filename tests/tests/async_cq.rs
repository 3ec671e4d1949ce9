//! Async completions (`Cq::next`, `Cq::poll_completion`): a task waiting
//! for a completion sleeps until the CQ's completion event wakes it, on
//! the simulated fabric (woken during the fabric's step) and on the UDP
//! runtime (woken from its background thread), with no busy polling.
//! The executors are the tests' own: a few lines over `std::task::Wake`.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::{ProgressMode, UdpConfig};
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World};
use uroce_verbs::{Cq, Event, QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};

/// A waker that counts its wakes and unparks a thread.
struct Flag {
    wakes: AtomicUsize,
    woken: AtomicBool,
    thread: Thread,
}

impl Flag {
    fn new() -> Arc<Flag> {
        Arc::new(Flag {
            wakes: AtomicUsize::new(0),
            woken: AtomicBool::new(false),
            thread: std::thread::current(),
        })
    }

    /// Whether the waker was called since the last look.
    fn take(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// What [`block_on`] saw.
#[derive(Debug)]
struct Run<T> {
    output: T,
    /// How often the future was polled.
    polls: usize,
    /// How often the waker was called.
    wakes: usize,
}

/// A park/unpark executor for one future, polled only when its waker was
/// called: a future whose waker never fires fails the test after `limit`
/// rather than being polled again.
fn block_on<F: Future>(future: F, limit: Duration) -> Run<F::Output> {
    let flag = Flag::new();
    let waker = Waker::from(flag.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    let deadline = Instant::now() + limit;
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Run { output, polls, wakes: flag.wakes.load(Ordering::Relaxed) };
        }
        // Sleep until the waker says so (park may return spuriously).
        while !flag.take() {
            let now = Instant::now();
            assert!(now < deadline, "not woken within {limit:?} (polled {polls} times)");
            std::thread::park_timeout(deadline - now);
        }
    }
}

fn send(wr_id: u64, sge: uroce_verbs::Sge) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![sge];
    wr.flags = SendFlags::SIGNALED;
    wr
}

#[test]
fn a_future_awaiting_a_completion_is_woken_by_the_fabric_step_that_delivers_the_send() {
    let mut w = World::new(2, FabricConfig::new(3));
    let a = w.qp(0, QpType::Rc, cap(16, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(16, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let ma = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mb = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    ma.write(0, b"async hello").unwrap();
    b.post_recv(&[RecvWr { wr_id: 77, sg_list: vec![mb.sge(0, 64)] }]).unwrap();

    let flag = Flag::new();
    let waker = Waker::from(flag.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut next = pin!(w.nodes[1].cq.next());
    assert!(next.as_mut().poll(&mut cx).is_pending(), "nothing has been sent");
    assert!(!flag.take(), "arming an empty CQ wakes no one");

    a.post_send(&[send(1, ma.sge(0, 11))]).unwrap();
    let mut steps = 0;
    while !flag.take() {
        steps += 1;
        assert!(steps < 10_000, "the fabric never woke the task");
        assert!(w.fabric.step().is_some(), "the fabric went idle with the task asleep");
    }
    // Woken: the completion is there for the next poll.
    let Poll::Ready(wc) = next.as_mut().poll(&mut cx) else {
        panic!("woken with no completion");
    };
    let wc = wc.unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (77, WcStatus::Success, WcOpcode::Recv));
    assert_eq!(wc.byte_len, 11);
    let mut got = [0u8; 11];
    mb.read(0, &mut got).unwrap();
    assert_eq!(&got, b"async hello");
    assert_eq!(flag.wakes.load(Ordering::Relaxed), 1, "one wake for one completion");
    // The awaiting task had the completion event: it is not left queued
    // for `next_event`.
    let events: Vec<_> = std::iter::from_fn(|| w.nodes[1].ctx.next_event()).collect();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Completion { .. })),
        "no completion event queued: {events:?}"
    );

    // A completion already in the ring is ready at the first poll, and the
    // sender's side completes through the same future.
    let wc = w.wait(0, 1, 10_000_000);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    b.post_recv(&[RecvWr { wr_id: 78, sg_list: vec![mb.sge(0, 64)] }]).unwrap();
    a.post_send(&[send(2, ma.sge(0, 5))]).unwrap();
    w.settle(10_000_000);
    let mut polled = pin!(w.nodes[0].cq.next());
    match polled.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(wc)) => assert_eq!((wc.wr_id, wc.opcode), (2, WcOpcode::Send)),
        other => panic!("the send's completion was in the ring: {other:?}"),
    }
    let mut polled = pin!(w.nodes[1].cq.next());
    match polled.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(wc)) => assert_eq!((wc.wr_id, wc.byte_len), (78, 5)),
        other => panic!("the receive's completion was in the ring: {other:?}"),
    }
}

fn udp_config(host: u8) -> UdpConfig {
    // 127.151.0.0/16: this test's block.
    let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 151, 0, host)));
    c.progress = ProgressMode::Event;
    c
}

fn qp_cap() -> uroce_verbs::QpCap {
    cap(16, 1, 0)
}

/// `cq.next()` under a plain `block_on`, from another thread than the one
/// that owns the device (the CQ is shared by reference: `Cq: Sync`).
#[test]
fn next_on_the_udp_runtime_sleeps_until_the_runtime_thread_wakes_it() {
    let a = Node::open(udp_config(1), 64).unwrap();
    let b = Node::open(udp_config(2), 64).unwrap();
    let qa = a.qp(QpType::Rc, qp_cap()).unwrap();
    let qb = b.qp(QpType::Rc, qp_cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    qa.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![ma.sge(0, 64)] }]).unwrap();

    const QUIET: Duration = Duration::from_millis(200);
    let cq: &Cq = &a.cq;
    let run = std::thread::scope(|s| {
        let waiter = s.spawn(move || {
            let run = block_on(cq.next(), Duration::from_secs(10));
            (run, Instant::now())
        });
        // B says nothing for a while: A's task must sleep, not spin.
        std::thread::sleep(QUIET);
        mb.write(0, b"wake up").unwrap();
        let sent = Instant::now();
        qb.post_send(&[send(9, mb.sge(0, 7))]).unwrap();
        let wc = b.wait(1, Duration::from_secs(5));
        assert_eq!(wc.len(), 1, "B's send completed");
        assert_eq!(wc[0].status, WcStatus::Success);
        let (run, done) = waiter.join().unwrap();
        (run, done, sent)
    });
    let (run, done, sent) = run;
    let wc = run.output.unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (5, WcStatus::Success, 7));
    assert!(done > sent, "completed before B sent");
    // One poll that arms and sleeps, one after the event: the waker (called
    // from the runtime's thread) is what woke it, not a timeout or a spin.
    assert!(run.polls <= 3, "polled {} times for one completion", run.polls);
    assert!(run.wakes >= 1 && run.wakes <= 2, "woken {} times", run.wakes);
    let mut got = [0u8; 7];
    ma.read(0, &mut got).unwrap();
    assert_eq!(&got, b"wake up");

    // Several completions in a row, each awaited: a ping-pong of three.
    for i in 0..3u64 {
        qa.post_recv(&[RecvWr { wr_id: 100 + i, sg_list: vec![ma.sge(0, 64)] }]).unwrap();
        qb.post_send(&[send(200 + i, mb.sge(0, 7))]).unwrap();
        let run = block_on(a.cq.next(), Duration::from_secs(10));
        let wc = run.output.unwrap();
        assert_eq!((wc.wr_id, wc.status), (100 + i, WcStatus::Success));
        assert_eq!(b.wait(1, Duration::from_secs(5)).len(), 1);
    }
}
