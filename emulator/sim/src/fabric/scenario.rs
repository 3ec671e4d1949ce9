//! A scenario on the fabric: one [`Port`] per node, at the node's port
//! (fault-scenarios design note §2.3, §6.2, step 9).
//!
//! A packet meets its sender's port on egress (before the fabric's random
//! fate and rules decide anything: [`Fabric::transmit`]) and, for each
//! copy the fabric lets through, its receiver's port on ingress, at send
//! time (its fate is decided once; with the fabric's latency no window can
//! tell). A verdict is executed with the fabric's own machinery: a drop is
//! a drop ([`DropReason::Scenario`]), extra copies are duplicates, a delay
//! and a flipped bit apply to the copy, a held packet comes back out of
//! [`Port::take_released`] and goes on under a new number. A `link_down`
//! or `partition` firing becomes an outage ([`Fabric::isolate`],
//! [`Cut::Link`]), the code the swarm's disruptions use; the port drops
//! the packet that brought it down itself (as [`DropReason::Partition`]).
//!
//! Device faults the ports decide go to the fabric's device-fault handler
//! ([`Fabric::set_device_fault_handler`]), else queue for
//! [`Fabric::take_device_faults`]. One decided on ingress rides with the
//! packet that triggered it and is handed out just before that packet is
//! delivered (so `rnr` on the 10th message answers that very message);
//! egress and timed ones are handed out at once.
//!
//! Every firing, device fault, hold and release is a trace event; none
//! happens without ports, so a fabric without them hashes as before.

use super::{Fabric, InFlight, Packet};
use crate::fault::Cut;
use crate::trace::{DelayReason, DropReason, TraceEvent};
use crate::NodeId;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uroce_faults::scenario::{
    DeviceAction, Dir, DropCause, Firing, Held, LinkAction, Port, PortVerdict, ScenarioAction,
};
use uroce_faults::{flip, CopyVerdict};
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;

/// Firings kept in the fabric's log; past it they are counted only.
pub const MAX_FIRINGS: usize = 1 << 16;
/// Device faults queued for [`Fabric::take_device_faults`] at most; past
/// it they are counted in [`Fabric::device_faults_lost`] and not applied.
pub const MAX_DEVICE_FAULTS: usize = 1 << 12;

/// What applies a device fault to a node's device: the fabric calls it with
/// the node's endpoint, the node, the virtual time and the action.
pub type DeviceFaultHandler<E> = Box<dyn FnMut(&mut E, NodeId, Instant, &DeviceAction)>;

/// The ports and what they produced.
#[derive(Debug, Default)]
pub(super) struct Scenario {
    /// Node `i`'s port (`None`: the node has none).
    pub(super) ports: Vec<Option<Port>>,
    /// Every firing, in order.
    pub(super) log: Vec<(NodeId, Firing)>,
    pub(super) firings_lost: u64,
    /// Device faults for the caller (no handler).
    pub(super) device: Vec<(NodeId, DeviceAction)>,
    pub(super) device_lost: u64,
    /// The firings on the packet being sent, for the capture's comment.
    pub(super) comment: String,
}

impl Scenario {
    /// The earliest port deadline (timed rules, holds), in virtual time.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.ports.iter().flatten().filter_map(Port::next_deadline).min().map(Instant::from_nanos)
    }
}

/// What happens to a packet at an ingress port.
pub(super) enum Ingress {
    /// No port there: as without a scenario.
    Pass,
    /// Dropped, for this reason.
    Dropped(DropReason),
    /// Held for reordering: it goes on when the port releases it.
    Held,
    /// The copies that go on (the first is the packet itself), and the
    /// device faults to hand out before it is delivered.
    Copies(Vec<CopyVerdict>, Vec<DeviceAction>),
}

