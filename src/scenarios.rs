//! `uroce scenarios`: the library of fault scenarios shipped with uroce,
//! and a check of a scenario file before a run uses it.
//!
//! - `uroce scenarios`: one line per library scenario, its name and what
//!   it does, marked `(roles: ...)` when its rules or `[expect]` name
//!   roles (`--role`) and `(params: ...)` when it has `[params]`;
//! - `uroce scenarios NAME`: the scenario's file (the rules, and what a
//!   correct program observes under it), then, as comments, its roles and
//!   params and the commands that run it;
//! - `uroce scenarios --check FILE|NAME...`: loads and validates each as
//!   `uroce run --scenario` does before it starts a program (the same
//!   code, the same messages, exit status 2); a malformed file is
//!   reported with its file, line and column.

use crate::scenario_check::{firing_params, plural, roles, validate};
use std::io::Write;
use std::path::{Path, PathBuf};
use uroce_faults::scenario::{library, Scenario};
use uroce_net::udp::ScenarioConfig;

/// `uroce scenarios` flags.
#[derive(Debug, clap::Args)]
pub struct ScenariosArgs {
    /// A library scenario to print whole.
    #[arg(value_name = "NAME", conflicts_with = "check")]
    pub name: Option<String>,
    /// Check scenario files (or library names) instead: load and validate
    /// each as `uroce run --scenario` does.
    #[arg(long, value_name = "FILE|NAME", num_args = 1..)]
    pub check: Vec<PathBuf>,
}

/// Runs `uroce scenarios`: 0, 1 for an unknown name, 2 when `--check`
/// finds a file `uroce run` would refuse.
pub fn run(args: &ScenariosArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if !args.check.is_empty() {
        return check(&args.check, out, err);
    }
    if let Some(name) = &args.name {
        return match (library::get(name), Scenario::load(name)) {
            (Some(text), Ok(s)) => {
                let _ = write!(out, "{text}");
                for line in how_to_run(&s) {
                    let _ = writeln!(out, "{line}");
                }
                0
            }
            _ => {
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
                let _ = writeln!(out, "{:width$}  {}{}", s.name, s.summary, marks(&s));
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

/// ` (roles: server, client)` and ` (params: messages)`, or nothing.
fn marks(s: &Scenario) -> String {
    let mut marks = String::new();
    let roles = roles(s);
    if !roles.is_empty() {
        marks.push_str(&format!(" (roles: {})", roles.join(", ")));
    }
    if !s.params.is_empty() {
        let names: Vec<&str> = s.params.iter().map(|(n, _)| n.as_str()).collect();
        marks.push_str(&format!(" (params: {})", names.join(", ")));
    }
    marks
}

/// What `uroce scenarios NAME` adds after the file, as comments: the
/// roles, the params with their defaults, and the commands that run it
/// (a server and a client, with `--role` and one shared `--report` when
/// the scenario needs them).
fn how_to_run(s: &Scenario) -> Vec<String> {
    let roles = roles(s);
    let mut out = vec![String::new(), format!("# uroce scenarios {}: how to run it", s.name)];
    let gated: Vec<String> = s
        .rules
        .iter()
        .filter_map(|r| r.scope.role.as_ref().map(|role| format!("{} ({role})", r.name)))
        .collect();
    out.push(match (roles.is_empty(), gated.is_empty()) {
        (true, _) => "# roles: none (every rule applies to every process)".to_owned(),
        (false, true) => format!(
            "# roles: {} (for [expect.<role>]: --role selects what --check expects)",
            roles.join(", ")
        ),
        (false, false) => format!(
            "# roles: {} (rules for one role only: {}; give each process its --role)",
            roles.join(", "),
            gated.join(", ")
        ),
    });
    if s.params.is_empty() {
        out.push("# params: none".to_owned());
    } else {
        let firing = firing_params(s);
        for (name, value) in &s.params {
            let sets =
                firing.iter().find(|(p, _, _)| p == name).map_or(String::new(), |(_, _, r)| {
                    format!(" (sets where rule(s) {} fire: match it to your program)", r.join(", "))
                });
            out.push(format!("# params: {name} = {value}{sets}"));
        }
    }
    // One shared report when a role's rules fire in the other process or
    // an expectation is timed from the first firing.
    let within = std::iter::once(&s.expect.common)
        .chain(s.expect.roles.iter().map(|(_, e)| e))
        .any(|e| e.within_ms.is_some());
    let report = if !gated.is_empty() || within {
        format!(" --report /tmp/{}.report", s.name)
    } else {
        String::new()
    };
    let params: String =
        s.params.iter().map(|(n, v)| format!(" --param {n}={v}")).collect::<Vec<_>>().join("");
    let role = |k: usize| match roles.get(k) {
        Some(r) => format!(" --role {r}"),
        None => String::new(),
    };
    let (server_role, client_role) = match roles.iter().position(|r| r == "server") {
        Some(k) => (role(k), role(usize::from(k == 0))),
        None => (role(0), role(1)),
    };
    out.push("# the server, then the client (each on its own address):".to_owned());
    for (addr, r, peer) in
        [("127.0.0.1", server_role, ""), ("127.0.0.2", client_role, " 127.0.0.1")]
    {
        out.push(format!(
            "#   uroce run --addr {addr} --scenario {}{params}{r}{report} --check -- PROGRAM ARGS{peer}",
            s.name
        ));
    }
    out
}

/// A `--check` argument loaded as `uroce run --scenario` loads it: a file
/// (a value with `/` or ending in `.toml`, or an existing file) or a
/// library name.
fn load(arg: &Path) -> Result<Scenario, String> {
    let text = arg.to_string_lossy();
    let plain = !text.contains('/') && !text.ends_with(".toml");
    let value = if plain && arg.is_file() { format!("./{text}") } else { text.into_owned() };
    let s = ScenarioConfig::load(&value).map_err(|e| e.to_string())?;
    validate(&s)?;
    Ok(s)
}

/// `--check`: every file or name loaded and validated as `uroce run`
/// does; each error printed as it prints it (a parse error: file:line:
/// column, the line, a caret). Exit status 2 when any fails.
fn check(files: &[PathBuf], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut status = 0;
    for file in files {
        match load(file) {
            Ok(s) => {
                let _ = writeln!(
                    out,
                    "{}: ok: {} ({}): {}",
                    s.origin,
                    s.name,
                    plural(s.rules.len(), "rule"),
                    s.summary
                );
            }
            Err(e) => {
                let _ = writeln!(err, "uroce scenarios: {e}");
                status = 2;
            }
        }
    }
    status
}
