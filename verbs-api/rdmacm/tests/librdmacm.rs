//! uroce's `librdmacm.so.1` from outside: its exports against the
//! system's library, a C program built against the real
//! `<rdma/rdma_cma.h>` run on uroce's two libraries (and again under
//! AddressSanitizer's leak checker), and Debian's rdmacm tools run end to
//! end between two uroce processes (rping, ucmatose, rdma_server and
//! rdma_client, udaddy, perftest with `-R`), refused where nothing
//! listens, and rping on devices that lose and duplicate packets.
//!
//! Without the Debian packages (`librdmacm-dev`, `rdmacm-utils`, a C
//! compiler, binutils) a test prints why it skips; under `CI=true` it
//! fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// Runs `program` on uroce's libraries, its device at `addr`, for at
/// most `limit`.
fn run_on_uroce(program: &Path, args: &[&str], dir: &Path, addr: &str, limit: Duration) -> Ended {
    start_on_uroce(program, args, dir, addr, &[], limit).finish()
}

/// The defined, versioned dynamic symbols of a shared object.
fn exports(lib: &Path) -> BTreeSet<String> {
    let out =
        Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib).output().expect("readelf");
    assert!(out.status.success(), "readelf {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8 && f[6] != "UND" && f[7].contains('@')).then(|| f[7].to_string())
        })
        .collect()
}

