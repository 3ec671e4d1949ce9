//! RoCEv2 framing: `[Ethernet] + IPv4/IPv6 + UDP(dport 4791) + transport`.
//!
//! ```text
//! +----------+-----------------+--------+-----+-----+---------+-----+------+
//! | Ethernet | IPv4 (20 B) or  |  UDP   | BTH | ext | payload | pad | ICRC |
//! | 14 B,    | IPv6 (40 B)     |  8 B   |     |     |         |     |      |
//! | optional |                 |dst 4791|     |     |         |     |      |
//! +----------+-----------------+--------+-----+-----+---------+-----+------+
//!                              |<----------- UDP payload ------------------>|
//! ```
//!
//! The end of the packet is given by the IP header (IPv4 total length,
//! IPv6 payload length), never by the frame length: Ethernet may pad short
//! frames, and a capture may cut long ones. Outer headers are read and
//! written with this crate's own views ([`crate::ethernet`], [`crate::ipv4`],
//! [`crate::ipv6`], [`crate::udp`]).
//!
//! [`classify`] sorts a captured frame into RoCEv2 or not; a
//! [`RoceFrame`] then gives the transport packet, checks the ICRC (and the
//! IPv4 and UDP checksums, which the ICRC leaves out) and turns back into a
//! [`FrameRepr`] that emits the same bytes. [`FrameRepr::ipv4`] and
//! [`FrameRepr::ipv6`] build new frames the way rxe does. A receiving
//! HCA reads an IP packet with [`RoceDatagram::parse`] instead: the same
//! decision and checks, with the headers left in the packet's bytes.

use crate::ethernet::{self, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ};
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{PROTOCOL_TCP, PROTOCOL_UDP};
use crate::{checksum, ip, ipv4, ipv6, roce, udp, Error, Result, ROCEV2_UDP_PORT};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use crate::ip::IpHeader;
pub use datagram::RoceDatagram;
pub use emit::{emit_around_payload, emit_ipv4, payload_offset};

mod datagram;
mod emit;

/// What a captured frame starts with (a pcap link type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// Ethernet II, possibly with 802.1Q/802.1ad tags.
    Ethernet,
    /// No link header: the IP header comes first.
    RawIp,
    /// Linux "cooked" capture v1 (16-byte header), as `tcpdump -i any`.
    LinuxSll,
    /// Linux "cooked" capture v2 (20-byte header).
    LinuxSll2,
    /// BSD loopback: a 4-byte address family in host byte order.
    Null,
}

/// The Ethernet header of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetInfo {
    /// The Ethernet II header (its `ether_type` is the outer one).
    pub header: ethernet::Repr,
    /// VLAN tags between the header and the IP packet (0..=2), as bytes.
    pub vlan_tags: [[u8; 4]; 2],
    /// How many of `vlan_tags` are present.
    pub vlan_count: usize,
}

/// A frame that is not RoCEv2, described for a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Other {
    /// An ARP packet.
    Arp,
    /// A link-layer protocol other than IP and ARP.
    EtherType(u16),
    /// An IP packet that is neither UDP nor TCP (the protocol number).
    Ip {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
        /// IP protocol / IPv6 next header.
        protocol: u8,
    },
    /// A TCP segment (for example the QP-info exchange of perftest).
    Tcp {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// A UDP datagram to a port other than 4791.
    Udp {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// An IPv4 fragment (RoCEv2 is never fragmented).
    Ipv4Fragment,
    /// Bytes that could not be read down to the transport header.
    Unreadable(&'static str),
}

impl core::fmt::Display for Other {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Other::Arp => write!(f, "ARP"),
            Other::EtherType(t) => write!(f, "ethertype 0x{t:04x}"),
            Other::Ip { src, dst, protocol } => match ip::protocol_name(*protocol) {
                Some(name) => write!(f, "{src} -> {dst} {name}"),
                None => write!(f, "{src} -> {dst} IP protocol {protocol}"),
            },
            Other::Tcp { src, dst, src_port, dst_port } => {
                write!(f, "{src}:{src_port} -> {dst}:{dst_port} TCP")
            }
            Other::Udp { src, dst, src_port, dst_port } => {
                write!(f, "{src}:{src_port} -> {dst}:{dst_port} UDP")
            }
            Other::Ipv4Fragment => write!(f, "IPv4 fragment"),
            Other::Unreadable(why) => write!(f, "unreadable: {why}"),
        }
    }
}

