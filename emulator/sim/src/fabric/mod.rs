//! The fabric: endpoints, the packets between them, virtual time
//! (`config.rs`: its configuration and counters; `send.rs`: a packet's way
//! through the rules, the faults and the latency).

mod config;
mod jitter;
mod outages;
mod packet;
mod queue;
mod scenario;
mod send;
mod watch;

pub use config::{FabricConfig, FabricCounters};
use packet::Packet;
use queue::InFlightQueue;
pub use scenario::{DeviceFaultHandler, MAX_DEVICE_FAULTS, MAX_FIRINGS};

use super::capture::Capture;
use super::fault::Outage;
use super::trace::{packet_digest, Trace, TraceEvent};
use super::NodeId;
use core::net::IpAddr;
use uroce_faults::SimRng;
use uroce_faults::{RuleId, RuleState};
use uroce_hca::endpoint::{Endpoint, MAX_PACKET_LEN};
use uroce_hca::time::Instant;

/// The most endpoints a fabric holds.
pub const MAX_NODES: usize = 1 << 16;
/// The most targeted rules a fabric holds.
pub const MAX_RULES: usize = 1 << 10;
/// The most outages (link downs, partitions) a fabric holds at once.
pub const MAX_OUTAGES: usize = 1 << 12;
/// Packet buffers kept for reuse after delivery.
const MAX_POOLED_BUFFERS: usize = 1 << 10;

/// A packet on the wire.
#[derive(Debug)]
struct InFlight {
    from: NodeId,
    to: NodeId,
    bytes: Packet,
    /// FNV-1a 64 of `bytes`, known while they are as sent (not corrupted):
    /// the delivery's trace event reuses it instead of hashing again.
    digest: Option<u64>,
    /// What a scenario attached to it (never without ports).
    scenario: Option<Box<Riding>>,
}

/// What rides with a packet in flight when a scenario acted on it.
#[derive(Debug)]
struct Riding {
    /// Device faults its receiver's port decided: handed out just before
    /// it is delivered.
    device: Vec<uroce_faults::scenario::DeviceAction>,
    /// The firings on it, for the capture.
    comment: Option<String>,
}

/// A deterministic network of endpoints in one thread, in virtual time.
///
/// The fabric owns the endpoints (node `i` is `endpoints[i]`), carries
/// every IP packet one emits to the endpoint whose
/// [`Endpoint::addresses`] hold its destination, and applies the fault
/// model on the way. Nothing in it reads a clock, the OS's randomness or a
/// hash map's order: a run is a pure function of the configuration, the
/// endpoints and what the driver does between steps, and
/// [`Fabric::trace_hash`] tells two runs apart.
///
/// Drive it with [`Fabric::step`], [`Fabric::run_until`],
/// [`Fabric::run_until_idle`] or [`Fabric::run_until_condition`]; between
/// calls the driver may act on endpoints through [`Fabric::endpoint_mut`]
/// (post work, poll completions): every step starts by draining every
/// endpoint's `poll_transmit`.
///
/// # A step
///
/// 1. take what every endpoint has to send, node 0 first, at most
///    [`FabricConfig::max_transmits_per_poll`] each, applying the faults;
/// 2. advance the clock to the next event: the earliest delivery or
///    endpoint timeout;
/// 3. deliver every packet due (ties in send order);
/// 4. fire every timer due (node 0 first);
/// 5. drain `poll_transmit` again.
///
/// # What happens to a sent packet, in order
///
/// 1. it leaves the sender's port (after the packets before it, when
///    [`FabricConfig::port_rate_bits_per_sec`] is set);
/// 2. its random fate is drawn (ten draws, always);
/// 3. every active rule sees it, in order; each that fires is counted;
/// 4. dropped if no endpoint owns the destination, if it exceeds the MTU,
///    if a rule dropped it, if an outage cuts the path at send time, or if
///    lost, by the first of these that applies;
/// 5. duplicated (randomly or by a rule): one more copy;
/// 6. each copy: maybe corrupted, maybe held back (rule delay plus
///    reordering jitter), then put in flight, or dropped if
///    [`FabricConfig::max_in_flight`] are already.
pub struct Fabric<E: Endpoint> {
    config: FabricConfig,
    endpoints: Vec<E>,
    now: Instant,
    rng: SimRng,
    /// Packets in flight, by (delivery time, packet number): a total order.
    in_flight: InFlightQueue,
    /// When each node's port is free again.
    port_free_at: Vec<Instant>,
    next_packet: u64,
    outages: Vec<Outage>,
    rules: Vec<RuleState>,
    counters: FabricCounters,
    trace: Trace,
    capture: Option<Capture>,
    /// The mirror port, if any, and the buffer its frames are built in.
    mirror: Option<NodeId>,
    mirror_frame: Vec<u8>,
    pool: Vec<Vec<u8>>,
    /// Some endpoint may still have packets to send (its poll hit the bound).
    backlog: bool,
    steps_at_instant: u64,
    /// The ports of a scenario ([`Fabric::with_ports`]).
    scenario: Option<Box<scenario::Scenario>>,
    device_handler: Option<DeviceFaultHandler<E>>,
    /// Latency jitter's generator and each link's last arrival.
    jitter: jitter::Jitter,
}

