//! FLUSH Extended Transport Header (FETH): 4 bytes, first after the BTH of
//! an RDMA FLUSH request (IBA 1.5 / rxe), followed by a RETH.
//!
//! ```text
//! +-------------------------------------------+-----+--------+
//! |             reserved (26 bits)            | SEL |  PLT   |
//! +-------------------------------------------+-----+--------+
//!   bits 31-6                                  5-4    3-0
//! ```
//!
//! SEL (selectivity level): 0 = flush the range, 1 = flush the whole
//! memory region. PLT (placement type): bit 0 global visibility, bit 1
//! persistence.

use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const BITS: Range<usize> = 0..4;
}

/// Placement type bit: make the data globally visible.
pub const PLT_GLOBAL_VISIBILITY: u8 = 0x1;
/// Placement type bit: make the data persistent.
pub const PLT_PERSISTENCE: u8 = 0x2;

fixed_header_view!(4);

impl<T: AsRef<[u8]>> Packet<T> {
    fn bits(&self) -> u32 {
        bytes::u32(&self.buffer.as_ref()[field::BITS])
    }
    /// Selectivity level (2 bits).
    pub fn selectivity_level(&self) -> u8 {
        ((self.bits() >> 4) & 0x3) as u8
    }
    /// Placement type (4 bits).
    pub fn placement_type(&self) -> u8 {
        (self.bits() & 0xf) as u8
    }
    /// The 26 reserved bits, shifted down.
    pub fn reserved(&self) -> u32 {
        self.bits() >> 6
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets all fields.
    pub fn set_fields(&mut self, selectivity_level: u8, placement_type: u8, reserved: u32) {
        let bits = (reserved << 6)
            | (u32::from(selectivity_level & 0x3) << 4)
            | u32::from(placement_type & 0xf);
        self.buffer.as_mut()[field::BITS].copy_from_slice(&bits.to_be_bytes());
    }
}

/// The fields of a FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Selectivity level (0..=3).
    pub selectivity_level: u8,
    /// Placement type (0..=15).
    pub placement_type: u8,
    /// Reserved bits 31-6 (kept for bit-exact round trips).
    pub reserved: u32,
}

impl Repr {
    /// Reads a FETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            selectivity_level: packet.selectivity_level(),
            placement_type: packet.placement_type(),
            reserved: packet.reserved(),
        })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_fields(self.selectivity_level, self.placement_type, self.reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_emit_and_round_trip() {
        // Whole-region flush (SEL 1) for persistence (PLT 2).
        let bytes = [0x00, 0x00, 0x00, 0x12];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.selectivity_level(), 1);
        assert_eq!(p.placement_type(), PLT_PERSISTENCE);
        assert_eq!(p.reserved(), 0);
        let mut buf = [0xa5u8; 4];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }
}
