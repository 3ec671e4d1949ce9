//! Event channels and CM events.
//!
//! A channel is an `rdma_event_channel` (its `fd` first, as the C side
//! reads it) followed by its queue of events not yet taken. The fd is an
//! eventfd readable exactly while the queue holds an event: `poll`, `epoll`
//! and `select` work on it as on librdmacm's `/dev/infiniband/rdma_cm`.
//! `rdma_get_cm_event` blocks until an event waits, unless the program made
//! the fd `O_NONBLOCK`: then it fails with EAGAIN, as librdmacm.
//!
//! An event is a `cma_event` as librdmacm allocates it: the
//! `rdma_cm_event` the program sees, room for its private data, and the id
//! it is for. `rdma_ack_cm_event` frees it and counts it acknowledged for
//! its id (`rdma_destroy_id` waits for every event it reported to be).

use crate::abi::*;
use crate::id::IdPriv;
use libc::c_int;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// An event as librdmacm allocates it (`struct cma_event`).
#[repr(C)]
pub struct CmaEvent {
    pub event: rdma_cm_event,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    pub id: *mut IdPriv,
}

struct Queue(VecDeque<*mut CmaEvent>);

// SAFETY: the events are owned by the queue until taken; only reached
// through the channel's mutex.
unsafe impl Send for Queue {}

/// What a channel's users share: a thread blocked in
/// `rdma_get_cm_event` holds it, so destroying the channel meanwhile frees
/// nothing it uses (that thread then gets EBADF, as a read of a closed
/// `rdma_cm` descriptor would).
struct Shared {
    fd: c_int,
    queue: Mutex<Queue>,
    closed: AtomicBool,
}

/// An event channel: the C struct first.
#[repr(C)]
pub struct Channel {
    pub c: rdma_event_channel,
    shared: Arc<Shared>,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the fd readable (one count) while the queue holds an event:
    /// called with the queue locked after a change, `was` the length before.
    fn signal(&self, was: usize, now: usize) {
        let mut value = 0u64;
        if was == 0 && now > 0 {
            value = 1;
            // SAFETY: writes 8 bytes to the channel's own eventfd.
            unsafe { libc::write(self.fd, std::ptr::from_ref(&value).cast(), 8) };
        } else if was > 0 && now == 0 {
            // SAFETY: the count is 1 (set when the queue became non-empty),
            // so this read does not block; it resets it to 0.
            unsafe { libc::read(self.fd, std::ptr::from_mut(&mut value).cast(), 8) };
        }
    }
}

/// `rdma_create_event_channel`.
pub fn create() -> Result<*mut Channel, c_int> {
    crate::devices::init()?;
    // SAFETY: eventfd has no memory preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::ffi::last_errno());
    }
    let shared = Arc::new(Shared {
        fd,
        queue: Mutex::new(Queue(VecDeque::new())),
        closed: AtomicBool::new(false),
    });
    let channel = Box::new(Channel { c: rdma_event_channel { fd }, shared });
    Ok(Box::into_raw(channel))
}

/// `rdma_destroy_event_channel`: closes the fd, frees events never taken.
///
/// # Safety
/// `channel` came from [`create`] and is not used again.
pub unsafe fn destroy(channel: *mut Channel) {
    let channel = Box::from_raw(channel);
    channel.shared.closed.store(true, Ordering::SeqCst);
    libc::close(channel.shared.fd);
    for event in channel.shared.queue().0.drain(..) {
        drop(Box::from_raw(event));
    }
}

/// Queues `event` on `channel` (the fd becomes readable).
///
/// # Safety
/// `channel` is a live channel.
pub unsafe fn push(channel: *mut Channel, event: Box<CmaEvent>) {
    let channel = &*(*channel).shared;
    let mut q = channel.queue();
    let was = q.0.len();
    q.0.push_back(Box::into_raw(event));
    channel.signal(was, q.0.len());
}

/// Takes the events for `id` not yet taken from `channel` (the kernel
/// drops them when their id is destroyed, moves them when it migrates).
///
/// # Safety
/// `channel` is a live channel.
// The events stay boxed: the C side holds pointers to them once taken.
#[allow(clippy::vec_box)]
pub unsafe fn take_for(channel: *mut Channel, id: *mut IdPriv) -> Vec<Box<CmaEvent>> {
    let channel = &*(*channel).shared;
    let mut q = channel.queue();
    let was = q.0.len();
    let (mine, rest): (VecDeque<_>, VecDeque<_>) =
        // SAFETY: the queue owns its events (boxes leaked into it, freed
        // only once taken out): each pointer is live while it is queued.
        q.0.drain(..).partition(|e| unsafe { (**e).id } == id);
    q.0 = rest;
    channel.signal(was, q.0.len());
    mine.into_iter().map(|e| Box::from_raw(e)).collect()
}

