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
fn a_name_prints_its_file_as_shipped() {
    for (name, path) in library_files() {
        let run = uroce(&["scenarios", &name]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        assert_eq!(run.stdout, std::fs::read_to_string(&path).unwrap(), "{name}");
    }
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

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[scenario]\nname = \"mine\"\nsummary = \"one rule\"\n\n[[rule]]\nname = \"r\"\naction = \"explode\"\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let run = uroce(&["scenarios", "--check", bad]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains(&format!("{bad}:7:10:")), "file:line:column: {}", run.stderr);
    assert!(run.stderr.contains("unknown action \"explode\""), "{}", run.stderr);
    assert!(run.stderr.contains("7 | action = \"explode\""), "the line: {}", run.stderr);

    let run = uroce(&["scenarios", "--check", "/nonexistent/scenario.toml"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("/nonexistent/scenario.toml"), "{}", run.stderr);
}
