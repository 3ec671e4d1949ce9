//! Two processes over loopback: every operation type crosses a real process
//! boundary through the UDP runtime, and what they send decodes cleanly.
//!
//! The parent is the test; the peer is this same test binary run again
//! (`--exact child_peer`) with `UROCE_TEST_CHILD` set. The peer opens its
//! own device (from `UROCE_ADDR`, `UROCE_FAULTS`, `UROCE_CAPTURE`), one
//! memory region, and serves line commands on stdin: create and connect
//! QPs, read and write its memory, post receives, poll its CQ. Its answers
//! are stdout lines marked with `@uroce ` (the test harness prints its own
//! lines around them). Every read of an answer has a timeout, and a guard
//! kills the peer when a test ends, however it ends.
//!
//! Each test has its own pair of addresses, 127.86.<test>.1 (parent) and
//! 127.86.<test>.2 (peer), so the tests run in parallel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uroce::app::{bring_up, default_tuning, wait_cq, Node, ALL_ACCESS};
use uroce_net::udp::{FaultSpec, UdpConfig};
use uroce_verbs::connect::Tuning;
use uroce_verbs::{
    AhAttr, Gid, Mr, Qkey, Qp, QpCap, QpState, QpType, Qpn, RecvWr, RemoteTarget, Rkey, SendWr,
    WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// Set (to `peer`) in the environment of a re-executed test binary.
const CHILD_ENV: &str = "UROCE_TEST_CHILD";
/// The test function the peer runs.
const CHILD_TEST: &str = "child_peer";
/// Marks the peer's answers among the test harness's own output.
const MARK: &str = "@uroce ";
/// The peer's memory region.
const PEER_MR_LEN: u64 = 1 << 20;
/// How long the parent waits for an answer to a command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// A peer that lives longer than this has been forgotten: it exits.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 128,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

fn parent_addr(test: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 86, test, 1)
}

fn peer_addr(test: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 86, test, 2)
}

/// Bytes that differ from one use to the next.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed) * 101) as u8)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err(format!("odd hex length {}", text.len()));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("hex: {e}")))
        .collect()
}

/// A completion as one word: `wr_id:status:opcode:flags:byte_len:imm:src_qp:qp_num`.
fn wc_to_word(wc: &WorkCompletion) -> String {
    format!(
        "{}:{}:{}:{}:{}:{}:{}:{}",
        wc.wr_id,
        wc.status.raw(),
        wc.opcode.raw(),
        wc.flags.0,
        wc.byte_len,
        wc.imm_or_inv,
        wc.src_qp.value(),
        wc.qp_num.value()
    )
}

fn wc_from_word(word: &str) -> WorkCompletion {
    let f: Vec<u64> = word.split(':').map(|n| n.parse().expect("completion field")).collect();
    assert_eq!(f.len(), 8, "completion `{word}`");
    let status = WcStatus::from_raw(f[1] as u8).expect("status");
    let opcode = WcOpcode::from_raw(f[2] as u8).expect("opcode");
    let mut wc = WorkCompletion::new(f[0], status, opcode, Qpn::new(f[7] as u32));
    wc.flags = WcFlags(f[3] as u32);
    wc.byte_len = f[4] as u32;
    wc.imm_or_inv = f[5] as u32;
    wc.src_qp = Qpn::new(f[6] as u32);
    wc
}

// ---------------------------------------------------------------------------
// The peer process.

/// The peer: a no-op in a normal run; with `UROCE_TEST_CHILD` set, serves
/// the parent's commands until `quit` or the end of stdin.
#[test]
fn child_peer() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_LIFETIME);
        eprintln!("peer: forgotten by the parent, exiting");
        std::process::exit(3);
    });
    if let Err(e) = serve() {
        answer(&format!("err {e}"));
        panic!("peer: {e}");
    }
}

fn answer(text: &str) {
    let mut out = std::io::stdout().lock();
    // A leading newline: the harness may have left "test child_peer ... "
    // unterminated.
    let _ = writeln!(out, "\n{MARK}{text}");
    let _ = out.flush();
}

struct PeerState {
    qps: Vec<Qp>,
    mr: Mr,
    node: Node,
}

fn serve() -> Result<(), String> {
    let config = UdpConfig::from_env().map_err(|e| e.to_string())?;
    let node = Node::open(config, 4096)?;
    let mr = node.pd.alloc_mr(PEER_MR_LEN, ALL_ACCESS).map_err(|e| format!("alloc_mr: {e}"))?;
    answer(&format!("ok {} {}", mr.addr(), mr.rkey().0));
    let mut state = PeerState { qps: Vec::new(), mr, node };
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"quit") {
            let PeerState { qps, mr, node } = state;
            drop(qps);
            drop(mr);
            node.dev.flush_capture().map_err(|e| format!("flushing the capture: {e}"))?;
            drop(node);
            answer("ok bye");
            return Ok(());
        }
        match handle(&mut state, &words) {
            Ok(text) => answer(&format!("ok {text}")),
            Err(e) => answer(&format!("err {e}")),
        }
    }
    Err("stdin closed before quit".into())
}

