//! A whole InfiniBand transport packet as RoCEv2 carries it in a UDP
//! datagram: BTH, the extension headers the opcode calls for, the payload,
//! 0..=3 pad bytes, and the 4-byte ICRC.
//!
//! ```text
//! +-----+-----------------+------------------+-----+------+
//! | BTH | ext. headers    | payload          | pad | ICRC |
//! +-----+-----------------+------------------+-----+------+
//!  12 B   per opcode table  0..path MTU bytes  BTH   4 B
//!                                             PadCnt
//! ```
//!
//! [`Packet::new_checked`] accepts only a buffer that is consistent with
//! the opcode table: a known opcode, room for its headers and the ICRC, a
//! pad count no larger than what follows the headers, and no payload on an
//! opcode that carries none. It does not check the ICRC, which needs the IP
//! and UDP headers: see [`crate::frame`].

use crate::icrc::ICRC_LEN;
use crate::opcode::{HeaderKind, Mask, OpcodeInfo};
use crate::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, rdeth, reth, Error, Result,
};

/// The smallest transport packet: a BTH and an ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

/// A view of a transport packet (the UDP payload of a RoCEv2 datagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks: accessors may panic on a buffer that
    /// [`Packet::check_len`] would reject.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking it against the opcode table.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer is a well-formed transport packet (everything
    /// but the ICRC value).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < MIN_LEN {
            return Err(Error::Truncated);
        }
        let bth = self.bth();
        let info = bth.opcode().info().ok_or(Error::UnknownOpcode(bth.opcode().0))?;
        if len < info.length + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let after_headers = len - info.length - ICRC_LEN;
        if usize::from(bth.pad_count()) > after_headers {
            return Err(Error::Malformed("pad count larger than the payload"));
        }
        if !info.is(Mask::PAYLOAD) && after_headers != 0 {
            return Err(Error::Malformed("payload on an opcode that carries none"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BTH.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// The opcode's table entry. Panics on an unknown opcode, which
    /// [`Packet::check_len`] rejects.
    pub fn info(&self) -> &'static OpcodeInfo {
        let opcode = self.bth().opcode();
        opcode.info().expect("checked packet has a known opcode")
    }

    /// The bytes of extension header `kind`, if the opcode has it.
    pub fn header(&self, kind: HeaderKind) -> Option<&[u8]> {
        let offset = self.info().offset(kind)?;
        self.buffer.as_ref().get(offset..offset + kind.header_len())
    }

    /// The RETH, if present.
    pub fn reth(&self) -> Option<reth::Packet<&[u8]>> {
        self.header(HeaderKind::Reth).map(reth::Packet::new_unchecked)
    }
    /// The AETH, if present.
    pub fn aeth(&self) -> Option<aeth::Packet<&[u8]>> {
        self.header(HeaderKind::Aeth).map(aeth::Packet::new_unchecked)
    }
    /// The AtomicETH, if present.
    pub fn atomic_eth(&self) -> Option<atomic_eth::Packet<&[u8]>> {
        self.header(HeaderKind::AtomicEth).map(atomic_eth::Packet::new_unchecked)
    }
    /// The AtomicAckETH, if present.
    pub fn atomic_ack_eth(&self) -> Option<atomic_ack_eth::Packet<&[u8]>> {
        self.header(HeaderKind::AtomicAckEth).map(atomic_ack_eth::Packet::new_unchecked)
    }
    /// The DETH, if present.
    pub fn deth(&self) -> Option<deth::Packet<&[u8]>> {
        self.header(HeaderKind::Deth).map(deth::Packet::new_unchecked)
    }
    /// The RDETH, if present.
    pub fn rdeth(&self) -> Option<rdeth::Packet<&[u8]>> {
        self.header(HeaderKind::Rdeth).map(rdeth::Packet::new_unchecked)
    }
    /// The ImmDt header, if present.
    pub fn immdt(&self) -> Option<immdt::Packet<&[u8]>> {
        self.header(HeaderKind::ImmDt).map(immdt::Packet::new_unchecked)
    }
    /// The IETH, if present.
    pub fn ieth(&self) -> Option<ieth::Packet<&[u8]>> {
        self.header(HeaderKind::Ieth).map(ieth::Packet::new_unchecked)
    }
    /// The FETH, if present.
    pub fn feth(&self) -> Option<feth::Packet<&[u8]>> {
        self.header(HeaderKind::Feth).map(feth::Packet::new_unchecked)
    }

    fn payload_range(&self) -> core::ops::Range<usize> {
        let data = self.buffer.as_ref();
        let end = data.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        self.info().length..end
    }

    /// The payload, without pad and ICRC.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[self.payload_range().end..data.len() - ICRC_LEN]
    }

    /// Everything the ICRC covers after the IP and UDP headers: BTH up to
    /// the ICRC.
    pub fn covered(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[..data.len() - ICRC_LEN]
    }

    /// The stored ICRC.
    pub fn icrc(&self) -> u32 {
        let data = self.buffer.as_ref();
        crate::icrc::read(&data[data.len() - ICRC_LEN..]).expect("checked length")
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Overwrites the stored ICRC.
    pub fn set_icrc(&mut self, icrc: u32) {
        let data = self.buffer.as_mut();
        let at = data.len() - ICRC_LEN;
        crate::icrc::write(&mut data[at..], icrc);
    }
}

/// The extension headers of a packet; which ones are present must match
/// the opcode table ([`Repr::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// RDETH (RD only).
    pub rdeth: Option<rdeth::Repr>,
    /// DETH (UD, RD requests).
    pub deth: Option<deth::Repr>,
    /// FETH (FLUSH).
    pub feth: Option<feth::Repr>,
    /// RETH (WRITE first/only, READ request, ATOMIC WRITE, FLUSH).
    pub reth: Option<reth::Repr>,
    /// AtomicETH (COMPARE_SWAP, FETCH_ADD).
    pub atomic_eth: Option<atomic_eth::Repr>,
    /// AETH (ACK/NAK, READ response first/last/only, ATOMIC ACK).
    pub aeth: Option<aeth::Repr>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    /// Immediate data.
    pub immdt: Option<immdt::Repr>,
    /// IETH (SEND with invalidate).
    pub ieth: Option<ieth::Repr>,
}

