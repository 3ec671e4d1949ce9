//! The interop matrix (`tests/interop/matrix.sh`): uroce against Linux
//! `rdma_rxe` in a qemu VM, every row in both directions, data checked
//! by the tools and every capture checked by `uroce decode`; once against
//! the rxe of Debian 12's default kernel (6.1, [`interop_matrix`]) and
//! once against its Linux 6.12 (`--kernel 6.12`,
//! [`interop_matrix_linux_6_12`]: every row again, and the ATOMIC_WRITE
//! and FLUSH rows). The two run one after the other (a lock), each within
//! its own bound.
//!
//! The matrix needs qemu and Debian bookworm's apt sources (the VM's
//! kernel, rdma-core and perftest come from them). As root, the test
//! first runs `tests/interop/install.sh`. Without qemu or bookworm it
//! fails under `CI=true` and is skipped otherwise, saying why;
//! `UROCE_INTEROP=0` skips it on a developer's machine (never under CI);
//! `UROCE_INTEROP_ROWS=PATTERN` runs only the rows whose id matches
//! (`matrix.sh --rows`); `UROCE_INTEROP_KERNELS=6.12` (a comma-separated
//! list; default `6.1,6.12`) runs only these kernels' matrices, the others'
//! tests say they skipped (never under CI).
//!
//! The uroce side is this test binary itself: the `uroce` command's code
//! is a library, and a test of this package cannot name the `uroce`
//! package's binary, so a small script hands its arguments to the
//! [`uroce_child`] test below, which runs `uroce::cli::run` on them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The child's arguments (after `uroce`), separated by
/// [`uroce_tests::child::SEP`]; absent in
/// the parent.
const CHILD_ENV: &str = "UROCE_INTEROP_CHILD";
/// One kernel's matrix, image build included, must end within this bound
/// (about 7 minutes each on 2 cores; this is the backstop if it hangs).
const MATRIX_LIMIT_SECS: u64 = 20 * 60;
/// One matrix at a time: the two kernels' tests would share 2 cores and
/// the rows' time bounds (the VMs run under TCG).
static ONE_MATRIX: Mutex<()> = Mutex::new(());

/// The child: runs the `uroce` command with the arguments in
/// [`CHILD_ENV`] and exits with its status.
#[test]
fn uroce_child() {
    uroce_tests::child::run_if_child(CHILD_ENV);
}

fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips the test (outside CI) or fails it (under CI), saying why.
fn cannot_run(why: &str) {
    assert!(!under_ci(), "the interop matrix must run under CI=true, but: {why}");
    eprintln!("interop matrix SKIPPED: {why}");
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|line| {
            line.strip_prefix("Uid:").and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
        })
    })
}

/// Why this host cannot build or boot the rxe VM, if it cannot.
fn host_problem() -> Option<String> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Some(
            "the rxe VM image is built from Debian amd64 packages: x86-64 Linux only".into(),
        );
    }
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if !os.lines().any(|line| line.trim() == "VERSION_CODENAME=bookworm") {
        return Some(
            "not Debian bookworm: tests/interop/vm/build.sh takes the VM's kernel and rdma-core \
             from bookworm's apt sources"
                .into(),
        );
    }
    match Command::new("qemu-system-x86_64").arg("--version").stdout(Stdio::null()).status() {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!("qemu-system-x86_64 --version failed ({status})")),
        Err(e) => Some(format!(
            "no qemu-system-x86_64 ({e}): run tests/interop/install.sh as root, or apt-get install \
             qemu-system-x86"
        )),
    }
}

/// A script that runs this test binary as the `uroce` command.
fn uroce_wrapper(dir: &Path) -> PathBuf {
    uroce_tests::child::uroce_wrapper(dir, "uroce_child", CHILD_ENV)
}

/// The rows `UROCE_INTEROP_ROWS` asks for (every row when unset or empty).
fn rows_asked() -> Option<String> {
    std::env::var("UROCE_INTEROP_ROWS").ok().filter(|rows| !rows.is_empty())
}

