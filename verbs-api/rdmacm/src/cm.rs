//! The RDMA CM over the device's CM (`cm_link`: commands and events):
//! what the kernel's `drivers/infiniband/core/cma.c` and librdmacm's
//! `cma.c` do between them, for RoCE.
//!
//! - `rdma_listen`: `CmListen` on the service ID of (port space, port).
//! - `rdma_connect`: `CmConnect` (RC/UC) with the QP, a random 24-bit
//!   starting PSN, the route's GIDs, MTU and flow label, the parameters,
//!   and the rdma_cm header (addresses, ports) before the private data;
//!   `CmSidrRequest` (UD).
//! - A REQ (SIDR_REQ) for a listened service: a new id, child of the
//!   listener (its channel, context, device), its addresses from the
//!   rdma_cm header; `CONNECT_REQUEST` on the listener's channel.
//! - `rdma_accept`: the QP INIT, RTR (the peer's QPN and PSN), RTS, then
//!   `CmAccept`; `ESTABLISHED` when the RTU comes. UD: `CmSidrReply`.
//! - A REP: when the program takes the event (`rdma_get_cm_event`, on its
//!   own thread, as librdmacm), the QP INIT, RTR, RTS, `CmReadyToUse` (the
//!   RTU), `ESTABLISHED` (without a QP: `CONNECT_RESPONSE`,
//!   `rdma_establish` sends the RTU). The event thread never touches a QP.
//! - REJ: `REJECTED` (status the reason), the QP to ERR (when taken).
//!   Requests beyond a listener's backlog are refused. Timeouts:
//!   `UNREACHABLE` (-ETIMEDOUT). DREQ/DREP: `DISCONNECTED`. Time-wait's
//!   end: `TIMEWAIT_EXIT`. SIDR_REP: `ESTABLISHED` with the peer's QPN,
//!   Q_Key and address vector, or `UNREACHABLE`.
//!
//! Locking: the registry (CM IDs and service IDs → ids) is taken before
//! any id's lock, by the calls here and by the event thread, so an id is
//! never used by the event thread once `forget` returned.

use crate::abi::*;
use crate::channel::{self, kind, CmaEvent, Deferred};
use crate::cm_link::{self, random_psn};
use crate::devices;
use crate::id::{self, IdPriv, Inner, State};
use crate::verbs::*;
use libc::c_int;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use uroce_device::cm::{
    CmAcceptParams, CmConnectParams, CmDisconnectCause, CmEvent, CmEventKind, CmSidrParams,
    CmSidrReplyParams,
};
use uroce_device::command::{Command, Gid, Reply};
use uroce_wire::mad::{cma, rej, rep, req, sidr, ServiceId};

/// Who the device CM's IDs and services belong to.
#[derive(Default)]
pub struct Registry {
    /// CM ID → id (`*mut IdPriv`).
    by_cm: HashMap<u32, usize>,
    /// Service ID → listening id.
    listeners: HashMap<u64, usize>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The registry, locked: taken before any id's lock.
pub fn lock() -> MutexGuard<'static, Option<Registry>> {
    let mut g = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(Registry::default);
    g
}

fn reg<'a>(g: &'a mut MutexGuard<'static, Option<Registry>>) -> &'a mut Registry {
    g.get_or_insert_with(Registry::default)
}

/// IBTA's REJ reason "consumer defined" (librdmacm's `rdma_reject`).
pub const REJ_CONSUMER_DEFINED: u16 = 28;

/// The rdma_cm event kinds not in `channel::kind`.
mod ev {
    use libc::c_int;
    pub const CONNECT_RESPONSE: c_int = 5;
    pub const CONNECT_ERROR: c_int = 6;
    pub const UNREACHABLE: c_int = 7;
    pub const ESTABLISHED: c_int = 9;
    pub const DISCONNECTED: c_int = 10;
    pub const TIMEWAIT_EXIT: c_int = 15;
}

/// The service ID of an rdma_cm port space and port.
fn service_id(ps: c_int, port: u16) -> u64 {
    ServiceId::from_ip(cma::PortSpace(ps as u16), port).0
}

