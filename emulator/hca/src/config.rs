//! Device configuration: how big every table is, and the attributes the
//! device reports (shaped like Linux rxe's `rxe_param.h`).

use uroce_device::types::Mtu;

/// Table sizes and limits, fixed when the HCA is created. Everything the
/// HCA allocates is bounded by these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaConfig {
    /// Queue pairs (QPNs start at [`FIRST_QPN`]).
    pub max_qp: u32,
    /// Work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per WQE.
    pub max_sge: u32,
    /// Inline data bytes per send WQE.
    pub max_inline_data: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions and windows (MPT entries).
    pub max_mr: u32,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Protection domains.
    pub max_pd: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WQE.
    pub max_srq_sge: u32,
    /// Multicast groups with a QP attached (rxe: 8192).
    pub max_mcast_grp: u32,
    /// QPs attached to one multicast group (rxe: 56).
    pub max_mcast_qp_attach: u32,
    /// Attachments over all groups (rxe: 8192 * 56).
    pub max_total_mcast_qp_attach: u32,
    /// Outstanding READ/atomic requests a QP may issue (`max_rd_atomic`).
    pub max_qp_init_rd_atom: u8,
    /// READ/atomic requests a QP may have outstanding as responder
    /// (`max_dest_rd_atomic`): the size of its responder resources.
    pub max_qp_rd_atom: u8,
    /// Largest message, in bytes.
    pub max_msg_size: u32,
    /// The port's active MTU (the largest path MTU).
    pub active_mtu: Mtu,
    /// Page size of the MTT, as a power of two.
    pub page_shift: u32,
    /// Local operations and refused WQEs the requester finishes per QP in
    /// one scheduling turn (a turn sends at most `max_burst_packets`
    /// packets, so one busy QP cannot starve the others).
    pub max_packets_per_turn: u32,
    /// Packets a QP sends in a row before the next runnable QP's turn
    /// (an HCA's arbitration quantum; rxe's requester task runs up to 1024
    /// iterations per QP). Sending a few in a row uses the QP's context
    /// while it is in the caches: with thousands of busy QPs, one packet
    /// per turn fetches every context cold for every packet.
    pub max_burst_packets: u32,
    /// Packets a requester may have unacknowledged (rxe: 128).
    pub max_unacked_psns: u32,
    /// PSNs all the device's RC requesters together may have
    /// unacknowledged (a device-wide transmit budget): past it, a QP starts
    /// no new WQE until ACKs bring the total below it (a WQE already
    /// started finishes). Ten thousand QPs that each start a window at
    /// once would otherwise burst more than a receiver's socket buffer
    /// holds, and recover only by retransmitting.
    pub max_device_unacked_psns: u32,
    /// Coalesce: the responder ACKs at least every this many packets even
    /// without AckReq (rxe: `RXE_MAX_PKT_PER_ACK`).
    pub max_pkt_per_ack: u32,
    /// ACKs on demand (RC requester; 0: off, an AckReq at the end of every
    /// message as rxe sends). An unsignaled SEND or WRITE whose send queue
    /// has room for more such WQEs goes without AckReq: nobody waits for
    /// its completion, and a later ACK covers it. When the requester has
    /// then sent nothing for this many nanoseconds, it sends its last
    /// packet again with AckReq (an ACK probe: the responder answers a
    /// duplicate with an ACK, IBA C9-105). Used only on QPs whose
    /// retransmit timeout is at least [`ACK_PROBE_TIMEOUT_FACTOR`] times
    /// this (or infinite), so that a probe is answered before the timer
    /// would spend a retry.
    pub ack_probe_ns: u64,
    /// Which IPv4 identification the HCA writes into the headers its ICRC
    /// covers: whatever carries its packets must send exactly that.
    pub ipv4_id: Ipv4IdPolicy,
    /// Which UDP source port each QP's packets carry.
    pub source_ports: SourcePortPolicy,
    /// Seeds the local comm IDs of the CM on QP1, mixed with the device's
    /// GIDs (Linux draws a random number at boot). The HCA stays
    /// deterministic: the simulator passes its run's seed, and the real
    /// runtime draws one when this is 0, so that a device opened again at
    /// an address does not reuse the comm IDs of its last life.
    pub cm_seed: u64,
    /// The CM response timeout the device's CM asks for and waits with,
    /// as the IBA exponent (`4.096 µs × 2^t`, 0..=31): Linux rdma_cm's
    /// `CMA_CM_RESPONSE_TIMEOUT` (20), put where rdma_cm puts it: a
    /// REQ's local and remote CM response timeouts (the REQ is resent
    /// every `2 × 2^(packet lifetime − 8) + 2^(t − 8)` ms, and its
    /// connection's DREQ too) and a SIDR_REQ's wait (`2^(t − 8)` ms, at
    /// least 1). A REP and the passive side's DREQ wait as the peer's REQ
    /// asked, as in Linux. It replaces what a `CmConnect` or
    /// `CmSidrRequest` command carries (`UROCE_CM_RESPONSE_TIMEOUT`).
    pub cm_response_timeout: u8,
    /// How many times the device's CM resends a REQ or a SIDR_REQ (and
    /// that connection's DREQ) before giving up, 0..=15: rdma_cm's
    /// `CMA_MAX_CM_RETRIES` (15). It replaces what the command carries
    /// (`UROCE_CM_RETRIES`).
    pub cm_max_retries: u8,
}

