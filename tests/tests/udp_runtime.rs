//! The UDP runtime's liveness: work the application leaves behind when it
//! goes quiet (a held packet, a retransmit timer, a burst above one step, a
//! flush raised by a command) is done by the background thread promptly,
//! not when its sleep happens to end; and completion channels follow CQ
//! index reuse. (Regression tests: each of these once waited ~1 s.)

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use uroce::app::{bring_up, connect_pair, default_tuning, qp_on, wait_cq, Node, ALL_ACCESS};
use uroce_hca::config::SourcePortPolicy;
use uroce_net::udp::{FaultSpec, ProgressMode, UdpConfig};
use uroce_verbs::{
    AhAttr, AttrMask, CompChannel, Event, Gid, Mr, Qkey, Qp, QpAttr, QpCap, QpState, QpType, Qpn,
    RecvWr, SendFlags, SendWr, WcStatus, WrOpcode,
};

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 512,
        max_recv_wr: 512,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

fn config(net: u8, host: u8, mode: ProgressMode, faults: Option<&str>) -> UdpConfig {
    let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 93, net, host)));
    c.progress = mode;
    c.faults = faults.map(|f| FaultSpec::parse(f).unwrap());
    c
}

/// Waits until the channel's descriptor is readable (or `limit` passes);
/// returns how long that took.
fn wait_readable(channel: &CompChannel, limit: Duration) -> Duration {
    let t0 = Instant::now();
    let mut fds = [rustix::event::PollFd::new(channel, rustix::event::PollFlags::IN)];
    let ts = rustix::event::Timespec {
        tv_sec: limit.as_secs() as _,
        tv_nsec: limit.subsec_nanos() as _,
    };
    let _ = rustix::event::poll(&mut fds, Some(&ts));
    t0.elapsed()
}

/// A signaled SEND of the first 64 bytes of `mr`.
fn send_64(wr_id: u64, mr: &Mr) -> SendWr {
    let mut send = SendWr::new(wr_id, WrOpcode::Send);
    send.sg_list = vec![mr.sge(0, 64)];
    send.flags = SendFlags::SIGNALED;
    send
}

/// Connects `qp` to a peer that does not exist (127.93.`net`.99): two
/// tries of 4.2 ms, then RETRY_EXC_ERR.
fn to_nowhere(qp: &Qp, net: u8) {
    let mut t = default_tuning();
    t.timeout = 10; // 4.2 ms per try
    t.retry_cnt = 1;
    let nowhere = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 93, net, 99)));
    bring_up(qp, Some((nowhere, Qpn::new(0x11), 0)), &t, 0).unwrap();
}

/// Far below the 1 s the background thread's longest sleep lasts.
const PROMPT: Duration = Duration::from_millis(250);

#[test]
fn a_delayed_packet_of_a_quiet_sender_leaves_on_time() {
    for mode in [ProgressMode::Event, ProgressMode::HYBRID] {
        let a = Node::open(config(1, 1, mode, Some("delay_us=200")), 64).unwrap();
        let b = Node::open(config(1, 2, ProgressMode::HYBRID, None), 64).unwrap();
        let qa = a.qp(QpType::Rc, cap()).unwrap();
        let qb = b.qp(QpType::Rc, cap()).unwrap();
        connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
        let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
        let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
        for i in 0..3 {
            qb.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mb.sge(0, 8192)] }]).unwrap();
            // A's application goes quiet: its background thread sleeps.
            std::thread::sleep(Duration::from_millis(5));
            let t0 = Instant::now();
            qa.post_send(&[send_64(i, &ma)]).unwrap();
            // A makes no further call until B has the message.
            let got = b.wait(1, Duration::from_secs(3));
            let took = t0.elapsed();
            assert_eq!(got.len(), 1, "{mode}: message {i} arrived");
            assert!(took < PROMPT, "{mode}: message {i} held 200 us took {took:?}");
            assert_eq!(a.wait(1, Duration::from_secs(3))[0].status, WcStatus::Success);
        }
    }
}

