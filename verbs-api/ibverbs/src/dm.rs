//! Device memory (`ibv_alloc_dm`, `ibv_memcpy_to_dm`/`_from_dm`,
//! `ibv_reg_dm_mr`, `ibv_free_dm`). A software device's memory is host
//! memory: the library allocates it, copies in and out of it with the
//! device's rule (4-byte aligned offsets and lengths), and registers it
//! zero-based (the region's addresses start at 0).

use crate::abi::{ibv_context, ibv_dm, ibv_mr, ibv_pd};
use crate::ffi::{guard, guard_errno, guard_ptr, EINVAL};
use crate::pd::register_range;
use std::alloc::Layout;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The largest allocation (`max_dm_size` of `ibv_query_device_ex`).
pub const MAX_DM_SIZE: u64 = 256 << 10;
/// Copies in and out of device memory are in 4-byte words.
const DM_ALIGN: u64 = 4;

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
pub struct AllocDmAttr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// Device memory: the `ibv_dm` C sees, then its bytes.
#[repr(C)]
pub struct Dm {
    pub c: ibv_dm,
    mem: *mut u8,
    layout: Layout,
    /// MRs registered on it (it cannot be freed under them).
    refs: Arc<AtomicU32>,
}

impl Dm {
    /// # Safety
    ///
    /// `dm` is NULL or came from [`alloc_dm`] and is not freed.
    unsafe fn from_ptr<'a>(dm: *mut ibv_dm) -> Result<&'a Dm, c_int> {
        // SAFETY: the ibv_dm is the first field of a Dm.
        unsafe { dm.cast::<Dm>().as_ref() }.ok_or(EINVAL)
    }

    /// The address of `len` bytes at `offset`, if the copy is allowed.
    fn at(&self, offset: u64, len: usize) -> Result<*mut u8, c_int> {
        let len = len as u64;
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if offset % DM_ALIGN != 0 || len % DM_ALIGN != 0 || end > self.layout.size() as u64 {
            return Err(EINVAL);
        }
        // SAFETY: within the allocation (checked above).
        Ok(unsafe { self.mem.add(offset as usize) })
    }
}

/// `verbs_context.alloc_dm` (the inline `ibv_alloc_dm`).
pub unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut AllocDmAttr,
) -> *mut ibv_dm {
    guard_ptr(|| {
        // SAFETY: the caller passes its attributes.
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        if a.comp_mask != 0
            || a.length == 0
            || a.length as u64 > MAX_DM_SIZE
            || a.log_align_req > 12
        {
            return Err(EINVAL);
        }
        let size = a.length.next_multiple_of(DM_ALIGN as usize);
        let layout =
            Layout::from_size_align(size, 1 << a.log_align_req.max(6)).map_err(|_| EINVAL)?;
        // SAFETY: a layout of non-zero size.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        if mem.is_null() {
            return Err(libc::ENOMEM);
        }
        let c = ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle: 0,
        };
        let dm = Dm { c, mem, layout, refs: Arc::new(AtomicU32::new(0)) };
        Ok(Box::into_raw(Box::new(dm)).cast())
    })
}

/// `verbs_context.free_dm` (the inline `ibv_free_dm`): EBUSY while MRs
/// are registered on it.
pub unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes device memory of this library.
        let d = unsafe { Dm::from_ptr(dm) }?;
        if d.refs.load(Ordering::Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: allocated by alloc_dm; freed once.
        let d = unsafe { Box::from_raw(dm.cast::<Dm>()) };
        // SAFETY: allocated with this layout; no MR reaches it any more.
        unsafe { std::alloc::dealloc(d.mem, d.layout) };
        Ok(())
    })
}

/// `ibv_dm.memcpy_to_dm` (the inline `ibv_memcpy_to_dm`).
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    offset: u64,
    src: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: `len` readable bytes at `src` (the caller's), `len` bytes of
    // the allocation at `at` (checked by `dm_copy`).
    unsafe { dm_copy(dm, offset, len, |at| std::ptr::copy(src.cast::<u8>(), at, len)) }
}

/// `ibv_dm.memcpy_from_dm` (the inline `ibv_memcpy_from_dm`).
unsafe extern "C" fn memcpy_from_dm(
    dst: *mut c_void,
    dm: *mut ibv_dm,
    offset: u64,
    len: usize,
) -> c_int {
    // SAFETY: as memcpy_to_dm, the other way.
    unsafe { dm_copy(dm, offset, len, |at| std::ptr::copy(at.cast_const(), dst.cast::<u8>(), len)) }
}

/// Checks `[offset, offset + len)` of the device memory `dm` and, when
/// `len` is not 0, runs `copy` on its first byte: 0, or the errno.
///
/// # Safety
///
/// `dm` is device memory of this library (or NULL); `copy` is sound for
/// `len` bytes of the allocation at the pointer it gets.
unsafe fn dm_copy(dm: *mut ibv_dm, offset: u64, len: usize, copy: impl FnOnce(*mut u8)) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller passes device memory of this library.
        let at = match unsafe { Dm::from_ptr(dm) }.and_then(|d| d.at(offset, len)) {
            Ok(at) => at,
            Err(e) => return e,
        };
        if len > 0 {
            copy(at);
        }
        0
    })
}

/// `verbs_context.reg_dm_mr` (the inline `ibv_reg_dm_mr`): `length` bytes
/// of `dm` from `offset`, zero-based.
pub unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
    access: u32,
) -> *mut ibv_mr {
    guard_ptr(|| {
        // SAFETY: the caller passes device memory of this library.
        let d = unsafe { Dm::from_ptr(dm) }?;
        // IBV_ACCESS_ZERO_BASED is required.
        if access & 0x20 == 0 {
            return Err(EINVAL);
        }
        let end = offset.checked_add(length as u64).ok_or(EINVAL)?;
        if end > d.layout.size() as u64 {
            return Err(EINVAL);
        }
        // A region of no bytes is legal; the device registers ranges of at
        // least one word, so it gets the word at `offset` (the C face says
        // 0 bytes).
        let registered = length.max(DM_ALIGN as usize).min(d.layout.size() - offset as usize);
        // SAFETY: within the allocation, which stays until free_dm (which
        // refuses while this MR is registered).
        let host = unsafe { d.mem.add(offset as usize) };
        let refs = Some(d.refs.clone());
        // SAFETY: the device memory is the library's own allocation, kept
        // until free_dm, which refuses while MRs are on it.
        let mr = unsafe {
            register_range(
                pd,
                host.cast(),
                registered,
                0,
                access as c_int,
                std::ptr::null_mut(),
                refs,
            )
        }?;
        // SAFETY: the MR register_range just made.
        unsafe { (*mr).c.length = length };
        Ok(mr.cast())
    })
}