/// The rdma_cm header's length in this port space's private data (none
/// for the IB port space).
fn header_len(ps: c_int) -> usize {
    if ps == RDMA_PS_IB {
        0
    } else {
        cma::HEADER_LEN
    }
}

/// The contexts a listener listens on: its device's, or every device's
/// when bound to no device (the unspecified address).
unsafe fn listen_contexts(p: *mut IdPriv) -> Result<Vec<*mut ibv_context>, c_int> {
    if !(*p).id.verbs.is_null() {
        return Ok(vec![(*p).id.verbs]);
    }
    let mut devs = devices::lock()?;
    let devs = devs.as_mut().ok_or(libc::ENODEV)?;
    devs.open_all()?;
    Ok(devs.list.iter().map(|d| d.verbs).collect())
}

/// `rdma_listen` (the id is bound and marked listening; `g` its state).
pub unsafe fn listen(
    r: &mut MutexGuard<'static, Option<Registry>>,
    p: *mut IdPriv,
    g: &mut Inner,
) -> Result<(), c_int> {
    let r = reg(r);
    let port = crate::addr::from_storage(&(*p).id.route.addr.src_storage).map_or(0, |a| a.port());
    let sid = service_id((*p).id.ps, port);
    if r.listeners.contains_key(&sid) {
        return Err(libc::EADDRINUSE);
    }
    let contexts = listen_contexts(p)?;
    let mut done = Vec::new();
    for verbs in contexts {
        let listened = cm_link::watch(verbs)
            .and_then(|()| cm_link::command(verbs, &Command::CmListen { service_id: sid }));
        match listened {
            Ok(_) => done.push(verbs as usize),
            Err(e) => {
                for v in done {
                    let _ = cm_link::command(
                        v as *mut ibv_context,
                        &Command::CmUnlisten { service_id: sid },
                    );
                }
                return Err(if e == libc::EBUSY { libc::EADDRINUSE } else { e });
            }
        }
    }
    r.listeners.insert(sid, p as usize);
    g.listen_sid = Some(sid);
    g.listen_ctx = done;
    Ok(())
}

/// The id is destroyed: the listener stops, the connection ends (the
/// device sends what `ib_destroy_cm_id` sends), no event comes for it.
pub unsafe fn forget(p: *mut IdPriv) {
    let mut rg = lock();
    let r = reg(&mut rg);
    let mut g = id::lock(p);
    if let Some(sid) = g.listen_sid.take() {
        if r.listeners.get(&sid) == Some(&(p as usize)) {
            r.listeners.remove(&sid);
        }
        for v in std::mem::take(&mut g.listen_ctx) {
            let _ =
                cm_link::command(v as *mut ibv_context, &Command::CmUnlisten { service_id: sid });
        }
    }
    if let Some(cm) = g.cm.take() {
        r.by_cm.remove(&cm);
        let _ = cm_link::command((*p).id.verbs, &Command::CmDestroy { id: cm });
    }
}

/// The rdma_cm header for `p`'s connection, then `data`.
unsafe fn with_header(p: *mut IdPriv, data: &[u8]) -> Result<Vec<u8>, c_int> {
    if (*p).id.ps == RDMA_PS_IB {
        return Ok(data.to_vec());
    }
    let a = &(*p).id.route.addr;
    let src = crate::addr::from_storage(&a.src_storage).ok_or(libc::EINVAL)?;
    let dst = crate::addr::from_storage(&a.dst_storage).ok_or(libc::EINVAL)?;
    let (s, d) = (devices::canonical(src.ip()), devices::canonical(dst.ip()));
    let repr = cma::Repr::new(s, src.port(), d).map_err(|_| libc::EINVAL)?;
    let mut out = vec![0u8; cma::HEADER_LEN];
    repr.emit(&mut cma::Packet::new_unchecked(&mut out[..]));
    out.extend_from_slice(data);
    Ok(out)
}

