//! The steps' tests: the C program's pattern and fingerprints, the
//! layout, the checker.

use super::*;
use uroce_verbs::WcStatus;

#[test]
fn the_pattern_is_the_c_programs() {
    // Printed by the C pattern() of rxe-opcodes.c.
    let c = [
        (1, 0, 0x4c),
        (1, 1, 0xcf),
        (1, 255, 0xc9),
        (1, 256, 0x4d),
        (1, 1023, 0xcc),
        (1, 11999, 0x97),
        (2, 0, 0x87),
        (2, 256, 0x88),
        (21, 1023, 0x68),
        (26, 11999, 0x5a),
    ];
    for (n, i, byte) in c {
        assert_eq!(pattern(n, i), byte, "pattern({n}, {i})");
    }
}

#[test]
fn the_fingerprint_is_the_c_tables() {
    // `rxe-opcodes -L -m 1024` and `-m 4096` (the build of this commit).
    assert_eq!(fingerprint(1024), 0x97cf_8137);
    assert_eq!(fingerprint(4096), 0xb1ef_3df3);
    assert_ne!(fingerprint(1024), fingerprint(2048));
    // `rxe-opcodes -L -S awrite` and `-L -S flush`.
    assert_eq!(fingerprint_of(StepSet::Awrite.steps(), 1024), 0xec1e_e6fa);
    assert_eq!(fingerprint_of(StepSet::Flush.steps(), 1024), 0x9cc1_3f72);
}

#[test]
fn the_iba15_sets_end_with_their_nak_and_read_back_what_they_wrote() {
    for set in [StepSet::Awrite, StepSet::Flush] {
        let steps = set.steps();
        let (last, rest) = steps.split_last().expect("steps");
        assert_ne!(last.expect, WcStatus::Success, "{set:?}: the NAK comes last");
        assert!(rest.iter().all(|s| s.expect == WcStatus::Success));
        for (i, s) in steps.iter().enumerate() {
            if s.target == Target::Previous {
                assert!(i > 0 && steps[i - 1].writes_slot(), "{set:?} step {}", i + 1);
                assert!(s.bytes(1024) <= steps[i - 1].bytes(1024));
            }
        }
    }
}

#[test]
fn lengths_scale_with_the_mtu_past_two_packets() {
    for mtu in [256, 512, 1024, 2048, 4096] {
        let big = STEPS[2].bytes(mtu);
        assert!(big > 2 * mtu, "BIG {big} at MTU {mtu} is not FIRST/MIDDLE/LAST");
        assert!(u64::from(big + GUARD) <= SLOT);
    }
    assert_eq!(STEPS[2].bytes(1024), 3000);
    assert_eq!(STEPS[2].bytes(4096), 12000);
    assert_eq!(STEPS[19].bytes(4096), 4096);
}

#[test]
fn the_layout_fits_and_the_rnr_step_finds_an_empty_queue() {
    assert!(slot_offset(STEPS.len() as u32) + SLOT <= BUF_SIZE);
    assert_eq!(rc_receives_before_rnr(), 8);
    let slots = receive_slots();
    let rc_slots = slots.iter().zip(&STEPS).filter(|(s, st)| s.is_some() && st.qp == QpKind::Rc);
    let last_rc = rc_slots.filter_map(|(s, _)| *s).max().expect("RC receives");
    assert!(OFF_RC_RECV + (last_rc + 1 + RC_SPARE) * SLOT <= OFF_MW);
    let uc = slots.iter().zip(&STEPS).filter(|(s, st)| s.is_some() && st.qp == QpKind::Uc);
    assert!(OFF_UC_RECV + uc.count() as u64 * SLOT <= OFF_RC_RECV);
    assert_eq!(STEPS.last().map(|s| s.expect), Some(WcStatus::RemAccessErr));
}

#[test]
fn the_checker_catches_a_flipped_byte_a_shift_and_an_overrun() {
    let len = 3000;
    let good: Vec<u8> = pattern_bytes(8, len).into_iter().chain([FILL; 64]).collect();
    let want = |i: usize| pattern(8, i as u32);
    assert_eq!(check_payload("x", &good, len as usize, want, FILL), Ok(()));

    let mut flipped = good.clone();
    flipped[1500] ^= 0xff;
    let err = check_payload("x", &flipped, len as usize, want, FILL).unwrap_err();
    assert_eq!(
        err,
        format!(
            "x: byte 1500 is 0x{:02x}, want 0x{:02x} (1 of 3000 bytes differ)",
            flipped[1500], good[1500]
        )
    );

    // A packet's worth landed 1024 bytes late: every byte of it differs.
    let mut shifted = good.clone();
    shifted.copy_within(0..1024, 1024);
    let err = check_payload("x", &shifted, len as usize, want, FILL).unwrap_err();
    assert!(err.starts_with("x: byte 1024 is"), "{err}");
    assert!(err.contains("1024 of 3000 bytes differ"), "{err}");

    // Another step's payload (the same bytes moved by one step).
    let other: Vec<u8> = pattern_bytes(9, len).into_iter().chain([FILL; 64]).collect();
    assert!(check_payload("x", &other, len as usize, want, FILL).is_err());

    let mut overrun = good.clone();
    overrun[len as usize + 3] = 0;
    let err = check_payload("x", &overrun, len as usize, want, FILL).unwrap_err();
    assert!(err.contains("byte 3 is 0x00, want the fill 0x5a"), "{err}");
}
