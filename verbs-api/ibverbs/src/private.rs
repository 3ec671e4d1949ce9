//! uroce's own entry points (version node `UROCE_PRIVATE_1`), for uroce's
//! `librdmacm.so.1`: the two libraries are separate shared objects, so
//! nothing Rust-typed crosses between them, only bytes and descriptors.
//!
//! - `int uroce_private_device_command(struct ibv_context *ctx, const
//!   uint8_t *cmd, size_t len, uint8_t *reply, size_t cap, size_t
//!   *reply_len)`: runs the postcard-encoded `uroce_device::command::Command`
//!   on the context's device and writes the postcard-encoded
//!   `Result<Reply, i32>` (the error as its errno) to `reply`. Returns 0;
//!   EINVAL (and errno) for a bad context or bytes that are no command;
//!   ENOSPC when the reply needs more than `cap` bytes (`*reply_len` says
//!   how many; the command ran).
//! - `int uroce_private_cm_event_fd(struct ibv_context *ctx)`: a
//!   non-blocking eventfd, readable once CM events wait (the device's
//!   notifier writes it); the caller reads it and takes the events with
//!   `CmPollEvent` until none is left. -1 with errno on failure. The
//!   descriptor belongs to the device (closed with it).

use crate::abi::ibv_context;
use crate::device::Ctx;
use crate::ffi::{guard, set_errno, EINVAL};
use std::os::raw::c_int;

/// `uroce_private_device_command`.
pub unsafe extern "C" fn device_command(
    context: *mut ibv_context,
    cmd: *const u8,
    len: usize,
    reply: *mut u8,
    cap: usize,
    reply_len: *mut usize,
) -> c_int {
    guard(libc::EIO, || {
        let fail = |e: c_int| {
            set_errno(e);
            e
        };
        // SAFETY: the caller passes NULL or a context it opened.
        let Ok(ctx) = (unsafe { Ctx::from_ptr(context) }) else { return fail(EINVAL) };
        if cmd.is_null() || (reply.is_null() && cap > 0) {
            return fail(EINVAL);
        }
        // SAFETY: the caller's command holds `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(cmd, len) };
        let Ok(command) = postcard::from_bytes::<uroce_device::command::Command>(bytes) else {
            return fail(EINVAL);
        };
        let result: Result<_, i32> = ctx.shared.command(command).map_err(|e| e.errno());
        let Ok(out) = postcard::to_stdvec(&result) else { return fail(libc::EIO) };
        if !reply_len.is_null() {
            // SAFETY: the caller passes NULL or a writable size_t.
            unsafe { *reply_len = out.len() };
        }
        if out.len() > cap {
            // The command ran; its reply is lost. Callers pass a buffer far
            // above the largest reply (librdmacm: 16 KiB) and must not run
            // the command again on ENOSPC.
            return fail(libc::ENOSPC);
        }
        // SAFETY: the caller's reply buffer holds `cap` bytes.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), reply, out.len()) };
        0
    })
}

/// `uroce_private_cm_event_fd`.
pub unsafe extern "C" fn cm_event_fd(context: *mut ibv_context) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes NULL or a context it opened.
        let ctx = match unsafe { Ctx::from_ptr(context) } {
            Ok(ctx) => ctx,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        match ctx.shared.cm_event_fd() {
            Ok(fd) => fd,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
