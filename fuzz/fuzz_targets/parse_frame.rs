//! Arbitrary bytes as a captured frame (under every link type), as a
//! transport packet and as each header: nothing may panic, and whatever
//! parses must emit the same bytes again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tests::fuzz::parse_frame(data);
});
