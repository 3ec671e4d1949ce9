//! The control path: commands the driver (verbs-api) sends the HCA, as a
//! driver talks to firmware. Data-path work (WQEs, CQEs) goes through
//! rings and doorbells instead.

use crate::cm::{CmAcceptParams, CmConnectParams, CmEvent, CmId, CmSidrParams, CmSidrReplyParams};
use crate::ring::RingDesc;
use crate::types::{Access, AttrMask, Mtu, QpState, QpType, Qpn};
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

/// A control-path command.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Command {
    /// Device attributes.
    QueryDevice,
    /// Port attributes (port 1).
    QueryPort,
    /// A GID table entry.
    QueryGid {
        /// The index.
        index: u8,
    },
    /// New protection domain.
    AllocPd,
    /// Free a protection domain (refused while objects use it).
    DeallocPd {
        /// The PD.
        pd: u32,
    },
    /// Register host memory.
    RegMr {
        /// Protection domain.
        pd: u32,
        /// Host address.
        addr: u64,
        /// Bytes.
        length: u64,
        /// Virtual address keys see.
        iova: u64,
        /// Rights.
        access: Access,
    },
    /// Change a region in place (`ibv_rereg_mr`): its translation, its
    /// protection domain, its rights, any of them (`None`: kept, and at
    /// least one is given). Its keys stay the same: the reply carries them.
    ReregMr {
        /// The region's key.
        lkey: u32,
        /// The new protection domain (`IBV_REREG_MR_CHANGE_PD`).
        pd: Option<u32>,
        /// The new memory (`IBV_REREG_MR_CHANGE_TRANSLATION`).
        translation: Option<MrTranslation>,
        /// The new rights (`IBV_REREG_MR_CHANGE_ACCESS`).
        access: Option<Access>,
    },
    /// Deregister.
    DeregMr {
        /// The region's key.
        lkey: u32,
    },
    /// New memory window.
    AllocMw {
        /// Protection domain.
        pd: u32,
        /// 1 or 2.
        mw_type: u8,
    },
    /// Free a memory window.
    DeallocMw {
        /// Its R_Key.
        rkey: u32,
    },
    /// New completion queue on a ring of CQE-sized entries.
    CreateCq {
        /// The ring.
        ring: RingDesc,
    },
    /// Move a CQ to a new ring of CQE-sized entries (`ibv_resize_cq`): the
    /// CQEs the driver has not consumed (from the consumer index in the old
    /// ring's record) are copied, in order, to the new ring's first entries;
    /// the new ring's producer index is their count and its consumer index
    /// 0. Refused when they do not fit. The arm state is kept. On success
    /// the old ring is no longer used and the driver may free it.
    ResizeCq {
        /// The CQ.
        cq: u32,
        /// The new ring.
        ring: RingDesc,
    },
    /// Free a CQ (refused while QPs use it).
    DestroyCq {
        /// The CQ.
        cq: u32,
    },
    /// New queue pair.
    CreateQp(QpInit),
    /// Change a QP's attributes and state.
    ModifyQp {
        /// The QP.
        qpn: Qpn,
        /// Values.
        attr: QpAttr,
        /// Which values.
        mask: AttrMask,
    },
    /// Read a QP's attributes.
    QueryQp {
        /// The QP.
        qpn: Qpn,
    },
    /// Free a QP.
    DestroyQp {
        /// The QP.
        qpn: Qpn,
    },
    /// New shared receive queue.
    CreateSrq {
        /// Protection domain.
        pd: u32,
        /// The ring.
        ring: RingDesc,
        /// SGEs per WR.
        max_sge: u32,
        /// Raise SRQ_LIMIT_REACHED when fewer WQEs remain (0 = off).
        limit: u32,
    },
    /// Arm an SRQ's limit.
    ModifySrq {
        /// The SRQ.
        srq: u32,
        /// The new limit.
        limit: u32,
    },
    /// Free an SRQ (refused while QPs use it).
    DestroySrq {
        /// The SRQ.
        srq: u32,
    },
    /// New address handle.
    CreateAh {
        /// Protection domain.
        pd: u32,
        /// Where it points.
        attr: AhAttr,
    },
    /// Free an address handle.
    DestroyAh {
        /// The AH.
        ah: u32,
    },
    /// Attach a UD QP to a multicast group (`ibv_attach_mcast`): UD SENDs
    /// to QPN 0xFFFFFF and the group's address reach it from now on.
    /// Attaching again is harmless (rxe). Refused (`Invalid`) for a QP not
    /// UD or a GID not multicast; `NoResources` past the group or
    /// attachment limits of [`DeviceAttr`].
    AttachMcast {
        /// The QP.
        qpn: Qpn,
        /// The group's GID (`::ffff:224.0.0.0/100` or `ff00::/8`).
        gid: Gid,
        /// The group's LID (InfiniBand; ignored on RoCE).
        lid: u16,
    },
    /// Detach a QP from a multicast group (`ibv_detach_mcast`); `Invalid`
    /// when it is not attached (rxe's -EINVAL). Destroying a QP detaches
    /// it from every group.
    DetachMcast {
        /// The QP.
        qpn: Qpn,
        /// The group's GID.
        gid: Gid,
        /// The group's LID (ignored).
        lid: u16,
    },
    /// The CM (section 9 of the manual): take REQs and SIDR_REQs for a
    /// service ID (exactly that one; rdma_cm's IP service IDs included).
    CmListen {
        /// The service ID.
        service_id: u64,
    },
    /// Stop taking REQs for a service ID (CM IDs already made stay).
    CmUnlisten {
        /// The service ID.
        service_id: u64,
    },
    /// Send a REQ; the reply names the new CM ID.
    CmConnect {
        /// The REQ's fields and path.
        params: CmConnectParams,
        /// At most 92 bytes (rdma_cm puts its 36-byte header first).
        private_data: Vec<u8>,
    },
    /// Answer a connect request with a REP.
    CmAccept {
        /// The CM ID of the `ConnectRequest` event.
        id: CmId,
        /// The REP's fields.
        params: CmAcceptParams,
        /// At most 196 bytes.
        private_data: Vec<u8>,
    },
    /// Refuse a connect request or a reply with a REJ; the CM ID is gone.
    CmReject {
        /// The CM ID.
        id: CmId,
        /// The REJ's reason: 28 (consumer defined) for `rdma_reject`, 35
        /// (vendor option not supported) for `rdma_reject_ece`.
        reason: u16,
        /// At most 148 bytes.
        private_data: Vec<u8>,
    },
    /// After a `ConnectReply` (the QP in RTS): send the RTU; established.
    CmReadyToUse {
        /// The CM ID.
        id: CmId,
        /// At most 224 bytes.
        private_data: Vec<u8>,
    },
    /// Ask the peer for more time (an MRA) for a REQ or REP received.
    CmMra {
        /// The CM ID.
        id: CmId,
        /// The time asked for (IBA exponent, 5 bits).
        service_timeout: u8,
    },
    /// The passive side saw traffic on the QP before the RTU (a lost
    /// RTU): established.
    CmEstablished {
        /// The CM ID.
        id: CmId,
    },
    /// Send a DREQ for an established connection.
    CmDisconnect {
        /// The CM ID.
        id: CmId,
        /// At most 220 bytes.
        private_data: Vec<u8>,
    },
    /// Forget a CM ID, sending what `ib_destroy_cm_id` sends in its state
    /// (a REJ, a DREQ...).
    CmDestroy {
        /// The CM ID.
        id: CmId,
    },
    /// Send a SIDR_REQ; the reply names the new CM ID.
    CmSidrRequest {
        /// The request.
        params: CmSidrParams,
        /// At most 216 bytes.
        private_data: Vec<u8>,
    },
    /// Answer a SIDR_REQ.
    CmSidrReply {
        /// The CM ID of the `SidrRequest` event.
        id: CmId,
        /// The answer.
        params: CmSidrReplyParams,
        /// At most 136 bytes.
        private_data: Vec<u8>,
    },
    /// Take the oldest CM event (`Reply::CmEvent(None)` when none waits).
    CmPollEvent,
}

