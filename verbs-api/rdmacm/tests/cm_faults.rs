//! A peer gone during the connect, end to end with rdma-core's tools on
//! uroce's `librdmacm.so.1`: the client's device CM resends its REQ (or
//! SIDR_REQ) as `UROCE_CM_RESPONSE_TIMEOUT` and `UROCE_CM_RETRIES` say,
//! then the tool gets `RDMA_CM_EVENT_UNREACHABLE` (`-ETIMEDOUT`) and
//! exits with an error, in bounded time; with the defaults (rdma_cm's 20
//! and 15) it still waits as Linux does.
//!
//! - The peer is a black hole: a UDP socket on port 4791 at the address
//!   that takes every datagram and answers none (a peer whose process died
//!   after the address was resolved). It records what reaches it, so the
//!   test sees each REQ's timing fields and how often it came.
//! - A server that received the REQ and was killed (`SIGKILL`) before it
//!   accepted: `tests/c/cm_listen_only.c`, a listener that never accepts.
//!
//! Loopback addresses 127.77.0.x. Without the Debian packages
//! (`rdmacm-utils`; `librdmacm-dev` and a C compiler for the killed
//! server) a test prints why it skips; under `CI=true` it fails.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uroce_wire::mad::{self, CmMessage};

mod common;
use common::*;

/// The rdmacm tools this file runs (`rdmacm-utils`).
const TOOLS: &[&str] = &["rping", "ucmatose", "udaddy"];

/// The CM timing of the fast clients: `4.096 µs × 2^14` ≈ 67 ms (the CM
/// waits `2 × 2^(18 − 8) + 2^(14 − 8)` = 2112 ms for a REP, the packet
/// lifetime's share dominating; 64 ms for a SIDR_REP), one retry.
const FAST: &[(&str, &str)] = &[("UROCE_CM_RESPONSE_TIMEOUT", "14"), ("UROCE_CM_RETRIES", "1")];

/// How long a fast client waits for a REP: 2112 ms.
const FAST_REQ_WAIT: Duration = Duration::from_millis(2 * 1024 + 64);

/// A CM MAD that reached the black hole: when, from which address, what.
#[derive(Debug)]
struct Arrived {
    at: Instant,
    from: IpAddr,
    message: CmMessage,
}