/// A captured frame, sorted.
#[derive(Debug, Clone)]
pub enum Classified<'a> {
    /// A UDP datagram to port 4791.
    Roce(RoceFrame<'a>),
    /// Anything else.
    Other(Other),
}

/// A UDP datagram to port 4791 inside a captured frame.
#[derive(Debug, Clone)]
pub struct RoceFrame<'a> {
    /// The Ethernet header, when the frame has one.
    pub ethernet: Option<EthernetInfo>,
    /// The IP header.
    pub ip: IpHeader,
    /// The UDP header.
    pub udp: udp::Repr,
    ip_bytes: &'a [u8],
    udp_bytes: &'a [u8],
    transport: &'a [u8],
    /// Bytes after the IP packet (Ethernet padding): kept for round trips.
    pub trailer: &'a [u8],
    /// A problem below the transport layer: the capture cut the packet
    /// short, or the UDP length disagrees with the IP length.
    pub framing_error: Option<Error>,
}

const ETHERTYPE_VLAN: u16 = ethernet::ETHERTYPE_VLAN;
const UDP_HEADER_LEN: usize = udp::HEADER_LEN;

/// Sorts one captured frame. Never panics, whatever the bytes.
pub fn classify(data: &[u8], link: Link) -> Classified<'_> {
    match strip_link(data, link) {
        Ok((ethernet, ethertype, ip)) => match ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => classify_ip(ethernet, ip),
            ETHERTYPE_ARP => Classified::Other(Other::Arp),
            other => Classified::Other(Other::EtherType(other)),
        },
        Err(why) => Classified::Other(Other::Unreadable(why)),
    }
}

type LinkParts<'a> = (Option<EthernetInfo>, u16, &'a [u8]);

fn strip_link(data: &[u8], link: Link) -> core::result::Result<LinkParts<'_>, &'static str> {
    let be16 = |at: usize| -> core::result::Result<u16, &'static str> {
        data.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or("frame shorter than its link header")
    };
    match link {
        Link::Ethernet => {
            let view =
                ethernet::Packet::new_checked(data).map_err(|_| "frame shorter than Ethernet")?;
            let header = ethernet::Repr::parse(&view).map_err(|_| "frame shorter than Ethernet")?;
            let mut rest = &data[ethernet::HEADER_LEN..];
            let mut ethertype = header.ether_type;
            let mut info = EthernetInfo { header, vlan_tags: [[0; 4]; 2], vlan_count: 0 };
            while matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ) {
                if info.vlan_count == info.vlan_tags.len() || rest.len() < 4 {
                    return Err("bad VLAN tags");
                }
                info.vlan_tags[info.vlan_count].copy_from_slice(&rest[..4]);
                info.vlan_count += 1;
                ethertype = u16::from_be_bytes([rest[2], rest[3]]);
                rest = &rest[4..];
            }
            Ok((Some(info), ethertype, rest))
        }
        Link::RawIp => match data.first().map(|b| b >> 4) {
            Some(4) => Ok((None, ETHERTYPE_IPV4, data)),
            Some(6) => Ok((None, ETHERTYPE_IPV6, data)),
            _ => Err("raw IP frame that is neither IPv4 nor IPv6"),
        },
        Link::LinuxSll => Ok((None, be16(14)?, data.get(16..).unwrap_or_default())),
        Link::LinuxSll2 => Ok((None, be16(0)?, data.get(20..).unwrap_or_default())),
        Link::Null => {
            let family = data.get(..4).ok_or("frame shorter than its link header")?;
            let family = u32::from_le_bytes([family[0], family[1], family[2], family[3]]);
            let family = if family > 0xffff { family.swap_bytes() } else { family };
            // AF_INET is 2 everywhere; AF_INET6 is 10, 24, 28 or 30.
            let ethertype = match family {
                2 => ETHERTYPE_IPV4,
                10 | 24 | 28 | 30 => ETHERTYPE_IPV6,
                _ => return Err("unknown loopback address family"),
            };
            Ok((None, ethertype, &data[4..]))
        }
    }
}