/// `rdma_connect`: a REQ (RC, UC) or a SIDR_REQ (UD). The route is
/// resolved, the parameters checked (`c`).
pub unsafe fn connect(
    r: &mut MutexGuard<'static, Option<Registry>>,
    p: *mut IdPriv,
    g: &mut Inner,
    c: &id::ConnParam,
) -> Result<(), c_int> {
    let r = reg(r);
    let verbs = (*p).id.verbs;
    let path = *(*p).id.route.path_rec.as_ref().ok_or(libc::EINVAL)?;
    let dst = crate::addr::from_storage(&(*p).id.route.addr.dst_storage).ok_or(libc::EINVAL)?;
    let sid = service_id((*p).id.ps, dst.port());
    let private_data = with_header(p, &c.private_data)?;
    cm_link::watch(verbs)?;
    if (*p).id.qp_type == IBV_QPT_UD {
        let params = CmSidrParams {
            remote_gid: Gid(path.dgid.raw),
            pkey_index: 0,
            pkey: 0xffff,
            service_id: sid,
            // CMA_CM_RESPONSE_TIMEOUT (20) less 8, as milliseconds; 15
            // retries (CMA_MAX_CM_RETRIES).
            timeout_ms: 1 << 12,
            max_retries: 15,
        };
        let Reply::CmId { id } =
            cm_link::command(verbs, &Command::CmSidrRequest { params, private_data })?
        else {
            return Err(libc::EIO);
        };
        r.by_cm.insert(id, p as usize);
        g.cm = Some(id);
        g.conn = id::Conn { active: true, ..Default::default() };
        return Ok(());
    }
    let sgid_index =
        id::gid_index(verbs, (*p).id.port_num, &path.sgid).ok_or(libc::EADDRNOTAVAIL)?;
    let psn = random_psn();
    let mut params =
        CmConnectParams::rdma_cm(sgid_index, Gid(path.dgid.raw), sid, c.qp_num.into(), psn);
    params.transport = u8::from((*p).id.qp_type == IBV_QPT_UC);
    params.responder_resources = c.responder_resources;
    params.initiator_depth = c.initiator_depth;
    params.path_mtu = path.mtu;
    params.retry_count = c.retry_count.min(7);
    params.rnr_retry_count = c.rnr_retry_count.min(7);
    params.flow_label = u32::from_be(path.flow_label) & 0xf_ffff;
    params.traffic_class = path.traffic_class;
    params.hop_limit = path.hop_limit;
    params.sl = path.sl;
    params.srq = c.srq;
    let Reply::CmId { id } = cm_link::command(verbs, &Command::CmConnect { params, private_data })?
    else {
        return Err(libc::EIO);
    };
    r.by_cm.insert(id, p as usize);
    g.cm = Some(id);
    // A starting PSN is what the message's sender receives from (Linux's
    // `ib_send_cm_req`: rq_psn := the REQ's; rping.pcap: the server's first
    // packet carries the REQ's PSN): this side sends from the REP's.
    g.seq_num = psn;
    g.conn = id::Conn {
        active: true,
        path_mtu: path.mtu,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        retry_count: params.retry_count,
        rnr_retry_count: params.rnr_retry_count,
        // The kernel's av.timeout: the path's packet lifetime plus one.
        timeout: params.packet_life_time + 1,
        ..Default::default()
    };
    Ok(())
}

/// Moves `p`'s QP to INIT (again: the connection's access rights), RTR
/// and RTS with what the CM agreed (`ucma_modify_qp_rtr`/`_rts`).
unsafe fn qp_to_rts(p: *mut IdPriv, g: &Inner) -> Result<(), c_int> {
    let qp = (*p).id.qp;
    if qp.is_null() {
        return Ok(());
    }
    for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        let (mut a, mask) = id::qp_attr(p, g, state)?;
        let r = ibv_modify_qp(qp, &mut a, mask);
        if r != 0 {
            return Err(if r > 0 { r } else { crate::ffi::last_errno() });
        }
    }
    Ok(())
}

/// The QP to ERR (`ucma_modify_qp_err`).
unsafe fn qp_to_err(p: *mut IdPriv) {
    let qp = (*p).id.qp;
    if !qp.is_null() {
        let mut a = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..Default::default() };
        ibv_modify_qp(qp, &mut a, IBV_QP_STATE);
    }
}

