//! Host memory over real process memory: the DMA boundary with real
//! pointers.
//!
//! [`ProcessMemory`] is the [`HostMemory`] a runtime uses when the HCA
//! serves applications in the same process: addresses are the real
//! addresses of bytes in this process. Like [`SimMemory`], it is safe to
//! call with any address: anything outside the memory it knows is a
//! [`MemFault`], never a dereference.
//!
//! It knows two kinds of memory:
//! - **allocations** ([`DriverMemory::allocate`]: rings, doorbell records,
//!   buffers the library allocates), made in shared memory
//!   ([`SharedMemory`]: a memfd mapped `MAP_SHARED`, whole zeroed pages,
//!   counted against the budget). An access to them takes no lock: the
//!   mapping's bounds and a liveness bit per page are checked with one
//!   atomic load, and a freed page faults from then on;
//! - **external ranges** of the application's own memory, added with the
//!   unsafe [`ProcessMemory::register_external`] and removed with
//!   [`ProcessMemory::unregister_external`] (not counted against the
//!   budget, never freed by `ProcessMemory`), checked against a registry
//!   under its lock.
//!
//! What follows is about the external ranges; the shared memory's own
//! rules are in [`crate::shm`].
//!
//! # How accesses stay sound
//!
//! - The registry lock is held across the range check *and* the access,
//!   and a range only leaves the registry while that lock is held, so a
//!   concurrent `unregister_external` cannot pull memory away mid-access.
//! - Each range keeps the pointer it came from, and an access uses that
//!   pointer offset inside its bounds, so accesses carry the provenance of
//!   the allocation they touch.
//! - Byte copies go through raw pointers (`copy_nonoverlapping`, or
//!   `copy` when the caller's buffer overlaps the range); no `&`/`&mut`
//!   reference into host memory is ever created, since the application may
//!   use that memory concurrently.
//! - Ring indices and RDMA atomics use real atomic instructions
//!   ([`AtomicU32`], [`AtomicU64`]) on naturally aligned words; an
//!   unaligned word is a fault.
//!
//! RDMA atomics act on 8-byte words in the host's native byte order: on
//! x86-64 (and aarch64 Linux) that is little-endian, the same layout
//! [`SimMemory`] uses.
//!
//! [`SimMemory`]: uroce_device::mem::SimMemory

use crate::shm::{SharedMemory, ShmError};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, MemFault};

/// One known range of process memory.
#[derive(Debug)]
struct Range {
    /// Its first byte; the pointer it was allocated or registered with.
    base: NonNull<u8>,
    /// Its length in bytes (at least 1, at most `isize::MAX`).
    len: usize,
}

// SAFETY: a `Range` is a description of memory (a pointer and a length),
// not a borrow of it. The pointer is only dereferenced by `ProcessMemory`
// while the registry lock is held, after the range check, with raw-pointer
// copies and atomic instructions that are valid from any thread; the
// memory it points to is guaranteed by the caller of `register_external`
// to stay valid for device access until unregistered.
unsafe impl Send for Range {}

struct Registry {
    /// External ranges by start address; they never overlap.
    ranges: BTreeMap<u64, Range>,
    /// Bytes of external ranges currently registered.
    external_bytes: u64,
}

impl Registry {
    /// The pointer to `[addr, addr + len)` if it lies inside one range.
    fn find(&self, addr: u64, len: u64) -> Option<NonNull<u8>> {
        let (&start, range) = self.ranges.range(..=addr).next_back()?;
        let offset = addr - start;
        let end = offset.checked_add(len)?;
        if end > range.len as u64 {
            return None;
        }
        // `offset <= end <= range.len <= isize::MAX`, so the cast is exact.
        let offset = offset as usize;
        // SAFETY: `offset <= range.len`, so the result is inside the range's
        // allocation or one past its end, and `range.len <= isize::MAX`.
        Some(unsafe { range.base.add(offset) })
    }

    /// Whether `[start, start + len)` overlaps a known range (`len > 0`,
    /// no overflow).
    fn overlaps(&self, start: u64, len: u64) -> bool {
        let end = start + len;
        // Ranges are disjoint, so the one starting last before `end` is the
        // one reaching furthest among those starting before `end`.
        self.ranges
            .range(..end)
            .next_back()
            .is_some_and(|(&other, range)| other + range.len as u64 > start)
    }
}

/// Host memory made of real process memory, with every access checked.
///
/// `Send + Sync`: the HCA may use it from any thread while the application
/// allocates and frees from others.
pub struct ProcessMemory {
    /// Where allocations (rings, buffers the library allocates) live.
    arena: SharedMemory,
    /// The application's own ranges.
    registry: Mutex<Registry>,
    /// Faults of accesses outside the arena.
    faults: AtomicU64,
}

