//! The DMA side of the memory tables: the key check, the page walk, and
//! the reads, writes and atomics that go through them (the only path from
//! a key to host memory).

use super::{AccessError, Checked, MemoryTables, MptKind, Origin};
use crate::handles::PdIndex;
use std::sync::atomic::Ordering;
use uroce_device::mem::MemFault;
use uroce_device::types::{key_parts, Access};

impl MemoryTables {
    /// Checks that `key` lets `origin` access `[va, va + len)` with
    /// `needed` rights on behalf of protection domain `pd`. A zero-length
    /// access is always allowed without looking at the key (IBA 9.4.1.1:
    /// a zero-length RDMA does not check the R_Key).
    pub fn check(
        &self,
        key: u32,
        pd: PdIndex,
        va: u64,
        len: u64,
        needed: Access,
        origin: Origin,
    ) -> Result<Checked, AccessError> {
        if len == 0 {
            return Ok(Checked { region_index: u32::MAX, va, len });
        }
        let (index, _) = key_parts(key);
        let entry = self.entry_for_key(key).filter(|e| e.valid).ok_or(AccessError::BadKey)?;
        if entry.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !entry.access.contains(needed) {
            return Err(AccessError::NotPermitted);
        }
        if !entry.covers(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        let region_index = match (entry.kind, origin) {
            (MptKind::Region { .. }, _) => index,
            (MptKind::Window { .. }, Origin::Local) => return Err(AccessError::BadKey),
            (MptKind::Window { bound_to: None, .. }, _) => return Err(AccessError::BadKey),
            (MptKind::Window { qpn: Some(owner), .. }, Origin::Remote { qpn }) if owner != qpn => {
                return Err(AccessError::WrongQp)
            }
            (MptKind::Window { bound_to: Some(region), .. }, _) => region,
        };
        Ok(Checked { region_index, va, len })
    }

    /// Walks the MTT of a checked range: calls `step(host_addr, offset,
    /// len)` for each page-contiguous piece.
    fn walk(
        &self,
        range: &Checked,
        mut step: impl FnMut(u64, usize, usize) -> Result<(), MemFault>,
    ) -> Result<(), AccessError> {
        if range.len == 0 {
            return Ok(());
        }
        let region = self.mpt.get(range.region_index as usize).ok_or(AccessError::BadKey)?;
        let MptKind::Region { mtt, .. } = region.kind else { return Err(AccessError::BadKey) };
        let mtt = self.mtt.get(mtt).ok_or(AccessError::BadKey)?;
        // The range is inside the region (checked), so the page indices are
        // inside the MTT.
        let page = 1u64 << self.page_shift;
        let mut offset_in_region = mtt.first_page_offset + (range.va - region.iova);
        let in_page = offset_in_region & (page - 1);
        if range.len <= page - in_page {
            // Inside one page (a small message, a ring entry): one piece.
            let page_index = (offset_in_region >> self.page_shift) as usize;
            let host_addr = mtt.pages.get(page_index).ok_or(AccessError::OutOfBounds)? + in_page;
            return step(host_addr, 0, range.len as usize).map_err(|f| self.dma_fault(f));
        }
        let mut done = 0u64;
        while done < range.len {
            let page_index = (offset_in_region >> self.page_shift) as usize;
            let in_page = offset_in_region & (page - 1);
            let piece = (page - in_page).min(range.len - done);
            let host_addr = mtt.pages.get(page_index).ok_or(AccessError::OutOfBounds)? + in_page;
            // The walk stops at the first fault: one access, one count.
            step(host_addr, done as usize, piece as usize).map_err(|f| self.dma_fault(f))?;
            done += piece;
            offset_in_region += piece;
        }
        Ok(())
    }

    /// Counts a fault of the walk's access (one access, one count).
    fn dma_fault(&self, fault: MemFault) -> AccessError {
        self.dma_faults.fetch_add(1, Ordering::Relaxed);
        AccessError::Fault(fault)
    }

    /// Reads a checked range into `dst` (`dst.len()` must equal its length).
    pub fn read(&self, range: &Checked, dst: &mut [u8]) -> Result<(), AccessError> {
        assert_eq!(dst.len() as u64, range.len, "read buffer length");
        self.walk(range, |host, at, len| self.host.read(host, &mut dst[at..at + len]))
    }

    /// Writes `src` into a checked range (`src.len()` must equal its length).
    pub fn write(&self, range: &Checked, src: &[u8]) -> Result<(), AccessError> {
        assert_eq!(src.len() as u64, range.len, "write buffer length");
        self.walk(range, |host, at, len| self.host.write(host, &src[at..at + len]))
    }

    /// Runs an atomic operation on a checked 8-byte, 8-aligned range and
    /// returns the word's value before it (the stored value for
    /// [`WordOp::Store`]). The word is reached through the page walk like
    /// every other access, so a fault is counted there.
    pub fn atomic(&self, range: &Checked, op: WordOp) -> Result<u64, AccessError> {
        assert_eq!(range.len, 8, "atomic range length");
        let mut original = None;
        self.walk(range, |host, _, len| {
            if len == 8 {
                original = Some(match op {
                    WordOp::CompareSwap { compare, swap } => {
                        self.host.compare_swap_u64(host, compare, swap)?
                    }
                    WordOp::FetchAdd(add) => self.host.fetch_add_u64(host, add)?,
                    WordOp::Store(value) => {
                        self.host.store_u64(host, value)?;
                        value
                    }
                });
            }
            Ok(())
        })?;
        // An 8-aligned word never straddles a page.
        original.ok_or(AccessError::OutOfBounds)
    }
}

/// An atomic operation on one 64-bit word of registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordOp {
    /// COMPARE_SWAP: store `swap` if the word equals `compare`.
    CompareSwap {
        /// The value expected.
        compare: u64,
        /// The value stored on a match.
        swap: u64,
    },
    /// FETCH_ADD.
    FetchAdd(u64),
    /// ATOMIC WRITE: store the value.
    Store(u64),
}
