//! Properties of the wire crate: every header and whole packets and frames
//! round-trip, the ICRC catches every single-bit error it is meant to
//! catch, PSN arithmetic is serial arithmetic, and no bytes make a parser
//! (or `uroce decode`) panic.

use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use std::sync::OnceLock;
use uroce_tests::fuzz::{parse_capture, parse_frame};
use uroce_tests::golden_dir;
use uroce_wire::frame::{classify, Classified, FrameRepr, IpHeader, Link, Other};
use uroce_wire::opcode::{known, HeaderKind, Mask, OpcodeInfo};
use uroce_wire::roce::ExtHeaders;
use uroce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, rdeth, reth, roce, Error,
    Opcode, Psn, Qkey, Qpn, Rkey, ROCEV2_UDP_PORT,
};

// ---------------------------------------------------------------------------
// Header strategies, and each header's layout written out from the IBA
// figures, independently of the crate's `field` modules.

fn qpn() -> impl Strategy<Value = Qpn> {
    (0..=Qpn::MAX).prop_map(Qpn::new)
}

fn psn() -> impl Strategy<Value = Psn> {
    (0..=Psn::MASK).prop_map(Psn::new)
}

fn u24() -> impl Strategy<Value = u32> {
    0..=0x00ff_ffffu32
}

fn be24(value: u32) -> [u8; 3] {
    let b = value.to_be_bytes();
    [b[1], b[2], b[3]]
}

prop_compose! {
    /// A BTH with the given opcode and every other field arbitrary (within
    /// its width).
    fn bth_with(opcode: Opcode)(
        solicited: bool,
        mig_req: bool,
        pad_count in 0u8..=3,
        tver in 0u8..=15,
        pkey: u16,
        fecn: bool,
        becn: bool,
        resv6 in 0u8..=0x3f,
        dest_qpn in qpn(),
        ack_req: bool,
        resv7 in 0u8..=0x7f,
        psn in psn(),
    ) -> bth::Repr {
        bth::Repr {
            opcode, solicited, mig_req, pad_count, tver, pkey, fecn, becn, resv6, dest_qpn,
            ack_req, resv7, psn,
        }
    }
}

fn bth_repr() -> impl Strategy<Value = bth::Repr> {
    any::<u8>().prop_flat_map(|op| bth_with(Opcode(op)))
}

fn bth_layout(r: &bth::Repr) -> Vec<u8> {
    let mut b = vec![r.opcode.0];
    b.push(u8::from(r.solicited) << 7 | u8::from(r.mig_req) << 6 | r.pad_count << 4 | r.tver);
    b.extend_from_slice(&r.pkey.to_be_bytes());
    b.push(u8::from(r.fecn) << 7 | u8::from(r.becn) << 6 | r.resv6);
    b.extend_from_slice(&be24(r.dest_qpn.value()));
    b.push(u8::from(r.ack_req) << 7 | r.resv7);
    b.extend_from_slice(&be24(r.psn.value()));
    b
}

prop_compose! {
    fn reth_repr()(va: u64, rkey: u32, dma_len: u32) -> reth::Repr {
        reth::Repr { va, rkey: Rkey(rkey), dma_len }
    }
}

fn reth_layout(r: &reth::Repr) -> Vec<u8> {
    [&r.va.to_be_bytes()[..], &r.rkey.0.to_be_bytes(), &r.dma_len.to_be_bytes()].concat()
}

prop_compose! {
    /// Any syndrome byte (every byte is a syndrome) and any 24-bit MSN.
    fn aeth_repr()(syndrome: u8, msn in u24()) -> aeth::Repr {
        aeth::Repr { syndrome: aeth::Syndrome::from_u8(syndrome), msn }
    }
}

fn aeth_layout(r: &aeth::Repr) -> Vec<u8> {
    [&[r.syndrome.to_u8()][..], &be24(r.msn)].concat()
}

prop_compose! {
    fn atomic_eth_repr()(va: u64, rkey: u32, swap_add: u64, compare: u64) -> atomic_eth::Repr {
        atomic_eth::Repr { va, rkey: Rkey(rkey), swap_add, compare }
    }
}

fn atomic_eth_layout(r: &atomic_eth::Repr) -> Vec<u8> {
    [
        &r.va.to_be_bytes()[..],
        &r.rkey.0.to_be_bytes(),
        &r.swap_add.to_be_bytes(),
        &r.compare.to_be_bytes(),
    ]
    .concat()
}

fn atomic_ack_eth_repr() -> impl Strategy<Value = atomic_ack_eth::Repr> {
    any::<u64>().prop_map(|orig| atomic_ack_eth::Repr { orig })
}

fn atomic_ack_eth_layout(r: &atomic_ack_eth::Repr) -> Vec<u8> {
    r.orig.to_be_bytes().to_vec()
}

prop_compose! {
    fn deth_repr()(qkey: u32, resv8: u8, src_qpn in qpn()) -> deth::Repr {
        deth::Repr { qkey: Qkey(qkey), resv8, src_qpn }
    }
}

fn deth_layout(r: &deth::Repr) -> Vec<u8> {
    [&r.qkey.0.to_be_bytes()[..], &[r.resv8], &be24(r.src_qpn.value())].concat()
}

prop_compose! {
    fn rdeth_repr()(resv8: u8, eecn in u24()) -> rdeth::Repr {
        rdeth::Repr { resv8, eecn }
    }
}

