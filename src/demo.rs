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
use uroce_net::udp::{FaultSpec, UdpConfig, UdpStats};
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

/// Runs `uroce demo`; returns the exit status.
pub fn run(args: &DemoArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let base = match args.net.config() {
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

/// The frames of A's capture not shown yet.
struct Trace {
    path: Option<PathBuf>,
    seen: usize,
}

/// One decoded frame.
struct Frame {
    src: IpAddr,
    dst: IpAddr,
    name: &'static str,
    qpn: u32,
    psn: u32,
    ack_req: bool,
    payload: usize,
    /// Extension headers worth showing (empty for plain data packets).
    note: String,
    intact: bool,
}

impl Trace {
    /// Decodes the frames captured since the last call.
    fn take(&mut self, dev: &uroce_net::udp::UdpDevice) -> Option<Vec<Frame>> {
        let path = self.path.as_ref()?;
        dev.flush_capture().ok()?;
        let bytes = std::fs::read(path).ok()?;
        let reader = CaptureReader::new(&bytes).ok()?;
        let mut frames = Vec::new();
        // A record the writer has not finished yet ends the walk; it is
        // read next time.
        for frame in reader.map_while(Result::ok).skip(self.seen) {
            self.seen += 1;
            let Some(link) = frame.link else { continue };
            let Classified::Roce(roce) = classify(frame.data, link) else { continue };
            let transport = roce.transport();
            if transport.len() < bth::HEADER_LEN {
                continue;
            }
            let b = bth::Packet::new_unchecked(&transport[..bth::HEADER_LEN]);
            let (payload, note) = match roce.packet() {
                Ok(p) => (p.payload().len(), headers_note(&p)),
                Err(e) => (0, format!("MALFORMED: {e}")),
            };
            frames.push(Frame {
                src: roce.ip.source(),
                dst: roce.ip.destination(),
                name: b.opcode().name(),
                qpn: b.dest_qpn().value(),
                psn: b.psn().value(),
                ack_req: b.ack_req(),
                payload,
                note,
                intact: roce.integrity_ok(),
            });
        }
        Some(frames)
    }
}

/// The extension headers a learner wants to see, in a few words.
fn headers_note(p: &uroce_wire::roce::Packet<&[u8]>) -> String {
    let mut s = String::new();
    if let Some(h) = p.reth() {
        let _ = write!(s, " RETH va=0x{:x} rkey={} len={}", h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = p.atomic_eth() {
        let _ = write!(
            s,
            " AtomicETH rkey={} cmp=0x{:x} swap/add=0x{:x}",
            h.rkey(),
            h.compare(),
            h.swap_add()
        );
    }
    if let Some(h) = p.deth() {
        let _ = write!(s, " DETH qkey={} src_qp={}", h.qkey(), h.src_qpn());
    }
    if let Some(h) = p.immdt() {
        let _ = write!(s, " ImmDt=0x{:08x}", h.imm());
    }
    if let Some(h) = p.aeth() {
        let _ = write!(s, " AETH {} msn={}", h.syndrome(), h.msn());
    }
    if let Some(h) = p.atomic_ack_eth() {
        let _ = write!(s, " orig=0x{:x}", h.orig());
    }
    s
}

/// The packet lines of a step: runs of data packets with consecutive PSNs
/// share a line.
fn wire_lines(frames: &[Frame]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let f = &frames[i];
        let mut j = i + 1;
        while j < frames.len() {
            let g = &frames[j];
            let prev = &frames[j - 1];
            let same = g.src == f.src
                && g.dst == f.dst
                && g.name == f.name
                && g.qpn == f.qpn
                && g.payload == f.payload
                && g.ack_req == f.ack_req
                && g.note.is_empty()
                && f.note.is_empty()
                && g.intact
                && g.psn == (prev.psn + 1) & 0xff_ffff;
            if !same {
                break;
            }
            j += 1;
        }
        let n = j - i;
        let mut line = format!("{} → {}  {}", f.src, f.dst, f.name);
        if n > 1 {
            let _ = write!(line, " ×{n}");
        }
        let _ = write!(line, "  QP 0x{:06x} PSN 0x{:06x}", f.qpn, f.psn);
        if n > 1 {
            let _ = write!(line, "-0x{:06x}", frames[j - 1].psn);
        }
        if f.payload > 0 {
            let _ = write!(line, "  {} B{}", f.payload, if n > 1 { " each" } else { "" });
        }
        if f.ack_req {
            line.push_str("  AckReq");
        }
        line.push_str(&f.note);
        if !f.intact {
            line.push_str("  ICRC BAD");
        }
        lines.push(line);
        i = j;
    }
    lines
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

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Bytes that differ from position to position and from step to step.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

/// `RdmaWriteWithImm` → `RDMA_WRITE_WITH_IMM`, as libibverbs spells it.
fn upper_snake(name: &str) -> String {
    let mut s = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

fn describe_wc(wc: &WorkCompletion) -> String {
    let mut s = format!(
        "{} {} wr_id {}",
        upper_snake(&format!("{:?}", wc.opcode)),
        upper_snake(&format!("{:?}", wc.status)),
        wc.wr_id
    );
    if wc.status == WcStatus::Success && wc.opcode.raw() >= 128 {
        let _ = write!(s, ", byte_len {}", wc.byte_len);
    }
    if wc.flags.contains(WcFlags::WITH_IMM) {
        let _ = write!(s, ", imm 0x{:08x}", wc.imm_or_inv);
    }
    if wc.flags.contains(WcFlags::GRH) {
        let _ = write!(s, ", src_qp {}, GRH", wc.src_qp);
    }
    s
}

fn wr_name(op: WrOpcode) -> String {
    upper_snake(&format!("{op:?}"))
}

fn post_send(qp: &Qp, wrs: &[SendWr]) -> Result<(), String> {
    qp.post_send(wrs).map_err(|(i, e)| format!("post_send (WR {i}): {e}"))
}

fn post_recv(qp: &Qp, wrs: &[RecvWr]) -> Result<(), String> {
    qp.post_recv(wrs).map_err(|(i, e)| format!("post_recv (WR {i}): {e}"))
}

/// Waits for `n` completions on `node`'s CQ.
fn wait(node: &Node, n: usize) -> Vec<WorkCompletion> {
    wait_cq(&node.cq, n, WAIT)
}

/// Waits for `at_b` completions on B, then `at_a` on A. Between the two,
/// B's device is stepped once, as an application's next verbs call would:
/// the runtime holds the ACKs of a receive the application drove until
/// then, and its background thread may sleep through them.
fn wait_both(p: &Phase, at_b: usize, at_a: usize) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    let got_b = wait(&p.b, at_b);
    p.b.dev.progress();
    (got_b, wait(&p.a, at_a))
}

/// Checks completions: how many, and each one's status and opcode.
fn expect(who: &str, got: &[WorkCompletion], want: &[(WcStatus, Wc)]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{who}: {} of {} completions within {:?}",
            got.len(),
            want.len(),
            WAIT
        ));
    }
    for (wc, (status, opcode)) in got.iter().zip(want) {
        if wc.status != *status || wc.opcode != *opcode {
            return Err(format!(
                "{who}: expected {} {}, got {}",
                upper_snake(&format!("{opcode:?}")),
                upper_snake(&format!("{status:?}")),
                describe_wc(wc)
            ));
        }
    }
    Ok(())
}

/// Compares what arrived with what was sent and prints the verdict.
fn check(out: &mut dyn Write, what: &str, got: &[u8], want: &[u8]) -> Result<(), String> {
    checks(out, &[(what, got, want)])
}

/// Compares several (what, arrived, sent) triples; one line for all.
fn checks(out: &mut dyn Write, items: &[(&str, &[u8], &[u8])]) -> Result<(), String> {
    let mut oks = Vec::new();
    for (what, got, want) in items {
        match got.iter().zip(want.iter()).position(|(g, w)| g != w) {
            None if got.len() == want.len() => oks.push(format!("{what} ({} B)", want.len())),
            at => {
                let at = at.unwrap_or(got.len().min(want.len()));
                let why = format!(
                    "data MISMATCH in {what}: first difference at byte {at} (sent {:?}, got {:?})",
                    want.get(at),
                    got.get(at)
                );
                say!(out, "    check {why}");
                return Err(why);
            }
        }
    }
    say!(out, "    check data ok: {}", oks.join(", "));
    Ok(())
}

fn read(mr: &Mr, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    mr.read_vec(offset, len).map_err(|e| format!("reading the MR: {e}"))
}

fn write(mr: &Mr, offset: u64, data: &[u8]) -> Result<(), String> {
    mr.write(offset, data).map_err(|e| format!("writing the MR: {e}"))
}

/// Waits (bounded) until `mr` holds `want` at `offset`: for UC WRITEs,
/// which complete nowhere on the receiving side.
fn wait_for_bytes(mr: &Mr, offset: u64, want: &[u8]) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = read(mr, offset, want.len())?;
        if got == want || Instant::now() >= deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn send_wr(wr_id: u64, opcode: WrOpcode, mr: &Mr, offset: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, opcode);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr.flags = SendFlags::SIGNALED;
    wr
}

