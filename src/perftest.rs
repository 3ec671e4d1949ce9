//! `uroce perftest`: a peer of the unmodified `ib_send_bw`, `ib_write_bw`,
//! `ib_read_bw` and `ib_atomic_bw` of Debian 12's perftest (4.5-0.17), in
//! either role.
//!
//! It speaks perftest's own out-of-band exchange byte for byte (over
//! `crate::oob`, so over the L2 transport's TCP as well: `wire` has
//! the messages, `session` their order), and runs the traffic as perftest
//! does: the client posts the operations with perftest's address cycling
//! and signalling, the SEND server keeps receives posted, and the server of
//! the other tests is passive and prints the client's report.
//!
//! What it checks beyond perftest: every completion's status and length
//! (and the sender's QPN on UD), the atomic results (a FETCH_AND_ADD
//! returns one more than the last one on the same address, a CMP_AND_SWAP
//! of perftest's 0/0 never changes it), the atomic server's memory at the
//! end, and with `--check` (uroce on both sides) the data of every SEND,
//! WRITE and READ.
//!
//! Not supported: bidirectional (`-b`), duration (`-D`), rdma_cm (`-R`),
//! SRQ, XRC/DC, latency tests.

pub(crate) mod engine;
pub(crate) mod report;
mod session;
mod traffic;
mod wire;

use crate::app::{c_number, NetArgs, Opened};
use crate::oob::{self, OobListener};
use report::Unit;
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use uroce_verbs::Mtu;
use wire::{Channel, Role};

/// perftest's `DEF_PORT`.
pub const DEFAULT_PORT: u16 = 18515;
/// perftest's `MAX_SIZE` (the largest size of `-a`).
pub const MAX_SIZE: u32 = 1 << 23;
/// The Q_Key of perftest's UD QPs (`DEF_QKEY`).
pub const UD_QKEY: u32 = 0x1111_1111;
/// perftest's page size default (`DEF_PAGE_SIZE`), this side's cycle
/// buffer.
pub const CYCLE_BUFFER: u32 = 4096;
/// perftest's `DEF_CACHE_LINE_SIZE`.
pub const CACHE_LINE: u32 = 64;
/// Peak bandwidth is measured up to this many messages (perftest: "peak
/// up to iters=20000").
pub const PEAK_LIMIT: u64 = 20_000;

/// Which perftest tool to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Verb {
    /// `ib_send_bw`: SENDs to posted receives (RC, UC, UD).
    #[value(name = "send_bw")]
    Send,
    /// `ib_write_bw`: RDMA WRITEs (RC, UC).
    #[value(name = "write_bw")]
    Write,
    /// `ib_read_bw`: RDMA READs (RC).
    #[value(name = "read_bw")]
    Read,
    /// `ib_atomic_bw`: FETCH_AND_ADD or CMP_AND_SWAP (RC).
    #[value(name = "atomic_bw")]
    Atomic,
}

/// perftest's `-c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Connection {
    /// Reliable connected.
    #[value(name = "RC")]
    Rc,
    /// Unreliable connected.
    #[value(name = "UC")]
    Uc,
    /// Unreliable datagram.
    #[value(name = "UD")]
    Ud,
}

/// perftest's `-A`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AtomicType {
    /// Compare 0, swap 0 (perftest's values).
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// Add 1 (perftest's value).
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

fn in_range(text: &str, min: u64, max: u64, what: &str) -> Result<u32, String> {
    let n = c_number(text)?;
    if (min..=max).contains(&n) {
        Ok(n as u32)
    } else {
        Err(format!("{what} should be between {min} and {max}"))
    }
}

