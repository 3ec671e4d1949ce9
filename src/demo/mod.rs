//! `uroce demo`: two devices in this process (A and B, 127.0.0.1 and
//! 127.0.0.2 unless `--addrs` says otherwise) run every operation type over
//! real UDP, and a learner can follow each step: what was posted, the
//! packets on the wire (decoded from a capture of A's traffic, which holds
//! every packet of the run: A's own and everything it received), the
//! completions, the counters that moved, and a check that the data that
//! arrived is the data that was sent.
//!
//! The run has two phases. The first opens A and B without faults and
//! runs the operations, the RNR case and the bad R_Key case; the second
//! reopens them with a lossy fault injector on A, so that the transport has
//! to retransmit (`--faults` replaces that fault specification, and then
//! applies to both devices in both phases). With `--capture FILE`, both
//! phases' packets are written to FILE, which is created before the first
//! step (a file that cannot be created ends the run there). With
//! `--counters`, both devices' counters (each phase's added up) are
//! printed to standard error at the end. Exit status: 0 when every step
//! passed and the capture (if any) was written in full, 1 otherwise (a data
//! mismatch included), 2 on bad flags or a capture file that cannot be
//! created.

use crate::app::{
    bring_up, default_tuning, wait_cq, write_counters, NetArgs, Node, Opened, ALL_ACCESS,
};
use std::fmt::Write as _;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uroce_hca::counters::Counters;
use uroce_net::udp::{FaultSpec, TraceMode, UdpConfig, UdpStats};
use uroce_verbs::connect::Tuning;
use uroce_verbs::{
    Access, AhAttr, Mr, Qkey, Qp, QpCap, QpInitAttr, QpType, RecvWr, RemoteTarget, Rkey, SendFlags,
    SendWr, WcFlags, WcOpcode as Wc, WcStatus, WorkCompletion, WrOpcode,
};
use uroce_wire::bth;
use uroce_wire::frame::{classify, Classified};
use uroce_wire::pcap::{CaptureReader, PcapSink};

/// Bytes of each device's memory region.
const MR_LEN: u64 = 256 * 1024;
/// How long a step waits for its completions.
const WAIT: Duration = Duration::from_secs(3);
/// Packet lines printed per step at most.
const MAX_WIRE_LINES: usize = 12;
/// Most HCA decisions shown for one step (`--trace`).
const MAX_DECISION_LINES: usize = 24;
/// The faults A's injector applies in the fault run unless `--faults` (or
/// `UROCE_FAULTS`) chose others.
const DEMO_FAULTS: &str = "loss=0.05,seed=2";

/// Two device addresses, `A,B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrPair {
    /// Device A (the requester in every step).
    pub a: IpAddr,
    /// Device B.
    pub b: IpAddr,
}

/// Parses `A,B`: two different addresses of one family.
fn parse_addrs(text: &str) -> Result<AddrPair, String> {
    let (a, b) = text.split_once(',').ok_or("expected two addresses, A,B")?;
    let parse = |s: &str| {
        uroce_net::udp::parse_addr(s).map_err(|_| format!("`{}` is not an IP address", s.trim()))
    };
    let pair = AddrPair { a: parse(a)?, b: parse(b)? };
    if pair.a == pair.b {
        return Err("A and B must be different addresses".into());
    }
    if pair.a.is_ipv4() != pair.b.is_ipv4() {
        return Err("A and B must both be IPv4 or both IPv6".into());
    }
    Ok(pair)
}

/// `uroce demo` flags.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The two devices' addresses (all of 127.0.0.0/8 is local on Linux).
    #[arg(long, value_name = "A,B", default_value = "127.0.0.1,127.0.0.2",
          value_parser = parse_addrs)]
    pub addrs: AddrPair,
    #[command(flatten)]
    pub net: NetArgs,
}