fn handle(peer: &mut PeerState, words: &[&str]) -> Result<String, String> {
    let num = |i: usize| -> Result<u64, String> {
        let w = words.get(i).ok_or_else(|| format!("argument {i} missing"))?;
        w.parse().map_err(|_| format!("argument {i} `{w}` is not a number"))
    };
    let qp = |i: usize| -> Result<&Qp, String> {
        peer.qps.get(num(i)? as usize).ok_or_else(|| "no such QP".to_string())
    };
    match words.first().copied().unwrap_or_default() {
        // qp rc|uc|ud → <index> <qpn>
        "qp" => {
            let qp_type = match words.get(1).copied() {
                Some("rc") => QpType::Rc,
                Some("uc") => QpType::Uc,
                Some("ud") => QpType::Ud,
                other => return Err(format!("QP type {other:?}")),
            };
            let qp = peer.node.qp(qp_type, cap())?;
            let qpn = qp.qpn().value();
            peer.qps.push(qp);
            Ok(format!("{} {qpn}", peer.qps.len() - 1))
        }
        // rts <qp> <qkey> <peer ip|-> <peer qpn> <peer psn> <mtu> <sq_psn>
        //     <timeout> <retry_cnt> <rnr_retry> <min_rnr_timer> <rd_atomic>
        "rts" => {
            let remote = match words.get(3).copied() {
                Some("-") => None,
                Some(ip) => {
                    let ip: IpAddr = ip.parse().map_err(|_| format!("address {ip}"))?;
                    Some((Gid::from_ip(ip), Qpn::new(num(4)? as u32), num(5)? as u32))
                }
                None => return Err("peer address missing".into()),
            };
            let tuning = Tuning {
                mtu: uroce_verbs::Mtu::from_raw(num(6)? as u8).ok_or("mtu")?,
                sq_psn: num(7)? as u32,
                timeout: num(8)? as u8,
                retry_cnt: num(9)? as u8,
                rnr_retry: num(10)? as u8,
                min_rnr_timer: num(11)? as u8,
                rd_atomic: num(12)? as u8,
                ..uroce::app::default_tuning()
            };
            bring_up(qp(1)?, remote, &tuning, num(2)? as u32)?;
            Ok(String::new())
        }
        // put <offset> <hex>
        "put" => {
            let bytes = unhex(words.get(2).ok_or("data missing")?)?;
            peer.mr.write(num(1)?, &bytes).map_err(|e| format!("write: {e}"))?;
            Ok(String::new())
        }
        // get <offset> <len> → <hex>
        "get" => {
            let bytes =
                peer.mr.read_vec(num(1)?, num(2)? as usize).map_err(|e| format!("read: {e}"))?;
            Ok(hex(&bytes))
        }
        // recv <qp> <wr_id> <offset> <len>
        "recv" => {
            let wr = RecvWr { wr_id: num(2)?, sg_list: vec![peer.mr.sge(num(3)?, num(4)? as u32)] };
            qp(1)?.post_recv(&[wr]).map_err(|(_, e)| format!("post_recv: {e}"))?;
            Ok(String::new())
        }
        // poll <count> <timeout ms> → completions (fewer on timeout)
        "poll" => {
            let got = wait_cq(&peer.node.cq, num(1)? as usize, Duration::from_millis(num(2)?));
            Ok(got.iter().map(wc_to_word).collect::<Vec<_>>().join(" "))
        }
        // state <qp> → the QP state number
        "state" => {
            let attr = qp(1)?.query().map_err(|e| format!("query: {e}"))?;
            Ok(attr.qp_state.map_or(255, QpState::raw).to_string())
        }
        // counters → the HCA counters the tests look at, then the runtime's
        "counters" => {
            let c = peer.node.dev.hca().lock().counters().clone();
            let s = peer.node.dev.stats();
            Ok(format!(
                "send_rnr_err={} send_nak={} duplicate_request={} out_of_seq_request={} \
                 rcvd_icrc_err={} faults_lost={} tx_errors={}",
                c.send_rnr_err,
                c.send_nak,
                c.duplicate_request,
                c.out_of_seq_request,
                c.rcvd_icrc_err,
                s.faults_lost,
                s.tx_errors
            ))
        }
        // debug → everything the HCA and the runtime counted, on one line
        "debug" => {
            let c = peer.node.dev.hca().lock().counters().clone();
            Ok(format!("{c:?} {:?}", peer.node.dev.stats()))
        }
        other => Err(format!("unknown command `{other}`")),
    }
}

// ---------------------------------------------------------------------------
// The parent's handle on a peer.

/// A running peer process; dropping it kills the process.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
    /// What the peer wrote besides its answers (shown when a test fails).
    log: Arc<Mutex<String>>,
    addr: Ipv4Addr,
    mr_addr: u64,
    rkey: Rkey,
}

