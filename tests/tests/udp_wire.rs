//! What the kernel actually sends for the UDP runtime: captured on the
//! loopback interface (dumpcap through tshark, which needs root or
//! CAP_NET_RAW), every RoCEv2 frame must carry a correct ICRC over the IP
//! and UDP headers the kernel wrote (IPv4 ID, flags, length, ports), UDP
//! checksum 0 (with segmentation offload off, as rxe sends), and each QP's packets must leave from the source port rxe
//! computes for it. This is the fact the runtime's ICRC design rests on.
//!
//! Skipped (with a note) where capturing is not possible, except under
//! `CI=true`, where it must run.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::UdpConfig;
use uroce_verbs::{QpCap, QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WcStatus, WrOpcode};
use uroce_wire::frame::{classify, Classified, IpHeader};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::udp_port;

struct Capture {
    child: Child,
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts tshark on `lo` for UDP 4791 traffic of 127.87.0.0/16; `None`
/// (with the reason) when capturing is impossible here.
fn start_capture(file: &Path) -> Result<Capture, String> {
    let mut child = Command::new("tshark")
        .args(["-i", "lo", "-f", "udp port 4791 and net 127.87.0.0/16", "-w"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("tshark: {e}"))?;
    // dumpcap says "Capturing on 'Loopback: lo'" once it is capturing.
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains("Capturing on") => {
                // Give the capture a moment to be armed in the kernel.
                std::thread::sleep(Duration::from_millis(300));
                return Ok(Capture { child });
            }
            Ok(line) => seen.push(line),
            Err(_) => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("tshark exited ({status}): {}", seen.join(" | ")));
                }
            }
        }
    }
    let _ = child.kill();
    Err(format!("tshark did not start capturing: {}", seen.join(" | ")))
}

fn stop_capture(capture: Capture) {
    let pid = capture.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let mut capture = capture;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = capture.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
fn the_kernel_sends_what_the_icrc_covers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lo.pcap");
    let capture = match start_capture(&file) {
        Ok(c) => c,
        Err(why) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: cannot capture on lo here ({why})");
            return;
        }
        Err(why) => panic!("cannot capture on lo under CI: {why}"),
    };

    let ip_a = Ipv4Addr::new(127, 87, 0, 1);
    let ip_b = Ipv4Addr::new(127, 87, 0, 2);
    // Without segmentation offload (the default's GSO super-packets reach
    // the capture whole, and carry UDP checksums): the wire rxe sends.
    let config = |ip| UdpConfig { offload: false, ..UdpConfig::new(IpAddr::V4(ip)) };
    let a = Node::open(config(ip_a), 256).unwrap();
    let b = Node::open(config(ip_b), 256).unwrap();
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(&a, &qa, &b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    ma.write(0, &[0x5a; 6000]).unwrap();
    qb.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![mb.sge(0, 8192)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::SendWithImm);
    send.sg_list = vec![ma.sge(0, 3000)];
    send.imm_or_inv = 0x1234;
    send.flags = SendFlags::SIGNALED;
    let mut write = SendWr::new(2, WrOpcode::RdmaWrite);
    write.sg_list = vec![ma.sge(0, 6000)];
    write.remote = RemoteTarget { addr: mb.addr() + 8192, rkey: mb.rkey() };
    write.flags = SendFlags::SIGNALED;
    let mut read = SendWr::new(3, WrOpcode::RdmaRead);
    read.sg_list = vec![ma.sge(20_000, 5000)];
    read.remote = RemoteTarget { addr: mb.addr() + 8192, rkey: mb.rkey() };
    read.flags = SendFlags::SIGNALED;
    qa.post_send(&[send, write, read]).unwrap();
    let done = a.wait(3, Duration::from_secs(5));
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    assert_eq!(b.wait(1, Duration::from_secs(5)).len(), 1);
    // dumpcap hands packets to the file about every 100 ms.
    std::thread::sleep(Duration::from_millis(1000));
    stop_capture(capture);

    let bytes = std::fs::read(&file).expect("capture file");
    let reader = CaptureReader::new(&bytes).expect("capture header");
    let (mut roce, mut from_a, mut from_b) = (0, 0, 0);
    // Stopping the capture may cut its last record short.
    for frame in reader.map_while(Result::ok) {
        let Classified::Roce(r) = classify(frame.data, frame.link.expect("link")) else {
            continue;
        };
        roce += 1;
        let n = frame.number;
        assert!(r.icrc_ok(), "frame {n}: ICRC over the kernel's headers");
        assert!(r.integrity_ok(), "frame {n}: IPv4 or UDP checksum");
        let IpHeader::V4(ip) = &r.ip else { panic!("frame {n}: not IPv4") };
        assert_eq!(ip.identification, 0, "frame {n}: IPv4 ID");
        assert!(ip.dont_fragment, "frame {n}: DF");
        assert_eq!(r.udp.checksum, 0, "frame {n}: UDP checksum");
        assert_eq!(r.udp.destination_port, 4791, "frame {n}");
        let packet = r.packet().expect("parses");
        let dest_qpn = packet.bth().dest_qpn();
        let dst_qpn_expected = if ip.source == ip_a.octets() {
            from_a += 1;
            qb.qpn()
        } else {
            from_b += 1;
            qa.qpn()
        };
        assert_eq!(dest_qpn, dst_qpn_expected, "frame {n}");
        // rxe's flow-label hash of the QP pair: the same both ways.
        assert_eq!(
            r.udp.source_port,
            udp_port::connected_sport(qa.qpn(), qb.qpn(), 0),
            "frame {n}: source port"
        );
    }
    // SEND 3 packets, WRITE 6, READ request 1 (MTU 1024); READ response 5
    // packets plus ACKs.
    let requests = 3 + 6 + 1;
    assert!(from_a >= requests, "requests seen: {from_a}");
    assert!(from_b >= 5, "responses seen: {from_b}");
    assert_eq!(roce, from_a + from_b);
}
