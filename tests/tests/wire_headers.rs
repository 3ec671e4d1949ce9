//! The outer headers of `uroce_wire` (Ethernet, IPv4, IPv6, UDP, ARP,
//! neighbour discovery, the internet checksum) against every frame of the
//! real rxe captures, against etherparse as an independent second reading,
//! and on arbitrary bytes: what parses re-emits bit for bit, and nothing
//! panics.

use etherparse::{Ipv4HeaderSlice, Ipv6HeaderSlice, UdpHeaderSlice};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use uroce_tests::{golden_dir, pcaps_in, shared_golden_dir};
use uroce_wire::ethernet::{ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::{arp, checksum, ethernet, ip, ipv4, ipv6, ndp, udp};

/// What one captured Ethernet frame holds, checked header by header.
#[derive(Default, Debug)]
struct Seen {
    frames: usize,
    ipv4: usize,
    ipv6: usize,
    udp: usize,
    arp: usize,
    ndp: usize,
}

fn check_frame(frame: &[u8], seen: &mut Seen) {
    let eth = ethernet::Packet::new_checked(frame).expect("Ethernet");
    let eth_repr = ethernet::Repr::parse(&eth).unwrap();
    assert_eq!(eth_repr.to_bytes(), frame[..14], "Ethernet re-emits");
    seen.frames += 1;
    let payload = eth.payload();
    match eth.ether_type() {
        ETHERTYPE_ARP => {
            let repr = arp::Repr::parse(&arp::Packet::new_checked(payload).unwrap()).unwrap();
            let mut out = [0u8; 28];
            repr.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
            assert_eq!(out, payload[..28], "ARP re-emits");
            seen.arp += 1;
        }
        ETHERTYPE_IPV4 => {
            let view = ipv4::Packet::new_checked(payload).unwrap();
            let repr = ipv4::Repr::parse(&view).unwrap();
            assert!(view.verify_checksum(), "a kernel's IPv4 checksum is right");
            assert_eq!(repr.calc_header_checksum(), repr.header_checksum);
            assert_eq!(repr.to_bytes()[..repr.header_len()], payload[..repr.header_len()]);
            let oracle = Ipv4HeaderSlice::from_slice(payload).unwrap();
            assert_eq!(oracle.identification(), repr.identification);
            assert_eq!(oracle.total_len(), repr.total_len);
            assert_eq!(oracle.source(), repr.source);
            assert_eq!(oracle.header_checksum(), repr.header_checksum);
            seen.ipv4 += 1;
            let end = usize::from(repr.total_len).min(payload.len());
            let source = IpAddr::from(repr.source);
            let destination = IpAddr::from(repr.destination);
            if repr.protocol == ipv4::PROTOCOL_UDP {
                check_udp(&payload[repr.header_len()..end], source, destination, seen);
            }
        }
        ETHERTYPE_IPV6 => {
            let view = ipv6::Packet::new_checked(payload).unwrap();
            let repr = ipv6::Repr::parse(&view).unwrap();
            assert_eq!(repr.to_bytes(), payload[..40], "IPv6 re-emits");
            let oracle = Ipv6HeaderSlice::from_slice(payload).unwrap();
            assert_eq!(oracle.payload_length(), repr.payload_length);
            assert_eq!(oracle.flow_label().value(), repr.flow_label);
            assert_eq!(oracle.destination(), repr.destination);
            seen.ipv6 += 1;
            let (source, destination) = (view.source(), view.destination());
            if repr.next_header == ipv4::PROTOCOL_UDP {
                check_udp(view.payload(), source.into(), destination.into(), seen);
            }
            if repr.next_header == ipv6::NEXT_HEADER_ICMPV6 {
                if let Ok(message) = ndp::Packet::new_checked(view.payload()) {
                    assert!(message.verify_checksum(source, destination), "ICMPv6 checksum");
                    let _ = ndp::Repr::parse(&message).unwrap();
                    seen.ndp += 1;
                }
            }
        }
        _ => {}
    }
}

fn check_udp(datagram: &[u8], source: IpAddr, destination: IpAddr, seen: &mut Seen) {
    let view = udp::Packet::new_checked(datagram).unwrap();
    let repr = udp::Repr::parse(&view).unwrap();
    assert_eq!(repr.to_bytes(), datagram[..8], "UDP re-emits");
    let oracle = UdpHeaderSlice::from_slice(datagram).unwrap();
    assert_eq!((oracle.source_port(), oracle.length()), (repr.source_port, repr.length));
    let payload = &datagram[8..usize::from(repr.length).min(datagram.len())];
    if repr.checksum != 0 && payload.len() + 8 == usize::from(repr.length) {
        assert_eq!(repr.calc_checksum(source, destination, payload), Ok(repr.checksum));
    }
    seen.udp += 1;
}

#[test]
fn every_header_of_the_rxe_captures_parses_and_re_emits() {
    let mut dirs = vec![golden_dir()];
    dirs.extend(shared_golden_dir());
    let mut seen = Seen::default();
    for dir in dirs {
        for path in pcaps_in(&dir) {
            let bytes = std::fs::read(&path).unwrap();
            for frame in CaptureReader::new(&bytes).unwrap() {
                let frame = frame.unwrap();
                check_frame(frame.data, &mut seen);
            }
        }
    }
    // Every kind appears in the captures (ARP and NDP around each run); the
    // repository's own captures hold most of them (`../shared/golden`, when
    // it is there, adds more).
    assert!(seen.ipv4 > 500 && seen.ipv6 > 50 && seen.udp > 500, "{seen:?}");
    assert!(seen.arp > 0 && seen.ndp > 0, "{seen:?}");
}

fn any_v4() -> impl Strategy<Value = ipv4::Repr> {
    (
        (any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>(), any::<[bool; 3]>()),
        (0u16..0x2000, any::<u8>(), any::<u8>(), any::<u16>()),
        (any::<[u8; 4]>(), any::<[u8; 4]>(), proptest::collection::vec(any::<u8>(), 0..=10)),
    )
        .prop_map(
            |((dscp, ecn, total_len, id, flags), (frag, ttl, proto, sum), (s, d, words))| {
                let options: Vec<u8> = words.iter().flat_map(|w| [*w; 4]).collect();
                ipv4::Repr {
                    dscp: dscp & 0x3f,
                    ecn: ecn & 3,
                    total_len,
                    identification: id,
                    reserved_flag: flags[0],
                    dont_fragment: flags[1],
                    more_fragments: flags[2],
                    fragment_offset: frag,
                    time_to_live: ttl,
                    protocol: proto,
                    header_checksum: sum,
                    source: s,
                    destination: d,
                    options: ipv4::Options::from_slice(&options).unwrap(),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every IPv4 header round-trips, and etherparse reads the same fields.
    #[test]
    fn ipv4_round_trips(repr in any_v4()) {
        let bytes = repr.to_bytes();
        let bytes = &bytes[..repr.header_len()];
        let parsed = ipv4::Repr::parse(&ipv4::Packet::new_checked(bytes).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
        let oracle = Ipv4HeaderSlice::from_slice(bytes).unwrap();
        prop_assert_eq!(oracle.identification(), repr.identification);
        prop_assert_eq!(oracle.dont_fragment(), repr.dont_fragment);
        prop_assert_eq!(oracle.fragments_offset().value(), repr.fragment_offset);
        prop_assert_eq!(oracle.options(), repr.options.as_slice());
        if !repr.reserved_flag {
            // etherparse's header type has no reserved flag.
            prop_assert_eq!(oracle.to_header().calc_header_checksum(), repr.calc_header_checksum());
        }
    }

    /// Every IPv6, UDP, Ethernet and ARP header round-trips.
    #[test]
    fn fixed_headers_round_trip(
        v6 in (any::<u8>(), 0u32..0x10_0000, any::<u16>(), any::<u8>(), any::<u8>(), any::<[u8; 16]>(), any::<[u8; 16]>()),
        ports in any::<[u16; 4]>(),
        macs in any::<([u8; 6], [u8; 6], u16)>(),
        arp_fields in (any::<u16>(), any::<[u8; 6]>(), any::<u32>(), any::<[u8; 6]>(), any::<u32>()),
    ) {
        let (traffic_class, flow_label, payload_length, next_header, hop_limit, source, destination) = v6;
        let repr = ipv6::Repr { traffic_class, flow_label, payload_length, next_header, hop_limit, source, destination };
        let bytes = repr.to_bytes();
        prop_assert_eq!(ipv6::Repr::parse(&ipv6::Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        let oracle = Ipv6HeaderSlice::from_slice(&bytes).unwrap();
        prop_assert_eq!((oracle.traffic_class(), oracle.flow_label().value()), (traffic_class, flow_label));

        let repr = udp::Repr { source_port: ports[0], destination_port: ports[1], length: ports[2], checksum: ports[3] };
        prop_assert_eq!(udp::Repr::parse(&udp::Packet::new_unchecked(&repr.to_bytes()[..])), Ok(repr));

        let repr = ethernet::Repr { source: macs.0, destination: macs.1, ether_type: macs.2 };
        prop_assert_eq!(ethernet::Repr::parse(&ethernet::Packet::new_unchecked(&repr.to_bytes()[..])), Ok(repr));

        let (op, sender_mac, sender_ip, target_mac, target_ip) = arp_fields;
        let repr = arp::Repr {
            operation: arp::Operation::from(op),
            sender_mac,
            sender_ip: Ipv4Addr::from(sender_ip),
            target_mac,
            target_ip: Ipv4Addr::from(target_ip),
        };
        let mut out = [0u8; 28];
        repr.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(arp::Repr::parse(&arp::Packet::new_unchecked(&out[..])), Ok(repr));
    }

    /// The UDP checksum agrees with etherparse's, over either IP version.
    #[test]
    fn udp_checksum_agrees_with_etherparse(
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), sport: u16, dport: u16,
        payload in proptest::collection::vec(any::<u8>(), 0..300), v6: bool,
    ) {
        let repr = udp::Repr { source_port: sport, destination_port: dport, length: (8 + payload.len()) as u16, checksum: 0 };
        let theirs = etherparse::UdpHeader { source_port: sport, destination_port: dport, length: repr.length, checksum: 0 };
        let (ours, expected) = if v6 {
            (repr.calc_checksum(Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into(), &payload),
             theirs.calc_checksum_ipv6_raw(src, dst, &payload).unwrap())
        } else {
            let (s, d) = ([src[0], src[1], src[2], src[3]], [dst[0], dst[1], dst[2], dst[3]]);
            (repr.calc_checksum(Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into(), &payload),
             theirs.calc_checksum_ipv4_raw(s, d, &payload).unwrap())
        };
        prop_assert_eq!(ours, Ok(expected));
    }

    /// Neighbour discovery messages round-trip with a right checksum.
    #[test]
    fn ndp_round_trips(target in any::<[u8; 16]>(), mac in proptest::option::of(any::<[u8; 6]>()),
                       flags: u8, advert: bool, src in any::<[u8; 16]>(), dst in any::<[u8; 16]>()) {
        let target = Ipv6Addr::from(target);
        let repr = if advert {
            ndp::Repr::Advert { flags, target, target_mac: mac }
        } else {
            ndp::Repr::Solicit { target, source_mac: mac }
        };
        let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ndp::Packet::new_unchecked(&mut out[..]), src, dst);
        let view = ndp::Packet::new_checked(&out[..]).unwrap();
        prop_assert!(view.verify_checksum(src, dst));
        prop_assert_eq!(ndp::Repr::parse(&view), Ok(repr));
    }

    /// No view or parser panics on arbitrary bytes, and what parses
    /// re-emits the bytes it came from.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        if let Ok(p) = ethernet::Packet::new_checked(&bytes[..]) {
            let repr = ethernet::Repr::parse(&p).unwrap();
            prop_assert_eq!(&repr.to_bytes()[..], &bytes[..14]);
        }
        if let Ok(p) = ipv4::Packet::new_checked(&bytes[..]) {
            let repr = ipv4::Repr::parse(&p).unwrap();
            let _ = (p.verify_checksum(), p.is_fragment(), p.options());
            prop_assert_eq!(&repr.to_bytes()[..repr.header_len()], &bytes[..repr.header_len()]);
        }
        if let Ok(p) = ipv6::Packet::new_checked(&bytes[..]) {
            let _ = p.payload();
            if let Ok(repr) = ipv6::Repr::parse(&p) {
                prop_assert_eq!(&repr.to_bytes()[..], &bytes[..40]);
            }
        }
        if let Ok(p) = udp::Packet::new_checked(&bytes[..]) {
            prop_assert_eq!(&udp::Repr::parse(&p).unwrap().to_bytes()[..], &bytes[..8]);
        }
        if let Ok(p) = arp::Packet::new_checked(&bytes[..]) {
            if let Ok(repr) = arp::Repr::parse(&p) {
                let mut out = [0u8; 28];
                repr.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..28]);
            }
        }
        if let Ok(p) = ndp::Packet::new_checked(&bytes[..]) {
            let _ = (p.options().count(), p.link_layer_addrs(1).count(), ndp::Repr::parse(&p));
            let _ = p.verify_checksum(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
        }
        let _ = (ip::addresses(&bytes), ip::udp_payload_offset(&bytes), checksum::checksum(&bytes));
    }

    /// The headers a datagram is rebuilt with are the ones rxe writes.
    #[test]
    fn datagram_headers_agree_with_etherparse(src: [u8; 4], dst: [u8; 4], sport: u16, id: u16, len in 0usize..9000) {
        let source = SocketAddr::new(IpAddr::from(src), sport);
        let headers = ip::DatagramHeaders::new(source, IpAddr::from(dst), id, len).unwrap();
        let mut out = [0u8; 28];
        headers.emit(&mut out).unwrap();
        let oracle = Ipv4HeaderSlice::from_slice(&out).unwrap();
        prop_assert_eq!(oracle.identification(), id);
        prop_assert!(oracle.dont_fragment());
        prop_assert_eq!(usize::from(oracle.total_len()), 28 + len);
        prop_assert_eq!(oracle.header_checksum(), oracle.to_header().calc_header_checksum());
        let udp = UdpHeaderSlice::from_slice(&out[20..]).unwrap();
        prop_assert_eq!((udp.source_port(), udp.destination_port(), udp.checksum()), (sport, 4791, 0));
    }
}
