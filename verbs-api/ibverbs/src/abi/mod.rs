//! The C structs of `<infiniband/verbs.h>` (rdma-core 44) that the library
//! fills or reads, written by hand (no bindgen: a machine without
//! `libibverbs-dev` builds the library).
//!
//! Every struct's size and every field's offset is asserted at compile time
//! below ([`LAYOUT`]); the test `libibverbs_abi` compares the same table,
//! read from the built library (`uroce_ibverbs_layout`), with a C program
//! compiled against the real header.
//!
//! | file | what |
//! | --- | --- |
//! | `context.rs` | `ibv_device`, `ibv_context`, `ibv_context_ops`, `verbs_context` |
//! | `attr.rs` | attribute structs: device, port, GID, QP, AH, SRQ, async event |
//! | `objects.rs` | the objects a verb returns: PD, MR, MW, CQ, channel, QP, SRQ, AH |
//! | `ex.rs` | the extended verbs: `ibv_cq_ex`, `ibv_qp_ex`, their creation attributes |
//! | `wr.rs` | `ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`, `ibv_mw_bind` |

mod attr;
mod context;
mod ex;
mod objects;
mod wr;

pub use attr::*;
pub use context::*;
pub use ex::*;
pub use objects::*;
pub use wr::*;

/// `pthread_mutex_t` on x86_64 glibc (all zero is its static initializer).
pub type PthreadMutex = [u64; 5];
/// `pthread_cond_t` on x86_64 glibc (all zero is its static initializer).
pub type PthreadCond = [u64; 6];

/// Declares the expected size of each struct and offset of each field,
/// checks them at compile time, and builds [`LAYOUT`] from them.
macro_rules! layout {
    ($($ty:ident = $size:literal { $($($field:ident).+ = $off:literal,)* },)*) => {
        $(
            const _: () = assert!(core::mem::size_of::<$ty>() == $size);
            $(const _: () = assert!(core::mem::offset_of!($ty, $($field).+) == $off);)*
        )*
        /// `struct field offset` lines (and `struct = size`), one per entry:
        /// what the compile-time assertions checked.
        pub const LAYOUT: &str = concat!($(
            stringify!($ty), " = ", stringify!($size), "\n",
            $(stringify!($ty), " ", stringify!($($field).+), " ", stringify!($off), "\n",)*
        )*);
    };
}

