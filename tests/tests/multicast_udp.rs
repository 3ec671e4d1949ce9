//! UD multicast over the UDP runtime: three devices in this process
//! (127.131.x.y, addresses no other test uses), each on kernel UDP. QPs of
//! two of them attach to group 230.131.x.7; a UD SEND from the third to
//! QPN 0xFFFFFF and the group's GID reaches them through their group
//! sockets (SO_REUSEPORT on 230.131.x.7:4791, joined on the loopback
//! interface), with the GRH naming the group, and stops reaching a device
//! once its QP detached (docs/runtime.md, "Multicast groups"). The same
//! across two processes (this binary run again), as rdma-core's
//! `test_rdmacm` multicast tests run; a device's own group sends; an IPv6
//! group on lo.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use uroce::app::{bring_up, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::{ProgressMode, UdpConfig};
use uroce_verbs::{
    AhAttr, Gid, Mr, Qkey, Qp, QpCap, QpType, Qpn, RecvWr, SendWr, WcStatus, WrOpcode,
};

/// rdma_cm's Q_Key for UDP port spaces (`RDMA_UDP_QKEY`).
const QKEY: u32 = 0x0123_4567;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

fn node(net: u8, host: u8) -> Node {
    node_in(net, host, ProgressMode::HYBRID)
}

fn node_in(net: u8, host: u8, progress: ProgressMode) -> Node {
    let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 131, net, host)));
    c.progress = progress;
    Node::open(c, 256).unwrap()
}

fn ud_qp(node: &Node) -> Qp {
    let qp = node.qp(QpType::Ud, cap()).unwrap();
    bring_up(&qp, None, &default_tuning(), QKEY).unwrap();
    qp
}

fn send_to(node: &Node, qp: &Qp, mr: &Mr, group: Gid, wr_id: u64) {
    let ah = node
        .pd
        .create_ah(AhAttr { dgid: group, sgid_index: 1, port_num: 1, ..Default::default() })
        .unwrap();
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, 100)];
    wr.ud = Some((ah.index(), Qpn::MULTICAST, Qkey(QKEY)));
    qp.post_send(&[wr]).unwrap();
}

#[test]
fn a_group_send_reaches_the_attached_qps_of_other_devices_until_they_detach() {
    let group = Gid::from_ip("230.131.1.7".parse().unwrap());
    // c's background thread sleeps on its ready descriptor (Event): the
    // group socket must wake it.
    let (a, b, c) = (node(1, 1), node(1, 2), node_in(1, 3, ProgressMode::Event));
    let (qa, qb, qc) = (ud_qp(&a), ud_qp(&b), ud_qp(&c));
    let (ma, mb, mc) = (
        a.pd.alloc_mr(4096, ALL_ACCESS).unwrap(),
        b.pd.alloc_mr(4096, ALL_ACCESS).unwrap(),
        c.pd.alloc_mr(4096, ALL_ACCESS).unwrap(),
    );
    for (qp, mr) in [(&qb, &mb), (&qc, &mc)] {
        let recvs: Vec<RecvWr> =
            (0..4).map(|i| RecvWr { wr_id: i, sg_list: vec![mr.sge(i * 512, 512)] }).collect();
        qp.post_recv(&recvs).unwrap();
        qp.attach_mcast(group, 0).unwrap();
    }
    assert_eq!(b.dev.stats().mcast_joins, 1, "the first attach joined the group");
    ma.write(0, &[0xa5; 100]).unwrap();

    std::thread::sleep(Duration::from_millis(20));
    send_to(&a, &qa, &ma, group, 1);
    assert_eq!(a.wait(1, Duration::from_secs(5))[0].status, WcStatus::Success);
    // No verbs call on c: its background thread takes the packet.
    let t0 = std::time::Instant::now();
    while c.dev.counters().rcvd_mcast_pkts == 0 && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(t0.elapsed() < Duration::from_millis(500), "c woke for its group's packet");
    for (node, qp, mr) in [(&b, &qb, &mb), (&c, &qc, &mc)] {
        let got = node.wait(1, Duration::from_secs(5));
        assert_eq!(got.len(), 1, "{} took the group's packet", node.addr());
        assert_eq!(
            (got[0].status, got[0].qp_num, got[0].src_qp),
            (WcStatus::Success, qp.qpn(), qa.qpn())
        );
        assert_eq!(got[0].byte_len, 40 + 100);
        let grh = mr.read_vec(0, 140).unwrap();
        assert_eq!(&grh[32..36], &[127, 131, 1, 1], "the GRH's source: the sender");
        assert_eq!(&grh[36..40], &[230, 131, 1, 7], "the GRH's destination: the group");
        assert_eq!(&grh[40..], &[0xa5; 100][..]);
    }
    assert_eq!(a.dev.stats().tx_mcast_packets, 1);
    assert!(b.dev.stats().rx_mcast_datagrams >= 1);

    // b leaves: its group socket closes; c still takes the group's packets.
    qb.detach_mcast(group, 0).unwrap();
    assert_eq!(b.dev.stats().mcast_leaves, 1);
    send_to(&a, &qa, &ma, group, 2);
    assert_eq!(a.wait(1, Duration::from_secs(5))[0].status, WcStatus::Success);
    assert_eq!(c.wait(1, Duration::from_secs(5)).len(), 1, "c is still attached");
    assert!(b.wait(1, Duration::from_millis(300)).is_empty(), "b left the group");
    let b_counters = b.dev.counters();
    assert_eq!(
        (b_counters.rcvd_mcast_pkts, b_counters.rcvd_mcast_drop),
        (1, 0),
        "b's socket is closed: nothing reaches its HCA"
    );
}

