//! The device and the context: `ibv_device`, `ibv_context` with its `ops`
//! (the inline `ibv_post_send`, `ibv_poll_cq`... jump through them), and
//! `verbs_context`, which lies before `ibv_context` in memory (the inline
//! extended verbs find it from `abi_compat` and `sz`).
#![allow(non_camel_case_types, non_snake_case)]

use super::{ibv_cq, ibv_mw, ibv_mw_bind, ibv_pd, ibv_port_attr, ibv_qp, ibv_recv_wr};
use super::{ibv_device_attr, ibv_send_wr, ibv_srq, ibv_wc, PthreadMutex};
use std::os::raw::{c_char, c_int, c_void};

/// A function pointer the library leaves NULL (its verb is not offered
/// through this slot).
pub type Unused = Option<unsafe extern "C" fn()>;

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    pub _ops: [Unused; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; SYSFS_NAME_MAX],
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub type QueryDeviceFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut super::ibv_parent_domain_init_attr) -> *mut ibv_pd;
pub type AdviseMrFn =
    unsafe extern "C" fn(*mut ibv_pd, c_int, u32, *mut super::ibv_sge, u32) -> c_int;
pub type CreateCqExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *mut super::ibv_cq_init_attr_ex,
) -> *mut super::ibv_cq_ex;
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut super::ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut c_void, usize) -> c_int;

/// `struct ibv_context_ops`.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<QueryDeviceFn>,
    pub _compat_query_port: Unused,
    pub _compat_alloc_pd: Unused,
    pub _compat_dealloc_pd: Unused,
    pub _compat_reg_mr: Unused,
    pub _compat_rereg_mr: Unused,
    pub _compat_dereg_mr: Unused,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: Unused,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _compat_cq_event: Unused,
    pub _compat_resize_cq: Unused,
    pub _compat_destroy_cq: Unused,
    pub _compat_create_srq: Unused,
    pub _compat_modify_srq: Unused,
    pub _compat_query_srq: Unused,
    pub _compat_destroy_srq: Unused,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: Unused,
    pub _compat_query_qp: Unused,
    pub _compat_modify_qp: Unused,
    pub _compat_destroy_qp: Unused,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: Unused,
    pub _compat_destroy_ah: Unused,
    pub _compat_attach_mcast: Unused,
    pub _compat_detach_mcast: Unused,
    pub _compat_async_event: Unused,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: PthreadMutex,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `abi_compat` says a `verbs_context` lies
/// before the `ibv_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `struct verbs_context`: the extended verbs, in front of `context`.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: Unused,
    pub read_counters: Unused,
    pub attach_counters_point_flow: Unused,
    pub create_counters: Unused,
    pub destroy_counters: Unused,
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            *mut ibv_pd,
            *mut super::ibv_dm,
            u64,
            usize,
            u32,
        ) -> *mut super::ibv_mr,
    >,
    pub alloc_dm: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut crate::dm::AllocDmAttr) -> *mut super::ibv_dm,
    >,
    pub free_dm: Option<unsafe extern "C" fn(*mut super::ibv_dm) -> c_int>,
    pub modify_flow_action_esp: Unused,
    pub destroy_flow_action: Unused,
    pub create_flow_action_esp: Unused,
    pub modify_qp_rate_limit: Unused,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<unsafe extern "C" fn(*mut super::ibv_td) -> c_int>,
    pub alloc_td: Option<unsafe extern "C" fn(*mut ibv_context, *mut c_void) -> *mut super::ibv_td>,
    pub modify_cq: Unused,
    pub post_srq_ops: Unused,
    pub destroy_rwq_ind_table: Unused,
    pub create_rwq_ind_table: Unused,
    pub destroy_wq: Unused,
    pub modify_wq: Unused,
    pub create_wq: Unused,
    pub query_rt_values: Unused,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Unused,
    pub ABI_placeholder2: Unused,
    pub ibv_create_flow: Unused,
    pub ABI_placeholder1: Unused,
    pub open_qp: Unused,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Unused,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut super::ibv_srq_init_attr_ex) -> *mut ibv_srq,
    >,
    pub open_xrcd: Unused,
    pub close_xrcd: Unused,
    pub _ABI_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}
