//! `uroce opcodes` as two processes, as rxe-opcodes runs: the test binary
//! runs itself twice (the child test below), once as the server and once
//! as the client, each with its own device address (127.89.x.1 and
//! 127.89.x.2) and a TCP port of its own. Every step's completion and data
//! must pass on both sides at path MTU 1024 and 4096; a corrupted payload
//! (the hidden `--corrupt-step`) must be caught by the side that receives
//! it, and the client must report the server's verdict.

use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::report::{assert_no_counters, assert_traffic_counted};

/// The child's arguments (after `uroce`), separated by [`SEP`]; absent in
/// the parent.
const CHILD_ENV: &str = "UROCE_OPCODES_CHILD";
/// How long a pair may run before both are killed.
const PAIR_LIMIT: Duration = Duration::from_secs(90);
/// The steps (`steps[]` in rxe-opcodes.c).
const STEPS: usize = 26;
/// Steps that take one of the server's receives.
const RECEIVES: usize = 14;
/// WRITE steps whose target the server checks.
const TARGETS: usize = 9;
/// Steps the client checks itself (READs, atomics, the RNR retry).
const CLIENT_CHECKS: usize = 8;

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn opcodes_child() {
    child::run_if_child(CHILD_ENV);
}

fn spawn(addr: &str, args: &[String]) -> Running {
    child::spawn("opcodes_child", CHILD_ENV, args, &[("UROCE_ADDR", addr.to_string())])
}

/// Runs a server at `net.1` and a client at `net.2` (`net` like
/// `127.89.1`), each with its own extra flags; returns (server, client).
fn run_pair(
    net: &str,
    port: u16,
    server_flags: &[&str],
    client_flags: &[&str],
) -> (Finished, Finished) {
    let server_addr = format!("{net}.1");
    let client_addr = format!("{net}.2");
    // A side left behind by a failed test stops by itself.
    let common =
        ["opcodes", "-g", "1", "-p", &port.to_string(), "--timeout", "30"].map(String::from);
    let server_args: Vec<String> =
        common.iter().cloned().chain(server_flags.iter().map(|f| f.to_string())).collect();
    let client_args: Vec<String> = common
        .iter()
        .cloned()
        .chain(client_flags.iter().map(|f| f.to_string()))
        .chain([server_addr.clone()])
        .collect();
    let deadline = Instant::now() + PAIR_LIMIT;
    let server = spawn(&server_addr, &server_args);
    if !server.wait_for_line("waiting for client on tcp port", Duration::from_secs(20)) {
        let server = server.finish(Instant::now());
        panic!("the server never listened: {server:#?}");
    }
    let client = spawn(&client_addr, &client_args);
    let client = client.finish(deadline);
    let server = server.finish(deadline);
    (server, client)
}

fn count(text: &str, pattern: &str) -> usize {
    text.lines().filter(|l| l.contains(pattern)).count()
}

/// The line containing `marker`.
fn line_with<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines().find(|l| l.contains(marker))
}