/// `rdma_accept` of a request (`g.cm` set): RC/UC, the QP to RTS and a
/// REP; UD, a SIDR_REP with the QP and `RDMA_UDP_QKEY`. `depths` are the
/// responder resources and initiator depth asked (None: as the request
/// said, within the device's).
pub unsafe fn accept(
    r: &mut MutexGuard<'static, Option<Registry>>,
    p: *mut IdPriv,
    g: &mut Inner,
    c: &id::ConnParam,
    depths: (Option<u8>, Option<u8>),
    limits: (u8, u8),
) -> Result<(), c_int> {
    let r = reg(r);
    let verbs = (*p).id.verbs;
    let cm = g.cm.ok_or(libc::EINVAL)?;
    if (*p).id.qp_type == IBV_QPT_UD {
        let params = CmSidrReplyParams { status: 0, qpn: c.qp_num.into(), qkey: RDMA_UDP_QKEY };
        cm_link::command(
            verbs,
            &Command::CmSidrReply { id: cm, params, private_data: c.private_data.clone() },
        )?;
        r.by_cm.remove(&cm);
        g.cm = None;
        return Ok(());
    }
    g.conn.responder_resources = depths.0.unwrap_or(g.conn.responder_resources.min(limits.1));
    g.conn.initiator_depth = depths.1.unwrap_or(g.conn.initiator_depth.min(limits.0));
    if let Err(e) = qp_to_rts(p, g) {
        qp_to_err(p);
        return Err(e);
    }
    let params = CmAcceptParams {
        qpn: c.qp_num.into(),
        // What this side receives from (the REQ's PSN is what it sends
        // from).
        starting_psn: g.seq_num,
        responder_resources: g.conn.responder_resources,
        initiator_depth: g.conn.initiator_depth,
        rnr_retry_count: c.rnr_retry_count.min(7),
        srq: c.srq,
        flow_control: c.flow_control != 0,
    };
    let accepted = cm_link::command(
        verbs,
        &Command::CmAccept { id: cm, params, private_data: c.private_data.clone() },
    );
    if let Err(e) = accepted {
        // No REP left (the peer gave up, or the CM ID is gone): the QP must
        // not stay in RTS, as librdmacm's `ucma_modify_qp_err` on this path.
        qp_to_err(p);
        return Err(e);
    }
    Ok(())
}

/// `rdma_reject`: a REJ (`reason`: 28, consumer defined; `rdma_reject_ece`
/// 35), or a SIDR_REP "rejected" (UD).
pub unsafe fn reject(
    r: &mut MutexGuard<'static, Option<Registry>>,
    p: *mut IdPriv,
    g: &mut Inner,
    reason: u16,
    data: &[u8],
) -> Result<(), c_int> {
    let r = reg(r);
    let cm = g.cm.ok_or(libc::EINVAL)?;
    let verbs = (*p).id.verbs;
    let command = if (*p).id.qp_type == IBV_QPT_UD {
        let params = CmSidrReplyParams { status: 2, qpn: 0.into(), qkey: 0 };
        Command::CmSidrReply { id: cm, params, private_data: data.to_vec() }
    } else {
        Command::CmReject { id: cm, reason, private_data: data.to_vec() }
    };
    cm_link::command(verbs, &command)?;
    r.by_cm.remove(&cm);
    g.cm = None;
    Ok(())
}

/// `rdma_disconnect` (the QP already in ERR): a DREQ; when the peer's
/// came first (the device answered it) or none can be sent, nothing, as
/// the kernel's (`ib_send_cm_dreq` failing, then `ib_send_cm_drep`).
pub unsafe fn disconnect(p: *mut IdPriv, g: &mut Inner) {
    if let Some(cm) = g.cm {
        let _ = cm_link::command(
            (*p).id.verbs,
            &Command::CmDisconnect { id: cm, private_data: Vec::new() },
        );
    }
}

