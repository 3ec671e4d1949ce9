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
