//! `ibv_rereg_mr`: rdma-core 44's checks of the arguments (an input error
//! leaves the region as it was: `IBV_REREG_MR_ERR_INPUT`), then the
//! driver's re-registration (`uroce_verbs::Mr::rereg*`; a failure there is
//! `IBV_REREG_MR_ERR_CMD`, and the region is still as it was), then the
//! `ibv_mr` fields updated as rdma-core updates them: `pd`, `addr`,
//! `length`, and the keys read back from the device (the same keys).

use crate::abi::{ibv_mr, ibv_pd};
use crate::device::locked;
use crate::ffi::{errno, guard, set_errno, EINVAL};
use crate::pd::{device_access, Mr, Pd};
use std::os::raw::{c_int, c_void};
use uroce_verbs::Rereg;

/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
const CHANGE_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_PD`.
const CHANGE_PD: c_int = 2;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
const CHANGE_ACCESS: c_int = 4;
/// `IBV_REREG_MR_FLAGS_SUPPORTED`: every flag is below it.
const FLAGS_SUPPORTED: c_int = 8;
/// `IBV_REREG_MR_ERR_INPUT`: the arguments are wrong, the region is
/// unchanged.
const ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the device refused (here too the region is
/// unchanged; rdma-core only promises that it must not be used).
const ERR_CMD: c_int = -4;

/// What a call asks for, once its arguments are checked.
struct Request<'a> {
    pd: Option<&'a Pd>,
    translation: Option<(*mut c_void, usize)>,
    access: Option<c_int>,
}

/// rdma-core's input checks (`verbs.c`): a region of `ibv_reg_mr` (not of
/// device memory), known flags (and, as the kernel's, at least one), a
/// translation with an address and a length, access flags only with
/// `IBV_REREG_MR_CHANGE_ACCESS`, and a PD with `IBV_REREG_MR_CHANGE_PD`.
///
/// # Safety
///
/// `pd` is NULL or a live PD of this library.
unsafe fn check<'a>(
    m: &Mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> Option<Request<'a>> {
    let translation = flags & CHANGE_TRANSLATION != 0;
    if m.dm_refs.is_some()
        || flags <= 0
        || flags >= FLAGS_SUPPORTED
        || (translation && (addr.is_null() || length == 0))
        || (access != 0 && flags & CHANGE_ACCESS == 0)
    {
        return None;
    }
    let pd = match flags & CHANGE_PD {
        0 => None,
        // SAFETY: the caller's contract.
        _ => Some(unsafe { Pd::from_ptr(pd) }.ok()?),
    };
    Some(Request {
        pd,
        translation: translation.then_some((addr, length)),
        access: (flags & CHANGE_ACCESS != 0).then_some(access),
    })
}

/// `ibv_rereg_mr`: 0, or an `enum ibv_rereg_mr_err_code` with errno set.
pub unsafe extern "C" fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(ERR_CMD, || {
        let keys = {
            // SAFETY: the ibv_mr is the first field of an Mr from
            // register; the caller passes a live one (or NULL).
            let Some(m) = (unsafe { mr.cast::<Mr>().as_ref() }) else {
                set_errno(EINVAL);
                return ERR_INPUT;
            };
            // SAFETY: the caller passes NULL or a live PD.
            let Some(request) = (unsafe { check(m, flags, pd, addr, length, access) }) else {
                set_errno(EINVAL);
                return ERR_INPUT;
            };
            let pd_guard = request.pd.map(|p| locked(&p.pd));
            let change =
                Rereg { pd: pd_guard.as_deref(), access: request.access.map(device_access) };
            let mut inner = locked(&m.mr);
            let Some(inner) = inner.as_mut() else {
                set_errno(EINVAL);
                return ERR_INPUT;
            };
            let done = match request.translation {
                // SAFETY: the application hands the new range to the
                // device until ibv_dereg_mr (or another re-registration),
                // as ibv_rereg_mr(3) with ibv_reg_mr(3) say; the old one is
                // its own again.
                Some((addr, length)) => unsafe { inner.rereg_raw(addr.cast(), length, change) },
                None => inner.rereg(change),
            };
            if let Err(e) = done {
                set_errno(errno(e));
                return ERR_CMD;
            }
            (inner.lkey().0, inner.rkey().0)
        };
        // SAFETY: the region is live (the caller's); no reference into it
        // is held any more.
        unsafe {
            if flags & CHANGE_PD != 0 {
                (*mr).pd = pd;
            }
            if flags & CHANGE_TRANSLATION != 0 {
                (*mr).addr = addr;
                (*mr).length = length;
            }
            ((*mr).lkey, (*mr).rkey) = keys;
        }
        0
    })
}
