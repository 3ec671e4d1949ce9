//! Real Linux rxe captures: every RoCEv2 frame parses, its ICRC verifies,
//! and emitting the parsed representation reproduces it bit for bit.

use uroce_tests::{check_capture, golden_dir, pcaps_in, shared_golden_dir};

fn check_dir(dir: &std::path::Path) -> usize {
    let mut total = 0;
    for path in pcaps_in(dir) {
        let bytes = std::fs::read(&path).unwrap();
        let report = check_capture(&bytes);
        let name = path.file_name().unwrap().to_string_lossy();
        println!(
            "{name}: {} frames, {} RoCEv2, opcodes {:02x?}",
            report.frames,
            report.roce,
            report.opcodes.keys().collect::<Vec<_>>()
        );
        assert!(report.roce > 0, "{name}: no RoCEv2 frame");
        assert!(
            report.failures.is_empty(),
            "{name}: {:?}",
            &report.failures[..report.failures.len().min(10)]
        );
        total += report.roce;
    }
    total
}

#[test]
fn shipped_golden_captures_round_trip() {
    let checked = check_dir(&golden_dir());
    assert!(checked > 100, "only {checked} RoCEv2 frames checked");
}

#[test]
fn shared_golden_captures_round_trip_when_present() {
    match shared_golden_dir() {
        Some(dir) => {
            let checked = check_dir(&dir);
            println!("{checked} RoCEv2 frames from {}", dir.display());
        }
        None => println!("../shared/golden not beside the checkout: nothing more to check"),
    }
}
