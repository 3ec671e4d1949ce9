//! Binding, address and route resolution.

use super::*;

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
pub(super) unsafe fn bind_locked(
    p: *mut IdPriv,
    g: &mut Inner,
    sa: SocketAddr,
) -> Result<(), c_int> {
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
