//! Management datagrams (MADs) of the Communication Manager: the 24-byte
//! common MAD header and the CM messages that follow it.
//!
//! A MAD is 256 bytes: the common header, then 232 bytes of class data.
//! CM MADs (management class 0x07, class version 2) travel as UD SENDs
//! to QP1 with the Q_Key [`crate::deth::GSI_QKEY`].
//!
//! ```text
//!  byte 0         1            2             3
//! +-------------+------------+-------------+---+---------+
//! | BaseVersion | MgmtClass  | ClassVersion| R | Method  |
//! +-------------+------------+-------------+---+---------+
//! |          Status (2)      |     ClassSpecific (2)     |
//! +--------------------------+---------------------------+
//! |                 TransactionID (8)                    |
//! +--------------------------+---------------------------+
//! |      AttributeID (2)     |        Reserved (2)       |
//! +--------------------------+---------------------------+
//! |               AttributeModifier (4)                  |
//! +------------------------------------------------------+
//! |          class data: one CM message (232)            |
//! +------------------------------------------------------+
//! ```
//!
//! Each CM message has a view over the 232 bytes of class data (not over
//! the whole MAD): [`req`], [`rep`], [`rtu`], [`rej`], [`mra`], [`dreq`],
//! [`drep`], [`sidr`]. [`cma`] reads what Linux's rdma_cm puts at the
//! start of a REQ's private data, and the service IDs it derives from IP
//! ports. [`CmMessage`] reads or writes any of them by attribute ID.
//!
//! Bit fields are numbered as IBA vol 1 chapter 12 numbers them: from the
//! most significant bit of a byte. Every reserved bit is kept in the
//! `Repr`s, so that any 232 bytes parse and emit unchanged.

use crate::{bytes, Error, Result};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

pub mod cma;
pub mod drep;
pub mod dreq;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr;

mod field {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    /// Response bit (bit 7) and method (bits 6-0): kept as one byte.
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TID: Range<usize> = 8..16;
    pub const ATTR_ID: Range<usize> = 16..18;
    pub const RESV: Range<usize> = 18..20;
    pub const ATTR_MOD: Range<usize> = 20..24;
}

/// Length of a whole MAD: header and class data.
pub const MAD_LEN: usize = 256;
/// Length of the class data after the common header: every CM message.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The base version of every IBA MAD.
pub const BASE_VERSION: u8 = 1;
/// The management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version (IBA 1.2 and later; what Linux sends).
pub const CM_CLASS_VERSION: u8 = 2;

/// A MAD method: the response bit (0x80) and the method proper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Method(pub u8);

impl Method {
    /// Get: read an attribute.
    pub const GET: Method = Method(0x01);
    /// Set: write an attribute.
    pub const SET: Method = Method(0x02);
    /// Send: a datagram with no response expected (every CM message).
    pub const SEND: Method = Method(0x03);
    /// The response to a Get or Set.
    pub const GET_RESP: Method = Method(0x81);
    /// The response bit.
    pub const RESPONSE_BIT: u8 = 0x80;

    /// Whether the response bit is set.
    pub const fn is_response(self) -> bool {
        self.0 & Self::RESPONSE_BIT != 0
    }
}

/// The attribute ID of a MAD: for the CM class, which message it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttributeId(pub u16);

