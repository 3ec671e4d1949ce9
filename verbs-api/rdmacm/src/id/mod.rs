//! `rdma_cm_id`s: their state, creation and destruction, and their
//! events (here); binding and resolution (`resolve.rs`); QPs and SRQs
//! (`qp.rs`); options, migration, endpoints (`options.rs`); the state
//! checks of the calls that go on to the device CM (`connect.rs`, then
//! `cm.rs`). Multicast groups: `multicast.rs`.
//!
//! An id is an `rdma_cm_id` (first, as the C side sees it) followed by the
//! library's own state, as librdmacm's `cma_id_private`; its states are
//! the kernel's (`enum rdma_cm_state`), and every call checks the state the
//! kernel checks (EINVAL otherwise).

use crate::abi::verbs_offsets as off;
use crate::abi::*;
use crate::addr;
use crate::channel::{self, kind, Channel, CmaEvent, Sink};
use crate::devices;
use crate::ffi::{last_errno, verb_result};
use crate::ports;
use crate::verbs::*;
use libc::{c_int, c_void, sockaddr};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

mod connect;
mod options;
mod qp;
mod resolve;

pub use connect::*;
pub use options::*;
pub use qp::*;
pub use qp::{create_qp_ex, create_srq_ex};
pub use resolve::*;

/// `enum rdma_cm_state`, the states this library reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Idle,
    AddrQuery,
    AddrResolved,
    RouteQuery,
    RouteResolved,
    /// Connecting, connected, or a connection request being answered.
    Connect,
    AddrBound,
    Listen,
}

/// A multicast group joined (`struct cma_multicast`).
pub struct Multicast {
    /// The group's address as given (librdmacm compares the bytes).
    pub addr: Vec<u8>,
    pub join_flags: u32,
    /// The group's GID (its IPv4 address, mapped).
    pub mgid: [u8; 16],
}

/// The library's state of an id.
pub struct Inner {
    pub state: State,
    /// The device bound (index in the device table).
    pub dev: Option<usize>,
    /// Created without a channel: calls wait for their own event.
    pub sync: bool,
    /// The queue of the id's channel (`id.channel`'s): its events go there.
    pub(crate) events: Sink,
    /// Events counted for the id that the program acknowledged (those
    /// handed out: `IdPriv::reported`).
    pub completed: u64,
    /// Holds a port.
    pub bound: bool,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub timeout: Option<u8>,
    /// `rdma_create_ep`'s QP attributes for the ids of requests.
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    /// `rdma_create_ep`'s connect data (`ai_connect`).
    pub connect: Vec<u8>,
    pub local_ece: ibv_ece,
    pub remote_ece: ibv_ece,
    pub mc: Vec<Multicast>,
    /// The device CM holds this id (listening, connecting, connected).
    pub in_cm: bool,
    /// The PSN this side receives from (RTR's `rq_psn`): the starting PSN
    /// of the message this side sent (REQ or REP).
    pub seq_num: u32,
    /// The device CM's ID of the connection (or SIDR exchange), while it
    /// has one.
    pub cm: Option<u32>,
    /// Listening: the service ID, and the contexts listened on.
    pub listen_sid: Option<u64>,
    pub listen_ctx: Vec<usize>,
    /// What the CM agreed for the QP (RTR, RTS).
    pub conn: Conn,
}

/// A connection's values for the QP, as the kernel's `cm_id_private`
/// keeps them (`ib_cm_init_qp_attr`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Conn {
    /// This side sent the REQ.
    pub active: bool,
    /// The REP came (active side): the RTU is this side's to send.
    pub replied: bool,
    /// ESTABLISHED was reported (or is this side's own RTU's).
    pub established: bool,
    /// DISCONNECTED was reported.
    pub disconnected: bool,
    pub remote_qpn: u32,
    /// The PSN this side sends from (RTS's `sq_psn`): the starting PSN of
    /// the message it received (REQ or REP).
    pub sq_psn: u32,
    pub path_mtu: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// The local ACK timeout (RTS `timeout`).
    pub timeout: u8,
}

