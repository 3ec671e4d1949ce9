//! The engine: the table of CM IDs, the queues of MADs to send and events
//! to deliver, the deadlines, and the dispatch of received MADs.

use crate::config::{CmConfig, Peer};
use crate::conn::{Conn, Retransmit, State};
use crate::counters::Counters;
use crate::error::CmError;
use crate::event::{CmId, Event, TimedOut};
use crate::listen::Listeners;
use crate::tid::IdAllocator;
use crate::timers::{iba_time_to_ms, Timers, NS_PER_MS};
use std::collections::{BTreeMap, VecDeque};
use uroce_wire::mad::{self, AttributeId, CmMessage, CommId, Gid, Method, ServiceId, MAD_LEN};
use uroce_wire::Qpn;

/// A MAD to send: a UD SEND from QP1 to the peer's QP1 with the GSI Q_Key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The destination GID and the P_Key index to send with.
    pub peer: Peer,
    /// The destination QP: always QP1 (the GSI) for the CM.
    pub dest_qpn: Qpn,
    /// The 256-byte MAD.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// What became of a received MAD (each lands in one counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted,
    Duplicate,
    Malformed,
    Unsupported,
    UnknownId,
    WrongPeer,
    WrongState,
    WrongQpn,
    NoListener,
    Stale,
    BadTransport,
    NoResources,
    SidrNoListener,
    DrepUnknown,
}

/// Which table a passive CM ID's remote ID is indexed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RemoteKind {
    Req,
    Sidr,
}

/// The Communication Manager of one port: a sans-IO state machine. Feed it
/// received MADs ([`Cm::receive`]), the consumer's requests and the time
/// ([`Cm::handle_timeout`]); drain [`Cm::poll_transmit`] and
/// [`Cm::poll_event`]; wake up at [`Cm::poll_timeout`].
#[derive(Debug)]
pub struct Cm {
    pub(crate) config: CmConfig,
    ids: IdAllocator,
    pub(crate) conns: BTreeMap<u32, Conn>,
    /// Passive CM IDs by (peer GID, remote comm ID or request ID).
    pub(crate) remote_index: BTreeMap<(RemoteKind, [u8; 16], u32), CommId>,
    pub(crate) listeners: Listeners,
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    pub(crate) counters: Counters,
}

