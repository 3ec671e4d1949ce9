//! The C structs of `<rdma/rdma_cma.h>` (rdma-core 44) and the parts of
//! `<infiniband/verbs.h>` and `<infiniband/sa.h>` the library fills or
//! reads, written by hand. Their sizes and field offsets are asserted at
//! compile time, and the unit test `layouts_match_the_real_headers`
//! compares [`layout`] with a C program compiled against the real headers.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, size_t, sockaddr, sockaddr_storage, socklen_t};
use std::mem::{offset_of, size_of};

/// `union ibv_gid`: 16 bytes, 8-aligned (its `global` view is two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// Opaque verbs objects: only pointers to them are handled (a few fields
/// are read at their offsets, see [`verbs_offsets`]).
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_pd {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_cq {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_qp {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_srq {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_comp_channel {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ibv_xrcd {
    _opaque: [u8; 0],
}

/// Offsets inside verbs objects this library reads (checked by the layout
/// test against `offsetof` in the real header).
pub mod verbs_offsets {
    /// `struct ibv_context.device`.
    pub const CONTEXT_DEVICE: usize = 0;
    /// `struct ibv_context.abi_compat` (`__VERBS_ABI_IS_EXTENDED` for a
    /// `verbs_context`).
    pub const CONTEXT_ABI_COMPAT: usize = 320;
    /// `struct verbs_context.context` (the `ibv_context` inside).
    pub const VCTX_CONTEXT: usize = 320;
    /// `struct verbs_context.sz`.
    pub const VCTX_SZ: usize = 312;
    /// `struct verbs_context.create_qp_ex`.
    pub const VCTX_CREATE_QP_EX: usize = 264;
    /// `struct verbs_context.create_srq_ex`.
    pub const VCTX_CREATE_SRQ_EX: usize = 280;
    /// `sizeof(struct verbs_context)`.
    pub const VCTX_SIZE: usize = 648;
    /// `struct ibv_device.transport_type`.
    pub const DEVICE_TRANSPORT_TYPE: usize = 20;
    /// `struct ibv_pd.context`.
    pub const PD_CONTEXT: usize = 0;
    /// `struct ibv_qp.pd`, `.srq`, `.qp_num`.
    pub const QP_PD: usize = 16;
    pub const QP_SRQ: usize = 40;
    pub const QP_NUM: usize = 52;
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
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
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`): the route's path.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_path_record` (`<infiniband/sa.h>`: the packed SA record,
/// big-endian), inside `struct ibv_path_data` (`RDMA_OPTION_IB_PATH`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_path_record {
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    pub reversible_numpath: u8,
    pub pkey: u16,
    pub qosclass_sl: u16,
    pub mtu: u8,
    pub rate: u8,
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_path_data {
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// Big-endian.
    pub pkey: u16,
}

/// The `addr` union of `struct rdma_addr` (its one member).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_addr_union {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`: the two anonymous unions of `sockaddr` views are
/// each a `sockaddr_storage` (their largest member).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src_storage: sockaddr_storage,
    pub dst_storage: sockaddr_storage,
    pub addr: rdma_addr_union,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: size_t,
    pub ai_route: *mut c_void,
    pub ai_connect_len: size_t,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

// The constants of <rdma/rdma_cma.h> and <infiniband/verbs.h> in use.
pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;
pub const RDMA_MAX_PRIVATE_DATA: usize = 256;
pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 2;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 4;
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `enum ibv_event_type`'s `IBV_EVENT_COMM_EST` (`rdma_notify`).
pub const IBV_EVENT_COMM_EST: c_int = 4;
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;
pub const IBV_QPT_XRC_SEND: c_int = 9;
pub const IBV_QPT_XRC_RECV: c_int = 10;
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QPS_RTS: c_int = 3;
pub const IBV_QPS_ERR: c_int = 6;
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 2;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 2;
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 4;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 8;
pub const IBV_SRQT_BASIC: c_int = 0;
pub const IBV_SRQT_XRC: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `__VERBS_ABI_IS_EXTENDED`: `(void *)UINTPTR_MAX`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;
/// `IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL` (the flags the
/// kernel gives the primary path, and `RDMA_OPTION_IB_PATH` looks for).
pub const IB_PATH_PRIMARY_BIDIRECTIONAL: u32 = 1 | 2 | (8 | 32);

/// The layouts as `(struct, field, value)`, the field `=` for the size:
/// what the layout test asks the C compiler for.
pub fn layout() -> Vec<(&'static str, &'static str, usize)> {
    let mut t = Vec::new();
    macro_rules! fields {
        ($ty:ident { $($f:ident),* $(,)? }) => {
            t.push((stringify!($ty), "=", size_of::<$ty>()));
            $(t.push((stringify!($ty), stringify!($f), offset_of!($ty, $f)));)*
        };
    }
    fields!(ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data });
    fields!(ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all });
    fields!(ibv_rx_hash_conf {
        rx_hash_function,
        rx_hash_key_len,
        rx_hash_key,
        rx_hash_fields_mask
    });
    fields!(ibv_qp_init_attr_ex {
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
        comp_mask,
        pd,
        xrcd,
        create_flags,
        max_tso_header,
        rwq_ind_tbl,
        rx_hash_conf,
        source_qpn,
        send_ops_flags,
    });
    fields!(ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class });
    fields!(ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num });
    fields!(ibv_qp_attr {
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit,
    });
    fields!(ibv_srq_attr { max_wr, max_sge, srq_limit });
    fields!(ibv_srq_init_attr { srq_context, attr });
    fields!(ibv_tm_cap { max_num_tags, max_ops });
    fields!(ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap });
    fields!(ibv_port_attr {
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2,
    });
    fields!(ibv_device_attr {
        fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_ee_rd_atom,
        max_res_rd_atom,
        max_qp_init_rd_atom,
        max_ee_init_rd_atom,
        atomic_cap,
        max_ee,
        max_rdd,
        max_mw,
        max_raw_ipv6_qp,
        max_raw_ethy_qp,
        max_mcast_grp,
        max_mcast_qp_attach,
        max_total_mcast_qp_attach,
        max_ah,
        max_fmr,
        max_map_per_fmr,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt,
    });
    fields!(ibv_ece { vendor_id, options, comp_mask });
    fields!(ibv_sa_path_rec {
        dgid,
        sgid,
        dlid,
        slid,
        raw_traffic,
        flow_label,
        hop_limit,
        traffic_class,
        reversible,
        numb_path,
        pkey,
        sl,
        mtu_selector,
        mtu,
        rate_selector,
        rate,
        packet_life_time_selector,
        packet_life_time,
        preference,
    });
    fields!(ibv_path_record {
        service_id,
        dgid,
        sgid,
        dlid,
        slid,
        flowlabel_hoplimit,
        tclass,
        reversible_numpath,
        pkey,
        qosclass_sl,
        mtu,
        rate,
        packetlifetime,
        preference,
        reserved,
    });
    fields!(ibv_path_data { flags, reserved, path });
    fields!(rdma_ib_addr { sgid, dgid, pkey });
    fields!(rdma_addr { src_storage, dst_storage, addr });
    fields!(rdma_route { addr, path_rec, num_paths });
    fields!(rdma_event_channel { fd });
    fields!(rdma_cm_id {
        verbs,
        channel,
        context,
        qp,
        route,
        ps,
        port_num,
        event,
        send_cq_channel,
        send_cq,
        recv_cq_channel,
        recv_cq,
        srq,
        pd,
        qp_type,
    });
    fields!(rdma_conn_param {
        private_data,
        private_data_len,
        responder_resources,
        initiator_depth,
        flow_control,
        retry_count,
        rnr_retry_count,
        srq,
        qp_num,
    });
    fields!(rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey });
    fields!(rdma_cm_event { id, listen_id, event, status, param });
    fields!(rdma_addrinfo {
        ai_flags,
        ai_family,
        ai_qp_type,
        ai_port_space,
        ai_src_len,
        ai_dst_len,
        ai_src_addr,
        ai_dst_addr,
        ai_src_canonname,
        ai_dst_canonname,
        ai_route_len,
        ai_route,
        ai_connect_len,
        ai_connect,
        ai_next,
    });
    fields!(rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr });
    // Nested members and the verbs objects' fields read at their offsets.
    use verbs_offsets as v;
    t.extend([
        ("rdma_cm_id", "route.addr.src_storage", offset_of!(rdma_cm_id, route)),
        (
            "rdma_cm_id",
            "route.addr.dst_storage",
            offset_of!(rdma_cm_id, route) + offset_of!(rdma_addr, dst_storage),
        ),
        (
            "rdma_cm_id",
            "route.addr.addr.ibaddr.pkey",
            offset_of!(rdma_cm_id, route)
                + offset_of!(rdma_addr, addr)
                + offset_of!(rdma_ib_addr, pkey),
        ),
        (
            "rdma_cm_id",
            "route.path_rec",
            offset_of!(rdma_cm_id, route) + offset_of!(rdma_route, path_rec),
        ),
        ("rdma_cm_event", "param.conn.qp_num", offset_of!(rdma_cm_event, param) + 16),
        ("rdma_cm_event", "param.ud.qkey", offset_of!(rdma_cm_event, param) + 52),
        ("ibv_context", "device", v::CONTEXT_DEVICE),
        ("ibv_context", "abi_compat", v::CONTEXT_ABI_COMPAT),
        ("verbs_context", "=", v::VCTX_SIZE),
        ("verbs_context", "context", v::VCTX_CONTEXT),
        ("verbs_context", "sz", v::VCTX_SZ),
        ("verbs_context", "create_qp_ex", v::VCTX_CREATE_QP_EX),
        ("verbs_context", "create_srq_ex", v::VCTX_CREATE_SRQ_EX),
        ("ibv_device", "transport_type", v::DEVICE_TRANSPORT_TYPE),
        ("ibv_pd", "context", v::PD_CONTEXT),
        ("ibv_qp", "pd", v::QP_PD),
        ("ibv_qp", "srq", v::QP_SRQ),
        ("ibv_qp", "qp_num", v::QP_NUM),
    ]);
    t
}

