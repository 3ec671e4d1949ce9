//! Fault scenarios on the real runtime (`UROCE_SCENARIO`; design note
//! fault-scenarios.md, step 7): the library's scenarios between two UDP
//! devices, in this process (127.161.k.1 requester, .2 responder) or as
//! two `uroce pingpong` processes (127.161.k.x, the test binary run as the
//! command, as `pingpong.rs` does); a malformed file refuses the device;
//! a `crash` with `exit` kills its process.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};
use uroce::app::{connect_pair, default_tuning, Node, ALL_ACCESS};
use uroce_net::udp::{Scenario, ScenarioConfig, UdpConfig};
use uroce_tests::child::{self, Finished, Running};
use uroce_verbs::{QpCap, QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WcStatus, WrOpcode};
use uroce_wire::pcap::CaptureReader;

const CHILD_ENV: &str = "UROCE_SCENARIO_UDP_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn scenario_child() {
    child::run_if_child(CHILD_ENV);
}

fn cap() -> QpCap {
    QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

fn addr(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 161, net, host))
}

/// A device at 127.161.`net`.`host` running library scenario `name`.
fn config(net: u8, host: u8, name: &str, report: Option<&Path>) -> UdpConfig {
    let mut c = UdpConfig::new(addr(net, host));
    let mut s = ScenarioConfig::new(Scenario::load(name).expect("a library scenario"));
    s.report = report.map(Path::to_path_buf);
    c.scenario = Some(s);
    c
}

/// Sends `count` SENDs of 64 bytes from `a` to `b`, one at a time, each
/// waited for (at most 3 s); returns each send's status and how long it
/// took, stopping at the first error.
fn send_one_by_one(a: &Node, b: &Node, count: u64) -> Vec<(WcStatus, Duration)> {
    send_messages(a, b, count, 64)
}

/// [`send_one_by_one`] with messages of `size` bytes (at most 4096).
fn send_messages(a: &Node, b: &Node, count: u64, size: u32) -> Vec<(WcStatus, Duration)> {
    run_ops(a, b, count, size, WrOpcode::Send)
}

/// [`send_messages`] with `opcode` (SEND, or RDMA WRITE into B's MR).
fn run_ops(
    a: &Node,
    b: &Node,
    count: u64,
    size: u32,
    opcode: WrOpcode,
) -> Vec<(WcStatus, Duration)> {
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(a, &qa, b, &qb, &default_tuning()).unwrap();
    let ma = a.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let mb = b.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let recvs: Vec<RecvWr> =
        (0..count).map(|i| RecvWr { wr_id: i, sg_list: vec![mb.sge(0, 4096)] }).collect();
    qb.post_recv(&recvs).unwrap();
    let mut statuses = Vec::new();
    for i in 0..count {
        let mut send = SendWr::new(i, opcode);
        send.remote = RemoteTarget { addr: mb.addr(), rkey: mb.rkey() };
        send.sg_list = vec![ma.sge(0, size)];
        send.flags = SendFlags::SIGNALED;
        let t0 = Instant::now();
        qa.post_send(&[send]).unwrap();
        let got = a.wait(1, Duration::from_secs(3));
        let took = t0.elapsed();
        let status = got.first().map(|c| c.status).unwrap_or_else(|| {
            panic!("message {}: no completion within 3 s", i + 1);
        });
        statuses.push((status, took));
        if status != WcStatus::Success {
            if std::env::var("SCENARIO_DEBUG").is_ok() {
                eprintln!(
                    "DEBUG message {} {status:?} after {took:?}\nA {:?}\n{:?}\nB {:?}\n{:?}",
                    i + 1,
                    a.dev.counters().named(),
                    a.dev.stats(),
                    b.dev.counters().named(),
                    b.dev.stats()
                );
            }
            break;
        }
        if opcode == WrOpcode::Send {
            assert_eq!(b.wait(1, Duration::from_secs(3)).len(), 1, "message {} arrived", i + 1);
        }
    }
    statuses
}

