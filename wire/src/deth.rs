//! Datagram Extended Transport Header (DETH): 8 bytes, in every UD packet
//! (and RD requests).
//!
//! ```text
//! +---------------+---------+------------------+
//! |  Q_Key (4)    | resv8   |  source QP (3)   |
//! +---------------+---------+------------------+
//! ```
//!
//! The receiver accepts the datagram only if the Q_Key matches its QP's
//! Q_Key; the source QP tells it where replies go.

use crate::{bytes, Qkey, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const QKEY: Range<usize> = 0..4;
    pub const RESV8: usize = 4;
    pub const SRC_QPN: Range<usize> = 5..8;
}

/// The Q_Key of QP1 (general services): what CM MADs carry.
pub const GSI_QKEY: Qkey = Qkey(0x8001_0000);

fixed_header_view!(8);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The queue key.
    pub fn qkey(&self) -> Qkey {
        Qkey(bytes::u32(&self.buffer.as_ref()[field::QKEY]))
    }
    /// The reserved byte.
    pub fn resv8(&self) -> u8 {
        self.buffer.as_ref()[field::RESV8]
    }
    /// The sender's QP.
    pub fn src_qpn(&self) -> Qpn {
        Qpn::new(bytes::u24(&self.buffer.as_ref()[field::SRC_QPN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, qkey: Qkey) {
        self.buffer.as_mut()[field::QKEY].copy_from_slice(&qkey.0.to_be_bytes());
    }
    /// Sets the reserved byte.
    pub fn set_resv8(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESV8] = value;
    }
    /// Sets the source QP.
    pub fn set_src_qpn(&mut self, qpn: Qpn) {
        bytes::set_u24(&mut self.buffer.as_mut()[field::SRC_QPN], qpn.value());
    }
}

/// The fields of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Queue key.
    pub qkey: Qkey,
    /// Reserved byte (kept for bit-exact round trips).
    pub resv8: u8,
    /// Source QP.
    pub src_qpn: Qpn,
}

impl Repr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { qkey: packet.qkey(), resv8: packet.resv8(), src_qpn: packet.src_qpn() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_qkey(self.qkey);
        packet.set_resv8(self.resv8);
        packet.set_src_qpn(self.src_qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A CM MAD's DETH: Q_Key 0x80010000 from QP1.
    const BYTES: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.qkey(), GSI_QKEY);
        assert!(p.qkey().is_privileged());
        assert_eq!(p.src_qpn(), Qpn::GSI);
        let mut buf = [0xa5u8; 8];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(Packet::new_checked(&BYTES[..7]).unwrap_err(), crate::Error::Truncated);
    }
}
