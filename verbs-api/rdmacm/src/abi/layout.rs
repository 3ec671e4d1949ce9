//! The layouts of the C structs: [`layout()`] (what the layout test asks the
//! C compiler for), the sizes asserted at compile time, and the test
//! comparing them with the real headers.

use super::*;
use std::mem::{offset_of, size_of};

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