impl Cm {
    /// An engine with no CM IDs and no listens.
    pub fn new(config: CmConfig) -> Cm {
        Cm {
            config,
            ids: IdAllocator::new(config.seed),
            conns: BTreeMap::new(),
            remote_index: BTreeMap::new(),
            listeners: Listeners::default(),
            timers: Timers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The state of a CM ID, or `None` if it does not exist (idle).
    pub fn state(&self, id: CmId) -> Option<State> {
        self.conns.get(&id.0 .0).filter(|c| !c.destroyed).map(|c| c.state)
    }

    /// The peer's comm ID of a CM ID (0 until known).
    pub fn remote_comm_id(&self, id: CmId) -> Option<CommId> {
        self.conns.get(&id.0 .0).map(|c| c.remote_id)
    }

    /// How many CM IDs exist.
    pub fn id_count(&self) -> usize {
        self.conns.values().filter(|c| !c.destroyed).count()
    }

    /// Listens for REQs and SIDR_REQs on exactly `service_id`.
    pub fn listen(&mut self, service_id: ServiceId) -> Result<(), CmError> {
        self.listeners.insert(service_id)
    }

    /// Stops listening on `service_id` (CM IDs already created stay).
    pub fn unlisten(&mut self, service_id: ServiceId) -> Result<(), CmError> {
        self.listeners.remove(service_id)
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether a MAD waits for [`Cm::poll_transmit`].
    pub fn has_transmit(&self) -> bool {
        !self.transmits.is_empty()
    }

    /// Whether an event waits for [`Cm::poll_event`].
    pub fn has_event(&self) -> bool {
        !self.events.is_empty()
    }

    /// When [`Cm::handle_timeout`] should next be called (ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.timers.next()
    }

    /// Handles every deadline due at `now_ns`: retransmissions, retries
    /// exhausted, time-waits over. Early or repeated calls are harmless.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        while let Some(local) = self.timers.pop_due(now_ns) {
            let Some(conn) = self.conns.get_mut(&local.0) else { continue };
            conn.deadline_ns = None;
            match conn.state {
                State::Timewait => {
                    let destroyed = conn.destroyed;
                    self.free(local);
                    if !destroyed {
                        self.emit(Event::TimewaitExit { id: CmId(local) });
                    }
                    continue;
                }
                State::SidrRepSent => {
                    self.free(local);
                    continue;
                }
                _ => {}
            }
            let Some(rt) = conn.retransmit.as_mut() else { continue };
            if rt.retries_left > 0 {
                rt.retries_left -= 1;
                let (mad, timeout_ns, peer) = (rt.mad.clone(), rt.timeout_ns, conn.peer);
                self.counters.tx_retries += 1;
                self.push_transmit(peer, mad);
                self.arm(local, now_ns.saturating_add(timeout_ns));
                continue;
            }
            conn.retransmit = None;
            self.counters.timeouts += 1;
            let id = CmId(local);
            match conn.state {
                State::ReqSent | State::MraReqRcvd => {
                    self.free(local);
                    self.emit(Event::Unreachable { id, stage: TimedOut::Req });
                }
                State::RepSent | State::MraRepRcvd => {
                    self.free(local);
                    self.emit(Event::Unreachable { id, stage: TimedOut::Rep });
                }
                State::DreqSent => {
                    self.enter_timewait(now_ns, local);
                    self.emit(Event::Disconnected {
                        id,
                        cause: crate::event::DisconnectCause::DreqTimedOut,
                        private_data: Vec::new(),
                    });
                }
                State::SidrReqSent => {
                    self.free(local);
                    self.emit(Event::SidrUnreachable { id });
                }
                _ => {}
            }
        }
    }

    /// Handles a MAD received on QP1 from `from`. Anything that is not a
    /// CM message matching an outstanding exchange is dropped and counted.
    pub fn receive(&mut self, now_ns: u64, from: Peer, mad_bytes: &[u8]) {
        self.counters.rx_mads += 1;
        let outcome = self.dispatch(now_ns, from, mad_bytes);
        let c = &mut self.counters;
        let counter = match outcome {
            Outcome::Accepted => &mut c.rx_accepted,
            Outcome::Duplicate => &mut c.rx_duplicates,
            Outcome::Malformed => &mut c.drop_malformed,
            Outcome::Unsupported => &mut c.drop_unsupported,
            Outcome::UnknownId => &mut c.drop_unknown_id,
            Outcome::WrongPeer => &mut c.drop_wrong_peer,
            Outcome::WrongState => &mut c.drop_wrong_state,
            Outcome::WrongQpn => &mut c.drop_wrong_qpn,
            Outcome::NoListener => &mut c.rej_no_listener,
            Outcome::Stale => &mut c.rej_stale,
            Outcome::BadTransport => &mut c.rej_transport,
            Outcome::NoResources => &mut c.rej_no_resources,
            Outcome::SidrNoListener => &mut c.sidr_no_listener,
            Outcome::DrepUnknown => &mut c.drep_unknown,
        };
        *counter += 1;
    }

