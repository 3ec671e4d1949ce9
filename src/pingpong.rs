//! `uroce pingpong`: rdma-core's `ibv_rc_pingpong`, and with `--uc` or
//! `--ud` its siblings `ibv_uc_pingpong` and `ibv_ud_pingpong`.
//!
//! The flags, the out-of-band TCP exchange and the printed lines are the C
//! tools' (`libibverbs/examples/{rc,uc,ud}_pingpong.c`), so that a uroce
//! device can ping-pong with the real tool on a Linux rxe device:
//!
//! - the client connects to the server's TCP port (18515) and sends its
//!   address as the 52-byte string `LLLL:QQQQQQ:PPPPPP:GGGG...` (LID, QPN and
//!   PSN in hex, the GID as 32 hex digits, NUL-terminated); the server
//!   connects its QP, answers with its own address, and waits for the
//!   client's `done` (5 bytes with the NUL);
//! - both sides post `rx_depth` receives first; the client sends first, and
//!   each side sends again once its previous send and the peer's message
//!   have completed (the `PINGPONG_SEND_WRID`/`PINGPONG_RECV_WRID` scheme);
//! - the summary is `<bytes> bytes in <s> seconds = <x> Mbit/sec` and
//!   `<iters> iters in <s> seconds = <x> usec/iter`.
//!
//! Differences from the C tools: `-g` is required (RoCE has no LIDs; `-g 1`
//! is the device's IP address, as with rxe), the server listens on the
//! device's address (`UROCE_ADDR`) rather than on every address, every wait
//! is bounded (`--timeout`, `--accept-timeout`), and `-c` finding bad data
//! makes the exit status 1.

mod srq;

use crate::app::{c_number, NetArgs, Opened};
use crate::oob::{self, OobListener};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use uroce_net::udp::UdpDevice;
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, AhAttr, CompChannel, Context, Cq, Gid, Mr, Mtu, Pd, Qkey, Qp, QpCap, QpInitAttr,
    QpType, Qpn, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode,
};

/// The `wr_id` of every receive (as in the C tools).
pub const PINGPONG_RECV_WRID: u64 = 1;
/// The `wr_id` of every send (as in the C tools).
pub const PINGPONG_SEND_WRID: u64 = 2;
/// The UD Q_Key `ibv_ud_pingpong` uses.
pub const UD_QKEY: u32 = 0x1111_1111;
/// Bytes of GRH in front of every UD receive.
pub const GRH_LEN: u64 = 40;
/// The length of the address message, NUL included
/// (`sizeof "0000:000000:000000:00000000000000000000000000000000"`).
pub const MSG_LEN: usize = 52;
/// What the client sends after the server's address (`sizeof "done"`).
const DONE: &[u8; 5] = b"done\0";
/// The page size the `-c` check walks (the C tools use `sysconf`).
const PAGE_SIZE: u64 = 4096;
/// What `-c` writes at every page start: the C tools'
/// `i / page_size % sizeof(char)`, which is always 0.
const PAGE_MARK: u8 = 0;