/// A command's result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// Done, nothing to return.
    Done,
    /// Device attributes.
    Device(DeviceAttr),
    /// Port attributes.
    Port(PortAttr),
    /// A GID.
    Gid(Gid),
    /// A new PD, CQ, SRQ or AH index.
    Index(u32),
    /// A new MR: its L_Key and R_Key.
    Mr {
        /// Local key.
        lkey: u32,
        /// Remote key.
        rkey: u32,
    },
    /// A new MW's R_Key.
    Mw {
        /// Remote key.
        rkey: u32,
    },
    /// A new QP.
    Qp {
        /// Its number.
        qpn: Qpn,
    },
    /// A QP's attributes.
    QpAttr(QpAttr),
    /// A new CM ID (`CmConnect`, `CmSidrRequest`).
    CmId {
        /// The CM ID.
        id: CmId,
    },
    /// The oldest CM event, if any (`CmPollEvent`).
    CmEvent(Option<CmEvent>),
}

/// Why a command failed, with the errno libibverbs would report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdError {
    /// EINVAL: a bad argument, mask or transition; the text says which.
    Invalid(&'static str),
    /// ENOMEM: a table is full.
    NoResources(&'static str),
    /// EBUSY: the object is in use.
    Busy(&'static str),
    /// ENOENT: no such object.
    NotFound(&'static str),
}

impl CmdError {
    /// The errno libibverbs returns for this error.
    pub const fn errno(self) -> i32 {
        match self {
            CmdError::Invalid(_) => 22,
            CmdError::NoResources(_) => 12,
            CmdError::Busy(_) => 16,
            CmdError::NotFound(_) => 2,
        }
    }
}

impl core::fmt::Display for CmdError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmdError::Invalid(why) => write!(f, "invalid argument: {why}"),
            CmdError::NoResources(why) => write!(f, "out of resources: {why}"),
            CmdError::Busy(why) => write!(f, "busy: {why}"),
            CmdError::NotFound(why) => write!(f, "not found: {why}"),
        }
    }
}

impl std::error::Error for CmdError {}

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
