//! The harness in virtual time: the request/response program of
//! `common/mod.rs` under fault scenarios, determinism, deadlock and panic
//! detection.

mod common;

use common::{run_client, serve, AppError};
use std::future::pending;
use std::time::Duration;
use uroce_harness::{
    check, Env, Failure, FaultConfig, Probability, Report, Scenario, Sim, SimBuilder,
};
use uroce_verbs::connect::{self, Tuning};
use uroce_verbs::{QpType, WcStatus};

const ROUNDS: u32 = 16;
const THINK: Duration = Duration::from_micros(50);

/// What one run gave: the client's and the server's outputs, the report.
type Outputs = (Result<Vec<Duration>, AppError>, Option<Result<u32, AppError>>, Report);

/// Node 0 serves, node 1 is the client; `ROUNDS` requests.
fn run(builder: SimBuilder) -> Result<Outputs, Box<dyn std::error::Error>> {
    let mut sim = builder.role(0, "server").role(1, "client").build();
    let (a, b) = sim.oob_pair(0, 1);
    let t = Tuning::with_timeout(8);
    let server =
        sim.spawn_daemon(
            0,
            "server",
            move |node| async move { serve(&node.ctx, &a, ROUNDS, &t).await },
        );
    let client = sim.spawn(1, "client", move |node| async move {
        run_client(&node.ctx, &b, &node.env, ROUNDS, THINK, &t).await
    });
    let report = sim.run(Duration::from_secs(10))?;
    Ok((client.output()?, server.output().ok(), report))
}

#[test]
fn request_response_survives_a_lost_ack() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let builder = Sim::builder(seed).scenario(Scenario::load("lost-ack")?);
        let (client, server, report) = run(builder)?;
        let times = client.map_err(|e| format!("client: {e:?}"))?;
        assert_eq!(times.len() as u32, ROUNDS);
        assert_eq!(server, Some(Ok(ROUNDS)));
        // Each node receives ACKs: the rule fires once on each.
        assert!(report.fired("lost-ack") >= 1, "{report}");
        assert_eq!(report.fired_at(1, "lost-ack"), 1, "{report}");
        assert_eq!(report.completions[1].errors(), 0, "{report}");
        assert_eq!(report.completions[1].successes(), 2 * u64::from(ROUNDS), "{report}");
        // The lost ACK cost the client one ACK timeout (1 ms) somewhere.
        let slowest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(slowest >= Duration::from_millis(1), "{times:?}");
        Ok(())
    });
}

#[test]
fn a_link_down_for_good_is_retry_exceeded_at_the_client() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let builder = Sim::builder(seed).scenario(Scenario::load("retry-exceeded")?);
        let (client, server, report) = run(builder)?;
        // The 10th request reaches a server cut off for good.
        assert_eq!(client, Err(AppError::Completion(WcStatus::RetryExcErr)), "{report}");
        assert_eq!(server, None, "the server still waits for request 9");
        assert_eq!(report.unfinished, vec!["server (node 0)".to_owned()]);
        assert_eq!(report.fired_at(0, "down"), 1, "{report}");
        let first = report.completions[1].first_error().expect("an error");
        assert_eq!((first.status, first.wr_id), (WcStatus::RetryExcErr, 9));
        Ok(())
    });
}