/// A connection's parameters (`struct rdma_conn_param`, copied), with the
/// QP it connects.
#[derive(Clone, Debug, Default)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub qp_num: u32,
}

/// An id: the C struct first (`container_of` is a cast).
#[repr(C)]
pub struct IdPriv {
    pub id: rdma_cm_id,
    pub(crate) inner: Mutex<Inner>,
    acked: Condvar,
    /// Events counted for the id handed to the program: counted with the
    /// channel's queue locked (not the id's: the event thread raises
    /// events holding the id's lock).
    reported: AtomicU64,
    /// A listener's room for connection requests not yet taken (its
    /// backlog): a request beyond it is refused, as the kernel's ucma.
    pub(crate) backlog: AtomicI32,
}

/// The library's state of `p`, locked (a reference to that field only:
/// the C fields are written through `p` meanwhile).
///
/// # Safety
/// `p` is a live id.
pub(crate) unsafe fn lock<'a>(p: *mut IdPriv) -> MutexGuard<'a, Inner> {
    (*p).inner.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id behind a C pointer (EINVAL for NULL).
pub fn from_c(id: *mut rdma_cm_id) -> Result<*mut IdPriv, c_int> {
    if id.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(id.cast())
    }
}

/// `rdma_create_id2`: a new id on `channel` (NULL: a channel of its own,
/// synchronous mode).
///
/// # Safety
/// `channel` NULL or a live channel.
pub unsafe fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut IdPriv, c_int> {
    let on = if channel.is_null() { None } else { Some((channel, channel::sink(channel.cast()))) };
    create_on(on, context, ps, qp_type)
}