/// Linux rdma_cm's CM response timeout exponent (`CMA_CM_RESPONSE_TIMEOUT`):
/// 4.096 µs × 2^20 ≈ 4.3 s (the CM rounds it to 4096 ms).
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;

/// Linux rdma_cm's CM retries (`CMA_MAX_CM_RETRIES`).
pub const CMA_MAX_CM_RETRIES: u8 = 15;

/// A QP asks for ACKs on demand only when its retransmit timeout is at
/// least this many times [`HcaConfig::ack_probe_ns`].
pub const ACK_PROBE_TIMEOUT_FACTOR: u64 = 4;

/// The first QPN handed out: 0 and 1 are the special QPs, 2..15 reserved
/// as in rxe.
pub const FIRST_QPN: u32 = 16;

/// The IPv4 identification policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4IdPolicy {
    /// One counter per device, incremented per packet (as rxe's kernel
    /// path does per destination): for transports that write the IP header
    /// themselves (simulated fabric, L2).
    Counter,
    /// Always 0: what Linux writes for a DF datagram from an unconnected
    /// UDP socket, so the UDP runtime's ICRC covers what the kernel sends.
    Zero,
}

/// Which UDP source port a QP's packets carry. The port only spreads flows
/// over ECMP paths: receivers (rxe among them) accept any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourcePortPolicy {
    /// A port per QP, hashed from its QP numbers as rxe does
    /// (`uroce_wire::udp_port`): bit-exact with rxe's packets.
    #[default]
    PerQp,
    /// Every QP of the device sends from one port, `udp_port::SPORT_BASE`
    /// (0xC000). Over kernel UDP, a port is a socket and the kernel batches
    /// (GSO, GRO) only one socket's datagrams to one peer: with many QPs,
    /// one port lets their packets leave and arrive in batches instead of
    /// one system call each, at the cost of ECMP spread.
    Shared,
}

impl SourcePortPolicy {
    /// Reads `per-qp` or `shared`.
    pub fn parse(text: &str) -> Option<SourcePortPolicy> {
        match text.trim() {
            "per-qp" | "rxe" => Some(SourcePortPolicy::PerQp),
            "shared" | "one" => Some(SourcePortPolicy::Shared),
            _ => None,
        }
    }
}

impl Default for HcaConfig {
    /// Linux rxe's limits, with table sizes trimmed to what one process
    /// needs (a user-space device serves one application).
    fn default() -> HcaConfig {
        HcaConfig {
            max_qp: 16_384,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_inline_data: 400,
            max_cq: 16_384,
            max_cqe: (1 << 15) - 1,
            max_mr: 65_536,
            max_mr_size: u64::MAX,
            max_pd: 0x7ffc,
            max_ah: 16_384,
            max_srq: 960,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 8192 * 56,
            max_qp_init_rd_atom: 128,
            max_qp_rd_atom: 128,
            max_msg_size: 0x80_0000,
            active_mtu: Mtu::Mtu4096,
            page_shift: 12,
            max_packets_per_turn: 64,
            max_burst_packets: 4,
            max_unacked_psns: 128,
            max_device_unacked_psns: 1024,
            max_pkt_per_ack: 64,
            ack_probe_ns: 1_000_000,
            ipv4_id: Ipv4IdPolicy::Counter,
            source_ports: SourcePortPolicy::PerQp,
            cm_seed: 0,
            cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            cm_max_retries: CMA_MAX_CM_RETRIES,
        }
    }
}

impl HcaConfig {
    /// Checks the configuration for values the HCA cannot work with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(bool, &'static str); 12] = [
            (self.max_qp >= 1 && self.max_qp <= 0x00ff_ffff - FIRST_QPN, "max_qp"),
            (self.max_qp_wr >= 1, "max_qp_wr"),
            (self.max_sge >= 1 && self.max_sge <= 64, "max_sge"),
            (self.max_cqe >= 1, "max_cqe"),
            (self.max_mr >= 1 && self.max_mr < (1 << 24), "max_mr (MPT index is 24 bits)"),
            ((9..=30).contains(&self.page_shift), "page_shift"),
            (self.max_packets_per_turn >= 1, "max_packets_per_turn"),
            (self.max_burst_packets >= 1, "max_burst_packets"),
            (self.max_device_unacked_psns >= 1, "max_device_unacked_psns"),
            (self.max_unacked_psns >= 1 && self.max_unacked_psns < (1 << 22), "max_unacked_psns"),
            (self.cm_response_timeout <= 31, "cm_response_timeout (an exponent, 0..=31)"),
            (self.cm_max_retries <= 15, "cm_max_retries (4 bits, 0..=15)"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, field)) => Err(ConfigError(field)),
            None => Ok(()),
        }
    }
}

/// A configuration value out of range; the text names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad HCA configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}
