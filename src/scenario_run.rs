//! `uroce run --scenario`: the program runs as a child (SIGINT and SIGTERM
//! forwarded to it); when it ends, a one-screen summary of the scenario's
//! report, and with `--check` the comparison with the scenario's
//! `[expect]` (see [`crate::scenario_check`]).

use crate::scenario_check::{
    after_firing, check, plural, signal_name, why_no_firing, DeviceSummary, Ended, Fired, Report,
    Sharing,
};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use uroce_net::udp::ScenarioConfig;

/// Firing lines printed before "... N more".
const FIRINGS_SHOWN: usize = 8;

/// Microseconds since the epoch (the report's clock).
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// SIGINT and SIGTERM blocked in this thread (and the threads it starts)
/// while the child runs; a thread waits for them and forwards them. The
/// child starts with an empty mask (std resets it in `Command::spawn`).
struct Forwarding {
    old: libc::sigset_t,
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize the set they are given.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

impl Forwarding {
    fn block() -> Forwarding {
        let set = signal_set();
        // SAFETY: both sets are valid sigset_t values.
        let old = unsafe {
            let mut old = std::mem::zeroed::<libc::sigset_t>();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            old
        };
        Forwarding { old }
    }

    /// Forwards every SIGINT/SIGTERM this process receives to `pid`.
    fn forward_to(&self, pid: rustix::process::Pid) {
        let spawned =
            std::thread::Builder::new().name("uroce-run-signals".into()).spawn(move || {
                let set = signal_set();
                loop {
                    let mut sig = 0;
                    // SAFETY: a valid set, blocked in this thread (inherited).
                    if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                        return;
                    }
                    let signal = if sig == libc::SIGINT {
                        rustix::process::Signal::INT
                    } else {
                        rustix::process::Signal::TERM
                    };
                    if rustix::process::kill_process(pid, signal).is_err() {
                        return;
                    }
                }
            });
        drop(spawned);
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `block`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// Runs `command` to its end, prints the summary (and the check), and
/// returns `uroce run`'s exit status: the program's (128 + the signal when
/// one killed it), or [`crate::run::CHECK_FAILED`] when `--check` fails.
/// `report`: the report's path, and whether it was named (so perhaps
/// shared with the peer's run) or is this run's own.
pub fn spawn_and_summarize(
    mut command: Command,
    program: &OsString,
    sc: &ScenarioConfig,
    addr: IpAddr,
    report: (&Path, Sharing),
    check_it: bool,
    err: &mut dyn Write,
) -> i32 {
    let (report_path, sharing) = report;
    let name = Path::new(program)
        .file_name()
        .map_or_else(|| program.to_string_lossy(), |n| n.to_string_lossy())
        .into_owned();
    // Lines older than this run in a kept or shared report are not ours.
    let since = wall_us().saturating_sub(1_000);
    let status = {
        let forwarding = Forwarding::block();
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = writeln!(err, "uroce run: {}: {e}", program.to_string_lossy());
                return 127;
            }
        };
        forwarding.forward_to(rustix::process::Pid::from_child(&child));
        let status = child.wait();
        drop(forwarding);
        match status {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(err, "uroce run: waiting for {name}: {e}");
                return 1;
            }
        }
    };
    let ended = match (status.code(), status.signal()) {
        (Some(c), _) => Ended::Code(c),
        (None, Some(s)) => Ended::Signal(s),
        (None, None) => Ended::Code(1),
    };
    let text = std::fs::read_to_string(report_path).unwrap_or_default();
    let report = Report::parse(&text, since);
    let summary = report.summary_of(addr);
    let s = &sc.scenario;
    let p = "uroce run:";
    let mut out = Vec::new();
    out.push(match ended {
        Ended::Code(c) => format!("{p} {name} exited with status {c}"),
        Ended::Signal(sig) => format!("{p} {name} killed by {}", signal_name(sig)),
    });
    let role = sc.role.as_deref().map_or(String::new(), |r| format!(" role {r}"));
    let first = report.firings.first().map_or(0, |f| f.wall_us);
    out.push(format!(
        "{p} scenario {} seed {}{role} at {addr}: {} in {}",
        s.name,
        sc.seed,
        plural(report.firings.len(), "firing"),
        report_path.display()
    ));
    for f in report.firings.iter().take(FIRINGS_SHOWN) {
        let ms = f.wall_us.saturating_sub(first) as f64 / 1000.0;
        out.push(format!("{p}   +{ms:.3} ms {} {}", f.addr, f.text));
    }
    if report.firings.len() > FIRINGS_SHOWN {
        out.push(format!("{p}   ... {} more", report.firings.len() - FIRINGS_SHOWN));
    }
    for (_, line) in report.port_lines.iter().filter(|(a, _)| *a == addr) {
        out.push(format!("{p} {line}"));
    }
    match &summary {
        Some(sum) => {
            let first_error = sum.first_error.as_ref().map_or("none".to_owned(), |(n, at)| {
                format!("{n}{}", after_firing(*at, report.firings.first()))
            });
            out.push(format!(
                "{p} completions success={} errors={} first_error={first_error}",
                sum.success, sum.errors
            ));
            out.extend(async_lines(p, sum, report.firings.first()));
            out.push(format!("{p} counters {}", key_values(&sum.counters)));
            out.push(format!("{p} runtime_counters {}", key_values(&sum.runtime_counters)));
        }
        None => out.push(format!(
            "{p} no summary from the device at {addr} (the program opened none, or was killed)"
        )),
    }
    let mut failed = false;
    if check_it {
        let expect = s.expect.for_role(sc.role.as_deref());
        let why = why_no_firing(s, sc.role.as_deref(), addr, sharing, &report);
        let verdicts = check(expect, summary.as_ref(), &report.firings, ended, &why);
        let table = match sc.role.as_deref() {
            Some(r) if s.expect.roles.iter().any(|(n, _)| n == r) => format!("[expect.{r}]"),
            _ => "[expect]".to_owned(),
        };
        // A scenario with rules is expected to have done something: a
        // firing in the report (this run's devices, or the peer's when
        // the report is shared).
        let mut count = verdicts.len();
        if !s.rules.is_empty() {
            count += 1;
            match report.firings.first() {
                Some(f) => out.push(format!(
                    "{p} check ok: a rule fired: {} (the first: {} at {})",
                    plural(report.firings.len(), "firing"),
                    f.text.split(':').next().unwrap_or(""),
                    f.addr
                )),
                None => {
                    failed = true;
                    out.push(format!(
                        "{p} check FAILED: no rule of scenario {} fired (0 firings in {}): {why}",
                        s.name,
                        report_path.display()
                    ));
                }
            }
        }
        for v in &verdicts {
            if v.ok {
                out.push(format!("{p} check ok: {}: {}", v.expected, v.seen));
            } else {
                failed = true;
                out.push(format!(
                    "{p} check FAILED: {table} {} of scenario {}: saw {}",
                    v.expected, s.name, v.seen
                ));
            }
        }
        out.push(if failed {
            format!("{p} check: {} failed", s.name)
        } else {
            format!("{p} check: {} passed ({})", s.name, plural(count, "expectation"))
        });
    }
    for line in out {
        let _ = writeln!(err, "{line}");
    }
    if failed {
        return crate::run::CHECK_FAILED;
    }
    match ended {
        Ended::Code(c) => c,
        Ended::Signal(sig) => 128 + sig,
    }
}

/// `k=v k=v ...`.
fn key_values(map: &BTreeMap<String, u64>) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// The device's asynchronous events: `async events NAME=N ...` (or
/// `none`), then the first [`FIRINGS_SHOWN`] one by one, each with what it
/// concerns and when; nothing for a report without them.
fn async_lines(p: &str, sum: &DeviceSummary, first: Option<&Fired>) -> Vec<String> {
    let Some(events) = &sum.async_events else { return Vec::new() };
    let mut out = vec![if events.is_empty() {
        format!("{p} async events none")
    } else {
        format!("{p} async events {}", key_values(events))
    }];
    for e in sum.raised.iter().take(FIRINGS_SHOWN) {
        out.push(format!("{p}   {} {}{}", e.name, e.element, after_firing(e.wall_us, first)));
    }
    if sum.raised.len() > FIRINGS_SHOWN {
        out.push(format!("{p}   ... {} more", sum.raised.len() - FIRINGS_SHOWN));
    }
    out
}
