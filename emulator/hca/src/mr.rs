//! Memory protection (MPT) and translation (MTT): the only way the HCA
//! touches registered memory.
//!
//! A memory key (L_Key or R_Key) is `mpt_index << 8 | key`. The MPT entry
//! at the index says which protection domain owns the memory, which
//! virtual range the key covers, what it may be used for, and whether it
//! is still valid; the 8-bit key must match, so a stale key (after
//! re-registration or invalidation) is refused. The MTT lists the host
//! address of every page of a region; translating a virtual address is
//! "which page, which offset", a visible step as on hardware.
//!
//! Every DMA goes through [`MemoryTables::check`] and then the page walk in
//! [`MemoryTables::read`] / [`MemoryTables::write`] /
//! [`MemoryTables::atomic`]: there is no other path
//! from a key to host memory. So the walk is also where a host-memory
//! fault (registered memory the application freed) is met and counted
//! ([`MemoryTables::dma_faults`], the `dma_faults` counter), once per
//! access that meets one.

use crate::handles::PdIndex;
use crate::tables::{Table, TableFull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uroce_device::mem::{HostMemory, MemFault};
use uroce_device::types::{key_parts, make_key, Access, Qpn};

/// What an MPT entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MptKind {
    /// A memory region, with its page list.
    Region {
        /// Index of its MTT.
        mtt: usize,
        /// Memory windows currently bound to it (it cannot be
        /// deregistered while any is).
        bound_windows: u32,
    },
    /// A memory window: a remote-access view of part of a region.
    Window {
        /// Type 1 (bound by a verb) or type 2 (bound by a WR).
        window_type: u8,
        /// The region it is bound to, if bound.
        bound_to: Option<u32>,
        /// For a type-2 window, the QP it was bound through: only that QP
        /// may use it.
        qpn: Option<Qpn>,
    },
}

/// One MPT entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MptEntry {
    /// Region or window.
    pub kind: MptKind,
    /// Owning protection domain.
    pub pd: PdIndex,
    /// The current 8-bit key.
    pub key: u8,
    /// Whether the key may be used (false after invalidation, and for an
    /// unbound window).
    pub valid: bool,
    /// First virtual address the key covers.
    pub iova: u64,
    /// Bytes the key covers.
    pub length: u64,
    /// What the key allows.
    pub access: Access,
}

impl MptEntry {
    fn covers(&self, va: u64, len: u64) -> bool {
        match va.checked_sub(self.iova) {
            Some(offset) => offset.checked_add(len).is_some_and(|end| end <= self.length),
            None => false,
        }
    }
}

/// The page list of one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mtt {
    /// Host address of each page.
    pub pages: Box<[u64]>,
    /// Offset of the region's first byte inside its first page.
    pub first_page_offset: u64,
}

/// Whether an access comes from the HCA's own work (an SGE, with an
/// L_Key) or from a remote peer (with an R_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An SGE of a local WQE.
    Local,
    /// A remote request (RETH, AtomicETH), arriving on QP `qpn`.
    Remote {
        /// The QP the request arrived on (type-2 windows are bound to one).
        qpn: Qpn,
    },
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No entry at the key's index, or its 8-bit key differs, or it was
    /// invalidated, or a window is used as an L_Key.
    BadKey,
    /// The key belongs to another protection domain.
    WrongPd,
    /// The key does not allow this kind of access.
    NotPermitted,
    /// The range runs outside what the key covers.
    OutOfBounds,
    /// A type-2 window used through another QP.
    WrongQp,
    /// Host memory refused the access (the app freed memory it had
    /// registered).
    Fault(MemFault),
}

/// A checked range: host memory may now be touched through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The region whose MTT translates the range.
    region_index: u32,
    /// First virtual address.
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Why registration failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError {
    /// The MPT or MTT table is full.
    TableFull,
    /// A zero length, a length above the limit, or unknown access bits.
    BadArgument,
    /// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (IBA 10.6.3.1).
    AccessNeedsLocalWrite,
    /// The key is in use and cannot be changed or destroyed (bound
    /// windows).
    Busy,
    /// No such key.
    NotFound,
}