    fn dispatch(&mut self, now_ns: u64, from: Peer, bytes: &[u8]) -> Outcome {
        let Ok(packet) = mad::Packet::new_checked(bytes) else { return Outcome::Malformed };
        let Ok(header) = mad::Repr::parse(&packet) else { return Outcome::Malformed };
        if !header.is_cm() {
            return Outcome::Malformed;
        }
        if header.method != Method::SEND
            || header.attribute_id == AttributeId::LAP
            || header.attribute_id == AttributeId::APR
            || header.attribute_id == AttributeId::CLASS_PORT_INFO
        {
            return Outcome::Unsupported;
        }
        let Ok(message) = CmMessage::parse(&packet) else { return Outcome::Malformed };
        let tid = header.transaction_id;
        match message {
            CmMessage::Req(m) => self.on_req(now_ns, from, tid, &m),
            CmMessage::Mra(m) => self.on_mra(now_ns, from, &m),
            CmMessage::Rej(m) => self.on_rej(now_ns, from, &m),
            CmMessage::Rep(m) => self.on_rep(now_ns, from, &m),
            CmMessage::Rtu(m) => self.on_rtu(from, &m),
            CmMessage::Dreq(m) => self.on_dreq(now_ns, from, tid, &m),
            CmMessage::Drep(m) => self.on_drep(now_ns, from, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(from, tid, &m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(from, &m),
        }
    }

    // ---- helpers shared by the handlers ----

    /// A new local comm ID, or `None` if the table is full.
    pub(crate) fn alloc_id(&mut self) -> Option<CommId> {
        if self.conns.len() >= self.config.max_ids {
            return None;
        }
        let conns = &self.conns;
        self.ids.alloc(|id| conns.contains_key(&id.0))
    }

    /// Inserts a CM ID (and indexes a passive one by its remote ID).
    pub(crate) fn insert(&mut self, mut conn: Conn, kind: Option<RemoteKind>) {
        if let Some(kind) = kind {
            self.remote_index.insert((kind, conn.peer.gid.0, conn.remote_id.0), conn.local_id);
            conn.indexed = true;
        }
        self.conns.insert(conn.local_id.0, conn);
    }

    /// Removes a CM ID: its deadline, its index entry, its state.
    pub(crate) fn free(&mut self, local: CommId) {
        self.disarm(local);
        if let Some(conn) = self.conns.remove(&local.0) {
            if conn.indexed {
                for kind in [RemoteKind::Req, RemoteKind::Sidr] {
                    let key = (kind, conn.peer.gid.0, conn.remote_id.0);
                    if self.remote_index.get(&key) == Some(&local) {
                        self.remote_index.remove(&key);
                    }
                }
            }
        }
    }

    /// The passive CM ID for a (peer, remote ID), if any.
    pub(crate) fn find_remote(&self, kind: RemoteKind, gid: Gid, remote: CommId) -> Option<CommId> {
        self.remote_index.get(&(kind, gid.0, remote.0)).copied()
    }

    /// Looks a CM ID up by the local comm ID a message names and checks
    /// that the message comes from the CM ID's peer.
    pub(crate) fn lookup(&self, local: CommId, from: &Peer) -> Result<&Conn, Outcome> {
        match self.conns.get(&local.0) {
            None => Err(Outcome::UnknownId),
            Some(conn) if conn.peer.gid != from.gid => Err(Outcome::WrongPeer),
            Some(conn) => Ok(conn),
        }
    }

    pub(crate) fn conn_mut(&mut self, local: CommId) -> Option<&mut Conn> {
        self.conns.get_mut(&local.0)
    }

    pub(crate) fn conn_of(&self, id: CmId) -> Result<&Conn, CmError> {
        self.conns.get(&id.0 .0).filter(|c| !c.destroyed).ok_or(CmError::UnknownId)
    }

    pub(crate) fn push_transmit(&mut self, peer: Peer, mad: Box<[u8; MAD_LEN]>) {
        if self.transmits.len() >= self.config.max_queue {
            self.counters.tx_queue_full += 1;
            return;
        }
        self.counters.tx_mads += 1;
        self.transmits.push_back(Transmit { peer, dest_qpn: Qpn::GSI, mad });
    }

    /// Queues an event for the consumer. Never drops one: an event may be
    /// the only news that an ID was made or freed (a lost ConnectRequest
    /// would leave its connection waiting for ever, a lost Rejected a
    /// consumer). The queue stays bounded because new IDs are refused
    /// while it is full (`events_full`), and each ID raises a few
    /// events at most before it is freed.
    pub(crate) fn emit(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// The consumer has `max_queue` events waiting: a REQ or SIDR_REQ
    /// that would make a new ID is refused (no resources).
    pub(crate) fn events_full(&mut self) -> bool {
        let full = self.events.len() >= self.config.max_queue;
        if full {
            self.counters.event_queue_full += 1;
        }
        full
    }

    fn arm(&mut self, local: CommId, deadline_ns: u64) {
        self.disarm(local);
        if let Some(conn) = self.conns.get_mut(&local.0) {
            conn.deadline_ns = Some(deadline_ns);
            self.timers.insert(deadline_ns, local);
        }
    }

    fn disarm(&mut self, local: CommId) {
        if let Some(conn) = self.conns.get_mut(&local.0) {
            if let Some(t) = conn.deadline_ns.take() {
                self.timers.remove(t, local);
            }
        }
    }

    /// Sends a message that expects an answer and arms its retransmission:
    /// `timeout_ms` between copies, `retries` copies after the first.
    pub(crate) fn send_with_retries(
        &mut self,
        now_ns: u64,
        local: CommId,
        mad: Box<[u8; MAD_LEN]>,
        timeout_ms: u64,
        retries: u8,
    ) {
        let Some(conn) = self.conns.get_mut(&local.0) else { return };
        let timeout_ns = timeout_ms.saturating_mul(NS_PER_MS);
        conn.retransmit = Some(Retransmit { mad: mad.clone(), timeout_ns, retries_left: retries });
        let peer = conn.peer;
        self.push_transmit(peer, mad);
        self.arm(local, now_ns.saturating_add(timeout_ns));
    }

    /// Changes the wait for the answer to the outstanding message (after an
    /// MRA): the current wait and every later one.
    pub(crate) fn extend_wait(&mut self, now_ns: u64, local: CommId, timeout_ms: u64) {
        let timeout_ns = timeout_ms.saturating_mul(NS_PER_MS);
        let Some(conn) = self.conns.get_mut(&local.0) else { return };
        let Some(rt) = conn.retransmit.as_mut() else { return };
        rt.timeout_ns = timeout_ns;
        self.arm(local, now_ns.saturating_add(timeout_ns));
    }

    /// Stops retransmitting (the answer came).
    pub(crate) fn stop_retransmit(&mut self, local: CommId) {
        self.disarm(local);
        if let Some(conn) = self.conns.get_mut(&local.0) {
            conn.retransmit = None;
        }
    }

    /// Enters time-wait: holds the comm ID for the path's ACK timeout
    /// (Linux: `cm_convert_to_ms(av.timeout)`, 2048 ms for rdma_cm on RoCE).
    pub(crate) fn enter_timewait(&mut self, now_ns: u64, local: CommId) {
        self.stop_retransmit(local);
        let Some(conn) = self.conns.get_mut(&local.0) else { return };
        conn.state = State::Timewait;
        let wait_ns = iba_time_to_ms(conn.av_timeout).saturating_mul(NS_PER_MS);
        self.arm(local, now_ns.saturating_add(wait_ns));
    }

    /// Keeps a CM ID without a retransmission for `hold_ms`, then frees it.
    pub(crate) fn hold(&mut self, now_ns: u64, local: CommId, hold_ms: u64) {
        self.stop_retransmit(local);
        self.arm(local, now_ns.saturating_add(hold_ms.saturating_mul(NS_PER_MS)));
    }

    /// Sends a MAD once (an answer: RTU, REJ, MRA, DREP, SIDR_REP).
    pub(crate) fn send_once(&mut self, peer: Peer, mad: Box<[u8; MAD_LEN]>) {
        self.push_transmit(peer, mad);
    }
}
