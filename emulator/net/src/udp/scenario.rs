//! A fault scenario at the device's port (`UROCE_SCENARIO`; design note
//! `docs/design-notes/fault-scenarios.md` §2–§4, `docs/runtime.md`
//! §Scenarios).
//!
//! The runtime hands every RoCE packet it sends (`datapath.rs`
//! `dispatch`, with the sending QP from `Transmit::local_qpn`) and receives
//! (kernel UDP and the L2 transport alike, before the HCA) to the
//! scenario's [`Port`], and does what the verdict says: drop, extra copies,
//! delay (an egress queue, `Io::delayed`, and an ingress one here),
//! reorder holds, corruption, link down and partitions. Device actions
//! become `Hca::inject_fault` calls before the packet that triggered them
//! reaches the HCA; `crash` with `exit` kills the process
//! ([`super::sys::kill_self`]).
//!
//! Every firing is printed on standard error as it happens,
//! `scenario <address> <µs since open> <firing>`, and appended to the
//! report file (`UROCE_SCENARIO_REPORT`) with the wall clock in front
//! (`<µs since the Unix epoch> scenario ...`), so two processes' reports
//! line up. The summary (per rule, the port's counts, the completions,
//! the asynchronous events, the HCA's and the runtime's non-zero counters)
//! goes to both when the device closes, or at the process's exit for a
//! device never closed (an `atexit` hook).

use super::config::ScenarioConfig;
use super::UdpStats;
use super::{lock, UdpError};
use core::net::IpAddr;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once, Weak};
use uroce_faults::scenario::{
    DeviceAction, DeviceActionKind, DeviceInfo, Dir, DropCause, Held, Port, MAX_HELD,
};
use uroce_faults::CopyVerdict;
use uroce_faults::FaultSpec;
use uroce_hca::async_log::AsyncLog;
use uroce_hca::counters::Counters;
use uroce_hca::tally::CompletionTally;
use uroce_hca::time::Instant;
use uroce_hca::{DeviceFault, Endpoint, Hca};

/// The scenario's state in a device's runtime (under the I/O lock).
pub(super) struct ScenarioPort {
    pub port: Port,
    addr: IpAddr,
    report: Option<Report>,
    /// Incoming copies a rule delayed or duplicated with a gap, by time.
    ingress: BinaryHeap<Reverse<DelayedIn>>,
    ingress_seq: u64,
    /// Outgoing packets a reorder hold released while the runtime was
    /// receiving: sent by the next transmit.
    pub out_ready: VecDeque<Held>,
    /// The capture comments of outgoing packets a reorder rule holds, to
    /// go with them when they leave (at most `MAX_HELD`).
    held_comments: VecDeque<(Vec<u8>, String)>,
    /// The summary was written (at close, or at exit).
    summarized: bool,
    /// The summary goes to standard error too (else to the report only).
    summary_on_stderr: bool,
}

struct Report {
    file: File,
    path: PathBuf,
    failed: bool,
}

/// An incoming copy held back.
struct DelayedIn {
    due_ns: u64,
    seq: u64,
    packet: Vec<u8>,
}

impl PartialEq for DelayedIn {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.seq) == (other.due_ns, other.seq)
    }
}
impl Eq for DelayedIn {}
impl PartialOrd for DelayedIn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DelayedIn {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due_ns, self.seq).cmp(&(other.due_ns, other.seq))
    }
}

impl ScenarioPort {
    /// The port of device `addr` for `config`; `faults` (`UROCE_FAULTS`)
    /// replace the scenario's background faults. The report file is
    /// opened for appending (created if needed).
    pub(super) fn new(
        config: &ScenarioConfig,
        addr: IpAddr,
        faults: Option<FaultSpec>,
    ) -> Result<ScenarioPort, UdpError> {
        let me = DeviceInfo { address: addr, role: config.role.clone() };
        let mut port = Port::new(&config.scenario, me, config.seed);
        if faults.is_some() {
            port.set_background(faults);
        }
        let report = match &config.report {
            Some(path) => {
                let file =
                    OpenOptions::new().create(true).append(true).open(path).map_err(|e| {
                        UdpError::Io(
                            format!("cannot open the scenario report {}", path.display()),
                            e,
                        )
                    })?;
                Some(Report { file, path: path.clone(), failed: false })
            }
            None => None,
        };
        let mut sp = ScenarioPort {
            port,
            addr,
            report,
            ingress: BinaryHeap::new(),
            ingress_seq: 0,
            out_ready: VecDeque::new(),
            held_comments: VecDeque::new(),
            summarized: false,
            summary_on_stderr: config.summary_on_stderr,
        };
        let role = config.role.as_deref().map_or(String::new(), |r| format!(" role {r}"));
        let line = format!(
            "scenario {} {addr} loaded at_us=0 from {} seed {}{role}",
            config.scenario.name, config.scenario.origin, config.seed
        );
        sp.write_lines(&[line]);
        Ok(sp)
    }

