//! Frames: checksums, mutating and re-framing packets, and the checks
//! every packet a device sends must pass.

use super::*;

/// The RFC 1071 checksum of `bytes`.
pub(super) fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|p| u32::from(u16::from_be_bytes([p[0], *p.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// After the transport part of a raw-IP frame built by [`FrameRepr`] (no
/// IP options) changed: rewrites the IP and UDP lengths, the IPv4
/// checksum and the ICRC, so that the frame passes every integrity check
/// and the change reaches the transport layer.
pub(super) fn refresh_frame(buf: &mut [u8]) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    let total = buf.len();
    let udp_len = (total - ip_len) as u16;
    if ip_len == 20 {
        buf[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        buf[10..12].fill(0);
        let sum = internet_checksum(&buf[..20]);
        buf[10..12].copy_from_slice(&sum.to_be_bytes());
    } else {
        buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
    }
    buf[ip_len + 4..ip_len + 6].copy_from_slice(&udp_len.to_be_bytes());
    if total >= ip_len + 8 + roce::MIN_LEN {
        let (head, trailer) = buf.split_at_mut(total - icrc::ICRC_LEN);
        let crc = icrc::compute(&head[..ip_len], &head[ip_len..ip_len + 8], &head[ip_len + 8..]);
        if let Some(crc) = crc {
            icrc::write(trailer, crc);
        }
    }
}

/// Changes the transport part of a frame (flips, an opcode, a cut or an
/// extension), then makes the frame intact again.
pub(super) fn mutate_frame(inp: &mut Input<'_>, buf: &mut Vec<u8>) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    let start = ip_len + 8;
    for _ in 0..1 + inp.below(3) {
        let body = buf.len() - icrc::ICRC_LEN;
        if body <= start {
            break;
        }
        match inp.below(6) {
            0 => buf[start] = inp.u8(),
            1 => {
                let at = start + inp.below(body - start);
                buf[at] ^= inp.u8().max(1);
            }
            2 => {
                let at = start + inp.below((body - start).min(40));
                buf[at] = inp.u8();
            }
            3 => {
                let cut = inp.below(body - start + 1);
                buf.drain(body - cut..body);
            }
            4 => {
                let n = inp.below(64);
                let extra = inp.bytes(n).to_vec();
                buf.splice(body..body, extra);
            }
            _ => buf[start + 1] = inp.u8(),
        }
    }
    refresh_frame(buf);
}

/// Replaces the transport part of `buf` with `transport` and a fresh ICRC.
pub(super) fn reframe(buf: &mut Vec<u8>, transport: &[u8]) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    buf.truncate(ip_len + 8);
    buf.extend_from_slice(transport);
    buf.extend_from_slice(&[0; icrc::ICRC_LEN]);
    refresh_frame(buf);
}

/// Checks a packet the HCA sent: a RoCEv2 frame with intact checksums and
/// ICRC, from one of the HCA's addresses to where the transmit says, with
/// a transport packet that fits the opcode table, the default P_Key, an
/// RC, UC or UD opcode and a payload of at most the port MTU. Returns the
/// transport repr's BTH and payload length.
pub(super) fn check_transmit(
    addresses: &[IpAddr],
    bytes: &[u8],
    t: &Transmit,
) -> (bth::Repr, usize) {
    assert!(t.len <= MAX_PACKET_LEN, "transmit of {} bytes", t.len);
    let Classified::Roce(frame) = classify(bytes, Link::RawIp) else {
        panic!("the HCA sent a frame that is not RoCEv2: {bytes:02x?}");
    };
    assert!(frame.framing_error.is_none(), "framing error {:?}: {bytes:02x?}", frame.framing_error);
    assert!(frame.trailer.is_empty(), "bytes after the IP packet: {bytes:02x?}");
    assert!(frame.icrc_ok(), "the HCA sent a bad ICRC: {bytes:02x?}");
    assert!(frame.integrity_ok(), "the HCA sent a bad IP or UDP checksum: {bytes:02x?}");
    assert_eq!(frame.ip.destination(), t.destination, "transmit destination");
    assert!(addresses.contains(&frame.ip.source()), "sent from a foreign address: {bytes:02x?}");
    let packet = frame.packet().unwrap_or_else(|e| panic!("the HCA sent {e}: {bytes:02x?}"));
    let repr = Repr::parse(&packet).unwrap_or_else(|e| panic!("the HCA sent {e}: {bytes:02x?}"));
    assert_eq!(repr.bth.pkey, bth::DEFAULT_PKEY, "P_Key");
    assert!(
        matches!(repr.bth.opcode.transport(), Transport::Rc | Transport::Uc | Transport::Ud),
        "opcode {:?} of no transport uroce speaks",
        repr.bth.opcode
    );
    assert!(repr.payload.len() <= 4096, "payload of {} bytes", repr.payload.len());
    (repr.bth, repr.payload.len())
}

/// Checks a transport packet against the QP it came from: the QP's type,
/// and a payload of at most its path MTU.
pub(super) fn check_against_sender(q: &QpInfo, bth: &bth::Repr, payload_len: usize) {
    let transport = bth.opcode.transport();
    let expected = match q.qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    assert_eq!(transport, expected, "QP {:?} sent {:?}", q.qpn, bth.opcode);
    assert!(
        payload_len as u32 <= q.mtu,
        "QP {:?} sent {payload_len} bytes with a path MTU of {}",
        q.qpn,
        q.mtu
    );
}
