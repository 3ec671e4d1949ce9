//! Every (name, version) that rdma-core 44's `libibverbs.so.1` exports,
//! and the function behind it. `libibverbs.map` gives the version nodes.
//!
//! The functions are bound to their exported names here, each by a
//! one-instruction function of that name (a jump), rather than with
//! `#[no_mangle]`: rustc's own version script would otherwise claim the
//! names without a version. The 33 names that
//! exist twice (`name@IBVERBS_1.0`, the 2005 ABI, and the default
//! `name@@IBVERBS_1.1`) get an alias of their own per version and a
//! `.symver` directive; an alias is never exported under its own name (the
//! map's `local: *`).

use crate::{cq, device, pd, private, qp, qp_ex, query, rereg, strings, unsupported};

/// Defines the function `$label` as a jump to `$f` (a symbol of this
/// object file, whatever codegen unit holds `$f`: `.set` to a symbol of
/// another unit would define nothing).
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

/// Exports `$f` as `$name` at the version the map gives it.
macro_rules! export {
    ($($name:literal => $f:path,)*) => {
        $(trampoline!($name, $f);)*
    };
}

/// Exports `$f` as `$name@$version` (`@`) or `$name@@$version` (`@@`, the
/// default version), through a function of its own, `uroce_$name_$tag`.
macro_rules! export_versioned {
    ($($name:literal $at:literal $version:literal $tag:literal => $f:path,)*) => {
        $(
            trampoline!(concat!("uroce_", $name, "_", $tag), $f);
            std::arch::global_asm!(concat!(
                ".symver uroce_", $name, "_", $tag, ", ", $name, $at, $version
            ));
        )*
    };
}

// The one data symbol: `bool verbs_allow_disassociate_destroy` (providers
// read it; nothing here does).
std::arch::global_asm!(
    ".pushsection .bss.verbs_allow_disassociate_destroy,\"aw\",@nobits",
    ".globl verbs_allow_disassociate_destroy",
    ".type verbs_allow_disassociate_destroy, @object",
    ".size verbs_allow_disassociate_destroy, 1",
    "verbs_allow_disassociate_destroy:",
    ".zero 1",
    ".popsection",
);

export_versioned! {
    // The 1.1 ABI (what every binary built since 2006 asks for).
    "ibv_ack_async_event" "@@" "IBVERBS_1.1" "v1_1" => cq::ack_async_event,
    "ibv_ack_cq_events" "@@" "IBVERBS_1.1" "v1_1" => cq::ack_cq_events,
    "ibv_alloc_pd" "@@" "IBVERBS_1.1" "v1_1" => pd::alloc_pd,
    "ibv_attach_mcast" "@@" "IBVERBS_1.1" "v1_1" => qp::attach_mcast,
    "ibv_close_device" "@@" "IBVERBS_1.1" "v1_1" => device::close_device,
    "ibv_create_ah" "@@" "IBVERBS_1.1" "v1_1" => pd::create_ah,
    "ibv_create_cq" "@@" "IBVERBS_1.1" "v1_1" => cq::create_cq,
    "ibv_create_qp" "@@" "IBVERBS_1.1" "v1_1" => qp::create_qp,
    "ibv_create_srq" "@@" "IBVERBS_1.1" "v1_1" => qp::create_srq,
    "ibv_dealloc_pd" "@@" "IBVERBS_1.1" "v1_1" => pd::dealloc_pd,
    "ibv_dereg_mr" "@@" "IBVERBS_1.1" "v1_1" => pd::dereg_mr,
    "ibv_destroy_ah" "@@" "IBVERBS_1.1" "v1_1" => pd::destroy_ah,
    "ibv_destroy_cq" "@@" "IBVERBS_1.1" "v1_1" => cq::destroy_cq,
    "ibv_destroy_qp" "@@" "IBVERBS_1.1" "v1_1" => qp::destroy_qp,
    "ibv_destroy_srq" "@@" "IBVERBS_1.1" "v1_1" => qp::destroy_srq,
    "ibv_detach_mcast" "@@" "IBVERBS_1.1" "v1_1" => qp::detach_mcast,
    "ibv_free_device_list" "@@" "IBVERBS_1.1" "v1_1" => device::free_device_list,
    "ibv_get_async_event" "@@" "IBVERBS_1.1" "v1_1" => cq::get_async_event,
    "ibv_get_cq_event" "@@" "IBVERBS_1.1" "v1_1" => cq::get_cq_event,
    "ibv_get_device_guid" "@@" "IBVERBS_1.1" "v1_1" => device::get_device_guid,
    "ibv_get_device_list" "@@" "IBVERBS_1.1" "v1_1" => device::get_device_list,
    "ibv_get_device_name" "@@" "IBVERBS_1.1" "v1_1" => device::get_device_name,
    "ibv_modify_qp" "@@" "IBVERBS_1.1" "v1_1" => qp::modify_qp,
    "ibv_modify_srq" "@@" "IBVERBS_1.1" "v1_1" => qp::modify_srq,
    "ibv_open_device" "@@" "IBVERBS_1.1" "v1_1" => device::open_device,
    "ibv_query_device" "@@" "IBVERBS_1.1" "v1_1" => query::query_device,
    "ibv_query_gid" "@@" "IBVERBS_1.1" "v1_1" => query::query_gid,
    "ibv_query_pkey" "@@" "IBVERBS_1.1" "v1_1" => query::query_pkey,
    "ibv_query_port" "@@" "IBVERBS_1.1" "v1_1" => query::query_port_compat,
    "ibv_query_qp" "@@" "IBVERBS_1.1" "v1_1" => qp::query_qp,
    "ibv_query_srq" "@@" "IBVERBS_1.1" "v1_1" => qp::query_srq,
    "ibv_reg_mr" "@@" "IBVERBS_1.1" "v1_1" => pd::reg_mr,
    "ibv_resize_cq" "@@" "IBVERBS_1.1" "v1_1" => cq::resize_cq,
    // Providers registered themselves with this before rdma-core 13.
    "ibv_register_driver" "@" "IBVERBS_1.1" "v1_1" => unsupported::void,
    // The 2005 ABI (structs of another shape): refused.
    "ibv_ack_async_event" "@" "IBVERBS_1.0" "v1_0" => unsupported::void,
    "ibv_ack_cq_events" "@" "IBVERBS_1.0" "v1_0" => unsupported::void,
    "ibv_alloc_pd" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_attach_mcast" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_close_device" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_create_ah" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_create_cq" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_create_qp" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_create_srq" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_dealloc_pd" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_dereg_mr" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_destroy_ah" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_destroy_cq" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_destroy_qp" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_destroy_srq" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_detach_mcast" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_free_device_list" "@" "IBVERBS_1.0" "v1_0" => unsupported::void,
    "ibv_get_async_event" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_get_cq_event" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_get_device_guid" "@" "IBVERBS_1.0" "v1_0" => unsupported::zero,
    "ibv_get_device_list" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_get_device_name" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_modify_qp" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_modify_srq" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_open_device" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_query_device" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_query_gid" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_query_pkey" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_query_port" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_query_qp" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_query_srq" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
    "ibv_reg_mr" "@" "IBVERBS_1.0" "v1_0" => unsupported::ptr,
    "ibv_resize_cq" "@" "IBVERBS_1.0" "v1_0" => unsupported::int,
}

