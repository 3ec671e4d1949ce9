//! [`Port`]: one device's scenario engine, at its port.
//!
//! The runtime hands every packet the device sends (`Dir::Out`, before any
//! random fault) and receives (`Dir::In`, before the HCA) to
//! [`Port::on_packet`], with the time on the device's clock, and does what
//! the [`PortVerdict`] says. Then it drains, when it likes:
//! [`Port::take_released`] (reorder holds whose turn came: send or deliver
//! them, in order), [`Port::poll_device_action`] (device faults to apply
//! to the HCA, before the packet that triggered them reaches it),
//! [`Port::poll_timed`] at [`Port::next_deadline`] (rules that fire at a
//! time, without a packet), [`Port::take_firings`] (the log).
//!
//! Order on a packet: flow facts, then the background draws (egress only,
//! always the same number: adding a rule never shifts a random decision),
//! then every rule in file order (ordinals count every match, `chance`
//! draws once per match), then the link state the rules left (so the
//! packet that brings a link down is lost with it), then the copies.

mod drain;
mod matching;
mod summary;
mod verdict;

pub use summary::{Firing, PacketSummary, PortSummary, RuleSummary, TimedFiring};
pub use verdict::{
    DeviceInfo, DropCause, Held, PortVerdict, MAX_DEVICE_ACTIONS, MAX_HELD, MAX_LOG,
};

use super::flow::{FlowFacts, Flows, Kind};
use super::{
    Class, DeviceAction, DeviceActionKind, Dir, LinkAction, PacketAction, RuleSpec, Scenario,
    ScenarioAction, Scope, Target,
};
use crate::fate::bit_to_flip;
use crate::injector::{CopyVerdict, Injector, Verdict};
use crate::rng::SimRng;
use crate::spec::FaultSpec;
use core::fmt;
use core::net::IpAddr;
use matching::{fnv64, matches, summary_of};
use std::collections::{BTreeMap, VecDeque};
use uroce_wire::frame::{classify, Classified, Link};
use uroce_wire::{aeth, bth, HeaderKind, Mask, Opcode, Psn, Qpn};

#[derive(Debug, Clone)]
struct RuleRun {
    spec: RuleSpec,
    here: bool,
    matches: u64,
    hits: u64,
    timed_done: bool,
}

#[derive(Debug, Clone)]
struct HeldPacket {
    held: Held,
    flow: Option<(u32, Kind)>,
    behind: u8,
    passed: u8,
    due_ns: u64,
}

/// What the port reads from a packet.
#[derive(Debug, Clone, Copy)]
struct Facts {
    peer: Option<IpAddr>,
    roce: bool,
    opcode: Option<Opcode>,
    mask: Option<Mask>,
    syndrome: Option<aeth::Syndrome>,
    psn: Option<Psn>,
    local_qpn: Option<Qpn>,
    kind: Option<Kind>,
    flow: FlowFacts,
}

/// One device's scenario engine (see the module documentation).
#[derive(Debug, Clone)]
pub struct Port {
    scenario: String,
    me: DeviceInfo,
    rules: Vec<RuleRun>,
    flows: Flows,
    rng: SimRng,
    background: Option<Injector>,
    link_down_until: Option<u64>,
    partitions: BTreeMap<IpAddr, u64>,
    held: VecDeque<HeldPacket>,
    released: VecDeque<Held>,
    device: VecDeque<DeviceAction>,
    log: VecDeque<Firing>,
    summary: PortSummary,
}

impl Port {
    /// The engine of device `me` for scenario `s`, its generator seeded
    /// from `seed` (the scenario's, or `--seed`) and the device's address,
    /// so two devices draw differently but reproducibly. The background
    /// faults are the scenario's `faults`, with their own generator (as
    /// the runtime's `Injector` today).
    pub fn new(s: &Scenario, me: DeviceInfo, seed: u64) -> Port {
        let rules = s
            .rules
            .iter()
            .map(|spec| {
                let here = spec.scope.role.as_ref().is_none_or(|r| me.role.as_ref() == Some(r))
                    && spec.scope.device.is_none_or(|d| d == me.address);
                RuleRun { spec: spec.clone(), here, matches: 0, hits: 0, timed_done: false }
            })
            .collect();
        let summary = PortSummary {
            scenario: s.name.clone(),
            address: Some(me.address),
            ..PortSummary::default()
        };
        Port {
            scenario: s.name.clone(),
            rng: SimRng::new(seed ^ fnv64(me.address.to_string().as_bytes())),
            me,
            rules,
            flows: Flows::default(),
            background: s.background.filter(FaultSpec::is_active).map(Injector::new),
            link_down_until: None,
            partitions: BTreeMap::new(),
            held: VecDeque::new(),
            released: VecDeque::new(),
            device: VecDeque::new(),
            log: VecDeque::new(),
            summary,
        }
    }

    /// Replaces the background faults (`--faults` / `UROCE_FAULTS` given
    /// with a scenario).
    pub fn set_background(&mut self, spec: Option<FaultSpec>) {
        self.background = spec.filter(FaultSpec::is_active).map(Injector::new);
    }

    /// The device this port belongs to.
    pub fn device_info(&self) -> &DeviceInfo {
        &self.me
    }

