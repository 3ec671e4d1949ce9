//! `uroce demo` and `uroce devinfo`, run in-process on loopback addresses
//! of their own (127.85.0.x), so that they do not collide with other tests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use uroce_tests::report::{assert_no_counters, assert_traffic_counted};

/// Runs the `uroce` command line `args`; returns (status, stdout, stderr).
fn uroce(args: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("uroce").chain(args.iter().copied());
    let status = uroce::cli::run(argv, &mut out, &mut err);
    (status, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// The steps every demo run must show as passed (summary table titles).
const STEPS: [&str; 14] = [
    "RC SEND, 10 KiB (multi-packet)",
    "RC SEND with immediate",
    "RC RDMA WRITE",
    "RC RDMA WRITE with immediate",
    "RC RDMA READ (multi-packet)",
    "RC COMPARE_SWAP",
    "RC FETCH_ADD",
    "UC SEND and RDMA WRITE",
    "UD SEND with an address handle",
    "SRQ receive (shared receive queue)",
    "memory window: bind, then WRITE/READ",
    "RNR: SEND before the receive",
    "bad R_Key: REM_ACCESS_ERR",
    "faults: loss on A, retransmission",
];

/// Checks the summary table: every step, in order, passed.
fn assert_all_passed(out: &str) {
    let table: Vec<&str> = out.lines().skip_while(|l| *l != "summary").skip(1).collect();
    for (i, step) in STEPS.iter().enumerate() {
        let row = table
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{} ", i + 1)) && l.contains(step))
            .unwrap_or_else(|| panic!("no summary row for step {} ({step}):\n{out}", i + 1));
        assert!(row.contains(" passed "), "step {} did not pass: {row}\n{out}", i + 1);
    }
    assert!(out.contains("all 14 steps passed"), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
}

#[test]
fn demo_runs_every_step_and_passes() {
    let started = std::time::Instant::now();
    let (status, out, err) = uroce(&["demo", "--addrs", "127.85.0.1,127.85.0.2", "--counters"]);
    assert_eq!(status, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_all_passed(&out);
    // Both devices' counters, both phases added up, on stderr only.
    let a = assert_traffic_counted(&err, "127.85.0.1", 20);
    let b = assert_traffic_counted(&err, "127.85.0.2", 20);
    assert!(a.get("rcvd_rnr_err").is_some_and(|&n| n >= 1), "A met B's RNR NAK: {a:?}");
    assert!(a.get("completer_retry_err").is_some_and(|&n| n >= 1), "A went back: {a:?}");
    assert!(b.get("send_rnr_err").is_some_and(|&n| n >= 1), "B sent an RNR NAK: {b:?}");
    assert_no_counters(&out);
    // The trace shows the wire and the completions a learner looks for.
    for needle in [
        "127.85.0.1 → 127.85.0.2  RC_SEND_FIRST",
        "RC_SEND_MIDDLE ×8",
        "RC_RDMA_READ_RESPONSE_MIDDLE ×6",
        "RECV_RDMA_WITH_IMM SUCCESS",
        "UD_SEND_ONLY",
        "GRH",
        "RNR-NAK",
        "B.send_rnr_err +1",
        "RDMA_WRITE REM_ACCESS_ERR",
        "NAK remote-access-error",
        "NAK psn-sequence-error",
        "A.completer_retry_err +",
        "check data ok",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn demo_capture_decodes_cleanly_with_every_opcode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.pcap");
    let path_text = path.to_str().unwrap();
    let (status, out, err) =
        uroce(&["demo", "--addrs", "127.85.0.4,127.85.0.5", "--capture", path_text]);
    assert_eq!(status, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_all_passed(&out);
    assert!(out.contains("capture: "), "{out}");
    assert_no_counters(&err);

    let (status, tsv, err) = uroce(&["decode", "--format", "tsv", path_text]);
    assert_eq!(status, 0, "every frame well formed with a good ICRC:\n{tsv}\n{err}");
    let mut opcodes: BTreeMap<String, usize> = BTreeMap::new();
    for line in tsv.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 10, "{line}");
        assert_eq!(fields[9], "ok", "{line}");
        assert!(fields[1].starts_with("127.85.0.") && fields[2].starts_with("127.85.0."), "{line}");
        *opcodes.entry(fields[4].to_string()).or_default() += 1;
    }
    for name in [
        "RC_SEND_FIRST",
        "RC_SEND_MIDDLE",
        "RC_SEND_LAST",
        "RC_SEND_ONLY",
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE",
        "RC_RDMA_WRITE_LAST",
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_ONLY",
        "RC_RDMA_READ_REQUEST",
        "RC_RDMA_READ_RESPONSE_FIRST",
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        "RC_RDMA_READ_RESPONSE_LAST",
        "RC_RDMA_READ_RESPONSE_ONLY",
        "RC_ACKNOWLEDGE",
        "RC_ATOMIC_ACKNOWLEDGE",
        "RC_COMPARE_SWAP",
        "RC_FETCH_ADD",
        "UC_SEND_FIRST",
        "UC_SEND_LAST",
        "UC_RDMA_WRITE_FIRST",
        "UC_RDMA_WRITE_LAST",
        "UD_SEND_ONLY",
    ] {
        assert!(opcodes.contains_key(name), "no {name} in the capture: {opcodes:?}");
    }
    let last = tsv.lines().last().unwrap_or_default();
    assert!(last.starts_with("# frames="), "{last}");
}

#[test]
fn a_capture_file_that_cannot_be_created_ends_the_demo_before_any_step() {
    let path = "/no/such/dir/demo.pcap";
    let started = Instant::now();
    let (status, out, err) =
        uroce(&["demo", "--addrs", "127.85.0.8,127.85.0.9", "--capture", path]);
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    assert_eq!(status, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(out, "", "no step ran");
    assert!(err.contains(&format!("cannot create the capture file {path}")), "{err}");
    assert!(err.contains("No such file or directory"), "the OS's reason: {err}");
}

#[test]
fn a_capture_file_that_cannot_be_written_fails_the_demo() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here: nothing to test");
        return;
    }
    let (status, out, err) =
        uroce(&["demo", "--addrs", "127.85.0.10,127.85.0.11", "--capture", "/dev/full"]);
    assert_eq!(status, 1, "stdout:\n{out}\nstderr:\n{err}");
    let why = "could not write the capture file /dev/full: No space left on device";
    assert!(err.contains(&format!("uroce demo: {why}")), "{err}");
    assert!(!err.contains("reading") && !out.contains("reading"), "{out}{err}");
    let verdict = out.lines().last().unwrap_or_default();
    assert!(verdict.starts_with(&format!("FAILED: {why}")), "{verdict}");
    assert!(!out.contains("steps passed"), "{out}");
}

#[test]
fn demo_refuses_bad_addresses() {
    let (status, _, err) = uroce(&["demo", "--addrs", "127.85.0.6"]);
    assert_eq!(status, 2, "{err}");
    let (status, _, err) = uroce(&["demo", "--addrs", "127.85.0.6,127.85.0.6"]);
    assert_eq!(status, 2, "{err}");
}

#[test]
fn devinfo_verbose_looks_like_ibv_devinfo() {
    let (status, out, err) = uroce(&["devinfo", "-v", "--addr", "127.85.0.3"]);
    assert_eq!(status, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.starts_with("hca_id:\turoce0\n"), "{out}");
    for needle in [
        "\ttransport:\t\t\tInfiniBand (0)\n",
        // MAC 02:00:7f:55:00:03, EUI-64.
        "\tnode_guid:\t\t\t0000:7fff:fe55:0003\n",
        "\tphys_port_cnt:\t\t\t1\n",
        "\tmax_qp:\t\t\t\t",
        "\tmax_srq_sge:\t\t\t",
        "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
        "\t\t\tmax_mtu:\t\t4096 (5)\n",
        "\t\t\tlink_layer:\t\tEthernet\n",
        "\t\t\tGID[  0]:\t\tfe80::7fff:fe55:3, RoCE v2\n",
        "\t\t\tGID[  1]:\t\t::ffff:127.85.0.3, RoCE v2\n",
    ] {
        assert!(out.contains(needle), "{needle:?} missing from:\n{out}");
    }
    // Without -v: no max_* lines and no GIDs, as ibv_devinfo. Another
    // address: a child another test of this binary forks at the moment the
    // first device closes holds its socket until it execs, and the same
    // address could then not be bound again at once.
    let (status, short, err) = uroce(&["devinfo", "--addr", "127.85.0.16"]);
    assert_eq!(status, 0, "stdout:\n{short}\nstderr:\n{err}");
    assert!(!short.contains("max_qp") && !short.contains("GID["), "{short}");
    assert!(short.contains("\t\tport:\t1\n"), "{short}");
}

#[test]
fn devinfo_flags() {
    let (status, out, _) = uroce(&["devinfo", "-l"]);
    assert_eq!(status, 0);
    assert_eq!(out, "1 HCA found:\n\turoce0\n\n");
    let (status, _, err) = uroce(&["devinfo", "--addr", "127.85.0.7", "-d", "mlx5_0"]);
    assert_eq!(status, 1);
    assert!(err.contains("IB device 'mlx5_0' wasn't found"), "{err}");
    let (status, _, err) = uroce(&["devinfo", "--addr", "127.85.0.7", "-i", "2"]);
    assert_eq!(status, 4, "{err}");
    assert_eq!(uroce(&["devinfo", "--bogus"]).0, 2);
    assert_eq!(uroce(&["devinfo", "-i", "0"]).0, 2);
}

#[test]
fn devinfo_checks_its_capture_file_too() {
    let (status, out, err) =
        uroce(&["devinfo", "--addr", "127.85.0.12", "--capture", "/no/such/dir/devinfo.pcap"]);
    assert_eq!(status, 1, "{out}{err}");
    assert!(err.contains("cannot create the capture file /no/such/dir/devinfo.pcap"), "{err}");
    assert_eq!(out, "");
    if std::path::Path::new("/dev/full").exists() {
        let (status, out, err) =
            uroce(&["devinfo", "--addr", "127.85.0.13", "--capture", "/dev/full"]);
        assert_eq!(status, 1, "{out}{err}");
        let why = "could not write the capture file /dev/full: No space left on device";
        assert!(err.contains(&format!("uroce devinfo: {why}")), "{err}");
    }
}

#[test]
fn demo_trace_shows_each_steps_decisions_beside_its_packets() {
    let (status, out, err) = uroce(&["demo", "--addrs", "127.85.0.14,127.85.0.15", "--trace"]);
    assert_eq!(status, 0, "{out}{err}");
    assert_all_passed(&out);
    assert!(!err.contains("trace "), "the demo prints its decisions itself: {err}");
    let step = |n: u32| {
        let start = out.find(&format!("[{n}] ")).expect("the step");
        let end = out[start..].find("\n\n").map_or(out.len(), |e| start + e);
        out[start..end].to_string()
    };
    let first = step(1);
    assert!(first.contains("    hca   A  QP 0x000010: response RC_ACKNOWLEDGE"), "{first}");
    assert!(
        first.contains("B  QP 0x000010: request RC_SEND_FIRST PSN 0: in sequence, executed"),
        "{first}"
    );
    assert!(first.contains("B  QP 0x000010: completion on CQ"), "{first}");
    let rnr = step(12);
    assert!(rnr.contains("refused, RNR-NAK"), "{rnr}");
    assert!(rnr.contains("RNR wait"), "{rnr}");
    let bad_key = step(13);
    assert!(bad_key.contains("refused, NAK remote-access-error"), "{bad_key}");
    let faults = step(14);
    assert!(faults.contains("go back to PSN"), "{faults}");
}

/// The README's main command, `cargo run --release -- demo`, names no
/// binary: with several binaries in the workspace's default members (the
/// `uroce` command and the tests crate's `uroce-perf`), cargo runs the
/// root package's `default-run`, and refuses to choose without it.
#[test]
fn the_readmes_cargo_run_picks_the_uroce_command() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline", "--manifest-path"])
        .arg(root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = String::from_utf8_lossy(&out.stdout);
    let at = json.find("\"name\":\"uroce\",").expect("the uroce package in the metadata");
    let package = &json[at..];
    let end = package.find("\"default_run\":").expect("a default_run field");
    assert!(
        package[end..].starts_with("\"default_run\":\"uroce\""),
        "the root package must say default-run = \"uroce\" (cargo run -- demo)"
    );
}