fn parse_iters(t: &str) -> Result<u32, String> {
    in_range(t, 5, 100_000_000, "iterations")
}
fn parse_size(t: &str) -> Result<u32, String> {
    in_range(t, 1, u64::from(MAX_SIZE), "size")
}
fn parse_qps(t: &str) -> Result<u32, String> {
    in_range(t, 1, 16_384, "the number of QPs")
}
fn parse_tx(t: &str) -> Result<u32, String> {
    in_range(t, 1, 15_000, "the TX depth")
}
fn parse_rx(t: &str) -> Result<u32, String> {
    in_range(t, 1, 16_384, "the RX depth")
}
fn parse_cq_mod(t: &str) -> Result<u32, String> {
    in_range(t, 1, 1024, "the CQ moderation")
}
fn parse_gid_index(t: &str) -> Result<u32, String> {
    in_range(t, 0, 64, "the GID index")
}
fn parse_inline(t: &str) -> Result<u32, String> {
    in_range(t, 0, 400, "the inline size (uroce's max_inline_data is 400)")
}
fn parse_outs(t: &str) -> Result<u32, String> {
    in_range(t, 1, 128, "the outstanding reads")
}
fn parse_timeout_exp(t: &str) -> Result<u32, String> {
    in_range(t, 0, 31, "the QP timeout")
}
fn parse_sl(t: &str) -> Result<u32, String> {
    in_range(t, 0, 15, "the SL")
}
fn parse_ib_port(t: &str) -> Result<u32, String> {
    in_range(t, 1, 1, "the IB port (uroce devices have port 1 only)")
}
fn parse_port(t: &str) -> Result<u16, String> {
    in_range(t, 1, 65_535, "the TCP port").map(|p| p as u16)
}
fn parse_mtu(t: &str) -> Result<Mtu, String> {
    match c_number(t)? {
        256 => Ok(Mtu::Mtu256),
        512 => Ok(Mtu::Mtu512),
        1024 => Ok(Mtu::Mtu1024),
        2048 => Ok(Mtu::Mtu2048),
        4096 => Ok(Mtu::Mtu4096),
        _ => Err("the MTU is 256, 512, 1024, 2048 or 4096".into()),
    }
}

/// `uroce perftest` flags: perftest's (short and long names), plus
/// `--timeout`, `--check` and the device flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "Without SERVER it is the server: it listens on the device's address \
                        (UROCE_ADDR, or the L2 link's UROCE_ADDR) and TCP port 18515. With \
                        SERVER it is the client.\nExample: UROCE_ADDR=127.0.0.1 uroce perftest \
                        write_bw -n 1000   and   UROCE_ADDR=127.0.0.2 uroce perftest write_bw \
                        -n 1000 127.0.0.1")]
pub struct PerftestArgs {
    /// The perftest tool: send_bw, write_bw, read_bw or atomic_bw.
    #[arg(value_enum)]
    pub test: Verb,
    /// The server to connect to (client); without it, the server.
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
    /// IB device (uroce has one device per process, chosen by UROCE_ADDR;
    /// accepted and ignored).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Port of the device (1).
    #[arg(short = 'i', long = "ib-port", value_parser = parse_ib_port, default_value = "1")]
    pub ib_port: u32,
    /// GID index: 1 is the IPv4 address (perftest's choice on RoCE), 0 the
    /// IPv6 link-local one.
    #[arg(short = 'x', long = "gid-index", value_parser = parse_gid_index, default_value = "1")]
    pub gid_index: u32,
    /// Iterations per QP (at least 5; default 5000 for write_bw, 1000
    /// otherwise).
    #[arg(short = 'n', long = "iters", value_parser = parse_iters)]
    pub iters: Option<u32>,
    /// Message size (default 65536; atomics use 8).
    #[arg(short = 's', long = "size", value_parser = parse_size)]
    pub size: Option<u32>,
    /// Run every size from 2 to 2^23 (UD: to the MTU).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Path MTU: 256 to 4096 (default: the port's; the smaller of both
    /// sides' is used).
    #[arg(short = 'm', long = "mtu", value_parser = parse_mtu)]
    pub mtu: Option<Mtu>,
    /// Connection type: RC, UC (send_bw, write_bw) or UD (send_bw).
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    pub connection: Connection,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", value_parser = parse_qps, default_value = "1")]
    pub qps: u32,
    /// Operations outstanding per QP (default 128; at most the iterations).
    #[arg(short = 't', long = "tx-depth", value_parser = parse_tx, default_value = "128")]
    pub tx_depth: u32,
    /// Receives posted per QP (send_bw; default 512, UC/UD: the
    /// iterations; at most the iterations).
    #[arg(short = 'r', long = "rx-depth", value_parser = parse_rx)]
    pub rx_depth: Option<u32>,
    /// Signal every this many operations (default 100; at most the TX
    /// depth).
    #[arg(short = 'Q', long = "cq-mod", value_parser = parse_cq_mod, default_value = "100")]
    pub cq_mod: u32,
    /// Largest message sent inline (send_bw, write_bw).
    #[arg(short = 'I', long = "inline_size", value_parser = parse_inline, default_value = "0")]
    pub inline_size: u32,
    /// Outstanding READs/atomics (default: the device's, 128).
    #[arg(short = 'o', long = "outs", value_parser = parse_outs)]
    pub outs: Option<u32>,
    /// Atomic operation (atomic_bw).
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value = "FETCH_AND_ADD")]
    pub atomic_type: AtomicType,
    /// QP timeout exponent (4.096 us x 2^timeout).
    #[arg(short = 'u', long = "qp-timeout", value_parser = parse_timeout_exp, default_value = "14")]
    pub qp_timeout: u32,
    /// Service level (no effect on RoCE; accepted).
    #[arg(short = 'S', long = "sl", value_parser = parse_sl, default_value = "0")]
    pub sl: u32,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", value_parser = parse_port, default_value = "18515")]
    pub port: u16,
    /// Do not warn about the CPU frequency (uroce never does; accepted).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// No peak bandwidth.
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Bandwidth in Gb/sec (10^9 bits) instead of MB/sec (2^20 bytes).
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Seconds any wait may last without progress (no byte from the peer
    /// and no packet on the device); the client retries its connect and the
    /// server waits for a client this long.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// uroce on both sides: fill the buffers with known patterns and check
    /// the data of every SEND, WRITE and READ (perftest fills its buffers
    /// randomly, so against perftest the data cannot be checked).
    #[arg(long)]
    pub check: bool,
    /// Device flags.
    #[command(flatten)]
    pub net: NetArgs,
}

