//! Fault scenarios: a file that says which packets of a run to drop,
//! duplicate, delay, reorder or corrupt, when to cut a link, and which
//! device-side faults to trigger, evaluated by each device on its own port
//! (issue 16; `docs/design-notes/fault-scenarios.md` §2 and §3).
//!
//! * [`Scenario`]: a parsed, validated file ([`Scenario::parse`]), or one
//!   of the library's ([`Scenario::load`], [`library`]). The format is TOML
//!   (`[scenario]`, `[params]`, `[expect]`, `[[rule]]`), walked by hand with
//!   `toml_edit` so that every error ([`ScenarioError`]) names its line and
//!   column; unknown keys are errors.
//! * [`RuleSpec`]: one `[[rule]]`: a scope (role, device), match
//!   conditions (direction, peer, opcode, class, position, QPN, and flow
//!   facts: QP ordinal, PSN offset, message ordinal, retransmission), which
//!   matches fire ([`FireRange`], `chance`), a time window, and a
//!   [`ScenarioAction`]: on the packet ([`PacketAction`]), on the link
//!   ([`LinkAction`]) or in the device ([`DeviceActionSpec`], which the
//!   [`Port`] hands out as a [`DeviceAction`] for the runtime to apply).
//! * [`Port`]: one device's engine: the rules seen from that device's port,
//!   per-device ordinals and flows, link state, reorder holds, the
//!   background random faults (an [`Injector`](crate::Injector), the same
//!   draws per packet whatever the rules do), a firing log and a summary.
//!
//! Sans-IO like the rest of the crate: no clock (time is a `now_ns`
//! argument), no thread, no file, no hash map. Reading a file is the
//! caller's; [`Scenario::parse`] takes its text.

mod error;
mod evaluate;
mod expect;
mod flow;
pub mod library;
mod parse;
mod port;

#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod port_tests;

pub use error::ScenarioError;
pub use evaluate::{
    after_first_firing, evaluate, Device, Exit, ExpectLine, FirstFiring, Observed, Raised,
};
pub use expect::{Expect, ExpectExit, Outcome, RoleExpect, ASYNC_EVENTS, WC_STATUSES};
pub use port::{
    DeviceInfo, DropCause, Firing, Held, PacketSummary, Port, PortSummary, PortVerdict,
    RuleSummary, TimedFiring, MAX_DEVICE_ACTIONS, MAX_HELD, MAX_LOG,
};

use crate::rng::Probability;
use crate::rule::Matcher;
use crate::spec::FaultSpec;
use core::fmt;
use core::net::IpAddr;
use uroce_wire::{Mask, Qpn};

/// Longest window or outage, in milliseconds (an hour).
pub const MAX_MS: u64 = 3_600_000;
/// Longest packet delay, in microseconds (ten seconds).
pub const MAX_US: u64 = 10_000_000;

/// A parsed and validated scenario file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// `[scenario] name`: `[a-z0-9-]+`.
    pub name: String,
    /// `[scenario] summary`: one line.
    pub summary: String,
    /// `[scenario] seed`: the engine's generator (default 0).
    pub seed: u64,
    /// `[scenario] faults`: background random faults on egress.
    pub background: Option<FaultSpec>,
    /// `[params]` with overrides applied, in file order.
    pub params: Vec<(String, i64)>,
    /// `[expect]`.
    pub expect: Expect,
    /// The `[[rule]]`s, in file order.
    pub rules: Vec<RuleSpec>,
    /// Where the text came from, for errors.
    pub origin: String,
    /// The text, so [`Scenario::with_params`] can evaluate it again.
    pub text: String,
}

impl Scenario {
    /// Parses and validates a scenario file's text; `origin` names it in
    /// errors (a path, or `library:<name>`). Never panics.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        parse::parse(text, origin, &[])
    }

    /// A scenario of the library ([`library::NAMES`]) by name. Files are
    /// the caller's to read (this crate does no I/O): read it and call
    /// [`Scenario::parse`].
    pub fn load(name: &str) -> Result<Scenario, ScenarioError> {
        let Some(text) = library::get(name) else {
            return Err(ScenarioError::outside(
                name,
                format!(
                    "no scenario named \"{name}\" in the library ({})",
                    library::NAMES.join(", ")
                ),
            ));
        };
        Scenario::parse(text, &format!("library:{name}"))
    }

    /// The scenario with some `[params]` overridden (`--param k=v`); every
    /// rule key that names a param takes the new value, checked again. A
    /// param the file does not declare is an error.
    pub fn with_params(self, overrides: &[(String, i64)]) -> Result<Scenario, ScenarioError> {
        parse::parse(&self.text, &self.origin, overrides)
    }

    /// A param's value.
    pub fn param(&self, name: &str) -> Option<i64> {
        self.params.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

/// Which direction of a device's traffic a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// Packets the device receives.
    In,
    /// Packets the device sends.
    Out,
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::In => "in",
            Dir::Out => "out",
        })
    }
}