impl Peer {
    /// Starts a peer at `addr`, with faults and a capture if asked.
    fn spawn(addr: Ipv4Addr, faults: Option<&str>, capture: Option<&Path>) -> Peer {
        let exe = std::env::current_exe().expect("test binary path");
        let mut command = Command::new(exe);
        command
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "peer")
            .env("UROCE_ADDR", addr.to_string())
            .env_remove("UROCE_FAULTS")
            .env_remove("UROCE_CAPTURE")
            .env_remove("UROCE_PROGRESS")
            .env_remove("UROCE_OFFLOAD")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(spec) = faults {
            command.env("UROCE_FAULTS", spec);
        }
        if let Some(path) = capture {
            command.env("UROCE_CAPTURE", path);
        }
        let mut child = command.spawn().expect("spawning the peer");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("peer stdout");
        let mut stderr = child.stderr.take().expect("peer stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, answers) = mpsc::channel();
        let out_log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match line.find(MARK) {
                    Some(at) => {
                        if tx.send(line[at + MARK.len()..].to_string()).is_err() {
                            break;
                        }
                    }
                    None if line.trim().is_empty() => {}
                    None => {
                        let mut log = out_log.lock().unwrap_or_else(|e| e.into_inner());
                        log.push_str(&line);
                        log.push('\n');
                    }
                }
            }
        });
        let err_log = log.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                let mut log = err_log.lock().unwrap_or_else(|e| e.into_inner());
                log.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut peer = Peer { child, stdin, answers, log, addr, mr_addr: 0, rkey: Rkey(0) };
        let ready = peer.answer(ANSWER_TIMEOUT, "start");
        peer.mr_addr = ready[0].parse().expect("peer MR address");
        peer.rkey = Rkey(ready[1].parse().expect("peer R_Key"));
        peer
    }

    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The next answer: its words after `ok`. Panics on `err` or timeout.
    fn answer(&mut self, timeout: Duration, what: &str) -> Vec<String> {
        let line = match self.answers.recv_timeout(timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "peer: no answer to `{what}` within {timeout:?}; its output:\n{}",
                    self.log()
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.try_wait();
                panic!("peer: gone during `{what}` ({status:?}); its output:\n{}", self.log())
            }
        };
        match line.strip_prefix("ok") {
            Some(rest) => rest.split_whitespace().map(str::to_string).collect(),
            None => panic!("peer: `{what}` failed: {line}; its output:\n{}", self.log()),
        }
    }

    /// Sends a command and waits (up to `timeout`) for its answer.
    fn call_within(&mut self, command: &str, timeout: Duration) -> Vec<String> {
        let stdin = self.stdin.as_mut().expect("peer stdin");
        if let Err(e) = writeln!(stdin, "{command}").and_then(|()| stdin.flush()) {
            panic!("peer: writing `{command:.40}`: {e}; its output:\n{}", self.log());
        }
        self.answer(timeout, &command.chars().take(40).collect::<String>())
    }

    fn call(&mut self, command: &str) -> Vec<String> {
        self.call_within(command, ANSWER_TIMEOUT)
    }

    fn gid(&self) -> Gid {
        Gid::from_ip(IpAddr::V4(self.addr))
    }

    /// Creates a QP: its index at the peer and its QPN.
    fn qp(&mut self, qp_type: &str) -> (usize, Qpn) {
        let words = self.call(&format!("qp {qp_type}"));
        (words[0].parse().unwrap(), Qpn::new(words[1].parse().unwrap()))
    }

    /// Moves a peer QP to RTS towards `remote` (RC/UC) or alone (UD).
    fn rts(&mut self, qp: usize, qkey: u32, remote: Option<(Ipv4Addr, Qpn, u32)>, t: &Tuning) {
        let remote = match remote {
            Some((ip, qpn, psn)) => format!("{ip} {} {psn}", qpn.value()),
            None => "- 0 0".into(),
        };
        self.call(&format!(
            "rts {qp} {qkey} {remote} {} {} {} {} {} {} {}",
            t.mtu.raw(),
            t.sq_psn,
            t.timeout,
            t.retry_cnt,
            t.rnr_retry,
            t.min_rnr_timer,
            t.rd_atomic
        ));
    }

    fn put(&mut self, offset: u64, bytes: &[u8]) {
        self.call(&format!("put {offset} {}", hex(bytes)));
    }

    fn get(&mut self, offset: u64, len: usize) -> Vec<u8> {
        let words = self.call(&format!("get {offset} {len}"));
        unhex(words.first().map_or("", String::as_str)).expect("peer memory")
    }

    fn get_u64(&mut self, offset: u64) -> u64 {
        u64::from_ne_bytes(self.get(offset, 8).try_into().unwrap())
    }

    fn recv(&mut self, qp: usize, wr_id: u64, offset: u64, len: u32) {
        self.call(&format!("recv {qp} {wr_id} {offset} {len}"));
    }

    /// Up to `count` completions from the peer's CQ, waiting up to `timeout`.
    fn poll(&mut self, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
        let ms = timeout.as_millis();
        let words = self.call_within(&format!("poll {count} {ms}"), timeout + ANSWER_TIMEOUT);
        words.iter().map(|w| wc_from_word(w)).collect()
    }

    fn state(&mut self, qp: usize) -> Option<QpState> {
        let words = self.call(&format!("state {qp}"));
        QpState::from_raw(words[0].parse().unwrap())
    }

    /// The peer's counters by name.
    fn counters(&mut self) -> std::collections::BTreeMap<String, u64> {
        self.call("counters")
            .iter()
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("key=value");
                (k.to_string(), v.parse().expect("counter"))
            })
            .collect()
    }

    /// Asks the peer to close its device (flushing its capture) and exit,
    /// and checks it exited cleanly.
    fn finish(mut self) {
        let words = self.call("quit");
        assert_eq!(words, ["bye"]);
        drop(self.stdin.take());
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            match self.child.try_wait().expect("waiting for the peer") {
                Some(status) => {
                    assert!(status.success(), "peer exit {status}; output:\n{}", self.log());
                    return;
                }
                None if Instant::now() > deadline => panic!("peer does not exit"),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            if std::thread::panicking() {
                eprintln!("peer output:\n{}", self.log());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Parent-side helpers.

/// Opens the parent's device at 127.86.`test`.1.
fn parent_node(test: u8, faults: Option<&str>, capture: Option<&Path>) -> Node {
    let mut config = UdpConfig::new(IpAddr::V4(parent_addr(test)));
    config.faults = faults.map(|f| FaultSpec::parse(f).expect("fault spec"));
    config.capture = capture.map(Path::to_path_buf);
    Node::open(config, 4096).expect("parent device")
}

/// The connection tuning: PSNs near the 24-bit wrap on the parent side, so
/// multi-packet messages cross it.
fn tunings() -> (Tuning, Tuning) {
    let parent = Tuning { sq_psn: 0x00ff_fff0, ..default_tuning() };
    let peer = Tuning { sq_psn: 0x0012_3456, ..default_tuning() };
    (parent, peer)
}

/// Creates an RC or UC QP on both sides and connects them.
fn connect(
    node: &Node,
    peer: &mut Peer,
    kind: &str,
    parent_t: &Tuning,
    peer_t: &Tuning,
) -> (Qp, usize) {
    let qp_type = if kind == "rc" { QpType::Rc } else { QpType::Uc };
    let qp = node.qp(qp_type, cap()).expect("parent QP");
    let (index, peer_qpn) = peer.qp(kind);
    bring_up(&qp, Some((peer.gid(), peer_qpn, peer_t.sq_psn)), parent_t, 0).expect("parent RTS");
    let parent = match node.addr() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => unreachable!("IPv4 test addresses"),
    };
    peer.rts(index, 0, Some((parent, qp.qpn(), parent_t.sq_psn)), peer_t);
    (qp, index)
}

fn wr(wr_id: u64, opcode: WrOpcode, mr: &Mr, offset: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, opcode);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr
}

fn remote(peer: &Peer, offset: u64) -> RemoteTarget {
    RemoteTarget { addr: peer.mr_addr + offset, rkey: peer.rkey }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect()
}

fn run_uroce(args: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code =
        uroce::cli::run(std::iter::once("uroce").chain(args.iter().copied()), &mut out, &mut err);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

/// Checks a capture of uroce traffic: `uroce decode` finds every frame a
/// well-formed RoCEv2 frame with a good ICRC (exit 0), and tshark decodes
/// every frame as InfiniBand, none malformed and none with an error-level
/// expert note, with the same opcode, destination QP and PSN as uroce.
/// Returns uroce's text decode (for looking for particular headers).
fn check_capture(path: &Path) -> String {
    let file = path.to_str().expect("UTF-8 path");
    let (code, tsv, err) = run_uroce(&["decode", "--format", "tsv", file]);
    let tally = tsv.lines().last().unwrap_or_default().to_string();
    assert_eq!(code, 0, "{file}: uroce decode: {tally} {err}");
    let ours: Vec<String> = tsv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{}\t{}\t{}\t{}", f[0], f[3], f[5], f[6])
        })
        .collect();
    let n = ours.len();
    assert!(n > 0, "{file}: no frames");
    assert_eq!(tally, format!("# frames={n} roce={n} icrc_ok={n} icrc_bad=0 malformed=0"));
    let (code, text, _) = run_uroce(&["decode", file]);
    assert_eq!(code, 0);

    // tshark's RPC-over-RDMA heuristic claims some SEND payloads and calls
    // them malformed (it does so on real rxe captures too): it is turned
    // off, so that only the RoCE layers are judged.
    let output = Command::new("tshark")
        .args(["--disable-protocol", "rpcordma", "-r", file, "-T", "fields"])
        .args(["-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed"])
        .args(["-e", "_ws.expert.severity", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must have tshark: {e}");
            println!("tshark not installed: the tshark check of {file} is skipped");
            return text;
        }
    };
    assert!(output.status.success(), "tshark: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut theirs = Vec::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 7, "{file}: tshark line {line:?}");
        assert!(
            f[1].starts_with("eth:ethertype:ip:udp:infiniband"),
            "{file} frame {}: decoded as {}",
            f[0],
            f[1]
        );
        assert!(f[2].is_empty(), "{file} frame {}: malformed: {}", f[0], f[2]);
        for severity in f[3].split(',').filter(|s| !s.is_empty()) {
            let severity: u32 = severity.parse().expect("expert severity");
            assert!(severity < 0x0080_0000, "{file} frame {}: an expert error", f[0]);
        }
        let num = |s: &str| -> u32 {
            match s.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).unwrap(),
                None => s.parse().unwrap(),
            }
        };
        theirs.push(format!("{}\t0x{:02x}\t0x{:06x}\t{}", f[0], num(f[4]), num(f[5]), num(f[6])));
    }
    assert_eq!(ours, theirs, "{file}: uroce and tshark disagree");
    text
}

