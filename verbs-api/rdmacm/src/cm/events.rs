//! The device CM's events for the ids (the event thread), and the work
//! they leave to `rdma_get_cm_event` on the program's thread.

use super::request::request;
use super::{delayed_mra, ev, lock, qp_to_err, qp_to_rts, reg, REJ_CONSUMER_DEFINED};
use crate::abi::*;
use crate::channel::{self, kind, CmaEvent, Deferred};
use crate::cm_link;
use crate::id::{self, IdPriv, Inner};
use libc::c_int;
use uroce_device::cm::{CmDisconnectCause, CmEvent, CmEventKind};
use uroce_device::command::Command;
use uroce_wire::mad::{rej, rep, sidr};

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