/// `dir`: one direction or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirMatch {
    /// `in`.
    In,
    /// `out`.
    Out,
    /// `both` (the default).
    #[default]
    Both,
}

impl DirMatch {
    /// Whether a packet going `dir` matches.
    pub fn matches(self, dir: Dir) -> bool {
        matches!(
            (self, dir),
            (DirMatch::Both, _) | (DirMatch::In, Dir::In) | (DirMatch::Out, Dir::Out)
        )
    }
}

/// `class`: a kind of packet, from the opcode table's facts and, for the
/// acknowledgements, the AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Any request (`Mask::REQ`).
    Request,
    /// Any response (`Mask::RESP`).
    Response,
    /// A SEND request.
    Send,
    /// An RDMA WRITE request.
    Write,
    /// An RDMA READ request.
    ReadRequest,
    /// An RDMA READ response.
    ReadResponse,
    /// An atomic request (compare-and-swap, fetch-and-add).
    Atomic,
    /// An ATOMIC ACKNOWLEDGE.
    AtomicAck,
    /// An ACKNOWLEDGE whose syndrome is an ACK.
    Ack,
    /// Any NAK (RNR or not).
    Nak,
    /// An RNR NAK.
    RnrNak,
    /// A PSN sequence error NAK.
    SeqNak,
}

impl Class {
    /// Every class with its name in the file.
    pub const ALL: [(&'static str, Class); 12] = [
        ("request", Class::Request),
        ("response", Class::Response),
        ("send", Class::Send),
        ("write", Class::Write),
        ("read_request", Class::ReadRequest),
        ("read_response", Class::ReadResponse),
        ("atomic", Class::Atomic),
        ("atomic_ack", Class::AtomicAck),
        ("ack", Class::Ack),
        ("nak", Class::Nak),
        ("rnr_nak", Class::RnrNak),
        ("seq_nak", Class::SeqNak),
    ];

    /// The facts the opcode must have.
    pub fn mask(self) -> Mask {
        match self {
            Class::Request => Mask::REQ,
            Class::Response => Mask::RESP,
            Class::Send => Mask::REQ | Mask::SEND,
            Class::Write => Mask::REQ | Mask::WRITE,
            Class::ReadRequest => Mask::REQ | Mask::READ,
            Class::ReadResponse => Mask::RESP | Mask::READ,
            Class::Atomic => Mask::REQ | Mask::ATOMIC,
            Class::AtomicAck => Mask::RESP | Mask::ATOMIC,
            Class::Ack | Class::Nak | Class::RnrNak | Class::SeqNak => Mask::RESP | Mask::AETH,
        }
    }
}

/// `position`: where a packet is in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// `first`: a FIRST packet of a multi-packet message.
    First,
    /// `middle`.
    Middle,
    /// `last`: a LAST packet of a multi-packet message.
    Last,
    /// `only`: a single-packet message.
    Only,
}

impl Position {
    /// Whether an opcode's facts put it at this position.
    pub fn matches(self, mask: Mask) -> bool {
        let (start, end) = (mask.contains(Mask::START), mask.contains(Mask::END));
        match self {
            Position::First => start && !end,
            Position::Middle => mask.contains(Mask::MIDDLE),
            Position::Last => end && !start,
            Position::Only => start && end,
        }
    }
}

/// A rule's scope: where it is evaluated at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scope {
    /// `role`: only in a process (or harness node) with this role.
    pub role: Option<String>,
    /// `device`: only on the device with this address.
    pub device: Option<IpAddr>,
}

