//! Every name rdma-core 44's `librdmacm.so.1` exports, and the function
//! behind it; `librdmacm.map` gives their versions (`RDMACM_1.0` … `1.3`).
//!
//! As in uroce's libibverbs, each name is bound to its function by a
//! one-instruction function of that name (a jump) rather than with
//! `#[no_mangle]`, so that rustc's own version script does not claim the
//! names without a version.

use crate::abi::*;
use crate::ffi::{guard, guard_int, guard_ptr};
use crate::{addrinfo, channel, devices, id, multicast, rsocket};
use libc::{c_char, c_int, c_void, sockaddr};

/// Defines the function `$label` as a jump to `$f`.
macro_rules! trampoline {
    ($label:expr, $f:path) => {
        std::arch::global_asm!(
            concat!(".pushsection .text.", $label, ",\"ax\",@progbits"),
            concat!(".globl ", $label),
            concat!(".type ", $label, ", @function"),
            ".p2align 4",
            concat!($label, ":"),
            "jmp {f}",
            concat!(".size ", $label, ", . - ", $label),
            ".popsection",
            f = sym $f,
        );
    };
}

macro_rules! export {
    ($($name:literal => $f:path,)*) => {
        $(trampoline!($name, $f);)*
        /// The exported names (for the tests).
        #[cfg(test)]
        pub const NAMES: &[&str] = &[$($name),*];
    };
}

export! {
    "rdma_create_event_channel" => create_event_channel,
    "rdma_destroy_event_channel" => destroy_event_channel,
    "rdma_get_cm_event" => get_cm_event,
    "rdma_ack_cm_event" => ack_cm_event,
    "rdma_event_str" => channel::event_str,
    "rdma_create_id" => create_id,
    "rdma_destroy_id" => destroy_id,
    "rdma_create_ep" => create_ep,
    "rdma_destroy_ep" => destroy_ep,
    "rdma_bind_addr" => bind_addr,
    "rdma_resolve_addr" => resolve_addr,
    "rdma_resolve_route" => resolve_route,
    "rdma_create_qp" => create_qp,
    "rdma_create_qp_ex" => create_qp_ex,
    "rdma_destroy_qp" => destroy_qp,
    "rdma_create_srq" => create_srq,
    "rdma_create_srq_ex" => create_srq_ex,
    "rdma_destroy_srq" => destroy_srq,
    "rdma_init_qp_attr" => init_qp_attr,
    "rdma_set_option" => set_option,
    "rdma_migrate_id" => migrate_id,
    "rdma_get_src_port" => get_src_port,
    "rdma_get_dst_port" => get_dst_port,
    "rdma_get_devices" => get_devices,
    "rdma_free_devices" => free_devices,
    "rdma_getaddrinfo" => getaddrinfo,
    "rdma_freeaddrinfo" => freeaddrinfo,
    "rdma_set_local_ece" => set_local_ece,
    "rdma_get_remote_ece" => get_remote_ece,
    "rdma_listen" => listen,
    "rdma_get_request" => get_request,
    "rdma_connect" => connect,
    "rdma_establish" => establish,
    "rdma_accept" => accept,
    "rdma_reject" => reject,
    "rdma_reject_ece" => reject_ece,
    "rdma_notify" => notify,
    "rdma_disconnect" => disconnect,
    "rdma_join_multicast" => join_multicast,
    "rdma_join_multicast_ex" => join_multicast_ex,
    "rdma_leave_multicast" => leave_multicast,
    "rsocket" => rsocket::rsocket,
    "rbind" => rsocket::rbind,
    "rlisten" => rsocket::rlisten,
    "raccept" => rsocket::raccept,
    "rconnect" => rsocket::rconnect,
    "rshutdown" => rsocket::rshutdown,
    "rclose" => rsocket::rclose,
    "rrecv" => rsocket::rrecv,
    "rrecvfrom" => rsocket::rrecvfrom,
    "rrecvmsg" => rsocket::rrecvmsg,
    "rsend" => rsocket::rsend,
    "rsendto" => rsocket::rsendto,
    "rsendmsg" => rsocket::rsendmsg,
    "rread" => rsocket::rread,
    "rreadv" => rsocket::rreadv,
    "rwrite" => rsocket::rwrite,
    "rwritev" => rsocket::rwritev,
    "rpoll" => rsocket::rpoll,
    "rselect" => rsocket::rselect,
    "rgetpeername" => rsocket::rgetpeername,
    "rgetsockname" => rsocket::rgetsockname,
    "rsetsockopt" => rsocket::rsetsockopt,
    "rgetsockopt" => rsocket::rgetsockopt,
    "rfcntl" => rsocket::rfcntl,
    "riomap" => rsocket::riomap,
    "riounmap" => rsocket::riounmap,
    "riowrite" => rsocket::riowrite,
}

