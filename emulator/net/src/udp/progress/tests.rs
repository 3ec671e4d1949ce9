//! The background thread against an application inside the runtime.

use super::*;
use crate::udp::{UdpConfig, UdpDevice};
use std::time::{Duration, Instant as WallClock};

/// The application's thread inside one of its calls for `span`: it
/// holds the I/O state, and keeps its activity flag up (as its verbs
/// calls do), so that the background thread leaves the device to it.
fn in_a_call(rt: &Runtime, span: Duration) {
    let held = lock(&rt.io);
    let t0 = WallClock::now();
    while t0.elapsed() < span {
        rt.activity.called();
        std::hint::spin_loop();
    }
    drop(held);
    // Between calls: a thread waiting on the lock gets it here.
    std::thread::sleep(Duration::from_micros(200));
}

fn busy_looks(rt: &Runtime) -> u64 {
    rt.background_busy_looks.load(Ordering::Relaxed)
}

#[test]
fn the_background_thread_does_not_wait_for_an_application_in_the_runtime() {
    let addr = IpAddr::V4(core::net::Ipv4Addr::new(127, 93, 40, 1));
    let dev = UdpDevice::open(UdpConfig::new(addr)).expect("a loopback device opens");
    let rt = &dev.runtime;
    // An application that is in the runtime most of the time. A
    // thread that queued on the lock would take it in a gap and never
    // count a busy look.
    let t0 = WallClock::now();
    while busy_looks(rt) == 0 && t0.elapsed() < Duration::from_secs(5) {
        rt.activity.called();
        rt.kick_background();
        in_a_call(rt, Duration::from_millis(2));
    }
    assert!(busy_looks(rt) > 0, "the thread looked while the application held the device");
    // Held for 30 ms: the looks back off (50 µs, doubling to 1 ms),
    // about 35 at most, where one every 50 µs would be 600.
    let before = busy_looks(rt);
    in_a_call(rt, Duration::from_millis(30));
    let looks = busy_looks(rt) - before;
    assert!(looks <= 40, "{looks} looks in 30 ms: they do not back off");
    let counted = busy_looks(rt);
    assert!(dev.stats().background_busy_looks >= counted, "the counter is in the stats");
}
