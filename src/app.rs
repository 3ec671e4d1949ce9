//! What the `uroce` tools (demo, pingpong, bench, perftest, opcodes) and
//! the tests share: a device on the real network with a verbs context, a
//! protection domain and a CQ, the usual steps to connect QPs and wait for
//! completions, and what a tool reports at exit about the devices it
//! opened ([`Opened`]: `--counters`, a capture file that misses frames).

use std::io::Write;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce_net::udp::{DeviceObserver, DeviceSummary, UdpConfig, UdpDevice, UdpError};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, Context, Cq, Gid, Mtu, Pd, Qp, QpCap, QpInitAttr, QpType, Qpn, WorkCompletion,
};

/// Every access right (local write, remote write/read/atomic, bind).
pub const ALL_ACCESS: Access = Access(1 | 2 | 4 | 8 | 16);

/// A device with a context, a PD and one CQ.
pub struct Node {
    /// The verbs context.
    pub ctx: Context,
    /// A protection domain.
    pub pd: Pd,
    /// A CQ for everything.
    pub cq: Cq,
    /// The device (last: dropped after the verbs objects).
    pub dev: UdpDevice,
}

impl Node {
    /// Opens a device with `config` and a CQ of `cqe` entries.
    pub fn open(config: UdpConfig, cqe: u32) -> Result<Node, String> {
        let dev = UdpDevice::open(config).map_err(|e: UdpError| e.to_string())?;
        let ctx = Context::open(dev.hca());
        let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
        let cq = ctx.create_cq(cqe).map_err(|e| format!("create_cq: {e}"))?;
        Ok(Node { ctx, pd, cq, dev })
    }

    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.dev.addr()
    }

    /// The device's GID at index 1 (its IP address).
    pub fn gid(&self) -> Gid {
        Gid::from_ip(self.addr())
    }

    /// A QP of `qp_type` on the node's CQ.
    pub fn qp(&self, qp_type: QpType, cap: QpCap) -> Result<Qp, String> {
        self.pd
            .create_qp(&QpInitAttr {
                qp_type,
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                cap,
                sq_sig_all: false,
            })
            .map_err(|e| format!("create_qp: {e}"))
    }

    /// Polls the CQ until `count` completions arrived or `timeout` passed.
    pub fn wait(&self, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
        wait_cq(&self.cq, count, timeout)
    }
}

/// Polls `cq` until `count` completions arrived or `timeout` passed.
pub fn wait_cq(cq: &Cq, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < count {
        match cq.poll(count - got.len()) {
            Ok(more) if more.is_empty() => {
                if Instant::now() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
            Ok(more) => got.extend(more),
            Err(_) => break,
        }
    }
    got
}

/// Reads an unsigned number as the C tools' `strtoul(text, NULL, 0)` /
/// `strtol` do: `0x` hexadecimal, a leading `0` octal, decimal otherwise
/// (but the whole text must be a number).
pub fn c_number(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, radix) = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (hex, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    u64::from_str_radix(digits, radix).map_err(|_| format!("`{text}` is not a number"))
}

/// The tuning the tools use unless told otherwise: path MTU 1024 as
/// `ibv_rc_pingpong`, timeout 14 (67 ms), 7 retries, infinite RNR retries.
pub fn default_tuning() -> Tuning {
    Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        rd_atomic: 16,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    }
}

/// Moves `qp` to RTS towards `remote` (RC/UC) or on its own (UD).
pub fn bring_up(
    qp: &Qp,
    remote: Option<(Gid, Qpn, u32)>,
    tuning: &Tuning,
    qkey: u32,
) -> Result<(), String> {
    connect::to_init(qp, ALL_ACCESS, qkey).map_err(|e| format!("modify to INIT: {e}"))?;
    let remote = remote.map(|(gid, qpn, psn)| Remote { gid, qpn, psn });
    connect::to_rts(qp, remote, tuning).map_err(|e| format!("modify to RTR/RTS: {e}"))
}

