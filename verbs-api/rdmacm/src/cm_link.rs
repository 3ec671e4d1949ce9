//! The door to the device's connection manager (IB CM on QP1: REQ, REP,
//! RTU, REJ, DREQ/DREP, SIDR), through uroce's `libibverbs.so.1`.
//!
//! The two libraries are separate shared objects, so nothing Rust-typed
//! crosses: uroce's libibverbs exports two private functions (version node
//! `UROCE_PRIVATE_1`), found here with `dlsym(RTLD_DEFAULT)` when first
//! needed:
//!
//! - `uroce_private_device_command(ctx, cmd, len, reply, cap, &reply_len)`:
//!   a postcard-encoded `uroce_device::command::Command` in, a
//!   postcard-encoded `Result<Reply, i32>` (errno) out;
//! - `uroce_private_cm_event_fd(ctx)`: an eventfd readable once CM events
//!   wait for `CmPollEvent`.
//!
//! With another libibverbs (the system's) neither exists, and every call
//! that needs the CM fails with ENOSYS, as before the device had its CM.
//!
//! One thread per device context (started with the first CM call on it)
//! waits on that descriptor and hands each event to [`crate::cm::event`],
//! which turns it into `rdma_cm_event`s on the ids' channels.

use crate::abi::ibv_context;
use libc::{c_int, c_void};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use uroce_device::cm::CmEvent;
use uroce_device::command::{Command, Reply};

type CommandFn =
    unsafe extern "C" fn(*mut ibv_context, *const u8, usize, *mut u8, usize, *mut usize) -> c_int;
type EventFdFn = unsafe extern "C" fn(*mut ibv_context) -> c_int;

struct Door {
    command: CommandFn,
    event_fd: EventFdFn,
}

/// uroce's private entry points, if the process's libibverbs is uroce's.
fn door() -> Option<&'static Door> {
    static DOOR: OnceLock<Option<Door>> = OnceLock::new();
    DOOR.get_or_init(|| {
        // SAFETY: dlsym with NUL-terminated names; the symbols, when
        // present, have exactly these C signatures (uroce's libibverbs,
        // src/private.rs).
        unsafe {
            let c = libc::dlsym(libc::RTLD_DEFAULT, c"uroce_private_device_command".as_ptr());
            let f = libc::dlsym(libc::RTLD_DEFAULT, c"uroce_private_cm_event_fd".as_ptr());
            if c.is_null() || f.is_null() {
                return None;
            }
            Some(Door {
                command: std::mem::transmute::<*mut c_void, CommandFn>(c),
                event_fd: std::mem::transmute::<*mut c_void, EventFdFn>(f),
            })
        }
    })
    .as_ref()
}

/// Runs `command` on the device of `verbs`: the device's reply, or its
/// error's errno (ENOSYS when the libibverbs is not uroce's).
pub fn command(verbs: *mut ibv_context, command: &Command) -> Result<Reply, c_int> {
    let door = door().ok_or(libc::ENOSYS)?;
    if verbs.is_null() {
        return Err(libc::ENODEV);
    }
    let bytes = postcard::to_stdvec(command).map_err(|_| libc::EINVAL)?;
    // The device runs the command before it knows whether its reply fits
    // (ENOSPC then means the reply is lost, not that the command did not
    // run): one buffer far above the largest reply (a CM event carries at
    // most one 232-byte message and its private data), and never a retry,
    // which would run the command twice (a second REQ, a lost event).
    let mut out = vec![0u8; MAX_REPLY_BYTES];
    let mut len = 0usize;
    // SAFETY: the buffers are as long as said; verbs is an open context.
    let r = unsafe {
        (door.command)(verbs, bytes.as_ptr(), bytes.len(), out.as_mut_ptr(), out.len(), &mut len)
    };
    match r {
        0 => {
            let result: Result<Reply, i32> =
                postcard::from_bytes(&out[..len.min(out.len())]).map_err(|_| libc::EIO)?;
            result
        }
        libc::ENOSPC => Err(libc::EIO),
        e => Err(e),
    }
}

/// The reply buffer of [`command`]: a device reply is a few hundred bytes.
const MAX_REPLY_BYTES: usize = 16 * 1024;

/// The contexts whose CM events a thread takes.
static WATCHED: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// Makes sure a thread takes the CM events of `verbs` (started once per
/// context).
pub fn watch(verbs: *mut ibv_context) -> Result<(), c_int> {
    let door = door().ok_or(libc::ENOSYS)?;
    if verbs.is_null() {
        return Err(libc::ENODEV);
    }
    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    let set = watched.get_or_insert_with(HashSet::new);
    if set.contains(&(verbs as usize)) {
        return Ok(());
    }
    // SAFETY: an open context.
    let fd = unsafe { (door.event_fd)(verbs) };
    if fd < 0 {
        return Err(crate::ffi::last_errno());
    }
    let key = verbs as usize;
    std::thread::Builder::new()
        .name("uroce-rdmacm".into())
        .spawn(move || run(key as *mut ibv_context, fd))
        .map_err(|_| libc::EAGAIN)?;
    set.insert(key);
    Ok(())
}

/// The event thread of one context: waits until the descriptor is
/// readable (or a short while, in case a notification was missed), then
/// takes every waiting event.
fn run(verbs: *mut ibv_context, fd: c_int) {
    loop {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd.
        unsafe { libc::poll(&mut pfd, 1, 500) };
        let mut count = 0u64;
        // SAFETY: 8 bytes into a u64; the descriptor is non-blocking.
        unsafe { libc::read(fd, std::ptr::from_mut(&mut count).cast(), 8) };
        loop {
            match command(verbs, &Command::CmPollEvent) {
                Ok(Reply::CmEvent(Some(event))) => dispatch(verbs, event),
                Ok(_) => break,
                // The device is gone (the context closed): a later
                // `watch` of a context at this address starts anew.
                Err(libc::ENODEV | libc::ENOSYS) => {
                    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(set) = watched.as_mut() {
                        set.remove(&(verbs as usize));
                    }
                    return;
                }
                // Anything else (a reply that would not decode) loses at
                // most that event; the thread goes on, paced by the poll.
                Err(_) => break,
            }
        }
    }
}

fn dispatch(verbs: *mut ibv_context, event: CmEvent) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::cm::event(verbs, event);
    }));
}

/// A 24-bit starting PSN from the OS's randomness (as the kernel's
/// `get_random_u32() & 0xffffff`).
pub fn random_psn() -> u32 {
    let mut v = 0u32;
    // SAFETY: 4 bytes into a u32.
    let n = unsafe { libc::getrandom(std::ptr::from_mut(&mut v).cast(), 4, 0) };
    if n != 4 {
        // No randomness: the clock's nanoseconds.
        v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    }
    v & 0xff_ffff
}