#[test]
fn a_reports_check_evaluates_the_scenarios_expect_for_a_node() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let scenario = Scenario::load("retry-exceeded")?;
        let (_, _, report) = run(Sim::builder(seed).scenario(scenario.clone()))?;
        // The client (node 1) sees what [expect] says: an error, retry
        // exceeded, within 1600 ms of the firing (on the server's node).
        let checked = report.check(&scenario, 1, Some("client"));
        assert!(checked.passed(), "{checked}\n{report}");
        assert_eq!(checked.lines.len(), 3, "{checked}");
        assert_eq!(checked.table, "[expect]");
        let text = checked.to_string();
        assert!(text.starts_with("check ok: outcome = \"error\": success="), "{text}");
        assert!(
            text.contains("check ok: within_ms = 1600: ")
                && text.contains("(rule down fired 1 at node0)"),
            "{text}"
        );
        assert!(text.ends_with("check: retry-exceeded passed (3 expectations) on node1"), "{text}");
        // A wrong expectation fails, named.
        let mut wrong = scenario.clone();
        wrong.expect.common.status = Some("IBV_WC_RNR_RETRY_EXC_ERR".into());
        wrong.expect.common.within_ms = Some(0);
        let checked = report.check(&wrong, 1, Some("client"));
        assert!(!checked.passed());
        let failed: Vec<_> = checked.failed().map(|l| l.expected.as_str()).collect();
        assert_eq!(failed, ["status = \"IBV_WC_RNR_RETRY_EXC_ERR\"", "within_ms = 0"]);
        let text = checked.to_string();
        assert!(
            text.contains(
                "check FAILED: [expect] status = \"IBV_WC_RNR_RETRY_EXC_ERR\" of scenario \
                 retry-exceeded: saw first_error=IBV_WC_RETRY_EXC_ERR"
            ),
            "{text}"
        );
        assert!(text.ends_with("check: retry-exceeded failed on node1"), "{text}");
        // The node's asynchronous events are recorded: its port came up,
        // before the firing; no QP went fatal (retry exceeded is an error
        // completion, not an event).
        let mut events = scenario.clone();
        for (name, ok) in [("IBV_EVENT_PORT_ACTIVE", true), ("IBV_EVENT_QP_FATAL", false)] {
            events.expect.common =
                uroce_harness::RoleExpect { async_event: Some(name.into()), ..Default::default() };
            let line = report.check(&events, 1, None).lines.remove(0);
            assert_eq!(line.ok, ok, "{line:?}");
            if !ok {
                assert_eq!(line.seen, "async events IBV_EVENT_PORT_ACTIVE=1");
            } else {
                assert!(line.seen.ends_with("ms before the first firing)"), "{line:?}");
            }
        }
        // What the harness cannot see fails saying so: a runtime counter,
        // an exit nobody killed.
        let mut runtime = scenario.clone();
        runtime.expect.common = uroce_harness::RoleExpect {
            min_counters: vec![("rx_dropped".into(), 1)],
            exit: Some(uroce_harness::ExpectExit::Killed),
            ..Default::default()
        };
        let seen: Vec<_> =
            report.check(&runtime, 1, None).lines.into_iter().map(|l| (l.ok, l.seen)).collect();
        assert_eq!(
            seen,
            [
                (false, "node1's tasks not killed".to_owned()),
                (
                    false,
                    "rx_dropped not counted: the harness has the HCA's counters only".to_owned()
                )
            ]
        );
        Ok(())
    });
}

/// The server's process dies (a `crash` with `exit`) when its 5th SEND
/// message arrives.
const SERVER_DIES: &str = r#"
[scenario]
name = "server-dies"
summary = "the server process is killed when its 5th SEND message arrives"

[[rule]]
name = "die"
role = "server"
dir = "in"
class = "send"
message = 5
nth = 1
action = "crash"
"#;

#[test]
fn a_crash_with_exit_stops_the_nodes_tasks_and_the_peer_runs_out_of_retries() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let scenario = Scenario::parse(SERVER_DIES, "inline")?;
        let mut sim = Sim::builder(seed).scenario(scenario).role(0, "server").build();
        let (a, b) = sim.oob_pair(0, 1);
        let t = Tuning::with_timeout(8);
        // Not a daemon: the run waits for it, so only its node's exit ends it.
        let server = sim
            .spawn(0, "server", move |node| async move { serve(&node.ctx, &a, ROUNDS, &t).await });
        // A second task on the dying node, sleeping: stopped too.
        let sleeper = sim.spawn(0, "sleeper", |node| async move {
            node.env.sleep(Duration::from_secs(5)).await;
        });
        let client = sim.spawn(1, "client", move |node| async move {
            run_client(&node.ctx, &b, &node.env, ROUNDS, THINK, &t).await
        });
        let report = sim.run(Duration::from_secs(10))?;
        // The 5th request killed the server's process: both its tasks
        // stopped where they waited, neither returned.
        assert!(server.was_killed() && sleeper.was_killed(), "{report}");
        assert!(server.output().is_err() && sleeper.output().is_err());
        assert_eq!(report.killed.len(), 2, "{report}");
        assert!(report.killed[0].starts_with("server (node 0) at "), "{report}");
        assert!(report.killed[1].starts_with("sleeper (node 0) at "), "{report}");
        assert!(report.unfinished.is_empty(), "{report}");
        assert_eq!(report.fired_at(0, "die"), 1, "{report}");
        // The client's 5th request meets silence: retry exceeded, as the
        // library's peer-crash expects; its own task ran to the end.
        assert!(!client.was_killed());
        let out = client.output()?;
        assert_eq!(out, Err(AppError::Completion(WcStatus::RetryExcErr)), "{report}");
        let first = report.completions[1].first_error().expect("an error");
        assert_eq!((first.status, first.wr_id), (WcStatus::RetryExcErr, 4));
        // `exit = "killed"` holds on the server's node, not on the client's.
        let mut dies = Scenario::parse(SERVER_DIES, "inline")?;
        dies.expect.common = uroce_harness::RoleExpect {
            exit: Some(uroce_harness::ExpectExit::Killed),
            ..Default::default()
        };
        let server_exit = report.check(&dies, 0, Some("server"));
        assert!(server_exit.passed(), "{server_exit}");
        assert!(server_exit.lines[0].seen.starts_with("killed by a crash: server (node 0) at "));
        assert!(!report.check(&dies, 1, Some("client")).passed());
        Ok(())
    });
}

