//! `uroce bench`: perftest's tables and the `metric=` lines, from
//! in-process runs over 127.84.x.y (addresses no other test uses).

use std::net::TcpListener;
use std::time::{Duration, Instant};
use uroce_tests::child;
use uroce_tests::report::{assert_no_counters, assert_traffic_counted};

/// The child's arguments (after `uroce`); absent in the parent.
const CHILD_ENV: &str = "UROCE_BENCH_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`] (a server
/// that waits for a client forever must be a process a test can kill).
#[test]
fn bench_child() {
    child::run_if_child(CHILD_ENV);
}

const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
     t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

fn bench(args: &[&str]) -> (i32, String, String) {
    let mut argv = vec!["uroce", "bench"];
    argv.extend_from_slice(args);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = uroce::cli::run(argv, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// The value of `metric=<name>`, which must have `unit`, and its line.
fn metric_line<'a>(out: &'a str, name: &str, unit: &str) -> (f64, &'a str) {
    let prefix = format!("metric={name} value=");
    let line = out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {name} metric in:\n{out}"));
    let mut fields = line[prefix.len()..].split(' ');
    let value: f64 = fields.next().unwrap().parse().unwrap();
    assert_eq!(fields.next(), Some(format!("unit={unit}").as_str()), "{line}");
    (value, line)
}

/// The value of `metric=<name>`, which must have `unit` and be positive.
fn metric(out: &str, name: &str, unit: &str) -> f64 {
    let (value, line) = metric_line(out, name, unit);
    assert!(value.is_finite() && value > 0.0, "{line}");
    value
}

/// The value of `metric=<name>` with unit `x`, a fraction: between 0 and
/// 1 inclusive.
fn fraction(out: &str, name: &str) -> f64 {
    let (value, line) = metric_line(out, name, "x");
    assert!((0.0..=1.0).contains(&value), "{line}");
    value
}

/// The table rows (lines starting with a size).
fn rows(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with(' ') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

fn loopback(op: &str, test: &str, net: u8, extra: &[&str]) -> String {
    let addrs = format!("127.84.{net}.1,127.84.{net}.2");
    let mut args = vec![op, test, "--loopback", "--addrs", &addrs, "--timeout", "5"];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let (code, out, err) = bench(&args);
    assert_eq!(code, 0, "uroce bench {args:?}\nstdout:\n{out}\nstderr:\n{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_no_counters(&err);
    out
}

fn check_bw(op: &str, net: u8, size: u32) {
    let n = "40".to_string();
    let s = size.to_string();
    let out = loopback(op, "bw", net, &["-n", &n, "-s", &s]);
    assert!(out.lines().any(|l| l == BW_HEADER), "{out}");
    let rows = rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    let fields: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(fields[0], s);
    assert_eq!(fields[1], "40");
    let average: f64 = fields[3].parse().unwrap();
    let gbs = metric(&out, &format!("{op}_bw_{size}"), "GB/s");
    // MB/sec is 2^20 bytes/s, GB/s 10^9.
    assert!((average * 1_048_576.0 / 1e9 - gbs).abs() <= gbs * 0.01 + 1e-4, "{out}");
    metric(&out, &format!("{op}_msgrate_{size}"), "Mpps");
    // One QP: no share to report.
    assert!(!out.contains("metric=slowest_qp_share"), "{out}");
}

fn check_lat(op: &str, net: u8, size: u32) {
    let s = size.to_string();
    let out = loopback(op, "lat", net, &["-n", "30", "-s", &s]);
    assert!(out.lines().any(|l| l == LAT_HEADER), "{out}");
    let rows = rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    let fields: Vec<f64> = rows[0].split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields.len(), 9, "{out}");
    assert_eq!(fields[0], f64::from(size));
    assert_eq!(fields[1], 30.0);
    let typical = metric(&out, &format!("{op}_lat_{size}"), "us");
    assert!((fields[4] - typical).abs() < 0.01, "{out}");
    assert!(fields[2] <= fields[4] && fields[4] <= fields[3], "min <= typical <= max: {out}");
}

#[test]
fn send_bw() {
    check_bw("send", 1, 4096);
}

#[test]
fn write_bw() {
    check_bw("write", 2, 65536);
}

#[test]
fn read_bw() {
    check_bw("read", 3, 8192);
}

#[test]
fn atomic_bw() {
    check_bw("atomic", 4, 8);
}

#[test]
fn send_lat() {
    check_lat("send", 5, 64);
}

#[test]
fn write_lat() {
    check_lat("write", 6, 2);
}

#[test]
fn read_lat() {
    check_lat("read", 7, 512);
}

#[test]
fn atomic_lat() {
    check_lat("atomic", 8, 8);
}

#[test]
fn write_lat_larger_than_inline_and_mtu() {
    let out = loopback("write", "lat", 9, &["-n", "10", "-s", "5000", "-m", "1024"]);
    assert!(out.contains(" Mtu             : 1024[B]"), "{out}");
    metric(&out, "write_lat_5000", "us");
}

#[test]
fn all_sizes_print_one_row_each() {
    let out = loopback("write", "bw", 10, &["-a", "-n", "5", "-N"]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 23, "{out}");
    for e in 1..=23 {
        metric(&out, &format!("write_bw_{}", 1u32 << e), "GB/s");
    }
}

#[test]
fn many_qps_add_up() {
    let out = loopback("write", "bw", 11, &["--qps", "64", "-n", "10", "-s", "1024"]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    // perftest counts iterations over all QPs.
    assert_eq!(rows[0].split_whitespace().nth(1), Some("640"), "{out}");
    metric(&out, "write_bw_1024", "GB/s");
    metric(&out, "hca_bytes_per_qp", "B");
    assert!(out.contains("Number of qps   : 64"), "{out}");
    assert!(out.contains("and 62 more local QPs"), "{out}");
}

#[test]
fn a_few_qps_report_the_slowest_share() {
    let out = loopback("write", "bw", 13, &["--qps", "4", "-n", "200", "-s", "4096", "-Q", "1"]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0].split_whitespace().nth(1), Some("800"), "{out}");
    // The metric lines follow the row; perftest's table is unchanged.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("metric=slowest_qp_share "))
        .unwrap_or_else(|| panic!("no slowest_qp_share in:\n{out}"));
    assert!(lines[at - 1].starts_with("metric=write_msgrate_4096 "), "{out}");
    fraction(&out, "slowest_qp_share");
    fraction(&out, "slowest_qp_finish");
}

#[test]
fn send_bw_many_qps() {
    let out = loopback("send", "bw", 12, &["--qps", "16", "-n", "20", "-s", "2048"]);
    metric(&out, "send_bw_2048", "GB/s");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn server_and_client_in_two_threads() {
    let port = free_port().to_string();
    let server_port = port.clone();
    let server = std::thread::spawn(move || {
        bench(&["write", "bw", "--addr", "127.84.20.1", "-p", &server_port, "--timeout", "5"])
    });
    let (code, out, err) = bench(&[
        "write",
        "bw",
        "127.84.20.1",
        "--addr",
        "127.84.20.2",
        "-p",
        &port,
        "-n",
        "50",
        "-s",
        "4096",
        "--timeout",
        "5",
    ]);
    let (scode, sout, serr) = server.join().unwrap();
    assert_eq!(code, 0, "client:\n{out}\n{err}\nserver:\n{sout}\n{serr}");
    assert_eq!(scode, 0, "server:\n{sout}\n{serr}");
    assert!(sout.contains("Waiting for client to connect"), "{sout}");
    assert!(sout.contains("RDMA_Write BW Test"), "{sout}");
    assert!(out.contains(" remote address: LID 0000 QPN "), "{out}");
    assert!(out.contains("255:255:127:84:20:01"), "the server's GID: {out}");
    metric(&out, "write_bw_4096", "GB/s");
}

#[test]
fn mismatched_server_and_client_fail_cleanly() {
    let port = free_port().to_string();
    let server_port = port.clone();
    let server = std::thread::spawn(move || {
        bench(&["read", "bw", "--addr", "127.84.22.1", "-p", &server_port, "--timeout", "3"])
    });
    let (code, _, err) = bench(&[
        "write",
        "bw",
        "127.84.22.1",
        "--addr",
        "127.84.22.2",
        "-p",
        &port,
        "--timeout",
        "3",
    ]);
    let (scode, _, serr) = server.join().unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("this server `read bw`"), "{err}");
    assert_eq!(scode, 1, "{serr}");
}

#[test]
fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let holder = std::thread::spawn(move || {
        let conn = listener.accept();
        std::thread::sleep(Duration::from_millis(2000));
        drop(conn);
    });
    let started = Instant::now();
    let (code, _, err) = bench(&[
        "write",
        "bw",
        "127.0.0.1",
        "--addr",
        "127.84.21.2",
        "-p",
        &port,
        "--timeout",
        "1",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("said nothing for 1 s"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1900));
    holder.join().unwrap();
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["write"], "required"),
        (&["write", "fast"], "invalid value"),
        (&["write", "bw", "--loopback", "-m", "1000"], "MTU"),
        (&["write", "bw", "--loopback", "-n", "2"], "iters"),
        (&["write", "bw", "--loopback", "-s", "0"], "size"),
        (&["write", "bw", "--loopback", "--qps", "0"], "qps"),
        (&["atomic", "bw", "--loopback", "-s", "64"], "8-byte"),
        (&["write", "lat", "--loopback", "--qps", "2"], "--qps is for bw"),
        (&["write", "bw", "1.2.3.4", "--loopback"], "cannot be used"),
        (&["write", "bw", "--addrs", "127.84.30.1,127.84.30.2"], "--loopback"),
        (&["write", "bw", "--loopback", "--addrs", "127.84.30.1"], "SERVER,CLIENT"),
        (&["write", "bw", "--loopback", "--progress", "warp"], "--progress"),
    ];
    for (args, needle) in cases {
        let (code, out, err) = bench(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(needle), "{args:?}: expected `{needle}` in {err}");
    }
}

