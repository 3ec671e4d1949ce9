//! `uroce opcodes`: `tests/interop/vm/rxe-opcodes.c` on uroce's verbs, so
//! that uroce and a Linux rxe run the cases the stock tools never send
//! against each other, in either role, with the data checked end to end.
//!
//! Same flags (`-g`, `-p`, `-m`, `-S`, `-L`), same steps ([`steps::STEPS`],
//! and the IBA 1.5 sets of `-S`: [`steps::StepSet`]),
//! same exchange ([`exchange`], over [`crate::oob`]), same checks, same
//! output lines: the client (given a server address) posts every step and
//! checks READ data and atomic results; the server posts the receives,
//! owns the remote memory, binds the two type-2 memory windows, leaves its
//! RC receive queue empty for the RNR step, checks every receive as it
//! completes and every WRITE target and the atomic words after the
//! client's `done`, and sends its failure count back. The last line is
//! `client: OK (0 failures)` or `server: OK (0 failures)`; the exit status
//! is 0 only when every step and every check passed (1 otherwise, 2 on a
//! setup error or bad flags).

pub mod exchange;
pub mod steps;

use crate::app::{NetArgs, Opened};
use crate::oob::{self, OobListener, OobStream};
use crate::pingpong::wc_status_str;
use exchange::Info;
use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use steps::{QpKind, Step, StepSet, Target};
use uroce_net::udp::UdpDevice;
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, AhAttr, Context, Cq, Gid, Mr, Mtu, Mw, Pd, Qkey, Qp, QpCap, QpInitAttr, QpType, Qpn,
    RecvWr, RemoteTarget, Rkey, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

/// How long the client waits for one step's completion.
const STEP_WAIT: Duration = Duration::from_secs(10);
/// How long the server waits for all the receives.
const RECEIVE_WAIT: Duration = Duration::from_secs(60);
/// How long the server drains the CQ after the client's `done`.
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// `uroce opcodes` flags: those of rxe-opcodes, plus uroce's bound on
/// out-of-band waits.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Without <SERVER> it is the server: it waits for the client on the device's \
                  address (UROCE_ADDR) and the TCP port. With <SERVER> it is the client and runs \
                  the steps.\nExample: UROCE_ADDR=127.0.0.1 uroce opcodes -g 1   and   \
                  UROCE_ADDR=127.0.0.2 uroce opcodes -g 1 127.0.0.1"
)]
pub struct OpcodesArgs {
    /// Local port GID index (1: the device's IPv4 address, as with rxe).
    #[arg(short = 'g', long = "gid-idx", default_value = "1", value_name = "GIDX")]
    pub gid_idx: u8,
    /// Listen on/connect to this TCP port.
    #[arg(short = 'p', long, default_value = "18600")]
    pub port: u16,
    /// Path MTU of the RC and UC QPs: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value = "1024", value_name = "MTU")]
    pub mtu: u32,
    /// The step set: base (every opcode of IBA 1.4 the stock tools never
    /// send), awrite (ATOMIC_WRITE), flush (FLUSH to a peer without flush
    /// rights; rxe-opcodes can only be its server).
    #[arg(short = 'S', long = "set", value_enum, default_value = "base", value_name = "SET")]
    pub set: StepSet,
    /// List the steps and the table fingerprint for -m (and -S), then exit.
    #[arg(short = 'L', long)]
    pub list: bool,
    /// Give up on the out-of-band connection (accept, connect, each read)
    /// after this many seconds.
    #[arg(long, default_value = "120", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Testing the checks: corrupt one byte of the data this side sources
    /// for these steps (the client's SEND/WRITE payload, the server's READ
    /// source), as rxe-opcodes -X does for one step.
    #[arg(long = "corrupt-step", value_name = "N,...", value_delimiter = ',', hide = true)]
    pub corrupt_step: Vec<u32>,
    /// Be the client of the server at this address.
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
    /// Device options.
    #[command(flatten)]
    pub net: NetArgs,
}

