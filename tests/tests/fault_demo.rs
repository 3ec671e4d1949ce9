//! `examples/c/fault_demo.c` (the C example of docs/fault-testing.md and
//! design note fault-scenarios.md §5), built with cc against the system's
//! `<infiniband/verbs.h>` and run on uroce's `libibverbs.so.1` under
//! `uroce run --scenario NAME --role R --check`: a server and a client,
//! one shared `--report`. Each row asserts what the program printed, its
//! exit status, and the check's verdict. Addresses 127.174.k.1 (server)
//! and .2 (client), TCP ports 18951 and up.

use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::{fault_demo, ibverbs};

const CHILD_ENV: &str = "UROCE_FAULT_DEMO_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn fault_demo_child() {
    child::run_if_child(CHILD_ENV);
}

/// `uroce run --addr ADDR --scenario S --role ROLE --report R --check --
/// PROGRAM...` as a child process.
fn run(addr: &str, scenario: &str, role: &str, report: &str, program: &[&str]) -> Running {
    let lib = ibverbs::library().expect("cargo builds libibverbs.so beside the tests");
    let mut args = vec!["run", "--addr", addr, "--scenario", scenario, "--role", role];
    args.extend_from_slice(&["--report", report, "--check", "--"]);
    args.extend_from_slice(program);
    child::spawn(
        "fault_demo_child",
        CHILD_ENV,
        &args,
        &[("UROCE_LIBIBVERBS", lib.display().to_string())],
    )
}

