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
use std::collections::{BTreeMap, VecDeque};
use uroce_wire::frame::{classify, Classified, Link};
use uroce_wire::{aeth, bth, HeaderKind, Mask, Opcode, Psn, Qpn};

/// Packets held for reordering at most; past it a packet goes unheld.
pub const MAX_HELD: usize = 64;
/// Firings kept in the log until drained; past it they are counted only.
pub const MAX_LOG: usize = 4096;
/// Device actions kept until polled.
pub const MAX_DEVICE_ACTIONS: usize = 1024;

/// Who the device is, to narrow rules by `role` and `device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its address (`UROCE_ADDR`; in the simulator the node's).
    pub address: IpAddr,
    /// The process's role (`--role`), if any.
    pub role: Option<String>,
}

/// What becomes of one packet at the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortVerdict {
    /// The copies that go on now, in order (none: dropped or held), each
    /// with its delay (background line delay and reordering, plus a rule's
    /// `delay`) and its flipped bit (background or a rule's `corrupt`).
    pub copies: [Option<CopyVerdict>; 2],
    /// Extra copies of the first copy (a `duplicate` rule), the i-th
    /// (1-based) `i × extra_gap_ns` after it.
    pub extra: u8,
    /// Gap between extra copies.
    pub extra_gap_ns: u64,
    /// Held by a `reorder` rule: it comes out of [`Port::take_released`].
    pub held: bool,
    /// Why it was dropped, if it was.
    pub dropped: Option<DropCause>,
    /// Whether any rule fired on it.
    pub fired: bool,
    /// The background faults' own verdict (egress, when the scenario has
    /// background faults): drawn for every packet, whatever the rules did.
    pub background: Option<Verdict>,
}

/// Why the port dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// A `drop` rule.
    Rule,
    /// The link is down (`link_down`).
    LinkDown,
    /// The peer is cut off (`partition`).
    Partition,
    /// The background random loss.
    Background,
}

/// A held packet whose turn came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its direction.
    pub dir: Dir,
    /// The local QPN it was given with.
    pub local_qpn: Option<Qpn>,
    /// The IP packet.
    pub packet: Vec<u8>,
    /// Its copies (as [`PortVerdict::copies`]).
    pub copies: [Option<CopyVerdict>; 2],
}

/// What the log says about the packet a rule fired on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketSummary {
    /// Direction.
    pub dir: Dir,
    /// The other end.
    pub peer: Option<IpAddr>,
    /// The BTH's opcode.
    pub opcode: Option<Opcode>,
    /// The local QPN.
    pub local_qpn: Option<Qpn>,
    /// The BTH's PSN.
    pub psn: Option<Psn>,
    /// Flow facts.
    pub qp: Option<u32>,
    /// PSN minus the flow's first.
    pub psn_offset: Option<u32>,
    /// The flow's message ordinal.
    pub message: Option<u64>,
    /// IP length.
    pub len: usize,
}

impl fmt::Display for PacketSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dir)?;
        let name = self.opcode.and_then(|o| o.info().map(|i| i.name));
        match (name, self.opcode) {
            (Some(name), _) => write!(f, " {name}")?,
            (None, Some(op)) => write!(f, " opcode 0x{:02x}", op.0)?,
            (None, None) => write!(f, " non-RoCE")?,
        }
        if let Some(q) = self.local_qpn {
            write!(f, " QP 0x{:06x}", q.value())?;
        }
        if let Some(psn) = self.psn {
            write!(f, " PSN 0x{:06x}", psn.value())?;
        }
        if let Some(peer) = self.peer {
            let way = if self.dir == Dir::In { "from" } else { "to" };
            write!(f, " {way} {peer}")?;
        }
        let mut facts = Vec::new();
        if let Some(k) = self.qp {
            facts.push(format!("qp {k}"));
        }
        if let Some(o) = self.psn_offset {
            facts.push(format!("psn+{o}"));
        }
        if let Some(m) = self.message {
            facts.push(format!("message {m}"));
        }
        if !facts.is_empty() {
            write!(f, " ({})", facts.join(", "))?;
        }
        Ok(())
    }
}

/// One firing of a rule, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    /// When (the device's clock).
    pub at_ns: u64,
    /// Which rule (index in [`Scenario::rules`]).
    pub rule: usize,
    /// Its name.
    pub rule_name: String,
    /// Which firing of the rule on this device (1-based).
    pub hit: u64,
    /// What it did.
    pub action: ScenarioAction,
    /// The packet it fired on (`None`: a timed rule).
    pub packet: Option<PacketSummary>,
    /// A remark: the reorder hold was full, the target QP is unknown, ...
    pub note: Option<&'static str>,
}

