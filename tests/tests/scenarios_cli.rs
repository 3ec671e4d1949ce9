//! `uroce scenarios`: the library listed and printed as shipped, and
//! scenario files checked with their errors placed (file, line, column).

use std::path::PathBuf;
use uroce_tests::cli::uroce;

/// The library's files, as the source tree holds them.
fn library_files() -> Vec<(String, PathBuf)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../emulator/faults/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the scenario library")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    files.sort();
    files
}

#[test]
fn the_list_names_every_library_file_with_its_summary() {
    let run = uroce(&["scenarios"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let files = library_files();
    assert!(files.len() >= 4, "the library: {files:?}");
    let names: Vec<&str> =
        run.stdout.lines().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(names, files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), "{}", run.stdout);
    for line in run.stdout.lines() {
        assert!(line.split_whitespace().count() > 3, "a summary after the name: {line}");
    }
}

#[test]
fn the_list_marks_roles_and_params() {
    let run = uroce(&["scenarios"]);
    let line = |name: &str| {
        let found = run.stdout.lines().find(|l| l.split_whitespace().next() == Some(name));
        found.unwrap_or_else(|| panic!("{name}: {}", run.stdout)).to_owned()
    };
    assert!(line("remote-access-error").ends_with(" (roles: server, client)"), "{}", run.stdout);
    assert!(line("lost-last-ack").ends_with(" (params: messages)"), "{}", run.stdout);
    assert!(!line("lost-ack").contains(" (roles: ") && !line("lost-ack").contains(" (params: "));
}

#[test]
fn a_name_prints_its_file_as_shipped_then_how_to_run_it() {
    for (name, path) in library_files() {
        let run = uroce(&["scenarios", &name]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let file = std::fs::read_to_string(&path).unwrap();
        let rest =
            run.stdout.strip_prefix(&file).unwrap_or_else(|| panic!("{name}: {}", run.stdout));
        // Comments only: the output is still the scenario.
        assert!(rest.lines().all(|l| l.is_empty() || l.starts_with('#')), "{name}: {rest}");
        assert!(rest.contains(&format!("# uroce scenarios {name}: how to run it\n")), "{rest}");
        assert!(rest.contains(&format!("uroce run --addr 127.0.0.1 --scenario {name}")), "{rest}");
        let printed = uroce_harness::Scenario::parse(&run.stdout, "printed").unwrap();
        assert_eq!(printed.name, name);
    }
    let run = uroce(&["scenarios", "remote-access-error"]);
    let out = &run.stdout;
    assert!(out.contains("# roles: server, client (rules for one role only: bad-key (server)"));
    assert!(out.contains("# params: none\n"), "{out}");
    let report = "--report /tmp/remote-access-error.report --check -- PROGRAM ARGS";
    assert!(
        out.contains(&format!(
            "--addr 127.0.0.1 --scenario remote-access-error --role server {report}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "--addr 127.0.0.2 --scenario remote-access-error --role client {report} 127.0.0.1\n"
        )),
        "{out}"
    );
    let run = uroce(&["scenarios", "lost-last-ack"]);
    let out = &run.stdout;
    assert!(out.contains("# roles: none"), "{out}");
    assert!(out.contains("# params: messages = 1000 (sets where rule(s) last-ack fire"), "{out}");
    assert!(
        out.contains("--scenario lost-last-ack --param messages=1000 --check -- PROGRAM"),
        "{out}"
    );
    let run = uroce(&["scenarios", "no-such-scenario"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no scenario named \"no-such-scenario\""), "{}", run.stderr);
    assert!(run.stderr.contains("lost-ack"), "the library is named: {}", run.stderr);
}

#[test]
fn check_accepts_the_library_and_places_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<String> =
        library_files().iter().map(|(_, p)| p.to_string_lossy().into_owned()).collect();
    let mut args = vec!["scenarios", "--check"];
    args.extend(files.iter().map(String::as_str));
    let run = uroce(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().filter(|l| l.contains(": ok: ")).count(), files.len());
    assert!(run.stdout.contains("lost-ack.toml: ok: lost-ack (1 rule): "), "{}", run.stdout);
    // Library names too.
    let run = uroce(&["scenarios", "--check", "lost-ack", "remote-access-error"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("library:lost-ack: ok: lost-ack (1 rule): "), "{}", run.stdout);
    assert!(run.stdout.contains("library:remote-access-error: ok: "), "{}", run.stdout);
    let run = uroce(&["scenarios", "--check", "no-such-scenario"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no scenario named \"no-such-scenario\""), "{}", run.stderr);

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[scenario]\nname = \"mine\"\nsummary = \"one rule\"\n\n[[rule]]\nname = \"r\"\naction = \"explode\"\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let run = uroce(&["scenarios", "--check", bad]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains(&format!("{bad}:7:10:")), "file:line:column: {}", run.stderr);
    assert!(run.stderr.contains("unknown action \"explode\""), "{}", run.stderr);
    assert!(run.stderr.contains("7 | action = \"explode\""), "the line: {}", run.stderr);

    let run = uroce(&["scenarios", "--check", "/nonexistent/scenario.toml"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("/nonexistent/scenario.toml"), "{}", run.stderr);
}

/// `--check` refuses what `uroce run --scenario` refuses, with its
/// message: counters neither the HCA nor the runtime has, in any
/// `[expect]` table.
#[test]
fn check_validates_as_uroce_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counters.toml");
    std::fs::write(
        &file,
        "[scenario]\nname = \"counters\"\nsummary = \"s\"\n\n[expect]\noutcome = \"success\"\n\
         min_counters = { completer_retry_err = 1, no_such_counter = 1 }\n\n[[rule]]\n\
         name = \"r\"\nnth = 10\naction = \"drop\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let check = uroce(&["scenarios", "--check", file]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    let run = uroce(&["run", "--scenario", file, "--", "true"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let message = run.stderr.strip_prefix("uroce run: ").unwrap();
    assert!(message.contains("names counters neither the HCA nor the runtime has: no_such_counter"));
    assert_eq!(check.stderr.strip_prefix("uroce scenarios: "), Some(message));
    // In a role's table too.
    let role = dir.path().join("role.toml");
    std::fs::write(
        &role,
        "[scenario]\nname = \"role\"\nsummary = \"s\"\n\n[expect.client]\n\
         max_counters = { nope = 0 }\n",
    )
    .unwrap();
    let check = uroce(&["scenarios", "--check", role.to_str().unwrap()]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    assert!(check.stderr.contains("[expect.client] names counters neither"), "{}", check.stderr);
}
