//! `uroce run --scenario ... [--check] -- PROGRAM` (design note
//! fault-scenarios.md step 8): the program runs as a child, the summary
//! of the scenario's report is printed after it, and `--check` compares it
//! with the scenario's `[expect]`. Programs: `uroce pingpong` (this test
//! binary run as the command, through a `uroce` wrapper script) and
//! Debian's `ibv_rc_pingpong` on uroce's `libibverbs.so.1`. Addresses
//! 127.172.k.1 (server) and .2 (client), TCP ports 18931 and up.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::ibverbs;

const CHILD_ENV: &str = "UROCE_SCENARIO_CLI_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn scenario_cli_child() {
    child::run_if_child(CHILD_ENV);
}

/// `uroce run --addr ADDR FLAGS -- PROGRAM...` as a child process.
fn run(addr: &str, flags: &[&str], program: &[&str]) -> Running {
    run_env(addr, flags, program, &[])
}

/// [`run`] with more variables in its environment.
fn run_env(addr: &str, flags: &[&str], program: &[&str], env: &[(&str, String)]) -> Running {
    let lib = ibverbs::library().expect("cargo builds libibverbs.so beside the tests");
    let mut args = vec!["run", "--addr", addr];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(program);
    let mut vars = vec![("UROCE_LIBIBVERBS", lib.display().to_string())];
    vars.extend(env.iter().cloned());
    child::spawn("scenario_cli_child", CHILD_ENV, &args, &vars)
}

/// The `uroce` wrapper script in `dir` (this test binary as the command).
fn wrapper(dir: &Path) -> String {
    child::uroce_wrapper(dir, "scenario_cli_child", CHILD_ENV).display().to_string()
}

/// A server and a client, each `uroce run FLAGS -- PROGRAM ARGS [server]`,
/// the client started once the server listens.
fn pair(
    net: &str,
    port: u16,
    server_flags: &[&str],
    client_flags: &[&str],
    server_program: &[&str],
    client_program: &[&str],
) -> (Finished, Finished) {
    let (server, client) =
        ((server_flags, server_program, &[][..]), (client_flags, client_program, &[][..]));
    pair_env(net, port, server, client)
}