fn rdeth_layout(r: &rdeth::Repr) -> Vec<u8> {
    [&[r.resv8][..], &be24(r.eecn)].concat()
}

fn immdt_repr() -> impl Strategy<Value = immdt::Repr> {
    any::<u32>().prop_map(|imm| immdt::Repr { imm })
}

fn immdt_layout(r: &immdt::Repr) -> Vec<u8> {
    r.imm.to_be_bytes().to_vec()
}

fn ieth_repr() -> impl Strategy<Value = ieth::Repr> {
    any::<u32>().prop_map(|rkey| ieth::Repr { rkey: Rkey(rkey) })
}

fn ieth_layout(r: &ieth::Repr) -> Vec<u8> {
    r.rkey.0.to_be_bytes().to_vec()
}

prop_compose! {
    /// SEL (2 bits), PLT (4 bits) and the 26 reserved bits above them.
    fn feth_repr()(
        selectivity_level in 0u8..=3,
        placement_type in 0u8..=15,
        reserved in 0u32..(1 << 26),
    ) -> feth::Repr {
        feth::Repr { selectivity_level, placement_type, reserved }
    }
}

fn feth_layout(r: &feth::Repr) -> Vec<u8> {
    let bits = r.reserved << 6 | u32::from(r.selectivity_level) << 4 | u32::from(r.placement_type);
    bits.to_be_bytes().to_vec()
}

/// Emits `$repr` into a zeroed buffer and into one full of 0xa5 (the same
/// bytes must come out: emit writes every bit), checks the bytes against
/// the layout, parses them back (from the exact buffer and from a longer
/// one) and checks that one byte less is refused.
macro_rules! check_header {
    ($module:ident, $repr:expr, $layout:expr) => {{
        let repr = $repr;
        assert_eq!(repr.buffer_len(), $module::HEADER_LEN);
        let mut zero = [0u8; $module::HEADER_LEN];
        repr.emit(&mut $module::Packet::new_unchecked(&mut zero[..]));
        let mut a5 = [0xa5u8; $module::HEADER_LEN];
        repr.emit(&mut $module::Packet::new_unchecked(&mut a5[..]));
        assert_eq!(zero, a5, "{}: emit leaves old buffer bits", stringify!($module));
        assert_eq!(
            &zero[..],
            &$layout[..],
            "{}: emit differs from the layout",
            stringify!($module)
        );
        let packet = $module::Packet::new_checked(&zero[..]).unwrap();
        assert_eq!($module::Repr::parse(&packet), Ok(repr));
        let longer = [&zero[..], &[0x5a; 9][..]].concat();
        let packet = $module::Packet::new_checked(&longer[..]).unwrap();
        assert_eq!($module::Repr::parse(&packet), Ok(repr));
        assert_eq!(
            $module::Packet::new_checked(&zero[..$module::HEADER_LEN - 1]),
            Err(Error::Truncated)
        );
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bth_round_trips(r in bth_repr()) {
        check_header!(bth, r, bth_layout(&r));
    }

    #[test]
    fn reth_round_trips(r in reth_repr()) {
        check_header!(reth, r, reth_layout(&r));
    }

    #[test]
    fn aeth_round_trips(r in aeth_repr()) {
        check_header!(aeth, r, aeth_layout(&r));
    }

    #[test]
    fn atomic_eth_round_trips(r in atomic_eth_repr()) {
        check_header!(atomic_eth, r, atomic_eth_layout(&r));
    }

    #[test]
    fn atomic_ack_eth_round_trips(r in atomic_ack_eth_repr()) {
        check_header!(atomic_ack_eth, r, atomic_ack_eth_layout(&r));
    }

    #[test]
    fn deth_round_trips(r in deth_repr()) {
        check_header!(deth, r, deth_layout(&r));
    }

    #[test]
    fn rdeth_round_trips(r in rdeth_repr()) {
        check_header!(rdeth, r, rdeth_layout(&r));
    }

    #[test]
    fn immdt_round_trips(r in immdt_repr()) {
        check_header!(immdt, r, immdt_layout(&r));
    }

    #[test]
    fn ieth_round_trips(r in ieth_repr()) {
        check_header!(ieth, r, ieth_layout(&r));
    }

    #[test]
    fn feth_round_trips(r in feth_repr()) {
        check_header!(feth, r, feth_layout(&r));
    }
}

/// Every one of the 256 syndrome bytes, with MSNs at both ends of the
/// 24-bit range, through the AETH round trip; and the decoded syndrome
/// says what the byte says.
#[test]
fn aeth_round_trips_every_syndrome_byte() {
    for byte in 0..=255u8 {
        for msn in [0, 1, 0x00ab_cdef, 0x00ff_ffff] {
            let r = aeth::Repr { syndrome: aeth::Syndrome::from_u8(byte), msn };
            check_header!(aeth, r, [byte, (msn >> 16) as u8, (msn >> 8) as u8, msn as u8]);
        }
        let value = byte & 0x1f;
        let expected = match (byte >> 7, (byte >> 5) & 0x3) {
            (0, 0b00) => aeth::Syndrome::Ack { credit_code: value },
            (0, 0b01) => aeth::Syndrome::RnrNak { timer_code: value },
            (0, 0b11) => aeth::Syndrome::Nak(aeth::NakCode::from_code(value)),
            _ => aeth::Syndrome::Reserved(byte),
        };
        assert_eq!(aeth::Syndrome::from_u8(byte), expected, "syndrome {byte:#04x}");
        if let aeth::Syndrome::Nak(code) = expected {
            assert_eq!(code.code(), value);
        }
    }
}

// ---------------------------------------------------------------------------
// Whole transport packets, consistent with the opcode table.

/// The owned contents of a transport packet (a `roce::Repr` borrows its
/// payload).
#[derive(Debug, Clone)]
struct Parts {
    bth: bth::Repr,
    ext: ExtHeaders,
    payload: Vec<u8>,
}

impl Parts {
    fn repr(&self) -> roce::Repr<'_> {
        roce::Repr { bth: self.bth, ext: self.ext, payload: &self.payload }
    }
}

fn opt<S>(present: bool, strategy: S) -> BoxedStrategy<Option<S::Value>>
where
    S: Strategy + 'static,
    S::Value: Clone,
{
    if present {
        strategy.prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    }
}

fn known_opcodes() -> Vec<&'static OpcodeInfo> {
    known().collect()
}