/// `rdma_establish` (no QP): the RTU after a reply; on the passive side,
/// established before the RTU (`rdma_notify` with COMM_EST as well).
pub unsafe fn establish(p: *mut IdPriv, g: &mut Inner) -> Result<(), c_int> {
    let cm = g.cm.ok_or(libc::EINVAL)?;
    let verbs = (*p).id.verbs;
    if g.conn.active {
        if !g.conn.replied {
            return Err(libc::EINVAL);
        }
        cm_link::command(verbs, &Command::CmReadyToUse { id: cm, private_data: Vec::new() })?;
        g.conn.established = true;
    } else {
        cm_link::command(verbs, &Command::CmEstablished { id: cm })?;
    }
    Ok(())
}

/// An event for `p` with the private data `data` (copied into the event)
/// and the connection parameters `conn`.
fn conn_event(
    p: *mut IdPriv,
    kind: c_int,
    status: c_int,
    data: &[u8],
    conn: rdma_conn_param,
) -> Box<channel::CmaEvent> {
    let mut e = channel::event(p, kind, status);
    let n = data.len().min(RDMA_MAX_PRIVATE_DATA);
    e.private_data[..n].copy_from_slice(&data[..n]);
    let mut conn = conn;
    if n > 0 {
        conn.private_data = e.private_data.as_ptr().cast();
        conn.private_data_len = n as u8;
    }
    e.event.param.conn = conn;
    e
}

fn no_conn() -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        qp_num: 0,
    }
}

/// Raises `e` on the channel of an id (locked, `g`).
fn push(g: &Inner, e: Box<channel::CmaEvent>) {
    channel::push(&g.events, e);
}

/// An event of the device's CM (the event thread).
pub fn event(verbs: *mut ibv_context, event: CmEvent) {
    let mut rg = lock();
    let r = reg(&mut rg);
    // SAFETY: every id in the registry is live (destroy forgets it first,
    // under this lock).
    unsafe {
        match event.kind {
            CmEventKind::ConnectRequest { peer, req, .. } => {
                request(r, verbs, event.id, peer, &req, false)
            }
            CmEventKind::SidrRequest { peer, req, .. } => {
                request(r, verbs, event.id, peer, &req, true)
            }
            kind => {
                let Some(&p) = r.by_cm.get(&event.id) else { return };
                let p = p as *mut IdPriv;
                let gone = on_id(p, event.id, kind);
                if gone {
                    r.by_cm.remove(&event.id);
                }
            }
        }
    }
}

