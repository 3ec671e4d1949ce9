//! Arbitrary bytes as a script of frames arriving on a uroce link host,
//! packets the HCA sends through it, and time passing: nothing may panic,
//! nothing the host sends may be malformed, and it must still answer ARP.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tests::fuzz::link_frames(data);
});