#[test]
fn a_retransmit_timer_armed_after_the_application_slept_fires_on_time() {
    for (n, mode) in [ProgressMode::Event, ProgressMode::HYBRID].into_iter().enumerate() {
        let a = Node::open(config(2, 1 + n as u8, mode, None), 64).unwrap();
        let channel = a.ctx.create_comp_channel().unwrap();
        let cq = a.ctx.create_cq_with_channel(64, &channel).unwrap();
        let qa = qp_on(&a.pd, &cq, QpType::Rc, cap()).unwrap();
        to_nowhere(&qa, 2);
        let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        // libibverbs order: arm, post, sleep on the channel.
        cq.req_notify(false);
        qa.post_send(&[send_64(1, &ma)]).unwrap();
        let took = wait_readable(&channel, Duration::from_secs(3));
        // Two tries of 4.2 ms, then RETRY_EXC_ERR.
        assert!(took < PROMPT, "{mode}: the error completion's event took {took:?}");
        let got = wait_cq(&cq, 1, Duration::from_millis(100));
        assert_eq!(got.first().map(|c| c.status), Some(WcStatus::RetryExcErr), "{mode}");
    }
}

#[test]
fn an_application_spinning_on_an_empty_cq_fires_the_retransmit_timer_itself() {
    // No background thread: only the application's polls drive the device.
    // Most polls of a waiting application only look for a datagram (no
    // clock, no transmit round); the timer must fire all the same, from
    // the whole round every few polls.
    let mut c = config(11, 1, ProgressMode::HYBRID, None);
    c.background = false;
    let a = Node::open(c, 64).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    to_nowhere(&qa, 11);
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let t0 = Instant::now();
    qa.post_send(&[send_64(1, &ma)]).unwrap();
    let got = a.wait(1, Duration::from_secs(3));
    let took = t0.elapsed();
    // Two tries of 4.2 ms, then RETRY_EXC_ERR.
    assert_eq!(got.first().map(|c| c.status), Some(WcStatus::RetryExcErr));
    assert!(took < PROMPT, "the error completion took {took:?}");
    assert_eq!(a.dev.counters().completer_retry_err, 1, "one retransmit, from a poll");
}

#[test]
fn a_message_for_an_application_that_drove_then_slept_wakes_it() {
    // While B's application polls, the background thread takes B's socket
    // out of the set it sleeps on; once B sleeps on its channel, the socket
    // must be back in it, or A's message would wait for a timeout.
    let a = Node::open(config(12, 1, ProgressMode::HYBRID, None), 64).unwrap();
    let b = Node::open(config(12, 2, ProgressMode::HYBRID, None), 64).unwrap();
    let channel = b.ctx.create_comp_channel().unwrap();
    let cq = b.ctx.create_cq_with_channel(64, &channel).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = qp_on(&b.pd, &cq, QpType::Rc, cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    qb.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![mb.sge(0, 64)] }]).unwrap();
    // B's application drives for 20 ms (the thread notices it, and sleeps
    // in its shadow), then arms its CQ and sleeps.
    assert!(wait_cq(&cq, 1, Duration::from_millis(20)).is_empty());
    cq.req_notify(false);
    std::thread::sleep(Duration::from_millis(10));
    qa.post_send(&[send_64(1, &ma)]).unwrap();
    let took = wait_readable(&channel, Duration::from_secs(3));
    assert!(took < PROMPT, "the receive's event took {took:?}");
    let got = wait_cq(&cq, 1, Duration::from_millis(100));
    assert_eq!(got.first().map(|c| (c.wr_id, c.status)), Some((7, WcStatus::Success)));
}

