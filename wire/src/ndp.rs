//! IPv6 neighbour discovery (RFC 4861): the neighbour solicitation and
//! advertisement messages, ICMPv6 types 135 and 136, with their
//! link-layer address options.
//!
//! ```text
//! +----------+----------+---------------------+
//! | type (1) | code (1) |    checksum (2)     |
//! +----------+----------+---------------------+
//! | flags (1, advertisement: R S O) | reserved|
//! +-------------------------------------------+
//! |            target address (16)            |
//! +-------------------------------------------+
//! | options: type (1), length in 8 bytes (1), |
//! |   value; link-layer address: 6 bytes      |
//! +-------------------------------------------+
//! ```
//!
//! They travel in IPv6 with hop limit 255 and no extension header; the
//! checksum covers an IPv6 pseudo-header.

use crate::{checksum, ethernet, ipv6, Error, Result};
use core::net::{IpAddr, Ipv6Addr};

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const FLAGS: usize = 4;
    pub const RESERVED: Range<usize> = 5..8;
    pub const TARGET: Range<usize> = 8..24;
}

/// Length of the message before its options.
pub const HEADER_LEN: usize = 24;
/// ICMPv6 type of a neighbour solicitation.
pub const NEIGHBOR_SOLICITATION: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Option: the sender's link-layer address (in a solicitation).
pub const OPTION_SOURCE_LINK_ADDR: u8 = 1;
/// Option: the target's link-layer address (in an advertisement).
pub const OPTION_TARGET_LINK_ADDR: u8 = 2;
/// The hop limit neighbour discovery travels with (and insists on).
pub const HOP_LIMIT: u8 = 255;
/// Advertisement flag: the sender is a router.
pub const FLAG_ROUTER: u8 = 0x80;
/// Advertisement flag: the answer to a solicitation.
pub const FLAG_SOLICITED: u8 = 0x40;
/// Advertisement flag: override a cached address.
pub const FLAG_OVERRIDE: u8 = 0x20;

/// A view of a neighbour solicitation or advertisement (the ICMPv6
/// message, from its type byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds the fixed part and is a
    /// solicitation or an advertisement.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// The check [`Packet::new_checked`] makes.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if !matches!(data[field::TYPE], NEIGHBOR_SOLICITATION | NEIGHBOR_ADVERTISEMENT) {
            return Err(Error::Malformed("ICMPv6 message that is not neighbour discovery"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The ICMPv6 type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// The ICMPv6 code (0).
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// The checksum as stored.
    pub fn checksum(&self) -> u16 {
        let c = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([c[0], c[1]])
    }
    /// The flags byte (an advertisement's R, S, O).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// The target address.
    pub fn target(&self) -> Ipv6Addr {
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&self.buffer.as_ref()[field::TARGET]);
        Ipv6Addr::from(addr)
    }
    /// The options, well formed ones only: each `(type, value)` until one
    /// whose length is 0 or runs past the end.
    pub fn options(&self) -> Options<'_> {
        Options { rest: &self.buffer.as_ref()[HEADER_LEN..] }
    }
    /// The link-layer addresses carried in options of `kind`
    /// ([`OPTION_SOURCE_LINK_ADDR`] or [`OPTION_TARGET_LINK_ADDR`]).
    pub fn link_layer_addrs(&self, kind: u8) -> impl Iterator<Item = [u8; 6]> + '_ {
        self.options().filter(move |(t, _)| *t == kind).filter_map(|(_, value)| {
            let mac: [u8; 6] = value.get(..6)?.try_into().ok()?;
            Some(mac)
        })
    }
    /// Whether the checksum is right for a message from `source` to
    /// `destination`.
    pub fn verify_checksum(&self, source: Ipv6Addr, destination: Ipv6Addr) -> bool {
        let data = self.buffer.as_ref();
        let Some(pseudo) = pseudo_header(source, destination, data.len()) else { return false };
        checksum::combine(&[pseudo, checksum::sum(data)]) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and stores the checksum for a message from `source` to
    /// `destination`.
    pub fn fill_checksum(&mut self, source: Ipv6Addr, destination: Ipv6Addr) {
        let data = self.buffer.as_mut();
        data[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let pseudo = pseudo_header(source, destination, data.len()).unwrap_or(0);
        let value = !checksum::combine(&[pseudo, checksum::sum(data)]);
        data[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
}

fn pseudo_header(source: Ipv6Addr, destination: Ipv6Addr, len: usize) -> Option<u16> {
    checksum::pseudo_header(
        IpAddr::V6(source),
        IpAddr::V6(destination),
        ipv6::NEXT_HEADER_ICMPV6,
        u32::try_from(len).ok()?,
    )
}

/// The options of a neighbour discovery message: `(type, value)`.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Options<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        if self.rest.len() < 8 {
            return None;
        }
        let len = usize::from(self.rest[1]) * 8;
        if len == 0 || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let (option, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some((option[0], &option[2..]))
    }
}

/// A neighbour solicitation or advertisement with at most its link-layer
/// address option (other options are not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Who has `target`? (type 135)
    Solicit {
        /// The address asked for.
        target: Ipv6Addr,
        /// The sender's MAC (none in duplicate address detection).
        source_mac: Option<[u8; 6]>,
    },
    /// `target` is at `target_mac` (type 136).
    Advert {
        /// R, S and O.
        flags: u8,
        /// The address answered for.
        target: Ipv6Addr,
        /// Its MAC.
        target_mac: Option<[u8; 6]>,
    },
}

