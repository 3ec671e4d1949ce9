//! `uroce opcodes`: `tests/interop/vm/rxe-opcodes.c` on uroce's verbs, so
//! that uroce and a Linux rxe run the cases the stock tools never send
//! against each other, in either role, with the data checked end to end.
//!
//! Same flags (`-g`, `-p`, `-m`, `-L`), same steps ([`steps::STEPS`]),
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
use steps::{QpKind, Step, Target, STEPS};
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
    /// List the steps and the table fingerprint for -m, then exit.
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
        let _ = write!(out, "{}", steps::listing(args.mtu, exchange::VERSION));
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
            nsteps: STEPS.len() as u32,
            fingerprint: steps::fingerprint(mtu.bytes()),
        };
        Ok(Session {
            dev,
            out,
            args,
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

    // ---- server -------------------------------------------------------------------------

    /// The atomic words and the READ sources, then the receives of every
    /// step up to the RNR step.
    fn server_prepare(&mut self) -> Result<(), String> {
        let mut words = steps::FA_INIT.to_le_bytes().to_vec();
        words.extend_from_slice(&steps::CAS_INIT.to_le_bytes());
        self.write(steps::OFF_ATOMIC, &words)?;
        for (i, s) in STEPS.iter().enumerate() {
            let n = i as u32 + 1;
            if !s.is_read() || s.target != Target::Slot {
                continue;
            }
            let len = s.bytes(self.mtu_bytes);
            let mut bytes = steps::pattern_bytes(n, len);
            if self.args.corrupt_step.contains(&n) && len > 0 {
                bytes[len as usize / 2] ^= 0xff;
                say!(self, "(corrupting byte {} of the READ source of step {n})", len / 2);
            }
            self.write(steps::slot_offset(n), &bytes)?;
        }
        let slots = steps::receive_slots();
        let mut rnr_seen = false;
        for (i, s) in STEPS.iter().enumerate() {
            rnr_seen |= s.flags & steps::F_RNR != 0;
            let Some(slot) = slots[i] else { continue };
            if s.qp == QpKind::Rc && rnr_seen {
                continue; // posted after the RNR window
            }
            let cap = match s.qp {
                QpKind::Ud => steps::GRH_LEN as u64 + 4096,
                _ => steps::SLOT,
            };
            self.post_recv(s.qp, steps::receive_offset(s, slot), cap, i as u64 + 1)?;
        }
        Ok(())
    }

    fn post_recv(&self, kind: QpKind, offset: u64, len: u64, wr_id: u64) -> Result<(), String> {
        let wr = RecvWr { wr_id, sg_list: vec![self.mr.sge(offset, len as u32)] };
        self.qp(kind).post_recv(&[wr]).map_err(|(_, e)| format!("post_recv: {e}"))
    }

    /// The RC receives of the RNR step and after, and the spares.
    fn server_post_after_rnr_window(&self) -> Result<(), String> {
        let slots = steps::receive_slots();
        let mut rnr_seen = false;
        let mut last = 0;
        for (i, s) in STEPS.iter().enumerate() {
            rnr_seen |= s.flags & steps::F_RNR != 0;
            if let (true, QpKind::Rc, Some(slot)) = (rnr_seen, s.qp, slots[i]) {
                self.post_recv(
                    QpKind::Rc,
                    steps::receive_offset(s, slot),
                    steps::SLOT,
                    i as u64 + 1,
                )?;
                last = slot;
            }
        }
        for k in 0..steps::RC_SPARE {
            let offset = steps::OFF_RC_RECV + (last + 1 + k) * steps::SLOT;
            self.post_recv(QpKind::Rc, offset, steps::SLOT, steps::SPARE_ID + k)?;
        }
        Ok(())
    }

    /// Two type-2 windows over the MR, for the SEND_WITH_INVALIDATE steps.
    fn bind_windows(&mut self) -> Result<(), String> {
        for i in 0..2 {
            let mw = self.pd.alloc_mw(2).map_err(|e| format!("alloc_mw: {e}"))?;
            // ibv_inc_rkey: the next 8-bit key.
            let key = (mw.rkey().0 as u8).wrapping_add(1);
            let (wr, rkey) = SendWr::bind_mw(
                900 + i,
                &mw,
                &self.mr,
                steps::OFF_MW,
                steps::MW_LEN,
                Access::REMOTE_WRITE,
                key,
            );
            self.rc.post_send(&[wr]).map_err(|(_, e)| format!("bind_mw: {e}"))?;
            match self.poll1(Duration::from_secs(5))? {
                Some(wc) if wc.status == WcStatus::Success => {}
                Some(wc) => {
                    return Err(format!("bind_mw completion: {}", wc_status_str(wc.status)))
                }
                None => return Err("bind_mw completion: none within 5 s".into()),
            }
            mw.set_rkey(rkey);
            self.mw_rkeys[i as usize] = rkey.0;
            self.mws.push(mw);
            say!(self, "bound MW type 2 rkey 0x{:08x}", rkey.0);
        }
        Ok(())
    }

    fn server_run(&mut self, stream: &mut OobStream) -> Result<(), String> {
        self.bind_windows()?;
        exchange::write_u32s(stream, &self.mw_rkeys)?;
        let want_total = STEPS.iter().filter(|s| s.takes_recv()).count();
        let rc_before_rnr = steps::rc_receives_before_rnr();
        let (mut got_total, mut got_rc) = (0, 0);
        let deadline = Instant::now() + RECEIVE_WAIT;
        while got_total < want_total && Instant::now() < deadline {
            let Some(wc) = self.poll1(Duration::from_secs(1))? else { continue };
            self.show("server", &wc);
            self.check_recv(&wc)?;
            got_total += 1;
            if wc.qp_num == self.rc.qpn() {
                got_rc += 1;
                if got_rc == rc_before_rnr {
                    // Every pre-posted RC receive is used: the client's next
                    // SEND meets an empty RQ and gets RNR NAKs.
                    std::thread::sleep(Duration::from_millis(steps::RNR_WINDOW_MS));
                    say!(
                        self,
                        "  server: posting more RC receives after {} ms (RNR window)",
                        steps::RNR_WINDOW_MS
                    );
                    self.server_post_after_rnr_window()?;
                }
            }
        }
        if got_total < want_total {
            self.bad(format!("only {got_total} of {want_total} receive completions"));
        }
        // The client finished (its last step breaks the RC connection).
        let mut done = [0u8; 4];
        stream.read_exact(&mut done).map_err(|e| exchange::io_error("tcp read", e))?;
        if &done != exchange::DONE {
            self.bad("the client's last message is not \"done\"".into());
        }
        self.check_memory()?;
        while let Some(wc) = self.poll1(DRAIN_WAIT)? {
            self.show("server(after)", &wc);
            // The spare RC receives are flushed when the bad rkey moves the
            // QP to the error state.
            if wc.status != WcStatus::WrFlushErr || wc.qp_num != self.rc.qpn() {
                self.bad("an unexpected completion after the last step".into());
            }
        }
        exchange::write_u32s(stream, &[self.fails])
    }

    /// Checks one receive completion against its step.
    fn check_recv(&mut self, wc: &WorkCompletion) -> Result<(), String> {
        let Some(index) = (wc.wr_id as usize).checked_sub(1).filter(|i| *i < STEPS.len()) else {
            self.bad(format!("a completion for receive {}, which no step uses", wc.wr_id));
            return Ok(());
        };
        let n = index as u32 + 1;
        let s = &STEPS[index];
        if wc.status != WcStatus::Success {
            self.bad(format!("step {n}: receive status {}", wc_status_str(wc.status)));
            return Ok(());
        }
        let before = self.fails;
        for problem in self.receive_problems(n, s, wc)? {
            self.bad(problem);
        }
        let verdict = if self.fails == before { "OK" } else { "FAILED" };
        say!(self, "CHECK step {n:2} {:<30} receive {verdict}", s.name);
        Ok(())
    }

    /// What is wrong with step `n`'s receive completion `wc` and its data.
    fn receive_problems(
        &self,
        n: u32,
        s: &Step,
        wc: &WorkCompletion,
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        let len = s.bytes(self.mtu_bytes);
        let grh = if s.qp == QpKind::Ud { steps::GRH_LEN } else { 0 };
        let qpn = self.qp(s.qp).qpn();
        if wc.qp_num != qpn {
            problems.push(format!(
                "step {n}: receive on qp 0x{:x}, want 0x{:x}",
                wc.qp_num.value(),
                qpn.value()
            ));
        }
        let want_op = if s.op == WrOpcode::RdmaWriteWithImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        if wc.opcode != want_op {
            problems.push(format!(
                "step {n}: opcode {}, want {}",
                wc_opcode_name(wc.opcode),
                wc_opcode_name(want_op)
            ));
        }
        if wc.byte_len != len + grh {
            problems.push(format!("step {n}: byte_len {}, want {}", wc.byte_len, len + grh));
        }
        let with_imm = wc.flags.contains(WcFlags::WITH_IMM);
        if s.has_imm() && (!with_imm || wc.imm_or_inv != s.imm) {
            problems.push(format!(
                "step {n}: immediate {}0x{:08x}, want 0x{:08x}",
                if with_imm { "" } else { "(flag missing) " },
                wc.imm_or_inv,
                s.imm
            ));
        }
        if !s.has_imm() && with_imm {
            problems.push(format!("step {n}: an immediate flag on a message without one"));
        }
        if s.op == WrOpcode::SendWithInv {
            let want = self.mw_rkeys[usize::from(s.key == steps::Key::Mw1)];
            let flagged = wc.flags.contains(WcFlags::WITH_INV);
            if !flagged || wc.imm_or_inv != want {
                problems.push(format!(
                    "step {n}: invalidated rkey {}0x{:08x}, want 0x{want:08x}",
                    if flagged { "" } else { "(flag missing) " },
                    wc.imm_or_inv
                ));
            }
        }
        if s.qp == QpKind::Ud {
            if !wc.flags.contains(WcFlags::GRH) {
                problems.push(format!("step {n}: no GRH flag on a UD receive"));
            }
            if wc.src_qp.value() != self.peer.ud_qpn {
                problems.push(format!(
                    "step {n}: source QP 0x{:x}, want 0x{:x}",
                    wc.src_qp.value(),
                    self.peer.ud_qpn
                ));
            }
            let header = self.read(steps::OFF_UD_RECV, u64::from(steps::GRH_LEN))?;
            problems.extend(grh_problem(&header, &self.peer.gid, &self.me.gid));
        }
        if s.is_send() {
            let slot = steps::receive_slots()[n as usize - 1].unwrap_or(0);
            let offset = steps::receive_offset(s, slot) + u64::from(grh);
            let bytes = self.read(offset, u64::from(len + steps::GUARD))?;
            let what = format!("step {n} received data");
            let want = |i: usize| steps::pattern(n, i as u32);
            if let Err(problem) =
                steps::check_payload(&what, &bytes, len as usize, want, steps::FILL)
            {
                problems.push(problem);
            }
        }
        Ok(problems)
    }

    /// After `done`: every WRITE target, and the atomic words.
    fn check_memory(&mut self) -> Result<(), String> {
        for (i, s) in STEPS.iter().enumerate() {
            if !s.is_write() {
                continue;
            }
            let n = i as u32 + 1;
            let len = s.bytes(self.mtu_bytes);
            let bytes = self.read(steps::slot_offset(n), u64::from(len + steps::GUARD))?;
            let what = format!("step {n} target");
            let result = if s.expect == WcStatus::Success {
                steps::check_payload(
                    &what,
                    &bytes,
                    len as usize,
                    |i| steps::pattern(n, i as u32),
                    steps::FILL,
                )
            } else {
                // A NAKed WRITE writes nothing.
                steps::check_payload(&what, &bytes, 0, |_| steps::FILL, steps::FILL)
            };
            let before = self.fails;
            if let Err(problem) = result {
                self.bad(problem);
            }
            let verdict = if self.fails == before { "OK" } else { "FAILED" };
            say!(self, "CHECK step {n:2} {:<30} target {verdict}", s.name);
        }
        let words = self.read(steps::OFF_ATOMIC, 16)?;
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&words[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let before = self.fails;
        if word(0) != steps::FA_FINAL {
            self.bad(format!(
                "FETCH_ADD word is 0x{:016x}, want 0x{:016x}",
                word(0),
                steps::FA_FINAL
            ));
        }
        if word(8) != steps::CAS_SWAP {
            self.bad(format!(
                "COMPARE_SWAP word is 0x{:016x}, want 0x{:016x}",
                word(8),
                steps::CAS_SWAP
            ));
        }
        let verdict = if self.fails == before { "OK" } else { "FAILED" };
        say!(self, "CHECK atomic words {verdict}");
        Ok(())
    }

    // ---- client -------------------------------------------------------------------------

    fn client_run(&mut self, stream: &mut OobStream) -> Result<(), String> {
        self.mw_rkeys = exchange::read_u32s::<2>(stream)?;
        for (i, s) in STEPS.iter().enumerate() {
            if i > 0 && STEPS[i - 1].qp != QpKind::Rc && s.qp == QpKind::Rc {
                // Let the unreliable steps land before the RC ones.
                std::thread::sleep(Duration::from_millis(20));
            }
            self.run_step(i as u32 + 1)?;
        }
        stream.write_all(exchange::DONE).map_err(|e| exchange::io_error("tcp write", e))?;
        stream.flush().map_err(|e| exchange::io_error("tcp write", e))?;
        let [verdict] = exchange::read_u32s::<1>(stream)?;
        say!(self, "server reported {verdict} failures");
        if verdict != 0 {
            self.fails += 1;
        }
        Ok(())
    }

    /// The work request of step `n` (its payload already in place).
    fn step_wr(&mut self, n: u32, s: &Step, payload: Option<Vec<u8>>) -> SendWr {
        let len = s.bytes(self.mtu_bytes);
        self.next_wr_id += 1;
        let mut wr = SendWr::new(self.next_wr_id, s.op);
        wr.flags = SendFlags::SIGNALED;
        if s.flags & steps::F_SOLICITED != 0 {
            wr.flags = wr.flags | SendFlags::SOLICITED;
        }
        let local = if s.is_send() || s.is_write() { steps::OFF_SRC } else { steps::OFF_DST };
        match payload {
            Some(bytes) if s.flags & steps::F_INLINE != 0 => wr.inline_data = Some(bytes),
            _ if len > 0 => wr.sg_list = vec![self.mr.sge(local, len)],
            _ => {}
        }
        if s.has_imm() {
            wr.imm_or_inv = s.imm;
        }
        if s.op == WrOpcode::SendWithInv {
            wr.imm_or_inv = self.mw_rkeys[usize::from(s.key == steps::Key::Mw1)];
        }
        let base = self.peer.addr;
        let addr = match s.target {
            Target::FetchAdd | Target::Atomics => base.wrapping_add(steps::OFF_ATOMIC),
            Target::CompareSwap => base.wrapping_add(steps::OFF_ATOMIC + 8),
            _ => base.wrapping_add(steps::slot_offset(n)),
        };
        let rkey = match s.key {
            steps::Key::Bad => self.peer.rkey ^ 0x00a5_a500,
            _ => self.peer.rkey,
        };
        if s.is_write() || s.is_read() || s.is_atomic() {
            wr.remote = RemoteTarget { addr, rkey: Rkey(rkey) };
        }
        if s.is_atomic() {
            wr.compare_add = s.compare_add;
            wr.swap = s.swap;
        }
        if s.qp == QpKind::Ud {
            let ah = self.ah.as_ref().map_or(0, |ah| ah.index());
            wr.ud = Some((ah, Qpn::new(self.peer.ud_qpn), Qkey(steps::UD_QKEY)));
        }
        wr
    }

    fn run_step(&mut self, n: u32) -> Result<(), String> {
        let s = &STEPS[n as usize - 1];
        let len = s.bytes(self.mtu_bytes);
        let payload = if s.is_send() || s.is_write() {
            let mut bytes = steps::pattern_bytes(n, len);
            if self.args.corrupt_step.contains(&n) && len > 0 {
                bytes[len as usize / 2] ^= 0xff;
                say!(self, "(corrupting byte {} of the payload of step {n})", len / 2);
            }
            self.write(steps::OFF_SRC, &bytes)?;
            Some(bytes)
        } else {
            self.write(steps::OFF_DST, &vec![steps::DST_FILL; (len + steps::GUARD) as usize])?;
            None
        };
        let wr = self.step_wr(n, s, payload);
        let rnr_before = self.dev.counters().rcvd_rnr_err;
        let qpn = self.qp(s.qp).qpn().value();
        say!(self, "STEP {n:2} {:<30} qp=0x{qpn:x} len={len}", s.name);
        if let Err((_, e)) = self.qp(s.qp).post_send(std::slice::from_ref(&wr)) {
            self.bad(format!("step {n}: post_send failed: {e}"));
            return Ok(());
        }
        let Some(wc) = self.poll1(STEP_WAIT)? else {
            self.bad(format!("step {n}: TIMEOUT waiting for the completion"));
            return Ok(());
        };
        self.show("client", &wc);
        if wc.wr_id != wr.wr_id {
            self.bad(format!("step {n}: completion for wr_id {}, want {}", wc.wr_id, wr.wr_id));
        }
        if wc.status != s.expect {
            self.bad(format!(
                "step {n}: status {}, want {}",
                wc_status_str(wc.status),
                wc_status_str(s.expect)
            ));
            return Ok(());
        }
        if wc.status != WcStatus::Success {
            return Ok(());
        }
        let before = self.fails;
        let what = format!("step {n} data read");
        if s.is_read() {
            let bytes = self.read(steps::OFF_DST, u64::from(len + steps::GUARD))?;
            let result = if s.target == Target::Atomics {
                let mut want = steps::FA_FINAL.to_le_bytes().to_vec();
                want.extend_from_slice(&steps::CAS_SWAP.to_le_bytes());
                steps::check_payload(&what, &bytes, len as usize, |i| want[i], steps::DST_FILL)
            } else {
                let want = |i: usize| steps::pattern(n, i as u32);
                steps::check_payload(&what, &bytes, len as usize, want, steps::DST_FILL)
            };
            if let Err(problem) = result {
                self.bad(problem);
            }
        } else if s.is_atomic() {
            let bytes = self.read(steps::OFF_DST, u64::from(8 + steps::GUARD))?;
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[..8]);
            let got = u64::from_le_bytes(word);
            if got != s.expect_orig {
                self.bad(format!(
                    "step {n}: returned original 0x{got:016x}, want 0x{:016x}",
                    s.expect_orig
                ));
            } else if let Err(problem) =
                steps::check_payload(&what, &bytes[8..], 0, |_| 0, steps::DST_FILL)
            {
                self.bad(problem);
            }
        }
        if s.flags & steps::F_RNR != 0 {
            let after = self.dev.counters().rcvd_rnr_err;
            if after == rnr_before {
                self.bad(format!(
                    "step {n}: completed without an RNR NAK (rcvd_rnr_err stayed {after})"
                ));
            } else {
                say!(self, "  rnr naks received: {}", after - rnr_before);
            }
        }
        if s.is_read() || s.is_atomic() || s.flags & steps::F_RNR != 0 {
            let verdict = if self.fails == before { "OK" } else { "FAILED" };
            say!(self, "CHECK step {n:2} {:<30} {verdict}", s.name);
        }
        Ok(())
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
        _ => "?",
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
