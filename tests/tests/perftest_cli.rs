//! `uroce perftest` as two processes, as perftest's tools are run: the
//! test binary runs itself twice (the child test below), once as the
//! server and once as the client, each with its own device address on the
//! UDP runtime (127.88.x.1 and 127.88.x.2, addresses no other test uses)
//! and a TCP port of its own. The exchange itself is checked byte for byte
//! against captures of the real perftest in the module's unit tests
//! (`src/perftest/`); here the two ends run the traffic, check it, and
//! fail cleanly on a bad peer. One test runs them on the L2 transport
//! instead, a link between 127.88.3x.1 and .2 (its exchange then goes
//! through the link's own TCP).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::report::{assert_no_counters, assert_traffic_counted};

/// The child's arguments (after `uroce`), separated by [`SEP`]; absent in
/// the parent.
const CHILD_ENV: &str = "UROCE_PERFTEST_CHILD";
/// How long a child may run before it is killed.
const CHILD_LIMIT: Duration = Duration::from_secs(60);
/// perftest's table header.
const HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn perftest_child() {
    child::run_if_child(CHILD_ENV);
}

fn spawn(addr: &str, args: &[&str]) -> Running {
    spawn_with(&[("UROCE_ADDR", addr.to_string())], args)
}

/// A child with `env` (UROCE_ADDR, and UROCE_LINK for the L2 transport).
fn spawn_with(env: &[(&str, String)], args: &[&str]) -> Running {
    child::spawn("perftest_child", CHILD_ENV, args, env)
}

/// A server at `net.1` waiting on `port`, started with `flags` (which
/// bound its waits with `--timeout`: a server left behind by a failed test
/// stops by itself).
fn server(net: &str, port: u16, flags: &[&str]) -> Running {
    let port = port.to_string();
    let mut args = vec!["perftest", "-p", &port];
    args.extend_from_slice(flags);
    let server = spawn(&format!("{net}.1"), &args);
    assert!(
        server.wait_for_line("Waiting for client", Duration::from_secs(20)),
        "the server never listened: {:#?}",
        server.finish(Instant::now())
    );
    server
}

/// Runs a server at `net.1` and a client at `net.2` with `flags` (the
/// test first); returns (server, client).
fn run_pair(net: &str, port: u16, flags: &[&str]) -> (Finished, Finished) {
    let deadline = Instant::now() + CHILD_LIMIT;
    let mut server_flags = vec!["--timeout", "20"];
    server_flags.extend_from_slice(flags);
    let server = server(net, port, &server_flags);
    let port = port.to_string();
    let server_addr = format!("{net}.1");
    let mut args = vec!["perftest", "-p", &port, "--timeout", "20"];
    args.extend_from_slice(flags);
    args.push(&server_addr);
    let client = spawn(&format!("{net}.2"), &args).finish(deadline);
    (server.finish(deadline), client)
}

/// The table's rows (lines starting with a size).
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| l.starts_with(' ') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Both ends exited 0, printed perftest's table, and the client's rows are
/// `sizes`, each with `iters` messages and a positive rate. Returns
/// the rows (server, client).
fn assert_clean(
    server: &Finished,
    client: &Finished,
    sizes: &[u32],
    iters: u64,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    for (who, end) in [("server", server), ("client", client)] {
        assert_eq!(end.code, Some(0), "{who} failed: {end:#?}");
        assert!(end.stdout.lines().any(|l| l == HEADER), "{who}: {}", end.stdout);
        assert!(end.stderr.is_empty(), "{who}: {}", end.stderr);
    }
    let client_rows = rows(&client.stdout);
    assert_eq!(client_rows.len(), sizes.len(), "{}", client.stdout);
    for (row, size) in client_rows.iter().zip(sizes) {
        assert_eq!(row.len(), 5, "{row:?}");
        assert_eq!(row[0], size.to_string(), "{row:?}");
        assert_eq!(row[1], iters.to_string(), "{row:?}");
        let average: f64 = row[3].parse().unwrap();
        let rate: f64 = row[4].parse().unwrap();
        // Tiny messages round to 0.00 bandwidth; the rate never does.
        assert!(average >= 0.0 && rate > 0.0, "{row:?}");
    }
    let last_average: f64 = client_rows[client_rows.len() - 1][3].parse().unwrap();
    assert!(last_average > 0.0, "{client_rows:?}");
    (rows(&server.stdout), client_rows)
}

