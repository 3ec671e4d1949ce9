//! `tests/perf/vs-peers.sh --quick`: the performance script still works end
//! to end (baseline, UCX over TCP, `uroce bench`, perftest and
//! `ibv_rc_pingpong` on uroce's library, the raw UDP ping-pong, the engine)
//! and prints every figure. Tiny iteration counts and no timing assertion:
//! the figures of a quick run mean nothing.
//!
//! The script's programs are what this `cargo test` built: `uroce` is this
//! test binary (the command's code is a library; a small script hands its
//! arguments to the [`uroce_child`] test, as tests/tests/interop.rs does),
//! `uroce-perf` is this package's binary, the library the one beside the
//! tests. Only `../shared/baseline` is built by the script (in
//! target/baseline). It needs `ucx-utils`, `perftest` and `ibverbs-utils`,
//! which the script installs with apt as root; otherwise the test says why
//! it skips, and under `CI=true` it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use uroce_tests::ibverbs::{library, require};

/// The child's arguments (after `uroce`); absent in the parent.
const CHILD_ENV: &str = "UROCE_PERF_SCRIPT_CHILD";

/// Every figure the script prints, each as `metric=<name> value=<number>`.
const METRICS: [&str; 20] = [
    "ratio_write_bw_64KiB_to_ucx_am_bw",
    "ratio_write_bw_64KiB_to_gso_gro",
    "ratio_write_bw_64KiB_to_plain",
    "ratio_write_bw_64KiB_no_offload_to_plain",
    "ratio_send_lat_64B_to_ucx_tag_lat",
    "ratio_ib_send_lat_64B_to_ucx_tag_lat",
    "ratio_send_rtt_64B_to_uroce_style_udp",
    "ratio_send_rtt_64B_to_busy_udp",
    "ratio_rc_pingpong_64B_to_uroce_style_udp",
    "ratio_write_msgrate_8B_to_mmsg32_fc",
    "ratio_write_bw_many_qps_to_1qp",
    "ratio_write_bw_many_qps_shared_port_to_1qp",
    "ratio_qp_bytes_beyond_rings_to_2KiB",
    "many_qps_retry_exceeded_err",
    "many_qps_open_loop_retry_exceeded_err",
    "ratio_slowest_qp_share",
    "many_qps_shared_port_open_loop_retry_exceeded_err",
    "ratio_slowest_qp_share_shared_port",
    "ratio_engine_send_8B_to_2Mpps",
    "ratio_engine_write_64KiB_to_2GBps",
];

/// The child: runs the `uroce` command with the arguments in
/// [`CHILD_ENV`] and exits with its status.
#[test]
fn uroce_child() {
    uroce_tests::child::run_if_child(CHILD_ENV);
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A script that runs this test binary as the `uroce` command.
fn uroce_wrapper(dir: &Path) -> PathBuf {
    uroce_tests::child::uroce_wrapper(dir, "uroce_child", CHILD_ENV)
}

/// The number of `metric=<name> value=<number>` in `out`.
fn value(out: &str, name: &str) -> Option<f64> {
    let prefix = format!("metric={name} value=");
    let line = out.lines().find(|l| l.starts_with(&prefix))?;
    line[prefix.len()..].split_whitespace().next()?.parse().ok()
}

#[test]
fn vs_peers_quick_prints_every_figure() {
    let test = "vs_peers_quick_prints_every_figure";
    let lib = library().expect("cargo builds libibverbs.so beside the tests");
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let ended = Command::new("timeout")
        .args(["-k", "10", "300", "bash"])
        .arg(repo_root().join("tests/perf/vs-peers.sh"))
        .arg("--quick")
        .env("UROCE", uroce_wrapper(dir.path()))
        .env("UROCE_PERF", env!("CARGO_BIN_EXE_uroce-perf"))
        .env("UROCE_LIBIBVERBS", &lib)
        .env("VS_PEERS_NO_BUILD", "1")
        .env_remove("VS_PEERS_QUICK")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run tests/perf/vs-peers.sh");
    let out = String::from_utf8_lossy(&ended.stdout);
    let err = String::from_utf8_lossy(&ended.stderr);
    eprintln!("{out}\n{err}");
    eprintln!("vs-peers.sh --quick took {:.1} s", started.elapsed().as_secs_f64());
    // Status 3: a prerequisite is missing and cannot be installed.
    if ended.status.code() == Some(3) {
        let why = err.lines().rfind(|l| l.starts_with("vs-peers:")).unwrap_or("?");
        require(test, false, why);
        return;
    }
    assert!(ended.status.success(), "vs-peers.sh --quick failed ({}):\n{out}\n{err}", ended.status);
    let missing: Vec<&str> = METRICS.iter().copied().filter(|m| value(&out, m).is_none()).collect();
    assert!(missing.is_empty(), "no numeric value for {missing:?} in:\n{out}");
    assert!(out.contains("| target | uroce | reference, same run | ratio | goal |"), "{out}");
}