unsafe extern "C" fn create_event_channel() -> *mut rdma_event_channel {
    guard_ptr(|| channel::create().map(|c| c.cast()))
}

unsafe extern "C" fn destroy_event_channel(channel: *mut rdma_event_channel) {
    guard((), || {
        if !channel.is_null() {
            channel::destroy(channel.cast());
        }
    })
}

unsafe extern "C" fn get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard_int(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        *event = channel::get(channel)?;
        Ok(())
    })
}

unsafe extern "C" fn ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard_int(|| channel::ack(event))
}

unsafe extern "C" fn create_id(
    channel: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let qp_type =
            if ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP { IBV_QPT_UD } else { IBV_QPT_RC };
        *out = id::create(channel, context, ps, qp_type)?.cast();
        Ok(())
    })
}

unsafe extern "C" fn destroy_id(cm_id: *mut rdma_cm_id) -> c_int {
    guard_int(|| id::destroy(id::from_c(cm_id)?))
}

unsafe extern "C" fn create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_int(|| id::create_ep(out, res, pd, attr))
}

unsafe extern "C" fn destroy_ep(cm_id: *mut rdma_cm_id) {
    guard((), || id::destroy_ep(cm_id))
}

unsafe extern "C" fn bind_addr(cm_id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_int(|| id::bind_addr(cm_id, addr))
}

unsafe extern "C" fn resolve_addr(
    cm_id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard_int(|| id::resolve_addr(cm_id, src, dst))
}

unsafe extern "C" fn resolve_route(cm_id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard_int(|| id::resolve_route(cm_id))
}

unsafe extern "C" fn create_qp(
    cm_id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_int(|| id::create_qp(cm_id, pd, attr))
}

unsafe extern "C" fn create_qp_ex(cm_id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    guard_int(|| id::create_qp_ex(cm_id, attr))
}

unsafe extern "C" fn destroy_qp(cm_id: *mut rdma_cm_id) {
    guard((), || id::destroy_qp(cm_id))
}

unsafe extern "C" fn create_srq(
    cm_id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard_int(|| id::create_srq(cm_id, pd, attr))
}

unsafe extern "C" fn create_srq_ex(
    cm_id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard_int(|| id::create_srq_ex(cm_id, attr))
}

unsafe extern "C" fn destroy_srq(cm_id: *mut rdma_cm_id) {
    guard((), || id::destroy_srq(cm_id))
}

unsafe extern "C" fn init_qp_attr(
    cm_id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard_int(|| {
        if mask.is_null() {
            return Err(libc::EINVAL);
        }
        *mask = id::init_qp_attr(cm_id, attr)?;
        Ok(())
    })
}

unsafe extern "C" fn set_option(
    cm_id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    guard_int(|| id::set_option(cm_id, level, name, val, len))
}

unsafe extern "C" fn migrate_id(cm_id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    guard_int(|| id::migrate(cm_id, channel))
}

unsafe extern "C" fn get_src_port(cm_id: *mut rdma_cm_id) -> u16 {
    guard(0, || id::port(cm_id, false))
}

unsafe extern "C" fn get_dst_port(cm_id: *mut rdma_cm_id) -> u16 {
    guard(0, || id::port(cm_id, true))
}

