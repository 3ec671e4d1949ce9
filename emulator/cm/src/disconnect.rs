//! Closing a connection: DREQ (retransmitted), DREP, and the time-wait
//! that holds the comm ID afterwards.

use crate::config::Peer;
use crate::conn::State;
use crate::engine::{Cm, Outcome};
use crate::error::CmError;
use crate::event::{CmId, DisconnectCause, Event};
use crate::mad::{build, drep, dreq};
use crate::tid::transaction_id;
use uroce_wire::mad::{drep as drep_msg, dreq as dreq_msg, TransactionId};

impl Cm {
    /// Disconnects an established connection: sends a DREQ (at most 220
    /// bytes of private data), retransmitted like the handshake's messages
    /// until a DREP comes. [`Event::Disconnected`] follows either way.
    pub fn disconnect(
        &mut self,
        now_ns: u64,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > dreq_msg::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong);
        }
        let conn = self.conn_of(id)?;
        if conn.state != State::Established {
            return Err(CmError::WrongState);
        }
        // Linux forms the DREQ's TID afresh from the local comm ID.
        let tid = transaction_id(self.config.agent_id, conn.local_id);
        let mad = build(tid, &dreq(conn.local_id, conn.remote_id, conn.remote_qpn, private_data));
        let (timeout_ms, retries) = (conn.timeout_ms, conn.max_cm_retries);
        if let Some(conn) = self.conn_mut(id.0) {
            conn.state = State::DreqSent;
        }
        self.send_with_retries(now_ns, id.0, mad, timeout_ms, retries);
        Ok(())
    }

    pub(crate) fn on_dreq(
        &mut self,
        now_ns: u64,
        from: Peer,
        tid: TransactionId,
        m: &dreq_msg::Repr,
    ) -> Outcome {
        let conn = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) if conn.remote_id == m.local_comm_id => conn,
            Err(Outcome::WrongPeer) => return Outcome::WrongPeer,
            // No such connection (any more): Linux answers with a DREP
            // anyway, so that a peer whose DREP was lost can finish.
            _ => {
                let mad = build(tid, &drep(m.remote_comm_id, m.local_comm_id, &[]));
                self.send_once(from, mad);
                return Outcome::DrepUnknown;
            }
        };
        if conn.local_qpn != m.remote_qpn {
            return Outcome::WrongQpn;
        }
        let (local, remote, peer) = (conn.local_id, conn.remote_id, conn.peer);
        match conn.state {
            State::RepSent | State::MraRepRcvd | State::DreqSent | State::Established => {}
            State::Timewait => {
                self.send_once(peer, build(tid, &drep(local, remote, &[])));
                return Outcome::Duplicate;
            }
            _ => return Outcome::WrongState,
        }
        if let Some(conn) = self.conn_mut(local) {
            conn.tid = tid;
        }
        self.enter_timewait(now_ns, local);
        self.send_once(peer, build(tid, &drep(local, remote, &[])));
        self.emit(Event::Disconnected {
            id: CmId(local),
            cause: DisconnectCause::DreqReceived,
            private_data: m.private_data.to_vec(),
        });
        Outcome::Accepted
    }

    pub(crate) fn on_drep(&mut self, now_ns: u64, from: Peer, m: &drep_msg::Repr) -> Outcome {
        let conn = match self.lookup(m.remote_comm_id, &from) {
            Ok(conn) => conn,
            Err(outcome) => return outcome,
        };
        if conn.remote_id != m.local_comm_id {
            return Outcome::UnknownId;
        }
        let local = conn.local_id;
        match conn.state {
            State::DreqSent => {}
            State::Timewait => return Outcome::Duplicate,
            _ => return Outcome::WrongState,
        }
        self.enter_timewait(now_ns, local);
        self.emit(Event::Disconnected {
            id: CmId(local),
            cause: DisconnectCause::DrepReceived,
            private_data: m.private_data.to_vec(),
        });
        Outcome::Accepted
    }
}
