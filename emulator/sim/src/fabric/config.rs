//! How a fabric behaves, and what it counted.

use uroce_faults::FaultConfig;

/// How the fabric behaves. Everything a run does is a function of this and
/// of what the driver does between steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricConfig {
    /// Seed of the fabric's one generator.
    pub seed: u64,
    /// One-way latency of every packet, in nanoseconds, from the moment it
    /// has left the sender's port to its delivery.
    pub latency_ns: u64,
    /// Up to this much more latency per packet, drawn from the seed (0:
    /// none, every latency is `latency_ns`). A link stays FIFO: jitter
    /// moves when packets arrive, never their order on one link, so a seed
    /// picks one interleaving of the nodes' traffic without any fault.
    pub latency_jitter_ns: u64,
    /// Speed of each node's port: a packet of `len` bytes occupies it for
    /// `len * 8 / rate` seconds, and packets leave a port one after the
    /// other. `None`: infinitely fast, every packet leaves when emitted.
    pub port_rate_bits_per_sec: Option<u64>,
    /// Packets in flight at most (duplicates included). A packet that would
    /// exceed it is dropped and counted in
    /// [`FabricCounters::dropped_overflow`], as a switch drops on a full
    /// buffer.
    pub max_in_flight: usize,
    /// Packets taken from one endpoint's `poll_transmit` per step at most;
    /// the rest wait for the next step, at the same virtual time.
    pub max_transmits_per_poll: usize,
    /// Steps that may run at one virtual instant before the fabric declares
    /// a livelock (an endpoint whose timer never moves past now, or a
    /// zero-latency ping-pong) and panics with the seed.
    pub max_steps_per_instant: u64,
    /// How many of the last trace events to keep for reading (0: none; the
    /// trace hash covers every event regardless).
    pub trace_log_capacity: usize,
    /// Whether the trace's send and delivery events carry the
    /// [`packet_digest`](crate::packet_digest) of the packet's bytes
    /// (`true`, the default: the trace hash then covers every byte on the
    /// wire; about 8 bytes a cycle); a driver that wants the engine alone
    /// and no content check sets `false`, and the events carry digest 0
    /// (the hash still covers every event, its time and length).
    pub trace_packet_digests: bool,
    /// Faults.
    pub faults: FaultConfig,
}

impl FabricConfig {
    /// A lossless fabric with 2 µs latency, infinitely fast ports and
    /// generous bounds.
    pub const fn new(seed: u64) -> FabricConfig {
        FabricConfig {
            seed,
            latency_ns: 2_000,
            latency_jitter_ns: 0,
            port_rate_bits_per_sec: None,
            max_in_flight: 1 << 16,
            max_transmits_per_poll: 64,
            max_steps_per_instant: 100_000,
            trace_log_capacity: 0,
            trace_packet_digests: true,
            faults: FaultConfig::NONE,
        }
    }

    pub(super) fn assert_valid(&self) {
        assert!(self.max_in_flight > 0, "FabricConfig: max_in_flight is 0");
        assert!(self.max_transmits_per_poll > 0, "FabricConfig: max_transmits_per_poll is 0");
        assert!(self.max_steps_per_instant > 0, "FabricConfig: max_steps_per_instant is 0");
        assert!(self.port_rate_bits_per_sec != Some(0), "FabricConfig: port rate of 0 bit/s");
        self.faults.assert_valid();
    }
}

impl Default for FabricConfig {
    fn default() -> FabricConfig {
        FabricConfig::new(0)
    }
}

/// What the fabric did, counted. Every packet an endpoint emits is `sent`
/// once and then either dropped once (by the first reason that applies) or
/// delivered; a duplicate adds one to `duplicated` and, if it makes it, one
/// to `delivered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FabricCounters {
    /// Packets endpoints emitted.
    pub sent: u64,
    /// Packets handed to a receiver (duplicates included).
    pub delivered: u64,
    /// Dropped by random loss.
    pub dropped_loss: u64,
    /// Dropped for exceeding the MTU.
    pub dropped_mtu: u64,
    /// Dropped by a link down or a partition.
    pub dropped_partition: u64,
    /// Dropped because no endpoint owns the destination address.
    pub dropped_no_route: u64,
    /// Dropped because [`FabricConfig::max_in_flight`] packets were in
    /// flight.
    pub dropped_overflow: u64,
    /// Dropped by a targeted rule.
    pub dropped_rule: u64,
    /// Second copies made (randomly or by a rule).
    pub duplicated: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Packets held back by reordering jitter.
    pub delayed_reorder: u64,
    /// Packets held back by a rule.
    pub delayed_rule: u64,
    /// Times any rule fired (per rule: [`Fabric::rule`](crate::Fabric::rule)).
    pub rule_hits: u64,
    /// Endpoint timers fired.
    pub timeouts: u64,
    /// Copies handed to the mirror port ([`Fabric::set_mirror`](crate::Fabric::set_mirror)).
    pub mirrored: u64,
    /// Dropped at a port by a scenario's `drop` rule or background loss
    /// ([`Fabric::with_ports`](crate::Fabric::with_ports); its `link_down`
    /// and `partition` count in `dropped_partition`). A scenario's extra
    /// copies count in `duplicated`, its bit flips in `corrupted`.
    pub dropped_scenario: u64,
    /// Packets held back at a port by a scenario (`delay`, background
    /// reordering).
    pub delayed_scenario: u64,
    /// Packets a port held for a `reorder` rule (each goes on later, under
    /// a new number).
    pub held_scenario: u64,
    /// Scenario rules fired, at every port.
    pub scenario_firings: u64,
    /// Device faults the ports handed out.
    pub device_faults: u64,
}

impl FabricCounters {
    /// Every packet dropped, for whatever reason.
    pub const fn dropped(&self) -> u64 {
        self.dropped_loss
            + self.dropped_mtu
            + self.dropped_partition
            + self.dropped_no_route
            + self.dropped_overflow
            + self.dropped_rule
            + self.dropped_scenario
    }
}