/// Writes a line; output errors (a closed pipe) are ignored.
macro_rules! say {
    ($out:expr) => {{
        let _ = writeln!($out);
    }};
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

mod ops;
mod steps;
mod trace;

use ops::{cap, describe_wc};
use steps::*;
use trace::{wire_lines, Trace};

/// Runs `uroce demo`; returns the exit status.
pub fn run(args: &DemoArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let base = match args.net.config() {
        // With --trace, each step shows the HCAs' decisions beside its
        // packets (kept by the devices, not printed by their runtimes).
        Ok(mut config) if config.trace != TraceMode::Off => {
            config.trace = TraceMode::Keep;
            config
        }
        Ok(config) => config,
        Err(e) => {
            let _ = writeln!(err, "uroce demo: {e}");
            return 2;
        }
    };
    // The capture file first: a path it cannot be created at ends the run
    // before any step.
    let capture = match base.capture.clone() {
        Some(path) => match std::fs::File::create(&path) {
            Ok(file) => Some(CaptureOut { path, file }),
            Err(e) => {
                let _ = writeln!(
                    err,
                    "uroce demo: cannot create the capture file {}: {e}",
                    path.display()
                );
                return 2;
            }
        },
        None => None,
    };
    let started = Instant::now();
    let mut demo = Demo::new(args.addrs, base);
    let steps = demo.run_all(out);
    let reports = demo.opened.reports();
    let status = match steps {
        Ok(steps) => {
            // Written before the verdict: a run whose capture failed did
            // not pass.
            let captured = capture.map(|c| demo.write_capture(c, &reports));
            if let Some(Err(why)) = &captured {
                let _ = writeln!(err, "uroce demo: {why}");
            }
            summary(&steps, started.elapsed(), captured.as_ref(), out)
        }
        Err(e) => {
            let _ = writeln!(err, "uroce demo: {e}");
            1
        }
    };
    let _ = out.flush();
    if args.net.counters {
        write_counters(&reports, err);
    }
    status
}

/// A step's title, and what it showed (passed) or why it failed.
type StepResult = (String, Result<String, String>);

/// Prints the summary table and the verdict (which a capture that could
/// not be written fails); returns the exit status.
fn summary(
    steps: &[StepResult],
    elapsed: Duration,
    captured: Option<&Result<(PathBuf, usize), String>>,
    out: &mut dyn Write,
) -> i32 {
    say!(out, "summary");
    let width = steps.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
    let mut failed = 0;
    for (i, (title, result)) in steps.iter().enumerate() {
        match result {
            Ok(note) => say!(out, "  {:>2}  {title:<width$}  passed  {note}", i + 1),
            Err(why) => {
                failed += 1;
                say!(out, "  {:>2}  {title:<width$}  FAILED  {why}", i + 1);
            }
        }
    }
    let secs = elapsed.as_secs_f64();
    let capture_failure = match captured {
        Some(Ok((path, frames))) => {
            say!(out, "capture: {} ({frames} frames; `uroce decode` reads it)", path.display());
            None
        }
        Some(Err(why)) => Some(why),
        None => None,
    };
    match (failed, capture_failure) {
        (0, None) => {
            say!(out, "all {} steps passed in {secs:.2} s", steps.len());
            0
        }
        (0, Some(why)) => {
            say!(
                out,
                "FAILED: {why} (the {} steps themselves succeeded, {secs:.2} s)",
                steps.len()
            );
            1
        }
        (_, why) => {
            say!(out, "{failed} of {} steps FAILED ({secs:.2} s)", steps.len());
            if let Some(why) = why {
                say!(out, "FAILED: {why}");
            }
            1
        }
    }
}

/// The capture file the user asked for, created before the run.
struct CaptureOut {
    path: PathBuf,
    file: std::fs::File,
}

/// The whole run: the configuration, and the captures of its phases.
struct Demo {
    addrs: AddrPair,
    base: UdpConfig,
    /// The phases' temporary captures, in order.
    captures: Vec<TempFile>,
    /// Every device opened, for the counters and the captures' state.
    opened: Opened,
}

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Demo {
    fn new(addrs: AddrPair, mut base: UdpConfig) -> Demo {
        // The user's capture is written from the phases' own (A's).
        base.capture = None;
        Demo { addrs, base, captures: Vec::new(), opened: Opened::default() }
    }

    /// A fresh temporary capture path for a phase.
    fn temp_capture(&mut self) -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("uroce-demo-{}-{n}-{}.pcap", std::process::id(), self.addrs.a);
        let path = std::env::temp_dir().join(name.replace(':', "_"));
        self.captures.push(TempFile(path.clone()));
        path
    }

    /// Opens both devices for a phase (A with `faults`).
    fn open_phase(&mut self, faults: Option<FaultSpec>) -> Result<Phase, String> {
        let mut ca = self.base.clone();
        ca.addr = self.addrs.a;
        if faults.is_some() {
            ca.faults = faults;
        }
        let mut cb = self.base.clone();
        cb.addr = self.addrs.b;
        cb.capture = None;
        let capture = self.temp_capture();
        ca.capture = Some(capture.clone());
        // A temporary directory that refuses files costs the packet lines,
        // not the demo.
        let (a, trace) = match self.opened.node(ca.clone(), 1024) {
            Ok(node) => (node, Some(capture)),
            Err(_) => {
                ca.capture = None;
                (self.opened.node(ca, 1024).map_err(|e| format!("device A: {e}"))?, None)
            }
        };
        let b = self.opened.node(cb, 1024).map_err(|e| format!("device B: {e}"))?;
        let ma = a.pd.alloc_mr(MR_LEN, ALL_ACCESS).map_err(|e| format!("A: reg_mr: {e}"))?;
        let mb = b.pd.alloc_mr(MR_LEN, ALL_ACCESS).map_err(|e| format!("B: reg_mr: {e}"))?;
        Ok(Phase { a, b, ma, mb, trace: Trace { path: trace, seen: 0 } })
    }

    /// Runs every step; the outer error is a device that cannot be opened.
    fn run_all(&mut self, out: &mut dyn Write) -> Result<Vec<StepResult>, String> {
        let mut steps = Vec::new();
        let phase = self.open_phase(None)?;
        intro(&phase, out);
        type StepFn = fn(&mut Phase, &mut dyn Write) -> Result<String, String>;
        let list: [(&str, StepFn); 14] = [
            ("RC SEND, 10 KiB (multi-packet)", rc_send),
            ("RC SEND with immediate", send_imm),
            ("RC RDMA WRITE", rdma_write),
            ("RC RDMA WRITE with immediate", write_imm),
            ("RC RDMA READ (multi-packet)", rdma_read),
            ("RC COMPARE_SWAP", compare_swap),
            ("RC FETCH_ADD", fetch_add),
            ("UC SEND and RDMA WRITE", uc_send_write),
            ("UD SEND with an address handle", ud_send),
            ("SRQ receive (shared receive queue)", srq_receive),
            ("memory window: bind, then WRITE/READ", memory_window),
            ("RNR: SEND before the receive", rnr),
            ("bad R_Key: REM_ACCESS_ERR", bad_rkey),
            ("faults: loss on A, retransmission", fault_run),
        ];
        let mut phase = Some(phase);
        for (i, (title, step)) in list.iter().enumerate() {
            if i == list.len() - 1 {
                // The fault run needs new devices: faults are set at open.
                drop(phase.take());
                let spec = match self.base.faults {
                    Some(spec) => spec,
                    None => FaultSpec::parse(DEMO_FAULTS).map_err(|e| e.to_string())?,
                };
                say!(out, "(reopening A and B; A's fault injector: {spec})");
                match self.open_phase(Some(spec)) {
                    Ok(reopened) => phase = Some(reopened),
                    Err(e) => {
                        say!(out, "[{}] {title}\n    FAILED: {e}\n", i + 1);
                        steps.push((title.to_string(), Err(e)));
                        break;
                    }
                }
            }
            let Some(p) = phase.as_mut() else { break };
            say!(out, "[{}] {title}", i + 1);
            let result = step(p, out);
            if let Err(why) = &result {
                say!(out, "    FAILED: {why}");
            }
            say!(out);
            let _ = out.flush();
            steps.push((title.to_string(), result));
        }
        Ok(steps)
    }

    /// Writes every phase's packets (A's captures, which `reports` says
    /// were written in full) to the user's file; returns its path and the
    /// frame count, or why the file misses frames.
    fn write_capture(
        &self,
        capture: CaptureOut,
        reports: &[crate::app::DeviceReport],
    ) -> Result<(PathBuf, usize), String> {
        let CaptureOut { path, file } = capture;
        let shown = path.display();
        if let Some(failure) = reports.iter().find_map(|r| r.capture_failure.as_deref()) {
            return Err(format!("{shown} misses frames: {failure}"));
        }
        let not_written =
            |e: std::io::Error| format!("could not write the capture file {shown}: {e}");
        let mut sink = PcapSink::new(std::io::BufWriter::new(file)).map_err(not_written)?;
        let mut frames = 0;
        for temp in &self.captures {
            let phase = temp.0.display();
            let bytes = std::fs::read(&temp.0).map_err(|e| {
                format!("{shown} misses frames: cannot read the phase's capture {phase}: {e}")
            })?;
            let reader = CaptureReader::new(&bytes).map_err(|e| {
                format!("{shown} misses frames: cannot read the phase's capture {phase}: {e}")
            })?;
            for frame in reader.map_while(Result::ok) {
                sink.write_frame(frame.timestamp, frame.data).map_err(not_written)?;
                frames += 1;
            }
        }
        sink.into_inner().flush().map_err(not_written)?;
        Ok((path, frames))
    }
}

