//! What the libibverbs tests share: finding uroce's `libibverbs.so` (cargo
//! builds it beside the test binaries: the tests crate depends on
//! `uroce-ibverbs`), the Debian tools, and running a tool as two processes
//! on the library.
//!
//! Without the Debian packages (`ibverbs-utils`, `libibverbs-dev`,
//! `perftest`) a test prints why it skips; under `CI=true` it fails.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a missing prerequisite fails the test (CI) or skips it.
pub fn strict() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// True when `ok`; otherwise prints why `test` skips (or panics under CI).
pub fn require(test: &str, ok: bool, missing: &str) -> bool {
    if !ok {
        assert!(!strict(), "{test}: {missing} (CI=true: nothing may be missing)");
        eprintln!("skipping {test}: {missing}");
    }
    ok
}

/// uroce's library as cargo built it for these tests.
pub fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")].into_iter().find(|p| p.is_file())
}

/// A directory holding the library as `libibverbs.so.1`, for
/// `LD_LIBRARY_PATH` (as `uroce run` makes it).
pub fn library_dir() -> Option<PathBuf> {
    uroce::run::library_dir(&library()?).ok()
}

/// A program on `PATH`.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// The system's `libibverbs.so.1` (Debian's).
pub fn system_library() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        "/usr/lib64/libibverbs.so.1",
        "/usr/lib/libibverbs.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// `program` on uroce's library, its device at `addr`.
pub fn on_uroce(program: &Path, dir: &Path, addr: &str) -> Command {
    let mut command = Command::new(program);
    command
        .env("LD_LIBRARY_PATH", dir)
        .env("UROCE_ADDR", addr)
        .env_remove("UROCE_LINK")
        .env_remove("UROCE_TAP")
        .env_remove("UROCE_MTU")
        .env_remove("UROCE_FAULTS")
        .env_remove("UROCE_CAPTURE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// What a process did.
#[derive(Debug)]
pub struct Ended {
    /// Exit code (None: killed or by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Waits for `child` until `deadline` (then kills it).
pub fn finish(mut child: Child, deadline: Instant) -> Ended {
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    Ended { code, stdout, stderr }
}

/// Whether a TCP socket listens on `port` (any address).
pub fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 3
                    && format!("{} ", fields[1]).ends_with(&needle)
                    && fields[3] == "0A"
            })
        })
    })
}

/// Runs `program` as a server at `net.1` and a client at `net.2` (`net`
/// like `127.113.1`), both on uroce's library, with TCP port `port` and
/// the same `flags`; returns (server, client).
pub fn run_pair(
    program: &Path,
    dir: &Path,
    net: &str,
    port: u16,
    flags: &[&str],
) -> (Ended, Ended) {
    run_pair_env(program, dir, net, port, flags, &[])
}

/// [`run_pair`] with more environment variables on both sides (faults).
pub fn run_pair_env(
    program: &Path,
    dir: &Path,
    net: &str,
    port: u16,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Ended, Ended) {
    let limit = Duration::from_secs(60);
    let deadline = Instant::now() + limit;
    let (server_addr, client_addr) = (format!("{net}.1"), format!("{net}.2"));
    let port_text = port.to_string();
    // One side at `addr`, with `last` after the flags.
    let start = |addr: &str, last: &[&str]| {
        on_uroce(program, dir, addr)
            .envs(env.iter().copied())
            .args(["-p", &port_text])
            .args(flags)
            .args(last)
            .spawn()
    };
    let server = start(&server_addr, &[]).expect("start the server");
    let listen_deadline = Instant::now() + Duration::from_secs(15);
    while !listening(port) && Instant::now() < listen_deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = start(&client_addr, &[&server_addr]).expect("start the client");
    let client = finish(client, deadline);
    let server = finish(server, deadline);
    (server, client)
}
