//! What every exported function shares: errno, and a guard that keeps a
//! panic from unwinding into C (it becomes an error return).

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use libc::{EINVAL, EIO, ENOENT, ENOMEM, EOPNOTSUPP};

/// Sets the calling thread's errno.
pub fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = value };
}

/// The calling thread's errno.
pub fn errno_now() -> c_int {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

/// Runs `f`; a panic inside becomes `fallback` with errno EIO.
pub fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(EIO);
        fallback
    })
}

/// [`guard`] for a verb returning an errno (0 on success).
pub fn guard_errno(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(EIO, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// [`guard`] for a verb returning a pointer (NULL with errno on failure).
pub fn guard_ptr<T>(f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guard(std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// The errno of a `uroce_verbs` error.
pub fn errno(e: uroce_verbs::Error) -> c_int {
    e.errno()
}