impl fmt::Display for Firing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {} fired {}: {}", self.rule_name, self.hit, self.action)?;
        match &self.packet {
            Some(p) => write!(f, " on {p}")?,
            None => write!(f, " at {}ms", self.at_ns / 1_000_000)?,
        }
        if let Some(note) = self.note {
            write!(f, " [{note}]")?;
        }
        Ok(())
    }
}

/// A timed rule that fired ([`Port::poll_timed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedFiring {
    /// Which rule.
    pub rule: usize,
    /// What it did (a device action is also queued for
    /// [`Port::poll_device_action`]).
    pub action: ScenarioAction,
}

/// One rule's counts on this device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSummary {
    /// Its name.
    pub name: String,
    /// Whether it applies on this device (its `role` and `device`).
    pub here: bool,
    /// Its `role` and `device`.
    pub scope: Scope,
    /// Packets that matched.
    pub matched: u64,
    /// Times it fired.
    pub fired: u64,
}

/// What a port did, for the summary line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSummary {
    /// The scenario's name.
    pub scenario: String,
    /// The device.
    pub address: Option<IpAddr>,
    /// Per rule, in file order.
    pub rules: Vec<RuleSummary>,
    /// Packets seen going in and out.
    pub packets_in: u64,
    /// Packets seen going out.
    pub packets_out: u64,
    /// Dropped by `drop` rules.
    pub dropped_rule: u64,
    /// Dropped while the link was down.
    pub dropped_link: u64,
    /// Dropped by a partition.
    pub dropped_partition: u64,
    /// Lost to the background faults.
    pub dropped_background: u64,
    /// Extra copies sent by `duplicate` rules.
    pub duplicated: u64,
    /// Packets delayed by `delay` rules.
    pub delayed: u64,
    /// Packets held by `reorder` rules.
    pub reordered: u64,
    /// Packets corrupted by `corrupt` rules.
    pub corrupted: u64,
    /// Device actions handed out.
    pub device_actions: u64,
    /// Firings not kept in the log (it was full).
    pub firings_lost: u64,
}

