//! Shared memory: a memfd mapped `MAP_SHARED`, where rings, doorbell
//! records and the buffers a driver allocates live, so that a device in
//! another process can map the same memory and reach them (DMA).
//!
//! ```text
//! memfd offset 0     header: magic, data pages            (64 bytes)
//!              64    liveness bits, one per data page     (atomic u64 words)
//!              meta  data pages, 4 KiB each               (meta: a page multiple)
//! ```
//!
//! A **device address** is the creator's virtual address of a data byte
//! (so in the creating process an address is a real pointer, as with
//! [`crate::process_mem::ProcessMemory`]); a process that maps the memfd
//! later ([`SharedView`]) translates those addresses into its own mapping.
//!
//! Allocations are whole pages. Every access is checked against the
//! mapping's bounds and the liveness bit of every page it touches, both
//! kept in the shared memory itself: no lock is taken per access, and a
//! page freed while in use faults from then on (the words of a freed page
//! stay mapped, so a race with `free` reads stale bytes, never unmapped
//! memory). Freed pages are punched out of the memfd, which returns them
//! to the system and makes them read as zeros when allocated again.
//!
//! Byte copies use raw pointers (`copy_nonoverlapping`); no reference into
//! the shared pages is ever made, since the other process may write them at
//! any time. Ring indices and RDMA atomics are atomic instructions on
//! naturally aligned words, which are atomic across processes sharing the
//! mapping.

use rustix::fd::{AsFd, OwnedFd};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, MemFault};

/// Bytes per page: the allocation unit and the liveness granule.
pub const PAGE: u64 = 4096;
/// The header's first word.
const MAGIC: u64 = u64::from_le_bytes(*b"UROCESM1");
/// Where the liveness bits start.
const BITS_OFFSET: u64 = 64;

/// What went wrong creating or mapping shared memory.
#[derive(Debug)]
pub enum ShmError {
    /// A system call failed.
    Os(&'static str, rustix::io::Errno),
    /// The memfd is not uroce shared memory, or its size does not match
    /// its header.
    BadHeader,
    /// A size of zero or past what the address space holds.
    BadSize,
}

impl core::fmt::Display for ShmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ShmError::Os(call, errno) => write!(f, "{call}: {errno}"),
            ShmError::BadHeader => write!(f, "not uroce shared memory (bad header or size)"),
            ShmError::BadSize => write!(f, "bad shared memory size"),
        }
    }
}

impl std::error::Error for ShmError {}

/// The memfd's layout for `data_pages` data pages: (bytes before the data,
/// total bytes).
fn layout(data_pages: u64) -> Option<(u64, u64)> {
    let words = data_pages.div_ceil(64);
    let meta = (BITS_OFFSET + words * 8).next_multiple_of(PAGE);
    let total = meta.checked_add(data_pages.checked_mul(PAGE)?)?;
    (total <= isize::MAX as u64).then_some((meta, total))
}

/// One mapping of the memfd, with the address translation and the
/// checked access every user shares.
struct Mapping {
    fd: OwnedFd,
    /// The first byte of the mapping.
    ptr: NonNull<u8>,
    /// Bytes mapped.
    total: usize,
    /// Offset of data page 0 in the memfd.
    meta: u64,
    /// Data pages.
    pages: u64,
    /// The device address of data page 0.
    addr_base: u64,
    /// Accesses refused.
    faults: AtomicU64,
}