/// A packet of a known opcode with exactly the extension headers its mask
/// names, a payload of 0..=300 bytes only where the mask allows one, and
/// the pad count that rounds the payload to 4 bytes.
fn parts() -> impl Strategy<Value = Parts> {
    select(known_opcodes()).prop_flat_map(|info| {
        let has = |bit: Mask| info.is(bit);
        let headers = (
            opt(has(Mask::RDETH), rdeth_repr()),
            opt(has(Mask::DETH), deth_repr()),
            opt(has(Mask::FETH), feth_repr()),
            opt(has(Mask::RETH), reth_repr()),
            opt(has(Mask::ATOMIC_ETH), atomic_eth_repr()),
            opt(has(Mask::AETH), aeth_repr()),
            opt(has(Mask::ATOMIC_ACK_ETH), atomic_ack_eth_repr()),
            opt(has(Mask::IMMDT), immdt_repr()),
            opt(has(Mask::IETH), ieth_repr()),
        );
        let ext = headers.prop_map(
            |(rdeth, deth, feth, reth, atomic_eth, aeth, atomic_ack_eth, immdt, ieth)| ExtHeaders {
                rdeth,
                deth,
                feth,
                reth,
                atomic_eth,
                aeth,
                atomic_ack_eth,
                immdt,
                ieth,
            },
        );
        let payload = if has(Mask::PAYLOAD) {
            vec(any::<u8>(), 0..=300).boxed()
        } else {
            Just(Vec::new()).boxed()
        };
        (bth_with(info.opcode), ext, payload).prop_map(|(mut bth, ext, payload)| {
            bth.pad_count = bth::pad_for(payload.len());
            Parts { bth, ext, payload }
        })
    })
}

/// The extension headers that are set, with their bytes per the layouts.
fn ext_layouts(ext: &ExtHeaders) -> Vec<(HeaderKind, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |kind, bytes: Option<Vec<u8>>| {
        if let Some(bytes) = bytes {
            out.push((kind, bytes));
        }
    };
    add(HeaderKind::Rdeth, ext.rdeth.as_ref().map(rdeth_layout));
    add(HeaderKind::Deth, ext.deth.as_ref().map(deth_layout));
    add(HeaderKind::Feth, ext.feth.as_ref().map(feth_layout));
    add(HeaderKind::Reth, ext.reth.as_ref().map(reth_layout));
    add(HeaderKind::AtomicEth, ext.atomic_eth.as_ref().map(atomic_eth_layout));
    add(HeaderKind::Aeth, ext.aeth.as_ref().map(aeth_layout));
    add(HeaderKind::AtomicAckEth, ext.atomic_ack_eth.as_ref().map(atomic_ack_eth_layout));
    add(HeaderKind::ImmDt, ext.immdt.as_ref().map(immdt_layout));
    add(HeaderKind::Ieth, ext.ieth.as_ref().map(ieth_layout));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn roce_packet_round_trips(p in parts()) {
        let repr = p.repr();
        let info = repr.check().expect("the strategy builds consistent packets");
        let pad = usize::from(p.bth.pad_count);
        let len = repr.buffer_len();
        prop_assert_eq!(len, info.length + p.payload.len() + pad + 4);
        prop_assert_eq!((p.payload.len() + pad) % 4, 0);

        let mut buf = vec![0xa5u8; len];
        repr.emit(&mut roce::Packet::new_unchecked(&mut buf[..]));
        let mut zero = vec![0u8; len];
        repr.emit(&mut roce::Packet::new_unchecked(&mut zero[..]));
        prop_assert_eq!(&buf, &zero, "emit leaves old buffer bits");

        // The bytes, per the layouts: BTH, each header at its table offset,
        // payload, zero pad, zero ICRC (the framing fills it in).
        let mut expected = bth_layout(&p.bth);
        for (kind, bytes) in ext_layouts(&p.ext) {
            prop_assert_eq!(info.offset(kind), Some(expected.len()));
            expected.extend_from_slice(&bytes);
        }
        prop_assert_eq!(expected.len(), info.length);
        expected.extend_from_slice(&p.payload);
        expected.resize(len, 0);
        prop_assert_eq!(&buf, &expected);

        let packet = roce::Packet::new_checked(&buf[..]).expect("emitted packet checks");
        prop_assert_eq!(roce::Repr::parse(&packet), Ok(repr));
        prop_assert_eq!(packet.info(), info);
        prop_assert_eq!(packet.payload(), &p.payload[..]);
        prop_assert_eq!(packet.pad(), &[0u8; 3][..pad]);
        prop_assert_eq!(packet.covered(), &buf[..len - 4]);
        prop_assert_eq!(packet.icrc(), 0);
    }
}