/// A REQ or SIDR_REQ: a new id, `CONNECT_REQUEST` on the listener's
/// channel; a service nobody here listens to (any more) is refused.
unsafe fn request(
    r: &mut Registry,
    verbs: *mut ibv_context,
    cm: u32,
    peer: Gid,
    message: &[u8],
    sidr: bool,
) {
    let refuse = |status: u8| {
        let command = if sidr {
            let params = CmSidrReplyParams { status, qpn: 0.into(), qkey: 0 };
            Command::CmSidrReply { id: cm, params, private_data: Vec::new() }
        } else {
            Command::CmReject { id: cm, reason: REJ_CONSUMER_DEFINED, private_data: Vec::new() }
        };
        let _ = cm_link::command(verbs, &command);
    };
    // The REQ's or SIDR_REQ's fields.
    let (sid, data, req) = if sidr {
        let Ok(pk) = sidr::req::Packet::new_checked(message) else { return refuse(1) };
        let Ok(repr) = sidr::req::Repr::parse(&pk) else { return refuse(1) };
        (repr.service_id.0, repr.private_data.to_vec(), None)
    } else {
        let Ok(pk) = req::Packet::new_checked(message) else { return refuse(1) };
        let Ok(repr) = req::Repr::parse(&pk) else { return refuse(1) };
        (repr.service_id.0, repr.private_data.to_vec(), Some(repr))
    };
    let Some(&listener) = r.listeners.get(&sid) else { return refuse(1) };
    let lp = listener as *mut IdPriv;
    let (ps, qp_type, context, sync, channel, events) = {
        let lg = id::lock(lp);
        let id = &(*lp).id;
        (id.ps, id.qp_type, id.context, lg.sync, id.channel, lg.events.clone())
    };
    // The listener's backlog: requests it has not taken yet (the kernel's
    // ucma refuses those beyond it). Room comes back as they are taken.
    if (*lp).backlog.fetch_sub(1, Ordering::SeqCst) <= 0 {
        (*lp).backlog.fetch_add(1, Ordering::SeqCst);
        return refuse(3);
    }
    let refuse = |status: u8| {
        (*lp).backlog.fetch_add(1, Ordering::SeqCst);
        refuse(status)
    };
    let port = ServiceId(sid).port();
    // The addresses: the rdma_cm header's (the IB port space: the GIDs).
    let peer_ip = devices::canonical(IpAddr::from(peer.0));
    let (src, dst) = if ps == RDMA_PS_IB {
        let local = crate::addr::from_storage(&(*lp).id.route.addr.src_storage)
            .map_or(peer_ip, |a| devices::canonical(a.ip()));
        (SocketAddr::new(local, port), SocketAddr::new(peer_ip, 0))
    } else {
        let Ok(h) = cma::Packet::new_checked(&data[..]) else { return refuse(1) };
        let Ok(h) = cma::Repr::parse(&h) else { return refuse(1) };
        let (Some(s), Some(d)) = (h.src_ip(), h.dst_ip()) else { return refuse(1) };
        (
            SocketAddr::new(devices::canonical(d), port),
            SocketAddr::new(devices::canonical(s), h.src_port),
        )
    };
    let on = if sync { None } else { Some((channel, events.clone())) };
    let Ok(child) = id::create_on(on, context, ps, qp_type) else {
        return refuse(3);
    };
    let dev = devices::lock().ok().and_then(|d| d.as_ref().and_then(|d| d.index_of(verbs)));
    let made = (|| -> Result<(), c_int> {
        let mut g = id::lock(child);
        id::attach(child, &mut g, dev.ok_or(libc::ENODEV)?, 1)?;
        let a = &mut (*child).id.route.addr;
        a.src_storage = crate::addr::storage(src);
        a.dst_storage = crate::addr::storage(dst);
        a.addr.ibaddr.sgid = devices::ip_gid(src.ip());
        a.addr.ibaddr.dgid = devices::ip_gid(dst.ip());
        let mtu = {
            let devs = devices::lock()?;
            devs.as_ref().and_then(|d| d.list[dev.unwrap_or(0)].active_mtu.first().copied())
        }
        .unwrap_or(3);
        let mut path = id::iboe_path(child, &g, mtu);
        if let Some(req) = &req {
            // The path is the REQ's (the active side's flow label).
            path.flow_label = (req.primary_path.flow_label & 0xf_ffff).to_be();
            path.hop_limit = req.primary_path.hop_limit;
            path.traffic_class = req.primary_path.traffic_class;
            path.mtu = req.path_mtu;
            path.packet_life_time = req.primary_path.local_ack_timeout.saturating_sub(1);
        }
        id::set_path(child, path)?;
        g.state = State::Connect;
        g.in_cm = true;
        g.cm = Some(cm);
        if let Some(req) = &req {
            // This side receives from the PSN its REP will carry, chosen
            // now (the kernel's `seq_num`, random from the id's creation):
            // a program that moves its own QP (`rdma_init_qp_attr`) before
            // `rdma_accept` gets the PSNs the REP announces. It sends from
            // the REQ's (`cm_req_handler`: sq_psn := the REQ's PSN).
            g.seq_num = random_psn();
            g.conn = id::Conn {
                remote_qpn: req.local_qpn.value(),
                path_mtu: req.path_mtu,
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                timeout: req.primary_path.local_ack_timeout,
                sq_psn: req.starting_psn.value(),
                ..Default::default()
            };
        }
        Ok(())
    })();
    if made.is_err() {
        // Not registered: discarded without the registry this thread holds.
        let _ = id::discard(child);
        return refuse(3);
    }
    r.by_cm.insert(cm, child as usize);
    let consumer = &data[header_len(ps).min(data.len())..];
    let mut e = channel::event(child, kind::CONNECT_REQUEST, 0);
    e.event.listen_id = lp.cast();
    // Counted for the listener, as librdmacm's (the program may destroy
    // the new id before it acknowledges the request).
    e.id = lp;
    let n = consumer.len().min(RDMA_MAX_PRIVATE_DATA);
    e.private_data[..n].copy_from_slice(&consumer[..n]);
    let pd_ptr = e.private_data.as_ptr().cast();
    match &req {
        Some(req) => {
            e.event.param.conn = rdma_conn_param {
                private_data: pd_ptr,
                private_data_len: n as u8,
                // Swapped, as the kernel's cm_format_req_event.
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                flow_control: u8::from(req.end_to_end_flow_control),
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: u8::from(req.srq),
                qp_num: req.local_qpn.value(),
            };
        }
        None => {
            e.event.param.ud = rdma_ud_param {
                private_data: pd_ptr,
                private_data_len: n as u8,
                ah_attr: ibv_ah_attr::default(),
                qp_num: 0,
                qkey: 0,
            };
        }
    }
    channel::push(&events, e);
    if !sidr {
        // The kernel's rdma_cm, the request handed on and not yet answered:
        // a delayed MRA, so a peer that retries its REQ is told to wait.
        delayed_mra(verbs, cm);
    }
}

