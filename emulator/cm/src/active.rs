//! The active side of a connection: the REQ, the REP that answers it, the
//! MRA that asks for patience, and the RTU that closes the handshake.

use crate::config::{ConnectParams, Peer};
use crate::conn::{Conn, State};
use crate::engine::{Cm, Outcome};
use crate::error::CmError;
use crate::event::{CmId, Event};
use crate::mad::{build, padded, rtu};
use crate::tid::transaction_id;
use crate::timers::{ack_timeout, iba_time_to_ms};
use uroce_wire::mad::req::{self, transport, Path};
use uroce_wire::mad::{mra, rep, CmMessage, MessageRef};
use uroce_wire::Qkey;

impl Cm {
    /// Starts a connection: sends a REQ (retransmitted every
    /// `2 × packet lifetime + remote CM response timeout`, Linux's
    /// rounding, `max_cm_retries` times). `private_data` (at most 92
    /// bytes) is what rdma_cm puts there: its CMA header, then the user's.
    pub fn connect(
        &mut self,
        now_ns: u64,
        params: &ConnectParams,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        if private_data.len() > req::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        if params.transport != transport::RC && params.transport != transport::UC {
            return Err(CmError::InvalidParameter);
        }
        let local = self.alloc_id().ok_or(CmError::TooManyIds)?;
        let tid = transaction_id(self.config.agent_id, local);
        // Linux puts permissive LIDs on a routed (RoCE) path.
        let subnet_local = params.hop_limit <= 1;
        let lid = if subnet_local { 0 } else { 0xffff };
        let primary_path = Path {
            local_lid: lid,
            remote_lid: lid,
            local_gid: params.local_gid,
            remote_gid: params.remote_gid,
            flow_label: params.flow_label & 0xf_ffff,
            resv6: 0,
            packet_rate: 0,
            traffic_class: params.traffic_class,
            hop_limit: params.hop_limit,
            sl: params.sl & 0xf,
            subnet_local,
            resv3_sl: 0,
            local_ack_timeout: ack_timeout(self.config.ack_delay, params.packet_life_time),
            resv3_ack: 0,
        };
        let request = req::Repr {
            local_comm_id: local,
            resv4: 0,
            service_id: params.service_id,
            local_ca_guid: self.config.ca_guid,
            resv24: 0,
            local_qkey: Qkey(0),
            local_qpn: params.qpn,
            responder_resources: params.responder_resources,
            local_eecn: 0,
            initiator_depth: params.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: params.remote_cm_response_timeout & 0x1f,
            transport_service_type: params.transport,
            end_to_end_flow_control: false,
            starting_psn: params.starting_psn,
            local_cm_response_timeout: params.local_cm_response_timeout & 0x1f,
            retry_count: params.retry_count & 7,
            pkey: params.pkey,
            path_mtu: params.path_mtu & 0xf,
            rdc_exists: false,
            rnr_retry_count: params.rnr_retry_count & 7,
            max_cm_retries: params.max_cm_retries & 0xf,
            srq: params.srq,
            extended_transport_type: 0,
            primary_path,
            alternate_path: Path::default(),
            private_data: padded(private_data),
        };
        let peer = Peer { gid: params.remote_gid, pkey_index: params.pkey_index };
        let mut conn = Conn::new(local, peer, State::ReqSent, tid);
        conn.service_id = params.service_id;
        conn.local_qpn = params.qpn;
        conn.timeout_ms = 2 * iba_time_to_ms(params.packet_life_time)
            + iba_time_to_ms(params.remote_cm_response_timeout & 0x1f);
        conn.max_cm_retries = params.max_cm_retries & 0xf;
        conn.av_timeout = params.packet_life_time.saturating_add(1).min(31);
        let (timeout_ms, retries) = (conn.timeout_ms, conn.max_cm_retries);
        self.insert(conn, None);
        let mad = build(tid, &CmMessage::Req(request));
        self.send_with_retries(now_ns, local, mad, timeout_ms, retries);
        Ok(CmId(local))
    }

    /// Completes the handshake after a [`Event::ConnectReply`]: sends the
    /// RTU (at most 224 bytes of private data) and reports the connection
    /// established. Call it once the QP is in RTS.
    pub fn ready_to_use(
        &mut self,
        _now_ns: u64,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > uroce_wire::mad::rtu::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let conn = self.conn_of(id)?;
        if !matches!(conn.state, State::RepRcvd | State::MraRepSent) {
            return Err(CmError::WrongState);
        }
        let mad = build(conn.tid, &rtu(conn.local_id, conn.remote_id, private_data));
        let peer = conn.peer;
        if let Some(conn) = self.conn_mut(id.0) {
            conn.state = State::Established;
            conn.last_reply = Some(mad.clone());
        }
        self.send_once(peer, mad);
        self.emit(Event::Established { id });
        Ok(())
    }

    pub(crate) fn on_rep(&mut self, _now_ns: u64, from: Peer, m: &rep::Repr) -> Outcome {
        let conn = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) => conn,
            Err(outcome) => return outcome,
        };
        let local = conn.local_id;
        match conn.state {
            State::ReqSent | State::MraReqRcvd => {}
            _ if conn.remote_id != m.local_comm_id => return Outcome::UnknownId,
            // A REP again after the RTU: the RTU was lost; send it again.
            State::Established => {
                if let Some(mad) = conn.last_reply.clone() {
                    let peer = conn.peer;
                    self.send_once(peer, mad);
                }
                return Outcome::Duplicate;
            }
            State::MraRepSent => {
                if let Some(mad) = conn.last_reply.clone() {
                    let peer = conn.peer;
                    self.send_once(peer, mad);
                }
                return Outcome::Duplicate;
            }
            State::RepRcvd => return Outcome::Duplicate,
            _ => return Outcome::WrongState,
        }
        self.stop_retransmit(local);
        if let Some(conn) = self.conn_mut(local) {
            conn.state = State::RepRcvd;
            conn.remote_id = m.local_comm_id;
            conn.remote_qpn = m.local_qpn;
            conn.remote_ca_guid = m.local_ca_guid;
            conn.av_timeout = ack_timeout(m.target_ack_delay, conn.av_timeout.saturating_sub(1));
        }
        self.emit(Event::ConnectReply { id: CmId(local), rep: Box::new(*m) });
        Outcome::Accepted
    }

    pub(crate) fn on_mra(&mut self, now_ns: u64, from: Peer, m: &mra::Repr) -> Outcome {
        let conn = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) => conn,
            Err(outcome) => return outcome,
        };
        let local = conn.local_id;
        // An MRA of a REQ comes before the peer's comm ID is known here.
        let ids_match = match m.message_mraed {
            MessageRef::REQ => conn.remote_id.0 == 0,
            MessageRef::REP => conn.remote_id == m.local_comm_id,
            _ => return Outcome::Unsupported,
        };
        if !ids_match {
            return Outcome::UnknownId;
        }
        let next = match (conn.state, m.message_mraed) {
            (State::ReqSent, MessageRef::REQ) => State::MraReqRcvd,
            (State::RepSent, MessageRef::REP) => State::MraRepRcvd,
            (State::MraReqRcvd, MessageRef::REQ) | (State::MraRepRcvd, MessageRef::REP) => {
                return Outcome::Duplicate
            }
            _ => return Outcome::WrongState,
        };
        let wait_ms = iba_time_to_ms(m.service_timeout) + iba_time_to_ms(conn.av_timeout);
        if let Some(conn) = self.conn_mut(local) {
            conn.state = next;
        }
        self.extend_wait(now_ns, local, wait_ms);
        Outcome::Accepted
    }
}