impl ProcessMemory {
    /// Empty memory that allocates at most `budget_bytes` in all (external
    /// ranges do not count).
    pub fn new(budget_bytes: u64) -> Result<ProcessMemory, ShmError> {
        Ok(ProcessMemory {
            arena: SharedMemory::create(budget_bytes)?,
            registry: Mutex::new(Registry { ranges: BTreeMap::new(), external_bytes: 0 }),
            faults: AtomicU64::new(0),
        })
    }

    /// How many faults were reported.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed) + self.arena.faults()
    }

    /// Bytes currently allocated by [`DriverMemory::allocate`] (whole
    /// pages).
    pub fn allocated_bytes(&self) -> u64 {
        self.arena.allocated_bytes()
    }

    /// The shared memory allocations come from (a memfd another process
    /// could map).
    pub fn arena(&self) -> &SharedMemory {
        &self.arena
    }

    /// Bytes of application memory currently registered.
    pub fn external_bytes(&self) -> u64 {
        self.lock().external_bytes
    }

    /// Lets the device read and write the application's memory
    /// `[ptr, ptr + len)`; returns its address (`ptr` as a `u64`).
    ///
    /// Fails with [`AllocError::BadRequest`] for a null pointer, a zero
    /// length, a range that wraps or is longer than `isize::MAX`, or a
    /// range that overlaps one already known (an own allocation or another
    /// external range).
    ///
    /// # Safety
    ///
    /// Until [`ProcessMemory::unregister_external`] removes it (or this
    /// `ProcessMemory` is dropped):
    /// - the whole range must stay valid for reads and writes: allocated
    ///   (not freed, not reallocated, for a `Vec` not grown or dropped) and
    ///   not read-only;
    /// - the caller accepts that the device reads and writes it at any
    ///   time, from any thread, with plain copies and atomic instructions
    ///   (DMA semantics). The application must not hold `&`/`&mut`
    ///   references into it while the device may access it, and must not
    ///   race non-atomic accesses with the device's: access it through raw
    ///   pointers or atomics, or only when the device is known to be idle
    ///   on it (for instance after the completion of the work using it).
    pub unsafe fn register_external(&self, ptr: *mut u8, len: usize) -> Result<u64, AllocError> {
        let base = NonNull::new(ptr).ok_or(AllocError::BadRequest)?;
        if len == 0 || len > isize::MAX as usize {
            return Err(AllocError::BadRequest);
        }
        let start = ptr.addr() as u64;
        let len64 = len as u64;
        if start.checked_add(len64).is_none() {
            return Err(AllocError::BadRequest);
        }
        if self.arena.contains(start) || self.arena.contains(start + len64 - 1) {
            // Memory the library allocated is reachable already.
            return Err(AllocError::BadRequest);
        }
        let mut registry = self.lock();
        if registry.overlaps(start, len64) {
            return Err(AllocError::BadRequest);
        }
        registry.ranges.insert(start, Range { base, len });
        registry.external_bytes += len64;
        Ok(start)
    }

    /// Removes an external range registered at `addr`; returns whether
    /// there was one. After it returns, the device no longer touches the
    /// range (an access in progress holds the registry lock and finishes
    /// first). Own allocations are not affected: free them with
    /// [`HostMemory::free`].
    pub fn unregister_external(&self, addr: u64) -> bool {
        let mut registry = self.lock();
        let Some(range) = registry.ranges.remove(&addr) else { return false };
        registry.external_bytes -= range.len as u64;
        true
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every update of the registry is complete before anything that can
        // panic, so a poisoned lock still guards a consistent registry.
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fault(&self, addr: u64, len: u64) -> MemFault {
        self.faults.fetch_add(1, Ordering::Relaxed);
        MemFault { addr, len }
    }

    /// Runs `f` on the pointer to `[addr, addr + len)` with the registry
    /// locked, if the bytes lie inside one known range and `addr` is a
    /// multiple of `align`. The pointer is valid for reads and writes of
    /// `len` bytes for as long as `f` runs.
    fn with_range<R>(
        &self,
        addr: u64,
        len: u64,
        align: u64,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, MemFault> {
        if addr % align != 0 {
            return Err(self.fault(addr, len));
        }
        let registry = self.lock();
        match registry.find(addr, len) {
            // The guard lives until the end of this arm: `f` runs under the
            // lock, so the range cannot be freed or unregistered meanwhile.
            Some(ptr) => Ok(f(ptr.as_ptr())),
            None => {
                drop(registry);
                Err(self.fault(addr, len))
            }
        }
    }
}

impl core::fmt::Debug for ProcessMemory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let registry = self.lock();
        f.debug_struct("ProcessMemory")
            .field("ranges", &registry.ranges.len())
            .field("allocated_bytes", &self.arena.allocated_bytes())
            .field("external_bytes", &registry.external_bytes)
            .field("faults", &self.faults())
            .finish()
    }
}

/// Whether `[a, a + len)` and `[b, b + len)` share a byte.
fn overlapping(a: *const u8, b: *const u8, len: usize) -> bool {
    let (a, b) = (a.addr(), b.addr());
    a.abs_diff(b) < len
}

