//! `uroce pingpong` as two processes, as `ibv_rc_pingpong` is run: the
//! test binary runs itself twice (the child test below), once as the
//! server and once as the client, each with its own device address
//! (127.83.x.1 and 127.83.x.2) and a TCP port of its own.

use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::report::{assert_no_counters, assert_traffic_counted};

/// The child's arguments (after `uroce`), separated by [`SEP`]; absent in
/// the parent.
const CHILD_ENV: &str = "UROCE_PINGPONG_CHILD";
/// How long a child may run before it is killed.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn pingpong_child() {
    child::run_if_child(CHILD_ENV);
}

fn spawn(addr: &str, args: &[&str]) -> Running {
    child::spawn("pingpong_child", CHILD_ENV, args, &[("UROCE_ADDR", addr.to_string())])
}

/// Runs a server at `net.1` and a client at `net.2` (`net` like
/// `127.83.1`) with the same flags; returns (server, client).
fn run_pair(net: &str, port: u16, flags: &[&str]) -> (Finished, Finished) {
    run_pair_with(net, port, flags, flags)
}

/// [`run_pair`] with flags of each side's own.
fn run_pair_with(
    net: &str,
    port: u16,
    server_flags: &[&str],
    client_flags: &[&str],
) -> (Finished, Finished) {
    let server_addr = format!("{net}.1");
    let client_addr = format!("{net}.2");
    let port = port.to_string();
    // A server left behind by a failed test stops by itself.
    let mut server_args = vec!["pingpong", "-p", &port, "--accept-timeout", "20"];
    server_args.extend_from_slice(server_flags);
    let mut client_args = vec!["pingpong", "-p", &port];
    client_args.extend_from_slice(client_flags);
    client_args.push(&server_addr);

    let deadline = Instant::now() + CHILD_LIMIT;
    let server = spawn(&server_addr, &server_args);
    let listening = server.wait_for_line("local address:", Duration::from_secs(15));
    if !listening {
        let server = server.finish(Instant::now());
        panic!("the server never printed its address: {server:#?}");
    }
    let client = spawn(&client_addr, &client_args);
    let client = client.finish(deadline);
    let server = server.finish(deadline);
    (server, client)
}

/// The text of the line containing `marker`, from the marker on.
fn line_with<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines().find_map(|line| line.find(marker).map(|at| &line[at..]))
}

/// Checks both ends exited 0 and printed the C tools' lines; returns the
/// two summary lines' byte count.
fn assert_clean_run(server: &Finished, client: &Finished, size: u64, iters: u64, ud: bool) {
    for (who, end) in [("server", server), ("client", client)] {
        assert_eq!(end.code, Some(0), "{who} failed: {end:#?}");
        let local = line_with(&end.stdout, "local address:").expect("local address line");
        let remote = line_with(&end.stdout, "remote address:").expect("remote address line");
        let sep = if ud { ':' } else { ',' };
        assert!(
            local.starts_with("local address:  LID 0x0000, QPN 0x")
                && local.contains(&format!("{sep} GID ::ffff:127.83.")),
            "{who}: {local}"
        );
        assert!(remote.starts_with("remote address: LID 0x0000, QPN 0x"), "{who}: {remote}");
        assert!(remote.contains(", GID ::ffff:127.83."), "{who}: {remote}");
        let bytes = line_with(&end.stdout, "bytes in").expect("bytes line");
        let bytes_line = end.stdout.lines().find(|l| l.contains(" bytes in ")).unwrap_or_default();
        let count: u64 = bytes_line
            .split_whitespace()
            .rev()
            .nth(7)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{who}: no byte count in {bytes_line:?}"));
        assert_eq!(count, size * iters * 2, "{who}: {bytes}");
        assert!(bytes_line.ends_with(" Mbit/sec"), "{who}: {bytes_line}");
        let iters_line = end.stdout.lines().find(|l| l.contains(" iters in ")).expect("iters line");
        assert!(
            iters_line.trim_start().starts_with(&format!("{iters} iters in "))
                && iters_line.ends_with(" usec/iter"),
            "{who}: {iters_line}"
        );
        assert!(!end.stdout.contains("invalid data"), "{who}: {}", end.stdout);
    }
    // Each side's remote address is the other's local address.
    let addr = |end: &Finished, which: &str| {
        let line = line_with(&end.stdout, which).unwrap_or_default();
        line.split_once("QPN ").map(|(_, rest)| rest.to_string()).unwrap_or_default()
    };
    let strip = |s: String| s.replace(':', ",");
    assert_eq!(
        strip(addr(server, "remote address:")),
        strip(addr(client, "local address:")),
        "server's remote is the client"
    );
    assert_eq!(
        strip(addr(client, "remote address:")),
        strip(addr(server, "local address:")),
        "client's remote is the server"
    );
}