// ---------------------------------------------------------------------------
// Whole frames.

#[derive(Debug, Clone)]
enum Addrs {
    V4 { src: [u8; 4], dst: [u8; 4], ip_id: u16 },
    V6 { src: [u8; 16], dst: [u8; 16] },
}

#[derive(Debug, Clone)]
struct FrameParts {
    addrs: Addrs,
    src_port: u16,
    ethernet: Option<([u8; 6], [u8; 6])>,
    /// Whether the frame carries a real UDP checksum (rxe sends 0).
    udp_checksum: bool,
    parts: Parts,
}

fn addrs() -> impl Strategy<Value = Addrs> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(src, dst, ip_id)| Addrs::V4 { src, dst, ip_id }),
        (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(src, dst)| Addrs::V6 { src, dst }),
    ]
}

prop_compose! {
    fn frame_parts()(
        addrs in addrs(),
        src_port: u16,
        ethernet in proptest::option::of(any::<([u8; 6], [u8; 6])>()),
        udp_checksum: bool,
        parts in parts(),
    ) -> FrameParts {
        FrameParts { addrs, src_port, ethernet, udp_checksum, parts }
    }
}

/// Where the parts of an emitted frame are.
#[derive(Debug, Clone, Copy)]
struct Layout {
    link: Link,
    ip_at: usize,
    v4: bool,
    udp_at: usize,
    bth_at: usize,
    icrc_at: usize,
    len: usize,
}

impl FrameParts {
    fn repr(&self) -> FrameRepr<'_> {
        let roce = self.parts.repr();
        let repr = match self.addrs {
            Addrs::V4 { src, dst, ip_id } => FrameRepr::ipv4(
                (Ipv4Addr::from(src), Ipv4Addr::from(dst)),
                ip_id,
                self.src_port,
                roce,
            ),
            Addrs::V6 { src, dst } => {
                FrameRepr::ipv6((Ipv6Addr::from(src), Ipv6Addr::from(dst)), self.src_port, roce)
            }
        }
        .expect("a consistent packet frames");
        match self.ethernet {
            Some((source, destination)) => repr.with_ethernet(source, destination),
            None => repr,
        }
    }

    /// The emitted frame and where its parts are.
    fn emit(&self) -> (Vec<u8>, Layout) {
        let repr = self.repr();
        let mut buf = vec![0xa5u8; repr.buffer_len() + 5];
        let len = repr.emit(&mut buf).expect("emit");
        assert_eq!(len, repr.buffer_len());
        assert_eq!(buf[len..], [0xa5; 5], "emit wrote past the frame");
        buf.truncate(len);
        let ip_at = if self.ethernet.is_some() { 14 } else { 0 };
        let v4 = matches!(self.addrs, Addrs::V4 { .. });
        let udp_at = ip_at + if v4 { 20 } else { 40 };
        let bth_at = udp_at + 8;
        if self.udp_checksum {
            let checksum = match &repr.ip {
                IpHeader::V4(h) => repr.udp.calc_checksum_ipv4(h, &buf[bth_at..]),
                IpHeader::V6(h) => repr.udp.calc_checksum_ipv6(h, &buf[bth_at..]),
            }
            .expect("checksum");
            buf[udp_at + 6..udp_at + 8].copy_from_slice(&checksum.to_be_bytes());
        }
        let link = if self.ethernet.is_some() { Link::Ethernet } else { Link::RawIp };
        let layout = Layout { link, ip_at, v4, udp_at, bth_at, icrc_at: len - 4, len };
        (buf, layout)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A frame built the way rxe builds one classifies as RoCEv2, verifies,
    /// and turns back into the same repr and the same bytes.
    #[test]
    fn frame_round_trips(fp in frame_parts()) {
        let (buf, layout) = fp.emit();
        let built = fp.repr();
        let mut views = vec![(&buf[..], layout.link)];
        if layout.ip_at != 0 {
            // The same frame without its Ethernet header, as raw IP.
            views.push((&buf[layout.ip_at..], Link::RawIp));
        }
        for (bytes, link) in views {
            let Classified::Roce(frame) = classify(bytes, link) else {
                panic!("not RoCEv2 under {link:?}");
            };
            prop_assert_eq!(frame.framing_error, None);
            prop_assert!(frame.trailer.is_empty());
            prop_assert_eq!(frame.ethernet.is_some(), link == Link::Ethernet);
            prop_assert_eq!(&frame.ip, &built.ip);
            prop_assert_eq!(frame.udp.source_port, fp.src_port);
            prop_assert_eq!(frame.udp.destination_port, ROCEV2_UDP_PORT);
            prop_assert_eq!(frame.udp.checksum == 0, !fp.udp_checksum);
            prop_assert_eq!(frame.transport(), &buf[layout.bth_at..]);
            prop_assert!(frame.computed_icrc().is_some());
            prop_assert_eq!(frame.computed_icrc(), frame.stored_icrc());
            prop_assert!(frame.icrc_ok());
            prop_assert!(frame.ip_checksum_ok());
            prop_assert!(frame.udp_checksum_ok());
            prop_assert!(frame.integrity_ok());
            let packet = frame.packet().expect("packet");
            prop_assert_eq!(roce::Repr::parse(&packet), Ok(fp.parts.repr()));

            let repr = frame.repr().expect("repr");
            prop_assert_eq!(repr.roce, fp.parts.repr());
            prop_assert_eq!(&repr.ethernet, if link == Link::Ethernet { &built.ethernet } else { &None });
            let mut out = vec![0u8; repr.buffer_len()];
            prop_assert_eq!(repr.emit(&mut out), Ok(bytes.len()));
            prop_assert_eq!(&out[..], bytes);
            // The same, through the fuzz body's checks.
            parse_frame(bytes);
        }
    }
}

