//! What the runtime counts (the HCA counts protocol events itself).

use crate::link::LinkStats;

/// What the runtime counted (the HCA counts protocol events itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams taken from the socket (a GRO run counts its datagrams).
    pub rx_datagrams: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub rx_batches: u64,
    /// Datagrams that cannot be a RoCE packet or came from a source of
    /// another address family; dropped before the HCA.
    pub rx_dropped: u64,
    /// ACKs received behind a packet that completed work for a waiting
    /// application and handed to the HCA after its next send.
    pub rx_acks_later: u64,
    /// Packets the HCA handed out.
    pub tx_packets: u64,
    /// Of those, packets to a multicast group.
    pub tx_mcast_packets: u64,
    /// Datagrams taken from multicast group sockets (also in
    /// `rx_datagrams`).
    pub rx_mcast_datagrams: u64,
    /// Multicast groups joined (a group socket opened: the device's first
    /// QP attached to it).
    pub mcast_joins: u64,
    /// Multicast groups left (the group's last QP detached).
    pub mcast_leaves: u64,
    /// Groups that could not be joined (the socket or the membership was
    /// refused: the attached QPs get only what reaches the device's own
    /// address).
    pub mcast_join_errors: u64,
    /// Send system calls (a `sendmmsg` of many datagrams and GSO runs
    /// counts once).
    pub tx_calls: u64,
    /// GSO runs sent (each a run of packets the kernel cut into datagrams).
    pub tx_gso_runs: u64,
    /// Sends the kernel refused (the packet is lost; the transport's
    /// retransmission recovers it).
    pub tx_errors: u64,
    /// GSO sends the kernel refused (offload is then turned off; the
    /// packets leave singly).
    pub tx_gso_refused: u64,
    /// Packets sent from port 4791 because the QP's own source port could
    /// not be bound (the HCA settled them on 4791 before their ICRC:
    /// [`uroce_hca::Hca::refuse_source_port`]).
    pub tx_port_fallbacks: u64,
    /// Send doorbells held to leave with a later call (rung back to back:
    /// see `doorbells.rs`).
    pub tx_doorbells_held: u64,
    /// Packets the fault injector dropped.
    pub faults_lost: u64,
    /// Extra copies the fault injector sent.
    pub faults_duplicated: u64,
    /// Copies of packets the fault injector held back (a line delay or a
    /// reordering).
    pub faults_delayed: u64,
    /// Copies of packets the fault injector corrupted.
    pub faults_corrupted: u64,
    /// Times the background thread progressed the device.
    pub background_steps: u64,
    /// Times the background thread, while the application drove, found
    /// the device held by the application's thread and looked again later
    /// instead of waiting for it (`docs/runtime.md`).
    pub background_busy_looks: u64,
    /// Frames that could not be written to the capture file (from the
    /// first write error on, the capture stops: every frame after it
    /// counts).
    pub capture_errors: u64,
    /// The receive buffer the kernel granted the socket (bounded by
    /// `net.core.rmem_max`): bursts beyond it are dropped and retransmitted.
    pub receive_buffer_bytes: usize,
    /// The background thread stopped on a panic (a bug): the device still
    /// moves on the application's own verbs calls, not on its own.
    pub background_failed: bool,
    /// The L2 transport's host (zero without `UROCE_LINK`).
    pub link: LinkStats,
}

impl UdpStats {
    /// Every counter with its name (`link_` in front of the L2
    /// transport's), for reports: the receive buffer's size and the
    /// link's table sizes are not counters, and are left out;
    /// `background_failed` counts 1 when the background thread failed.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let mut named = vec![
            ("rx_datagrams", self.rx_datagrams),
            ("rx_batches", self.rx_batches),
            ("rx_dropped", self.rx_dropped),
            ("rx_acks_later", self.rx_acks_later),
            ("tx_packets", self.tx_packets),
            ("tx_mcast_packets", self.tx_mcast_packets),
            ("rx_mcast_datagrams", self.rx_mcast_datagrams),
            ("mcast_joins", self.mcast_joins),
            ("mcast_leaves", self.mcast_leaves),
            ("mcast_join_errors", self.mcast_join_errors),
            ("tx_calls", self.tx_calls),
            ("tx_gso_runs", self.tx_gso_runs),
            ("tx_errors", self.tx_errors),
            ("tx_gso_refused", self.tx_gso_refused),
            ("tx_port_fallbacks", self.tx_port_fallbacks),
            ("tx_doorbells_held", self.tx_doorbells_held),
            ("faults_lost", self.faults_lost),
            ("faults_duplicated", self.faults_duplicated),
            ("faults_delayed", self.faults_delayed),
            ("faults_corrupted", self.faults_corrupted),
            ("background_steps", self.background_steps),
            ("background_busy_looks", self.background_busy_looks),
            ("capture_errors", self.capture_errors),
            ("background_failed", u64::from(self.background_failed)),
        ];
        named.extend(self.link.named());
        named
    }
}