#[test]
fn a_burst_larger_than_one_step_all_leaves() {
    let a = Node::open(config(3, 1, ProgressMode::Event, None), 1024).unwrap();
    let b = Node::open(config(3, 2, ProgressMode::HYBRID, None), 1024).unwrap();
    let qa = a.qp(QpType::Ud, cap()).unwrap();
    let qb = b.qp(QpType::Ud, cap()).unwrap();
    let t = default_tuning();
    bring_up(&qa, None, &t, 0x11).unwrap();
    bring_up(&qb, None, &t, 0x11).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 20, ALL_ACCESS).unwrap();
    let ah =
        a.pd.create_ah(AhAttr { dgid: b.gid(), sgid_index: 1, port_num: 1, ..Default::default() })
            .unwrap();
    let n = 400u64;
    let recvs: Vec<RecvWr> =
        (0..n).map(|i| RecvWr { wr_id: i, sg_list: vec![mb.sge(i * 2048, 2048)] }).collect();
    qb.post_recv(&recvs).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let sends: Vec<SendWr> = (0..n)
        .map(|i| {
            let mut s = SendWr::new(i, WrOpcode::Send);
            s.sg_list = vec![ma.sge(0, 64)];
            s.ud = Some((ah.index(), qb.qpn(), Qkey(0x11)));
            s
        })
        .collect();
    let t0 = Instant::now();
    qa.post_send(&sends).unwrap();
    let got = b.wait(n as usize, Duration::from_secs(3));
    let took = t0.elapsed();
    assert_eq!(got.len(), n as usize, "every UD message of the burst arrived");
    assert!(took < PROMPT, "the burst took {took:?}");
}

#[test]
fn doorbells_held_for_a_burst_leave_though_the_application_goes_quiet() {
    // Posts to many QPs, one `post_send` each, back to back: with a shared
    // source port, all but the first wait to leave together with the application's next call. Here
    // none comes: the background thread must send them.
    for (n, mode) in [ProgressMode::Event, ProgressMode::HYBRID].into_iter().enumerate() {
        let mut shared = config(9, 1 + 2 * n as u8, mode, None);
        // Doorbells are held where QPs share a source port; a debug
        // build's posts are further apart than the default window.
        shared.hca.source_ports = SourcePortPolicy::Shared;
        shared.doorbell_burst_ns = 1_000_000;
        let a = Node::open(shared, 256).unwrap();
        let b = Node::open(config(9, 2 + 2 * n as u8, ProgressMode::HYBRID, None), 256).unwrap();
        let qps: Vec<_> = (0..8)
            .map(|_| {
                let qa = a.qp(QpType::Rc, cap()).unwrap();
                let qb = b.qp(QpType::Rc, cap()).unwrap();
                connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
                (qa, qb)
            })
            .collect();
        let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
        let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
        let sends: Vec<SendWr> = (0..qps.len() as u64).map(|i| send_64(i, &ma)).collect();
        for round in 0..3u64 {
            for (i, (_, qb)) in qps.iter().enumerate() {
                let wr_id = round * 100 + i as u64;
                qb.post_recv(&[RecvWr { wr_id, sg_list: vec![mb.sge(0, 64)] }]).unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
            let t0 = Instant::now();
            for ((qa, _), send) in qps.iter().zip(&sends) {
                qa.post_send(std::slice::from_ref(send)).unwrap();
            }
            let got = b.wait(qps.len(), Duration::from_secs(3));
            let took = t0.elapsed();
            assert_eq!(got.len(), qps.len(), "{mode}: round {round}: every message arrived");
            assert!(took < PROMPT, "{mode}: round {round}: the burst took {took:?}");
            assert_eq!(a.wait(qps.len(), Duration::from_secs(3)).len(), qps.len(), "{mode}");
        }
        let held = a.dev.stats().tx_doorbells_held;
        assert!(held >= 3, "{mode}: doorbells were held: {held}");
    }
}

#[test]
fn a_flush_raised_by_a_command_wakes_the_channel() {
    let a = Node::open(config(4, 1, ProgressMode::Event, None), 64).unwrap();
    let channel = a.ctx.create_comp_channel().unwrap();
    let cq = a.ctx.create_cq_with_channel(64, &channel).unwrap();
    let qa = qp_on(&a.pd, &cq, QpType::Rc, cap()).unwrap();
    let nowhere = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 93, 4, 99)));
    bring_up(&qa, Some((nowhere, Qpn::new(0x11), 0)), &default_tuning(), 0).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    qa.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![ma.sge(0, 64)] }]).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    cq.req_notify(false);
    let err = QpAttr { qp_state: Some(QpState::Err), ..Default::default() };
    qa.modify(&err, AttrMask::STATE).unwrap();
    let took = wait_readable(&channel, Duration::from_secs(3));
    assert!(took < PROMPT, "the flush's completion event took {took:?}");
    assert_eq!(channel.get_cq_event(), Some(cq.index()));
    let got = wait_cq(&cq, 1, Duration::from_millis(100));
    assert_eq!(got.first().map(|c| (c.wr_id, c.status)), Some((5, WcStatus::WrFlushErr)));
}

