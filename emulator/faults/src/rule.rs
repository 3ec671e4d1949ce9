//! Targeted rules: "drop the 3rd packet with opcode X to QP Y".
//!
//! A [`Rule`] is a [`Matcher`] (conditions on the packet's BTH and on its
//! direction), an [`Action`] and a [`Fire`] (which matches it acts on).
//! The simulated fabric (`uroce-sim`, which re-exports these types) checks
//! every active rule, in the order they were added, on every packet an
//! endpoint emits, before any other fault: so "the n-th matching packet"
//! counts the packets the sender emitted, whatever the random faults do to
//! them afterwards. The scenario engine builds its
//! rules on the same [`Matcher`].

use core::fmt;
use uroce_wire::frame::{classify, Classified, Link};
use uroce_wire::{bth, Mask, Opcode, Psn, Qpn};

/// A node of the simulated fabric: the index of its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub usize);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// What the fabric reads from a packet to match rules against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketFacts {
    /// Sender.
    pub from: NodeId,
    /// Receiver, when some endpoint owns the destination address.
    pub to: Option<NodeId>,
    /// The BTH fields, when the packet is a RoCEv2 datagram with a BTH.
    pub bth: Option<BthFacts>,
}

/// The BTH fields rules look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthFacts {
    /// Opcode.
    pub opcode: Opcode,
    /// Destination QP.
    pub dest_qpn: Qpn,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthFacts {
    /// Reads the BTH of an IP packet (no link header) that is a UDP
    /// datagram to port 4791; `None` for anything else. Never panics.
    pub fn read(ip_packet: &[u8]) -> Option<BthFacts> {
        let Classified::Roce(frame) = classify(ip_packet, Link::RawIp) else { return None };
        let header = bth::Packet::new_checked(frame.transport()).ok()?;
        Some(BthFacts { opcode: header.opcode(), dest_qpn: header.dest_qpn(), psn: header.psn() })
    }
}

/// Conditions a packet must meet, all of them; an empty matcher matches
/// every packet. A condition on a BTH field never matches a packet that has
/// no readable BTH; a condition on the receiver never matches a packet that
/// has no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matcher {
    /// The opcode, exactly.
    pub opcode: Option<Opcode>,
    /// Facts the opcode must have (every bit of the mask), from the opcode
    /// table: `Mask::RESP | Mask::READ` matches READ responses. An opcode
    /// missing from the table has no facts.
    pub opcode_mask: Option<Mask>,
    /// The destination QP.
    pub dest_qpn: Option<Qpn>,
    /// The PSN.
    pub psn: Option<Psn>,
    /// The sender.
    pub from: Option<NodeId>,
    /// The receiver.
    pub to: Option<NodeId>,
}

impl Matcher {
    /// Matches every packet.
    pub const fn any() -> Matcher {
        Matcher { opcode: None, opcode_mask: None, dest_qpn: None, psn: None, from: None, to: None }
    }

    /// Only this opcode.
    pub const fn opcode(mut self, opcode: Opcode) -> Matcher {
        self.opcode = Some(opcode);
        self
    }

    /// Only opcodes with every fact in `mask`.
    pub const fn opcode_mask(mut self, mask: Mask) -> Matcher {
        self.opcode_mask = Some(mask);
        self
    }

    /// Only packets to this QP.
    pub const fn dest_qpn(mut self, qpn: Qpn) -> Matcher {
        self.dest_qpn = Some(qpn);
        self
    }

    /// Only packets with this PSN.
    pub const fn psn(mut self, psn: Psn) -> Matcher {
        self.psn = Some(psn);
        self
    }

    /// Only packets from this node.
    pub const fn from(mut self, node: NodeId) -> Matcher {
        self.from = Some(node);
        self
    }

    /// Only packets to this node.
    pub const fn to(mut self, node: NodeId) -> Matcher {
        self.to = Some(node);
        self
    }

    fn needs_bth(&self) -> bool {
        self.opcode.is_some()
            || self.opcode_mask.is_some()
            || self.dest_qpn.is_some()
            || self.psn.is_some()
    }

    /// Whether a packet meets every condition.
    pub fn matches(&self, facts: &PacketFacts) -> bool {
        if self.from.is_some_and(|n| n != facts.from) {
            return false;
        }
        if self.to.is_some() && self.to != facts.to {
            return false;
        }
        if !self.needs_bth() {
            return true;
        }
        let Some(bth) = facts.bth else { return false };
        if self.opcode.is_some_and(|op| op != bth.opcode) {
            return false;
        }
        if let Some(mask) = self.opcode_mask {
            if !bth.opcode.info().is_some_and(|info| info.mask.contains(mask)) {
                return false;
            }
        }
        if self.dest_qpn.is_some_and(|q| q != bth.dest_qpn) {
            return false;
        }
        !self.psn.is_some_and(|p| p != bth.psn)
    }
}

