//! What a scenario's roles, params and `[expect]` tables say to a run:
//! the checks before the program starts ([`validate`], [`role_warnings`])
//! and why no rule fired ([`why_no_firing`]).

use super::report::Report;
use super::verdict::{counter_names, plural, unknown_counters};
use std::net::IpAddr;
use uroce_faults::scenario::Scenario;

/// What `uroce run --scenario` checks of a loaded scenario before the
/// program starts, and `uroce scenarios --check` of a file: every
/// `[expect]` table's counters are ones the HCA or the runtime has. The
/// error is the message to print (after `uroce run: ` or `uroce
/// scenarios: `).
pub fn validate(s: &Scenario) -> Result<(), String> {
    let tables = std::iter::once(("[expect]".to_owned(), &s.expect.common))
        .chain(s.expect.roles.iter().map(|(r, e)| (format!("[expect.{r}]"), e)));
    for (table, expect) in tables {
        let unknown = unknown_counters(expect);
        if !unknown.is_empty() {
            return Err(format!(
                "scenario {}: {table} names counters neither the HCA nor the runtime has: {} \
                 (known: {})",
                s.origin,
                unknown.join(", "),
                counter_names().join(", ")
            ));
        }
    }
    Ok(())
}

/// The roles of a scenario: those its rules (`role`) and its
/// `[expect.<role>]` tables name, each once, completed to the usual pair
/// `server` and `client` when they are among it (a rule for the server
/// alone is run with the client's process as `--role client`).
pub fn roles(s: &Scenario) -> Vec<String> {
    let mut roles: Vec<String> = Vec::new();
    let named = s.rules.iter().filter_map(|r| r.scope.role.as_ref());
    for r in named.chain(s.expect.roles.iter().map(|(r, _)| r)) {
        if !roles.contains(r) {
            roles.push(r.clone());
        }
    }
    let usual = |r: &String| r == "server" || r == "client";
    if !roles.is_empty() && roles.iter().all(usual) {
        for usual in ["server", "client"] {
            if !roles.iter().any(|r| r == usual) {
                roles.push(usual.to_owned());
            }
        }
    }
    roles
}

/// The rules gated on a role other than `role` (every gated rule for no
/// role), by role: (role, the rules' names).
fn gated_elsewhere(s: &Scenario, role: Option<&str>) -> Vec<(String, Vec<String>)> {
    let mut by_role: Vec<(String, Vec<String>)> = Vec::new();
    for rule in &s.rules {
        let Some(r) = &rule.scope.role else { continue };
        if Some(r.as_str()) == role {
            continue;
        }
        match by_role.iter_mut().find(|(n, _)| n == r) {
            Some((_, names)) => names.push(rule.name.clone()),
            None => by_role.push((r.clone(), vec![rule.name.clone()])),
        }
    }
    by_role
}