/// A peer gone after its address was resolved: UDP port 4791 at an
/// address, taking every datagram, answering none. It keeps the CM MADs
/// (QP1's SEND with a DETH) that reach it.
struct BlackHole {
    stop: Arc<AtomicBool>,
    arrived: Arc<Mutex<Vec<Arrived>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BlackHole {
    fn at(addr: Ipv4Addr) -> BlackHole {
        let socket = UdpSocket::bind(SocketAddr::from((addr, 4791))).expect("bind port 4791");
        socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let arrived = Arc::new(Mutex::new(Vec::new()));
        let (stop2, arrived2) = (stop.clone(), arrived.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((len, from)) = socket.recv_from(&mut buf) else { continue };
                let at = Instant::now();
                // BTH (12), DETH (8), the 256-byte MAD, the ICRC (4).
                let Some(bytes) = buf[..len].get(20..20 + mad::MAD_LEN) else { continue };
                let Ok(packet) = mad::Packet::new_checked(bytes) else { continue };
                if let Ok(message) = CmMessage::parse(&packet) {
                    arrived2.lock().unwrap().push(Arrived { at, from: from.ip(), message });
                }
            }
        });
        BlackHole { stop, arrived, thread: Some(thread) }
    }

    /// The REQs from `from` so far: when each came, and its (local,
    /// remote) CM response timeouts and CM retries.
    fn reqs_from(&self, from: &str) -> Vec<(Instant, (u8, u8, u8))> {
        let from: IpAddr = from.parse().unwrap();
        let arrived = self.arrived.lock().unwrap();
        arrived
            .iter()
            .filter(|a| a.from == from)
            .filter_map(|a| match &a.message {
                CmMessage::Req(r) => Some((
                    a.at,
                    (r.local_cm_response_timeout, r.remote_cm_response_timeout, r.max_cm_retries),
                )),
                _ => None,
            })
            .collect()
    }

    /// When each SIDR_REQ from `from` came.
    fn sidr_reqs_from(&self, from: &str) -> Vec<Instant> {
        let from: IpAddr = from.parse().unwrap();
        let arrived = self.arrived.lock().unwrap();
        arrived
            .iter()
            .filter(|a| a.from == from && matches!(a.message, CmMessage::SidrReq(_)))
            .map(|a| a.at)
            .collect()
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The gaps between consecutive instants.
fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Whether `d` is `want`, give or take the scheduling of a loaded machine
/// (the device's timers fire late, never early).
fn about(d: Duration, want: Duration) -> bool {
    d + Duration::from_millis(20) >= want && d <= want + Duration::from_millis(1500)
}

/// A connect to a black hole, with `UROCE_CM_RESPONSE_TIMEOUT=14` and
/// `UROCE_CM_RETRIES=1` on the client's device: rping and ucmatose send
/// the REQ twice (carrying 14, 14 and 1), 2112 ms apart, and get
/// `RDMA_CM_EVENT_UNREACHABLE` (`-ETIMEDOUT`, -110) after 2 × 2112 ms, well
/// under 10 s; udaddy's SIDR_REQ goes twice 64 ms apart. Meanwhile an
/// rping on a device with the defaults sent its REQ (20, 20, 15) and,
/// 6144 ms later, again, and still waits (Linux's ≈ 98 s).
#[test]
fn a_connect_to_a_peer_gone_is_unreachable_in_bounded_time() {
    let test = "a_connect_to_a_peer_gone_is_unreachable_in_bounded_time";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let libs = library_dir();
    let hole = BlackHole::at(Ipv4Addr::new(127, 77, 0, 1));
    let rping = tool("rping").expect("checked");
    let rping_args = ["-c", "-a", "127.77.0.1", "-p", "7700", "-C", "1"];

    // The defaults: Linux's timing.
    let default_started = Instant::now();
    let mut patient = start_on_uroce(
        &rping,
        &rping_args,
        libs.path(),
        "127.77.0.10",
        &[],
        Duration::from_secs(60),
    );

    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("rping", &rping_args, "127.77.0.2", "cma event RDMA_CM_EVENT_UNREACHABLE, error -110"),
        (
            "ucmatose",
            &["-s", "127.77.0.1", "-p", "7701", "-c", "1"],
            "127.77.0.4",
            "RDMA_CM_EVENT_UNREACHABLE, error: -110",
        ),
        ("udaddy", &["-s", "127.77.0.1"], "127.77.0.6", "RDMA_CM_EVENT_UNREACHABLE"),
    ];
    for (name, args, addr, says) in cases {
        let program = tool(name).expect("checked");
        let started = Instant::now();
        let run = start_on_uroce(&program, args, libs.path(), addr, FAST, Duration::from_secs(30))
            .finish();
        let took = started.elapsed();
        let all = format!("{}{}", run.stdout, run.stderr);
        eprintln!("{name} {}: exit {:?} in {took:?}: {all}", args.join(" "), run.code);
        assert!(
            matches!(run.code, Some(c) if c != 0),
            "{name} exits with an error code (not a signal, not a hang): {run:?}"
        );
        assert!(all.contains(says), "{name} says {says:?}: {all}");
        assert!(took < Duration::from_secs(10), "{name} gives up in bounded time: {took:?}");
        if *name == "udaddy" {
            let sidr = hole.sidr_reqs_from(addr);
            assert_eq!(sidr.len(), 2, "udaddy's SIDR_REQ and its one retry");
            assert!(about(gaps(&sidr)[0], Duration::from_millis(64)), "{:?}", gaps(&sidr));
            continue;
        }
        let reqs = hole.reqs_from(addr);
        assert_eq!(reqs.len(), 2, "{name}'s REQ and its one retry: {reqs:?}");
        assert!(reqs.iter().all(|r| r.1 == (14, 14, 1)), "the device's timing: {reqs:?}");
        let times: Vec<Instant> = reqs.iter().map(|r| r.0).collect();
        assert!(about(gaps(&times)[0], FAST_REQ_WAIT), "one wait apart: {:?}", gaps(&times));
        assert!(took >= 2 * FAST_REQ_WAIT, "two waits before giving up: {took:?}");
    }

    // The patient client: two REQs 6144 ms apart, and no answer yet.
    let until = default_started + Duration::from_millis(6144 + 1500);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let still = patient.running();
    let run = patient.kill();
    let reqs = hole.reqs_from("127.77.0.10");
    eprintln!("rping with the defaults: {reqs:?}, {run:?}");
    assert!(still, "rping with rdma_cm's timing still waits after 7.6 s: {run:?}");
    assert!(run.stderr.is_empty(), "and has reported nothing: {run:?}");
    assert_eq!(reqs.len(), 2, "the REQ and one retry so far: {reqs:?}");
    assert!(reqs.iter().all(|r| r.1 == (20, 20, 15)), "rdma_cm's timing: {reqs:?}");
    let times: Vec<Instant> = reqs.iter().map(|r| r.0).collect();
    assert!(about(gaps(&times)[0], Duration::from_millis(6144)), "{:?}", gaps(&times));
}

