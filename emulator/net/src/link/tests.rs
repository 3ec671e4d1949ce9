use super::*;
use core::net::Ipv4Addr;
use uroce_device::types::Mtu;

const MAC_A: [u8; 6] = [0x02, 0, 169, 254, 0, 2];
const MAC_B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
const IP_A: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);

fn hosts() -> (LinkHost, LinkHost) {
    let now = Instant::from_nanos(0);
    (
        LinkHost::new(MAC_A, IpAddr::V4(IP_A), 16, 1500, 1, now),
        LinkHost::new(MAC_B, IpAddr::V4(IP_B), 16, 1500, 2, now),
    )
}

/// Moves frames both ways until neither host has anything to say.
fn pump(a: &mut LinkHost, b: &mut LinkHost, now: Instant) -> Vec<Vec<u8>> {
    let mut roce_at_b = Vec::new();
    for _ in 0..100 {
        a.poll(now);
        b.poll(now);
        let mut moved = false;
        while let Some(frame) = a.take_frame() {
            moved = true;
            if let Ingress::Roce(packet) = b.ingress(&frame) {
                roce_at_b.push(packet.to_vec());
            }
        }
        while let Some(frame) = b.take_frame() {
            moved = true;
            let _ = a.ingress(&frame);
        }
        if !moved {
            break;
        }
    }
    roce_at_b
}

/// An IPv4 RoCE-shaped packet (UDP to 4791; the ICRC is the HCA's
/// business, not the demux's).
fn ipv4_roce(src: Ipv4Addr, dst: Ipv4Addr, body_len: usize) -> Vec<u8> {
    let source = core::net::SocketAddr::new(IpAddr::V4(src), 49441);
    let headers = uroce_wire::ip::DatagramHeaders::new(source, IpAddr::V4(dst), 0x1234, body_len)
        .expect("headers");
    let mut p = vec![0u8; 28 + body_len];
    headers.emit(&mut p).expect("room");
    for (i, byte) in p[28..].iter_mut().enumerate() {
        *byte = i as u8;
    }
    p
}

fn frame(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    ethernet::Repr { source: src, destination: dst, ether_type: ethertype }
        .frame_into(payload, &mut f);
    f
}

#[test]
fn path_mtu_follows_rxe_rule() {
    assert_eq!(path_mtu_for_link(1500), Some(Mtu::Mtu1024));
    assert_eq!(path_mtu_for_link(4200), Some(Mtu::Mtu4096));
    assert_eq!(path_mtu_for_link(1100), Some(Mtu::Mtu512));
    assert_eq!(path_mtu_for_link(4191), Some(Mtu::Mtu2048));
    assert_eq!(path_mtu_for_link(352), Some(Mtu::Mtu256));
    assert_eq!(path_mtu_for_link(351), None);
}

#[test]
fn link_config_parses_and_refuses() {
    let (local, remote) =
        LinkConfig::parse_endpoints("127.0.0.1:47101,127.0.0.1:47100").expect("valid");
    assert_eq!(local, "127.0.0.1:47101".parse().unwrap());
    assert_eq!(remote, "127.0.0.1:47100".parse().unwrap());
    assert!(LinkConfig::parse_endpoints("127.0.0.1:47101").is_err());
    assert!(LinkConfig::parse_endpoints("127.0.0.1:47101,nowhere").is_err());
    assert!(LinkConfig::parse_endpoints("127.0.0.1:47101,127.0.0.1:0").is_err());
    assert_eq!(LinkConfig::parse_mtu("4200"), Ok(4200));
    assert!(LinkConfig::parse_mtu("100").is_err());
    assert!(LinkConfig::parse_mtu("big").is_err());
}