export! {
    // IBVERBS_1.0
    "ibv_copy_path_rec_from_kern" => unsupported::void,
    "ibv_copy_path_rec_to_kern" => unsupported::void,
    "ibv_copy_qp_attr_from_kern" => unsupported::void,
    "ibv_create_comp_channel" => cq::create_comp_channel,
    "ibv_destroy_comp_channel" => cq::destroy_comp_channel,
    "ibv_get_sysfs_path" => device::get_sysfs_path,
    "ibv_rate_to_mult" => strings::rate_to_mult,
    "ibv_read_sysfs_file" => device::read_sysfs_file,
    "mult_to_ibv_rate" => strings::mult_to_rate,
    // IBVERBS_1.1
    "ibv_copy_ah_attr_from_kern" => unsupported::void,
    "ibv_create_ah_from_wc" => pd::create_ah_from_wc,
    "ibv_dofork_range" => strings::fork_range,
    "ibv_dontfork_range" => strings::fork_range,
    "ibv_event_type_str" => strings::event_type_str,
    "ibv_fork_init" => strings::fork_init,
    "ibv_init_ah_from_wc" => pd::init_ah_from_wc,
    "ibv_node_type_str" => strings::node_type_str,
    "ibv_port_state_str" => strings::port_state_str,
    "ibv_rate_to_mbps" => strings::rate_to_mbps,
    "ibv_rereg_mr" => rereg::rereg_mr,
    "ibv_resolve_eth_l2_from_gid" => unsupported::int,
    "ibv_wc_status_str" => strings::wc_status_str,
    "mbps_to_ibv_rate" => strings::mbps_to_rate,
    // IBVERBS_1.5 ... 1.14
    "ibv_get_pkey_index" => query::get_pkey_index,
    "ibv_qp_to_qp_ex" => qp_ex::qp_to_qp_ex,
    "ibv_reg_mr_iova" => pd::reg_mr_iova,
    "ibv_reg_mr_iova2" => pd::reg_mr_iova2,
    "ibv_get_device_index" => device::get_device_index,
    "ibv_import_device" => unsupported::ptr,
    "ibv_import_mr" => unsupported::ptr,
    "ibv_import_pd" => unsupported::ptr,
    "ibv_query_ece" => unsupported::int,
    "ibv_set_ece" => unsupported::int,
    "ibv_unimport_mr" => unsupported::void,
    "ibv_unimport_pd" => unsupported::void,
    "_ibv_query_gid_ex" => query::query_gid_ex,
    "_ibv_query_gid_table" => query::query_gid_table,
    "ibv_reg_dmabuf_mr" => unsupported::ptr,
    "ibv_import_dm" => unsupported::ptr,
    "ibv_is_fork_initialized" => strings::is_fork_initialized,
    "ibv_unimport_dm" => unsupported::void,
    "ibv_query_qp_data_in_order" => unsupported::zero,
    // IBVERBS_PRIVATE_34: what providers (libmlx5, libefa...) import. No
    // provider is ever loaded, but the symbols must resolve when one is
    // (perftest's binaries need libmlx5 and libefa, linked BIND_NOW).
    "__ioctl_final_num_attrs" => unsupported::zero,
    "__verbs_log" => unsupported::void,
    "_verbs_init_and_alloc_context" => unsupported::ptr,
    "execute_ioctl" => unsupported::int,
    "ibv_cmd_advise_mr" => unsupported::int,
    "ibv_cmd_alloc_dm" => unsupported::int,
    "ibv_cmd_alloc_mw" => unsupported::int,
    "ibv_cmd_alloc_pd" => unsupported::int,
    "ibv_cmd_attach_mcast" => unsupported::int,
    "ibv_cmd_close_xrcd" => unsupported::int,
    "ibv_cmd_create_ah" => unsupported::int,
    "ibv_cmd_create_counters" => unsupported::int,
    "ibv_cmd_create_cq" => unsupported::int,
    "ibv_cmd_create_cq_ex" => unsupported::int,
    "ibv_cmd_create_flow" => unsupported::int,
    "ibv_cmd_create_flow_action_esp" => unsupported::int,
    "ibv_cmd_create_qp" => unsupported::int,
    "ibv_cmd_create_qp_ex" => unsupported::int,
    "ibv_cmd_create_qp_ex2" => unsupported::int,
    "ibv_cmd_create_rwq_ind_table" => unsupported::int,
    "ibv_cmd_create_srq" => unsupported::int,
    "ibv_cmd_create_srq_ex" => unsupported::int,
    "ibv_cmd_create_wq" => unsupported::int,
    "ibv_cmd_dealloc_mw" => unsupported::int,
    "ibv_cmd_dealloc_pd" => unsupported::int,
    "ibv_cmd_dereg_mr" => unsupported::int,
    "ibv_cmd_destroy_ah" => unsupported::int,
    "ibv_cmd_destroy_counters" => unsupported::int,
    "ibv_cmd_destroy_cq" => unsupported::int,
    "ibv_cmd_destroy_flow" => unsupported::int,
    "ibv_cmd_destroy_flow_action" => unsupported::int,
    "ibv_cmd_destroy_qp" => unsupported::int,
    "ibv_cmd_destroy_rwq_ind_table" => unsupported::int,
    "ibv_cmd_destroy_srq" => unsupported::int,
    "ibv_cmd_destroy_wq" => unsupported::int,
    "ibv_cmd_detach_mcast" => unsupported::int,
    "ibv_cmd_free_dm" => unsupported::int,
    "ibv_cmd_get_context" => unsupported::int,
    "ibv_cmd_modify_cq" => unsupported::int,
    "ibv_cmd_modify_flow_action_esp" => unsupported::int,
    "ibv_cmd_modify_qp" => unsupported::int,
    "ibv_cmd_modify_qp_ex" => unsupported::int,
    "ibv_cmd_modify_srq" => unsupported::int,
    "ibv_cmd_modify_wq" => unsupported::int,
    "ibv_cmd_open_qp" => unsupported::int,
    "ibv_cmd_open_xrcd" => unsupported::int,
    "ibv_cmd_poll_cq" => unsupported::int,
    "ibv_cmd_post_recv" => unsupported::int,
    "ibv_cmd_post_send" => unsupported::int,
    "ibv_cmd_post_srq_recv" => unsupported::int,
    "ibv_cmd_query_context" => unsupported::int,
    "ibv_cmd_query_device_any" => unsupported::int,
    "ibv_cmd_query_mr" => unsupported::int,
    "ibv_cmd_query_port" => unsupported::int,
    "ibv_cmd_query_qp" => unsupported::int,
    "ibv_cmd_query_srq" => unsupported::int,
    "ibv_cmd_read_counters" => unsupported::int,
    "ibv_cmd_reg_dm_mr" => unsupported::int,
    "ibv_cmd_reg_dmabuf_mr" => unsupported::int,
    "ibv_cmd_reg_mr" => unsupported::int,
    "ibv_cmd_req_notify_cq" => unsupported::int,
    "ibv_cmd_rereg_mr" => unsupported::int,
    "ibv_cmd_resize_cq" => unsupported::int,
    "ibv_query_gid_type" => query::query_gid_type,
    "ibv_read_ibdev_sysfs_file" => device::read_ibdev_sysfs_file,
    "verbs_init_cq" => unsupported::void,
    "verbs_open_device" => unsupported::ptr,
    "verbs_register_driver_34" => unsupported::void,
    "verbs_set_ops" => unsupported::void,
    "verbs_uninit_context" => unsupported::void,
    // uroce's own (IBVERBS_PRIVATE_34): the layout the library was built
    // with, for the layout test.
    "uroce_ibverbs_layout" => query::layout,
    // uroce's own (UROCE_PRIVATE_1), for uroce's librdmacm: a device
    // command as bytes, and the descriptor readable while CM events wait.
    "uroce_private_device_command" => private::device_command,
    "uroce_private_cm_event_fd" => private::cm_event_fd,
}