#[test]
fn rc_default_exchange() {
    let (server, client) = run_pair("127.83.1", 18561, &["-g", "1", "-n", "100", "-s", "4096"]);
    assert_clean_run(&server, &client, 4096, 100, false);
    assert_no_counters(&server.output());
    assert_no_counters(&client.output());
}

#[test]
fn uc_exchange_with_counters() {
    let flags = ["--uc", "-g", "1", "-n", "100", "-s", "4096", "--counters"];
    let (server, client) = run_pair("127.83.2", 18562, &flags);
    assert_clean_run(&server, &client, 4096, 100, false);
    // Each side's own device, on standard error (standard output is the
    // C tool's); 100 messages of 4 packets each way, no ACKs on UC.
    for (end, addr) in [(&server, "127.83.2.1"), (&client, "127.83.2.2")] {
        let hca = assert_traffic_counted(&end.stderr, addr, 400);
        assert_eq!(hca.len(), 2, "only sent_pkts and rcvd_pkts moved: {hca:?}");
        assert_no_counters(&end.stdout);
    }
}

#[test]
fn a_capture_file_that_cannot_be_created_fails_before_anything_runs() {
    let started = Instant::now();
    // From the flag and from the environment alike.
    let path = "/no/such/dir/pingpong.pcap";
    let by_flag = spawn("127.83.22.2", &["pingpong", "-g", "1", "--capture", path, "127.83.22.1"]);
    let by_env = child::spawn(
        "pingpong_child",
        CHILD_ENV,
        &["pingpong", "-g", "1", "127.83.22.1"],
        &[("UROCE_ADDR", "127.83.22.3".into()), ("UROCE_CAPTURE", path.into())],
    );
    for end in [by_flag, by_env] {
        let end = end.finish(started + CHILD_LIMIT);
        assert_eq!(end.code, Some(1), "{end:#?}");
        assert!(end.stderr.contains(&format!("cannot create the capture file {path}")), "{end:#?}");
        assert!(end.stderr.contains("No such file or directory"), "{end:#?}");
        assert!(!end.stdout.contains("address:"), "nothing ran: {end:#?}");
    }
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
}

#[test]
fn a_capture_file_that_cannot_be_written_fails_the_run() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here: nothing to test");
        return;
    }
    let flags = ["-g", "1", "-n", "20"];
    let client_flags = ["-g", "1", "-n", "20", "--capture", "/dev/full"];
    let (server, client) = run_pair_with("127.83.23", 18583, &flags, &client_flags);
    assert_eq!(server.code, Some(0), "{server:#?}");
    assert_eq!(client.code, Some(1), "{client:#?}");
    let why = "uroce pingpong: could not write the capture file /dev/full: No space left on device";
    assert!(client.stderr.contains(why), "{client:#?}");
    assert!(!client.stderr.contains("reading"), "{client:#?}");
}

#[test]
fn ud_exchange() {
    let (server, client) =
        run_pair("127.83.3", 18563, &["--ud", "-g", "1", "-n", "100", "-s", "1024"]);
    assert_clean_run(&server, &client, 1024, 100, true);
}

#[test]
fn rc_events() {
    let (server, client) = run_pair("127.83.4", 18564, &["-e", "-g", "1", "-n", "100"]);
    assert_clean_run(&server, &client, 4096, 100, false);
}

#[test]
fn ud_events() {
    let (server, client) = run_pair("127.83.7", 18567, &["--ud", "-e", "-g", "1", "-n", "50"]);
    assert_clean_run(&server, &client, 1024, 50, true);
}

#[test]
fn rc_check_data_across_pages() {
    // 3 pages and a bit, in 1024-byte packets, with the received data
    // checked by the server.
    let (server, client) = run_pair(
        "127.83.5",
        18565,
        &["-c", "-g", "1", "-n", "50", "-s", "13000", "-m", "1024", "-r", "8"],
    );
    assert_clean_run(&server, &client, 13000, 50, false);
}

