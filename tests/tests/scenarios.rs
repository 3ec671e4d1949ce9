//! The scenario library (design note fault-scenarios.md §5, step 11):
//! every library scenario run under `uroce run --scenario NAME --check`
//! against the tool §5 names — `uroce pingpong` (this test binary run as
//! the command, through a `uroce` wrapper script) for ibv_rc_pingpong's
//! rows, Debian's perftest (`ib_read_bw`, `ib_atomic_bw`, `ib_write_bw`) on
//! uroce's `libibverbs.so.1` for the READ, atomic and WRITE rows, the C
//! example `examples/c/fault_demo.c` where a finite `rnr_retry` is needed — as a
//! server (127.173.k.1) and a client (127.173.k.2), TCP port 18980 + k,
//! one report shared by both (so `within_ms` measures from the other
//! side's firing). Each row asserts both exit statuses and which sides'
//! checks passed (`--role server`/`client`: the file's `[expect.server]`/
//! `[expect.client]`; no role: its `[expect]`). `uroce pingpong` sends from
//! both ends, stop-and-wait, so its rows also assert, on both devices, the
//! counters the files give one side only or leave to stop-and-wait
//! programs (read from the shared report). A survivor is stopped (SIGTERM,
//! forwarded to the program) after 15 s. Missing perftest: the row skips,
//! or fails under CI=true.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use uroce_tests::{child, fault_demo, ibverbs};

const CHILD_ENV: &str = "UROCE_SCENARIOS_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn scenarios_child() {
    child::run_if_child(CHILD_ENV);
}

/// The program a row runs.
#[derive(Clone, Copy)]
enum Tool {
    /// `uroce pingpong -g 1` and these flags.
    Pingpong(&'static [&'static str]),
    /// A perftest binary, `-x 1` and these flags.
    Perftest(&'static str, &'static [&'static str]),
    /// `examples/c/fault_demo.c` (built here with cc) and these flags.
    FaultDemo(&'static [&'static str]),
}

/// One side of a row: its `uroce run` flags beyond the scenario, whether
/// it checks, and the exit status `uroce run` must return.
#[derive(Clone, Copy)]
struct Side {
    flags: &'static [&'static str],
    role: Option<&'static str>,
    check: bool,
    code: i32,
}

const OK: Side = Side { flags: &[], role: None, check: true, code: 0 };

/// One process, ended.
#[derive(Debug)]
struct Ended {
    code: Option<i32>,
    stopped: bool,
    #[allow(dead_code)] // shown by Debug when a row fails
    stdout: String,
    stderr: String,
}

/// Starts `uroce run ARGS` (the wrapper), output to files in `dir`.
fn start(uroce: &Path, dir: &Path, who: &str, args: &[String]) -> Child {
    let lib = ibverbs::library().expect("cargo builds libibverbs.so beside the tests");
    let out = std::fs::File::create(dir.join(format!("{who}.out"))).unwrap();
    let err = std::fs::File::create(dir.join(format!("{who}.err"))).unwrap();
    let mut command = Command::new(uroce);
    command.args(args).env("UROCE_LIBIBVERBS", lib);
    for name in
        ["UROCE_ADDR", "UROCE_FAULTS", "UROCE_CAPTURE", "UROCE_LINK", "UROCE_MTU", "UROCE_TAP"]
    {
        command.env_remove(name);
    }
    command.stdin(Stdio::null()).stdout(out).stderr(err).spawn().expect("start uroce run")
}

