//! The program's calls that go to the device's CM: `rdma_listen`,
//! `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`,
//! `rdma_establish`, and the id's end (`forget`).

use super::{lock, qp_to_err, qp_to_rts, reg, service_id, Registry};
use crate::abi::*;
use crate::cm_link::{self, random_psn};
use crate::devices;
use crate::id::{self, IdPriv, Inner};
use libc::c_int;
use std::sync::MutexGuard;
use uroce_device::cm::{CmAcceptParams, CmConnectParams, CmSidrParams, CmSidrReplyParams};
use uroce_device::command::{Command, Gid, Reply};
use uroce_wire::mad::cma;

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
