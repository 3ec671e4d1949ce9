//! Host memory as the HCA reaches it: the DMA boundary.
//!
//! Everything the HCA reads or writes on the host — registered memory
//! regions, WQE and CQE rings, doorbell records — goes through
//! [`HostMemory`], the device's DMA view; where rings and buffers come
//! from is the driver's business ([`DriverMemory`]). Every implementation checks each access against the
//! ranges it knows, so the trait is safe to call with any address: an
//! address outside them is a [`MemFault`], never undefined behaviour.
//!
//! [`SimMemory`] is an arena in ordinary Rust memory: addresses are
//! numbers, not pointers, allocations are separated by unmapped guard
//! gaps, and the whole state is deterministic. The simulated fabric and
//! the fuzzers use it. In strict mode a fault panics, so a test fails on
//! the first stray access.
//!
//! RDMA atomics act on 8-byte words in the host's byte order; the arena
//! stores them little-endian, as on x86-64.

use std::sync::Mutex;
use uroce_wire::copy::copy_short;

/// An access the memory map does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemFault {
    /// First address of the access.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl core::fmt::Display for MemFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "memory fault: {} bytes at 0x{:x}", self.len, self.addr)
    }
}

impl std::error::Error for MemFault {}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// Zero length, an alignment that is not a power of two, or a size
    /// past the limit.
    BadRequest,
    /// The arena's budget is spent.
    OutOfMemory,
}

