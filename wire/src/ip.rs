//! IP packets of either version: the [`IpHeader`] of a RoCEv2 frame, the
//! headers a UDP datagram travels with ([`DatagramHeaders`]), and quick
//! looks into an IP packet built by uroce (its addresses, where its UDP
//! payload starts).

use crate::{ipv4, ipv6, udp, Error, Result, ROCEV2_UDP_PORT};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An IP header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpHeader {
    /// IPv4.
    V4(ipv4::Repr),
    /// IPv6.
    V6(ipv6::Repr),
}

impl IpHeader {
    /// The source address.
    pub fn source(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(Ipv4Addr::from(h.source)),
            IpHeader::V6(h) => IpAddr::V6(Ipv6Addr::from(h.source)),
        }
    }

    /// The destination address.
    pub fn destination(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(Ipv4Addr::from(h.destination)),
            IpHeader::V6(h) => IpAddr::V6(Ipv6Addr::from(h.destination)),
        }
    }

    /// Length of the header in bytes.
    pub fn header_len(&self) -> usize {
        match self {
            IpHeader::V4(h) => h.header_len(),
            IpHeader::V6(h) => h.header_len(),
        }
    }

    /// The protocol of the payload (IPv6: the next header).
    pub fn protocol(&self) -> u8 {
        match self {
            IpHeader::V4(h) => h.protocol,
            IpHeader::V6(h) => h.next_header,
        }
    }

    /// Writes the header into the start of `out` (at least
    /// [`IpHeader::header_len`] bytes).
    pub fn emit(&self, out: &mut [u8]) {
        match self {
            IpHeader::V4(h) => h.emit(&mut ipv4::Packet::new_unchecked(out)),
            IpHeader::V6(h) => h.emit(&mut ipv6::Packet::new_unchecked(out)),
        }
    }
}

/// The IP and UDP headers of a RoCEv2 datagram as rxe writes them, and as
/// Linux writes them for an unconnected socket with DF set: DF, TTL (hop
/// limit) 64, TOS 0, the given IPv4 identification, UDP checksum 0, to
/// port 4791.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatagramHeaders {
    /// The IP header.
    pub ip: IpHeader,
    /// The UDP header.
    pub udp: udp::Repr,
}

impl DatagramHeaders {
    /// The headers of a datagram of `payload_len` bytes from `source` to
    /// `destination` (its port is ignored: RoCEv2 goes to 4791).
    /// [`Error::Malformed`] if the addresses are of two versions or the
    /// payload is too long.
    pub fn new(
        source: SocketAddr,
        destination: IpAddr,
        ip_id: u16,
        payload_len: usize,
    ) -> Result<DatagramHeaders> {
        let udp_len = payload_len + udp::HEADER_LEN;
        let too_long = Error::Malformed("datagram too long");
        let ip = match (source.ip(), destination) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                IpHeader::V4(ipv4::Repr::udp(s, d, ip_id, udp_len).ok_or(too_long)?)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                IpHeader::V6(ipv6::Repr::udp(s, d, udp_len).ok_or(too_long)?)
            }
            _ => return Err(Error::Malformed("addresses of two IP versions")),
        };
        let udp = udp::Repr {
            source_port: source.port(),
            destination_port: ROCEV2_UDP_PORT,
            length: u16::try_from(udp_len).map_err(|_| too_long)?,
            checksum: 0,
        };
        Ok(DatagramHeaders { ip, udp })
    }

    /// Length of the emitted headers (28 or 48 bytes).
    pub fn buffer_len(&self) -> usize {
        self.ip.header_len() + udp::HEADER_LEN
    }

    /// Writes the headers into the start of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let out = out.get_mut(..len).ok_or(Error::Truncated)?;
        let (ip, udp) = out.split_at_mut(self.ip.header_len());
        self.ip.emit(ip);
        self.udp.emit(&mut udp::Packet::new_unchecked(udp));
        Ok(len)
    }
}

