//! ARP for IPv4 over Ethernet (RFC 826): 28 bytes after the Ethernet
//! header.
//!
//! ```text
//! +-----------------+-----------------+------+------+-----------------+
//! | hw type 1 (2)   | proto 0x0800 (2)| 6 (1)| 4 (1)| operation (2)   |
//! +-----------------+-----------------+------+------+-----------------+
//! | sender MAC (6) | sender IP (4) | target MAC (6) | target IP (4)     |
//! +-------------------------------------------------------------------+
//! ```

use crate::{bytes, ethernet, Error, Result};
use core::net::Ipv4Addr;

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

fixed_header_view!(28);

/// The ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Who has the target IP? (1)
    Request,
    /// The sender has it (2).
    Reply,
    /// Anything else.
    Other(u16),
}

impl From<u16> for Operation {
    fn from(value: u16) -> Operation {
        match value {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => Operation::Other(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(op: Operation) -> u16 {
        match op {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Other(other) => other,
        }
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The hardware type (1: Ethernet).
    pub fn hardware_type(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::HTYPE])
    }
    /// The protocol type (0x0800: IPv4).
    pub fn protocol_type(&self) -> u16 {
        bytes::u16(&self.buffer.as_ref()[field::PTYPE])
    }
    /// The hardware address length (6).
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// The protocol address length (4).
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// The operation.
    pub fn operation(&self) -> Operation {
        Operation::from(bytes::u16(&self.buffer.as_ref()[field::OPER]))
    }
    /// The sender's MAC.
    pub fn sender_mac(&self) -> [u8; 6] {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        mac
    }
    /// The sender's IP.
    pub fn sender_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(bytes::u32(&self.buffer.as_ref()[field::SPA]))
    }
    /// The target's MAC (zero in a request).
    pub fn target_mac(&self) -> [u8; 6] {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        mac
    }
    /// The target's IP.
    pub fn target_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(bytes::u32(&self.buffer.as_ref()[field::TPA]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the fixed part: Ethernet, IPv4, address lengths 6 and 4.
    pub fn set_ethernet_ipv4(&mut self) {
        let data = self.buffer.as_mut();
        data[field::HTYPE].copy_from_slice(&1u16.to_be_bytes());
        data[field::PTYPE].copy_from_slice(&ethernet::ETHERTYPE_IPV4.to_be_bytes());
        data[field::HLEN] = 6;
        data[field::PLEN] = 4;
    }
    /// Sets the operation.
    pub fn set_operation(&mut self, op: Operation) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&u16::from(op).to_be_bytes());
    }
    /// Sets the sender's MAC.
    pub fn set_sender_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&mac);
    }
    /// Sets the sender's IP.
    pub fn set_sender_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&ip.octets());
    }
    /// Sets the target's MAC.
    pub fn set_target_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&mac);
    }
    /// Sets the target's IP.
    pub fn set_target_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&ip.octets());
    }
}

/// An Ethernet/IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request or reply.
    pub operation: Operation,
    /// The sender's MAC.
    pub sender_mac: [u8; 6],
    /// The sender's IP.
    pub sender_ip: Ipv4Addr,
    /// The target's MAC.
    pub target_mac: [u8; 6],
    /// The target's IP.
    pub target_ip: Ipv4Addr,
}

impl Repr {
    /// A request for `target`'s MAC.
    pub fn request(mac: [u8; 6], own: Ipv4Addr, target: Ipv4Addr) -> Repr {
        Repr {
            operation: Operation::Request,
            sender_mac: mac,
            sender_ip: own,
            target_mac: [0; 6],
            target_ip: target,
        }
    }

    /// Reads an Ethernet/IPv4 ARP message; other hardware or protocol
    /// types are [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if (packet.hardware_type(), packet.protocol_type()) != (1, ethernet::ETHERTYPE_IPV4)
            || (packet.hardware_len(), packet.protocol_len()) != (6, 4)
        {
            return Err(Error::Malformed("ARP that is not Ethernet/IPv4"));
        }
        Ok(Repr {
            operation: packet.operation(),
            sender_mac: packet.sender_mac(),
            sender_ip: packet.sender_ip(),
            target_mac: packet.target_mac(),
            target_ip: packet.target_ip(),
        })
    }

    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_ethernet_ipv4();
        packet.set_operation(self.operation);
        packet.set_sender_mac(self.sender_mac);
        packet.set_sender_ip(self.sender_ip);
        packet.set_target_mac(self.target_mac);
        packet.set_target_ip(self.target_ip);
    }

    /// The message in an Ethernet frame (42 bytes, unpadded, as Linux and
    /// smoltcp send it): a request to the broadcast address, a reply to
    /// the target's MAC.
    pub fn to_frame(&self) -> Vec<u8> {
        let destination = match self.operation {
            Operation::Request => ethernet::BROADCAST,
            _ => self.target_mac,
        };
        let eth = ethernet::Repr {
            source: self.sender_mac,
            destination,
            ether_type: ethernet::ETHERTYPE_ARP,
        };
        let mut frame = vec![0u8; ethernet::HEADER_LEN + HEADER_LEN];
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut frame[..]));
        self.emit(&mut Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]));
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames 2 and 3 of `atomic_bw.pcap` (real Linux): 169.254.0.2 asks
    // for 169.254.0.1, which answers.
    const REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0, 0, 2, 0x08, 0x06, 0, 1, 0x08, 0, 6,
        4, 0, 1, 0x52, 0x54, 0, 0, 0, 2, 169, 254, 0, 2, 0, 0, 0, 0, 0, 0, 169, 254, 0, 1,
    ];
    const REPLY: [u8; 42] = [
        0x52, 0x54, 0, 0, 0, 2, 0x52, 0x54, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2,
        0x52, 0x54, 0, 0, 0, 1, 169, 254, 0, 1, 0x52, 0x54, 0, 0, 0, 2, 169, 254, 0, 2,
    ];

    #[test]
    fn fixtures_emit_and_round_trip() {
        let vm1 = Ipv4Addr::new(169, 254, 0, 1);
        let vm2 = Ipv4Addr::new(169, 254, 0, 2);
        let request = Repr::parse(&Packet::new_checked(&REQUEST[14..]).unwrap()).unwrap();
        assert_eq!(request, Repr::request([0x52, 0x54, 0, 0, 0, 2], vm2, vm1));
        assert_eq!(request.to_frame(), REQUEST);
        let reply = Repr::parse(&Packet::new_checked(&REPLY[14..]).unwrap()).unwrap();
        assert_eq!(reply.operation, Operation::Reply);
        assert_eq!((reply.sender_ip, reply.target_ip), (vm1, vm2));
        assert_eq!(reply.to_frame(), REPLY);
    }

    #[test]
    fn other_kinds_of_arp_are_refused() {
        assert_eq!(Packet::new_checked(&REQUEST[14..41]).unwrap_err(), Error::Truncated);
        let mut ipv6ish = REQUEST;
        ipv6ish[14 + 5] = 16;
        assert!(Repr::parse(&Packet::new_checked(&ipv6ish[14..]).unwrap()).is_err());
        let mut op = REQUEST;
        op[14 + 7] = 9;
        let p = Packet::new_checked(&op[14..]).unwrap();
        assert_eq!(p.operation(), Operation::Other(9));
        assert_eq!(u16::from(Operation::Other(9)), 9);
    }
}