#[test]
fn servers_on_two_addresses_share_a_port() {
    // Each server listens on its device's address, not on every address:
    // a second server (bench or another tool) on another address and the
    // same port starts too, and each serves its own clients.
    let port = free_port().to_string();
    let server_at = |addr: &str| {
        let args = ["bench", "write", "bw", "-p", &port, "--timeout", "5"];
        let server = child::spawn("bench_child", CHILD_ENV, &args, &[("UROCE_ADDR", addr.into())]);
        let waiting =
            server.wait_for_line("Waiting for client to connect", Duration::from_secs(15));
        (server, waiting)
    };
    let (first, first_waiting) = server_at("127.84.40.1");
    let (second, second_waiting) = server_at("127.84.40.2");
    let deadline = Instant::now() + Duration::from_secs(30);
    if !(first_waiting && second_waiting) {
        let (first, second) = (first.finish(Instant::now()), second.finish(Instant::now()));
        panic!("both servers must start:\n{}\n{}", first.output(), second.output());
    }
    for (server, client) in [("127.84.40.1", "127.84.40.3"), ("127.84.40.2", "127.84.40.4")] {
        let args = ["write", "bw", server, "--addr", client, "-p", &port, "-n", "20", "-s", "1024"];
        let (code, out, err) = bench(&args);
        assert_eq!(code, 0, "client of {server}:\n{out}\n{err}");
    }
    for server in [first.finish(deadline), second.finish(deadline)] {
        assert_eq!(server.code, Some(0), "{}", server.output());
        assert!(server.stdout.contains("RDMA_Write BW Test"), "{}", server.output());
    }
}