/// `uroce pingpong` flags: those of `ibv_rc_pingpong`, plus `--uc`/`--ud`
/// and uroce's bounds on waiting.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Without <HOST> it is the server: it waits for a connection on the device's \
                  address (UROCE_ADDR) and the TCP port. With <HOST> it is the client.\n\
                  Example: UROCE_ADDR=127.0.0.1 uroce pingpong -g 1   and   \
                  UROCE_ADDR=127.0.0.2 uroce pingpong -g 1 127.0.0.1"
)]
pub struct PingpongArgs {
    /// Listen on/connect to TCP port <PORT>.
    #[arg(short = 'p', long, default_value = "18515", value_parser = parse_port)]
    pub port: u16,
    /// Use IB device <DEV> (uroce has one device per process, chosen by
    /// UROCE_ADDR; the name is accepted and ignored).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Use port <PORT> of the device (uroce devices have only port 1).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value = "1", value_parser = parse_c_u32)]
    pub ib_port: u32,
    /// Size of message to exchange (default 4096; 1024 with --ud).
    #[arg(short = 's', long, value_parser = parse_c_u32)]
    pub size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default 1024; not with --ud).
    #[arg(short = 'm', long, value_parser = parse_c_u32)]
    pub mtu: Option<u32>,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", value_name = "DEP", default_value = "500", value_parser = parse_c_u32)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value = "1000", value_parser = parse_c_u32)]
    pub iters: u32,
    /// Service level value.
    #[arg(short = 'l', long, default_value = "0", value_parser = parse_c_u32)]
    pub sl: u32,
    /// Sleep on CQ events (default poll).
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Local port GID index: 1 is the device's IP address (required).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX", value_parser = parse_c_u32)]
    pub gid_idx: Option<u32>,
    /// Validate received buffer.
    #[arg(short = 'c', long)]
    pub chk: bool,
    /// Use on demand paging (uroce memory is always resident: no effect).
    #[arg(short = 'o', long)]
    pub odp: bool,
    /// Use implicit on demand paging (no effect, as -o).
    #[arg(short = 'O', long)]
    pub iodp: bool,
    /// Prefetch an ODP MR (no effect; needs -o or -O).
    #[arg(short = 'P', long)]
    pub prefetch: bool,
    /// Get CQE with timestamp (refused: uroce CQEs carry no timestamp).
    #[arg(short = 't', long)]
    pub ts: bool,
    /// Use device memory (refused: uroce has no device memory).
    #[arg(short = 'j', long)]
    pub dm: bool,
    /// Use new post send WR API (same work requests: no effect).
    #[arg(short = 'N', long = "new_send")]
    pub new_send: bool,
    /// Behave as ibv_uc_pingpong (UC QPs).
    #[arg(long, conflicts_with = "ud")]
    pub uc: bool,
    /// Behave as ibv_ud_pingpong (UD QPs, an address handle, Q_Key
    /// 0x11111111, the size at most the port MTU).
    #[arg(long)]
    pub ud: bool,
    /// Behave as ibv_srq_pingpong (`-q` RC QPs sharing one shared receive
    /// queue).
    #[arg(long, conflicts_with_all = ["ud", "uc"])]
    pub srq: bool,
    /// With `--srq`: the number of QPs (ibv_srq_pingpong's `-q`, default 16,
    /// at most 256).
    #[arg(short = 'q', long = "num-qp", value_name = "NUM", value_parser = parse_c_u32)]
    pub num_qp: Option<u32>,
    /// Give up when no completion (or TCP progress) comes for this many
    /// seconds.
    #[arg(long, default_value = "10", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// The server gives up when no client connects within this many seconds.
    #[arg(long = "accept-timeout", default_value = "600", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub accept_timeout: u64,
    /// Connect to the server at <HOST> (a client); without it, be the server.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// Device options.
    #[command(flatten)]
    pub net: NetArgs,
}

fn parse_c_u32(text: &str) -> Result<u32, String> {
    let n = c_number(text)?;
    u32::try_from(n).map_err(|_| format!("`{text}` is too large"))
}

fn parse_port(text: &str) -> Result<u16, String> {
    let n = c_number(text)?;
    u16::try_from(n).map_err(|_| format!("port `{text}` is above 65535"))
}

/// Which C tool to behave as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_uc_pingpong`.
    Uc,
    /// `ibv_ud_pingpong`.
    Ud,
}

impl Transport {
    fn qp_type(self) -> QpType {
        match self {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Transport::Rc => "ibv_rc_pingpong",
            Transport::Uc => "ibv_uc_pingpong",
            Transport::Ud => "ibv_ud_pingpong",
        }
    }
}

/// The flags, checked.
#[derive(Debug, Clone)]
struct Plan {
    transport: Transport,
    size: u32,
    mtu: Mtu,
    rx_depth: u32,
    iters: u32,
    sl: u8,
    events: bool,
    gid_idx: u8,
    chk: bool,
    port: u16,
    host: Option<String>,
    timeout: Duration,
    accept_timeout: Duration,
    /// `--srq`: the number of QPs.
    srq_qps: Option<u32>,
}