impl<E: Endpoint> Fabric<E> {
    /// Puts a scenario on the fabric: `ports[i]` is node `i`'s (fewer ports
    /// than nodes: the rest have none). Every packet a node sends passes its
    /// port on egress and every packet it receives on ingress, with the
    /// virtual time as the port's clock; see the module documentation of
    /// `fabric/scenario.rs` for how each verdict is carried out. Captures
    /// started from then on are pcapng, each frame a rule fired on
    /// commented with the firing. With no ports, nothing changes (the trace
    /// hash included).
    pub fn with_ports(mut self, ports: Vec<Port>) -> Fabric<E> {
        assert!(
            ports.len() <= self.endpoints.len(),
            "Fabric::with_ports: {} ports for {} nodes",
            ports.len(),
            self.endpoints.len()
        );
        if ports.is_empty() {
            self.scenario = None;
            return self;
        }
        let mut all: Vec<Option<Port>> = ports.into_iter().map(Some).collect();
        all.resize_with(self.endpoints.len(), || None);
        self.scenario = Some(Box::new(Scenario { ports: all, ..Scenario::default() }));
        self
    }

    /// Whether the fabric has ports ([`Fabric::with_ports`]).
    pub fn has_ports(&self) -> bool {
        self.scenario.is_some()
    }

    /// Node `node`'s port, if it has one.
    pub fn port(&self, node: NodeId) -> Option<&Port> {
        self.scenario.as_ref()?.ports.get(node.0)?.as_ref()
    }

    /// Every firing of every port so far, in order (at most
    /// [`MAX_FIRINGS`]; see [`Fabric::firings_lost`]).
    pub fn firings(&self) -> &[(NodeId, Firing)] {
        self.scenario.as_ref().map_or(&[], |s| &s.log)
    }

    /// Firings not kept in [`Fabric::firings`] (the log was full).
    pub fn firings_lost(&self) -> u64 {
        self.scenario.as_ref().map_or(0, |s| s.firings_lost)
    }

    /// Device faults the ports decided, in order, for the caller to apply
    /// (`Hca::inject_fault`) when no handler is set
    /// ([`Fabric::set_device_fault_handler`]). Drain them after each step:
    /// one decided on ingress was due just before its packet's delivery.
    pub fn take_device_faults(&mut self) -> Vec<(NodeId, DeviceAction)> {
        self.scenario.as_mut().map_or_else(Vec::new, |s| core::mem::take(&mut s.device))
    }

    /// Device faults dropped because [`MAX_DEVICE_FAULTS`] were queued
    /// and not taken.
    pub fn device_faults_lost(&self) -> u64 {
        self.scenario.as_ref().map_or(0, |s| s.device_lost)
    }

    /// Applies the ports' device faults with `handler`, each at the moment
    /// it is due, instead of queueing them for
    /// [`Fabric::take_device_faults`].
    pub fn set_device_fault_handler(&mut self, handler: DeviceFaultHandler<E>) {
        self.device_handler = Some(handler);
    }

    /// The sender's port on a packet it emits; `None` without one.
    pub(super) fn port_egress(
        &mut self,
        from: NodeId,
        packet: u64,
        local_qpn: Option<uroce_wire::Qpn>,
        bytes: &[u8],
    ) -> Option<PortVerdict> {
        let now_ns = self.now.as_nanos();
        let port = self.scenario.as_mut()?.ports.get_mut(from.0)?.as_mut()?;
        let verdict = port.on_packet(now_ns, Dir::Out, local_qpn, bytes);
        self.after_port(from, Some(packet), &verdict);
        for action in self.device_actions(from) {
            self.device_fault(from, &action);
        }
        Some(verdict)
    }