impl ExtHeaders {
    /// The header-presence mask bits of the headers that are set.
    pub fn mask(&self) -> Mask {
        let present = [
            (self.rdeth.is_some(), Mask::RDETH),
            (self.deth.is_some(), Mask::DETH),
            (self.feth.is_some(), Mask::FETH),
            (self.reth.is_some(), Mask::RETH),
            (self.atomic_eth.is_some(), Mask::ATOMIC_ETH),
            (self.aeth.is_some(), Mask::AETH),
            (self.atomic_ack_eth.is_some(), Mask::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), Mask::IMMDT),
            (self.ieth.is_some(), Mask::IETH),
        ];
        present.iter().filter(|(is, _)| *is).fold(Mask::EMPTY, |acc, (_, bit)| acc | *bit)
    }
}

/// A transport packet's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The BTH (its `pad_count` decides how many zero pad bytes follow the
    /// payload).
    pub bth: bth::Repr,
    /// The extension headers.
    pub ext: ExtHeaders,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        let bth = bth::Repr::parse(&packet.bth())?;
        let ext = ExtHeaders {
            rdeth: packet.rdeth().map(|p| rdeth::Repr::parse(&p)).transpose()?,
            deth: packet.deth().map(|p| deth::Repr::parse(&p)).transpose()?,
            feth: packet.feth().map(|p| feth::Repr::parse(&p)).transpose()?,
            reth: packet.reth().map(|p| reth::Repr::parse(&p)).transpose()?,
            atomic_eth: packet.atomic_eth().map(|p| atomic_eth::Repr::parse(&p)).transpose()?,
            aeth: packet.aeth().map(|p| aeth::Repr::parse(&p)).transpose()?,
            atomic_ack_eth: packet
                .atomic_ack_eth()
                .map(|p| atomic_ack_eth::Repr::parse(&p))
                .transpose()?,
            immdt: packet.immdt().map(|p| immdt::Repr::parse(&p)).transpose()?,
            ieth: packet.ieth().map(|p| ieth::Repr::parse(&p)).transpose()?,
        };
        let data: &'a [u8] = packet.buffer.as_ref();
        let end = data.len() - ICRC_LEN - usize::from(bth.pad_count);
        let payload = &data[packet.info().length..end];
        Ok(Repr { bth, ext, payload })
    }

    /// Checks that the headers match the opcode table and the payload is
    /// allowed: what [`Repr::emit`] requires.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        self.check_with_payload_len(self.payload.len())
    }

    /// [`Repr::check`] for a payload of `payload_len` bytes that lies
    /// elsewhere (already in the frame's buffer).
    pub(crate) fn check_with_payload_len(&self, payload_len: usize) -> Result<&'static OpcodeInfo> {
        let info = self.bth.opcode.info().ok_or(Error::UnknownOpcode(self.bth.opcode.0))?;
        if self.ext.mask() != info.mask.intersection(Mask::HEADERS) {
            return Err(Error::Malformed("extension headers do not match the opcode"));
        }
        if !info.is(Mask::PAYLOAD) && (payload_len != 0 || self.bth.pad_count != 0) {
            return Err(Error::Malformed("payload on an opcode that carries none"));
        }
        if self.bth.pad_count > 3 {
            return Err(Error::Malformed("pad count above 3"));
        }
        Ok(info)
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        self.bth.opcode.info().map_or(bth::HEADER_LEN, |info| info.length)
    }

    /// Length of the whole emitted packet, ICRC included.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + usize::from(self.bth.pad_count) + ICRC_LEN
    }

    /// Writes the packet into a buffer of exactly [`Repr::buffer_len`]
    /// bytes, with zero pad bytes and a zero ICRC (the framing layer
    /// computes the ICRC, which covers the IP and UDP headers).
    ///
    /// Panics if [`Repr::check`] fails or the buffer has the wrong length:
    /// both are programming errors.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let info = self.check().expect("emit of an inconsistent roce::Repr");
        self.emit_checked(info, packet.buffer.as_mut());
    }

    /// [`Repr::emit`] for a repr whose [`Repr::check`] gave `info`, into
    /// `data` of exactly [`Repr::buffer_len`] bytes (panics otherwise).
    pub(crate) fn emit_checked(&self, info: &OpcodeInfo, data: &mut [u8]) {
        let payload_end = info.length + self.payload.len();
        if let Some(payload) = data.get_mut(info.length..payload_end) {
            crate::copy::copy_short(payload, self.payload);
        }
        self.emit_around_payload(info, data, self.payload.len());
    }

    /// Writes everything but the payload into `data`, of exactly
    /// [`Repr::buffer_len`] bytes for a `payload_len`-byte payload: the
    /// headers before it, zero pad bytes and a zero ICRC after it. The
    /// payload's bytes (`data[info.length..][..payload_len]`) are left as
    /// they are. For a repr whose [`Repr::check_with_payload_len`] gave
    /// `info` (panics otherwise, or on a buffer of the wrong length).
    pub(crate) fn emit_around_payload(
        &self,
        info: &OpcodeInfo,
        data: &mut [u8],
        payload_len: usize,
    ) {
        let len = info.length + payload_len + usize::from(self.bth.pad_count) + ICRC_LEN;
        assert_eq!(data.len(), len, "roce::Repr::emit buffer length");
        self.bth.emit(&mut bth::Packet::new_unchecked(&mut data[..bth::HEADER_LEN]));
        let at = |kind: HeaderKind| {
            let offset = info.offset(kind).expect("header present per check");
            offset..offset + kind.header_len()
        };
        let e = &self.ext;
        // `check` matched the headers present to the opcode's: none to
        // look for when it has none (a SEND's middle or only packet).
        if !info.mask.intersects(Mask::HEADERS) {
            return crate::copy::zero_short(&mut data[info.length + payload_len..]);
        }
        if let Some(r) = e.rdeth {
            r.emit(&mut rdeth::Packet::new_unchecked(&mut data[at(HeaderKind::Rdeth)]));
        }
        if let Some(r) = e.deth {
            r.emit(&mut deth::Packet::new_unchecked(&mut data[at(HeaderKind::Deth)]));
        }
        if let Some(r) = e.feth {
            r.emit(&mut feth::Packet::new_unchecked(&mut data[at(HeaderKind::Feth)]));
        }
        if let Some(r) = e.reth {
            r.emit(&mut reth::Packet::new_unchecked(&mut data[at(HeaderKind::Reth)]));
        }
        if let Some(r) = e.atomic_eth {
            r.emit(&mut atomic_eth::Packet::new_unchecked(&mut data[at(HeaderKind::AtomicEth)]));
        }
        if let Some(r) = e.aeth {
            r.emit(&mut aeth::Packet::new_unchecked(&mut data[at(HeaderKind::Aeth)]));
        }
        if let Some(r) = e.atomic_ack_eth {
            let range = at(HeaderKind::AtomicAckEth);
            r.emit(&mut atomic_ack_eth::Packet::new_unchecked(&mut data[range]));
        }
        if let Some(r) = e.immdt {
            r.emit(&mut immdt::Packet::new_unchecked(&mut data[at(HeaderKind::ImmDt)]));
        }
        if let Some(r) = e.ieth {
            r.emit(&mut ieth::Packet::new_unchecked(&mut data[at(HeaderKind::Ieth)]));
        }
        crate::copy::zero_short(&mut data[info.length + payload_len..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Opcode, Psn, Qpn, Rkey};

    fn write_first() -> (Repr<'static>, Vec<u8>) {
        let mut bth = bth::Repr::new(Opcode::RC_RDMA_WRITE_FIRST, Qpn::new(0x12), Psn::new(7), 5);
        bth.ack_req = false;
        let repr = Repr {
            bth,
            ext: ExtHeaders {
                reth: Some(reth::Repr { va: 0x1000, rkey: Rkey(0x0203), dma_len: 4096 }),
                ..ExtHeaders::default()
            },
            payload: b"hello",
        };
        let mut bytes = vec![0x06, 0x30, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0, 0, 7];
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x02, 0x03, 0, 0, 0x10, 0]);
        bytes.extend_from_slice(b"hello");
        bytes.extend_from_slice(&[0, 0, 0]); // pad 3
        bytes.extend_from_slice(&[0, 0, 0, 0]); // ICRC placeholder
        (repr, bytes)
    }

    #[test]
    fn emit_over_a5_matches_fixture() {
        let (repr, bytes) = write_first();
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }

    #[test]
    fn parse_reads_headers_and_payload() {
        let (repr, bytes) = write_first();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), b"hello");
        assert_eq!(packet.pad(), &[0, 0, 0]);
        assert_eq!(packet.reth().unwrap().dma_len(), 4096);
        assert!(packet.aeth().is_none());
        assert_eq!(Repr::parse(&packet).unwrap(), repr);
    }

    #[test]
    fn rejects_inconsistent_buffers() {
        let (_, bytes) = write_first();
        // Cut into the RETH.
        assert_eq!(Packet::new_checked(&bytes[..20]).unwrap_err(), Error::Truncated);
        // Unknown opcode 0x15.
        let mut unknown = bytes.clone();
        unknown[0] = 0x15;
        assert_eq!(Packet::new_checked(&unknown[..]).unwrap_err(), Error::UnknownOpcode(0x15));
        // A pad count larger than what follows the headers.
        let mut ack = vec![0x11, 0x30, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0x1f, 0, 0, 1];
        ack.extend_from_slice(&[0; 4]);
        assert!(matches!(Packet::new_checked(&ack[..]), Err(Error::Malformed(_))));
        // Payload bytes on an ACK.
        ack[1] = 0;
        ack.extend_from_slice(&[0; 4]);
        assert!(matches!(Packet::new_checked(&ack[..]), Err(Error::Malformed(_))));
    }

    #[test]
    fn check_rejects_wrong_headers() {
        let (mut repr, _) = write_first();
        repr.ext.reth = None;
        assert!(repr.check().is_err());
        let (mut repr, _) = write_first();
        repr.ext.aeth = Some(aeth::Repr { syndrome: aeth::Syndrome::from_u8(0x1f), msn: 0 });
        assert!(repr.check().is_err());
    }
}