/// Waits for `child` until `deadline`; then SIGTERM (which `uroce run`
/// forwards to its program), and SIGKILL a second later.
fn finish(mut child: Child, deadline: Instant, dir: &Path, who: &str) -> Ended {
    let mut stopped = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline && !stopped {
            stopped = true;
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let grace = Instant::now() + Duration::from_secs(1);
            while child.try_wait().unwrap().is_none() && Instant::now() < grace {
                std::thread::sleep(Duration::from_millis(10));
            }
            if child.try_wait().unwrap().is_none() {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{who}.{ext}"))).unwrap();
    Ended { code: status.code(), stopped, stdout: read("out"), stderr: read("err") }
}

/// Runs `name` as a server and a client, checks both ends.
fn row(k: u16, name: &str, tool: Tool, params: &[&str], server: Side, client: Side) {
    row_also(k, name, tool, params, server, client, &[]);
}

/// [`row`], and each of `also` (a counter and its minimum) on both
/// devices' summaries in the shared report.
fn row_also(
    k: u16,
    name: &str,
    tool: Tool,
    params: &[&str],
    server: Side,
    client: Side,
    also: &[(&str, u64)],
) {
    let test = format!("scenarios::{}", name.replace('-', "_"));
    let built = tempfile::tempdir().unwrap();
    let (program, flags): (String, Vec<&str>) = match tool {
        Tool::Perftest(bin, flags) => {
            let found = ibverbs::tool(bin);
            if !ibverbs::require(&test, found.is_some(), &format!("no {bin} (Debian's perftest)")) {
                return;
            }
            let mut all = vec!["-x", "1"];
            all.extend_from_slice(flags);
            (found.unwrap().display().to_string(), all)
        }
        Tool::Pingpong(flags) => {
            let mut all = vec!["-g", "1"];
            all.extend_from_slice(flags);
            (String::new(), all)
        }
        Tool::FaultDemo(flags) => {
            let Some(binary) = fault_demo::build(&test, built.path()) else { return };
            (binary, flags.to_vec())
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let uroce = child::uroce_wrapper(dir.path(), "scenarios_child", CHILD_ENV);
    let report = dir.path().join("report.txt");
    let net = format!("127.173.{k}");
    let port = 18980 + k;
    let args = |side: &Side, addr: &str, peer: Option<&str>| -> Vec<String> {
        let mut a: Vec<String> = vec!["run".into(), "--addr".into(), addr.into()];
        a.extend(["--scenario", name, "--report"].map(String::from));
        a.push(report.display().to_string());
        for p in params {
            a.extend(["--param".to_owned(), (*p).to_owned()]);
        }
        if let Some(r) = side.role {
            a.extend(["--role".to_owned(), r.to_owned()]);
        }
        if side.check {
            a.push("--check".into());
        }
        a.push("--".into());
        if program.is_empty() {
            a.extend([uroce.display().to_string(), "pingpong".into()]);
        } else {
            a.push(program.clone());
        }
        a.extend(flags.iter().map(|f| (*f).to_owned()));
        a.extend(side.flags.iter().map(|f| (*f).to_owned()));
        a.extend(["-p".to_owned(), port.to_string()]);
        a.extend(peer.map(str::to_owned));
        a
    };
    let (server_addr, client_addr) = (format!("{net}.1"), format!("{net}.2"));
    let t0 = Instant::now();
    let s = start(&uroce, dir.path(), "server", &args(&server, &server_addr, None));
    while !ibverbs::listening(port) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = start(&uroce, dir.path(), "client", &args(&client, &client_addr, Some(&server_addr)));
    let deadline = Instant::now() + Duration::from_secs(15);
    let c = finish(c, deadline, dir.path(), "client");
    let s = finish(s, deadline, dir.path(), "server");
    eprintln!("{test}: {:.1} s", t0.elapsed().as_secs_f64());
    for (who, side, end) in [("server", &server, &s), ("client", &client, &c)] {
        let all = format!(
            "{name} {who}: {end:#?}\nthe other: {:#?}",
            if who == "server" { &c } else { &s }
        );
        assert!(!end.stopped, "{all}");
        assert_eq!(end.code, Some(side.code), "{all}");
        assert!(end.stderr.contains(&format!("uroce run: scenario {name} ")), "{all}");
        if side.check {
            let passed = format!("uroce run: check: {name} passed");
            assert!(end.stderr.contains(&passed), "{all}");
        }
    }
    // The scenario did something: a firing in the (shared) report.
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.lines().any(|l| l.contains(" fired ")), "no firing: {text}");
    let parsed = uroce::scenario_check::Report::parse(&text, 0);
    for (who, addr) in [("server", &server_addr), ("client", &client_addr)] {
        let summary = parsed.summary_of(addr.parse().unwrap());
        for &(counter, min) in also {
            let n = summary.as_ref().map(|s| s.counter(counter));
            assert!(n.is_some_and(|n| n >= min), "{name} {who}: {counter}={n:?} < {min}\n{text}");
        }
    }
}

const PERF_READ: &[&str] = &["-s", "65536", "-n", "100"];
const PERF_N: &[&str] = &["-n", "100"];
const PERF_WRITE: &[&str] = &["-s", "4096", "-n", "100"];
const PP: &[&str] = &["-n", "100"];
const SERVER: Option<&str> = Some("server");
const CLIENT: Option<&str> = Some("client");
/// `--role server` and `--role client`, both checked, both exit 0.
const ROLES: (Side, Side) = (Side { role: SERVER, ..OK }, Side { role: CLIENT, ..OK });
/// A server left waiting by a dead link: gives up after 3 s, unchecked
/// (whether its last reply's ACK was cut, an error, is a matter of timing:
/// the files have no expectation for it).
const WAITING: Side = Side { flags: &["--timeout", "3"], role: None, check: false, code: 1 };

#[test]
fn lost_ack() {
    // Stop-and-wait: each end's lost ACK is covered by no later one, so
    // each retransmits and each answers a duplicate ([expect]'s observe).
    let also = &[("completer_retry_err", 1), ("duplicate_request", 1)];
    row_also(1, "lost-ack", Tool::Pingpong(PP), &[], OK, OK, also);
}

#[test]
fn lost_ack_streaming() {
    // ib_send_bw: the server receives no ACK, the client's lost one is
    // covered by a later ACK: [expect] (no counters) holds on both.
    row(20, "lost-ack", Tool::Perftest("ib_send_bw", PERF_N), &[], OK, OK);
}

#[test]
fn lost_last_ack() {
    let also = &[("completer_retry_err", 1), ("duplicate_request", 1)];
    row_also(2, "lost-last-ack", Tool::Pingpong(PP), &["messages=100"], OK, OK, also);
}

#[test]
fn implied_nak_read() {
    let (s, c) = ROLES;
    row(3, "implied-nak", Tool::Perftest("ib_read_bw", PERF_READ), &[], s, c);
}

#[test]
fn implied_nak_atomic() {
    let (s, c) = ROLES;
    row(4, "implied-nak", Tool::Perftest("ib_atomic_bw", PERF_N), &[], s, c);
}

#[test]
fn rnr_retry() {
    // Both ends send and receive: each NAKs and is NAKed three times.
    let (s, c) = ROLES;
    let also = &[("send_rnr_err", 3), ("rcvd_rnr_err", 3)];
    row_also(5, "rnr-retry", Tool::Pingpong(PP), &[], s, c, also);
}

#[test]
fn rnr_retry_one_way() {
    // ib_send_bw: the server only NAKs, the client is only NAKed.
    let (s, c) = ROLES;
    row(22, "rnr-retry", Tool::Perftest("ib_send_bw", PERF_N), &[], s, c);
}

#[test]
fn rnr_storm() {
    let (s, c) = ROLES;
    let also = &[("send_rnr_err", 1), ("rcvd_rnr_err", 1)];
    row_also(6, "rnr-storm", Tool::Pingpong(PP), &[], s, c, also);
}

#[test]
fn rnr_storm_one_way() {
    let (s, c) = ROLES;
    row(25, "rnr-storm", Tool::Perftest("ib_send_bw", PERF_N), &[], s, c);
}

#[test]
fn rnr_retry_exceeded() {
    // The tools' rnr_retry 7 never runs out: the C example with a finite
    // one (tests/tests/fault_demo.rs checks its output in detail). The
    // client exits 3 (a completion in error), both checks pass.
    let (s, c) = (Side { role: SERVER, ..OK }, Side { role: CLIENT, code: 3, ..OK });
    let flags = &["--op", "send", "--iters", "20", "--rnr-retry", "3", "--timeout", "5"];
    row(7, "rnr-retry-exceeded", Tool::FaultDemo(flags), &[], s, c);
}

#[test]
fn retry_exceeded() {
    let client = Side { code: 1, ..OK };
    row(8, "retry-exceeded", Tool::Pingpong(PP), &[], WAITING, client);
}

#[test]
fn remote_access_error() {
    // ib_write_bw fails on both ends (exit 1); both checks pass.
    let (s, c) = (Side { role: SERVER, code: 1, ..OK }, Side { role: CLIENT, code: 1, ..OK });
    row(9, "remote-access-error", Tool::Perftest("ib_write_bw", PERF_WRITE), &[], s, c);
}

#[test]
fn remote_op_error() {
    let (s, c) = (Side { role: SERVER, code: 1, ..OK }, Side { role: CLIENT, code: 1, ..OK });
    row(10, "remote-op-error", Tool::Perftest("ib_write_bw", PERF_WRITE), &[], s, c);
}

#[test]
fn ghost_responses() {
    // Both ends send, so both receive responses, and both count ghosts.
    let (s, c) = ROLES;
    let pp = Tool::Pingpong(&["-n", "100", "-c"]);
    row_also(11, "ghost-responses", pp, &[], s, c, &[("rcvd_ghost_response", 1)]);
}

#[test]
fn ghost_responses_read() {
    // The server only answers READs: it receives no response ([expect.server]).
    let (s, c) = ROLES;
    let flags = &["--op", "read", "--iters", "20", "--timeout", "5"];
    row(21, "ghost-responses", Tool::FaultDemo(flags), &[], s, c);
}

#[test]
fn duplicate_atomics() {
    let (s, c) = ROLES;
    row(12, "duplicate-atomics", Tool::Perftest("ib_atomic_bw", PERF_N), &[], s, c);
}

#[test]
fn reorder_in_message() {
    let (s, c) = ROLES;
    let pp = Tool::Pingpong(&["-n", "100", "-s", "8192", "-c"]);
    let also = &[("out_of_seq_request", 1), ("rcvd_seq_err", 1)];
    row_also(13, "reorder-in-message", pp, &[], s, c, also);
}

#[test]
fn reorder_in_message_write() {
    // ib_write_bw: the server only receives, the client only sends.
    let (s, c) = ROLES;
    let pt = Tool::Perftest("ib_write_bw", &["-s", "65536", "-n", "100"]);
    row(24, "reorder-in-message", pt, &[], s, c);
}

#[test]
fn partition_heals() {
    // Both ends receive SENDs: two cuts, and each end retransmits.
    let (s, c) = ROLES;
    row_also(14, "partition-heals", Tool::Pingpong(PP), &[], s, c, &[("completer_retry_err", 1)]);
}

#[test]
fn partition_heals_one_way() {
    let (s, c) = ROLES;
    row(23, "partition-heals", Tool::Perftest("ib_send_bw", PERF_N), &[], s, c);
}

#[test]
fn partition_outlasts_retries() {
    let client = Side { code: 1, ..OK };
    row(15, "partition-outlasts-retries", Tool::Pingpong(PP), &[], WAITING, client);
}

#[test]
fn peer_crash() {
    // The server is killed (uroce run: 128 + 9); the client's check
    // measures from the server's firing, in the shared report.
    let server = Side { role: SERVER, code: 137, ..OK };
    let client = Side { role: CLIENT, code: 1, ..OK };
    row(16, "peer-crash", Tool::Pingpong(PP), &[], server, client);
}

/// Every library scenario (`uroce scenarios`) has a row above.
#[test]
fn every_library_scenario_has_a_row() {
    let mut out = Vec::new();
    let code = uroce::cli::run(["uroce", "scenarios"], &mut out, &mut Vec::new());
    assert_eq!(code, 0);
    let list = String::from_utf8(out).unwrap();
    let source = include_str!("scenarios.rs");
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        assert!(source.contains(&format!(", \"{name}\", ")), "no row for {name}");
    }
}