fn plan(args: &PingpongArgs) -> Result<Plan, String> {
    let transport = match (args.uc, args.ud) {
        (false, false) => Transport::Rc,
        (true, false) => Transport::Uc,
        (false, true) => Transport::Ud,
        (true, true) => return Err("--uc and --ud cannot be used together".into()),
    };
    if transport != Transport::Rc {
        let rc_only = [
            (args.odp, "-o/--odp"),
            (args.iodp, "-O/--iodp"),
            (args.prefetch, "-P/--prefetch"),
            (args.ts, "-t/--ts"),
            (args.dm, "-j/--dm"),
            (args.new_send, "-N/--new_send"),
        ];
        if let Some((_, flag)) = rc_only.iter().find(|(set, _)| *set) {
            return Err(format!(
                "{flag} is an ibv_rc_pingpong flag; {} has none",
                transport.tool()
            ));
        }
    }
    if transport == Transport::Ud && args.mtu.is_some() {
        return Err("-m/--mtu is not an ibv_ud_pingpong flag (UD messages fit one packet)".into());
    }
    if args.ts {
        return Err("-t/--ts: the device isn't completion timestamp capable".into());
    }
    if args.dm {
        return Err("-j/--dm: the device doesn't support device memory allocation".into());
    }
    if (args.odp || args.iodp) && args.dm {
        return Err("DM memory region can't be on demand".into());
    }
    if args.prefetch && !(args.odp || args.iodp) {
        return Err("prefetch is valid only with on-demand memory region".into());
    }
    if args.ib_port != 1 {
        return Err(format!("-i {}: uroce devices have one port, port 1", args.ib_port));
    }
    let mtu = match args.mtu {
        None => Mtu::Mtu1024,
        Some(bytes) => match bytes {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return Err(format!("-m {bytes}: the path MTU is 256, 512, 1024, 2048 or 4096")),
        },
    };
    let sl = u8::try_from(args.sl)
        .ok()
        .filter(|sl| *sl < 16)
        .ok_or_else(|| format!("-l {}: the service level is 0 to 15", args.sl))?;
    let gid_idx = match args.gid_idx {
        Some(index) => {
            u8::try_from(index).map_err(|_| format!("can't read sgid of index {index}"))?
        }
        None => {
            return Err("a GID index is needed: RoCE has no LIDs. Use -g 1 for the device's \
                        IPv4 address (UROCE_ADDR), as with rxe"
                .into())
        }
    };
    if args.rx_depth == 0 {
        return Err("-r 0: at least one receive must be posted".into());
    }
    if args.iters == 0 {
        return Err("-n 0: at least one exchange is needed".into());
    }
    let srq_qps = match (args.srq, args.num_qp) {
        (false, Some(_)) => return Err("-q/--num-qp is an ibv_srq_pingpong flag: add --srq".into()),
        (false, None) => None,
        (true, n) => {
            let n = n.unwrap_or(srq::DEFAULT_NUM_QP);
            if n == 0 || n > srq::MAX_QP {
                return Err(format!("-q {n}: 1 to {} QPs", srq::MAX_QP));
            }
            Some(n)
        }
    };
    let default_size = if transport == Transport::Ud { 1024 } else { 4096 };
    Ok(Plan {
        transport,
        size: args.size.unwrap_or(default_size),
        mtu,
        rx_depth: args.rx_depth,
        iters: args.iters,
        sl,
        events: args.events,
        gid_idx,
        chk: args.chk,
        port: args.port,
        host: args.host.clone(),
        timeout: Duration::from_secs(args.timeout),
        accept_timeout: Duration::from_secs(args.accept_timeout),
        srq_qps,
    })
}

/// Runs `uroce pingpong`; returns the exit status: 0 after a complete run,
/// 1 when something failed at run time, 2 on bad flags.
pub fn run(args: &PingpongArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let plan = match plan(args) {
        Ok(plan) => plan,
        Err(why) => {
            let _ = writeln!(err, "uroce pingpong: {why}");
            return 2;
        }
    };
    let config = match args.net.config() {
        Ok(config) => config,
        Err(why) => {
            let _ = writeln!(err, "uroce pingpong: {why}");
            return 2;
        }
    };
    let opened = Opened::default();
    let result = opened
        .device(config)
        .map_err(|e| format!("Couldn't open the device: {e}"))
        .and_then(|dev| match plan.srq_qps {
            Some(num_qp) => srq::run(&plan, num_qp, dev, out),
            None => pingpong(&plan, dev, out),
        });
    let _ = out.flush();
    let code = match result {
        Ok(Outcome::Clean) => 0,
        Ok(Outcome::BadData) => 1,
        Err(why) => {
            let _ = writeln!(err, "uroce pingpong: {why}");
            1
        }
    };
    // The device is closed by now (`pingpong` and `srq::run` own it).
    let captured = opened.finish("pingpong", args.net.counters, err);
    if captured {
        code
    } else {
        code.max(1)
    }
}

/// How a run that got to the end went.
enum Outcome {
    /// Everything as expected.
    Clean,
    /// `-c` found data that is not what the client sent.
    BadData,
}

/// One end's address, as exchanged over TCP (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Gid,
}

impl Dest {
    /// The message the C tools send: `sprintf("%04x:%06x:%06x:%s")` with
    /// the GID as `gid_to_wire_gid` writes it, NUL-padded to [`MSG_LEN`].
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let gid = gid_to_wire_gid(&self.gid);
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Reads a message as `sscanf("%x:%x:%x:%s")` and `wire_gid_to_gid`
    /// do; `None` if it is malformed.
    pub fn from_wire(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut fields = text.trim().splitn(4, ':');
        let mut hex = || u32::from_str_radix(fields.next()?.trim(), 16).ok();
        let (lid, qpn, psn) = (hex()?, hex()?, hex()?);
        let gid = wire_gid_to_gid(fields.next()?.trim())?;
        Some(Dest { lid, qpn, psn, gid })
    }
}

