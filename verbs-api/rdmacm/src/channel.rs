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
    /// The id the event is counted for (reported, acknowledged): the one
    /// it is for, except a connection request's, counted for its
    /// listener (`event.listen_id`), as librdmacm's `evt->id_priv`.
    pub id: *mut IdPriv,
    /// What `rdma_get_cm_event` does before handing the event out, on the
    /// program's thread (the event thread never touches a QP).
    pub deferred: Deferred,
}

/// Work an event leaves to `rdma_get_cm_event`, as librdmacm does it there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deferred {
    #[default]
    None,
    /// A REP for the device CM's ID `cm`: with a QP, the QP to RTR and
    /// RTS and the RTU (`ESTABLISHED`, or `CONNECT_ERROR`); without one,
    /// `CONNECT_RESPONSE` (`ucma_process_conn_resp`).
    Reply { cm: u32 },
    /// A REJ: the QP to ERR (`ucma_modify_qp_err`).
    QpToErr,
    /// A multicast join: the QP attached to the group (`ucma_process_join`).
    Attach { mgid: [u8; 16] },
}

struct Queue(VecDeque<*mut CmaEvent>);

// SAFETY: the events are owned by the queue until taken; only reached
// through the channel's mutex.
unsafe impl Send for Queue {}

/// What a channel's users share: the ids on the channel (their events go
/// here), and a thread blocked in `rdma_get_cm_event`. Destroying the
/// channel while either remains frees nothing they use: events for it are
/// dropped, and the fd closes with the last user.
pub(crate) struct Shared {
    fd: c_int,
    queue: Mutex<Queue>,
    closed: AtomicBool,
}

/// A handle on a channel's queue (an id's, the events it raises go there).
pub(crate) type Sink = Arc<Shared>;

/// An event channel: the C struct first.
#[repr(C)]
pub struct Channel {
    pub c: rdma_event_channel,
    shared: Sink,
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

    fn free_queued(&self) {
        for event in self.queue().0.drain(..) {
            // SAFETY: a queued event is a leaked box the queue owns.
            drop(unsafe { Box::from_raw(event) });
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.free_queued();
        // SAFETY: the channel's own eventfd, closed once: nobody holds the
        // channel any more.
        unsafe { libc::close(self.fd) };
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

/// The queue of `channel`, for an id made on it.
///
/// # Safety
/// `channel` is a live channel.
pub(crate) unsafe fn sink(channel: *mut Channel) -> Sink {
    Arc::clone(&(*channel).shared)
}

/// `rdma_destroy_event_channel`: frees the events never taken; events
/// raised for it later (ids the program left on it) are dropped. A thread
/// blocked on the channel stays blocked, as a `read` in progress on
/// librdmacm's descriptor does (the file lives while it is read; rping's
/// event thread counts on it): the fd closes once no id and no such
/// thread holds the channel any more (at once, for a program that
/// destroyed its ids first, as librdmacm requires).
///
/// # Safety
/// `channel` came from [`create`] and is not used again.
pub unsafe fn destroy(channel: *mut Channel) {
    let channel = Box::from_raw(channel);
    channel.shared.closed.store(true, Ordering::SeqCst);
    channel.shared.free_queued();
}

/// Queues `event` on `sink` (the fd becomes readable); a destroyed
/// channel drops it.
pub(crate) fn push(sink: &Sink, event: Box<CmaEvent>) {
    if sink.closed.load(Ordering::SeqCst) {
        return;
    }
    let mut q = sink.queue();
    let was = q.0.len();
    q.0.push_back(Box::into_raw(event));
    sink.signal(was, q.0.len());
}

/// Takes the events of `sink` not yet taken that `keep` does not keep.
// The events stay boxed: the C side holds pointers to them once taken.
#[allow(clippy::vec_box)]
fn take_where(sink: &Sink, take: impl Fn(&CmaEvent) -> bool) -> Vec<Box<CmaEvent>> {
    let mut q = sink.queue();
    let was = q.0.len();
    let (mine, rest): (VecDeque<_>, VecDeque<_>) =
        // SAFETY: the queue owns its events (boxes leaked into it, freed
        // only once taken out): each pointer is live while it is queued.
        q.0.drain(..).partition(|e| take(unsafe { &**e }));
    q.0 = rest;
    sink.signal(was, q.0.len());
    // SAFETY: taken out of the queue, each box is now owned here.
    mine.into_iter().map(|e| unsafe { Box::from_raw(e) }).collect()
}

/// Takes the events counted for `id` not yet taken from `sink` (the
/// kernel drops them when their id is destroyed, moves them when it
/// migrates).
#[allow(clippy::vec_box)]
pub(crate) fn take_for(sink: &Sink, id: *mut IdPriv) -> Vec<Box<CmaEvent>> {
    take_where(sink, |e| e.id == id)
}

/// Takes the connection requests for listener `listen` not yet taken from
/// `sink` (the kernel destroys their ids with the listener).
#[allow(clippy::vec_box)]
pub(crate) fn take_requests_of(sink: &Sink, listen: *mut IdPriv) -> Vec<Box<CmaEvent>> {
    take_where(sink, |e| {
        e.event.event == kind::CONNECT_REQUEST && e.event.listen_id == listen.cast()
    })
}

/// Takes the next event, blocking unless the fd is `O_NONBLOCK`, and
/// counts it reported for its id while the queue is locked: an
/// `rdma_destroy_id` takes the id's queued events under that lock, so it
/// either takes this one or waits for its acknowledgement.
///
/// # Safety
/// `channel` is a live channel.
unsafe fn take(channel: *mut Channel) -> Result<*mut CmaEvent, c_int> {
    let channel = sink(channel);
    loop {
        if channel.closed.load(Ordering::SeqCst) {
            return Err(libc::EBADF);
        }
        {
            let mut q = channel.queue();
            let was = q.0.len();
            if let Some(event) = q.0.pop_front() {
                channel.signal(was, q.0.len());
                crate::id::reported(&*event);
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
    // SAFETY: every field of an rdma_cm_event is plain data or a pointer,
    // for which zero is NULL.
    let mut event: rdma_cm_event = unsafe { std::mem::zeroed() };
    event.id = id.cast();
    event.event = kind;
    event.status = status;
    Box::new(CmaEvent {
        event,
        private_data: [0; RDMA_MAX_PRIVATE_DATA],
        id,
        deferred: Deferred::None,
    })
}

/// `rdma_get_cm_event`: the next event (blocking unless `O_NONBLOCK`),
/// counted handed out for its id, its deferred work done.
///
/// # Safety
/// `channel` NULL or a live channel.
pub unsafe fn get(channel: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    crate::devices::init()?;
    if channel.is_null() {
        return Err(libc::EINVAL);
    }
    let event = take(channel.cast())?;
    crate::cm::finish(&mut *event);
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
