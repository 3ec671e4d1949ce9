//! What every exported function shares: errno, and a guard that keeps a
//! panic from unwinding into C (it becomes an error return with EIO).

use libc::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

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
        set_errno(libc::EIO);
        fallback
    })
}

/// librdmacm's convention: 0, or -1 with errno.
pub fn guard_int(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(-1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// A pointer, or NULL with errno.
pub fn guard_ptr<T>(f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guard(std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// The errno a failed verb left (EIO if it left none).
pub fn last_errno() -> c_int {
    match errno_now() {
        0 => libc::EIO,
        e => e,
    }
}

/// An errno-returning verb's result (`ibv_modify_qp`: 0 or an errno).
pub fn verb_result(ret: c_int) -> Result<(), c_int> {
    match ret {
        0 => Ok(()),
        e if e > 0 => Err(e),
        _ => Err(last_errno()),
    }
}