// SAFETY: a `Mapping` owns a `MAP_SHARED` mapping that stays valid until it
// is dropped (munmap). Every access through it goes through raw-pointer
// copies or atomic instructions within its bounds, which are valid from any
// thread; no reference into the mapped bytes is ever created.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only reads its own fields and does checked
// raw or atomic accesses to the shared bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `total` bytes of `fd`, read-write and shared.
    fn map(fd: OwnedFd, total: u64) -> Result<Mapping, ShmError> {
        let len = usize::try_from(total).map_err(|_| ShmError::BadSize)?;
        // SAFETY: a fresh mapping at an address the kernel picks (null
        // hint), so it overlaps nothing of ours; `fd` is a memfd at least
        // `len` bytes long (the caller sized or checked it). The mapping is
        // only touched through `Mapping`'s checked accessors and unmapped
        // once, in `drop`.
        let ptr = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| ShmError::Os("mmap", e))?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(ShmError::BadSize)?;
        Ok(Mapping {
            fd,
            ptr,
            total: len,
            meta: 0,
            pages: 0,
            addr_base: 0,
            faults: AtomicU64::new(0),
        })
    }

    /// The 64-bit word at byte `offset` of the mapping (8-aligned, inside).
    #[inline]
    fn word(&self, offset: u64) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.total as u64, "shm word 0x{offset:x}");
        // SAFETY: inside the mapping (checked above), 8-byte aligned (the
        // mapping is page-aligned and `offset` a multiple of 8), valid for
        // the mapping's life, which bounds `&self`; shared words are only
        // ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset as usize).cast()) }
    }

    /// The liveness word of data page `page`, and its bit.
    #[inline]
    fn live_bit(&self, page: u64) -> (&AtomicU64, u64) {
        (self.word(BITS_OFFSET + page / 64 * 8), 1 << (page % 64))
    }

    #[inline]
    fn page_live(&self, page: u64) -> bool {
        let (word, bit) = self.live_bit(page);
        word.load(Ordering::Acquire) & bit != 0
    }

    fn set_live(&self, first: u64, count: u64, live: bool) {
        for page in first..first + count {
            let (word, bit) = self.live_bit(page);
            if live {
                word.fetch_or(bit, Ordering::Release);
            } else {
                word.fetch_and(!bit, Ordering::Release);
            }
        }
    }

    /// The pointer to `[addr, addr + len)`, if it lies in live pages.
    /// Every ring index, WQE and CQE access of both sides comes here: one
    /// subtraction and two comparisons for the bounds, and for the common
    /// access within one page a single liveness bit.
    #[inline(always)]
    fn resolve(&self, addr: u64, len: u64) -> Result<*mut u8, MemFault> {
        let data_len = self.pages * PAGE;
        // Below the base, the subtraction wraps past `data_len`.
        let offset = addr.wrapping_sub(self.addr_base);
        if offset > data_len || len > data_len - offset {
            return Err(self.fault(MemFault { addr, len }));
        }
        if len > 0 {
            let (first, last) = (offset / PAGE, (offset + len - 1) / PAGE);
            let live = self.page_live(first) && (first + 1..=last).all(|p| self.page_live(p));
            if !live {
                return Err(self.fault(MemFault { addr, len }));
            }
        }
        // SAFETY: `meta + offset + len <= meta + data_len = total`: inside
        // the mapping.
        Ok(unsafe { self.ptr.as_ptr().add((self.meta + offset) as usize) })
    }

    /// [`Mapping::resolve`] for an aligned word (ring indices and flags,
    /// atomics): being aligned, it never crosses a page, so one liveness
    /// bit answers.
    #[inline(always)]
    fn resolve_word<T>(&self, addr: u64) -> Result<*mut T, MemFault> {
        const { assert!(PAGE % core::mem::size_of::<T>() as u64 == 0) };
        let size = core::mem::size_of::<T>() as u64;
        let offset = addr.wrapping_sub(self.addr_base);
        // Below the base, the subtraction wraps past the data. Both the
        // address and its offset must be aligned (a view's base comes from
        // the driver).
        if (addr | offset) % size != 0
            || offset >= self.pages * PAGE
            || !self.page_live(offset / PAGE)
        {
            return Err(self.fault(MemFault { addr, len: size }));
        }
        // SAFETY: `offset` is a multiple of `size` below `pages * PAGE`, a
        // multiple of `size` too, so `offset + size <= pages * PAGE`: inside
        // the mapping, and aligned (the data starts on a page).
        Ok(unsafe { self.ptr.as_ptr().add((self.meta + offset) as usize) }.cast())
    }

    fn fault(&self, fault: MemFault) -> MemFault {
        self.faults.fetch_add(1, Ordering::Relaxed);
        fault
    }

    #[inline]
    fn u32_at(&self, addr: u64) -> Result<&AtomicU32, MemFault> {
        let ptr = self.resolve_word::<u32>(addr)?;
        // SAFETY: a checked, 4-aligned word of the mapping, valid while
        // `&self` is; shared words are accessed atomically.
        Ok(unsafe { AtomicU32::from_ptr(ptr) })
    }

    #[inline]
    fn u64_at(&self, addr: u64) -> Result<&AtomicU64, MemFault> {
        let ptr = self.resolve_word::<u64>(addr)?;
        // SAFETY: as in `u32_at`, 8-aligned.
        Ok(unsafe { AtomicU64::from_ptr(ptr) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; nothing borrows
        // it (accessors borrow `&self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.total) };
    }
}

impl HostMemory for Mapping {
    #[inline]
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        let src = self.resolve(addr, dst.len() as u64)?;
        // SAFETY: `src` is valid for `dst.len()` bytes (checked), `dst` is
        // our own buffer, not inside the mapping (a `&mut [u8]` cannot
        // alias shared pages: we never hand out references to them).
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    #[inline]
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        let dst = self.resolve(addr, src.len() as u64)?;
        // SAFETY: as in `read`, the other way.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    #[inline]
    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        Ok(self.u32_at(addr)?.load(Ordering::Acquire))
    }

    #[inline]
    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        self.u32_at(addr)?.store(value, Ordering::Release);
        Ok(())
    }

    #[inline]
    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        let word = self.u64_at(addr)?;
        Ok(match word.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(old) | Err(old) => old,
        })
    }

    #[inline]
    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        Ok(self.u64_at(addr)?.fetch_add(add, Ordering::AcqRel))
    }

    #[inline]
    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.u64_at(addr)?.store(value, Ordering::Release);
        Ok(())
    }
}

