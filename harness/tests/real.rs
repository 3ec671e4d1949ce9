//! The request/response program of `common/mod.rs`, unchanged, on the real
//! UDP runtime: one thread per node, each running its async side under
//! `real::block_on` with `RealEnv`, the side channel a `TcpOob` over
//! loopback. Addresses: 127.171.0.0/16 (this test's block).

mod common;

use common::{run_client, serve};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::time::Duration;
use uroce_harness::real::{block_on, RealEnv, TcpOob};
use uroce_net::udp::{ProgressMode, UdpConfig, UdpDevice};
use uroce_verbs::connect::Tuning;
use uroce_verbs::Context;

const ROUNDS: u32 = 16;

fn device(host: u8) -> UdpDevice {
    let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 171, 0, host)));
    c.progress = ProgressMode::Event;
    UdpDevice::open(c).expect("open the UDP device")
}

#[test]
fn the_same_async_code_runs_on_the_udp_runtime() {
    // ACK timeout 14 (67 ms): loopback under a loaded machine.
    let t = Tuning::with_timeout(14);
    let listener = TcpListener::bind((Ipv4Addr::new(127, 171, 0, 1), 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let dev = device(1);
        let ctx = Context::open(dev.hca());
        let oob = TcpOob::accept(&listener).unwrap();
        let answered = block_on(serve(&ctx, &oob, ROUNDS, &t));
        drop(ctx);
        answered
    });
    let client = std::thread::spawn(move || {
        let dev = device(2);
        let ctx = Context::open(dev.hca());
        let oob = TcpOob::connect(addr).unwrap();
        let env = RealEnv::new();
        let times = block_on(run_client(&ctx, &oob, &env, ROUNDS, Duration::from_millis(1), &t));
        drop(ctx);
        (times, env)
    });
    let (times, _env) = client.join().unwrap();
    let times = times.expect("the client's requests");
    assert_eq!(times.len() as u32, ROUNDS);
    // Real time: each round at least the 1 ms think time after the last.
    assert!(times.windows(2).all(|w| w[1] >= w[0] + Duration::from_millis(1)), "{times:?}");
    assert_eq!(server.join().unwrap(), Ok(ROUNDS));
}
