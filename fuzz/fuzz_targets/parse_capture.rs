//! Arbitrary bytes as a pcap or pcapng file: the capture reader and
//! `uroce decode` (text and TSV) must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tests::fuzz::parse_capture(data);
});