/// The allocator's books (driver side only).
#[derive(Default)]
struct Books {
    /// Free runs of data pages: first page → count.
    free: BTreeMap<u64, u64>,
    /// Live allocations: first page → count.
    live: BTreeMap<u64, u64>,
}

impl Books {
    /// First fit: a run of `count` pages starting at a multiple of
    /// `align_pages`.
    fn take(&mut self, count: u64, align_pages: u64) -> Option<u64> {
        let (run, run_len, start) = self.free.iter().find_map(|(&run, &len)| {
            let start = run.checked_next_multiple_of(align_pages)?;
            (start.checked_add(count)? <= run + len).then_some((run, len, start))
        })?;
        self.free.remove(&run);
        if start > run {
            self.free.insert(run, start - run);
        }
        if start + count < run + run_len {
            self.free.insert(start + count, run + run_len - start - count);
        }
        self.live.insert(start, count);
        Some(start)
    }

    /// Returns the allocation at `first` to the free runs, merging with
    /// its neighbours; its page count, if there was one.
    fn give_back(&mut self, first: u64) -> Option<u64> {
        let count = self.live.remove(&first)?;
        let (mut start, mut len) = (first, count);
        if let Some((&before, &before_len)) = self.free.range(..first).next_back() {
            if before + before_len == first {
                self.free.remove(&before);
                (start, len) = (before, len + before_len);
            }
        }
        if let Some(after_len) = self.free.remove(&(first + count)) {
            len += after_len;
        }
        self.free.insert(start, len);
        Some(count)
    }
}

/// Shared memory as the driver (its creator) sees it: a [`DriverMemory`]
/// whose allocations a device in another process can reach through a
/// [`SharedView`] of the same memfd.
pub struct SharedMemory {
    map: Mapping,
    books: Mutex<Books>,
    allocated_bytes: AtomicU64,
}

impl SharedMemory {
    /// A new memfd with room for `data_bytes` (rounded up to pages) of
    /// rings and buffers, mapped here. Its pages take no memory until used.
    pub fn create(data_bytes: u64) -> Result<SharedMemory, ShmError> {
        let pages = data_bytes.div_ceil(PAGE);
        let (meta, total) = layout(pages).filter(|_| pages > 0).ok_or(ShmError::BadSize)?;
        let fd = rustix::fs::memfd_create("uroce-shm", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| ShmError::Os("memfd_create", e))?;
        rustix::fs::ftruncate(&fd, total).map_err(|e| ShmError::Os("ftruncate", e))?;
        let mut map = Mapping::map(fd, total)?;
        map.meta = meta;
        map.pages = pages;
        map.addr_base = map.ptr.as_ptr() as u64 + meta;
        map.word(0).store(MAGIC, Ordering::Relaxed);
        map.word(8).store(pages, Ordering::Release);
        let mut books = Books::default();
        books.free.insert(0, pages);
        Ok(SharedMemory { map, books: Mutex::new(books), allocated_bytes: AtomicU64::new(0) })
    }

