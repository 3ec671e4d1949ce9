//! `uroce run -- PROGRAM ARGS...`: runs an unmodified verbs program on a
//! uroce device. It points the dynamic linker at uroce's `libibverbs.so.1`
//! and `librdmacm.so.1` (built beside the `uroce` binary: `cargo build`
//! builds them all), sets the device's configuration (`UROCE_*`) from the
//! flags, and replaces itself with the program (`docs/libibverbs.md`,
//! `docs/rdmacm.md`).

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// `uroce run` flags: the device's configuration, then the program.
// The field docs are clap's help text, written as the tools print it
// (`<PORT>`, `[params]`), not rustdoc markup.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The device's address, `IP` or `IP/prefix` (UROCE_ADDR; default
    /// 127.0.0.1).
    #[arg(long, value_name = "IP")]
    pub addr: Option<String>,
    /// The L2 transport: `<local ip:port>,<remote ip:port>` (UROCE_LINK).
    #[arg(long, value_name = "LOCAL,REMOTE", conflicts_with = "tap")]
    pub link: Option<String>,
    /// The L2 transport over a TAP interface (UROCE_TAP).
    #[arg(long, value_name = "IF")]
    pub tap: Option<String>,
    /// The link MTU of the L2 transport (UROCE_MTU).
    #[arg(long, value_name = "N")]
    pub mtu: Option<u32>,
    /// Faults on outgoing packets (UROCE_FAULTS; see `docs/runtime.md`).
    #[arg(long, value_name = "SPEC")]
    pub faults: Option<String>,
    /// Write every packet to this pcap file (UROCE_CAPTURE).
    #[arg(long, value_name = "FILE.pcap")]
    pub capture: Option<PathBuf>,
    /// Run a fault scenario at the device's port (UROCE_SCENARIO): a
    /// library name (`uroce scenarios`) or a file. The program then runs as
    /// a child; when it ends, a summary of the scenario's report is printed.
    /// The variables do what the flags do (a flag wins over its variable);
    /// the flags below need a scenario from one or the other.
    #[arg(long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,
    /// The scenario engine's seed (UROCE_SCENARIO_SEED; default the file's).
    #[arg(long, value_name = "N")]
    pub scenario_seed: Option<u64>,
    /// Override one of the scenario's [params] (UROCE_SCENARIO_PARAMS;
    /// repeatable).
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// This process's role (UROCE_SCENARIO_ROLE): rules with a `role`
    /// apply only to it, and `--check` uses `[expect.ROLE]` when there is one.
    #[arg(long, value_name = "R")]
    pub role: Option<String>,
    /// Where the device writes the scenario's report (UROCE_SCENARIO_REPORT;
    /// default a temporary file). Runs that share one see each other's
    /// firings (`within_ms` measures from the earliest).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Compare what happened with the scenario's [expect] (for --role), and
    /// that a rule fired: exit status 3 and the failed expectation named
    /// when it differs.
    #[arg(long)]
    pub check: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub program: Vec<OsString>,
}

/// The libraries `uroce run` puts before the system's: (the file cargo
/// builds, the soname programs load, the variable naming another build).
/// The first, uroce's libibverbs, is required; the others are linked when
/// built (without uroce's librdmacm, the system's runs on uroce's verbs).
const LIBRARIES: [(&str, &str, &str); 2] = [
    ("libibverbs.so", "libibverbs.so.1", "UROCE_LIBIBVERBS"),
    ("librdmacm.so", "librdmacm.so.1", "UROCE_LIBRDMACM"),
];

/// Where uroce's libibverbs is: `UROCE_LIBIBVERBS` if set, else beside the
/// running `uroce` (target/<profile>/).
fn library() -> Result<PathBuf, String> {
    let (file, _, var) = LIBRARIES[0];
    if let Some(path) = std::env::var_os(var) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("where is uroce? {e}"))?;
    let dir = exe.parent().ok_or("uroce has no directory")?;
    Ok(dir.join(file))
}

/// A directory holding `libibverbs.so.1` → `lib` and the other
/// `LIBRARIES` found beside it (or where their variable says), made
/// beside it (`uroce-lib/`), for `LD_LIBRARY_PATH`. Each link is replaced
/// atomically (a link of a name of its own, renamed), so runs started
/// together agree.
pub fn library_dir(lib: &Path) -> Result<PathBuf, String> {
    let lib = lib.canonicalize().map_err(|e| {
        format!(
            "uroce's libibverbs is not at {}: {e} (build it: cargo build -p uroce-ibverbs, \
             or set UROCE_LIBIBVERBS)",
            lib.display()
        )
    })?;
    let base = lib.parent().ok_or("the library has no directory")?;
    let dir = base.join("uroce-lib");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (k, (file, soname, var)) in LIBRARIES.into_iter().enumerate() {
        let target = if k == 0 {
            Some(lib.clone())
        } else {
            let path = std::env::var_os(var).map_or_else(|| base.join(file), PathBuf::from);
            path.canonicalize().ok()
        };
        if let Some(target) = target {
            link(&dir, soname, &target)?;
        }
    }
    Ok(dir)
}

/// Makes `dir/name` a link to `target` (atomically replaced).
fn link(dir: &Path, name: &str, target: &Path) -> Result<(), String> {
    let link = dir.join(name);
    if std::fs::read_link(&link).ok().as_deref() != Some(target) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("linking {}: {e}", link.display()))?;
    }
    Ok(())
}