#[test]
fn a_cq_reusing_a_destroyed_cqs_index_does_not_inherit_its_channel() {
    let a = Node::open(config(5, 1, ProgressMode::HYBRID, None), 64).unwrap();
    let channel = a.ctx.create_comp_channel().unwrap();
    let old = a.ctx.create_cq_with_channel(64, &channel).unwrap();
    let index = old.index();
    old.destroy().map_err(|(_, e)| e).unwrap();
    let cq = a.ctx.create_cq(64).unwrap();
    assert_eq!(cq.index(), index, "the table reuses the index");
    let qa = qp_on(&a.pd, &cq, QpType::Rc, cap()).unwrap();
    let nowhere = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 93, 5, 99)));
    bring_up(&qa, Some((nowhere, Qpn::new(0x11), 0)), &default_tuning(), 0).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    qa.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![ma.sge(0, 64)] }]).unwrap();
    cq.req_notify(false);
    let err = QpAttr { qp_state: Some(QpState::Err), ..Default::default() };
    qa.modify(&err, AttrMask::STATE).unwrap();
    assert_eq!(wait_cq(&cq, 1, Duration::from_secs(1)).len(), 1);
    assert_eq!(channel.get_cq_event(), None, "the old channel stays silent");
    let mut events = Vec::new();
    while let Some(e) = a.ctx.next_event() {
        events.push(e);
    }
    assert!(
        events.iter().any(|e| matches!(e, Event::Completion { cq: c } if *c == index)),
        "the completion event goes to next_event: {events:?}"
    );
}

#[test]
fn verbs_on_a_closed_device_fail_instead_of_hanging() {
    let dev = uroce_net::udp::UdpDevice::open(config(6, 1, ProgressMode::HYBRID, None)).unwrap();
    let ctx = uroce_verbs::Context::open(dev.hca());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = qp_on(&pd, &cq, QpType::Rc, cap()).unwrap();
    let peer = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 93, 6, 2)));
    bring_up(&qp, Some((peer, Qpn::new(0x11), 0)), &default_tuning(), 0).unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    assert!(cq.poll(1).unwrap().is_empty(), "open: polls work");
    drop(dev);
    assert!(cq.poll(1).is_err(), "closed: poll_cq reports it");
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![mr.sge(0, 64)];
    assert_eq!(qp.post_send(&[send]).map_err(|(i, _)| i), Err(0), "closed: post_send reports it");
    let recv = RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 64)] };
    assert!(qp.post_recv(&[recv]).is_err(), "closed: post_recv reports it");
}