impl From<TableFull> for RegisterError {
    fn from(_: TableFull) -> RegisterError {
        RegisterError::TableFull
    }
}

/// The MPT, the MTTs, and the host memory behind them.
pub struct MemoryTables {
    mpt: Table<MptEntry>,
    mtt: Table<Mtt>,
    host: Arc<dyn HostMemory>,
    page_shift: u32,
    max_region_len: u64,
    /// Source of fresh 8-bit keys (deterministic).
    key_counter: u8,
    /// Accesses through a key that met a host-memory fault. Reads and
    /// writes take `&self`, so the count is an atomic (relaxed: it orders
    /// nothing).
    dma_faults: AtomicU64,
}

impl MemoryTables {
    /// Empty tables for up to `max_entries` regions and windows.
    pub fn new(
        host: Arc<dyn HostMemory>,
        max_entries: usize,
        page_shift: u32,
        max_region_len: u64,
    ) -> MemoryTables {
        MemoryTables {
            mpt: Table::new(max_entries),
            mtt: Table::new(max_entries),
            host,
            page_shift,
            max_region_len,
            key_counter: 0,
            dma_faults: AtomicU64::new(0),
        }
    }

    /// Accesses through a key (a gather, a placement, a READ response, an
    /// atomic) that met a host-memory fault: the device's `dma_faults`
    /// counter.
    pub fn dma_faults(&self) -> u64 {
        self.dma_faults.load(Ordering::Relaxed)
    }

    /// The host memory.
    pub fn host(&self) -> &Arc<dyn HostMemory> {
        &self.host
    }

    /// The MPT entries, for dumps.
    pub fn mpt(&self) -> &Table<MptEntry> {
        &self.mpt
    }

    /// The MTT of a region, for dumps.
    pub fn mtt_of(&self, index: u32) -> Option<&Mtt> {
        match self.mpt.get(index as usize)?.kind {
            MptKind::Region { mtt, .. } => self.mtt.get(mtt),
            MptKind::Window { .. } => None,
        }
    }

    fn fresh_key(&mut self) -> u8 {
        self.key_counter = self.key_counter.wrapping_add(1);
        self.key_counter
    }

    /// Registers `length` bytes of host memory at `host_addr`, seen by keys
    /// as virtual addresses from `iova`. Returns the key (L_Key = R_Key).
    pub fn register(
        &mut self,
        pd: PdIndex,
        host_addr: u64,
        length: u64,
        iova: u64,
        access: Access,
    ) -> Result<u32, RegisterError> {
        check_region_access(access)?;
        let (iova, page_list) = self.translate(host_addr, length, iova, access)?;
        let mtt = self.mtt.insert_with(|_| page_list)?;
        let key = self.fresh_key();
        let entry = MptEntry {
            kind: MptKind::Region { mtt, bound_windows: 0 },
            pd,
            key,
            valid: true,
            iova,
            length,
            access,
        };
        match self.mpt.insert_with(|_| entry) {
            Ok(index) => Ok(make_key(index as u32, key)),
            Err(full) => {
                self.mtt.remove(mtt);
                Err(full.into())
            }
        }
    }

    /// The virtual start and the page list of `length` bytes of host
    /// memory at `host_addr` seen from `iova` with `access` (zero-based:
    /// from 0), if the range is one a region may cover.
    fn translate(
        &self,
        host_addr: u64,
        length: u64,
        iova: u64,
        access: Access,
    ) -> Result<(u64, Mtt), RegisterError> {
        // A zero-based region is addressed by offsets from its start.
        let iova = if access.contains(Access::ZERO_BASED) { 0 } else { iova };
        if length == 0 || length > self.max_region_len || iova.checked_add(length).is_none() {
            return Err(RegisterError::BadArgument);
        }
        let page = 1u64 << self.page_shift;
        let first_page = host_addr & !(page - 1);
        let first_page_offset = host_addr - first_page;
        let end = host_addr.checked_add(length).ok_or(RegisterError::BadArgument)?;
        let page_count = (end - first_page).div_ceil(page);
        let pages: Box<[u64]> = (0..page_count).map(|i| first_page + i * page).collect();
        Ok((iova, Mtt { pages, first_page_offset }))
    }

