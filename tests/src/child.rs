//! The `uroce` command as a child process of an integration test.
//!
//! A test of this package cannot name the `uroce` package's binary, but
//! the command's code is a library (`uroce::cli::run`). So a test binary
//! runs *itself* as the command: one of its tests (the "child test") does
//! nothing unless an environment variable carries the arguments, in which
//! case it runs `uroce` with them and exits with its status. The parent
//! test starts the child with [`spawn`], reads its lines as they come
//! ([`Running::wait_for_line`]) and collects what it did
//! ([`Running::finish`]), always within a deadline.
//!
//! ```ignore
//! const CHILD_ENV: &str = "UROCE_MY_TEST_CHILD";
//! #[test]
//! fn my_child() {
//!     uroce_tests::child::run_if_child(CHILD_ENV);
//! }
//! // in a test:
//! let server = spawn("my_child", CHILD_ENV, &["pingpong", "-g", "1"], &[("UROCE_ADDR", a)]);
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Separates the arguments in the child's environment variable.
pub const SEP: char = '\u{1f}';

/// The device settings a child never inherits from the test's own
/// environment (a developer's shell may have them set); a test passes
/// what it wants explicitly.
const CLEARED_ENV: [&str; 5] =
    ["UROCE_ADDR", "UROCE_FAULTS", "UROCE_CAPTURE", "UROCE_LINK", "UROCE_MTU"];

/// The child test's body: when `child_env` is set, runs the `uroce`
/// command with the arguments it carries (separated by [`SEP`]; a trailing
/// separator is allowed), printing straight to stdout and stderr, and exits
/// with the command's status. In the parent it returns at once.
pub fn run_if_child(child_env: &str) {
    let Ok(joined) = std::env::var(child_env) else { return };
    let joined = joined.strip_suffix(SEP).unwrap_or(&joined);
    let args: Vec<String> = if joined.is_empty() {
        Vec::new()
    } else {
        joined.split(SEP).map(str::to_string).collect()
    };
    // Start on a line of our own (the harness printed `test ... `).
    println!();
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let code =
        uroce::cli::run(std::iter::once("uroce".to_string()).chain(args), &mut out, &mut err);
    let _ = out.flush();
    let _ = err.flush();
    std::process::exit(code);
}

/// Writes an executable `uroce` script into `dir` that runs this test
/// binary as the command (its test `child_test`, with the script's
/// arguments in `child_env`): for scripts that take the `uroce` command as
/// a path (`tests/interop/matrix.sh`, `tests/perf/vs-peers.sh`).
pub fn uroce_wrapper(
    dir: &std::path::Path,
    child_test: &str,
    child_env: &str,
) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let script = format!(
        "#!/bin/sh\n\
         # uroce, as a test binary carries it: the arguments go to its {child_test} test\n\
         {child_env}=$(printf '%s\\037' \"$@\") exec '{}' --exact {child_test} --nocapture \
         --test-threads=1 --quiet\n",
        exe.display()
    );
    let path = dir.join("uroce");
    std::fs::write(&path, script).expect("write the uroce wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Starts this test binary as `uroce <args>`: its test `child_test`
/// (which calls [`run_if_child`] with `child_env`) with `env` set and the
/// other device settings cleared.
pub fn spawn<A: AsRef<str>>(
    child_test: &str,
    child_env: &str,
    args: &[A],
    env: &[(&str, String)],
) -> Running {
    let exe = std::env::current_exe().expect("the test binary");
    let joined = args.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(&SEP.to_string());
    let mut command = Command::new(exe);
    command.args(["--exact", child_test, "--nocapture", "--test-threads=1"]).env(child_env, joined);
    for name in CLEARED_ENV {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    let stdout = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut stderr_pipe = child.stderr.take().expect("piped stderr");
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stderr_pipe.read_to_string(&mut all);
        all
    });
    Running { child, stdout: Some(stdout), stderr: Some(stderr), lines }
}

/// A running child and the threads collecting its output. Dropping it
/// (a failed assertion) kills the child.
pub struct Running {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    lines: mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // Nothing happens if it already exited and was waited for.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a child did.
#[derive(Debug)]
pub struct Finished {
    /// The exit status; `None` when it was killed (or died of a signal).
    pub code: Option<i32>,
    /// The signal it died of (9 also when [`Running::finish`] killed it
    /// at its deadline: see `killed_at_deadline`).
    pub signal: Option<i32>,
    /// [`Running::finish`] killed it: it was still running at the deadline.
    pub killed_at_deadline: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Standard output then standard error, for assertion messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl Running {
    /// Waits until a line containing `marker` is printed on standard
    /// output (a server prints its address once it listens); false if
    /// none came within `limit` or the child ended first.
    pub fn wait_for_line(&self, marker: &str, limit: Duration) -> bool {
        self.line_with(marker, limit).is_some()
    }

    /// Like [`Running::wait_for_line`], returning the line.
    pub fn line_with(&self, marker: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Waits for the child to exit, killing it at `deadline`.
    pub fn finish(mut self, deadline: Instant) -> Finished {
        use std::os::unix::process::ExitStatusExt;
        let mut killed_at_deadline = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    killed_at_deadline = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        let code = status.and_then(|s| s.code());
        let signal = status.and_then(|s| s.signal());
        let join =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        let stdout = join(self.stdout.take());
        let stderr = join(self.stderr.take());
        Finished { code, signal, killed_at_deadline, stdout, stderr }
    }
}