impl HostMemory for ProcessMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.read(addr, dst),
            false => self.external_read(addr, dst),
        }
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.write(addr, src),
            false => self.external_write(addr, src),
        }
    }

    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.load_acquire_u32(addr),
            false => self.external_load_acquire_u32(addr),
        }
    }

    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.store_release_u32(addr, value),
            false => self.external_store_release_u32(addr, value),
        }
    }

    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.compare_swap_u64(addr, compare, swap),
            false => self.external_compare_swap_u64(addr, compare, swap),
        }
    }

    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.fetch_add_u64(addr, add),
            false => self.external_fetch_add_u64(addr, add),
        }
    }

    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        match self.arena.contains(addr) {
            true => self.arena.store_u64(addr, value),
            false => self.external_store_u64(addr, value),
        }
    }
}

/// Accesses to the application's own (external) ranges, under the
/// registry lock.
impl ProcessMemory {
    fn external_read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        let len = dst.len();
        self.with_range(addr, len as u64, 1, |src| {
            let dst = dst.as_mut_ptr();
            if overlapping(src, dst, len) {
                // SAFETY: `src` is valid for `len` bytes of reads (checked
                // under the registry lock, which is held, and ranges are
                // only removed under it), `dst` for `len` bytes of writes
                // (a `&mut [u8]` of that length); `u8` needs no alignment.
                // The buffers overlap (the caller passed a slice of an
                // external range), so `copy` (memmove) is used.
                unsafe { core::ptr::copy(src, dst, len) }
            } else {
                // SAFETY: as above, and the buffers do not overlap.
                unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
            }
        })
    }

    fn external_write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        let len = src.len();
        self.with_range(addr, len as u64, 1, |dst| {
            let src = src.as_ptr();
            if overlapping(src, dst, len) {
                // SAFETY: `dst` is valid for `len` bytes of writes (checked
                // under the registry lock, which is held, and ranges are
                // only removed under it), `src` for `len` bytes of reads (a
                // `&[u8]` of that length); `u8` needs no alignment. They
                // overlap, so `copy` (memmove) is used.
                unsafe { core::ptr::copy(src, dst, len) }
            } else {
                // SAFETY: as above, and the buffers do not overlap.
                unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
            }
        })
    }

    fn external_load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        self.with_range(addr, 4, 4, |ptr| {
            // SAFETY: `ptr` is valid for 4 bytes of reads and writes (range
            // check under the registry lock, which is held; ranges are only
            // removed under it) and 4-byte aligned (`addr % 4 == 0`, and
            // `addr` is the pointer's address). Other accesses to the word
            // are atomic or, by `register_external`'s contract, not racing.
            let word = unsafe { AtomicU32::from_ptr(ptr.cast()) };
            word.load(Ordering::Acquire)
        })
    }

    fn external_store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        self.with_range(addr, 4, 4, |ptr| {
            // SAFETY: as in `load_acquire_u32`: valid for 4 bytes under the
            // held registry lock, and 4-byte aligned.
            let word = unsafe { AtomicU32::from_ptr(ptr.cast()) };
            word.store(value, Ordering::Release)
        })
    }

    fn external_compare_swap_u64(
        &self,
        addr: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemFault> {
        self.with_range(addr, 8, 8, |ptr| {
            // SAFETY: `ptr` is valid for 8 bytes of reads and writes (range
            // check under the registry lock, which is held; ranges are only
            // removed under it) and 8-byte aligned (`addr % 8 == 0`).
            let word = unsafe { AtomicU64::from_ptr(ptr.cast()) };
            match word.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) | Err(old) => old,
            }
        })
    }

    fn external_fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        self.with_range(addr, 8, 8, |ptr| {
            // SAFETY: as in `compare_swap_u64`: valid for 8 bytes under the
            // held registry lock, and 8-byte aligned.
            let word = unsafe { AtomicU64::from_ptr(ptr.cast()) };
            word.fetch_add(add, Ordering::AcqRel)
        })
    }

    fn external_store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.with_range(addr, 8, 8, |ptr| {
            // SAFETY: as in `compare_swap_u64`: valid for 8 bytes under the
            // held registry lock, and 8-byte aligned.
            let word = unsafe { AtomicU64::from_ptr(ptr.cast()) };
            word.store(value, Ordering::Release)
        })
    }
}

impl DriverMemory for ProcessMemory {
    unsafe fn register_external(&self, ptr: *mut u8, len: usize) -> Result<u64, AllocError> {
        // SAFETY: the trait method's contract is the inherent method's,
        // forwarded unchanged from our caller.
        unsafe { ProcessMemory::register_external(self, ptr, len) }
    }

    fn unregister_external(&self, addr: u64) -> bool {
        ProcessMemory::unregister_external(self, addr)
    }

    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        self.arena.allocate(len, align)
    }

    fn free(&self, addr: u64) -> bool {
        self.arena.free(addr)
    }
}

// `ProcessMemory` must stay usable from any thread.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ProcessMemory>();
};
