//! Multicast groups (`rdma_join_multicast`, `_ex`, `rdma_leave_multicast`)
//! as the kernel's rdma_cm joins them on RoCEv2 (`cma_iboe_join_multicast`)
//! and librdmacm attaches the id's QP.
//!
//! RoCE has no SA to ask: the group's GID is its IPv4 address, mapped
//! (`::ffff:a.b.c.d`), and `MULTICAST_JOIN` is raised at once, its
//! `param.ud` the address vector to send to the group with (that GID, the
//! id's source GID, hop limit 64), QPN 0xFFFFFF and the port space's
//! Q_Key. When the program takes the event, its QP (if it has one) is
//! attached to the group (`ibv_attach_mcast`, on the device: the UDP
//! runtime joins the IP group), as librdmacm's `ucma_process_join`; a
//! failed attach turns the event into `MULTICAST_ERROR`. Leaving detaches
//! the QP. As on Linux, IPv6 groups are not offered on RoCEv2
//! (EOPNOTSUPP), and the address must be a multicast one (EINVAL).

use crate::abi::*;
use crate::addr;
use crate::channel::{self, Deferred};
use crate::id::{self, from_c, gid_index, IdPriv, Multicast, State};
use crate::verbs::*;
use libc::{c_int, c_void, sockaddr};
use std::net::IpAddr;

/// The QPN a UD send to a multicast group goes to.
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// The kernel's `IPV6_DEFAULT_HOPLIMIT`, a RoCEv2 IPv4 group's hop limit.
const HOP_LIMIT: u8 = 64;

/// `RDMA_CM_EVENT_MULTICAST_JOIN` and `_ERROR`.
pub(crate) const MULTICAST_JOIN: c_int = 12;
pub(crate) const MULTICAST_ERROR: c_int = 13;

/// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: sends only, no QP attached.
const SENDONLY_FULLMEMBER: u32 = 1;

/// `rdma_join_multicast2`: a UD id on a device (bound or resolved) joins
/// the IPv4 group `group` (`len` bytes) with `flags`; `context` comes back
/// in the event's `param.ud.private_data`.
///
/// # Safety
/// `id` NULL or live; `group` a socket address of `len` bytes.
pub unsafe fn join(
    id: *mut rdma_cm_id,
    group: *const sockaddr,
    len: usize,
    flags: u32,
    context: *mut c_void,
) -> Result<(), c_int> {
    let p = from_c(id)?;
    let sa = addr::read(group).ok_or(libc::EINVAL)?;
    let mut g = id::lock(p);
    let verbs = (*p).id.verbs;
    if verbs.is_null()
        || !matches!(g.state, State::AddrBound | State::AddrResolved)
        || (*p).id.qp_type != IBV_QPT_UD
    {
        return Err(libc::EINVAL);
    }
    let v4 = match sa.ip() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4,
            // `cma_iboe_join_multicast`: RoCEv2 joins IPv4 groups only.
            None if v6.is_multicast() => return Err(libc::EOPNOTSUPP),
            None => return Err(libc::EINVAL),
        },
    };
    if !v4.is_multicast() {
        return Err(libc::EINVAL);
    }
    let mgid = crate::devices::ip_gid(IpAddr::V4(v4));
    let port = (*p).id.port_num;
    let sgid = (*p).id.route.addr.addr.ibaddr.sgid;
    let sgid_index = gid_index(verbs, port, &sgid).ok_or(libc::EADDRNOTAVAIL)?;
    let qkey = if (*p).id.ps == RDMA_PS_IPOIB { 0 } else { RDMA_UDP_QKEY };
    let bytes = std::slice::from_raw_parts(group.cast::<u8>(), len).to_vec();
    g.mc.push(Multicast { addr: bytes, join_flags: flags, mgid: mgid.raw });
    let mut e = channel::event(p, MULTICAST_JOIN, 0);
    e.event.param.ud = rdma_ud_param {
        private_data: context,
        private_data_len: 0,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: mgid,
                flow_label: 0,
                sgid_index,
                hop_limit: HOP_LIMIT,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: port,
        },
        qp_num: MULTICAST_QPN,
        qkey,
    };
    if flags & SENDONLY_FULLMEMBER == 0 {
        e.deferred = Deferred::Attach { mgid: mgid.raw };
    }
    channel::push(&g.events, e);
    Ok(())
}

/// The work a `MULTICAST_JOIN` left to `rdma_get_cm_event`: the id's QP,
/// if it has one, attached to the group (`ucma_process_join`).
///
/// # Safety
/// `p` is a live id.
pub(crate) unsafe fn attach(p: *mut IdPriv, mgid: [u8; 16], e: &mut rdma_cm_event) {
    let qp = (*p).id.qp;
    if qp.is_null() {
        return;
    }
    let gid = ibv_gid { raw: mgid };
    let r = ibv_attach_mcast(qp, &gid, 0);
    if r != 0 {
        e.event = MULTICAST_ERROR;
        e.status = -(if r > 0 { r } else { crate::ffi::last_errno() });
    }
}

/// `rdma_leave_multicast`: the group joined at `group` (the same address
/// bytes) is left, the QP detached; EADDRNOTAVAIL for a group not joined.
///
/// # Safety
/// `id` NULL or live; `group` NULL or a socket address.
pub unsafe fn leave(id: *mut rdma_cm_id, group: *const sockaddr) -> Result<(), c_int> {
    let p = from_c(id)?;
    let len = addr::addrlen(group) as usize;
    if len == 0 {
        return Err(libc::EINVAL);
    }
    let bytes = std::slice::from_raw_parts(group.cast::<u8>(), len);
    let mut g = id::lock(p);
    let Some(k) = g.mc.iter().position(|m| m.addr.len() >= len && &m.addr[..len] == bytes) else {
        return Err(libc::EADDRNOTAVAIL);
    };
    let qp = (*p).id.qp;
    if !qp.is_null() && g.mc[k].join_flags & SENDONLY_FULLMEMBER == 0 {
        let gid = ibv_gid { raw: g.mc[k].mgid };
        let r = ibv_detach_mcast(qp, &gid, 0);
        if r != 0 {
            return Err(if r > 0 { r } else { crate::ffi::last_errno() });
        }
    }
    g.mc.remove(k);
    Ok(())
}
