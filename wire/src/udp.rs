//! The UDP header (RFC 768): 8 bytes.
//!
//! ```text
//! +-------------------+-------------------+
//! |  source port (2)  |destination port(2)|
//! +-------------------+-------------------+
//! |    length (2)     |   checksum (2)    |
//! +-------------------+-------------------+
//! ```
//!
//! RoCEv2 goes to port [`crate::ROCEV2_UDP_PORT`]; the ICRC covers this
//! header with the checksum masked, and rxe sends checksum 0 ("none") over
//! IPv4 and IPv6 alike.

use crate::{bytes, checksum, ipv4, ipv6, Error, Result};
use core::net::IpAddr;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

fixed_header_view!(8);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The source port.
    pub fn source_port(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::SRC_PORT])
    }
    /// The destination port.
    pub fn destination_port(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::DST_PORT])
    }
    /// The length (header and payload).
    pub fn length(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::LENGTH])
    }
    /// The checksum (0: none).
    pub fn checksum(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// What follows the header in the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_source_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the destination port.
    pub fn set_destination_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the length.
    pub fn set_length(&mut self, value: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the checksum.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub source_port: u16,
    /// Destination port.
    pub destination_port: u16,
    /// Length of header and payload.
    pub length: u16,
    /// Checksum, emitted as is (0: none).
    pub checksum: u16,
}

impl Repr {
    /// Reads a header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            source_port: packet.source_port(),
            destination_port: packet.destination_port(),
            length: packet.length(),
            checksum: packet.checksum(),
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
        packet.set_source_port(self.source_port);
        packet.set_destination_port(self.destination_port);
        packet.set_length(self.length);
        packet.set_checksum(self.checksum);
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut out[..]));
        out
    }

    /// The checksum these fields and `payload` call for under an IPv4
    /// header (its addresses; the length is this header's).
    pub fn calc_checksum_ipv4(&self, ip: &ipv4::Repr, payload: &[u8]) -> Result<u16> {
        self.calc_checksum(IpAddr::from(ip.source), IpAddr::from(ip.destination), payload)
    }

    /// The checksum these fields and `payload` call for under an IPv6
    /// header.
    pub fn calc_checksum_ipv6(&self, ip: &ipv6::Repr, payload: &[u8]) -> Result<u16> {
        self.calc_checksum(IpAddr::from(ip.source), IpAddr::from(ip.destination), payload)
    }

    /// The checksum over the pseudo-header of `source` and `destination`,
    /// this header (checksum 0) and `payload`. A result of 0 is returned
    /// as `0xffff`.
    pub fn calc_checksum(
        &self,
        source: IpAddr,
        destination: IpAddr,
        payload: &[u8],
    ) -> Result<u16> {
        if payload.len() > usize::from(u16::MAX) - HEADER_LEN {
            return Err(Error::Malformed("UDP payload too long"));
        }
        let pseudo = checksum::pseudo_header(
            source,
            destination,
            ipv4::PROTOCOL_UDP,
            u32::from(self.length),
        )
        .ok_or(Error::Malformed("addresses of two IP versions"))?;
        let header = Repr { checksum: 0, ..*self }.to_bytes();
        Ok(checksum::transport(checksum::combine(&[pseudo, checksum::sum(&header)]), payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    // The UDP header of an RC ACK in `send_bw_mtu4200.pcap` (frame 50,
    // real rxe): source port 0xc121, to 4791, 28 bytes, no checksum.
    const BYTES: [u8; 8] = [0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.source_port(), 0xc121);
        assert_eq!(p.destination_port(), crate::ROCEV2_UDP_PORT);
        assert_eq!((p.length(), p.checksum()), (28, 0));
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.to_bytes(), BYTES);
        assert_eq!(Packet::new_checked(&BYTES[..7]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn a_checksummed_datagram_verifies() {
        // A DNS query, 10.0.2.15:39807 -> 10.0.2.3:53.
        let payload = [
            0x2c, 0x7e, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65,
            0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00,
            0x01,
        ];
        let repr = Repr {
            source_port: 39807,
            destination_port: 53,
            length: (8 + payload.len()) as u16,
            checksum: 0,
        };
        let ip = ipv4::Repr::udp(
            Ipv4Addr::new(10, 0, 2, 15),
            Ipv4Addr::new(10, 0, 2, 3),
            0,
            8 + payload.len(),
        )
        .unwrap();
        let sum = repr.calc_checksum_ipv4(&ip, &payload).unwrap();
        // A receiver's check over the pseudo-header and the whole datagram
        // with the checksum in place sums to all ones.
        let mut datagram = Repr { checksum: sum, ..repr }.to_bytes().to_vec();
        datagram.extend_from_slice(&payload);
        let pseudo = checksum::pseudo_header(
            IpAddr::V4(Ipv4Addr::new(10, 0, 2, 15)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 2, 3)),
            17,
            datagram.len() as u32,
        )
        .unwrap();
        assert_eq!(checksum::combine(&[pseudo, checksum::sum(&datagram)]), 0xffff);
    }
}