/// The example as server and client under `scenario`, with `flags`;
/// `None` when skipped.
fn pair(
    test: &str,
    net: &str,
    port: u16,
    scenario: &str,
    flags: &[&str],
) -> Option<(Finished, Finished)> {
    let dir = tempfile::tempdir().unwrap();
    let binary = fault_demo::build(test, dir.path())?;
    let report = dir.path().join("report.txt").display().to_string();
    let port_s = port.to_string();
    let mut program = vec![binary.as_str(), "--port", &port_s, "--timeout", "5"];
    program.extend_from_slice(flags);
    let (server_addr, client_addr) = (format!("{net}.1"), format!("{net}.2"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let server = run(&server_addr, scenario, "server", &report, &program);
    let t0 = Instant::now();
    while !ibverbs::listening(port) {
        assert!(t0.elapsed() < Duration::from_secs(15), "the server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    program.push(&server_addr);
    let client = run(&client_addr, scenario, "client", &report, &program);
    let client = client.finish(deadline);
    let server = server.finish(deadline);
    Some((server, client))
}

fn has(end: &Finished, who: &str, text: &str) {
    assert!(end.output().contains(text), "{who}: no {text:?} in\n{}", end.output());
}

/// Counter `name` on `uroce run`'s summary line `uroce run: counters ...`.
fn counter(end: &Finished, name: &str) -> u64 {
    let out = end.output();
    let line = out.lines().find(|l| l.starts_with("uroce run: counters ")).unwrap_or_else(|| {
        panic!("no counters line in\n{out}");
    });
    line.split_whitespace()
        .filter_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .map(|v| v.parse().unwrap())
        .next()
        .unwrap_or(0)
}

/// The `F flushed, P not posted` after `prefix` on the client's tally line.
fn tally(end: &Finished, prefix: &str) -> (u32, u32) {
    let out = end.output();
    let rest = out.split(prefix).nth(1).unwrap_or_else(|| panic!("no {prefix:?} in\n{out}"));
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| words[i].trim_end_matches(',').parse::<u32>().unwrap();
    assert_eq!((words[1], words[3], words[4]), ("flushed,", "not", "posted"), "{out}");
    (number(0), number(2))
}

#[test]
fn rnr_retry_exceeded_with_rnr_retry_3_fails_the_send_and_flushes_the_rest() {
    let test = "rnr_retry_exceeded_with_rnr_retry_3_fails_the_send_and_flushes_the_rest";
    let flags = ["--op", "send", "--iters", "20", "--rnr-retry", "3"];
    let Some((server, client)) = pair(test, "127.174.1", 18951, "rnr-retry-exceeded", &flags)
    else {
        return;
    };
    // The 10th SEND (wr_id 9) fails after 4 RNR NAKs; those posted behind
    // it (up to 7: depth 8) are flushed, the rest never posted.
    assert_eq!(client.code, Some(3), "{client:#?}\n{server:#?}");
    has(&client, "client", "client: error: wr_id 9 status IBV_WC_RNR_RETRY_EXC_ERR (13)");
    let (flushed, not_posted) = tally(&client, "client: send: 9 ok, 1 error, ");
    assert!(flushed >= 1 && flushed + not_posted == 10, "{}", client.output());
    has(&client, "client", "client: outcome: IBV_WC_RNR_RETRY_EXC_ERR\n");
    has(&client, "client", "client: exit 3");
    has(&client, "client", "uroce run: fault_demo exited with status 3");
    has(&client, "client", "check ok: status = \"IBV_WC_RNR_RETRY_EXC_ERR\"");
    has(&client, "client", "check ok: rcvd_rnr_err >= 1");
    has(&client, "client", "check: rnr-retry-exceeded passed");
    // Exactly rnr_retry + 1 RNR NAKs: not one retry more or less.
    assert_eq!(counter(&client, "rcvd_rnr_err"), 4, "{}", client.output());
    // The server got nine, its QP still fine.
    assert_eq!(server.code, Some(0), "{server:#?}");
    has(&server, "server", "server: 9 received, 0 error, 0 flushed");
    has(&server, "server", "server: outcome: success");
    has(&server, "server", "check ok: send_rnr_err >= 1");
    has(&server, "server", "check: rnr-retry-exceeded passed");
    assert_eq!(counter(&server, "send_rnr_err"), 4, "{}", server.output());
}

#[test]
fn remote_access_error_fails_the_write_flushes_the_rest_and_cleans_up() {
    let test = "remote_access_error_fails_the_write_flushes_the_rest_and_cleans_up";
    let flags = ["--op", "write", "--iters", "20"];
    let Some((server, client)) = pair(test, "127.174.2", 18952, "remote-access-error", &flags)
    else {
        return;
    };
    assert_eq!(client.code, Some(3), "{client:#?}\n{server:#?}");
    has(&client, "client", "client: error: wr_id 4 status IBV_WC_REM_ACCESS_ERR (10)");
    // wr_id 5..7 were posted with it (depth 8): at least those flushed.
    let (flushed, not_posted) = tally(&client, "client: write: 4 ok, 1 error, ");
    assert!(flushed >= 3 && flushed + not_posted == 15, "{}", client.output());
    has(&client, "client", "client: outcome: IBV_WC_REM_ACCESS_ERR\n");
    has(&client, "client", "client: exit 3");
    has(&client, "client", "check ok: status = \"IBV_WC_REM_ACCESS_ERR\"");
    has(&client, "client", "check: remote-access-error passed");
    // The server's QP went to ERR with IBV_EVENT_QP_ACCESS_ERR, read and
    // acknowledged; no completion of its own failed.
    assert_eq!(server.code, Some(6), "{server:#?}");
    has(&server, "server", "server: async event IBV_EVENT_QP_ACCESS_ERR on our QP");
    has(&server, "server", "server: outcome: QP in error");
    has(&server, "server", "server: exit 6");
    has(&server, "server", "check ok: injected_key_fail >= 1");
    // The device raised it (the report's async_event line, on the QP the
    // rule fired on, at the firing's time), and the check of the file's
    // `async_event` saw it.
    has(&server, "server", "uroce run:   IBV_EVENT_QP_ACCESS_ERR qp=0x");
    has(
        &server,
        "server",
        "check ok: async_event = \"IBV_EVENT_QP_ACCESS_ERR\": IBV_EVENT_QP_ACCESS_ERR=1, the first on qp=0x",
    );
    let out = server.output();
    let line = out.lines().find(|l| l.contains("check ok: async_event")).unwrap_or("");
    assert!(line.ends_with(" ms after the first firing)") && line.contains("(+"), "{line}");
    has(&server, "server", "check: remote-access-error passed (5 expectations)");
    // The client's QP went to ERR by the NAK, not by an error of its own:
    // no asynchronous event beyond the port's.
    has(&client, "client", "uroce run: async events IBV_EVENT_PORT_ACTIVE=1\n");
}

#[test]
fn duplicate_atomics_run_once_each() {
    let test = "duplicate_atomics_run_once_each";
    let flags = ["--op", "atomic", "--iters", "50"];
    let Some((server, client)) = pair(test, "127.174.3", 18953, "duplicate-atomics", &flags) else {
        return;
    };
    assert_eq!(client.code, Some(0), "{client:#?}\n{server:#?}");
    has(&client, "client", "client: atomic: 50 ok, 0 error, 0 flushed, 0 not posted");
    has(&client, "client", "client: atomics: 50 old values, all unique; counter 50");
    has(&client, "client", "client: outcome: success");
    has(&client, "client", "check: duplicate-atomics passed");
    assert_eq!(server.code, Some(0), "{server:#?}");
    has(&server, "server", "counter 50");
    has(&server, "server", "check ok: duplicate_request >= 1");
    has(&server, "server", "check: duplicate-atomics passed");
}

#[test]
fn implied_nak_reads_succeed() {
    let test = "implied_nak_reads_succeed";
    let flags = ["--op", "read", "--iters", "20", "--size", "16384"];
    let Some((server, client)) = pair(test, "127.174.4", 18954, "implied-nak", &flags) else {
        return;
    };
    assert_eq!(client.code, Some(0), "{client:#?}\n{server:#?}");
    has(&client, "client", "client: read: 20 ok, 0 error, 0 flushed, 0 not posted");
    has(&client, "client", "client: outcome: success");
    has(&client, "client", "rule lost-read-response fired 1: drop");
    has(&client, "client", "check ok: completer_retry_err >= 1");
    has(&client, "client", "check: implied-nak passed");
    assert_eq!(server.code, Some(0), "{server:#?}");
    has(&server, "server", "check: implied-nak passed");
}
