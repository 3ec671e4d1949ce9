//! The L2 transport between two uroce processes: each is a host on a link
//! of raw Ethernet frames carried in UDP datagrams (`UROCE_LINK`, the
//! QEMU socket-netdev convention), with its own ARP, TCP and RoCE. The
//! test binary runs itself as the two hosts (the child test below). Links
//! use 127.91.x.1 <-> 127.91.x.2, one x per test.

use std::time::{Duration, Instant};
use uroce_tests::child::{self, Running};
use uroce_tests::report::counter_lines;

const CHILD_ENV: &str = "UROCE_LINK_TEST_CHILD";
const CHILD_LIMIT: Duration = Duration::from_secs(40);
const PORT: u16 = 47000;

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn link_child() {
    child::run_if_child(CHILD_ENV);
}

/// One host of link `net`: `side` 1 is 169.254.0.1 (the server), 2 is
/// 169.254.0.2; `env` adds (or overrides) variables.
fn host(net: u8, side: u8, args: &[&str], env: &[(&str, String)]) -> Running {
    let other = 3 - side;
    let mut all = vec![
        ("UROCE_LINK", format!("127.91.{net}.{side}:{PORT},127.91.{net}.{other}:{PORT}")),
        ("UROCE_ADDR", format!("169.254.0.{side}/16")),
    ];
    all.extend(env.iter().cloned());
    child::spawn("link_child", CHILD_ENV, args, &all)
}

/// Waits for a host within [`CHILD_LIMIT`] (killing it after), returning
/// its status and output.
fn finish(host: Running) -> (Option<i32>, String) {
    let end = host.finish(Instant::now() + CHILD_LIMIT);
    (end.code, end.output())
}

/// Runs a server on side 1 and a client on side 2; both must succeed.
fn run_pair(net: u8, args: &[&str], server_env: &[(&str, String)], client_env: &[(&str, String)]) {
    let server = host(net, 1, args, server_env);
    std::thread::sleep(Duration::from_millis(200));
    let mut client_args = args.to_vec();
    client_args.push("169.254.0.1");
    let client = host(net, 2, &client_args, client_env);
    let (client_code, client_out) = finish(client);
    let (server_code, server_out) = finish(server);
    assert_eq!(client_code, Some(0), "client:\n{client_out}\nserver:\n{server_out}");
    assert_eq!(server_code, Some(0), "server:\n{server_out}\nclient:\n{client_out}");
    for out in [&client_out, &server_out] {
        assert!(out.contains("iters in"), "{out}");
        assert!(out.contains("GID ::ffff:169.254.0.") || out.contains("GID fe80::"), "{out}");
    }
}

