//! The link's TCP listener against a hostile or broken peer: a device on
//! a link (`UdpConfig::link`) listens, and the test plays the other host
//! with raw Ethernet frames on the link's UDP socket. A handshake left
//! half-open, or a connection reset before `accept` saw it, must not stop
//! the listener from accepting the next client. Links use 127.92.x.y.

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use uroce_net::link::{LinkAttach, LinkConfig};
use uroce_net::udp::{UdpConfig, UdpDevice};

const PEER_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x11];
const PORT: u16 = 18515;

/// The device at 169.254.30.1 on link `net`, and the peer's end of it.
fn device_and_peer(net: u8) -> (UdpDevice, Peer) {
    let device_end: SocketAddr = format!("127.92.{net}.1:47000").parse().expect("addr");
    let peer_end: SocketAddr = format!("127.92.{net}.2:47000").parse().expect("addr");
    let mut config = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(169, 254, 30, 1)));
    config.link = Some(LinkConfig {
        attach: LinkAttach::Udp { local: device_end, remote: peer_end },
        prefix_len: 16,
        mtu: 1500,
    });
    let device = UdpDevice::open(config).expect("open the device");
    let socket = UdpSocket::bind(peer_end).expect("bind the peer's end");
    socket.connect(device_end).expect("connect");
    socket.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    (device, Peer { socket, device_mac: None })
}

/// The test's side of the link: raw frames.
struct Peer {
    socket: UdpSocket,
    device_mac: Option<[u8; 6]>,
}

const PEER_IP: [u8; 4] = [169, 254, 30, 2];
const DEVICE_IP: [u8; 4] = [169, 254, 30, 1];

impl Peer {
    /// ARP for the device; learns its MAC (and the device learns ours).
    fn resolve(&mut self) {
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&PEER_MAC);
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
        arp.extend_from_slice(&PEER_MAC);
        arp.extend_from_slice(&PEER_IP);
        arp.extend_from_slice(&[0; 6]);
        arp.extend_from_slice(&DEVICE_IP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.device_mac.is_none() && Instant::now() < deadline {
            self.socket.send(&arp).expect("send ARP");
            let until = Instant::now() + Duration::from_millis(200);
            while Instant::now() < until {
                if let Some(frame) = self.receive() {
                    if frame.len() >= 42 && frame[12..14] == [0x08, 0x06] && frame[21] == 2 {
                        self.device_mac = Some(frame[22..28].try_into().expect("6 bytes"));
                        break;
                    }
                }
            }
        }
        assert!(self.device_mac.is_some(), "the device answered no ARP request");
    }

    fn receive(&self) -> Option<Vec<u8>> {
        let mut buf = [0u8; 2048];
        self.socket.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    }

    /// Sends a TCP segment to the device's listening port.
    fn tcp(&self, source_port: u16, seq: u32, ack: Option<u32>, flags: &str) {
        let mac = self.device_mac.expect("resolved");
        let mut builder = PacketBuilder::ethernet2(PEER_MAC, mac).ipv4(PEER_IP, DEVICE_IP, 64).tcp(
            source_port,
            PORT,
            seq,
            64240,
        );
        if flags.contains('S') {
            builder = builder.syn();
        }
        if flags.contains('R') {
            builder = builder.rst();
        }
        if let Some(ack) = ack {
            builder = builder.ack(ack);
        }
        let mut frame = Vec::new();
        builder.write(&mut frame, &[]).expect("build a segment");
        self.socket.send(&frame).expect("send a segment");
    }

    /// Waits for the device's SYN-ACK to `source_port`; returns its
    /// sequence number.
    fn syn_ack(&self, source_port: u16) -> u32 {
        self.syn_ack_within(source_port, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("no SYN-ACK to port {source_port}"))
    }

    fn syn_ack_within(&self, source_port: u16, limit: Duration) -> Option<u32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let Some(frame) = self.receive() else { continue };
            let Ok(packet) = SlicedPacket::from_ethernet(&frame) else { continue };
            if let Some(TransportSlice::Tcp(tcp)) = packet.transport {
                if tcp.destination_port() == source_port && tcp.syn() && tcp.ack() {
                    return Some(tcp.sequence_number());
                }
            }
        }
        None
    }

    /// A full handshake from `source_port`, the SYN sent again (as a
    /// client retries) while the device answers none.
    fn connect(&self, source_port: u16) {
        for _ in 0..20 {
            self.tcp(source_port, 1000, None, "S");
            if let Some(theirs) = self.syn_ack_within(source_port, Duration::from_millis(250)) {
                self.tcp(source_port, 1001, Some(theirs.wrapping_add(1)), "");
                return;
            }
        }
        panic!("no SYN-ACK to port {source_port}");
    }
}

/// Listens, lets the peer do `before` (nobody accepting yet), then
/// accepts on another thread while the peer does `during`; returns whether
/// the peer's connection was accepted within `limit`.
fn accept_within(
    device: &UdpDevice,
    limit: Duration,
    before: impl FnOnce(),
    peer_steps: impl FnOnce(),
) -> bool {
    let listener = device.link_tcp_listen(PORT).expect("listen");
    before();
    let never = AtomicBool::new(false);
    std::thread::scope(|s| {
        let accepted = s.spawn(|| {
            listener.accept(Some(Instant::now() + limit), &never).map(|mut stream| {
                // The stream is the peer's connection: it is open.
                stream.set_read_timeout(Some(Duration::from_millis(10)));
                let mut byte = [0u8; 1];
                let _ = stream.read(&mut byte);
                stream.peer_addr()
            })
        });
        peer_steps();
        matches!(
            accepted.join().expect("the accept thread"),
            Ok(Some(addr)) if addr.ip() == IpAddr::V4(Ipv4Addr::from(PEER_IP))
        )
    })
}

#[test]
fn a_half_open_handshake_does_not_block_the_listener() {
    let (device, mut peer) = device_and_peer(1);
    peer.resolve();
    let accepted = accept_within(
        &device,
        Duration::from_secs(15),
        || {
            // A SYN whose sender never completes the handshake...
            peer.tcp(40001, 5000, None, "S");
            let _ = peer.syn_ack(40001);
        },
        || {
            // ...then, after the handshake limit, a real client.
            std::thread::sleep(Duration::from_secs(6));
            peer.connect(40002);
        },
    );
    assert!(accepted, "the listener took the second client");
}

#[test]
fn a_connection_reset_before_accept_does_not_kill_the_listener() {
    let (device, mut peer) = device_and_peer(2);
    peer.resolve();
    let accepted = accept_within(
        &device,
        Duration::from_secs(10),
        || {
            // Established and reset before anyone accepted it (a client
            // that crashed).
            peer.tcp(40003, 7000, None, "S");
            let theirs = peer.syn_ack(40003);
            peer.tcp(40003, 7001, Some(theirs.wrapping_add(1)), "");
            peer.tcp(40003, 7001, None, "R");
            std::thread::sleep(Duration::from_millis(300));
        },
        || peer.connect(40004),
    );
    assert!(accepted, "the listener took the next client");
}
