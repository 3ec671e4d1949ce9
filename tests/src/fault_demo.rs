//! `examples/c/fault_demo.c` (the C example of docs/fault-testing.md),
//! built with cc against the system's `<infiniband/verbs.h>` for the tests
//! that run it under fault scenarios (`tests/tests/fault_demo.rs`,
//! `tests/tests/scenarios.rs`).

use crate::ibverbs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Builds the example into `dir` and returns the binary's path; `None`
/// (the test skipped, or failed under CI=true) without the headers or cc.
/// A compile error or warning fails the test.
pub fn build(test: &str, dir: &Path) -> Option<String> {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !ibverbs::require(test, header.exists(), "no <infiniband/verbs.h> (libibverbs-dev)")
        || !ibverbs::require(test, ibverbs::tool("cc").is_some(), "no cc")
    {
        return None;
    }
    let binary = dir.join("fault_demo");
    let built = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&binary)
        .arg(repo().join("examples/c/fault_demo.c"))
        .arg("-libverbs")
        .output()
        .expect("run cc");
    assert!(built.status.success(), "cc: {}", String::from_utf8_lossy(&built.stderr));
    Some(binary.display().to_string())
}