fn counter(node: &Node, name: &str) -> u64 {
    let counters = node.dev.counters();
    counters.named().iter().find(|(n, _)| *n == name).map(|&(_, v)| v).expect(name)
}

/// The report's lines without their wall-clock field.
fn report_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the report");
    text.lines()
        .map(|l| {
            let (wall, rest) = l.split_once(' ').expect("wall clock, then the line");
            assert!(wall.parse::<u128>().is_ok_and(|us| us > 1_600_000_000_000_000), "{l}");
            rest.to_owned()
        })
        .collect()
}

#[test]
fn lost_ack_costs_one_retransmission_logged_once_and_commented_in_the_capture() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let pcap = dir.path().join("a.pcapng");
    let mut ca = config(1, 1, "lost-ack", Some(&report));
    ca.capture = Some(pcap.clone());
    let a = Node::open(ca, 64).unwrap();
    let b = Node::open(config(1, 2, "lost-ack", None), 64).unwrap();
    let t0 = Instant::now();
    let statuses = send_one_by_one(&a, &b, 20);
    assert_eq!(statuses.len(), 20);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    // The 10th message waited for one ACK timeout (4.096 us << 14 = 67 ms).
    let slow = statuses[9].1;
    assert!(slow >= Duration::from_millis(50), "message 10 took {slow:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(counter(&a, "completer_retry_err") >= 1);
    assert!(counter(&b, "duplicate_request") >= 1);
    let summary = a.dev.scenario_summary().expect("a scenario");
    assert_eq!((summary.rules[0].fired, summary.dropped_rule), (1, 1), "{summary}");
    assert_eq!(b.dev.scenario_summary().unwrap().rules[0].fired, 0, "B receives no ACK");
    drop(a);
    drop(b);

    let lines = report_lines(&report);
    let fired: Vec<_> = lines.iter().filter(|l| l.contains("rule lost-ack fired ")).collect();
    assert_eq!(fired.len(), 1, "{lines:#?}");
    let firing = fired[0];
    assert!(
        firing.starts_with("scenario 127.161.1.1 ")
            && firing.contains("rule lost-ack fired 1: drop on in RC_ACKNOWLEDGE")
            && firing.contains("from 127.161.1.2"),
        "{firing}"
    );
    assert!(lines[0].contains("scenario lost-ack 127.161.1.1 loaded at_us=0 from library:lost-ack"));
    let want = [
        // Every first-time ACK matched; the 10th fired.
        "scenario lost-ack 127.161.1.1 rule lost-ack matched 20 fired 1",
        "scenario lost-ack 127.161.1.1 completions success=20 errors=0 first_error=none",
    ];
    for want in want {
        assert!(lines.iter().any(|l| l == want), "no `{want}` in {lines:#?}");
    }
    let counters = lines.iter().find(|l| l.contains(" counters ")).expect("counters line");
    assert!(counters.contains("completer_retry_err="), "{counters}");

    // The capture is pcapng, and the lost ACK is in it, commented.
    let bytes = std::fs::read(&pcap).unwrap();
    assert_eq!(bytes[..4], [0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header");
    let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
    let commented: Vec<_> = frames.iter().filter(|f| f.comment.is_some()).collect();
    assert_eq!(commented.len(), 1, "one frame carries a firing");
    let frame = commented[0];
    let comment = frame.comment.unwrap();
    assert!(
        comment.starts_with("DROPPED (rule) uroce scenario: rule lost-ack fired 1: drop on in"),
        "{comment}"
    );
    // Ethernet 14 + IPv4 20 + UDP 8: the BTH opcode is an RC ACKNOWLEDGE
    // from the responder.
    assert_eq!(frame.data[42], 0x11, "the commented frame is an ACK");
    assert_eq!(frame.data[26..30], [127, 161, 1, 2]);
}

#[test]
fn retry_exceeded_fails_the_requester_within_its_bound() {
    let a = Node::open(config(2, 1, "retry-exceeded", None), 64).unwrap();
    let b = Node::open(config(2, 2, "retry-exceeded", None), 64).unwrap();
    let statuses = send_one_by_one(&a, &b, 15);
    assert_eq!(statuses.len(), 10, "{statuses:?}");
    let (status, took) = statuses[9];
    assert_eq!(status, WcStatus::RetryExcErr);
    // retry_cnt 7: 8 ACK timeouts of 67 ms (537 ms); the library's bound
    // is 1,600 ms.
    assert!(took >= Duration::from_millis(400) && took < Duration::from_millis(1600), "{took:?}");
    let summary = b.dev.scenario_summary().unwrap();
    assert_eq!(summary.rules[0].fired, 1, "{summary}");
    assert!(summary.dropped_link >= 8, "the retransmissions were cut: {summary}");
    assert!(counter(&a, "retry_exceeded_err") >= 1);
}

#[test]
fn rnr_retry_answers_three_rnr_naks_then_succeeds() {
    let a = Node::open(config(3, 1, "rnr-retry", None), 64).unwrap();
    let b = Node::open(config(3, 2, "rnr-retry", None), 64).unwrap();
    let statuses = send_one_by_one(&a, &b, 15);
    assert_eq!(statuses.len(), 15);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    assert_eq!(counter(&b, "injected_rnr"), 3);
    assert_eq!(counter(&b, "send_rnr_err"), 3);
    assert_eq!(counter(&a, "rcvd_rnr_err"), 3);
    let summary = b.dev.scenario_summary().unwrap();
    assert_eq!((summary.rules[0].fired, summary.device_actions), (1, 1), "{summary}");
}

fn spawn(addr: &str, args: &[&str], env: &[(&str, String)]) -> Running {
    let mut env = env.to_vec();
    env.push(("UROCE_ADDR", addr.to_string()));
    child::spawn("scenario_child", CHILD_ENV, args, &env)
}

/// `uroce pingpong` server at `net.1` and client at `net.2`, each with its
/// own environment.
fn pingpong_pair(
    net: &str,
    port: u16,
    server_env: &[(&str, String)],
    client_env: &[(&str, String)],
    iters: &str,
) -> (Finished, Finished) {
    let (server_addr, client_addr) = (format!("{net}.1"), format!("{net}.2"));
    let port = port.to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let server = spawn(
        &server_addr,
        &["pingpong", "-g", "1", "-p", &port, "--accept-timeout", "20", "-n", iters],
        server_env,
    );
    if !server.wait_for_line("local address:", Duration::from_secs(15)) {
        panic!("the server never listened: {:#?}", server.finish(Instant::now()));
    }
    let client = spawn(
        &client_addr,
        &["pingpong", "-g", "1", "-p", &port, "-n", iters, &server_addr],
        client_env,
    );
    let client = client.finish(deadline);
    let server = server.finish(deadline);
    (server, client)
}

#[test]
fn two_processes_under_lost_ack_log_the_firing_once_and_print_their_summaries() {
    let scenario = [("UROCE_SCENARIO", "lost-ack".to_string())];
    let (server, client) = pingpong_pair("127.161.4", 18711, &scenario, &scenario, "100");
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(0), "{who}: {end:#?}");
    }
    let both = format!("{}{}", server.stderr, client.stderr);
    let fired: Vec<_> = both.lines().filter(|l| l.contains("rule lost-ack fired ")).collect();
    // Each side's 10th first-time ACK (pingpong sends both ways).
    assert_eq!(fired.len(), 2, "{both}");
    assert!(fired.iter().all(|l| l.contains("rule lost-ack fired 1: drop on in RC_ACKNOWLEDGE")));
    for (who, end, host) in [("server", &server, 1), ("client", &client, 2)] {
        let me = format!("scenario lost-ack 127.161.4.{host}");
        let want = [
            format!("{me} rule lost-ack matched "),
            format!("{me} packets in="),
            format!("{me} completions success="),
            format!("{me} counters "),
        ];
        for want in want {
            assert!(end.stderr.contains(&want), "{who}: no `{want}` in {}", end.stderr);
        }
        assert!(end.stderr.contains("errors=0 first_error=none"), "{who}: {}", end.stderr);
    }
    assert!(both.contains("completer_retry_err="), "a retransmission counted: {both}");
}

