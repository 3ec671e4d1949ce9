//! The [`Port`](super::Port)'s firing log and summary.

use super::*;

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
