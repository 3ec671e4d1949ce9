//! The parser: every key of the schema, the defaults, the params, and
//! malformed files (each error's line and column).

use super::*;
use crate::rng::Probability;
use proptest::prelude::*;
use uroce_wire::{Mask, Opcode};

const HEAD: &str = "[scenario]\nname = \"t\"\nsummary = \"s\"\n";

fn ok(text: &str) -> Scenario {
    Scenario::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn rule(body: &str) -> RuleSpec {
    ok(&format!("{HEAD}[[rule]]\n{body}\n")).rules.remove(0)
}

/// Parses `text`, expecting an error at `line`:`column` whose message
/// contains `says`.
fn fails(text: &str, line: u32, column: u32, says: &str) -> ScenarioError {
    let e = Scenario::parse(text, "t.toml").expect_err(text);
    assert_eq!((e.line, e.column), (line, column), "{e}\n--- in:\n{text}");
    assert!(e.message.contains(says), "{:?} lacks {says:?}", e.message);
    e
}

/// An error in a one-rule file at the rule's line `line` (1-based within
/// the body; the body starts at line 5).
fn rule_fails(body: &str, line: u32, column: u32, says: &str) -> ScenarioError {
    fails(&format!("{HEAD}[[rule]]\n{body}\n"), 4 + line, column, says)
}

#[test]
fn every_scenario_params_and_expect_key() {
    let s = ok(r#"
[scenario]
name = "every-key-1"
summary = "all of them"
seed = 77
faults = "loss=0.01,seed=3"

[params]
cut_ms = 200
n = 5

[expect]
outcome = "error"
status = "IBV_WC_RETRY_EXC_ERR"
within_ms = 1600
min_counters = { completer_retry_err = 1, duplicate_request = 2 }
max_counters = { rcvd_seq_err = 0 }
async_event = "IBV_EVENT_QP_FATAL"
exit = "killed"
observe = "prose"

[expect.server]
outcome = "success"
observe = "fine"

[expect.client]
outcome = "error"
status = "IBV_WC_REM_ACCESS_ERR"
"#);
    assert_eq!((s.name.as_str(), s.summary.as_str(), s.seed), ("every-key-1", "all of them", 77));
    let bg = s.background.unwrap();
    assert_eq!((bg.loss, bg.seed), (Probability::from_ppm(10_000), 3));
    assert_eq!(s.params, [("cut_ms".to_owned(), 200), ("n".to_owned(), 5)]);
    assert_eq!(s.param("n"), Some(5));
    let c = &s.expect.common;
    assert_eq!(c.outcome, Some(Outcome::Error));
    assert_eq!(c.status.as_deref(), Some("IBV_WC_RETRY_EXC_ERR"));
    assert_eq!(c.within_ms, Some(1600));
    assert_eq!(
        c.min_counters,
        [("completer_retry_err".to_owned(), 1), ("duplicate_request".to_owned(), 2)]
    );
    assert_eq!(c.max_counters, [("rcvd_seq_err".to_owned(), 0)]);
    assert_eq!(c.async_event.as_deref(), Some("IBV_EVENT_QP_FATAL"));
    assert_eq!(c.exit, Some(ExpectExit::Killed));
    assert_eq!(c.observe.as_deref(), Some("prose"));
    assert_eq!(s.expect.roles.len(), 2);
    assert_eq!(s.expect.for_role(Some("server")).outcome, Some(Outcome::Success));
    let client = s.expect.for_role(Some("client"));
    assert_eq!(client.status.as_deref(), Some("IBV_WC_REM_ACCESS_ERR"));
    assert_eq!(s.expect.for_role(Some("other")), c);
    assert_eq!(s.expect.for_role(None), c);
    assert!(s.rules.is_empty());
}

#[test]
fn minimal_file_defaults() {
    let s = ok(HEAD);
    assert_eq!((s.seed, s.background, s.params.len()), (0, None, 0));
    assert_eq!(s.expect, Expect::default());
}

#[test]
fn every_match_key() {
    let r = rule(
        r#"name = "r.1_x"
role = "server"
device = "127.0.0.2"
dir = "in"
peer = "127.0.0.1"
opcode = "RC_SEND_ONLY"
class = "send"
position = "only"
qpn = 0x11
qp = 2
psn_offset = 9
message = 10
retransmit = false
nth = 3
times = 2
chance = 0.5
after_ms = 100
until_ms = 300
action = "drop""#,
    );
    assert_eq!(r.name, "r.1_x");
    assert_eq!(
        r.scope,
        Scope { role: Some("server".into()), device: Some("127.0.0.2".parse().unwrap()) }
    );
    assert_eq!(r.dir, DirMatch::In);
    assert_eq!(r.peer, Some("127.0.0.1".parse().unwrap()));
    assert_eq!(r.matcher.opcode, Some(Opcode::RC_SEND_ONLY));
    assert_eq!(r.matcher.opcode_mask, Some(Mask::REQ | Mask::SEND));
    assert_eq!(r.class, Some(Class::Send));
    assert_eq!(r.position, Some(Position::Only));
    assert_eq!(r.qpn, Some(Qpn::new(0x11)));
    assert_eq!(
        r.flow,
        FlowMatch { qp: Some(2), psn_offset: Some(9), message: Some(10), retransmit: Some(false) }
    );
    assert_eq!(r.fire, FireRange { nth: 3, times: Some(2) });
    assert_eq!(r.chance, Some(Probability::from_ppm(500_000)));
    assert_eq!(r.window, Window { after_ns: Some(100_000_000), until_ns: Some(300_000_000) });
    assert_eq!(r.action, ScenarioAction::Packet(PacketAction::Drop));
    assert!(!r.timed);
    assert_eq!(r.line, 4);
}

#[test]
fn choices() {
    for (name, class) in Class::ALL {
        assert_eq!(rule(&format!("class = \"{name}\"\naction = \"drop\"")).class, Some(class));
    }
    for (name, dir) in [("in", DirMatch::In), ("out", DirMatch::Out), ("both", DirMatch::Both)] {
        assert_eq!(rule(&format!("dir = \"{name}\"\naction = \"drop\"")).dir, dir);
    }
    let positions = [
        ("first", Position::First),
        ("middle", Position::Middle),
        ("last", Position::Last),
        ("only", Position::Only),
    ];
    for (name, p) in positions {
        assert_eq!(rule(&format!("position = \"{name}\"\naction = \"drop\"")).position, Some(p));
    }
    assert_eq!(rule("retransmit = true\naction = \"drop\"").flow.retransmit, Some(true));
    assert_eq!(rule("chance = 1\naction = \"drop\"").chance, Some(Probability::ALWAYS));
    assert_eq!(rule("chance = 0.0\naction = \"drop\"").chance, Some(Probability::NEVER));
    let v6 = rule("peer = \"fe80::1\"\naction = \"drop\"");
    assert_eq!(v6.peer, Some("fe80::1".parse().unwrap()));
}

#[test]
fn defaults_of_a_rule() {
    let r = rule("action = \"drop\"");
    assert_eq!(r.name, "rule1");
    assert_eq!(
        (r.dir, r.peer, r.class, r.position, r.qpn),
        (DirMatch::Both, None, None, None, None)
    );
    assert_eq!(r.matcher, crate::Matcher::any());
    assert_eq!(
        (r.fire, r.chance, r.window, r.timed),
        (FireRange::EVERY, None, Window::default(), false)
    );
    assert_eq!(r.scope, Scope::default());
    assert_eq!(rule("nth = 4\naction = \"drop\"").fire, FireRange { nth: 4, times: Some(1) });
    assert_eq!(
        rule("nth = 1\ntimes = \"all\"\naction = \"drop\"").fire,
        FireRange { nth: 1, times: None }
    );
    let two = ok(&format!("{HEAD}[[rule]]\naction = \"drop\"\n[[rule]]\naction = \"drop\"\n"));
    assert_eq!((two.rules[0].name.as_str(), two.rules[1].name.as_str()), ("rule1", "rule2"));
    assert_eq!((two.rules[0].line, two.rules[1].line), (4, 6));
}

#[test]
fn every_action_and_its_parameters() {
    let packet = |body: &str| match rule(body).action {
        ScenarioAction::Packet(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(packet("action = \"duplicate\""), PacketAction::Duplicate { copies: 1, gap_ns: 0 });
    assert_eq!(
        packet("action = \"duplicate\"\ncopies = 3\ngap_us = 3000"),
        PacketAction::Duplicate { copies: 3, gap_ns: 3_000_000 }
    );
    assert_eq!(
        packet("action = \"delay\"\ndelay_us = 250"),
        PacketAction::Delay { delay_ns: 250_000 }
    );
    assert_eq!(
        packet("action = \"reorder\""),
        PacketAction::Reorder { behind: 1, max_hold_ns: 1_000_000 }
    );
    assert_eq!(
        packet("action = \"reorder\"\nbehind = 4\nmax_hold_us = 50"),
        PacketAction::Reorder { behind: 4, max_hold_ns: 50_000 }
    );
    assert_eq!(packet("action = \"corrupt\""), PacketAction::Corrupt { bit: None });
    assert_eq!(packet("action = \"corrupt\"\nbit = 300"), PacketAction::Corrupt { bit: Some(300) });

    let link = |body: &str| match rule(body).action {
        ScenarioAction::Link(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(link("action = \"link_down\""), LinkAction::Down { for_ns: None });
    assert_eq!(
        link("action = \"link_down\"\nfor_ms = 5"),
        LinkAction::Down { for_ns: Some(5_000_000) }
    );
    assert_eq!(link("action = \"link_up\""), LinkAction::Up);
    assert_eq!(
        link("action = \"partition\"\nfor_ms = 200"),
        LinkAction::Partition { for_ns: Some(200_000_000), peer: None }
    );
    assert_eq!(
        link("peer = \"10.0.0.9\"\naction = \"partition\""),
        LinkAction::Partition { for_ns: None, peer: Some("10.0.0.9".parse().unwrap()) }
    );

    let device = |body: &str| match rule(body).action {
        ScenarioAction::Device(a) => a,
        other => panic!("{other:?}"),
    };
    let spec =
        |kind, target, count, for_ns, exit| DeviceActionSpec { kind, target, count, for_ns, exit };
    use DeviceActionKind as K;
    assert_eq!(device("action = \"rnr\""), spec(K::Rnr, Target::Matched, 1, 0, true));
    assert_eq!(
        device("action = \"rnr\"\ncount = 3\ntarget = \"all\""),
        spec(K::Rnr, Target::All, 3, 0, true)
    );
    assert_eq!(
        device("action = \"fail_key\"\ntarget = 2"),
        spec(K::FailKey, Target::Qp(2), 1, 0, true)
    );
    assert_eq!(
        device("action = \"dma_fault\"\ntarget = \"matched\"\ncount = 7"),
        spec(K::DmaFault, Target::Matched, 7, 0, true)
    );
    assert_eq!(
        device("action = \"stall\"\nfor_ms = 40"),
        spec(K::Stall, Target::Matched, 1, 40_000_000, true)
    );
    assert_eq!(device("action = \"crash\""), spec(K::Crash, Target::Matched, 1, 0, true));
    assert_eq!(
        device("action = \"crash\"\nexit = false"),
        spec(K::Crash, Target::Matched, 1, 0, false)
    );
}

#[test]
fn timed_rules() {
    let t = rule("after_ms = 100\nuntil_ms = 200\naction = \"link_down\"");
    assert!(t.timed);
    assert!(rule("after_ms = 100\naction = \"crash\"").timed);
    assert!(rule("after_ms = 5\npeer = \"10.0.0.1\"\naction = \"partition\"").timed.eq(&false));
    // A packet action with a window and no match key applies to every
    // packet in the window.
    assert!(!rule("after_ms = 100\naction = \"drop\"").timed);
    assert!(!rule("until_ms = 100\naction = \"link_down\"").timed);
    assert!(!rule("dir = \"in\"\nafter_ms = 100\naction = \"link_down\"").timed);
    rule_fails("after_ms = 100\nnth = 2\naction = \"crash\"", 2, 1, "timed rule");
    rule_fails("after_ms = 100\naction = \"partition\"", 2, 10, "needs `peer`");
}

#[test]
fn params_in_rule_keys_and_overrides() {
    let text = format!(
        "{HEAD}[params]\ncut_ms = 200\nk = 3\n[[rule]]\nnth = \"k\"\ntimes = \"k\"\naction = \"partition\"\nfor_ms = \"cut_ms\"\n\
         [[rule]]\naction = \"rnr\"\ncount = \"k\"\ntarget = \"k\"\n"
    );
    let s = ok(&text);
    assert_eq!(s.rules[0].fire, FireRange { nth: 3, times: Some(3) });
    assert_eq!(
        s.rules[0].action,
        ScenarioAction::Link(LinkAction::Partition { for_ns: Some(200_000_000), peer: None })
    );
    let o = s.clone().with_params(&[("cut_ms".into(), 800), ("k".into(), 2)]).unwrap();
    assert_eq!(o.params, [("cut_ms".to_owned(), 800), ("k".to_owned(), 2)]);
    assert_eq!(
        o.rules[0].action,
        ScenarioAction::Link(LinkAction::Partition { for_ns: Some(800_000_000), peer: None })
    );
    let ScenarioAction::Device(d) = o.rules[1].action else { panic!() };
    assert_eq!((d.count, d.target), (2, Target::Qp(2)));
    let e = s.clone().with_params(&[("cut_m".into(), 1)]).unwrap_err();
    assert_eq!((e.origin.as_str(), e.line, e.column), ("--param", 0, 0));
    assert!(e.message.contains("unknown param \"cut_m\" (did you mean \"cut_ms\"?)"), "{e}");
    // An override out of a key's range is that key's error, in the file.
    let e = s.with_params(&[("cut_ms".into(), -1)]).unwrap_err();
    assert_eq!((e.line, e.column), (11, 10));
    assert!(e.message.contains("out of range"), "{e}");
    let none = ok(HEAD).with_params(&[("x".into(), 1)]).unwrap_err();
    assert!(none.message.contains("declares no [params]"));
}

#[test]
fn syntax_errors_have_line_and_column() {
    let e = fails("[scenario]\nname = \"t\"\nsummary = \n", 3, 11, "syntax error");
    assert_eq!(e.to_string().lines().nth(1), Some("3 | summary = "));
    fails("[scenario\n", 1, 10, "syntax error");
    fails("[scenario]\nname = \"t\nsummary = \"s\"\n", 2, 10, "syntax error");
    fails(&format!("{HEAD}name = \"u\"\n"), 4, 1, "syntax error"); // duplicate key
}

#[test]
fn structure_errors() {
    fails("", 1, 1, "missing [scenario]");
    fails("[scenario]\nsummary = \"s\"\n", 1, 1, "missing `name`");
    fails("[scenario]\nname = \"t\"\n", 1, 1, "missing `summary`");
    fails(&format!("{HEAD}[other]\n"), 4, 2, "unknown key \"other\" in the file");
    fails(&format!("{HEAD}extra = 1\n"), 4, 1, "unknown key \"extra\" in [scenario]");
    let e = fails(&format!("{HEAD}sede = 1\n"), 4, 1, "did you mean \"seed\"");
    assert!(e.message.contains("(valid: name, summary, seed, faults)"), "{e}");
    fails("scenario = 3\n", 1, 12, "[scenario] must be a table");
    fails(&format!("rule = 3\n{HEAD}"), 1, 8, "[[rule]] tables");
    fails(&format!("{HEAD}[rule]\naction = \"drop\"\n"), 4, 1, "[[rule]] tables");
    fails(&format!("{HEAD}[[rule]]\naction = \"drop\"\nname = \"a\"\n[[rule]]\naction = \"drop\"\nname = \"a\"\n"), 7, 1, "two rules named \"a\"");
}

#[test]
fn scenario_key_errors() {
    fails("[scenario]\nname = \"Bad Name\"\nsummary = \"s\"\n", 2, 8, "[a-z0-9-]");
    fails("[scenario]\nname = 3\nsummary = \"s\"\n", 2, 8, "must be a string, not integer");
    fails(&format!("{HEAD}seed = -1\n"), 4, 8, "out of range");
    fails(&format!("{HEAD}seed = \"x\"\n"), 4, 8, "names no param");
    fails(&format!("{HEAD}faults = \"loss=2\"\n"), 4, 10, "loss");
    fails(&format!("{HEAD}faults = \"bogus=1\"\n"), 4, 10, "unknown key `bogus`");
}

#[test]
fn params_errors() {
    fails(&format!("{HEAD}[params]\nCut = 1\n"), 5, 1, "param name");
    fails(&format!("{HEAD}[params]\nall = 1\n"), 5, 1, "param name");
    fails(&format!("{HEAD}[params]\ncut = \"x\"\n"), 5, 7, "must be an integer, not string");
    fails(&format!("params = 1\n{HEAD}"), 1, 10, "[params] must be a table");
    rule_fails("nth = \"k\"\naction = \"drop\"", 1, 7, "the file has no [params]");
    let text = format!("{HEAD}[params]\nkk = 1\n[[rule]]\nnth = \"k\"\naction = \"drop\"\n");
    fails(&text, 7, 7, "did you mean \"kk\"");
}

#[test]
fn expect_errors() {
    let x = |body: &str| format!("{HEAD}[expect]\n{body}\n");
    fails(&x("outcome = \"maybe\""), 5, 11, "unknown outcome \"maybe\"");
    fails(&x("outcome = \"error\""), 5, 11, "needs `status`");
    fails(
        &x("outcome = \"success\"\nstatus = \"IBV_WC_REM_OP_ERR\""),
        6,
        10,
        "needs outcome = \"error\"",
    );
    fails(&x("outcome = \"error\"\nstatus = \"RETRY_EXC_ERR\""), 6, 10, "unknown status");
    fails(&x("within_ms = 0"), 5, 13, "out of range");
    fails(&x("min_counters = 3"), 5, 16, "must be a table");
    fails(&x("min_counters = { Bad = 1 }"), 5, 18, "counter name");
    fails(&x("max_counters = { a = -1 }"), 5, 22, "out of range");
    fails(&x("async_event = \"QP_FATAL\""), 5, 15, "unknown async_event");
    fails(&x("exit = \"crashed\""), 5, 8, "unknown exit");
    fails(&x("observe = 1"), 5, 11, "must be a string");
    fails(&x("outcom = \"success\""), 5, 1, "did you mean \"outcome\"");
    fails(&x("[expect.Server]\noutcome = \"success\""), 5, 9, "role");
    fails(&x("[expect.server]\nserver2 = 1"), 6, 1, "unknown key \"server2\" in [expect.server]");
    fails(&x("[expect.server]\noutcome = \"error\""), 6, 11, "needs `status`");
}

#[test]
fn rule_errors() {
    rule_fails("dir = \"in\"", 0, 1, "missing `action`");
    rule_fails("action = \"explode\"", 1, 10, "unknown action \"explode\"");
    rule_fails("action = \"dorp\"", 1, 10, "did you mean \"drop\"");
    rule_fails("action = 1", 1, 10, "must be a string");
    rule_fails("action = \"drop\"\ndelay_ms = 3", 2, 1, "did you mean \"delay_us\"");
    rule_fails(
        "action = \"drop\"\ndelay_us = 3",
        2,
        1,
        "action `drop` takes no `delay_us` (its parameters: none)",
    );
    rule_fails("action = \"rnr\"\nfor_ms = 3", 2, 1, "(its parameters: count, target)");
    rule_fails("action = \"delay\"", 1, 10, "needs `delay_us`");
    rule_fails("action = \"stall\"", 1, 10, "needs `for_ms`");
    rule_fails("name = \"a b\"\naction = \"drop\"", 1, 8, "rule name");
    rule_fails("role = \"Server\"\naction = \"drop\"", 1, 8, "role");
    rule_fails("device = \"host\"\naction = \"drop\"", 1, 10, "not an IP address");
    rule_fails("peer = 10\naction = \"drop\"", 1, 8, "must be a string");
    rule_fails("dir = \"up\"\naction = \"drop\"", 1, 7, "unknown dir \"up\"");
    rule_fails(
        "opcode = \"RC_SEND_ONYL\"\naction = \"drop\"",
        1,
        10,
        "did you mean \"RC_SEND_ONLY\"",
    );
    rule_fails("opcode = \"SEND\"\naction = \"drop\"", 1, 10, "opcode table");
    rule_fails("class = \"acks\"\naction = \"drop\"", 1, 9, "did you mean \"ack\"");
    rule_fails("position = \"start\"\naction = \"drop\"", 1, 12, "unknown position");
    rule_fails("qpn = 0x1000000\naction = \"drop\"", 1, 7, "out of range 0..=16777215");
    rule_fails("qp = 0\naction = \"drop\"", 1, 6, "out of range 1..=4096");
    rule_fails("psn_offset = -1\naction = \"drop\"", 1, 14, "out of range");
    rule_fails("message = 0\naction = \"drop\"", 1, 11, "out of range");
    rule_fails("retransmit = \"no\"\naction = \"drop\"", 1, 14, "true or false");
    rule_fails("nth = 0\naction = \"drop\"", 1, 7, "out of range");
    rule_fails(
        "nth = 1.5\naction = \"drop\"",
        1,
        7,
        "must be an integer (or a param's name), not float",
    );
    rule_fails("times = 2\naction = \"drop\"", 1, 1, "`times` needs `nth`");
    rule_fails("nth = 1\ntimes = 0\naction = \"drop\"", 2, 9, "out of range");
    rule_fails("chance = 1.5\naction = \"drop\"", 1, 10, "out of range 0..=1");
    rule_fails("chance = nan\naction = \"drop\"", 1, 10, "out of range 0..=1");
    rule_fails("chance = \"half\"\naction = \"drop\"", 1, 10, "must be a number");
    rule_fails("after_ms = 3600001\naction = \"drop\"", 1, 12, "out of range 0..=3600000");
    rule_fails("after_ms = 5\nuntil_ms = 5\naction = \"drop\"", 2, 12, "after `after_ms`");
    rule_fails("action = \"duplicate\"\ncopies = 17", 2, 10, "out of range 1..=16");
    rule_fails("action = \"duplicate\"\ngap_us = 10000001", 2, 10, "out of range 0..=10000000");
    rule_fails("action = \"delay\"\ndelay_us = 0", 2, 12, "out of range");
    rule_fails("action = \"reorder\"\nbehind = 65", 2, 10, "out of range 1..=64");
    rule_fails("action = \"corrupt\"\nbit = -1", 2, 7, "out of range");
    rule_fails("action = \"link_down\"\nfor_ms = 0", 2, 10, "out of range");
    rule_fails("action = \"rnr\"\ncount = 0", 2, 9, "out of range");
    rule_fails(
        "action = \"rnr\"\ntarget = \"first\"",
        2,
        10,
        "target: \"matched\", \"all\" or a QP ordinal",
    );
    rule_fails("action = \"rnr\"\ntarget = 0", 2, 10, "out of range 1..=4096");
    rule_fails("action = \"crash\"\nexit = 1", 2, 8, "true or false");
    rule_fails("action = \"drop\"\nrule = 1", 2, 1, "unknown key \"rule\" in [[rule]] 1");
}

#[test]
fn display_names_file_line_and_caret() {
    let e = rule_fails("action = \"drop\"\ndelay_ms = 3", 2, 1, "delay_us");
    let shown = e.to_string();
    let mut lines = shown.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("scenario t.toml:6:1: unknown key \"delay_ms\" in [[rule]] 1"));
    assert_eq!(lines.next(), Some("6 | delay_ms = 3"));
    assert_eq!(lines.next(), Some("  | ^"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// Any text: an error or a scenario, never a panic.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*") {
        let _ = Scenario::parse(&text, "p");
    }

    /// A valid file with one byte changed, or cut short: the same.
    #[test]
    fn mutated_files_never_panic(index in 0usize..4096, byte in any::<u8>(), cut in any::<bool>()) {
        let base = library::SCENARIOS[index % library::SCENARIOS.len()].1;
        let mut bytes = base.as_bytes().to_vec();
        let at = index % bytes.len();
        if cut { bytes.truncate(at) } else { bytes[at] = byte }
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = Scenario::parse(&text, "p") {
            prop_assert!(e.line >= 1 && e.column >= 1);
            let _ = e.to_string();
        }
    }

    /// Keys and values drawn from the schema's vocabulary, in any order.
    #[test]
    fn schema_soup_never_panics(pairs in proptest::collection::vec((0usize..40, 0usize..16), 0..12)) {
        const KEYS: [&str; 40] = ["name", "role", "device", "dir", "peer", "opcode", "class", "position",
            "qpn", "qp", "psn_offset", "message", "retransmit", "nth", "times", "chance", "after_ms",
            "until_ms", "action", "copies", "gap_us", "delay_us", "behind", "max_hold_us", "bit", "for_ms",
            "count", "target", "exit", "seed", "faults", "summary", "outcome", "status", "x", "all",
            "matched", "within_ms", "k", "observe"];
        const VALUES: [&str; 16] = ["1", "0", "-1", "\"k\"", "\"all\"", "\"drop\"", "\"rnr\"", "true",
            "0.5", "\"in\"", "\"127.0.0.1\"", "9223372036854775807", "\"partition\"", "\"crash\"",
            "{ a = 1 }", "\"matched\""];
        let mut text = format!("{HEAD}[params]\nk = 2\n[[rule]]\n");
        for (k, v) in pairs {
            text.push_str(&format!("{} = {}\n", KEYS[k], VALUES[v]));
        }
        if let Err(e) = Scenario::parse(&text, "p") {
            prop_assert!(e.line >= 1);
        }
    }
}