impl Repr {
    /// Reads a message (the first link-layer option of the message's
    /// kind, if any).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(match packet.msg_type() {
            NEIGHBOR_SOLICITATION => Repr::Solicit {
                target: packet.target(),
                source_mac: packet.link_layer_addrs(OPTION_SOURCE_LINK_ADDR).next(),
            },
            _ => Repr::Advert {
                flags: packet.flags(),
                target: packet.target(),
                target_mac: packet.link_layer_addrs(OPTION_TARGET_LINK_ADDR).next(),
            },
        })
    }

    fn option(&self) -> Option<(u8, [u8; 6])> {
        match *self {
            Repr::Solicit { source_mac, .. } => source_mac.map(|m| (OPTION_SOURCE_LINK_ADDR, m)),
            Repr::Advert { target_mac, .. } => target_mac.map(|m| (OPTION_TARGET_LINK_ADDR, m)),
        }
    }

    /// Length of the emitted message.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.option().is_some() { 8 } else { 0 }
    }

    /// Writes the message into a view of [`Repr::buffer_len`] bytes, with
    /// its checksum for `source` to `destination`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        source: Ipv6Addr,
        destination: Ipv6Addr,
    ) {
        let (kind, flags, target) = match *self {
            Repr::Solicit { target, .. } => (NEIGHBOR_SOLICITATION, 0, target),
            Repr::Advert { flags, target, .. } => (NEIGHBOR_ADVERTISEMENT, flags, target),
        };
        let data = packet.buffer.as_mut();
        data[field::TYPE] = kind;
        data[field::CODE] = 0;
        data[field::FLAGS] = flags;
        data[field::RESERVED].fill(0);
        data[field::TARGET].copy_from_slice(&target.octets());
        if let Some((option, mac)) = self.option() {
            data[HEADER_LEN] = option;
            data[HEADER_LEN + 1] = 1;
            data[HEADER_LEN + 2..HEADER_LEN + 8].copy_from_slice(&mac);
        }
        packet.fill_checksum(source, destination);
    }
}