/// The device's view of host memory (its DMA): bytes and words by
/// address. The HCA reaches registered regions, rings and doorbell records
/// through it, and so does the driver for the rings it shares with the
/// device; an implementation checks every access, and reaches ring words
/// without taking a lock per access where it can (shared mappings).
pub trait HostMemory: Send + Sync {
    /// Copies `dst.len()` bytes from `addr`.
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault>;
    /// Copies `src` to `addr`.
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault>;
    /// Reads a ring index published by the other side (acquire).
    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault>;
    /// Publishes a ring index (release).
    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault>;
    /// Copies `src` to `addr`, then publishes a ring index at `index_addr`
    /// (release): a ring entry and the index that hands it over, as
    /// [`HostMemory::write`] then [`HostMemory::store_release_u32`] (the
    /// index is not stored if the write faults). A memory behind one lock
    /// takes it once for both.
    fn write_and_publish_u32(
        &self,
        addr: u64,
        src: &[u8],
        index_addr: u64,
        value: u32,
    ) -> Result<(), MemFault> {
        self.write(addr, src)?;
        self.store_release_u32(index_addr, value)
    }
    /// Atomically: `old = *addr; if old == compare { *addr = swap }`;
    /// returns `old`. `addr` must be 8-byte aligned.
    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault>;
    /// Atomically: `old = *addr; *addr = old + add`; returns `old`.
    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault>;
    /// Atomically stores an 8-byte word (ATOMIC WRITE).
    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault>;
    /// A full (sequentially consistent) fence between this side's earlier
    /// stores and later loads: the doorbell protocol's "publish, then
    /// look at the other side's flag" needs it on both sides (see
    /// [`crate::ring::SCHEDULED_OFFSET`]). Memories behind one lock need
    /// nothing more than the lock.
    fn fence_seq_cst(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// The driver's side of host memory: where rings and buffers come from.
/// A driver allocates its rings and the buffers it registers here, so that
/// the device (in this process or another one mapping the same memory)
/// can reach them; the device itself never allocates.
pub trait DriverMemory: HostMemory {
    /// Allocates `len` bytes aligned to `align` (a power of two), zeroed.
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError>;
    /// Frees an allocation made by [`DriverMemory::allocate`]; returns
    /// whether there was one at `addr`.
    fn free(&self, addr: u64) -> bool;

    /// Makes `len` bytes of the application's own memory at `ptr`
    /// reachable, and returns their address. Memories whose addresses are
    /// not pointers of this process (the simulated arena, a mapping shared
    /// with a device in another process) refuse.
    ///
    /// Registrations may overlap or repeat one another (a buffer
    /// registered twice, a region per sub-buffer and one over the whole):
    /// each is removed by its own [`DriverMemory::unregister_external`],
    /// and an access must lie inside one of them.
    ///
    /// # Safety
    ///
    /// The range must stay allocated and writable until
    /// [`DriverMemory::unregister_external`] removes this registration,
    /// and while it is registered the caller must not hold references into
    /// it nor race non-atomic accesses with the device, which may read and
    /// write it at any time (DMA semantics).
    unsafe fn register_external(&self, ptr: *mut u8, len: usize) -> Result<u64, AllocError> {
        let _ = (ptr, len);
        Err(AllocError::BadRequest)
    }

    /// Removes one registration of `len` bytes at `addr` made with
    /// [`DriverMemory::register_external`] (the address it returned, the
    /// length it was given); returns whether there was one. Other
    /// registrations, of the same range or overlapping it, stay.
    fn unregister_external(&self, addr: u64, len: usize) -> bool {
        let _ = (addr, len);
        false
    }
}

/// The unmapped gap left after every arena allocation, so that an access
/// running past the end of one never lands in the next.
pub const GUARD_GAP: u64 = 1 << 16;
/// Where the arena's first allocation goes (address 0 stays unmapped).
pub const ARENA_BASE: u64 = 0x1000_0000;

struct Arena {
    /// Allocations, sorted by start address (a sorted vector: the few
    /// regions of a run are found by a binary search, after a check of
    /// the one [`Arena::recent`] remembers for the address, without a tree
    /// walk per access).
    regions: Vec<(u64, Vec<u8>)>,
    /// For each [`RECENT_SLOTS`] slot of 64 KiB granules (`addr >> 16`),
    /// the index in `regions` of the last region an access there found: a
    /// hint, checked against the region's bounds before use. Allocations
    /// are separated by [`GUARD_GAP`], so no granule holds bytes of two
    /// regions, and the ring, doorbell and buffer regions of a run mostly
    /// fall in different slots.
    recent: [usize; RECENT_SLOTS],
    next: u64,
    allocated_bytes: u64,
    faults: u64,
}

/// How many region hints [`Arena`] keeps (a power of two).
const RECENT_SLOTS: usize = 16;

impl Arena {
    /// The region with the greatest start at or below `addr`, if any: its
    /// start and bytes.
    fn find(&mut self, addr: u64) -> Option<(u64, &mut Vec<u8>)> {
        let slot = ((addr >> 16) as usize) & (RECENT_SLOTS - 1);
        let hint = self.recent[slot];
        // Regions do not overlap: one that contains `addr` is the one with
        // the greatest start at or below it.
        let hit = match self.regions.get(hint) {
            Some(&(start, ref bytes)) if start <= addr && addr - start < bytes.len() as u64 => hint,
            _ => {
                let i = self.regions.partition_point(|&(s, _)| s <= addr).checked_sub(1)?;
                self.recent[slot] = i;
                i
            }
        };
        let (start, bytes) = &mut self.regions[hit];
        Some((*start, bytes))
    }

    /// Runs `f` on the bytes `[addr, addr + len)` if they lie inside one
    /// allocation.
    fn access<R>(&mut self, addr: u64, len: u64, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        let (start, bytes) = self.find(addr)?;
        let offset = addr - start;
        let end = offset.checked_add(len)?;
        (end <= bytes.len() as u64).then(|| f(&mut bytes[offset as usize..end as usize]))
    }
}

/// Where `[addr, addr + len)` lies in the allocation of `size` bytes at
/// `start`, if it lies inside it.
fn within(start: u64, size: usize, addr: u64, len: u64) -> Option<core::ops::Range<usize>> {
    let offset = addr.checked_sub(start)?;
    let end = offset.checked_add(len)?;
    (end <= size as u64).then_some(offset as usize..end as usize)
}

/// A deterministic host memory made of separate allocations.
pub struct SimMemory {
    arena: Mutex<Arena>,
    budget_bytes: u64,
    strict: bool,
}

impl SimMemory {
    /// An arena that allocates at most `budget_bytes` in all.
    pub fn new(budget_bytes: u64) -> SimMemory {
        SimMemory {
            arena: Mutex::new(Arena {
                regions: Vec::new(),
                recent: [0; RECENT_SLOTS],
                next: ARENA_BASE,
                allocated_bytes: 0,
                faults: 0,
            }),
            budget_bytes,
            strict: false,
        }
    }

    /// Like [`SimMemory::new`], but any fault panics: for tests and fuzzers
    /// that must fail on the first access outside known memory.
    pub fn strict(budget_bytes: u64) -> SimMemory {
        SimMemory { strict: true, ..SimMemory::new(budget_bytes) }
    }

    /// How many faults were reported.
    pub fn faults(&self) -> u64 {
        self.lock().faults
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.lock().allocated_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arena> {
        // A panic while holding the lock (strict mode) must not hide later
        // faults behind a poisoned mutex.
        self.arena.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the bytes `[addr, addr + len)`, which must lie inside
    /// one allocation.
    fn with_range<R>(
        &self,
        addr: u64,
        len: u64,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, MemFault> {
        let mut arena = self.lock();
        match arena.access(addr, len, f) {
            Some(result) => Ok(result),
            None => self.fault(arena, MemFault { addr, len }),
        }
    }

    /// Counts a fault, releases the lock, and reports it (panics in strict
    /// mode). Cold: kept out of the accesses that succeed.
    #[cold]
    #[inline(never)]
    fn fault<R>(
        &self,
        mut arena: std::sync::MutexGuard<'_, Arena>,
        fault: MemFault,
    ) -> Result<R, MemFault> {
        arena.faults += 1;
        drop(arena);
        assert!(!self.strict, "strict SimMemory: {fault}");
        Err(fault)
    }

    fn with_word<R>(&self, addr: u64, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, MemFault> {
        if addr % 8 != 0 {
            let mut arena = self.lock();
            arena.faults += 1;
            drop(arena);
            let fault = MemFault { addr, len: 8 };
            assert!(!self.strict, "strict SimMemory: unaligned atomic, {fault}");
            return Err(fault);
        }
        self.with_range(addr, 8, f)
    }
}

fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte range"))
}

impl HostMemory for SimMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        self.with_range(addr, dst.len() as u64, |src| dst.copy_from_slice(src))
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        self.with_range(addr, src.len() as u64, |dst| copy_short(dst, src))
    }

    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        self.with_range(addr, 4, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        self.with_range(addr, 4, |b| b.copy_from_slice(&value.to_le_bytes()))
    }

    fn write_and_publish_u32(
        &self,
        addr: u64,
        src: &[u8],
        index_addr: u64,
        value: u32,
    ) -> Result<(), MemFault> {
        let mut arena = self.lock();
        let len = src.len() as u64;
        // The entry, then the index: in the allocation the entry was found
        // in (a ring's index and entries lie in one) without looking it up
        // again, else wherever it is.
        let entry_fault = MemFault { addr, len };
        let Some((start, bytes)) = arena.find(addr) else { return self.fault(arena, entry_fault) };
        let Some(entry) = within(start, bytes.len(), addr, len) else {
            return self.fault(arena, entry_fault);
        };
        bytes[entry].copy_from_slice(src);
        if let Some(index) = within(start, bytes.len(), index_addr, 4) {
            bytes[index].copy_from_slice(&value.to_le_bytes());
            return Ok(());
        }
        match arena.access(index_addr, 4, |b| b.copy_from_slice(&value.to_le_bytes())) {
            Some(()) => Ok(()),
            None => self.fault(arena, MemFault { addr: index_addr, len: 4 }),
        }
    }

    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        self.with_word(addr, |b| {
            let old = word(b);
            if old == compare {
                b.copy_from_slice(&swap.to_le_bytes());
            }
            old
        })
    }

    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        self.with_word(addr, |b| {
            let old = word(b);
            b.copy_from_slice(&old.wrapping_add(add).to_le_bytes());
            old
        })
    }

    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.with_word(addr, |b| b.copy_from_slice(&value.to_le_bytes()))
    }

