//! RDMA Extended Transport Header (RETH): 16 bytes.
//!
//! ```text
//! +-------------------------------+---------------+---------------+
//! |     virtual address (8)       |   R_Key (4)   | DMA length (4)|
//! +-------------------------------+---------------+---------------+
//! ```
//!
//! Carried by the first (or only) packet of an RDMA WRITE, by every READ
//! request, by ATOMIC WRITE and by FLUSH (after the FETH). The DMA length
//! is the length of the whole message, not of this packet.

use crate::{bytes, Result, Rkey};

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const DMA_LEN: Range<usize> = 12..16;
}

fixed_header_view!(16);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address of the first byte.
    pub fn va(&self) -> u64 {
        bytes::u64(&self.buffer.as_ref()[field::VA])
    }
    /// Remote key of the target memory region or window.
    pub fn rkey(&self) -> Rkey {
        Rkey(bytes::u32(&self.buffer.as_ref()[field::RKEY]))
    }
    /// Length of the whole message in bytes.
    pub fn dma_len(&self) -> u32 {
        bytes::u32(&self.buffer.as_ref()[field::DMA_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, va: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&va.to_be_bytes());
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, rkey: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&rkey.0.to_be_bytes());
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, len: u32) {
        self.buffer.as_mut()[field::DMA_LEN].copy_from_slice(&len.to_be_bytes());
    }
}

/// The fields of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Message length.
    pub dma_len: u32,
}

impl Repr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { va: packet.va(), rkey: packet.rkey(), dma_len: packet.dma_len() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x55, 0x5d, 0x1c, 0x3a, 0x20, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, 0x00,
        0x00,
    ];
    const REPR: Repr = Repr { va: 0x0000_555d_1c3a_2000, rkey: Rkey(0x1234), dma_len: 65536 };

    #[test]
    fn fields_read_from_bytes() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x0000_555d_1c3a_2000);
        assert_eq!(p.rkey(), Rkey(0x1234));
        assert_eq!(p.dma_len(), 65536);
    }

    #[test]
    fn emit_over_a5_matches_fixture() {
        let mut buf = [0xa5u8; 16];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn round_trip_and_truncation() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])).unwrap(), REPR);
        assert_eq!(Packet::new_checked(&BYTES[..15]).unwrap_err(), crate::Error::Truncated);
    }
}
