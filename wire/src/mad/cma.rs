//! What Linux's rdma_cm (the CMA) adds to the CM for IP addressing: the
//! header at the start of a REQ's (or SIDR_REQ's) private data, and
//! service IDs made from a port space and an IP port (IBA Annex A11, "RDMA
//! IP CM Service").
//!
//! ```text
//!  offset  field
//!    0     version (1): 0x00 (the annex splits it into major:4 minor:4)
//!    1     IP version:4 reserved:4
//!    2     source port (2)
//!    4     source IP address (16)
//!   20     destination IP address (16)
//!   36     the consumer's private data (56 of a REQ's 92)
//! ```
//!
//! An IPv4 address fills the last 4 bytes of its 16, after 12 zero bytes
//! (not the `::ffff:` mapped form of a GID). The header carries only the
//! source port: the destination port is the low 16 bits of the service ID,
//! which is `(port space << 16) | port`, e.g. `0x0000_0000_0106_1c06` for
//! TCP port 7174 (rping's default).

use super::{array, ServiceId};
use crate::{bytes, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    /// IP version (bits 0-3), reserved (4-7).
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: Range<usize> = 2..4;
    pub const SRC_ADDR: Range<usize> = 4..20;
    pub const DST_ADDR: Range<usize> = 20..36;
}

/// The only CMA header version Linux writes and accepts.
pub const CMA_VERSION: u8 = 0x00;
/// How many bytes of a REQ's private data are left to the consumer.
pub const REQ_CONSUMER_DATA_LEN: usize = super::req::PRIVATE_DATA_LEN - HEADER_LEN;

/// An rdma_cm port space: the upper half of an IP service ID's low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// `RDMA_PS_TCP`: RC connections (what rping and most tools use).
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// `RDMA_PS_UDP`: UD, resolved with SIDR.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// `RDMA_PS_IB`: native IB addressing (`AF_IB`).
    pub const IB: PortSpace = PortSpace(0x013f);
}

impl ServiceId {
    /// The upper 40 bits every IP service ID shares (IBA Annex A11): the
    /// `0x0000000001` prefix, which is why port spaces start with 0x01.
    pub const IP_PREFIX: u64 = 0x0000_0000_0100_0000;
    /// The mask of the prefix.
    pub const IP_PREFIX_MASK: u64 = 0xffff_ffff_ff00_0000;

    /// The service ID of an IP port in a port space, as Linux's
    /// `rdma_get_service_id` computes it: `(ps << 16) + port`.
    pub const fn from_ip(port_space: PortSpace, port: u16) -> ServiceId {
        ServiceId(((port_space.0 as u64) << 16) | port as u64)
    }
    /// Whether the ID has the IP prefix (port spaces TCP, UDP and IB have
    /// it; IPoIB's 0x0002 does not).
    pub const fn has_ip_prefix(self) -> bool {
        self.0 & Self::IP_PREFIX_MASK == Self::IP_PREFIX
    }
    /// The port space: bits 16-31, as Linux reads it back.
    pub const fn port_space(self) -> PortSpace {
        PortSpace((self.0 >> 16) as u16)
    }
    /// The IP port: the low 16 bits (the passive side's port).
    pub const fn port(self) -> u16 {
        self.0 as u16
    }
}

fixed_header_view!(36);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The header version (0x00).
    pub fn version(&self) -> u8 {
        self.data()[field::VERSION]
    }
    /// The IP version (4 bits: 4 or 6).
    pub fn ip_version(&self) -> u8 {
        self.data()[field::IP_VERSION] >> 4
    }
    /// The 4 reserved bits after the IP version.
    pub fn resv4(&self) -> u8 {
        self.data()[field::IP_VERSION] & 0x0f
    }
    /// The active side's IP port.
    pub fn src_port(&self) -> u16 {
        bytes::u16(&self.data()[field::SRC_PORT])
    }
    /// The 16 bytes of the source address, as they are.
    pub fn src_addr(&self) -> [u8; 16] {
        array(&self.data()[field::SRC_ADDR])
    }
    /// The 16 bytes of the destination address, as they are.
    pub fn dst_addr(&self) -> [u8; 16] {
        array(&self.data()[field::DST_ADDR])
    }
    /// The source address, or `None` if the IP version is neither 4 nor 6.
    pub fn src_ip(&self) -> Option<IpAddr> {
        ip(self.ip_version(), self.src_addr())
    }
    /// The destination address, or `None` if the IP version is neither 4
    /// nor 6.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        ip(self.ip_version(), self.dst_addr())
    }
}