    /// The receiver's port on a copy about to fly to it.
    pub(super) fn port_ingress(&mut self, to: NodeId, packet: u64, bytes: &Packet) -> Ingress {
        let now_ns = self.now.as_nanos();
        let Some(port) =
            self.scenario.as_mut().and_then(|s| s.ports.get_mut(to.0)).and_then(Option::as_mut)
        else {
            return Ingress::Pass;
        };
        let verdict = port.on_packet(now_ns, Dir::In, None, bytes);
        self.after_port(to, Some(packet), &verdict);
        let device = self.device_actions(to);
        if verdict.dropped.is_some() || verdict.held {
            // Nothing to ride with: handed out now.
            for action in &device {
                self.device_fault(to, action);
            }
        }
        if let Some(cause) = verdict.dropped {
            return Ingress::Dropped(Self::drop_reason(cause));
        }
        if verdict.held {
            self.counters.held_scenario += 1;
            self.trace.record(TraceEvent::Hold { at: self.now, packet, node: to });
            return Ingress::Held;
        }
        Ingress::Copies(copies_of(&verdict), device)
    }

    /// The reason a port's drop is counted under.
    pub(super) fn drop_reason(cause: DropCause) -> DropReason {
        match cause {
            DropCause::Rule | DropCause::Background => DropReason::Scenario,
            DropCause::LinkDown | DropCause::Partition => DropReason::Partition,
        }
    }

    /// Applies a port's verdict on one copy: its flipped bit and its delay.
    /// Returns the delay.
    pub(super) fn scenario_copy(
        &mut self,
        packet: u64,
        bytes: &mut Packet,
        copy: &CopyVerdict,
        digest: &mut Option<u64>,
    ) -> u64 {
        let now = self.now;
        if let Some(bit_index) = copy.flip_bit {
            flip(bytes, bit_index);
            *digest = None;
            self.counters.corrupted += 1;
            self.trace.record(TraceEvent::Corrupt { at: now, packet, bit_index });
        }
        if copy.delay_ns > 0 {
            self.counters.delayed_scenario += 1;
            self.trace.record(TraceEvent::Delay {
                at: now,
                packet,
                extra_ns: copy.delay_ns,
                reason: DelayReason::Scenario,
            });
        }
        copy.delay_ns
    }

    /// Drains a port's firings into the trace, the log, the comment and
    /// the outages; counts a held packet.
    fn after_port(&mut self, node: NodeId, packet: Option<u64>, verdict: &PortVerdict) {
        let Some(scenario) = self.scenario.as_mut() else { return };
        let Some(port) = scenario.ports.get_mut(node.0).and_then(Option::as_mut) else { return };
        let firings: Vec<Firing> = port.take_firings().collect();
        for firing in firings {
            self.counters.scenario_firings += 1;
            self.trace.record(TraceEvent::ScenarioFired {
                at: self.now,
                node,
                rule: firing.rule,
                hit: firing.hit,
                packet,
            });
            if let ScenarioAction::Link(link) = firing.action {
                self.scenario_link(node, link, firing.packet.and_then(|p| p.peer));
            }
            let Some(scenario) = self.scenario.as_mut() else { return };
            if !scenario.comment.is_empty() {
                scenario.comment.push_str("; ");
            }
            scenario.comment.push_str(&format!("uroce scenario {node}: {firing}"));
            if scenario.log.len() < MAX_FIRINGS {
                scenario.log.push((node, firing));
            } else {
                scenario.firings_lost += 1;
            }
        }
        if let Some(cause) = verdict.dropped {
            let Some(scenario) = self.scenario.as_mut() else { return };
            if !scenario.comment.is_empty() {
                scenario.comment.push_str("; ");
            }
            scenario.comment.push_str(&format!("DROPPED at {node}'s port: {cause:?}"));
        }
    }

    /// Carries out a link action as an outage.
    fn scenario_link(&mut self, node: NodeId, link: LinkAction, packet_peer: Option<IpAddr>) {
        let now = self.now;
        let end = |for_ns: Option<u64>| for_ns.map_or(Instant::FAR_FUTURE, |d| now.plus_nanos(d));
        match link {
            LinkAction::Down { for_ns } => self.isolate(node, now..end(for_ns)),
            LinkAction::Up => {
                let cut = Cut::Partition { side: vec![node] };
                for outage in &mut self.outages {
                    if outage.cut == cut && outage.during.contains(&now) {
                        outage.during.end = now;
                    }
                }
            }
            LinkAction::Partition { for_ns, peer } => {
                if let Some(other) = peer.or(packet_peer).and_then(|p| self.route(p)) {
                    if other != node {
                        self.link_down(node, other, now..end(for_ns));
                    }
                }
            }
        }
    }