/// rdma_cm's `CMA_CM_MRA_SETTING`: an MRA asking `4.096 µs × 2^24` (≈ 69
/// s), sent only to a duplicate of the REQ or REP (`IB_CM_MRA_FLAG_DELAY`).
fn delayed_mra(verbs: *mut ibv_context, cm: u32) {
    let service_timeout = uroce_device::cm::CM_MRA_DELAY | 24;
    let _ = cm_link::command(verbs, &Command::CmMra { id: cm, service_timeout });
}

/// An event for an id the CM holds; returns whether its CM ID is gone.
unsafe fn on_id(p: *mut IdPriv, cm: u32, kind: CmEventKind) -> bool {
    let mut g = id::lock(p);
    match kind {
        CmEventKind::ConnectReply { rep } => {
            let Ok(pk) = rep::Packet::new_checked(&rep[..]) else { return false };
            let Ok(rep) = rep::Repr::parse(&pk) else { return false };
            // The REP's PSN is what the passive side receives from: this
            // side sends from it (`cm_rep_handler`: sq_psn := the REP's).
            g.conn.sq_psn = rep.starting_psn.value();
            g.conn.remote_qpn = rep.local_qpn.value();
            g.conn.initiator_depth = rep.responder_resources;
            g.conn.responder_resources = rep.initiator_depth;
            g.conn.rnr_retry_count = rep.rnr_retry_count;
            g.conn.replied = true;
            let conn = rdma_conn_param {
                private_data: std::ptr::null(),
                private_data_len: 0,
                responder_resources: rep.initiator_depth,
                initiator_depth: rep.responder_resources,
                flow_control: u8::from(rep.end_to_end_flow_control),
                retry_count: 0,
                rnr_retry_count: rep.rnr_retry_count,
                srq: u8::from(rep.srq),
                qp_num: rep.local_qpn.value(),
            };
            // As the kernel's rdma_cm on a REP: a delayed MRA while the
            // program has not answered it.
            delayed_mra((*p).id.verbs, cm);
            // The QP's RTR and RTS and the RTU are `rdma_get_cm_event`'s
            // ([`finish`]), on the program's thread, as librdmacm's.
            let mut e = conn_event(p, ev::ESTABLISHED, 0, &rep.private_data, conn);
            e.deferred = Deferred::Reply { cm };
            push(&g, e);
            false
        }
        CmEventKind::Established => {
            if !g.conn.established {
                g.conn.established = true;
                push(&g, channel::event(p, ev::ESTABLISHED, 0));
            }
            false
        }
        CmEventKind::Rejected { reason, rej } => {
            g.cm = None;
            let data = rej::Packet::new_checked(&rej[..])
                .ok()
                .and_then(|pk| rej::Repr::parse(&pk).ok())
                .map(|r| r.private_data.to_vec())
                .unwrap_or_default();
            let mut e = conn_event(p, kind::REJECTED, c_int::from(reason), &data, no_conn());
            if (*p).id.qp_type != IBV_QPT_UD {
                e.deferred = Deferred::QpToErr;
            }
            push(&g, e);
            true
        }
        CmEventKind::Unreachable { .. } | CmEventKind::SidrUnreachable => {
            g.cm = None;
            push(&g, channel::event(p, ev::UNREACHABLE, -libc::ETIMEDOUT));
            true
        }
        CmEventKind::Disconnected { cause, private_data } => {
            if !g.conn.disconnected {
                g.conn.disconnected = true;
                let status =
                    if cause == CmDisconnectCause::DreqTimedOut { -libc::ETIMEDOUT } else { 0 };
                push(&g, conn_event(p, ev::DISCONNECTED, status, &private_data, no_conn()));
            }
            false
        }
        CmEventKind::TimewaitExit => {
            g.cm = None;
            push(&g, channel::event(p, ev::TIMEWAIT_EXIT, 0));
            true
        }
        CmEventKind::SidrReply { rep } => {
            g.cm = None;
            let Ok(pk) = sidr::rep::Packet::new_checked(&rep[..]) else { return true };
            let Ok(rep) = sidr::rep::Repr::parse(&pk) else { return true };
            let status = u8::from(rep.status);
            if status != 0 {
                push(&g, channel::event(p, ev::UNREACHABLE, c_int::from(status)));
                return true;
            }
            if rep.qkey.0 != RDMA_UDP_QKEY && (*p).id.ps == RDMA_PS_UDP {
                push(&g, channel::event(p, ev::UNREACHABLE, -libc::EINVAL));
                return true;
            }
            let ah = match (*p).id.route.path_rec.as_ref() {
                Some(path) => id::ah_attr(p, path).unwrap_or_default(),
                None => ibv_ah_attr::default(),
            };
            let mut e = channel::event(p, ev::ESTABLISHED, 0);
            let n = rep.private_data.len().min(RDMA_MAX_PRIVATE_DATA);
            e.private_data[..n].copy_from_slice(&rep.private_data[..n]);
            e.event.param.ud = rdma_ud_param {
                private_data: e.private_data.as_ptr().cast(),
                private_data_len: n as u8,
                ah_attr: ah,
                qp_num: rep.qpn.value(),
                qkey: rep.qkey.0,
            };
            push(&g, e);
            true
        }
        CmEventKind::ConnectRequest { .. } | CmEventKind::SidrRequest { .. } => false,
    }
}