/// The opcode names uroce's TSV decode gives, once each.
fn opcodes_in(path: &Path) -> std::collections::BTreeSet<String> {
    let (code, tsv, _) = run_uroce(&["decode", "--format", "tsv", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    tsv.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').nth(4).unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn rc_operations_cross_the_process_boundary_and_their_capture_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let (parent_pcap, peer_pcap) = (dir.path().join("parent.pcap"), dir.path().join("peer.pcap"));
    let node = parent_node(1, None, Some(&parent_pcap));
    let mut peer = Peer::spawn(peer_addr(1), None, Some(&peer_pcap));
    let (pt, ct) = tunings();
    let (qp, pqp) = connect(&node, &mut peer, "rc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 20, ALL_ACCESS).unwrap();

    let send = pattern(5000, 1);
    let send_imm = pattern(3000, 2);
    let write = pattern(10_000, 3);
    let write_imm = pattern(2500, 4);
    let read = pattern(20_000, 5);
    mr.write(0, &send).unwrap();
    mr.write(8192, &send_imm).unwrap();
    mr.write(16_384, &write).unwrap();
    mr.write(32_768, &write_imm).unwrap();
    peer.put(65_536, &read);
    peer.put(131_072, &0x1111_2222_3333_4444u64.to_ne_bytes());
    peer.put(131_080, &1000u64.to_ne_bytes());
    peer.recv(pqp, 100, 0, 8192);
    peer.recv(pqp, 101, 8192, 4096);
    peer.recv(pqp, 102, 12_288, 16);

    let mut wrs = vec![wr(1, WrOpcode::Send, &mr, 0, 5000)];
    let mut w = wr(2, WrOpcode::SendWithImm, &mr, 8192, 3000);
    w.imm_or_inv = 0xdead_beef;
    wrs.push(w);
    let mut w = wr(3, WrOpcode::RdmaWrite, &mr, 16_384, 10_000);
    w.remote = remote(&peer, 16_384);
    wrs.push(w);
    let mut w = wr(4, WrOpcode::RdmaWriteWithImm, &mr, 32_768, 2500);
    w.remote = remote(&peer, 32_768);
    w.imm_or_inv = 0x0bad_cafe;
    wrs.push(w);
    let mut w = wr(5, WrOpcode::RdmaRead, &mr, 100_000, 20_000);
    w.remote = remote(&peer, 65_536);
    wrs.push(w);
    let mut w = wr(6, WrOpcode::AtomicCmpAndSwp, &mr, 200_000, 8);
    w.remote = remote(&peer, 131_072);
    w.compare_add = 0x1111_2222_3333_4444;
    w.swap = 0x5555_6666_7777_8888;
    wrs.push(w);
    // A compare that does not match: the old value comes back, nothing changes.
    let mut w = wr(7, WrOpcode::AtomicCmpAndSwp, &mr, 200_008, 8);
    w.remote = remote(&peer, 131_072);
    w.compare_add = 0x1111_2222_3333_4444;
    w.swap = 0x9999;
    wrs.push(w);
    let mut w = wr(8, WrOpcode::AtomicFetchAndAdd, &mr, 200_016, 8);
    w.remote = remote(&peer, 131_080);
    w.compare_add = 0x10;
    wrs.push(w);
    qp.post_send(&wrs).unwrap();

    let got = node.wait(8, Duration::from_secs(5));
    let expect: Vec<(u64, WcStatus)> = (1..=8).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(statuses(&got), expect);
    let opcodes: Vec<WcOpcode> = got.iter().map(|wc| wc.opcode).collect();
    use WcOpcode as O;
    assert_eq!(
        opcodes,
        [
            O::Send,
            O::Send,
            O::RdmaWrite,
            O::RdmaWrite,
            O::RdmaRead,
            O::CompSwap,
            O::CompSwap,
            O::FetchAdd
        ]
    );
    assert_eq!(got[4].byte_len, 20_000);
    assert!(got[5..].iter().all(|wc| wc.byte_len == 8));
    assert!(got.iter().all(|wc| wc.qp_num == qp.qpn()));
    assert_eq!(mr.read_vec(100_000, 20_000).unwrap(), read, "READ data");
    let old = |off| u64::from_ne_bytes(mr.read_vec(off, 8).unwrap().try_into().unwrap());
    assert_eq!(old(200_000), 0x1111_2222_3333_4444, "CMP_SWAP returns the old value");
    assert_eq!(old(200_008), 0x5555_6666_7777_8888, "a failed compare returns the current value");
    assert_eq!(old(200_016), 1000, "FETCH_ADD returns the old value");

    let at_peer = peer.poll(3, Duration::from_secs(5));
    assert_eq!(
        statuses(&at_peer),
        [(100, WcStatus::Success), (101, WcStatus::Success), (102, WcStatus::Success)]
    );
    let (r0, r1, r2) = (&at_peer[0], &at_peer[1], &at_peer[2]);
    assert_eq!((r0.opcode, r0.byte_len), (O::Recv, 5000));
    assert!(!r0.flags.contains(WcFlags::WITH_IMM));
    assert_eq!((r1.opcode, r1.byte_len, r1.imm_or_inv), (O::Recv, 3000, 0xdead_beef));
    assert!(r1.flags.contains(WcFlags::WITH_IMM));
    assert_eq!((r2.opcode, r2.byte_len, r2.imm_or_inv), (O::RecvRdmaWithImm, 2500, 0x0bad_cafe));
    assert!(r2.flags.contains(WcFlags::WITH_IMM));
    assert_eq!(peer.get(0, 5000), send, "SEND data");
    assert_eq!(peer.get(8192, 3000), send_imm, "SEND with immediate data");
    assert_eq!(peer.get(16_384, 10_000), write, "WRITE data");
    assert_eq!(peer.get(32_768, 2500), write_imm, "WRITE with immediate data");
    assert_eq!(peer.get_u64(131_072), 0x5555_6666_7777_8888, "the swap happened once");
    assert_eq!(peer.get_u64(131_080), 1016, "the add happened");
    assert_eq!(peer.poll(1, Duration::from_millis(20)), [], "nothing else at the peer");

    node.dev.flush_capture().unwrap();
    peer.finish();
    for path in [&parent_pcap, &peer_pcap] {
        check_capture(path);
        let seen = opcodes_in(path);
        for name in [
            "RC_SEND_FIRST",
            "RC_SEND_MIDDLE",
            "RC_SEND_LAST",
            "RC_SEND_LAST_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_LAST",
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "RC_RDMA_READ_REQUEST",
            "RC_RDMA_READ_RESPONSE_FIRST",
            "RC_RDMA_READ_RESPONSE_MIDDLE",
            "RC_RDMA_READ_RESPONSE_LAST",
            "RC_COMPARE_SWAP",
            "RC_FETCH_ADD",
            "RC_ATOMIC_ACKNOWLEDGE",
            "RC_ACKNOWLEDGE",
        ] {
            assert!(seen.contains(name), "{}: no {name} in {seen:?}", path.display());
        }
    }
}

#[test]
fn uc_and_ud_cross_the_process_boundary_and_their_capture_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let (parent_pcap, peer_pcap) = (dir.path().join("parent.pcap"), dir.path().join("peer.pcap"));
    let node = parent_node(2, None, Some(&parent_pcap));
    let mut peer = Peer::spawn(peer_addr(2), None, Some(&peer_pcap));
    let (pt, ct) = tunings();
    let (uc, puc) = connect(&node, &mut peer, "uc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();

    // UC: a multi-packet SEND and a multi-packet WRITE.
    let send = pattern(4000, 6);
    let write = pattern(3000, 7);
    mr.write(0, &send).unwrap();
    mr.write(4096, &write).unwrap();
    peer.recv(puc, 200, 0, 8192);
    let mut w = wr(12, WrOpcode::RdmaWrite, &mr, 4096, 3000);
    w.remote = remote(&peer, 16_384);
    uc.post_send(&[wr(11, WrOpcode::Send, &mr, 0, 4000), w]).unwrap();
    let got = node.wait(2, Duration::from_secs(5));
    assert_eq!(statuses(&got), [(11, WcStatus::Success), (12, WcStatus::Success)]);
    assert_eq!((got[0].opcode, got[1].opcode), (WcOpcode::Send, WcOpcode::RdmaWrite));
    let at_peer = peer.poll(1, Duration::from_secs(5));
    assert_eq!(statuses(&at_peer), [(200, WcStatus::Success)]);
    assert_eq!((at_peer[0].opcode, at_peer[0].byte_len), (WcOpcode::Recv, 4000));
    assert_eq!(peer.get(0, 4000), send, "UC SEND data");
    // The WRITE left after the SEND on the same QP and consumed no receive;
    // give it the time a loopback packet takes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while peer.get(16_384, 3000) != write {
        assert!(Instant::now() < deadline, "UC WRITE data never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }

    // UD: SEND with immediate; the receive buffer starts with the GRH.
    const QKEY: u32 = 0x2222_0001;
    let ud = node.qp(QpType::Ud, cap()).unwrap();
    bring_up(&ud, None, &pt, 0x1111).unwrap();
    let (pud, peer_ud_qpn) = peer.qp("ud");
    peer.rts(pud, QKEY, None, &ct);
    let ah = node
        .pd
        .create_ah(AhAttr { dgid: peer.gid(), sgid_index: 1, port_num: 1, ..AhAttr::default() })
        .unwrap();
    let dgram = pattern(1000, 8);
    mr.write(8192, &dgram).unwrap();
    peer.recv(pud, 300, 32_768, 40 + 1024);
    let mut w = wr(13, WrOpcode::SendWithImm, &mr, 8192, 1000);
    w.imm_or_inv = 0x0102_0304;
    w.ud = Some((ah.index(), peer_ud_qpn, Qkey(QKEY)));
    ud.post_send(&[w]).unwrap();
    let got = node.wait(1, Duration::from_secs(5));
    assert_eq!(statuses(&got), [(13, WcStatus::Success)]);
    assert_eq!(got[0].opcode, WcOpcode::Send);
    let at_peer = peer.poll(1, Duration::from_secs(5));
    assert_eq!(statuses(&at_peer), [(300, WcStatus::Success)]);
    let wc = &at_peer[0];
    assert_eq!((wc.opcode, wc.byte_len, wc.imm_or_inv), (WcOpcode::Recv, 40 + 1000, 0x0102_0304));
    assert!(wc.flags.contains(WcFlags::GRH) && wc.flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc.src_qp, ud.qpn(), "the sender's QPN");
    let grh = peer.get(32_768, 40);
    assert_eq!(grh[20] >> 4, 4, "an IPv4 header in the last 20 bytes of the GRH: {grh:02x?}");
    assert_eq!(grh[32..36], parent_addr(2).octets(), "its source address");
    assert_eq!(grh[36..40], peer_addr(2).octets(), "its destination address");
    assert_eq!(peer.get(32_768 + 40, 1000), dgram, "UD data after the GRH");
    assert_eq!(peer.poll(1, Duration::from_millis(20)), [], "nothing else at the peer");

    node.dev.flush_capture().unwrap();
    peer.finish();
    for path in [&parent_pcap, &peer_pcap] {
        check_capture(path);
        let seen = opcodes_in(path);
        for name in [
            "UC_SEND_FIRST",
            "UC_SEND_MIDDLE",
            "UC_SEND_LAST",
            "UC_RDMA_WRITE_FIRST",
            "UC_RDMA_WRITE_LAST",
            "UD_SEND_ONLY_WITH_IMMEDIATE",
        ] {
            assert!(seen.contains(name), "{}: no {name} in {seen:?}", path.display());
        }
    }
}

#[test]
fn a_send_before_the_receive_is_rnr_nakked_then_retried_until_it_lands() {
    let dir = tempfile::tempdir().unwrap();
    let parent_pcap = dir.path().join("parent.pcap");
    let node = parent_node(3, None, Some(&parent_pcap));
    let mut peer = Peer::spawn(peer_addr(3), None, None);
    let (pt, mut ct) = tunings();
    // The peer asks for 5.12 ms between tries (RNR timer code 18).
    ct.min_rnr_timer = 18;
    let (qp, pqp) = connect(&node, &mut peer, "rc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    let data = pattern(3000, 9);
    mr.write(0, &data).unwrap();

    let posted = Instant::now();
    qp.post_send(&[wr(21, WrOpcode::Send, &mr, 0, 3000)]).unwrap();
    let early = node.wait(1, Duration::from_millis(100));
    assert_eq!(early, [], "no completion while the peer has no receive");
    peer.recv(pqp, 400, 0, 4096);
    let waited = posted.elapsed();
    let got = node.wait(1, Duration::from_secs(3));
    assert_eq!(statuses(&got), [(21, WcStatus::Success)]);
    let at_peer = peer.poll(1, Duration::from_secs(3));
    assert_eq!(statuses(&at_peer), [(400, WcStatus::Success)]);
    assert_eq!(at_peer[0].byte_len, 3000);
    assert_eq!(peer.get(0, 3000), data);

    let rnr_received = node.dev.hca().lock().counters().rcvd_rnr_err;
    let rnr_sent = peer.counters()["send_rnr_err"];
    // Each try waits at least the 5.12 ms the peer asked for.
    let most = waited.as_micros() as u64 / 5120 + 2;
    assert!(
        (2..=most).contains(&rnr_received),
        "{rnr_received} RNR NAKs received in {waited:?} (at most {most})"
    );
    assert!(rnr_sent >= rnr_received, "{rnr_sent} sent, {rnr_received} received");

    node.dev.flush_capture().unwrap();
    peer.finish();
    let text = check_capture(&parent_pcap);
    // Every RNR NAK the peer sent reached the parent, carrying the peer's timer.
    let naks = text.matches("AETH[RNR-NAK timer=18").count() as u64;
    assert_eq!(naks, rnr_sent, "RNR NAKs in the capture");
    assert!(rnr_received <= naks);
}

#[test]
fn transport_retry_recovers_every_operation_under_seeded_loss() {
    // Requests and responses are lost (a round trip fails 19 % of the
    // time). At 20 % each way (36 % a round trip), eight failed rounds in a
    // row on one of the 21 READs and atomics, a legitimate RETRY_EXC_ERR
    // (`uroce sim` calls it plausible), happened in about 1 run in 70.
    let node = parent_node(4, Some("loss=0.1,seed=7"), None);
    let mut peer = Peer::spawn(peer_addr(4), Some("loss=0.1,seed=11"), None);
    let (mut pt, ct) = tunings();
    // 16.8 ms per try, 8 tries: a loss costs one timeout at most, and a
    // machine busy with other tests has 134 ms to make progress.
    pt.timeout = 12;
    pt.retry_cnt = 7;
    let (qp, pqp) = connect(&node, &mut peer, "rc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 20, ALL_ACCESS).unwrap();

    const SENDS: u64 = 12;
    const WRITES: u64 = 8;
    const READS: u64 = 6;
    const ADDS: u64 = 10;
    const SWAPS: u64 = 5;
    let mut wrs = Vec::new();
    let mut next_id = 0u64;
    let mut id = || {
        next_id += 1;
        next_id
    };
    for i in 0..SENDS {
        mr.write(i * 4096, &pattern(3000, 20 + i as u8)).unwrap();
        peer.recv(pqp, 1000 + i, i * 4096, 4096);
        wrs.push(wr(id(), WrOpcode::Send, &mr, i * 4096, 3000));
    }
    for i in 0..WRITES {
        let at = 65_536 + i * 8192;
        mr.write(at, &pattern(6000, 40 + i as u8)).unwrap();
        let mut w = wr(id(), WrOpcode::RdmaWrite, &mr, at, 6000);
        w.remote = remote(&peer, at);
        wrs.push(w);
    }
    for i in 0..READS {
        // 16 response packets each: plenty for the peer's losses.
        let at = 262_144 + i * 16_384;
        peer.put(at, &pattern(16_000, 60 + i as u8));
        let mut w = wr(id(), WrOpcode::RdmaRead, &mr, at, 16_000);
        w.remote = remote(&peer, at);
        wrs.push(w);
    }
    // A counter at the peer, added to one at a time: the old values are
    // 0, 1, 2, ... exactly once each, however often a request is retried.
    peer.put(524_288, &0u64.to_ne_bytes());
    peer.put(524_296, &0u64.to_ne_bytes());
    for i in 0..ADDS {
        let mut w = wr(id(), WrOpcode::AtomicFetchAndAdd, &mr, 524_288 + i * 8, 8);
        w.remote = remote(&peer, 524_288);
        w.compare_add = 1;
        wrs.push(w);
    }
    for i in 0..SWAPS {
        let mut w = wr(id(), WrOpcode::AtomicCmpAndSwp, &mr, 600_000 + i * 8, 8);
        w.remote = remote(&peer, 524_296);
        w.compare_add = i;
        w.swap = i + 1;
        wrs.push(w);
    }
    let total = wrs.len();
    qp.post_send(&wrs).unwrap();

    let started = Instant::now();
    let got = node.wait(total, Duration::from_secs(20));
    let took = started.elapsed();
    let expect: Vec<(u64, WcStatus)> = (1..=total as u64).map(|i| (i, WcStatus::Success)).collect();
    if statuses(&got) != expect {
        let counters = node.dev.hca().lock().counters().clone();
        let stats = node.dev.stats();
        let theirs = peer.call("debug").join(" ");
        panic!(
            "after {took:?}: {:?}\nparent {counters:?} {stats:?}\npeer {theirs}",
            statuses(&got)
        );
    }
    let at_peer = peer.poll(SENDS as usize, Duration::from_secs(5));
    let expect: Vec<(u64, WcStatus)> = (0..SENDS).map(|i| (1000 + i, WcStatus::Success)).collect();
    assert_eq!(statuses(&at_peer), expect);
    for i in 0..SENDS {
        assert_eq!(at_peer[i as usize].byte_len, 3000);
        assert_eq!(peer.get(i * 4096, 3000), pattern(3000, 20 + i as u8), "SEND {i}");
    }
    for i in 0..WRITES {
        let at = 65_536 + i * 8192;
        assert_eq!(peer.get(at, 6000), pattern(6000, 40 + i as u8), "WRITE {i}");
    }
    for i in 0..READS {
        let at = 262_144 + i * 16_384;
        let data = pattern(16_000, 60 + i as u8);
        assert_eq!(mr.read_vec(at, 16_000).unwrap(), data, "READ {i}");
    }
    let old = |off| u64::from_ne_bytes(mr.read_vec(off, 8).unwrap().try_into().unwrap());
    let adds: Vec<u64> = (0..ADDS).map(|i| old(524_288 + i * 8)).collect();
    assert_eq!(adds, (0..ADDS).collect::<Vec<_>>(), "FETCH_ADD old values");
    let swaps: Vec<u64> = (0..SWAPS).map(|i| old(600_000 + i * 8)).collect();
    assert_eq!(swaps, (0..SWAPS).collect::<Vec<_>>(), "CMP_SWAP old values");
    assert_eq!(peer.get_u64(524_288), ADDS, "each add applied once");
    assert_eq!(peer.get_u64(524_296), SWAPS, "each swap applied once");

    let lost_here = node.dev.stats().faults_lost;
    let counters = peer.counters();
    let retries = node.dev.hca().lock().counters().completer_retry_err;
    eprintln!(
        "{took:?}; lost: parent {lost_here}, peer {}; go-backs {retries}; peer {counters:?}",
        counters["faults_lost"]
    );
    assert!(lost_here > 0 && counters["faults_lost"] > 0, "both sides lost packets");
    assert!(retries > 0, "the requester went back");
    assert_eq!(counters["rcvd_icrc_err"], 0);
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Rts));
    peer.finish();
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_and_later_requests_flush() {
    let dir = tempfile::tempdir().unwrap();
    let (parent_pcap, peer_pcap) = (dir.path().join("parent.pcap"), dir.path().join("peer.pcap"));
    let node = parent_node(5, None, Some(&parent_pcap));
    let mut peer = Peer::spawn(peer_addr(5), None, Some(&peer_pcap));
    let (pt, ct) = tunings();
    let (qp, pqp) = connect(&node, &mut peer, "rc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    mr.write(0, &pattern(2000, 10)).unwrap();
    peer.recv(pqp, 500, 0, 4096);

    let mut bad = wr(31, WrOpcode::RdmaWrite, &mr, 0, 2000);
    bad.remote = RemoteTarget { addr: peer.mr_addr + 8192, rkey: Rkey(peer.rkey.0 ^ 0x100) };
    let send = wr(32, WrOpcode::Send, &mr, 0, 100);
    let mut good = wr(33, WrOpcode::RdmaWrite, &mr, 0, 2000);
    good.remote = remote(&peer, 16_384);
    let mut read = wr(34, WrOpcode::RdmaRead, &mr, 4096, 100);
    read.remote = remote(&peer, 0);
    qp.post_send(&[bad, send, good, read]).unwrap();
    let got = node.wait(4, Duration::from_secs(5));
    assert_eq!(
        statuses(&got),
        [
            (31, WcStatus::RemAccessErr),
            (32, WcStatus::WrFlushErr),
            (33, WcStatus::WrFlushErr),
            (34, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Err), "the requester's QP is in error");
    // Work posted later flushes too.
    qp.post_send(&[wr(35, WrOpcode::Send, &mr, 0, 100)]).unwrap();
    let later = node.wait(1, Duration::from_secs(2));
    assert_eq!(statuses(&later), [(35, WcStatus::WrFlushErr)]);
    assert_eq!(node.wait(1, Duration::from_millis(20)), [], "nothing else");

    assert_eq!(peer.get(8192, 2000), vec![0; 2000], "the bad WRITE wrote nothing");
    assert_eq!(peer.get(16_384, 2000), vec![0; 2000], "the WRITE after it never ran");
    // As rxe does, the responder's QP goes to the error state too: the SEND
    // behind the bad WRITE is never delivered, and the receive flushes.
    assert_eq!(peer.state(pqp), Some(QpState::Err), "the responder's QP is in error");
    let at_peer = peer.poll(1, Duration::from_secs(2));
    assert_eq!(statuses(&at_peer), [(500, WcStatus::WrFlushErr)]);
    assert!(peer.counters()["send_nak"] >= 1, "the peer sent a NAK");

    node.dev.flush_capture().unwrap();
    peer.finish();
    for path in [&parent_pcap, &peer_pcap] {
        let text = check_capture(path);
        assert!(text.contains("NAK remote-access-error"), "{}: no access NAK", path.display());
    }
}

#[test]
fn a_killed_peer_gives_retry_exceeded_in_bounded_time_and_every_other_wr_flushes() {
    const TIMEOUT: u8 = 12; // 4.096 µs × 2^12 = 16.8 ms per try
    const RETRY_CNT: u8 = 3; // 4 tries
    const DEPTH: u64 = 96;
    const LEN: u32 = 16_384;
    let node = parent_node(6, None, None);
    let mut peer = Peer::spawn(peer_addr(6), None, None);
    let (mut pt, ct) = tunings();
    pt.timeout = TIMEOUT;
    pt.retry_cnt = RETRY_CNT;
    let (qp, _) = connect(&node, &mut peer, "rc", &pt, &ct);
    let mr = node.pd.alloc_mr(1 << 16, ALL_ACCESS).unwrap();
    mr.write(0, &pattern(LEN as usize, 11)).unwrap();
    let try_time = Duration::from_nanos(4096 << TIMEOUT);
    let bound = try_time * (u32::from(RETRY_CNT) + 1);

    // Keep a stream of WRITEs outstanding, then kill the peer mid-stream.
    let mut posted = 0u64;
    let mut done: Vec<WorkCompletion> = Vec::new();
    let mut last_success = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(3);
    while done.len() < 64 {
        assert!(Instant::now() < deadline, "the stream does not flow: {} done", done.len());
        let more = wait_cq(&node.cq, 64, Duration::ZERO);
        assert!(more.iter().all(|wc| wc.status == WcStatus::Success), "{more:?}");
        if !more.is_empty() {
            last_success = Instant::now();
        }
        done.extend(more);
        let room = DEPTH - (posted - done.len() as u64);
        let batch: Vec<SendWr> = (0..room)
            .map(|i| {
                let mut w = wr(posted + i, WrOpcode::RdmaWrite, &mr, 0, LEN);
                w.remote = remote(&peer, ((posted + i) % 32) * u64::from(LEN));
                w
            })
            .collect();
        qp.post_send(&batch).unwrap();
        posted += room;
    }
    peer.child.kill().unwrap();
    let killed = Instant::now();
    peer.child.wait().unwrap();
    let outstanding = posted - done.len() as u64;

    let mut error_seen = None;
    while (done.len() as u64) < posted {
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "only {} of {posted} completed",
            done.len()
        );
        for wc in wait_cq(&node.cq, 64, Duration::ZERO) {
            match wc.status {
                WcStatus::Success => last_success = Instant::now(),
                WcStatus::RetryExcErr => drop(error_seen.get_or_insert(Instant::now())),
                _ => {}
            }
            done.push(wc);
        }
    }
    let error_seen = error_seen.expect("a RETRY_EXC_ERR completion");
    let error_at = error_seen - killed;
    let silence = error_seen - last_success;
    eprintln!(
        "outstanding at the kill {outstanding}; RETRY_EXC_ERR {error_at:?} after it, \
         {silence:?} after the last ACK"
    );
    assert!(outstanding > 16, "WRITEs were outstanding at the kill");
    let ids: Vec<u64> = done.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..posted).collect::<Vec<_>>(), "every WR completes once, in order");
    let first_error = done.iter().position(|wc| wc.status != WcStatus::Success).unwrap();
    assert_eq!(done[first_error].status, WcStatus::RetryExcErr);
    let flushed = &done[first_error + 1..];
    assert!(!flushed.is_empty(), "WRs after the failed one");
    assert!(flushed.iter().all(|wc| wc.status == WcStatus::WrFlushErr), "the rest flush");
    // From the last ACK (the last successful completion) the requester
    // waits out `retry_cnt + 1` timeouts; allow one for a late poll. And
    // from the kill, at most the whole budget (plus slack for a loaded
    // machine).
    assert!(silence >= try_time * u32::from(RETRY_CNT), "{silence:?}: too early for {bound:?}");
    assert!(
        error_at <= bound * 3 + Duration::from_millis(250),
        "{error_at:?}: too late for {bound:?}"
    );
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Err));
    assert_eq!(node.dev.hca().lock().counters().retry_exceeded_err, 1);
}