fn recv_wr(wr_id: u64, mr: &Mr, offset: u64, len: u32) -> RecvWr {
    RecvWr { wr_id, sg_list: vec![mr.sge(offset, len)] }
}

fn rdma_wr(wr_id: u64, opcode: WrOpcode, local: (&Mr, u64, u32), remote: (u64, Rkey)) -> SendWr {
    let mut wr = send_wr(wr_id, opcode, local.0, local.1, local.2);
    wr.remote = RemoteTarget { addr: remote.0, rkey: remote.1 };
    wr
}

// ---------------------------------------------------------------- steps

fn rc_send(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 10 * 1024;
    let data = pattern(len, 1);
    write(&p.ma, 0, &data)?;
    say!(out, "    setup RC QPs A {} ↔ B {}, both RTS, first PSN 0", qa.qpn(), qb.qpn());
    let before = p.snap();
    post_recv(&qb, &[recv_wr(1, &p.mb, 0, 16 * 1024)])?;

    post_send(&qa, &[send_wr(1, WrOpcode::Send, &p.ma, 0, len as u32)])?;
    say!(
        out,
        "    post  B: RECV wr_id 1, 16 KiB buffer;  A: SEND wr_id 1, {len} B = 10 packets of 1024"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    if at_b[0].byte_len as usize != len {
        return Err(format!("B: byte_len {} instead of {len}", at_b[0].byte_len));
    }
    check(out, "B's receive buffer", &read(&p.mb, 0, len)?, &data)?;
    Ok(format!("{len} B in 10 packets, one ACK"))
}

fn send_imm(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let data = pattern(64, 2);
    write(&p.ma, 16384, &data)?;
    let imm = 0x1234_5678;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(2, &p.mb, 16384, 1024)])?;
    let mut wr = send_wr(2, WrOpcode::SendWithImm, &p.ma, 16384, 64);
    wr.imm_or_inv = imm;
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  B: RECV wr_id 2, 1024 B;  A: SEND_WITH_IMM wr_id 2, 64 B, imm 0x{imm:08x}"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    if !at_b[0].flags.contains(WcFlags::WITH_IMM) || at_b[0].imm_or_inv != imm {
        return Err(format!("B: immediate 0x{:08x} instead of 0x{imm:08x}", at_b[0].imm_or_inv));
    }
    check(out, "B's receive buffer", &read(&p.mb, 16384, 64)?, &data)?;
    Ok(format!("imm 0x{imm:08x} delivered"))
}