fn ip(version: u8, addr: [u8; 16]) -> Option<IpAddr> {
    match version {
        4 => Some(IpAddr::V4(Ipv4Addr::new(addr[12], addr[13], addr[14], addr[15]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(addr))),
        _ => None,
    }
}

fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut a = [0u8; 16];
            a[12..].copy_from_slice(&v4.octets());
            a
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the header version.
    pub fn set_version(&mut self, value: u8) {
        self.data_mut()[field::VERSION] = value;
    }
    /// Sets the IP version (low 4 bits of `value`).
    pub fn set_ip_version(&mut self, value: u8) {
        let b = &mut self.data_mut()[field::IP_VERSION];
        *b = (*b & 0x0f) | (value << 4);
    }
    /// Sets the 4 reserved bits (low 4 bits of `value`).
    pub fn set_resv4(&mut self, value: u8) {
        let b = &mut self.data_mut()[field::IP_VERSION];
        *b = (*b & 0xf0) | (value & 0x0f);
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        self.data_mut()[field::SRC_PORT].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the 16 bytes of the source address.
    pub fn set_src_addr(&mut self, value: [u8; 16]) {
        self.data_mut()[field::SRC_ADDR].copy_from_slice(&value);
    }
    /// Sets the 16 bytes of the destination address.
    pub fn set_dst_addr(&mut self, value: [u8; 16]) {
        self.data_mut()[field::DST_ADDR].copy_from_slice(&value);
    }
}

/// The fields of a CMA header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Header version (0x00).
    pub version: u8,
    /// IP version (4 bits: 4 or 6).
    pub ip_version: u8,
    /// The 4 reserved bits after it.
    pub resv4: u8,
    /// The active side's port.
    pub src_port: u16,
    /// The source address's 16 bytes (IPv4: 12 zero bytes, then the address).
    pub src_addr: [u8; 16],
    /// The destination address's 16 bytes.
    pub dst_addr: [u8; 16],
}

impl Repr {
    /// The header Linux writes for a connection from `src` (address and
    /// port) to `dst`. Fails if the two addresses are not of one version.
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> Result<Repr> {
        let ip_version = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(crate::Error::Malformed("CMA header: mixed IP versions")),
        };
        Ok(Repr {
            version: CMA_VERSION,
            ip_version,
            resv4: 0,
            src_port,
            src_addr: addr16(src),
            dst_addr: addr16(dst),
        })
    }
    /// The source address, or `None` if the IP version is neither 4 nor 6.
    pub fn src_ip(&self) -> Option<IpAddr> {
        ip(self.ip_version, self.src_addr)
    }
    /// The destination address, or `None` if the IP version is neither 4
    /// nor 6.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        ip(self.ip_version, self.dst_addr)
    }
    /// Reads a CMA header. It does not check the version: Linux rejects a
    /// REQ whose header is not version 0 with IP version 4 or 6, and the
    /// caller decides the same way with [`Repr::src_ip`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            version: packet.version(),
            ip_version: packet.ip_version(),
            resv4: packet.resv4(),
            src_port: packet.src_port(),
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
        })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version(self.version);
        packet.set_ip_version(self.ip_version);
        packet.set_resv4(self.resv4);
        packet.set_src_port(self.src_port);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_id_of_rping() {
        let sid = ServiceId::from_ip(PortSpace::TCP, 7174);
        assert_eq!(sid, ServiceId(0x0000_0000_0106_1c06));
        assert!(sid.has_ip_prefix());
        assert_eq!((sid.port_space(), sid.port()), (PortSpace::TCP, 7174));
        assert_eq!(ServiceId::from_ip(PortSpace::UDP, 1).0, 0x0111_0001);
        assert!(ServiceId::from_ip(PortSpace::IB, 1).has_ip_prefix());
        assert!(!ServiceId::from_ip(PortSpace::IPOIB, 1).has_ip_prefix());
    }

    #[test]
    fn ipv6_header() {
        let src: IpAddr = "fe80::5054:ff:fe00:2".parse().unwrap();
        let dst: IpAddr = "fe80::5054:ff:fe00:1".parse().unwrap();
        let repr = Repr::new(src, 0xbb20, dst).unwrap();
        let mut buf = [0xa5u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf[..4], [0x00, 0x60, 0xbb, 0x20]);
        assert_eq!(buf[4..6], [0xfe, 0x80]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((p.src_ip(), p.dst_ip()), (Some(src), Some(dst)));
        assert_eq!(Repr::parse(&p).unwrap(), repr);
        let v4: IpAddr = Ipv4Addr::new(1, 2, 3, 4).into();
        assert!(Repr::new(v4, 1, dst).is_err());
        assert_eq!(Packet::new_checked(&buf[..35]).unwrap_err(), crate::Error::Truncated);
    }

    #[test]
    fn unknown_ip_version_reads_no_address() {
        let buf = [0x00u8; HEADER_LEN];
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((p.src_ip(), p.dst_ip()), (None, None));
    }
}
