//! Arbitrary packets against an HCA with live QPs of every type, registered
//! regions, windows and an SRQ, on host memory that fails the run on any
//! access outside registered memory and rings: nothing may panic, every
//! packet the HCA sends must be well formed, every completion must match
//! what was posted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tests::hca_fuzz::hca_packets(data);
});
