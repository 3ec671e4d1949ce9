//! Memory windows: `ibv_alloc_mw`, `ibv_bind_mw` (type 1, through the
//! QP's send queue) and `ibv_dealloc_mw` (through `ibv_context.ops`, as
//! the inline functions call them), and the `IBV_WR_BIND_MW` of a send
//! chain (type 2).

use crate::abi::{ibv_mw, ibv_mw_bind, ibv_mw_bind_info, ibv_pd, ibv_qp};
use crate::device::locked;
use crate::ffi::{errno, guard_errno, guard_ptr, EINVAL};
use crate::pd::{Mr, Pd};
use crate::qp::Qp;
use std::os::raw::c_int;
use std::sync::Mutex;
use uroce_verbs::{Access, SendFlags, SendWr};

/// A window: the `ibv_mw` C sees, then the driver's.
#[repr(C)]
pub struct Mw {
    pub c: ibv_mw,
    pub mw: Mutex<Option<uroce_verbs::Mw>>,
}

/// `ops.alloc_mw` (the inline `ibv_alloc_mw`).
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_int) -> *mut ibv_mw {
    guard_ptr(|| {
        // SAFETY: the caller passes a live PD.
        let p = unsafe { Pd::from_ptr(pd) }?;
        let kind = u8::try_from(mw_type).ok().filter(|t| (1..=2).contains(t)).ok_or(EINVAL)?;
        let mw = locked(&p.pd).alloc_mw(kind).map_err(errno)?;
        let rkey = mw.rkey().0;
        let c = ibv_mw { context: p.c.context, pd, rkey, handle: rkey, type_: mw_type };
        Ok(Box::into_raw(Box::new(Mw { c, mw: Mutex::new(Some(mw)) })).cast())
    })
}

/// `ops.dealloc_mw` (the inline `ibv_dealloc_mw`).
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard_errno(|| {
        // SAFETY: the ibv_mw is the first field of an Mw from alloc_mw.
        let w = unsafe { mw.cast::<Mw>().as_ref() }.ok_or(EINVAL)?;
        {
            let mut inner = locked(&w.mw);
            inner.as_ref().ok_or(EINVAL)?.dealloc().map_err(errno)?;
            *inner = None;
        }
        // SAFETY: allocated by alloc_mw; freed once.
        drop(unsafe { Box::from_raw(mw.cast::<Mw>()) });
        Ok(())
    })
}

/// The bind WR for `bind_info` on `mw` under the 8-bit key `key`; the
/// window's R_Key once it completes.
///
/// # Safety
///
/// `mw` is a window of this library; `bind_info.mr` NULL or its MR.
pub unsafe fn bind_wr(
    wr_id: u64,
    flags: u32,
    mw: *mut ibv_mw,
    bind_info: &ibv_mw_bind_info,
    key: u8,
) -> Result<(SendWr, uroce_verbs::Rkey), c_int> {
    // SAFETY: the caller's contract.
    let w = unsafe { mw.cast::<Mw>().as_ref() }.ok_or(EINVAL)?;
    // SAFETY: the caller's contract.
    let m = unsafe { bind_info.mr.cast::<Mr>().as_ref() }.ok_or(EINVAL)?;
    let window = locked(&w.mw);
    let window = window.as_ref().ok_or(EINVAL)?;
    let region = locked(&m.mr);
    let region = region.as_ref().ok_or(EINVAL)?;
    let offset = bind_info.addr.checked_sub(m.c.addr as u64).ok_or(EINVAL)?;
    let access = Access(bind_info.mw_access_flags);
    let (mut wr, rkey) =
        SendWr::bind_mw(wr_id, window, region, offset, bind_info.length, access, key);
    wr.flags = SendFlags(flags & SendFlags::ALL.0);
    Ok((wr, rkey))
}

/// `ops.bind_mw` (the inline `ibv_bind_mw`, type-1 windows): posts the
/// bind through the QP's send queue and gives the window its next R_Key.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live QP, window and bind.
        let (q, b) = unsafe { (Qp::from_ptr(qp)?, bind.as_ref().ok_or(EINVAL)?) };
        // SAFETY: as above.
        let old = unsafe { mw.as_ref() }.ok_or(EINVAL)?.rkey;
        let key = (old as u8).wrapping_add(1);
        // SAFETY: the caller passes this library's window and MR.
        let (wr, rkey) = unsafe { bind_wr(b.wr_id, b.send_flags, mw, &b.bind_info, key) }?;
        let guard = locked(&q.qp);
        guard.as_ref().ok_or(EINVAL)?.post_send(&[wr]).map_err(|(_, e)| errno(e))?;
        // SAFETY: the caller's window.
        unsafe { rekey(mw, rkey.0) };
        Ok(())
    })
}

/// Gives the window `mw` the R_Key `rkey` (a bind was posted).
///
/// # Safety
///
/// `mw` is NULL or a live window of this library.
pub unsafe fn rekey(mw: *mut ibv_mw, rkey: u32) {
    // SAFETY: the caller's contract.
    let Some(w) = (unsafe { mw.cast::<Mw>().as_ref() }) else { return };
    if let Some(inner) = locked(&w.mw).as_ref() {
        inner.set_rkey(uroce_verbs::Rkey(rkey));
    }
    // SAFETY: through the pointer alloc_mw handed out: C reads the rkey.
    unsafe { (*mw).rkey = rkey };
}