#[test]
fn roce_to_an_unknown_neighbour_waits_for_arp_then_leaves() {
    let (mut a, mut b) = hosts();
    let now = Instant::from_nanos(1_000);
    let packet = ipv4_roce(IP_A, IP_B, 32);
    let mut out = Vec::new();
    assert_eq!(a.encapsulate(now, &packet, IpAddr::V4(IP_B), &mut out), Egress::Held);
    // The request is a 42-byte broadcast ARP, unpadded.
    let request = a.take_frame().expect("an ARP request");
    assert_eq!(request.len(), 42);
    assert_eq!(&request[0..6], &[0xff; 6]);
    assert_eq!(&request[38..42], &IP_B.octets());
    assert_eq!(b.ingress(&request), Ingress::Host);
    // B's host stack answers; A learns B's MAC and releases the packet.
    let at_b = pump(&mut a, &mut b, now);
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
    assert_eq!(b.neighbor(IpAddr::V4(IP_A)), Some(MAC_A), "B learned A from the request");
    assert_eq!(at_b, vec![packet.clone()], "the held packet arrived whole");
    // Known now: straight out.
    assert_eq!(a.encapsulate(now, &packet, IpAddr::V4(IP_B), &mut out), Egress::Ready);
    assert_eq!(&out[0..6], &MAC_B);
    assert_eq!(&out[6..12], &MAC_A);
    assert_eq!(&out[14..], &packet[..]);
    assert_eq!(a.stats().tx_roce, 2);
    assert_eq!(a.stats().resolve_requests, 1);
}

#[test]
fn unanswered_resolution_retries_then_drops() {
    let (mut a, _) = hosts();
    let packet = ipv4_roce(IP_A, IP_B, 4096);
    let mut out = Vec::new();
    let t0 = Instant::from_nanos(0);
    // Linux's unres_qlen_bytes: 212,992 bytes of 4 KiB packets are 51 whole
    // ones (a UC message of that many packets survives its ARP); the 52nd
    // pushes the first out.
    let fit = HELD_BYTES_PER_DESTINATION / packet.len();
    for _ in 0..fit {
        assert_eq!(a.encapsulate(t0, &packet, IpAddr::V4(IP_B), &mut out), Egress::Held);
    }
    assert_eq!(a.stats().tx_unresolved, 0);
    assert_eq!(a.encapsulate(t0, &packet, IpAddr::V4(IP_B), &mut out), Egress::Dropped);
    assert_eq!(a.stats().tx_unresolved, 1, "one more pushed the first out");
    assert_eq!(a.poll_at_ns(t0), Some(RESOLVE_INTERVAL_NS));
    for second in 1..=3u64 {
        a.poll(Instant::from_nanos(second * RESOLVE_INTERVAL_NS));
    }
    let requests = std::iter::from_fn(|| a.take_frame()).filter(|f| f.len() == 42).count();
    assert_eq!(requests, 3);
    assert_eq!(
        a.stats().tx_unresolved,
        1 + fit as u64,
        "the held packets dropped after three tries"
    );
    // Off-link destinations never wait.
    let far = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(a.encapsulate(t0, &packet, far, &mut out), Egress::Dropped);
}

#[test]
fn padded_roce_frame_is_cut_to_its_ip_length() {
    let (mut a, _) = hosts();
    let packet = ipv4_roce(IP_B, IP_A, 16);
    let mut padded = frame(MAC_A, MAC_B, ETHERTYPE_IPV4, &packet);
    padded.extend_from_slice(&[0, 0]);
    assert_eq!(a.ingress(&padded), Ingress::Roce(&packet[..]));
    // The IP source's MAC was learned on the way.
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
}

