//! The fabric: endpoints, the packets between them, virtual time.

use super::capture::{node_mac, Capture, CapturePoint};
use super::fault::{Cut, Outage};
use super::rule::{Action, BthFacts, PacketFacts, Rule, RuleId, RuleState};
use super::trace::{DelayReason, DropReason, Fnv64, Trace, TraceEvent};
use super::NodeId;
use core::net::IpAddr;
use core::ops::Range;
use std::collections::BTreeMap;
use std::io::Write;
use uroce_faults::{CopyFate, Fate, FaultConfig, SimRng};
use uroce_hca::endpoint::{Endpoint, MAX_PACKET_LEN};
use uroce_hca::time::Instant;
use uroce_wire::ethernet;

/// The most endpoints a fabric holds.
pub const MAX_NODES: usize = 1 << 16;
/// The most targeted rules a fabric holds.
pub const MAX_RULES: usize = 1 << 10;
/// The most outages (link downs, partitions) a fabric holds at once.
pub const MAX_OUTAGES: usize = 1 << 12;
/// Packet buffers kept for reuse after delivery.
const MAX_POOLED_BUFFERS: usize = 1 << 10;

/// How the fabric behaves. Everything a run does is a function of this and
/// of what the driver does between steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricConfig {
    /// Seed of the fabric's one generator.
    pub seed: u64,
    /// One-way latency of every packet, in nanoseconds, from the moment it
    /// has left the sender's port to its delivery.
    pub latency_ns: u64,
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
            port_rate_bits_per_sec: None,
            max_in_flight: 1 << 16,
            max_transmits_per_poll: 64,
            max_steps_per_instant: 100_000,
            trace_log_capacity: 0,
            faults: FaultConfig::NONE,
        }
    }

    fn assert_valid(&self) {
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
    /// Times any rule fired (per rule: [`Fabric::rule`]).
    pub rule_hits: u64,
    /// Endpoint timers fired.
    pub timeouts: u64,
    /// Copies handed to the mirror port ([`Fabric::set_mirror`]).
    pub mirrored: u64,
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
    }
}

