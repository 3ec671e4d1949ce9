//! `uroce bench`: perftest's `ib_{send,write,read,atomic}_{bw,lat}` over the
//! UDP runtime.
//!
//! Shaped like perftest: the server runs without a host and waits for a
//! client on TCP port 18515 of its device's address (not every address, so
//! servers of several devices share the port); the client names the
//! server's device address. The client
//! sends the test description, both sides exchange QPNs, PSNs, addresses
//! and R_Keys over that connection (`crate::oob`), then the client measures and
//! prints perftest's table, plus one `metric=` line per value. `--loopback`
//! runs both ends in this process on two devices.

mod engine;
mod oob;
mod session;

use crate::app::{NetArgs, Opened};
use crate::oob::OobListener;
use session::{client, ClientOpts, Listen, Server};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use uroce_net::udp::UdpConfig;

/// perftest's `DEF_PORT`.
pub const DEFAULT_PORT: u16 = 18515;
/// perftest's `MAX_SIZE` (2^23), also the HCA's largest message.
pub const MAX_SIZE: u32 = 1 << 23;
/// Work requests (send or receive) one side may have queued over all its
/// QPs: per-QP depths are clamped to this divided by the QP count, which
/// also keeps every completion in one CQ (at most 32767 entries).
pub const WR_BUDGET: u32 = 32_000;
/// Largest inline payload (the HCA's `max_inline_data`).
const MAX_INLINE: u32 = 400;
/// QPs whose addresses are printed (perftest prints every QP).
const SHOWN_QPS: usize = 2;

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// SEND to pre-posted receives.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic FETCH_AND_ADD (8 bytes).
    Atomic,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "atomic",
        }
    }

    fn from_name(name: &str) -> Option<Op> {
        [Op::Send, Op::Write, Op::Read, Op::Atomic].into_iter().find(|op| op.name() == name)
    }

    /// perftest's `testsStr`.
    fn title(self) -> &'static str {
        match self {
            Op::Send => "Send",
            Op::Write => "RDMA_Write",
            Op::Read => "RDMA_Read",
            Op::Atomic => "Atomic FETCH_AND_ADD",
        }
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// Bandwidth and message rate (requester side).
    Bw,
    /// Latency (ping-pong for SEND and WRITE, round trip for READ and
    /// atomics).
    Lat,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::Bw => "bw",
            Test::Lat => "lat",
        }
    }

    fn from_name(name: &str) -> Option<Test> {
        [Test::Bw, Test::Lat].into_iter().find(|t| t.name() == name)
    }
}

/// Two device addresses for `--loopback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrPair {
    /// The server's device.
    pub server: IpAddr,
    /// The client's device.
    pub client: IpAddr,
}

fn parse_addrs(text: &str) -> Result<AddrPair, String> {
    let (a, b) = text.split_once(',').ok_or("expected two addresses: SERVER,CLIENT")?;
    let parse = |s: &str| {
        s.trim().parse::<IpAddr>().map_err(|_| format!("`{}` is not an IP address", s.trim()))
    };
    let pair = AddrPair { server: parse(a)?, client: parse(b)? };
    if pair.server == pair.client {
        return Err("the two devices need different addresses".into());
    }
    Ok(pair)
}

fn parse_mtu(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(m @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(m),
        _ => Err("the MTU is 256, 512, 1024, 2048 or 4096".into()),
    }
}

