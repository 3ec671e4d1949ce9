//! The simulated fabric: N endpoints in one thread, virtual time, one
//! seeded generator and a fault model, in the style of TigerBeetle's VOPR.
//!
//! A [`Fabric`] owns the endpoints (anything that implements
//! [`Endpoint`](uroce_hca::Endpoint), the HCA included) and carries the IP
//! packets they emit to one another after a configured latency, applying
//! faults on the way:
//!
//! | fault | how | counted in |
//! | --- | --- | --- |
//! | loss | [`FaultConfig::loss`] | `dropped_loss` |
//! | duplication | [`FaultConfig::duplicate`] | `duplicated` |
//! | reordering | [`FaultConfig::reorder`]: extra delay up to [`FaultConfig::reorder_max_delay_ns`] | `delayed_reorder` |
//! | bit corruption | [`FaultConfig::corrupt`]: one bit the ICRC covers | `corrupted` |
//! | MTU | [`FaultConfig::mtu_bytes`] | `dropped_mtu` |
//! | link down, partition | [`Fabric::link_down`], [`Fabric::partition`] over an interval | `dropped_partition` |
//! | targeted rules | [`Fabric::add_rule`]: drop, duplicate or delay the n-th packet matching opcode, QPN, PSN, direction | `dropped_rule`, `duplicated`, `delayed_rule`, [`RuleState::hits`] |
//! | a scenario | [`Fabric::with_ports`]: one [`Port`] per node sees its egress and ingress; drop, duplicate, delay, reorder, corrupt, link down and partitions (as outages), device faults handed out ([`Fabric::take_device_faults`]) | `dropped_scenario`, `dropped_partition`, `duplicated`, `delayed_scenario`, `held_scenario`, `corrupted`, `scenario_firings`, `device_faults`, [`Fabric::firings`] |
//!
//! [`Fabric::heal`] turns every fault off for a liveness phase.
//!
//! ```
//! use core::net::{IpAddr, Ipv4Addr};
//! use uroce_sim::{Fabric, FabricConfig, FaultConfig, NodeId, Probability};
//! use uroce_hca::{Endpoint, Instant, Transmit};
//!
//! /// Sends `left` 20-byte packets to `peer` and counts what arrives.
//! struct Toy { addr: [IpAddr; 1], peer: IpAddr, left: u32, received: u32 }
//!
//! impl Endpoint for Toy {
//!     fn addresses(&self) -> &[IpAddr] { &self.addr }
//!     fn receive(&mut self, _now: Instant, _packet: &[u8]) { self.received += 1 }
//!     fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
//!         self.left = self.left.checked_sub(1)?;
//!         buf[..20].fill(0x45);
//!         Some(Transmit::new(self.peer, 20))
//!     }
//!     fn poll_timeout(&self) -> Option<Instant> { None }
//!     fn handle_timeout(&mut self, _now: Instant) {}
//! }
//!
//! let (a, b) = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
//! let toy = |addr, peer| Toy { addr: [addr], peer, left: 1_000, received: 0 };
//! let faults = FaultConfig { loss: Probability::from_percent(10), ..FaultConfig::NONE };
//! let config = FabricConfig { faults, ..FabricConfig::new(42) };
//! let mut fabric = Fabric::new(config, vec![toy(a, b), toy(b, a)]);
//! assert!(fabric.run_until_idle(Instant::from_nanos(1_000_000)));
//!
//! let counters = fabric.counters();
//! assert_eq!(counters.sent, 2_000);
//! assert_eq!(counters.delivered + counters.dropped_loss, 2_000);
//! assert_eq!(fabric.endpoint(NodeId(1)).received as u64 + fabric.endpoint(NodeId(0)).received as u64,
//!            counters.delivered);
//! println!("seed 42: trace {:016x}", fabric.trace_hash()); // the same on every run
//! ```
//!
//! # Determinism
//!
//! A run is a pure function of the [`FabricConfig`] (its seed included), the
//! endpoints and what the driver does between steps:
//!
//! * time is virtual: the clock moves only to the next event;
//! * all randomness comes from one [`SimRng`] (xoshiro256**, specified in
//!   `uroce-faults`, which the real runtime's fault injector shares), with
//!   a fixed number of draws per packet sent ([`uroce_faults::Fate`]);
//! * ties are broken by order: packets due at the same instant are
//!   delivered in send order, endpoints are polled and their timers fired
//!   in node order, rules are checked in the order added;
//! * no hash map, no clock, no thread, no OS randomness.
//!
//! Every event (send, drop and why, duplicate, corrupt and which bit, delay,
//! rule fired, deliver, timer fired) is folded with its virtual time and
//! node ids into a stable 64-bit FNV-1a hash, [`Fabric::trace_hash`]: the
//! same seed gives the same hash, on every machine.
//!
//! # Bounds
//!
//! Packets in flight ([`FabricConfig::max_in_flight`]: beyond it a packet is
//! dropped and counted as `dropped_overflow`), packets taken from an
//! endpoint per step ([`FabricConfig::max_transmits_per_poll`]), steps at
//! one instant ([`FabricConfig::max_steps_per_instant`]: beyond it the
//! fabric panics with the seed, as an endpoint livelocks), rules
//! ([`MAX_RULES`]), outages ([`MAX_OUTAGES`]), the trace log
//! ([`FabricConfig::trace_log_capacity`]).
//!
//! # Observing
//!
//! [`Fabric::counters`], [`Fabric::trace`] (the last events, readable), and
//! a pcap capture ([`Fabric::start_capture`]) of the packets sent and/or
//! delivered, wrapped in Ethernet with made-up addresses ([`node_mac`]) and
//! stamped with the virtual time, for tshark or `uroce decode`.
//!
//! A node can also watch the wire itself: [`Fabric::set_mirror`] makes it
//! a mirror port (a switch's SPAN port) that gets a copy of every packet
//! delivered, as an Ethernet frame whose MACs name the receiver and the
//! sender, right after the receiver took it. The copy is synchronous and
//! queues nothing; a passive mirror leaves the trace hash as it was. The
//! swarm's adversary (`uroce sim --adversary`) is such a node: it samples
//! what it sees and sends replays and stale packets of its own (from its
//! `poll_transmit`, like [`Fabric::inject`]: they meet the faults, rules
//! and latency every packet meets).

mod capture;
mod fabric;
mod fault;
mod trace;

pub use capture::{node_mac, CapturePoint, SharedBuffer, NO_ROUTE_MAC};
pub use fabric::{
    DeviceFaultHandler, Fabric, FabricConfig, FabricCounters, MAX_DEVICE_FAULTS, MAX_FIRINGS,
    MAX_NODES, MAX_OUTAGES, MAX_RULES,
};
pub use fault::{Cut, Outage};
pub use trace::{packet_digest, DelayReason, DropReason, Fnv64, Trace, TraceEvent};
/// The scenario engine the fabric's ports run ([`Fabric::with_ports`]).
pub use uroce_faults::scenario;
pub use uroce_faults::scenario::{
    DeviceAction, DeviceActionKind, DeviceInfo, Firing, Port, Scenario, ScenarioError,
};
pub use uroce_faults::{
    Action, BthFacts, FaultConfig, Fire, Matcher, NodeId, PacketFacts, Probability, Rule, RuleId,
    RuleState, SimRng,
};
