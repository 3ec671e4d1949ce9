//! The state kept per CM ID: where the handshake is, the peer, the IDs
//! both sides chose, and the message being retransmitted.

use crate::config::Peer;
use uroce_wire::mad::{CommId, Guid, ServiceId, TransactionId, MAD_LEN};
use uroce_wire::Qpn;

/// Where a CM ID is (IBA vol 1 chapter 12's states, named as Linux's
/// `ib_cm_state`; idle IDs do not exist here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Active: REQ sent, waiting for a REP.
    ReqSent,
    /// Active: REQ sent and MRAed; waiting longer.
    MraReqRcvd,
    /// Passive: REQ received, waiting for the consumer.
    ReqRcvd,
    /// Passive: REQ received and MRAed, waiting for the consumer.
    MraReqSent,
    /// Passive: REP sent, waiting for an RTU.
    RepSent,
    /// Passive: REP sent and MRAed; waiting longer.
    MraRepRcvd,
    /// Active: REP received, waiting for the consumer's RTU.
    RepRcvd,
    /// Active: REP received and MRAed, waiting for the consumer.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for a DREP.
    DreqSent,
    /// Disconnected; the comm ID is held until the time-wait ends.
    Timewait,
    /// SIDR_REQ sent, waiting for a SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, waiting for the consumer.
    SidrReqRcvd,
    /// SIDR_REP sent: kept a while to answer duplicates of the SIDR_REQ
    /// with the same SIDR_REP instead of a second event.
    SidrRepSent,
}

/// A message that expects an answer, sent again on each timeout.
#[derive(Debug, Clone)]
pub(crate) struct Retransmit {
    pub(crate) mad: Box<[u8; MAD_LEN]>,
    pub(crate) timeout_ns: u64,
    pub(crate) retries_left: u8,
}

/// One CM ID.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) local_id: CommId,
    /// The peer's comm ID (or SIDR request ID); 0 until known.
    pub(crate) remote_id: CommId,
    pub(crate) peer: Peer,
    pub(crate) state: State,
    /// Whether the remote ID is in the passive (duplicate REQ/SIDR_REQ) index.
    pub(crate) indexed: bool,
    /// The TID answers carry: the REQ's for REP/RTU/MRA/REJ, the last
    /// DREQ's for DREP, the SIDR_REQ's for SIDR_REP.
    pub(crate) tid: TransactionId,
    pub(crate) service_id: ServiceId,
    pub(crate) local_qpn: Qpn,
    pub(crate) remote_qpn: Qpn,
    pub(crate) remote_ca_guid: Guid,
    /// Time to wait for an answer to a REQ, REP or DREQ.
    pub(crate) timeout_ms: u64,
    pub(crate) max_cm_retries: u8,
    /// The path's ACK timeout exponent: the time-wait and the MRA wait.
    pub(crate) av_timeout: u8,
    /// The armed deadline, if any (retransmit or time-wait).
    pub(crate) deadline_ns: Option<u64>,
    pub(crate) retransmit: Option<Retransmit>,
    /// The last RTU or MRA sent, sent again when a duplicate asks for it.
    pub(crate) last_reply: Option<Box<[u8; MAD_LEN]>>,
    /// The consumer destroyed the ID while it was (or was going) in
    /// time-wait: it is held, unseen, only so that its comm ID is not reused
    /// before the time-wait ends (Linux keeps its `timewait_info`).
    pub(crate) destroyed: bool,
}

impl Conn {
    pub(crate) fn new(local_id: CommId, peer: Peer, state: State, tid: TransactionId) -> Conn {
        Conn {
            local_id,
            remote_id: CommId(0),
            peer,
            state,
            indexed: false,
            tid,
            service_id: ServiceId(0),
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            remote_ca_guid: Guid(0),
            timeout_ms: 0,
            max_cm_retries: 0,
            av_timeout: 0,
            deadline_ns: None,
            retransmit: None,
            last_reply: None,
            destroyed: false,
        }
    }

    /// Whether the connection still holds its peer's QP (for the stale
    /// connection check): anything between REQ and time-wait.
    pub(crate) fn is_live_connection(&self) -> bool {
        !matches!(
            self.state,
            State::Timewait | State::SidrReqSent | State::SidrReqRcvd | State::SidrRepSent
        )
    }
}