/// `rule(s) a, b apply only to role server; rule(s) c only to role client`.
fn gated_text(gated: &[(String, Vec<String>)]) -> String {
    gated
        .iter()
        .enumerate()
        .map(|(k, (role, names))| {
            let apply = if k == 0 { "apply only" } else { "only" };
            format!("rule(s) {} {apply} to role {role}", names.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The warnings `uroce run` prints as it loads scenario `s` for a process
/// of role `role`: rules gated on a role the process does not have (no
/// role given), or a role the scenario never names.
pub fn role_warnings(s: &Scenario, role: Option<&str>) -> Vec<String> {
    let roles = roles(s);
    let mut warnings = Vec::new();
    match role {
        None => {
            let gated = gated_elsewhere(s, None);
            if !gated.is_empty() {
                warnings.push(format!(
                    "scenario {}: {}; this process has no role (--role {})",
                    s.name,
                    gated_text(&gated),
                    roles.join("|")
                ));
            }
        }
        Some(r) if !roles.iter().any(|k| k == r) => {
            let known = if roles.is_empty() {
                "the scenario names none".to_owned()
            } else {
                format!("the known roles: {}", roles.join(", "))
            };
            warnings.push(format!(
                "scenario {}: no rule and no [expect.<role>] names role {r} ({known})",
                s.name
            ));
        }
        Some(_) => {}
    }
    warnings
}

/// Rule keys that say where a rule fires.
const FIRING_KEYS: [&str; 6] = ["nth", "message", "psn_offset", "qp", "times", "after_ms"];

/// The `[params]` that set where a rule fires (a rule's `nth`, `message`,
/// ... naming it): (param, its value, the rules' names). Read from the
/// file's text: `key = "param"` lines of its `[[rule]]`s.
pub fn firing_params(s: &Scenario) -> Vec<(String, i64, Vec<String>)> {
    let mut found: Vec<(String, i64, Vec<String>)> = Vec::new();
    let mut rule: Option<usize> = None;
    let mut next = 0;
    for line in s.text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            rule = (line == "[[rule]]").then_some(next);
            next += usize::from(line == "[[rule]]");
            continue;
        }
        let (Some(k), Some((key, value))) = (rule, line.split_once('=')) else { continue };
        let (key, value) = (key.trim(), value.trim().trim_matches('"'));
        let Some(v) = s.param(value) else { continue };
        let Some(r) = s.rules.get(k) else { continue };
        if !FIRING_KEYS.contains(&key) {
            continue;
        }
        match found.iter_mut().find(|(p, _, _)| p == value) {
            Some((_, _, names)) if !names.contains(&r.name) => names.push(r.name.clone()),
            Some(_) => {}
            None => found.push((value.to_owned(), v, vec![r.name.clone()])),
        }
    }
    found
}

/// How a run's report was shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// A temporary report of this process's own.
    Own,
    /// A report named by `--report` or `UROCE_SCENARIO_REPORT`.
    Named,
}

/// Why no rule of `s` fired in a run of `role` at `addr` whose report is
/// `report`: every likely reason, the likeliest first (no device opened,
/// a role the rules need, a param that sets the firing point, what the
/// rules here matched, a report the peer did not write to).
pub fn why_no_firing(
    s: &Scenario,
    role: Option<&str>,
    addr: IpAddr,
    sharing: Sharing,
    report: &Report,
) -> String {
    let mut why = Vec::new();
    if !report.devices.contains(&addr) {
        why.push(format!("no device opened at {addr} (the program opened none)"));
    }
    let gated = gated_elsewhere(s, role);
    let roles = roles(s);
    let here = |r: &uroce_faults::scenario::RuleSpec| {
        r.scope.role.as_deref().is_none_or(|x| Some(x) == role)
            && r.scope.device.is_none_or(|d| d == addr)
    };
    match role {
        None if !gated.is_empty() => why.push(format!(
            "{}; this process has no role (--role {})",
            gated_text(&gated),
            roles.join("|")
        )),
        Some(r) if !roles.iter().any(|k| k == r) => why.push(format!(
            "no rule names role {r} (the roles: {})",
            if roles.is_empty() { "none".to_owned() } else { roles.join(", ") }
        )),
        Some(r) if !gated.is_empty() && !s.rules.iter().any(here) => {
            why.push(format!("{}, not {r}: they fire in that process", gated_text(&gated)))
        }
        _ => {}
    }
    for (param, value, rules) in firing_params(s) {
        if s.rules.iter().any(|r| rules.contains(&r.name) && here(r)) {
            why.push(format!(
                "param {param} = {value} sets where rule(s) {} fire: set it for your program \
                 (--param {param}=N)",
                rules.join(", ")
            ));
        }
    }
    let mine: Vec<String> = report
        .matched
        .iter()
        .filter(|(a, _, _)| *a == addr)
        .map(|(_, rule, n)| format!("{rule} matched {}", plural(*n as usize, "packet")))
        .collect();
    if !mine.is_empty() {
        why.push(format!(
            "the program's traffic never reached a rule's firing point on this device ({})",
            mine.join(", ")
        ));
    }
    let others = report.devices.iter().any(|d| *d != addr);
    match sharing {
        Sharing::Own => why.push(
            "the report is this process's own: share one --report between the processes to \
             see the peer's firings"
                .to_owned(),
        ),
        Sharing::Named if !others => why.push(
            "no other device wrote to the report: give the peer's run the same --report".to_owned(),
        ),
        Sharing::Named => {}
    }
    if why.is_empty() {
        why.push("the program's traffic never reached a rule's firing point".to_owned());
    }
    why.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_params_say_why_nothing_fired() {
        let me: IpAddr = "10.0.0.2".parse().unwrap();
        let rae = Scenario::load("remote-access-error").unwrap();
        assert_eq!(roles(&rae), ["server", "client"]);
        assert_eq!(
            role_warnings(&rae, None),
            ["scenario remote-access-error: rule(s) bad-key apply only to role server; this \
              process has no role (--role server|client)"]
        );
        assert!(role_warnings(&rae, Some("server")).is_empty());
        assert!(role_warnings(&rae, Some("client")).is_empty());
        let w = role_warnings(&rae, Some("srever"));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("names role srever (the known roles: server, client)"), "{w:?}");
        // No role in a scenario without roles: nothing to say.
        let lost = Scenario::load("lost-ack").unwrap();
        assert!(roles(&lost).is_empty() && role_warnings(&lost, None).is_empty());
        // Own report, no role: both reasons, the role first.
        let opened = Report::parse("1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n", 0);
        let why = why_no_firing(&rae, None, me, Sharing::Own, &opened);
        assert!(why.starts_with("rule(s) bad-key apply only to role server; this"), "{why}");
        assert!(why.contains("the report is this process's own"), "{why}");
        // A shared report the server wrote to, the client's role: the
        // rule is the server's.
        let shared = Report::parse(
            "1 scenario x 10.0.0.1 loaded at_us=0 from f seed 0\n\
             1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n",
            0,
        );
        let why = why_no_firing(&rae, Some("client"), me, Sharing::Named, &shared);
        assert_eq!(
            why,
            "rule(s) bad-key apply only to role server, not client: they fire in that process"
        );
        let why = why_no_firing(&lost, None, me, Sharing::Named, &shared);
        assert_eq!(why, "the program's traffic never reached a rule's firing point");
        let why = why_no_firing(&rae, Some("client"), me, Sharing::Named, &opened);
        assert!(why.contains("no other device wrote to the report"), "{why}");
        // The param that sets the firing point.
        let last = Scenario::load("lost-last-ack").unwrap();
        assert_eq!(
            firing_params(&last),
            [("messages".to_owned(), 1000, vec!["last-ack".to_owned()])]
        );
        let with_matches = Report::parse(
            "1 scenario x 10.0.0.2 loaded at_us=0 from f seed 0\n\
             2 scenario lost-last-ack 10.0.0.2 rule last-ack matched 100 fired 0\n",
            0,
        );
        let why = why_no_firing(&last, None, me, Sharing::Named, &with_matches);
        assert!(
            why.starts_with(
                "param messages = 1000 sets where rule(s) last-ack fire: set it for your program \
                 (--param messages=N); the program's traffic never reached a rule's firing \
                 point on this device (last-ack matched 100 packets)"
            ),
            "{why}"
        );
        // No device opened.
        let why = why_no_firing(&lost, None, me, Sharing::Own, &Report::default());
        assert!(why.starts_with("no device opened at 10.0.0.2"), "{why}");
        assert!(firing_params(&Scenario::load("partition-heals").unwrap()).is_empty());
    }
    #[test]
    fn validate_names_unknown_counters_of_every_table() {
        for name in uroce_faults::scenario::library::NAMES {
            validate(&Scenario::load(name).unwrap()).unwrap();
        }
        let text = "[scenario]\nname = \"x\"\nsummary = \"s\"\n[expect]\noutcome = \"success\"\n\
                    [expect.client]\noutcome = \"success\"\nmax_counters = { nope = 1 }\n";
        let e = validate(&Scenario::parse(text, "f.toml").unwrap()).unwrap_err();
        assert!(
            e.starts_with(
                "scenario f.toml: [expect.client] names counters neither the HCA nor \
                           the runtime has: nope (known: "
            ),
            "{e}"
        );
    }
}
