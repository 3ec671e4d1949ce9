//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`, as librdmacm's addrinfo.c
//! builds the result: one `rdma_addrinfo` from the first answer of the
//! system's `getaddrinfo` (its hints converted: RAI_PASSIVE → AI_PASSIVE,
//! RAI_NUMERICHOST → AI_NUMERICHOST, the QP type to a socket type, the port
//! space to a protocol), the address as the source when passive, else the
//! destination; without node and service, the hints' addresses. A failing
//! `getaddrinfo` is -1 with errno its (negative) EAI_ code, as librdmacm.
//! There is no ibacm service to ask for routes (`ai_route` stays empty),
//! and AF_IB addresses are not offered (EAFNOSUPPORT).

use crate::abi::*;
use crate::addr::malloc_copy;
use libc::{addrinfo, c_char, c_int, c_void};

const AF_IB: c_int = 27;

/// `ucma_convert_to_ai`.
fn to_ai(rai: &rdma_addrinfo) -> addrinfo {
    // SAFETY: addrinfo is plain data and pointers.
    let mut ai: addrinfo = unsafe { std::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if rai.ai_family != AF_IB {
        ai.ai_family = rai.ai_family;
    }
    ai.ai_socktype = match rai.ai_qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// `ucma_convert_to_rai`.
unsafe fn to_rai(
    rai: *mut rdma_addrinfo,
    hints: &rdma_addrinfo,
    ai: &addrinfo,
) -> Result<(), c_int> {
    let r = &mut *rai;
    r.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC,
            libc::SOCK_DGRAM => IBV_QPT_UD,
            _ => 0,
        }
    };
    r.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP,
            libc::IPPROTO_UDP => RDMA_PS_UDP,
            _ => 0,
        }
    };
    r.ai_family = ai.ai_family;
    let canon = if ai.ai_canonname.is_null() {
        std::ptr::null_mut()
    } else {
        libc::strdup(ai.ai_canonname)
    };
    let addr = malloc_copy(ai.ai_addr.cast(), ai.ai_addrlen as usize)?;
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        r.ai_flags = RAI_PASSIVE;
        r.ai_src_canonname = canon;
        r.ai_src_addr = addr.cast();
        r.ai_src_len = ai.ai_addrlen;
    } else {
        r.ai_dst_canonname = canon;
        r.ai_dst_addr = addr.cast();
        r.ai_dst_len = ai.ai_addrlen;
    }
    Ok(())
}

/// `rdma_getaddrinfo`.
///
/// # Safety
/// The strings NULL or NUL-terminated; `hints` NULL or valid; `res`
/// writable.
pub unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> Result<(), c_int> {
    if (service.is_null() && node.is_null() && hints.is_null()) || res.is_null() {
        return Err(libc::EINVAL);
    }
    crate::devices::init()?;
    if !hints.is_null() && (*hints).ai_family == AF_IB {
        return Err(libc::EAFNOSUPPORT);
    }
    let rai = libc::calloc(1, size_of::<rdma_addrinfo>()).cast::<rdma_addrinfo>();
    if rai.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: zero is rdma_addrinfo's empty value (librdmacm's nohints).
    let nohints: rdma_addrinfo = std::mem::zeroed();
    let h = hints.as_ref().unwrap_or(&nohints);
    let made = (|| {
        if !node.is_null() || !service.is_null() {
            let mut ai: *mut addrinfo = std::ptr::null_mut();
            let ret = if hints.is_null() {
                libc::getaddrinfo(node, service, std::ptr::null(), &mut ai)
            } else {
                let ai_hints = to_ai(h);
                libc::getaddrinfo(node, service, &ai_hints, &mut ai)
            };
            if ret != 0 {
                return Err(ret);
            }
            let r = to_rai(rai, h, &*ai);
            libc::freeaddrinfo(ai);
            r?;
        } else {
            let r = &mut *rai;
            r.ai_flags = h.ai_flags;
            r.ai_family = h.ai_family;
            r.ai_qp_type = h.ai_qp_type;
            r.ai_port_space = h.ai_port_space;
            if h.ai_dst_len > 0 {
                r.ai_dst_addr = malloc_copy(h.ai_dst_addr.cast(), h.ai_dst_len as usize)?.cast();
                r.ai_dst_len = h.ai_dst_len;
            }
        }
        if (*rai).ai_src_len == 0 && h.ai_src_len > 0 {
            (*rai).ai_src_addr = malloc_copy(h.ai_src_addr.cast(), h.ai_src_len as usize)?.cast();
            (*rai).ai_src_len = h.ai_src_len;
        }
        Ok(())
    })();
    match made {
        Ok(()) => {
            *res = rai;
            Ok(())
        }
        Err(e) => {
            freeaddrinfo(rai);
            Err(e)
        }
    }
}

/// `rdma_freeaddrinfo`: the list and everything it points at.
///
/// # Safety
/// `res` NULL or a list `rdma_getaddrinfo` returned.
pub unsafe fn freeaddrinfo(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        let r = &*res;
        let next = r.ai_next;
        for p in [
            r.ai_connect,
            r.ai_route,
            r.ai_src_canonname.cast::<c_void>(),
            r.ai_dst_canonname.cast(),
            r.ai_src_addr.cast(),
            r.ai_dst_addr.cast(),
        ] {
            libc::free(p);
        }
        libc::free(res.cast());
        res = next;
    }
}
