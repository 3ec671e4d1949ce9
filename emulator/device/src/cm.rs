//! The Communication Manager as the device offers it: the parameters
//! of its commands and the events of the CM that runs on every port's QP1
//! (the GSI QP), the way Linux keeps `ib_cm` in the kernel behind the
//! device. A driver (the future librdmacm) listens, connects, accepts and
//! disconnects through [`crate::command::Command`]s (`Cm*`) and takes what
//! happened with `CmPollEvent`; the MADs themselves never reach it.
//!
//! Everything here is plain data. The CM messages an event carries
//! (REQ, REP, REJ, SIDR_REQ, SIDR_REP) are their 232 bytes of class data
//! exactly as IBA vol 1 chapter 12 lays them out (the MAD without its
//! 24-byte common header); a driver reads them with
//! `uroce_wire::mad::{req, rep, rej, sidr}`'s `Packet` and `Repr`.
//! Section 9 of `docs/device-interface.md` is the prose.

use crate::command::Gid;
use crate::types::Qpn;

/// A CM ID: the local communication ID the device gave a connection or a
/// SIDR exchange (what its MADs carry as the local comm ID).
pub type CmId = u32;

/// The length of a CM message in an event: a MAD's class data.
pub const CM_MESSAGE_LEN: usize = 232;

/// `CmMra`'s flag (bit 7 of its service timeout) that holds the MRA back
/// until a duplicate REQ or REP comes, as ib_cm's `IB_CM_MRA_FLAG_DELAY`.
pub const CM_MRA_DELAY: u8 = 0x80;

/// What a connect's REQ carries (`ib_cm_req_param` with its primary path):
/// `ConnectParams` of the CM engine, with the local GID named by its index
/// in the device's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CmConnectParams {
    /// The local GID (the path's source and the REQ's), by table index.
    pub sgid_index: u8,
    /// The peer's GID: where the REQ goes, the path's destination.
    pub remote_gid: Gid,
    /// The P_Key index MADs go out on (0: the device has one partition).
    pub pkey_index: u16,
    /// The partition key put in the REQ (rdma_cm: 0xffff).
    pub pkey: u16,
    /// The service asked for (rdma_cm: from the port space and IP port).
    pub service_id: u64,
    /// The local QP.
    pub qpn: Qpn,
    /// The REQ's starting PSN (24 bits): the PSN the local QP receives
    /// from (RTR `rq_psn`), which the passive side sends from, as Linux
    /// means it. The local QP sends from the REP's starting PSN.
    pub starting_psn: u32,
    /// 0 RC, 1 UC.
    pub transport: u8,
    /// READ/atomic requests this side accepts at once.
    pub responder_resources: u8,
    /// READ/atomic requests this side will have outstanding.
    pub initiator_depth: u8,
    /// Path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Packet lifetime exponent of the path (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
    /// How long this side takes to answer (exponent; rdma_cm: 20). The
    /// device puts its own configured value here (`HcaConfig`'s
    /// `cm_response_timeout`, `UROCE_CM_RESPONSE_TIMEOUT`), as the kernel
    /// puts rdma_cm's constant: what the command carries is not used.
    pub local_cm_response_timeout: u8,
    /// How long the peer is expected to take (exponent; rdma_cm: 20). The
    /// device's configured value, as `local_cm_response_timeout`.
    pub remote_cm_response_timeout: u8,
    /// REQ/REP/DREQ retransmissions before giving up (4 bits; rdma_cm:
    /// 15). The device's configured value (`cm_max_retries`,
    /// `UROCE_CM_RETRIES`): what the command carries is not used.
    pub max_cm_retries: u8,
    /// The path's flow label.
    pub flow_label: u32,
    /// The path's traffic class.
    pub traffic_class: u8,
    /// The path's hop limit (rdma_cm on RoCE: 64).
    pub hop_limit: u8,
    /// The path's service level.
    pub sl: u8,
    /// The local QP uses an SRQ.
    pub srq: bool,
}

impl CmConnectParams {
    /// An RC connect with the values Linux's rdma_cm uses on RoCE (P_Key
    /// 0xffff, one READ each way, MTU 1024, retries 7 and 7, packet
    /// lifetime 18, CM response timeouts 20, 15 CM retries, hop limit 64).
    pub const fn rdma_cm(
        sgid_index: u8,
        remote_gid: Gid,
        service_id: u64,
        qpn: Qpn,
        starting_psn: u32,
    ) -> CmConnectParams {
        CmConnectParams {
            sgid_index,
            remote_gid,
            pkey_index: 0,
            pkey: 0xffff,
            service_id,
            qpn,
            starting_psn,
            transport: 0,
            responder_resources: 1,
            initiator_depth: 1,
            path_mtu: 3,
            retry_count: 7,
            rnr_retry_count: 7,
            packet_life_time: 18,
            local_cm_response_timeout: 20,
            remote_cm_response_timeout: 20,
            max_cm_retries: 15,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            srq: false,
        }
    }
}

