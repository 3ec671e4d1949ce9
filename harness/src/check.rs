//! Running a test over seeds ([`check!`](crate::check!), [`check_seeds`]).

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

thread_local! {
    /// The trace hash of the last [`crate::Sim`] run or dropped on this
    /// thread: what a failure message names.
    static LAST_TRACE_HASH: Cell<Option<u64>> = const { Cell::new(None) };
}

pub(crate) fn record_trace_hash(hash: u64) {
    LAST_TRACE_HASH.with(|h| h.set(Some(hash)));
}

/// The seeds to run: `UROCE_SEED=n` alone, else `1..=UROCE_SEEDS`
/// (default [`DEFAULT_SEEDS`]).
pub fn seeds() -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_owned());
    if let Some(seed) = var("UROCE_SEED") {
        let seed = seed.parse().unwrap_or_else(|_| panic!("UROCE_SEED={seed}: not a number"));
        return vec![seed];
    }
    let n = match var("UROCE_SEEDS") {
        Some(n) => n.parse().unwrap_or_else(|_| panic!("UROCE_SEEDS={n}: not a number")),
        None => DEFAULT_SEEDS,
    };
    (1..=n).collect()
}

/// Seeds a [`check!`](crate::check!) runs without `UROCE_SEEDS`.
pub const DEFAULT_SEEDS: u64 = 4;

/// Runs `body` for every seed of [`seeds`]. The first seed whose body
/// returns an error or panics ends the test: it prints
///
/// ```text
/// uroce-harness: <test> failed at seed=<n> trace_hash=<hex>
/// reproduce: UROCE_SEED=<n> cargo test -p <package> --test <target> <test> -- --exact
/// ```
///
/// and panics (with the error) or resumes the panic. `package` is the
/// test's crate ([`check!`](crate::check!) passes `CARGO_PKG_NAME`); the
/// test's name is the thread's (libtest names it so), the target the test
/// binary's. The trace hash is the last [`crate::Sim`]'s run (or dropped)
/// in the body.
pub fn check_seeds<E: Debug>(package: &str, mut body: impl FnMut(u64) -> Result<(), E>) {
    for seed in seeds() {
        LAST_TRACE_HASH.with(|h| h.set(None));
        let outcome = catch_unwind(AssertUnwindSafe(|| body(seed)));
        let failed = !matches!(outcome, Ok(Ok(())));
        if failed {
            eprintln!("{}", failure_lines(package, seed));
        }
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("seed {seed}: {e:?}"),
            Err(panic) => resume_unwind(panic),
        }
    }
}

/// The two lines printed for a failing seed.
pub fn failure_lines(package: &str, seed: u64) -> String {
    let hash = LAST_TRACE_HASH
        .with(|h| h.get())
        .map_or_else(|| "none".to_owned(), |h| format!("{h:016x}"));
    let thread = std::thread::current();
    let test = match thread.name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => "<test>".to_owned(),
    };
    let target = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_else(|| "<target>".to_owned());
    format!(
        "uroce-harness: {test} failed at seed={seed} trace_hash={hash}\n\
         reproduce: UROCE_SEED={seed} cargo test -p {package} --test {target} {test} -- --exact"
    )
}

/// Runs a test body for every seed (`UROCE_SEED=n`: that one;
/// `UROCE_SEEDS=k`: seeds 1 to k; default 4), and on failure prints the
/// seed, the trace hash and the command that reproduces it
/// ([`check_seeds`]). The body is a closure `|seed: u64| -> Result<(), E>`
/// (`E: Debug`); it may also panic.
#[macro_export]
macro_rules! check {
    ($body:expr) => {
        $crate::check_seeds(env!("CARGO_PKG_NAME"), $body)
    };
}
