//! What uroce does not offer. A program that calls it gets what
//! libibverbs documents for a verb the device lacks: `EOPNOTSUPP` (as the
//! return value and in errno), or NULL with errno `EOPNOTSUPP`. Each stub
//! ignores its arguments (on x86_64 the caller owns them), so one stub
//! serves every signature with the same kind of return value.

use crate::ffi::{set_errno, EOPNOTSUPP};
use std::os::raw::{c_int, c_void};

/// A verb returning an errno: `EOPNOTSUPP`.
pub extern "C" fn int() -> c_int {
    set_errno(EOPNOTSUPP);
    EOPNOTSUPP
}

/// A verb returning a pointer: NULL, errno `EOPNOTSUPP`.
pub extern "C" fn ptr() -> *mut c_void {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

/// A function returning nothing: does nothing.
pub extern "C" fn void() {}

/// A function returning a number or a flag: 0.
pub extern "C" fn zero() -> u64 {
    0
}
