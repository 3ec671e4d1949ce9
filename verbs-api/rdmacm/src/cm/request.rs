//! A REQ or SIDR_REQ for a listened service: the new id and its
//! `CONNECT_REQUEST`, or the refusal.

use super::{delayed_mra, header_len, Registry, REJ_CONSUMER_DEFINED};
use crate::abi::*;
use crate::channel::{self, kind};
use crate::cm_link::{self, random_psn};
use crate::devices;
use crate::id::{self, IdPriv, State};
use libc::c_int;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use uroce_device::cm::CmSidrReplyParams;
use uroce_device::command::{Command, Gid};
use uroce_wire::mad::{cma, req, sidr, ServiceId};

/// A REQ or SIDR_REQ: a new id, `CONNECT_REQUEST` on the listener's
/// channel; a service nobody here listens to (any more) is refused.
pub(super) unsafe fn request(
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
