//! The passive side of a connection: the REQ that finds a listener (or
//! does not), the consumer's accept, MRA or reject, and the RTU (or the
//! first traffic) that establishes the connection.

use crate::config::{AcceptParams, Peer};
use crate::conn::{Conn, State};
use crate::engine::{Cm, Outcome, RemoteKind};
use crate::error::CmError;
use crate::event::{CmId, Event};
use crate::mad::{build, mra, padded, rej};
use crate::timers::iba_time_to_ms;
use uroce_wire::mad::rej::RejectReason;
use uroce_wire::mad::req::{self, transport};
use uroce_wire::mad::{rep, rtu, CmMessage, CommId, MessageRef, TransactionId};
use uroce_wire::Qkey;

/// The flag of [`Cm::mra`]'s service timeout that holds the MRA back
/// until a duplicate comes (ib_cm's `IB_CM_MRA_FLAG_DELAY`).
pub const MRA_DELAY: u8 = 0x80;

impl Cm {
    pub(crate) fn on_req(
        &mut self,
        now_ns: u64,
        from: Peer,
        tid: TransactionId,
        m: &req::Repr,
    ) -> Outcome {
        // A REQ already seen (same peer, same comm ID): answer as Linux's
        // cm_dup_req_handler does. While the REP is outstanding its own
        // retransmissions answer; nothing else is sent.
        if let Some(local) = self.find_remote(RemoteKind::Req, from.gid, m.local_comm_id) {
            if let Some(conn) = self.conns.get(&local.0) {
                let peer = conn.peer;
                match conn.state {
                    State::MraReqSent => {
                        if let Some(mad) = conn.last_reply.clone() {
                            self.send_once(peer, mad);
                        }
                    }
                    State::Timewait => {
                        let msg = rej(
                            conn.local_id,
                            conn.remote_id,
                            MessageRef::OTHER,
                            RejectReason::StaleConnection,
                            &[],
                            &[],
                        );
                        let mad = build(conn.tid, &msg);
                        self.send_once(peer, mad);
                    }
                    _ => {}
                }
            }
            return Outcome::Duplicate;
        }
        if m.transport_service_type != transport::RC && m.transport_service_type != transport::UC {
            self.issue_req_rej(from, tid, m.local_comm_id, RejectReason::InvalidTransportType);
            return Outcome::BadTransport;
        }
        // A new REQ from a QP that still has a connection here: the old one
        // is stale. Refuse the REQ and disconnect the old one (Linux).
        let stale = self
            .conns
            .values()
            .find(|c| {
                c.is_live_connection()
                    && c.peer.gid == from.gid
                    && c.remote_qpn == m.local_qpn
                    && c.remote_ca_guid == m.local_ca_guid
                    && c.remote_id.0 != 0
            })
            .map(|c| (c.local_id, c.state));
        if let Some((old, state)) = stale {
            self.issue_req_rej(from, tid, m.local_comm_id, RejectReason::StaleConnection);
            if state == State::Established {
                let _ = self.disconnect(now_ns, CmId(old), &[]);
            }
            return Outcome::Stale;
        }
        if !self.listeners.contains(m.service_id) {
            self.issue_req_rej(from, tid, m.local_comm_id, RejectReason::InvalidServiceId);
            return Outcome::NoListener;
        }
        let local = if self.events_full() { None } else { self.alloc_id() };
        let Some(local) = local else {
            self.issue_req_rej(from, tid, m.local_comm_id, RejectReason::NoResources);
            return Outcome::NoResources;
        };
        let mut conn = Conn::new(local, from, State::ReqRcvd, tid);
        conn.remote_id = m.local_comm_id;
        conn.service_id = m.service_id;
        conn.remote_qpn = m.local_qpn;
        conn.remote_ca_guid = m.local_ca_guid;
        conn.timeout_ms = iba_time_to_ms(m.local_cm_response_timeout);
        conn.max_cm_retries = m.max_cm_retries;
        // Linux takes the packet lifetime as the REQ's ACK timeout less one,
        // and the path's ACK timeout as that plus one.
        conn.av_timeout = m.primary_path.local_ack_timeout.max(1);
        self.insert(conn, Some(RemoteKind::Req));
        self.emit(Event::ConnectRequest { id: CmId(local), peer: from, req: Box::new(*m) });
        Outcome::Accepted
    }

    /// A REJ for a REQ that gets no CM ID, as Linux's `cm_issue_rej` sends
    /// it: the REQ's TID, its comm ID as the remote one, no local one.
    fn issue_req_rej(
        &mut self,
        to: Peer,
        tid: TransactionId,
        remote: CommId,
        reason: RejectReason,
    ) {
        let msg = rej(CommId(0), remote, MessageRef::REQ, reason, &[], &[]);
        self.send_once(to, build(tid, &msg));
    }

