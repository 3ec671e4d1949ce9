//! rdma-core 44's own test suite (Debian's `python3-pyverbs` ships it in
//! `/usr/share/doc/rdma-core/tests`) against `uroce0`, on uroce's
//! `libibverbs.so.1` (and `librdmacm.so.1`): no test fails or errors, and
//! every test listed in `tests/pyverbs/pass.txt` passes (a test that passed
//! before and stops passing fails this test). `docs/libibverbs.md` has the
//! per-module table. The copy of the suite is patched for `test_rdmacm` by
//! `tests/pyverbs/uroce_suite_patch.py` (the device's IP address from its
//! GID table; the two sides of a connection on two uroce devices).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use uroce_tests::ibverbs::{finish, library_dir, require};

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// Debian's python, where `apt-get install python3-pyverbs` puts pyverbs
/// (the first `python3` on `PATH` may be another).
const PYTHON: &str = "/usr/bin/python3";

/// `tests.<module>.<Class>.<test>` → ok, skipped, FAIL or ERROR, from
/// unittest's verbose output (a test's own prints may come between its
/// name and its outcome).
fn outcomes(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending: Option<String> = None;
    for line in text.lines() {
        if let Some((name, rest)) = line.split_once(" (tests.") {
            if let Some((path, _)) = rest.split_once(')') {
                if !name.contains(' ') && path.split('.').count() == 3 {
                    let (module_class, _) = path.rsplit_once('.').expect("three parts");
                    pending = Some(format!("tests.{module_class}.{name}"));
                }
            }
        }
        let verdict = line.rsplit(" ... ").next().unwrap_or(line).trim();
        let word = verdict.split_whitespace().next().unwrap_or("");
        if let (Some(test), true) = (
            &pending,
            ["ok", "skipped", "FAIL", "ERROR"].contains(&word)
                && (line.contains(" ... ") || line == word),
        ) {
            out.insert(test.clone(), word.to_string());
            pending = None;
        }
    }
    out
}

#[test]
fn rdma_core_test_suite_passes_on_uroce() {
    let test = "rdma_core_test_suite_passes_on_uroce";
    let installed = Command::new("dpkg")
        .args(["-s", "python3-pyverbs"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !require(test, installed && Path::new(SUITE).is_dir(), "no python3-pyverbs (Debian)") {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let copy = dir.path().join("tests");
    let copied = Command::new("cp").arg("-r").arg(SUITE).arg(&copy).status().expect("cp");
    assert!(copied.success(), "copy {SUITE}");
    let gz: Vec<_> = std::fs::read_dir(&copy)
        .expect("the copy")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .collect();
    if !gz.is_empty() {
        let unzipped = Command::new("gunzip").arg("-f").args(&gz).status().expect("gunzip");
        assert!(unzipped.success(), "gunzip the suite");
    }
    // test_rdmacm on uroce: the device's address from its GID table, each
    // side of a connection a process on its own device (the script says why).
    let patch = concat!(env!("CARGO_MANIFEST_DIR"), "/pyverbs/uroce_suite_patch.py");
    let patched = Command::new(PYTHON).arg(patch).arg(&copy).status().expect("patch");
    assert!(patched.success(), "patch the copy of the suite for test_rdmacm");
    let lib = library_dir().expect("cargo builds libibverbs.so beside the tests");
    assert!(lib.join("librdmacm.so.1").exists(), "cargo builds librdmacm.so beside the tests");
    let child = Command::new(PYTHON)
        .current_dir(dir.path())
        .args(["tests/run_tests.py", "--dev", "uroce0", "--gid", "1", "-v"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("UROCE_ADDR", "127.117.0.1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the suite");
    let end = finish(child, Instant::now() + Duration::from_secs(300));
    assert!(end.code.is_some(), "the suite hung or crashed: {}", end.stderr);
    let results = outcomes(&end.stderr);
    assert!(results.len() >= 250, "the suite ran: {} results\n{}", results.len(), end.stderr);
    let bad: Vec<_> = results.iter().filter(|(_, o)| *o == "FAIL" || *o == "ERROR").collect();
    assert!(bad.is_empty(), "failures: {bad:?}\n{}", end.stderr);
    let expected = include_str!("../pyverbs/pass.txt");
    let regressed: Vec<&str> = expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|t| results.get(*t).map(String::as_str) != Some("ok"))
        .collect();
    assert!(regressed.is_empty(), "no longer pass: {regressed:?}\n{}", end.stderr);
    let passed = results.values().filter(|o| *o == "ok").count();
    eprintln!("rdma-core suite on uroce: {} tests, {passed} pass, 0 fail, 0 error", results.len());
}