#[test]
fn injected_rnr_naks_reach_the_hcas_through_the_world_and_are_survived() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let builder = Sim::builder(seed).scenario(Scenario::load("rnr-retry")?);
        let (client, server, report) = run(builder)?;
        assert_eq!(client.map(|t| t.len() as u32), Ok(ROUNDS), "{report}");
        assert_eq!(server, Some(Ok(ROUNDS)));
        // Each node receives its 10th SEND (request 9, answer 9): the
        // device fault is applied to that node's HCA before the packet.
        for node in 0..2 {
            assert_eq!(report.fired_at(node, "not-ready"), 1, "{report}");
            let (c, peer) = (&report.counters[node], &report.counters[1 - node]);
            assert_eq!((c.injected_rnr, c.send_rnr_err, peer.rcvd_rnr_err), (3, 3, 3), "{c:?}");
        }
        assert_eq!(report.completions[0].errors() + report.completions[1].errors(), 0);
        // Each role's [expect.<role>] table holds on its node.
        let scenario = Scenario::load("rnr-retry")?;
        for (node, role, counter) in [(0, "server", "send_rnr_err"), (1, "client", "rcvd_rnr_err")]
        {
            let checked = report.check(&scenario, node, Some(role));
            assert!(checked.passed(), "{checked}");
            assert_eq!(checked.table, format!("[expect.{role}]"));
            let seen: Vec<_> = checked.lines.iter().map(|l| l.expected.as_str()).collect();
            assert_eq!(seen, ["outcome = \"success\"", &format!("{counter} >= 3")]);
        }
        // One NAK more than came: fails, with what was counted.
        let mut more = scenario.clone();
        more.expect.roles[1].1.min_counters = vec![("rcvd_rnr_err".into(), 4)];
        let wrong = report.check(&more, 1, Some("client"));
        assert!(!wrong.passed());
        let line = wrong.failed().next().unwrap();
        assert_eq!(
            (line.expected.as_str(), line.seen.as_str()),
            ("rcvd_rnr_err >= 4", "rcvd_rnr_err=3")
        );
        Ok(())
    });
}

/// Without faults and with a scenario that draws nothing, seeds differ
/// only through the fabric's latency jitter: each is another interleaving
/// (another trace hash); with the jitter off they are all one run.
#[test]
fn seeds_are_other_interleavings_through_latency_jitter() {
    let hashes = |jitter: Option<Duration>| -> Vec<u64> {
        (1..=4)
            .map(|seed| {
                let mut builder = Sim::builder(seed).scenario(Scenario::load("lost-ack").unwrap());
                if let Some(j) = jitter {
                    builder = builder.latency_jitter(j);
                }
                let (client, _, report) = run(builder).unwrap();
                assert_eq!(client.map(|t| t.len() as u32), Ok(ROUNDS), "{report}");
                report.trace_hash
            })
            .collect()
    };
    let jittered = hashes(None);
    let distinct: std::collections::BTreeSet<u64> = jittered.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "default jitter: every seed its own run: {jittered:x?}");
    assert_eq!(hashes(None), jittered, "and each seed the same run twice");
    let flat = hashes(Some(Duration::ZERO));
    assert!(flat.windows(2).all(|w| w[0] == w[1]), "no jitter, nothing drawn: {flat:x?}");
}