/// The source and destination of an IP packet (of either version), or
/// `None` if it does not start with a whole IP header.
pub fn addresses(packet: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match packet.first()? >> 4 {
        4 => {
            let p = ipv4::Packet::new_checked(packet).ok()?;
            Some((IpAddr::V4(p.source()), IpAddr::V4(p.destination())))
        }
        6 => {
            let p = ipv6::Packet::new_checked(packet).ok()?;
            p.check_version().ok()?;
            Some((IpAddr::V6(p.source()), IpAddr::V6(p.destination())))
        }
        _ => None,
    }
}

/// Where the UDP payload of an IP packet starts (after the IP header with
/// its options, and the UDP header), or `None` if the packet is shorter.
pub fn udp_payload_offset(packet: &[u8]) -> Option<usize> {
    let header_len = match packet.first()? >> 4 {
        4 => ipv4::Packet::new_checked(packet).ok()?.header_len(),
        6 => ipv6::HEADER_LEN,
        _ => return None,
    };
    let offset = header_len + udp::HEADER_LEN;
    (packet.len() >= offset).then_some(offset)
}

/// The IANA keyword of an IP protocol number, for the common ones.
pub fn protocol_name(protocol: u8) -> Option<&'static str> {
    Some(match protocol {
        0 => "HOPOPT",
        1 => "ICMP",
        2 => "IGMP",
        4 => "IPv4",
        6 => "TCP",
        17 => "UDP",
        41 => "IPv6",
        43 => "IPv6-Route",
        44 => "IPv6-Frag",
        47 => "GRE",
        50 => "ESP",
        51 => "AH",
        58 => "IPv6-ICMP",
        59 => "IPv6-NoNxt",
        60 => "IPv6-Opts",
        88 => "EIGRP",
        89 => "OSPFIGP",
        103 => "PIM",
        112 => "VRRP",
        115 => "L2TP",
        132 => "SCTP",
        136 => "UDPLite",
        137 => "MPLS-in-IP",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_headers_as_rxe_writes_them() {
        // The IP and UDP headers of an RC ACK in `send_bw_mtu4200.pcap`
        // (frame 50, real rxe).
        let expected = [
            0x45, 0x00, 0x00, 0x30, 0xca, 0x1d, 0x40, 0x00, 0x40, 0x11, 0x1c, 0xa0, 0xa9, 0xfe,
            0x00, 0x01, 0xa9, 0xfe, 0x00, 0x02, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00,
        ];
        let source = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(169, 254, 0, 1)), 0xc121);
        let h =
            DatagramHeaders::new(source, Ipv4Addr::new(169, 254, 0, 2).into(), 0xca1d, 20).unwrap();
        let mut out = [0u8; 28];
        assert_eq!(h.emit(&mut out), Ok(28));
        assert_eq!(out, expected);
        assert_eq!(addresses(&out), Some((source.ip(), Ipv4Addr::new(169, 254, 0, 2).into())));
        assert_eq!(udp_payload_offset(&out), Some(28));
        assert_eq!(udp_payload_offset(&out[..27]), None);
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(DatagramHeaders::new(source, v6, 0, 20).is_err());
        assert!(DatagramHeaders::new(source, Ipv4Addr::LOCALHOST.into(), 0, 70_000).is_err());
        let h6 = DatagramHeaders::new(SocketAddr::new(v6, 1), v6, 0, 20).unwrap();
        assert_eq!(h6.buffer_len(), 48);
        assert_eq!(h.emit(&mut [0u8; 27]), Err(Error::Truncated));
    }

    #[test]
    fn looks_into_anything_without_panicking() {
        for bytes in [&[][..], &[0x45], &[0x60; 39], &[0x30; 60], &[0x4f; 20]] {
            let _ = (addresses(bytes), udp_payload_offset(bytes));
        }
        assert_eq!(protocol_name(58), Some("IPv6-ICMP"));
        assert_eq!(protocol_name(253), None);
    }
}