#[test]
fn a_malformed_scenario_file_refuses_the_device_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = "[scenario]\nname = \"bad\"\nsummary = \"x\"\n\n[[rule]]\naction = \"delay\"\ndelay_ms = 5\n";
    std::fs::write(&path, text).unwrap();
    let shown = path.display().to_string();
    let var = |name: &str| (name == "UROCE_SCENARIO").then(|| shown.clone());
    let e = UdpConfig::from_vars(var).expect_err("a malformed file").to_string();
    assert!(e.starts_with(&format!("scenario {shown}:7:1: ")), "{e}");
    assert!(e.contains("delay_ms") && e.contains("delay_us"), "{e}");

    // A program's device refuses to open with the same text.
    let server = spawn(
        "127.161.5.1",
        &["pingpong", "-g", "1", "-p", "18712", "--accept-timeout", "5"],
        &[("UROCE_SCENARIO", shown.clone())],
    );
    let end = server.finish(Instant::now() + Duration::from_secs(20));
    assert_eq!(end.code, Some(2), "{end:#?}");
    assert!(end.stderr.contains(&format!("scenario {shown}:7:1: ")), "{}", end.stderr);
    assert!(!end.stdout.contains("local address:"), "{}", end.stdout);
}

#[test]
fn a_crash_with_exit_kills_its_process_and_the_peer_sees_retry_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.toml");
    let report = dir.path().join("server.txt");
    let text =
        "[scenario]\nname = \"server-dies\"\nsummary = \"the server crashes at the 5th SEND\"\n\n\
                [[rule]]\nname = \"die\"\nrole = \"server\"\ndir = \"in\"\nclass = \"send\"\n\
                message = 5\nnth = 1\naction = \"crash\"\n";
    std::fs::write(&path, text).unwrap();
    let server_env = [
        ("UROCE_SCENARIO", path.display().to_string()),
        ("UROCE_SCENARIO_ROLE", "server".to_string()),
        ("UROCE_SCENARIO_REPORT", report.display().to_string()),
    ];
    // The client loads it too, without the role: the rule is not its.
    let client_env = [("UROCE_SCENARIO", path.display().to_string())];
    let t0 = Instant::now();
    let (server, client) = pingpong_pair("127.161.6", 18713, &server_env, &client_env, "50");
    assert!(!server.killed_at_deadline, "the server died by itself: {server:#?}");
    assert_eq!(server.signal, Some(9), "SIGKILL: {server:#?}");
    assert!(
        server.stderr.contains("rule die fired 1: crash (exit) on in RC_SEND"),
        "{}",
        server.stderr
    );
    assert!(server.stderr.contains("crash: killing the process (SIGKILL)"), "{}", server.stderr);
    assert!(!server.stderr.contains("completions success="), "a killed process says no more");
    let lines = report_lines(&report);
    assert!(
        lines.iter().any(|l| l.ends_with("crash: killing the process (SIGKILL)")),
        "{lines:#?}"
    );
    // The client's QP meets silence: retries exceeded (8 × 67 ms).
    assert_ne!(client.code, Some(0), "{client:#?}");
    assert!(client.output().contains("retry counter exceeded"), "{}", client.output());
    assert!(client
        .stderr
        .contains("scenario server-dies 127.161.6.2 rule die: not for this role (role server)"));
    assert!(client.stderr.contains("first_error=IBV_WC_RETRY_EXC_ERR"), "{}", client.stderr);
    assert!(t0.elapsed() < Duration::from_secs(20));
}

