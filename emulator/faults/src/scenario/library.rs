//! The scenario library: the files of `emulator/faults/scenarios/`,
//! embedded, so that a name (`--scenario lost-ack`) resolves in every
//! program that links `uroce-faults`, `libibverbs.so.1` included.

/// Every scenario of the library: name and text, by name.
pub const SCENARIOS: [(&str, &str); 15] = [
    ("duplicate-atomics", include_str!("../../scenarios/duplicate-atomics.toml")),
    ("ghost-responses", include_str!("../../scenarios/ghost-responses.toml")),
    ("implied-nak", include_str!("../../scenarios/implied-nak.toml")),
    ("lost-ack", include_str!("../../scenarios/lost-ack.toml")),
    ("lost-last-ack", include_str!("../../scenarios/lost-last-ack.toml")),
    ("partition-heals", include_str!("../../scenarios/partition-heals.toml")),
    ("partition-outlasts-retries", include_str!("../../scenarios/partition-outlasts-retries.toml")),
    ("peer-crash", include_str!("../../scenarios/peer-crash.toml")),
    ("remote-access-error", include_str!("../../scenarios/remote-access-error.toml")),
    ("remote-op-error", include_str!("../../scenarios/remote-op-error.toml")),
    ("reorder-in-message", include_str!("../../scenarios/reorder-in-message.toml")),
    ("retry-exceeded", include_str!("../../scenarios/retry-exceeded.toml")),
    ("rnr-retry", include_str!("../../scenarios/rnr-retry.toml")),
    ("rnr-retry-exceeded", include_str!("../../scenarios/rnr-retry-exceeded.toml")),
    ("rnr-storm", include_str!("../../scenarios/rnr-storm.toml")),
];

/// The names, in order (those of [`SCENARIOS`]).
pub const NAMES: [&str; SCENARIOS.len()] = {
    let mut names = [""; SCENARIOS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = SCENARIOS[i].0;
        i += 1;
    }
    names
};

/// A library scenario's text.
pub fn get(name: &str) -> Option<&'static str> {
    SCENARIOS.iter().find(|(n, _)| *n == name).map(|&(_, text)| text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn every_library_file_parses_under_its_own_name() {
        assert_eq!(NAMES.len(), SCENARIOS.len());
        for (i, (name, _)) in SCENARIOS.iter().enumerate() {
            assert_eq!(NAMES[i], *name);
            let s = Scenario::load(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.name, *name);
            assert!(!s.rules.is_empty() && s.expect.common.outcome.is_some());
        }
        assert!(Scenario::load("no-such").unwrap_err().message.contains("lost-ack"));
    }

    /// `[expect]` (no role) holds for every process whatever its traffic:
    /// a counter there only beside the error that implies it (the
    /// side-specific ones are in `[expect.server]`/`[expect.client]`); a
    /// role table states its outcome (or the role's exit); every table
    /// says what a correct program sees.
    #[test]
    fn expectations_are_per_role_where_they_depend_on_the_side() {
        use crate::scenario::Outcome;
        for name in NAMES {
            let s = Scenario::load(name).unwrap();
            let common = &s.expect.common;
            assert!(
                common.min_counters.is_empty() || common.outcome == Some(Outcome::Error),
                "{name}: [expect] asserts {:?} of every process",
                common.min_counters
            );
            assert!(common.observe.is_some(), "{name}: [expect] has no observe");
            for (role, e) in &s.expect.roles {
                assert!(["server", "client"].contains(&role.as_str()), "{name}: role {role}");
                assert!(e.outcome.is_some() || e.exit.is_some(), "{name}: [expect.{role}]");
            }
        }
    }
}
