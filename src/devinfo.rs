//! `uroce devinfo`: the device's attributes, shaped like `ibv_devinfo`
//! (rdma-core's `libibverbs/examples/devinfo.c`) on a Linux rxe device, so
//! that scripts and eyes used to that output find the same lines.
//!
//! The device is the one at `UROCE_ADDR` (default 127.0.0.1; `--addr`
//! wins): the command opens it (binding UDP 4791 on that address), queries
//! it through the verbs API, prints, and closes it. It needs no peer.
//! Values the HCA does not model (LIDs, virtual lanes, multicast, ODP,
//! offloads) are printed as rxe prints them on a loopback interface.

use crate::app::{NetArgs, Opened};
use std::io::Write;
use uroce_verbs::{Context, DeviceAttr, Gid, Mtu, PortAttr};

/// The name the device goes by (`hca_id`, `-d`).
pub const DEVICE_NAME: &str = "uroce0";

/// `device_cap_flags` (`ibv_device_cap_flags`) for what the HCA does:
/// BAD_PKEY_CNTR, BAD_QKEY_CNTR, UD_AV_PORT_ENFORCE, PORT_ACTIVE_EVENT,
/// SYS_IMAGE_GUID, RC_RNR_NAK_GEN, MEM_WINDOW, MEM_MGT_EXTENSIONS,
/// MEM_WINDOW_TYPE_2B. (rxe also claims AUTO_PATH_MIG, CHANGE_PHY_PORT and
/// SRQ_RESIZE, which uroce does not implement.)
const DEVICE_CAP_FLAGS: u32 = 0x0122_1c46;

/// The names `ibv_devinfo` prints for each bit of `device_cap_flags`.
const CAP_FLAG_NAMES: [(u32, &str); 24] = [
    (1, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

/// `uroce devinfo` flags (those of `ibv_devinfo`, and the address).
#[derive(Debug, clap::Args)]
pub struct DevinfoArgs {
    /// Use this device (uroce has one per process: uroce0).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Show only this port (default: all ports; uroce has port 1).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
    /// Print only the device names.
    #[arg(short = 'l', long)]
    pub list: bool,
    /// Print every attribute of the device.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// The device's address (default: UROCE_ADDR, else 127.0.0.1).
    #[arg(long, value_name = "IP")]
    pub addr: Option<String>,
    #[command(flatten)]
    pub net: NetArgs,
}

/// Runs `uroce devinfo`; returns the exit status.
pub fn run(args: &DevinfoArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if args.list {
        let _ = write!(out, "1 HCA found:\n\t{DEVICE_NAME}\n\n");
        return 0;
    }
    if let Some(name) = &args.ib_dev {
        if name != DEVICE_NAME {
            let _ = writeln!(err, "IB device '{name}' wasn't found");
            return 1;
        }
    }
    let mut config = match args.net.config() {
        Ok(config) => config,
        Err(e) => {
            let _ = writeln!(err, "uroce devinfo: {e}");
            return 2;
        }
    };
    if let Some(text) = &args.addr {
        match uroce_net::udp::parse_addr(text) {
            Ok(ip) => config.addr = ip,
            Err(_) => {
                let _ = writeln!(err, "uroce devinfo: --addr `{text}` is not an IP address");
                return 2;
            }
        }
    }
    let opened = Opened::default();
    let device = match opened.device(config) {
        Ok(device) => device,
        Err(e) => {
            let _ = writeln!(err, "Failed to open device: {e}");
            return 1;
        }
    };
    let code = describe(&device, args, out, err);
    drop(device);
    let captured = opened.finish("devinfo", args.net.counters, err);
    if captured {
        code
    } else {
        code.max(1)
    }
}

/// Queries the open device and prints it; returns the exit status.
fn describe(
    device: &uroce_net::udp::UdpDevice,
    args: &DevinfoArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let ctx = Context::open(device.hca());
    let queried = ctx.query_device().and_then(|dev| {
        let port = ctx.query_port()?;
        let gids = (0..port.gid_tbl_len.min(256))
            .map(|i| ctx.query_gid(i as u8))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((dev, port, gids))
    });
    let (dev, port, gids) = match queried {
        Ok(q) => q,
        Err(e) => {
            let _ = writeln!(err, "Failed to query device props: {e}");
            return 2;
        }
    };
    if args.ib_port.is_some_and(|p| p > dev.phys_port_cnt) {
        let _ = writeln!(err, "Invalid port requested for device");
        return 4;
    }
    let text = render(&dev, &port, &gids, args.verbose);
    drop(ctx);
    if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
        return 1;
    }
    0
}

/// `ibv_devinfo`'s GUID format: four groups of four hex digits.
fn guid(value: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (value >> 48) & 0xffff,
        (value >> 32) & 0xffff,
        (value >> 16) & 0xffff,
        value & 0xffff
    )
}

