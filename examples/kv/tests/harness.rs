//! The key-value store in virtual time, under fault scenarios, seed by
//! seed (`UROCE_SEEDS=n` for more, `UROCE_SEED=n` for one): the program
//! is `serve` and `KvClient`, unchanged; the tests compare what the
//! client read and what the server holds with a model ([`Store::apply`]).

use std::time::Duration;
use uroce_example_kv::{serve, KvClient, KvError, Op, Options, Reply, Store, COUNTERS};
use uroce_harness::{check, Env, Report, Scenario, Sim, SimBuilder};
use uroce_verbs::WcStatus;

/// Each call's deadline: a few ACK timeouts (1 ms each) would be enough.
const DEADLINE: Duration = Duration::from_millis(50);

/// Puts, gets and counters over a few keys, 48 operations.
fn workload() -> Vec<Op> {
    (0..48)
        .map(|i| match i % 4 {
            0 => Op::Put(format!("k{}", i % 5), format!("value {i}")),
            1 => Op::Incr(format!("c{}", i % 3)),
            2 => Op::Get(format!("k{}", (i + 1) % 5)),
            _ => Op::Get(format!("c{}", i % 3)),
        })
        .collect()
}

/// What the client saw: the replies, and the error that stopped it with
/// how long that call took.
#[derive(Debug)]
struct Seen {
    replies: Vec<Reply>,
    failed: Option<(KvError, Duration)>,
    /// A call after the error.
    again: Option<Result<Reply, KvError>>,
}

/// Node 0 serves, node 1 runs the workload (then closes, if nothing
/// failed).
fn run(builder: SimBuilder) -> Result<(Seen, Option<Store>, Report), Box<dyn std::error::Error>> {
    let mut sim = builder.role(0, "server").role(1, "client").build();
    let (a, b) = sim.oob_pair(0, 1);
    let options = Options::new(8, DEADLINE);
    let server = sim
        .spawn_daemon(0, "server", move |node| async move { serve(&node.ctx, &a, &options).await });
    let client = sim.spawn(1, "client", move |node| async move {
        let env = node.env.clone();
        let mut kv = KvClient::connect(&node.ctx, &b, node.env, &options).await?;
        let mut replies = Vec::new();
        for op in workload() {
            let start = env.now();
            match kv.apply(&op).await {
                Ok(reply) => replies.push(reply),
                Err(e) => {
                    let failed = Some((e, env.now() - start));
                    let again = Some(kv.apply(&Op::Get("k0".into())).await);
                    return Ok(Seen { replies, failed, again });
                }
            }
        }
        kv.close(&b).await?;
        Ok::<_, KvError>(Seen { replies, failed: None, again: None })
    });
    let report = sim.run(Duration::from_secs(10))?;
    let seen = client.output()?.map_err(|e| format!("client: {e}\n{report}"))?;
    let store = match server.output() {
        Ok(store) => Some(store.map_err(|e| format!("server: {e}\n{report}"))?),
        Err(_) => None, // still waiting: the client failed
    };
    Ok((seen, store, report))
}

/// The model's replies and final store.
fn model() -> (Vec<Reply>, Store) {
    let mut store = Store::default();
    let replies = workload().iter().map(|op| store.apply(op)).collect();
    (replies, store)
}

/// Every operation succeeded; the replies and the store are the model's.
fn assert_as_the_model(seen: &Seen, store: Option<Store>, report: &Report) {
    let (replies, model) = model();
    assert_eq!(seen.failed, None, "{report}");
    assert_eq!(seen.replies, replies, "{report}");
    assert_eq!(store, Some(model), "{report}");
}

#[test]
fn the_store_survives_a_lost_ack() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let (seen, store, report) = run(Sim::builder(seed).scenario(Scenario::load("lost-ack")?))?;
        assert_as_the_model(&seen, store, &report);
        // Both nodes lost one ACK and retransmitted after a timeout.
        assert_eq!(report.fired_at(0, "lost-ack"), 1, "{report}");
        assert_eq!(report.fired_at(1, "lost-ack"), 1, "{report}");
        assert!(report.counters.iter().any(|c| c.completer_retry_err >= 1), "{report}");
        Ok(())
    });
}

/// Half the requests each device receives (SENDs, FETCH_ADDs) arrive two
/// more times, 10 µs and 20 µs later: ghosts that reach the server after
/// later requests (an operation takes about 5 µs here).
const DUPLICATES: &str = r#"
[scenario]
name = "duplicate-requests"
summary = "half the requests a device receives arrive twice more, 10 us apart"
seed = 1

[[rule]]
name = "twice"
dir = "in"
class = "request"
retransmit = false
nth = 1
times = "all"
chance = 0.5
action = "duplicate"
copies = 2
gap_us = 10
"#;

#[test]
fn duplicated_requests_are_applied_once() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let scenario = Scenario::parse(DUPLICATES, "duplicate-requests.toml")?;
        let (seen, store, report) = run(Sim::builder(seed).scenario(scenario))?;
        // The transport drops the duplicates: no put, no incr twice.
        assert_as_the_model(&seen, store, &report);
        assert!(report.fired_at(0, "twice") >= 10, "{report}");
        assert!(report.firings.iter().any(|f| f.contains("on in RC_FETCH_ADD")), "{report}");
        assert!(report.counters[0].duplicate_request >= 10, "{report}");
        Ok(())
    });
}

#[test]
fn an_unreachable_server_is_retry_exceeded_within_the_deadline() {
    check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
        let scenario = Scenario::load("retry-exceeded")?;
        let (seen, store, report) = run(Sim::builder(seed).scenario(scenario))?;
        // The server's link goes down for good at its 10th SEND: the
        // client's request gets no ACK, 7 retries later its completion
        // says so, long before the deadline.
        let (error, took) = seen.failed.clone().expect("an error");
        assert_eq!(error, KvError::Completion(WcStatus::RetryExcErr), "{report}");
        assert!(took < DEADLINE, "{took:?}");
        assert!(took >= Duration::from_millis(8), "8 ACK timeouts: {took:?}");
        assert_eq!(report.fired_at(0, "down"), 1, "{report}");
        // The connection is broken for good: connect anew.
        assert_eq!(seen.again, Some(Err(error)));
        // What it read before is what the model says.
        let (replies, _) = model();
        assert_eq!(seen.replies, replies[..seen.replies.len()], "{report}");
        assert!(!seen.replies.is_empty(), "{seen:?}");
        assert_eq!(store, None, "the server still waits");
        Ok(())
    });
}

#[test]
fn a_refusal_is_an_answer_not_a_broken_connection() {
    let mut sim = Sim::builder(1).build();
    let (a, b) = sim.oob_pair(0, 1);
    let options = Options::new(8, DEADLINE);
    sim.spawn_daemon(0, "server", move |node| async move { serve(&node.ctx, &a, &options).await });
    let client = sim.spawn(1, "client", move |node| async move {
        let mut kv = KvClient::connect(&node.ctx, &b, node.env, &options).await?;
        for i in 0..COUNTERS {
            kv.incr(&format!("c{i}")).await?;
        }
        // The server has no counter left for a new key...
        let refused = kv.incr("one-too-many").await;
        // ...and the connection still works.
        let count = kv.incr("c0").await?;
        kv.close(&b).await?;
        Ok::<_, KvError>((refused, count))
    });
    let report = sim.run(Duration::from_secs(1)).unwrap();
    let (refused, count) = client.output().unwrap().unwrap_or_else(|e| panic!("{e}\n{report}"));
    assert_eq!(refused, Err(KvError::Server("no counter left".into())));
    assert_eq!(count, 2);
}