/// `uroce bench` flags (perftest's names where perftest has them).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The operation: send, write, read or atomic (FETCH_AND_ADD).
    #[arg(value_enum)]
    pub op: Op,
    /// bw (bandwidth) or lat (latency).
    #[arg(value_enum)]
    pub test: Test,
    /// The server to connect to (client mode); without it, wait for a
    /// client (server mode).
    #[arg(conflicts_with = "loopback")]
    pub host: Option<String>,
    /// Message size in bytes (default 65536 for bw, 2 for lat; atomics use
    /// 8).
    #[arg(short = 's', long, value_parser = clap::value_parser!(u32).range(1..=MAX_SIZE as i64))]
    pub size: Option<u32>,
    /// Iterations per QP (at least 5; default 5000 for write bw, 1000
    /// otherwise).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(5..=100_000_000))]
    pub iters: Option<u32>,
    /// Run every size from 2 to 2^23 bytes (atomics: 8 only).
    #[arg(short = 'a', long, conflicts_with = "size")]
    pub all: bool,
    /// QPs (perftest's -q), for bw tests: the bandwidth is their sum.
    /// Per-QP queue depths shrink so that all QPs together stay within
    /// 32000 WRs. With more than one, the client also prints
    /// `metric=slowest_qp_share`: each QP's service rate, its messages over
    /// its span from its own first post to its last completion, the
    /// slowest over the mean (1.0: every QP served alike; near 0: one
    /// waited while the others ran), and `metric=slowest_qp_finish`: that
    /// QP's span as a fraction of the run.
    #[arg(short = 'q', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16_384))]
    pub qps: u32,
    /// TCP port of the exchange (default 18515; --loopback: any free port).
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active
    /// MTU, 4096 over UDP, the link's on a link).
    #[arg(short = 'm', long, value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// WRs outstanding per QP in bw tests (default 128).
    #[arg(short = 't', long = "tx-depth",
          value_parser = clap::value_parser!(u32).range(1..=15_000))]
    pub tx_depth: Option<u32>,
    /// Receives posted per QP for SEND tests (default 512).
    #[arg(short = 'r', long = "rx-depth",
          value_parser = clap::value_parser!(u32).range(1..=16_384))]
    pub rx_depth: Option<u32>,
    /// Signal every this many WRs (perftest's -Q; default 100, at most the
    /// tx depth).
    #[arg(short = 'Q', long = "cq-mod", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cq_mod: Option<u32>,
    /// Largest message sent inline (default 220 for write lat, 236 for
    /// send lat, 0 otherwise; at most 400).
    #[arg(short = 'I', long = "inline-size",
          value_parser = clap::value_parser!(u32).range(0..=MAX_INLINE as i64))]
    pub inline_size: Option<u32>,
    /// bw tests: packets' worth of WRs all QPs together keep outstanding
    /// (0, the default: no limit, as perftest; the device itself keeps
    /// its unacknowledged packets within a budget, `HcaConfig::
    /// max_device_unacked_psns`, so that many QPs' windows do not overflow
    /// the peer's socket buffer).
    #[arg(long, value_name = "PACKETS", default_value_t = 0)]
    pub max_inflight: u32,
    /// Skip the peak bandwidth (perftest's -N).
    #[arg(short = 'N', long = "no-peak")]
    pub no_peak: bool,
    /// UDP segmentation offload (GSO) on send: the default (kept for old
    /// command lines).
    #[arg(long, hide = true, conflicts_with = "no_offload")]
    pub offload: bool,
    /// No UDP segmentation offload: every packet its own datagram, UDP
    /// checksum 0 (as rxe sends).
    #[arg(long)]
    pub no_offload: bool,
    /// Run server and client in this process, on two devices.
    #[arg(long)]
    pub loopback: bool,
    /// The two devices of --loopback: SERVER,CLIENT (default
    /// 127.0.0.1,127.0.0.2).
    #[arg(long, value_name = "SERVER,CLIENT", requires = "loopback", value_parser = parse_addrs)]
    pub addrs: Option<AddrPair>,
    /// This device's address (default: env UROCE_ADDR, or 127.0.0.1).
    #[arg(long, conflicts_with = "loopback")]
    pub addr: Option<IpAddr>,
    /// Seconds without progress (a silent peer) before giving up.
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Device flags.
    #[command(flatten)]
    pub net: NetArgs,
}

/// What both sides agree on: the client's resolved flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Params {
    op: Op,
    test: Test,
    qps: u32,
    iters: u32,
    sizes: Vec<u32>,
    tx_depth: u32,
    rx_depth: u32,
    cq_mod: u32,
    mtu: u32,
    inline: u32,
}

impl Params {
    /// perftest's defaults for whatever the flags leave open, and the
    /// per-QP clamps for many QPs.
    fn resolve(a: &BenchArgs) -> Result<Params, String> {
        if a.test == Test::Lat && a.qps > 1 {
            return Err("--qps is for bw tests (latency tests use one QP)".into());
        }
        let sizes = if a.op == Op::Atomic {
            if a.size.is_some_and(|s| s != 8) {
                return Err("atomic tests use 8-byte operands (-s 8)".into());
            }
            vec![8]
        } else if a.all {
            (1..=23).map(|e| 1u32 << e).collect()
        } else {
            vec![a.size.unwrap_or(match a.test {
                Test::Bw => 65_536,
                Test::Lat => 2,
            })]
        };
        let iters =
            a.iters.unwrap_or(if a.op == Op::Write && a.test == Test::Bw { 5000 } else { 1000 });
        let per_qp = (WR_BUDGET / a.qps).max(1);
        let tx_depth = match a.test {
            Test::Bw => a.tx_depth.unwrap_or(128).min(per_qp),
            Test::Lat => 1,
        };
        let rx_depth = match a.op {
            Op::Send => a.rx_depth.unwrap_or(512).min(iters).min(per_qp),
            _ => 1,
        };
        let cq_mod = a.cq_mod.unwrap_or(100).min(tx_depth);
        let inline = match (a.op, a.test) {
            (Op::Read | Op::Atomic, _) => 0,
            (Op::Write, Test::Lat) => a.inline_size.unwrap_or(220),
            (Op::Send, Test::Lat) => a.inline_size.unwrap_or(236),
            _ => a.inline_size.unwrap_or(0),
        };
        let p = Params {
            op: a.op,
            test: a.test,
            qps: a.qps,
            iters,
            sizes,
            tx_depth,
            rx_depth,
            cq_mod,
            mtu: a.mtu.unwrap_or(4096),
            inline,
        };
        p.check()?;
        Ok(p)
    }

