//! What the caller gives the engine: its configuration, and the
//! parameters of a connect, an accept and a SIDR exchange.

use uroce_wire::mad::req::transport;
use uroce_wire::mad::{Gid, Guid, ServiceId};
use uroce_wire::{Psn, Qkey, Qpn};

/// The engine's configuration: the CA it speaks for and its seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The local CA GUID put in REQs and REPs (rxe derives it from the MAC).
    pub ca_guid: Guid,
    /// Seeds the local comm IDs (Linux draws a random operand at boot).
    pub seed: u64,
    /// The upper 32 bits of every TID this engine forms (Linux: the MAD
    /// agent's number).
    pub agent_id: u32,
    /// The CA's ACK delay exponent (rxe: 15): the REP's target ACK delay,
    /// and part of the local ACK timeout and the time-wait.
    pub ack_delay: u8,
    /// The most CM IDs (connections, SIDR requests) alive at once.
    pub max_ids: usize,
    /// The most transmits queued before new ones are dropped (and
    /// counted; a MAD lost is retried); with this many events waiting, a
    /// REQ or SIDR_REQ that would make a new ID is refused (no resources).
    pub max_queue: usize,
}

impl CmConfig {
    /// A configuration with Linux/rxe values: agent 1, ACK delay 15,
    /// 4096 IDs, queues of 1024.
    pub const fn new(ca_guid: Guid, seed: u64) -> CmConfig {
        CmConfig { ca_guid, seed, agent_id: 1, ack_delay: 15, max_ids: 4096, max_queue: 1024 }
    }
}

/// Where a MAD comes from or goes to: the peer's GID (for RoCEv2 its IP
/// address, IPv4 as `::ffff:a.b.c.d`) and the P_Key index it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The peer's port GID.
    pub gid: Gid,
    /// The P_Key index the MAD came in on or goes out on.
    pub pkey_index: u16,
}

/// The parameters of a connect (the active side's REQ). The constructor
/// [`ConnectParams::rdma_cm`] fills in what Linux's rdma_cm puts there
/// for RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// This port's GID (the path's source).
    pub local_gid: Gid,
    /// The peer's GID (the path's destination; where MADs go).
    pub remote_gid: Gid,
    /// The P_Key index MADs go out on.
    pub pkey_index: u16,
    /// The partition key put in the REQ.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: ServiceId,
    /// The local QP.
    pub qpn: Qpn,
    /// The REQ's starting PSN: the PSN the local QP *receives* from (its
    /// RTR `rq_psn`), which the passive side sends from. That is what
    /// Linux means by it (`ib_send_cm_req` keeps it as `rq_psn`); the
    /// local QP sends from the REP's starting PSN.
    pub starting_psn: Psn,
    /// RC or UC ([`transport`]).
    pub transport: u8,
    /// RDMA READ / atomic requests this side will accept at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side will have outstanding.
    pub initiator_depth: u8,
    /// The path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Packet lifetime exponent of the path (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
    /// How long this side takes to answer a CM message (exponent; 20).
    pub local_cm_response_timeout: u8,
    /// How long the peer is expected to take (exponent; 20).
    pub remote_cm_response_timeout: u8,
    /// Retransmissions of a REQ, REP or DREQ before giving up (4 bits; 15).
    pub max_cm_retries: u8,
    /// The path's flow label (rdma_cm: `(sport * 31 + dport) & 0xfffff`).
    pub flow_label: u32,
    /// The path's traffic class.
    pub traffic_class: u8,
    /// The path's hop limit (rdma_cm on RoCE: 64).
    pub hop_limit: u8,
    /// The path's service level.
    pub sl: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
}

impl ConnectParams {
    /// An RC connect with the values Linux's rdma_cm uses on RoCE: P_Key
    /// 0xffff, one READ each way, MTU 1024, retry 7, RNR retry 7, packet
    /// lifetime 18, CM response timeouts 20, 15 CM retries, hop limit 64.
    pub const fn rdma_cm(
        local_gid: Gid,
        remote_gid: Gid,
        service_id: ServiceId,
        qpn: Qpn,
        starting_psn: Psn,
    ) -> ConnectParams {
        ConnectParams {
            local_gid,
            remote_gid,
            pkey_index: 0,
            pkey: 0xffff,
            service_id,
            qpn,
            starting_psn,
            transport: transport::RC,
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

/// The parameters of an accept (the passive side's REP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local QP.
    pub qpn: Qpn,
    /// The REP's starting PSN: the PSN the local QP *receives* from (its
    /// RTR `rq_psn`), which the active side sends from, as Linux means it
    /// (`ib_send_cm_rep` keeps it as `rq_psn`). The local QP sends from
    /// the REQ's starting PSN.
    pub starting_psn: Psn,
    /// RDMA READ / atomic requests this side will accept at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side will have outstanding.
    pub initiator_depth: u8,
    /// RNR retry count the peer should use (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
}

impl AcceptParams {
    /// An accept with rdma_cm's usual values: one READ each way, RNR
    /// retry 7.
    pub const fn new(qpn: Qpn, starting_psn: Psn) -> AcceptParams {
        AcceptParams {
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

/// The parameters of a SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrParams {
    /// The peer's GID and the P_Key index to send on.
    pub peer: Peer,
    /// The partition key put in the request.
    pub pkey: u16,
    /// The service asked about.
    pub service_id: ServiceId,
    /// Time to wait for the answer before a retry (rdma_cm: 4096 ms).
    pub timeout_ms: u64,
    /// Retries before giving up (rdma_cm: 15).
    pub max_retries: u8,
}

impl SidrParams {
    /// A SIDR_REQ the way rdma_cm sends one: P_Key 0xffff, 4096 ms, 15
    /// retries.
    pub const fn rdma_cm(peer: Peer, service_id: ServiceId) -> SidrParams {
        SidrParams { peer, pkey: 0xffff, service_id, timeout_ms: 4096, max_retries: 15 }
    }
}

/// The answer to a SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// The status ([`uroce_wire::mad::sidr::SidrStatus`]).
    pub status: uroce_wire::mad::sidr::SidrStatus,
    /// The service's UD QP.
    pub qpn: Qpn,
    /// The Q_Key datagrams to it must carry.
    pub qkey: Qkey,
}