/// The network flags every command that opens a device takes. Flags win
/// over the environment (`UROCE_ADDR`, `UROCE_FAULTS`, `UROCE_CAPTURE`,
/// `UROCE_PROGRESS`, `UROCE_OFFLOAD`).
// The field docs are clap's help text, written as the tools print it
// (`<PORT>`, `[params]`), not rustdoc markup.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NetArgs {
    /// Write every packet sent and received to this pcap file (full
    /// Ethernet frames; tshark and Wireshark decode them as RoCEv2). The
    /// file is created before anything runs; a file that cannot be
    /// created or written in full makes the exit status non-zero.
    #[arg(long, value_name = "FILE.pcap")]
    pub capture: Option<std::path::PathBuf>,
    /// At exit, print every device's non-zero counters to standard error,
    /// one per line: `counter <device address> <name> <value>` for the
    /// HCA's (rxe's names), `runtime_counter <device address> <name>
    /// <value>` for the UDP runtime's and the L2 link's (`link_...`).
    #[arg(long)]
    pub counters: bool,
    /// Faults on outgoing packets, e.g.
    /// `loss=0.01,dup=0.001,delay_us=200,reorder=0.01,corrupt=0.001,seed=7`
    /// (or env UROCE_FAULTS).
    #[arg(long, value_name = "SPEC")]
    pub faults: Option<String>,
    /// How the background thread waits: busy, event, hybrid[:spin_us]
    /// (or env UROCE_PROGRESS).
    #[arg(long, value_name = "MODE")]
    pub progress: Option<String>,
    /// Print the HCA's decisions as it takes them, on standard error, one
    /// per line: `trace <device address> <microseconds> <decision>` (what
    /// happened to each packet received and why, go-backs, RNR waits,
    /// refused WQEs, completions; or env UROCE_TRACE=1).
    #[arg(long)]
    pub trace: bool,
}

impl NetArgs {
    /// The device configuration: the environment, then these flags.
    pub fn config(&self) -> Result<UdpConfig, String> {
        let mut config = UdpConfig::from_env().map_err(|e| e.to_string())?;
        self.apply(&mut config)?;
        Ok(config)
    }

    /// Applies the flags to `config`.
    pub fn apply(&self, config: &mut UdpConfig) -> Result<(), String> {
        use uroce_net::udp::{FaultSpec, ProgressMode};
        if let Some(path) = &self.capture {
            config.capture = Some(path.clone());
        }
        if let Some(text) = &self.faults {
            let spec = FaultSpec::parse(text).map_err(|e| format!("--faults: {e}"))?;
            config.faults = spec.is_active().then_some(spec);
        }
        if let Some(text) = &self.progress {
            config.progress = ProgressMode::parse(text)
                .ok_or_else(|| format!("--progress `{text}`: busy, event or hybrid[:spin_us]"))?;
        }
        if self.trace {
            config.trace = uroce_net::udp::TraceMode::Print;
        }
        Ok(())
    }
}

/// Connects `qa` on `a` and `qb` on `b` to each other (RC or UC), both
/// starting at PSN 0, with `tuning`.
pub fn connect_pair(a: &Node, qa: &Qp, b: &Node, qb: &Qp, tuning: &Tuning) -> Result<(), String> {
    bring_up(qa, Some((b.gid(), qb.qpn(), 0)), tuning, 0)?;
    bring_up(qb, Some((a.gid(), qa.qpn(), 0)), tuning, 0)
}

/// A QP of `qp_type` whose send and receive completions go to `cq`.
pub fn qp_on(pd: &Pd, cq: &Cq, qp_type: QpType, cap: QpCap) -> Result<Qp, String> {
    pd.create_qp(&QpInitAttr {
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    })
    .map_err(|e| format!("create_qp: {e}"))
}

/// The devices a command opened, observed until it exits, when
/// [`Opened::finish`] reports on them: their counters (`--counters`), and
/// any capture file that misses frames. The devices may be closed by then
/// (each leaves its summary as it closes).
#[derive(Debug, Default)]
pub struct Opened {
    observers: Mutex<Vec<DeviceObserver>>,
}

/// The first word of a line of HCA counters (see [`NetArgs::counters`]).
pub const HCA_COUNTER: &str = "counter";
/// The first word of a line of the runtime's counters.
pub const RUNTIME_COUNTER: &str = "runtime_counter";