/// Both sides exited 0 after every step and every check.
fn assert_clean(server: &Finished, client: &Finished, mtu: u32) {
    assert_eq!(server.code, Some(0), "server: {server:#?}\nclient: {client:#?}");
    assert_eq!(client.code, Some(0), "client: {client:#?}\nserver: {server:#?}");
    for (who, end) in [("server", server), ("client", client)] {
        assert_eq!(count(&end.stdout, "CHECK FAILED"), 0, "{who}: {}", end.stdout);
        let local = line_with(&end.stdout, "local  RC 0x").expect("the local line");
        assert!(local.ends_with(&format!(" mtu {mtu}")), "{who}: {local}");
        assert!(
            end.stdout.ends_with(&format!("{who}: OK (0 failures)\n")),
            "{who}: {}",
            end.stdout
        );
    }
    // The client ran every step, checked its READs, atomics and the RNR
    // retry, and heard the server's verdict.
    assert_eq!(count(&client.stdout, "STEP "), STEPS, "{}", client.stdout);
    assert_eq!(count(&client.stdout, "CHECK step"), CLIENT_CHECKS, "{}", client.stdout);
    assert!(client.stdout.contains("server reported 0 failures"), "{}", client.stdout);
    let naks = line_with(&client.stdout, "rnr naks received: ").expect("the RNR line");
    let naks: u64 = naks.rsplit(' ').next().and_then(|n| n.parse().ok()).expect("a count");
    assert!(naks >= 1, "{naks}");
    let big = 3000 * mtu / 1024;
    for (step, len) in [
        ("STEP 20 RC RDMA_READ only ", mtu),
        ("STEP 21 RC RDMA_READ multi ", big),
        ("STEP  8 RC SEND_WITH_IMM multi ", big),
    ] {
        let line = line_with(&client.stdout, step).unwrap_or_else(|| panic!("no {step}"));
        assert!(line.ends_with(&format!(" len={len}")), "{line}");
    }
    assert!(client.stdout.contains("status=remote access error"), "{}", client.stdout);
    // The server checked every receive, every WRITE target, the atomics.
    assert_eq!(count(&server.stdout, " receive OK"), RECEIVES, "{}", server.stdout);
    assert_eq!(count(&server.stdout, " target OK"), TARGETS, "{}", server.stdout);
    assert!(server.stdout.contains("CHECK atomic words OK"), "{}", server.stdout);
    assert_eq!(count(&server.stdout, "bound MW type 2 rkey"), 2, "{}", server.stdout);
    assert!(server.stdout.contains("RNR window"), "{}", server.stdout);
}

#[test]
fn every_step_passes_both_ways_at_mtu_1024() {
    let (server, client) = run_pair("127.89.1", 18611, &["--counters"], &["--counters"]);
    assert_clean(&server, &client, 1024);
    // Each side's counters on its standard error: the RNR step and the bad
    // rkey step show on both.
    let server_hca = assert_traffic_counted(&server.stderr, "127.89.1.1", 26);
    let client_hca = assert_traffic_counted(&client.stderr, "127.89.1.2", 26);
    assert!(server_hca.get("send_rnr_err").is_some_and(|&n| n >= 1), "{server_hca:?}");
    assert!(client_hca.get("rcvd_rnr_err").is_some_and(|&n| n >= 1), "{client_hca:?}");
    assert!(server_hca.get("send_nak").is_some_and(|&n| n >= 1), "{server_hca:?}");
    assert_no_counters(&server.stdout);
    assert_no_counters(&client.stdout);
}

#[test]
fn every_step_passes_both_ways_at_mtu_4096() {
    let (server, client) = run_pair("127.89.2", 18612, &["-m", "4096"], &["-m", "4096"]);
    assert_clean(&server, &client, 4096);
    assert_no_counters(&server.output());
    assert_no_counters(&client.output());
}

#[test]
fn a_capture_file_that_cannot_be_created_fails_before_anything_runs() {
    let path = "/no/such/dir/opcodes.pcap";
    let started = Instant::now();
    let args = ["opcodes", "-g", "1", "--capture", path, "127.89.6.1"].map(String::from);
    let end = spawn("127.89.6.2", &args).finish(started + PAIR_LIMIT);
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    assert_eq!(end.code, Some(2), "{end:#?}");
    assert!(end.stderr.contains(&format!("cannot create the capture file {path}")), "{end:#?}");
    assert!(!end.stdout.contains("STEP"), "{end:#?}");
}

