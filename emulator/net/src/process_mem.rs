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
//! # Registrations
//!
//! Every memory region over the application's memory is one registration,
//! and registrations may overlap or repeat, as on real hardware: a buffer
//! registered twice (other rights, another PD), a region per sub-buffer
//! and one over the whole. The registry keeps each of them, by start and
//! length (the very same range registered twice is counted twice), and
//! `unregister_external(addr, len)` removes one: the others stay usable.
//! They are never merged: an access is allowed when it lies inside *one*
//! registration (the HCA has already checked it against the region it
//! goes through, which is one), so an access never spans two allocations
//! that merely happen to be adjacent.
//!
//! The lookup runs on every access, under the lock. A registration that
//! contains `[addr, addr + len)` starts at or below `addr` and at or
//! above `addr + len - longest` (the longest registration's length); the
//! registry scans those back from `addr` and takes the first that
//! contains the access. When ranges do not overlap, the first one looked
//! at is the answer: one `O(log n)` step. Registering and unregistering
//! are rare, and may cost `O(n)` (finding the next longest).
//!
//! # How accesses stay sound
//!
//! - The registry lock is held across the range check *and* the access,
//!   and a registration only leaves the registry while that lock is held,
//!   so a concurrent `unregister_external` cannot pull memory away
//!   mid-access.
//! - Each registration keeps the pointer it came from (the first one's,
//!   when the same range is registered again), and an access uses the
//!   pointer of the registration that contains it, offset inside its
//!   bounds, so accesses carry the provenance of the allocation they
//!   touch.
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

/// One registration of the application's memory (or several of exactly
/// the same range).
#[derive(Debug)]
struct Registration {
    /// Its first byte: the pointer it was registered with (the first
    /// one's, when the same range is registered again).
    base: NonNull<u8>,
    /// How many times `[start, start + len)` is registered: each
    /// `unregister_external` of it takes one away.
    count: usize,
}

// SAFETY: a `Registration` is a description of memory (a pointer), not a
// borrow of it. The pointer is only dereferenced by `ProcessMemory` while
// the registry lock is held, after the range check, with raw-pointer
// copies and atomic instructions that are valid from any thread; the
// memory it points to is guaranteed by the callers of `register_external`
// to stay valid for device access until their registrations are removed.
unsafe impl Send for Registration {}

struct Registry {
    /// Every external registration by (start address, length). Ranges may
    /// overlap or repeat; they are never merged.
    ranges: BTreeMap<(u64, u64), Registration>,
    /// The length of the longest registration (0 when there is none): a
    /// registration containing `[addr, addr + len)` starts at
    /// `addr + len - longest` or later, which bounds the lookup's scan.
    longest: u64,
    /// Bytes of external registrations (a range registered twice counts
    /// twice).
    external_bytes: u64,
    /// How many registrations there are (a range registered twice counts
    /// twice).
    registrations: u64,
}

impl Registry {
    /// The pointer to `[addr, addr + len)` if it lies inside one
    /// registration, from that registration's pointer.
    ///
    /// The candidates start at or below `addr`, and at or above
    /// `addr + len - longest`; they are scanned from the one starting
    /// last (the longest first among those with the same start), and the
    /// first that contains the access wins. With disjoint ranges that is
    /// the first one looked at: one `O(log n)` step.
    fn find(&self, addr: u64, len: u64) -> Option<NonNull<u8>> {
        let end = addr.checked_add(len)?;
        // No registration is long enough for an access longer than
        // `longest`; otherwise `lowest <= addr`.
        let lowest = end.saturating_sub(self.longest);
        if lowest > addr {
            return None;
        }
        // Back from `addr`, stopping below `lowest` (one search, for the
        // upper end: the lower end is the tree's first leaf).
        let candidates = self.ranges.range(..=(addr, u64::MAX)).rev();
        for (&(start, range_len), registration) in candidates {
            if start < lowest {
                break;
            }
            // `start <= addr <= end`; does the registration reach `end`?
            if end - start <= range_len {
                // `addr - start <= range_len <= isize::MAX`: the cast is
                // exact.
                let offset = (addr - start) as usize;
                // SAFETY: `offset <= range_len`, so the result is inside
                // the registration's allocation or one past its end, and
                // `range_len <= isize::MAX`.
                return Some(unsafe { registration.base.add(offset) });
            }
        }
        None
    }