fn classify_ip(ethernet: Option<EthernetInfo>, data: &[u8]) -> Classified<'_> {
    let parsed = match data.first().map(|b| b >> 4) {
        Some(4) => parse_ipv4(data),
        Some(6) => parse_ipv6(data),
        _ => Err(Other::Unreadable("IP version is neither 4 nor 6")),
    };
    let (ip, ip_bytes, ip_packet_len) = match parsed {
        Ok(parts) => parts,
        Err(other) => return Classified::Other(other),
    };
    let (src, dst) = (ip.source(), ip.destination());
    let protocol = ip.protocol();
    let header_len = ip_bytes.len();
    // The transport header is read from the captured bytes, whatever the IP
    // length says: a damaged length must not hide a RoCEv2 frame.
    let after_ip = &data[header_len..];
    if protocol == PROTOCOL_TCP {
        return Classified::Other(match after_ip.get(..4) {
            Some(p) => Other::Tcp {
                src,
                dst,
                src_port: u16::from_be_bytes([p[0], p[1]]),
                dst_port: u16::from_be_bytes([p[2], p[3]]),
            },
            None => Other::Ip { src, dst, protocol },
        });
    }
    if protocol != PROTOCOL_UDP {
        return Classified::Other(Other::Ip { src, dst, protocol });
    }
    let Ok(udp) = udp::Packet::new_checked(after_ip).and_then(|p| udp::Repr::parse(&p)) else {
        return Classified::Other(Other::Unreadable("IP packet shorter than its UDP header"));
    };
    if udp.destination_port != ROCEV2_UDP_PORT {
        return Classified::Other(Other::Udp {
            src,
            dst,
            src_port: udp.source_port,
            dst_port: udp.destination_port,
        });
    }
    let datagram = RoceDatagram::framed(data, header_len, ip_packet_len, udp.length);
    Classified::Roce(RoceFrame {
        ethernet,
        ip,
        udp,
        ip_bytes,
        udp_bytes: datagram.udp_header_bytes(),
        transport: datagram.transport(),
        trailer: datagram.trailer(),
        framing_error: datagram.framing_error(),
    })
}

type IpParts<'a> = (IpHeader, &'a [u8], usize);

fn parse_ipv4(data: &[u8]) -> core::result::Result<IpParts<'_>, Other> {
    let bad = |_| Other::Unreadable("bad IPv4 header");
    let view = ipv4::Packet::new_checked(data).map_err(bad)?;
    let header = ipv4::Repr::parse(&view).map_err(bad)?;
    if header.is_fragmenting_payload() {
        return Err(Other::Ipv4Fragment);
    }
    Ok((IpHeader::V4(header), &data[..header.header_len()], usize::from(header.total_len)))
}

fn parse_ipv6(data: &[u8]) -> core::result::Result<IpParts<'_>, Other> {
    let bad = |_| Other::Unreadable("bad IPv6 header");
    let view = ipv6::Packet::new_checked(data).map_err(bad)?;
    let header = ipv6::Repr::parse(&view).map_err(bad)?;
    let len = ipv6::HEADER_LEN + usize::from(header.payload_length);
    Ok((IpHeader::V6(header), &data[..ipv6::HEADER_LEN], len))
}