fn intro(p: &Phase, out: &mut dyn Write) {
    say!(
        out,
        "uroce demo: two uroce devices in this process speak RoCEv2 over real UDP (port 4791)"
    );
    say!(out, "  A = {} (GID {})   B = {} (GID {})", p.a.addr(), p.a.gid(), p.b.addr(), p.b.gid());
    say!(
        out,
        "  each has a PD, a CQ and a 256 KiB MR (A: key {}, B: key {}); RC/UC path MTU 1024",
        p.ma.rkey(),
        p.mb.rkey()
    );
    match &p.trace.path {
        Some(_) => {
            say!(out, "  packets are decoded from a capture of A (what A sent and received)")
        }
        None => say!(out, "  (no capture possible: packet counts come from the counters)"),
    }
    say!(out);
}

/// One phase: two open devices with a memory region each.
struct Phase {
    a: Node,
    b: Node,
    ma: Mr,
    mb: Mr,
    trace: Trace,
}

/// Counters of both devices at one moment.
struct Snap {
    a: Counters,
    b: Counters,
    sa: UdpStats,
}

impl Phase {
    /// The counters now. Each lock is taken and released in a statement of
    /// its own: the runtime locks its I/O state before the HCA, so holding
    /// an HCA lock while asking for `stats()` could deadlock.
    fn snap(&self) -> Snap {
        let a = self.a.dev.hca().lock().counters();
        let b = self.b.dev.hca().lock().counters();
        let sa = self.a.dev.stats();
        Snap { a, b, sa }
    }