/// A device on the L2 transport (frames over UDP, `UROCE_LINK`): link
/// 127.161.`net`.1 <-> .2, device 169.254.`net`.`side`.
fn link_config(net: u8, side: u8, name: &str) -> UdpConfig {
    let other = 3 - side;
    let link = format!("127.161.{net}.{side}:47161,127.161.{net}.{other}:47161");
    let addr = format!("169.254.{net}.{side}/16");
    let var = |n: &str| match n {
        "UROCE_LINK" => Some(link.clone()),
        "UROCE_ADDR" => Some(addr.clone()),
        "UROCE_SCENARIO" => Some(name.to_string()),
        _ => None,
    };
    UdpConfig::from_vars(var).expect("a link configuration")
}

#[test]
fn on_the_l2_transport_the_port_sees_frames_too() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("link.pcapng");
    let mut ca = link_config(7, 1, "lost-ack");
    ca.capture = Some(pcap.clone());
    let a = Node::open(ca, 64).unwrap();
    let b = Node::open(link_config(7, 2, "rnr-retry"), 64).unwrap();
    assert!(a.dev.is_link() && b.dev.is_link());
    let statuses = send_one_by_one(&a, &b, 15);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    assert_eq!(statuses.len(), 15);
    // A (lost-ack) lost its 10th ACK; B (rnr-retry) refused the 10th SEND
    // three times.
    assert_eq!(a.dev.scenario_summary().unwrap().dropped_rule, 1);
    assert!(counter(&a, "completer_retry_err") >= 1);
    assert_eq!(counter(&b, "injected_rnr"), 3);
    assert_eq!(counter(&a, "rcvd_rnr_err"), 3);
    drop(a);
    let bytes = std::fs::read(&pcap).unwrap();
    let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
    let commented: Vec<_> = frames.iter().filter_map(|f| f.comment).collect();
    assert_eq!(commented.len(), 1, "{commented:?}");
    assert!(commented[0].starts_with("DROPPED (rule) uroce scenario: rule lost-ack fired 1"));
}