/// What a rule does to a packet it fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The packet never arrives.
    Drop,
    /// The packet arrives twice.
    Duplicate,
    /// The packet arrives this many nanoseconds late.
    Delay {
        /// Extra delay in nanoseconds.
        delay_ns: u64,
    },
}

/// Which matching packets a rule acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fire {
    /// Only the n-th match (1-based).
    Nth(u64),
    /// Every match.
    Every,
}

/// A targeted fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Which packets.
    pub matcher: Matcher,
    /// What to do.
    pub action: Action,
    /// On which of the matches.
    pub fire: Fire,
}

impl Rule {
    /// A rule that acts on every match (narrow it with [`Rule::nth`]).
    pub const fn new(matcher: Matcher, action: Action) -> Rule {
        Rule { matcher, action, fire: Fire::Every }
    }

    /// Acts only on the n-th match (1-based).
    pub const fn nth(mut self, n: u64) -> Rule {
        assert!(n >= 1, "Rule::nth counts from 1");
        self.fire = Fire::Nth(n);
        self
    }
}

/// A rule's index in the fabric, in the order rules were added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(pub usize);

/// A rule and what it has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleState {
    /// The rule.
    pub rule: Rule,
    /// Packets that matched while the rule was active.
    pub matches: u64,
    /// Times the action was applied.
    pub hits: u64,
    /// Whether the rule is still checked (heal turns every rule off).
    pub active: bool,
}

impl RuleState {
    /// A rule that has seen nothing yet, active.
    pub fn new(rule: Rule) -> RuleState {
        RuleState { rule, matches: 0, hits: 0, active: true }
    }

    /// Counts a packet; returns the action when the rule fires on it.
    pub fn offer(&mut self, facts: &PacketFacts) -> Option<Action> {
        if !self.active || !self.rule.matcher.matches(facts) {
            return None;
        }
        self.matches += 1;
        let fires = match self.rule.fire {
            Fire::Nth(n) => self.matches == n,
            Fire::Every => true,
        };
        if fires {
            self.hits += 1;
            Some(self.rule.action)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(opcode: Opcode, qpn: u32, psn: u32) -> PacketFacts {
        PacketFacts {
            from: NodeId(0),
            to: Some(NodeId(1)),
            bth: Some(BthFacts { opcode, dest_qpn: Qpn::new(qpn), psn: Psn::new(psn) }),
        }
    }

    #[test]
    fn empty_matcher_matches_everything() {
        let m = Matcher::any();
        assert!(m.matches(&facts(Opcode::RC_SEND_ONLY, 1, 2)));
        assert!(m.matches(&PacketFacts { from: NodeId(3), to: None, bth: None }));
    }

    #[test]
    fn conditions_are_anded() {
        let m = Matcher::any().opcode(Opcode::RC_SEND_ONLY).dest_qpn(Qpn::new(17)).from(NodeId(0));
        assert!(m.matches(&facts(Opcode::RC_SEND_ONLY, 17, 0)));
        assert!(!m.matches(&facts(Opcode::RC_SEND_ONLY, 18, 0)));
        assert!(!m.matches(&facts(Opcode::RC_ACKNOWLEDGE, 17, 0)));
        let mut other_dir = facts(Opcode::RC_SEND_ONLY, 17, 0);
        other_dir.from = NodeId(1);
        assert!(!m.matches(&other_dir));
        assert!(!m.matches(&PacketFacts { from: NodeId(0), to: None, bth: None }));
    }

    #[test]
    fn mask_matches_by_facts() {
        let reads = Matcher::any().opcode_mask(Mask::RESP | Mask::READ);
        assert!(reads.matches(&facts(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1, 0)));
        assert!(!reads.matches(&facts(Opcode::RC_RDMA_READ_REQUEST, 1, 0)));
        assert!(!reads.matches(&facts(Opcode(0xff), 1, 0)));
    }

    #[test]
    fn to_and_psn() {
        let m = Matcher::any().to(NodeId(1)).psn(Psn::new(5));
        assert!(m.matches(&facts(Opcode::RC_SEND_ONLY, 1, 5)));
        assert!(!m.matches(&facts(Opcode::RC_SEND_ONLY, 1, 6)));
        let mut no_route = facts(Opcode::RC_SEND_ONLY, 1, 5);
        no_route.to = None;
        assert!(!m.matches(&no_route));
    }

    #[test]
    fn nth_fires_once() {
        let mut state = RuleState::new(Rule::new(Matcher::any(), Action::Drop).nth(3));
        let f = facts(Opcode::RC_SEND_ONLY, 1, 0);
        let fired: Vec<bool> = (0..6).map(|_| state.offer(&f).is_some()).collect();
        assert_eq!(fired, [false, false, true, false, false, false]);
        assert_eq!((state.matches, state.hits), (6, 1));
    }

    #[test]
    fn bth_facts_of_garbage_is_none() {
        assert_eq!(BthFacts::read(&[]), None);
        assert_eq!(BthFacts::read(&[0x45; 30]), None);
    }
}