/// Each side's remote addresses are the other's local ones.
fn assert_addresses_agree(server: &Finished, client: &Finished, qps: usize) {
    assert_eq!(
        server.stdout.lines().filter(|l| l.starts_with(" local address: ")).count(),
        qps,
        "{}",
        server.stdout
    );
    assert_addresses_agree_on(server, client, "127:88:");
}

/// Each side's remote addresses are the other's local ones, and the GIDs
/// are IPv4 addresses starting `gid_prefix` (decimal, as perftest prints).
fn assert_addresses_agree_on(server: &Finished, client: &Finished, gid_prefix: &str) {
    let addresses = |out: &str, side: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix(&format!(" {side} address: ")))
            .map(str::to_string)
            .collect()
    };
    let server_local = addresses(&server.stdout, "local");
    assert!(!server_local.is_empty(), "{}", server.stdout);
    assert_eq!(server_local, addresses(&client.stdout, "remote"));
    assert_eq!(addresses(&client.stdout, "local"), addresses(&server.stdout, "remote"));
    let gid = format!(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:{gid_prefix}");
    assert!(client.stdout.contains(&gid), "{}", client.stdout);
}

#[test]
fn send_rc_checks_every_message() {
    let (server, client) =
        run_pair("127.88.1", 18601, &["send_bw", "-n", "200", "-s", "4096", "--check"]);
    let (server_rows, _) = assert_clean(&server, &client, &[4096], 200);
    // The SEND server measures its own side (no peak).
    assert_eq!(server_rows.len(), 1);
    assert_eq!(server_rows[0][..3], ["4096", "200", "0.00"]);
    assert_addresses_agree(&server, &client, 1);
    assert!(client.stdout.contains("Send BW Test") && client.stdout.contains(" TX depth "));
    assert!(server.stdout.contains(" RX depth        : 200"));
}

#[test]
fn counters_at_exit_on_both_sides() {
    let (server, client) =
        run_pair("127.88.9", 18671, &["write_bw", "-n", "50", "-s", "4096", "--counters"]);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(0), "{who}: {end:#?}");
        assert_no_counters(&end.stdout);
    }
    // 50 WRITEs of one packet each (the port's MTU, 4096) from the client,
    // and the ACKs back.
    let server_hca = assert_traffic_counted(&server.stderr, "127.88.9.1", 1);
    let client_hca = assert_traffic_counted(&client.stderr, "127.88.9.2", 1);
    assert!(client_hca["sent_pkts"] >= 50 && server_hca["rcvd_pkts"] >= 50, "{client_hca:?}");
}

#[test]
fn a_capture_file_that_cannot_be_created_fails_before_anything_runs() {
    let path = "/no/such/dir/perftest.pcap";
    let started = Instant::now();
    let end = spawn("127.88.9.3", &["perftest", "write_bw", "--capture", path, "127.88.9.1"])
        .finish(started + CHILD_LIMIT);
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains(&format!("cannot create the capture file {path}")), "{end:#?}");
    assert!(!end.stdout.contains("address:"), "{end:#?}");
}