#[test]
fn loopback_counters_name_each_device() {
    let addrs = "127.84.42.1,127.84.42.2";
    let args =
        ["send", "bw", "--loopback", "--addrs", addrs, "-n", "50", "-s", "4096", "--counters"];
    let (code, out, err) = bench(&args);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // 50 SENDs of one 4096-byte packet (path MTU 4096) from the client,
    // ACKs back from the server.
    let server = assert_traffic_counted(&err, "127.84.42.1", 1);
    let client = assert_traffic_counted(&err, "127.84.42.2", 1);
    assert!(client["sent_pkts"] >= 50 && server["rcvd_pkts"] >= 50, "{err}");
    assert_no_counters(&out);
}

#[test]
fn a_capture_file_that_cannot_be_created_fails_before_anything_runs() {
    let path = "/no/such/dir/bench.pcap";
    let started = Instant::now();
    let (code, out, err) = bench(&[
        "write",
        "bw",
        "--loopback",
        "--addrs",
        "127.84.43.1,127.84.43.2",
        "--capture",
        path,
    ]);
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "", "nothing ran");
    assert!(err.contains(&format!("cannot create the capture file {path}")), "{err}");
    assert!(err.contains("No such file or directory"), "{err}");
}

#[test]
fn a_capture_file_that_cannot_be_written_fails_the_run() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here: nothing to test");
        return;
    }
    let args = ["write", "bw", "--loopback", "--addrs", "127.84.44.1,127.84.44.2", "-n", "20"];
    let (code, out, err) = bench(&[&args[..], &["--capture", "/dev/full"]].concat());
    assert_eq!(code, 1, "{out}{err}");
    let why = "uroce bench: could not write the capture file /dev/full: No space left on device";
    assert!(err.contains(why), "{err}");
}