    /// Packets moved by both devices so far (to tell when the wire is quiet).
    fn traffic(&self) -> [u64; 4] {
        let (a, b) = (self.a.dev.stats(), self.b.dev.stats());
        [a.tx_packets, a.rx_datagrams, b.tx_packets, b.rx_datagrams]
    }

    /// Waits (at most 100 ms) until no packet moved for 2 ms, so that a
    /// step's late ACKs are shown with it.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_millis(100);
        let mut last = self.traffic();
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline {
            self.a.dev.progress();
            self.b.dev.progress();
            std::thread::sleep(Duration::from_micros(200));
            let now = self.traffic();
            if now != last {
                last = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= Duration::from_millis(2) {
                break;
            }
        }
    }

    /// An RC (or UC) QP on each device, connected to each other.
    fn pair(&self, qp_type: QpType, ta: &Tuning, tb: &Tuning) -> Result<(Qp, Qp), String> {
        let qa = self.a.qp(qp_type, cap())?;
        let qb = self.b.qp(qp_type, cap())?;
        self.connect(&qa, &qb, ta, tb)?;
        Ok((qa, qb))
    }

    fn connect(&self, qa: &Qp, qb: &Qp, ta: &Tuning, tb: &Tuning) -> Result<(), String> {
        bring_up(qa, Some((self.b.gid(), qb.qpn(), tb.sq_psn)), ta, 0)?;
        bring_up(qb, Some((self.a.gid(), qa.qpn(), ta.sq_psn)), tb, 0)
    }

