//! A CM event wakes the driver at once: a REQ that reaches a listening
//! device makes that device's runtime call its event notifiers with no
//! verb called on it. librdmacm's thread sleeps on them (an eventfd the
//! notifier writes), with a 500 ms poll as a fallback. The runtime called
//! the notifiers only for completion and async events, so in the interop
//! matrix every CM step waited for that fallback: rxe's REQ got its REP
//! 0.44 s later, a REP its RTU 0.46 s later (`lib_rping` rows; between
//! two Linux hosts it is 4 ms). Devices use 127.93.0.x.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uroce_device::cm::{CmConnectParams, CmEventKind};
use uroce_device::command::{Command, Gid, Reply};
use uroce_device::link::DeviceLink;
use uroce_device::types::Qpn;
use uroce_net::udp::{UdpConfig, UdpDevice};

const SERVICE: u64 = 0x0106_4a7a;

#[test]
fn a_connect_request_calls_the_notifiers_without_the_application() {
    let server_ip = IpAddr::V4(Ipv4Addr::new(127, 93, 0, 1));
    let client_ip = IpAddr::V4(Ipv4Addr::new(127, 93, 0, 2));
    let server = UdpDevice::open(UdpConfig::new(server_ip)).expect("server device");
    let client = UdpDevice::open(UdpConfig::new(client_ip)).expect("client device");
    let listen = server.hca().command(Command::CmListen { service_id: SERVICE });
    assert!(matches!(listen, Ok(Reply::Done)), "{listen:?}");
    // The events a device raises when it opens are the application's
    // (libibverbs takes them): take them, so that only CM events remain.
    while server.hca().poll_event().is_some() {}
    // Like librdmacm's notifier (which writes an eventfd), this one only
    // notes the call: the calls after the server received the REQ.
    let calls = Arc::new(AtomicUsize::new(0));
    let (count, hca) = (Arc::clone(&calls), server.hca().clone());
    server.hca().on_events(Box::new(move || {
        if hca.lock().counters().rcvd_mads > 0 {
            count.fetch_add(1, Ordering::SeqCst);
        }
        true
    }));

    // From the client's IPv4 GID (the table's first of that version).
    let connect = (0..8)
        .map(|sgid_index| {
            let params = CmConnectParams::rdma_cm(
                sgid_index,
                Gid::from_ip(server_ip),
                SERVICE,
                Qpn::new(0x10),
                1,
            );
            client.hca().command(Command::CmConnect { params, private_data: vec![] })
        })
        .find(Result::is_ok);
    assert!(matches!(connect, Some(Ok(Reply::CmId { .. }))), "{connect:?}");
    client.hca().flush();

    // Nothing calls the server's device: only its background thread runs.
    let deadline = Instant::now() + Duration::from_secs(3);
    while calls.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        client.progress();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(server.counters().rcvd_mads, 1, "the REQ reached the server");
    assert!(calls.load(Ordering::SeqCst) > 0, "its connect request was never announced");
    match server.hca().command(Command::CmPollEvent) {
        Ok(Reply::CmEvent(Some(event))) => {
            assert!(matches!(event.kind, CmEventKind::ConnectRequest { .. }), "{event:?}")
        }
        other => panic!("no connect request: {other:?}"),
    }
}
