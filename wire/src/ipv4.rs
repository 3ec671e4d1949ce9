//! The IPv4 header (RFC 791): 20 bytes, up to 40 more of options.
//!
//! ```text
//! +-------+-------+---------------+-------------------------------+
//! |version|  IHL  |   DSCP | ECN  |         total length          |
//! +-------+-------+---------------+-----+-------------------------+
//! |        identification         |flags|     fragment offset     |
//! +---------------+---------------+-----+-------------------------+
//! |      TTL      |   protocol    |        header checksum        |
//! +---------------+---------------+-------------------------------+
//! |                        source address                         |
//! |                      destination address                      |
//! |                     options (IHL > 5) ...                     |
//! +---------------------------------------------------------------+
//! ```
//!
//! RoCEv2's ICRC covers this header with TTL, DSCP/ECN and the checksum
//! masked: the identification, the flags, the lengths and the addresses
//! must be exactly what the peer sees. [`Repr`] holds every bit
//! (the reserved flag included) so that a parsed header emits the same
//! bytes.

use crate::{bytes, checksum, Error, Result};
use core::net::Ipv4Addr;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// The longest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;
/// The IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;
/// The IP protocol number of TCP.
pub const PROTOCOL_TCP: u8 = 6;

const RESERVED_FLAG: u16 = 0x8000;
const DONT_FRAGMENT: u16 = 0x4000;
const MORE_FRAGMENTS: u16 = 0x2000;
const FRAGMENT_OFFSET: u16 = 0x1fff;

