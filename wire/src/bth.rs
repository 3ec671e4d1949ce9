//! Base Transport Header (BTH): 12 bytes, first in every RoCEv2 packet.
//!
//! ```text
//!  byte 0        1                 2   3        4         5  6  7
//! +--------+-----------------+--------------+---------+-----------+
//! | opcode |SE|M|Pad|  TVer  |    P_Key     |F|B|resv6|  DestQP   |
//! +--------+-----------------+--------------+---------+-----------+
//!  byte 8        9  10  11
//! +--------------+----------+
//! |A|   resv7    |   PSN    |
//! +--------------+----------+
//! ```
//!
//! Byte 4 (FECN, BECN and six reserved bits in RoCEv2) may change in
//! flight, so the ICRC covers it as all ones.

use crate::{bytes, Opcode, Psn, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5-4), TVer (bits 3-0).
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    /// FECN (bit 7), BECN (bit 6), reserved (bits 5-0). Variant: ICRC-masked.
    pub const VARIANT: usize = 4;
    pub const DEST_QPN: Range<usize> = 5..8;
    /// AckReq (bit 7), reserved (bits 6-0).
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

/// Offset of the ICRC-masked byte (FECN/BECN/reserved) within the BTH.
pub const VARIANT_BYTE: usize = field::VARIANT;

/// The default partition key: full membership of the default partition.
pub const DEFAULT_PKEY: u16 = 0xffff;

fixed_header_view!(12);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The opcode: transport (top 3 bits) and operation (low 5 bits).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.data()[field::OPCODE])
    }
    /// Solicited event: the responder should raise a completion event.
    pub fn solicited(&self) -> bool {
        self.data()[field::FLAGS] & 0x80 != 0
    }
    /// MigReq: the path migration state (always 0 from rxe).
    pub fn mig_req(&self) -> bool {
        self.data()[field::FLAGS] & 0x40 != 0
    }
    /// Number of pad bytes (0..=3) after the payload that round it to 4.
    pub fn pad_count(&self) -> u8 {
        (self.data()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.data()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        bytes::u16(&self.data()[field::PKEY])
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.data()[field::VARIANT] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.data()[field::VARIANT] & 0x40 != 0
    }
    /// The six reserved bits of byte 4.
    pub fn resv6(&self) -> u8 {
        self.data()[field::VARIANT] & 0x3f
    }
    /// Destination queue pair number.
    pub fn dest_qpn(&self) -> Qpn {
        Qpn::new(bytes::u24(&self.data()[field::DEST_QPN]))
    }
    /// AckReq: the requester asks for an acknowledgement of this packet.
    pub fn ack_req(&self) -> bool {
        self.data()[field::ACK_REQ] & 0x80 != 0
    }
    /// The seven reserved bits after AckReq.
    pub fn resv7(&self) -> u8 {
        self.data()[field::ACK_REQ] & 0x7f
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(bytes::u24(&self.data()[field::PSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, opcode: Opcode) {
        self.data_mut()[field::OPCODE] = opcode.0;
    }
    /// Sets byte 1 from its four fields.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        debug_assert!(pad_count <= 3 && tver <= 0xf);
        self.data_mut()[field::FLAGS] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count & 0x3) << 4)
            | (tver & 0x0f);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        self.data_mut()[field::PKEY].copy_from_slice(&pkey.to_be_bytes());
    }
    /// Sets byte 4 (FECN, BECN, reserved).
    pub fn set_variant(&mut self, fecn: bool, becn: bool, resv6: u8) {
        self.data_mut()[field::VARIANT] =
            (u8::from(fecn) << 7) | (u8::from(becn) << 6) | (resv6 & 0x3f);
    }
    /// Sets the destination QPN.
    pub fn set_dest_qpn(&mut self, qpn: Qpn) {
        bytes::set_u24(&mut self.data_mut()[field::DEST_QPN], qpn.value());
    }
    /// Sets AckReq and the reserved bits after it.
    pub fn set_ack_req(&mut self, ack_req: bool, resv7: u8) {
        self.data_mut()[field::ACK_REQ] = (u8::from(ack_req) << 7) | (resv7 & 0x7f);
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        bytes::set_u24(&mut self.data_mut()[field::PSN], psn.value());
    }
}

/// The fields of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Path migration request.
    pub mig_req: bool,
    /// Pad bytes after the payload (0..=3).
    pub pad_count: u8,
    /// Transport header version.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward congestion notification.
    pub fecn: bool,
    /// Backward congestion notification.
    pub becn: bool,
    /// Reserved bits of byte 4 (kept for bit-exact round trips).
    pub resv6: u8,
    /// Destination QP.
    pub dest_qpn: Qpn,
    /// Acknowledgement requested.
    pub ack_req: bool,
    /// Reserved bits of byte 8 (kept for bit-exact round trips).
    pub resv7: u8,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Repr {
    /// A BTH as rxe builds it: default P_Key, version 0, no congestion
    /// bits, and the pad that rounds `payload_len` up to 4 bytes.
    pub fn new(opcode: Opcode, dest_qpn: Qpn, psn: Psn, payload_len: usize) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: pad_for(payload_len),
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qpn,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    /// Reads a BTH. Every bit pattern is a BTH; whether the opcode is known
    /// is the packet layer's question.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_count: packet.pad_count(),
            tver: packet.tver(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            resv6: packet.resv6(),
            dest_qpn: packet.dest_qpn(),
            ack_req: packet.ack_req(),
            resv7: packet.resv7(),
            psn: packet.psn(),
        })
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        packet.set_pkey(self.pkey);
        packet.set_variant(self.fecn, self.becn, self.resv6);
        packet.set_dest_qpn(self.dest_qpn);
        packet.set_ack_req(self.ack_req, self.resv7);
        packet.set_psn(self.psn);
    }
}

/// The pad count that rounds a payload of `payload_len` bytes to 4.
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    // An RC SEND_ONLY to QP 0x000011, PSN 0x0a0b0c, AckReq, solicited, pad 2
    // (hand-made following the IBA layout).
    const BYTES: [u8; 12] =
        [0x04, 0xa0, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x0a, 0x0b, 0x0c];

    fn repr() -> Repr {
        Repr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: true,
            mig_req: false,
            pad_count: 2,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qpn: Qpn::new(0x11),
            ack_req: true,
            resv7: 0,
            psn: Psn::new(0x0a0b0c),
        }
    }

    #[test]
    fn fields_read_from_bytes() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::RC_SEND_ONLY);
        assert!(p.solicited());
        assert!(!p.mig_req());
        assert_eq!(p.pad_count(), 2);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.pkey(), 0xffff);
        assert!(!p.fecn() && !p.becn());
        assert_eq!(p.dest_qpn(), Qpn::new(0x11));
        assert!(p.ack_req());
        assert_eq!(p.psn(), Psn::new(0x0a0b0c));
    }

    #[test]
    fn emit_overwrites_every_byte() {
        let mut buf = [0xa5u8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse_emit_round_trip() {
        let r = Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()).unwrap();
        assert_eq!(r, repr());
        let mut buf = [0u8; 12];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(Packet::new_checked(&BYTES[..11]).unwrap_err(), crate::Error::Truncated);
    }

    #[test]
    fn pad_rounds_to_four() {
        assert_eq!(pad_for(0), 0);
        assert_eq!(pad_for(1), 3);
        assert_eq!(pad_for(2), 2);
        assert_eq!(pad_for(3), 1);
        assert_eq!(pad_for(4096), 0);
    }
}