fn rdma_write(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 4096;
    let data = pattern(len, 3);
    write(&p.ma, 20480, &data)?;
    let before = p.snap();
    let target = p.mb.addr() + 20480;
    let wr = rdma_wr(3, WrOpcode::RdmaWrite, (&p.ma, 20480, len as u32), (target, p.mb.rkey()));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  A: RDMA_WRITE wr_id 3, {len} B to B's va 0x{target:x} rkey {} (no receive used)",
        p.mb.rkey()
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite)])?;
    check(out, "B's memory", &read(&p.mb, 20480, len)?, &data)?;
    Ok(format!("{len} B written in 4 packets"))
}

fn write_imm(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 2048;
    let data = pattern(len, 4);
    write(&p.ma, 24576, &data)?;
    let imm = 0xcafe_0001;
    let before = p.snap();
    post_recv(&qb, &[RecvWr { wr_id: 4, sg_list: Vec::new() }])?;
    let target = p.mb.addr() + 24576;
    let mut wr =
        rdma_wr(4, WrOpcode::RdmaWriteWithImm, (&p.ma, 24576, len as u32), (target, p.mb.rkey()));
    wr.imm_or_inv = imm;
    post_send(&qa, &[wr])?;
    say!(out, "    post  B: RECV wr_id 4 (no buffer: the immediate consumes a receive)");
    say!(
        out,
        "          A: RDMA_WRITE_WITH_IMM wr_id 4, {len} B to va 0x{target:x}, imm 0x{imm:08x}"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::RecvRdmaWithImm)])?;
    if at_b[0].imm_or_inv != imm {
        return Err(format!("B: immediate 0x{:08x} instead of 0x{imm:08x}", at_b[0].imm_or_inv));
    }
    check(out, "B's memory", &read(&p.mb, 24576, len)?, &data)?;
    Ok("data and immediate delivered".into())
}

