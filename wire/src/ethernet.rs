//! Ethernet II: 14 bytes before the IP packet (no FCS: neither Linux
//! sockets nor capture files show it).
//!
//! ```text
//! +-----------------+-----------------+-----------+---------
//! | destination (6) |   source (6)    | type (2)  | payload
//! +-----------------+-----------------+-----------+---------
//! ```

use crate::{bytes, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod field {
    use core::ops::Range;
    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHER_TYPE: Range<usize> = 12..14;
}

/// The EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// The EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// The EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// An 802.1Q VLAN tag follows.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// An 802.1ad (QinQ) service tag follows.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;

/// The broadcast address.
pub const BROADCAST: [u8; 6] = [0xff; 6];

fixed_header_view!(14);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The destination MAC.
    pub fn destination(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::DESTINATION])
    }
    /// The source MAC.
    pub fn source(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::SOURCE])
    }
    /// The EtherType (or the first tag's type).
    pub fn ether_type(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::ETHER_TYPE])
    }
    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC.
    pub fn set_destination(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&mac);
    }
    /// Sets the source MAC.
    pub fn set_source(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&mac);
    }
    /// Sets the EtherType.
    pub fn set_ether_type(&mut self, ether_type: u16) {
        self.buffer.as_mut()[field::ETHER_TYPE].copy_from_slice(&ether_type.to_be_bytes());
    }
    /// What follows the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

fn mac(bytes: &[u8]) -> [u8; 6] {
    let mut mac = [0u8; 6];
    mac.copy_from_slice(bytes);
    mac
}

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source MAC.
    pub source: [u8; 6],
    /// Destination MAC.
    pub destination: [u8; 6],
    /// EtherType.
    pub ether_type: u16,
}

impl Repr {
    /// Reads the header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            source: packet.source(),
            destination: packet.destination(),
            ether_type: packet.ether_type(),
        })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_destination(self.destination);
        packet.set_source(self.source);
        packet.set_ether_type(self.ether_type);
    }
    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut out[..]));
        out
    }
    /// Appends the header and then `payload` to `out` (cleared first): a
    /// whole frame.
    pub fn frame_into(&self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.to_bytes());
        out.extend_from_slice(payload);
    }
}

/// The EtherType of an IP packet: IPv6 if its version nibble says 6, IPv4
/// otherwise.
pub fn ether_type_of_ip(packet: &[u8]) -> u16 {
    match packet.first().map(|b| b >> 4) {
        Some(6) => ETHERTYPE_IPV6,
        _ => ETHERTYPE_IPV4,
    }
}

/// The multicast MAC of an IPv6 multicast group (RFC 2464: `33:33` and the
/// group's last 32 bits).
pub fn ipv6_multicast_mac(group: Ipv6Addr) -> [u8; 6] {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// The multicast MAC of an IPv4 multicast group (RFC 1112: `01:00:5e` and
/// the group's low 23 bits).
pub fn ipv4_multicast_mac(group: Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// The multicast MAC of an IP multicast group, IPv4 (or IPv4-mapped) or
/// IPv6: what the kernel writes on a multicast packet, rxe's included
/// (they leave through the IP stack).
pub fn multicast_mac(group: IpAddr) -> [u8; 6] {
    match group {
        IpAddr::V4(v4) => ipv4_multicast_mac(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => ipv4_multicast_mac(v4),
            None => ipv6_multicast_mac(v6),
        },
    }
}

/// Whether a MAC is a unicast address other than all zeros.
pub fn is_unicast(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Ethernet header of frame 37 of `atomic_bw.pcap` (real rxe): the
    // client VM (52:54:00:00:00:02) to the server VM's MAC, IPv4.
    const BYTES: [u8; 14] =
        [0x52, 0x54, 0x00, 0x00, 0x00, 0x01, 0x52, 0x54, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.destination(), [0x52, 0x54, 0, 0, 0, 1]);
        assert_eq!(p.source(), [0x52, 0x54, 0, 0, 0, 2]);
        assert_eq!(p.ether_type(), ETHERTYPE_IPV4);
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.to_bytes(), BYTES);
        let mut frame = vec![1, 2, 3];
        repr.frame_into(&[0x45], &mut frame);
        assert_eq!(frame.len(), 15);
        assert_eq!(Packet::new_checked(&frame[..]).unwrap().payload(), &[0x45]);
        assert_eq!(Packet::new_checked(&BYTES[..13]).unwrap_err(), crate::Error::Truncated);
    }

    #[test]
    fn multicast_and_ip_ethertypes() {
        let group: Ipv6Addr = "ff02::1:ff00:1".parse().unwrap();
        assert_eq!(ipv6_multicast_mac(group), [0x33, 0x33, 0xff, 0, 0, 1]);
        assert_eq!(ether_type_of_ip(&[0x60]), ETHERTYPE_IPV6);
        assert_eq!(ether_type_of_ip(&[0x45]), ETHERTYPE_IPV4);
        let v4: Ipv4Addr = "230.131.129.7".parse().unwrap();
        assert_eq!(ipv4_multicast_mac(v4), [0x01, 0x00, 0x5e, 0x03, 0x81, 0x07]);
        assert_eq!(multicast_mac(IpAddr::V4(v4)), multicast_mac(IpAddr::V6(v4.to_ipv6_mapped())));
        assert_eq!(multicast_mac(IpAddr::V6(group)), ipv6_multicast_mac(group));
        assert!(is_unicast([2, 0, 0, 0, 0, 1]) && !is_unicast(BROADCAST) && !is_unicast([0; 6]));
    }
}