/// The kernels `UROCE_INTEROP_KERNELS` asks for (both when unset or empty).
fn kernel_asked(kernel: &str) -> bool {
    match std::env::var("UROCE_INTEROP_KERNELS") {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|k| k.trim() == kernel),
        _ => true,
    }
}

/// The matrix against the rxe of Debian 12's default kernel, Linux 6.1.
#[test]
fn interop_matrix() {
    run_matrix("6.1");
}

/// The matrix against the rxe of Debian 12's Linux 6.12
/// (`linux-image-6.12-amd64`): every row, and the IBA 1.5 rows
/// (ATOMIC_WRITE both ways, FLUSH from uroce).
#[test]
fn interop_matrix_linux_6_12() {
    run_matrix("6.12");
}

fn run_matrix(kernel: &str) {
    if !kernel_asked(kernel) {
        assert!(!under_ci(), "UROCE_INTEROP_KERNELS is for developers: under CI=true both run");
        eprintln!("interop matrix (Linux {kernel}) SKIPPED: not in UROCE_INTEROP_KERNELS");
        return;
    }
    let _one = ONE_MATRIX.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if std::env::var("UROCE_INTEROP").as_deref() == Ok("0") {
        assert!(
            !under_ci(),
            "UROCE_INTEROP=0 is for developers: under CI=true the matrix must run"
        );
        eprintln!("interop matrix SKIPPED: UROCE_INTEROP=0");
        return;
    }
    let interop = repo_root().join("tests/interop");
    if is_root() {
        let status = Command::new("bash")
            .arg(interop.join("install.sh"))
            .stdout(std::io::stderr())
            .status()
            .expect("run tests/interop/install.sh");
        if !status.success() {
            return cannot_run(&format!("tests/interop/install.sh failed ({status})"));
        }
    }
    if let Some(why) = host_problem() {
        return cannot_run(&why);
    }
    if let Some(rows) = rows_asked() {
        // A pattern may name rows of one kernel only (atomic_write, flush: 6.12).
        let listed = Command::new("bash")
            .arg(interop.join("matrix.sh"))
            .args(["--list", "--kernel", kernel, "--rows", &rows])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run tests/interop/matrix.sh --list");
        if !listed.success() {
            eprintln!("interop matrix (Linux {kernel}) SKIPPED: no row matches '{rows}'");
            return;
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let uroce = uroce_wrapper(dir.path());
    // Everything the matrix prints goes to this process's stderr as it
    // comes: the progress lines, a failed row's tails and the summary
    // table show with or without --nocapture.
    let status = Command::new("timeout")
        .args(["-k", "30", &MATRIX_LIMIT_SECS.to_string(), "bash"])
        .arg(interop.join("matrix.sh"))
        .arg("--uroce")
        .arg(&uroce)
        .args(["--kernel", kernel])
        .args(rows_asked().map(|rows| ["--rows".to_string(), rows]).into_iter().flatten())
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .expect("run tests/interop/matrix.sh");
    assert!(
        status.success(),
        "the interop matrix against Linux {kernel} failed ({status}{}): see the summary table \
         above; artifacts in tests/interop/build/linux-{kernel}/matrix/latest/{}",
        if status.code() == Some(124) {
            format!(", stopped after {} minutes", MATRIX_LIMIT_SECS / 60)
        } else {
            String::new()
        },
        failed_rows(&interop, kernel)
    );
}

/// The failed rows of the kernel's latest summary, a line each (with the
/// reason, what the tool printed last and what the guest kernel said), so
/// the failure message carries them even where only its end is shown.
fn failed_rows(interop: &Path, kernel: &str) -> String {
    let base = std::env::var_os("RXEVM_BUILD").map_or_else(|| interop.join("build"), PathBuf::from);
    let summary = base.join(format!("linux-{kernel}/matrix/latest/summary.tsv"));
    let Ok(text) = std::fs::read_to_string(&summary) else {
        return String::new();
    };
    text.lines()
        .filter(|line| line.split('\t').nth(2) == Some("FAIL"))
        .map(|line| format!("\n  {}", line.replace('\t', "  ")))
        .collect()
}

/// What an RC_ATOMIC_WRITE request and its answer look like on the wire,
/// less what differs from connection to connection (QPNs, PSNs, rkeys,
/// addresses, IPv4 IDs, UDP ports).
#[derive(Debug, Clone, PartialEq, Eq)]
struct AtomicWriteExchange {
    /// The request frame's length.
    request_len: usize,
    /// BTH: AckReq, SE, pad count, TVer, P_Key.
    request_bth: (bool, bool, u8, u8, u16),
    /// RETH: DMA length, and the VA's offset in its 8-byte word.
    reth: (u32, u64),
    /// Payload bytes.
    payload: usize,
    /// The answer: its opcode, its AETH syndrome, its frame's length.
    answer: Option<(u8, u8, usize)>,
}

/// Every ATOMIC_WRITE in a capture and what answered it: the first frame
/// from the other side that carries its PSN (an ACK, a NAK or a READ
/// response). A request sent again shows once.
fn atomic_write_exchanges(pcap: &Path) -> Vec<AtomicWriteExchange> {
    use uroce_wire::frame::{classify, Classified};
    use uroce_wire::opcode::Opcode;
    use uroce_wire::pcap::CaptureReader;
    let bytes = std::fs::read(pcap).unwrap_or_else(|e| panic!("read {}: {e}", pcap.display()));
    // BTH facts, RETH facts, AETH syndrome, payload length
    type Facts = ((bool, bool, u8, u8, u16), Option<(u32, u64)>, Option<u8>, usize);
    let mut frames: Vec<(std::net::IpAddr, Opcode, u32, usize, Facts)> = Vec::new();
    for item in CaptureReader::new(&bytes[..]).expect("capture header") {
        let frame = item.expect("capture record");
        let Classified::Roce(roce) = classify(frame.data, frame.link.expect("link type")) else {
            continue;
        };
        let packet = roce.packet().expect("a RoCE packet that parses");
        let bth = packet.bth();
        let facts = (
            (bth.ack_req(), bth.solicited(), bth.pad_count(), bth.tver(), bth.pkey()),
            packet.reth().map(|r| (r.dma_len(), r.va() % 8)),
            packet.aeth().map(|a| a.syndrome().to_u8()),
            packet.payload().len(),
        );
        frames.push((roce.ip.source(), bth.opcode(), bth.psn().value(), frame.data.len(), facts));
    }
    let (mut found, mut seen) = (Vec::new(), Vec::new());
    for (i, (src, opcode, psn, len, (bth, reth, _, payload))) in frames.iter().enumerate() {
        // A request sent again (its PSN seen before) shows once.
        if *opcode != Opcode::RC_ATOMIC_WRITE || seen.contains(psn) {
            continue;
        }
        seen.push(*psn);
        let answer = frames[i + 1..]
            .iter()
            .find(|(from, _, p, ..)| from != src && *p == *psn)
            .map(|(_, op, _, len, (_, _, aeth, _))| (op.0, aeth.unwrap_or(0), *len));
        found.push(AtomicWriteExchange {
            request_len: *len,
            request_bth: *bth,
            reth: reth.expect("ATOMIC_WRITE has a RETH"),
            payload: *payload,
            answer,
        });
    }
    found
}

/// uroce's ATOMIC_WRITEs, and its answers to rxe's, against Linux rxe
/// 6.12's own between two VMs (`tests/golden/`: the VM pair of `matrix.sh
/// --self-check --kernel 6.12 --rows atomic_write`, and the matrix's
/// `atomic_write` rows against 6.12, both directions).
///
/// The requests are the same frame for frame (BTH flags, RETH length and
/// alignment, 8 bytes of payload). The answers are not: rxe 6.12 answers a
/// successful ATOMIC_WRITE with a zero-length RDMA READ RESPONSE ONLY
/// carrying an ACK AETH (0x10, as IBA 1.5 has it: `send_read_response_ack`
/// in rxe_resp.c); so does uroce, and uroce takes rxe's (until 2026-11-26
/// uroce answered with an RC_ACKNOWLEDGE and ignored rxe's answer:
/// docs/interop.md).
#[test]
fn atomic_write_against_linux_6_12_on_the_wire() {
    let golden = uroce_tests::golden_dir();
    let rxe = atomic_write_exchanges(&golden.join("atomic_write_rxe612.pcap"));
    let (ack, read_response_only) = (0x11, 0x10);
    let ok = |op: u8| Some((op, 0x1f, 62));
    assert_eq!(rxe.len(), 3, "rxe 6.12's VM pair: three ATOMIC_WRITEs: {rxe:#?}");
    for exchange in &rxe {
        assert_eq!((exchange.payload, exchange.reth), (8, (8, 0)), "{exchange:?}");
        assert_eq!(exchange.request_bth, (true, false, 0, 0, 0xffff), "{exchange:?}");
    }
    // Two successes answered by zero-length READ responses, then the bad
    // rkey's remote access error NAK.
    assert_eq!(rxe[0].answer, ok(read_response_only), "{rxe:#?}");
    assert_eq!(rxe[1].answer, ok(read_response_only), "{rxe:#?}");
    assert_eq!(rxe[2].answer, Some((ack, 0x62, 62)), "{rxe:#?}");

    // u2r: uroce's requests are rxe's, and rxe answers them as it answers
    // its own (uroce takes the READ-response answer: the row passes).
    let u2r = atomic_write_exchanges(&golden.join("atomic_write_u2r_rxe612.pcap"));
    assert_eq!(u2r, rxe, "uroce's ATOMIC_WRITEs and rxe's answers differ from the VM pair's");

    // r2u: rxe's requests, uroce's answers, exactly as rxe answers them.
    let r2u = atomic_write_exchanges(&golden.join("atomic_write_r2u_rxe612.pcap"));
    assert_eq!(r2u, rxe, "uroce's answers to rxe 6.12's ATOMIC_WRITEs");
}

/// What Linux rxe 6.12 answers to uroce's FLUSH (`tests/golden/`, the
/// matrix's `flush/u2r` row): nothing. uroce's RC_FLUSH (FETH: placement
/// type 1, global visibility; selectivity level 0, the range; RETH: the 64
/// bytes the WRITE before it wrote) goes out once and seven more times,
/// its ICRC the IBA's; rxe's ICRC check of a FLUSH
/// covers the headers twice (its opcode table gives RC_FLUSH no payload
/// offset), so it drops each one unanswered and uroce's retries run out.
#[test]
fn flush_gets_no_answer_from_linux_6_12() {
    use uroce_wire::frame::{classify, Classified};
    use uroce_wire::opcode::Opcode;
    use uroce_wire::pcap::CaptureReader;
    let path = uroce_tests::golden_dir().join("flush_u2r_rxe612.pcap");
    let bytes = std::fs::read(&path).expect("read the FLUSH capture");
    let mut flushes: Vec<Vec<u8>> = Vec::new();
    let mut after_first_flush = Vec::new();
    for item in CaptureReader::new(&bytes[..]).expect("capture header") {
        let frame = item.expect("capture record");
        let Classified::Roce(roce) = classify(frame.data, frame.link.expect("link type")) else {
            continue;
        };
        assert!(roce.icrc_ok(), "frame {}: the IBA's ICRC", frame.number);
        let packet = roce.packet().expect("parses");
        let from_uroce = roce.ip.source().to_string() == "169.254.0.2";
        if packet.bth().opcode() == Opcode::RC_FLUSH {
            assert!(from_uroce);
            let feth = packet.feth().expect("FETH");
            assert_eq!((feth.placement_type(), feth.selectivity_level()), (1, 0));
            assert_eq!(packet.reth().expect("RETH").dma_len(), 64);
            assert!(packet.bth().ack_req());
            assert!(packet.payload().is_empty());
            flushes.push(frame.data.to_vec());
        } else if !flushes.is_empty() {
            after_first_flush.push((frame.number, from_uroce, packet.bth().opcode().name()));
        }
    }
    assert_eq!(flushes.len(), 8, "the FLUSH and its seven retries (retry_cnt 7)");
    assert!(flushes.iter().all(|f| f.len() == flushes[0].len()), "the same FLUSH each time");
    assert!(
        after_first_flush.iter().all(|(_, from_uroce, _)| *from_uroce),
        "rxe 6.12 answered a FLUSH: {after_first_flush:?}"
    );
}