    /// The device actions a port queued.
    fn device_actions(&mut self, node: NodeId) -> Vec<DeviceAction> {
        let Some(port) =
            self.scenario.as_mut().and_then(|s| s.ports.get_mut(node.0)).and_then(Option::as_mut)
        else {
            return Vec::new();
        };
        core::iter::from_fn(|| port.poll_device_action()).collect()
    }

    /// Hands one device fault out: to the handler, else to the queue.
    pub(super) fn device_fault(&mut self, node: NodeId, action: &DeviceAction) {
        self.counters.device_faults += 1;
        self.trace.record(TraceEvent::DeviceFault {
            at: self.now,
            node,
            kind: action.kind,
            qpn: action.qpn.map(|q| q.value()),
            count: action.count,
            for_ns: action.for_ns,
        });
        if let Some(handler) = self.device_handler.as_mut() {
            handler(&mut self.endpoints[node.0], node, self.now, action);
            self.backlog = true;
            return;
        }
        let Some(scenario) = self.scenario.as_mut() else { return };
        if scenario.device.len() < MAX_DEVICE_FAULTS {
            scenario.device.push((node, *action));
        } else {
            scenario.device_lost += 1;
        }
    }

    /// Fires the ports' timed rules that are due and lets out the held
    /// packets whose turn came.
    pub(super) fn poll_ports(&mut self) {
        let Some(scenario) = self.scenario.as_mut() else { return };
        let now_ns = self.now.as_nanos();
        for i in 0..scenario.ports.len() {
            let node = NodeId(i);
            let Some(port) = self.scenario.as_mut().and_then(|s| s.ports[i].as_mut()) else {
                continue;
            };
            let mut fired = false;
            while port.poll_timed(now_ns).is_some() {
                fired = true;
            }
            if fired {
                self.after_port(node, None, &PortVerdict::default());
                for action in self.device_actions(node) {
                    self.device_fault(node, &action);
                }
            }
        }
        self.release_held();
    }

    /// Sends on every held packet a port released, until none is.
    pub(super) fn release_held(&mut self) {
        let Some(nodes) = self.scenario.as_ref().map(|s| s.ports.len()) else { return };
        let now_ns = self.now.as_nanos();
        loop {
            let mut released = false;
            for i in 0..nodes {
                while let Some(held) = self
                    .scenario
                    .as_mut()
                    .and_then(|s| s.ports[i].as_mut())
                    .and_then(|p| p.take_released(now_ns))
                {
                    released = true;
                    self.send_released(NodeId(i), held);
                }
            }
            if !released {
                return;
            }
        }
    }