/// A packet on the wire.
#[derive(Debug)]
struct InFlight {
    from: NodeId,
    to: NodeId,
    bytes: Vec<u8>,
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
    in_flight: BTreeMap<(Instant, u64), InFlight>,
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
            trace: Trace::new(config.trace_log_capacity),
            config,
            endpoints,
            now: Instant::ZERO,
            in_flight: BTreeMap::new(),
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
        }
    }

    /// Puts `bytes` on the fabric as if node `from` had sent them to
    /// `destination` now: a forged, replayed or hand-made packet (the
    /// source address inside is whatever the bytes say). It meets the
    /// faults, rules and latency every packet meets.
    pub fn inject(&mut self, from: NodeId, destination: IpAddr, bytes: Vec<u8>) {
        self.check_node(from);
        self.send(from, destination, bytes);
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

    // ----- faults -----

    /// Replaces the probabilistic faults and the MTU.
    pub fn set_faults(&mut self, faults: FaultConfig) {
        faults.assert_valid();
        self.config.faults = faults;
    }

    /// Adds a targeted rule; rules are checked in the order added.
    pub fn add_rule(&mut self, rule: Rule) -> RuleId {
        assert!(self.rules.len() < MAX_RULES, "more than {MAX_RULES} rules");
        if let Some(n) = rule.matcher.from {
            self.check_node(n);
        }
        if let Some(n) = rule.matcher.to {
            self.check_node(n);
        }
        self.rules.push(RuleState::new(rule));
        RuleId(self.rules.len() - 1)
    }

    /// Takes the link between `a` and `b` down, both ways, for packets sent
    /// during `during`.
    pub fn link_down(&mut self, a: NodeId, b: NodeId, during: Range<Instant>) {
        self.check_node(a);
        self.check_node(b);
        self.add_outage(Cut::Link(a, b), during);
    }

    /// Cuts packets from `from` to `to` (that direction only) sent during
    /// `during`.
    pub fn link_down_one_way(&mut self, from: NodeId, to: NodeId, during: Range<Instant>) {
        self.check_node(from);
        self.check_node(to);
        self.add_outage(Cut::OneWay { from, to }, during);
    }

    /// Cuts every packet between a node in `side` and a node outside it
    /// sent during `during`.
    pub fn partition(&mut self, side: &[NodeId], during: Range<Instant>) {
        let mut side = side.to_vec();
        for &n in &side {
            self.check_node(n);
        }
        side.sort_unstable();
        side.dedup();
        self.add_outage(Cut::Partition { side }, during);
    }

    /// Cuts one node off from every other during `during`.
    pub fn isolate(&mut self, node: NodeId, during: Range<Instant>) {
        self.partition(&[node], during);
    }

    fn add_outage(&mut self, cut: Cut, during: Range<Instant>) {
        assert!(during.start <= during.end, "outage ends before it starts");
        let now = self.now;
        self.outages.retain(|o| o.during.end > now);
        assert!(self.outages.len() < MAX_OUTAGES, "more than {MAX_OUTAGES} outages");
        self.outages.push(Outage { cut, during });
    }

    /// Turns every fault off for a liveness phase: probabilistic faults
    /// (the MTU stays: it is the network's, not a fault), outages (running
    /// and scheduled) and rules (kept, with their counts, but no longer
    /// checked). Packets in flight still arrive as scheduled.
    pub fn heal(&mut self) {
        self.config.faults = self.config.faults.healed();
        self.outages.clear();
        for rule in &mut self.rules {
            rule.active = false;
        }
        self.trace.record(TraceEvent::Heal { at: self.now });
    }

    // ----- capture -----

    /// Starts a pcap capture (Ethernet link type, nanosecond timestamps in
    /// virtual time) into `writer`, replacing any running one. Capture
    /// errors never change the run; see [`Fabric::capture_error`].
    pub fn start_capture(&mut self, writer: Box<dyn Write>, point: CapturePoint) {
        self.capture = Some(Capture::new(writer, point));
    }

    /// Frames written to the capture so far.
    pub fn captured_frames(&self) -> u64 {
        self.capture.as_ref().map_or(0, Capture::frames)
    }

    /// The first error writing the capture, if any.
    pub fn capture_error(&self) -> Option<&str> {
        self.capture.as_ref().and_then(Capture::error)
    }

    /// Stops the capture, flushes it and returns the writer; `None` when no
    /// capture runs, `Some(Err)` with the first write error.
    pub fn finish_capture(&mut self) -> Option<Result<Box<dyn Write>, String>> {
        self.capture.take().map(Capture::finish)
    }

    // ----- mirror port -----

    /// Makes `node` a mirror port (a switch's SPAN port), or stops
    /// mirroring with `None`. From then on, every packet the fabric
    /// delivers to another node (duplicates, corrupted copies and the
    /// mirror node's own packets included) is also handed to `node`'s
    /// [`Endpoint::receive`], right after the receiver has taken it, as an
    /// Ethernet II frame: destination MAC [`node_mac`] of the receiver,
    /// source MAC `node_mac` of the sender, then the IP packet. The
    /// mirror node sees the wire, never the receiver's verdict; it reads
    /// whatever it likes of the other endpoints' state by its own means.
    ///
    /// A copy is made synchronously, nothing is queued (the mirror node
    /// keeps what it wants, within its own bounds), and it is not a trace
    /// event of its own: it follows from the delivery, so the trace hash
    /// changes only by what the mirror node does with what it saw.
    /// Counted in [`FabricCounters::mirrored`].
    ///
    /// [`node_mac`]: super::node_mac
    pub fn set_mirror(&mut self, node: Option<NodeId>) {
        if let Some(node) = node {
            self.check_node(node);
        }
        self.mirror = node;
    }

    /// The mirror port, if any.
    pub fn mirror(&self) -> Option<NodeId> {
        self.mirror
    }

    /// Hands a copy of a packet just delivered to the mirror port.
    fn mirror_copy(&mut self, from: NodeId, to: NodeId, bytes: &[u8]) {
        let Some(mirror) = self.mirror.filter(|&m| m != to) else { return };
        let mut frame = core::mem::take(&mut self.mirror_frame);
        let header = ethernet::Repr {
            source: node_mac(from),
            destination: node_mac(to),
            ether_type: ethernet::ether_type_of_ip(bytes),
        };
        header.frame_into(bytes, &mut frame);
        self.counters.mirrored += 1;
        self.endpoints[mirror.0].receive(self.now, &frame);
        self.mirror_frame = frame;
    }

    // ----- driving -----

    /// When the next event happens: now if some endpoint may have packets
    /// to send, else the earliest delivery or timer; `None` if nothing will
    /// ever happen without the driver.
    pub fn next_event(&self) -> Option<Instant> {
        if self.backlog {
            return Some(self.now);
        }
        let delivery = self.in_flight.keys().next().map(|&(at, _)| at);
        let timer = self.endpoints.iter().filter_map(Endpoint::poll_timeout).min();
        let next = match (delivery, timer) {
            (Some(d), Some(t)) => d.min(t),
            (d, t) => d.or(t)?,
        };
        Some(next.max(self.now))
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
            if self.in_flight.is_empty() && !self.backlog && !timer_due {
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
        self.deliver_due();
        self.fire_timers();
        self.drain_transmits();
    }

    fn deliver_due(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            let &(at, packet) = entry.key();
            if at > self.now {
                break;
            }
            let InFlight { from, to, bytes } = entry.remove();
            self.counters.delivered += 1;
            self.trace.record(TraceEvent::Deliver {
                at: self.now,
                packet,
                from,
                to,
                len: bytes.len(),
                digest: Fnv64::digest(&bytes),
            });
            if let Some(capture) = self.capture.as_mut().filter(|c| c.point().delivered()) {
                capture.write(self.now, from, Some(to), &bytes);
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
                buf.resize(MAX_PACKET_LEN, 0);
                let Some(transmit) = self.endpoints[i].poll_transmit(self.now, &mut buf) else {
                    self.recycle(buf);
                    drained = true;
                    break;
                };
                assert!(
                    transmit.len <= MAX_PACKET_LEN,
                    "node {i} transmitted {} bytes, more than MAX_PACKET_LEN",
                    transmit.len
                );
                buf.truncate(transmit.len);
                self.send(NodeId(i), transmit.destination, buf);
            }
            // The bound was reached: the rest goes next step, at this time.
            self.backlog |= !drained;
        }
    }

    fn send(&mut self, from: NodeId, destination: IpAddr, bytes: Vec<u8>) {
        let packet = self.next_packet_number();
        let now = self.now;
        self.counters.sent += 1;
        self.trace.record(TraceEvent::Send {
            at: now,
            packet,
            from,
            len: bytes.len(),
            digest: Fnv64::digest(&bytes),
        });
        let to = self.route(destination);
        if let Some(capture) = self.capture.as_mut().filter(|c| c.point().sent()) {
            capture.write(now, from, to, &bytes);
        }
        let departs_at = self.leave_port(from, bytes.len());
        let fate = Fate::draw(&mut self.rng);
        let effects = self.apply_rules(packet, PacketFacts { from, to, bth: None }, &bytes);

        let Some(to) = to else {
            self.drop_packet(packet, DropReason::NoRoute, bytes);
            return;
        };
        let faults = self.config.faults;
        let drop = if faults.mtu_bytes.is_some_and(|mtu| bytes.len() > mtu) {
            Some(DropReason::Mtu)
        } else if effects.drop {
            Some(DropReason::Rule)
        } else if self.outages.iter().any(|o| o.drops(now, from, to)) {
            Some(DropReason::Partition)
        } else if fate.lost(&faults) {
            Some(DropReason::Loss)
        } else {
            None
        };
        if let Some(reason) = drop {
            self.drop_packet(packet, reason, bytes);
            return;
        }

        let mut copies = [Some((packet, bytes)), None];
        if effects.duplicate || fate.duplicated(&faults) {
            let copy = self.next_packet_number();
            let mut second = self.pool.pop().unwrap_or_default();
            second.clear();
            second.extend_from_slice(copies[0].as_ref().map_or(&[][..], |(_, b)| b));
            self.counters.duplicated += 1;
            self.trace.record(TraceEvent::Duplicate { at: now, packet, copy });
            copies[1] = Some((copy, second));
        }
        for (slot, copy_fate) in copies.into_iter().zip(fate.copies) {
            if let Some((number, bytes)) = slot {
                let hop = Hop { from, to, departs_at, rule_delay_ns: effects.delay_ns };
                self.launch(number, bytes, hop, copy_fate);
            }
        }
    }

    /// Corrupts, delays and puts one copy in flight.
    fn launch(&mut self, packet: u64, mut bytes: Vec<u8>, hop: Hop, fate: CopyFate) {
        let Hop { from, to, departs_at, rule_delay_ns } = hop;
        let now = self.now;
        let faults = self.config.faults;
        if let Some(bit_index) = fate.corrupt(&faults, &mut bytes) {
            self.counters.corrupted += 1;
            self.trace.record(TraceEvent::Corrupt { at: now, packet, bit_index });
        }
        let mut extra_ns = 0u64;
        if rule_delay_ns > 0 {
            extra_ns = rule_delay_ns;
            self.counters.delayed_rule += 1;
            self.trace.record(TraceEvent::Delay {
                at: now,
                packet,
                extra_ns: rule_delay_ns,
                reason: DelayReason::Rule,
            });
        }
        if let Some(jitter_ns) = fate.reorder_delay_ns(&faults) {
            extra_ns = extra_ns.saturating_add(jitter_ns);
            self.counters.delayed_reorder += 1;
            self.trace.record(TraceEvent::Delay {
                at: now,
                packet,
                extra_ns: jitter_ns,
                reason: DelayReason::Reorder,
            });
        }
        if self.in_flight.len() >= self.config.max_in_flight {
            self.drop_packet(packet, DropReason::Overflow, bytes);
            return;
        }
        let arrives_at = departs_at.plus_nanos(self.config.latency_ns).plus_nanos(extra_ns);
        self.in_flight.insert((arrives_at, packet), InFlight { from, to, bytes });
    }

    /// Offers a packet to every active rule; returns what the rules that
    /// fired want done.
    fn apply_rules(&mut self, packet: u64, mut facts: PacketFacts, bytes: &[u8]) -> RuleEffects {
        let mut effects = RuleEffects::default();
        if !self.rules.iter().any(|r| r.active) {
            return effects;
        }
        facts.bth = BthFacts::read(bytes);
        for (i, rule) in self.rules.iter_mut().enumerate() {
            let Some(action) = rule.offer(&facts) else { continue };
            self.counters.rule_hits += 1;
            self.trace.record(TraceEvent::RuleFired { at: self.now, packet, rule: i });
            match action {
                Action::Drop => effects.drop = true,
                Action::Duplicate => effects.duplicate = true,
                Action::Delay { delay_ns } => {
                    effects.delay_ns = effects.delay_ns.saturating_add(delay_ns);
                }
            }
        }
        effects
    }

    /// When a packet of `len` bytes sent now has left `from`'s port.
    fn leave_port(&mut self, from: NodeId, len: usize) -> Instant {
        let Some(rate) = self.config.port_rate_bits_per_sec else { return self.now };
        let bits = (len as u128) * 8 * 1_000_000_000;
        let serialization_ns = u64::try_from(bits.div_ceil(u128::from(rate))).unwrap_or(u64::MAX);
        let free_at = &mut self.port_free_at[from.0];
        *free_at = (*free_at).max(self.now).plus_nanos(serialization_ns);
        *free_at
    }

    fn drop_packet(&mut self, packet: u64, reason: DropReason, bytes: Vec<u8>) {
        let c = &mut self.counters;
        match reason {
            DropReason::Loss => c.dropped_loss += 1,
            DropReason::Mtu => c.dropped_mtu += 1,
            DropReason::Partition => c.dropped_partition += 1,
            DropReason::NoRoute => c.dropped_no_route += 1,
            DropReason::Overflow => c.dropped_overflow += 1,
            DropReason::Rule => c.dropped_rule += 1,
        }
        self.trace.record(TraceEvent::Drop { at: self.now, packet, reason });
        self.recycle(bytes);
    }

    fn next_packet_number(&mut self) -> u64 {
        let n = self.next_packet;
        self.next_packet += 1;
        n
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < MAX_POOLED_BUFFERS {
            self.pool.push(buf);
        }
    }

    fn check_node(&self, node: NodeId) -> usize {
        assert!(node.0 < self.endpoints.len(), "{node} is not a node of this fabric");
        node.0
    }
}