    fn fence_seq_cst(&self) {
        // Every access takes the arena's one lock: already ordered.
    }
}

impl DriverMemory for SimMemory {
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        if len == 0 || !align.is_power_of_two() || len > self.budget_bytes {
            return Err(AllocError::BadRequest);
        }
        let mut arena = self.lock();
        if arena.allocated_bytes + len > self.budget_bytes {
            return Err(AllocError::OutOfMemory);
        }
        let start = arena.next.checked_next_multiple_of(align).ok_or(AllocError::OutOfMemory)?;
        let next = start
            .checked_add(len)
            .and_then(|end| end.checked_add(GUARD_GAP))
            .ok_or(AllocError::OutOfMemory)?;
        let at = arena.regions.partition_point(|&(s, _)| s < start);
        arena.regions.insert(at, (start, vec![0; len as usize]));
        arena.next = next;
        arena.allocated_bytes += len;
        Ok(start)
    }

    fn free(&self, addr: u64) -> bool {
        let mut arena = self.lock();
        match arena.regions.binary_search_by_key(&addr, |&(s, _)| s) {
            Ok(at) => {
                let (_, bytes) = arena.regions.remove(at);
                arena.allocated_bytes -= bytes.len() as u64;
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written() {
        let mem = SimMemory::new(1 << 20);
        let a = mem.allocate(100, 64).unwrap();
        assert_eq!(a % 64, 0);
        mem.write(a + 10, b"hello").unwrap();
        let mut buf = [0u8; 5];
        mem.read(a + 10, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn accesses_outside_an_allocation_fault() {
        let mem = SimMemory::new(1 << 20);
        let a = mem.allocate(100, 8).unwrap();
        let b = mem.allocate(100, 8).unwrap();
        assert!(b >= a + 100 + GUARD_GAP, "guard gap between allocations");
        let mut buf = [0u8; 8];
        assert_eq!(mem.read(a + 96, &mut buf), Err(MemFault { addr: a + 96, len: 8 }));
        assert!(mem.read(a - 1, &mut buf[..1]).is_err());
        assert!(mem.read(0, &mut buf).is_err());
        assert!(mem.write(u64::MAX - 2, &buf).is_err());
        assert!(mem.read(a + 92, &mut buf).is_ok());
        assert_eq!(mem.faults(), 4);
        assert!(mem.free(a));
        assert!(mem.read(a, &mut buf).is_err(), "freed memory faults");
        assert!(!mem.free(a));
    }

    #[test]
    fn write_and_publish_is_a_write_then_an_index_store() {
        let mem = SimMemory::new(1 << 20);
        let ring = mem.allocate(256, 64).unwrap();
        mem.write_and_publish_u32(ring + 64, &[7; 32], ring, 5).unwrap();
        let mut entry = [0u8; 32];
        mem.read(ring + 64, &mut entry).unwrap();
        assert_eq!((entry, mem.load_acquire_u32(ring).unwrap()), ([7; 32], 5));
        // A faulting entry: nothing is published.
        let fault = mem.write_and_publish_u32(ring + 240, &[1; 32], ring, 6).unwrap_err();
        assert_eq!(
            (fault, mem.load_acquire_u32(ring).unwrap()),
            (MemFault { addr: ring + 240, len: 32 }, 5)
        );
        // A faulting index: the entry is written.
        let fault = mem.write_and_publish_u32(ring + 96, &[2; 32], ring + 254, 6).unwrap_err();
        mem.read(ring + 96, &mut entry).unwrap();
        assert_eq!((fault, entry), (MemFault { addr: ring + 254, len: 4 }, [2; 32]));
        assert_eq!(mem.faults(), 2);
    }

    #[test]
    fn atomics_act_on_aligned_words() {
        let mem = SimMemory::new(1 << 20);
        let a = mem.allocate(16, 8).unwrap();
        assert_eq!(mem.fetch_add_u64(a, 5).unwrap(), 0);
        assert_eq!(mem.fetch_add_u64(a, u64::MAX).unwrap(), 5);
        assert_eq!(mem.compare_swap_u64(a, 4, 99).unwrap(), 4);
        assert_eq!(mem.compare_swap_u64(a, 4, 7).unwrap(), 99, "no swap when compare differs");
        mem.store_u64(a + 8, 0x0102_0304_0506_0708).unwrap();
        let mut raw = [0u8; 8];
        mem.read(a + 8, &mut raw).unwrap();
        assert_eq!(raw, [8, 7, 6, 5, 4, 3, 2, 1], "little-endian words");
        assert!(mem.fetch_add_u64(a + 4, 1).is_err(), "unaligned atomic");
    }

    #[test]
    fn budget_is_enforced() {
        let mem = SimMemory::new(1000);
        assert!(mem.allocate(600, 8).is_ok());
        assert_eq!(mem.allocate(600, 8), Err(AllocError::OutOfMemory));
        assert_eq!(mem.allocate(0, 8), Err(AllocError::BadRequest));
        assert_eq!(mem.allocate(8, 3), Err(AllocError::BadRequest));
    }

    #[test]
    #[should_panic(expected = "strict SimMemory")]
    fn strict_mode_panics_on_a_fault() {
        let mem = SimMemory::strict(1 << 20);
        let mut buf = [0u8; 1];
        let _ = mem.read(12345, &mut buf);
    }
}
