//! A RoCEv2 IP packet as a receiving NIC reads it: the headers stay in
//! the packet's bytes, read where they lie, with no header
//! representation built (an HCA's receive path needs the addresses, the
//! integrity checks and the transport packet, nothing more).
//!
//! [`RoceDatagram::parse`] finds a RoCEv2 frame in an IP packet exactly
//! where [`classify`](super::classify) with [`Link::RawIp`](super::Link)
//! finds one, with the same bytes and framing; a [`RoceFrame`] gives its
//! own with [`RoceFrame::datagram`].

use super::{RoceFrame, UDP_HEADER_LEN};
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{self, PROTOCOL_UDP};
use crate::{bytes, checksum, ipv6, roce, udp, Error, Result, ROCEV2_UDP_PORT};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A UDP datagram to port 4791 in an IP packet, by its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceDatagram<'a> {
    ip_bytes: &'a [u8],
    udp_bytes: &'a [u8],
    transport: &'a [u8],
    trailer: &'a [u8],
    framing_error: Option<Error>,
}

const IPV4_MORE_FRAGMENTS: u16 = 0x2000;
const IPV4_FRAGMENT_OFFSET: u16 = 0x1fff;

impl<'a> RoceDatagram<'a> {
    /// Reads an IP packet with no link header: `None` where
    /// [`classify`](super::classify) would sort it as something other
    /// than RoCEv2 (not IPv4 or IPv6, a header cut short, an IPv4
    /// fragment, not UDP, not to port 4791). Never panics, whatever the
    /// bytes.
    pub fn parse(data: &'a [u8]) -> Option<RoceDatagram<'a>> {
        let (header_len, protocol, ip_packet_len) = match data.first()? >> 4 {
            4 => ipv4_fields(data)?,
            6 => ipv6_fields(data)?,
            _ => return None,
        };
        if protocol != PROTOCOL_UDP {
            return None;
        }
        let udp = data.get(header_len..header_len + UDP_HEADER_LEN)?;
        if bytes::u16(&udp[2..4]) != ROCEV2_UDP_PORT {
            return None;
        }
        Some(RoceDatagram::framed(data, header_len, ip_packet_len, bytes::u16(&udp[4..6])))
    }

    /// The datagram in `data` whose IP header is `header_len` bytes long,
    /// followed by a whole UDP header: where the packet ends (as the IP
    /// header says, within what was captured) and what is wrong with its
    /// lengths. The transport header is read from the captured bytes,
    /// whatever the IP length says: a damaged length must not hide a
    /// RoCEv2 frame.
    pub(super) fn framed(
        data: &'a [u8],
        header_len: usize,
        ip_packet_len: usize,
        udp_length: u16,
    ) -> RoceDatagram<'a> {
        let transport_start = header_len + UDP_HEADER_LEN;
        let framing_error = if ip_packet_len < transport_start {
            Some(Error::Malformed("IP length shorter than the IP and UDP headers"))
        } else if ip_packet_len > data.len() {
            Some(Error::Truncated)
        } else if usize::from(udp_length) != ip_packet_len - header_len {
            Some(Error::Malformed("UDP length disagrees with the IP length"))
        } else {
            None
        };
        let end = ip_packet_len.clamp(transport_start, data.len());
        RoceDatagram {
            ip_bytes: &data[..header_len],
            udp_bytes: &data[header_len..transport_start],
            transport: &data[transport_start..end],
            trailer: &data[end..],
            framing_error,
        }
    }