/// Where a packet goes and when it left.
#[derive(Debug, Clone, Copy)]
struct Hop {
    from: NodeId,
    to: NodeId,
    /// When it has left the sender's port.
    departs_at: Instant,
    /// Extra delay the rules asked for.
    rule_delay_ns: u64,
}

/// What the rules that fired on a packet want done.
#[derive(Debug, Default, Clone, Copy)]
struct RuleEffects {
    drop: bool,
    duplicate: bool,
    delay_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use uroce_faults::Probability;

    /// Sends `left` packets of 40 bytes to `peer`, one per poll, and keeps
    /// what it receives.
    struct Probe {
        addr: Vec<IpAddr>,
        peer: Option<IpAddr>,
        left: u32,
        got: Vec<Vec<u8>>,
    }

    impl Endpoint for Probe {
        fn addresses(&self) -> &[IpAddr] {
            &self.addr
        }
        fn receive(&mut self, _now: Instant, packet: &[u8]) {
            self.got.push(packet.to_vec());
        }
        fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<uroce_hca::Transmit> {
            let peer = self.peer?;
            self.left = self.left.checked_sub(1)?;
            buf[..40].fill(0x45);
            buf[39] = self.left as u8;
            Some(uroce_hca::Transmit::new(peer, 40))
        }
        fn poll_timeout(&self) -> Option<Instant> {
            None
        }
        fn handle_timeout(&mut self, _now: Instant) {}
    }