    /// Prints the packets and counters of a step (since `before`) and the
    /// completions.
    fn report(
        &mut self,
        out: &mut dyn Write,
        before: &Snap,
        at_a: &[WorkCompletion],
        at_b: &[WorkCompletion],
    ) {
        self.settle();
        let after = self.snap();
        let sent_a = after.a.sent_pkts.saturating_sub(before.a.sent_pkts);
        let sent_b = after.b.sent_pkts.saturating_sub(before.b.sent_pkts);
        let lost = after.sa.faults_lost.saturating_sub(before.sa.faults_lost);
        let total = sent_a + sent_b;
        let plural = if total == 1 { "" } else { "s" };
        let mut head =
            format!("    wire  {total} packet{plural}: A sent {sent_a}, B sent {sent_b}");
        if lost > 0 {
            let _ = write!(head, " ({lost} of A's dropped by its fault injector)");
        }
        say!(out, "{head}");
        if let Some(frames) = self.trace.take(&self.a.dev) {
            let lines = wire_lines(&frames);
            let shown =
                if lines.len() <= MAX_WIRE_LINES + 2 { lines.len() } else { MAX_WIRE_LINES };
            for line in lines.iter().take(shown) {
                say!(out, "          {line}");
            }
            if lines.len() > shown {
                say!(out, "          ... and {} more lines like these", lines.len() - shown);
            }
        }
        let decisions: Vec<String> = [("A", &self.a), ("B", &self.b)]
            .into_iter()
            .flat_map(|(who, node)| {
                node.dev.take_steps().into_iter().map(move |(_, step)| format!("{who}  {step}"))
            })
            .collect();
        for (i, line) in decisions.iter().enumerate() {
            if i == MAX_DECISION_LINES && decisions.len() > MAX_DECISION_LINES + 2 {
                let more = decisions.len() - i;
                say!(out, "          ... and {more} more decisions");
                break;
            }
            let label = if i == 0 { "hca " } else { "    " };
            say!(out, "    {label}  {line}");
        }
        let sides: Vec<String> = [("A", at_a), ("B", at_b)]
            .iter()
            .filter(|(_, wcs)| !wcs.is_empty())
            .map(|(who, wcs)| {
                let text: Vec<String> = wcs.iter().map(describe_wc).collect();
                format!("{who}: {}", text.join("; "))
            })
            .collect();
        let one_line = sides.join(";  ");
        if one_line.len() <= 90 {
            say!(out, "    done  {one_line}");
        } else {
            for side in &sides {
                say!(out, "    done  {side}");
            }
        }
        let moved: Vec<String> = [("A", &before.a, &after.a), ("B", &before.b, &after.b)]
            .iter()
            .flat_map(|(who, b, a)| {
                let before = b.named();
                a.named()
                    .into_iter()
                    .zip(before)
                    .filter(|((name, _), _)| !matches!(*name, "sent_pkts" | "rcvd_pkts"))
                    .filter(|((_, now), (_, then))| now > then)
                    .map(move |((name, now), (_, then))| format!("{who}.{name} +{}", now - then))
                    .collect::<Vec<_>>()
            })
            .collect();
        if !moved.is_empty() {
            say!(out, "    count {}", moved.join(", "));
        }
    }
}
