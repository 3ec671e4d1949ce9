//! The string helpers (`ibv_wc_status_str`...), the rate conversions and
//! fork support, with rdma-core's texts and tables.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

fn pick(table: &[&'static CStr], index: c_int, unknown: &'static CStr) -> *const c_char {
    usize::try_from(index).ok().and_then(|i| table.get(i)).unwrap_or(&unknown).as_ptr()
}

/// `ibv_wc_status_str`.
pub extern "C" fn wc_status_str(status: c_int) -> *const c_char {
    const TABLE: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    pick(&TABLE, status, c"unknown")
}

/// `ibv_event_type_str`.
pub extern "C" fn event_type_str(event: c_int) -> *const c_char {
    const TABLE: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(&TABLE, event, c"unknown")
}

/// `ibv_node_type_str`.
pub extern "C" fn node_type_str(node_type: c_int) -> *const c_char {
    const TABLE: [&CStr; 7] = [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
    ];
    pick(&TABLE, node_type, c"unknown")
}

/// `ibv_port_state_str`.
pub extern "C" fn port_state_str(state: c_int) -> *const c_char {
    const TABLE: [&CStr; 6] =
        [c"no state change (NOP)", c"down", c"init", c"armed", c"active", c"active deferred"];
    pick(&TABLE, state, c"unknown")
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s).
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 1, 2500),
    (3, 4, 10000),
    (4, 12, 30000),
    (5, 2, 5000),
    (6, 8, 20000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, -1, 28125),
    (20, -1, 53125),
    (21, -1, 425000),
    (22, -1, 637500),
];

/// `ibv_rate_to_mult`.
pub extern "C" fn rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`.
pub extern "C" fn mult_to_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult && mult > 0).map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`.
pub extern "C" fn rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
pub extern "C" fn mbps_to_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_fork_init`: nothing to do (the device never pins memory).
pub extern "C" fn fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
pub extern "C" fn is_fork_initialized() -> c_int {
    2
}

/// `ibv_dontfork_range`, `ibv_dofork_range`: nothing to do.
pub extern "C" fn fork_range() -> c_int {
    0
}
