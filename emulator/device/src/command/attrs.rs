//! What the control path's commands carry: GIDs, address vectors, QP
//! sizes and attributes, device and port attributes, a region's
//! translation (libibverbs' `ibv_*_attr` structures, as the HCA takes
//! them).

use crate::ring::RingDesc;
use crate::types::{Access, Mtu, QpState, QpType};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit global identifier: for RoCEv2, an IPv6 address or an
/// IPv4-mapped one (`::ffff:a.b.c.d`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 is mapped).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address the GID stands for.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// Whether the GID names a multicast group (`rdma_is_multicast_addr`):
    /// an IPv6 multicast address (`ff00::/8`), or an IPv4-mapped one in
    /// `224.0.0.0/4`.
    pub fn is_multicast(self) -> bool {
        match self.to_ip() {
            IpAddr::V4(v4) => v4.is_multicast(),
            IpAddr::V6(v6) => v6.is_multicast(),
        }
    }

    /// The link-local GID rxe derives from a MAC address (EUI-64).
    pub fn link_local_from_mac(mac: [u8; 6]) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8] = mac[0] ^ 0x02;
        g[9] = mac[1];
        g[10] = mac[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = mac[3];
        g[14] = mac[4];
        g[15] = mac[5];
        Gid(g)
    }
}

impl core::fmt::Display for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(v4: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(v4))
    }
}

/// Address vector: where packets of a QP or an address handle go
/// (`ibv_ah_attr` with its GRH, which RoCE always has).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct AhAttr {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the source GID in the local GID table.
    pub sgid_index: u8,
    /// IPv6 flow label (also picks the UDP source port when non-zero).
    pub flow_label: u32,
    /// Hop limit / TTL requested (rxe uses the route's, 64).
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Port (1).
    pub port_num: u8,
}

/// Queue sizes of a QP (`ibv_qp_cap`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct QpCap {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// Everything needed to create a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpInit {
    /// Protection domain.
    pub pd: u32,
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: u32,
    /// CQ for receive completions.
    pub recv_cq: u32,
    /// Shared receive queue, if receives come from one.
    pub srq: Option<u32>,
    /// The send queue ring.
    pub sq: RingDesc,
    /// The receive queue ring (none with an SRQ).
    pub rq: Option<RingDesc>,
    /// Sizes.
    pub cap: QpCap,
    /// Every send WR produces a completion.
    pub sq_sig_all: bool,
}

/// QP attributes (`ibv_qp_attr`); a modify uses the fields its mask names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: Option<QpState>,
    /// The state the caller believes the QP is in.
    pub cur_qp_state: Option<QpState>,
    /// Path MTU.
    pub path_mtu: Option<Mtu>,
    /// Q_Key (UD).
    pub qkey: u32,
    /// First expected PSN as responder.
    pub rq_psn: u32,
    /// First PSN as requester.
    pub sq_psn: u32,
    /// Remote QP (RC, UC).
    pub dest_qp_num: u32,
    /// Remote access the QP allows.
    pub qp_access_flags: Access,
    /// Queue sizes (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Raise an event when the SQ drains.
    pub en_sqd_async_notify: bool,
    /// Outstanding READ/atomic requests as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this QP sends.
    pub min_rnr_timer: u8,
    /// Port (1).
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry: u8,
}

/// Device attributes (`ibv_device_attr`), shaped like rxe's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// SGEs per READ.
    pub max_sge_rd: u32,
    /// CQs.
    pub max_cq: u32,
    /// CQEs per CQ.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// Responder READ/atomic resources per QP.
    pub max_qp_rd_atom: u32,
    /// Requester READ/atomic per QP.
    pub max_qp_init_rd_atom: u32,
    /// Address handles.
    pub max_ah: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Multicast groups (`max_mcast_grp`).
    pub max_mcast_grp: u32,
    /// QPs attached to one multicast group (`max_mcast_qp_attach`).
    pub max_mcast_qp_attach: u32,
    /// Attachments over all groups (`max_total_mcast_qp_attach`).
    pub max_total_mcast_qp_attach: u32,
    /// Inline data bytes per send WR (not in `ibv_device_attr`: libibverbs
    /// reports it per QP; drivers size send rings by it).
    pub max_inline_data: u32,
    /// P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortAttr {
    /// Port state: 4 = ACTIVE.
    pub state: u8,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Current MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Link layer: 2 = Ethernet.
    pub link_layer: u8,
}

/// The memory a region covers: what `RegMr` takes and `ReregMr` may
/// change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MrTranslation {
    /// Host address.
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// Virtual address keys see.
    pub iova: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_map_ip_addresses() {
        let v4: IpAddr = "169.254.0.1".parse().unwrap();
        let gid = Gid::from_ip(v4);
        assert_eq!(gid.to_string(), "::ffff:169.254.0.1");
        assert_eq!(gid.to_ip(), v4);
        let v6: IpAddr = "fe80::5054:ff:fe00:1".parse().unwrap();
        assert_eq!(Gid::from_ip(v6).to_ip(), v6);
        // rxe's link-local GID for MAC 52:54:00:00:00:01 (../shared/golden).
        let ll = Gid::link_local_from_mac([0x52, 0x54, 0, 0, 0, 1]);
        assert_eq!(ll.to_ip(), v6);
        assert!(!ll.is_multicast() && !gid.is_multicast());
        let group = |ip: &str| Gid::from_ip(ip.parse().unwrap()).is_multicast();
        assert!(group("230.1.2.3") && group("224.0.0.1") && group("239.255.255.255"));
        assert!(!group("240.0.0.1") && !group("223.255.255.255"));
        assert!(group("ff02::1") && group("ff0e::1:2") && !group("fe80::1"));
    }
}