impl<'a> RoceFrame<'a> {
    /// The UDP payload: BTH up to and including the ICRC (cut short if the
    /// capture was).
    pub fn transport(&self) -> &'a [u8] {
        self.transport
    }

    /// The raw IP header bytes.
    pub fn ip_header_bytes(&self) -> &'a [u8] {
        self.ip_bytes
    }

    /// The transport packet, checked against the opcode table.
    pub fn packet(&self) -> Result<roce::Packet<&'a [u8]>> {
        self.datagram().packet()
    }

    /// The ICRC computed over this frame, or `None` when the frame is too
    /// short to hold one.
    pub fn computed_icrc(&self) -> Option<u32> {
        self.datagram().computed_icrc()
    }

    /// The ICRC stored in the frame.
    pub fn stored_icrc(&self) -> Option<u32> {
        self.datagram().stored_icrc()
    }

    /// Whether the stored ICRC matches the computed one.
    pub fn icrc_ok(&self) -> bool {
        self.datagram().icrc_ok()
    }

    /// Whether the IPv4 header checksum is right (always true for IPv6,
    /// which has none). The ICRC masks this field, so a receiver checks it
    /// on its own, as the kernel does before rxe sees the packet.
    pub fn ip_checksum_ok(&self) -> bool {
        match &self.ip {
            // Over the bytes as received.
            IpHeader::V4(_) => checksum::checksum(self.ip_bytes) == 0,
            IpHeader::V6(_) => true,
        }
    }

    /// Whether the UDP checksum is right: zero (not used, as rxe sends over
    /// IPv4 and IPv6 alike) or equal to the computed one. The ICRC masks
    /// this field.
    pub fn udp_checksum_ok(&self) -> bool {
        if self.udp.checksum == 0 {
            return true;
        }
        if self.framing_error.is_some() {
            return false;
        }
        let computed = match &self.ip {
            IpHeader::V4(h) => self.udp.calc_checksum_ipv4(h, self.transport),
            IpHeader::V6(h) => self.udp.calc_checksum_ipv6(h, self.transport),
        };
        computed.map(|sum| sum == self.udp.checksum).unwrap_or(false)
    }

    /// Whether the frame is intact as far as a receiving RoCE NIC can tell:
    /// ICRC, IPv4 header checksum and (if used) UDP checksum.
    pub fn integrity_ok(&self) -> bool {
        self.icrc_ok() && self.ip_checksum_ok() && self.udp_checksum_ok()
    }

    /// The IPv4 reserved flag ("must be zero", bit 7 of byte 6).
    pub fn ipv4_reserved_flag(&self) -> bool {
        matches!(self.ip, IpHeader::V4(h) if h.reserved_flag)
    }

    /// The frame's contents as a [`FrameRepr`] that emits the same bytes.
    pub fn repr(&self) -> Result<FrameRepr<'a>> {
        let packet = self.packet()?;
        Ok(FrameRepr {
            ethernet: self.ethernet.clone(),
            ip: self.ip.clone(),
            udp: self.udp,
            roce: roce::Repr::parse(&packet)?,
            trailer: self.trailer,
            ipv4_reserved_flag: self.ipv4_reserved_flag(),
        })
    }
}

/// The contents of a whole RoCEv2 frame, ready to emit.
#[derive(Debug, Clone)]
pub struct FrameRepr<'a> {
    /// Ethernet header, or `None` for a frame that starts with IP.
    pub ethernet: Option<EthernetInfo>,
    /// IP header, emitted as is (lengths and checksum included).
    pub ip: IpHeader,
    /// UDP header, emitted as is.
    pub udp: udp::Repr,
    /// The transport packet.
    pub roce: roce::Repr<'a>,
    /// Bytes after the IP packet (Ethernet padding).
    pub trailer: &'a [u8],
    /// The IPv4 reserved flag, set on emission when true (the IP checksum
    /// field is not recomputed for it; [`ipv4::Repr::reserved_flag`] holds
    /// it too).
    pub ipv4_reserved_flag: bool,
}

/// The TTL / hop limit rxe's packets leave with (the route's default).
pub const DEFAULT_TTL: u8 = ipv4::DEFAULT_TTL;