// The sizes rdma-core 44 has (struct-sizes.txt and the headers), checked
// at compile time; the offsets by the layout test.
const _: () = {
    assert!(size_of::<rdma_cm_id>() == 416);
    assert!(offset_of!(rdma_cm_id, route) == 32);
    assert!(offset_of!(rdma_cm_id, ps) == 344);
    assert!(offset_of!(rdma_cm_id, qp_type) == 408);
    assert!(size_of::<rdma_event_channel>() == 4);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(size_of::<rdma_route>() == 312);
    assert!(size_of::<rdma_addr>() == 296);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16);
    assert!(size_of::<ibv_sa_path_rec>() == 64);
    assert!(size_of::<ibv_path_data>() == 72);
    assert!(size_of::<ibv_qp_init_attr>() == 64);
    assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(size_of::<ibv_srq_init_attr>() == 24);
    assert!(size_of::<ibv_srq_init_attr_ex>() == 64);
    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(size_of::<ibv_ece>() == 12);
};

#[cfg(test)]
mod tests {
    use super::layout;
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    /// The C name of a Rust field (`type_` → `type`).
    fn c_field(field: &str) -> String {
        field.split('.').map(|p| p.strip_suffix('_').unwrap_or(p)).collect::<Vec<_>>().join(".")
    }

