//! The verbs librdmacm calls, through their C ABI in whichever
//! `libibverbs.so.1` the process has loaded: under `uroce run` (or with
//! uroce's directory first in `LD_LIBRARY_PATH`) that is uroce's, so that
//! `id->verbs` is the same context a program's own verbs see. Nothing of the
//! verbs is linked into this library: the declarations below are resolved
//! by the dynamic linker at load time. The link reads a stub the build
//! script makes from this block (`build.rs`), not the system's library, so
//! building needs no rdma-core: the stub gives the `NEEDED` entry (its
//! soname, `libibverbs.so.1`) and the symbol versions
//! (`ibv_create_qp@IBVERBS_1.1`...), which uroce's library exports too.
//!
//! `ibv_create_qp_ex` and `ibv_create_srq_ex` are `static inline` in
//! `<infiniband/verbs.h>`: [`create_qp_ex`] and [`create_srq_ex`] do what
//! they do (the plain verb when the attributes allow, else the
//! `verbs_context` function pointer).

use crate::abi::*;
use libc::{c_int, c_void};

#[link(name = "uroce_libibverbs_link_stub", kind = "dylib")]
extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_close_device(context: *mut ibv_context) -> c_int;
    pub fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    pub fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    pub fn ibv_query_gid(
        context: *mut ibv_context,
        port: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
    pub fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> c_int;
    pub fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    pub fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

/// Reads the `T` at `offset` bytes into `base`.
///
/// # Safety
/// `base + offset` must hold a `T` (the offsets of `abi::verbs_offsets`,
/// checked against the header by the layout test).
pub unsafe fn field<T: Copy>(base: *const c_void, offset: usize) -> T {
    base.cast::<u8>().add(offset).cast::<T>().read_unaligned()
}

/// `verbs_get_ctx_op(context, op)`: the extended context's function
/// pointer at `offset`, if the context is extended, large enough and has it.
///
/// # Safety
/// `context` is an open `ibv_context`.
unsafe fn context_op(context: *mut ibv_context, offset: usize) -> Option<*const c_void> {
    use crate::abi::verbs_offsets as v;
    if field::<usize>(context.cast(), v::CONTEXT_ABI_COMPAT) != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let vctx = context.cast::<u8>().sub(v::VCTX_CONTEXT).cast::<c_void>();
    let sz: usize = field(vctx, v::VCTX_SZ);
    if v::VCTX_SIZE - offset > sz {
        return None;
    }
    let op: *const c_void = field(vctx, offset);
    (!op.is_null()).then_some(op)
}

/// `ibv_create_qp_ex` as `<infiniband/verbs.h>` has it.
///
/// # Safety
/// `context` is open; `attr` is valid.
pub unsafe fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if (*attr).comp_mask == IBV_QP_INIT_ATTR_PD {
        return ibv_create_qp((*attr).pd, attr.cast());
    }
    let Some(op) = context_op(context, verbs_offsets::VCTX_CREATE_QP_EX) else {
        crate::ffi::set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    };
    let f: unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp =
        std::mem::transmute(op);
    f(context, attr)
}

/// `ibv_create_srq_ex` as `<infiniband/verbs.h>` has it.
///
/// # Safety
/// `context` is open; `attr` is valid.
pub unsafe fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    let mask = (*attr).comp_mask;
    if mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) == 0
        && mask & IBV_SRQ_INIT_ATTR_PD != 0
        && (mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || (*attr).srq_type == IBV_SRQT_BASIC)
    {
        return ibv_create_srq((*attr).pd, attr.cast());
    }
    let Some(op) = context_op(context, verbs_offsets::VCTX_CREATE_SRQ_EX) else {
        crate::ffi::set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    };
    let f: unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq =
        std::mem::transmute(op);
    f(context, attr)
}