    /// Decides one packet. `local_qpn`: for egress, the sending QP (the
    /// BTH names the remote one; `None` when unknown); for ingress, ignored
    /// (the BTH's destination QP is local). Never panics, whatever the
    /// bytes.
    pub fn on_packet(
        &mut self,
        now_ns: u64,
        dir: Dir,
        local_qpn: Option<Qpn>,
        packet: &[u8],
    ) -> PortVerdict {
        match dir {
            Dir::In => self.summary.packets_in += 1,
            Dir::Out => self.summary.packets_out += 1,
        }
        let facts = self.facts(dir, local_qpn, packet);
        let background = match (dir, self.background.as_mut()) {
            (Dir::Out, Some(injector)) => Some(injector.apply(packet)),
            _ => None,
        };
        let mut verdict = PortVerdict { background, ..PortVerdict::default() };
        let mut drop = false;
        let mut delay_ns = 0u64;
        let mut corrupt: Option<Option<usize>> = None;
        let mut hold: Option<(u8, u64)> = None;
        for i in 0..self.rules.len() {
            let run = &mut self.rules[i];
            if !run.here || run.spec.timed || !matches(&run.spec, now_ns, dir, &facts) {
                continue;
            }
            run.matches += 1;
            let lucky = run.spec.chance.is_none_or(|p| self.rng.chance(p));
            if !(run.spec.fire.contains(run.matches) && lucky) {
                continue;
            }
            run.hits += 1;
            verdict.fired = true;
            let action = run.spec.action;
            let mut note = None;
            match action {
                ScenarioAction::Packet(PacketAction::Drop) => drop = true,
                ScenarioAction::Packet(PacketAction::Duplicate { copies, gap_ns }) => {
                    verdict.extra = verdict.extra.saturating_add(copies);
                    verdict.extra_gap_ns = verdict.extra_gap_ns.max(gap_ns);
                }
                ScenarioAction::Packet(PacketAction::Delay { delay_ns: d }) => {
                    delay_ns = delay_ns.saturating_add(d)
                }
                ScenarioAction::Packet(PacketAction::Reorder { behind, max_hold_ns }) => {
                    if self.held.len() >= MAX_HELD {
                        note = Some("reorder hold full: not held");
                    } else if hold.is_none() {
                        hold = Some((behind, max_hold_ns));
                    }
                }
                ScenarioAction::Packet(PacketAction::Corrupt { bit }) => {
                    let bit = bit.or_else(|| bit_to_flip(packet, self.rng.next_u64()));
                    if bit.is_none() {
                        note = Some("no bit to flip");
                    }
                    corrupt = Some(bit);
                }
                ScenarioAction::Link(link) => self.apply_link(now_ns, link, facts.peer),
                ScenarioAction::Device(spec) => {
                    note = self.queue_device(
                        now_ns,
                        i,
                        spec.kind,
                        spec.target,
                        facts.local_qpn,
                        action,
                    );
                }
            }
            let hit = self.rules[i].hits;
            self.record(Firing {
                at_ns: now_ns,
                rule: i,
                rule_name: self.rules[i].spec.name.clone(),
                hit,
                action,
                packet: Some(summary_of(dir, &facts, packet.len())),
                note,
            });
        }

        // The link state the rules left.
        let cut = if self.link_down_until.is_some_and(|u| now_ns < u) && facts.roce {
            Some(DropCause::LinkDown)
        } else if facts.roce
            && facts.peer.is_some_and(|p| self.partitions.get(&p).is_some_and(|&u| now_ns < u))
        {
            Some(DropCause::Partition)
        } else {
            None
        };
        verdict.dropped = if drop {
            Some(DropCause::Rule)
        } else if cut.is_some() {
            cut
        } else if background.is_some_and(|b| b.lost()) {
            Some(DropCause::Background)
        } else {
            None
        };
        match verdict.dropped {
            Some(DropCause::Rule) => self.summary.dropped_rule += 1,
            Some(DropCause::LinkDown) => self.summary.dropped_link += 1,
            Some(DropCause::Partition) => self.summary.dropped_partition += 1,
            Some(DropCause::Background) => self.summary.dropped_background += 1,
            None => {}
        }
        if verdict.dropped.is_some() {
            verdict.extra = 0;
            verdict.extra_gap_ns = 0;
            return verdict;
        }

        let base = CopyVerdict { delay_ns: 0, reordered: false, flip_bit: None };
        let mut copies = background.map_or([Some(base), None], |b| b.copies);
        for copy in copies.iter_mut().flatten() {
            copy.delay_ns = copy.delay_ns.saturating_add(delay_ns);
            if let Some(bit) = corrupt {
                copy.flip_bit = bit.or(copy.flip_bit);
            }
        }
        if delay_ns > 0 {
            self.summary.delayed += 1;
        }
        if corrupt.flatten().is_some() {
            self.summary.corrupted += 1;
        }
        if verdict.extra > 0 {
            self.summary.duplicated += u64::from(verdict.extra);
        }
        let flow = facts.local_qpn.zip(facts.kind).map(|(q, k)| (q.value(), k));
        if hold.is_none() {
            // A packet that passes counts for the holds of its flow.
            for h in self.held.iter_mut().filter(|h| h.held.dir == dir && h.flow == flow) {
                h.passed = h.passed.saturating_add(1);
            }
        }
        self.release(now_ns);
        if let Some((behind, max_hold_ns)) = hold {
            self.summary.reordered += 1;
            self.held.push_back(HeldPacket {
                held: Held { dir, local_qpn: facts.local_qpn, packet: packet.to_vec(), copies },
                flow,
                behind,
                passed: 0,
                due_ns: now_ns.saturating_add(max_hold_ns),
            });
            verdict.held = true;
            return verdict;
        }
        verdict.copies = copies;
        verdict
    }
}