/// The work `e` left to `rdma_get_cm_event` (on the program's thread, the
/// event taken and counted): a REP's QP transitions and RTU
/// (`ucma_process_conn_resp`), a REJ's QP to ERR.
///
/// # Safety
/// `e` was just taken from its channel: its ids are live.
pub unsafe fn finish(e: &mut CmaEvent) {
    let p = e.id;
    match std::mem::take(&mut e.deferred) {
        Deferred::None => {}
        Deferred::QpToErr => qp_to_err(p),
        Deferred::Attach { mgid } => crate::multicast::attach(p, mgid, &mut e.event),
        Deferred::Reply { cm } => {
            let mut rg = lock();
            let r = reg(&mut rg);
            let mut g = id::lock(p);
            if g.cm != Some(cm) {
                // Rejected or destroyed since the REP came.
                e.event.event = ev::CONNECT_ERROR;
                e.event.status = -libc::ECONNABORTED;
                return;
            }
            if (*p).id.qp.is_null() {
                e.event.event = ev::CONNECT_RESPONSE;
                return;
            }
            let verbs = (*p).id.verbs;
            let ready = qp_to_rts(p, &g).and_then(|()| {
                cm_link::command(verbs, &Command::CmReadyToUse { id: cm, private_data: Vec::new() })
                    .map(drop)
            });
            match ready {
                Ok(()) => g.conn.established = true,
                Err(err) => {
                    qp_to_err(p);
                    let _ = cm_link::command(
                        verbs,
                        &Command::CmReject {
                            id: cm,
                            reason: REJ_CONSUMER_DEFINED,
                            private_data: Vec::new(),
                        },
                    );
                    g.cm = None;
                    r.by_cm.remove(&cm);
                    e.event.event = ev::CONNECT_ERROR;
                    e.event.status = -err;
                }
            }
        }
    }
}