/// `rdma_get_devices`: every device opened, in a `malloc`ed NULL-ended
/// array (NULL and 0 when one cannot be opened, as librdmacm).
unsafe extern "C" fn get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    let list = guard(std::ptr::null_mut(), || {
        let Ok(mut guard) = devices::lock() else { return std::ptr::null_mut() };
        let Some(devs) = guard.as_mut() else { return std::ptr::null_mut() };
        if devs.open_all().is_err() {
            return std::ptr::null_mut();
        }
        let n = devs.list.len();
        let list = libc::malloc((n + 1) * size_of::<*mut ibv_context>()).cast::<*mut ibv_context>();
        if list.is_null() {
            return list;
        }
        for (k, d) in devs.list.iter_mut().enumerate() {
            *list.add(k) = d.verbs;
            d.refcnt += 1;
        }
        *list.add(n) = std::ptr::null_mut();
        list
    });
    if !num.is_null() {
        let mut n = 0;
        while !list.is_null() && !(*list.add(n)).is_null() {
            n += 1;
        }
        *num = n as c_int;
    }
    list
}

unsafe extern "C" fn free_devices(list: *mut *mut ibv_context) {
    guard((), || {
        if list.is_null() {
            return;
        }
        if let Ok(mut guard) = devices::lock() {
            if let Some(devs) = guard.as_mut() {
                let mut k = 0;
                while !(*list.add(k)).is_null() {
                    if let Some(i) = devs.index_of(*list.add(k)) {
                        devs.release(i);
                    }
                    k += 1;
                }
            }
        }
        libc::free(list.cast());
    })
}

unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard_int(|| addrinfo::getaddrinfo(node, service, hints, res))
}

unsafe extern "C" fn freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || addrinfo::freeaddrinfo(res))
}

unsafe extern "C" fn set_local_ece(cm_id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_int(|| id::set_local_ece(cm_id, ece))
}

unsafe extern "C" fn get_remote_ece(cm_id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_int(|| id::get_remote_ece(cm_id, ece))
}

unsafe extern "C" fn listen(cm_id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard_int(|| id::listen(cm_id, backlog))
}

unsafe extern "C" fn get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> c_int {
    guard_int(|| id::get_request(listen, out))
}

unsafe extern "C" fn connect(cm_id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard_int(|| id::connect(cm_id, param))
}

unsafe extern "C" fn establish(cm_id: *mut rdma_cm_id) -> c_int {
    guard_int(|| id::establish(cm_id))
}

unsafe extern "C" fn accept(cm_id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard_int(|| id::accept(cm_id, param))
}

unsafe extern "C" fn reject(cm_id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard_int(|| id::reject(cm_id, data, len, crate::cm::REJ_CONSUMER_DEFINED))
}

/// IBTA's "vendor option not supported" (`CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`).
const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

unsafe extern "C" fn reject_ece(cm_id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard_int(|| id::reject(cm_id, data, len, REJ_VENDOR_OPTION_NOT_SUPPORTED))
}

unsafe extern "C" fn notify(cm_id: *mut rdma_cm_id, event: c_int) -> c_int {
    guard_int(|| id::notify(cm_id, event))
}

unsafe extern "C" fn disconnect(cm_id: *mut rdma_cm_id) -> c_int {
    guard_int(|| id::disconnect(cm_id))
}

unsafe extern "C" fn join_multicast(
    cm_id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let len = crate::addr::addrlen(addr) as usize;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        multicast::join(cm_id, addr, len, RDMA_MC_JOIN_FLAG_FULLMEMBER, context)
    })
}

unsafe extern "C" fn join_multicast_ex(
    cm_id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let a = attr.as_ref().ok_or(libc::EINVAL)?;
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(libc::ENOTSUP);
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return Err(libc::EINVAL);
        }
        let len = crate::addr::addrlen(a.addr) as usize;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        multicast::join(cm_id, a.addr, len, a.join_flags, context)
    })
}

unsafe extern "C" fn leave_multicast(cm_id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_int(|| multicast::leave(cm_id, addr))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn the_version_script_names_exactly_the_exported_functions() {
        let map = include_str!("../librdmacm.map");
        let in_map: BTreeSet<&str> = map
            .lines()
            .filter_map(|l| l.trim().strip_suffix(';'))
            .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        let bound: BTreeSet<&str> = super::NAMES.iter().copied().collect();
        assert_eq!(bound.len(), 68, "68 names bound");
        assert_eq!(in_map, bound, "librdmacm.map and exports.rs agree");
    }
}