/// `gid_to_wire_gid`: each 32-bit word of the GID, in network order, as
/// eight hex digits (so the bytes in order).
pub fn gid_to_wire_gid(gid: &Gid) -> String {
    gid.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// `wire_gid_to_gid`: the inverse of [`gid_to_wire_gid`].
pub fn wire_gid_to_gid(text: &str) -> Option<Gid> {
    let bytes = text.as_bytes();
    if bytes.len() < 32 {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, word) in bytes[..32].chunks_exact(8).enumerate() {
        let word = std::str::from_utf8(word).ok()?;
        let value = u32::from_str_radix(word, 16).ok()?;
        gid[i * 4..i * 4 + 4].copy_from_slice(&value.to_be_bytes());
    }
    Some(Gid(gid))
}

/// glibc's `inet_ntop(AF_INET6)`, which the C tools print GIDs with (it
/// differs from Rust's `Ipv6Addr` display on IPv4-compatible addresses).
pub fn inet_ntop6(gid: &Gid) -> String {
    let b = gid.0;
    let words: Vec<u16> = b.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]])).collect();
    // The longest run of zero words (the first of equal ones), if >= 2.
    // Runs of zero words as (first word, length).
    type Run = Option<(usize, usize)>;
    let (mut best, mut cur): (Run, Run) = (None, None);
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(match cur {
                None => (i, 1),
                Some((base, len)) => (base, len + 1),
            });
        } else if let Some(run) = cur.take() {
            if best.is_none_or(|b| run.1 > b.1) {
                best = Some(run);
            }
        }
    }
    if let Some(run) = cur {
        if best.is_none_or(|b| run.1 > b.1) {
            best = Some(run);
        }
    }
    let best = best.filter(|run| run.1 >= 2);
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    s.push(':');
                }
                i += 1;
                continue;
            }
        }
        if i != 0 {
            s.push(':');
        }
        let embedded_v4 =
            matches!(best, Some((0, 6))) || (matches!(best, Some((0, 5))) && words[5] == 0xffff);
        if i == 6 && embedded_v4 {
            s.push_str(&format!("{}.{}.{}.{}", b[12], b[13], b[14], b[15]));
            return s;
        }
        s.push_str(&format!("{:x}", words[i]));
        i += 1;
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        s.push(':');
    }
    s
}

/// `ibv_wc_status_str`.
pub fn wc_status_str(status: WcStatus) -> &'static str {
    match status {
        WcStatus::Success => "success",
        WcStatus::LocLenErr => "local length error",
        WcStatus::LocQpOpErr => "local QP operation error",
        WcStatus::LocEecOpErr => "local EE context operation error",
        WcStatus::LocProtErr => "local protection error",
        WcStatus::WrFlushErr => "Work Request Flushed Error",
        WcStatus::MwBindErr => "memory management operation error",
        WcStatus::BadRespErr => "bad response error",
        WcStatus::LocAccessErr => "local access error",
        WcStatus::RemInvReqErr => "remote invalid request error",
        WcStatus::RemAccessErr => "remote access error",
        WcStatus::RemOpErr => "remote operation error",
        WcStatus::RetryExcErr => "transport retry counter exceeded",
        WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
        WcStatus::LocRddViolErr => "local RDD violation error",
        WcStatus::RemInvRdReqErr => "remote invalid RD request",
        WcStatus::RemAbortErr => "operation aborted",
        WcStatus::InvEecnErr => "invalid EE context number",
        WcStatus::InvEecStateErr => "invalid EE context state",
        WcStatus::FatalErr => "fatal error",
        WcStatus::RespTimeoutErr => "response timeout error",
        WcStatus::GeneralErr => "general error",
    }
}

/// A random 24-bit PSN (`lrand48() & 0xffffff`).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// The verbs objects of one end (`struct pingpong_context`). Fields drop
/// in order: the QP and AH before the memory, the CQ, the PD, the context.
struct Session {
    qp: Qp,
    ah: Option<uroce_verbs::Ah>,
    mr: Mr,
    cq: Cq,
    channel: Option<CompChannel>,
    pd: Pd,
    ctx: Context,
    plan: Plan,
}

impl Session {
    /// `pp_init_ctx`: buffer, PD, MR, CQ (with a channel for `-e`), QP in
    /// INIT.
    fn open(dev: &UdpDevice, plan: &Plan) -> Result<Session, String> {
        let ctx = Context::open(dev.hca());
        let size = u64::from(plan.size);
        let buf_len = match plan.transport {
            Transport::Ud => size + GRH_LEN,
            _ => size,
        };
        let port = ctx.query_port().map_err(|e| format!("Couldn't get port info: {e}"))?;
        if plan.transport == Transport::Ud && plan.size > port.active_mtu.bytes() {
            return Err(format!(
                "Requested size larger than port MTU ({})",
                port.active_mtu.bytes()
            ));
        }
        if plan.size > port.max_msg_sz {
            return Err(format!(
                "Requested size larger than the largest message ({})",
                port.max_msg_sz
            ));
        }
        let channel = plan.events.then(|| open_channel(&ctx)).transpose()?;
        let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let mr = pd
            .alloc_mr(buf_len, Access::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        // The C tools fill the buffer with 0x7b.
        let fill = usize::try_from(buf_len).map_err(|_| "the buffer is too large".to_string())?;
        mr.write(0, &vec![0x7b; fill]).map_err(|e| format!("Couldn't fill the buffer: {e}"))?;
        let cqe = plan.rx_depth.saturating_add(1);
        let cq = create_cq(&ctx, cqe, channel.as_ref())?;
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: plan.transport.qp_type(),
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: plan.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| format!("Couldn't create QP: {e}"))?;
        connect::to_init(&qp, Access(0), UD_QKEY)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
        Ok(Session { qp, ah: None, mr, cq, channel, pd, ctx, plan: plan.clone() })
    }

