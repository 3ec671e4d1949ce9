//! Reliable Datagram Extended Transport Header (RDETH): 4 bytes, in RD
//! packets. RoCE implementations (rxe included) know the RD opcodes but do
//! not implement RD; the header is here so that such packets decode.
//!
//! ```text
//! +---------+---------------------+
//! | resv8   | EE context (3)      |
//! +---------+---------------------+
//! ```

use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const RESV8: usize = 0;
    pub const EECN: Range<usize> = 1..4;
}

fixed_header_view!(4);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The reserved byte.
    pub fn resv8(&self) -> u8 {
        self.buffer.as_ref()[field::RESV8]
    }
    /// The end-to-end context number.
    pub fn eecn(&self) -> u32 {
        bytes::u24(&self.buffer.as_ref()[field::EECN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the reserved byte.
    pub fn set_resv8(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESV8] = value;
    }
    /// Sets the EE context (low 24 bits).
    pub fn set_eecn(&mut self, eecn: u32) {
        bytes::set_u24(&mut self.buffer.as_mut()[field::EECN], eecn & 0x00ff_ffff);
    }
}

/// The fields of an RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Reserved byte.
    pub resv8: u8,
    /// End-to-end context (24 bits).
    pub eecn: u32,
}

impl Repr {
    /// Reads an RDETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { resv8: packet.resv8(), eecn: packet.eecn() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_resv8(self.resv8);
        packet.set_eecn(self.eecn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_emit_and_round_trip() {
        let bytes = [0x00, 0x12, 0x34, 0x56];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.eecn(), 0x12_3456);
        let mut buf = [0xa5u8; 4];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }
}
