//! Communication IDs and transaction IDs, formed the way Linux forms them.
//!
//! Linux allocates a small cyclic number for each CM ID and XORs it with a
//! random 32-bit operand chosen at boot, so local comm IDs look random but
//! never repeat until the counter wraps. Here the operand comes from the
//! seed the caller passes in. A TID is the MAD agent's number in the upper
//! 32 bits and the local comm ID, in the byte order Linux's little-endian
//! hosts put it there (byte-swapped), in the lower 32.

use uroce_wire::mad::{CommId, TransactionId};

/// SplitMix64: a seed-to-number mixer (no state beyond its argument).
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hands out local comm IDs: a cyclic counter XOR a seeded operand.
#[derive(Debug, Clone)]
pub(crate) struct IdAllocator {
    next: u32,
    operand: u32,
}

impl IdAllocator {
    pub(crate) fn new(seed: u64) -> IdAllocator {
        IdAllocator { next: 0, operand: mix64(seed) as u32 }
    }

    /// The next comm ID that is neither 0 (which a REJ uses for "none")
    /// nor in use. `None` only if every ID is taken.
    pub(crate) fn alloc(&mut self, in_use: impl Fn(CommId) -> bool) -> Option<CommId> {
        for _ in 0..1024 {
            let id = CommId(self.next ^ self.operand);
            self.next = self.next.wrapping_add(1);
            if id.0 != 0 && !in_use(id) {
                return Some(id);
            }
        }
        None
    }
}

/// The TID Linux puts on a REQ, DREQ or SIDR_REQ of the CM ID `local`.
pub const fn transaction_id(agent_id: u32, local: CommId) -> TransactionId {
    TransactionId(((agent_id as u64) << 32) | local.0.swap_bytes() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tid_as_in_rping_pcap() {
        // Frame 20: agent 2, local comm ID 0x8f4432ca.
        assert_eq!(transaction_id(2, CommId(0x8f44_32ca)), TransactionId(0x0000_0002_ca32_448f));
    }

    #[test]
    fn ids_are_seeded_unique_and_never_zero() {
        let mut a = IdAllocator::new(7);
        let mut b = IdAllocator::new(7);
        let mut c = IdAllocator::new(8);
        let x = a.alloc(|_| false).unwrap();
        assert_eq!(x, b.alloc(|_| false).unwrap());
        assert_ne!(x, c.alloc(|_| false).unwrap());
        let y = a.alloc(|_| false).unwrap();
        assert_ne!(x, y);
        // Skips IDs in use.
        let mut d = IdAllocator::new(7);
        assert_eq!(d.alloc(|id| id == x).unwrap(), y);
        // Never 0: with operand o, the counter value o gives 0.
        let mut e = IdAllocator { next: 5, operand: 5 };
        assert_eq!(e.alloc(|_| false).unwrap(), CommId(6 ^ 5));
    }
}
