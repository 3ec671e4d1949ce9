//! uroce's `librdmacm.so.1` from outside: its exports against the
//! system's library, a C program built against the real
//! `<rdma/rdma_cma.h>` run on uroce's two libraries (and again under
//! AddressSanitizer's leak checker), and Debian's rdmacm tools run end to
//! end between two uroce processes (rping, ucmatose, rdma_server and
//! rdma_client, udaddy), and refused where nothing listens.
//!
//! Without the Debian packages (`librdmacm-dev`, `rdmacm-utils`, a C
//! compiler, binutils) a test prints why it skips; under `CI=true` it
//! fails.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn strict() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// True when `ok`; otherwise prints why `test` skips (or panics under CI).
fn require(test: &str, ok: bool, missing: &str) -> bool {
    if !ok {
        assert!(!strict(), "{test}: {missing} (CI=true: nothing may be missing)");
        eprintln!("skipping {test}: {missing}");
    }
    ok
}

/// A program on `PATH`.
fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// A library cargo built beside the tests (target/<profile>/).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("deps/");
    [deps.join(name), deps.join("..").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("cargo builds {name} beside the tests"))
}

/// A directory holding uroce's `libibverbs.so.1` and `librdmacm.so.1`, for
/// `LD_LIBRARY_PATH` (as `uroce run` makes it).
fn library_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (file, soname) in [("libibverbs.so", "libibverbs.so.1"), ("librdmacm.so", "librdmacm.so.1")]
    {
        let lib = built(file).canonicalize().expect("the library's path");
        std::os::unix::fs::symlink(lib, dir.path().join(soname)).expect("link the library");
    }
    dir
}

/// What a process did.
#[derive(Debug)]
struct Ended {
    /// Exit code (None: killed by the deadline or a signal).
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `program` on uroce's libraries, its device at `addr`, for at
/// most `limit`.
fn run_on_uroce(program: &Path, args: &[&str], dir: &Path, addr: &str, limit: Duration) -> Ended {
    start_on_uroce(program, args, dir, addr, limit).finish()
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
    assert_eq!(steps, 16, "every step passed: {}", run.stdout);
    for step in [
        "ok: ADDR_RESOLVED through poll, id->verbs is uroce0",
        "ok: rdma_create_qp: QP in INIT on the id's PD, ibv_post_recv works",
        "ok: EADDRINUSE, port 0, EADDRNOTAVAIL",
        "ok: a connection through the device's CM: CONNECT_REQUEST, ESTABLISHED, DISCONNECTED",
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

/// A process started on uroce's libraries, its device at `addr`.
struct Running {
    child: std::process::Child,
    deadline: Instant,
}

fn start_on_uroce(
    program: &Path,
    args: &[&str],
    dir: &Path,
    addr: &str,
    limit: Duration,
) -> Running {
    let child = Command::new(program)
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("UROCE_ADDR", addr)
        .env_remove("UROCE_LINK")
        .env_remove("UROCE_TAP")
        .env_remove("UROCE_FAULTS")
        .env_remove("UROCE_CAPTURE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    Running { child, deadline: Instant::now() + limit }
}

impl Running {
    /// Waits for the exit, killing the process at its deadline.
    fn finish(mut self) -> Ended {
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if Instant::now() < self.deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        let (mut stdout, mut stderr) = (String::new(), String::new());
        if let Some(mut out) = self.child.stdout.take() {
            let _ = out.read_to_string(&mut stdout);
        }
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        Ended { code, stdout, stderr }
    }

    /// Kills the process now (a server that would wait forever).
    fn stop(mut self) -> Ended {
        self.deadline = Instant::now();
        self.finish()
    }
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

/// The rdmacm tools this file runs, when installed (`rdmacm-utils`).
fn rdmacm_tools(test: &str) -> bool {
    let tools = ["rping", "ucmatose", "udaddy", "rdma_server", "rdma_client"];
    require(test, tools.iter().all(|t| tool(t).is_some()), "no rdmacm tools (rdmacm-utils)")
}

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
    let srv = start_on_uroce(&program, server.0, libs.path(), server.1, limit);
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
    let srv = if cli.code == Some(0) { srv.finish() } else { srv.stop() };
    eprintln!("{name} server {:?}: {srv:?}\n{name} client {:?}: {cli:?}", server.0, client.0);
    (srv, cli)
}

/// rping, with data verified, as on rxe: REQ/REP/RTU, ten RDMA
/// READ/WRITE/SEND rounds, DREQ/DREP; both exit 0.
#[test]
fn rping_runs_between_two_uroce_processes() {
    let test = "rping_runs_between_two_uroce_processes";
    if !rdmacm_tools(test) {
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
    if !rdmacm_tools(test) {
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
    if !rdmacm_tools(test) {
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
    let srv = if cli.code == Some(0) { srv.finish() } else { srv.stop() };
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
    if !rdmacm_tools(test) {
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
    if !rdmacm_tools(test) {
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
    let srv = there.stop();
    assert!(srv.code.is_none(), "the rping server was still waiting: {srv:?}");
}