impl<E: Endpoint> core::fmt::Debug for Fabric<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fabric")
            .field("config", &self.config)
            .field("nodes", &self.endpoints.len())
            .field("now", &self.now)
            .field("in_flight", &self.in_flight.len())
            .field("counters", &self.counters)
            .field("trace_hash", &format_args!("{:016x}", self.trace.hash()))
            .finish_non_exhaustive()
    }
}

impl<E: Endpoint> Fabric<E> {
    /// A fabric of `endpoints` (node `i` is `endpoints[i]`) at time zero.
    pub fn new(config: FabricConfig, endpoints: Vec<E>) -> Fabric<E> {
        config.assert_valid();
        assert!(!endpoints.is_empty(), "Fabric::new without endpoints");
        assert!(endpoints.len() <= MAX_NODES, "Fabric::new: more than {MAX_NODES} endpoints");
        let nodes = endpoints.len();
        Fabric {
            rng: SimRng::new(config.seed),
            jitter: jitter::Jitter::new(&config),
            trace: Trace::new(config.trace_log_capacity),
            config,
            endpoints,
            now: Instant::ZERO,
            in_flight: InFlightQueue::default(),
            port_free_at: vec![Instant::ZERO; nodes],
            next_packet: 0,
            outages: Vec::new(),
            rules: Vec::new(),
            counters: FabricCounters::default(),
            capture: None,
            mirror: None,
            mirror_frame: Vec::new(),
            pool: Vec::new(),
            backlog: true,
            steps_at_instant: 0,
            scenario: None,
            device_handler: None,
        }
    }

    /// Puts `bytes` on the fabric as if node `from` had sent them to
    /// `destination` now: a forged, replayed or hand-made packet (the
    /// source address inside is whatever the bytes say). It meets the
    /// faults, rules and latency every packet meets.
    pub fn inject(&mut self, from: NodeId, destination: IpAddr, bytes: Vec<u8>) {
        self.check_node(from);
        self.send(from, destination, Packet::from_vec(bytes), None);
    }

    // ----- reading -----

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The configuration (with the faults as they are now).
    pub fn config(&self) -> &FabricConfig {
        &self.config
    }

    /// The endpoints; index = node id.
    pub fn endpoints(&self) -> &[E] {
        &self.endpoints
    }

    /// One endpoint.
    pub fn endpoint(&self, node: NodeId) -> &E {
        &self.endpoints[self.check_node(node)]
    }

    /// One endpoint, for the driver to act on between steps. Whatever it
    /// queues is taken at the start of the next step.
    pub fn endpoint_mut(&mut self, node: NodeId) -> &mut E {
        let i = self.check_node(node);
        self.backlog = true;
        &mut self.endpoints[i]
    }

    /// Every endpoint, for the driver to act on between steps.
    pub fn endpoints_mut(&mut self) -> &mut [E] {
        self.backlog = true;
        &mut self.endpoints
    }