/// The `UROCE_*` variables the flags ask for.
fn variables(args: &RunArgs) -> Vec<(&'static str, OsString)> {
    let mut vars = Vec::new();
    let mut set = |name, value: Option<OsString>| {
        if let Some(v) = value {
            vars.push((name, v));
        }
    };
    set("UROCE_ADDR", args.addr.clone().map(Into::into));
    set("UROCE_LINK", args.link.clone().map(Into::into));
    set("UROCE_TAP", args.tap.clone().map(Into::into));
    set("UROCE_MTU", args.mtu.map(|m| m.to_string().into()));
    set("UROCE_FAULTS", args.faults.clone().map(Into::into));
    set("UROCE_CAPTURE", args.capture.clone().map(Into::into));
    set("UROCE_SCENARIO", args.scenario.clone().map(Into::into));
    set("UROCE_SCENARIO_SEED", args.scenario_seed.map(|s| s.to_string().into()));
    set("UROCE_SCENARIO_PARAMS", (!args.params.is_empty()).then(|| args.params.join(",").into()));
    set("UROCE_SCENARIO_ROLE", args.role.clone().map(Into::into));
    vars
}

/// The exit status `uroce run --check` returns when an expectation fails.
pub const CHECK_FAILED: i32 = 3;

/// A variable's value, `None` when unset or blank (as the device reads it).
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Runs `uroce run`: returns only on failure (the program replaces it).
pub fn run(args: &RunArgs, err: &mut dyn Write) -> i32 {
    let mut vars = variables(args);
    // A scenario from `--scenario` or, as the device reads it,
    // `UROCE_SCENARIO`: the other flags and variables go with either.
    let scenario = args.scenario.is_some() || env_var("UROCE_SCENARIO").is_some();
    if !scenario {
        let given = [
            (args.scenario_seed.is_some(), "--scenario-seed"),
            (!args.params.is_empty(), "--param"),
            (args.role.is_some(), "--role"),
            (args.report.is_some(), "--report"),
            (args.check, "--check"),
        ];
        if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
            let _ = writeln!(
                err,
                "uroce run: {flag} is for a fault scenario: give --scenario NAME|FILE (or set \
                 UROCE_SCENARIO)"
            );
            return 2;
        }
    }
    // Under a scenario the device reports to a file we read afterwards:
    // `--report`, else UROCE_SCENARIO_REPORT, else a temporary one.
    let mut report = None;
    let mut temp_report = None;
    if scenario {
        let named =
            args.report.clone().or_else(|| env_var("UROCE_SCENARIO_REPORT").map(PathBuf::from));
        let path = named.unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = std::env::temp_dir()
                .join(format!("uroce-run-{}-{nanos}.report", std::process::id()));
            temp_report = Some(path.clone());
            path
        });
        vars.push(("UROCE_SCENARIO_REPORT", path.clone().into()));
        // The summary below is the report's: the library's own would say
        // the same again.
        vars.push(("UROCE_SCENARIO_SUMMARY", "report".into()));
        report = Some(path);
    }
    // The configuration the library will read, checked now: a mistake is
    // reported here rather than as a program that finds no device.
    let lookup = |name: &str| match vars.iter().find(|(n, _)| *n == name) {
        Some((_, v)) => v.to_str().map(str::to_owned),
        None => std::env::var(name).ok(),
    };
    let config = match uroce_net::udp::UdpConfig::from_vars(lookup) {
        Ok(config) => config,
        Err(e) => {
            let _ = writeln!(err, "uroce run: {e}");
            return 2;
        }
    };
    if let Some(sc) = &config.scenario {
        if let Err(e) = crate::scenario_check::validate(&sc.scenario) {
            let _ = writeln!(err, "uroce run: {e}");
            return 2;
        }
        for warning in crate::scenario_check::role_warnings(&sc.scenario, sc.role.as_deref()) {
            let _ = writeln!(err, "uroce run: {warning}");
        }
    }
    let dir = match library().and_then(|lib| library_dir(&lib)) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = writeln!(err, "uroce run: {e}");
            return 2;
        }
    };
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut command = std::process::Command::new(&args.program[0]);
    command.args(&args.program[1..]).env("LD_LIBRARY_PATH", path).envs(vars);
    if let (Some(sc), Some(report)) = (config.scenario, report) {
        let sharing = if temp_report.is_some() {
            crate::scenario_check::Sharing::Own
        } else {
            crate::scenario_check::Sharing::Named
        };
        let code = crate::scenario_run::spawn_and_summarize(
            command,
            &args.program[0],
            &sc,
            config.addr,
            (&report, sharing),
            args.check,
            err,
        );
        if let Some(t) = temp_report {
            let _ = std::fs::remove_file(t);
        }
        return code;
    }
    let e = command.exec();
    let _ = writeln!(err, "uroce run: {}: {e}", args.program[0].to_string_lossy());
    127
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_directory_links_every_library_built() {
        let base = std::env::temp_dir().join(format!("uroce-run-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let verbs = base.join("libibverbs.so");
        std::fs::write(&verbs, b"").unwrap();
        // librdmacm not built: only libibverbs is linked.
        let dir = library_dir(&verbs).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("libibverbs.so.1")).unwrap(),
            verbs.canonicalize().unwrap()
        );
        assert!(std::fs::symlink_metadata(dir.join("librdmacm.so.1")).is_err());
        // Built beside it: linked too.
        let cm = base.join("librdmacm.so");
        std::fs::write(&cm, b"").unwrap();
        let dir = library_dir(&verbs).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("librdmacm.so.1")).unwrap(),
            cm.canonicalize().unwrap()
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
