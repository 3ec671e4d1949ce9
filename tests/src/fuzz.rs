//! The body of the fuzz targets, shared with the proptest suite so that the
//! normal test run exercises it too.
//!
//! Both functions take arbitrary bytes and must never panic on their own:
//! every `assert!` below states something the wire crate promises for any
//! input, so a panic here is a bug in `uroce-wire` or `uroce decode` (or in
//! a crate they use), never in the input.

use uroce::decode::{decode_bytes, Format};
use uroce_wire::frame::{classify, Classified, IpHeader, Link, RoceFrame};
use uroce_wire::icrc::ICRC_LEN;
use uroce_wire::opcode::{HeaderKind, Mask};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, rdeth, reth, roce,
};

/// Every link type a capture can name, with the length of the link header
/// that [`classify`] strips and a [`uroce_wire::frame::FrameRepr`] does not
/// emit again (the Ethernet header, when there is one, is part of the repr).
const LINKS: [(Link, usize); 5] = [
    (Link::Ethernet, 0),
    (Link::RawIp, 0),
    (Link::LinuxSll, 16),
    (Link::LinuxSll2, 20),
    (Link::Null, 4),
];

/// Feeds `data` to every parser of the wire crate and exercises every
/// accessor: frame classification under each link type (and, for a RoCEv2
/// frame, its checks and the parse/emit round trip), the transport packet,
/// and every header view and `Repr` on a prefix of the bytes.
pub fn parse_frame(data: &[u8]) {
    for (link, link_len) in LINKS {
        match classify(data, link) {
            Classified::Roce(frame) => roce_frame(data, link_len, &frame),
            Classified::Other(other) => {
                let _ = other.to_string();
            }
        }
    }
    transport(data);
    headers(data);
}

