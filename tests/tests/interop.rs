//! The interop matrix (`tests/interop/matrix.sh`): uroce against Linux
//! `rdma_rxe` in a qemu VM, every row in both directions, data checked
//! by the tools and every capture checked by `uroce decode`.
//!
//! The matrix needs qemu and Debian bookworm's apt sources (the VM's
//! kernel, rdma-core and perftest come from them). As root, the test
//! first runs `tests/interop/install.sh`. Without qemu or bookworm it
//! fails under `CI=true` and is skipped otherwise, saying why;
//! `UROCE_INTEROP=0` skips it on a developer's machine (never under CI);
//! `UROCE_INTEROP_ROWS=PATTERN` runs only the rows whose id matches
//! (`matrix.sh --rows`).
//!
//! The uroce side is this test binary itself: the `uroce` command's code
//! is a library, and a test of this package cannot name the `uroce`
//! package's binary, so a small script hands its arguments to the
//! [`uroce_child`] test below, which runs `uroce::cli::run` on them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The child's arguments (after `uroce`), separated by
/// [`uroce_tests::child::SEP`]; absent in
/// the parent.
const CHILD_ENV: &str = "UROCE_INTEROP_CHILD";
/// The whole matrix, image build included, must end within this bound
/// (`.ci/run` has 20 minutes for it; this is the backstop if it hangs).
const MATRIX_LIMIT_SECS: u64 = 25 * 60;

/// The child: runs the `uroce` command with the arguments in
/// [`CHILD_ENV`] and exits with its status.
#[test]
fn uroce_child() {
    uroce_tests::child::run_if_child(CHILD_ENV);
}

fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips the test (outside CI) or fails it (under CI), saying why.
fn cannot_run(why: &str) {
    assert!(!under_ci(), "the interop matrix must run under CI=true, but: {why}");
    eprintln!("interop matrix SKIPPED: {why}");
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|line| {
            line.strip_prefix("Uid:").and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
        })
    })
}

/// Why this host cannot build or boot the rxe VM, if it cannot.
fn host_problem() -> Option<String> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Some(
            "the rxe VM image is built from Debian amd64 packages: x86-64 Linux only".into(),
        );
    }
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if !os.lines().any(|line| line.trim() == "VERSION_CODENAME=bookworm") {
        return Some(
            "not Debian bookworm: tests/interop/vm/build.sh takes the VM's kernel and rdma-core \
             from bookworm's apt sources"
                .into(),
        );
    }
    match Command::new("qemu-system-x86_64").arg("--version").stdout(Stdio::null()).status() {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!("qemu-system-x86_64 --version failed ({status})")),
        Err(e) => Some(format!(
            "no qemu-system-x86_64 ({e}): run tests/interop/install.sh as root, or apt-get install \
             qemu-system-x86"
        )),
    }
}

/// A script that runs this test binary as the `uroce` command.
fn uroce_wrapper(dir: &Path) -> PathBuf {
    uroce_tests::child::uroce_wrapper(dir, "uroce_child", CHILD_ENV)
}

/// The rows `UROCE_INTEROP_ROWS` asks for (every row when unset or empty).
fn rows_asked() -> Option<String> {
    std::env::var("UROCE_INTEROP_ROWS").ok().filter(|rows| !rows.is_empty())
}

#[test]
fn interop_matrix() {
    if std::env::var("UROCE_INTEROP").as_deref() == Ok("0") {
        assert!(
            !under_ci(),
            "UROCE_INTEROP=0 is for developers: under CI=true the matrix must run"
        );
        eprintln!("interop matrix SKIPPED: UROCE_INTEROP=0");
        return;
    }
    let interop = repo_root().join("tests/interop");
    if is_root() {
        let status = Command::new("bash")
            .arg(interop.join("install.sh"))
            .stdout(std::io::stderr())
            .status()
            .expect("run tests/interop/install.sh");
        if !status.success() {
            return cannot_run(&format!("tests/interop/install.sh failed ({status})"));
        }
    }
    if let Some(why) = host_problem() {
        return cannot_run(&why);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let uroce = uroce_wrapper(dir.path());
    // Everything the matrix prints goes to this process's stderr as it
    // comes: the progress lines, a failed row's tails and the summary
    // table show with or without --nocapture.
    let status = Command::new("timeout")
        .args(["-k", "30", &MATRIX_LIMIT_SECS.to_string(), "bash"])
        .arg(interop.join("matrix.sh"))
        .arg("--uroce")
        .arg(&uroce)
        .args(rows_asked().map(|rows| ["--rows".to_string(), rows]).into_iter().flatten())
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .expect("run tests/interop/matrix.sh");
    assert!(
        status.success(),
        "the interop matrix failed ({status}{}): see the summary table above; artifacts in \
         tests/interop/build/matrix/latest/",
        if status.code() == Some(124) { ", stopped after 25 minutes" } else { "" }
    );
}
