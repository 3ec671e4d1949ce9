//! `rdma_cm_id`s: creation and destruction, binding, address and route
//! resolution, QPs and SRQs, options, and the state checks of the calls
//! that go on to the device CM (`cm.rs`).
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

/// `ip` in the family of `like` (an IPv4 address in an IPv6 id is
/// IPv4-mapped).
fn in_family(ip: IpAddr, like: &SocketAddr) -> IpAddr {
    match (ip, like) {
        (IpAddr::V4(v4), SocketAddr::V6(_)) => IpAddr::V6(v4.to_ipv6_mapped()),
        (ip, _) => ip,
    }
}

/// `rdma_bind_addr` with the id locked: the address must be a device's
/// (or unspecified), the port free in the id's port space.
unsafe fn bind_locked(p: *mut IdPriv, g: &mut Inner, sa: SocketAddr) -> Result<(), c_int> {
    if g.state != State::Idle {
        return Err(libc::EINVAL);
    }
    let ip = devices::canonical(sa.ip());
    let owner = if ip.is_unspecified() {
        None
    } else {
        let mut devs = devices::lock()?;
        match devs.as_mut().ok_or(libc::ENODEV)?.owner(ip) {
            Some(o) => Some(o),
            None if devices::host_address(ip) => return Err(libc::ENODEV),
            None => return Err(libc::EADDRNOTAVAIL),
        }
    };
    let binding = ports::Binding {
        owner: p as usize,
        ps: (*p).id.ps,
        ip,
        port: sa.port(),
        reuseaddr: g.reuseaddr,
        afonly: g.afonly,
        listening: false,
    };
    let port = ports::bind(binding)?;
    g.bound = true;
    if let Some((i, port_num)) = owner {
        if let Err(e) = attach(p, g, i, port_num) {
            ports::release(p as usize);
            g.bound = false;
            return Err(e);
        }
        (*p).id.route.addr.addr.ibaddr.sgid = devices::ip_gid(ip);
    }
    let mut sa = sa;
    sa.set_port(port);
    (*p).id.route.addr.src_storage = addr::storage(sa);
    g.state = State::AddrBound;
    Ok(())
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` NULL or live; `a` NULL or a socket address.
pub unsafe fn bind_addr(id: *mut rdma_cm_id, a: *const sockaddr) -> Result<(), c_int> {
    let p = from_c(id)?;
    if addr::addrlen(a) == 0 {
        return Err(libc::EINVAL);
    }
    let sa = addr::read(a).ok_or(libc::EINVAL)?;
    bind_locked(p, &mut lock(p), sa)
}

/// `rdma_resolve_addr`: binds first when the id is not bound (to `src`,
/// or to the unspecified address of `dst`'s family), then finds the device
/// a packet to `dst` leaves from and raises ADDR_RESOLVED, or ADDR_ERROR
/// (status -ENETUNREACH) when no device has an address that reaches it.
/// Resolution needs no message (RoCE: the destination's GID is its
/// address), so the event is raised at once.
///
/// # Safety
/// `id` NULL or live; the addresses NULL or socket addresses.
pub unsafe fn resolve_addr(
    id: *mut rdma_cm_id,
    src: *const sockaddr,
    dst: *const sockaddr,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if addr::addrlen(dst) == 0 || (!src.is_null() && addr::addrlen(src) == 0) {
        return Err(libc::EINVAL);
    }
    let dst_sa = addr::read(dst).ok_or(libc::EINVAL)?;
    {
        let mut g = lock(p);
        if g.state == State::Idle {
            let src_sa = addr::read(src)
                .unwrap_or_else(|| SocketAddr::new(devices::any(dst_sa.is_ipv6()), 0));
            bind_locked(p, &mut g, src_sa)?;
        }
        let src_sa = addr::from_storage(&(*p).id.route.addr.src_storage).ok_or(libc::EINVAL)?;
        if src_sa.is_ipv6() != dst_sa.is_ipv6() || g.state != State::AddrBound {
            return Err(libc::EINVAL);
        }
        (*p).id.route.addr.dst_storage = addr::storage(dst_sa);
        g.state = State::AddrQuery;
        let src_ip = devices::canonical(src_sa.ip());
        let mut dst_ip = devices::canonical(dst_sa.ip());
        let route = {
            let mut devs = devices::lock()?;
            let devs = devs.as_mut().ok_or(libc::ENODEV)?;
            if !dst_ip.is_unspecified() {
                devs.route(dst_ip, g.dev)
            } else if !src_ip.is_unspecified() {
                // The unspecified destination is the id itself (loopback).
                dst_ip = src_ip;
                devs.route(dst_ip, g.dev)
            } else {
                let own = devs.addresses().into_iter().find(|(i, _, a)| {
                    a.is_ipv6() == dst_sa.is_ipv6() && g.dev.is_none_or(|d| d == *i)
                });
                if let Some((_, _, a)) = own {
                    dst_ip = a;
                }
                own
            }
        };
        let (event, status) = match route {
            Some((i, port, from)) => {
                let attached = if g.dev.is_none() { attach(p, &mut g, i, port) } else { Ok(()) };
                match attached {
                    Ok(()) => {
                        let src_ip = if src_ip.is_unspecified() {
                            ports::rebind(p as usize, from);
                            let s = addr::with_ip(src_sa, in_family(from, &src_sa));
                            (*p).id.route.addr.src_storage = addr::storage(s);
                            from
                        } else {
                            src_ip
                        };
                        if dst_sa.ip().is_unspecified() {
                            let d = addr::with_ip(dst_sa, in_family(dst_ip, &dst_sa));
                            (*p).id.route.addr.dst_storage = addr::storage(d);
                        }
                        (*p).id.route.addr.addr.ibaddr.sgid = devices::ip_gid(src_ip);
                        (*p).id.route.addr.addr.ibaddr.dgid = devices::ip_gid(dst_ip);
                        g.state = State::AddrResolved;
                        (kind::ADDR_RESOLVED, 0)
                    }
                    Err(e) => {
                        g.state = State::AddrBound;
                        (kind::ADDR_ERROR, -e)
                    }
                }
            }
            None => {
                g.state = State::AddrBound;
                (kind::ADDR_ERROR, -libc::ENETUNREACH)
            }
        };
        raise(p, &g, event, status);
    }
    complete(p)
}

/// Stores `path` as the id's one path (`route.path_rec`, `num_paths` 1).
pub(crate) unsafe fn set_path(p: *mut IdPriv, path: ibv_sa_path_rec) -> Result<(), c_int> {
    let rec = libc::malloc(size_of::<ibv_sa_path_rec>()).cast::<ibv_sa_path_rec>();
    if rec.is_null() {
        return Err(libc::ENOMEM);
    }
    rec.write(path);
    let route = std::ptr::addr_of_mut!((*p).id.route);
    if !(*route).path_rec.is_null() {
        libc::free((*route).path_rec.cast());
    }
    (*route).path_rec = rec;
    (*route).num_paths = 1;
    Ok(())
}

/// The RoCE path the kernel makes (`cma_resolve_iboe_route`) and librdmacm
/// reads back (`ucma_query_path`): GIDs from the addresses, no LIDs,
/// P_Key 0xffff, hop limit 64, the port's active MTU exactly, the current
/// rate, packet lifetime 16 (or the ACK timeout's less one), flow label
/// from the ports; preference is the flags the kernel gives the primary
/// path.
pub(crate) unsafe fn iboe_path(p: *mut IdPriv, g: &Inner, mtu: c_int) -> ibv_sa_path_rec {
    let a = &(*p).id.route.addr;
    let src = addr::from_storage(&a.src_storage);
    let dst = addr::from_storage(&a.dst_storage);
    let flow = match (src, dst) {
        (Some(SocketAddr::V6(s)), _) if s.flowinfo() & 0xfffff != 0 => s.flowinfo() & 0xfffff,
        (s, d) => {
            let sport = s.map_or(0, |s| u32::from(s.port()));
            let dport = d.map_or(0, |d| u32::from(d.port()));
            (sport * 31 + dport) & 0xfffff
        }
    };
    ibv_sa_path_rec {
        dgid: a.addr.ibaddr.dgid,
        sgid: a.addr.ibaddr.sgid,
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: flow.to_be(),
        hop_limit: 64,
        traffic_class: g.tos.unwrap_or(0),
        reversible: 1,
        numb_path: 1,
        pkey: 0xffffu16.to_be(),
        sl: 0,
        mtu_selector: 2,
        mtu: mtu as u8,
        rate_selector: 2,
        rate: 0,
        packet_life_time_selector: 2,
        packet_life_time: match g.timeout {
            Some(t) if t > 0 => t - 1,
            _ => 16,
        },
        preference: IB_PATH_PRIMARY_BIDIRECTIONAL as u8,
    }
}

/// `rdma_resolve_route`: RoCE has no subnet manager to ask; the path is
/// made from the addresses and the port (ROUTE_RESOLVED at once).
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn resolve_route(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = from_c(id)?;
    if (*p).id.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    {
        let mut g = lock(p);
        if g.state != State::AddrResolved {
            return Err(libc::EINVAL);
        }
        g.state = State::RouteQuery;
        let port = usize::from((*p).id.port_num.max(1));
        let mtu = {
            let devs = devices::lock()?;
            let d = g.dev.and_then(|i| devs.as_ref().map(|d| &d.list[i]));
            d.and_then(|d| d.active_mtu.get(port - 1).copied()).unwrap_or(0)
        };
        if mtu <= 0 {
            g.state = State::AddrResolved;
            raise(p, &g, kind::ROUTE_ERROR, -libc::EINVAL);
        } else {
            let path = iboe_path(p, &g, mtu);
            set_path(p, path)?;
            g.state = State::RouteResolved;
            raise(p, &g, kind::ROUTE_RESOLVED, 0);
        }
    }
    complete(p)
}

/// `rdma_init_qp_attr`. Without a connection (or for UD) the attributes
/// are the kernel's `cma_ib_init_qp_attr`: the P_Key index of 0xffff, the
/// port, no remote access (RC/UC) or the Q_Key (UD), whatever the state
/// asked. A connected id's are `ib_cm_init_qp_attr`'s, from what the CM
/// agreed ([`qp_attr`]).
///
/// # Safety
/// `id` NULL or live; `attr` and `mask` NULL or writable.
pub unsafe fn init_qp_attr(id: *mut rdma_cm_id, attr: *mut ibv_qp_attr) -> Result<c_int, c_int> {
    let p = from_c(id)?;
    if attr.is_null() || !(0..=IBV_QPS_ERR).contains(&(*attr).qp_state) {
        return Err(libc::EINVAL);
    }
    let g = lock(p);
    let (a, mask) = qp_attr(p, &g, (*attr).qp_state)?;
    let (cap, rate_limit) = ((*attr).cap, (*attr).rate_limit);
    *attr = ibv_qp_attr { cap, rate_limit, ..a };
    Ok(mask)
}

/// The attributes moving `p`'s QP to `state`, with their mask, the id
/// locked (`g`). A connection's (the CM holds the id, not UD): INIT with
/// remote write (and read and atomics when this side takes READs), RTR
/// with the path, the peer's QP and starting PSN, RTS with this side's
/// PSN and the ACK timeout and retries agreed, as `ib_cm_init_qp_attr`.
pub(crate) unsafe fn qp_attr(
    p: *mut IdPriv,
    g: &Inner,
    state: c_int,
) -> Result<(ibv_qp_attr, c_int), c_int> {
    let verbs = (*p).id.verbs;
    if verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
    let port = (*p).id.port_num;
    let ud = (*p).id.qp_type == IBV_QPT_UD;
    let rc = (*p).id.qp_type == IBV_QPT_RC;
    let connected = g.in_cm && !ud && g.listen_sid.is_none();
    if connected && state == IBV_QPS_RTR {
        let c = &g.conn;
        let path = (*p).id.route.path_rec.as_ref().ok_or(libc::EINVAL)?;
        a.ah_attr = ah_attr(p, path)?;
        a.path_mtu = c_int::from(c.path_mtu);
        a.dest_qp_num = c.remote_qpn;
        a.rq_psn = g.seq_num;
        let mut mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if rc {
            a.max_dest_rd_atomic = c.responder_resources;
            a.min_rnr_timer = 0;
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        return Ok((a, mask));
    }
    if connected && state == IBV_QPS_RTS {
        let c = &g.conn;
        a.sq_psn = c.sq_psn;
        let mut mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if rc {
            a.timeout = g.timeout.unwrap_or(c.timeout);
            a.retry_cnt = c.retry_count;
            a.rnr_retry = c.rnr_retry_count;
            a.max_rd_atomic = c.initiator_depth;
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return Ok((a, mask));
    }
    let index = ibv_get_pkey_index(verbs, port, 0xffffu16.to_be());
    if index < 0 {
        return Err(libc::EINVAL);
    }
    a.pkey_index = index as u16;
    a.port_num = port;
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if ud {
        a.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        // IB_ACCESS_REMOTE_WRITE, and READ and atomics when this side
        // takes READs (cm_init_qp_init_attr); none before a connection.
        a.qp_access_flags = match (connected, g.conn.responder_resources) {
            (false, _) => 0,
            (true, 0) => 2,
            (true, _) => 2 | 4 | 8,
        };
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    if state == IBV_QPS_RTR {
        a.rq_psn = g.seq_num;
    }
    Ok((a, mask))
}

/// The address vector of a path (`ib_init_ah_attr_from_path` on RoCE):
/// global, the GIDs (the source by its index in the port's table), flow
/// label, hop limit, traffic class, no LID.
pub(crate) unsafe fn ah_attr(p: *mut IdPriv, path: &ibv_sa_path_rec) -> Result<ibv_ah_attr, c_int> {
    let verbs = (*p).id.verbs;
    let port = (*p).id.port_num;
    let sgid_index = gid_index(verbs, port, &path.sgid).ok_or(libc::EADDRNOTAVAIL)?;
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: path.dgid,
            flow_label: u32::from_be(path.flow_label),
            sgid_index,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
        },
        dlid: 0,
        sl: path.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    })
}

/// The index of `gid` in the GID table of `verbs`' port `port`.
pub(crate) unsafe fn gid_index(verbs: *mut ibv_context, port: u8, gid: &ibv_gid) -> Option<u8> {
    let mut p = ibv_port_attr::default();
    if ibv_query_port(verbs, port, &mut p) != 0 {
        return None;
    }
    (0..p.gid_tbl_len.clamp(0, 255)).find_map(|i| {
        let mut g = ibv_gid::default();
        (ibv_query_gid(verbs, port, i, &mut g) == 0 && g.raw == gid.raw).then_some(i as u8)
    })
}

/// `ucma_init_conn_qp`: the QP to INIT with the id's attributes.
unsafe fn init_conn_qp(p: *mut IdPriv, qp: *mut ibv_qp) -> Result<(), c_int> {
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_INIT, ..Default::default() };
    let mask = init_qp_attr(p.cast(), &mut a)?;
    verb_result(ibv_modify_qp(qp, &mut a, mask))
}

/// `ucma_init_ud_qp`: INIT, RTR, then RTS with PSN 0 (a UD QP sends
/// without a connection).
unsafe fn init_ud_qp(p: *mut IdPriv, qp: *mut ibv_qp) -> Result<(), c_int> {
    init_conn_qp(p, qp)?;
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_RTR, ..Default::default() };
    verb_result(ibv_modify_qp(qp, &mut a, IBV_QP_STATE))?;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    verb_result(ibv_modify_qp(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN))
}

/// `ucma_destroy_cqs`.
unsafe fn destroy_cqs(id: *mut rdma_cm_id) {
    if (*id).qp_type == IBV_QPT_XRC_RECV && !(*id).srq.is_null() {
        return;
    }
    if !(*id).recv_cq.is_null() {
        ibv_destroy_cq((*id).recv_cq);
        if !(*id).send_cq.is_null() && (*id).send_cq != (*id).recv_cq {
            ibv_destroy_cq((*id).send_cq);
        }
        (*id).send_cq = std::ptr::null_mut();
        (*id).recv_cq = std::ptr::null_mut();
    } else if !(*id).send_cq.is_null() {
        ibv_destroy_cq((*id).send_cq);
        (*id).send_cq = std::ptr::null_mut();
    }
    if !(*id).recv_cq_channel.is_null() {
        ibv_destroy_comp_channel((*id).recv_cq_channel);
        if !(*id).send_cq_channel.is_null() && (*id).send_cq_channel != (*id).recv_cq_channel {
            ibv_destroy_comp_channel((*id).send_cq_channel);
        }
        (*id).send_cq_channel = std::ptr::null_mut();
        (*id).recv_cq_channel = std::ptr::null_mut();
    } else if !(*id).send_cq_channel.is_null() {
        ibv_destroy_comp_channel((*id).send_cq_channel);
        (*id).send_cq_channel = std::ptr::null_mut();
    }
}

/// `ucma_create_cqs`: a CQ with a completion channel of its own for each
/// side asked (size 0: none), the id their context.
unsafe fn create_cqs(id: *mut rdma_cm_id, send: u32, recv: u32) -> Result<(), c_int> {
    let verbs = (*id).verbs;
    let make = move |size: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
        let ch = ibv_create_comp_channel(verbs);
        if ch.is_null() {
            return Err(last_errno());
        }
        let cq = ibv_create_cq(verbs, size as c_int, id.cast(), ch, 0);
        if cq.is_null() {
            let e = last_errno();
            ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((ch, cq))
    };
    if recv > 0 {
        match make(recv) {
            Ok((ch, cq)) => {
                (*id).recv_cq_channel = ch;
                (*id).recv_cq = cq;
            }
            Err(e) => {
                destroy_cqs(id);
                return Err(e);
            }
        }
    }
    if send > 0 {
        match make(send) {
            Ok((ch, cq)) => {
                (*id).send_cq_channel = ch;
                (*id).send_cq = cq;
            }
            Err(e) => {
                destroy_cqs(id);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// `rdma_create_qp_ex`: the id's PD unless one is given (of the id's
/// device), CQs made for the sides given none, the SRQ the id has, then
/// the QP moved to INIT (RC/UC) or RTS (UD) as librdmacm does.
///
/// # Safety
/// `id` NULL or live; `attr` NULL or valid.
pub unsafe fn create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if attr.is_null() || !(*id).qp.is_null() || (*id).verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let a = &mut *attr;
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        a.pd = (*id).pd;
    } else if field::<*mut ibv_context>(a.pd.cast(), off::PD_CONTEXT) != (*id).verbs {
        return Err(libc::EINVAL);
    }
    if (!(*id).recv_cq.is_null() && !a.recv_cq.is_null() && (*id).recv_cq != a.recv_cq)
        || (!(*id).send_cq.is_null() && !a.send_cq.is_null() && (*id).send_cq != a.send_cq)
    {
        return Err(libc::EINVAL);
    }
    if (*id).qp_type == IBV_QPT_XRC_RECV {
        // An XRC domain (ibv_open_xrcd): uroce offers no XRC.
        return Err(libc::EOPNOTSUPP);
    }
    let send = if a.send_cq.is_null() && (*id).send_cq.is_null() { a.cap.max_send_wr } else { 0 };
    let recv = if a.recv_cq.is_null() && (*id).recv_cq.is_null() { a.cap.max_recv_wr } else { 0 };
    create_cqs(id, send, recv)?;
    if a.send_cq.is_null() {
        a.send_cq = (*id).send_cq;
    }
    if a.recv_cq.is_null() {
        a.recv_cq = (*id).recv_cq;
    }
    if !(*id).srq.is_null() && a.srq.is_null() {
        a.srq = (*id).srq;
    }
    let qp = create_qp_ex_verb((*id).verbs, attr);
    if qp.is_null() {
        let e = last_errno();
        destroy_cqs(id);
        return Err(e);
    }
    let init = if (*id).qp_type == IBV_QPT_UD { init_ud_qp(p, qp) } else { init_conn_qp(p, qp) };
    if let Err(e) = init {
        ibv_destroy_qp(qp);
        destroy_cqs(id);
        return Err(e);
    }
    (*id).pd = field(qp.cast(), off::QP_PD);
    (*id).qp = qp;
    Ok(())
}

use crate::verbs::create_qp_ex as create_qp_ex_verb;

/// `rdma_create_qp`: [`create_qp_ex`] with the PD given (or the id's).
///
/// # Safety
/// As [`create_qp_ex`]; `attr` an `ibv_qp_init_attr`.
pub unsafe fn create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: plain data; the first 64 bytes are the ibv_qp_init_attr.
    let mut ex: ibv_qp_init_attr_ex = std::mem::zeroed();
    std::ptr::copy_nonoverlapping(
        attr.cast::<u8>(),
        std::ptr::addr_of_mut!(ex).cast(),
        size_of::<ibv_qp_init_attr>(),
    );
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = if pd.is_null() { (*p).id.pd } else { pd };
    let r = create_qp_ex(id, &mut ex);
    std::ptr::copy_nonoverlapping(
        std::ptr::addr_of!(ex).cast::<u8>(),
        attr.cast(),
        size_of::<ibv_qp_init_attr>(),
    );
    r
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` live.
pub unsafe fn destroy_qp(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    if !(*id).qp.is_null() {
        ibv_destroy_qp((*id).qp);
    }
    (*id).qp = std::ptr::null_mut();
    destroy_cqs(id);
}

/// `rdma_create_srq_ex`.
///
/// # Safety
/// `id` NULL or live; `attr` NULL or valid.
pub unsafe fn create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> Result<(), c_int> {
    from_c(id)?;
    if attr.is_null() || (*id).verbs.is_null() || (*attr).comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(libc::EINVAL);
    }
    let a = &mut *attr;
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.pd = (*id).pd;
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if a.srq_type == IBV_SRQT_XRC {
        // An XRC domain (ibv_open_xrcd): uroce offers no XRC.
        return Err(libc::EOPNOTSUPP);
    }
    let srq = create_srq_ex_verb((*id).verbs, attr);
    if srq.is_null() {
        return Err(last_errno());
    }
    if (*id).pd.is_null() {
        (*id).pd = a.pd;
    }
    (*id).srq = srq;
    Ok(())
}

