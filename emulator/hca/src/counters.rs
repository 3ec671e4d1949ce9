//! Device counters, named as Linux rxe names its `hw_counters`.

/// Counters of one HCA. Every drop and every protocol event is counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Counters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received and accepted for processing.
    pub rcvd_pkts: u64,
    /// Requests received again (duplicates) and answered from state.
    pub duplicate_request: u64,
    /// Requests received ahead of the expected PSN.
    pub out_of_seq_request: u64,
    /// RNR NAKs received (requester).
    pub rcvd_rnr_err: u64,
    /// RNR NAKs sent (responder).
    pub send_rnr_err: u64,
    /// PSN sequence error NAKs received (requester).
    pub rcvd_seq_err: u64,
    /// Requester go-backs (after a timeout, a sequence NAK, an RNR NAK or
    /// an implied NAK).
    pub completer_retry_err: u64,
    /// ACK probes sent: last packets sent again with AckReq after a
    /// message went without one ([`crate::config::HcaConfig::ack_probe_ns`];
    /// not go-backs, not in `completer_retry_err`).
    pub ack_probes: u64,
    /// Transport retries exhausted.
    pub retry_exceeded_err: u64,
    /// RNR retries exhausted.
    pub retry_rnr_exceeded_err: u64,
    /// Received packets whose ICRC, IPv4 checksum or UDP checksum failed.
    pub rcvd_icrc_err: u64,
    /// Received packets that are not well-formed RoCEv2.
    pub rcvd_malformed: u64,
    /// Received packets for no QP, or a QP that cannot take them.
    pub rcvd_unknown_qp: u64,
    /// Received packets dropped for a bad P_Key, Q_Key or address.
    pub rcvd_bad_key_or_addr: u64,
    /// Responses that matched nothing outstanding (dropped).
    pub rcvd_ghost_response: u64,
    /// NAKs sent, of any kind but RNR.
    pub send_nak: u64,
    /// Link down events: kept for rxe's name; an in-process device has no
    /// link of its own to lose (runtimes with real links count theirs).
    pub link_downed: u64,
    /// Completion queue overruns.
    pub cq_overrun: u64,
    /// WQEs refused as malformed (local error completions).
    pub bad_wqe: u64,
    /// Host memory faults met on the DMA path: accesses through a memory
    /// key (a gather, a placement, a READ response, an atomic) that found
    /// registered memory the application freed. Counted once per access,
    /// by the memory tables ([`crate::mr::MemoryTables::dma_faults`]). A
    /// queue ring that faults is not counted here: its queue fails
    /// instead.
    pub dma_faults: u64,
    /// MADs QP1 took and handed to the CM.
    pub rcvd_mads: u64,
    /// MADs QP1 sent for the CM.
    pub sent_mads: u64,
    /// Packets to QP1 that are not a UD SEND_ONLY of one 256-byte MAD with
    /// the GSI Q_Key (dropped; also counted in `rcvd_unknown_qp`, so that
    /// every packet received lands in `rcvd_pkts` or one drop counter of
    /// the receive path, as before QP1 existed).
    pub rcvd_gsi_drop: u64,
    /// Multicast packets (to QPN 0xFFFFFF) taken for a group with QPs
    /// attached (each also in `rcvd_pkts`, once however many QPs it
    /// reaches, as rxe counts).
    pub rcvd_mcast_pkts: u64,
    /// Multicast packets for a group no QP is attached to (dropped; also
    /// counted in `rcvd_unknown_qp`).
    pub rcvd_mcast_drop: u64,
    /// MADs the CM wanted sent that could not be (no local address of the
    /// peer's IP version).
    pub mad_send_err: u64,
    /// Receive-consuming requests an injected [`crate::DeviceFault::Rnr`]
    /// refused: on RC each is an RNR NAK (also in `send_rnr_err`), on
    /// UC/UD a dropped message.
    pub injected_rnr: u64,
    /// R_Key checks an injected [`crate::DeviceFault::FailKeyCheck`]
    /// failed (each NAK also in `send_nak`).
    pub injected_key_fail: u64,
    /// Responder memory accesses an injected
    /// [`crate::DeviceFault::DmaFault`] faulted (each NAK also in
    /// `send_nak`).
    pub injected_dma_fault: u64,
    /// Requests dropped by a responder stalled by an injected
    /// [`crate::DeviceFault::StallResponder`].
    pub rcvd_stalled_drop: u64,
    /// QPs killed by an injected [`crate::DeviceFault::Crash`].
    pub killed_qps: u64,
}

impl Counters {
    /// Every counter with its name, for `devinfo`-style dumps.
    pub fn named(&self) -> [(&'static str, u64); 32] {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_request", self.out_of_seq_request),
            ("rcvd_rnr_err", self.rcvd_rnr_err),
            ("send_rnr_err", self.send_rnr_err),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("completer_retry_err", self.completer_retry_err),
            ("ack_probes", self.ack_probes),
            ("retry_exceeded_err", self.retry_exceeded_err),
            ("retry_rnr_exceeded_err", self.retry_rnr_exceeded_err),
            ("rcvd_icrc_err", self.rcvd_icrc_err),
            ("rcvd_malformed", self.rcvd_malformed),
            ("rcvd_unknown_qp", self.rcvd_unknown_qp),
            ("rcvd_bad_key_or_addr", self.rcvd_bad_key_or_addr),
            ("rcvd_ghost_response", self.rcvd_ghost_response),
            ("send_nak", self.send_nak),
            ("link_downed", self.link_downed),
            ("cq_overrun", self.cq_overrun),
            ("bad_wqe", self.bad_wqe),
            ("dma_faults", self.dma_faults),
            ("rcvd_mads", self.rcvd_mads),
            ("sent_mads", self.sent_mads),
            ("rcvd_gsi_drop", self.rcvd_gsi_drop),
            ("mad_send_err", self.mad_send_err),
            ("rcvd_mcast_pkts", self.rcvd_mcast_pkts),
            ("rcvd_mcast_drop", self.rcvd_mcast_drop),
            ("injected_rnr", self.injected_rnr),
            ("injected_key_fail", self.injected_key_fail),
            ("injected_dma_fault", self.injected_dma_fault),
            ("rcvd_stalled_drop", self.rcvd_stalled_drop),
            ("killed_qps", self.killed_qps),
        ]
    }
}