/// [`create`] on the channel `on` (its C pointer and its queue; None: a
/// channel of its own).
///
/// # Safety
/// `on`'s pointer is the channel of its queue.
pub(crate) unsafe fn create_on(
    on: Option<(*mut rdma_event_channel, Sink)>,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut IdPriv, c_int> {
    devices::init()?;
    if ![RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB, RDMA_PS_IB].contains(&ps) {
        return Err(libc::EINVAL);
    }
    let (channel, events, sync) = match on {
        Some((channel, events)) => (channel.cast::<Channel>(), events, false),
        None => {
            let channel = channel::create()?;
            (channel, channel::sink(channel), true)
        }
    };
    // SAFETY: an rdma_cm_id is pointers and integers: zero is its empty value.
    let mut id: rdma_cm_id = std::mem::zeroed();
    id.context = context;
    id.channel = channel.cast();
    id.ps = ps;
    id.qp_type = qp_type;
    let inner = Inner {
        state: State::Idle,
        dev: None,
        sync,
        events,
        completed: 0,
        bound: false,
        reuseaddr: false,
        afonly: false,
        tos: None,
        timeout: None,
        qp_init_attr: None,
        connect: Vec::new(),
        local_ece: ibv_ece::default(),
        remote_ece: ibv_ece::default(),
        mc: Vec::new(),
        in_cm: false,
        seq_num: 0,
        cm: None,
        listen_sid: None,
        listen_ctx: Vec::new(),
        conn: Conn::default(),
    };
    Ok(Box::into_raw(Box::new(IdPriv {
        id,
        inner: Mutex::new(inner),
        acked: Condvar::new(),
        reported: AtomicU64::new(0),
        backlog: AtomicI32::new(0),
    })))
}

/// `e` is being handed to the program: counted for its id (the channel's
/// queue locked); a connection request taken makes room in its
/// listener's backlog.
///
/// # Safety
/// `e.id` is a live id (an id's queued events are taken before it is
/// freed, under the lock the caller holds).
pub(crate) unsafe fn reported(e: &CmaEvent) {
    (*e.id).reported.fetch_add(1, Ordering::SeqCst);
    if e.event.event == kind::CONNECT_REQUEST {
        (*e.id).backlog.fetch_add(1, Ordering::SeqCst);
    }
}

/// An event of `p` was acknowledged.
///
/// # Safety
/// `p` is a live id.
pub unsafe fn completed(p: *mut IdPriv) {
    let mut g = lock(p);
    g.completed += 1;
    // Notified with the lock held: a destroy waiting on it frees the id
    // only once this returned.
    (*p).acked.notify_all();
    drop(g);
}

/// Waits (the id locked, `g`) until every event handed out for `p` is
/// acknowledged.
unsafe fn wait_acked<'a>(p: *mut IdPriv, mut g: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
    while g.completed < (*p).reported.load(Ordering::SeqCst) {
        g = (*p).acked.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g
}

/// Raises an event for `p` (locked, `g`) on its channel.
pub(crate) fn raise(p: *mut IdPriv, g: &Inner, kind: c_int, status: c_int) {
    channel::push(&g.events, channel::event(p, kind, status));
}

/// `ucma_complete`: in synchronous mode, waits for the id's event, keeps it
/// in `id->event`, and fails as its status says.
unsafe fn complete(p: *mut IdPriv) -> Result<(), c_int> {
    if !lock(p).sync {
        return Ok(());
    }
    let id = std::ptr::addr_of_mut!((*p).id);
    if !(*id).event.is_null() {
        channel::ack((*id).event)?;
        (*id).event = std::ptr::null_mut();
    }
    let event = channel::get((*id).channel)?;
    (*id).event = event;
    match (*event).status {
        0 => Ok(()),
        _ if (*event).event == kind::REJECTED => Err(libc::ECONNREFUSED),
        s if s < 0 => Err(-s),
        s => Err(s),
    }
}

/// `rdma_destroy_id`: drops the id's events not yet taken, acknowledges
/// the one a synchronous id keeps, waits until every event handed out is
/// acknowledged (as librdmacm), then frees the port, the device, the id.
///
/// # Safety
/// `p` is a live id, not used again.
pub unsafe fn destroy(p: *mut IdPriv) -> Result<(), c_int> {
    // The CM forgets the id first: no event for it comes after.
    crate::cm::forget(p);
    discard(p)
}

/// [`destroy`] of an id the CM never held (the CM's registry may be
/// locked by the caller: the event thread discarding an id it made).
///
/// # Safety
/// `p` is a live id, not used again, not in the CM's registry.
pub(crate) unsafe fn discard(p: *mut IdPriv) -> Result<(), c_int> {
    let id = std::ptr::addr_of_mut!((*p).id);
    let channel = (*id).channel.cast::<Channel>();
    let events = lock(p).events.clone();
    // A listener's requests not yet taken go with it (their ids, and the
    // connections the device answers with a REJ), as the kernel's.
    for request in channel::take_requests_of(&events, p) {
        let child = request.event.id.cast::<IdPriv>();
        drop(request);
        let _ = destroy(child);
    }
    drop(channel::take_for(&events, p));
    drop(events);
    if !(*id).event.is_null() {
        channel::ack((*id).event)?;
        (*id).event = std::ptr::null_mut();
    }
    let g = wait_acked(p, lock(p));
    if g.bound {
        ports::release(p as usize);
    }
    if let Some(i) = g.dev {
        if let Some(devs) = devices::lock()?.as_mut() {
            devs.release(i);
        }
    }
    let sync = g.sync;
    drop(g);
    if !(*id).route.path_rec.is_null() {
        libc::free((*id).route.path_rec.cast());
    }
    if sync {
        channel::destroy(channel);
    }
    drop(Box::from_raw(p));
    Ok(())
}

/// Binds `p` to device `i`'s port `port` (`ucma_get_device`): its context,
/// the device's PD, the port, the RoCE P_Key.
pub(crate) unsafe fn attach(
    p: *mut IdPriv,
    g: &mut Inner,
    i: usize,
    port: u8,
) -> Result<(), c_int> {
    let mut devs = devices::lock()?;
    let (verbs, pd) = devs.as_mut().ok_or(libc::ENODEV)?.acquire(i)?;
    let id = std::ptr::addr_of_mut!((*p).id);
    (*id).verbs = verbs;
    (*id).pd = pd;
    (*id).port_num = port;
    (*id).route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
    g.dev = Some(i);
    Ok(())
}
