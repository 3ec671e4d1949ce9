//! `UROCE_CAPTURE` on the real path: every batch of frames reaches the file
//! when it is sent or received, not when the device is closed. Many
//! programs never close theirs (librdmacm keeps its devices open until the
//! process exits, and verbs programs often just exit), and their captures
//! must still be whole.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::UdpConfig;
use uroce_verbs::{QpCap, QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};
use uroce_wire::frame::{classify, Classified};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::Opcode;

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

#[test]
fn a_capture_holds_every_frame_while_the_device_is_still_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.pcap");
    let config = |host: u8, capture: bool| {
        let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 96, 0, host)));
        c.capture = capture.then(|| path.clone());
        c
    };
    let a = Node::open(config(1, true), 64).unwrap();
    let b = Node::open(config(2, false), 64).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    for i in 0..3 {
        qb.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mb.sge(0, 64)] }]).unwrap();
        let mut send = SendWr::new(i, WrOpcode::Send);
        send.sg_list = vec![ma.sge(0, 64)];
        send.flags = SendFlags::SIGNALED;
        qa.post_send(&[send]).unwrap();
        assert_eq!(b.wait(1, Duration::from_secs(3)).len(), 1, "message {i}");
        let done = a.wait(1, Duration::from_secs(3));
        assert_eq!(done.first().map(|c| c.status), Some(WcStatus::Success), "message {i}");
    }
    // No close, no explicit flush: the file as another process would read
    // it now, or as it stays if this one exited here.
    let bytes = std::fs::read(&path).unwrap();
    let (mut sends, mut acks) = (0, 0);
    for frame in CaptureReader::new(&bytes).expect("a capture header").map_while(Result::ok) {
        let Classified::Roce(r) = classify(frame.data, frame.link.expect("link")) else {
            continue;
        };
        match r.packet().expect("parses").bth().opcode() {
            Opcode::RC_SEND_ONLY => sends += 1,
            Opcode::RC_ACKNOWLEDGE => acks += 1,
            _ => {}
        }
    }
    assert_eq!(sends, 3, "every SEND A sent is in the file");
    assert!(acks >= 3, "every ACK A received is in the file: {acks}");
    drop((qa, qb, ma, mb));
}

/// The local comm ID of the first REQ a device at `addr` sends, read from
/// its capture.
fn first_req_comm_id(addr: Ipv4Addr, path: &std::path::Path) -> u32 {
    use uroce_device::cm::CmConnectParams;
    use uroce_device::command::{Command, Gid, Reply};
    use uroce_device::link::DeviceLink;
    let mut config = UdpConfig::new(IpAddr::V4(addr));
    config.capture = Some(path.to_path_buf());
    let dev = uroce_net::udp::UdpDevice::open(config).unwrap();
    let nowhere = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 96, 1, 99)));
    let params = CmConnectParams::rdma_cm(1, nowhere, 0x0106_1f90, uroce_verbs::Qpn::new(0x11), 7);
    let reply = dev.hca().command(Command::CmConnect { params, private_data: Vec::new() });
    assert!(matches!(reply, Ok(Reply::CmId { .. })), "{reply:?}");
    dev.flush_capture().unwrap();
    let bytes = std::fs::read(path).unwrap();
    for frame in CaptureReader::new(&bytes).unwrap().map_while(Result::ok) {
        let Classified::Roce(r) = classify(frame.data, frame.link.expect("link")) else {
            continue;
        };
        let packet = r.packet().expect("parses");
        let mad = uroce_wire::mad::Packet::new_checked(packet.payload()).expect("a MAD");
        if let Ok(uroce_wire::mad::CmMessage::Req(req)) = uroce_wire::mad::CmMessage::parse(&mad) {
            return req.local_comm_id.0;
        }
    }
    panic!("no REQ in the capture");
}

#[test]
fn a_device_opened_again_at_an_address_draws_new_comm_ids() {
    // Linux draws its CM's comm IDs at random at boot; a program started
    // again at the same address must not reuse its last life's, which a
    // peer still in time-wait would take for a stale connection's.
    let dir = tempfile::tempdir().unwrap();
    let addr = Ipv4Addr::new(127, 96, 1, 1);
    let first = first_req_comm_id(addr, &dir.path().join("1.pcap"));
    let second = first_req_comm_id(addr, &dir.path().join("2.pcap"));
    assert_ne!(first, second, "the same comm ID twice: {first:#x}");
}