layout! {
    ibv_device = 664 {
        _ops = 0, node_type = 16, transport_type = 20, name = 24, dev_name = 88, dev_path = 152,
        ibdev_path = 408,
    },
    ibv_context = 328 {
        device = 0, ops = 8, cmd_fd = 264, async_fd = 268, num_comp_vectors = 272, mutex = 280,
        abi_compat = 320,
    },
    ibv_context_ops = 256 {
        _compat_query_device = 0, _compat_query_port = 8, alloc_mw = 56, bind_mw = 64,
        dealloc_mw = 72, poll_cq = 88, req_notify_cq = 96, post_srq_recv = 160, post_send = 200,
        post_recv = 208, _compat_async_event = 248,
    },
    verbs_context = 648 {
        query_port = 0, advise_mr = 8, alloc_null_mr = 16, reg_dm_mr = 56, alloc_dm = 64,
        free_dm = 72, alloc_parent_domain = 112,
        dealloc_td = 120, alloc_td = 128, create_cq_ex = 200, priv_ = 208,
        query_device_ex = 216, open_qp = 256, create_qp_ex = 264, get_srq_num = 272,
        create_srq_ex = 280, open_xrcd = 288, close_xrcd = 296, _ABI_placeholder3 = 304, sz = 312,
        context = 320,
    },
    ibv_device_attr = 232 {
        fw_ver = 0, node_guid = 64, sys_image_guid = 72, max_mr_size = 80, page_size_cap = 88,
        vendor_id = 96, vendor_part_id = 100, hw_ver = 104, max_qp = 108, max_qp_wr = 112,
        device_cap_flags = 116, max_sge = 120, max_sge_rd = 124, max_cq = 128, max_cqe = 132,
        max_mr = 136, max_pd = 140, max_qp_rd_atom = 144, max_ee_rd_atom = 148,
        max_res_rd_atom = 152, max_qp_init_rd_atom = 156, max_ee_init_rd_atom = 160,
        atomic_cap = 164, max_ee = 168, max_rdd = 172, max_mw = 176, max_raw_ipv6_qp = 180,
        max_raw_ethy_qp = 184, max_mcast_grp = 188, max_mcast_qp_attach = 192,
        max_total_mcast_qp_attach = 196, max_ah = 200, max_fmr = 204, max_map_per_fmr = 208,
        max_srq = 212, max_srq_wr = 216, max_srq_sge = 220, max_pkeys = 224,
        local_ca_ack_delay = 226, phys_port_cnt = 227,
    },
    ibv_device_attr_ex = 400 {
        orig_attr = 0, comp_mask = 232, odp_caps = 240, completion_timestamp_mask = 264,
        hca_core_clock = 272, device_cap_flags_ex = 280, tso_caps = 288, rss_caps = 296,
        max_wq_type_rq = 328, packet_pacing_caps = 332, raw_packet_caps = 344, tm_caps = 348,
        cq_mod_caps = 368, max_dm_size = 376, pci_atomic_caps = 384, xrc_odp_caps = 392,
        phys_port_cnt_ex = 396,
    },
    ibv_port_attr = 52 {
        state = 0, max_mtu = 4, active_mtu = 8, gid_tbl_len = 12, port_cap_flags = 16,
        max_msg_sz = 20, bad_pkey_cntr = 24, qkey_viol_cntr = 28, pkey_tbl_len = 32, lid = 34,
        sm_lid = 36, lmc = 38, max_vl_num = 39, sm_sl = 40, subnet_timeout = 41,
        init_type_reply = 42, active_width = 43, active_speed = 44, phys_state = 45,
        link_layer = 46, flags = 47, port_cap_flags2 = 48,
    },
    ibv_gid_entry = 32 { gid = 0, gid_index = 16, port_num = 20, gid_type = 24, ndev_ifindex = 28, },
    ibv_async_event = 16 { element = 0, event_type = 8, },
    ibv_pd = 16 { context = 0, handle = 8, },
    ibv_mr = 48 { context = 0, pd = 8, addr = 16, length = 24, handle = 32, lkey = 36, rkey = 40, },
    ibv_cq = 128 {
        context = 0, channel = 8, cq_context = 16, handle = 24, cqe = 28, mutex = 32, cond = 72,
        comp_events_completed = 120, async_events_completed = 124,
    },
    ibv_comp_channel = 16 { context = 0, fd = 8, refcnt = 12, },
    ibv_qp = 160 {
        context = 0, qp_context = 8, pd = 16, send_cq = 24, recv_cq = 32, srq = 40, handle = 48,
        qp_num = 52, state = 56, qp_type = 60, mutex = 64, cond = 104, events_completed = 152,
    },
    ibv_srq = 128 {
        context = 0, srq_context = 8, pd = 16, handle = 24, mutex = 32, cond = 72,
        events_completed = 120,
    },
    ibv_ah = 24 { context = 0, pd = 8, handle = 16, },
    ibv_mw = 32 { context = 0, pd = 8, rkey = 16, handle = 20, type_ = 24, },
    ibv_sge = 16 { addr = 0, length = 8, lkey = 12, },
    ibv_send_wr = 128 {
        wr_id = 0, next = 8, sg_list = 16, num_sge = 24, opcode = 28, send_flags = 32,
        imm_data = 36, wr.rdma.remote_addr = 40, wr.rdma.rkey = 48, wr.atomic.remote_addr = 40,
        wr.atomic.compare_add = 48, wr.atomic.swap = 56, wr.atomic.rkey = 64, wr.ud.ah = 40,
        wr.ud.remote_qpn = 48, wr.ud.remote_qkey = 52, qp_type.xrc.remote_srqn = 72,
        bind_mw.mw = 80, bind_mw.rkey = 88, bind_mw.bind_info = 96,
    },
    ibv_recv_wr = 32 { wr_id = 0, next = 8, sg_list = 16, num_sge = 24, },
    ibv_wc = 48 {
        wr_id = 0, status = 8, opcode = 12, vendor_err = 16, byte_len = 20, imm_data = 24,
        qp_num = 28, src_qp = 32, wc_flags = 36, pkey_index = 40, slid = 42, sl = 44,
        dlid_path_bits = 45,
    },
    ibv_qp_cap = 20 {
        max_send_wr = 0, max_recv_wr = 4, max_send_sge = 8, max_recv_sge = 12,
        max_inline_data = 16,
    },
    ibv_qp_init_attr = 64 {
        qp_context = 0, send_cq = 8, recv_cq = 16, srq = 24, cap = 32, qp_type = 52,
        sq_sig_all = 56,
    },
    ibv_global_route = 24 {
        dgid = 0, flow_label = 16, sgid_index = 20, hop_limit = 21, traffic_class = 22,
    },
    ibv_ah_attr = 32 {
        grh = 0, dlid = 24, sl = 26, src_path_bits = 27, static_rate = 28, is_global = 29,
        port_num = 30,
    },
    ibv_qp_attr = 144 {
        qp_state = 0, cur_qp_state = 4, path_mtu = 8, path_mig_state = 12, qkey = 16,
        rq_psn = 20, sq_psn = 24, dest_qp_num = 28, qp_access_flags = 32, cap = 36, ah_attr = 56,
        alt_ah_attr = 88, pkey_index = 120, alt_pkey_index = 122, en_sqd_async_notify = 124,
        sq_draining = 125, max_rd_atomic = 126, max_dest_rd_atomic = 127, min_rnr_timer = 128,
        port_num = 129, timeout = 130, retry_cnt = 131, rnr_retry = 132, alt_port_num = 133,
        alt_timeout = 134, rate_limit = 136,
    },
    ibv_srq_attr = 12 { max_wr = 0, max_sge = 4, srq_limit = 8, },
    ibv_srq_init_attr = 24 { srq_context = 0, attr = 8, },
    ibv_mw_bind = 48 { wr_id = 0, send_flags = 8, bind_info = 16, },
    ibv_mw_bind_info = 32 { mr = 0, addr = 8, length = 16, mw_access_flags = 24, },
    ibv_cq_ex = 288 {
        comp_mask = 128, status = 132, wr_id = 136, start_poll = 144, next_poll = 152,
        end_poll = 160, read_opcode = 168, read_vendor_err = 176, read_byte_len = 184,
        read_imm_data = 192, read_qp_num = 200, read_src_qp = 208, read_wc_flags = 216,
        read_slid = 224, read_sl = 232, read_dlid_path_bits = 240, read_completion_ts = 248,
        read_cvlan = 256, read_flow_tag = 264, read_tm_info = 272,
        read_completion_wallclock_ns = 280,
    },
    ibv_cq_init_attr_ex = 56 {
        cqe = 0, cq_context = 8, channel = 16, comp_vector = 24, wc_flags = 32, comp_mask = 40,
        flags = 44, parent_domain = 48,
    },
    ibv_qp_ex = 352 {
        qp_base = 0, comp_mask = 160, wr_id = 168, wr_flags = 176, wr_atomic_cmp_swp = 184,
        wr_atomic_fetch_add = 192, wr_bind_mw = 200, wr_local_inv = 208, wr_rdma_read = 216,
        wr_rdma_write = 224, wr_rdma_write_imm = 232, wr_send = 240, wr_send_imm = 248,
        wr_send_inv = 256, wr_send_tso = 264, wr_set_ud_addr = 272, wr_set_xrc_srqn = 280,
        wr_set_inline_data = 288, wr_set_inline_data_list = 296, wr_set_sge = 304,
        wr_set_sge_list = 312, wr_start = 320, wr_complete = 328, wr_abort = 336,
        wr_atomic_write = 344,
    },
    ibv_qp_init_attr_ex = 136 {
        qp_context = 0, send_cq = 8, recv_cq = 16, srq = 24, cap = 32, qp_type = 52,
        sq_sig_all = 56, comp_mask = 60, pd = 64, xrcd = 72, create_flags = 80,
        max_tso_header = 84, rwq_ind_tbl = 88, rx_hash_conf = 96, source_qpn = 120,
        send_ops_flags = 128,
    },
    ibv_data_buf = 16 { addr = 0, length = 8, },
    ibv_srq_init_attr_ex = 64 {
        srq_context = 0, attr = 8, comp_mask = 20, srq_type = 24, pd = 32, xrcd = 40, cq = 48,
        tm_cap = 56,
    },
    ibv_td = 8 { context = 0, },
    ibv_dm = 32 { context = 0, memcpy_to_dm = 8, memcpy_from_dm = 16, comp_mask = 24, handle = 28, },
    ibv_parent_domain_init_attr = 48 {
        pd = 0, td = 8, comp_mask = 16, alloc = 24, free = 32, pd_context = 40,
    },
}
