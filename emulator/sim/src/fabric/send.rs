//! A sent packet's way: the rules, the outages and the faults decide
//! whether it is dropped, duplicated, corrupted or delayed, then it flies
//! for the fabric's latency.

use super::scenario::Ingress;
use super::{Fabric, Packet, MAX_POOLED_BUFFERS};
use crate::trace::{DelayReason, DropReason, TraceEvent};
use crate::NodeId;
use core::net::IpAddr;
use uroce_faults::scenario::PortVerdict;
use uroce_faults::{Action, BthFacts, PacketFacts};
use uroce_faults::{CopyFate, CopyVerdict, Fate};
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;
use uroce_wire::Qpn;

impl<E: Endpoint> Fabric<E> {
    /// Sends a packet a node handed out: to the node that has its
    /// destination address, or, to a multicast address, a copy to every
    /// node, the sender included (as the kernel loops a multicast
    /// datagram back to the sending host: rxe's devices take their own
    /// multicast sends). Each HCA keeps the copies its groups want; each
    /// copy is a packet of its own to the rules and the faults.
    pub(super) fn send(
        &mut self,
        from: NodeId,
        destination: IpAddr,
        bytes: Packet,
        local_qpn: Option<Qpn>,
    ) {
        if !destination.is_multicast() {
            let to = self.route(destination);
            return self.send_to(from, to, bytes, local_qpn);
        }
        let last = self.node_count() - 1;
        for n in 0..last {
            let buf = self.pool.pop().unwrap_or_default();
            let copy = Packet::copy_of(buf, &bytes);
            self.send_to(from, Some(NodeId(n)), copy, local_qpn);
        }
        self.send_to(from, Some(NodeId(last)), bytes, local_qpn);
    }

    /// Sends one packet to node `to` (`None`: no node has its address).
    fn send_to(&mut self, from: NodeId, to: Option<NodeId>, bytes: Packet, local_qpn: Option<Qpn>) {
        let packet = self.next_packet_number();
        let now = self.now;
        self.counters.sent += 1;
        let digest = self.packet_digest(&bytes);
        self.trace.record(TraceEvent::Send { at: now, packet, from, len: bytes.len(), digest });
        let Some(scenario) = self.scenario.as_mut() else {
            if let Some(capture) = self.capture.as_mut().filter(|c| c.point().sent()) {
                capture.write(now, from, to, &bytes);
            }
            return self.transmit(from, to, packet, bytes, digest, None);
        };
        // With ports: the sender's port first; the capture's frame (as
        // sent) is written once every port it meets has had its say, with
        // their firings as its comment.
        scenario.comment.clear();
        let sent = self.capture.as_ref().filter(|c| c.point().sent()).map(|_| bytes.to_vec());
        match self.port_egress(from, packet, local_qpn, &bytes) {
            Some(verdict) if verdict.held => {
                self.counters.held_scenario += 1;
                self.trace.record(TraceEvent::Hold { at: now, packet, node: from });
                self.recycle(bytes);
            }
            egress => self.transmit(from, to, packet, bytes, digest, egress),
        }
        if let Some(sent) = sent {
            let comment = self.scenario.as_ref().map(|s| s.comment.as_str()).unwrap_or_default();
            let comment = (!comment.is_empty()).then_some(comment);
            if let Some(capture) = self.capture.as_mut() {
                capture.write_commented(now, from, to, &sent, comment);
            }
        }
        self.release_held();
    }

    /// A packet past its sender's port (`egress`: that port's verdict, if
    /// it has one) meets the fabric: its fate, the rules, the outages, and
    /// for each copy that flies, the receiver's port.
    pub(super) fn transmit(
        &mut self,
        from: NodeId,
        to: Option<NodeId>,
        packet: u64,
        bytes: Packet,
        digest: u64,
        egress: Option<PortVerdict>,
    ) {
        let now = self.now;
        let departs_at = self.leave_port(from, bytes.len());
        let fate = Fate::draw_under(&mut self.rng, &self.config.faults);
        let effects = self.apply_rules(packet, PacketFacts { from, to, bth: None }, &bytes);

        if let Some(cause) = egress.as_ref().and_then(|v| v.dropped) {
            self.capture_scenario_drop(from, to, &bytes);
            self.drop_packet(packet, Self::drop_reason(cause), bytes);
            return;
        }
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

        // The port's first copy applies to each of the fabric's copies; its
        // other copies are more duplicates, without a random fate.
        let port_copy = egress.as_ref().and_then(|v| v.copies.iter().flatten().next().copied());
        let port_extra = egress.as_ref().map(super::scenario::extra_copies).unwrap_or_default();
        let hop = Hop { from, to, departs_at, rule_delay_ns: effects.delay_ns, digest };
        let duplicated = effects.duplicate || fate.duplicated(&faults);
        if !duplicated && port_extra.is_empty() {
            // The usual case, one copy: what the loops below do for it.
            return self.launch(packet, bytes, hop, Some(fate.copies[0]), port_copy);
        }
        let mut copies = [Some((packet, bytes)), None];
        if duplicated {
            let copy = self.next_packet_number();
            let buf = self.pool.pop().unwrap_or_default();
            let second = Packet::copy_of(buf, copies[0].as_ref().map_or(&[][..], |(_, b)| b));
            self.counters.duplicated += 1;
            self.trace.record(TraceEvent::Duplicate { at: now, packet, copy });
            copies[1] = Some((copy, second));
        }
        let mut extra = Vec::with_capacity(port_extra.len());
        for port_copy in port_extra {
            let copy = self.next_packet_number();
            let buf = self.pool.pop().unwrap_or_default();
            let bytes = Packet::copy_of(buf, copies[0].as_ref().map_or(&[][..], |(_, b)| b));
            self.counters.duplicated += 1;
            self.trace.record(TraceEvent::Duplicate { at: now, packet, copy });
            extra.push((copy, bytes, port_copy));
        }
        for (slot, copy_fate) in copies.into_iter().zip(fate.copies) {
            if let Some((number, bytes)) = slot {
                self.launch(number, bytes, hop, Some(copy_fate), port_copy);
            }
        }
        for (number, bytes, port_copy) in extra {
            self.launch(number, bytes, hop, None, Some(port_copy));
        }
    }

