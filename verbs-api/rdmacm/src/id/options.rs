//! Options, paths set by hand, migration, endpoints, ports and ECE.

use super::*;

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
