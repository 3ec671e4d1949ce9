//! `Transmit::nothing_behind`: the HCA's word to a runtime that nothing
//! else is ready, so the runtime sends what it holds before it asks
//! again. It is given only for a request whose QP read its send queue for
//! it and found nothing posted behind it, with no response queued and no
//! other QP scheduled; an ACK, a packet with more of its message or of
//! the queue behind it, and a packet while another QP waits never carry
//! it. Packets are carried between two HCAs by hand.

use uroce_device::types::{SendFlags, WrOpcode};
use uroce_hca::{Endpoint, Instant, PacketKind, Transmit};
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Mr, Qp, RecvWr, SendWr, WcStatus};

/// What node `from` hands out, in order, until it has nothing more; each
/// packet is delivered to the other node.
fn drain(w: &World, from: usize, now: Instant) -> Vec<Transmit> {
    let mut buf = vec![0u8; 9000];
    let mut out = Vec::new();
    loop {
        let Some(t) = w.nodes[from].hca.lock().poll_transmit(now, &mut buf) else {
            return out;
        };
        w.nodes[1 - from].hca.lock().receive(now, &buf[..t.len]);
        out.push(t);
    }
}

/// The flags of the requests in `packets`, in order.
fn requests(packets: &[Transmit]) -> Vec<bool> {
    packets.iter().filter(|t| t.kind == PacketKind::Request).map(|t| t.nothing_behind).collect()
}

fn send(mr: &Mr, id: u64, bytes: u32, flags: SendFlags) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, bytes)];
    wr.flags = flags;
    wr
}

struct Pair {
    w: World,
    a: Qp,
    b: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

fn pair() -> Pair {
    let w = World::new(2, FabricConfig::new(7));
    // Path MTU 1024 (`tuning`): 3000 bytes are three packets.
    let (a, b) = w.rc_pair(cap(16, 1, 0), cap(16, 1, 0), &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    Pair { w, a, b, mr_a, mr_b }
}

impl Pair {
    fn post_receives(&self, count: u64) {
        for i in 0..count {
            let wr = RecvWr { wr_id: i, sg_list: vec![self.mr_b.sge(0, 4096)] };
            self.b.post_recv(&[wr]).expect("post_recv");
        }
    }
}

#[test]
fn a_lone_send_says_nothing_is_behind_it_and_its_ack_does_not() {
    let p = pair();
    p.post_receives(1);
    p.a.post_send(&[send(&p.mr_a, 1, 64, SendFlags::SIGNALED)]).unwrap();
    let now = p.w.now();
    let sent = drain(&p.w, 0, now);
    assert_eq!(requests(&sent), vec![true], "one SEND, nothing behind it");
    let answered = drain(&p.w, 1, now);
    assert!(!answered.is_empty(), "the responder ACKs the signaled SEND");
    assert!(answered.iter().all(|t| t.kind == PacketKind::Response && !t.nothing_behind));
    let wc = p.w.nodes[0].cq.poll(4).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
}

#[test]
fn only_the_last_packet_of_the_last_wqe_posted_says_it() {
    let p = pair();
    p.post_receives(3);
    // Two single-packet SENDs, then one of three packets (MTU 1024).
    let wrs = [
        send(&p.mr_a, 1, 64, SendFlags::EMPTY),
        send(&p.mr_a, 2, 64, SendFlags::EMPTY),
        send(&p.mr_a, 3, 3000, SendFlags::SIGNALED),
    ];
    p.a.post_send(&wrs).unwrap();
    let now = p.w.now();
    let sent = drain(&p.w, 0, now);
    assert_eq!(requests(&sent), vec![false, false, false, false, true]);
    drain(&p.w, 1, now);
    assert_eq!(p.w.nodes[0].cq.poll(4).unwrap().len(), 1, "the signaled SEND completed");
}

#[test]
fn a_message_from_an_earlier_round_does_not_say_it_for_a_queue_not_read_again() {
    let p = pair();
    p.post_receives(2);
    p.a.post_send(&[send(&p.mr_a, 1, 3000, SendFlags::SIGNALED)]).unwrap();
    let now = p.w.now();
    let mut buf = vec![0u8; 9000];
    // The first packet of three: the WQE is fetched, more of it remains.
    let first = p.w.nodes[0].hca.lock().poll_transmit(now, &mut buf).expect("first packet");
    assert!(!first.nothing_behind);
    p.w.nodes[1].hca.lock().receive(now, &buf[..first.len]);
    // Posted while the first message is under way, and the runtime's
    // next round (a later `now`): the queue is read again only after the
    // message, so its last packet cannot say it.
    p.a.post_send(&[send(&p.mr_a, 2, 64, SendFlags::SIGNALED)]).unwrap();
    let later = Instant::from_nanos(now.as_nanos() + 1_000);
    let rest = drain(&p.w, 0, later);
    assert_eq!(requests(&rest), vec![false, false, true], "the later SEND is the one");
    drain(&p.w, 1, later);
    assert_eq!(p.w.nodes[0].cq.poll(4).unwrap().len(), 2);
}

#[test]
fn another_qp_scheduled_means_something_is_behind() {
    let p = pair();
    let (a2, b2) = p.w.rc_pair(cap(16, 1, 0), cap(16, 1, 0), &tuning());
    p.post_receives(1);
    b2.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![p.mr_b.sge(4096, 64)] }]).unwrap();
    p.a.post_send(&[send(&p.mr_a, 1, 64, SendFlags::SIGNALED)]).unwrap();
    a2.post_send(&[send(&p.mr_a, 2, 64, SendFlags::SIGNALED)]).unwrap();
    let now = p.w.now();
    let sent = drain(&p.w, 0, now);
    assert_eq!(requests(&sent), vec![false, true], "the first while the other QP waits");
    drain(&p.w, 1, now);
    assert_eq!(p.w.nodes[0].cq.poll(4).unwrap().len(), 2);
}