    /// Prints the firings logged since the last call (standard error and
    /// the report) and returns them as one capture comment, `None` if
    /// there were none.
    pub(super) fn log_firings(&mut self, now_ns: u64) -> Option<String> {
        let lines: Vec<String> = self.port.take_firings().map(|f| f.to_string()).collect();
        if lines.is_empty() {
            return None;
        }
        let us = now_ns / 1_000;
        let addr = self.addr;
        let printed: Vec<String> =
            lines.iter().map(|l| format!("scenario {addr} {us} {l}")).collect();
        self.write_lines(&printed);
        Some(format!("uroce scenario: {}", lines.join("; ")))
    }

    /// Writes lines on standard error and, with the wall clock in front,
    /// to the report.
    fn write_lines(&mut self, lines: &[String]) {
        self.write_lines_to(lines, true);
    }

    /// Writes `lines` to the report, and to standard error with `stderr`.
    fn write_lines_to(&mut self, lines: &[String], stderr: bool) {
        if stderr {
            let mut err = std::io::stderr().lock();
            for line in lines {
                let _ = writeln!(err, "{line}");
            }
        }
        if let Some(report) = self.report.as_mut().filter(|r| !r.failed) {
            let wall = wall_clock_us();
            let text: String = lines.iter().map(|l| format!("{wall} {l}\n")).collect();
            if let Err(e) = report.file.write_all(text.as_bytes()) {
                report.failed = true;
                eprintln!(
                    "scenario {}: cannot write the report {}: {e}",
                    self.addr,
                    report.path.display()
                );
            }
        }
    }

    /// Keeps the comment of an outgoing packet a reorder rule holds.
    pub(super) fn hold_comment(&mut self, packet: &[u8], comment: String) {
        if self.held_comments.len() >= MAX_HELD {
            self.held_comments.pop_front();
        }
        self.held_comments.push_back((packet.to_vec(), comment));
    }

    /// The comment of a held outgoing packet, as it leaves.
    pub(super) fn take_held_comment(&mut self, packet: &[u8]) -> Option<String> {
        let at = self.held_comments.iter().position(|(p, _)| p == packet)?;
        self.held_comments.remove(at).map(|(_, c)| c)
    }

    /// Queues an incoming copy for `due_ns`.
    pub(super) fn delay_in(&mut self, due_ns: u64, packet: Vec<u8>) {
        self.ingress_seq += 1;
        self.ingress.push(Reverse(DelayedIn { due_ns, seq: self.ingress_seq, packet }));
    }

    /// The next incoming copy due by `now_ns`.
    pub(super) fn due_in(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self.ingress.peek().is_some_and(|Reverse(d)| d.due_ns <= now_ns) {
            self.ingress.pop().map(|Reverse(d)| d.packet)
        } else {
            None
        }
    }

    /// When the scenario next needs the runtime: a timed rule, a hold's
    /// end, a delayed incoming copy, a released packet to send (now).
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let ready = (!self.out_ready.is_empty()).then_some(0);
        let ingress = self.ingress.peek().map(|Reverse(d)| d.due_ns);
        [self.port.next_deadline(), ingress, ready].into_iter().flatten().min()
    }

    /// Applies the device actions the port decided to the HCA, logging
    /// any that fail. Returns whether the process must die (`crash` with
    /// `exit`): the caller flushes what it must and calls
    /// [`super::sys::kill_self`].
    pub(super) fn apply_device_actions(&mut self, hca: &mut Hca, now_ns: u64) -> bool {
        let mut die = false;
        while let Some(action) = self.port.poll_device_action() {
            let fault = device_fault(&action, now_ns);
            if let Err(e) = hca.inject_fault(Instant::from_nanos(now_ns), fault) {
                let line = format!(
                    "scenario {} {} device fault {fault:?} not applied: {e:?}",
                    self.addr,
                    now_ns / 1_000
                );
                self.write_lines(&[line]);
            }
            if action.kind == DeviceActionKind::Crash && action.exit {
                die = true;
            }
        }
        die
    }

    /// Says the process is being killed (before [`super::sys::kill_self`]).
    pub(super) fn log_kill(&mut self, now_ns: u64) {
        let line = format!(
            "scenario {} {} crash: killing the process (SIGKILL)",
            self.addr,
            now_ns / 1_000
        );
        self.write_lines(&[line]);
    }

    /// The summary lines (once: `None` after the first call).
    pub(super) fn take_summary_lines(&mut self) -> Option<Vec<String>> {
        if std::mem::replace(&mut self.summarized, true) {
            return None;
        }
        let summary = self.port.summary();
        Some(summary.to_string().lines().map(str::to_owned).collect())
    }

    /// Writes the summary: the port's lines (from
    /// [`ScenarioPort::take_summary_lines`]), then the device's (the
    /// completions, the asynchronous events, the HCA's and the runtime's
    /// non-zero counters: `scenario_summary.rs`).
    pub(super) fn write_summary(
        &mut self,
        mut lines: Vec<String>,
        tally: &CompletionTally,
        events: &AsyncLog,
        counters: &Counters,
        stats: &UdpStats,
    ) {
        let who = format!("scenario {} {}", self.port.scenario_name(), self.addr);
        let device = super::scenario_summary::device_lines(tally, events, counters, stats);
        lines.extend(device.into_iter().map(|l| format!("{who} {l}")));
        self.write_lines_to(&lines, self.summary_on_stderr);
    }
}