    /// `pp_post_recv`: posts up to `n` receives; returns how many.
    fn post_recv(&self, n: u64) -> u64 {
        let len = match self.plan.transport {
            Transport::Ud => self.plan.size.saturating_add(GRH_LEN as u32),
            _ => self.plan.size,
        };
        let wr = RecvWr { wr_id: PINGPONG_RECV_WRID, sg_list: vec![self.mr.sge(0, len)] };
        let mut posted = 0;
        while posted < n && self.qp.post_recv(std::slice::from_ref(&wr)).is_ok() {
            posted += 1;
        }
        posted
    }

    /// `pp_post_send`.
    fn post_send(&self, remote_qpn: u32) -> Result<(), String> {
        let mut wr = SendWr::new(PINGPONG_SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        match (self.plan.transport, &self.ah) {
            (Transport::Ud, Some(ah)) => {
                wr.sg_list = vec![self.mr.sge(GRH_LEN, self.plan.size)];
                wr.ud = Some((ah.index(), Qpn::new(remote_qpn), Qkey(UD_QKEY)));
            }
            (Transport::Ud, None) => return Err("Couldn't post send: no address handle".into()),
            _ => wr.sg_list = vec![self.mr.sge(0, self.plan.size)],
        }
        self.qp.post_send(&[wr]).map_err(|(_, e)| format!("Couldn't post send: {e}"))
    }

    /// `pp_connect_ctx`: RTR and RTS towards `dest` (RC, UC), or RTR, RTS
    /// and an address handle (UD).
    fn connect(&mut self, my_psn: u32, dest: &Dest) -> Result<(), String> {
        // `if (dest->gid.global.interface_id)`: without it the C tools use a
        // LID, which RoCE does not have.
        if dest.gid.0[8..16].iter().all(|b| *b == 0) {
            return Err(format!(
                "Failed to modify QP to RTR: the remote GID {} has no interface ID \
                 (run the other side with -g 1: RoCE needs a GID)",
                inet_ntop6(&dest.gid)
            ));
        }
        let tuning = c_tool_tuning(&self.plan, my_psn);
        if self.plan.transport == Transport::Ud {
            connect::to_rts(&self.qp, None, &tuning)
                .map_err(|e| format!("Failed to modify QP to RTR/RTS: {e}"))?;
            let ah_attr = AhAttr {
                dgid: dest.gid,
                sgid_index: tuning.sgid_index,
                hop_limit: tuning.hop_limit,
                sl: tuning.sl,
                port_num: 1,
                ..AhAttr::default()
            };
            let ah = self.pd.create_ah(ah_attr).map_err(|e| format!("Failed to create AH: {e}"))?;
            self.ah = Some(ah);
            return Ok(());
        }
        let remote = Remote { gid: dest.gid, qpn: Qpn::new(dest.qpn), psn: dest.psn };
        connect::to_rts(&self.qp, Some(remote), &tuning)
            .map_err(|e| format!("Failed to modify QP to RTR/RTS: {e}"))
    }

    /// The offset of the message in the buffer (after the GRH for UD).
    fn data_offset(&self) -> u64 {
        match self.plan.transport {
            Transport::Ud => GRH_LEN,
            _ => 0,
        }
    }

    /// `-c` on the client: marks every page of the message.
    fn mark_pages(&self) -> Result<(), String> {
        mark_pages(&self.mr, self.data_offset(), self.plan.size)
    }

    /// `-c` on the server: the pages whose first byte is not the client's.
    fn bad_pages(&self) -> Result<Vec<u64>, String> {
        bad_pages(&self.mr, self.data_offset(), self.plan.size)
    }

    /// Up to two completions: with `-e` whatever is there, otherwise spin
    /// until at least one (bounded by `deadline`).
    fn poll_two(&self, deadline: Instant) -> Result<Vec<WorkCompletion>, String> {
        loop {
            let wcs = self.cq.poll(2).map_err(|e| format!("poll CQ failed: {e}"))?;
            if !wcs.is_empty() || self.channel.is_some() {
                return Ok(wcs);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no completion for {} s: the peer stopped answering (or a packet was \
                     lost on an unreliable transport)",
                    self.plan.timeout.as_secs()
                ));
            }
            std::hint::spin_loop();
        }
    }

    /// The ping-pong loop; returns its duration.
    fn pingpong(&self, remote_qpn: u32, client: bool, mut routs: u64) -> Result<Duration, String> {
        let plan = &self.plan;
        let iters = u64::from(plan.iters);
        let rx_depth = u64::from(plan.rx_depth);
        let mut pending = PINGPONG_RECV_WRID;
        if client {
            if plan.chk {
                self.mark_pages()?;
            }
            self.post_send(remote_qpn)?;
            pending |= PINGPONG_SEND_WRID;
        }
        let start = Instant::now();
        let (mut rcnt, mut scnt) = (0u64, 0u64);
        let mut last_completion = Instant::now();
        while rcnt < iters || scnt < iters {
            let deadline = last_completion + plan.timeout;
            if let Some(channel) = &self.channel {
                let cq = wait_cq_event(channel, deadline, plan.timeout)?;
                if cq != self.cq.index() {
                    return Err(format!("CQ event for unknown CQ {cq}"));
                }
                self.cq.req_notify(false);
            }
            let wcs = self.poll_two(deadline)?;
            if !wcs.is_empty() {
                last_completion = Instant::now();
            }
            for wc in wcs {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "Failed status {} ({}) for wr_id {}",
                        wc_status_str(wc.status),
                        wc.status.raw(),
                        wc.wr_id as i32
                    ));
                }
                match wc.wr_id {
                    PINGPONG_SEND_WRID => scnt += 1,
                    PINGPONG_RECV_WRID => {
                        routs = routs.saturating_sub(1);
                        if routs <= 1 {
                            routs += self.post_recv(rx_depth - routs);
                            if routs < rx_depth {
                                return Err(format!("Couldn't post receive ({routs})"));
                            }
                        }
                        rcnt += 1;
                    }
                    other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send(remote_qpn)?;
                    pending = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID;
                }
            }
        }
        Ok(start.elapsed())
    }
}