#[test]
fn delays_duplicates_corruption_and_a_timed_outage_act_on_the_real_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.toml");
    let report = dir.path().join("b.txt");
    // B (127.161.8.2): its 3rd incoming SEND is held 30 ms (under the 67 ms ACK timeout), its 5th is
    // corrupted (the HCA drops it on its ICRC: A retransmits), and its
    // link goes down from 1000 ms to 1200 ms (after the first ten messages,
    // even on a loaded machine). A (.1): its 7th outgoing SEND
    // leaves twice more, 2 ms apart (B answers the duplicates).
    let text = r#"
[scenario]
name = "mixed"
summary = "a bit of everything"

[[rule]]
name = "late"
device = "127.161.8.2"
dir = "in"
class = "send"
message = 3
nth = 1
action = "delay"
delay_us = 30000

[[rule]]
name = "flip"
device = "127.161.8.2"
dir = "in"
class = "send"
message = 5
nth = 1
action = "corrupt"

[[rule]]
name = "twice"
device = "127.161.8.1"
dir = "out"
class = "send"
message = 7
nth = 1
action = "duplicate"
copies = 2
gap_us = 2000

[[rule]]
name = "outage"
device = "127.161.8.2"
after_ms = 1000
action = "link_down"
for_ms = 200
"#;
    std::fs::write(&path, text).unwrap();
    let scenario = |report: Option<&Path>| {
        let parsed = Scenario::parse(text, &path.display().to_string()).unwrap();
        let mut s = ScenarioConfig::new(parsed);
        s.report = report.map(Path::to_path_buf);
        s
    };
    let mut ca = UdpConfig::new(addr(8, 1));
    ca.scenario = Some(scenario(None));
    let mut cb = UdpConfig::new(addr(8, 2));
    cb.scenario = Some(scenario(Some(&report)));
    let a = Node::open(ca, 64).unwrap();
    let b = Node::open(cb, 64).unwrap();
    let statuses = send_one_by_one(&a, &b, 10);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    assert!(statuses[2].1 >= Duration::from_millis(30), "held 30 ms: {:?}", statuses[2].1);
    assert!(statuses[4].1 >= Duration::from_millis(50), "one ACK timeout: {:?}", statuses[4].1);
    assert!(counter(&b, "rcvd_icrc_err") >= 1, "the corrupted SEND was refused");
    // The ghost copies leave 2 and 4 ms after the 7th SEND, perhaps after
    // the 10th completed.
    let deadline = Instant::now() + Duration::from_secs(2);
    while counter(&b, "duplicate_request") < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // (More if a loaded machine made A retransmit too.)
    assert!(counter(&b, "duplicate_request") >= 2, "two ghost copies of the 7th SEND");
    let sb = b.dev.scenario_summary().unwrap();
    assert_eq!((sb.delayed, sb.corrupted), (1, 1), "{sb}");
    assert_eq!(a.dev.scenario_summary().unwrap().duplicated, 2);

    // The timed outage: it fires at 1000 ms with no packet, then traffic in
    // its 200 ms is lost and retransmitted.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(5);
    while !std::fs::read_to_string(&report).unwrap().contains("rule outage fired 1") {
        assert!(Instant::now() < deadline, "the timed rule never fired");
        std::thread::sleep(Duration::from_millis(10));
    }
    let more = send_one_by_one(&a, &b, 3);
    assert!(more.iter().all(|(s, _)| *s == WcStatus::Success), "{more:?}");
    assert!(b.dev.scenario_summary().unwrap().dropped_link >= 1);
    drop(b);
    let lines = report_lines(&report);
    let outage = lines.iter().find(|l| l.contains("rule outage fired 1")).unwrap();
    // Due at 1000 ms, fired as soon as the background thread woke for it.
    let at_ms: u64 = outage
        .strip_suffix("ms")
        .and_then(|l| l.rsplit_once(" at "))
        .and_then(|(head, ms)| head.ends_with("link_down 200ms").then(|| ms.parse().ok())?)
        .unwrap_or_else(|| panic!("{outage}"));
    assert!((1000..2000).contains(&at_ms), "{outage}");
    for name in ["late", "flip"] {
        let n = lines.iter().filter(|l| l.contains(&format!("rule {name} fired "))).count();
        assert_eq!(n, 1, "{lines:#?}");
    }
    let not_here = "rule twice: not for this device (device 127.161.8.1)";
    assert!(lines.iter().any(|l| l.ends_with(not_here)), "{lines:#?}");
}