fn mtu_from_bytes(bytes: u32) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// Runs `uroce opcodes`; returns the exit status.
pub fn run(args: &OpcodesArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some(mtu) = mtu_from_bytes(args.mtu) else {
        let _ = writeln!(
            err,
            "uroce opcodes: -m {}: the path MTU is 256, 512, 1024, 2048 or 4096",
            args.mtu
        );
        return 2;
    };
    if args.list {
        let _ = write!(out, "{}", steps::listing_of(args.set, args.mtu, exchange::VERSION));
        return 0;
    }
    let config = match args.net.config() {
        Ok(config) => config,
        Err(why) => {
            let _ = writeln!(err, "uroce opcodes: {why}");
            return 2;
        }
    };
    let opened = Opened::default();
    let dev = match opened.device(config) {
        Ok(dev) => dev,
        Err(e) => {
            let _ = writeln!(err, "uroce opcodes: Couldn't open the device: {e}");
            return 2;
        }
    };
    let role = if args.server.is_some() { "client" } else { "server" };
    let result = Session::open(&dev, args, mtu, out).and_then(|mut session| {
        session.run()?;
        Ok(session.fails)
    });
    let code = match result {
        Ok(fails) => {
            let verdict = if fails == 0 { "OK" } else { "FAILED" };
            let _ = writeln!(out, "{role}: {verdict} ({fails} failures)");
            i32::from(fails != 0)
        }
        Err(why) => {
            let _ = writeln!(err, "uroce opcodes: {why}");
            2
        }
    };
    let _ = out.flush();
    // Let the last packets (ACKs) leave before the device stops.
    let linger = Instant::now() + Duration::from_millis(20);
    while Instant::now() < linger {
        dev.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(dev);
    let captured = opened.finish("opcodes", args.net.counters, err);
    if captured {
        code
    } else {
        code.max(1)
    }
}

/// One side's verbs objects and state.
struct Session<'a> {
    dev: &'a UdpDevice,
    out: &'a mut dyn Write,
    args: &'a OpcodesArgs,
    /// The steps of `-S`.
    steps: &'static [Step],
    mtu_bytes: u32,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    rc: Qp,
    uc: Qp,
    ud: Qp,
    ah: Option<uroce_verbs::Ah>,
    /// The server's windows (kept bound while the client uses them).
    mws: Vec<Mw>,
    mw_rkeys: [u32; 2],
    me: Info,
    peer: Info,
    fails: u32,
    next_wr_id: u64,
}

macro_rules! say {
    ($s:expr, $($arg:tt)*) => {{
        let _ = writeln!($s.out, $($arg)*);
        let _ = $s.out.flush();
    }};
}

mod client;
mod server;

