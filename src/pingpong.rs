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

mod dest;
mod session;
mod srq;

use dest::{address_line, client_exchange, io_error, random_psn, server_exchange};
pub use dest::{gid_to_wire_gid, inet_ntop6, wc_status_str, wire_gid_to_gid, Dest};
use session::{
    bad_pages, c_tool_tuning, create_cq, mark_pages, open_channel, wait_cq_event, Session,
};

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
// The field docs are clap's help text, written as the tools print it
// (`<PORT>`, `[params]`), not rustdoc markup.
#[allow(rustdoc::invalid_html_tags)]
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