/// Takes the connection requests for listener `listen` not yet taken from
/// `channel` (the kernel destroys their ids with the listener).
///
/// # Safety
/// `channel` is a live channel.
#[allow(clippy::vec_box)]
pub unsafe fn take_requests_of(channel: *mut Channel, listen: *mut IdPriv) -> Vec<Box<CmaEvent>> {
    let channel = &*(*channel).shared;
    let mut q = channel.queue();
    let was = q.0.len();
    // SAFETY: as in `take_for`: a queued event is live.
    let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.0.drain(..).partition(|e| unsafe {
        (**e).event.event == kind::CONNECT_REQUEST && (**e).event.listen_id == listen.cast()
    });
    q.0 = rest;
    channel.signal(was, q.0.len());
    mine.into_iter().map(|e| Box::from_raw(e)).collect()
}

/// Takes the next event, blocking unless the fd is `O_NONBLOCK`.
///
/// # Safety
/// `channel` is a live channel.
unsafe fn take(channel: *mut Channel) -> Result<*mut CmaEvent, c_int> {
    let channel = Arc::clone(&(*channel).shared);
    loop {
        if channel.closed.load(Ordering::SeqCst) {
            return Err(libc::EBADF);
        }
        {
            let mut q = channel.queue();
            let was = q.0.len();
            if let Some(event) = q.0.pop_front() {
                channel.signal(was, q.0.len());
                return Ok(event);
            }
        }
        let flags = libc::fcntl(channel.fd, libc::F_GETFL);
        if flags < 0 {
            return Err(crate::ffi::last_errno());
        }
        if flags & libc::O_NONBLOCK != 0 {
            return Err(libc::EAGAIN);
        }
        let mut pfd = libc::pollfd { fd: channel.fd, events: libc::POLLIN, revents: 0 };
        if libc::poll(&mut pfd, 1, -1) < 0 && crate::ffi::errno_now() != libc::EINTR {
            return Err(crate::ffi::last_errno());
        }
    }
}

/// A new event of `kind` for `id` with `status` (a negative errno or 0).
pub fn event(id: *mut IdPriv, kind: c_int, status: c_int) -> Box<CmaEvent> {
    // SAFETY: every field of a cma_event is plain data or a pointer, for
    // which zero is NULL.
    let mut e: Box<CmaEvent> = Box::new(unsafe { std::mem::zeroed() });
    e.event.id = id.cast();
    e.event.event = kind;
    e.event.status = status;
    e.id = id;
    e
}

/// `rdma_get_cm_event`: the next event (blocking unless `O_NONBLOCK`),
/// counted handed out for its id.
///
/// # Safety
/// `channel` NULL or a live channel.
pub unsafe fn get(channel: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    crate::devices::init()?;
    if channel.is_null() {
        return Err(libc::EINVAL);
    }
    let event = take(channel.cast())?;
    crate::id::reported((*event).id);
    Ok(std::ptr::addr_of_mut!((*event).event))
}

/// `rdma_ack_cm_event`: frees the event, counted acknowledged for its id.
///
/// # Safety
/// `event` NULL or an event [`get`] returned, not yet acknowledged.
pub unsafe fn ack(event: *mut rdma_cm_event) -> Result<(), c_int> {
    if event.is_null() {
        return Err(libc::EINVAL);
    }
    let event = Box::from_raw(event.cast::<CmaEvent>());
    crate::id::completed(event.id);
    Ok(())
}

/// `rdma_event_str`.
pub extern "C" fn event_str(event: c_int) -> *const libc::c_char {
    let s: &'static std::ffi::CStr = match event {
        0 => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        1 => c"RDMA_CM_EVENT_ADDR_ERROR",
        2 => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        3 => c"RDMA_CM_EVENT_ROUTE_ERROR",
        4 => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        5 => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        6 => c"RDMA_CM_EVENT_CONNECT_ERROR",
        7 => c"RDMA_CM_EVENT_UNREACHABLE",
        8 => c"RDMA_CM_EVENT_REJECTED",
        9 => c"RDMA_CM_EVENT_ESTABLISHED",
        10 => c"RDMA_CM_EVENT_DISCONNECTED",
        11 => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        12 => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        13 => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        14 => c"RDMA_CM_EVENT_ADDR_CHANGE",
        15 => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

/// The event types (`enum rdma_cm_event_type`).
pub mod kind {
    use libc::c_int;
    pub const ADDR_RESOLVED: c_int = 0;
    pub const ADDR_ERROR: c_int = 1;
    pub const ROUTE_RESOLVED: c_int = 2;
    pub const ROUTE_ERROR: c_int = 3;
    pub const CONNECT_REQUEST: c_int = 4;
    pub const REJECTED: c_int = 8;
}