fn rdma_read(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 8192;
    let data = pattern(len, 5);
    write(&p.mb, 32768, &data)?;
    let before = p.snap();
    let source = p.mb.addr() + 32768;
    let wr = rdma_wr(5, WrOpcode::RdmaRead, (&p.ma, 32768, len as u32), (source, p.mb.rkey()));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  A: RDMA_READ wr_id 5, {len} B from B's va 0x{source:x} rkey {}",
        p.mb.rkey()
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaRead)])?;
    check(out, "A's buffer", &read(&p.ma, 32768, len)?, &data)?;
    Ok(format!("{len} B in 8 response packets"))
}

/// The 8-byte word at `offset` of `mr` (native order, as the HCA's atomics
/// see it).
fn word(mr: &Mr, offset: u64) -> Result<u64, String> {
    let bytes = read(mr, offset, 8)?;
    Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| "short read")?))
}

fn atomic(
    p: &mut Phase,
    out: &mut dyn Write,
    opcode: WrOpcode,
    initial: u64,
    operands: (u64, u64),
    expected_after: u64,
) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let (at_b_off, at_a_off) = (49152, 49152 + opcode as u64 * 8);
    write(&p.mb, at_b_off, &initial.to_ne_bytes())?;
    write(&p.ma, at_a_off, &[0xee; 8])?;
    let before = p.snap();
    let target = p.mb.addr() + at_b_off;
    let wr_id = 6 + u64::from(opcode == WrOpcode::AtomicFetchAndAdd);
    let mut wr = rdma_wr(wr_id, opcode, (&p.ma, at_a_off, 8), (target, p.mb.rkey()));
    wr.compare_add = operands.0;
    wr.swap = operands.1;
    post_send(&qa, &[wr])?;
    let ops = match opcode {
        WrOpcode::AtomicCmpAndSwp => {
            format!("compare 0x{:x}, swap 0x{:x}", operands.0, operands.1)
        }
        _ => format!("add 0x{:x}", operands.0),
    };
    say!(
        out,
        "    post  A: {} wr_id {wr_id} on B's u64 at va 0x{target:x} (holds 0x{initial:x}), {ops}",
        wr_name(opcode)
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    let completion = if opcode == WrOpcode::AtomicCmpAndSwp { Wc::CompSwap } else { Wc::FetchAdd };
    expect("A", &at_a, &[(WcStatus::Success, completion)])?;
    let orig = read(&p.ma, at_a_off, 8)?;
    let now = word(&p.mb, at_b_off)?.to_ne_bytes();
    checks(
        out,
        &[
            ("original value returned to A", &orig, &initial.to_le_bytes()),
            ("B's word after the operation", &now, &expected_after.to_ne_bytes()),
        ],
    )?;
    Ok(format!("0x{initial:x} → 0x{expected_after:x}"))
}

fn compare_swap(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let (old, new) = (0x1111, 0x2222);
    atomic(p, out, WrOpcode::AtomicCmpAndSwp, old, (old, new), new)
}

fn fetch_add(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let old = 0x2222u64;
    atomic(p, out, WrOpcode::AtomicFetchAndAdd, old, (5, 0), old + 5)
}

