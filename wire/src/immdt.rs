//! Immediate Data Extended Transport Header (ImmDt): 4 bytes, in the last
//! (or only) packet of a SEND or RDMA WRITE "with immediate".
//!
//! ```text
//! +---------------------+
//! | immediate data (4)  |
//! +---------------------+
//! ```
//!
//! Opaque to the transport: it is handed to the receiver's completion as
//! is (libibverbs' `imm_data`, in network byte order).

use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const IMM: Range<usize> = 0..4;
}

fixed_header_view!(4);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate value, read big-endian.
    pub fn imm(&self) -> u32 {
        bytes::u32(&self.buffer.as_ref()[field::IMM])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the immediate value, written big-endian.
    pub fn set_imm(&mut self, imm: u32) {
        self.buffer.as_mut()[field::IMM].copy_from_slice(&imm.to_be_bytes());
    }
}

/// The fields of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Immediate data.
    pub imm: u32,
}

impl Repr {
    /// Reads an ImmDt header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { imm: packet.imm() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_imm(self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_emit_and_round_trip() {
        let bytes = [0xca, 0xfe, 0xf0, 0x0d];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.imm(), 0xcafe_f00d);
        let mut buf = [0xa5u8; 4];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
        assert_eq!(Packet::new_checked(&bytes[..3]).unwrap_err(), crate::Error::Truncated);
    }
}
