//! `uroce scenarios`: the library of fault scenarios shipped with uroce,
//! and a check of a scenario file before a run uses it.
//!
//! - `uroce scenarios`: one line per library scenario, its name and what
//!   it does;
//! - `uroce scenarios NAME`: the scenario's file (the rules, and what a
//!   correct program observes under it);
//! - `uroce scenarios --check FILE...`: parses each file as a run would;
//!   a malformed one is reported with its file, line and column.

use std::io::Write;
use std::path::PathBuf;
use uroce_faults::scenario::{library, Scenario};

/// `uroce scenarios` flags.
#[derive(Debug, clap::Args)]
pub struct ScenariosArgs {
    /// A library scenario to print whole.
    #[arg(value_name = "NAME", conflicts_with = "check")]
    pub name: Option<String>,
    /// Check scenario files instead: parse and validate each.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub check: Vec<PathBuf>,
}

/// Runs `uroce scenarios`: 0, or 1 for a malformed file or an unknown
/// name.
pub fn run(args: &ScenariosArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if !args.check.is_empty() {
        return check(&args.check, out, err);
    }
    if let Some(name) = &args.name {
        return match library::get(name) {
            Some(text) => {
                let _ = write!(out, "{text}");
                0
            }
            None => {
                let _ = writeln!(
                    err,
                    "uroce scenarios: no scenario named \"{name}\" (the library: {})",
                    library::NAMES.join(", ")
                );
                1
            }
        };
    }
    let width = library::NAMES.iter().map(|n| n.len()).max().unwrap_or(0);
    for name in library::NAMES {
        match Scenario::load(name) {
            Ok(s) => {
                let _ = writeln!(out, "{:width$}  {}", s.name, s.summary);
            }
            Err(e) => {
                // A library file that does not parse is uroce's bug.
                let _ = writeln!(err, "{e}");
                return 1;
            }
        }
    }
    0
}

/// `--check`: every file parsed; each error printed as the parser words
/// it (file:line:column, the line, a caret).
fn check(files: &[PathBuf], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut status = 0;
    for file in files {
        let origin = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(err, "uroce scenarios: {origin}: {e}");
                status = 1;
                continue;
            }
        };
        match Scenario::parse(&text, &origin) {
            Ok(s) => {
                let _ = writeln!(
                    out,
                    "{origin}: ok: {} ({} rules): {}",
                    s.name,
                    s.rules.len(),
                    s.summary
                );
            }
            Err(e) => {
                let _ = writeln!(err, "{e}");
                status = 1;
            }
        }
    }
    status
}
