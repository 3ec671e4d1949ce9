//! The extended verbs' structs: `ibv_cq_ex` (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_wc_read_*` jump through it), `ibv_qp_ex` (the
//! `ibv_wr_*` calls jump through it) and their creation attributes. Each
//! begins with its base object (`ibv_cq`, `ibv_qp`), as in C.
#![allow(non_camel_case_types)]

use super::{ibv_ah, ibv_comp_channel, ibv_cq, ibv_mw, ibv_mw_bind_info, ibv_pd, ibv_qp};
use super::{ibv_qp_cap, ibv_sge, ibv_srq, Unused};
use std::os::raw::{c_int, c_void};

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

type CqEx = *mut ibv_cq_ex;

/// `struct ibv_cq_ex`.
#[repr(C)]
pub struct ibv_cq_ex {
    /// `context` ... `async_events_completed`: an `ibv_cq`.
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(CqEx, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(CqEx)>,
    pub read_opcode: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_slid: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(CqEx) -> u64>,
    pub read_cvlan: Unused,
    pub read_flow_tag: Unused,
    pub read_tm_info: Unused,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(CqEx) -> u64>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

type QpEx = *mut ibv_qp_ex;

/// `struct ibv_data_buf`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex`.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(QpEx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(QpEx, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(QpEx, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_tso: Unused,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(QpEx, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Unused,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(QpEx, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_complete: Option<unsafe extern "C" fn(QpEx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(QpEx, u32, u64, *const c_void)>,
}

/// `struct ibv_qp_init_attr_ex` (`rx_hash_conf`, unused, as bytes).
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_srq_init_attr_ex` (`tm_cap`, unused, as its two words).
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: super::ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: [u32; 2],
}