#[test]
fn a_corrupted_send_and_write_are_caught_by_the_server_and_reported_to_the_client() {
    // Step 8 is the RC SEND_WITH_IMM multi, step 18 the RC RDMA_WRITE multi
    // (3000 bytes each): the client flips byte 1500 of each before posting.
    let (server, client) = run_pair("127.89.3", 18613, &[], &["--corrupt-step", "8,18"]);
    assert_eq!(server.code, Some(1), "server: {server:#?}");
    assert_eq!(client.code, Some(1), "client: {client:#?}");
    for step in [8, 18] {
        let line = format!("(corrupting byte 1500 of the payload of step {step})");
        assert!(client.stdout.contains(&line), "{}", client.stdout);
    }
    let send = line_with(&server.stdout, "CHECK FAILED: step 8 received data: byte 1500 is 0x")
        .unwrap_or_else(|| panic!("the SEND was not caught: {}", server.stdout));
    assert!(send.ends_with("(1 of 3000 bytes differ)"), "{send}");
    let write = line_with(&server.stdout, "CHECK FAILED: step 18 target: byte 1500 is 0x")
        .unwrap_or_else(|| panic!("the WRITE was not caught: {}", server.stdout));
    assert!(write.ends_with("(1 of 3000 bytes differ)"), "{write}");
    assert!(server.stdout.contains("receive FAILED"), "{}", server.stdout);
    assert_eq!(count(&server.stdout, "CHECK FAILED"), 2, "{}", server.stdout);
    assert!(server.stdout.ends_with("server: FAILED (2 failures)\n"), "{}", server.stdout);
    // Every completion was fine; the client fails on the server's word.
    assert!(client.stdout.contains("server reported 2 failures"), "{}", client.stdout);
    assert!(client.stdout.ends_with("client: FAILED (1 failures)\n"), "{}", client.stdout);
}

#[test]
fn a_corrupted_read_source_is_caught_by_the_client() {
    // Step 21 is the RC RDMA_READ multi: the server flips byte 1500 of it.
    let (server, client) = run_pair("127.89.4", 18614, &["--corrupt-step", "21"], &[]);
    assert_eq!(client.code, Some(1), "client: {client:#?}");
    assert_eq!(server.code, Some(0), "server: {server:#?}");
    let read = line_with(&client.stdout, "CHECK FAILED: step 21 data read: byte 1500 is 0x")
        .unwrap_or_else(|| panic!("the READ was not caught: {}", client.stdout));
    assert!(read.ends_with("(1 of 3000 bytes differ)"), "{read}");
    assert!(client.stdout.contains("CHECK step 21 RC RDMA_READ multi             FAILED"));
    assert!(client.stdout.ends_with("client: FAILED (1 failures)\n"), "{}", client.stdout);
}

#[test]
fn sides_with_different_mtus_stop_before_any_rdma() {
    let (server, client) = run_pair("127.89.5", 18615, &["-m", "1024"], &["-m", "512"]);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(2), "{who}: {end:#?}");
        assert!(end.stderr.contains("the peer runs other steps"), "{who}: {end:#?}");
        assert!(
            !end.stdout.contains("STEP") && !end.stdout.contains("bound MW"),
            "{who}: {end:#?}"
        );
    }
}

#[test]
fn bad_flags_are_refused() {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = uroce::cli::run(["uroce", "opcodes", "-m", "1500"], &mut out, &mut err);
    assert_eq!(code, 2);
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("-m 1500: the path MTU is 256, 512, 1024, 2048 or 4096"), "{err}");
}

#[test]
fn the_listing_is_the_c_programs() {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = uroce::cli::run(["uroce", "opcodes", "-L", "-m", "4096"], &mut out, &mut err);
    assert_eq!(code, 0);
    let out = String::from_utf8_lossy(&out);
    // `rxe-opcodes -L -m 4096`, first and last lines.
    assert!(out.starts_with(
        "rxe-opcodes exchange v2, path MTU 4096, 26 steps, fingerprint 0xb1ef3df3\n \
         1 UD SEND_WITH_IMM               len=256\n"
    ));
    assert!(out.ends_with("26 RC RDMA_WRITE bad rkey         len=64\n"), "{out}");
}