/// The connection attributes of the C tools' `pp_connect_ctx`: path MTU
/// `-m`, hop limit 1, SL `-l`, timeout 14, 7 retries, infinite RNR
/// retries, RNR timer 12, one READ/atomic credit each way.
fn c_tool_tuning(plan: &Plan, sq_psn: u32) -> Tuning {
    Tuning {
        mtu: plan.mtu,
        sq_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        rd_atomic: 1,
        sgid_index: plan.gid_idx,
        hop_limit: 1,
        sl: plan.sl,
    }
}

/// The completion channel of `-e`.
fn open_channel(ctx: &Context) -> Result<CompChannel, String> {
    ctx.create_comp_channel().map_err(|e| format!("Couldn't create completion channel: {e}"))
}

/// The CQ, on the channel when there is one (`-e`).
fn create_cq(ctx: &Context, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq, String> {
    match channel {
        Some(channel) => ctx.create_cq_with_channel(cqe, channel),
        None => ctx.create_cq(cqe),
    }
    .map_err(|e| format!("Couldn't create CQ: {e}"))
}

/// `-c` on the client: `buf[i] = i / page_size % sizeof(char)` (0) at
/// every page start of the `size`-byte message at `offset`.
fn mark_pages(mr: &Mr, offset: u64, size: u32) -> Result<(), String> {
    let mut i = 0;
    while i < u64::from(size) {
        mr.write(offset + i, &[PAGE_MARK]).map_err(|e| e.to_string())?;
        i += PAGE_SIZE;
    }
    Ok(())
}

/// `-c` on the server: the pages of the message at `offset` whose first
/// byte is not the client's mark.
fn bad_pages(mr: &Mr, offset: u64, size: u32) -> Result<Vec<u64>, String> {
    let mut bad = Vec::new();
    let mut i = 0;
    while i < u64::from(size) {
        let mut byte = [0u8];
        mr.read(offset + i, &mut byte).map_err(|e| e.to_string())?;
        if byte[0] != PAGE_MARK {
            bad.push(i / PAGE_SIZE);
        }
        i += PAGE_SIZE;
    }
    Ok(bad)
}

/// Waits for a completion event on the channel (the blocking
/// `ibv_get_cq_event` of `-e`): `poll(2)` on the channel's descriptor,
/// until `deadline`; `timeout` is only for the message.
fn wait_cq_event(
    channel: &CompChannel,
    deadline: Instant,
    timeout: Duration,
) -> Result<u32, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fd::AsFd;
    loop {
        if let Some(cq) = channel.get_cq_event() {
            return Ok(cq);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "Failed to get cq_event: no completion event for {} s",
                timeout.as_secs()
            ));
        }
        let left = (deadline - now).min(Duration::from_millis(100));
        let timespec = Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        let mut fds = [PollFd::from_borrowed_fd(channel.as_fd(), PollFlags::IN)];
        poll(&mut fds, Some(&timespec)).map_err(|e| format!("poll on the channel: {e}"))?;
    }
}