    /// Deregisters a region.
    pub fn deregister(&mut self, key: u32) -> Result<(), RegisterError> {
        let (index, _) = key_parts(key);
        let entry = self.entry_for_key(key).ok_or(RegisterError::NotFound)?;
        match entry.kind {
            MptKind::Region { bound_windows, .. } if bound_windows > 0 => Err(RegisterError::Busy),
            MptKind::Region { mtt, .. } => {
                self.mtt.remove(mtt);
                self.mpt.remove(index as usize);
                Ok(())
            }
            MptKind::Window { .. } => Err(RegisterError::NotFound),
        }
    }

    /// Invalidates a key (LOCAL_INV, SEND with invalidate): it is refused
    /// from now on. Returns false if there is no such valid key.
    pub fn invalidate(&mut self, key: u32) -> bool {
        let (index, key_byte) = key_parts(key);
        match self.mpt.get_mut(index as usize) {
            Some(entry) if entry.key == key_byte && entry.valid => {
                entry.valid = false;
                true
            }
            _ => false,
        }
    }

    /// Makes an invalidated region usable again under a new key.
    pub fn revalidate(&mut self, key: u32) -> Result<u32, RegisterError> {
        let (index, key_byte) = key_parts(key);
        let fresh = self.fresh_key();
        let entry = self.mpt.get_mut(index as usize).ok_or(RegisterError::NotFound)?;
        if entry.key != key_byte || !matches!(entry.kind, MptKind::Region { .. }) {
            return Err(RegisterError::NotFound);
        }
        entry.key = fresh;
        entry.valid = true;
        Ok(make_key(index, fresh))
    }

    /// Allocates an unbound memory window of type 1 or 2; returns its
    /// R_Key (usable only once bound).
    pub fn alloc_window(&mut self, pd: PdIndex, window_type: u8) -> Result<u32, RegisterError> {
        if !matches!(window_type, 1 | 2) {
            return Err(RegisterError::BadArgument);
        }
        let key = self.fresh_key();
        let entry = MptEntry {
            kind: MptKind::Window { window_type, bound_to: None, qpn: None },
            pd,
            key,
            valid: false,
            iova: 0,
            length: 0,
            access: Access::EMPTY,
        };
        let index = self.mpt.insert_with(|_| entry)?;
        Ok(make_key(index as u32, key))
    }

    /// Frees a memory window (unbinding it).
    pub fn dealloc_window(&mut self, rkey: u32) -> Result<(), RegisterError> {
        let (index, _) = key_parts(rkey);
        let entry = *self.entry_for_key(rkey).ok_or(RegisterError::NotFound)?;
        let MptKind::Window { bound_to, .. } = entry.kind else {
            return Err(RegisterError::NotFound);
        };
        if let Some(region) = bound_to {
            self.release_region(region);
        }
        self.mpt.remove(index as usize);
        Ok(())
    }

    fn release_region(&mut self, region: u32) {
        if let Some(MptEntry { kind: MptKind::Region { bound_windows, .. }, .. }) =
            self.mpt.get_mut(region as usize)
        {
            *bound_windows = bound_windows.saturating_sub(1);
        }
    }