/// The per-flow conditions (flow = local QPN, direction, request or
/// response), counted by the [`Port`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowMatch {
    /// `qp`: the device's k-th QP by first packet seen (1-based).
    pub qp: Option<u32>,
    /// `psn_offset`: PSN minus the flow's first PSN.
    pub psn_offset: Option<u32>,
    /// `message`: the flow's k-th new message (1-based).
    pub message: Option<u64>,
    /// `retransmit`: only first transmissions (`false`) or only repeats.
    pub retransmit: Option<bool>,
}

impl FlowMatch {
    /// Whether any condition is set.
    pub fn is_set(&self) -> bool {
        self.qp.is_some()
            || self.psn_offset.is_some()
            || self.message.is_some()
            || self.retransmit.is_some()
    }
}

/// `nth`, `times`: which matches fire (1-based, per rule per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireRange {
    /// The first match that fires.
    pub nth: u64,
    /// How many matches fire from `nth` on (`None`: all).
    pub times: Option<u64>,
}

impl FireRange {
    /// Every match (no `nth`).
    pub const EVERY: FireRange = FireRange { nth: 1, times: None };

    /// Whether the `n`-th match (1-based) fires.
    pub fn contains(&self, n: u64) -> bool {
        n >= self.nth && self.times.is_none_or(|t| n - self.nth < t)
    }
}

/// `after_ms`, `until_ms`, in nanoseconds of the device's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// From (inclusive).
    pub after_ns: Option<u64>,
    /// Until (exclusive).
    pub until_ns: Option<u64>,
}

impl Window {
    /// Whether `now_ns` is inside.
    pub fn contains(&self, now_ns: u64) -> bool {
        self.after_ns.is_none_or(|a| now_ns >= a) && self.until_ns.is_none_or(|u| now_ns < u)
    }

    /// Whether either bound is set.
    pub fn is_set(&self) -> bool {
        self.after_ns.is_some() || self.until_ns.is_some()
    }
}

/// One `[[rule]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// `name` (default `rule<N>`, 1-based file order).
    pub name: String,
    /// `role`, `device`.
    pub scope: Scope,
    /// `dir`.
    pub dir: DirMatch,
    /// `peer`: the other end's address.
    pub peer: Option<IpAddr>,
    /// `opcode` (in `matcher.opcode`) and `class` (its mask in
    /// `matcher.opcode_mask`); `qpn` is checked against the *local* QPN,
    /// not the BTH's destination, so it is not in the matcher.
    pub matcher: Matcher,
    /// `class`, for the syndrome part of `ack`, `nak`, `rnr_nak`, `seq_nak`.
    pub class: Option<Class>,
    /// `position`.
    pub position: Option<Position>,
    /// `qpn`: the local QPN.
    pub qpn: Option<Qpn>,
    /// `qp`, `psn_offset`, `message`, `retransmit`.
    pub flow: FlowMatch,
    /// `nth`, `times`.
    pub fire: FireRange,
    /// `chance`.
    pub chance: Option<Probability>,
    /// `after_ms`, `until_ms`.
    pub window: Window,
    /// `action` and its parameters.
    pub action: ScenarioAction,
    /// A window and no match key, with a link or device action: fires once
    /// at `after_ms`, without a packet.
    pub timed: bool,
    /// Line of the `[[rule]]` header, for messages.
    pub line: u32,
}

/// What a rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioAction {
    /// To the matched packet.
    Packet(PacketAction),
    /// To the device's link.
    Link(LinkAction),
    /// Inside the device (handed to the runtime as a [`DeviceAction`]).
    Device(DeviceActionSpec),
}

impl fmt::Display for ScenarioAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioAction::Packet(a) => a.fmt(f),
            ScenarioAction::Link(a) => a.fmt(f),
            ScenarioAction::Device(a) => a.fmt(f),
        }
    }
}

/// A packet action (the fabric's [`Action`](crate::Action) with the
/// scenario's parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketAction {
    /// `drop`.
    Drop,
    /// `duplicate`: `copies` extra copies, each `gap_ns` after the previous.
    Duplicate {
        /// Extra copies (1..=16).
        copies: u8,
        /// Gap between copies.
        gap_ns: u64,
    },
    /// `delay`.
    Delay {
        /// How long.
        delay_ns: u64,
    },
    /// `reorder`: held until `behind` later packets of its flow passed it,
    /// or `max_hold_ns`.
    Reorder {
        /// Packets that overtake it (1..=64).
        behind: u8,
        /// Longest hold.
        max_hold_ns: u64,
    },
    /// `corrupt`: flip one ICRC-covered bit (`None`: drawn).
    Corrupt {
        /// The bit, from the start of the IP packet.
        bit: Option<usize>,
    },
}

