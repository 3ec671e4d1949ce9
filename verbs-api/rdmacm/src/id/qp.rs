//! The QP attributes of an id, and the QPs, CQs and SRQs made for it.

use super::*;

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
