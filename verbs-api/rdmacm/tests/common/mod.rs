//! What the librdmacm test files share: skipping (or failing under CI)
//! when a tool is missing, uroce's libraries in a directory for
//! `LD_LIBRARY_PATH`, and processes on them bounded in time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Skipping (or failing under `CI=true`) when a tool is missing, and what
/// a process did: as the libibverbs tests have them.
pub use uroce_tests::ibverbs::{require, tool, Ended};

/// Whether `tools` (of `rdmacm-utils`) are installed.
pub fn rdmacm_tools(test: &str, tools: &[&str]) -> bool {
    require(test, tools.iter().all(|t| tool(t).is_some()), "no rdmacm tools (rdmacm-utils)")
}

/// A library cargo built beside the tests (target/<profile>/).
pub fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("deps/");
    [deps.join(name), deps.join("..").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("cargo builds {name} beside the tests"))
}

/// A directory holding uroce's `libibverbs.so.1` and `librdmacm.so.1`, for
/// `LD_LIBRARY_PATH` (as `uroce run` makes it); the processes' logs go
/// there too.
pub fn library_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (file, soname) in [("libibverbs.so", "libibverbs.so.1"), ("librdmacm.so", "librdmacm.so.1")]
    {
        let lib = built(file).canonicalize().expect("the library's path");
        std::os::unix::fs::symlink(lib, dir.path().join(soname)).expect("link the library");
    }
    dir
}

/// A process on uroce's libraries, its device at `addr` with the device
/// variables `env`; its output goes to files in `dir`.
pub struct Running {
    child: std::process::Child,
    deadline: Instant,
    out: PathBuf,
    err: PathBuf,
}

pub fn start_on_uroce(
    program: &Path,
    args: &[&str],
    dir: &Path,
    addr: &str,
    env: &[(&str, &str)],
    limit: Duration,
) -> Running {
    start(program, args, dir, addr, env, limit, false)
}

/// [`start_on_uroce`] with the program's stdout line-buffered (`stdbuf
/// -oL`), for a program that prints without flushing a line the test
/// waits for (not with AddressSanitizer, which must come first).
pub fn start_logged(
    program: &Path,
    args: &[&str],
    dir: &Path,
    addr: &str,
    limit: Duration,
) -> Running {
    start(program, args, dir, addr, &[], limit, true)
}

fn start(
    program: &Path,
    args: &[&str],
    dir: &Path,
    addr: &str,
    env: &[(&str, &str)],
    limit: Duration,
    line_buffered: bool,
) -> Running {
    // Not `with_extension`: an address has dots.
    let name = program.file_name().unwrap().to_string_lossy();
    let (out, err) =
        (dir.join(format!("{name}-{addr}.out")), dir.join(format!("{name}-{addr}.err")));
    let mut command = if line_buffered {
        // stdbuf: the program's stdout, a file, line-buffered like a
        // terminal's (a test waits for a line the program prints).
        let mut c = Command::new("stdbuf");
        c.arg("-oL").arg(program);
        c
    } else {
        Command::new(program)
    };
    let child = command
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("UROCE_ADDR", addr)
        .env_remove("UROCE_LINK")
        .env_remove("UROCE_TAP")
        .env_remove("UROCE_FAULTS")
        .env_remove("UROCE_CAPTURE")
        .env_remove("UROCE_CM_RESPONSE_TIMEOUT")
        .env_remove("UROCE_CM_RETRIES")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    Running { child, deadline: Instant::now() + limit, out, err }
}

impl Drop for Running {
    /// A process a failed test leaves behind is killed.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    /// Waits for the exit, killing the process at its deadline.
    pub fn finish(mut self) -> Ended {
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if Instant::now() < self.deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        Ended {
            code,
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
        }
    }

    /// Kills the process now (`SIGKILL`); what it printed.
    pub fn kill(mut self) -> Ended {
        self.deadline = Instant::now();
        self.finish()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits (up to 30 s) until the process printed `line` on stdout.
    pub fn wait_for(&self, line: &str) {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if std::fs::read_to_string(&self.out).unwrap_or_default().contains(line) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        panic!("{} printed no {line:?} in 30 s; stderr: {err}", self.out.display());
    }
}
