//! What the engine tells its consumer (the rdma_cm layer): one event per
//! step of a connection, each naming the CM ID it concerns.

use crate::config::Peer;
use core::fmt;
use uroce_wire::mad::{rej, rep, req, sidr, CommId};

/// A CM ID: one end of a connection or of a SIDR exchange, named by its
/// local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmId(pub CommId);

impl fmt::Display for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Which handshake message ran out of retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimedOut {
    /// The REQ: no REP (nor REJ) came (rdma_cm: `RDMA_CM_EVENT_UNREACHABLE`).
    Req,
    /// The REP: no RTU came and the consumer reported no traffic.
    Rep,
}

/// How a connection came to be disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectCause {
    /// The peer sent a DREQ (answered with a DREP).
    DreqReceived,
    /// The peer answered this side's DREQ.
    DrepReceived,
    /// This side's DREQ ran out of retries.
    DreqTimedOut,
}

/// An event for the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A REQ for a service this engine listens on (rdma_cm:
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`). Answer with [`crate::Cm::accept`],
    /// [`crate::Cm::reject`] or [`crate::Cm::mra`]. The REQ's fields are the
    /// sender's: its responder resources are this side's initiator depth.
    ConnectRequest {
        /// The new CM ID.
        id: CmId,
        /// Where the REQ came from.
        peer: Peer,
        /// The REQ, private data included.
        req: Box<req::Repr>,
    },
    /// The REP answering this side's REQ: move the QP to RTR and RTS, then
    /// call [`crate::Cm::ready_to_use`] (or [`crate::Cm::reject`]).
    ConnectReply {
        /// The CM ID.
        id: CmId,
        /// The REP, private data included.
        rep: Box<rep::Repr>,
    },
    /// The connection is established (RTU received, traffic reported, or
    /// this side sent the RTU).
    Established {
        /// The CM ID.
        id: CmId,
    },
    /// The peer sent a REJ (rdma_cm: `RDMA_CM_EVENT_REJECTED`).
    Rejected {
        /// The CM ID.
        id: CmId,
        /// The REJ: reason, ARI and private data.
        rej: Box<rej::Repr>,
    },
    /// A handshake message ran out of retries (rdma_cm:
    /// `RDMA_CM_EVENT_UNREACHABLE`); the CM ID is gone.
    Unreachable {
        /// The CM ID.
        id: CmId,
        /// Which message timed out.
        stage: TimedOut,
    },
    /// The connection is disconnected (rdma_cm: `RDMA_CM_EVENT_DISCONNECTED`)
    /// and in time-wait: move the QP to the error state.
    Disconnected {
        /// The CM ID.
        id: CmId,
        /// Why.
        cause: DisconnectCause,
        /// The DREQ's or DREP's private data (empty after a timeout).
        private_data: Vec<u8>,
    },
    /// Time-wait is over and the comm ID is free again (rdma_cm:
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`).
    TimewaitExit {
        /// The CM ID.
        id: CmId,
    },
    /// A SIDR_REQ for a service this engine listens on: answer with
    /// [`crate::Cm::sidr_reply`].
    SidrRequest {
        /// The new CM ID.
        id: CmId,
        /// Where it came from.
        peer: Peer,
        /// The request, private data included.
        req: Box<sidr::ReqRepr>,
    },
    /// The answer to this side's SIDR_REQ; the CM ID is gone.
    SidrReply {
        /// The CM ID.
        id: CmId,
        /// The answer: status, QPN, Q_Key, private data.
        rep: Box<sidr::RepRepr>,
    },
    /// This side's SIDR_REQ ran out of retries; the CM ID is gone.
    SidrUnreachable {
        /// The CM ID.
        id: CmId,
    },
}

impl Event {
    /// The CM ID the event concerns.
    pub fn id(&self) -> CmId {
        match self {
            Event::ConnectRequest { id, .. }
            | Event::ConnectReply { id, .. }
            | Event::Established { id }
            | Event::Rejected { id, .. }
            | Event::Unreachable { id, .. }
            | Event::Disconnected { id, .. }
            | Event::TimewaitExit { id }
            | Event::SidrRequest { id, .. }
            | Event::SidrReply { id, .. }
            | Event::SidrUnreachable { id } => *id,
        }
    }
}
