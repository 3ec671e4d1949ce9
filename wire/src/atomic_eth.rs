//! Atomic Extended Transport Header (AtomicETH): 28 bytes, in every
//! COMPARE_SWAP and FETCH_ADD request.
//!
//! ```text
//! +---------------------+-----------+---------------------+---------------------+
//! | virtual address (8) | R_Key (4) | swap or add data (8)| compare data (8)    |
//! +---------------------+-----------+---------------------+---------------------+
//! ```
//!
//! The target is one naturally aligned 8-byte word. FETCH_ADD ignores the
//! compare field.

use crate::{bytes, Result, Rkey};

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const SWAP_ADD: Range<usize> = 12..20;
    pub const COMPARE: Range<usize> = 20..28;
}

fixed_header_view!(28);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address of the 8-byte target.
    pub fn va(&self) -> u64 {
        bytes::u64(&self.buffer.as_ref()[field::VA])
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey(bytes::u32(&self.buffer.as_ref()[field::RKEY]))
    }
    /// The value to swap in (COMPARE_SWAP) or to add (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        bytes::u64(&self.buffer.as_ref()[field::SWAP_ADD])
    }
    /// The value to compare with (COMPARE_SWAP).
    pub fn compare(&self) -> u64 {
        bytes::u64(&self.buffer.as_ref()[field::COMPARE])
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
    /// Sets the swap/add operand.
    pub fn set_swap_add(&mut self, value: u64) {
        self.buffer.as_mut()[field::SWAP_ADD].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the compare operand.
    pub fn set_compare(&mut self, value: u64) {
        self.buffer.as_mut()[field::COMPARE].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
}

impl Repr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 28] = [
        0, 0, 0x7f, 0xff, 0, 0, 0x10, 0x08, // va
        0, 0x01, 0x02, 0x03, // rkey
        0, 0, 0, 0, 0, 0, 0, 0x05, // add 5
        0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, // compare
    ];
    const REPR: Repr = Repr {
        va: 0x0000_7fff_0000_1008,
        rkey: Rkey(0x0001_0203),
        swap_add: 5,
        compare: 0xdead_beef_0000_0001,
    };

    #[test]
    fn fields_read_from_bytes() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), REPR.va);
        assert_eq!(p.rkey(), REPR.rkey);
        assert_eq!(p.swap_add(), 5);
        assert_eq!(p.compare(), REPR.compare);
    }

    #[test]
    fn emit_over_a5_matches_fixture() {
        let mut buf = [0xa5u8; 28];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn round_trip_and_truncation() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])).unwrap(), REPR);
        assert_eq!(Packet::new_checked(&BYTES[..27]).unwrap_err(), crate::Error::Truncated);
    }
}
