//! Two devices in one process over 127.0.0.x: the UDP runtime end to end.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::UdpConfig;
use uroce_verbs::{QpCap, QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WcStatus, WrOpcode};

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

#[test]
fn send_write_read_between_two_devices() {
    let a = Node::open(UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 81, 0, 1))), 256).unwrap();
    let b = Node::open(UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 81, 0, 2))), 256).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    ma.write(0, &data).unwrap();
    qb.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![mb.sge(0, 8192)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![ma.sge(0, 5000)];
    send.flags = SendFlags::SIGNALED;
    qa.post_send(&[send]).unwrap();
    let got = b.wait(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "receive completion");
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(got[0].byte_len, 5000);
    assert_eq!(mb.read_vec(0, 5000).unwrap(), data);
    let got = a.wait(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);

    // READ back 20 KiB in several packets.
    let pattern: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    mb.write(1000, &pattern).unwrap();
    let mut read = SendWr::new(2, WrOpcode::RdmaRead);
    read.sg_list = vec![ma.sge(30_000, 20_000)];
    read.remote = RemoteTarget { addr: mb.addr() + 1000, rkey: mb.rkey() };
    read.flags = SendFlags::SIGNALED;
    qa.post_send(&[read]).unwrap();
    let got = a.wait(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(ma.read_vec(30_000, 20_000).unwrap(), pattern);
    eprintln!("a: {:?}\nb: {:?}", a.dev.stats(), b.dev.stats());
}