    /// Corrupts, delays and puts one copy in flight: `fate` is its random
    /// fate (`None`: a scenario's extra copy, which has none), `port` the
    /// sender's port's verdict on it; the receiver's port sees it last.
    fn launch(
        &mut self,
        packet: u64,
        mut bytes: Packet,
        hop: Hop,
        fate: Option<CopyFate>,
        port: Option<CopyVerdict>,
    ) {
        let Hop { from, to, departs_at, rule_delay_ns, digest } = hop;
        let now = self.now;
        let faults = self.config.faults;
        let mut digest = Some(digest);
        let mut extra_ns = 0u64;
        if let Some(port) = port {
            extra_ns = self.scenario_copy(packet, &mut bytes, &port, &mut digest);
        }
        if let Some(bit_index) = fate.and_then(|f| f.corrupt(&faults, &mut bytes)) {
            digest = None;
            self.counters.corrupted += 1;
            self.trace.record(TraceEvent::Corrupt { at: now, packet, bit_index });
        }
        if rule_delay_ns > 0 {
            extra_ns = extra_ns.saturating_add(rule_delay_ns);
            self.counters.delayed_rule += 1;
            self.trace.record(TraceEvent::Delay {
                at: now,
                packet,
                extra_ns: rule_delay_ns,
                reason: DelayReason::Rule,
            });
        }
        if let Some(jitter_ns) = fate.and_then(|f| f.reorder_delay_ns(&faults)) {
            extra_ns = extra_ns.saturating_add(jitter_ns);
            self.counters.delayed_reorder += 1;
            self.trace.record(TraceEvent::Delay {
                at: now,
                packet,
                extra_ns: jitter_ns,
                reason: DelayReason::Reorder,
            });
        }
        let arrives_at = self.link_arrival(from, to, departs_at).plus_nanos(extra_ns);
        if self.scenario.is_none() {
            return self.fly(packet, bytes, (from, to), arrives_at, digest, Vec::new());
        }
        match self.port_ingress(to, packet, &bytes) {
            Ingress::Pass => self.fly(packet, bytes, (from, to), arrives_at, digest, Vec::new()),
            Ingress::Held => self.recycle(bytes),
            Ingress::Dropped(reason) => {
                self.capture_scenario_drop(from, Some(to), &bytes);
                self.drop_packet(packet, reason, bytes);
            }
            Ingress::Copies(copies, device) => {
                for copy in copies.iter().skip(1) {
                    let number = self.next_packet_number();
                    let buf = self.pool.pop().unwrap_or_default();
                    let mut b = Packet::copy_of(buf, &bytes);
                    self.counters.duplicated += 1;
                    self.trace.record(TraceEvent::Duplicate { at: now, packet, copy: number });
                    let mut d = digest;
                    let delay = self.scenario_copy(number, &mut b, copy, &mut d);
                    self.fly(number, b, (from, to), arrives_at.plus_nanos(delay), d, Vec::new());
                }
                let first = copies.first().copied().unwrap_or(CopyVerdict {
                    delay_ns: 0,
                    reordered: false,
                    flip_bit: None,
                });
                let delay = self.scenario_copy(packet, &mut bytes, &first, &mut digest);
                self.fly(packet, bytes, (from, to), arrives_at.plus_nanos(delay), digest, device);
            }
        }
    }

    /// A capture of deliveries would not show a packet a port dropped: it
    /// gets it now, with the firings as its comment.
    fn capture_scenario_drop(&mut self, from: NodeId, to: Option<NodeId>, bytes: &[u8]) {
        let Some(capture) = self.capture.as_mut().filter(|c| !c.point().sent()) else { return };
        let comment = self.scenario.as_ref().map(|s| s.comment.as_str());
        capture.write_commented(self.now, from, to, bytes, comment.filter(|c| !c.is_empty()));
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

    pub(super) fn drop_packet(&mut self, packet: u64, reason: DropReason, bytes: Packet) {
        let c = &mut self.counters;
        match reason {
            DropReason::Loss => c.dropped_loss += 1,
            DropReason::Mtu => c.dropped_mtu += 1,
            DropReason::Partition => c.dropped_partition += 1,
            DropReason::NoRoute => c.dropped_no_route += 1,
            DropReason::Overflow => c.dropped_overflow += 1,
            DropReason::Rule => c.dropped_rule += 1,
            DropReason::Scenario => c.dropped_scenario += 1,
        }
        self.trace.record(TraceEvent::Drop { at: self.now, packet, reason });
        self.recycle(bytes);
    }

    pub(super) fn next_packet_number(&mut self) -> u64 {
        let n = self.next_packet;
        self.next_packet += 1;
        n
    }

    pub(super) fn recycle(&mut self, packet: Packet) {
        self.recycle_buffer(packet.into_buffer());
    }

    pub(super) fn recycle_buffer(&mut self, buf: Vec<u8>) {
        if self.pool.len() < MAX_POOLED_BUFFERS {
            self.pool.push(buf);
        }
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
    /// FNV-1a 64 of the bytes as sent.
    digest: u64,
}

/// What the rules that fired on a packet want done.
#[derive(Debug, Default, Clone, Copy)]
struct RuleEffects {
    drop: bool,
    duplicate: bool,
    delay_ns: u64,
}