#[test]
fn exports_exactly_the_system_librarys_symbols_at_their_versions() {
    let test = "exports_exactly_the_system_librarys_symbols_at_their_versions";
    let system = ["/usr/lib/x86_64-linux-gnu/librdmacm.so.1", "/usr/lib64/librdmacm.so.1"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if !require(test, system.is_some(), "no system librdmacm.so.1 (librdmacm1)")
        || !require(test, tool("readelf").is_some(), "no readelf (binutils)")
    {
        return;
    }
    let theirs = exports(&system.expect("checked"));
    let lib = built("librdmacm.so");
    let ours = exports(&lib);
    assert_eq!(theirs.len(), 68, "rdma-core 44's librdmacm exports 68 symbols: {theirs:?}");
    assert_eq!(ours, theirs, "uroce's librdmacm exports the same (name, version) pairs");
    for pair in [
        "rdma_create_id@@RDMACM_1.0",
        "rdma_join_multicast_ex@@RDMACM_1.1",
        "rdma_establish@@RDMACM_1.2",
        "rdma_init_qp_attr@@RDMACM_1.2",
        "rdma_reject_ece@@RDMACM_1.3",
    ] {
        assert!(ours.contains(pair), "{pair}");
    }
    let dynamic = Command::new("readelf").arg("-d").arg(&lib).output().expect("readelf -d");
    let text = String::from_utf8_lossy(&dynamic.stdout);
    assert!(text.contains("Library soname: [librdmacm.so.1]"), "{text}");
    assert!(text.contains("Shared library: [libibverbs.so.1]"), "NEEDED libibverbs.so.1: {text}");
    // The verbs are imported (resolved in the process's libibverbs), never
    // defined here: no second copy of the verbs in the process.
    assert!(ours.iter().all(|s| !s.starts_with("ibv_")), "no verbs defined: {ours:?}");
    let undefined =
        Command::new("readelf").args(["--dyn-syms", "-W"]).arg(&lib).output().expect("readelf");
    let undefined = String::from_utf8_lossy(&undefined.stdout);
    for verb in
        ["ibv_open_device@IBVERBS_1.1", "ibv_create_qp@IBVERBS_1.1", "ibv_modify_qp@IBVERBS_1.1"]
    {
        assert!(
            undefined.lines().any(|l| l.contains(" UND ") && l.contains(verb)),
            "{verb} is imported"
        );
    }
}

/// Builds `tests/c/cm_basic.c` against the real headers (`extra` flags).
fn build_cm_basic(dir: &Path, extra: &[&str]) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_basic.c");
    let binary = dir.join(format!("cm_basic{}", extra.len()));
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-g"])
        .args(extra)
        .arg("-o")
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

fn have_headers() -> bool {
    Path::new("/usr/include/rdma/rdma_cma.h").exists() && tool("cc").is_some()
}

#[test]
fn a_c_program_resolves_binds_and_makes_qps_on_uroce() {
    let test = "a_c_program_resolves_binds_and_makes_qps_on_uroce";
    if !require(test, have_headers(), "no <rdma/rdma_cma.h> (librdmacm-dev) or no cc") {
        return;
    }
    let libs = library_dir();
    let work = tempfile::tempdir().expect("a temporary directory");
    let program = build_cm_basic(work.path(), &[]).expect("build cm_basic.c");
    let addr = "127.71.0.1";
    let run = run_on_uroce(&program, &[addr, "7471"], libs.path(), addr, Duration::from_secs(60));
    eprintln!("{}{}", run.stdout, run.stderr);
    assert_eq!(run.code, Some(0), "cm_basic on uroce: {run:?}");
    let steps = run.stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(steps, 17, "every step passed: {}", run.stdout);
    for step in [
        "ok: ADDR_RESOLVED through poll, id->verbs is uroce0",
        "ok: rdma_create_qp: QP in INIT on the id's PD, ibv_post_recv works",
        "ok: EADDRINUSE, port 0, EADDRNOTAVAIL",
        "ok: a connection through the device's CM: CONNECT_REQUEST, ESTABLISHED, DISCONNECTED",
        "ok: the listen backlog; a request's id destroyed before its ack",
        "ok: ADDR_ERROR for an address no device reaches",
        "ok: everything destroyed, no fd left open",
    ] {
        assert!(run.stdout.contains(step), "{step}: {}", run.stdout);
    }
}

#[test]
fn the_c_program_leaks_nothing_under_the_leak_sanitizer() {
    let test = "the_c_program_leaks_nothing_under_the_leak_sanitizer";
    if !require(test, have_headers(), "no <rdma/rdma_cma.h> (librdmacm-dev) or no cc") {
        return;
    }
    let work = tempfile::tempdir().expect("a temporary directory");
    // AddressSanitizer needs its runtime (libasan, with gcc): skip without.
    let program = match build_cm_basic(work.path(), &["-fsanitize=address"]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipping {test}: no AddressSanitizer ({e})");
            return;
        }
    };
    let libs = library_dir();
    let addr = "127.71.0.2";
    let run = run_on_uroce(&program, &[addr, "7472"], libs.path(), addr, Duration::from_secs(120));
    // LeakSanitizer fails the run (and prints "detected memory leaks") for
    // any block no longer reachable at exit: ids, events, channels,
    // addrinfo lists, path records the library failed to free.
    assert!(!run.stderr.contains("LeakSanitizer"), "leaks: {}", run.stderr);
    assert_eq!(run.code, Some(0), "cm_basic under ASan: {run:?}");
}

/// Waits (up to 20 s) until a uroce device receives at `addr` (its UDP
/// socket on port 4791 is bound): a REQ sent before would find no CM to
/// answer it and be retried for minutes, as on Linux. A server listens
/// right after its device opens; a client refused meanwhile tries again.
fn device_is_up(addr: &str) {
    let ip: std::net::Ipv4Addr = addr.parse().expect("an IPv4 address");
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        if table.lines().any(|l| l.split_whitespace().nth(1) == Some(want.as_str())) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no uroce device at {addr} after 20 s");
}

/// The rdmacm tools this file runs (`rdmacm-utils`).
const TOOLS: &[&str] = &["rping", "ucmatose", "udaddy", "rdma_server", "rdma_client"];