#[test]
fn check_reports_data_the_client_did_not_mark() {
    // Only the server checks: the client sends its buffer as filled
    // (0x7b), not marked, so the server finds every page wrong.
    let (server, client) = run_pair_with(
        "127.83.10",
        18571,
        &["-c", "-g", "1", "-n", "5", "-s", "8192"],
        &["-g", "1", "-n", "5", "-s", "8192"],
    );
    assert_eq!(client.code, Some(0), "{client:#?}");
    assert_eq!(server.code, Some(1), "{server:#?}");
    assert!(server.stdout.contains("invalid data in page 0\n"), "{server:#?}");
    assert!(server.stdout.contains("invalid data in page 1\n"), "{server:#?}");
    assert!(server.stdout.contains("81920 bytes in "), "{server:#?}");
}

#[test]
fn uc_and_ud_check_data() {
    let (server, client) =
        run_pair("127.83.6", 18566, &["--uc", "-c", "-g", "1", "-n", "20", "-s", "9000"]);
    assert_clean_run(&server, &client, 9000, 20, false);
    let (server, client) =
        run_pair("127.83.6", 18568, &["--ud", "-c", "-g", "1", "-n", "20", "-s", "4096"]);
    assert_clean_run(&server, &client, 4096, 20, true);
}

#[test]
fn srq_checks_data_and_sleeps_on_events() {
    // ibv_srq_pingpong's -c and -e: 4 QPs on one SRQ, 3 pages and a bit
    // per message, the server checking every page start and both ends
    // sleeping on the completion channel.
    let (server, client) = run_pair(
        "127.83.11",
        18572,
        &["--srq", "-q", "4", "-c", "-e", "-g", "1", "-n", "100", "-s", "13000"],
    );
    assert_clean_run(&server, &client, 13000, 100, false);
    for end in [&server, &client] {
        assert_eq!(end.stdout.matches("local address:").count(), 4, "{end:#?}");
        assert_eq!(end.stdout.matches("remote address:").count(), 4, "{end:#?}");
    }
}

#[test]
fn client_without_server_fails_clearly() {
    let client = spawn("127.83.8.2", &["pingpong", "-g", "1", "-p", "18569", "127.83.8.1"]);
    let client = client.finish(Instant::now() + CHILD_LIMIT);
    assert_eq!(client.code, Some(1), "{client:#?}");
    assert!(client.stderr.contains("Couldn't connect to 127.83.8.1:18569"), "{client:#?}");
}

#[test]
fn ud_size_above_the_mtu_is_refused() {
    let end = spawn("127.83.8.3", &["pingpong", "--ud", "-g", "1", "-s", "8192"]);
    let end = end.finish(Instant::now() + CHILD_LIMIT);
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("Requested size larger than port MTU (4096)"), "{end:#?}");
}

#[test]
fn server_gives_up_when_the_client_leaves() {
    // A "client" that sends a malformed address and hangs up.
    let server =
        spawn("127.83.9.1", &["pingpong", "-g", "1", "-p", "18570", "--accept-timeout", "20"]);
    assert!(server.wait_for_line("local address:", Duration::from_secs(15)));
    {
        use std::io::Write;
        let mut tcp = std::net::TcpStream::connect("127.83.9.1:18570").expect("connect");
        tcp.write_all(b"not an address").expect("write");
    }
    let server = server.finish(Instant::now() + CHILD_LIMIT);
    assert_eq!(server.code, Some(1), "{server:#?}");
    assert!(server.stderr.contains("Couldn't read remote address"), "{server:#?}");
}