/// A whole Ethernet frame asking for `target`'s MAC: a solicitation from
/// `source` (and `mac`, in the option) to `target`'s solicited-node
/// group, as Linux sends one.
pub fn solicitation_frame(mac: [u8; 6], source: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = ipv6::solicited_node(target);
    let message = Repr::Solicit { target, source_mac: Some(mac) };
    let eth = ethernet::Repr {
        source: mac,
        destination: ethernet::ipv6_multicast_mac(group),
        ether_type: ethernet::ETHERTYPE_IPV6,
    };
    let ip = ipv6::Repr {
        traffic_class: 0,
        flow_label: 0,
        payload_length: message.buffer_len() as u16,
        next_header: ipv6::NEXT_HEADER_ICMPV6,
        hop_limit: HOP_LIMIT,
        source: source.octets(),
        destination: group.octets(),
    };
    let at = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
    let mut frame = vec![0u8; at + message.buffer_len()];
    eth.emit(&mut ethernet::Packet::new_unchecked(&mut frame[..]));
    ip.emit(&mut ipv6::Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]));
    message.emit(&mut Packet::new_unchecked(&mut frame[at..]), source, group);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    // Frames 21 and 22 of `rc_pingpong_v6.pcap` (real Linux): vm1 asks
    // for vm2's link-local address, vm2 answers.
    const SOLICITATION: &str = "3333ff00000252540000000186dd6000000000203afffe80000000000000505400fffe000001ff0200000000000000000001ff00000287008b9a00000000fe80000000000000505400fffe0000020101525400000001";
    const ADVERTISEMENT: &str = "52540000000152540000000286dd6000000000203afffe80000000000000505400fffe000002fe80000000000000505400fffe0000018800d9c860000000fe80000000000000505400fffe0000020201525400000002";
    // Frame 7 of `atomic_bw.pcap`: duplicate address detection, from ::,
    // with a nonce option and no link-layer address.
    const DAD: &str = "3333ff00000252540000000286dd6000000000203aff00000000000000000000000000000000ff0200000000000000000001ff0000028700d94300000000fe80000000000000505400fffe0000020e0144ebbb9a44fc";

    const VM1: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
    const VM2: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];

    #[test]
    fn a_solicitation_as_linux_sends_it() {
        let frame = hex(SOLICITATION);
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        let p = Packet::new_checked(ip.payload()).unwrap();
        assert!(p.verify_checksum(ip.source(), ip.destination()));
        let target = ipv6::link_local_from_mac(VM2);
        assert_eq!(Repr::parse(&p).unwrap(), Repr::Solicit { target, source_mac: Some(VM1) });
        assert_eq!(solicitation_frame(VM1, ipv6::link_local_from_mac(VM1), target), frame);
    }

    #[test]
    fn an_advertisement_round_trips() {
        let frame = hex(ADVERTISEMENT);
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        let p = Packet::new_checked(ip.payload()).unwrap();
        let repr = Repr::parse(&p).unwrap();
        let target = ipv6::link_local_from_mac(VM2);
        let flags = FLAG_SOLICITED | FLAG_OVERRIDE;
        assert_eq!(repr, Repr::Advert { flags, target, target_mac: Some(VM2) });
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), ip.source(), ip.destination());
        assert_eq!(out, ip.payload());
    }

    #[test]
    fn options_without_a_link_layer_address_and_broken_ones() {
        let frame = hex(DAD);
        let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
        let p = Packet::new_checked(ip.payload()).unwrap();
        assert!(p.verify_checksum(ip.source(), ip.destination()));
        assert_eq!(p.options().map(|(t, _)| t).collect::<Vec<_>>(), [14]);
        assert_eq!(p.link_layer_addrs(OPTION_SOURCE_LINK_ADDR).count(), 0);
        let mut broken = ip.payload().to_vec();
        broken[25] = 0; // a zero-length option ends the walk
        assert_eq!(Packet::new_unchecked(&broken[..]).options().count(), 0);
        broken[25] = 9; // one that runs past the end, too
        assert_eq!(Packet::new_unchecked(&broken[..]).options().count(), 0);
        assert_eq!(Packet::new_checked(&broken[..23]).unwrap_err(), Error::Truncated);
        broken[0] = 128; // an echo request
        assert!(Packet::new_checked(&broken[..]).is_err());
    }
}
