//! The `uroce` command line run in-process (`uroce::cli::run`), its output
//! captured.

/// What a `uroce` command line did.
#[derive(Debug)]
pub struct Run {
    /// Its exit status.
    pub code: i32,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

/// Runs `uroce ARGS...` in this process; its output must be UTF-8.
pub fn uroce(args: &[&str]) -> Run {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("uroce").chain(args.iter().copied());
    let code = uroce::cli::run(argv, &mut out, &mut err);
    Run {
        code,
        stdout: String::from_utf8(out).expect("utf-8 stdout"),
        stderr: String::from_utf8(err).expect("utf-8 stderr"),
    }
}