    /// A generator for the driver's workload, seeded from the fabric's
    /// (one draw). Fork it at the same point of every run and keep its
    /// draws apart from the fabric's, so a workload change does not shift
    /// the faults.
    pub fn fork_rng(&mut self) -> SimRng {
        self.rng.fork()
    }

    /// Gives the endpoints back.
    pub fn into_endpoints(self) -> Vec<E> {
        self.endpoints
    }

    /// How many nodes.
    pub fn node_count(&self) -> usize {
        self.endpoints.len()
    }

    /// What the fabric did so far.
    pub fn counters(&self) -> &FabricCounters {
        &self.counters
    }

    /// Packets in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The hash of every event so far: equal for runs that did the same
    /// things at the same virtual times.
    pub fn trace_hash(&self) -> u64 {
        self.trace.hash()
    }

    /// The trace: its hash, event count and last events
    /// ([`FabricConfig::trace_log_capacity`]).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The node that owns `address`, if any (the lowest node id when
    /// several do).
    pub fn route(&self, address: IpAddr) -> Option<NodeId> {
        self.endpoints.iter().position(|e| e.addresses().contains(&address)).map(NodeId)
    }

    /// A rule and its counts.
    pub fn rule(&self, id: RuleId) -> &RuleState {
        &self.rules[id.0]
    }

    /// Every rule, in the order added.
    pub fn rules(&self) -> &[RuleState] {
        &self.rules
    }

    /// The outages still scheduled or running.
    pub fn outages(&self) -> &[Outage] {
        &self.outages
    }

    // ----- driving -----

    /// When the next event happens: now if some endpoint may have packets
    /// to send, else the earliest delivery or timer; `None` if nothing will
    /// ever happen without the driver.
    pub fn next_event(&self) -> Option<Instant> {
        if self.backlog {
            return Some(self.now);
        }
        let delivery = self.in_flight.first_key().map(|(at, _)| at);
        let timer = self.endpoints.iter().filter_map(Endpoint::poll_timeout).min();
        let mut next = match (delivery, timer) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        if let Some(port) = self.scenario.as_ref().and_then(|s| s.next_deadline()) {
            next = Some(next.map_or(port, |n| n.min(port)));
        }
        Some(next?.max(self.now))
    }

    /// Runs one step (see [`Fabric`]): sends what endpoints have, advances
    /// to the next event and handles it. Returns the time of the event, or
    /// `None` when nothing is left to happen.
    pub fn step(&mut self) -> Option<Instant> {
        self.drain_transmits();
        let next = self.next_event()?;
        self.advance_to(next);
        Some(self.now)
    }

    /// Runs every event up to and including `deadline`, then sets the clock
    /// to `deadline` (if later). Give a finite deadline: with
    /// [`Instant::FAR_FUTURE`] the clock would end there.
    pub fn run_until(&mut self, deadline: Instant) {
        self.run_until_condition(deadline, |_| false);
        self.now = self.now.max(deadline);
    }

    /// Runs until `done` holds (checked before each step) or the next
    /// event is after `deadline`. Returns whether `done` held. The clock
    /// stays at the last event.
    pub fn run_until_condition(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut(&mut Fabric<E>) -> bool,
    ) -> bool {
        loop {
            self.drain_transmits();
            if done(self) {
                return true;
            }
            match self.next_event() {
                Some(at) if at <= deadline => self.advance_to(at),
                _ => return false,
            }
        }
    }

    /// Runs until the fabric is idle — nothing in flight, nothing to send,
    /// no timer due at or before `max_time` — and returns `true`; or, if
    /// packets are still in flight past `max_time`, stops there with the
    /// clock at `max_time` and returns `false`.
    pub fn run_until_idle(&mut self, max_time: Instant) -> bool {
        loop {
            self.drain_transmits();
            let timer_due =
                self.endpoints.iter().filter_map(Endpoint::poll_timeout).any(|t| t <= max_time);
            let port_due = self
                .scenario
                .as_ref()
                .and_then(|s| s.next_deadline())
                .is_some_and(|t| t <= max_time);
            if self.in_flight.is_empty() && !self.backlog && !timer_due && !port_due {
                return true;
            }
            match self.next_event() {
                Some(at) if at <= max_time => self.advance_to(at),
                _ => {
                    self.now = self.now.max(max_time);
                    return false;
                }
            }
        }
    }