impl fmt::Display for PacketAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PacketAction::Drop => write!(f, "drop"),
            PacketAction::Duplicate { copies, gap_ns } => {
                write!(f, "duplicate x{copies} gap {}us", gap_ns / 1_000)
            }
            PacketAction::Delay { delay_ns } => write!(f, "delay {}us", delay_ns / 1_000),
            PacketAction::Reorder { behind, max_hold_ns } => {
                write!(f, "reorder behind {behind} (max {}us)", max_hold_ns / 1_000)
            }
            PacketAction::Corrupt { bit: Some(bit) } => write!(f, "corrupt bit {bit}"),
            PacketAction::Corrupt { bit: None } => write!(f, "corrupt"),
        }
    }
}

/// A link action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAction {
    /// `link_down`: every RoCE packet of the device dropped, both ways.
    Down {
        /// How long (`None`: until a `link_up` rule).
        for_ns: Option<u64>,
    },
    /// `link_up`: ends a `link_down`.
    Up,
    /// `partition`: packets to and from a peer dropped.
    Partition {
        /// How long (`None`: for good).
        for_ns: Option<u64>,
        /// The peer (`None`: the matched packet's).
        peer: Option<IpAddr>,
    },
}

impl fmt::Display for LinkAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Option<u64>| d.map_or(String::new(), |ns| format!(" {}ms", ns / 1_000_000));
        match *self {
            LinkAction::Down { for_ns } => write!(f, "link_down{}", ms(for_ns)),
            LinkAction::Up => write!(f, "link_up"),
            LinkAction::Partition { for_ns, .. } => write!(f, "partition{}", ms(for_ns)),
        }
    }
}

/// A device-side fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceActionKind {
    /// `rnr`: the next `count` receive-consuming requests get an RNR NAK.
    Rnr,
    /// `fail_key`: the next `count` R_Key checks fail.
    FailKey,
    /// `dma_fault`: the next `count` responder memory accesses fault.
    DmaFault,
    /// `stall`: the responder is silent for `for_ns`.
    Stall,
    /// `crash`: every QP and the CM die silently (and the process, with
    /// `exit`).
    Crash,
}

impl DeviceActionKind {
    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            DeviceActionKind::Rnr => "rnr",
            DeviceActionKind::FailKey => "fail_key",
            DeviceActionKind::DmaFault => "dma_fault",
            DeviceActionKind::Stall => "stall",
            DeviceActionKind::Crash => "crash",
        }
    }
}

/// `target` of a device action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// The matched packet's local QP (every QP for a timed rule).
    #[default]
    Matched,
    /// Every live QP of the device.
    All,
    /// The device's k-th QP (1-based), as `qp`.
    Qp(u32),
}

/// A device action as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceActionSpec {
    /// Which fault.
    pub kind: DeviceActionKind,
    /// Which QP.
    pub target: Target,
    /// `count` (rnr, fail_key, dma_fault; default 1).
    pub count: u32,
    /// `for_ms` (stall), in nanoseconds.
    pub for_ns: u64,
    /// `exit` (crash; default true).
    pub exit: bool,
}

impl fmt::Display for DeviceActionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DeviceActionKind::Stall => write!(f, "stall {}ms", self.for_ns / 1_000_000),
            DeviceActionKind::Crash if self.exit => write!(f, "crash (exit)"),
            DeviceActionKind::Crash => write!(f, "crash"),
            kind => write!(f, "{} x{}", kind.name(), self.count),
        }
    }
}

/// A device-side fault the [`Port`] decided, for the runtime that owns the
/// HCA to apply (`Hca::inject_fault` in a later step): the target resolved
/// to a QPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAction {
    /// Which fault.
    pub kind: DeviceActionKind,
    /// The QP (`None`: every QP of the device).
    pub qpn: Option<Qpn>,
    /// How many requests (rnr, fail_key, dma_fault).
    pub count: u32,
    /// How long (stall), in nanoseconds.
    pub for_ns: u64,
    /// Whether the process dies too (crash).
    pub exit: bool,
    /// When the port decided it (the device's clock).
    pub at_ns: u64,
    /// Which rule (index in [`Scenario::rules`]).
    pub rule: usize,
}