    /// Accepts a [`Event::ConnectRequest`]: sends the REP (at most 196 bytes
    /// of private data), retransmitted every CM response timeout of the
    /// peer's until an RTU arrives or [`Cm::established`] is called.
    pub fn accept(
        &mut self,
        now_ns: u64,
        id: CmId,
        params: &AcceptParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > rep::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let conn = self.conn_of(id)?;
        if !matches!(conn.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::WrongState);
        }
        let reply = rep::Repr {
            local_comm_id: conn.local_id,
            remote_comm_id: conn.remote_id,
            local_qkey: Qkey(0),
            local_qpn: params.qpn,
            local_eecn: 0,
            vendor_id: 0,
            starting_psn: params.starting_psn,
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            target_ack_delay: self.config.ack_delay & 0x1f,
            failover_accepted: 0,
            end_to_end_flow_control: params.flow_control,
            rnr_retry_count: params.rnr_retry_count & 7,
            srq: params.srq,
            resv4: 0,
            local_ca_guid: self.config.ca_guid,
            private_data: padded(private_data),
        };
        let mad = build(conn.tid, &CmMessage::Rep(reply));
        let (timeout_ms, retries) = (conn.timeout_ms, conn.max_cm_retries);
        if let Some(conn) = self.conn_mut(id.0) {
            conn.state = State::RepSent;
            conn.local_qpn = params.qpn;
            conn.last_reply = None;
        }
        self.send_with_retries(now_ns, id.0, mad, timeout_ms, retries);
        Ok(())
    }

    /// Asks the peer for patience (`4.096 µs × 2^service_timeout` more) with
    /// an MRA, for a REQ not yet accepted or a REP not yet answered with
    /// [`Cm::ready_to_use`]. Duplicates of the REQ or REP get it again.
    /// With [`MRA_DELAY`] in `service_timeout` (ib_cm's
    /// `IB_CM_MRA_FLAG_DELAY`, which Linux's rdma_cm uses for every request
    /// and reply it hands to its consumer) nothing is sent now: only a
    /// duplicate gets the MRA, so a peer that retries is told to wait.
    pub fn mra(&mut self, _now_ns: u64, id: CmId, service_timeout: u8) -> Result<(), CmError> {
        let delay = service_timeout & MRA_DELAY != 0;
        let service_timeout = service_timeout & !MRA_DELAY;
        let conn = self.conn_of(id)?;
        let (next, mraed) = match conn.state {
            State::ReqRcvd => (State::MraReqSent, MessageRef::REQ),
            State::RepRcvd => (State::MraRepSent, MessageRef::REP),
            _ => return Err(CmError::WrongState),
        };
        let mad = build(conn.tid, &mra(conn.local_id, conn.remote_id, mraed, service_timeout));
        let peer = conn.peer;
        if let Some(conn) = self.conn_mut(id.0) {
            conn.state = next;
            conn.last_reply = Some(mad.clone());
        }
        if !delay {
            self.send_once(peer, mad);
        }
        Ok(())
    }

    /// Reports that the QP received traffic before the RTU (IBA's
    /// communication established event, Linux's `IB_EVENT_COMM_EST`): the
    /// connection is established and the REP no longer retransmitted.
    pub fn established(&mut self, _now_ns: u64, id: CmId) -> Result<(), CmError> {
        let conn = self.conn_of(id)?;
        if !matches!(conn.state, State::RepSent | State::MraRepRcvd) {
            return Err(CmError::WrongState);
        }
        self.establish_passive(id.0);
        Ok(())
    }

    fn establish_passive(&mut self, local: CommId) {
        self.stop_retransmit(local);
        if let Some(conn) = self.conn_mut(local) {
            conn.state = State::Established;
        }
        self.emit(Event::Established { id: CmId(local) });
    }

    pub(crate) fn on_rtu(&mut self, from: Peer, m: &rtu::Repr) -> Outcome {
        let conn = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) => conn,
            Err(outcome) => return outcome,
        };
        if conn.remote_id != m.local_comm_id {
            return Outcome::UnknownId;
        }
        match conn.state {
            State::RepSent | State::MraRepRcvd => {
                self.establish_passive(m.remote_comm_id);
                Outcome::Accepted
            }
            // Linux counts any other RTU for a connection as a duplicate.
            State::Established | State::DreqSent | State::Timewait => Outcome::Duplicate,
            _ => Outcome::WrongState,
        }
    }
}