impl<'a> Session<'a> {
    /// Opens everything rxe-opcodes' main() opens before the exchange.
    fn open(
        dev: &'a UdpDevice,
        args: &'a OpcodesArgs,
        mtu: Mtu,
        out: &'a mut dyn Write,
    ) -> Result<Session<'a>, String> {
        let ctx = Context::open(dev.hca());
        let port = ctx.query_port().map_err(|e| format!("query port: {e}"))?;
        if mtu.bytes() > port.active_mtu.bytes() {
            return Err(format!(
                "-m {} is above the port's active MTU {}: raise the link MTU",
                mtu.bytes(),
                port.active_mtu.bytes()
            ));
        }
        let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
        let cq = ctx.create_cq(512).map_err(|e| format!("create_cq: {e}"))?;
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC
            | Access::MW_BIND;
        let mr = pd.alloc_mr(steps::BUF_SIZE, access).map_err(|e| format!("reg_mr: {e}"))?;
        mr.write(0, &vec![steps::FILL; steps::BUF_SIZE as usize])
            .map_err(|e| format!("fill the buffer: {e}"))?;
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let qp = |qp_type: QpType| -> Result<Qp, String> {
            let qp = pd
                .create_qp(&QpInitAttr {
                    qp_type,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap,
                    sq_sig_all: false,
                })
                .map_err(|e| format!("ibv_create_qp type {qp_type:?}: {e}"))?;
            let access = match qp_type {
                QpType::Rc => Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                _ => Access::REMOTE_WRITE,
            };
            connect::to_init(&qp, access, steps::UD_QKEY)
                .map_err(|e| format!("modify INIT: {e}"))?;
            Ok(qp)
        };
        let (rc, uc, ud) = (qp(QpType::Rc)?, qp(QpType::Uc)?, qp(QpType::Ud)?);
        let gid =
            ctx.query_gid(args.gid_idx).map_err(|e| format!("query gid {}: {e}", args.gid_idx))?;
        let me = Info {
            magic: exchange::MAGIC,
            version: exchange::VERSION,
            rc_qpn: rc.qpn().value(),
            uc_qpn: uc.qpn().value(),
            ud_qpn: ud.qpn().value(),
            psn: random_psn(),
            rkey: mr.rkey().0,
            mtu: mtu.bytes(),
            addr: mr.addr(),
            gid: gid.0,
            nsteps: args.set.steps().len() as u32,
            fingerprint: steps::fingerprint_of(args.set.steps(), mtu.bytes()),
        };
        Ok(Session {
            dev,
            out,
            args,
            steps: args.set.steps(),
            mtu_bytes: mtu.bytes(),
            pd,
            cq,
            mr,
            rc,
            uc,
            ud,
            ah: None,
            mws: Vec::new(),
            mw_rkeys: [0; 2],
            me,
            peer: Info::default(),
            fails: 0,
            next_wr_id: 100,
        })
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.args.timeout)
    }

    /// Prints and counts one failed check.
    fn bad(&mut self, what: String) {
        say!(self, "  CHECK FAILED: {what}");
        self.fails += 1;
    }

    fn qp(&self, kind: QpKind) -> &Qp {
        match kind {
            QpKind::Ud => &self.ud,
            QpKind::Uc => &self.uc,
            QpKind::Rc => &self.rc,
        }
    }

    fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        self.mr.read_vec(offset, len as usize).map_err(|e| format!("read the buffer: {e}"))
    }

    fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        self.mr.write(offset, bytes).map_err(|e| format!("write the buffer: {e}"))
    }

    /// The whole run after opening: exchange, connect, steps or receives.
    fn run(&mut self) -> Result<(), String> {
        let client = self.args.server.is_some();
        if !client {
            self.server_prepare()?;
        }
        let mut stream = self.connect_oob()?;
        stream.set_timeout(Some(self.timeout()));
        self.peer = exchange::swap_info(&mut stream, &self.me)?;
        say!(self, "{}", self.me.line("local"));
        say!(self, "{}", self.peer.line("remote"));
        self.me.check_same_steps(&self.peer)?;
        self.connect_qps()?;
        if client {
            self.client_run(&mut stream)
        } else {
            self.server_run(&mut stream)
        }
    }

    /// The server listens (and says so) and accepts; the client connects.
    fn connect_oob(&mut self) -> Result<OobStream, String> {
        let port = self.args.port;
        match &self.args.server {
            Some(host) => oob::connect(self.dev, host, port, self.timeout()),
            None => {
                let listener = OobListener::bind(self.dev, port)?;
                say!(self, "waiting for client on tcp port {}", listener.port());
                let deadline = Instant::now() + self.timeout();
                listener.accept(Some(deadline), &AtomicBool::new(false))
            }
        }
    }

    fn ah_attr(&self) -> AhAttr {
        AhAttr {
            dgid: Gid(self.peer.gid),
            sgid_index: self.args.gid_idx,
            hop_limit: 64,
            port_num: 1,
            ..AhAttr::default()
        }
    }

    /// rxe-opcodes' connect_qp() for the three QPs, and the UD AH.
    fn connect_qps(&mut self) -> Result<(), String> {
        let mtu = mtu_from_bytes(self.mtu_bytes).ok_or("bad MTU")?;
        // rxe-opcodes' attributes: 4 READ/atomic credits, RNR timer 20
        // (10.24 ms), hop limit 64.
        let tuning = Tuning {
            mtu,
            sq_psn: self.me.psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 20,
            rd_atomic: 4,
            sgid_index: self.args.gid_idx,
            hop_limit: 64,
            sl: 0,
        };
        for (qp, dqpn) in [(&self.rc, self.peer.rc_qpn), (&self.uc, self.peer.uc_qpn)] {
            let remote =
                Remote { gid: Gid(self.peer.gid), qpn: Qpn::new(dqpn), psn: self.peer.psn };
            connect::to_rts(qp, Some(remote), &tuning)
                .map_err(|e| format!("modify RTR/RTS qp 0x{:x}: {e}", qp.qpn().value()))?;
        }
        connect::to_rts(&self.ud, None, &tuning)
            .map_err(|e| format!("modify RTR/RTS UD qp: {e}"))?;
        self.ah = Some(self.pd.create_ah(self.ah_attr()).map_err(|e| format!("create_ah: {e}"))?);
        Ok(())
    }

    /// One completion within `timeout`.
    fn poll1(&self, timeout: Duration) -> Result<Option<WorkCompletion>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut wcs = self.cq.poll(1).map_err(|e| format!("poll_cq: {e}"))?;
            if let Some(wc) = wcs.pop() {
                return Ok(Some(wc));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// rxe-opcodes' show().
    fn show(&mut self, who: &str, wc: &WorkCompletion) {
        let mut line = format!(
            "  {who} wc: id={} qp=0x{:x} {} status={} len={} flags=0x{:x}",
            wc.wr_id,
            wc.qp_num.value(),
            wc_opcode_name(wc.opcode),
            wc_status_str(wc.status),
            wc.byte_len,
            wc.flags.0
        );
        if wc.flags.contains(WcFlags::WITH_IMM) {
            line.push_str(&format!(" imm=0x{:08x}", wc.imm_or_inv));
        }
        if wc.flags.contains(WcFlags::WITH_INV) {
            line.push_str(&format!(" invalidated_rkey=0x{:08x}", wc.imm_or_inv));
        }
        if wc.flags.contains(WcFlags::GRH) {
            line.push_str(" grh");
        }
        say!(self, "{line}");
    }
}

