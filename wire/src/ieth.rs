//! Invalidate Extended Transport Header (IETH): 4 bytes, in the last (or
//! only) packet of a SEND with invalidate.
//!
//! ```text
//! +---------------------+
//! |      R_Key (4)      |
//! +---------------------+
//! ```
//!
//! The responder invalidates this R_Key (a memory region or type-2 window
//! it owns) when the SEND completes.

use crate::{bytes, Result, Rkey};

mod field {
    use core::ops::Range;
    pub const RKEY: Range<usize> = 0..4;
}

fixed_header_view!(4);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> Rkey {
        Rkey(bytes::u32(&self.buffer.as_ref()[field::RKEY]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, rkey: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&rkey.0.to_be_bytes());
    }
}

/// The fields of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// R_Key to invalidate.
    pub rkey: Rkey,
}

impl Repr {
    /// Reads an IETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { rkey: packet.rkey() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_rkey(self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_emit_and_round_trip() {
        let bytes = [0x00, 0x00, 0x05, 0x2b];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.rkey(), Rkey(0x052b));
        let mut buf = [0xa5u8; 4];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }
}