    /// The raw IP header bytes.
    pub fn ip_header_bytes(&self) -> &'a [u8] {
        self.ip_bytes
    }

    /// The raw UDP header bytes.
    pub fn udp_header_bytes(&self) -> &'a [u8] {
        self.udp_bytes
    }

    /// The UDP payload: BTH up to and including the ICRC (cut short if
    /// the capture was).
    pub fn transport(&self) -> &'a [u8] {
        self.transport
    }

    /// Bytes after the IP packet (Ethernet padding).
    pub fn trailer(&self) -> &'a [u8] {
        self.trailer
    }

    /// A problem below the transport layer: the capture cut the packet
    /// short, or the UDP length disagrees with the IP length.
    pub fn framing_error(&self) -> Option<Error> {
        self.framing_error
    }

    /// Whether the IP header is IPv4's (its version field: the parse
    /// took only 4 and 6).
    fn is_ipv4(&self) -> bool {
        self.ip_bytes.first().is_some_and(|b| b >> 4 == 4)
    }

    /// The source address.
    pub fn source(&self) -> IpAddr {
        self.address(12, 8)
    }

    /// The destination address.
    pub fn destination(&self) -> IpAddr {
        self.address(16, 24)
    }

    /// The address at `v4_at` (IPv4) or `v6_at` (IPv6) in the IP header.
    fn address(&self, v4_at: usize, v6_at: usize) -> IpAddr {
        let ip = self.ip_bytes;
        if self.is_ipv4() {
            IpAddr::V4(Ipv4Addr::from(bytes::u32(&ip[v4_at..v4_at + 4])))
        } else {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&ip[v6_at..v6_at + 16]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
    }

    /// The transport packet, checked against the opcode table.
    pub fn packet(&self) -> Result<roce::Packet<&'a [u8]>> {
        if let Some(error) = self.framing_error {
            return Err(error);
        }
        roce::Packet::new_checked(self.transport)
    }

    /// The ICRC computed over this datagram, or `None` when it is too
    /// short to hold one.
    pub fn computed_icrc(&self) -> Option<u32> {
        if self.framing_error.is_some() || self.transport.len() < roce::MIN_LEN {
            return None;
        }
        let covered = &self.transport[..self.transport.len() - ICRC_LEN];
        icrc::compute(self.ip_bytes, self.udp_bytes, covered)
    }

    /// The ICRC stored in the datagram.
    pub fn stored_icrc(&self) -> Option<u32> {
        let at = self.transport.len().checked_sub(ICRC_LEN)?;
        icrc::read(&self.transport[at..])
    }

    /// Whether the stored ICRC matches the computed one.
    pub fn icrc_ok(&self) -> bool {
        matches!((self.computed_icrc(), self.stored_icrc()), (Some(a), Some(b)) if a == b)
    }

    /// Whether the IPv4 header checksum is right (always true for IPv6,
    /// which has none).
    pub fn ip_checksum_ok(&self) -> bool {
        !self.is_ipv4() || checksum::checksum(self.ip_bytes) == 0
    }

    /// Whether the UDP checksum is right: zero (not used) or equal to the
    /// computed one.
    pub fn udp_checksum_ok(&self) -> bool {
        let Ok(udp) = udp::Packet::new_checked(self.udp_bytes).and_then(|p| udp::Repr::parse(&p))
        else {
            return false;
        };
        if udp.checksum == 0 {
            return true;
        }
        if self.framing_error.is_some() {
            return false;
        }
        let computed = if self.is_ipv4() {
            ipv4::Packet::new_checked(self.ip_bytes)
                .and_then(|p| ipv4::Repr::parse(&p))
                .and_then(|h| udp.calc_checksum_ipv4(&h, self.transport))
        } else {
            ipv6::Packet::new_checked(self.ip_bytes)
                .and_then(|p| ipv6::Repr::parse(&p))
                .and_then(|h| udp.calc_checksum_ipv6(&h, self.transport))
        };
        computed.map(|sum| sum == udp.checksum).unwrap_or(false)
    }

    /// Whether the datagram is intact as far as a receiving RoCE NIC can
    /// tell: ICRC, IPv4 header checksum and (if used) UDP checksum.
    pub fn integrity_ok(&self) -> bool {
        self.icrc_ok() && self.ip_checksum_ok() && self.udp_checksum_ok()
    }
}

impl<'a> RoceFrame<'a> {
    /// The datagram this frame holds (its framing error as it is now).
    pub fn datagram(&self) -> RoceDatagram<'a> {
        RoceDatagram {
            ip_bytes: self.ip_bytes,
            udp_bytes: self.udp_bytes,
            transport: self.transport,
            trailer: self.trailer,
            framing_error: self.framing_error,
        }
    }
}

/// An IPv4 header's length, protocol and total length, if the header is
/// whole and the packet is not a fragment (what
/// [`ipv4::Packet::check_len`] and the fragment test ask).
fn ipv4_fields(data: &[u8]) -> Option<(usize, u8, usize)> {
    let header_len = usize::from(data[0] & 0x0f) * 4;
    if header_len < ipv4::MIN_HEADER_LEN || data.len() < header_len {
        return None;
    }
    let flags_offset = bytes::u16(&data[6..8]);
    if flags_offset & (IPV4_MORE_FRAGMENTS | IPV4_FRAGMENT_OFFSET) != 0 {
        return None;
    }
    Some((header_len, data[9], usize::from(bytes::u16(&data[2..4]))))
}