/// A server and a client of one tool on two uroce devices (two processes,
/// two loopback addresses), each bounded in time. The server gets a
/// moment to listen; a client refused meanwhile (the device answers a REQ
/// for a service nobody listens to yet with REJ 8) tries again.
fn server_and_client(
    name: &str,
    server: (&[&str], &str),
    client: (&[&str], &str),
    refused: &str,
) -> (Ended, Ended) {
    let program = tool(name).expect("checked");
    let libs = library_dir();
    let limit = Duration::from_secs(60);
    let srv = start_on_uroce(&program, server.0, libs.path(), server.1, &[], limit);
    device_is_up(server.1);
    let mut tries = 0;
    let cli = loop {
        tries += 1;
        let run = run_on_uroce(&program, client.0, libs.path(), client.1, limit);
        let all = format!("{}{}", run.stdout, run.stderr);
        if run.code == Some(0) || tries == 10 || !all.contains(refused) {
            break run;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let srv = if cli.code == Some(0) { srv.finish() } else { srv.kill() };
    eprintln!("{name} server {:?}: {srv:?}\n{name} client {:?}: {cli:?}", server.0, client.0);
    (srv, cli)
}

/// rping, with data verified, as on rxe: REQ/REP/RTU, ten RDMA
/// READ/WRITE/SEND rounds, DREQ/DREP; both exit 0.
#[test]
fn rping_runs_between_two_uroce_processes() {
    let test = "rping_runs_between_two_uroce_processes";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let (srv, cli) = server_and_client(
        "rping",
        (&["-s", "-a", "127.74.0.1", "-p", "7610", "-C", "10", "-S", "64", "-V"], "127.74.0.1"),
        (
            &["-c", "-a", "127.74.0.1", "-p", "7610", "-C", "10", "-S", "64", "-V", "-v"],
            "127.74.0.2",
        ),
        "REJECTED",
    );
    assert_eq!(cli.code, Some(0), "rping -c exits 0: {cli:?}");
    assert_eq!(srv.code, Some(0), "rping -s exits 0: {srv:?}");
    let pings = cli.stdout.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
    assert_eq!(pings, 10, "ten pings, verified (-V): {}", cli.stdout);
    assert!(!cli.stderr.contains("data mismatch") && !srv.stderr.contains("data mismatch"));
}

/// ucmatose: four connections at once, each with its messages both ways.
#[test]
fn ucmatose_connects_four_times() {
    let test = "ucmatose_connects_four_times";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let (srv, cli) = server_and_client(
        "ucmatose",
        (&["-b", "127.74.0.3", "-p", "7611", "-c", "4"], "127.74.0.3"),
        (&["-s", "127.74.0.3", "-p", "7611", "-c", "4"], "127.74.0.4"),
        "REJECTED",
    );
    assert_eq!(cli.code, Some(0), "ucmatose client exits 0: {cli:?}");
    assert_eq!(srv.code, Some(0), "ucmatose server exits 0: {srv:?}");
    assert!(cli.stdout.contains("data transfers complete"), "{cli:?}");
    assert!(srv.stdout.contains("disconnected") && srv.stdout.contains("return status 0"));
}

/// rdma_server and rdma_client: synchronous ids (`rdma_create_ep`,
/// `rdma_get_request`, `rdma_accept`, `rdma_connect` waiting for their
/// events), a message each way.
#[test]
fn rdma_server_and_rdma_client_exchange_a_message() {
    let test = "rdma_server_and_rdma_client_exchange_a_message";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let libs = library_dir();
    let limit = Duration::from_secs(60);
    let server = tool("rdma_server").expect("checked");
    let client = tool("rdma_client").expect("checked");
    let srv = start_on_uroce(
        &server,
        &["-s", "127.74.0.5", "-p", "7612"],
        libs.path(),
        "127.74.0.5",
        &[],
        limit,
    );
    device_is_up("127.74.0.5");
    let mut cli = run_on_uroce(
        &client,
        &["-s", "127.74.0.5", "-p", "7612"],
        libs.path(),
        "127.74.0.6",
        limit,
    );
    for _ in 0..10 {
        if cli.code == Some(0) || !cli.stderr.contains("Connection refused") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        cli = run_on_uroce(
            &client,
            &["-s", "127.74.0.5", "-p", "7612"],
            libs.path(),
            "127.74.0.6",
            limit,
        );
    }
    let srv = if cli.code == Some(0) { srv.finish() } else { srv.kill() };
    eprintln!("rdma_server: {srv:?}\nrdma_client: {cli:?}");
    assert_eq!(cli.code, Some(0), "rdma_client exits 0: {cli:?}");
    assert_eq!(srv.code, Some(0), "rdma_server exits 0: {srv:?}");
    assert!(cli.stdout.contains("rdma_client: end 0"), "{cli:?}");
    assert!(srv.stdout.contains("rdma_server: end 0"), "{srv:?}");
}

/// udaddy: UD through SIDR (SIDR_REQ, SIDR_REP with the QP and
/// `RDMA_UDP_QKEY`), then datagrams both ways on the address vector the
/// client's ESTABLISHED event carries.
#[test]
fn udaddy_resolves_a_ud_service_and_sends_datagrams() {
    let test = "udaddy_resolves_a_ud_service_and_sends_datagrams";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let (srv, cli) = server_and_client(
        "udaddy",
        (&["-b", "127.74.0.7"], "127.74.0.7"),
        (&["-s", "127.74.0.7"], "127.74.0.8"),
        "UNREACHABLE",
    );
    assert_eq!(cli.code, Some(0), "udaddy client exits 0: {cli:?}");
    assert_eq!(srv.code, Some(0), "udaddy server exits 0: {srv:?}");
    assert!(cli.stdout.contains("data transfers complete"), "{cli:?}");
    assert!(srv.stdout.contains("data transfers complete"), "{srv:?}");
}

/// A client of a port nothing listens to, on a device that is there:
/// the device's CM answers the REQ with REJ reason 8 (invalid service ID),
/// as Linux's, and every tool fails at once with REJECTED, status 8 (the
/// SIDR_REQ of udaddy: SIDR_REP status 1, "service not supported",
/// UNREACHABLE).
#[test]
fn a_client_of_a_port_nothing_listens_to_is_rejected() {
    let test = "a_client_of_a_port_nothing_listens_to_is_rejected";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let libs = library_dir();
    // A device at the server's address: an rping server on another port.
    let rping = tool("rping").expect("checked");
    let there = start_on_uroce(
        &rping,
        &["-s", "-a", "127.74.0.9", "-p", "7613"],
        libs.path(),
        "127.74.0.9",
        &[],
        Duration::from_secs(120),
    );
    device_is_up("127.74.0.9");
    let cases: &[(&str, &[&str], &str)] = &[
        ("ucmatose", &["-s", "127.74.0.9", "-p", "7614"], "RDMA_CM_EVENT_REJECTED, error: 8"),
        (
            "rping",
            &["-c", "-a", "127.74.0.9", "-p", "7614", "-C", "1"],
            "RDMA_CM_EVENT_REJECTED, error 8",
        ),
        ("rdma_client", &["-s", "127.74.0.9", "-p", "7614"], "rdma_connect: Connection refused"),
        ("udaddy", &["-s", "127.74.0.9"], "RDMA_CM_EVENT_UNREACHABLE, error: 1"),
    ];
    for (name, args, says) in cases {
        let program = tool(name).expect("checked");
        let started = Instant::now();
        let run = run_on_uroce(&program, args, libs.path(), "127.74.0.10", Duration::from_secs(30));
        let took = started.elapsed();
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(
            matches!(run.code, Some(c) if c != 0),
            "{name} {args:?} exits with an error code (not a signal, not a hang): {run:?}"
        );
        assert!(all.contains(says), "{name} {args:?} says {says:?}: {all}");
        assert!(took < Duration::from_secs(10), "{name} is refused at once: {took:?}");
        eprintln!("{name} {}: exit {:?} in {took:?}: {says}", args.join(" "), run.code);
    }
    let srv = there.kill();
    assert!(srv.code.is_none(), "the rping server was still waiting: {srv:?}");
}

/// perftest with `-R` (its QPs made and connected through the RDMA CM,
/// `rdma_cm` the data exchange method): the server (`<tool> -R`) on one uroce
/// device, the client (`<tool> -R <server>`) on another once the server
/// waits; both exit 0 and print their result row.
fn perftest_rdma_cm(name: &str, net: &str, port: u16, extra: &[&str]) {
    let test = format!("{name} -R");
    let Some(program) = tool(name) else {
        require(&test, false, &format!("no {name} (Debian's perftest)"));
        return;
    };
    // One pair at a time: perftest's race (below) is likelier under load.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let libs = library_dir();
    let port = port.to_string();
    let mut args = vec!["-R", "-d", "uroce0", "-x", "1", "-p", &port, "-n", "5"];
    args.extend_from_slice(extra);
    let limit = Duration::from_secs(60);
    // perftest -R connects twice: the connection its data exchange goes
    // over, then the test's, for which the server listens again only after
    // the exchange. A client whose second REQ comes first is refused (REJ 8,
    // as Linux's CM refuses it), and its retry loop
    // (rdma_cm_client_connection) reuses the ids it destroyed, which ends it
    // (on uroce: an abort on the freed id) while the server waits on the
    // dead first connection. Then the pair starts again, on new devices.
    let mut attempt = 0;
    let (srv, cli) = loop {
        attempt += 1;
        let (srv_addr, cli_addr) =
            (format!("{net}.{}", 2 * attempt - 1), format!("{net}.{}", 2 * attempt));
        let srv = start_logged(&program, &args, libs.path(), &srv_addr, limit);
        srv.wait_for("Waiting for client to connect");
        device_is_up(&srv_addr);
        std::thread::sleep(Duration::from_secs(1));
        let mut client_args = args.clone();
        client_args.push(&srv_addr);
        let cli = run_on_uroce(&program, &client_args, libs.path(), &cli_addr, limit);
        if cli.code == Some(0) {
            break (srv.finish(), cli);
        }
        let srv = srv.kill();
        eprintln!("{name} -R attempt {attempt}: client exit {:?}: {}", cli.code, cli.stderr);
        if attempt == 6 || !cli.stderr.contains("RDMA_CM_EVENT_REJECTED") {
            break (srv, cli);
        }
    };
    eprintln!("{name} -R server: {srv:?}\n{name} -R client: {cli:?}");
    assert_eq!(cli.code, Some(0), "{name} -R client exits 0: {cli:?}");
    assert_eq!(srv.code, Some(0), "{name} -R server exits 0: {srv:?}");
    for (side, end) in [("server", &srv), ("client", &cli)] {
        assert!(end.stdout.contains("Data ex. method : rdma_cm"), "{name} {side}: {end:?}");
        let row = end.stdout.lines().find(|l| {
            let cols: Vec<_> = l.split_whitespace().collect();
            cols.len() >= 4 && cols.iter().all(|c| c.parse::<f64>().is_ok())
        });
        assert!(row.is_some(), "{name} -R {side} prints its result row: {}", end.stdout);
    }
}

#[test]
fn ib_send_bw_connects_through_the_rdma_cm() {
    perftest_rdma_cm("ib_send_bw", "127.74.2", 7620, &["-s", "4096"]);
}

#[test]
fn ib_write_lat_connects_through_the_rdma_cm() {
    perftest_rdma_cm("ib_write_lat", "127.74.3", 7621, &["-s", "64"]);
}

#[test]
fn ib_read_bw_connects_through_the_rdma_cm() {
    perftest_rdma_cm("ib_read_bw", "127.74.4", 7622, &["-s", "65536"]);
}

#[test]
fn ib_write_bw_connects_through_the_rdma_cm() {
    perftest_rdma_cm("ib_write_bw", "127.74.5", 7623, &["-s", "65536"]);
}

/// The CM MADs of a uroce capture (`UROCE_CAPTURE`: Ethernet frames, every
/// packet the device sent and received, after its faults): (seconds since
/// the epoch, source address, attribute ID) of each UD SEND to QP1 whose
/// MAD is of the CM class.
fn cm_mads(pcap: &Path) -> Vec<(f64, std::net::Ipv4Addr, u16)> {
    let bytes = std::fs::read(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    assert!(bytes.len() >= 24, "a pcap file: {}", pcap.display());
    // The magic number in the file's byte order (uroce writes big-endian),
    // 0xa1b23c4d for nanoseconds.
    let big = bytes[0] == 0xa1;
    let u32_at = |b: &[u8], at: usize| {
        let word = b[at..at + 4].try_into().unwrap();
        if big {
            u32::from_be_bytes(word)
        } else {
            u32::from_le_bytes(word)
        }
    };
    let frac = if u32_at(&bytes, 0) == 0xa1b2_3c4d { 1e-9 } else { 1e-6 };
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let time = f64::from(u32_at(&bytes, at)) + f64::from(u32_at(&bytes, at + 4)) * frac;
        let len = u32_at(&bytes, at + 8) as usize;
        let frame = &bytes[at + 16..(at + 16 + len).min(bytes.len())];
        at += 16 + len;
        // Ethernet (14), IPv4 (IHL), UDP (8) to 4791, BTH (12), DETH (8), MAD.
        if frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let Some(udp) = ip.get(ihl..) else { continue };
        if udp.len() < 8 + 12 + 8 + 24 || udp[2..4] != 4791u16.to_be_bytes() {
            continue;
        }
        let bth = &udp[8..];
        let dest_qp = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
        let mad = &bth[20..];
        if bth[0] != 0x64 || dest_qp != 1 || mad[1] != 0x07 {
            continue;
        }
        let source = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        out.push((time, source, u16::from_be_bytes([mad[16], mad[17]])));
    }
    out
}

const REQ: u16 = 0x0010;
const REP: u16 = 0x0013;
const RTU: u16 = 0x0014;

/// The (lost, duplicated) verdicts `spec`'s injector gives a device's first
/// `n` packets (the same for any packet: only corruption reads it).
fn verdicts(spec: &str, n: usize) -> Vec<(bool, bool)> {
    let spec = uroce_faults::FaultSpec::parse(spec).expect("a fault specification");
    let mut injector = uroce_faults::Injector::new(spec);
    (0..n).map(|_| injector.apply(&[0; 64])).map(|v| (v.lost(), v.duplicated())).collect()
}

/// The first seed from `from` whose verdicts satisfy `good`.
fn seed(faults: &str, from: u64, good: impl Fn(&[(bool, bool)]) -> bool) -> u64 {
    (from..from + 100_000)
        .find(|s| good(&verdicts(&format!("{faults},seed={s}"), 80)))
        .expect("a seed")
}

/// rping on two lossy devices (`UROCE_FAULTS=loss=0.2,dup=0.1,seed=…` on
/// both): seeds picked so that the client's first packet, its REQ, is lost
/// (the CM sends it again after its response timeout, ≈ 6.4 s: `2 ×
/// packet life 18 + CM response timeout 20`, as Linux's), the server's
/// first, its REP, is duplicated (the client's CM takes one and answers the
/// copy with the RTU again, as Linux's), and a few of the data packets after
/// are lost (RC retransmissions). Both exit 0 with their pings verified;
/// the captures show what the faults did to the MADs (pings of 4 KiB, so
/// that the captures' buffers reach their files while the programs run:
/// rping exits without closing its devices).
#[test]
fn rping_completes_when_the_devices_lose_and_duplicate_packets() {
    let test = "rping_completes_when_the_devices_lose_and_duplicate_packets";
    if !rdmacm_tools(test, TOOLS) {
        return;
    }
    let faults = "loss=0.2,dup=0.1";
    let few = |v: &[(bool, bool)]| v[4..].iter().filter(|f| f.0).count() <= 4;
    // Client: REQ lost, its retransmission, the RTU (and one for the REP's
    // copy) go; a few data packets lost.
    let client_seed =
        seed(faults, 1, |v| v[0].0 && !v[1].0 && !v[1].1 && !v[2].0 && !v[3].0 && few(v));
    // Server: the REP goes twice; a few data packets lost.
    let server_seed = seed(faults, 1, |v| !v[0].0 && v[0].1 && few(v));
    let rping = tool("rping").expect("checked");
    let libs = library_dir();
    let (srv_addr, cli_addr) = ("127.74.6.1", "127.74.6.2");
    let caps = tempfile::tempdir().expect("a temporary directory");
    let (srv_cap, cli_cap) = (caps.path().join("server.pcap"), caps.path().join("client.pcap"));
    let start = |args: &[&str], addr: &str, seed: u64, cap: &Path| {
        let faults = format!("{faults},seed={seed}");
        let cap = cap.to_str().expect("a UTF-8 path");
        let env = [("UROCE_FAULTS", faults.as_str()), ("UROCE_CAPTURE", cap)];
        start_on_uroce(&rping, args, libs.path(), addr, &env, Duration::from_secs(60))
    };
    let srv = start(
        &["-s", "-a", srv_addr, "-p", "7630", "-C", "5", "-S", "4096", "-V"],
        srv_addr,
        server_seed,
        &srv_cap,
    );
    device_is_up(srv_addr);
    // The server listens right after its device opens.
    std::thread::sleep(Duration::from_millis(500));
    let began = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let started = Instant::now();
    let cli = start(
        &["-c", "-a", srv_addr, "-p", "7630", "-C", "5", "-S", "4096", "-V", "-v"],
        cli_addr,
        client_seed,
        &cli_cap,
    )
    .finish();
    let took = started.elapsed();
    let srv = if cli.code == Some(0) { srv.finish() } else { srv.kill() };
    eprintln!(
        "seeds: client {client_seed}, server {server_seed}; {took:?}; server exit {:?}: {}; \
         client exit {:?}: {}",
        srv.code, srv.stderr, cli.code, cli.stderr
    );
    let pings = cli.stdout.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
    assert_eq!(cli.code, Some(0), "rping -c exits 0 ({pings} pings)");
    assert_eq!(srv.code, Some(0), "rping -s exits 0");
    assert_eq!(pings, 5, "five pings, verified");
    let srv_ip: std::net::Ipv4Addr = srv_addr.parse().unwrap();
    let cli_ip: std::net::Ipv4Addr = cli_addr.parse().unwrap();
    let client = cm_mads(&cli_cap);
    let server = cm_mads(&srv_cap);
    eprintln!("CM MADs: client's capture {client:x?}, server's {server:x?}");
    let count = |mads: &[(f64, std::net::Ipv4Addr, u16)], from: std::net::Ipv4Addr, attr: u16| {
        mads.iter().filter(|m| m.1 == from && m.2 == attr).count()
    };
    // The first REQ never left (lost), so the one the client's capture
    // holds is the CM's retransmission, a response timeout after the start.
    let reqs: Vec<_> = client.iter().filter(|m| m.1 == cli_ip && m.2 == REQ).collect();
    assert_eq!(reqs.len(), 1, "one REQ left the client: {client:x?}");
    let after = reqs[0].0 - began.as_secs_f64();
    assert!(after > 4.0, "the REQ that left is the retransmission ({after:.1} s after the start)");
    assert_eq!(count(&server, cli_ip, REQ), 1, "the server received one REQ");
    // The REP went twice; the client received both and connected once.
    assert_eq!(count(&server, srv_ip, REP), 2, "the server's REP and its copy");
    assert_eq!(count(&client, srv_ip, REP), 2, "the client received the REP twice");
    assert!(count(&client, cli_ip, RTU) >= 1, "the client sent the RTU");
    assert!(count(&server, cli_ip, RTU) >= 1, "the server received the RTU");
}