/// What an accept's REP carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CmAcceptParams {
    /// The local QP.
    pub qpn: Qpn,
    /// The REP's starting PSN (24 bits): the PSN the local QP receives
    /// from (RTR `rq_psn`), which the active side sends from, as Linux
    /// means it. The local QP sends from the REQ's starting PSN.
    pub starting_psn: u32,
    /// READ/atomic requests this side accepts at once.
    pub responder_resources: u8,
    /// READ/atomic requests this side will have outstanding.
    pub initiator_depth: u8,
    /// RNR retry count the peer should use (3 bits).
    pub rnr_retry_count: u8,
    /// The local QP uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
}

impl CmAcceptParams {
    /// An accept with rdma_cm's usual values: one READ each way, RNR
    /// retry 7.
    pub const fn new(qpn: Qpn, starting_psn: u32) -> CmAcceptParams {
        CmAcceptParams {
            qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            srq: false,
            flow_control: false,
        }
    }
}

/// What a SIDR_REQ carries, and how long to wait for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CmSidrParams {
    /// The peer's GID.
    pub remote_gid: Gid,
    /// The P_Key index to send on (0).
    pub pkey_index: u16,
    /// The partition key put in the request (rdma_cm: 0xffff).
    pub pkey: u16,
    /// The service asked about.
    pub service_id: u64,
    /// Time to wait before a retry (rdma_cm: 4096 ms). The device waits
    /// `2^(cm_response_timeout − 8)` ms of its configuration instead
    /// (`UROCE_CM_RESPONSE_TIMEOUT`; 20 gives rdma_cm's 4096 ms): what the
    /// command carries is not used.
    pub timeout_ms: u64,
    /// Retries before giving up (rdma_cm: 15). The device's configured
    /// `cm_max_retries` (`UROCE_CM_RETRIES`) instead.
    pub max_retries: u8,
}

/// What a SIDR_REP answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CmSidrReplyParams {
    /// The status: 0 valid, 1 service not supported, 2 rejected, 3 no QP,
    /// 4 redirect, 5 unsupported class version.
    pub status: u8,
    /// The service's UD QP.
    pub qpn: Qpn,
    /// The Q_Key datagrams to it must carry.
    pub qkey: u32,
}

/// Which handshake message ran out of retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CmTimedOut {
    /// The REQ: no REP nor REJ came.
    Req,
    /// The REP: no RTU came.
    Rep,
}

/// How a connection came to be disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CmDisconnectCause {
    /// The peer sent a DREQ (the device answered it with a DREP).
    DreqReceived,
    /// The peer answered this side's DREQ.
    DrepReceived,
    /// This side's DREQ ran out of retries.
    DreqTimedOut,
}

/// A CM event: what happened to one CM ID.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CmEvent {
    /// The CM ID.
    pub id: CmId,
    /// What happened.
    pub kind: CmEventKind,
}

/// What happened to a CM ID (each the rdma_cm event it becomes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CmEventKind {
    /// A REQ for a listened service (`CONNECT_REQUEST`); `id` is new.
    /// Answer with `CmAccept`, `CmReject` or `CmMra`.
    ConnectRequest {
        /// The peer's GID (from the packet's source address).
        peer: Gid,
        /// The P_Key index it came in on.
        pkey_index: u16,
        /// The REQ ([`CM_MESSAGE_LEN`] bytes), private data included.
        req: Vec<u8>,
    },
    /// The REP answering this side's REQ: move the QP to RTR and RTS,
    /// then `CmReadyToUse` (or `CmReject`).
    ConnectReply {
        /// The REP ([`CM_MESSAGE_LEN`] bytes), private data included.
        rep: Vec<u8>,
    },
    /// The connection is established (`ESTABLISHED`).
    Established,
    /// The peer rejected (`REJECTED`); the CM ID is gone.
    Rejected {
        /// The REJ's reason (8: invalid service ID, nobody listens).
        reason: u16,
        /// The REJ ([`CM_MESSAGE_LEN`] bytes): ARI, private data.
        rej: Vec<u8>,
    },
    /// A handshake message ran out of retries (`UNREACHABLE`); the CM ID
    /// is gone.
    Unreachable {
        /// Which.
        stage: CmTimedOut,
    },
    /// Disconnected (`DISCONNECTED`), now in time-wait: move the QP to ERR.
    Disconnected {
        /// Why.
        cause: CmDisconnectCause,
        /// The DREQ's or DREP's private data (empty after a timeout).
        private_data: Vec<u8>,
    },
    /// Time-wait is over; the CM ID is gone (`TIMEWAIT_EXIT`).
    TimewaitExit,
    /// A SIDR_REQ for a listened service; `id` is new. Answer with
    /// `CmSidrReply`.
    SidrRequest {
        /// The peer's GID.
        peer: Gid,
        /// The P_Key index it came in on.
        pkey_index: u16,
        /// The SIDR_REQ ([`CM_MESSAGE_LEN`] bytes), private data included.
        req: Vec<u8>,
    },
    /// The answer to this side's SIDR_REQ; the CM ID is gone.
    SidrReply {
        /// The SIDR_REP ([`CM_MESSAGE_LEN`] bytes): status, QPN, Q_Key,
        /// private data.
        rep: Vec<u8>,
    },
    /// This side's SIDR_REQ ran out of retries; the CM ID is gone.
    SidrUnreachable,
}