#[test]
fn send_uc_and_ud_with_several_qps() {
    let flags = ["send_bw", "-c", "UC", "-n", "100", "-s", "8192", "-q", "2", "--check"];
    let (server, client) = run_pair("127.88.2", 18602, &flags);
    assert_clean(&server, &client, &[8192], 200);
    assert_addresses_agree(&server, &client, 2);
    let flags = ["send_bw", "-c", "UD", "-n", "100", "-s", "1024", "-q", "3", "--check"];
    let (server, client) = run_pair("127.88.2", 18603, &flags);
    assert_clean(&server, &client, &[1024], 300);
    assert!(server.stdout.contains(" Connection type : UD"));
    // A UD message larger than the MTU is refused, as perftest refuses it.
    let flags = ["send_bw", "-c", "UD", "-n", "100", "-s", "8192", "-m", "1024"];
    let (server, client) = run_pair("127.88.2", 18604, &flags);
    for end in [&server, &client] {
        assert_eq!(end.code, Some(1), "{end:#?}");
        assert!(end.stderr.contains("greater than MTU"), "{end:#?}");
    }
}

#[test]
fn write_rc_and_uc_server_prints_the_clients_report() {
    for (port, connection) in [(18611, "RC"), (18612, "UC")] {
        let flags = ["write_bw", "-c", connection, "-n", "300", "-s", "8192", "-q", "2", "--check"];
        let (server, client) = run_pair("127.88.3", port, &flags);
        let (server_rows, client_rows) = assert_clean(&server, &client, &[8192], 600);
        assert_eq!(server_rows, client_rows, "{connection}");
        assert_addresses_agree(&server, &client, 2);
    }
}

#[test]
fn read_checks_the_data_it_reads() {
    let flags = ["read_bw", "-n", "200", "-s", "12000", "-q", "2", "-o", "4", "--check"];
    let (server, client) = run_pair("127.88.4", 18621, &flags);
    let (server_rows, client_rows) = assert_clean(&server, &client, &[12000], 400);
    assert_eq!(server_rows, client_rows);
    assert!(client.stdout.contains(" Outstand reads  : 4"), "{}", client.stdout);
    assert!(client.stdout.contains(" OUT 0x04 RKey 0x"), "{}", client.stdout);
}

#[test]
fn atomics_both_kinds_check_results_and_memory() {
    for (port, kind, title) in [
        (18631, "FETCH_AND_ADD", "Atomic FETCH_AND_ADD BW Test"),
        (18632, "CMP_AND_SWAP", "Atomic CMP_AND_SWAP BW Test"),
    ] {
        // 150 operations per QP cycle 64 addresses: each is hit 2 or 3
        // times, and the server checks every one at the end.
        let flags = ["atomic_bw", "-A", kind, "-n", "150", "-q", "2", "-t", "20"];
        let (server, client) = run_pair("127.88.5", port, &flags);
        let (server_rows, client_rows) = assert_clean(&server, &client, &[8], 300);
        assert_eq!(server_rows, client_rows, "{kind}");
        assert!(client.stdout.contains(title), "{}", client.stdout);
    }
}

#[test]
fn all_sizes_and_report_in_gigabits() {
    let flags = ["write_bw", "-a", "-n", "5", "--report_gbits"];
    let (server, client) = run_pair("127.88.6", 18641, &flags);
    let sizes: Vec<u32> = (1..=23).map(|p| 1 << p).collect();
    for end in [&server, &client] {
        assert!(end.stdout.contains("BW peak[Gb/sec]"), "{}", end.stdout);
    }
    let fixed = |e: &Finished| Finished {
        code: e.code,
        signal: e.signal,
        killed_at_deadline: e.killed_at_deadline,
        stdout: e.stdout.replace("Gb/sec", "MB/sec"),
        stderr: e.stderr.clone(),
    };
    let (server_rows, client_rows) = assert_clean(&fixed(&server), &fixed(&client), &sizes, 5);
    // The passive server prints the client's last row.
    assert_eq!(server_rows.len(), 1);
    assert_eq!(server_rows[0], client_rows[22]);
    // UD runs every size up to the MTU.
    let flags = ["send_bw", "-c", "UD", "-a", "-n", "20", "-m", "1024", "--check"];
    let (server, client) = run_pair("127.88.6", 18642, &flags);
    let sizes: Vec<u32> = (1..=10).map(|p| 1 << p).collect();
    let (server_rows, _) = assert_clean(&server, &client, &sizes, 20);
    assert_eq!(server_rows.len(), 10);
}