    /// Binds window `mw_rkey` to `[va, va + length)` of the region `mr_lkey`
    /// with `access`, through QP `qpn` in protection domain `pd` (IBA
    /// 10.6.7). The window's 8-bit key becomes `new_key` (type 2, from the
    /// WR) or the next key (type 1). Returns the new R_Key.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_window(
        &mut self,
        mw_rkey: u32,
        new_key: Option<u8>,
        mr_lkey: u32,
        va: u64,
        length: u64,
        access: Access,
        pd: PdIndex,
        qpn: Qpn,
    ) -> Result<u32, AccessError> {
        let (mw_index, _) = key_parts(mw_rkey);
        let window = *self.entry_for_key(mw_rkey).ok_or(AccessError::BadKey)?;
        let MptKind::Window { window_type, bound_to, .. } = window.kind else {
            return Err(AccessError::BadKey);
        };
        if window.pd != pd && window_type == 2 {
            return Err(AccessError::WrongPd);
        }
        let (mr_index, _) = key_parts(mr_lkey);
        let region = *self.entry_for_key(mr_lkey).filter(|e| e.valid).ok_or(AccessError::BadKey)?;
        if !matches!(region.kind, MptKind::Region { .. }) {
            return Err(AccessError::BadKey);
        }
        if region.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !region.access.contains(Access::MW_BIND) || access.has_unknown_bits() {
            return Err(AccessError::NotPermitted);
        }
        // Remote write or atomic through the window needs local write on
        // the region.
        if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !region.access.contains(Access::LOCAL_WRITE)
        {
            return Err(AccessError::NotPermitted);
        }
        if length > 0 && !region.covers(va, length) {
            return Err(AccessError::OutOfBounds);
        }
        if let Some(old) = bound_to {
            self.release_region(old);
        }
        // The driver picks the new 8-bit key (libibverbs increments it for
        // a type-1 bind; a type-2 bind WR carries it).
        let key = match new_key {
            Some(k) => k,
            None => self.fresh_key(),
        };
        if let Some(MptEntry { kind: MptKind::Region { bound_windows, .. }, .. }) =
            self.mpt.get_mut(mr_index as usize)
        {
            *bound_windows += 1;
        }
        let entry = self.mpt.get_mut(mw_index as usize).ok_or(AccessError::BadKey)?;
        entry.kind = MptKind::Window {
            window_type,
            bound_to: Some(mr_index),
            qpn: (window_type == 2).then_some(qpn),
        };
        entry.key = key;
        entry.valid = true;
        entry.iova = va;
        entry.length = length;
        entry.access = access.without(Access::MW_BIND);
        Ok(make_key(mw_index, key))
    }

    /// The protection domain of a key's entry (any state).
    pub fn pd_of(&self, key: u32) -> Option<PdIndex> {
        self.entry_for_key(key).map(|e| e.pd)
    }

    /// Invalidates a key that a remote SEND with invalidate names, or a
    /// LOCAL_INV: a region or a type-2 window of protection domain `pd`.
    /// A window is unbound.
    pub fn invalidate_for(&mut self, key: u32, pd: PdIndex) -> Result<(), AccessError> {
        let (index, _) = key_parts(key);
        let entry = *self.entry_for_key(key).filter(|e| e.valid).ok_or(AccessError::BadKey)?;
        if entry.pd != pd {
            return Err(AccessError::WrongPd);
        }
        match entry.kind {
            MptKind::Region { .. } => {
                self.invalidate(key);
            }
            MptKind::Window { window_type: 2, bound_to, .. } => {
                if let Some(region) = bound_to {
                    self.release_region(region);
                }
                if let Some(e) = self.mpt.get_mut(index as usize) {
                    e.valid = false;
                    e.kind = MptKind::Window { window_type: 2, bound_to: None, qpn: None };
                }
            }
            MptKind::Window { .. } => return Err(AccessError::NotPermitted),
        }
        Ok(())
    }

    fn entry_for_key(&self, key: u32) -> Option<&MptEntry> {
        let (index, key_byte) = key_parts(key);
        self.mpt.get(index as usize).filter(|e| e.key == key_byte)
    }
}

fn check_region_access(access: Access) -> Result<(), RegisterError> {
    if access.has_unknown_bits() {
        return Err(RegisterError::BadArgument);
    }
    let needs_local_write = Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    if access.intersects(needs_local_write) && !access.contains(Access::LOCAL_WRITE) {
        return Err(RegisterError::AccessNeedsLocalWrite);
    }
    Ok(())
}

mod dma;
mod rereg;
pub use dma::WordOp;
pub use rereg::Reregistration;

#[cfg(test)]
mod tests;
