//! Atomic Acknowledge Extended Transport Header (AtomicAckETH): 8 bytes,
//! after the AETH of an ATOMIC ACKNOWLEDGE.
//!
//! ```text
//! +-----------------------------+
//! | original remote data (8)    |
//! +-----------------------------+
//! ```
//!
//! The value the target word held before the atomic operation.

use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const ORIG: Range<usize> = 0..8;
}

fixed_header_view!(8);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The original value of the target word.
    pub fn orig(&self) -> u64 {
        bytes::u64(&self.buffer.as_ref()[field::ORIG])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the original value.
    pub fn set_orig(&mut self, value: u64) {
        self.buffer.as_mut()[field::ORIG].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Original remote data.
    pub orig: u64,
}

impl Repr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { orig: packet.orig() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];

    #[test]
    fn fixture_emit_and_round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.orig(), 0x0123_4567_89ab_cdef);
        let mut buf = [0xa5u8; 8];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(Packet::new_checked(&BYTES[..7]).unwrap_err(), crate::Error::Truncated);
    }
}