    #[test]
    fn layouts_match_the_real_headers() {
        let header = Path::new("/usr/include/rdma/rdma_cma.h");
        let strict = std::env::var("CI").is_ok_and(|v| v == "true");
        if !header.exists() {
            assert!(!strict, "no <rdma/rdma_cma.h> (librdmacm-dev) under CI=true");
            eprintln!("skipping: no /usr/include/rdma/rdma_cma.h (librdmacm-dev)");
            return;
        }
        let ours = layout();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\n\
             #include <infiniband/sa.h>\nint main(void) {\n",
        );
        for (ty, field, _) in &ours {
            if *field == "=" {
                c += &format!("  printf(\"{ty} = %zu\\n\", sizeof(struct {ty}));\n");
            } else {
                let cf = c_field(field);
                c += &format!("  printf(\"{ty} {field} %zu\\n\", offsetof(struct {ty}, {cf}));\n");
            }
        }
        c += "  return 0;\n}\n";
        let dir = tempfile::tempdir().expect("a temporary directory");
        let source = dir.path().join("layout.c");
        let binary = dir.path().join("layout");
        std::fs::write(&source, c).expect("write the C program");
        let built = Command::new("cc").arg("-o").arg(&binary).arg(&source).output().expect("cc");
        assert!(built.status.success(), "cc: {}", String::from_utf8_lossy(&built.stderr));
        let run = Command::new(&binary).output().expect("run the C program");
        let theirs: BTreeMap<String, usize> = String::from_utf8_lossy(&run.stdout)
            .lines()
            .map(|line| {
                let (head, value) = line.rsplit_once(' ').expect("`... value`");
                (head.to_string(), value.parse().expect("a number"))
            })
            .collect();
        let mut wrong = Vec::new();
        for (ty, field, value) in &ours {
            let key = if *field == "=" { format!("{ty} =") } else { format!("{ty} {field}") };
            if theirs.get(&key) != Some(value) {
                wrong.push(format!("{key}: ours {value}, the headers {:?}", theirs.get(&key)));
            }
        }
        assert!(wrong.is_empty(), "layouts differ from the headers:\n{}", wrong.join("\n"));
        eprintln!(
            "{} sizes and offsets match <rdma/rdma_cma.h> and <infiniband/verbs.h>",
            ours.len()
        );
    }
}