#[test]
fn the_same_seed_twice_is_the_same_run() {
    let noisy = |seed| {
        Sim::builder(seed)
            .scenario(Scenario::load("lost-ack").unwrap())
            .faults(FaultConfig { loss: Probability::from_percent(5), ..FaultConfig::default() })
    };
    let (c1, s1, r1) = run(noisy(7)).unwrap();
    let (c2, s2, r2) = run(noisy(7)).unwrap();
    // Another seed draws other losses: another run.
    let (c3, _, r3) = run(noisy(8)).unwrap();
    assert_eq!((&c1, &s1), (&c2, &s2));
    eprintln!(
        "seed 7: trace_hash {:016x} and {:016x}; seed 8: {:016x}\n{r1}",
        r1.trace_hash, r2.trace_hash, r3.trace_hash
    );
    assert_eq!(r1.trace_hash, r2.trace_hash);
    assert_eq!(r1.firings, r2.firings);
    assert_eq!(r1.elapsed, r2.elapsed);
    assert!(c1.is_ok(), "{c1:?}");
    assert_ne!(r1.trace_hash, r3.trace_hash);
    assert_ne!(c1, c3, "the answers' times differ");
}

#[test]
fn a_task_waiting_for_a_completion_that_never_comes_is_a_deadlock() {
    let mut sim = Sim::builder(1).build();
    sim.spawn(0, "idle", |_| async { 1 });
    let waiter = sim.spawn(1, "waiter", |node| async move {
        let pd = node.ctx.alloc_pd().unwrap();
        let cq = node.ctx.create_cq(16).unwrap();
        let _qp = connect::create_qp(&pd, &cq, QpType::Rc, None, connect::cap(4, 1, 0)).unwrap();
        node.env.sleep(Duration::from_millis(3)).await;
        cq.next().await.map(|wc| wc.wr_id)
    });
    let failure = sim.run(Duration::from_secs(3600)).unwrap_err();
    match &failure {
        Failure::Deadlock { at, waiting } => {
            assert_eq!(waiting, &vec!["waiter (node 1)".to_owned()]);
            assert_eq!(*at, Duration::from_millis(3), "found as soon as the sleep ended");
        }
        other => panic!("{other}"),
    }
    assert!(failure.to_string().contains("waiter (node 1)"), "{failure}");
    assert!(!waiter.is_finished());
}

#[test]
fn a_sleep_past_the_limit_is_a_timeout_and_a_panic_is_caught() {
    let mut sim = Sim::builder(1).build();
    sim.spawn(0, "sleeper", |node| async move { node.env.sleep(Duration::from_secs(5)).await });
    let failure = sim.run(Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(&failure, Failure::Timeout { waiting, .. } if waiting == &["sleeper (node 0)"])
    );

    let mut sim = Sim::builder(1).build();
    sim.spawn_daemon(1, "forever", |_| pending::<()>());
    sim.spawn(0, "boom", |node| async move {
        node.env.sleep(Duration::from_micros(10)).await;
        panic!("boom at {:?}", node.env.now());
    });
    match sim.run(Duration::from_secs(1)).unwrap_err() {
        Failure::Panic { task, at, message } => {
            assert_eq!(task, "boom (node 0)");
            assert_eq!(at, Duration::from_micros(10));
            assert_eq!(message, "boom at 10µs");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn tasks_are_polled_in_wake_order_and_ties_in_spawn_order() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut sim = Sim::builder(1).build();
    let log = Rc::new(RefCell::new(Vec::new()));
    for (name, us) in [("c", 30), ("a", 10), ("b", 10), ("d", 0)] {
        let log = log.clone();
        sim.spawn(0, name, move |node| async move {
            log.borrow_mut().push(format!("{name} start"));
            node.env.sleep(Duration::from_micros(us)).await;
            log.borrow_mut().push(format!("{name} {:?}", node.env.now()));
        });
    }
    sim.run(Duration::from_secs(1)).unwrap();
    let log = log.borrow().join(", ");
    assert_eq!(log, "c start, a start, b start, d start, d 0ns, a 10µs, b 10µs, c 30µs");
}

#[test]
fn check_names_the_seed_and_the_command_that_reproduces_it() {
    let lines = uroce_harness::failure_lines("uroce-harness", 3);
    assert!(lines.starts_with(
        "uroce-harness: check_names_the_seed_and_the_command_that_reproduces_it failed at seed=3 trace_hash="
    ), "{lines}");
    assert!(
        lines.ends_with(
            "reproduce: UROCE_SEED=3 cargo test -p uroce-harness --test harness \
         check_names_the_seed_and_the_command_that_reproduces_it -- --exact"
        ),
        "{lines}"
    );
    // A failing body: the macro panics after printing those lines.
    let failed = std::panic::catch_unwind(|| {
        check!(|seed| if seed == 2 { Err(format!("seed {seed} is bad")) } else { Ok(()) })
    });
    assert!(failed.is_err());
}