/// `tests/c/cm_listen_only.c`, compiled against the real headers.
fn build_listen_only(dir: &Path) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_listen_only.c");
    let binary = dir.join("cm_listen_only");
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-g", "-o"])
        .arg(&binary)
        .arg(&source)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        return Err(format!("cc: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(binary)
}

/// A server that received the REQ and was killed (`SIGKILL`) before it
/// accepted: its device dies with it, nothing answers the REQ's retry,
/// and rping (`UROCE_CM_RESPONSE_TIMEOUT=14`, `UROCE_CM_RETRIES=1`) gets
/// `RDMA_CM_EVENT_UNREACHABLE` 2 × 2112 ms after its REQ, well under 10 s.
#[test]
fn a_server_killed_before_it_accepts_leaves_the_client_unreachable() {
    let test = "a_server_killed_before_it_accepts_leaves_the_client_unreachable";
    if !rdmacm_tools(test, TOOLS)
        || !require(
            test,
            Path::new("/usr/include/rdma/rdma_cma.h").exists() && tool("cc").is_some(),
            "no librdmacm headers or C compiler (librdmacm-dev, cc)",
        )
    {
        return;
    }
    let libs = library_dir();
    let server = build_listen_only(libs.path()).expect("build cm_listen_only.c");
    let srv = start_on_uroce(
        &server,
        &["127.77.0.3", "7703"],
        libs.path(),
        "127.77.0.3",
        &[],
        Duration::from_secs(60),
    );
    srv.wait_for("listening");
    let rping = tool("rping").expect("checked");
    let started = Instant::now();
    let cli = start_on_uroce(
        &rping,
        &["-c", "-a", "127.77.0.3", "-p", "7703", "-C", "1"],
        libs.path(),
        "127.77.0.8",
        FAST,
        Duration::from_secs(30),
    );
    srv.wait_for("RDMA_CM_EVENT_CONNECT_REQUEST");
    let srv = srv.kill();
    let killed = Instant::now();
    let run = cli.finish();
    let (took, after_kill) = (started.elapsed(), killed.elapsed());
    let all = format!("{}{}", run.stdout, run.stderr);
    eprintln!(
        "server: {srv:?}\nrping: exit {:?} in {took:?} ({after_kill:?} after the kill): {all}",
        run.code
    );
    assert!(srv.code.is_none(), "the server was killed while waiting: {srv:?}");
    assert!(
        matches!(run.code, Some(c) if c != 0),
        "rping exits with an error code (not a signal, not a hang): {run:?}"
    );
    assert!(all.contains("cma event RDMA_CM_EVENT_UNREACHABLE, error -110"), "{all}");
    assert!(took < Duration::from_secs(10), "rping gives up in bounded time: {took:?}");
    assert!(took >= 2 * FAST_REQ_WAIT, "after two waits for a REP: {took:?}");
}