fn mtu(m: Mtu) -> String {
    format!("{} ({})", m.bytes(), m.raw())
}

fn port_state(state: u8) -> &'static str {
    match state {
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

/// A GID line as current rdma-core prints a RoCE v2 entry: `inet_ntop`
/// text, then the type.
fn gid_line(index: usize, gid: &Gid) -> String {
    format!("\t\t\tGID[{index:>3}]:\t\t{}, RoCE v2", std::net::Ipv6Addr::from(gid.0))
}

/// The whole text `ibv_devinfo [-v]` prints for the device.
pub fn render(dev: &DeviceAttr, port: &PortAttr, gids: &[Gid], verbose: bool) -> String {
    let mut s = String::new();
    let mut line = |text: String| {
        s.push_str(&text);
        s.push('\n');
    };
    line(format!("hca_id:\t{DEVICE_NAME}"));
    line("\ttransport:\t\t\tInfiniBand (0)".into());
    if !dev.fw_ver.is_empty() {
        line(format!("\tfw_ver:\t\t\t\t{}", dev.fw_ver));
    }
    line(format!("\tnode_guid:\t\t\t{}", guid(dev.node_guid)));
    line(format!("\tsys_image_guid:\t\t\t{}", guid(dev.sys_image_guid)));
    line(format!("\tvendor_id:\t\t\t0x{:04x}", dev.vendor_id));
    line(format!("\tvendor_part_id:\t\t\t{}", dev.vendor_part_id));
    line(format!("\thw_ver:\t\t\t\t0x{:X}", dev.hw_ver));
    line(format!("\tphys_port_cnt:\t\t\t{}", dev.phys_port_cnt));
    if verbose {
        let max_res_rd_atom = u64::from(dev.max_qp) * u64::from(dev.max_qp_rd_atom);
        let fields: [(&str, String); 29] = [
            ("max_mr_size:\t\t\t", format!("0x{:x}", dev.max_mr_size)),
            ("page_size_cap:\t\t\t", format!("0x{:x}", dev.page_size_cap)),
            ("max_qp:\t\t\t\t", dev.max_qp.to_string()),
            ("max_qp_wr:\t\t\t", dev.max_qp_wr.to_string()),
            ("device_cap_flags:\t\t", format!("0x{DEVICE_CAP_FLAGS:08x}")),
            ("max_sge:\t\t\t", dev.max_sge.to_string()),
            ("max_sge_rd:\t\t\t", dev.max_sge_rd.to_string()),
            ("max_cq:\t\t\t\t", dev.max_cq.to_string()),
            ("max_cqe:\t\t\t", dev.max_cqe.to_string()),
            ("max_mr:\t\t\t\t", dev.max_mr.to_string()),
            ("max_pd:\t\t\t\t", dev.max_pd.to_string()),
            ("max_qp_rd_atom:\t\t\t", dev.max_qp_rd_atom.to_string()),
            ("max_ee_rd_atom:\t\t\t", "0".into()),
            ("max_res_rd_atom:\t\t", max_res_rd_atom.to_string()),
            ("max_qp_init_rd_atom:\t\t", dev.max_qp_init_rd_atom.to_string()),
            ("max_ee_init_rd_atom:\t\t", "0".into()),
            ("atomic_cap:\t\t\t", "ATOMIC_HCA (1)".into()),
            ("max_ee:\t\t\t\t", "0".into()),
            ("max_rdd:\t\t\t", "0".into()),
            // Windows and regions share the MPT.
            ("max_mw:\t\t\t\t", dev.max_mr.to_string()),
            ("max_raw_ipv6_qp:\t\t", "0".into()),
            ("max_raw_ethy_qp:\t\t", "0".into()),
            ("max_mcast_grp:\t\t\t", dev.max_mcast_grp.to_string()),
            ("max_mcast_qp_attach:\t\t", dev.max_mcast_qp_attach.to_string()),
            ("max_total_mcast_qp_attach:\t", dev.max_total_mcast_qp_attach.to_string()),
            ("max_ah:\t\t\t\t", dev.max_ah.to_string()),
            ("max_fmr:\t\t\t", "0".into()),
            ("max_srq:\t\t\t", dev.max_srq.to_string()),
            ("max_srq_wr:\t\t\t", dev.max_srq_wr.to_string()),
        ];
        for (name, value) in fields {
            line(format!("\t{name}{value}"));
            if name.starts_with("device_cap_flags") {
                for (bit, flag) in CAP_FLAG_NAMES {
                    if DEVICE_CAP_FLAGS & bit != 0 {
                        line(format!("\t\t\t\t\t{flag}"));
                    }
                }
            }
        }
        line(format!("\tmax_srq_sge:\t\t\t{}", dev.max_srq_sge));
        line(format!("\tmax_pkeys:\t\t\t{}", dev.max_pkeys));
        line(format!("\tlocal_ca_ack_delay:\t\t{}", dev.local_ca_ack_delay));
        line("\tgeneral_odp_caps:".into());
        for transport in ["rc", "uc", "ud", "xrc"] {
            line(format!("\t{transport}_odp_caps:"));
            line("\t\t\t\t\tNO SUPPORT".into());
        }
        line("\tcompletion_timestamp_mask not supported".into());
        line("\tcore clock not supported".into());
        line(format!("\tdevice_cap_flags_ex:\t\t0x{DEVICE_CAP_FLAGS:X}"));
        line("\ttso_caps:".into());
        line("\tmax_tso:\t\t\t0".into());
        line("\trss_caps:".into());
        line("\t\tmax_rwq_indirection_tables:\t\t\t0".into());
        line("\t\tmax_rwq_indirection_table_size:\t\t\t0".into());
        line("\t\trx_hash_function:\t\t\t\t0x0".into());
        line("\t\trx_hash_fields_mask:\t\t\t\t0x0".into());
        line("\tmax_wq_type_rq:\t\t\t0".into());
        line("\tpacket_pacing_caps:".into());
        line("\t\tqp_rate_limit_min:\t0kbps".into());
        line("\t\tqp_rate_limit_max:\t0kbps".into());
        line("\ttag matching not supported".into());
    }
    line("\t\tport:\t1".into());
    line(format!("\t\t\tstate:\t\t\t{} ({})", port_state(port.state), port.state));
    line(format!("\t\t\tmax_mtu:\t\t{}", mtu(port.max_mtu)));
    line(format!("\t\t\tactive_mtu:\t\t{}", mtu(port.active_mtu)));
    line("\t\t\tsm_lid:\t\t\t0".into());
    line("\t\t\tport_lid:\t\t0".into());
    line("\t\t\tport_lmc:\t\t0x00".into());
    let link = if port.link_layer == 2 { "Ethernet" } else { "InfiniBand" };
    line(format!("\t\t\tlink_layer:\t\t{link}"));
    if verbose {
        line(format!("\t\t\tmax_msg_sz:\t\t0x{:x}", port.max_msg_sz));
        // IB_PORT_CM_SUP, as rxe.
        line("\t\t\tport_cap_flags:\t\t0x00010000".into());
        line("\t\t\tport_cap_flags2:\t0x0000".into());
        line("\t\t\tmax_vl_num:\t\t1 (1)".into());
        line("\t\t\tbad_pkey_cntr:\t\t0x0".into());
        line("\t\t\tqkey_viol_cntr:\t\t0x0".into());
        line("\t\t\tsm_sl:\t\t\t0".into());
        line(format!("\t\t\tpkey_tbl_len:\t\t{}", port.pkey_tbl_len));
        line(format!("\t\t\tgid_tbl_len:\t\t{}", port.gid_tbl_len));
        line("\t\t\tsubnet_timeout:\t\t0".into());
        line("\t\t\tinit_type_reply:\t0".into());
        line("\t\t\tactive_width:\t\t1X (1)".into());
        line("\t\t\tactive_speed:\t\t2.5 Gbps (1)".into());
        line("\t\t\tphys_state:\t\tLINK_UP (5)".into());
        for (i, gid) in gids.iter().enumerate() {
            // ibv_devinfo skips entries whose interface ID is zero.
            if gid.0[8..].iter().any(|&b| b != 0) {
                line(gid_line(i, gid));
            }
        }
    }
    s.push('\n');
    s
}