/// What a single-bit flip must do to a frame.
enum After {
    /// No longer RoCEv2, and exactly this frame instead.
    Other(Other),
    /// No longer RoCEv2: the headers do not read any more.
    Unreadable,
    /// No longer an IPv4 packet: read as IPv6, whose next header is the
    /// IPv4 flags byte (DF: 0x40).
    ReadAsIpv6 { next_header: u8 },
    /// Still RoCEv2, and:
    Roce {
        /// the framing check finds this;
        framing: Framing,
        /// the ICRC verifies (only a masked field was hit) or not;
        icrc_ok: bool,
        /// the IPv4 header checksum verifies or not (`None`: not checked);
        ip_checksum_ok: Option<bool>,
        /// the transport packet still parses as the same packet (`None`:
        /// the flip hit the transport packet, which may or may not parse).
        same_packet: Option<bool>,
    },
    /// The IPv4 header length changed, so every later byte is read at
    /// another place: whatever comes out may not pass as an intact RoCEv2
    /// packet.
    Reread,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Ok,
    Truncated,
    Malformed,
}

/// A single flip in a covered (or IPv4 checksum) bit that no router may
/// change: whatever it hits, a receiver must not take the frame for an
/// intact RoCEv2 packet.
fn after_flip(fp: &FrameParts, l: &Layout, flipped: &[u8], at: usize, bit: u8) -> After {
    let (src, dst) = match fp.addrs {
        Addrs::V4 { src, dst, .. } => (Ipv4Addr::from(src).into(), Ipv4Addr::from(dst).into()),
        Addrs::V6 { src, dst } => (Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into()),
    };
    let intact_but_icrc = |ip_checksum_ok| After::Roce {
        framing: Framing::Ok,
        icrc_ok: false,
        ip_checksum_ok,
        same_packet: Some(true),
    };
    // A flip outside the IP header leaves the IPv4 checksum right; one in
    // the IPv4 header (but for the reserved flag, see below) makes it wrong.
    let ip_untouched = Some(true);
    let ip_header_hit = Some(!l.v4);
    let ip_len_in_buf = l.len - l.ip_at;
    // The IP packet length after a flip in its length field: the UDP
    // header is still read from the captured bytes, so the frame stays
    // RoCEv2, with a framing error (the packet runs past the capture, or the
    // lengths disagree, or the IP length does not even cover IP and UDP).
    let length_changed = |new_ip_len: usize| {
        let framing =
            if new_ip_len > ip_len_in_buf { Framing::Truncated } else { Framing::Malformed };
        After::Roce {
            framing,
            icrc_ok: false,
            ip_checksum_ok: ip_header_hit,
            same_packet: Some(false),
        }
    };
    let be16 = |at: usize| usize::from(u16::from_be_bytes([flipped[at], flipped[at + 1]]));
    let mask = 1u8 << bit;
    if at >= l.bth_at {
        return if at >= l.icrc_at {
            intact_but_icrc(ip_untouched)
        } else {
            After::Roce {
                framing: Framing::Ok,
                icrc_ok: false,
                ip_checksum_ok: ip_untouched,
                same_packet: None,
            }
        };
    }
    if at >= l.udp_at {
        return match at - l.udp_at {
            0 | 1 => intact_but_icrc(ip_untouched),
            2 | 3 => After::Other(Other::Udp {
                src,
                dst,
                src_port: fp.src_port,
                dst_port: ROCEV2_UDP_PORT ^ (u16::from(mask) << (8 * (3 - (at - l.udp_at)))),
            }),
            4 | 5 => After::Roce {
                framing: Framing::Malformed,
                icrc_ok: false,
                ip_checksum_ok: ip_untouched,
                same_packet: Some(false),
            },
            _ => unreachable!("the UDP checksum is masked"),
        };
    }
    let o = at - l.ip_at;
    if l.v4 {
        match (o, bit) {
            // Version 4 becomes 5, 6, 0 or 12.
            (0, 4..=7) if flipped[at] >> 4 == 6 => After::ReadAsIpv6 { next_header: 0x40 },
            (0, 4..=7) => After::Unreadable,
            // IHL 5 becomes 4 or 1 (too short a header) or 7 or 13.
            (0, _) if flipped[at] & 0xf < 5 => After::Unreadable,
            (0, _) => After::Reread,
            (2 | 3, _) => length_changed(be16(l.ip_at + 2)),
            (4 | 5, _) => intact_but_icrc(Some(false)),
            // The reserved flag: the IPv4 checksum (over the bytes as
            // received) and the ICRC both catch the flip.
            (6, 7) => intact_but_icrc(Some(false)),
            (6, 6) => intact_but_icrc(Some(false)),
            // MF, or a fragment offset bit.
            (6 | 7, _) => After::Other(Other::Ipv4Fragment),
            (9, _) => After::Other(Other::Ip { src, dst, protocol: 17 ^ mask }),
            (10 | 11, _) => After::Roce {
                framing: Framing::Ok,
                icrc_ok: true,
                ip_checksum_ok: Some(false),
                same_packet: Some(true),
            },
            (12..=19, _) => intact_but_icrc(Some(false)),
            _ => unreachable!("masked IPv4 field"),
        }
    } else {
        match (o, bit) {
            (0, 4..=7) => After::Unreadable,
            (4 | 5, _) => length_changed(40 + be16(l.ip_at + 4)),
            (6, _) => After::Other(Other::Ip { src, dst, protocol: 17 ^ mask }),
            (8..=39, _) => intact_but_icrc(Some(true)),
            _ => unreachable!("masked IPv6 field"),
        }
    }
}