fn uc_send_write(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Uc, &t, &t)?;
    let (send_len, write_len) = (3000usize, 2048usize);
    let send_data = pattern(send_len, 8);
    let write_data = pattern(write_len, 9);
    write(&p.ma, 57344, &send_data)?;
    write(&p.ma, 61440, &write_data)?;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(8, &p.mb, 57344, 4096)])?;
    let target = p.mb.addr() + 61440;
    let wrs = [
        send_wr(8, WrOpcode::Send, &p.ma, 57344, send_len as u32),
        rdma_wr(9, WrOpcode::RdmaWrite, (&p.ma, 61440, write_len as u32), (target, p.mb.rkey())),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup UC QPs A {} → B {}: no ACKs; a sender completes once it has sent",
        qa.qpn(),
        qb.qpn()
    );
    say!(
        out,
        "    post  B: RECV wr_id 8;  A: SEND {send_len} B + RDMA_WRITE {write_len} B (wr_id 8, 9)"
    );
    let (at_b, at_a) = wait_both(p, 1, 2);
    let written = wait_for_bytes(&p.mb, 61440, &write_data)?;
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send), (WcStatus::Success, Wc::RdmaWrite)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    checks(
        out,
        &[
            ("B's receive buffer (SEND)", &read(&p.mb, 57344, send_len)?, &send_data),
            ("B's memory (WRITE)", &written, &write_data),
        ],
    )?;
    Ok("no ACKs on UC".into())
}

fn ud_send(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let qkey = 0x1111_2222;
    let qa = p.a.qp(QpType::Ud, cap())?;
    let qb = p.b.qp(QpType::Ud, cap())?;
    bring_up(&qa, None, &t, qkey)?;
    bring_up(&qb, None, &t, qkey)?;
    let attr =
        AhAttr { dgid: p.b.gid(), sgid_index: 1, hop_limit: 64, port_num: 1, ..AhAttr::default() };
    let ah = p.a.pd.create_ah(attr).map_err(|e| format!("create_ah: {e}"))?;
    let len = 512;
    let data = pattern(len, 10);
    write(&p.ma, 65536, &data)?;
    write(&p.mb, 65536, &[0xee; 40])?;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(10, &p.mb, 65536, 40 + 1024)])?;
    let mut wr = send_wr(10, WrOpcode::Send, &p.ma, 65536, len as u32);
    wr.ud = Some((ah.index(), qb.qpn(), Qkey(qkey)));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    setup UD QPs A {} and B {}, Q_Key 0x{qkey:08x}; A's AH {} → GID {}",
        qa.qpn(),
        qb.qpn(),
        ah.index(),
        p.b.gid()
    );
    say!(out, "    post  B: RECV wr_id 10, 40 + 1024 B;  A: SEND wr_id 10, {len} B via the AH");
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    let wc = &at_b[0];
    if !wc.flags.contains(WcFlags::GRH) || wc.byte_len as usize != 40 + len || wc.src_qp != qa.qpn()
    {
        return Err(format!(
            "B: {} (expected GRH, byte_len {}, src_qp {})",
            describe_wc(wc),
            40 + len,
            qa.qpn()
        ));
    }
    let grh = read(&p.mb, 65536, 40)?;
    let (ip, src) = match p.a.addr() {
        IpAddr::V4(_) => {
            (&grh[20..40], IpAddr::from(<[u8; 4]>::try_from(&grh[32..36]).unwrap_or_default()))
        }
        IpAddr::V6(_) => {
            (&grh[..], IpAddr::from(<[u8; 16]>::try_from(&grh[8..24]).unwrap_or_default()))
        }
    };
    let hex: Vec<String> = ip.iter().map(|b| format!("{b:02x}")).collect();
    say!(
        out,
        "    GRH   the first 40 B of B's buffer: {} the IP header:",
        if grh[..20] == [0; 20] && p.a.addr().is_ipv4() { "20 zero bytes, then" } else { "" }
    );
    say!(out, "          {}  (src {src})", hex.join(" "));
    if src != p.a.addr() {
        return Err(format!("GRH source {src} instead of {}", p.a.addr()));
    }
    check(out, "B's buffer after the GRH", &read(&p.mb, 65536 + 40, len)?, &data)?;
    Ok("GRH + 512 B".into())
}