/// The child of the exit-hook test: opens a device from the environment
/// and exits without closing it.
#[test]
fn never_closing_child() {
    if std::env::var("UROCE_SCENARIO_NEVER_CLOSES").is_err() {
        return;
    }
    let node = Node::open(UdpConfig::from_env().unwrap(), 16).unwrap();
    std::mem::forget(node);
    std::process::exit(3);
}

#[test]
fn a_device_never_closed_prints_its_summary_at_exit() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "never_closing_child", "--nocapture", "--test-threads=1"])
        .env("UROCE_SCENARIO_NEVER_CLOSES", "1")
        .env("UROCE_ADDR", "127.161.9.1")
        .env("UROCE_SCENARIO", "rnr-retry")
        .env_remove("UROCE_FAULTS")
        .env_remove("UROCE_CAPTURE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    for want in [
        "scenario rnr-retry 127.161.9.1 rule not-ready matched 0 fired 0",
        "scenario rnr-retry 127.161.9.1 completions success=0 errors=0 first_error=none",
    ] {
        assert!(stderr.contains(want), "no `{want}` in {stderr}");
    }
}

#[test]
fn a_reorder_hold_releases_the_first_packet_behind_the_next() {
    // A's 2nd first-time FIRST packet (4 KiB messages at MTU 1024: FIRST,
    // MIDDLE, MIDDLE, LAST) leaves behind the MIDDLE after it: B sees a
    // PSN gap, NAKs it, A goes back.
    let text = r#"
[scenario]
name = "swap"
summary = "one FIRST packet overtaken"

[[rule]]
name = "swap"
device = "127.161.10.1"
dir = "out"
class = "request"
position = "first"
retransmit = false
nth = 2
action = "reorder"
behind = 1
"#;
    let config = |host| {
        let mut c = UdpConfig::new(addr(10, host));
        c.scenario = Some(ScenarioConfig::new(Scenario::parse(text, "swap.toml").unwrap()));
        c
    };
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("swap.pcapng");
    let mut ca = config(1);
    ca.capture = Some(pcap.clone());
    let a = Node::open(ca, 64).unwrap();
    let b = Node::open(config(2), 64).unwrap();
    let statuses = send_messages(&a, &b, 5, 4096);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    assert_eq!(statuses.len(), 5);
    let summary = a.dev.scenario_summary().unwrap();
    assert_eq!((summary.rules[0].fired, summary.reordered), (1, 1), "{summary}");
    assert!(counter(&b, "out_of_seq_request") >= 1);
    assert!(counter(&a, "rcvd_seq_err") >= 1);
    drop(a);
    // The held FIRST packet leaves after the MIDDLE that overtook it, with
    // its firing as its comment.
    let bytes = std::fs::read(&pcap).unwrap();
    let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
    let at = frames.iter().position(|f| f.comment.is_some()).expect("a commented frame");
    let comment = frames[at].comment.unwrap();
    assert!(
        comment.starts_with("uroce scenario: rule swap fired 1: reorder behind 1"),
        "{comment}"
    );
    assert_eq!(frames[at].data[42], 0x00, "RC_SEND_FIRST");
    let before = frames[..at].iter().rev().find(|f| f.data[26..30] == [127, 161, 10, 1]).unwrap();
    assert_eq!(before.data[42], 0x01, "RC_SEND_MIDDLE went first");
}

