//! REJ both ways (the consumer's reject, the peer's), and destroying a CM
//! ID with whatever message its state owes the peer.

use crate::config::Peer;
use crate::conn::State;
use crate::engine::{Cm, Outcome, RemoteKind};
use crate::error::CmError;
use crate::event::{CmId, Event};
use crate::mad::{build, dreq, rej};
use crate::tid::transaction_id;
use uroce_wire::mad::rej::{self as rej_msg, RejectReason};
use uroce_wire::mad::sidr::SidrStatus;
use uroce_wire::mad::{CommId, MessageRef};
use uroce_wire::{Qkey, Qpn};

impl Cm {
    /// Refuses a [`Event::ConnectRequest`] (or, on the active side, a
    /// [`Event::ConnectReply`]) with a REJ, reason 28 (consumer defined),
    /// at most 148 bytes of private data. The CM ID is gone.
    pub fn reject(&mut self, now_ns: u64, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        self.reject_with(now_ns, id, RejectReason::ConsumerDefined, private_data)
    }

    /// [`Cm::reject`] with another reason, as `ib_send_cm_rej` takes one
    /// (librdmacm's `rdma_reject_ece`: 35, vendor option not supported).
    pub fn reject_with(
        &mut self,
        _now_ns: u64,
        id: CmId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > rej_msg::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let conn = self.conn_of(id)?;
        // As Linux's cm_format_rej: no local ID before the REP or MRA.
        let (local, rejected) = match conn.state {
            State::ReqRcvd => (CommId(0), MessageRef::REQ),
            State::MraReqSent => (conn.local_id, MessageRef::REQ),
            State::RepRcvd | State::MraRepSent => (conn.local_id, MessageRef::REP),
            _ => return Err(CmError::WrongState),
        };
        let msg = rej(local, conn.remote_id, rejected, reason, &[], private_data);
        let (mad, peer) = (build(conn.tid, &msg), conn.peer);
        self.free(id.0);
        self.send_once(peer, mad);
        Ok(())
    }

    /// Forgets a CM ID, first telling the peer what Linux's
    /// `ib_destroy_cm_id` tells it: a REJ timeout for an unanswered REQ, a
    /// REJ for a handshake in progress, one DREQ for an established
    /// connection, a SIDR_REP "rejected" for a pending SIDR_REQ. A
    /// connection that was established goes through time-wait unseen (no
    /// event), its comm ID held until then, as Linux's `cm_destroy_id`.
    pub fn destroy(&mut self, now_ns: u64, id: CmId) -> Result<(), CmError> {
        let conn = self.conn_of(id)?;
        let (local, remote, peer, tid) = (conn.local_id, conn.remote_id, conn.peer, conn.tid);
        let mad = match conn.state {
            State::ReqSent | State::MraReqRcvd => {
                let guid = self.config.ca_guid.0.to_be_bytes();
                let msg = rej(local, remote, MessageRef::OTHER, RejectReason::Timeout, &guid, &[]);
                Some(build(tid, &msg))
            }
            State::ReqRcvd => Some(build(
                tid,
                &rej(CommId(0), remote, MessageRef::REQ, RejectReason::ConsumerDefined, &[], &[]),
            )),
            State::MraReqSent => Some(build(
                tid,
                &rej(local, remote, MessageRef::REQ, RejectReason::ConsumerDefined, &[], &[]),
            )),
            State::RepRcvd | State::MraRepSent => Some(build(
                tid,
                &rej(local, remote, MessageRef::REP, RejectReason::ConsumerDefined, &[], &[]),
            )),
            State::RepSent | State::MraRepRcvd => Some(build(
                tid,
                &rej(local, remote, MessageRef::OTHER, RejectReason::ConsumerDefined, &[], &[]),
            )),
            State::Established => Some(build(
                transaction_id(self.config.agent_id, local),
                &dreq(local, remote, conn.remote_qpn, &[]),
            )),
            State::SidrReqRcvd => Some(self.sidr_rep_mad(
                tid,
                remote.0,
                conn.service_id,
                SidrStatus::Reject,
                Qpn::new(0),
                Qkey(0),
                &[],
            )),
            State::DreqSent | State::Timewait | State::SidrReqSent | State::SidrRepSent => None,
        };
        // Linux's cm_destroy_id: a connection that was established (its
        // DREQ sent now or before) goes through time-wait; the ID is gone
        // for the consumer, its comm ID held until the time-wait ends.
        let timewait = matches!(conn.state, State::Established | State::DreqSent | State::Timewait);
        if timewait {
            if conn.state != State::Timewait {
                self.enter_timewait(now_ns, local);
            }
            if let Some(conn) = self.conn_mut(local) {
                conn.destroyed = true;
            }
        } else {
            self.free(local);
        }
        if let Some(mad) = mad {
            self.send_once(peer, mad);
        }
        Ok(())
    }

    pub(crate) fn on_rej(&mut self, now_ns: u64, from: Peer, m: &rej_msg::Repr) -> Outcome {
        // Find the CM ID the REJ is about (Linux: cm_acquire_rejected_id).
        let found = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) => {
                let ids_match = if m.message_rejected == MessageRef::REQ {
                    conn.remote_id.0 == 0
                } else {
                    conn.remote_id == m.local_comm_id
                };
                if ids_match {
                    Ok(conn.local_id)
                } else {
                    Err(Outcome::UnknownId)
                }
            }
            Err(outcome) => Err(outcome),
        };
        // A REJ timeout from an active side that never learnt our comm ID.
        let found = match found {
            Err(Outcome::UnknownId) if m.reason == RejectReason::Timeout => self
                .find_remote(RemoteKind::Req, from.gid, m.local_comm_id)
                .ok_or(Outcome::UnknownId),
            other => other,
        };
        let local = match found {
            Ok(local) => local,
            Err(outcome) => return outcome,
        };
        let Some(state) = self.conns.get(&local.0).map(|c| c.state) else {
            return Outcome::UnknownId;
        };
        let stale = m.reason == RejectReason::StaleConnection;
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::ReqRcvd
            | State::MraReqSent => {
                if stale {
                    self.enter_timewait(now_ns, local);
                } else {
                    self.free(local);
                }
            }
            State::DreqSent | State::RepRcvd | State::MraRepSent | State::Established => {
                self.enter_timewait(now_ns, local);
            }
            State::Timewait => return Outcome::Duplicate,
            State::SidrReqSent | State::SidrReqRcvd | State::SidrRepSent => {
                return Outcome::WrongState
            }
        }
        self.emit(Event::Rejected { id: CmId(local), rej: Box::new(*m) });
        Outcome::Accepted
    }
}