/// What a tool reports about the device(s) at one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    /// The devices' address.
    pub addr: IpAddr,
    /// The HCA's counters, named as [`uroce_hca::counters::Counters::named`] names them.
    pub hca: Vec<(&'static str, u64)>,
    /// The runtime's, named as [`uroce_net::udp::UdpStats::named`] names them.
    pub runtime: Vec<(&'static str, u64)>,
    /// The first error writing the capture file.
    pub capture_failure: Option<String>,
}

impl DeviceReport {
    fn of(summary: DeviceSummary) -> DeviceReport {
        DeviceReport {
            addr: summary.addr,
            hca: summary.counters.named().to_vec(),
            runtime: summary.stats.named(),
            capture_failure: summary.capture_failure,
        }
    }

    /// Adds a later device's counters at the same address.
    fn add(&mut self, later: DeviceReport) {
        for (sum, more) in [(&mut self.hca, later.hca), (&mut self.runtime, later.runtime)] {
            for ((name, value), (more_name, more_value)) in sum.iter_mut().zip(more) {
                debug_assert_eq!(*name, more_name, "one list of counters");
                *value = value.saturating_add(more_value);
            }
        }
        if self.capture_failure.is_none() {
            self.capture_failure = later.capture_failure;
        }
    }
}

impl Opened {
    /// Opens a device (as [`UdpDevice::open`]) and observes it.
    pub fn device(&self, config: UdpConfig) -> Result<UdpDevice, UdpError> {
        let dev = UdpDevice::open(config)?;
        self.observe(&dev);
        Ok(dev)
    }

    /// Opens a node (as [`Node::open`]) and observes its device.
    pub fn node(&self, config: UdpConfig, cqe: u32) -> Result<Node, String> {
        let node = Node::open(config, cqe)?;
        self.observe(&node.dev);
        Ok(node)
    }

    /// Observes a device opened otherwise.
    pub fn observe(&self, dev: &UdpDevice) {
        self.observers.lock().unwrap_or_else(|e| e.into_inner()).push(dev.observer());
    }

    /// One report per address, in address order (flushing the capture of
    /// a device still open): a device reopened at an address (the demo's
    /// second phase) adds its counters to the earlier one's.
    pub fn reports(&self) -> Vec<DeviceReport> {
        let observers = self.observers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut merged: Vec<DeviceReport> = Vec::new();
        for report in observers.iter().map(|o| DeviceReport::of(o.summary())) {
            match merged.iter_mut().find(|m| m.addr == report.addr) {
                Some(earlier) => earlier.add(report),
                None => merged.push(report),
            }
        }
        merged.sort_by_key(|report| report.addr);
        merged
    }

    /// What a tool does at exit: with `print_counters`, writes the counters
    /// lines (see [`write_counters`]) to `err`; then every capture failure
    /// as `uroce <tool>: <failure>`. Returns whether every capture file
    /// was written in full.
    pub fn finish(&self, tool: &str, print_counters: bool, err: &mut dyn Write) -> bool {
        let reports = self.reports();
        if print_counters {
            write_counters(&reports, err);
        }
        let mut complete = true;
        for failure in reports.iter().filter_map(|r| r.capture_failure.as_deref()) {
            let _ = writeln!(err, "uroce {tool}: {failure}");
            complete = false;
        }
        let _ = err.flush();
        complete
    }
}

/// Writes each device's non-zero counters, one per line:
/// `counter <address> <name> <value>` for the HCA's, then
/// `runtime_counter <address> <name> <value>` for the runtime's.
pub fn write_counters(reports: &[DeviceReport], out: &mut dyn Write) {
    for report in reports {
        let hca = report.hca.iter().map(|&(name, value)| (HCA_COUNTER, name, value));
        let runtime = report.runtime.iter().map(|&(name, value)| (RUNTIME_COUNTER, name, value));
        for (kind, name, value) in hca.chain(runtime).filter(|&(_, _, value)| value != 0) {
            let _ = writeln!(out, "{kind} {} {name} {value}", report.addr);
        }
    }
}