/// What is wrong with a UD receive's 40-byte GRH, if anything: RoCEv2 over
/// IPv4 puts the IPv4 header in its last 20 bytes, over IPv6 the IPv6
/// header fills it.
fn grh_problem(grh: &[u8], peer_gid: &[u8; 16], my_gid: &[u8; 16]) -> Option<String> {
    let v4 = my_gid[..10].iter().all(|b| *b == 0) && my_gid[10..12] == [0xff, 0xff];
    if v4 {
        let ip = &grh[20..40];
        if ip[0] != 0x45 || ip[9] != 17 {
            return Some(format!(
                "UD GRH: not an IPv4/UDP header (0x{:02x}, protocol {})",
                ip[0], ip[9]
            ));
        }
        if ip[12..16] != peer_gid[12..16] || ip[16..20] != my_gid[12..16] {
            return Some(format!(
                "UD GRH: addresses {}.{}.{}.{} -> {}.{}.{}.{}, not the peer's and ours",
                ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19]
            ));
        }
        return None;
    }
    let ok =
        grh[0] >> 4 == 6 && grh[6] == 17 && grh[8..24] == peer_gid[..] && grh[24..40] == my_gid[..];
    (!ok).then(|| "UD GRH: not an IPv6/UDP header from the peer's GID to ours".to_string())
}

/// rxe-opcodes' wcop().
fn wc_opcode_name(opcode: WcOpcode) -> &'static str {
    match opcode {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA_WRITE",
        WcOpcode::RdmaRead => "RDMA_READ",
        WcOpcode::CompSwap => "COMP_SWAP",
        WcOpcode::FetchAdd => "FETCH_ADD",
        WcOpcode::BindMw => "BIND_MW",
        WcOpcode::LocalInv => "LOCAL_INV",
        WcOpcode::Recv => "RECV",
        WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
        WcOpcode::AtomicWrite => "ATOMIC_WRITE",
        WcOpcode::Flush => "FLUSH",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_gid(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    #[test]
    fn the_grh_check_reads_the_ipv4_header_where_rxe_puts_it() {
        let (peer, me) = (v4_gid([169, 254, 0, 2]), v4_gid([169, 254, 0, 1]));
        let mut grh = [0u8; 40];
        grh[20] = 0x45;
        grh[29] = 17;
        grh[32..36].copy_from_slice(&[169, 254, 0, 2]);
        grh[36..40].copy_from_slice(&[169, 254, 0, 1]);
        assert_eq!(grh_problem(&grh, &peer, &me), None);
        let swapped = grh_problem(&grh, &me, &peer).expect("addresses swapped");
        assert!(swapped.contains("169.254.0.2 -> 169.254.0.1, not the peer's"), "{swapped}");
        grh[29] = 6;
        assert!(grh_problem(&grh, &peer, &me).is_some());
    }

    #[test]
    fn the_grh_check_reads_an_ipv6_header_whole() {
        let peer = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let me = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut grh = [0u8; 40];
        grh[0] = 0x60;
        grh[6] = 17;
        grh[8..24].copy_from_slice(&peer);
        grh[24..40].copy_from_slice(&me);
        assert_eq!(grh_problem(&grh, &peer, &me), None);
        assert!(grh_problem(&grh, &me, &peer).is_some());
    }

    #[test]
    fn mtus_are_the_five_ib_mtus() {
        assert_eq!(mtu_from_bytes(4096), Some(Mtu::Mtu4096));
        assert_eq!(mtu_from_bytes(256), Some(Mtu::Mtu256));
        assert_eq!(mtu_from_bytes(1500), None);
    }
}