use crate::verbs::create_srq_ex as create_srq_ex_verb;

/// `rdma_create_srq`.
///
/// # Safety
/// As [`create_srq_ex`]; `attr` an `ibv_srq_init_attr`.
pub unsafe fn create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> Result<(), c_int> {
    from_c(id)?;
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: plain data; the first 24 bytes are the ibv_srq_init_attr.
    let mut ex: ibv_srq_init_attr_ex = std::mem::zeroed();
    std::ptr::copy_nonoverlapping(
        attr.cast::<u8>(),
        std::ptr::addr_of_mut!(ex).cast(),
        size_of::<ibv_srq_init_attr>(),
    );
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type = if (*id).qp_type == IBV_QPT_XRC_RECV { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
    ex.pd = pd;
    let r = create_srq_ex(id, &mut ex);
    std::ptr::copy_nonoverlapping(
        std::ptr::addr_of!(ex).cast::<u8>(),
        attr.cast(),
        size_of::<ibv_srq_init_attr>(),
    );
    r
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` live.
pub unsafe fn destroy_srq(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    if !(*id).srq.is_null() {
        ibv_destroy_srq((*id).srq);
    }
    (*id).srq = std::ptr::null_mut();
    destroy_cqs(id);
}

/// `RDMA_OPTION_IB_PATH`: the primary bidirectional path of the records
/// given becomes the route (ADDR_RESOLVED → ROUTE_RESOLVED).
unsafe fn set_ib_path(
    p: *mut IdPriv,
    g: &mut Inner,
    val: *const u8,
    len: usize,
) -> Result<(), c_int> {
    let size = size_of::<ibv_path_data>();
    if len % size != 0 {
        return Err(libc::EINVAL);
    }
    let paths = (0..len / size).map(|k| val.add(k * size).cast::<ibv_path_data>().read_unaligned());
    let Some(data) = paths.into_iter().find(|d| d.flags == IB_PATH_PRIMARY_BIDIRECTIONAL) else {
        return Err(libc::EINVAL);
    };
    if (*p).id.verbs.is_null() || g.state != State::AddrResolved {
        return Err(libc::EINVAL);
    }
    let r = data.path;
    let fl_hop = u32::from_be(r.flowlabel_hoplimit);
    let path = ibv_sa_path_rec {
        dgid: r.dgid,
        sgid: r.sgid,
        dlid: r.dlid,
        slid: r.slid,
        raw_traffic: 0,
        flow_label: (fl_hop >> 8).to_be(),
        hop_limit: fl_hop as u8,
        traffic_class: r.tclass,
        reversible: c_int::from(r.reversible_numpath >> 7),
        numb_path: 1,
        pkey: r.pkey,
        sl: (u16::from_be(r.qosclass_sl) & 0xf) as u8,
        mtu_selector: 2,
        mtu: r.mtu & 0x1f,
        rate_selector: 2,
        rate: r.rate & 0x1f,
        packet_life_time_selector: 2,
        packet_life_time: r.packetlifetime & 0x1f,
        preference: data.flags as u8,
    };
    set_path(p, path)?;
    g.state = State::RouteResolved;
    raise(p, g, kind::ROUTE_RESOLVED, 0);
    Ok(())
}

/// `rdma_set_option`: the kernel's options (`ucma_set_option_id`,
/// `ucma_set_option_ib`): EINVAL for a wrong length or state, ENOSYS for
/// an option or level it does not know.
///
/// # Safety
/// `id` NULL or live; `val` NULL or `len` readable bytes.
pub unsafe fn set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if val.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    let mut g = lock(p);
    let int = |len: usize| -> Result<c_int, c_int> {
        if len != size_of::<c_int>() {
            return Err(libc::EINVAL);
        }
        Ok(val.cast::<c_int>().read_unaligned())
    };
    let byte = |len: usize| -> Result<u8, c_int> {
        if len != 1 {
            return Err(libc::EINVAL);
        }
        Ok(*val.cast::<u8>())
    };
    match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => g.tos = Some(byte(len)?),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
            let reuse = int(len)? != 0;
            if !((reuse && g.state != State::Listen) || g.state == State::Idle) {
                return Err(libc::EINVAL);
            }
            g.reuseaddr = reuse;
            ports::options(p as usize, g.reuseaddr, g.afonly);
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
            let afonly = int(len)? != 0;
            if !matches!(g.state, State::Idle | State::AddrBound) {
                return Err(libc::EINVAL);
            }
            g.afonly = afonly;
            ports::options(p as usize, g.reuseaddr, g.afonly);
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
            let t = byte(len)?;
            if (*p).id.qp_type != IBV_QPT_RC && (*p).id.qp_type != IBV_QPT_XRC_SEND {
                return Err(libc::EINVAL);
            }
            g.timeout = Some(t);
        }
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => set_ib_path(p, &mut g, val.cast(), len)?,
        _ => return Err(libc::ENOSYS),
    }
    Ok(())
}

/// `rdma_migrate_id`: the id (and its events not yet taken) moves to
/// `channel` (NULL: a channel of its own, synchronous mode); returns once
/// every event handed out on the old one is acknowledged.
///
/// # Safety
/// `id` NULL or live; `channel` NULL or live.
pub unsafe fn migrate(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> Result<(), c_int> {
    let p = from_c(id)?;
    let old_sync = lock(p).sync;
    if old_sync && channel.is_null() {
        return Err(libc::EINVAL);
    }
    let (new, sync) = if channel.is_null() {
        (channel::create()?, true)
    } else {
        (channel.cast::<Channel>(), false)
    };
    let old = (*p).id.channel.cast::<Channel>();
    if old_sync {
        // The event a synchronous id keeps is acknowledged on the old one.
        let event = std::ptr::addr_of_mut!((*p).id.event);
        if !(*event).is_null() {
            channel::ack(*event)?;
            *event = std::ptr::null_mut();
        }
    }
    {
        // The CM's registry, then the id: the event thread raises no event
        // for the id while it and its queued events move.
        let _r = crate::cm::lock();
        let mut g = lock(p);
        let new_events = channel::sink(new);
        for event in channel::take_for(&g.events, p) {
            channel::push(&new_events, event);
        }
        g.events = new_events;
        g.sync = sync;
        (*p).id.channel = new.cast();
    }
    if old_sync {
        channel::destroy(old);
    }
    drop(wait_acked(p, lock(p)));
    Ok(())
}

/// `rdma_create_ep`: a synchronous id for `res`, bound (passive) or
/// resolved to its destination with a route, and a QP when attributes are
/// given.
///
/// # Safety
/// The pointers NULL or valid.
pub unsafe fn create_ep(
    out: *mut *mut rdma_cm_id,
    res: *const rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    if out.is_null() || res.is_null() {
        return Err(libc::EINVAL);
    }
    let res = &*res;
    let p = create(std::ptr::null_mut(), std::ptr::null_mut(), res.ai_port_space, res.ai_qp_type)?;
    let id = p.cast::<rdma_cm_id>();
    let made = (|| {
        if res.ai_flags & RAI_PASSIVE != 0 {
            bind_addr(id, res.ai_src_addr)?;
            if !pd.is_null() {
                (*id).pd = pd;
            }
            if !qp_init_attr.is_null() {
                let mut a = *qp_init_attr;
                a.qp_type = res.ai_qp_type;
                lock(p).qp_init_attr = Some(a);
            }
            return Ok(());
        }
        resolve_addr(id, res.ai_src_addr, res.ai_dst_addr)?;
        if res.ai_route_len > 0 {
            set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, res.ai_route, res.ai_route_len)?;
            complete(p)?;
        } else {
            resolve_route(id)?;
        }
        if !qp_init_attr.is_null() {
            (*qp_init_attr).qp_type = res.ai_qp_type;
            create_qp(id, pd, qp_init_attr)?;
        }
        if res.ai_connect_len > 0 && !res.ai_connect.is_null() {
            let data = std::slice::from_raw_parts(res.ai_connect.cast::<u8>(), res.ai_connect_len);
            lock(p).connect = data.to_vec();
        }
        Ok(())
    })();
    match made {
        Ok(()) => {
            *out = id;
            Ok(())
        }
        Err(e) => {
            destroy_ep(id);
            Err(e)
        }
    }
}

/// `rdma_destroy_ep`.
///
/// # Safety
/// `id` live, not used again.
pub unsafe fn destroy_ep(id: *mut rdma_cm_id) {
    let Ok(p) = from_c(id) else { return };
    if !(*id).qp.is_null() {
        destroy_qp(id);
    }
    if !(*id).srq.is_null() {
        destroy_srq(id);
    }
    lock(p).qp_init_attr = None;
    let _ = destroy(p);
}

/// `rdma_get_src_port` / `rdma_get_dst_port` (network byte order).
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn port(id: *mut rdma_cm_id, dst: bool) -> u16 {
    if id.is_null() {
        return 0;
    }
    let a = &(*id).route.addr;
    let s = if dst { &a.dst_storage } else { &a.src_storage };
    addr::from_storage(s).map_or(0, |a| a.port().to_be())
}

/// `rdma_set_local_ece`.
///
/// # Safety
/// The pointers NULL or valid.
pub unsafe fn set_local_ece(id: *mut rdma_cm_id, ece: *const ibv_ece) -> Result<(), c_int> {
    let p = from_c(id)?;
    if !(*id).qp.is_null() || ece.is_null() || (*ece).comp_mask != 0 {
        return Err(libc::EINVAL);
    }
    let mut g = lock(p);
    g.local_ece.vendor_id = (*ece).vendor_id;
    g.local_ece.options = (*ece).options;
    Ok(())
}

/// `rdma_get_remote_ece`: what the peer's CM message said (nothing yet).
///
/// # Safety
/// The pointers NULL or valid.
pub unsafe fn get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> Result<(), c_int> {
    let p = from_c(id)?;
    if !(*id).qp.is_null() || ece.is_null() {
        return Err(libc::EINVAL);
    }
    let g = lock(p);
    *ece =
        ibv_ece { vendor_id: g.remote_ece.vendor_id, options: g.remote_ece.options, comp_mask: 0 };
    Ok(())
}

// ---------------------------------------------------------------------
// The calls that need the device's CM: librdmacm's and the kernel's
// argument and state checks here, the rest in cm.rs.

/// The device limits of `p` (max initiator depth, max responder
/// resources); EINVAL for an id on no device.
unsafe fn device_limits(g: &Inner) -> Result<(u8, u8), c_int> {
    let i = g.dev.ok_or(libc::EINVAL)?;
    let devs = devices::lock()?;
    let d = &devs.as_ref().ok_or(libc::EINVAL)?.list[i];
    Ok((d.max_initiator_depth, d.max_responder_resources))
}

/// `ucma_valid_param`: for the TCP port space a QP or parameters, and
/// depths within the device's.
unsafe fn valid_param(
    p: *mut IdPriv,
    g: &Inner,
    param: *const rdma_conn_param,
) -> Result<(u8, u8), c_int> {
    let limits = device_limits(g)?;
    if (*p).id.ps != RDMA_PS_TCP {
        return Ok(limits);
    }
    if (*p).id.qp.is_null() && param.is_null() {
        return Err(libc::EINVAL);
    }
    if let Some(c) = param.as_ref() {
        if (c.responder_resources != RDMA_MAX_RESP_RES && c.responder_resources > limits.1)
            || (c.initiator_depth != RDMA_MAX_INIT_DEPTH && c.initiator_depth > limits.0)
        {
            return Err(libc::EINVAL);
        }
    }
    Ok(limits)
}

/// The private data a CM message carries after the rdma_cm header (36
/// bytes, none for the IB port space): REQ 92, REP 196, SIDR REQ 216,
/// SIDR REP 136.
fn private_data_room(ps: c_int, ud: bool, reply: bool) -> usize {
    let total = match (ud, reply) {
        (false, false) => 92,
        (false, true) => 196,
        (true, false) => 216,
        (true, true) => 136,
    };
    if ps == RDMA_PS_IB || reply {
        total
    } else {
        total - 36
    }
}

/// A connection's parameters as librdmacm sends them
/// (`ucma_copy_conn_param_to_kern`).
unsafe fn conn_param(
    p: *mut IdPriv,
    g: &Inner,
    param: *const rdma_conn_param,
    limits: (u8, u8),
) -> ConnParam {
    let id = &(*p).id;
    let c = param.as_ref();
    let mut data = g.connect.clone();
    if let Some(c) = c.filter(|c| !c.private_data.is_null() && c.private_data_len > 0) {
        data.extend_from_slice(std::slice::from_raw_parts(
            c.private_data.cast::<u8>(),
            usize::from(c.private_data_len),
        ));
    }
    let (qp_num, srq) = if id.qp.is_null() {
        c.map_or((0, false), |c| (c.qp_num, c.srq != 0))
    } else {
        (
            field::<u32>(id.qp.cast(), off::QP_NUM),
            !field::<*mut c_void>(id.qp.cast(), off::QP_SRQ).is_null(),
        )
    };
    let depth = |v: Option<u8>, max: u8, limit: u8| v.filter(|v| *v != max).unwrap_or(limit);
    ConnParam {
        private_data: data,
        responder_resources: depth(c.map(|c| c.responder_resources), RDMA_MAX_RESP_RES, limits.1),
        initiator_depth: depth(c.map(|c| c.initiator_depth), RDMA_MAX_INIT_DEPTH, limits.0),
        flow_control: c.map_or(0, |c| c.flow_control),
        retry_count: c.map_or(7, |c| c.retry_count),
        rnr_retry_count: c.map_or(7, |c| c.rnr_retry_count),
        srq,
        qp_num,
    }
}

/// The kernel's `net.rdma_ucm.max_backlog` default.
const MAX_BACKLOG: c_int = 1024;

/// `rdma_listen`: an unbound id binds the IPv4 unspecified address first;
/// then the id must be bound (not listening, not resolved).
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn listen(id: *mut rdma_cm_id, backlog: c_int) -> Result<(), c_int> {
    let p = from_c(id)?;
    let mut r = crate::cm::lock();
    let mut g = lock(p);
    if g.state == State::Idle {
        bind_locked(p, &mut g, SocketAddr::new(devices::any(false), 0))?;
    }
    if g.state != State::AddrBound {
        return Err(libc::EINVAL);
    }
    ports::listen(p as usize, true)?;
    g.state = State::Listen;
    // The kernel's ucma: at most `max_backlog` (1024) requests not yet
    // taken; 0 or less means that many.
    let backlog = if backlog > 0 && backlog < MAX_BACKLOG { backlog } else { MAX_BACKLOG };
    (*p).backlog.store(backlog, Ordering::SeqCst);
    match crate::cm::listen(&mut r, p, &mut g) {
        Ok(()) => {
            g.in_cm = true;
            Ok(())
        }
        Err(e) => {
            let _ = ports::listen(p as usize, false);
            g.state = State::AddrBound;
            Err(e)
        }
    }
}

/// `rdma_connect`: a resolved route, valid parameters, private data that
/// fits the CM message.
///
/// # Safety
/// `id` NULL or live; `param` NULL or valid.
pub unsafe fn connect(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(), c_int> {
    let p = from_c(id)?;
    {
        let mut r = crate::cm::lock();
        let mut g = lock(p);
        let limits = valid_param(p, &g, param)?;
        let ud = (*p).id.qp_type == IBV_QPT_UD;
        let c = conn_param(p, &g, param, limits);
        if c.private_data.len() > private_data_room((*p).id.ps, ud, false) {
            return Err(libc::EINVAL);
        }
        if g.state != State::RouteResolved {
            return Err(libc::EINVAL);
        }
        g.state = State::Connect;
        if let Err(e) = crate::cm::connect(&mut r, p, &mut g, &c) {
            g.state = State::RouteResolved;
            return Err(e);
        }
        g.in_cm = true;
        g.connect.clear();
    }
    complete(p)
}

/// `rdma_accept`: only an id answering a connection request (CONNECT
/// state) accepts.
///
/// # Safety
/// `id` NULL or live; `param` NULL or valid.
pub unsafe fn accept(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(), c_int> {
    let p = from_c(id)?;
    if (*id).qp.is_null() && param.is_null() {
        return Err(libc::EINVAL);
    }
    let ud = (*p).id.qp_type == IBV_QPT_UD;
    {
        let mut r = crate::cm::lock();
        let mut g = lock(p);
        let limits = valid_param(p, &g, param)?;
        let c = conn_param(p, &g, param, limits);
        if c.private_data.len() > private_data_room((*p).id.ps, ud, true) {
            return Err(libc::EINVAL);
        }
        if g.state != State::Connect || !g.in_cm || g.conn.active {
            return Err(libc::EINVAL);
        }
        // As librdmacm's rdma_accept: RDMA_MAX_* (or no parameters) takes
        // the request's, within the device's limits.
        let given = |v: Option<u8>, max: u8| v.filter(|v| *v != max);
        let depths = (
            given(param.as_ref().map(|c| c.responder_resources), RDMA_MAX_RESP_RES),
            given(param.as_ref().map(|c| c.initiator_depth), RDMA_MAX_INIT_DEPTH),
        );
        crate::cm::accept(&mut r, p, &mut g, &c, depths, limits)?;
    }
    if ud {
        return Ok(());
    }
    complete(p)
}

/// `rdma_reject`, `rdma_reject_ece` (`reason` 35): only a request is
/// rejected.
///
/// # Safety
/// `id` NULL or live; `data` NULL or `len` bytes.
pub unsafe fn reject(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
    reason: Option<u8>,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if usize::from(len) > 148 {
        return Err(libc::EINVAL);
    }
    let _ = reason;
    let mut r = crate::cm::lock();
    let mut g = lock(p);
    if g.state != State::Connect || !g.in_cm {
        return Err(libc::EINVAL);
    }
    let data = if data.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len))
    };
    crate::cm::reject(&mut r, p, &mut g, data)
}

/// `rdma_disconnect`: librdmacm first moves the QP to ERR (an id on a
/// device), then the CM ends the connection; an id the CM does not hold
/// has none (EINVAL).
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn disconnect(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = from_c(id)?;
    if (*id).verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let device = field::<*mut c_void>((*id).verbs.cast(), off::CONTEXT_DEVICE);
    if device.is_null() || field::<c_int>(device, off::DEVICE_TRANSPORT_TYPE) != IBV_TRANSPORT_IB {
        return Err(libc::EINVAL);
    }
    if !(*id).qp.is_null() {
        let mut a = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..Default::default() };
        verb_result(ibv_modify_qp((*id).qp, &mut a, IBV_QP_STATE))?;
    }
    {
        let _r = crate::cm::lock();
        let mut g = lock(p);
        if !g.in_cm || g.state != State::Connect {
            return Err(libc::EINVAL);
        }
        crate::cm::disconnect(p, &mut g);
    }
    complete(p)
}

/// `rdma_notify`: only for an id the CM holds.
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn notify(id: *mut rdma_cm_id, event: c_int) -> Result<(), c_int> {
    let p = from_c(id)?;
    let _r = crate::cm::lock();
    let mut g = lock(p);
    if !g.in_cm || g.state == State::Listen {
        return Err(libc::EINVAL);
    }
    // IBV_EVENT_COMM_EST (traffic came before the RTU) on the passive
    // side of a connection, as the kernel's `cm_establish`: EISCONN once
    // established, EINVAL in any other state; no other event is taken.
    if event != IBV_EVENT_COMM_EST || g.cm.is_none() || g.conn.active {
        return Err(libc::EINVAL);
    }
    if g.conn.established {
        return Err(libc::EISCONN);
    }
    crate::cm::establish(p, &mut g).map_err(|_| libc::EINVAL)
}

/// `rdma_establish`: an id without a QP, connecting.
///
/// # Safety
/// `id` NULL or live.
pub unsafe fn establish(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = from_c(id)?;
    if !(*id).qp.is_null() {
        return Err(libc::EINVAL);
    }
    let _r = crate::cm::lock();
    let mut g = lock(p);
    if g.state != State::Connect || !g.in_cm {
        return Err(libc::EINVAL);
    }
    crate::cm::establish(p, &mut g)
}

/// `rdma_join_multicast2`: a UD id on a device, bound or resolved.
///
/// # Safety
/// `id` NULL or live; `group` a socket address of `len` bytes.
pub unsafe fn join_multicast(
    id: *mut rdma_cm_id,
    group: *const sockaddr,
    len: usize,
    flags: u32,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    let sa = addr::read(group).ok_or(libc::EINVAL)?;
    let mut g = lock(p);
    if (*id).verbs.is_null()
        || !matches!(g.state, State::AddrBound | State::AddrResolved)
        || (*id).qp_type != IBV_QPT_UD
    {
        return Err(libc::EINVAL);
    }
    // Multicast groups (an SA join, on RoCE an IGMP/MLD one) are not
    // offered by uroce's device yet: a group is never joined.
    let _ = (sa, len, flags, &mut g.mc);
    Err(libc::ENOSYS)
}

/// `rdma_leave_multicast`: EADDRNOTAVAIL for a group not joined.
///
/// # Safety
/// `id` NULL or live; `group` NULL or a socket address.
pub unsafe fn leave_multicast(id: *mut rdma_cm_id, group: *const sockaddr) -> Result<(), c_int> {
    let p = from_c(id)?;
    let len = addr::addrlen(group) as usize;
    if len == 0 {
        return Err(libc::EINVAL);
    }
    let bytes = std::slice::from_raw_parts(group.cast::<u8>(), len);
    let mut g = lock(p);
    let Some(k) = g.mc.iter().position(|m| m.addr.len() >= len && &m.addr[..len] == bytes) else {
        return Err(libc::EADDRNOTAVAIL);
    };
    let m = g.mc.remove(k);
    let sa = addr::read(group).ok_or(libc::EINVAL)?;
    let _ = m.join_flags;
    let _ = sa;
    Ok(())
}

/// `rdma_get_request`: the next connection request of a synchronous
/// listening id, with the QP `rdma_create_ep` asked for. An id that is not
/// listening has none to wait for: EINVAL (librdmacm would wait forever).
///
/// # Safety
/// `listen` NULL or live; `out` NULL or writable.
pub unsafe fn get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> Result<(), c_int> {
    let p = from_c(listen)?;
    let (sync, state, attr) = {
        let g = lock(p);
        (g.sync, g.state, g.qp_init_attr)
    };
    if !sync || out.is_null() || state != State::Listen {
        return Err(libc::EINVAL);
    }
    if !(*listen).event.is_null() {
        channel::ack((*listen).event)?;
        (*listen).event = std::ptr::null_mut();
    }
    let event = channel::get((*listen).channel)?;
    let fail = |e: c_int| {
        (*listen).event = event;
        Err(e)
    };
    if (*event).status != 0 {
        return fail((*event).status.abs());
    }
    if (*event).event != kind::CONNECT_REQUEST {
        return fail(libc::EINVAL);
    }
    if let Some(mut a) = attr {
        if let Err(e) = create_qp((*event).id, (*listen).pd, &mut a) {
            return fail(e);
        }
    }
    *out = (*event).id;
    (*(*event).id).event = event;
    Ok(())
}