#[test]
fn partition_heals_costs_retransmissions_then_succeeds() {
    let a = Node::open(config(11, 1, "partition-heals", None), 64).unwrap();
    let b = Node::open(config(11, 2, "partition-heals", None), 64).unwrap();
    let statuses = send_one_by_one(&a, &b, 12);
    assert_eq!(statuses.len(), 12);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    // B cut A off for 120 ms at A's 10th SEND; A's retransmissions every
    // 67 ms got through after it (about 134 ms; the bound has the
    // library's slack for a loaded machine).
    let took = statuses[9].1;
    assert!(took >= Duration::from_millis(115) && took < Duration::from_millis(1600), "{took:?}");
    let summary = b.dev.scenario_summary().unwrap();
    assert!(summary.dropped_partition >= 2, "{summary}");
    assert!(counter(&a, "completer_retry_err") >= 2);
}

/// Two devices at 127.161.`net`.1/.2 running `text`.
fn pair(net: u8, text: &str) -> (Node, Node) {
    let config = |host| {
        let mut c = UdpConfig::new(addr(net, host));
        c.scenario = Some(ScenarioConfig::new(Scenario::parse(text, "test.toml").unwrap()));
        c
    };
    (Node::open(config(1), 64).unwrap(), Node::open(config(2), 64).unwrap())
}

#[test]
fn key_and_dma_faults_fail_the_requesters_write() {
    for (net, action, status, counter_name) in [
        (12, "fail_key", WcStatus::RemAccessErr, "injected_key_fail"),
        (13, "dma_fault", WcStatus::RemOpErr, "injected_dma_fault"),
    ] {
        let text = format!(
            "[scenario]\nname = \"{}\"\nsummary = \"x\"\n\n[[rule]]\ndir = \"in\"\n\
             class = \"write\"\nmessage = 3\nnth = 1\naction = \"{action}\"\n",
            action.replace('_', "-")
        );
        let (a, b) = pair(net, &text);
        let statuses = run_ops(&a, &b, 5, 64, WrOpcode::RdmaWrite);
        assert_eq!(statuses.len(), 3, "{action}: {statuses:?}");
        assert_eq!(statuses[2].0, status, "{action}");
        assert!(statuses[2].1 < Duration::from_millis(500), "{action}: a NAK, not a timeout");
        assert_eq!(counter(&b, counter_name), 1, "{action}");
    }
}

#[test]
fn a_stalled_responder_is_silent_then_answers() {
    let text = "[scenario]\nname = \"stall\"\nsummary = \"x\"\n\n[[rule]]\ndir = \"in\"\n\
                class = \"send\"\nmessage = 5\nnth = 1\naction = \"stall\"\nfor_ms = 150\n";
    let (a, b) = pair(14, text);
    let statuses = send_one_by_one(&a, &b, 8);
    assert_eq!(statuses.len(), 8);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    // Silence for 150 ms, then A's next retransmission is answered (the
    // bound has the library's slack for a loaded machine).
    let took = statuses[4].1;
    assert!(took >= Duration::from_millis(140) && took < Duration::from_millis(1600), "{took:?}");
    assert!(counter(&b, "rcvd_stalled_drop") >= 1);
}