#[test]
fn a_source_port_in_use_elsewhere_falls_back_to_4791_with_a_correct_icrc() {
    let a = Node::open(config(7, 1, ProgressMode::HYBRID, None), 64).unwrap();
    let b = Node::open(config(7, 2, ProgressMode::HYBRID, None), 64).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    // Someone else holds the port rxe's hash gives this QP pair on A.
    let sport = uroce_wire::udp_port::connected_sport(qa.qpn(), qb.qpn(), 0);
    let squatter = std::net::UdpSocket::bind((Ipv4Addr::new(127, 93, 7, 1), sport)).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    ma.write(0, &data).unwrap();
    qb.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![mb.sge(0, 4096)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![ma.sge(0, 3000)];
    send.flags = SendFlags::SIGNALED;
    qa.post_send(&[send]).unwrap();
    assert_eq!(
        b.wait(1, Duration::from_secs(3)).first().map(|c| c.status),
        Some(WcStatus::Success)
    );
    assert_eq!(mb.read_vec(0, 3000).unwrap(), data);
    assert_eq!(
        a.wait(1, Duration::from_secs(3)).first().map(|c| c.status),
        Some(WcStatus::Success)
    );
    assert!(a.dev.stats().tx_port_fallbacks >= 3, "{:?}", a.dev.stats());
    assert_eq!(b.dev.counters().rcvd_icrc_err, 0);
    drop(squatter);
}

#[test]
fn ipv6_two_qps_of_one_device_on_the_loopback_address() {
    // IPv6 loopback has one address, so one device talks to itself.
    let mut c = UdpConfig::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
    c.progress = ProgressMode::HYBRID;
    let a = match Node::open(c, 64) {
        Ok(a) => a,
        // A host without IPv6 cannot bind ::1 at all.
        Err(e) if e.contains("binding") => {
            eprintln!("skipped: no IPv6 loopback here ({e})");
            return;
        }
        Err(e) => panic!("IPv6 loopback device: {e}"),
    };
    let q1 = a.qp(QpType::Rc, cap()).unwrap();
    let q2 = a.qp(QpType::Rc, cap()).unwrap();
    let t = default_tuning();
    bring_up(&q1, Some((a.gid(), q2.qpn(), 0)), &t, 0).unwrap();
    bring_up(&q2, Some((a.gid(), q1.qpn(), 0)), &t, 0).unwrap();
    let m = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 1) as u8).collect();
    m.write(0, &data).unwrap();
    q2.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![m.sge(8192, 8192)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![m.sge(0, 5000)];
    send.flags = SendFlags::SIGNALED;
    let mut read = SendWr::new(2, WrOpcode::RdmaRead);
    read.sg_list = vec![m.sge(32_768, 5000)];
    read.remote = uroce_verbs::RemoteTarget { addr: m.addr(), rkey: m.rkey() };
    read.flags = SendFlags::SIGNALED;
    q1.post_send(&[send, read]).unwrap();
    let got = a.wait(3, Duration::from_secs(3));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    assert_eq!(m.read_vec(8192, 5000).unwrap(), data, "SEND over IPv6");
    assert_eq!(m.read_vec(32_768, 5000).unwrap(), data, "READ over IPv6");
    let c = a.dev.counters();
    assert_eq!((c.rcvd_icrc_err, c.rcvd_malformed), (0, 0));
}