/// Whether a bit is in a field the ICRC leaves out (a router may change
/// it): IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label
/// and hop limit; the UDP checksum; BTH byte 4.
fn masked(l: &Layout, at: usize, bit: u8) -> bool {
    let o = at.wrapping_sub(l.ip_at);
    let ip = if l.v4 {
        matches!(o, 1 | 8 | 10 | 11)
    } else {
        (o == 0 && bit < 4) || matches!(o, 1..=3 | 7)
    };
    ip || at == l.udp_at + 6 || at == l.udp_at + 7 || at == l.bth_at + 4
}

/// The bits to flip: every bit of the IP, UDP and transport headers and of
/// the ICRC, and the sampled payload/pad bits.
fn bits_to_flip(l: &Layout, header_end: usize, samples: &[Index]) -> Vec<(usize, u8)> {
    let mut bits: Vec<(usize, u8)> = (l.ip_at..header_end)
        .chain(l.icrc_at..l.len)
        .flat_map(|at| (0..8).map(move |bit| (at, bit)))
        .collect();
    let body = header_end..l.icrc_at;
    if !body.is_empty() {
        for s in samples {
            let i = s.index(body.len() * 8);
            bits.push((body.start + i / 8, (i % 8) as u8));
        }
    }
    bits
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Flip each bit that the ICRC covers (or the IPv4 checksum field,
    /// which the IPv4 checksum covers) and see exactly what the receiver
    /// makes of it; in no case an intact RoCEv2 frame.
    #[test]
    fn covered_bit_flips_are_caught(fp in frame_parts(), samples in vec(any::<Index>(), 16)) {
        let (buf, l) = fp.emit();
        let header_end = l.bth_at + fp.parts.bth.opcode.info().unwrap().length;
        for (at, bit) in bits_to_flip(&l, header_end, &samples) {
            let v4_checksum = l.v4 && (at == l.ip_at + 10 || at == l.ip_at + 11);
            if masked(&l, at, bit) && !v4_checksum {
                continue;
            }
            let mut flipped = buf.clone();
            flipped[at] ^= 1 << bit;
            let what = format!("flip of byte {at} bit {bit} (layout {l:?})");
            let classified = classify(&flipped, l.link);
            match (after_flip(&fp, &l, &flipped, at, bit), classified) {
                (After::Other(expected), Classified::Other(other)) => {
                    prop_assert_eq!(other, expected, "{}", what);
                }
                (After::Unreadable, Classified::Other(other)) => {
                    prop_assert!(matches!(other, Other::Unreadable(_)), "{}: {:?}", what, other);
                }
                (After::ReadAsIpv6 { next_header }, Classified::Other(other)) => {
                    prop_assert!(
                        matches!(other, Other::Ip { protocol, src: core::net::IpAddr::V6(_), .. } if protocol == next_header),
                        "{}: {:?}", what, other
                    );
                }
                (After::Reread, Classified::Other(_)) => {}
                (After::Reread, Classified::Roce(frame)) => {
                    prop_assert!(!frame.integrity_ok() || frame.packet().is_err(), "{}", what);
                }
                (After::Roce { framing, icrc_ok, ip_checksum_ok, same_packet }, Classified::Roce(frame)) => {
                    let found = match frame.framing_error {
                        None => Framing::Ok,
                        Some(Error::Truncated) => Framing::Truncated,
                        Some(Error::Malformed(_)) => Framing::Malformed,
                        Some(other) => panic!("{what}: framing error {other:?}"),
                    };
                    prop_assert_eq!(found, framing, "{}", what);
                    prop_assert_eq!(frame.icrc_ok(), icrc_ok, "{}", what);
                    if framing != Framing::Ok {
                        prop_assert_eq!(frame.computed_icrc(), None, "{}", what);
                    }
                    if let Some(ok) = ip_checksum_ok {
                        prop_assert_eq!(frame.ip_checksum_ok(), ok, "{}", what);
                    }
                    match same_packet {
                        Some(true) => {
                            let repr = frame.repr().expect("the transport is untouched");
                            prop_assert_eq!(repr.roce, fp.parts.repr(), "{}", what);
                        }
                        Some(false) => prop_assert!(frame.packet().is_err(), "{}", what),
                        None => {}
                    }
                    // Whatever the flip, the frame is not taken as intact.
                    prop_assert!(!frame.integrity_ok(), "{}", what);
                }
                (_, Classified::Roce(_)) => panic!("{what}: still RoCEv2"),
                (_, Classified::Other(other)) => panic!("{what}: not RoCEv2 any more: {other:?}"),
            }
        }
    }

    /// Flips in the fields a router may change leave the ICRC valid; the
    /// IPv4 header checksum still catches TOS and TTL changes, and a UDP
    /// checksum (when used) catches BTH byte 4.
    #[test]
    fn masked_bit_flips_keep_the_icrc(fp in frame_parts()) {
        let (buf, l) = fp.emit();
        for at in l.ip_at..l.bth_at + bth::HEADER_LEN {
            for bit in 0..8 {
                let v4_checksum = l.v4 && (at == l.ip_at + 10 || at == l.ip_at + 11);
                if !masked(&l, at, bit) || v4_checksum {
                    continue;
                }
                let mut flipped = buf.clone();
                flipped[at] ^= 1 << bit;
                let what = format!("flip of byte {at} bit {bit} (layout {l:?})");
                let Classified::Roce(frame) = classify(&flipped, l.link) else {
                    panic!("{what}: not RoCEv2 any more");
                };
                prop_assert_eq!(frame.framing_error, None, "{}", what);
                prop_assert!(frame.icrc_ok(), "{}", what);
                // The packet reads back as built, but for the flipped bit
                // when it is one of BTH byte 4's (FECN, BECN, reserved).
                let mut expected = fp.parts.clone();
                if at == l.bth_at + 4 {
                    match bit {
                        7 => expected.bth.fecn ^= true,
                        6 => expected.bth.becn ^= true,
                        _ => expected.bth.resv6 ^= 1 << bit,
                    }
                }
                prop_assert_eq!(frame.repr().expect("repr").roce, expected.repr(), "{}", what);
                let in_udp_checksum = at == l.udp_at + 6 || at == l.udp_at + 7;
                if in_udp_checksum {
                    // Whether the UDP checksum then verifies depends on the
                    // value: zero means "not used", and a flip may land on
                    // the right sum. The ICRC is what matters here.
                    continue;
                }
                // IPv4 TOS/TTL: the header checksum no longer matches.
                let ip_ok = !(l.v4 && at < l.udp_at);
                prop_assert_eq!(frame.ip_checksum_ok(), ip_ok, "{}", what);
                // BTH byte 4 is in the UDP checksum when one is used.
                let udp_ok = !(at == l.bth_at + 4 && fp.udp_checksum);
                prop_assert_eq!(frame.udp_checksum_ok(), udp_ok, "{}", what);
                prop_assert_eq!(frame.integrity_ok(), ip_ok && udp_ok, "{}", what);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// PSN arithmetic.

const HALF: u32 = Psn::HALF_RANGE;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn psn_add_then_sub_is_identity(a in psn(), n: u32) {
        prop_assert_eq!(a.wrapping_add(n).wrapping_sub(n), a);
        prop_assert_eq!((a + n) - n, a);
        prop_assert_eq!(a.wrapping_add(n).value(), (a.value() + (n & Psn::MASK)) & Psn::MASK);
    }

    #[test]
    fn psn_distance_is_the_count_added(a in psn(), n in 0..HALF) {
        let n_i = n as i32;
        prop_assert_eq!(a.distance_to(a + n), n_i);
        prop_assert_eq!((a + n).distance_to(a), -n_i);
        prop_assert_eq!(a.distance_to(a - n), -n_i);
        if n > 0 {
            prop_assert!(a.is_before(a + n) && (a + n).is_after(a));
            prop_assert!(!a.is_after(a + n) && !(a + n).is_before(a));
            prop_assert_eq!(a.serial_cmp(a + n), core::cmp::Ordering::Less);
            prop_assert_eq!((a + n).serial_cmp(a), core::cmp::Ordering::Greater);
        }
        // Exactly half the range away reads as behind, from both sides.
        prop_assert_eq!(a.distance_to(a + HALF), -(HALF as i32));
    }

    #[test]
    fn psn_order_is_antisymmetric(a in psn(), b in psn()) {
        prop_assert_eq!(a.is_before(b), b.is_after(a));
        prop_assert_eq!(a.is_after(b), b.is_before(a));
        prop_assert!(!(a.is_before(b) && b.is_before(a)));
        prop_assert!(!(a.is_before(b) && a.is_after(b)));
        let d = a.distance_to(b);
        prop_assert!((-(HALF as i32)..HALF as i32).contains(&d));
        prop_assert_eq!(a + d as u32, b);
        prop_assert_eq!(d == 0, a == b);
        if d != -(HALF as i32) {
            // Anywhere but exactly half the range apart, exactly one of
            // before / equal / after holds, and serial_cmp agrees.
            prop_assert_eq!(b.distance_to(a), -d);
            let held = [a.is_before(b), a == b, a.is_after(b)];
            prop_assert_eq!(held.iter().filter(|&&h| h).count(), 1);
            let expected = if a.is_before(b) {
                core::cmp::Ordering::Less
            } else if a == b {
                core::cmp::Ordering::Equal
            } else {
                core::cmp::Ordering::Greater
            };
            prop_assert_eq!(a.serial_cmp(b), expected);
        }
    }

    #[test]
    fn psn_window_agrees_with_distance(
        start in psn(),
        len in 0..HALF,
        offset in prop_oneof![any::<u32>(), (0u32..16).prop_map(|k| k.wrapping_sub(8))],
        near_end: bool,
    ) {
        // Half the PSNs tried sit right around the window's two ends.
        let p = if near_end { start + len + offset } else { start + offset };
        let d = start.distance_to(p);
        prop_assert_eq!(p.in_window(start, len), d >= 0 && (d as u32) < len, "p={} start={} len={}", p, start, len);
    }
}

// ---------------------------------------------------------------------------
// No input makes a parser panic.

fn golden_opcodes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(golden_dir().join("opcodes.pcap")).expect("golden capture"))
}

/// A classic pcap header (either byte order, micro- or nanosecond
/// timestamps) naming one of the link types uroce reads, or another.
fn pcap_header() -> impl Strategy<Value = Vec<u8>> {
    let magics = vec![0xa1b2_c3d4u32, 0xa1b2_3c4d];
    let links = vec![1u32, 101, 228, 229, 113, 276, 0, 108, 12, 14, 147];
    (select(magics), select(links), any::<bool>(), any::<u32>()).prop_map(
        |(magic, link, big_endian, snaplen)| {
            let u32_bytes = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            let u16_bytes = |v: u16| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            let mut out = Vec::new();
            out.extend(u32_bytes(magic));
            out.extend(u16_bytes(2)); // version 2.4
            out.extend(u16_bytes(4));
            out.extend(u32_bytes(0)); // thiszone
            out.extend(u32_bytes(0)); // sigfigs
            out.extend(u32_bytes(snaplen));
            out.extend(u32_bytes(link));
            out
        },
    )
}

/// Capture records around arbitrary frame bytes, with honest lengths, so
/// the walk reaches classification.
fn pcap_records(big_endian: bool, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let len = frame.len() as u32;
        for word in [i as u32, 0, len, len] {
            out.extend(if big_endian { word.to_be_bytes() } else { word.to_le_bytes() });
        }
        out.extend_from_slice(frame);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..2000)) {
        parse_frame(&data);
        parse_capture(&data);
    }

    /// Arbitrary frames in a well-formed capture file.
    #[test]
    fn arbitrary_frames_in_a_capture_never_panic(
        header in pcap_header(),
        frames in vec(vec(any::<u8>(), 0..200), 0..6),
    ) {
        let big_endian = header[0] == 0xa1;
        let mut file = header;
        file.extend(pcap_records(big_endian, &frames));
        parse_capture(&file);
        let cut = file.len() / 2;
        parse_capture(&file[..cut]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A real rxe capture with a few bytes overwritten, and maybe cut.
    #[test]
    fn mutated_golden_capture_never_panics(
        overwrites in vec((any::<Index>(), any::<u8>()), 1..=8),
        cut in proptest::option::of(any::<Index>()),
    ) {
        let mut file = golden_opcodes().to_vec();
        for (at, byte) in overwrites {
            let i = at.index(file.len());
            file[i] = byte;
        }
        if let Some(cut) = cut {
            file.truncate(cut.index(file.len() + 1));
        }
        parse_capture(&file);
    }
}

/// The golden capture itself goes through the fuzz body (its RoCEv2 frames
/// all round-trip bit for bit).
#[test]
fn golden_capture_through_the_fuzz_body() {
    parse_capture(golden_opcodes());
    for cut in [0, 1, 23, 24, 25, 40, 100, 1000] {
        parse_capture(&golden_opcodes()[..cut]);
    }
}

// ---------------------------------------------------------------------------
// Regressions found by fuzzing.

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// An RC ACK from `send_bw_mtu4200.pcap` (frame 50), without its Ethernet
/// header.
const GOLDEN_ACK: &str =
    "45000030ca1d400040111ca0a9fe0001a9fe0002c12112b7001c00001100ffff0000001100c654141f00000136ca78ae";

/// cargo fuzz (parse_frame), minimized: a raw-IP RC ACK from the golden
/// captures with the IPv4 reserved flag (byte 6, bit 7) set. `repr()`
/// once parsed it but emitted the flag as 0 (etherparse's `Ipv4Header` had
/// no field for it); `uroce_wire::ipv4::Repr` holds it.
#[test]
fn regression_ipv4_reserved_flag_fuzz_input() {
    parse_frame(&hex(
        "45000030ca1dc00040111ca0a9fe0001a9fe0002c12112b7001c0000110000ff0000ff1000c654141f00000136ca78ae",
    ));
}

/// The same bug, on a frame that is right in every other respect: the
/// reserved flag set, and the IPv4 header checksum and the ICRC computed
/// over the bytes as sent. A receiver must find it intact, and the repr
/// must emit it unchanged.
#[test]
fn regression_ipv4_reserved_flag_consistent_frame() {
    let mut frame = hex(GOLDEN_ACK);
    frame[6] |= 0x80;
    let checksum = ipv4_checksum(&frame[..20]);
    frame[10..12].copy_from_slice(&checksum.to_be_bytes());
    let icrc = uroce_wire::icrc::compute(&frame[..20], &frame[20..28], &frame[28..44]).unwrap();
    uroce_wire::icrc::write(&mut frame[44..], icrc);

    let Classified::Roce(roce) = classify(&frame, Link::RawIp) else { panic!("not RoCEv2") };
    assert!(roce.icrc_ok());
    assert!(roce.ip_checksum_ok(), "the IPv4 checksum is right over the bytes as sent");
    assert!(roce.integrity_ok());
    let repr = roce.repr().unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).unwrap();
    assert_eq!(out, frame, "the reserved flag is emitted as received");
}

/// RFC 791's header checksum over raw header bytes (checksum field zero).
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The golden frame the fuzz input came from (`send_bw_mtu4200.pcap`
/// frame 50, an RC ACK), as captured: intact, and it round-trips.
#[test]
fn regression_ipv4_reserved_flag_control() {
    let frame = hex(GOLDEN_ACK);
    let Classified::Roce(roce) = classify(&frame, Link::RawIp) else { panic!("not RoCEv2") };
    assert!(roce.integrity_ok());
    parse_frame(&frame);
}
