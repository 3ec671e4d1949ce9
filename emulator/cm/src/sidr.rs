//! Service ID resolution, for UD QPs (rdma_cm's `RDMA_PS_UDP`): the
//! SIDR_REQ (retransmitted) and the SIDR_REP that answers it.

use crate::config::{Peer, SidrParams, SidrReplyParams};
use crate::conn::{Conn, State};
use crate::engine::{Cm, Outcome, RemoteKind};
use crate::error::CmError;
use crate::event::{CmId, Event};
use crate::mad::{build, padded};
use crate::tid::transaction_id;
use uroce_wire::mad::sidr::{self, SidrStatus};
use uroce_wire::mad::{CmMessage, CommId, ServiceId, TransactionId, MAD_LEN};
use uroce_wire::{Qkey, Qpn};

/// How long an answered SIDR_REQ is remembered, to answer its duplicates
/// with the same SIDR_REP: two of rdma_cm's SIDR timeouts (Linux forgets
/// it at once and raises a new event for a late duplicate).
pub const SIDR_HOLD_MS: u64 = 8192;

impl Cm {
    /// Asks a peer which UD QP serves `params.service_id`: a SIDR_REQ (at
    /// most 216 bytes of private data: rdma_cm's CMA header, then the
    /// user's), retransmitted until the SIDR_REP comes.
    pub fn sidr_request(
        &mut self,
        now_ns: u64,
        params: &SidrParams,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        if private_data.len() > sidr::req::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let local = self.alloc_id().ok_or(CmError::TooManyIds)?;
        let tid = transaction_id(self.config.agent_id, local);
        let request = sidr::ReqRepr {
            request_id: local.0,
            pkey: params.pkey,
            resv16: 0,
            service_id: params.service_id,
            private_data: padded(private_data),
        };
        let mut conn = Conn::new(local, params.peer, State::SidrReqSent, tid);
        conn.service_id = params.service_id;
        conn.timeout_ms = params.timeout_ms;
        conn.max_cm_retries = params.max_retries;
        self.insert(conn, None);
        let mad = build(tid, &CmMessage::SidrReq(request));
        self.send_with_retries(now_ns, local, mad, params.timeout_ms, params.max_retries);
        Ok(CmId(local))
    }

    /// Answers a [`Event::SidrRequest`] (at most 136 bytes of private
    /// data). The CM ID stays [`SIDR_HOLD_MS`] to answer duplicates of the
    /// request with the same SIDR_REP, then goes without an event.
    pub fn sidr_reply(
        &mut self,
        now_ns: u64,
        id: CmId,
        params: &SidrReplyParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > sidr::rep::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let conn = self.conn_of(id)?;
        if conn.state != State::SidrReqRcvd {
            return Err(CmError::WrongState);
        }
        let mad = self.sidr_rep_mad(
            conn.tid,
            conn.remote_id.0,
            conn.service_id,
            params.status,
            params.qpn,
            params.qkey,
            private_data,
        );
        let peer = conn.peer;
        if let Some(conn) = self.conn_mut(id.0) {
            conn.state = State::SidrRepSent;
            conn.last_reply = Some(mad.clone());
        }
        self.hold(now_ns, id.0, SIDR_HOLD_MS);
        self.send_once(peer, mad);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sidr_rep_mad(
        &self,
        tid: TransactionId,
        request_id: u32,
        service_id: ServiceId,
        status: SidrStatus,
        qpn: Qpn,
        qkey: Qkey,
        private_data: &[u8],
    ) -> Box<[u8; MAD_LEN]> {
        let reply = sidr::RepRepr {
            request_id,
            status,
            additional_info_length: 0,
            vendor_id: 0,
            qpn,
            service_id,
            qkey,
            additional_info: [0; sidr::rep::ADDITIONAL_INFO_LEN],
            private_data: padded(private_data),
        };
        build(tid, &CmMessage::SidrRep(reply))
    }

    pub(crate) fn on_sidr_req(
        &mut self,
        from: Peer,
        tid: TransactionId,
        m: &sidr::ReqRepr,
    ) -> Outcome {
        // The same request again while the consumer has not answered.
        if let Some(local) = self.find_remote(RemoteKind::Sidr, from.gid, CommId(m.request_id)) {
            let answer = self.conns.get(&local.0).and_then(|c| c.last_reply.clone());
            if let Some(mad) = answer {
                self.send_once(from, mad);
            }
            return Outcome::Duplicate;
        }
        if !self.listeners.contains(m.service_id) {
            let mad = self.sidr_rep_mad(
                tid,
                m.request_id,
                m.service_id,
                SidrStatus::Unsupported,
                Qpn::new(0),
                Qkey(0),
                &[],
            );
            self.send_once(from, mad);
            return Outcome::SidrNoListener;
        }
        let local = if self.events_full() { None } else { self.alloc_id() };
        let Some(local) = local else { return Outcome::NoResources };
        let mut conn = Conn::new(local, from, State::SidrReqRcvd, tid);
        conn.remote_id = CommId(m.request_id);
        conn.service_id = m.service_id;
        self.insert(conn, Some(RemoteKind::Sidr));
        self.emit(Event::SidrRequest { id: CmId(local), peer: from, req: Box::new(*m) });
        Outcome::Accepted
    }

    pub(crate) fn on_sidr_rep(&mut self, from: Peer, m: &sidr::RepRepr) -> Outcome {
        let conn = match self.lookup(CommId(m.request_id), &from) {
            Ok(conn) => conn,
            Err(outcome) => return outcome,
        };
        if conn.state != State::SidrReqSent {
            return Outcome::WrongState;
        }
        let local = conn.local_id;
        self.free(local);
        self.emit(Event::SidrReply { id: CmId(local), rep: Box::new(*m) });
        Outcome::Accepted
    }
}