#[test]
fn bad_flags_are_refused_in_process() {
    let cases: [(&[&str], &str); 6] = [
        (&["-g", "1", "-m", "1000"], "path MTU is 256, 512, 1024, 2048 or 4096"),
        (&["-g", "1", "-t"], "timestamp"),
        (&["-g", "1", "-j"], "device memory"),
        (&["-g", "1", "--ud", "-m", "1024"], "not an ibv_ud_pingpong flag"),
        (&["-n", "10"], "-g 1"),
        (&["-g", "1", "-i", "2"], "one port"),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["uroce", "pingpong"];
        args.extend_from_slice(flags);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = uroce::cli::run(args.clone(), &mut out, &mut err);
        let err = String::from_utf8_lossy(&err);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // clap refuses --uc with --ud, and unknown flags.
    for args in [["uroce", "pingpong", "--uc", "--ud"], ["uroce", "pingpong", "-g", "-x"]] {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(uroce::cli::run(args, &mut out, &mut err), 2, "{args:?}");
    }
}

/// Runs tshark's RoCE dissector over `file`: the frames and the malformed
/// or error-level ones. `None` when tshark is missing outside CI.
fn tshark_malformed(file: &std::path::Path) -> Option<(usize, usize)> {
    let run = |filter: Option<&str>| {
        let mut cmd = std::process::Command::new("tshark");
        cmd.arg("-r").arg(file);
        if let Some(f) = filter {
            cmd.args(["-Y", f]);
        }
        cmd.output()
    };
    let all = match run(None) {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("tshark failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped the tshark check: {e}");
            return None;
        }
        Err(e) => panic!("tshark is required under CI: {e}"),
    };
    let bad = run(Some("_ws.malformed || _ws.expert.severity >= error")).expect("tshark");
    let count = |bytes: &[u8]| String::from_utf8_lossy(bytes).lines().count();
    Some((count(&all.stdout), count(&bad.stdout)))
}

#[test]
fn a_pingpong_capture_decodes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (server_pcap, client_pcap) =
        (dir.path().join("server.pcap"), dir.path().join("client.pcap"));
    let (sp, cp) = (server_pcap.to_str().unwrap(), client_pcap.to_str().unwrap());
    let common = ["-g", "1", "-n", "20", "-s", "4096"];
    let server_flags: Vec<&str> = common.iter().copied().chain(["--capture", sp]).collect();
    let client_flags: Vec<&str> = common.iter().copied().chain(["--capture", cp]).collect();
    let (server, client) = run_pair_with("127.83.20", 18580, &server_flags, &client_flags);
    assert_clean_run(&server, &client, 4096, 20, false);
    for file in [&server_pcap, &client_pcap] {
        // 20 iterations each way, 4 packets per 4 KiB SEND at MTU 1024,
        // plus ACKs: every one as sent and as received.
        let mut out = Vec::new();
        let mut err = Vec::new();
        let argv = ["uroce", "decode", "--format", "tsv", file.to_str().unwrap()];
        let code = uroce::cli::run(argv, &mut out, &mut err);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(code, 0, "uroce decode: {}", String::from_utf8_lossy(&err));
        let tally = text.lines().last().unwrap();
        let frames: usize = tally.split(' ').nth(1).unwrap()["frames=".len()..].parse().unwrap();
        assert!(frames >= 2 * 20 * 4, "{tally}");
        assert!(tally.ends_with("icrc_bad=0 malformed=0"), "{tally}");
        if let Some((all, bad)) = tshark_malformed(file) {
            assert_eq!(all, frames, "tshark sees every frame");
            assert_eq!(bad, 0, "tshark finds malformed or erroneous RoCE frames in {file:?}");
        }
    }
}

#[test]
fn trace_prints_the_hcas_decisions() {
    let plain = ["-g", "1", "-n", "5", "-s", "2000"];
    let traced = ["-g", "1", "-n", "5", "-s", "2000", "--trace"];
    let (server, client) = run_pair_with("127.83.24", 18584, &plain, &traced);
    assert_eq!((server.code, client.code), (Some(0), Some(0)), "{server:#?} {client:#?}");
    assert!(!server.stderr.contains("trace "), "no --trace, no trace: {}", server.stderr);
    let lines: Vec<&str> = client.stderr.lines().filter(|l| l.starts_with("trace ")).collect();
    // `trace <address> <microseconds> <decision>`.
    for line in &lines {
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(fields[1], "127.83.24.2", "{line}");
        assert!(fields[2].parse::<u64>().is_ok(), "{line}");
    }
    let has = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
    // Five SENDs of two packets each way: the server's arrive in sequence,
    // ours are acknowledged, and every receive and send completes.
    assert!(has("request RC_SEND_FIRST") >= 5, "{lines:#?}");
    assert!(has(": in sequence, executed") >= 10, "{lines:#?}");
    assert!(has("response RC_ACKNOWLEDGE") >= 5, "{lines:#?}");
    assert!(has("Recv Success") >= 5 && has("Send Success") >= 1, "{lines:#?}");
}