impl fmt::Display for PortSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = self.address.map_or_else(|| "-".to_owned(), |a| a.to_string());
        for r in &self.rules {
            if r.here {
                writeln!(
                    f,
                    "scenario {} {who} rule {} matched {} fired {}",
                    self.scenario, r.name, r.matched, r.fired
                )?;
            } else {
                // Which of its scopes this device is outside.
                let why = match (&r.scope.role, r.scope.device) {
                    (_, Some(d)) if self.address.is_some_and(|a| a != d) => {
                        format!("not for this device (device {d})")
                    }
                    (Some(role), _) => format!("not for this role (role {role})"),
                    _ => "not here".to_owned(),
                };
                writeln!(f, "scenario {} {who} rule {}: {why}", self.scenario, r.name)?;
            }
        }
        write!(
            f,
            "scenario {} {who} packets in={} out={} dropped rule={} link={} partition={} background={} \
             duplicated={} delayed={} reordered={} corrupted={} device_actions={}",
            self.scenario,
            self.packets_in,
            self.packets_out,
            self.dropped_rule,
            self.dropped_link,
            self.dropped_partition,
            self.dropped_background,
            self.duplicated,
            self.delayed,
            self.reordered,
            self.corrupted,
            self.device_actions
        )
    }
}

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

    /// The next held packet whose turn came (enough packets of its flow
    /// passed it, or it was held `max_hold_us`), in hold order.
    pub fn take_released(&mut self, now_ns: u64) -> Option<Held> {
        self.release(now_ns);
        self.released.pop_front()
    }

    fn release(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.held.len() {
            let h = &self.held[i];
            if h.passed >= h.behind || now_ns >= h.due_ns {
                if let Some(h) = self.held.remove(i) {
                    self.released.push_back(h.held);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Fires the next timed rule that is due (a window and no match key:
    /// once, at `after_ms`); `None` when none is.
    pub fn poll_timed(&mut self, now_ns: u64) -> Option<TimedFiring> {
        let i = self.rules.iter().position(|r| {
            r.here
                && r.spec.timed
                && !r.timed_done
                && r.spec.window.after_ns.is_some_and(|a| now_ns >= a)
        })?;
        self.rules[i].timed_done = true;
        let action = self.rules[i].spec.action;
        let mut note = None;
        match action {
            ScenarioAction::Link(link) => self.apply_link(now_ns, link, None),
            ScenarioAction::Device(spec) => {
                let target = if spec.target == Target::Matched { Target::All } else { spec.target };
                note = self.queue_device(now_ns, i, spec.kind, target, None, action);
            }
            ScenarioAction::Packet(_) => {}
        }
        let run = &mut self.rules[i];
        run.matches += 1;
        run.hits += 1;
        let firing = Firing {
            at_ns: now_ns,
            rule: i,
            rule_name: run.spec.name.clone(),
            hit: run.hits,
            action,
            packet: None,
            note,
        };
        self.record(firing);
        Some(TimedFiring { rule: i, action })
    }

    /// When the port next needs [`Port::poll_timed`] or
    /// [`Port::take_released`]: the earliest timed rule not yet fired and
    /// the earliest hold's `max_hold_us`.
    pub fn next_deadline(&self) -> Option<u64> {
        let timed = self
            .rules
            .iter()
            .filter(|r| r.here && r.spec.timed && !r.timed_done)
            .filter_map(|r| r.spec.window.after_ns);
        let holds = self.held.iter().map(|h| h.due_ns);
        timed.chain(holds).min()
    }

    /// The next device fault to apply, in the order decided.
    pub fn poll_device_action(&mut self) -> Option<DeviceAction> {
        self.device.pop_front()
    }

    /// The firings logged since the last call, in order.
    pub fn take_firings(&mut self) -> impl Iterator<Item = Firing> + '_ {
        self.log.drain(..)
    }

    /// Per rule: matched, fired; and the port's counts.
    pub fn summary(&self) -> PortSummary {
        let mut s = self.summary.clone();
        s.rules = self
            .rules
            .iter()
            .map(|r| RuleSummary {
                name: r.spec.name.clone(),
                here: r.here,
                scope: r.spec.scope.clone(),
                matched: r.matches,
                fired: r.hits,
            })
            .collect();
        s
    }

    /// The scenario's name.
    pub fn scenario_name(&self) -> &str {
        &self.scenario
    }

    /// Whether the link is down now.
    pub fn link_down(&self, now_ns: u64) -> bool {
        self.link_down_until.is_some_and(|u| now_ns < u)
    }

    /// Whether `peer` is cut off now.
    pub fn partitioned(&self, now_ns: u64, peer: IpAddr) -> bool {
        self.partitions.get(&peer).is_some_and(|&u| now_ns < u)
    }

    fn apply_link(&mut self, now_ns: u64, link: LinkAction, packet_peer: Option<IpAddr>) {
        let until = |for_ns: Option<u64>| for_ns.map_or(u64::MAX, |d| now_ns.saturating_add(d));
        match link {
            LinkAction::Down { for_ns } => self.link_down_until = Some(until(for_ns)),
            LinkAction::Up => self.link_down_until = None,
            LinkAction::Partition { for_ns, peer } => {
                self.partitions.retain(|_, &mut u| now_ns < u);
                if let Some(peer) = peer.or(packet_peer) {
                    self.partitions.insert(peer, until(for_ns));
                }
            }
        }
    }

    fn queue_device(
        &mut self,
        now_ns: u64,
        rule: usize,
        kind: DeviceActionKind,
        target: Target,
        matched: Option<Qpn>,
        action: ScenarioAction,
    ) -> Option<&'static str> {
        let ScenarioAction::Device(spec) = action else { return None };
        let qpn = match target {
            Target::All => None,
            Target::Matched => match matched {
                Some(q) => Some(q),
                None => return Some("no QP to target: not applied"),
            },
            Target::Qp(k) => match self.flows.qpn_of(k) {
                Some(q) => Some(q),
                None => return Some("target QP not seen yet: not applied"),
            },
        };
        if self.device.len() >= MAX_DEVICE_ACTIONS {
            return Some("device action queue full: not applied");
        }
        self.summary.device_actions += 1;
        self.device.push_back(DeviceAction {
            kind,
            qpn,
            count: spec.count,
            for_ns: spec.for_ns,
            exit: spec.exit,
            at_ns: now_ns,
            rule,
        });
        None
    }

    fn record(&mut self, firing: Firing) {
        if self.log.len() >= MAX_LOG {
            self.summary.firings_lost += 1;
        } else {
            self.log.push_back(firing);
        }
    }

    fn facts(&mut self, dir: Dir, local_qpn: Option<Qpn>, packet: &[u8]) -> Facts {
        let mut facts = Facts {
            peer: None,
            roce: false,
            opcode: None,
            mask: None,
            syndrome: None,
            psn: None,
            local_qpn: None,
            kind: None,
            flow: FlowFacts::default(),
        };
        let Classified::Roce(frame) = classify(packet, Link::RawIp) else { return facts };
        facts.roce = true;
        facts.peer = Some(match dir {
            Dir::In => frame.ip.source(),
            Dir::Out => frame.ip.destination(),
        });
        let Ok(header) = bth::Packet::new_checked(frame.transport()) else { return facts };
        let opcode = header.opcode();
        facts.opcode = Some(opcode);
        facts.psn = Some(header.psn());
        facts.local_qpn = match dir {
            Dir::In => Some(header.dest_qpn()),
            Dir::Out => local_qpn,
        };
        let Some(info) = opcode.info() else { return facts };
        facts.mask = Some(info.mask);
        if let Some(offset) = info.offset(HeaderKind::Aeth) {
            let aeth =
                frame.transport().get(offset..).and_then(|b| aeth::Packet::new_checked(b).ok());
            facts.syndrome = aeth.map(|a| a.syndrome());
        }
        facts.kind = if info.mask.contains(Mask::REQ) {
            Some(Kind::Request)
        } else if info.mask.contains(Mask::RESP) {
            Some(Kind::Response)
        } else {
            None
        };
        if let (Some(qpn), Some(kind)) = (facts.local_qpn, facts.kind) {
            let starts =
                info.mask.contains(Mask::START) || !info.mask.intersects(Mask::MIDDLE | Mask::END);
            facts.flow = self.flows.observe(qpn, dir, kind, header.psn(), starts);
        } else if let Some(qpn) = facts.local_qpn {
            facts.flow.qp = self.flows.qp_ordinal(qpn);
        }
        facts
    }
}

/// Whether a rule's match part (and window) holds for a packet.
fn matches(spec: &RuleSpec, now_ns: u64, dir: Dir, f: &Facts) -> bool {
    if !spec.window.contains(now_ns) || !spec.dir.matches(dir) {
        return false;
    }
    if spec.peer.is_some() && spec.peer != f.peer {
        return false;
    }
    if spec.matcher.opcode.is_some() && spec.matcher.opcode != f.opcode {
        return false;
    }
    if let Some(mask) = spec.matcher.opcode_mask {
        if !f.mask.is_some_and(|m| m.contains(mask)) {
            return false;
        }
    }
    if let Some(class) = spec.class {
        let ack_packet =
            f.mask.is_some_and(|m| !m.intersects(Mask::PAYLOAD | Mask::ATOMIC_ACK_ETH));
        let syndrome_ok = match class {
            Class::Ack => ack_packet && matches!(f.syndrome, Some(aeth::Syndrome::Ack { .. })),
            Class::Nak => {
                ack_packet
                    && matches!(
                        f.syndrome,
                        Some(aeth::Syndrome::Nak(_) | aeth::Syndrome::RnrNak { .. })
                    )
            }
            Class::RnrNak => {
                ack_packet && matches!(f.syndrome, Some(aeth::Syndrome::RnrNak { .. }))
            }
            Class::SeqNak => {
                ack_packet
                    && matches!(
                        f.syndrome,
                        Some(aeth::Syndrome::Nak(aeth::NakCode::PsnSequenceError))
                    )
            }
            _ => true,
        };
        if !syndrome_ok {
            return false;
        }
    }
    if let Some(position) = spec.position {
        if !f.mask.is_some_and(|m| position.matches(m)) {
            return false;
        }
    }
    if spec.qpn.is_some() && spec.qpn != f.local_qpn {
        return false;
    }
    let flow = &spec.flow;
    (flow.qp.is_none() || flow.qp == f.flow.qp)
        && (flow.psn_offset.is_none() || flow.psn_offset == f.flow.psn_offset)
        && (flow.message.is_none() || flow.message == f.flow.message)
        && (flow.retransmit.is_none() || flow.retransmit == f.flow.retransmit)
}

fn summary_of(dir: Dir, f: &Facts, len: usize) -> PacketSummary {
    PacketSummary {
        dir,
        peer: f.peer,
        opcode: f.opcode,
        local_qpn: f.local_qpn,
        psn: f.psn,
        qp: f.flow.qp,
        psn_offset: f.flow.psn_offset,
        message: f.flow.message,
        len,
    }
}

/// FNV-1a 64.
fn fnv64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