/// A read/write view of an IPv4 header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it: accessors panic if it is
    /// shorter than the header. For bytes from outside, use
    /// [`Packet::new_checked`].
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole IPv4 header: version 4, IHL at
    /// least 5, and the header's bytes (options included) present. The
    /// total length is not checked against the buffer: a capture may cut
    /// a packet short, and Ethernet may pad one (see [`Packet::total_len`]).
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        let first = *data.first().ok_or(Error::Truncated)?;
        if first >> 4 != 4 {
            return Err(Error::Malformed("IPv4 version is not 4"));
        }
        if usize::from(first & 0x0f) * 4 < MIN_HEADER_LEN {
            return Err(Error::Malformed("IPv4 header length below 20 bytes"));
        }
        if data.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The version (4 in a checked view).
    pub fn version(&self) -> u8 {
        self.data()[field::VER_IHL] >> 4
    }
    /// The header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.data()[field::DSCP_ECN] >> 2
    }
    /// ECN (2 bits).
    pub fn ecn(&self) -> u8 {
        self.data()[field::DSCP_ECN] & 3
    }
    /// The total length: header and payload.
    pub fn total_len(&self) -> u16 {
        bytes::u16(&self.data()[field::TOTAL_LEN])
    }
    /// The identification.
    pub fn identification(&self) -> u16 {
        bytes::u16(&self.data()[field::IDENT])
    }
    fn flags_frag(&self) -> u16 {
        bytes::u16(&self.data()[field::FLAGS_FRAG])
    }
    /// The reserved ("evil") flag, which must be zero.
    pub fn reserved_flag(&self) -> bool {
        self.flags_frag() & RESERVED_FLAG != 0
    }
    /// Don't fragment.
    pub fn dont_fragment(&self) -> bool {
        self.flags_frag() & DONT_FRAGMENT != 0
    }
    /// More fragments.
    pub fn more_fragments(&self) -> bool {
        self.flags_frag() & MORE_FRAGMENTS != 0
    }
    /// The fragment offset, in units of 8 bytes.
    pub fn fragment_offset(&self) -> u16 {
        self.flags_frag() & FRAGMENT_OFFSET
    }
    /// Time to live.
    pub fn time_to_live(&self) -> u8 {
        self.data()[field::TTL]
    }
    /// The protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.data()[field::PROTOCOL]
    }
    /// The header checksum as stored.
    pub fn header_checksum(&self) -> u16 {
        bytes::u16(&self.data()[field::CHECKSUM])
    }
    /// The source address.
    pub fn source(&self) -> Ipv4Addr {
        Ipv4Addr::from(addr(&self.data()[field::SRC]))
    }
    /// The destination address.
    pub fn destination(&self) -> Ipv4Addr {
        Ipv4Addr::from(addr(&self.data()[field::DST]))
    }
    /// The options' bytes.
    pub fn options(&self) -> &[u8] {
        &self.data()[MIN_HEADER_LEN..self.header_len()]
    }
    /// The header's bytes (options included).
    pub fn header(&self) -> &[u8] {
        &self.data()[..self.header_len()]
    }
    /// Whether the stored checksum is right over the header as it is.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.header()) == 0
    }
    /// Whether the packet is a fragment (more fragments, or an offset).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments() || self.fragment_offset() != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the version and the header length in bytes (a multiple of 4).
    pub fn set_version_and_header_len(&mut self, version: u8, header_len: usize) {
        self.data_mut()[field::VER_IHL] = (version << 4) | ((header_len / 4) as u8 & 0x0f);
    }
    /// Sets DSCP and ECN.
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.data_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, value: u16) {
        self.data_mut()[field::TOTAL_LEN].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the identification.
    pub fn set_identification(&mut self, value: u16) {
        self.data_mut()[field::IDENT].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the flags and the fragment offset.
    pub fn set_flags_and_offset(&mut self, reserved: bool, df: bool, mf: bool, offset: u16) {
        let value = (u16::from(reserved) * RESERVED_FLAG)
            | (u16::from(df) * DONT_FRAGMENT)
            | (u16::from(mf) * MORE_FRAGMENTS)
            | (offset & FRAGMENT_OFFSET);
        self.data_mut()[field::FLAGS_FRAG].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the TTL.
    pub fn set_time_to_live(&mut self, value: u8) {
        self.data_mut()[field::TTL] = value;
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, value: u8) {
        self.data_mut()[field::PROTOCOL] = value;
    }
    /// Sets the header checksum field.
    pub fn set_header_checksum(&mut self, value: u16) {
        self.data_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the source address.
    pub fn set_source(&mut self, addr: Ipv4Addr) {
        self.data_mut()[field::SRC].copy_from_slice(&addr.octets());
    }
    /// Sets the destination address.
    pub fn set_destination(&mut self, addr: Ipv4Addr) {
        self.data_mut()[field::DST].copy_from_slice(&addr.octets());
    }
    /// Computes and stores the header checksum over the header as it is.
    pub fn fill_checksum(&mut self) {
        self.set_header_checksum(0);
        let value = checksum::checksum(self.header());
        self.set_header_checksum(value);
    }
}

fn addr(bytes: &[u8]) -> [u8; 4] {
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

/// An IPv4 header's options: up to 40 bytes, kept as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Options {
    bytes: [u8; 40],
    len: u8,
}

impl Default for Options {
    fn default() -> Options {
        Options { bytes: [0; 40], len: 0 }
    }
}

impl Options {
    /// Options from bytes: `None` if more than 40 or not a multiple of 4.
    pub fn from_slice(bytes: &[u8]) -> Option<Options> {
        if bytes.len() > 40 || bytes.len() % 4 != 0 {
            return None;
        }
        let mut options = Options { bytes: [0; 40], len: bytes.len() as u8 };
        options.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(options)
    }
    /// The options' bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
    /// Their length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The fields of an IPv4 header, every bit of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Total length (header and payload).
    pub total_len: u16,
    /// Identification.
    pub identification: u16,
    /// The reserved flag (must be zero; kept for bit-exact round trips).
    pub reserved_flag: bool,
    /// Don't fragment.
    pub dont_fragment: bool,
    /// More fragments.
    pub more_fragments: bool,
    /// Fragment offset in units of 8 bytes.
    pub fragment_offset: u16,
    /// Time to live.
    pub time_to_live: u8,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Header checksum, emitted as is.
    pub header_checksum: u16,
    /// Source address.
    pub source: [u8; 4],
    /// Destination address.
    pub destination: [u8; 4],
    /// Options.
    pub options: Options,
}

/// The TTL rxe (and Linux's default route) sends with.
pub const DEFAULT_TTL: u8 = 64;

impl Repr {
    /// A UDP datagram's header as rxe and an unconnected DF socket send
    /// it: DF, TTL 64, DSCP/ECN 0, no options, the checksum computed.
    /// `None` if the payload does not fit a total length.
    pub fn udp(
        source: Ipv4Addr,
        destination: Ipv4Addr,
        ip_id: u16,
        payload_len: usize,
    ) -> Option<Repr> {
        let total_len = u16::try_from(MIN_HEADER_LEN + payload_len).ok()?;
        let mut repr = Repr {
            dscp: 0,
            ecn: 0,
            total_len,
            identification: ip_id,
            reserved_flag: false,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
            time_to_live: DEFAULT_TTL,
            protocol: PROTOCOL_UDP,
            header_checksum: 0,
            source: source.octets(),
            destination: destination.octets(),
            options: Options::default(),
        };
        repr.header_checksum = repr.calc_header_checksum();
        Some(repr)
    }

    /// Reads a header (see [`Packet::check_len`] for what is checked).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            total_len: packet.total_len(),
            identification: packet.identification(),
            reserved_flag: packet.reserved_flag(),
            dont_fragment: packet.dont_fragment(),
            more_fragments: packet.more_fragments(),
            fragment_offset: packet.fragment_offset(),
            time_to_live: packet.time_to_live(),
            protocol: packet.protocol(),
            header_checksum: packet.header_checksum(),
            source: packet.source().octets(),
            destination: packet.destination().octets(),
            options: Options::from_slice(packet.options()).unwrap_or_default(),
        })
    }

    /// Length of the emitted header.
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Same as [`Repr::header_len`].
    pub fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Whether the packet is a fragment.
    pub fn is_fragmenting_payload(&self) -> bool {
        self.more_fragments || self.fragment_offset != 0
    }

    /// The header checksum these fields call for (computed from the
    /// fields, without emitting them: it is on every packet's path).
    pub fn calc_header_checksum(&self) -> u16 {
        let flags = (u16::from(self.reserved_flag) * RESERVED_FLAG)
            | (u16::from(self.dont_fragment) * DONT_FRAGMENT)
            | (u16::from(self.more_fragments) * MORE_FRAGMENTS)
            | (self.fragment_offset & FRAGMENT_OFFSET);
        let ihl = (self.header_len() / 4) as u16;
        // The same ones' complement sum as over the emitted header's
        // words, added up directly (an address is two words; most headers
        // have no options).
        let address = |a: [u8; 4]| {
            u64::from(u16::from_be_bytes([a[0], a[1]]))
                + u64::from(u16::from_be_bytes([a[2], a[3]]))
        };
        let options = self.options.as_slice();
        let total = u64::from((0x4000 | ihl << 8) | u16::from(self.dscp << 2 | (self.ecn & 3)))
            + u64::from(self.total_len)
            + u64::from(self.identification)
            + u64::from(flags)
            + u64::from(u16::from(self.time_to_live) << 8 | u16::from(self.protocol))
            + address(self.source)
            + address(self.destination)
            + if options.is_empty() { 0 } else { u64::from(checksum::sum(options)) };
        !checksum::fold(total)
    }

    /// Writes the header (checksum as stored in the repr) into a view of
    /// at least [`Repr::header_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version_and_header_len(4, self.header_len());
        packet.set_dscp_ecn(self.dscp, self.ecn);
        packet.set_total_len(self.total_len);
        packet.set_identification(self.identification);
        packet.set_flags_and_offset(
            self.reserved_flag,
            self.dont_fragment,
            self.more_fragments,
            self.fragment_offset,
        );
        packet.set_time_to_live(self.time_to_live);
        packet.set_protocol(self.protocol);
        packet.set_header_checksum(self.header_checksum);
        packet.set_source(Ipv4Addr::from(self.source));
        packet.set_destination(Ipv4Addr::from(self.destination));
        let len = self.header_len();
        packet.buffer.as_mut()[MIN_HEADER_LEN..len].copy_from_slice(self.options.as_slice());
    }

    /// The header as bytes: the first [`Repr::header_len`] of them.
    pub fn to_bytes(&self) -> [u8; MAX_HEADER_LEN] {
        let mut out = [0u8; MAX_HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut out[..]));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv4 header of an RC ACK in `send_bw_mtu4200.pcap` (frame 50,
    // real rxe): ID 0xca1d, DF, TTL 64, UDP, 169.254.0.1 -> 169.254.0.2.
    const BYTES: [u8; 20] = [
        0x45, 0x00, 0x00, 0x30, 0xca, 0x1d, 0x40, 0x00, 0x40, 0x11, 0x1c, 0xa0, 0xa9, 0xfe, 0x00,
        0x01, 0xa9, 0xfe, 0x00, 0x02,
    ];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.total_len()), (4, 20, 0x30));
        assert_eq!(p.identification(), 0xca1d);
        assert!(p.dont_fragment() && !p.more_fragments() && !p.reserved_flag());
        assert!(!p.is_fragment());
        assert_eq!((p.time_to_live(), p.protocol()), (64, PROTOCOL_UDP));
        assert_eq!(p.source(), Ipv4Addr::new(169, 254, 0, 1));
        assert_eq!(p.destination(), Ipv4Addr::new(169, 254, 0, 2));
        assert!(p.verify_checksum());
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.calc_header_checksum(), 0x1ca0);
        assert_eq!(&repr.to_bytes()[..20], &BYTES);
        let built = Repr::udp(p.source(), p.destination(), 0xca1d, 0x30 - 20).unwrap();
        assert_eq!(built, repr, "rxe's header is the one `udp` builds");
    }

    #[test]
    fn checks_version_length_and_options() {
        assert_eq!(Packet::new_checked(&BYTES[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        let mut six = BYTES;
        six[0] = 0x65;
        assert!(matches!(Packet::new_checked(&six[..]), Err(Error::Malformed(_))));
        let mut short = BYTES;
        short[0] = 0x44;
        assert!(matches!(Packet::new_checked(&short[..]), Err(Error::Malformed(_))));
        // IHL 6: 4 bytes of options must be there.
        let mut with_options = BYTES.to_vec();
        with_options[0] = 0x46;
        assert_eq!(Packet::new_checked(&with_options[..]).unwrap_err(), Error::Truncated);
        with_options.extend_from_slice(&[1, 1, 1, 0]);
        let p = Packet::new_checked(&with_options[..]).unwrap();
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.options.as_slice(), &[1, 1, 1, 0]);
        assert_eq!(&repr.to_bytes()[..24], &with_options[..]);
    }

    #[test]
    fn the_checksum_from_the_fields_is_the_one_over_the_bytes() {
        let mut repr = Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()).unwrap();
        for (dscp, ecn, reserved, mf, offset, ttl, options) in [
            (0, 0, false, false, 0, 64, &[][..]),
            (0x3f, 3, true, true, 0x1fff, 255, &[1, 1, 1, 0][..]),
            (0x2e, 1, false, true, 7, 1, &[0x44, 8, 5, 0, 0, 0, 0, 1][..]),
        ] {
            repr.dscp = dscp;
            repr.ecn = ecn;
            repr.reserved_flag = reserved;
            repr.more_fragments = mf;
            repr.fragment_offset = offset;
            repr.time_to_live = ttl;
            repr.options = Options::from_slice(options).unwrap();
            repr.header_checksum = 0;
            let bytes = repr.to_bytes();
            assert_eq!(
                repr.calc_header_checksum(),
                checksum::checksum(&bytes[..repr.header_len()])
            );
        }
    }

    #[test]
    fn the_reserved_flag_round_trips() {
        let mut bytes = BYTES;
        bytes[6] |= 0x80;
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert!(repr.reserved_flag && repr.dont_fragment);
        assert_eq!(&repr.to_bytes()[..20], &bytes);
    }
}