    /// Bounds every value (the server applies it to the client's HELLO).
    fn check(&self) -> Result<(), String> {
        let ok = (1..=16_384).contains(&self.qps)
            && (5..=100_000_000).contains(&self.iters)
            && !self.sizes.is_empty()
            && self.sizes.len() <= 64
            && self.sizes.iter().all(|s| (1..=MAX_SIZE).contains(s))
            && (self.op != Op::Atomic || self.sizes == [8])
            && (self.test == Test::Bw || self.qps == 1)
            && (1..=15_000).contains(&self.tx_depth)
            && (1..=16_384).contains(&self.rx_depth)
            && self.qps.saturating_mul(self.tx_depth) <= WR_BUDGET.max(self.tx_depth)
            && self.qps.saturating_mul(self.rx_depth) <= WR_BUDGET.max(self.rx_depth)
            && (1..=self.tx_depth).contains(&self.cq_mod)
            && matches!(self.mtu, 256 | 512 | 1024 | 2048 | 4096)
            && self.inline <= MAX_INLINE;
        if ok {
            Ok(())
        } else {
            Err(format!("parameters out of range: {self:?}"))
        }
    }

    /// perftest's factor: SEND and WRITE latency are half a ping-pong.
    fn rtt_factor(&self) -> f64 {
        match self.op {
            Op::Send | Op::Write => 2.0,
            Op::Read | Op::Atomic => 1.0,
        }
    }
}

/// Runs `uroce bench`; returns the exit status (0 done, 1 the run failed,
/// 2 bad flags).
pub fn run(args: &BenchArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let params = match Params::resolve(args) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(err, "uroce bench: {e}");
            return 2;
        }
    };
    let mut config = match args.net.config() {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "uroce bench: {e}");
            return 2;
        }
    };
    if args.no_offload {
        config.offload = false;
    }
    if let Some(addr) = args.addr {
        config.addr = addr;
    }
    let timeout = Duration::from_secs(args.timeout);
    let opts = ClientOpts {
        peak: !args.no_peak,
        max_inflight: args.max_inflight,
        port_mtu: args.mtu.is_none(),
    };
    let opened = Opened::default();
    let result = if args.loopback {
        loopback(args, &params, &opts, config, timeout, &opened, out)
    } else if let Some(host) = &args.host {
        let port = args.port.unwrap_or(DEFAULT_PORT);
        client(&params, &opts, config, host, port, timeout, &opened, out)
    } else {
        let port = args.port.unwrap_or(DEFAULT_PORT);
        let never = AtomicBool::new(false);
        let server = Server { op: args.op, test: args.test, timeout, quiet: false };
        server.serve(config, Listen::Port(port), None, &never, &opened, out)
    };
    let _ = out.flush();
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "uroce bench: {e}");
            1
        }
    };
    // The devices are closed by now (the client and the server own theirs).
    let captured = opened.finish("bench", args.net.counters, err);
    if captured {
        code
    } else {
        1
    }
}

/// Both ends in this process: the server on a thread, the client here.
fn loopback(
    args: &BenchArgs,
    params: &Params,
    opts: &ClientOpts,
    config: UdpConfig,
    timeout: Duration,
    opened: &Opened,
    out: &mut dyn Write,
) -> Result<(), String> {
    let pair = args.addrs.unwrap_or(AddrPair {
        server: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        client: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
    });
    if config.link.is_some() {
        return Err("--loopback runs two devices over the UDP runtime: unset UROCE_LINK \
                    (on a link, run the server and the client as two processes)"
            .into());
    }
    let mut server_config = config.clone();
    server_config.addr = pair.server;
    // One capture (the client's sees both directions).
    server_config.capture = None;
    let mut client_config = config;
    client_config.addr = pair.client;
    let port = args.port.unwrap_or(0);
    let listener = TcpListener::bind(SocketAddr::new(pair.server, port))
        .map(OobListener::Tcp)
        .map_err(|e| format!("listening on {}:{port}: {e}", pair.server))?;
    let server_host = pair.server.to_string();
    let abort = AtomicBool::new(false);
    let server = Server { op: params.op, test: params.test, timeout, quiet: true };
    let deadline = Instant::now() + timeout;
    let (client_result, server_result) = std::thread::scope(|s| {
        let handle = s.spawn(|| {
            let listen = Listen::Bound(&listener);
            let sink = &mut std::io::sink();
            server.serve(server_config, listen, Some(deadline), &abort, opened, sink)
        });
        let port = listener.port();
        let r = client(params, opts, client_config, &server_host, port, timeout, opened, out);
        abort.store(true, Ordering::Release);
        let s = handle.join().unwrap_or_else(|_| Err("the server thread panicked".into()));
        (r, s)
    });
    match (client_result, server_result) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(c), Ok(())) => Err(c),
        (Ok(()), Err(s)) => Err(format!("server: {s}")),
        (Err(c), Err(s)) => Err(format!("{c} (server: {s})")),
    }
}