#[test]
fn every_fault_kind_on_the_real_path_is_applied_counted_and_survived() {
    let spec = "loss=0.05,dup=0.05,delay_us=100,reorder=0.1,corrupt=0.05,seed=11";
    let a = Node::open(config(8, 1, ProgressMode::HYBRID, Some(spec)), 256).unwrap();
    let b = Node::open(config(8, 2, ProgressMode::HYBRID, Some(spec)), 256).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    let mut t = default_tuning();
    t.timeout = 10; // 4.2 ms: losses are recovered quickly
    connect_pair(&a, &qa, &b, &qb, &t).unwrap();
    let ma = a.pd.alloc_mr(1 << 20, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 20, ALL_ACCESS).unwrap();
    let n = 40u64;
    let msg = 6000u32;
    let data: Vec<u8> = (0..(n as u32 * msg)).map(|i| (i % 253) as u8).collect();
    ma.write(0, &data).unwrap();
    let recvs: Vec<RecvWr> =
        (0..n).map(|i| RecvWr { wr_id: i, sg_list: vec![mb.sge(i * 8192, 8192)] }).collect();
    qb.post_recv(&recvs).unwrap();
    let sends: Vec<SendWr> = (0..n)
        .map(|i| {
            let mut s = SendWr::new(i, WrOpcode::Send);
            s.sg_list = vec![ma.sge(i * u64::from(msg), msg)];
            s.flags = SendFlags::SIGNALED;
            s
        })
        .collect();
    qa.post_send(&sends).unwrap();
    let sent = a.wait(n as usize, Duration::from_secs(20));
    assert_eq!(sent.len(), n as usize);
    assert!(sent.iter().all(|c| c.status == WcStatus::Success), "{sent:?}");
    let got = b.wait(n as usize, Duration::from_secs(5));
    assert_eq!(got.len(), n as usize, "every message arrived once");
    for (i, c) in got.iter().enumerate() {
        assert_eq!((c.wr_id, c.byte_len), (i as u64, msg), "in order, whole");
        let start = i * msg as usize;
        let arrived = mb.read_vec(i as u64 * 8192, msg as usize).unwrap();
        assert!(arrived == data[start..start + msg as usize], "message {i} intact");
    }
    // Every kind happened on the data path (the sender's many packets);
    // the receiver's ACKs are fewer, and how many depends on timing
    // (coalescing), so with the same seed they may draw no duplicate.
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    assert!(sa.faults_lost > 0 && sa.faults_duplicated > 0, "{sa:?}");
    assert!(sa.faults_delayed > 0 && sa.faults_corrupted > 0, "{sa:?}");
    assert!(sb.faults_delayed > 0, "the receiver's packets went through the injector too: {sb:?}");
    // Corrupted packets are dropped on their ICRC by the receiver; the
    // requester recovered the losses by going back.
    let (ca, cb) = (a.dev.counters(), b.dev.counters());
    assert!(ca.rcvd_icrc_err + cb.rcvd_icrc_err > 0, "{ca:?} {cb:?}");
    assert!(ca.completer_retry_err > 0, "{ca:?}");
}

#[test]
fn acks_handed_over_after_the_next_send_complete_every_send() {
    // A ping-pong in the test's thread: each reply comes with the ACK of
    // the request it answers, in one GRO datagram. A's application waits
    // for the reply, so the runtime hands that ACK to the HCA only after A's
    // next send (`rx_acks_later`); every send still completes, in order.
    const ROUNDS: u64 = 200;
    let a = Node::open(config(10, 1, ProgressMode::HYBRID, None), 1024).unwrap();
    let b = Node::open(config(10, 2, ProgressMode::HYBRID, None), 1024).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    for i in 0..ROUNDS {
        qa.post_recv(&[RecvWr { wr_id: i, sg_list: vec![ma.sge(4096, 64)] }]).unwrap();
        qb.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mb.sge(4096, 64)] }]).unwrap();
    }
    // Waits for the next receive completion of `node`, keeping the send
    // completions that come meanwhile.
    let receive = |node: &Node, sends: &mut Vec<(u64, WcStatus)>| loop {
        let got = node.wait(1, Duration::from_secs(3));
        let wc = got.first().expect("a completion within 3 s");
        if wc.opcode == uroce_verbs::WcOpcode::Recv {
            assert_eq!(wc.status, WcStatus::Success);
            return wc.wr_id;
        }
        sends.push((wc.wr_id, wc.status));
    };
    let (mut sends_a, mut sends_b) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        qa.post_send(&[send_64(i, &ma)]).unwrap();
        assert_eq!(receive(&b, &mut sends_b), i);
        qb.post_send(&[send_64(i, &mb)]).unwrap();
        assert_eq!(receive(&a, &mut sends_a), i);
    }
    for (node, sends) in [(&a, &mut sends_a), (&b, &mut sends_b)] {
        let rest = node.wait(ROUNDS as usize - sends.len(), Duration::from_secs(3));
        sends.extend(rest.iter().map(|wc| (wc.wr_id, wc.status)));
        let expected: Vec<(u64, WcStatus)> = (0..ROUNDS).map(|i| (i, WcStatus::Success)).collect();
        assert_eq!(*sends, expected, "every send completed, in order");
    }
    let later = a.dev.stats().rx_acks_later;
    assert!(later >= ROUNDS / 2, "A's ACKs were handed over after its next send: {later}");
}
