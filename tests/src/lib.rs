//! Helpers shared by uroce's integration tests.

use std::path::{Path, PathBuf};
use uroce_wire::frame::{classify, Classified};
use uroce_wire::pcap::CaptureReader;

/// The captures from real Linux rxe that ship with the repository
/// (`tests/golden/`).
pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// The full set of rxe captures beside the checkout (`../shared/golden`),
/// when it is there.
pub fn shared_golden_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden");
    dir.is_dir().then_some(dir)
}

/// The `.pcap` files of a folder, sorted.
pub fn pcaps_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "pcap"))
        .collect();
    files.sort();
    files
}

/// What a walk over one capture found.
#[derive(Debug, Default)]
pub struct GoldenReport {
    /// Frames in the file.
    pub frames: usize,
    /// RoCEv2 frames.
    pub roce: usize,
    /// Opcodes seen (by byte), with counts.
    pub opcodes: std::collections::BTreeMap<u8, usize>,
    /// Frames that failed a check, with the reason.
    pub failures: Vec<(usize, String)>,
}

/// Checks every RoCEv2 frame of a capture: it parses against the opcode
/// table, its ICRC (and IPv4 checksum) verifies, and emitting the parsed
/// representation gives back the frame bit for bit.
pub fn check_capture(bytes: &[u8]) -> GoldenReport {
    let mut report = GoldenReport::default();
    let reader = CaptureReader::new(bytes).expect("capture header");
    for item in reader {
        let frame = item.expect("capture record");
        report.frames += 1;
        let link = frame.link.expect("known link type");
        let Classified::Roce(roce) = classify(frame.data, link) else { continue };
        report.roce += 1;
        let mut fail = |why: String| report.failures.push((frame.number, why));
        let packet = match roce.packet() {
            Ok(p) => p,
            Err(e) => {
                fail(format!("parse: {e}"));
                continue;
            }
        };
        *report.opcodes.entry(packet.bth().opcode().0).or_default() += 1;
        if !roce.icrc_ok() {
            fail(format!(
                "ICRC stored {:08x?} computed {:08x?}",
                roce.stored_icrc(),
                roce.computed_icrc()
            ));
        }
        if !roce.integrity_ok() {
            fail("IPv4 or UDP checksum".into());
        }
        let repr = match roce.repr() {
            Ok(r) => r,
            Err(e) => {
                fail(format!("repr: {e}"));
                continue;
            }
        };
        let mut out = vec![0xa5u8; repr.buffer_len()];
        match repr.emit(&mut out) {
            Ok(n) if out[..n] == *frame.data => {}
            Ok(n) => fail(format!("emit differs ({n} vs {} bytes)", frame.data.len())),
            Err(e) => fail(format!("emit: {e}")),
        }
    }
    report
}

pub mod child;
pub mod cli;
pub mod engine_bench;
pub mod fault_demo;
pub mod fuzz;
pub mod hca_fuzz;
pub mod ibverbs;
pub mod report;

pub mod world;