/// An IPv6 header's length, next header and packet length, if the header
/// is whole.
fn ipv6_fields(data: &[u8]) -> Option<(usize, u8, usize)> {
    if data.len() < ipv6::HEADER_LEN {
        return None;
    }
    let payload_len = usize::from(bytes::u16(&data[4..6]));
    Some((ipv6::HEADER_LEN, data[6], ipv6::HEADER_LEN + payload_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{classify, Classified, FrameRepr, IpHeader, Link};
    use crate::roce::{ExtHeaders, Repr};
    use crate::{bth, Opcode, Psn, Qpn};

    /// What `classify` makes of `data` as a raw IP packet, as a datagram.
    fn classified(data: &[u8]) -> Option<(RoceDatagram<'_>, RoceFrame<'_>)> {
        match classify(data, Link::RawIp) {
            Classified::Roce(frame) => Some((frame.datagram(), frame)),
            Classified::Other(_) => None,
        }
    }

    fn assert_same_as_classify(data: &[u8]) {
        let parsed = RoceDatagram::parse(data);
        let Some((expected, frame)) = classified(data) else {
            assert_eq!(parsed, None, "{data:02x?}");
            return;
        };
        let parsed = parsed.unwrap_or_else(|| panic!("not found in {data:02x?}"));
        assert_eq!(parsed, expected, "{data:02x?}");
        let checks = |d: &RoceDatagram<'_>| {
            (d.icrc_ok(), d.ip_checksum_ok(), d.udp_checksum_ok(), d.integrity_ok())
        };
        let frame_checks = (
            frame.icrc_ok(),
            frame.ip_checksum_ok(),
            frame.udp_checksum_ok(),
            frame.integrity_ok(),
        );
        assert_eq!(checks(&parsed), frame_checks, "{data:02x?}");
        assert_eq!(
            (parsed.source(), parsed.destination()),
            (frame.ip.source(), frame.ip.destination())
        );
        assert_eq!(parsed.packet().map(|p| p.into_inner()), frame.packet().map(|p| p.into_inner()));
    }

    /// Frames of both IP versions: no UDP checksum, a right one, a trailer.
    fn frames() -> Vec<Vec<u8>> {
        let payload = [0x5a; 12];
        let bth = bth::Repr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(7), payload.len());
        let roce = Repr { bth, ext: ExtHeaders::default(), payload: &payload };
        let v4 = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let v6 = (
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
        );
        let mut out = Vec::new();
        for repr in [FrameRepr::ipv4(v4, 0x1234, 0xc000, roce), FrameRepr::ipv6(v6, 0xc001, roce)] {
            let mut repr = repr.unwrap();
            let mut bytes = vec![0; repr.buffer_len()];
            repr.emit(&mut bytes).unwrap();
            out.push(bytes.clone());
            let frame = match classify(&bytes, Link::RawIp) {
                Classified::Roce(frame) => frame,
                Classified::Other(other) => panic!("{other}"),
            };
            repr.udp.checksum = match &frame.ip {
                IpHeader::V4(h) => frame.udp.calc_checksum_ipv4(h, frame.transport()),
                IpHeader::V6(h) => frame.udp.calc_checksum_ipv6(h, frame.transport()),
            }
            .unwrap();
            repr.trailer = &[0, 0, 0, 0];
            let mut bytes = vec![0; repr.buffer_len()];
            repr.emit(&mut bytes).unwrap();
            out.push(bytes);
        }
        out
    }

    #[test]
    fn finds_what_classify_finds() {
        let frames = frames();
        for frame in &frames {
            assert!(RoceDatagram::parse(frame).is_some_and(|d| d.integrity_ok()));
            assert_same_as_classify(frame);
            for len in 0..frame.len() {
                assert_same_as_classify(&frame[..len]);
            }
            for at in 0..frame.len() {
                for value in [0x00, 0xff, frame[at] ^ 0x01, frame[at] ^ 0x20, frame[at] ^ 0x40] {
                    let mut bad = frame.clone();
                    bad[at] = value;
                    assert_same_as_classify(&bad);
                }
            }
        }
        // Neither IP version, and nothing.
        assert_same_as_classify(&[0x50; 64]);
        assert_same_as_classify(&[]);
    }
}
