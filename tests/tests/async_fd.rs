//! `Context::async_fd` (`ibv_context.async_fd`): readable exactly while an
//! asynchronous event waits for `Context::next_event`. The device's
//! PORT_ACTIVE waits from the start; taking it drains the descriptor; an
//! SRQ limit event raised by an incoming SEND makes it readable again, and
//! taking that one drains it. A completion event of a CQ without a channel
//! goes to `next_event` too, but is no asynchronous event: it leaves the
//! descriptor alone. (`tests/c/nonblocking_events.c` does the same through
//! the C library, with the runtime's thread raising the event.)

use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Context, Event, EventType, QpInitAttr, QpType, RecvWr, SendWr, WrOpcode};

/// Whether the context's async descriptor is readable now.
fn readable(ctx: &Context) -> bool {
    let fd = ctx.async_fd().expect("the async descriptor");
    let mut pfd = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let none = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    rustix::event::poll(&mut pfd, Some(&none)).expect("poll") == 1
}

#[test]
fn the_async_descriptor_is_readable_exactly_while_an_asynchronous_event_waits() {
    let mut w = World::new(2, FabricConfig::new(11));
    let ctx = w.nodes[1].ctx.clone();
    assert!(readable(&ctx), "the port's PORT_ACTIVE waits");
    assert!(matches!(ctx.next_event(), Some(Event::Async { event: EventType::PortActive, .. })));
    assert!(!readable(&ctx), "taken: drained");
    assert_eq!(ctx.next_event(), None);

    // Node 1 receives from an SRQ of two WQEs armed at 2.
    let srq = w.nodes[1].pd.create_srq(8, 1, 0).unwrap();
    let node = &w.nodes[1];
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &node.cq,
        recv_cq: &node.cq,
        srq: Some(&srq),
        cap: cap(4, 1, 0),
        sq_sig_all: false,
    };
    let b = node.pd.create_qp(&init).unwrap();
    let a = w.qp(0, QpType::Rc, cap(4, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let recvs: Vec<_> =
        (0..2).map(|i| RecvWr { wr_id: i, sg_list: vec![mr_b.sge(i * 64, 64)] }).collect();
    srq.post_recv(&recvs).unwrap();
    srq.arm_limit(2).unwrap();
    // A completion event of node 1's CQ (no channel): for next_event, but
    // the descriptor stays unreadable.
    w.nodes[1].cq.req_notify(false);
    assert!(!readable(&ctx), "armed, nothing raised");

    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![mr_a.sge(0, 16)];
    a.post_send(&[send]).unwrap();
    assert_eq!(w.wait(1, 1, 10_000_000).len(), 1, "the SEND is received");
    assert!(readable(&ctx), "SRQ limit reached");
    let mut events = Vec::new();
    while let Some(event) = ctx.next_event() {
        if matches!(event, Event::Async { .. }) {
            assert!(!readable(&ctx), "the last asynchronous event taken: drained");
        }
        events.push(event);
    }
    let srq_limit = Event::Async { event: EventType::SrqLimitReached, element: srq.index() };
    assert!(events.contains(&srq_limit), "{events:?}");
    let cq = w.nodes[1].cq.index();
    assert!(events.contains(&Event::Completion { cq }), "{events:?}");
    assert!(!readable(&ctx));
}