#[test]
fn uroce_faults_become_the_scenarios_background() {
    // UROCE_FAULTS with a scenario: the port draws them (egress), beside
    // its rules; no injector of its own.
    let var = |n: &str| match n {
        "UROCE_ADDR" => Some("127.161.15.1".to_string()),
        "UROCE_SCENARIO" => Some("lost-ack".to_string()),
        "UROCE_FAULTS" => Some("loss=0.3,seed=5".to_string()),
        _ => None,
    };
    let a = Node::open(UdpConfig::from_vars(var).unwrap(), 64).unwrap();
    let b = Node::open(config(15, 2, "lost-ack", None), 64).unwrap();
    assert!(a.dev.has_faults() && a.dev.has_scenario());
    let statuses = send_one_by_one(&a, &b, 20);
    assert!(statuses.iter().all(|(s, _)| *s == WcStatus::Success), "{statuses:?}");
    let summary = a.dev.scenario_summary().unwrap();
    assert!(summary.dropped_background >= 1, "{summary}");
    let lost = summary.dropped_background + summary.dropped_rule;
    assert_eq!(a.dev.stats().faults_lost, lost, "{summary}");
    assert!(counter(&b, "duplicate_request") + counter(&a, "completer_retry_err") >= 1);
}

#[test]
fn ibv_rc_pingpong_on_uroces_library_under_retry_exceeded_prints_its_summary() {
    // A C program on libibverbs.so.1: the device comes from the
    // environment, the firings and the summary are the library's.
    use uroce_tests::ibverbs::{finish, library_dir, listening, on_uroce, require, tool};
    let test = "ibv_rc_pingpong_on_uroces_library_under_retry_exceeded_prints_its_summary";
    let Some(program) = tool("ibv_rc_pingpong") else {
        require(test, false, "no ibv_rc_pingpong (Debian's ibverbs-utils)");
        return;
    };
    let dir = library_dir().expect("cargo builds libibverbs.so beside the tests");
    let port = "18714";
    let start = |addr: &str, peer: Option<&str>| {
        let mut command = on_uroce(&program, &dir, addr);
        command.env("UROCE_SCENARIO", "retry-exceeded").args(["-g", "1", "-n", "100", "-p", port]);
        command.args(peer).spawn().expect("start ibv_rc_pingpong")
    };
    let t0 = Instant::now();
    let server = start("127.161.16.1", None);
    while !listening(18714) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = start("127.161.16.2", Some("127.161.16.1"));
    // The server's link went down at the 10th SEND it received: the
    // client's requester spends its retries (8 × 67 ms) and gives up; the
    // server, whose next receive never comes, waits for ever (as on rxe):
    // it is killed once the client is done.
    let client = finish(client, t0 + Duration::from_secs(20));
    let server = finish(server, Instant::now() + Duration::from_millis(500));
    assert!(t0.elapsed() < Duration::from_secs(20), "bounded: {server:#?}\n{client:#?}");
    assert_eq!(client.code, Some(1), "{client:#?}");
    assert!(client.stderr.contains("Failed status transport retry counter exceeded (12)"));
    let me = "scenario retry-exceeded 127.161.16.2";
    for want in [
        format!("{me} loaded at_us=0 from library:retry-exceeded seed 0"),
        format!("{me} rule down matched 0 fired 0"),
        format!("{me} completions success="),
        "IBV_WC_RETRY_EXC_ERR=1 first_error=IBV_WC_RETRY_EXC_ERR".to_string(),
        format!("{me} counters "),
    ] {
        assert!(client.stderr.contains(&want), "no `{want}` in {}", client.stderr);
    }
    let fired = "scenario 127.161.16.1 ";
    assert!(
        server.stderr.lines().any(|l| l.starts_with(fired)
            && l.contains("rule down fired 1: link_down on in RC_SEND_")
            && l.ends_with("message 10)")),
        "{server:#?}"
    );
}