#[test]
fn mismatched_tests_fail_on_both_sides() {
    // A READ client against a WRITE server: the server's buffer refuses
    // READs (perftest's access flags), the client's completion fails, and
    // the server sees its client go.
    let deadline = Instant::now() + CHILD_LIMIT;
    let flags = ["--timeout", "20", "write_bw", "-n", "100", "-s", "1024"];
    let server = server("127.88.7", 18651, &flags);
    let client_args =
        ["perftest", "-p", "18651", "--timeout", "20", "read_bw", "-n", "100", "-s", "1024"];
    let mut args = client_args.to_vec();
    args.push("127.88.7.1");
    let client = spawn("127.88.7.2", &args).finish(deadline);
    let server = server.finish(deadline);
    assert_eq!(client.code, Some(1), "{client:#?}");
    assert!(client.stderr.contains("Completion with error"), "{client:#?}");
    assert_eq!(server.code, Some(1), "{server:#?}");
    assert!(server.stderr.contains("uroce perftest: "), "{server:#?}");
}

/// A server whose client is a raw TCP connection from this test.
fn server_against(net: &str, port: u16, send: &[u8], close: bool) -> Finished {
    let deadline = Instant::now() + Duration::from_secs(30);
    let srv = server(net, port, &["send_bw", "--timeout", "3"]);
    let mut tcp = TcpStream::connect((format!("{net}.1").as_str(), port)).expect("connect");
    tcp.write_all(send).expect("send");
    if close {
        drop(tcp);
        srv.finish(deadline)
    } else {
        let end = srv.finish(deadline);
        drop(tcp);
        end
    }
}

#[test]
fn a_bad_peer_gives_a_clear_error_and_no_hang() {
    let started = Instant::now();
    // Garbage instead of perftest's version.
    let end = server_against("127.88.8", 18661, b"SSH-2.0-OpenSSH_9.2\r\n", false);
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("not a perftest version"), "{end:#?}");
    // A version perftest itself refuses.
    let mut old = b"5.60".to_vec();
    old.resize(16, 0);
    let end = server_against("127.88.8", 18662, &old, false);
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("older than 5.70"), "{end:#?}");
    // A client that connects and goes.
    let end = server_against("127.88.8", 18663, b"", true);
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("closed the connection"), "{end:#?}");
    // A client that says nothing: the server gives up after --timeout.
    let end = server_against("127.88.8", 18664, b"", false);
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("no version from the peer for 3 s"), "{end:#?}");

    // A server of a newer perftest: the client refuses its exchange.
    let listener = TcpListener::bind("127.88.8.1:18665").expect("listen");
    let fake = std::thread::spawn(move || {
        let (mut tcp, _) = listener.accept().expect("accept");
        let mut version = [0u8; 16];
        tcp.read_exact(&mut version).expect("the client's version");
        let mut newer = b"6.20".to_vec();
        newer.resize(16, 0);
        tcp.write_all(&newer).expect("send");
        let mut rest = Vec::new();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = tcp.read_to_end(&mut rest);
        version
    });
    let args = ["perftest", "-p", "18665", "--timeout", "5", "send_bw", "127.88.8.1"];
    let end = spawn("127.88.8.2", &args).finish(Instant::now() + Duration::from_secs(30));
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("version 6.20") && end.stderr.contains("6.06"), "{end:#?}");
    assert_eq!(&fake.join().unwrap()[..5], b"6.06\0");

    // No server at all: the client retries until --timeout, then fails.
    let args = ["perftest", "-p", "18666", "--timeout", "2", "write_bw", "127.88.8.1"];
    let end = spawn("127.88.8.2", &args).finish(Instant::now() + Duration::from_secs(30));
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("Couldn't connect"), "{end:#?}");
    // No client at all: the server waits --timeout, then fails.
    let args = ["perftest", "-p", "18667", "--timeout", "2", "write_bw"];
    let end = spawn("127.88.8.1", &args).finish(Instant::now() + Duration::from_secs(30));
    assert_eq!(end.code, Some(1), "{end:#?}");
    assert!(end.stderr.contains("accept"), "{end:#?}");
    assert!(started.elapsed() < Duration::from_secs(40), "{:?}", started.elapsed());
}