    /// The memfd, to hand to the process that will map it.
    pub fn fd(&self) -> rustix::fd::BorrowedFd<'_> {
        self.map.fd.as_fd()
    }

    /// The device address of the first data byte (a [`SharedView`] needs
    /// it to translate).
    pub fn addr_base(&self) -> u64 {
        self.map.addr_base
    }

    /// Whether `addr` is one of this memory's device addresses.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr.checked_sub(self.map.addr_base).is_some_and(|o| o < self.map.pages * PAGE)
    }

    /// Bytes in live allocations.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes.load(Ordering::Relaxed)
    }

    /// Accesses refused so far.
    pub fn faults(&self) -> u64 {
        self.map.faults.load(Ordering::Relaxed)
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The device's DMA view of a mapping: both the creator's handle and a
/// peer's view reach the memfd through their `map`.
macro_rules! host_memory_through_map {
    ($($owner:ty),+) => {$(
        impl HostMemory for $owner {
            #[inline]
            fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
                self.map.read(addr, dst)
            }
            #[inline]
            fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
                self.map.write(addr, src)
            }
            #[inline]
            fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
                self.map.load_acquire_u32(addr)
            }
            #[inline]
            fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
                self.map.store_release_u32(addr, value)
            }
            #[inline]
            fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
                self.map.compare_swap_u64(addr, compare, swap)
            }
            #[inline]
            fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
                self.map.fetch_add_u64(addr, add)
            }
            #[inline]
            fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
                self.map.store_u64(addr, value)
            }
        }
    )+};
}

host_memory_through_map!(SharedMemory, SharedView);

impl DriverMemory for SharedMemory {
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        let data_len = self.map.pages * PAGE;
        if len == 0 || !align.is_power_of_two() || len > data_len || align > data_len {
            return Err(AllocError::BadRequest);
        }
        let count = len.div_ceil(PAGE);
        let first =
            self.books().take(count, (align / PAGE).max(1)).ok_or(AllocError::OutOfMemory)?;
        // The pages read as zeros: never used, or punched out when freed.
        self.map.set_live(first, count, true);
        self.allocated_bytes.fetch_add(count * PAGE, Ordering::Relaxed);
        Ok(self.map.addr_base + first * PAGE)
    }

    fn free(&self, addr: u64) -> bool {
        let Some(offset) = addr.checked_sub(self.map.addr_base).filter(|o| o % PAGE == 0) else {
            return false;
        };
        let first = offset / PAGE;
        let mut books = self.books();
        let Some(&count) = books.live.get(&first) else { return false };
        // Dead before the pages go back: an access racing the free faults
        // or reads stale bytes of mapped memory, never another allocation's.
        self.map.set_live(first, count, false);
        let punch = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        if rustix::fs::fallocate(&self.map.fd, punch, self.map.meta + offset, count * PAGE).is_err()
        {
            // Without a hole the pages keep their bytes: zero them by hand.
            for page in first..first + count {
                let at = self.map.meta + page * PAGE;
                for word in (0..PAGE).step_by(8) {
                    self.map.word(at + word).store(0, Ordering::Relaxed);
                }
            }
        }
        books.give_back(first);
        self.allocated_bytes.fetch_sub(count * PAGE, Ordering::Relaxed);
        true
    }
}

/// Shared memory as a device in another process sees it: the creator's
/// memfd mapped here, its device addresses translated into this mapping.
/// The header is checked, not trusted; every access is checked as on the
/// creator's side.
pub struct SharedView {
    map: Mapping,
}

impl SharedView {
    /// Maps `fd`, shared memory made by [`SharedMemory::create`] whose
    /// data starts at device address `addr_base`.
    pub fn map(fd: OwnedFd, addr_base: u64) -> Result<SharedView, ShmError> {
        let size = rustix::fs::fstat(&fd).map_err(|e| ShmError::Os("fstat", e))?.st_size;
        let size = u64::try_from(size).map_err(|_| ShmError::BadHeader)?;
        if size < PAGE {
            return Err(ShmError::BadHeader);
        }
        let mut map = Mapping::map(fd, size)?;
        let pages = map.word(8).load(Ordering::Acquire);
        let layout = layout(pages).filter(|&(_, total)| total == size);
        let (Some((meta, _)), true) = (layout, map.word(0).load(Ordering::Relaxed) == MAGIC) else {
            return Err(ShmError::BadHeader);
        };
        if addr_base.checked_add(pages * PAGE).is_none() {
            return Err(ShmError::BadHeader);
        }
        map.meta = meta;
        map.pages = pages;
        map.addr_base = addr_base;
        Ok(SharedView { map })
    }

    /// Accesses refused so far.
    pub fn faults(&self) -> u64 {
        self.map.faults.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