impl AttributeId {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: AttributeId = AttributeId(0x0001);
    /// ConnectRequest (REQ).
    pub const REQ: AttributeId = AttributeId(0x0010);
    /// MsgRcptAck (MRA).
    pub const MRA: AttributeId = AttributeId(0x0011);
    /// ConnectReject (REJ).
    pub const REJ: AttributeId = AttributeId(0x0012);
    /// ConnectReply (REP).
    pub const REP: AttributeId = AttributeId(0x0013);
    /// ReadyToUse (RTU).
    pub const RTU: AttributeId = AttributeId(0x0014);
    /// DisconnectRequest (DREQ).
    pub const DREQ: AttributeId = AttributeId(0x0015);
    /// DisconnectReply (DREP).
    pub const DREP: AttributeId = AttributeId(0x0016);
    /// ServiceIDResReq (SIDR_REQ).
    pub const SIDR_REQ: AttributeId = AttributeId(0x0017);
    /// ServiceIDResReqResp (SIDR_REP).
    pub const SIDR_REP: AttributeId = AttributeId(0x0018);
    /// LoadAlternatePath (LAP): no format here yet.
    pub const LAP: AttributeId = AttributeId(0x0019);
    /// AlternatePathResponse (APR): no format here yet.
    pub const APR: AttributeId = AttributeId(0x001a);
}

/// A MAD transaction ID. Linux's CM puts its MAD agent's number in the
/// upper 32 bits; a REP and an RTU carry the TID of the REQ they answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TransactionId(pub u64);

impl fmt::Display for TransactionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// A CM communication ID: names one end of a connection (each side picks
/// its own local ID; the peer's is the remote ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommId(pub u32);

impl fmt::Display for CommId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}

/// A service ID: what a REQ or SIDR_REQ asks to connect to. rdma_cm
/// derives it from a port space and an IP port (see [`cma`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ServiceId(pub u64);

impl fmt::Display for ServiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// A channel adapter GUID (EUI-64). rxe derives it from the MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// A port GID: 16 bytes, for RoCEv2 an IPv6 address (IPv4 as `::ffff:a.b.c.d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IPv4 address: the IPv4-mapped IPv6 address.
    pub const fn from_ipv4(addr: Ipv4Addr) -> Gid {
        Gid(addr.to_ipv6_mapped().octets())
    }
    /// The GID as an IPv6 address.
    pub const fn to_ipv6(self) -> Ipv6Addr {
        Ipv6Addr::from_bits(u128::from_be_bytes(self.0))
    }
    /// The IPv4 address of an IPv4-mapped GID.
    pub const fn to_ipv4_mapped(self) -> Option<Ipv4Addr> {
        self.to_ipv6().to_ipv4_mapped()
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(addr: Ipv6Addr) -> Gid {
        Gid(addr.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(gid: Gid) -> Ipv6Addr {
        gid.to_ipv6()
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_ipv6(), f)
    }
}

/// Which message a REJ rejects or an MRA acknowledges (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MessageRef(pub u8);

impl MessageRef {
    /// The REQ.
    pub const REQ: MessageRef = MessageRef(0);
    /// The REP.
    pub const REP: MessageRef = MessageRef(1);
    /// Another message: a LAP for an MRA; for a REJ, none (a REJ sent
    /// for no particular message, e.g. after a timeout).
    pub const OTHER: MessageRef = MessageRef(2);
}

/// Reads `width` bits of `byte` starting `offset` bits below its most
/// significant bit (IBA bit order).
pub(crate) const fn get_bits(byte: u8, offset: u32, width: u32) -> u8 {
    (byte >> (8 - offset - width)) & mask(width)
}

/// Writes the low `width` bits of `value` at `offset` bits below the
/// most significant bit of `byte`; higher bits of `value` are dropped.
pub(crate) fn set_bits(byte: &mut u8, offset: u32, width: u32, value: u8) {
    let shift = 8 - offset - width;
    let m = mask(width) << shift;
    *byte = (*byte & !m) | ((value << shift) & m);
}

const fn mask(width: u32) -> u8 {
    ((1u16 << width) - 1) as u8
}

/// Reads a 16-byte GID.
pub(crate) fn gid(bytes: &[u8]) -> Gid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&bytes[..16]);
    Gid(g)
}

/// Copies a fixed-size array out of a slice of exactly that length.
pub(crate) fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&bytes[..N]);
    a
}

fixed_header_view!(24);

