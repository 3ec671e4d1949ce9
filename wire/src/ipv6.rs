//! The IPv6 header (RFC 8200): 40 bytes.
//!
//! ```text
//! +-------+---------------+---------------------------------------+
//! |version| traffic class |              flow label               |
//! +-------+---------------+-------+---------------+---------------+
//! |        payload length         |  next header  |   hop limit   |
//! +-------------------------------+---------------+---------------+
//! |                     source address (16)                       |
//! |                   destination address (16)                    |
//! +---------------------------------------------------------------+
//! ```
//!
//! RoCEv2's ICRC covers it with the traffic class, the flow label and the
//! hop limit masked. Extension headers are not followed: RoCEv2 and
//! neighbour discovery use none.

use crate::{bytes, Error, Result};
use core::net::Ipv6Addr;

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// The next-header number of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;

fixed_header_view!(40);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the length and the version (6).
    pub fn check_version(&self) -> Result<()> {
        self.check_len()?;
        if self.version() != 6 {
            return Err(Error::Malformed("IPv6 version is not 6"));
        }
        Ok(())
    }
    fn first_word(&self) -> u32 {
        bytes::u32(&self.buffer.as_ref()[field::VER_TC_FLOW])
    }
    /// The version.
    pub fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }
    /// The traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }
    /// The flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }
    /// The payload length (what follows this header).
    pub fn payload_length(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::PAYLOAD_LEN])
    }
    /// The next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// The source address.
    pub fn source(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr(&self.buffer.as_ref()[field::SRC]))
    }
    /// The destination address.
    pub fn destination(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr(&self.buffer.as_ref()[field::DST]))
    }
    /// What follows the header, up to the payload length (or the end of
    /// the buffer, if that comes first).
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_length())).min(data.len());
        &data[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, the traffic class and the flow label.
    pub fn set_version_class_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let word = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&word.to_be_bytes());
    }
    /// Sets the payload length.
    pub fn set_payload_length(&mut self, value: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = value;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }
    /// Sets the source address.
    pub fn set_source(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.octets());
    }
    /// Sets the destination address.
    pub fn set_destination(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.octets());
    }
}

fn addr(bytes: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(bytes);
    out
}

/// The fields of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length.
    pub payload_length: u16,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub source: [u8; 16],
    /// Destination address.
    pub destination: [u8; 16],
}

impl Repr {
    /// A UDP datagram's header as rxe sends it: traffic class and flow
    /// label 0, hop limit 64. `None` if the payload does not fit.
    pub fn udp(source: Ipv6Addr, destination: Ipv6Addr, payload_len: usize) -> Option<Repr> {
        Some(Repr {
            traffic_class: 0,
            flow_label: 0,
            payload_length: u16::try_from(payload_len).ok()?,
            next_header: crate::ipv4::PROTOCOL_UDP,
            hop_limit: crate::ipv4::DEFAULT_TTL,
            source: source.octets(),
            destination: destination.octets(),
        })
    }

    /// Reads a header (checks the length and the version).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_version()?;
        Ok(Repr {
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_length: packet.payload_length(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            source: packet.source().octets(),
            destination: packet.destination().octets(),
        })
    }

    /// Length of the emitted header.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Same as [`Repr::header_len`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version_class_flow(self.traffic_class, self.flow_label);
        packet.set_payload_length(self.payload_length);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_source(Ipv6Addr::from(self.source));
        packet.set_destination(Ipv6Addr::from(self.destination));
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut out[..]));
        out
    }
}

/// The solicited-node multicast group of an address (RFC 4291 2.7.1):
/// `ff02::1:ff` and its last 24 bits.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// The IPv6 link-local address a MAC gives (modified EUI-64, RFC 4291
/// appendix A): `fe80::` and the MAC with `ff:fe` in the middle and the
/// universal/local bit inverted. rxe's GID index 0 holds it.
pub fn link_local_from_mac(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv6 header of a RoCEv2 packet in `rc_pingpong_v6.pcap` (frame
    // 29, real rxe): 1048 bytes of UDP, hop limit 64, between the VMs'
    // link-local addresses.
    const BYTES: [u8; 40] = [
        0x60, 0x00, 0x00, 0x00, 0x04, 0x18, 0x11, 0x40, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54,
        0x00, 0xff, 0xfe, 0x00, 0x00, 0x02, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff,
        0xfe, 0x00, 0x00, 0x01,
    ];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0, 0));
        assert_eq!((p.payload_length(), p.next_header(), p.hop_limit()), (1048, 17, 64));
        let vm2 = link_local_from_mac([0x52, 0x54, 0, 0, 0, 2]);
        assert_eq!(p.source(), vm2);
        assert_eq!(p.destination(), link_local_from_mac([0x52, 0x54, 0, 0, 0, 1]));
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.to_bytes(), BYTES);
        assert_eq!(Repr::udp(p.source(), p.destination(), 1048), Some(repr));
        assert_eq!(Packet::new_checked(&BYTES[..39]).unwrap_err(), Error::Truncated);
        let mut four = BYTES;
        four[0] = 0x45;
        assert!(Repr::parse(&Packet::new_checked(&four[..]).unwrap()).is_err());
    }

    #[test]
    fn class_and_flow_label_bits() {
        let mut repr = Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()).unwrap();
        repr.traffic_class = 0xab;
        repr.flow_label = 0xc_def0;
        let bytes = repr.to_bytes();
        assert_eq!(&bytes[..4], &[0x6a, 0xbc, 0xde, 0xf0]);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap(), repr);
    }

    #[test]
    fn multicast_groups() {
        let target: Ipv6Addr = "fe80::5054:ff:fe00:2".parse().unwrap();
        assert_eq!(solicited_node(target), "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap());
    }
}