fn srq_receive(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let srq = p.b.pd.create_srq(16, 1, 0).map_err(|e| format!("create_srq: {e}"))?;
    let qa = p.a.qp(QpType::Rc, cap())?;
    let qb =
        p.b.pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &p.b.cq,
                recv_cq: &p.b.cq,
                srq: Some(&srq),
                cap: cap(),
                sq_sig_all: false,
            })
            .map_err(|e| format!("create_qp: {e}"))?;
    p.connect(&qa, &qb, &t, &t)?;
    let lens = [300usize, 700];
    let first = pattern(lens[0], 11);
    let second = pattern(lens[1], 12);
    write(&p.ma, 73728, &first)?;
    write(&p.ma, 77824, &second)?;
    let before = p.snap();
    let recvs = [recv_wr(101, &p.mb, 73728, 1024), recv_wr(102, &p.mb, 77824, 1024)];
    srq.post_recv(&recvs).map_err(|(i, e)| format!("post_srq_recv (WR {i}): {e}"))?;
    let wrs = [
        send_wr(11, WrOpcode::Send, &p.ma, 73728, lens[0] as u32),
        send_wr(12, WrOpcode::Send, &p.ma, 77824, lens[1] as u32),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup B's QP {} takes its receives from an SRQ (no receive queue of its own)",
        qb.qpn()
    );
    say!(
        out,
        "    post  B: 2 RECVs to the SRQ (wr_id 101, 102);  A: 2 SENDs, {} B and {} B",
        lens[0],
        lens[1]
    );
    let (at_b, at_a) = wait_both(p, 2, 2);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send), (WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv), (WcStatus::Success, Wc::Recv)])?;
    let ids: Vec<u64> = at_b.iter().map(|c| c.wr_id).collect();
    if ids != [101, 102] || at_b.iter().any(|c| c.qp_num != qb.qpn()) {
        return Err(format!("B: completions {ids:?} on the wrong WRs or QP"));
    }
    checks(
        out,
        &[
            ("first SRQ buffer", &read(&p.mb, 73728, lens[0])?, &first),
            ("second SRQ buffer", &read(&p.mb, 77824, lens[1])?, &second),
        ],
    )?;
    Ok("SRQ WRs 101, 102 consumed in order".into())
}

fn memory_window(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let mw = p.b.pd.alloc_mw(2).map_err(|e| format!("alloc_mw: {e}"))?;
    let (base, len) = (98304u64, 4096u64);
    let access = Access::REMOTE_WRITE | Access::REMOTE_READ;
    let before = p.snap();
    let (bind, rkey) = SendWr::bind_mw(13, &mw, &p.mb, base, len, access, 0x42);
    post_send(&qb, &[bind])?;
    say!(
        out,
        "    post  B: BIND_MW wr_id 13: type-2 MW on bytes {base}..{}, READ|WRITE → rkey {rkey}",
        base + len
    );
    let bound = wait(&p.b, 1);
    expect("B", &bound, &[(WcStatus::Success, Wc::BindMw)])?;
    mw.set_rkey(rkey);
    let data = pattern(1024, 13);
    write(&p.ma, 98304, &data)?;
    let target = p.mb.addr() + base + 512;
    let wrs = [
        rdma_wr(14, WrOpcode::RdmaWrite, (&p.ma, 98304, 1024), (target, rkey)),
        rdma_wr(15, WrOpcode::RdmaRead, (&p.ma, 102400, 1024), (target, rkey)),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    post  A: RDMA_WRITE (wr_id 14), RDMA_READ (15), 1 KiB each, 0x{target:x} rkey {rkey}"
    );
    let at_a = wait(&p.a, 2);
    p.report(out, &before, &at_a, &bound);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite), (WcStatus::Success, Wc::RdmaRead)])?;
    checks(
        out,
        &[
            ("B's memory through the window", &read(&p.mb, base + 512, 1024)?, &data),
            ("A's READ back through the window", &read(&p.ma, 102400, 1024)?, &data),
        ],
    )?;
    Ok(format!("window rkey {rkey}"))
}