#[test]
fn ip_snooping_cannot_poison_the_table() {
    let (mut a, _) = hosts();
    let attacker = [0x02, 0x66, 0x66, 0x66, 0x66, 0x66];
    // An IP packet to another MAC, or with a bad header checksum, teaches
    // nothing.
    let packet = ipv4_roce(IP_B, IP_A, 16);
    let _ = a.ingress(&frame([0x02, 9, 9, 9, 9, 9], attacker, ETHERTYPE_IPV4, &packet));
    let mut bad = packet.clone();
    bad[10] ^= 0xff;
    let _ = a.ingress(&frame(MAC_A, attacker, ETHERTYPE_IPV4, &bad));
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), None);
    // B announces itself; a later IP packet from another MAC with B's
    // source address does not move B.
    let _ = a.ingress(&frame(MAC_A, MAC_B, ETHERTYPE_IPV4, &packet));
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
    let _ = a.ingress(&frame(MAC_A, attacker, ETHERTYPE_IPV4, &packet));
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
    // Another host's ARP exchange does not move it either; B's own ARP
    // request for A's address does.
    let new_mac = [0x52, 0x54, 0, 0, 0, 0x42];
    let mut arp = arp::Repr::request(attacker, IP_B, Ipv4Addr::new(169, 254, 0, 77)).to_frame();
    let _ = a.ingress(&arp);
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
    arp = arp::Repr::request(new_mac, IP_B, IP_A).to_frame();
    let _ = a.ingress(&arp);
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(new_mac));
}

#[test]
fn a_flood_of_new_neighbours_keeps_the_ones_in_use() {
    let (mut a, _) = hosts();
    let now = Instant::from_nanos(0);
    let _ = a.ingress(&arp::Repr::request(MAC_B, IP_B, IP_A).to_frame());
    let packet = ipv4_roce(IP_A, IP_B, 16);
    let mut out = Vec::new();
    for i in 0..5000u32 {
        let ip = Ipv4Addr::new(169, 254, (i >> 8) as u8 + 1, i as u8);
        let mac = [0x02, 0x77, 0, 0, (i >> 8) as u8, i as u8];
        let _ = a.ingress(&arp::Repr::request(mac, ip, IP_A).to_frame());
        if i % 500 == 0 {
            // The HCA keeps sending to B.
            assert_eq!(a.encapsulate(now, &packet, IpAddr::V4(IP_B), &mut out), Egress::Ready);
        }
    }
    assert_eq!(a.neighbor(IpAddr::V4(IP_B)), Some(MAC_B));
    assert!(a.stats().neighbors <= 1024);
}

#[test]
fn roce_for_someone_else_or_malformed_is_dropped() {
    let (mut a, _) = hosts();
    let now = Instant::from_nanos(0);
    let other = Ipv4Addr::new(169, 254, 0, 9);
    let to_other = frame(MAC_A, MAC_B, ETHERTYPE_IPV4, &ipv4_roce(IP_B, other, 16));
    assert_eq!(a.ingress(&to_other), Ingress::Dropped);
    let other_mac = frame([0x02, 9, 9, 9, 9, 9], MAC_B, ETHERTYPE_IPV4, &ipv4_roce(IP_B, IP_A, 16));
    assert_eq!(a.ingress(&other_mac), Ingress::Dropped);
    // An IP length beyond the frame: not RoCE, the host stack drops it.
    let mut long = ipv4_roce(IP_B, IP_A, 16);
    long[2..4].copy_from_slice(&2000u16.to_be_bytes());
    assert_eq!(a.ingress(&frame(MAC_A, MAC_B, ETHERTYPE_IPV4, &long)), Ingress::Host);
    assert_eq!(a.ingress(&[0u8; 13]), Ingress::Dropped);
    for len in 0..80 {
        let junk: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
        let _ = a.ingress(&junk);
    }
    a.poll(now);
    // 3 above, 14 junk frames shorter than a header, 66 of an ethertype
    // nothing speaks (0xbce1).
    assert_eq!(a.stats().rx_dropped, 3 + 14 + 66);
}