/// The address lines: `  local address:  LID 0x%04x, QPN 0x%06x, PSN
/// 0x%06x, GID %s` (ibv_ud_pingpong has a colon before `GID` on the local
/// line, reproduced here).
fn address_line(label: &str, dest: &Dest, transport: Transport) -> String {
    let sep = if transport == Transport::Ud && label == "local" { ':' } else { ',' };
    let pad = if label == "local" { "  " } else { " " };
    format!(
        "  {label} address:{pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        dest.lid,
        dest.qpn,
        dest.psn,
        inet_ntop6(&dest.gid)
    )
}

fn io_error(what: &str, e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            format!("{what}: the other side closed the connection")
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("{what}: timed out")
        }
        _ => format!("{what}: {e}"),
    }
}

/// `pp_client_exch_dest`: connect, send ours, read theirs, send `done`.
fn client_exchange(
    dev: &UdpDevice,
    host: &str,
    port: u16,
    mine: &Dest,
    timeout: Duration,
) -> Result<Dest, String> {
    let mut stream = oob::connect(dev, host, port, timeout)?;
    stream.set_timeout(Some(timeout));
    stream.write_all(&mine.to_wire()).map_err(|e| io_error("Couldn't send local address", e))?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg).map_err(|e| io_error("Couldn't read/write remote address", e))?;
    stream.write_all(DONE).map_err(|e| io_error("Couldn't read/write remote address", e))?;
    Dest::from_wire(&msg).ok_or_else(|| {
        format!(
            "Couldn't read remote address: malformed message {:?}",
            String::from_utf8_lossy(&msg)
        )
    })
}

/// `pp_server_exch_dest`: read theirs, connect the QP, send ours, read
/// `done`.
fn server_exchange(
    session: &mut Session,
    listener: &OobListener,
    mine: &Dest,
) -> Result<Dest, String> {
    let plan = session.plan.clone();
    let deadline = Instant::now() + plan.accept_timeout;
    let never = AtomicBool::new(false);
    let mut stream = listener.accept(Some(deadline), &never).map_err(|e| {
        if e.ends_with("in time") {
            format!(
                "accept() failed: no client connected within {} s",
                plan.accept_timeout.as_secs()
            )
        } else {
            e
        }
    })?;
    stream.set_timeout(Some(plan.timeout));
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg).map_err(|e| io_error("Couldn't read remote address", e))?;
    let remote = Dest::from_wire(&msg).ok_or_else(|| {
        format!(
            "Couldn't read remote address: malformed message {:?}",
            String::from_utf8_lossy(&msg)
        )
    })?;
    session
        .connect(mine.psn, &remote)
        .map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    stream
        .write_all(&mine.to_wire())
        .map_err(|e| io_error("Couldn't send/recv local address", e))?;
    let mut done = [0u8; DONE.len()];
    stream.read_exact(&mut done).map_err(|e| io_error("Couldn't send/recv local address", e))?;
    Ok(remote)
}

/// The whole run on an open device.
fn pingpong(plan: &Plan, dev: UdpDevice, out: &mut dyn Write) -> Result<Outcome, String> {
    let mut session = Session::open(&dev, plan)?;
    let routs = session.post_recv(u64::from(plan.rx_depth));
    if routs < u64::from(plan.rx_depth) {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    if session.channel.is_some() {
        session.cq.req_notify(false);
    }
    let gid = session
        .ctx
        .query_gid(plan.gid_idx)
        .map_err(|e| format!("can't read sgid of index {}: {e}", plan.gid_idx))?;
    // Over UDP the device sends from its address only (GID index 1); on a
    // link it writes its own headers, so the link-local GID (index 0, IPv6)
    // works too, as on rxe.
    let device_gid = Gid::from_ip(dev.addr());
    if gid != device_gid && !dev.is_link() {
        return Err(format!(
            "GID index {} is {}, but uroce sends from the device's address {} (GID index 1): \
             use -g 1",
            plan.gid_idx,
            inet_ntop6(&gid),
            dev.addr()
        ));
    }
    let mine = Dest { lid: 0, qpn: session.qp.qpn().value(), psn: random_psn(), gid };
    // The server listens before it prints its address, so whoever reads
    // the line may start the client at once.
    let listener = match &plan.host {
        Some(_) => None,
        None => Some(OobListener::bind(&dev, plan.port)?),
    };
    let _ = writeln!(out, "{}", address_line("local", &mine, plan.transport));
    let _ = out.flush();
    let remote = match (&plan.host, &listener) {
        (Some(host), _) => client_exchange(&dev, host, plan.port, &mine, plan.timeout)?,
        (None, Some(listener)) => server_exchange(&mut session, listener, &mine)?,
        (None, None) => return Err("the server has no listening socket".into()),
    };
    drop(listener);
    let _ = writeln!(out, "{}", address_line("remote", &remote, plan.transport));
    let _ = out.flush();
    if !dev.is_link() {
        check_reachable(dev.addr(), &remote)?;
    }
    if plan.host.is_some() {
        session.connect(mine.psn, &remote)?;
    }
    let elapsed = session.pingpong(remote.qpn, plan.host.is_some(), routs)?;

    print_summary(out, plan, elapsed);
    let mut outcome = Outcome::Clean;
    if plan.host.is_none() && plan.chk {
        for page in session.bad_pages()? {
            let _ = writeln!(out, "invalid data in page {page}");
            outcome = Outcome::BadData;
        }
    }
    let _ = out.flush();
    linger(&dev);
    drop(session);
    drop(dev);
    Ok(outcome)
}

/// The C tools' two summary lines.
fn print_summary(out: &mut dyn Write, plan: &Plan, elapsed: Duration) {
    let usec = elapsed.as_micros() as f32;
    let bytes = i64::from(plan.size) * i64::from(plan.iters) * 2;
    let _ = writeln!(
        out,
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        f64::from(usec) / 1_000_000.0,
        bytes as f64 * 8.0 / f64::from(usec)
    );
    let _ = writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        plan.iters,
        f64::from(usec) / 1_000_000.0,
        f64::from(usec / plan.iters as f32)
    );
}