/// The flags, resolved as perftest resolves them (`force_dependecies`).
#[derive(Debug, Clone)]
pub struct Plan {
    verb: Verb,
    connection: Connection,
    atomic: AtomicType,
    /// The client's target (None: the server).
    server: Option<String>,
    port: u16,
    gid_index: u8,
    iters: u32,
    /// The message size (`-a`: none).
    size: u32,
    size_given: bool,
    all_sizes: bool,
    mtu: Option<Mtu>,
    qps: u32,
    tx_depth: u32,
    rx_depth: u32,
    cq_mod: u32,
    inline_size: u32,
    outs: Option<u32>,
    qp_timeout: u8,
    peak: bool,
    unit: Unit,
    timeout: Duration,
    check: bool,
    cycle_buffer: u32,
    cache_line: u32,
    /// The device name in the banner.
    device: String,
}

impl Plan {
    fn resolve(a: &PerftestArgs) -> Result<Plan, String> {
        let verb = a.test;
        match (verb, a.connection) {
            (Verb::Send, _) | (Verb::Write, Connection::Rc | Connection::Uc) => {}
            (_, Connection::Rc) => {}
            (_, c) => {
                return Err(format!(
                    "{} cannot use {} QPs (ib_{} supports {})",
                    tool(verb),
                    c.name(),
                    tool(verb),
                    if verb == Verb::Write { "RC and UC" } else { "RC" }
                ))
            }
        }
        if verb == Verb::Atomic && (a.size.is_some() || a.all) {
            return Err("ib_atomic_bw has no -s or -a: atomics are 8 bytes".into());
        }
        if a.size.is_some() && a.all {
            return Err("-s and -a cannot be used together".into());
        }
        if a.outs.is_some() && !matches!(verb, Verb::Read | Verb::Atomic) {
            return Err("-o/--outs is for read_bw and atomic_bw".into());
        }
        if a.rx_depth.is_some() && verb != Verb::Send {
            return Err("-r/--rx-depth is for send_bw".into());
        }
        if a.inline_size > 0 && matches!(verb, Verb::Read | Verb::Atomic) {
            return Err("-I/--inline_size is for send_bw and write_bw".into());
        }
        let iters = a.iters.unwrap_or(if verb == Verb::Write { 5000 } else { 1000 });
        let tx_depth = a.tx_depth.min(iters);
        let default_rx = if a.connection == Connection::Rc { 512 } else { iters.min(16_000) };
        let rx_depth = a.rx_depth.unwrap_or(default_rx).min(iters);
        let size = match verb {
            Verb::Atomic => 8,
            _ => a.size.unwrap_or(65_536),
        };
        Ok(Plan {
            verb,
            connection: a.connection,
            atomic: a.atomic_type,
            server: a.server.clone(),
            port: a.port,
            gid_index: a.gid_index as u8,
            iters,
            size,
            size_given: a.size.is_some(),
            all_sizes: a.all,
            mtu: a.mtu,
            qps: a.qps,
            tx_depth,
            rx_depth,
            cq_mod: a.cq_mod.min(tx_depth),
            inline_size: a.inline_size,
            outs: a.outs,
            qp_timeout: a.qp_timeout as u8,
            peak: !a.no_peak,
            unit: if a.report_gbits { Unit::Gigabits } else { Unit::MegaBytes },
            timeout: Duration::from_secs(a.timeout),
            check: a.check,
            cycle_buffer: CYCLE_BUFFER,
            cache_line: CACHE_LINE,
            device: String::new(),
        })
    }