/// Walks a capture file held in memory, then decodes it as `uroce decode`
/// does, in both output formats. Every frame the walk yields also goes
/// through [`parse_frame`]'s classification under the link type the file
/// names.
pub fn parse_capture(data: &[u8]) {
    if let Ok(reader) = CaptureReader::new(data) {
        let _ = reader.pcap_link_type();
        let mut last = 0;
        for item in reader {
            match item {
                Ok(frame) => {
                    assert_eq!(frame.number, last + 1, "frames are numbered 1, 2, 3, ...");
                    last = frame.number;
                    let _ = (frame.timestamp, frame.link_type, frame.orig_len);
                    if let Some(link) = frame.link {
                        if let Classified::Roce(roce) = classify(frame.data, link) {
                            let link_len =
                                LINKS.iter().find(|(l, _)| *l == link).map_or(0, |l| l.1);
                            roce_frame(frame.data, link_len, &roce);
                        }
                    }
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
    for format in [Format::Tsv, Format::Text] {
        match decode_bytes(data, format, &mut std::io::sink()) {
            Ok((summary, cut)) => {
                assert_eq!(
                    summary.roce,
                    summary.icrc_ok + summary.icrc_bad,
                    "every RoCEv2 frame is either intact or not"
                );
                assert!(summary.roce <= summary.frames);
                assert_eq!(summary.opcodes.values().sum::<usize>(), summary.roce);
                let _ = summary.clean();
                if let Some(cut) = cut {
                    let _ = cut.to_string();
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// The checks and the round trip of one RoCEv2 frame; `data` is the whole
/// captured frame and `link_len` the length of the link header that the
/// frame's repr does not emit.
fn roce_frame(data: &[u8], link_len: usize, frame: &RoceFrame<'_>) {
    let _ = (frame.ip.source(), frame.ip.destination(), frame.ip.header_len());
    let _ = (&frame.ethernet, &frame.udp, frame.trailer, frame.framing_error);
    let _ = (frame.ip_header_bytes(), frame.transport());
    let ip_ok = frame.ip_checksum_ok();
    let udp_ok = frame.udp_checksum_ok();
    let computed = frame.computed_icrc();
    let stored = frame.stored_icrc();
    let icrc_ok = frame.icrc_ok();
    let intact = frame.integrity_ok();
    assert_eq!(icrc_ok, computed.is_some() && computed == stored);
    assert_eq!(intact, icrc_ok && ip_ok && udp_ok);
    if matches!(frame.ip, IpHeader::V6(_)) {
        assert!(ip_ok, "IPv6 has no header checksum");
    }

    let packet = frame.packet();
    if let Ok(packet) = &packet {
        assert!(frame.framing_error.is_none());
        assert!(computed.is_some(), "a well-formed packet always has an ICRC to compute");
        assert_eq!(stored, Some(packet.icrc()));
        packet_accessors(packet);
    }

    let Ok(repr) = frame.repr() else {
        assert!(packet.is_err(), "repr fails only where packet() does");
        return;
    };
    let packet = packet.expect("repr succeeded");
    let len = repr.buffer_len();
    let mut out = vec![0xa5u8; len];
    let written = repr.emit(&mut out).expect("a parsed frame emits");
    assert_eq!(written, len);

    // The frame's bytes after the link header (an Ethernet header is part
    // of the repr, a cooked or loopback header is not).
    let original = &data[link_len..];
    assert_eq!(len, original.len(), "the emitted frame has the captured length");

    // Emit writes the canonical form of what was parsed: zero pad bytes and
    // a freshly computed ICRC. Those are the only bytes allowed to differ
    // from the capture, and only when the capture itself is not canonical.
    // Where they sit: the trailer (Ethernet padding) ends the frame, the
    // transport packet ends just before it, the ICRC ends the transport
    // packet and the pad comes right before the ICRC.
    let icrc_end = len - frame.trailer.len();
    let icrc_at = icrc_end - ICRC_LEN;
    let pad_at = icrc_at - packet.pad().len();
    let mut expected = original.to_vec();
    expected[pad_at..icrc_at].fill(0);
    expected[icrc_at..icrc_end].copy_from_slice(&out[icrc_at..icrc_end]);
    assert_eq!(out, expected, "emit(parse(frame)) differs from the frame outside pad and ICRC");
    // The emitted ICRC is right, and so is the frame's own wherever the pad
    // was already canonical.
    let emitted_icrc = uroce_wire::icrc::read(&out[icrc_at..icrc_end]);
    if packet.pad().iter().all(|&b| b == 0) {
        assert_eq!(emitted_icrc, computed);
        if icrc_ok {
            assert_eq!(out, original, "a canonical frame round-trips bit for bit");
        }
    }
    // The emitted bytes read back as the same kind of frame (they start
    // with the Ethernet header if the repr has one, else with IP).
    let link = if repr.ethernet.is_some() { Link::Ethernet } else { Link::RawIp };
    reread(&out, link, &repr.roce);
}

/// Reads an emitted frame back: it is RoCEv2, its ICRC is right, and it
/// holds the same transport packet.
fn reread(out: &[u8], link: Link, roce: &roce::Repr<'_>) {
    let Classified::Roce(again) = classify(out, link) else {
        panic!("an emitted RoCEv2 frame classifies as RoCEv2");
    };
    assert!(again.icrc_ok(), "an emitted frame carries the right ICRC");
    assert_eq!(again.repr().map(|r| r.roce), Ok(*roce));
}

/// The transport packet read straight from the bytes, and its round trip.
fn transport(data: &[u8]) {
    let Ok(packet) = roce::Packet::new_checked(data) else {
        return;
    };
    packet_accessors(&packet);
    let repr = roce::Repr::parse(&packet).expect("a checked packet parses");
    let info = repr.check().expect("a parsed packet is consistent with the opcode table");
    assert_eq!(info.opcode, packet.bth().opcode());
    assert_eq!(repr.ext.mask(), info.mask.intersection(Mask::HEADERS));
    assert_eq!(repr.header_len(), info.length);
    assert_eq!(repr.buffer_len(), data.len());
    let mut out = vec![0xa5u8; repr.buffer_len()];
    repr.emit(&mut roce::Packet::new_unchecked(&mut out[..]));
    // Emit writes zero pad bytes and a zero ICRC (the framing computes
    // it); everything else is the input, bit for bit.
    let mut expected = data.to_vec();
    let pad_at = data.len() - ICRC_LEN - packet.pad().len();
    expected[pad_at..].fill(0);
    assert_eq!(out, expected, "roce emit(parse(bytes)) differs outside pad and ICRC");
}

/// Every accessor of a checked transport packet.
fn packet_accessors(packet: &roce::Packet<&[u8]>) {
    let info = packet.info();
    let bth = packet.bth();
    bth_accessors(&bth);
    assert_eq!(info.opcode, bth.opcode());
    for kind in HeaderKind::ALL {
        let bytes = packet.header(kind);
        assert_eq!(bytes.is_some(), info.mask.contains(kind.mask()));
        if let Some(b) = bytes {
            assert_eq!(b.len(), kind.header_len());
        }
        let _ = kind.name();
    }
    if let Some(h) = packet.reth() {
        let _ = (h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = packet.aeth() {
        let s = h.syndrome();
        let _ = (s.to_string(), s.credits(), s.rnr_wait_us(), h.msn());
    }
    if let Some(h) = packet.atomic_eth() {
        let _ = (h.va(), h.rkey(), h.swap_add(), h.compare());
    }
    if let Some(h) = packet.atomic_ack_eth() {
        let _ = h.orig();
    }
    if let Some(h) = packet.deth() {
        let _ = (h.qkey(), h.qkey().is_privileged(), h.resv8(), h.src_qpn());
    }
    if let Some(h) = packet.rdeth() {
        let _ = (h.resv8(), h.eecn());
    }
    if let Some(h) = packet.immdt() {
        let _ = h.imm();
    }
    if let Some(h) = packet.ieth() {
        let _ = h.rkey();
    }
    if let Some(h) = packet.feth() {
        let _ = (h.selectivity_level(), h.placement_type(), h.reserved());
    }
    let len = packet.covered().len() + ICRC_LEN;
    assert_eq!(info.length + packet.payload().len() + packet.pad().len() + ICRC_LEN, len);
    assert_eq!(packet.pad().len(), usize::from(bth.pad_count()));
    if !info.is(Mask::PAYLOAD) {
        assert!(packet.payload().is_empty() && packet.pad().is_empty());
    }
    let _ = packet.icrc();
}

fn bth_accessors(p: &bth::Packet<&[u8]>) {
    let op = p.opcode();
    let _ = (op.name(), op.transport(), op.info(), op.to_string());
    let _ = (p.solicited(), p.mig_req(), p.pad_count(), p.tver(), p.pkey());
    let _ = (p.fecn(), p.becn(), p.resv6(), p.dest_qpn(), p.ack_req(), p.resv7(), p.psn());
}

/// Parses the start of `data` as one header, re-emits it over a buffer of
/// 0xa5 and checks that the header's bytes come back unchanged: every
/// header keeps every bit, reserved ones included.
macro_rules! header_round_trip {
    ($data:expr, $module:ident, |$p:ident| $accessors:expr) => {{
        if let Ok($p) = $module::Packet::new_checked($data) {
            let _ = $accessors;
            let repr = $module::Repr::parse(&$p).expect("a checked header parses");
            assert_eq!(repr.buffer_len(), $module::HEADER_LEN);
            let mut out = [0xa5u8; $module::HEADER_LEN];
            repr.emit(&mut $module::Packet::new_unchecked(&mut out[..]));
            assert_eq!(
                &out[..],
                &$data[..$module::HEADER_LEN],
                concat!(stringify!($module), " emit(parse(bytes)) differs")
            );
            let again = $module::Repr::parse(&$module::Packet::new_checked(&out[..]).unwrap());
            assert_eq!(again, Ok(repr));
            let _ = $p.into_inner();
        } else {
            assert!($data.len() < $module::HEADER_LEN, "only a short buffer is refused");
        }
    }};
}

/// Every extension header (and the BTH) read from the start of `data`.
fn headers(data: &[u8]) {
    header_round_trip!(data, bth, |p| bth_accessors(&p));
    header_round_trip!(data, reth, |p| (p.va(), p.rkey(), p.dma_len()));
    header_round_trip!(data, aeth, |p| {
        let s = p.syndrome();
        assert_eq!(aeth::Syndrome::from_u8(s.to_u8()), s);
        (s.to_string(), s.credits(), s.rnr_wait_us(), p.msn())
    });
    header_round_trip!(data, atomic_eth, |p| (p.va(), p.rkey(), p.swap_add(), p.compare()));
    header_round_trip!(data, atomic_ack_eth, |p| p.orig());
    header_round_trip!(data, deth, |p| (p.qkey(), p.resv8(), p.src_qpn()));
    header_round_trip!(data, rdeth, |p| (p.resv8(), p.eecn()));
    header_round_trip!(data, immdt, |p| p.imm());
    header_round_trip!(data, ieth, |p| p.rkey());
    header_round_trip!(data, feth, |p| (p.selectivity_level(), p.placement_type(), p.reserved()));
}

/// The link host's own address and MAC in [`link_frames`].
pub const LINK_MAC: [u8; 6] = [0x02, 0, 169, 254, 0, 2];
pub const LINK_IP: [u8; 4] = [169, 254, 0, 2];
/// The link MTU [`link_frames`] gives the host.
pub const LINK_IP_MTU: usize = 1500;
/// The TCP port its listener waits on.
pub const LINK_TCP_PORT: u16 = 18515;

/// Arbitrary bytes as what happens on a uroce link
/// (`uroce_net::link::LinkHost`, the L2 transport's host): a script of
/// frames arriving from the network (raw, or a valid ARP/NS/TCP/RoCE frame
/// with one byte changed), IP packets the HCA sends, and time passing.
///
/// Frames from the network are hostile input: the host must never panic,
/// a RoCE packet it hands to the HCA lies inside the frame, every frame it
/// sends is well-formed Ethernet from its own MAC within the link MTU, and
/// whatever came before, it still answers an ARP request for its address.
pub fn link_frames(data: &[u8]) {
    use std::net::{IpAddr, Ipv4Addr};
    use uroce_hca::time::Instant;
    use uroce_net::link::{Ingress, LinkHost};

    let own = Ipv4Addr::from(LINK_IP);
    let mut now_ns = 1_000_000u64;
    let mut host =
        LinkHost::new(LINK_MAC, IpAddr::V4(own), 16, LINK_IP_MTU as u32, 7, Instant::from_nanos(0));
    let _listener = host.tcp_listen(LINK_TCP_PORT).expect("a TCP listener");
    let mut script = Script(data);
    while let Some(op) = script.byte() {
        match op % 5 {
            0 => {
                let len = usize::from(script.u16().unwrap_or(0)) % (LINK_IP_MTU + 64);
                let frame = script.take(len);
                check_ingress(&mut host, frame);
            }
            1 => {
                let which = script.byte().unwrap_or(0);
                let at = usize::from(script.u16().unwrap_or(0));
                let value = script.byte().unwrap_or(0);
                let mut frame = link_template(which);
                if !frame.is_empty() {
                    let at = at % frame.len();
                    frame[at] ^= value;
                }
                check_ingress(&mut host, &frame);
            }
            2 => {
                let last = script.byte().unwrap_or(0);
                let destination = IpAddr::V4(Ipv4Addr::new(169, 254, last % 4, last));
                let len = usize::from(script.u16().unwrap_or(0)) % (LINK_IP_MTU + 1);
                let packet = script.take(len).to_vec();
                let mut out = Vec::new();
                let _ =
                    host.encapsulate(Instant::from_nanos(now_ns), &packet, destination, &mut out);
                if !out.is_empty() {
                    check_sent(&out);
                    assert_eq!(&out[14..], &packet[..], "the packet travels unchanged");
                }
            }
            3 => now_ns += u64::from(script.byte().unwrap_or(0)) * 10_000_000,
            _ => {}
        }
        host.poll(Instant::from_nanos(now_ns));
        while let Some(frame) = host.take_frame() {
            check_sent(&frame);
        }
        let _ = host.poll_at_ns(Instant::from_nanos(now_ns));
    }

    // Still alive: a new neighbour's ARP request is answered.
    let asker = [0x52, 0x54, 0, 0, 0, 0x99];
    let request = arp_request(asker, [169, 254, 0, 99], LINK_IP);
    assert_eq!(host.ingress(&request), Ingress::Host, "an ARP request goes to the host stack");
    host.poll(Instant::from_nanos(now_ns));
    let mut answered = false;
    while let Some(frame) = host.take_frame() {
        check_sent(&frame);
        answered |= frame[0..6] == asker && frame[12..14] == [0x08, 0x06] && frame[21] == 2;
    }
    assert!(answered, "the host answers ARP after any input");

    /// One frame from the network.
    fn check_ingress(host: &mut LinkHost, frame: &[u8]) {
        if let Ingress::Roce(packet) = host.ingress(frame) {
            assert!(frame.len() >= 14 + packet.len(), "the packet lies inside the frame");
            assert_eq!(&frame[14..14 + packet.len()], packet, "the packet is the frame's");
        }
    }

    /// One frame the host sends.
    fn check_sent(frame: &[u8]) {
        assert!(frame.len() >= 14, "an Ethernet header: {frame:02x?}");
        assert!(frame.len() <= 14 + LINK_IP_MTU, "within the link MTU: {} bytes", frame.len());
        assert_eq!(frame[6..12], LINK_MAC, "from the host's own MAC");
    }
}

/// Reads a [`link_frames`] script.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.byte()?, self.byte()?]))
    }

    /// Up to `len` bytes (fewer at the end).
    fn take(&mut self, len: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(len.min(self.0.len()));
        self.0 = rest;
        head
    }
}

/// An ARP request from `mac`/`ip` for `target` (42 bytes, unpadded).
pub fn arp_request(mac: [u8; 6], ip: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f
}

/// A valid frame to the link host at [`LINK_IP`] (checksums right), for
/// the fuzzer to change a byte of: an ARP request, a TCP SYN to its
/// listener, a RoCE packet, an IPv6 neighbour solicitation, an ICMP echo.
pub fn link_template(which: u8) -> Vec<u8> {
    use etherparse::PacketBuilder;
    let peer_mac = [0x52, 0x54, 0, 0, 0, 1];
    let peer_ip = [169, 254, 0, 1];
    let mut frame = Vec::new();
    let ok = match which % 5 {
        0 => return arp_request(peer_mac, peer_ip, LINK_IP),
        1 => PacketBuilder::ethernet2(peer_mac, LINK_MAC)
            .ipv4(peer_ip, LINK_IP, 64)
            .tcp(40000, LINK_TCP_PORT, 1000, 64240)
            .syn()
            .write(&mut frame, &[]),
        2 => PacketBuilder::ethernet2(peer_mac, LINK_MAC)
            .ipv4(peer_ip, LINK_IP, 64)
            .udp(49152, 4791)
            .write(&mut frame, &[0x64, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 0, 0, 0, 0]),
        3 => {
            // Neighbour solicitation for the host's link-local address.
            let target = uroce_net::link::link_local_for(LINK_MAC).octets();
            let solicited =
                [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, target[13], target[14], target[15]];
            let source = uroce_net::link::link_local_for(peer_mac).octets();
            let mut body = vec![0u8; 4];
            body.extend_from_slice(&target);
            body.extend_from_slice(&[1, 1]);
            body.extend_from_slice(&peer_mac);
            let dst_mac = [0x33, 0x33, 0xff, target[13], target[14], target[15]];
            PacketBuilder::ethernet2(peer_mac, dst_mac)
                .ipv6(source, solicited, 255)
                .icmpv6(etherparse::Icmpv6Type::Unknown {
                    type_u8: 135,
                    code_u8: 0,
                    bytes5to8: [0; 4],
                })
                .write(&mut frame, &body[4..])
        }
        _ => PacketBuilder::ethernet2(peer_mac, LINK_MAC)
            .ipv4(peer_ip, LINK_IP, 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut frame, b"ping"),
    };
    ok.expect("a template frame");
    frame
}