    fn probes() -> Vec<Probe> {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let probe = |addr: Vec<IpAddr>, peer, left| Probe { addr, peer, left, got: Vec::new() };
        vec![probe(vec![a], Some(b), 300), probe(vec![b], Some(a), 300), probe(vec![], None, 0)]
    }

    #[test]
    fn a_mirror_port_sees_every_delivery_as_a_frame_and_changes_nothing() {
        let faults = FaultConfig {
            loss: Probability::from_percent(10),
            duplicate: Probability::from_percent(10),
            reorder: Probability::from_percent(20),
            reorder_max_delay_ns: 50_000,
            corrupt: Probability::from_percent(5),
            ..FaultConfig::NONE
        };
        let config = FabricConfig { faults, ..FabricConfig::new(9) };
        let run = |mirror: bool| {
            let mut fabric = Fabric::new(config.clone(), probes());
            if mirror {
                fabric.set_mirror(Some(NodeId(2)));
            }
            assert!(fabric.run_until_idle(Instant::from_nanos(100_000_000)));
            fabric
        };
        let (plain, mirrored) = (run(false), run(true));
        assert_eq!(plain.trace_hash(), mirrored.trace_hash(), "a passive mirror changes nothing");
        let c = mirrored.counters();
        assert_eq!(c.mirrored, c.delivered);
        assert_eq!(plain.counters().mirrored, 0);
        let nodes = mirrored.endpoints();
        let frames = &nodes[2].got;
        assert_eq!(frames.len() as u64, c.delivered);
        // In delivery order: each receiver's packets, in the order it got
        // them, with the receiver's and the sender's MACs.
        for (to, from) in [(0, 1), (1, 0)] {
            let seen: Vec<&[u8]> = frames
                .iter()
                .filter(|f| f[..6] == node_mac(NodeId(to)))
                .map(|f| {
                    assert_eq!(f[6..12], node_mac(NodeId(from)));
                    assert_eq!(f[12..14], [0x08, 0x00]);
                    &f[14..]
                })
                .collect();
            let got: Vec<&[u8]> = nodes[to].got.iter().map(Vec::as_slice).collect();
            assert_eq!(seen, got);
        }
        let mut fabric = run(true);
        fabric.set_mirror(None);
        assert_eq!(fabric.mirror(), None);
    }
}