    fn advance_to(&mut self, at: Instant) {
        if at > self.now {
            self.now = at;
            self.steps_at_instant = 0;
        } else {
            self.steps_at_instant += 1;
            assert!(
                self.steps_at_instant <= self.config.max_steps_per_instant,
                "simulated fabric livelock: {} steps at {} (seed {}): an endpoint's timer never \
                 moves past now, or packets bounce with zero latency",
                self.steps_at_instant,
                self.now,
                self.config.seed,
            );
        }
        if self.scenario.is_some() {
            self.poll_ports();
        }
        self.deliver_due();
        self.fire_timers();
        self.drain_transmits();
    }

    fn deliver_due(&mut self) {
        while let Some(((_, packet), in_flight)) = self.in_flight.pop_due(self.now) {
            let InFlight { from, to, bytes, digest, scenario } = in_flight;
            let mut comment = None;
            if let Some(riding) = scenario {
                for action in &riding.device {
                    self.device_fault(to, action);
                }
                comment = riding.comment;
            }
            self.counters.delivered += 1;
            let digest = digest.unwrap_or_else(|| self.packet_digest(&bytes));
            self.trace.record(TraceEvent::Deliver {
                at: self.now,
                packet,
                from,
                to,
                len: bytes.len(),
                digest,
            });
            if let Some(capture) = self.capture.as_mut().filter(|c| c.point().delivered()) {
                capture.write_commented(self.now, from, Some(to), &bytes, comment.as_deref());
            }
            self.endpoints[to.0].receive(self.now, &bytes);
            self.mirror_copy(from, to, &bytes);
            self.recycle(bytes);
        }
    }

    fn fire_timers(&mut self) {
        for (i, endpoint) in self.endpoints.iter_mut().enumerate() {
            if endpoint.poll_timeout().is_some_and(|t| t <= self.now) {
                self.counters.timeouts += 1;
                self.trace.record(TraceEvent::Timeout { at: self.now, node: NodeId(i) });
                endpoint.handle_timeout(self.now);
            }
        }
    }

    /// Takes up to the per-poll bound of packets from every endpoint.
    fn drain_transmits(&mut self) {
        self.backlog = false;
        for i in 0..self.endpoints.len() {
            let mut drained = false;
            for _ in 0..self.config.max_transmits_per_poll {
                let mut buf = self.pool.pop().unwrap_or_default();
                if buf.len() < MAX_PACKET_LEN {
                    buf.resize(MAX_PACKET_LEN, 0);
                }
                let Some(transmit) =
                    self.endpoints[i].poll_transmit(self.now, &mut buf[..MAX_PACKET_LEN])
                else {
                    self.recycle_buffer(buf);
                    drained = true;
                    break;
                };
                assert!(
                    transmit.len <= MAX_PACKET_LEN,
                    "node {i} transmitted {} bytes, more than MAX_PACKET_LEN",
                    transmit.len
                );
                let packet = Packet::new(buf, transmit.len);
                self.send(NodeId(i), transmit.destination, packet, transmit.local_qpn);
            }
            // The bound was reached: the rest goes next step, at this time.
            self.backlog |= !drained;
        }
    }

    /// The digest a trace event carries for `bytes`
    /// ([`FabricConfig::trace_packet_digests`]).
    pub(super) fn packet_digest(&self, bytes: &[u8]) -> u64 {
        if self.config.trace_packet_digests {
            packet_digest(bytes)
        } else {
            0
        }
    }

    fn check_node(&self, node: NodeId) -> usize {
        assert!(node.0 < self.endpoints.len(), "{node} is not a node of this fabric");
        node.0
    }
}

#[cfg(test)]
mod tests;