impl<T: AsRef<[u8]>> Packet<T> {
    fn header(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The base version (1).
    pub fn base_version(&self) -> u8 {
        self.header()[field::BASE_VERSION]
    }
    /// The management class (0x07 for the CM).
    pub fn mgmt_class(&self) -> u8 {
        self.header()[field::MGMT_CLASS]
    }
    /// The class version (2 for the CM).
    pub fn class_version(&self) -> u8 {
        self.header()[field::CLASS_VERSION]
    }
    /// The method, response bit included.
    pub fn method(&self) -> Method {
        Method(self.header()[field::METHOD])
    }
    /// The status (0 in every CM message).
    pub fn status(&self) -> u16 {
        bytes::u16(&self.header()[field::STATUS])
    }
    /// The class-specific word.
    pub fn class_specific(&self) -> u16 {
        bytes::u16(&self.header()[field::CLASS_SPECIFIC])
    }
    /// The transaction ID.
    pub fn transaction_id(&self) -> TransactionId {
        TransactionId(bytes::u64(&self.header()[field::TID]))
    }
    /// The attribute ID: which CM message follows.
    pub fn attribute_id(&self) -> AttributeId {
        AttributeId(bytes::u16(&self.header()[field::ATTR_ID]))
    }
    /// The reserved word after the attribute ID.
    pub fn resv(&self) -> u16 {
        bytes::u16(&self.header()[field::RESV])
    }
    /// The attribute modifier (Linux's ECE puts a vendor option here).
    pub fn attribute_modifier(&self) -> u32 {
        bytes::u32(&self.header()[field::ATTR_MOD])
    }
    /// The class data after the header, up to the end of a 256-byte MAD
    /// (shorter if the buffer is).
    pub fn data(&self) -> &[u8] {
        let buf = self.buffer.as_ref();
        buf.get(HEADER_LEN..buf.len().min(MAD_LEN)).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn header_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the base version.
    pub fn set_base_version(&mut self, value: u8) {
        self.header_mut()[field::BASE_VERSION] = value;
    }
    /// Sets the management class.
    pub fn set_mgmt_class(&mut self, value: u8) {
        self.header_mut()[field::MGMT_CLASS] = value;
    }
    /// Sets the class version.
    pub fn set_class_version(&mut self, value: u8) {
        self.header_mut()[field::CLASS_VERSION] = value;
    }
    /// Sets the method (response bit included).
    pub fn set_method(&mut self, value: Method) {
        self.header_mut()[field::METHOD] = value.0;
    }
    /// Sets the status.
    pub fn set_status(&mut self, value: u16) {
        self.header_mut()[field::STATUS].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the class-specific word.
    pub fn set_class_specific(&mut self, value: u16) {
        self.header_mut()[field::CLASS_SPECIFIC].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the transaction ID.
    pub fn set_transaction_id(&mut self, value: TransactionId) {
        self.header_mut()[field::TID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the attribute ID.
    pub fn set_attribute_id(&mut self, value: AttributeId) {
        self.header_mut()[field::ATTR_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the reserved word.
    pub fn set_resv(&mut self, value: u16) {
        self.header_mut()[field::RESV].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the attribute modifier.
    pub fn set_attribute_modifier(&mut self, value: u32) {
        self.header_mut()[field::ATTR_MOD].copy_from_slice(&value.to_be_bytes());
    }
    /// The class data after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let buf = self.buffer.as_mut();
        let end = buf.len().min(MAD_LEN);
        buf.get_mut(HEADER_LEN..end).unwrap_or(&mut [])
    }
}

/// The fields of a common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class (0x07 for the CM).
    pub mgmt_class: u8,
    /// Class version (2 for the CM).
    pub class_version: u8,
    /// Method, response bit included.
    pub method: Method,
    /// Status.
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID.
    pub transaction_id: TransactionId,
    /// Attribute ID.
    pub attribute_id: AttributeId,
    /// Reserved word (kept for bit-exact round trips).
    pub resv: u16,
    /// Attribute modifier.
    pub attribute_modifier: u32,
}

impl Repr {
    /// The header of a CM message as Linux sends it: base version 1,
    /// class 0x07 version 2, method Send, status 0, attribute modifier 0.
    pub const fn cm(transaction_id: TransactionId, attribute_id: AttributeId) -> Repr {
        Repr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            resv: 0,
            attribute_modifier: 0,
        }
    }
    /// Reads a common MAD header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            base_version: packet.base_version(),
            mgmt_class: packet.mgmt_class(),
            class_version: packet.class_version(),
            method: packet.method(),
            status: packet.status(),
            class_specific: packet.class_specific(),
            transaction_id: packet.transaction_id(),
            attribute_id: packet.attribute_id(),
            resv: packet.resv(),
            attribute_modifier: packet.attribute_modifier(),
        })
    }
    /// Whether this is a CM MAD this crate reads: base version 1, class
    /// 0x07, class version 2.
    pub const fn is_cm(&self) -> bool {
        self.base_version == BASE_VERSION
            && self.mgmt_class == MGMT_CLASS_CM
            && self.class_version == CM_CLASS_VERSION
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_base_version(self.base_version);
        packet.set_mgmt_class(self.mgmt_class);
        packet.set_class_version(self.class_version);
        packet.set_method(self.method);
        packet.set_status(self.status);
        packet.set_class_specific(self.class_specific);
        packet.set_transaction_id(self.transaction_id);
        packet.set_attribute_id(self.attribute_id);
        packet.set_resv(self.resv);
        packet.set_attribute_modifier(self.attribute_modifier);
    }
}

/// Any CM message this crate has a format for, read from (or written to)
/// the class data of a MAD according to its attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(req::Repr),
    /// MsgRcptAck.
    Mra(mra::Repr),
    /// ConnectReject.
    Rej(rej::Repr),
    /// ConnectReply.
    Rep(rep::Repr),
    /// ReadyToUse.
    Rtu(rtu::Repr),
    /// DisconnectRequest.
    Dreq(dreq::Repr),
    /// DisconnectReply.
    Drep(drep::Repr),
    /// ServiceIDResReq.
    SidrReq(sidr::ReqRepr),
    /// ServiceIDResReqResp.
    SidrRep(sidr::RepRepr),
}

impl CmMessage {
    /// Reads the message a MAD carries. Fails with [`Error::Truncated`]
    /// if the MAD is shorter than 256 bytes, and [`Error::Malformed`] if
    /// it is not a CM class 2 MAD or its attribute has no format here.
    pub fn parse<T: AsRef<[u8]>>(mad: &Packet<T>) -> Result<CmMessage> {
        let header = Repr::parse(mad)?;
        if !header.is_cm() {
            return Err(Error::Malformed("not a CM class version 2 MAD"));
        }
        let data = mad.data();
        Ok(match header.attribute_id {
            AttributeId::REQ => CmMessage::Req(req::Repr::parse(&req::Packet::new_checked(data)?)?),
            AttributeId::MRA => CmMessage::Mra(mra::Repr::parse(&mra::Packet::new_checked(data)?)?),
            AttributeId::REJ => CmMessage::Rej(rej::Repr::parse(&rej::Packet::new_checked(data)?)?),
            AttributeId::REP => CmMessage::Rep(rep::Repr::parse(&rep::Packet::new_checked(data)?)?),
            AttributeId::RTU => CmMessage::Rtu(rtu::Repr::parse(&rtu::Packet::new_checked(data)?)?),
            AttributeId::DREQ => {
                CmMessage::Dreq(dreq::Repr::parse(&dreq::Packet::new_checked(data)?)?)
            }
            AttributeId::DREP => {
                CmMessage::Drep(drep::Repr::parse(&drep::Packet::new_checked(data)?)?)
            }
            AttributeId::SIDR_REQ => {
                CmMessage::SidrReq(sidr::ReqRepr::parse(&sidr::ReqPacket::new_checked(data)?)?)
            }
            AttributeId::SIDR_REP => {
                CmMessage::SidrRep(sidr::RepRepr::parse(&sidr::RepPacket::new_checked(data)?)?)
            }
            _ => return Err(Error::Malformed("CM attribute without a format")),
        })
    }

    /// The attribute ID that names this message in the MAD header.
    pub const fn attribute_id(&self) -> AttributeId {
        match self {
            CmMessage::Req(_) => AttributeId::REQ,
            CmMessage::Mra(_) => AttributeId::MRA,
            CmMessage::Rej(_) => AttributeId::REJ,
            CmMessage::Rep(_) => AttributeId::REP,
            CmMessage::Rtu(_) => AttributeId::RTU,
            CmMessage::Dreq(_) => AttributeId::DREQ,
            CmMessage::Drep(_) => AttributeId::DREP,
            CmMessage::SidrReq(_) => AttributeId::SIDR_REQ,
            CmMessage::SidrRep(_) => AttributeId::SIDR_REP,
        }
    }

    /// Length of the emitted message: the class data of a MAD.
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the message into the class data of a MAD (the header is
    /// the caller's: see [`Repr::cm`] and [`CmMessage::attribute_id`]).
    /// Fails with [`Error::Truncated`] if the MAD is shorter than 256 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Packet<T>) -> Result<()> {
        mad.check_len()?;
        let data = mad.data_mut();
        if data.len() < DATA_LEN {
            return Err(Error::Truncated);
        }
        match self {
            CmMessage::Req(r) => r.emit(&mut req::Packet::new_unchecked(data)),
            CmMessage::Mra(r) => r.emit(&mut mra::Packet::new_unchecked(data)),
            CmMessage::Rej(r) => r.emit(&mut rej::Packet::new_unchecked(data)),
            CmMessage::Rep(r) => r.emit(&mut rep::Packet::new_unchecked(data)),
            CmMessage::Rtu(r) => r.emit(&mut rtu::Packet::new_unchecked(data)),
            CmMessage::Dreq(r) => r.emit(&mut dreq::Packet::new_unchecked(data)),
            CmMessage::Drep(r) => r.emit(&mut drep::Packet::new_unchecked(data)),
            CmMessage::SidrReq(r) => r.emit(&mut sidr::ReqPacket::new_unchecked(data)),
            CmMessage::SidrRep(r) => r.emit(&mut sidr::RepPacket::new_unchecked(data)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The MAD header of frame 20 of `rping.pcap` (a ConnectRequest).
    const BYTES: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xca, 0x32, 0x44,
        0x8f, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn header_fields_emit_and_truncation() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr, Repr::cm(TransactionId(0x0000_0002_ca32_448f), AttributeId::REQ));
        assert!(repr.is_cm());
        assert!(!repr.method.is_response());
        assert!(p.data().is_empty());
        let mut buf = [0xa5u8; 24];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(Packet::new_checked(&BYTES[..23]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn bits_in_iba_order() {
        // 0xa7: local CM response timeout 0x14 (5 bits), retry count 7 (3 bits).
        assert_eq!(get_bits(0xa7, 0, 5), 0x14);
        assert_eq!(get_bits(0xa7, 5, 3), 7);
        let mut b = 0u8;
        set_bits(&mut b, 0, 5, 0x14);
        set_bits(&mut b, 5, 3, 0xff);
        assert_eq!(b, 0xa7);
        set_bits(&mut b, 5, 3, 0);
        assert_eq!(b, 0xa0);
    }

    #[test]
    fn gid_of_ipv4() {
        let gid = Gid::from_ipv4(Ipv4Addr::new(169, 254, 0, 2));
        assert_eq!(gid.to_string(), "::ffff:169.254.0.2");
        assert_eq!(gid.to_ipv4_mapped(), Some(Ipv4Addr::new(169, 254, 0, 2)));
        assert_eq!(Gid::default().to_ipv4_mapped(), None);
    }
}