fn rnr(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let ta = default_tuning();
    // B's RNR NAKs ask A to wait timer code 16: 2.56 ms.
    let tb = Tuning { min_rnr_timer: 16, ..default_tuning() };
    let (qa, qb) = p.pair(QpType::Rc, &ta, &tb)?;
    let len = 256;
    let data = pattern(len, 14);
    write(&p.ma, 106496, &data)?;
    let before = p.snap();
    post_send(&qa, &[send_wr(16, WrOpcode::Send, &p.ma, 106496, len as u32)])?;
    say!(
        out,
        "    post  A: SEND wr_id 16, {len} B; B has no receive posted (rnr_retry 7: forever)"
    );
    let deadline = Instant::now() + WAIT;
    let naks = || {
        let now = p.b.dev.hca().lock().counters().send_rnr_err;
        now.saturating_sub(before.b.send_rnr_err)
    };
    while naks() == 0 && Instant::now() < deadline {
        p.a.dev.progress();
        p.b.dev.progress();
        std::thread::sleep(Duration::from_micros(100));
    }
    if naks() == 0 {
        return Err("B sent no RNR NAK".into());
    }
    say!(out, "    ...   B answered with an RNR NAK (receiver not ready); now B posts the receive");
    post_recv(&qb, &[recv_wr(16, &p.mb, 106496, 1024)])?;
    say!(out, "    post  B: RECV wr_id 16, 1024 B; A retries after the RNR timer");
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    let after = p.snap();
    let received = after.a.rcvd_rnr_err.saturating_sub(before.a.rcvd_rnr_err);
    if received == 0 {
        return Err("A counted no RNR NAK (rcvd_rnr_err)".into());
    }
    check(out, "B's receive buffer", &read(&p.mb, 106496, len)?, &data)?;
    Ok(format!("{received} RNR NAK, then success"))
}

fn bad_rkey(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let good = p.mb.rkey().0;
    let bad = Rkey((good & !0xff) | u32::from((good as u8).wrapping_add(0x55)));
    let len = 64;
    write(&p.ma, 110592, &pattern(len, 15))?;
    let untouched = read(&p.mb, 110592, len)?;
    let before = p.snap();
    let target = p.mb.addr() + 110592;
    post_send(
        &qa,
        &[rdma_wr(17, WrOpcode::RdmaWrite, (&p.ma, 110592, len as u32), (target, bad))],
    )?;
    say!(
        out,
        "    post  A: RDMA_WRITE wr_id 17, {len} B to B with rkey {bad} (B's MR has {good:#010x})"
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::RemAccessErr, Wc::RdmaWrite)])?;
    let state = match qa.query().ok().and_then(|a| a.qp_state) {
        Some(state) => upper_snake(&format!("{state:?}")),
        None => "unknown".into(),
    };
    say!(out, "    state A's QP is now in {state}: an error completion ends an RC connection");
    check(out, "B's memory left untouched", &read(&p.mb, 110592, len)?, &untouched)?;
    Ok("REM_ACCESS_ERR, nothing written".into())
}

fn fault_run(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    // A shorter ACK timeout (code 12: 16.8 ms) keeps a lost last packet cheap.
    let t = Tuning { timeout: 12, ..default_tuning() };
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 16 * 1024;
    let data = pattern(len, 16);
    write(&p.ma, 131072, &data)?;
    let before = p.snap();
    let target = p.mb.addr() + 131072;
    let wrs = [
        rdma_wr(18, WrOpcode::RdmaWrite, (&p.ma, 131072, len as u32), (target, p.mb.rkey())),
        rdma_wr(19, WrOpcode::RdmaRead, (&p.ma, 131072 + 65536, len as u32), (target, p.mb.rkey())),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup RC QPs A {} ↔ B {} on the reopened devices; ACK timeout 16.8 ms",
        qa.qpn(),
        _qb.qpn()
    );
    say!(out, "    post  A: RDMA_WRITE wr_id 18, {len} B (16 packets), RDMA_READ wr_id 19 back");
    let at_a = wait(&p.a, 2);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite), (WcStatus::Success, Wc::RdmaRead)])?;
    say!(
        out,
        "    why   a lost packet leaves a PSN gap: B NAKs the first missing PSN (sequence error)"
    );
    say!(out, "          and A goes back to it and resends from there (go-back-N)");
    let after = p.snap();
    let lost = after.sa.faults_lost.saturating_sub(before.sa.faults_lost);
    let retries = after.a.completer_retry_err.saturating_sub(before.a.completer_retry_err);
    checks(
        out,
        &[
            ("B's memory", &read(&p.mb, 131072, len)?, &data),
            ("A's READ back", &read(&p.ma, 131072 + 65536, len)?, &data),
        ],
    )?;
    if lost > 0 && retries == 0 {
        return Err("packets were lost but A never retransmitted".into());
    }
    Ok(format!("{lost} lost, {retries} go-back(s), data intact"))
}
