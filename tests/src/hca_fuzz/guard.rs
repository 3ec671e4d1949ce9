//! Host memory that fails the run on a stray access: every access the
//! device makes must fall in a ring or a registered range.

use super::*;

/// What an allocation is for, as the harness declares it before it (or the
/// verbs library) allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocKind {
    /// A WQE, SRQ or CQ ring with its indices: the device may touch all of it.
    Ring,
    /// A data buffer: the device may touch only the parts registered as
    /// memory regions.
    Buffer,
}

/// One registered memory region, as the harness registered it.
#[derive(Debug, Clone)]
pub(super) struct GuardRegion {
    pub(super) key: u32,
    pub(super) start: u64,
    pub(super) len: u64,
    /// The device may read it (false for a region of a protection domain
    /// no QP uses: nothing may touch it).
    pub(super) read: bool,
    /// The device may write it (the region has LOCAL_WRITE).
    pub(super) write: bool,
    pub(super) label: &'static str,
}

#[derive(Debug)]
pub(super) struct GuardState {
    /// Live allocations: start → (length, kind).
    pub(super) allocations: BTreeMap<u64, (u64, AllocKind)>,
    pub(super) regions: Vec<GuardRegion>,
    pub(super) mode: AllocKind,
    /// Allocations since the last [`GuardedMemory::take_recent`].
    pub(super) recent: Vec<(u64, u64)>,
    /// Accesses checked, for statistics.
    pub(super) checked: u64,
}

/// Host memory that delegates to a [`SimMemory`] but panics when the
/// device reads or writes anything that is neither inside a ring the
/// driver allocated nor inside a registered memory region's host range;
/// and when it writes a region it may not write (no LOCAL_WRITE).
///
/// [`SimMemory::strict`] only catches accesses outside *allocated* memory;
/// rings and MR buffers are allocated, so a stray access that stays inside
/// an allocation (past the end of a region registered over part of its
/// buffer, a slot of a destroyed QP's ring...) goes unseen there. Here the
/// harness says which allocations are rings and which bytes are
/// registered, and everything else is off limits: the buffers of partial
/// registrations leave unregistered bytes on both sides of their region,
/// and [`SimMemory`] leaves unmapped gaps between allocations.
///
/// The application's own accesses go through [`GuardedMemory::inner`]
/// (pattern fills, hostile ring writes), or through the verbs library,
/// which only touches rings.
pub struct GuardedMemory {
    pub(super) inner: SimMemory,
    pub(super) state: Mutex<GuardState>,
}

impl GuardedMemory {
    /// A guarded arena of at most `budget_bytes`.
    pub fn new(budget_bytes: u64) -> GuardedMemory {
        GuardedMemory {
            inner: SimMemory::new(budget_bytes),
            state: Mutex::new(GuardState {
                allocations: BTreeMap::new(),
                regions: Vec::new(),
                mode: AllocKind::Buffer,
                recent: Vec::new(),
                checked: 0,
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, GuardState> {
        // A panic while the lock is held (a caught violation) must not hide
        // later ones behind a poisoned mutex.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The unguarded memory, for the application's own accesses.
    pub fn inner(&self) -> &SimMemory {
        &self.inner
    }

    /// What the next allocations are for.
    pub fn set_mode(&self, kind: AllocKind) {
        self.lock().mode = kind;
    }

    /// The allocations (start, length) made since the last call.
    pub fn take_recent(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.lock().recent)
    }

    /// Declares a registered region `[start, start + len)` under `key`.
    pub fn add_region(
        &self,
        key: u32,
        start: u64,
        len: u64,
        read: bool,
        write: bool,
        label: &'static str,
    ) {
        self.lock().regions.push(GuardRegion { key, start, len, read, write, label });
    }

    /// Forgets the region registered under `key` (deregistered).
    pub fn remove_region(&self, key: u32) {
        self.lock().regions.retain(|r| r.key != key);
    }

    /// Accesses checked so far.
    pub fn checked(&self) -> u64 {
        self.lock().checked
    }

    pub(super) fn check(&self, what: &str, addr: u64, len: u64, write: bool) {
        if len == 0 {
            return;
        }
        let mut state = self.lock();
        state.checked += 1;
        let Some(end) = addr.checked_add(len) else {
            drop(state);
            panic!("GuardedMemory: {what} of {len} bytes at {addr:#x} wraps the address space");
        };
        let in_ring = state.allocations.range(..=addr).next_back().is_some_and(
            |(&start, &(alloc_len, kind))| kind == AllocKind::Ring && end <= start + alloc_len,
        );
        if in_ring {
            return;
        }
        let covering: Vec<&GuardRegion> =
            state.regions.iter().filter(|r| addr >= r.start && end <= r.start + r.len).collect();
        let allowed = covering.iter().any(|r| if write { r.write } else { r.read });
        if allowed {
            return;
        }
        let message = if covering.is_empty() {
            format!(
                "GuardedMemory: {what} of {len} bytes at {addr:#x} is outside every ring and \
                 registered region ({})",
                describe(&state, addr)
            )
        } else {
            let labels: Vec<&str> = covering.iter().map(|r| r.label).collect();
            format!(
                "GuardedMemory: {what} of {len} bytes at {addr:#x} touches region(s) {labels:?}, \
                 which the device may not {}",
                if write { "write" } else { "read" }
            )
        };
        drop(state);
        panic!("{message}");
    }
}

/// Where `addr` is relative to the nearest allocation, for messages.
pub(super) fn describe(state: &GuardState, addr: u64) -> String {
    match state.allocations.range(..=addr).next_back() {
        Some((&start, &(len, kind))) if addr < start + len => {
            let regions: Vec<String> = state
                .regions
                .iter()
                .filter(|r| r.start >= start && r.start < start + len)
                .map(|r| {
                    format!(
                        "{} at +{:#x}..+{:#x}",
                        r.label,
                        r.start - start,
                        r.start - start + r.len
                    )
                })
                .collect();
            format!("offset {:#x} of a {kind:?} allocation of {len:#x} bytes; regions there: {regions:?}", addr - start)
        }
        Some((&start, &(len, kind))) => {
            format!("{:#x} bytes past a {kind:?} allocation of {len:#x} bytes", addr - start - len)
        }
        None => "below every allocation".to_string(),
    }
}

impl HostMemory for GuardedMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        self.check("read", addr, dst.len() as u64, false);
        self.inner.read(addr, dst)
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        self.check("write", addr, src.len() as u64, true);
        self.inner.write(addr, src)
    }

    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        self.check("index load", addr, 4, false);
        self.inner.load_acquire_u32(addr)
    }

    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        self.check("index store", addr, 4, true);
        self.inner.store_release_u32(addr, value)
    }

    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        self.check("compare-and-swap", addr, 8, true);
        self.inner.compare_swap_u64(addr, compare, swap)
    }

    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        self.check("fetch-and-add", addr, 8, true);
        self.inner.fetch_add_u64(addr, add)
    }

    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.check("atomic store", addr, 8, true);
        self.inner.store_u64(addr, value)
    }
}

impl DriverMemory for GuardedMemory {
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        let addr = self.inner.allocate(len, align)?;
        let mut state = self.lock();
        let kind = state.mode;
        state.allocations.insert(addr, (len, kind));
        state.recent.push((addr, len));
        Ok(addr)
    }

    fn free(&self, addr: u64) -> bool {
        self.lock().allocations.remove(&addr);
        self.inner.free(addr)
    }
}