#[test]
fn tcp_connection_over_the_link() {
    let (mut a, mut b) = hosts();
    let listener = b.tcp_listen(18515).expect("listen");
    let client = a.tcp_connect(IpAddr::V4(IP_B), 18515, 50000).expect("connect");
    let mut now_ns = 0;
    let mut got = Vec::new();
    let mut sent = false;
    for _ in 0..2000 {
        now_ns += 1_000_000;
        pump(&mut a, &mut b, Instant::from_nanos(now_ns));
        if !sent && a.tcp(client).can_send() {
            a.tcp(client).send_slice(b"0000:000011:5dcd4f:hello\0").expect("send");
            sent = true;
        }
        if b.tcp(listener).can_recv() {
            let mut buf = [0u8; 64];
            let n = b.tcp(listener).recv_slice(&mut buf).expect("recv");
            got.extend_from_slice(&buf[..n]);
        }
        if got.len() >= 25 {
            break;
        }
    }
    assert_eq!(&got[..], b"0000:000011:5dcd4f:hello\0");
    a.tcp_release(client);
    for _ in 0..50 {
        now_ns += 1_000_000;
        pump(&mut a, &mut b, Instant::from_nanos(now_ns));
    }
    assert!(!b.tcp(listener).may_recv(), "B saw A's FIN");
}

#[test]
fn neighbour_solicitation_for_our_link_local_is_answered() {
    let (mut a, mut b) = hosts();
    let now = Instant::from_nanos(0);
    let b_link_local = link_local_for(MAC_B);
    let mut out = Vec::new();
    let packet = vec![0x60; 48];
    assert_eq!(a.encapsulate(now, &packet, IpAddr::V6(b_link_local), &mut out), Egress::Held);
    let solicitation = a.take_frame().expect("an NS");
    assert_eq!(&solicitation[0..3], &[0x33, 0x33, 0xff]);
    assert_eq!(b.ingress(&solicitation), Ingress::Host);
    pump(&mut a, &mut b, now);
    assert_eq!(a.neighbor(IpAddr::V6(b_link_local)), Some(MAC_B), "B advertised itself");
    assert_eq!(b.neighbor(IpAddr::V6(link_local_for(MAC_A))), Some(MAC_A));
}

#[test]
fn a_released_connection_to_a_vanished_peer_is_reaped() {
    let (mut a, mut b) = hosts();
    let _listener = b.tcp_listen(18515).expect("listen");
    let client = a.tcp_connect(IpAddr::V4(IP_B), 18515, 50001).expect("connect");
    let mut now_ns = 0;
    for _ in 0..200 {
        now_ns += 1_000_000;
        pump(&mut a, &mut b, Instant::from_nanos(now_ns));
        if a.tcp(client).state() == tcp::State::Established {
            break;
        }
    }
    assert_eq!(a.tcp(client).state(), tcp::State::Established);
    a.tcp(client).send_slice(b"bye").expect("send");
    // B is gone: nothing answers the data or the FIN.
    a.tcp_release(client);
    for second in 1..=70u64 {
        a.poll(Instant::from_nanos(now_ns + second * 1_000_000_000));
        while a.take_frame().is_some() {}
        let open = a.stats().tcp_sockets;
        if second < 59 {
            assert_eq!(open, 1, "closing, {second} s after the release");
        }
    }
    assert_eq!(a.stats().tcp_sockets, 0, "aborted and removed after 60 s");
}

#[test]
fn multicast_roce_leaves_and_arrives_under_the_groups_mac_without_arp() {
    let (mut a, mut b) = hosts();
    let now = Instant::from_nanos(0);
    let group = Ipv4Addr::new(230, 131, 129, 7);
    let group_mac = [0x01, 0x00, 0x5e, 0x03, 0x81, 0x07];
    let packet = ipv4_roce(IP_A, group, 16);
    let mut out = Vec::new();
    assert_eq!(a.encapsulate(now, &packet, IpAddr::V4(group), &mut out), Egress::Ready);
    assert_eq!(&out[0..6], &group_mac, "the group's MAC: no neighbour to resolve");
    assert!(a.take_frame().is_none(), "no ARP request");
    assert_eq!(b.ingress(&out), Ingress::Roce(&packet[..]));
    // Under another MAC (its own unicast one included), dropped.
    let wrong = frame(MAC_B, MAC_A, ETHERTYPE_IPV4, &packet);
    assert_eq!(b.ingress(&wrong), Ingress::Dropped);
}