fn decode_tsv(pcap: &std::path::Path) -> String {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let args = ["uroce", "decode", "--format", "tsv", pcap.to_str().expect("utf-8")];
    let code = uroce::cli::run(args.iter().map(|s| s.to_string()), &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn rc_pingpong_over_the_link_resolves_connects_and_checks_data() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pcap = dir.path().join("client.pcap");
    let capture = [("UROCE_CAPTURE", pcap.display().to_string())];
    run_pair(1, &["pingpong", "-g", "1", "-n", "200", "-s", "4096", "-c"], &[], &capture);

    // The capture is the wire, frame for frame: ARP first, the TCP
    // exchange, then RoCE with good ICRCs and counting IPv4 IDs.
    let bytes = std::fs::read(&pcap).expect("the capture");
    let frames = pcap_frames(&bytes);
    assert!(frames.len() > 400, "{} frames", frames.len());
    let ethertype = |f: &[u8]| u16::from_be_bytes([f[12], f[13]]);
    let is_tcp = |f: &[u8]| ethertype(f) == 0x0800 && f[23] == 6;
    let is_roce = |f: &[u8]| ethertype(f) == 0x0800 && f[23] == 17 && f[36..38] == [0x12, 0xb7];
    let first_arp = frames.iter().position(|f| ethertype(f) == 0x0806).expect("an ARP frame");
    let first_tcp = frames.iter().position(|f| is_tcp(f)).expect("a TCP segment");
    let first_roce = frames.iter().position(|f| is_roce(f)).expect("a RoCE frame");
    assert!(first_arp < first_tcp && first_tcp < first_roce, "ARP, then TCP, then RoCE");
    assert_eq!(frames[first_arp].len(), 42, "ARP is sent unpadded");
    let tcp = frames.iter().filter(|f| is_tcp(f)).count();
    assert!(tcp >= 6, "the out-of-band exchange ran over the link's TCP ({tcp} segments)");
    let ids: Vec<u16> = frames
        .iter()
        .filter(|f| ethertype(f) == 0x0800 && f[23] == 17 && f[26..30] == [169, 254, 0, 2])
        .map(|f| u16::from_be_bytes([f[18], f[19]]))
        .collect();
    assert!(ids.len() > 200);
    assert!(ids.windows(2).all(|w| w[1] == w[0].wrapping_add(1)), "IPv4 IDs count up");
    let summary = decode_tsv(&pcap);
    let last = summary.lines().last().expect("a summary line");
    assert!(last.contains("icrc_bad=0") && last.contains("malformed=0"), "{last}");
}

#[test]
fn ud_and_uc_pingpong_over_the_link() {
    run_pair(2, &["pingpong", "--ud", "-g", "1", "-n", "50", "-s", "512"], &[], &[]);
    run_pair(3, &["pingpong", "--uc", "-g", "1", "-n", "50", "-s", "2048", "-c"], &[], &[]);
}

#[test]
fn link_local_gid_0_over_ipv6() {
    // On a link the device writes its own headers: GID index 0 (fe80::,
    // IPv6, resolved with neighbour discovery) works as GID 1 does.
    run_pair(9, &["pingpong", "-g", "0", "-n", "50", "-s", "4096", "-c"], &[], &[]);
}

#[test]
fn srq_pingpong_over_the_link() {
    run_pair(8, &["pingpong", "--srq", "-q", "4", "-g", "1", "-n", "100", "-s", "2000"], &[], &[]);
}

#[test]
fn link_mtu_4200_gives_path_mtu_4096() {
    let mtu = [("UROCE_MTU", "4200".to_string())];
    run_pair(4, &["pingpong", "-g", "1", "-n", "50", "-s", "8192", "-m", "4096", "-c"], &mtu, &mtu);
    // Without it, 4096 is above the port's active MTU (1024 on a 1500 link).
    let (code, out) =
        finish(host(5, 2, &["pingpong", "-g", "1", "-m", "4096", "169.254.0.1"], &[]));
    assert_eq!(code, Some(1), "{out}");
}

#[test]
fn loss_on_the_link_both_ways_is_recovered() {
    // Frames are dropped as they leave and as they arrive, on both hosts:
    // go-back-N and duplicate handling repair every gap.
    let lossy = |seed: u32| [("UROCE_FAULTS", format!("loss=0.05,seed={seed}"))];
    run_pair(
        6,
        &["pingpong", "-g", "1", "-n", "300", "-s", "3000", "-c", "--timeout", "30"],
        &lossy(7),
        &lossy(8),
    );
}

#[test]
fn bench_over_the_link() {
    // `uroce bench`'s own out-of-band lines run over the link's TCP too.
    let args = [
        "bench",
        "write",
        "bw",
        "-n",
        "200",
        "-s",
        "8192",
        "-p",
        "18600",
        "--timeout",
        "10",
        "--counters",
    ];
    let server = host(10, 1, &args, &[]);
    std::thread::sleep(Duration::from_millis(200));
    let mut client_args = args.to_vec();
    client_args.push("169.254.0.1");
    let (client_code, client_out) = finish(host(10, 2, &client_args, &[]));
    let (server_code, server_out) = finish(server);
    assert_eq!(client_code, Some(0), "client:\n{client_out}\nserver:\n{server_out}");
    assert_eq!(server_code, Some(0), "server:\n{server_out}\nclient:\n{client_out}");
    let row = client_out
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["8192", "200"]))
        .unwrap_or_else(|| panic!("no 8192-byte row:\n{client_out}"));
    let average: f64 = row.split_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    assert!(average > 0.0, "{row}");
    assert!(client_out.contains("metric="), "{client_out}");
    // `--counters`: the HCA's, and the link host's apart from them.
    for (out, addr) in [(&client_out, "169.254.0.2"), (&server_out, "169.254.0.1")] {
        let counters = counter_lines(out);
        let value = |kind: &str, name: &str| {
            counters.get(&(kind.into(), addr.into(), name.into())).copied().unwrap_or(0)
        };
        assert!(value("counter", "sent_pkts") > 0 && value("counter", "rcvd_pkts") > 0, "{out}");
        for name in ["link_rx_frames", "link_rx_roce", "link_tx_roce", "link_tx_host"] {
            assert!(value("runtime_counter", name) > 0, "{name}:\n{out}");
        }
        assert_eq!(
            value("runtime_counter", "link_tx_roce"),
            value("counter", "sent_pkts"),
            "{out}"
        );
    }
}

#[test]
fn link_configuration_errors_are_clear() {
    let (code, out) =
        finish(host(7, 2, &["devinfo"], &[("UROCE_LINK", "127.91.7.2:47000".into())]));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("UROCE_LINK"), "{out}");
    let (code, out) = finish(host(7, 2, &["devinfo"], &[("UROCE_MTU", "100".into())]));
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("UROCE_MTU"), "{out}");
    // Two devices in one process cannot share one link.
    let (code, out) = finish(host(7, 2, &["bench", "write", "bw", "--loopback"], &[]));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("unset UROCE_LINK"), "{out}");
}

/// The frames of a classic pcap file (either byte order).
fn pcap_frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let big_endian = bytes.get(..2) == Some(&[0xa1, 0xb2]);
    let read = |b: &[u8]| {
        let b: [u8; 4] = b.try_into().expect("4 bytes");
        if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let len = read(&bytes[at + 8..at + 12]) as usize;
        at += 16;
        if at + len > bytes.len() {
            break;
        }
        frames.push(bytes[at..at + len].to_vec());
        at += len;
    }
    frames
}
