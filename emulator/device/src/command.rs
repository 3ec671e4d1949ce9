//! The control path: commands the driver (verbs-api) sends the HCA, as a
//! driver talks to firmware. Data-path work (WQEs, CQEs) goes through
//! rings and doorbells instead.

use crate::cm::{CmAcceptParams, CmConnectParams, CmEvent, CmId, CmSidrParams, CmSidrReplyParams};
use crate::ring::RingDesc;
use crate::types::{Access, AttrMask, Qpn};

mod attrs;
pub use attrs::{AhAttr, DeviceAttr, Gid, MrTranslation, PortAttr, QpAttr, QpCap, QpInit};

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