    fn is_client(&self) -> bool {
        self.server.is_some()
    }

    /// perftest's test name (`testsStr` and the atomic type).
    fn title(&self) -> &'static str {
        match (self.verb, self.atomic) {
            (Verb::Send, _) => "Send",
            (Verb::Write, _) => "RDMA_Write",
            (Verb::Read, _) => "RDMA_Read",
            (Verb::Atomic, AtomicType::FetchAndAdd) => "Atomic FETCH_AND_ADD",
            (Verb::Atomic, AtomicType::CmpAndSwap) => "Atomic CMP_AND_SWAP",
        }
    }

    /// The sizes to run once the MTU is known: `-a` runs 2 to 2^23 (UD: to
    /// the MTU); a UD message must fit one packet (perftest shrinks a
    /// default size to the MTU and refuses a larger `-s`).
    fn sizes(&self, mtu: Mtu) -> Result<Vec<u32>, String> {
        let largest = if self.connection == Connection::Ud { mtu.bytes() } else { MAX_SIZE };
        if self.all_sizes {
            return Ok((1..=largest.trailing_zeros()).map(|p| 1 << p).collect());
        }
        if self.size > largest {
            if self.size_given {
                return Err(format!(
                    "Max message size in UD cannot be greater than MTU ({} bytes)",
                    mtu.bytes()
                ));
            }
            return Ok(vec![largest]);
        }
        Ok(vec![self.size])
    }
}

fn tool(verb: Verb) -> &'static str {
    match verb {
        Verb::Send => "send_bw",
        Verb::Write => "write_bw",
        Verb::Read => "read_bw",
        Verb::Atomic => "atomic_bw",
    }
}

/// Runs `uroce perftest`; returns the exit status: 0 after a complete and
/// correct run, 1 when something failed, 2 on bad flags.
pub fn run(args: &PerftestArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let plan = Plan::resolve(args).and_then(|plan| Ok((plan, args.net.config()?)));
    let (mut plan, config) = match plan {
        Ok(p) => p,
        Err(why) => {
            let _ = writeln!(err, "uroce perftest: {why}");
            return 2;
        }
    };
    let opened = Opened::default();
    let result = opened
        .node(config, 1)
        .map_err(|e| format!("Couldn't open the device: {e}"))
        .and_then(|node| {
            plan.device = format!("uroce@{}", node.addr());
            perftest(&plan, node, out)
        });
    let _ = out.flush();
    let code = match result {
        Ok(()) => 0,
        Err(why) => {
            let _ = writeln!(err, "uroce perftest: {why}");
            1
        }
    };
    // The device is closed by now (`perftest` owns it).
    let captured = opened.finish("perftest", args.net.counters, err);
    if captured {
        code
    } else {
        1
    }
}

fn perftest(plan: &Plan, node: crate::app::Node, out: &mut dyn Write) -> Result<(), String> {
    let port = node.ctx.query_port().map_err(|e| format!("ibv_query_port: {e}"))?;
    // perftest's set_mtu: -m, but never above the port's active MTU.
    let own_mtu = match plan.mtu {
        Some(m) if m.bytes() > port.active_mtu.bytes() => {
            let _ = writeln!(
                out,
                "Requested mtu is higher than active mtu \nChanging to active mtu - {}",
                port.active_mtu.raw()
            );
            port.active_mtu
        }
        Some(m) => m,
        None => port.active_mtu,
    };
    let stream = match &plan.server {
        Some(host) => oob::connect(&node.dev, host, plan.port, plan.timeout)?,
        None => {
            let listener = OobListener::bind(&node.dev, plan.port)?;
            writeln!(
                out,
                "\n************************************\n* Waiting for client to connect... \
                 *\n************************************"
            )
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))?;
            let never = AtomicBool::new(false);
            listener.accept(Some(Instant::now() + plan.timeout), &never)?
        }
    };
    let role = if plan.is_client() { Role::Client } else { Role::Server };
    let hca = node.dev.hca().clone();
    let progress = Box::new(move || hca.lock().counters().rcvd_pkts);
    let ch = Channel::new(stream, role, plan.timeout, progress);
    session::run(plan, own_mtu, ch, |agreed| traffic::Rdma::open(plan, role, node, agreed), out)
}