/// Lets the last packets (an ACK) leave before the device stops. On a
/// lossy link (faults) the last ACK may be lost, and the peer's
/// retransmission (a QP timeout, 67 ms, later) must still be answered:
/// stay for a few of its timeouts.
fn linger(dev: &UdpDevice) {
    let linger_ms = if dev.has_faults() { 600 } else { 20 };
    let until = Instant::now() + Duration::from_millis(linger_ms);
    while Instant::now() < until {
        dev.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The remote GID must be an address of the device's family: the device
/// sends over its own UDP socket.
fn check_reachable(local: IpAddr, remote: &Dest) -> Result<(), String> {
    let remote_ip = remote.gid.to_ip();
    if remote_ip.is_ipv4() != local.is_ipv4() {
        return Err(format!(
            "the remote GID {} ({remote_ip}) cannot be reached from the device's address \
             {local}: use -g 1 on both sides",
            inet_ntop6(&remote.gid)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn wire_message_is_the_c_tools() {
        let dest = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
        };
        let msg = dest.to_wire();
        let text = "0000:000011:abcdef:00000000000000000000ffff7f000001";
        assert_eq!(text.len(), MSG_LEN - 1);
        assert_eq!(&msg[..MSG_LEN - 1], text.as_bytes());
        assert_eq!(msg[MSG_LEN - 1], 0);
        assert_eq!(Dest::from_wire(&msg), Some(dest));
        assert_eq!(Dest::from_wire(b"zz:1:2:00"), None);
        assert_eq!(Dest::from_wire(b"0000:000011:abcdef:0000"), None);
        assert_eq!(Dest::from_wire(&[]), None);
    }

    #[test]
    fn gids_print_as_glibc_inet_ntop() {
        let v4 = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(inet_ntop6(&v4), "::ffff:127.0.0.2");
        assert_eq!(inet_ntop6(&Gid([0; 16])), "::");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(inet_ntop6(&Gid(one)), "::1");
        let compat = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(inet_ntop6(&compat), "::1.2.3.4");
        let ll = Gid::link_local_from_mac([0x02, 0, 127, 0, 0, 1]);
        assert_eq!(inet_ntop6(&ll), "fe80::7fff:fe00:1");
        let mid = Gid([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
        assert_eq!(inet_ntop6(&mid), "2001:db8::1:0:0:1");
        let end = Gid([0x20, 0x01, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(inet_ntop6(&end), "2001:1::");
    }

    #[test]
    fn numbers_parse_as_strtoul_base_0() {
        assert_eq!(c_number("18515"), Ok(18515));
        assert_eq!(c_number("0x10"), Ok(16));
        assert_eq!(c_number("010"), Ok(8));
        assert_eq!(c_number("0"), Ok(0));
        assert!(c_number("ten").is_err());
        assert!(parse_port("70000").is_err());
    }

    #[test]
    fn address_lines_match_the_c_format() {
        let dest = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x1234,
            gid: Gid::from_ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        };
        assert_eq!(
            address_line("local", &dest, Transport::Rc),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x001234, GID ::ffff:127.0.0.1"
        );
        assert_eq!(
            address_line("remote", &dest, Transport::Rc),
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0x001234, GID ::ffff:127.0.0.1"
        );
        assert_eq!(
            address_line("local", &dest, Transport::Ud),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x001234: GID ::ffff:127.0.0.1"
        );
    }
}
