//! The scenario library: the files of `emulator/faults/scenarios/`,
//! embedded, so that a name (`--scenario lost-ack`) resolves in every
//! program that links `uroce-faults`, `libibverbs.so.1` included.

/// Every scenario of the library: name and text, by name.
pub const SCENARIOS: [(&str, &str); 4] = [
    ("lost-ack", include_str!("../../scenarios/lost-ack.toml")),
    ("partition-heals", include_str!("../../scenarios/partition-heals.toml")),
    ("retry-exceeded", include_str!("../../scenarios/retry-exceeded.toml")),
    ("rnr-retry", include_str!("../../scenarios/rnr-retry.toml")),
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
}