#[test]
fn flags_perftest_refuses_are_refused() {
    let run = |args: &[&str]| {
        let mut argv = vec!["uroce", "perftest"];
        argv.extend_from_slice(args);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = uroce::cli::run(argv, &mut out, &mut err);
        (code, String::from_utf8_lossy(&err).into_owned())
    };
    let (code, err) = run(&["write_bw", "-c", "UD"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot use UD QPs"), "{err}");
    let (code, err) = run(&["read_bw", "-c", "UC"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot use UC QPs"), "{err}");
    let (code, err) = run(&["atomic_bw", "-s", "64"]);
    assert_eq!(code, 2);
    assert!(err.contains("atomics are 8 bytes"), "{err}");
    let (code, err) = run(&["send_bw", "-n", "4"]);
    assert_eq!(code, 2);
    assert!(err.contains("between 5 and 100000000"), "{err}");
    let (code, _) = run(&["send_bw", "-m", "1500"]);
    assert_eq!(code, 2);
    let (code, _) = run(&["send_bw", "-b"]);
    assert_eq!(code, 2);
    let (code, _) = run(&["send_bw", "-n", "0x10", "--help"]);
    assert_eq!(code, 0);
}

/// Host `side` (1: the server, 2: the client) of link `net` of the L2
/// transport: frames in UDP datagrams between 127.88.`net`.1 and .2, the
/// hosts 169.254.0.1 and .2 on it, a link MTU of `mtu` bytes.
fn link_env(net: u8, side: u8, mtu: u32) -> Vec<(&'static str, String)> {
    let other = 3 - side;
    vec![
        ("UROCE_LINK", format!("127.88.{net}.{side}:47310,127.88.{net}.{other}:47310")),
        ("UROCE_ADDR", format!("169.254.0.{side}/16")),
        ("UROCE_MTU", mtu.to_string()),
    ]
}

#[test]
fn over_the_l2_transport_the_exchange_runs_on_the_links_tcp() {
    // Link MTU 4200: path MTU 4096, as rxe's rule gives it.
    for (net, flags) in [
        (30, ["write_bw", "-n", "100", "-s", "65536", "--check"].as_slice()),
        (31, ["send_bw", "-c", "UD", "-n", "100", "-s", "4096", "--check"].as_slice()),
        (32, ["atomic_bw", "-n", "200", "-q", "2"].as_slice()),
    ] {
        let deadline = Instant::now() + CHILD_LIMIT;
        let mut args = vec!["perftest", "--timeout", "20"];
        args.extend_from_slice(flags);
        let server = spawn_with(&link_env(net, 1, 4200), &args);
        assert!(
            server.wait_for_line("Waiting for client", Duration::from_secs(20)),
            "{:#?}",
            server.finish(Instant::now())
        );
        args.push("169.254.0.1");
        let client = spawn_with(&link_env(net, 2, 4200), &args).finish(deadline);
        let server = server.finish(deadline);
        let size: u32 =
            flags.iter().skip_while(|f| **f != "-s").nth(1).map_or(8, |s| s.parse().unwrap());
        let qps: u64 = if flags.contains(&"-q") { 2 } else { 1 };
        let iters: u64 = flags.iter().skip_while(|f| **f != "-n").nth(1).unwrap().parse().unwrap();
        assert_clean(&server, &client, &[size], iters * qps);
        for end in [&server, &client] {
            assert!(end.stdout.contains(" Mtu             : 4096[B]"), "{}", end.stdout);
            assert!(end.stdout.contains("Device         : uroce@169.254.0."), "{}", end.stdout);
        }
        assert_addresses_agree_on(&server, &client, "169:254:00:");
    }
}
