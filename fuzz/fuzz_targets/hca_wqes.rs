//! A hostile application on two connected HCAs: arbitrary WQE bytes,
//! producer indices, doorbells and QP modifications. Nothing may panic or
//! touch memory outside registered regions and live rings, and the devices
//! must still carry a fresh connection afterwards.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tests::hca_fuzz::hca_wqes(data);
});