/// The scenario's device action as the HCA's fault (`now_ns`: the device's
/// clock, for a stall's end).
pub(super) fn device_fault(action: &DeviceAction, now_ns: u64) -> DeviceFault {
    let qpn = action.qpn;
    match action.kind {
        DeviceActionKind::Rnr => DeviceFault::Rnr { qpn, count: action.count },
        DeviceActionKind::FailKey => DeviceFault::FailKeyCheck { qpn, count: action.count },
        DeviceActionKind::DmaFault => DeviceFault::DmaFault { qpn, count: action.count },
        DeviceActionKind::Stall => DeviceFault::StallResponder {
            qpn,
            until: Instant::from_nanos(now_ns.saturating_add(action.for_ns)),
        },
        DeviceActionKind::Crash => DeviceFault::Crash,
    }
}

/// A copy's bytes: the packet, with its bit flipped if the verdict says so.
pub(super) fn copy_bytes<'a>(
    packet: &'a [u8],
    copy: &CopyVerdict,
    scratch: &'a mut Vec<u8>,
) -> &'a [u8] {
    match copy.flip_bit {
        Some(bit) => {
            scratch.clear();
            scratch.extend_from_slice(packet);
            uroce_faults::flip(scratch, bit);
            scratch
        }
        None => packet,
    }
}

/// The comment on a packet the port dropped.
pub(super) fn dropped_comment(cause: DropCause, firings: Option<&str>) -> String {
    let why = match cause {
        DropCause::Rule => "rule",
        DropCause::LinkDown => "link down",
        DropCause::Partition => "partition",
        DropCause::Background => "background loss",
    };
    match firings {
        Some(f) => format!("DROPPED ({why}) {f}"),
        None => format!("DROPPED ({why})"),
    }
}

/// Hands an incoming copy to the HCA now, or queues it for its delay.
pub(super) fn receive_copy(
    sp: &mut ScenarioPort,
    hca: &mut Hca,
    now_ns: u64,
    packet: &[u8],
    copy: &CopyVerdict,
    after_ns: u64,
) {
    let mut scratch = Vec::new();
    let bytes = copy_bytes(packet, copy, &mut scratch);
    let delay = copy.delay_ns.saturating_add(after_ns);
    if delay == 0 {
        hca.receive(Instant::from_nanos(now_ns), bytes);
    } else {
        sp.delay_in(now_ns.saturating_add(delay), bytes.to_vec());
    }
}

/// Takes the reorder holds whose turn came: incoming ones to the HCA now,
/// outgoing ones to [`ScenarioPort::out_ready`].
pub(super) fn drain_released(sp: &mut ScenarioPort, hca: &mut Hca, now_ns: u64) {
    while let Some(held) = sp.port.take_released(now_ns) {
        match held.dir {
            Dir::In => {
                for copy in held.copies.iter().flatten() {
                    receive_copy(sp, hca, now_ns, &held.packet, copy, 0);
                }
            }
            Dir::Out => sp.out_ready.push_back(held),
        }
    }
}

/// Devices with a scenario that may still be open at the process's exit.
type OpenList = Mutex<Vec<Weak<super::progress::Runtime>>>;

fn open_devices() -> &'static OpenList {
    static OPEN: OpenList = Mutex::new(Vec::new());
    &OPEN
}

/// Registers a device with a scenario for the summary at exit (a program
/// that never closes its device, as many verbs programs and librdmacm
/// do, still prints it).
pub(super) fn register_for_exit(runtime: &Arc<super::progress::Runtime>) {
    static HOOK: Once = Once::new();
    let mut open = lock(open_devices());
    open.retain(|w| w.strong_count() > 0);
    open.push(Arc::downgrade(runtime));
    drop(open);
    HOOK.call_once(super::sys::at_exit_summaries);
}

/// The exit hook's work: the summary of every device still open.
pub(super) fn summaries_at_exit() {
    let open: Vec<_> = lock(open_devices()).iter().filter_map(Weak::upgrade).collect();
    for runtime in open {
        runtime.write_scenario_summary();
    }
}

fn wall_clock_us() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

/// A `crash` with `exit`: says so, flushes the capture (the report is
/// written unbuffered), and kills the process.
pub(super) fn die(
    sp: &mut ScenarioPort,
    capture: &mut Option<super::capture::Capture>,
    now_ns: u64,
) -> ! {
    sp.log_kill(now_ns);
    if let Some(capture) = capture.as_mut() {
        let _ = capture.flush();
    }
    super::sys::kill_self()
}
