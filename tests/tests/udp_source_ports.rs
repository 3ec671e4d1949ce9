//! The UDP source ports a device's QPs send from (`UROCE_SOURCE_PORTS`):
//! by default each QP's own port, as rxe hashes it; with `shared`, one port
//! for the whole device, so the kernel can batch many QPs' packets. Either
//! way every packet's ICRC covers the port it leaves with, and the data
//! arrives whole.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_hca::config::SourcePortPolicy;
use uroce_net::udp::UdpConfig;
use uroce_verbs::{QpCap, QpType, RemoteTarget, SendFlags, SendWr, WcStatus, WrOpcode};
use uroce_wire::frame::{classify, Classified, IpHeader};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::udp_port;

const QPS: usize = 6;

fn cap() -> QpCap {
    QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 }
}

/// Per packet device A sent: its destination QPN and its source port.
type PortsSeen = Vec<(u32, u16)>;
/// A's QPNs, each with its peer's.
type QpPairs = Vec<(u32, u32)>;

/// Connects `QPS` QP pairs between two devices with `policy`, sends one
/// WRITE on each with its own `post_send`, back to back, and returns the
/// source port of every RoCE packet device A sent, by destination QPN,
/// and A's (QPN, peer QPN) pairs.
fn ports_used(host: u8, policy: SourcePortPolicy, capture: &Path) -> (PortsSeen, QpPairs) {
    let config = |ip: Ipv4Addr, capture: Option<&Path>| {
        let mut c = UdpConfig::new(IpAddr::V4(ip));
        c.hca.source_ports = policy;
        c.capture = capture.map(Path::to_path_buf);
        c
    };
    let a = Node::open(config(Ipv4Addr::new(127, 94, host, 1), Some(capture)), 256).unwrap();
    let b = Node::open(config(Ipv4Addr::new(127, 94, host, 2), None), 256).unwrap();
    let mut pairs = Vec::new();
    let mut qps = Vec::new();
    for _ in 0..QPS {
        let qa = a.qp(QpType::Rc, cap()).unwrap();
        let qb = b.qp(QpType::Rc, cap()).unwrap();
        connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
        pairs.push((qa.qpn().value(), qb.qpn().value()));
        qps.push((qa, qb));
    }
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let data: Vec<u8> = (0..16384u32).map(|i| (i * 7 + 3) as u8).collect();
    ma.write(0, &data).unwrap();
    for (i, (qa, _)) in qps.iter().enumerate() {
        let mut write = SendWr::new(i as u64, WrOpcode::RdmaWrite);
        write.sg_list = vec![ma.sge(i as u64 * 1024, 5000)];
        write.remote = RemoteTarget { addr: mb.addr() + i as u64 * 8192, rkey: mb.rkey() };
        write.flags = SendFlags::SIGNALED;
        qa.post_send(&[write]).unwrap();
    }
    let done = a.wait(QPS, Duration::from_secs(5));
    assert_eq!(done.len(), QPS, "{policy:?}: every WRITE completed");
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    for i in 0..QPS {
        let at = i * 1024;
        assert_eq!(
            mb.read_vec(i as u64 * 8192, 5000).unwrap(),
            data[at..at + 5000],
            "{policy:?}: QP {i}'s bytes"
        );
    }
    a.dev.flush_capture().unwrap();
    let bytes = std::fs::read(capture).unwrap();
    let mut seen = Vec::new();
    for frame in CaptureReader::new(&bytes).unwrap().map_while(Result::ok) {
        let Classified::Roce(r) = classify(frame.data, frame.link.expect("link")) else {
            continue;
        };
        let IpHeader::V4(ip) = &r.ip else { panic!("not IPv4") };
        if ip.source != Ipv4Addr::new(127, 94, host, 1).octets() {
            continue;
        }
        assert!(r.icrc_ok(), "{policy:?}: the ICRC covers the port sent");
        let dest_qpn = r.packet().expect("parses").bth().dest_qpn().value();
        seen.push((dest_qpn, r.udp.source_port));
    }
    (seen, pairs)
}

#[test]
fn by_default_each_qp_sends_from_the_port_rxe_hashes_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, pairs) = ports_used(1, SourcePortPolicy::PerQp, &dir.path().join("a.pcap"));
    assert!(seen.len() >= QPS * 2, "two or more packets per WRITE: {}", seen.len());
    for (dest, port) in seen {
        let (local, _) = pairs.iter().find(|p| p.1 == dest).expect("a peer QP");
        let rxe = udp_port::connected_sport(
            uroce_verbs::Qpn::new(*local),
            uroce_verbs::Qpn::new(dest),
            0,
        );
        assert_eq!(port, rxe, "to QP {dest:#x}");
    }
}

#[test]
fn shared_sends_every_qps_packets_from_one_port() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, _) = ports_used(2, SourcePortPolicy::Shared, &dir.path().join("a.pcap"));
    assert!(seen.len() >= QPS * 2, "{}", seen.len());
    assert!(seen.iter().all(|&(_, port)| port == udp_port::SPORT_BASE), "{seen:?}");
    let qps: std::collections::BTreeSet<u32> = seen.iter().map(|s| s.0).collect();
    assert_eq!(qps.len(), QPS, "every QP's packets");
}

#[test]
fn the_environment_names_the_policy() {
    let var = |value: &'static str| {
        move |name: &str| (name == "UROCE_SOURCE_PORTS").then(|| value.to_string())
    };
    let shared = UdpConfig::from_vars(var("shared")).unwrap();
    assert_eq!(shared.hca.source_ports, SourcePortPolicy::Shared);
    let per_qp = UdpConfig::from_vars(var("per-qp")).unwrap();
    assert_eq!(per_qp.hca.source_ports, SourcePortPolicy::PerQp);
    let err = UdpConfig::from_vars(var("few")).unwrap_err().to_string();
    assert!(err.contains("UROCE_SOURCE_PORTS") && err.contains("shared"), "{err}");
}
