//! Small rings share pages, as a driver's DMA pool does (Linux's
//! `dma_pool`): host memory comes from the device in whole 4 KiB pages,
//! and a QP with a few WQEs needs a few hundred bytes per ring, so one
//! page per ring would be most of a small QP's memory (10,000 QPs of
//! `uroce bench --qps`: 8 KiB of pages for 1 KiB of rings each).
//!
//! Rings of up to 2 KiB get a slot in a page of their size class (320 to
//! 2,048 bytes, multiples of 64 chosen so that the usual small shapes fit
//! with little slack: a 1-entry RQ is 288 bytes, a 4-entry SQ 768); larger
//! rings get pages of their own. A page goes
//! back to the device when its last slot is freed. A slot is zeroed when
//! it is handed out again, so a new ring starts as a fresh page would: all
//! indices 0, every entry empty.
//!
//! The price: the device's per-page liveness check (a freed page faults)
//! covers a slot only while its page lives. The HCA stops using a ring
//! before the command that destroys its queue returns, and only then is
//! its slot freed, so this matters only for an HCA bug, which would then
//! touch another queue's ring of this application instead of faulting.

use std::collections::HashMap;
use uroce_device::mem::{AllocError, DriverMemory};

/// The device's allocation unit.
const PAGE: u64 = 4096;
/// Slot sizes (multiples of 64, so every slot is 64-byte aligned; a page
/// holds `PAGE / size` slots, at most 16).
const SLOT_BYTES: [u64; 6] = [320, 512, 768, 1024, 1344, 2048];

/// The pages of small rings, and which of their slots are taken.
#[derive(Debug, Default)]
pub(crate) struct RingPool {
    /// Page address → (size class, bit per taken slot).
    pages: HashMap<u64, (usize, u16)>,
    /// Per size class, pages that had a free slot when last seen (a page in
    /// here may have filled up or gone since: checked when taken).
    partial: [Vec<u64>; SLOT_BYTES.len()],
}

impl RingPool {
    /// `bytes` of 64-byte aligned ring memory, zeroed.
    pub(crate) fn allocate(
        &mut self,
        host: &dyn DriverMemory,
        bytes: u64,
    ) -> Result<u64, AllocError> {
        let Some(class) = SLOT_BYTES.iter().position(|&slot| bytes <= slot) else {
            return host.allocate(bytes, PAGE);
        };
        let slot_bytes = SLOT_BYTES[class];
        let full = full_mask(class);
        while let Some(&page) = self.partial[class].last() {
            match self.pages.get_mut(&page) {
                Some((c, taken)) if *c == class && *taken != full => {
                    let slot = taken.trailing_ones();
                    *taken |= 1 << slot;
                    if *taken == full {
                        self.partial[class].pop();
                    }
                    let addr = page + u64::from(slot) * slot_bytes;
                    // A slot handed out before holds its last ring's bytes.
                    if let Err(e) = zero(host, addr, slot_bytes) {
                        self.release(host, addr);
                        return Err(e);
                    }
                    return Ok(addr);
                }
                _ => {
                    self.partial[class].pop();
                }
            }
        }
        // A fresh page is zeroed by the device.
        let page = host.allocate(PAGE, PAGE)?;
        self.pages.insert(page, (class, 1));
        self.partial[class].push(page);
        Ok(page)
    }

    /// Gives back ring memory from [`RingPool::allocate`]; a page returns
    /// to the device with its last slot.
    pub(crate) fn release(&mut self, host: &dyn DriverMemory, addr: u64) {
        let page = addr & !(PAGE - 1);
        let Some((class, taken)) = self.pages.get_mut(&page) else {
            // A ring of pages of its own.
            host.free(addr);
            return;
        };
        let slot = ((addr - page) / SLOT_BYTES[*class]) as u32;
        let was_full = *taken == full_mask(*class);
        *taken &= !(1 << slot);
        if *taken == 0 {
            self.pages.remove(&page);
            host.free(page);
        } else if was_full {
            self.partial[*class].push(page);
        }
    }
}

/// The taken-slot bits of a full page of `class`.
fn full_mask(class: usize) -> u16 {
    let slots = PAGE / SLOT_BYTES[class];
    (((1u32 << slots) - 1) & 0xFFFF) as u16
}

/// Writes zeros over `[addr, addr + len)`.
fn zero(host: &dyn DriverMemory, addr: u64, len: u64) -> Result<(), AllocError> {
    const ZEROS: [u8; 2048] = [0; 2048];
    host.write(addr, &ZEROS[..len as usize]).map_err(|_| AllocError::BadRequest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_device::mem::{HostMemory, SimMemory};

    #[test]
    fn small_rings_share_pages_and_pages_go_back_empty() {
        let host = SimMemory::new(1 << 20);
        let mut pool = RingPool::default();
        let before = host.allocated_bytes();
        let rings: Vec<u64> = (0..8).map(|_| pool.allocate(&host, 500).unwrap()).collect();
        assert_eq!(host.allocated_bytes() - before, PAGE, "eight 512-byte slots, one page");
        for (i, &a) in rings.iter().enumerate() {
            assert_eq!(a % 64, 0);
            assert!(rings[i + 1..].iter().all(|&b| b.abs_diff(a) >= 512), "slots overlap");
        }
        let ninth = pool.allocate(&host, 512).unwrap();
        assert_eq!(host.allocated_bytes() - before, 2 * PAGE);
        // A slot used before comes back zeroed.
        host.write(rings[3], &[0xAB; 512]).unwrap();
        pool.release(&host, rings[3]);
        let again = pool.allocate(&host, 450).unwrap();
        assert_eq!(again, rings[3]);
        let mut bytes = [1u8; 512];
        host.read(again, &mut bytes).unwrap();
        assert_eq!(bytes, [0; 512]);
        // Other sizes take other pages; large rings pages of their own.
        let mid = pool.allocate(&host, 1056).unwrap();
        // Twelve 288-byte RQs fit one page (320-byte slots).
        let small: Vec<u64> = (0..12).map(|_| pool.allocate(&host, 288).unwrap()).collect();
        assert_eq!(host.allocated_bytes() - before, 4 * PAGE);
        let big = pool.allocate(&host, 2049).unwrap();
        assert_eq!(big % PAGE, 0);
        // (The simulated memory counts a large allocation's own bytes.)
        assert_eq!(host.allocated_bytes() - before, 4 * PAGE + 2049);
        let all = rings.iter().filter(|&&a| a != rings[3]).chain(&small);
        for a in all.chain([&again, &ninth, &mid, &big]) {
            pool.release(&host, *a);
        }
        assert_eq!(host.allocated_bytes(), before, "every page went back");
    }
}
