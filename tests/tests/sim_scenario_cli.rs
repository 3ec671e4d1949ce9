//! `uroce sim --scenario`: the swarm under a fault scenario, attached to
//! its world through `WorldBuilder::scenario` (the path the harness and
//! the scenario tests take). The reference model still agrees, the
//! scenario's firings are reported and folded into the trace hash, and
//! the same seed gives the same hash twice.

use uroce::swarm::{self, SwarmConfig, SwarmScenario};

fn cli(args: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = uroce::cli::run(args.iter().copied(), &mut out, &mut err);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

/// The value of `key=` in the last line.
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    let last = out.lines().last().expect("output");
    last.split(' ')
        .filter_map(|f| f.split_once('='))
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("no {key}= in {last}"))
        .1
}

#[test]
fn a_seeded_swarm_under_lost_ack_agrees_with_the_model_and_is_deterministic() {
    let args = ["uroce", "sim", "--seed", "3", "--ops", "300", "--scenario", "lost-ack"];
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok: the model agrees and liveness held"), "{out}");
    assert!(out.lines().next().unwrap().ends_with(" scenario=lost-ack"), "{out}");
    assert_eq!(field(&out, "mismatches"), "0");
    assert_eq!(field(&out, "scenario"), "lost-ack");
    let fired: u64 = field(&out, "firings").parse().unwrap();
    assert!(fired >= 1, "{out}");
    let lines = out.lines().filter(|l| l.starts_with("fired: node")).count() as u64;
    assert_eq!(lines, fired, "{out}");
    assert!(out.contains("rule lost-ack fired 1: drop on in RC_ACKNOWLEDGE"), "{out}");
    assert!(out.contains(&format!("scenario: lost-ack, {fired} firings; fabric: {fired} dropped")));

    // The same seed twice: the same hash, the same report.
    let (code2, out2, _) = cli(&args);
    assert_eq!(code2, 0);
    assert_eq!(field(&out2, "trace_hash"), field(&out, "trace_hash"));
    fn report(o: &str) -> Vec<&str> {
        o.lines().filter(|l| !l.starts_with("wall time")).collect()
    }
    assert_eq!(report(&out2), report(&out));

    // The firings are in the hash: without the scenario it differs, and
    // the run without the flag prints what it always printed.
    let (code3, out3, _) = cli(&args[..6]);
    assert_eq!(code3, 0, "{out3}");
    assert_ne!(field(&out3, "trace_hash"), field(&out, "trace_hash"));
    assert!(!out3.contains("scenario"), "{out3}");
}

#[test]
fn the_reproduce_line_names_the_scenario_and_reruns_the_same() {
    let scenario = swarm::load_scenario("lost-ack").unwrap();
    let mut any_fired = 0;
    for seed in 1..=4 {
        let config = SwarmConfig {
            seed,
            ops: Some(200),
            scenario: Some(SwarmScenario {
                arg: "lost-ack".into(),
                scenario: scenario.clone(),
                roles: vec![(0, "client".into())],
            }),
            ..SwarmConfig::default()
        };
        let report = swarm::run(&config);
        let mut text = Vec::new();
        report.write(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(report.passed(), "seed {seed}:\n{text}");
        assert_eq!(report.scenario.as_deref(), Some("lost-ack"));
        any_fired += report.fired();
        let line = report.reproduce();
        assert!(line.ends_with(" --scenario lost-ack --role 0=client"), "{line}");
        if seed == 1 {
            let args: Vec<&str> = line.split_whitespace().collect();
            let (code, out, err) = cli(&args);
            assert_eq!(code, 0, "{out}{err}");
            assert_eq!(out.lines().last(), Some(report.last_line().as_str()));
        }
    }
    assert!(any_fired >= 4, "{any_fired}");
}

#[test]
fn device_faults_of_a_scenario_reach_the_swarms_hcas() {
    let args = ["uroce", "sim", "--seed", "5", "--ops", "300", "--scenario", "rnr-retry"];
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    let fired: u64 = field(&out, "firings").parse().unwrap();
    assert!(fired >= 1, "{out}");
    assert!(out.contains(&format!("held by it, {fired} device faults")), "{out}");
    assert!(out.contains("send_rnr_err="), "{out}");
}

#[test]
fn bad_scenario_flags_are_refused() {
    let (code, _, err) = cli(&["uroce", "sim", "--seed", "1", "--scenario", "no-such-thing"]);
    assert_eq!(code, 2);
    assert!(err.contains("no-such-thing") && err.contains("lost-ack"), "{err}");
    let (code, _, _) = cli(&["uroce", "sim", "--seed", "1", "--role", "0=server"]);
    assert_eq!(code, 2, "--role needs --scenario");
    let args = ["uroce", "sim", "--nodes", "2", "--scenario", "lost-ack", "--role", "5=x"];
    let (code, _, err) = cli(&args);
    assert_eq!(code, 2);
    assert!(err.contains("--role 5"), "{err}");
    let (code, _, _) = cli(&["uroce", "sim", "--scenario", "lost-ack", "--role", "server"]);
    assert_eq!(code, 2);
    let dir = std::env::temp_dir().join(format!("uroce-sim-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[scenario]\nname = \"bad\"\n[[rule]]\naction = \"explode\"\n").unwrap();
    let (code, _, err) = cli(&["uroce", "sim", "--scenario", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.toml"), "{err}");
    let (code, out, _) = cli(&["uroce", "sim", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--scenario <NAME|FILE>") && out.contains("--role <NODE=ROLE>"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