    /// A held packet goes on from where its port held it, under a new
    /// number: from the sender's port onto the fabric (the fabric's fate
    /// and rules see it now), or from the receiver's port to the receiver.
    fn send_released(&mut self, node: NodeId, held: Held) {
        let packet = self.next_packet_number();
        self.trace.record(TraceEvent::Release { at: self.now, node, packet });
        if let Some(scenario) = self.scenario.as_mut() {
            scenario.comment.clear();
        }
        let Held { dir, packet: bytes, copies, .. } = held;
        let (source, destination) = ip_addresses(&bytes);
        let bytes = Packet::from_vec(bytes);
        let digest = self.packet_digest(&bytes);
        match dir {
            Dir::Out => {
                let to = destination.and_then(|d| self.route(d));
                let verdict = PortVerdict { copies, ..PortVerdict::default() };
                self.transmit(node, to, packet, bytes, digest, Some(verdict));
            }
            Dir::In => {
                let from = source.and_then(|s| self.route(s)).unwrap_or(node);
                let copies: Vec<CopyVerdict> = copies.into_iter().flatten().collect();
                let last = copies.len().saturating_sub(1);
                let mut bytes = Some(bytes);
                for (k, copy) in copies.iter().enumerate() {
                    let (number, mut b) = if k == last {
                        (packet, bytes.take().unwrap_or_else(|| Packet::from_vec(Vec::new())))
                    } else {
                        let buf = self.pool.pop().unwrap_or_default();
                        let b = Packet::copy_of(buf, bytes.as_deref().unwrap_or(&[]));
                        let copy_number = self.next_packet_number();
                        self.counters.duplicated += 1;
                        self.trace.record(TraceEvent::Duplicate {
                            at: self.now,
                            packet,
                            copy: copy_number,
                        });
                        (copy_number, b)
                    };
                    let mut d = Some(digest);
                    let delay = self.scenario_copy(number, &mut b, copy, &mut d);
                    // Behind the packets it was held for, jitter or not.
                    let arrives_at = self.link_arrival(from, node, self.now).plus_nanos(delay);
                    self.fly(number, b, (from, node), arrives_at, d, Vec::new());
                }
            }
        }
    }

    /// Puts one copy in flight (or drops it past
    /// [`FabricConfig::max_in_flight`](super::FabricConfig::max_in_flight));
    /// `device` faults are handed out just before it is delivered.
    pub(super) fn fly(
        &mut self,
        packet: u64,
        bytes: Packet,
        (from, to): (NodeId, NodeId),
        arrives_at: Instant,
        digest: Option<u64>,
        device: Vec<DeviceAction>,
    ) {
        if self.in_flight.len() >= self.config.max_in_flight {
            for action in &device {
                self.device_fault(to, action);
            }
            self.drop_packet(packet, DropReason::Overflow, bytes);
            return;
        }
        let comment = self.scenario.as_ref().map(|s| s.comment.as_str()).unwrap_or_default();
        let scenario = if device.is_empty() && comment.is_empty() {
            None
        } else {
            let comment = (!comment.is_empty()).then(|| comment.to_owned());
            Some(Box::new(super::Riding { device, comment }))
        };
        self.in_flight.insert((arrives_at, packet), InFlight { from, to, bytes, digest, scenario });
    }
}

/// A verdict's copies: the packet, a background duplicate, then the
/// `duplicate` rule's extra copies of the first, `extra_gap_ns` apart.
fn copies_of(verdict: &PortVerdict) -> Vec<CopyVerdict> {
    let mut copies: Vec<CopyVerdict> = verdict.copies.iter().flatten().copied().collect();
    if let Some(first) = copies.first().copied() {
        for i in 1..=u64::from(verdict.extra) {
            let gap = verdict.extra_gap_ns.saturating_mul(i);
            copies.push(CopyVerdict { delay_ns: first.delay_ns.saturating_add(gap), ..first });
        }
    }
    copies
}

/// The extra copies a port's egress verdict adds to the fabric's own (the
/// fabric's copies all take the first).
pub(super) fn extra_copies(verdict: &PortVerdict) -> Vec<CopyVerdict> {
    copies_of(verdict).into_iter().skip(1).collect()
}

/// An IP packet's source and destination addresses.
fn ip_addresses(bytes: &[u8]) -> (Option<IpAddr>, Option<IpAddr>) {
    match bytes.first().map(|b| b >> 4) {
        Some(4) if bytes.len() >= 20 => {
            let v4 = |o: usize| {
                IpAddr::V4(Ipv4Addr::new(bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]))
            };
            (Some(v4(12)), Some(v4(16)))
        }
        Some(6) if bytes.len() >= 40 => {
            let v6 = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&bytes[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            (Some(v6(8)), Some(v6(24)))
        }
        _ => (None, None),
    }
}
