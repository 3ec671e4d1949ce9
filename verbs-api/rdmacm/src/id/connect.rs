//! The calls that need the device's CM: librdmacm's and the kernel's
//! argument and state checks here, the rest in `cm.rs`.

use super::*;

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
    reason: u16,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    if usize::from(len) > 148 {
        return Err(libc::EINVAL);
    }
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
    crate::cm::reject(&mut r, p, &mut g, reason, data)
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