/// A side of [`pair_env`]: its flags, its program, its variables.
type Side<'a> = (&'a [&'a str], &'a [&'a str], &'a [(&'a str, String)]);

/// [`pair`] with each side's variables.
fn pair_env(net: &str, port: u16, server: Side<'_>, client: Side<'_>) -> (Finished, Finished) {
    let ((server_flags, server_program, server_env), (client_flags, client_program, client_env)) =
        (server, client);
    let (server_addr, client_addr) = (format!("{net}.1"), format!("{net}.2"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let server = run_env(&server_addr, server_flags, server_program, server_env);
    let t0 = Instant::now();
    while !ibverbs::listening(port) {
        assert!(t0.elapsed() < Duration::from_secs(15), "the server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut program = client_program.to_vec();
    program.push(&server_addr);
    let client = run_env(&client_addr, client_flags, &program, client_env);
    let client = client.finish(deadline);
    let server = server.finish(deadline);
    (server, client)
}

fn uroce_pingpong<'a>(uroce: &'a str, port: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![uroce, "pingpong", "-g", "1", "-p", port];
    v.extend_from_slice(more);
    v
}

#[test]
fn lost_ack_on_two_uroce_pingpongs_passes_the_check_and_prints_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let uroce = wrapper(dir.path());
    let flags = ["--scenario", "lost-ack", "--check"];
    let program = uroce_pingpong(&uroce, "18931", &["-n", "100"]);
    let (server, client) = pair("127.172.1", 18931, &flags, &flags, &program, &program);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(0), "{who}: {end:#?}");
        let e = &end.stderr;
        assert!(e.contains("uroce run: uroce exited with status 0"), "{who}: {e}");
        assert!(e.contains("uroce run: scenario lost-ack seed 0 at 127.172.1."), "{who}: {e}");
        assert!(e.contains(" 1 firing in "), "{who}: {e}");
        assert!(e.contains("rule lost-ack fired 1: drop"), "{who}: {e}");
        assert!(e.contains("uroce run: completions success="), "{who}: {e}");
        assert!(e.contains(" errors=0 first_error=none"), "{who}: {e}");
        // One summary: the wrapper's, the port's lines in it; the library
        // writes its own to the report only.
        assert_eq!(e.matches("completions success=").count(), 1, "{who}: {e}");
        assert!(e.contains("uroce run: rule lost-ack matched "), "{who}: {e}");
        assert!(e.contains("uroce run: packets in="), "{who}: {e}");
        // The device's asynchronous events (PORT_ACTIVE as it opened) and
        // the runtime's counters.
        assert!(e.contains("uroce run: async events IBV_EVENT_PORT_ACTIVE=1\n"), "{who}: {e}");
        assert!(e.contains("uroce run:   IBV_EVENT_PORT_ACTIVE port=1 ("), "{who}: {e}");
        assert!(e.contains("uroce run: runtime_counters "), "{who}: {e}");
        assert!(e.contains(" rx_datagrams="), "{who}: {e}");
        assert!(e.contains("uroce run: check ok: a rule fired: 1 firing (the first: rule lost-ack fired 1 at 127.172.1."), "{who}: {e}");
        assert!(e.contains("uroce run: check ok: outcome = \"success\""), "{who}: {e}");
        assert!(e.contains("uroce run: check: lost-ack passed (2 expectations)"), "{who}: {e}");
        // A stop-and-wait program: the lost ACK cost a retransmission (the
        // library's [expect] does not require it of every program).
        let counters = e.lines().find(|l| l.starts_with("uroce run: counters ")).unwrap_or("");
        assert!(counters.contains(" completer_retry_err=1"), "{who}: {e}");
    }
}

#[test]
fn retry_exceeded_fails_the_program_and_the_check_passes() {
    let dir = tempfile::tempdir().unwrap();
    let uroce = wrapper(dir.path());
    // One report for both: the firing is the server's, the error the
    // client's (within_ms measures across them on the wall clock).
    let report = dir.path().join("report.txt").display().to_string();
    let flags = ["--scenario", "retry-exceeded", "--report", &report, "--check"];
    let server = uroce_pingpong(&uroce, "18932", &["-n", "100", "--timeout", "3"]);
    let client = uroce_pingpong(&uroce, "18932", &["-n", "100"]);
    let (server, client) = pair("127.172.2", 18932, &flags, &flags, &server, &client);
    let e = &client.stderr;
    assert_eq!(client.code, Some(1), "{client:#?}\n{server:#?}");
    assert!(e.contains("uroce run: uroce exited with status 1"), "{e}");
    assert!(e.contains("first_error=IBV_WC_RETRY_EXC_ERR (+"), "{e}");
    assert!(e.contains("check ok: outcome = \"error\""), "{e}");
    assert!(e.contains("check ok: status = \"IBV_WC_RETRY_EXC_ERR\""), "{e}");
    assert!(e.contains("check ok: within_ms = 1600: "), "{e}");
    assert!(e.contains("uroce run: check: retry-exceeded passed (4 expectations)"), "{e}");
    // Measured across the two processes: 8 ACK timeouts of 67 ms.
    let ms: f64 = e
        .split("within_ms = 1600: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the time measured");
    assert!((400.0..=1600.0).contains(&ms), "{ms} ms: {e}");
    // The server, left waiting, gives up by its own timeout (its check
    // then fails or passes by what its requester saw: not asserted here).
    assert!(!server.killed_at_deadline, "{server:#?}");
}

/// A scenario file of lost-ack's rule with `expect` in place of its
/// `[expect]`.
fn lost_ack_expecting(dir: &Path, expect: &str) -> PathBuf {
    let path = dir.join("wrong.toml");
    let text = format!(
        "[scenario]\nname = \"wrong\"\nsummary = \"lost-ack, expectations wrong\"\n\n\
         [expect]\n{expect}\n\n[[rule]]\nname = \"lost-ack\"\ndir = \"in\"\nclass = \"ack\"\n\
         retransmit = false\nnth = 10\naction = \"drop\"\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_wrong_expectation_fails_the_check_with_the_mismatch_named() {
    let dir = tempfile::tempdir().unwrap();
    let uroce = wrapper(dir.path());
    let file = lost_ack_expecting(
        dir.path(),
        "outcome = \"error\"\nstatus = \"IBV_WC_RETRY_EXC_ERR\"\n\
         min_counters = { completer_retry_err = 1, rcvd_rnr_err = 1, tx_packets = 1 }\n\
         max_counters = { rx_datagrams = 0 }\nasync_event = \"IBV_EVENT_QP_FATAL\"",
    );
    let file = file.display().to_string();
    let flags = ["--scenario", &file, "--check"];
    let program = uroce_pingpong(&uroce, "18933", &["-n", "50"]);
    let (server, client) = pair("127.172.3", 18933, &flags, &flags, &program, &program);
    for (who, end) in [("server", &server), ("client", &client)] {
        let e = &end.stderr;
        assert_eq!(end.code, Some(3), "{who}: {end:#?}");
        assert!(e.contains("uroce run: uroce exited with status 0"), "{who}: {e}");
        assert!(
            e.contains(
                "check FAILED: [expect] outcome = \"error\" of scenario wrong: saw success="
            ),
            "{who}: {e}"
        );
        assert!(
            e.contains(
                "check FAILED: [expect] status = \"IBV_WC_RETRY_EXC_ERR\" of scenario \
                        wrong: saw first_error=none"
            ),
            "{who}: {e}"
        );
        assert!(
            e.contains(
                "check FAILED: [expect] rcvd_rnr_err >= 1 of scenario wrong: saw rcvd_rnr_err=0"
            ),
            "{who}: {e}"
        );
        assert!(e.contains("check ok: completer_retry_err >= 1"), "{who}: {e}");
        // The runtime's counters are checked as the HCA's.
        assert!(e.contains("check ok: tx_packets >= 1: tx_packets="), "{who}: {e}");
        assert!(
            e.contains(
                "check FAILED: [expect] rx_datagrams <= 0 of scenario wrong: saw rx_datagrams="
            ),
            "{who}: {e}"
        );
        // No QP went fatal: the events raised are named.
        assert!(
            e.contains(
                "check FAILED: [expect] async_event = \"IBV_EVENT_QP_FATAL\" of scenario wrong: \
                 saw async events IBV_EVENT_PORT_ACTIVE=1\n"
            ),
            "{who}: {e}"
        );
        assert!(e.contains("uroce run: check: wrong failed"), "{who}: {e}");
    }
}

fn uroce_in_process(args: &[&str]) -> (i32, String) {
    let run = uroce_tests::cli::uroce(args);
    (run.code, run.stderr)
}

#[test]
fn a_malformed_file_or_an_unknown_counter_stops_uroce_run_before_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[scenario]\nname = \"bad\"\nsummary = \"x\"\n\n[[rule]]\nname = \"r\"\ndir = \"sideways\"\naction = \"drop\"\n").unwrap();
    let bad = bad.display().to_string();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let (code, err) =
        uroce_in_process(&["run", "--scenario", &bad, "--check", "--", "sh", "-c", &touch]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{bad}:7:")), "{err}");
    assert!(!marker.exists(), "the program ran");
    let unknown = lost_ack_expecting(
        dir.path(),
        "outcome = \"success\"\nmin_counters = { no_such_counter = 1 }",
    );
    let unknown = unknown.display().to_string();
    let (code, err) = uroce_in_process(&["run", "--scenario", &unknown, "--", "sh", "-c", &touch]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("names counters neither the HCA nor the runtime has: no_such_counter"),
        "{err}"
    );
    assert!(err.contains("completer_retry_err"), "the names it has: {err}");
    assert!(err.contains("rx_dropped"), "the runtime's names: {err}");
    assert!(!marker.exists(), "the program ran");
    // The runtime's counters (UdpStats) are known.
    let runtime = lost_ack_expecting(
        dir.path(),
        "outcome = \"success\"\nmin_counters = { rx_dropped = 0 }\n\
         max_counters = { faults_lost = 0, tx_errors = 0 }",
    );
    let runtime = runtime.display().to_string();
    let (code, err) = uroce_in_process(&["run", "--scenario", &runtime, "--", "sh", "-c", &touch]);
    assert_eq!(code, 0, "{err}");
    assert!(marker.exists(), "the program did not run: {err}");
    let (code, err) =
        uroce_in_process(&["run", "--scenario", "lost-ack", "--param", "cut_ms", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("UROCE_SCENARIO_PARAMS=`cut_ms`"), "{err}");
    // --check without a scenario: a usage error.
    let (code, _) = uroce_in_process(&["run", "--check", "--", "true"]);
    assert_eq!(code, 2);
}

#[test]
fn a_program_killed_by_a_signal_is_reported_so() {
    let (code, err) =
        uroce_in_process(&["run", "--scenario", "lost-ack", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code, 128 + 9, "{err}");
    assert!(err.contains("uroce run: sh killed by SIGKILL"), "{err}");
    assert!(err.contains("no summary from the device at 127.0.0.1"), "{err}");
}

/// Debian's `ibv_rc_pingpong` under `uroce run --scenario`: the client
/// checked, the server run beside it.
fn ibv_rc_pingpong(
    test: &str,
    net: &str,
    port: &str,
    scenario: &str,
) -> Option<(Finished, Finished)> {
    let program = ibverbs::tool("ibv_rc_pingpong");
    if !ibverbs::require(test, program.is_some(), "no ibv_rc_pingpong (Debian's ibverbs-utils)") {
        return None;
    }
    let program = program.unwrap().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt").display().to_string();
    let flags = ["--scenario", scenario, "--report", &report, "--check"];
    let args = [program.as_str(), "-g", "1", "-p", port, "-n", "100"];
    Some(pair(net, port.parse().unwrap(), &flags, &flags, &args, &args))
}

#[test]
fn ibv_rc_pingpong_under_lost_ack_passes_the_check() {
    let test = "ibv_rc_pingpong_under_lost_ack_passes_the_check";
    let Some((server, client)) = ibv_rc_pingpong(test, "127.172.4", "18934", "lost-ack") else {
        return;
    };
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(0), "{who}: {end:#?}");
        assert!(end.stderr.contains("uroce run: ibv_rc_pingpong exited with status 0"), "{end:#?}");
        assert!(end.stderr.contains("uroce run: check: lost-ack passed"), "{who}: {end:#?}");
    }
}

#[test]
fn ibv_rc_pingpong_under_retry_exceeded_fails_and_the_check_passes() {
    let test = "ibv_rc_pingpong_under_retry_exceeded_fails_and_the_check_passes";
    let program = ibverbs::tool("ibv_rc_pingpong");
    if !ibverbs::require(test, program.is_some(), "no ibv_rc_pingpong (Debian's ibverbs-utils)") {
        return;
    }
    let program = program.unwrap();
    let lib_dir = ibverbs::library_dir().expect("cargo builds libibverbs.so beside the tests");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    // The server, whose next receive never comes, waits for ever (as on
    // rxe): run on the library directly and killed once the client is done.
    let t0 = Instant::now();
    let server = ibverbs::on_uroce(&program, &lib_dir, "127.172.5.1")
        .env("UROCE_SCENARIO", "retry-exceeded")
        .env("UROCE_SCENARIO_REPORT", &report)
        .args(["-g", "1", "-n", "100", "-p", "18935"])
        .spawn()
        .expect("start ibv_rc_pingpong");
    while !ibverbs::listening(18935) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let program = program.display().to_string();
    let report = report.display().to_string();
    let client = run(
        "127.172.5.2",
        &["--scenario", "retry-exceeded", "--report", &report, "--check"],
        &[&program, "-g", "1", "-n", "100", "-p", "18935", "127.172.5.1"],
    )
    .finish(t0 + Duration::from_secs(20));
    let _server = ibverbs::finish(server, Instant::now() + Duration::from_millis(300));
    assert_eq!(client.code, Some(1), "{client:#?}");
    let e = &client.stderr;
    assert!(e.contains("transport retry counter exceeded (12)"), "{e}");
    assert!(e.contains("uroce run: ibv_rc_pingpong exited with status 1"), "{e}");
    assert!(e.contains("127.172.5.1 rule down fired 1: link_down"), "the server's firing: {e}");
    assert!(e.contains("check ok: status = \"IBV_WC_RETRY_EXC_ERR\""), "{e}");
    assert!(e.contains("check ok: within_ms = 1600"), "{e}");
    assert!(e.contains("uroce run: check: retry-exceeded passed (4 expectations)"), "{e}");
}

/// The variables do what the flags do: `UROCE_SCENARIO` with `uroce run
/// --check` (the report a temporary one), with `UROCE_SCENARIO_REPORT`
/// (that file), and a flag wins over its variable.
#[test]
fn the_env_variables_do_what_the_flags_do() {
    let dir = tempfile::tempdir().unwrap();
    let uroce = wrapper(dir.path());
    let report = dir.path().join("client.report").display().to_string();
    let program = uroce_pingpong(&uroce, "18940", &["-n", "100"]);
    let server_env = [("UROCE_SCENARIO", "lost-ack".to_owned())];
    let client_env =
        [("UROCE_SCENARIO", "lost-ack".to_owned()), ("UROCE_SCENARIO_REPORT", report.clone())];
    let (server, client) = pair_env(
        "127.202.1",
        18940,
        (&["--check"], &program, &server_env),
        (&["--check"], &program, &client_env),
    );
    for (who, end) in [("server", &server), ("client", &client)] {
        let e = &end.stderr;
        assert_eq!(end.code, Some(0), "{who}: {end:#?}");
        assert!(e.contains("uroce run: scenario lost-ack seed 0 at 127.202.1."), "{who}: {e}");
        assert!(e.contains("rule lost-ack fired 1: drop"), "{who}: {e}");
        assert!(e.contains("uroce run: check: lost-ack passed (2 expectations)"), "{who}: {e}");
    }
    assert!(server.stderr.contains(": 1 firing in /"), "{}", server.stderr);
    assert!(client.stderr.contains(&format!(": 1 firing in {report}\n")), "{}", client.stderr);
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("127.202.1.2 loaded at_us=0 from library:lost-ack seed 0"), "{text}");
    assert!(text.contains("rule lost-ack fired 1"), "{text}");
    // --scenario wins over UROCE_SCENARIO.
    let wrong = [("UROCE_SCENARIO", "no-such-scenario".to_owned())];
    let end = run_env("127.202.1.3", &["--scenario", "lost-ack"], &["true"], &wrong)
        .finish(Instant::now() + Duration::from_secs(20));
    assert_eq!(end.code, Some(0), "{end:#?}");
    assert!(end.stderr.contains("uroce run: scenario lost-ack seed 0 at 127.202.1.3"), "{end:#?}");
    // UROCE_SCENARIO alone makes --check valid; a program that opens no
    // device fails it, saying so.
    let lost = [("UROCE_SCENARIO", "lost-ack".to_owned())];
    let end = run_env("127.202.1.3", &["--check"], &["true"], &lost)
        .finish(Instant::now() + Duration::from_secs(20));
    assert_eq!(end.code, Some(3), "{end:#?}");
    assert!(
        end.stderr.contains("check FAILED: no rule of scenario lost-ack fired (0 firings in /")
            && end.stderr.contains("): no device opened at 127.202.1.3 (the program opened none)"),
        "{end:#?}"
    );
}

/// `--check` fails when no rule fired, naming why: here the program's
/// traffic (no atomics for duplicate-atomics), a param that sets the
/// firing point (lost-last-ack's `messages`), a role the rules need, a
/// report not shared.
#[test]
fn check_fails_when_no_rule_fired_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let uroce = wrapper(dir.path());
    let report = dir.path().join("report.txt").display().to_string();
    let program = uroce_pingpong(&uroce, "18941", &["-n", "50"]);
    let flags = ["--scenario", "duplicate-atomics", "--check"];
    let (server, client) = pair("127.202.2", 18941, &flags, &flags, &program, &program);
    for (who, end) in [("server", &server), ("client", &client)] {
        let e = &end.stderr;
        assert_eq!(end.code, Some(3), "{who}: {end:#?}");
        assert!(e.contains("uroce run: uroce exited with status 0"), "{who}: {e}");
        assert!(
            e.contains("check FAILED: no rule of scenario duplicate-atomics fired (0 firings in /"),
            "{who}: {e}"
        );
        assert!(
            e.contains(
                "the program's traffic never reached a rule's firing point on this device \
                 (twice matched 0 packets); the report is this process's own: share one \
                 --report between the processes to see the peer's firings\n"
            ),
            "{who}: {e}"
        );
        assert!(e.contains("uroce run: check: duplicate-atomics failed"), "{who}: {e}");
    }
    // lost-last-ack's rule fires at ACK `messages` (1000): 50 messages
    // never reach it. The report is shared: not a reason.
    let program = uroce_pingpong(&uroce, "18942", &["-n", "50"]);
    let flags = ["--scenario", "lost-last-ack", "--report", &report, "--check"];
    let (server, client) = pair("127.202.3", 18942, &flags, &flags, &program, &program);
    for (who, end) in [("server", &server), ("client", &client)] {
        let e = &end.stderr;
        assert_eq!(end.code, Some(3), "{who}: {end:#?}");
        assert!(
            e.contains(&format!(
                "check FAILED: no rule of scenario lost-last-ack fired (0 firings in {report}): \
                 param messages = 1000 sets where rule(s) last-ack fire: set it for your program \
                 (--param messages=N); the program's traffic never reached a rule's firing \
                 point on this device (last-ack matched "
            )),
            "{who}: {e}"
        );
        assert!(!e.contains("--report between"), "{who}: {e}");
    }
}

#[test]
fn a_role_the_rules_need_is_warned_of_at_load() {
    let (code, err) =
        uroce_in_process(&["run", "--scenario", "remote-access-error", "--check", "--", "true"]);
    assert_eq!(code, 3, "{err}");
    let warning = "uroce run: scenario remote-access-error: rule(s) bad-key apply only to role \
                   server; this process has no role (--role server|client)\n";
    assert!(err.starts_with(warning), "{err}");
    assert!(
        err.contains("check FAILED: no rule of scenario remote-access-error fired (0 firings in /")
            && err.contains(
                ": no device opened at 127.0.0.1 (the program opened none); rule(s) \
                 bad-key apply only to role server; this process has no role"
            ),
        "{err}"
    );
    assert!(err.contains("saw no firing in the report (no device opened"), "{err}");
    // A role the scenario does not know.
    let (code, err) = uroce_in_process(&[
        "run",
        "--scenario",
        "remote-access-error",
        "--role",
        "srever",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.starts_with(
            "uroce run: scenario remote-access-error: no rule and no [expect.<role>] names role \
             srever (the known roles: server, client)\n"
        ),
        "{err}"
    );
    // The roles it knows: no warning.
    for role in ["server", "client"] {
        let args = ["run", "--scenario", "remote-access-error", "--role", role, "--", "true"];
        let (_, err) = uroce_in_process(&args);
        assert!(err.starts_with("uroce run: true exited"), "{role}: {err}");
    }
}

#[test]
fn a_scenario_without_rules_or_expectations_checks_what_it_has() {
    let dir = tempfile::tempdir().unwrap();
    // Rules, no [expect]: the one expectation is that a rule fired.
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[scenario]\nname = \"quiet\"\nsummary = \"s\"\n\n[[rule]]\nname = \"r\"\n\
         action = \"drop\"\n",
    )
    .unwrap();
    let rules = rules.display().to_string();
    let (code, err) = uroce_in_process(&["run", "--scenario", &rules, "--check", "--", "true"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("check FAILED: no rule of scenario quiet fired"), "{err}");
    assert!(err.contains("uroce run: check: quiet failed"), "{err}");
    // No rules: nothing is expected to fire.
    let none = dir.path().join("none.toml");
    std::fs::write(&none, "[scenario]\nname = \"none\"\nsummary = \"s\"\n").unwrap();
    let none = none.display().to_string();
    let (code, err) = uroce_in_process(&["run", "--scenario", &none, "--check", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("uroce run: check: none passed (0 expectations)"), "{err}");
}