impl<'a> FrameRepr<'a> {
    /// An IPv4 frame as rxe sends it: DF set, TTL 64, TOS 0, the given IP
    /// ID, UDP checksum 0, lengths and IP checksum computed. No Ethernet
    /// header until [`FrameRepr::with_ethernet`].
    pub fn ipv4(
        addrs: (Ipv4Addr, Ipv4Addr),
        ip_id: u16,
        src_port: u16,
        roce: roce::Repr<'a>,
    ) -> Result<FrameRepr<'a>> {
        let udp_len = udp_len_for(&roce)?;
        let ip = ipv4::Repr::udp(addrs.0, addrs.1, ip_id, usize::from(udp_len))
            .ok_or(Error::Malformed("packet too long for IPv4"))?;
        Ok(FrameRepr {
            ethernet: None,
            ip: IpHeader::V4(ip),
            udp: udp_header(src_port, udp_len),
            roce,
            trailer: &[],
            ipv4_reserved_flag: false,
        })
    }

    /// An IPv6 frame as rxe sends it: hop limit 64, traffic class and flow
    /// label 0, UDP checksum 0.
    pub fn ipv6(
        addrs: (Ipv6Addr, Ipv6Addr),
        src_port: u16,
        roce: roce::Repr<'a>,
    ) -> Result<FrameRepr<'a>> {
        let udp_len = udp_len_for(&roce)?;
        let ip = ipv6::Repr::udp(addrs.0, addrs.1, usize::from(udp_len))
            .ok_or(Error::Malformed("packet too long for IPv6"))?;
        Ok(FrameRepr {
            ethernet: None,
            ip: IpHeader::V6(ip),
            udp: udp_header(src_port, udp_len),
            roce,
            trailer: &[],
            ipv4_reserved_flag: false,
        })
    }

    /// Adds an Ethernet II header.
    pub fn with_ethernet(mut self, source: [u8; 6], destination: [u8; 6]) -> FrameRepr<'a> {
        let ether_type = match self.ip {
            IpHeader::V4(_) => ETHERTYPE_IPV4,
            IpHeader::V6(_) => ETHERTYPE_IPV6,
        };
        let header = ethernet::Repr { source, destination, ether_type };
        self.ethernet = Some(EthernetInfo { header, vlan_tags: [[0; 4]; 2], vlan_count: 0 });
        self
    }

    /// Length of the emitted frame.
    pub fn buffer_len(&self) -> usize {
        let link = self.ethernet.as_ref().map_or(0, |e| ethernet::HEADER_LEN + 4 * e.vlan_count);
        link + self.ip.header_len() + UDP_HEADER_LEN + self.roce.buffer_len() + self.trailer.len()
    }

    /// Writes the frame into the start of `buf` and computes the ICRC.
    /// Returns the number of bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.roce.check()?;
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
        let mut at = 0;
        if let Some(eth) = &self.ethernet {
            eth.header.emit(&mut ethernet::Packet::new_unchecked(&mut out[..]));
            at = ethernet::HEADER_LEN;
            for tag in &eth.vlan_tags[..eth.vlan_count] {
                out[at..at + 4].copy_from_slice(tag);
                at += 4;
            }
        }
        let ip_range = at..at + self.ip.header_len();
        match &self.ip {
            IpHeader::V4(h) => {
                let mut h = *h;
                h.reserved_flag |= self.ipv4_reserved_flag;
                h.emit(&mut ipv4::Packet::new_unchecked(&mut out[ip_range.clone()]));
            }
            IpHeader::V6(h) => h.emit(&mut ipv6::Packet::new_unchecked(&mut out[ip_range.clone()])),
        }
        at = ip_range.end;
        let udp_range = at..at + UDP_HEADER_LEN;
        self.udp.emit(&mut udp::Packet::new_unchecked(&mut out[udp_range.clone()]));
        at = udp_range.end;
        let transport_range = at..at + self.roce.buffer_len();
        self.roce.emit(&mut roce::Packet::new_unchecked(&mut out[transport_range.clone()]));
        let covered = transport_range.start..transport_range.end - ICRC_LEN;
        let crc = icrc::compute(&out[ip_range], &out[udp_range], &out[covered])
            .ok_or(Error::Malformed("IP header unfit for the ICRC"))?;
        icrc::write(&mut out[transport_range.end - ICRC_LEN..transport_range.end], crc);
        out[transport_range.end..].copy_from_slice(self.trailer);
        Ok(len)
    }
}

fn udp_len_for(roce: &roce::Repr<'_>) -> Result<u16> {
    roce.check()?;
    u16::try_from(UDP_HEADER_LEN + roce.buffer_len())
        .map_err(|_| Error::Malformed("packet too long for UDP"))
}

fn udp_header(src_port: u16, length: u16) -> udp::Repr {
    udp::Repr { source_port: src_port, destination_port: ROCEV2_UDP_PORT, length, checksum: 0 }
}