    /// Adds one registration of `[start, start + len)` from `base`.
    fn insert(&mut self, start: u64, len: u64, base: NonNull<u8>) {
        self.ranges
            .entry((start, len))
            .and_modify(|registration| registration.count += 1)
            .or_insert(Registration { base, count: 1 });
        self.longest = self.longest.max(len);
        self.external_bytes += len;
        self.registrations += 1;
    }

    /// Removes one registration of `[start, start + len)`; whether there
    /// was one.
    fn remove(&mut self, start: u64, len: u64) -> bool {
        let Some(registration) = self.ranges.get_mut(&(start, len)) else { return false };
        registration.count -= 1;
        if registration.count == 0 {
            self.ranges.remove(&(start, len));
            if len == self.longest {
                // Rare, and O(n): the next longest.
                self.longest = self.ranges.keys().map(|&(_, len)| len).max().unwrap_or(0);
            }
        }
        self.external_bytes -= len;
        self.registrations -= 1;
        true
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
            registry: Mutex::new(Registry {
                ranges: BTreeMap::new(),
                longest: 0,
                external_bytes: 0,
                registrations: 0,
            }),
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

    /// Bytes of application memory currently registered, every
    /// registration counted (a range registered twice counts twice).
    pub fn external_bytes(&self) -> u64 {
        self.lock().external_bytes
    }

    /// How many registrations of application memory there are.
    pub fn external_registrations(&self) -> u64 {
        self.lock().registrations
    }

    /// Lets the device read and write the application's memory
    /// `[ptr, ptr + len)`; returns its address (`ptr` as a `u64`).
    ///
    /// Registrations may overlap or repeat one another, as memory regions
    /// over the same buffer do (`ibv_reg_mr` twice on one buffer, a region
    /// per sub-buffer and one over the whole): each is a registration of
    /// its own, removed by its own [`ProcessMemory::unregister_external`],
    /// and an access must lie inside one of them.
    ///
    /// Fails with [`AllocError::BadRequest`] for a null pointer, a zero
    /// length, a range that wraps or is longer than `isize::MAX`, or a
    /// range that overlaps the library's own allocations (the shared
    /// memory, reachable already).
    ///
    /// # Safety
    ///
    /// Until [`ProcessMemory::unregister_external`] removes this
    /// registration (or this
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
        // The shared memory is one mapping: the range overlaps it if it
        // starts inside it or its first byte lies inside the range.
        let arena = self.arena.addr_base();
        if self.arena.contains(start)
            || (self.arena.contains(arena) && start <= arena && arena - start < len64)
        {
            // Memory the library allocated is reachable already.
            return Err(AllocError::BadRequest);
        }
        self.lock().insert(start, len64, base);
        Ok(start)
    }

    /// Removes one registration of `len` bytes at `addr` (the address
    /// [`ProcessMemory::register_external`] returned, and the length it
    /// was given); returns whether there was one. Other registrations,
    /// overlapping this one or of the very same range, stay. After it
    /// returns, the device no longer touches the range through this
    /// registration (an access in progress holds the registry lock and
    /// finishes first). Own allocations are not affected: free them with
    /// [`DriverMemory::free`].
    pub fn unregister_external(&self, addr: u64, len: usize) -> bool {
        self.lock().remove(addr, len as u64)
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
    /// locked, if the bytes lie inside one registration and `addr` is a
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
            .field("registrations", &registry.registrations)
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

    fn unregister_external(&self, addr: u64, len: usize) -> bool {
        ProcessMemory::unregister_external(self, addr, len)
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