#[test]
fn a_device_takes_its_own_group_sends_as_rxe_does() {
    // rxe sends a multicast packet through the kernel, which loops it back
    // to the host's members: the sending device's own attached QPs too.
    let group = Gid::from_ip("230.131.2.7".parse().unwrap());
    let a = node(2, 1);
    let (sender, member) = (ud_qp(&a), ud_qp(&a));
    let mr = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    member.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![mr.sge(1024, 512)] }]).unwrap();
    member.attach_mcast(group, 0).unwrap();
    send_to(&a, &sender, &mr, group, 1);
    let mut got = a.wait(2, Duration::from_secs(5));
    got.sort_by_key(|wc| wc.wr_id);
    assert_eq!(got.len(), 2, "the send and the member's receive: {got:?}");
    assert_eq!((got[1].wr_id, got[1].qp_num, got[1].status), (9, member.qpn(), WcStatus::Success));
}

#[test]
fn an_ipv6_group_on_the_loopback_interface() {
    // IPv6 loopback has one address: one device, its own member (the group
    // socket joins ff0e::131:7 on lo's index, from /proc/net/if_inet6).
    // The join must work; the delivery needs a multicast route on lo.
    let mut config = UdpConfig::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
    config.progress = ProgressMode::HYBRID;
    let a = match Node::open(config, 64) {
        Ok(a) => a,
        Err(e) if e.contains("binding") => {
            eprintln!("skipped: no IPv6 loopback here ({e})");
            return;
        }
        Err(e) => panic!("IPv6 loopback device: {e}"),
    };
    let group = Gid::from_ip("ff0e::131:7".parse().unwrap());
    let (sender, member) = (ud_qp(&a), ud_qp(&a));
    let mr = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    member.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![mr.sge(1024, 512)] }]).unwrap();
    member.attach_mcast(group, 0).unwrap();
    assert_eq!((a.dev.stats().mcast_joins, a.dev.stats().mcast_join_errors), (1, 0));
    send_to(&a, &sender, &mr, group, 1);
    let mut got = a.wait(1, Duration::from_secs(5));
    if got.len() == 1 && got[0].wr_id == 1 && a.dev.stats().tx_errors > 0 {
        // Linux gives lo no IPv6 multicast route (lo lacks IFF_MULTICAST):
        // the kernel refuses the send (ENETUNREACH) where nobody set one up.
        eprintln!("skipped the delivery: no IPv6 multicast route on lo here");
        return;
    }
    got.extend(a.wait(2 - got.len(), Duration::from_secs(5)));
    got.sort_by_key(|wc| wc.wr_id);
    assert_eq!(got.len(), 2, "the send and the member's receive: {got:?}");
    assert_eq!((got[1].wr_id, got[1].qp_num, got[1].byte_len), (9, member.qpn(), 140));
    let grh = mr.read_vec(1024, 40).unwrap();
    assert_eq!(grh[0] >> 4, 6, "an IPv6 header as the GRH");
    assert_eq!(&grh[24..40], &group.0, "its destination: the group");
}

/// Set in the environment of this test binary run again as the other
/// process of `two_processes_in_one_group`.
const CHILD_ENV: &str = "UROCE_MCAST_TEST_CHILD";

/// The other process: a device at 127.131.3.2 with a UD QP attached to
/// 230.131.3.7; prints `ready`, then what its first receive got (`got
/// <byte_len> <GRH destination>`), then `left` once detached, then whether
/// anything came within 500 ms after that (`after got`, `after none`).
#[test]
fn two_processes_child() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    println!();
    let group = Gid::from_ip("230.131.3.7".parse().unwrap());
    let b = node(3, 2);
    let qb = ud_qp(&b);
    let mb = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let recvs: Vec<RecvWr> =
        (0..2).map(|i| RecvWr { wr_id: i, sg_list: vec![mb.sge(i * 512, 512)] }).collect();
    qb.post_recv(&recvs).unwrap();
    qb.attach_mcast(group, 0).unwrap();
    println!("@mcast ready");
    let got = b.wait(1, Duration::from_secs(10));
    let destination = mb.read_vec(36, 4).unwrap();
    match got.first() {
        Some(wc) => println!("@mcast got {} {destination:?}", wc.byte_len),
        None => println!("@mcast got nothing"),
    }
    qb.detach_mcast(group, 0).unwrap();
    println!("@mcast left");
    let after = b.wait(1, Duration::from_millis(500));
    println!("@mcast after {}", if after.is_empty() { "none" } else { "got" });
}

#[test]
fn two_processes_in_one_group() {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args(["--exact", "two_processes_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let child = Reaped(child);
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(said) = line.strip_prefix("@mcast ") {
                let _ = tx.send(said.to_string());
            }
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(15)).unwrap_or_else(|_| "".into());
    // This process is in the group too (both bind 230.131.3.7:4791).
    let group = Gid::from_ip("230.131.3.7".parse().unwrap());
    let a = node(3, 1);
    let (sender, member) = (ud_qp(&a), ud_qp(&a));
    let ma = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    member.attach_mcast(group, 0).unwrap();
    assert_eq!(next(), "ready");
    send_to(&a, &sender, &ma, group, 1);
    assert_eq!(next(), "got 140 [230, 131, 3, 7]", "the other process took it");
    assert_eq!(next(), "left");
    send_to(&a, &sender, &ma, group, 2);
    assert_eq!(next(), "after none", "nothing after it left the group");
    drop(child);
}

/// Kills the other process when the test ends, however it ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
