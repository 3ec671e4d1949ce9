//! The event trace of a simulated run: every event is folded into a
//! running 64-bit hash, and the last few are kept for reading.
//!
//! The hash is FNV-1a 64 over a byte encoding fixed here (a tag byte, then
//! each field as little-endian `u64`), never `std`'s `Hash`/`DefaultHasher`,
//! whose output may change between Rust releases and whose `usize` width
//! depends on the platform. Two runs have the same [`Trace::hash`] exactly
//! when they saw the same events, in the same order, at the same virtual
//! times (up to FNV collisions).

use super::NodeId;
use std::collections::VecDeque;
use uroce_faults::scenario::DeviceActionKind;
use uroce_hca::time::Instant;

/// FNV-1a, 64 bits: simple, specified, stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Fnv64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// A hasher in its initial state.
    pub const fn new() -> Fnv64 {
        Fnv64(Self::OFFSET_BASIS)
    }

    /// Folds in bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(Self::PRIME);
        }
    }

    /// Folds in a `u64` as 8 little-endian bytes. A zero byte only
    /// multiplies by the prime (`x ^ 0 = x`), so the value's high zero
    /// bytes fold in as one multiplication by a power of the prime: the
    /// same hash as [`Fnv64::write`] of the 8 bytes, in fewer steps.
    pub fn write_u64(&mut self, value: u64) {
        let significant = 8 - (value.leading_zeros() / 8) as usize;
        let mut h = self.0;
        let mut v = value;
        for _ in 0..significant {
            h = (h ^ (v & 0xff)).wrapping_mul(Self::PRIME);
            v >>= 8;
        }
        self.0 = h.wrapping_mul(Self::PRIME_POWERS[8 - significant]);
    }

    /// `PRIME^k` for `k` in `0..=8`.
    const PRIME_POWERS: [u64; 9] = {
        let mut powers = [1u64; 9];
        let mut k = 1;
        while k < 9 {
            powers[k] = powers[k - 1].wrapping_mul(Self::PRIME);
            k += 1;
        }
        powers
    };

    /// The hash so far.
    pub const fn finish(&self) -> u64 {
        self.0
    }

    /// The FNV-1a 64 hash of `bytes`.
    pub fn digest(bytes: &[u8]) -> u64 {
        let mut h = Fnv64::new();
        h.write(bytes);
        h.finish()
    }
}

/// The digest of a packet's bytes that the trace's send and delivery
/// events carry: stable (fixed here, independent of the platform and of
/// Rust releases) and about 8 bytes a cycle where FNV-1a manages a quarter
/// of one, since the fabric digests every packet it carries.
///
/// Four lanes each take every fourth little-endian `u64` word of each
/// 32-byte block: `lane = rotl((lane ^ word) * K, 29)`, a bijection of the
/// lane for a given word, so no two blocks in a row cancel. The tail
/// (under 32 bytes) goes through FNV-1a with the lanes and the length, and
/// a final avalanche (xor-shift-multiply) spreads every input bit over the
/// result.
pub fn packet_digest(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [K, K.rotate_left(16), K.rotate_left(32), K.rotate_left(48)];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            let word = u64::from_le_bytes(word.try_into().expect("8-byte chunk"));
            *lane = (*lane ^ word).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = Fnv64::new();
    for lane in lanes {
        h.write_u64(lane);
    }
    h.write(blocks.remainder());
    h.write_u64(bytes.len() as u64);
    let mut x = h.finish();
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64::new()
    }
}

/// Why the fabric dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// Random loss ([`super::FaultConfig::loss`]).
    Loss,
    /// Longer than the fabric's MTU ([`super::FaultConfig::mtu_bytes`]).
    Mtu,
    /// A link down or a partition cut the path at send time.
    Partition,
    /// No endpoint owns the destination address.
    NoRoute,
    /// Too many packets in flight ([`super::FabricConfig::max_in_flight`]).
    Overflow,
    /// A targeted rule ([`super::Action::Drop`]).
    Rule,
    /// A scenario's `drop` rule or its background loss, at the sender's or
    /// the receiver's port ([`Fabric::with_ports`](super::Fabric::with_ports)).
    /// A scenario's `link_down` and `partition` drop as
    /// [`DropReason::Partition`]: they are outages.
    Scenario,
}

impl DropReason {
    const fn code(self) -> u64 {
        match self {
            DropReason::Loss => 1,
            DropReason::Mtu => 2,
            DropReason::Partition => 3,
            DropReason::NoRoute => 4,
            DropReason::Overflow => 5,
            DropReason::Rule => 6,
            DropReason::Scenario => 7,
        }
    }
}

/// Why the fabric held a packet back beyond its normal latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelayReason {
    /// Random reordering jitter ([`super::FaultConfig::reorder`]).
    Reorder,
    /// A targeted rule ([`super::Action::Delay`]).
    Rule,
    /// A scenario's `delay` rule or its background reordering, at a port.
    Scenario,
}

/// One thing that happened in the fabric. `packet` numbers are assigned in
/// send order, from 0; a duplicate gets a number of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceEvent {
    /// An endpoint emitted a packet (before any fault).
    Send {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Sender.
        from: NodeId,
        /// IP length in bytes.
        len: usize,
        /// [`packet_digest`] of the bytes.
        digest: u64,
    },
    /// The fabric dropped a packet.
    Drop {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Why.
        reason: DropReason,
    },
    /// The fabric made a second copy of a packet.
    Duplicate {
        /// When.
        at: Instant,
        /// The original's number.
        packet: u64,
        /// The copy's number.
        copy: u64,
    },
    /// The fabric flipped one bit of a packet.
    Corrupt {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Index of the flipped bit from the start of the IP packet (bit 0
        /// is the most significant bit of byte 0).
        bit_index: usize,
    },
    /// The fabric held a packet back.
    Delay {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Extra nanoseconds on top of the link's latency.
        extra_ns: u64,
        /// Why.
        reason: DelayReason,
    },
    /// A targeted rule fired on a packet.
    RuleFired {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// The rule's index ([`super::RuleId`]).
        rule: usize,
    },
    /// A packet was handed to its destination.
    Deliver {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
        /// IP length in bytes.
        len: usize,
        /// [`packet_digest`] of the bytes as delivered.
        digest: u64,
    },
    /// An endpoint's timer fired.
    Timeout {
        /// When.
        at: Instant,
        /// Whose.
        node: NodeId,
    },
    /// The driver healed the fabric (every fault off).
    Heal {
        /// When.
        at: Instant,
    },
    /// A scenario rule fired at a node's port
    /// ([`Fabric::with_ports`](super::Fabric::with_ports)).
    ScenarioFired {
        /// When.
        at: Instant,
        /// Whose port.
        node: NodeId,
        /// The rule's index in the scenario.
        rule: usize,
        /// Which firing of the rule on that port (1-based).
        hit: u64,
        /// The packet it fired on (`None`: a timed rule).
        packet: Option<u64>,
    },
    /// A device fault a port decided was handed out (to the fabric's
    /// device-fault handler, or queued for
    /// [`Fabric::take_device_faults`](super::Fabric::take_device_faults)).
    DeviceFault {
        /// When.
        at: Instant,
        /// Whose device.
        node: NodeId,
        /// Which fault.
        kind: DeviceActionKind,
        /// The QP (`None`: every QP).
        qpn: Option<u32>,
        /// Its count (rnr, fail_key, dma_fault).
        count: u32,
        /// Its duration (stall).
        for_ns: u64,
    },
    /// A port held a packet for reordering.
    Hold {
        /// When.
        at: Instant,
        /// Packet number.
        packet: u64,
        /// Whose port.
        node: NodeId,
    },
    /// A port released a held packet: it goes on under a new number.
    Release {
        /// When.
        at: Instant,
        /// Whose port.
        node: NodeId,
        /// The packet's new number.
        packet: u64,
    },
}

impl TraceEvent {
    /// When the event happened.
    pub const fn at(&self) -> Instant {
        match *self {
            TraceEvent::Send { at, .. }
            | TraceEvent::Drop { at, .. }
            | TraceEvent::Duplicate { at, .. }
            | TraceEvent::Corrupt { at, .. }
            | TraceEvent::Delay { at, .. }
            | TraceEvent::RuleFired { at, .. }
            | TraceEvent::Deliver { at, .. }
            | TraceEvent::Timeout { at, .. }
            | TraceEvent::Heal { at }
            | TraceEvent::ScenarioFired { at, .. }
            | TraceEvent::DeviceFault { at, .. }
            | TraceEvent::Hold { at, .. }
            | TraceEvent::Release { at, .. } => at,
        }
    }

    /// Folds the event into `h`: a tag byte, then every field as a `u64`.
    fn fold_into(&self, h: &mut Fnv64) {
        let node = |n: NodeId| n.0 as u64;
        let (tag, fields): (u8, [u64; 5]) = match *self {
            TraceEvent::Send { at, packet, from, len, digest } => {
                (1, [at.as_nanos(), packet, node(from), len as u64, digest])
            }
            TraceEvent::Drop { at, packet, reason } => {
                (2, [at.as_nanos(), packet, reason.code(), 0, 0])
            }
            TraceEvent::Duplicate { at, packet, copy } => (3, [at.as_nanos(), packet, copy, 0, 0]),
            TraceEvent::Corrupt { at, packet, bit_index } => {
                (4, [at.as_nanos(), packet, bit_index as u64, 0, 0])
            }
            TraceEvent::Delay { at, packet, extra_ns, reason } => {
                let why = match reason {
                    DelayReason::Reorder => 1,
                    DelayReason::Rule => 2,
                    DelayReason::Scenario => 3,
                };
                (5, [at.as_nanos(), packet, extra_ns, why, 0])
            }
            TraceEvent::RuleFired { at, packet, rule } => {
                (6, [at.as_nanos(), packet, rule as u64, 0, 0])
            }
            TraceEvent::Deliver { at, packet, from, to, len, digest } => {
                h.write(&[7]);
                for f in [at.as_nanos(), packet, node(from), node(to), len as u64, digest] {
                    h.write_u64(f);
                }
                return;
            }
            TraceEvent::Timeout { at, node: n } => (8, [at.as_nanos(), node(n), 0, 0, 0]),
            TraceEvent::Heal { at } => (9, [at.as_nanos(), 0, 0, 0, 0]),
            TraceEvent::ScenarioFired { at, node: n, rule, hit, packet } => {
                let packet = packet.map_or(u64::MAX, |p| p);
                (10, [at.as_nanos(), node(n), rule as u64, hit, packet])
            }
            TraceEvent::DeviceFault { at, node: n, kind, qpn, count, for_ns } => {
                h.write(&[11]);
                let qpn = qpn.map_or(u64::MAX, u64::from);
                for f in [at.as_nanos(), node(n), kind_code(kind), qpn, u64::from(count), for_ns] {
                    h.write_u64(f);
                }
                return;
            }
            TraceEvent::Hold { at, packet, node: n } => {
                (12, [at.as_nanos(), packet, node(n), 0, 0])
            }
            TraceEvent::Release { at, node: n, packet } => {
                (13, [at.as_nanos(), packet, node(n), 0, 0])
            }
        };
        h.write(&[tag]);
        for f in fields {
            h.write_u64(f);
        }
    }
}

/// A device fault's kind in the hash (fixed here, whatever the enum's order).
const fn kind_code(kind: DeviceActionKind) -> u64 {
    match kind {
        DeviceActionKind::Rnr => 1,
        DeviceActionKind::FailKey => 2,
        DeviceActionKind::DmaFault => 3,
        DeviceActionKind::Stall => 4,
        DeviceActionKind::Crash => 5,
    }
}

impl core::fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            TraceEvent::Send { at, packet, from, len, digest } => {
                write!(f, "{at} #{packet} send from {from} len={len} digest={digest:016x}")
            }
            TraceEvent::Drop { at, packet, reason } => write!(f, "{at} #{packet} drop {reason:?}"),
            TraceEvent::Duplicate { at, packet, copy } => {
                write!(f, "{at} #{packet} duplicate as #{copy}")
            }
            TraceEvent::Corrupt { at, packet, bit_index } => {
                write!(f, "{at} #{packet} corrupt bit {bit_index}")
            }
            TraceEvent::Delay { at, packet, extra_ns, reason } => {
                write!(f, "{at} #{packet} delay +{extra_ns}ns {reason:?}")
            }
            TraceEvent::RuleFired { at, packet, rule } => {
                write!(f, "{at} #{packet} rule {rule} fired")
            }
            TraceEvent::Deliver { at, packet, from, to, len, digest } => {
                write!(f, "{at} #{packet} deliver {from}->{to} len={len} digest={digest:016x}")
            }
            TraceEvent::Timeout { at, node } => write!(f, "{at} timeout {node}"),
            TraceEvent::Heal { at } => write!(f, "{at} heal"),
            TraceEvent::ScenarioFired { at, node, rule, hit, packet } => {
                write!(f, "{at} scenario rule {rule} fired {hit} at {node}")?;
                match packet {
                    Some(p) => write!(f, " on #{p}"),
                    None => write!(f, " (timed)"),
                }
            }
            TraceEvent::DeviceFault { at, node, kind, qpn, count, for_ns } => {
                write!(f, "{at} device fault {} at {node}", kind.name())?;
                match qpn {
                    Some(q) => write!(f, " QP 0x{q:06x}")?,
                    None => write!(f, " every QP")?,
                }
                write!(f, " count={count} for={for_ns}ns")
            }
            TraceEvent::Hold { at, packet, node } => write!(f, "{at} #{packet} held at {node}"),
            TraceEvent::Release { at, node, packet } => {
                write!(f, "{at} released at {node} as #{packet}")
            }
        }
    }
}

/// The running trace: a hash of every event and the last `capacity` events.
#[derive(Debug, Clone)]
pub struct Trace {
    hash: Fnv64,
    events: u64,
    log: VecDeque<TraceEvent>,
    capacity: usize,
}

impl Trace {
    /// An empty trace that keeps the last `capacity` events (0: none).
    pub fn new(capacity: usize) -> Trace {
        Trace { hash: Fnv64::new(), events: 0, log: VecDeque::with_capacity(capacity), capacity }
    }

    /// Records one event.
    pub fn record(&mut self, event: TraceEvent) {
        event.fold_into(&mut self.hash);
        self.events += 1;
        if self.capacity == 0 {
            return;
        }
        if self.log.len() == self.capacity {
            self.log.pop_front();
        }
        self.log.push_back(event);
    }

    /// The hash of every event so far.
    pub const fn hash(&self) -> u64 {
        self.hash.finish()
    }

    /// How many events were recorded.
    pub const fn event_count(&self) -> u64 {
        self.events
    }

    /// The last events kept, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &TraceEvent> + '_ {
        self.log.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values() {
        // From the FNV reference test vectors.
        assert_eq!(Fnv64::digest(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv64::digest(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Fnv64::digest(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn packet_digests_tell_bytes_apart() {
        // Every single-bit change of a 4 KiB packet, its tail, and its length
        // changes the digest; the value is fixed (traces from older runs
        // compare).
        let mut packet: Vec<u8> = (0..4100u32).map(|i| (i * 7 + 3) as u8).collect();
        let base = packet_digest(&packet);
        for bit in (0..packet.len() * 8).step_by(13) {
            packet[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(packet_digest(&packet), base, "bit {bit}");
            packet[bit / 8] ^= 1 << (bit % 8);
        }
        assert_ne!(packet_digest(&packet[..4099]), base);
        assert_ne!(packet_digest(&[0u8; 32]), packet_digest(&[0u8; 64]));
        assert_eq!(packet_digest(b""), packet_digest(b""));
        assert_eq!(packet_digest(&packet), base);
        assert_eq!(packet_digest(b""), 0xcd6c_7f5b_8023_c0ae);
        assert_eq!(packet_digest(b"foobar"), 0x675d_f92f_d8ea_7e7d);
        assert_eq!(base, 0x1a0b_b486_cbac_cfd2);
    }

    #[test]
    fn write_u64_is_write_of_its_le_bytes() {
        let values = [0, 1, 0xff, 0x100, 0x1234, 0xdead_beef, 1 << 63, u64::MAX, 0x00ff_0000_0100];
        for v in values {
            let mut a = Fnv64::new();
            a.write(b"x");
            a.write_u64(v);
            let mut b = Fnv64::new();
            b.write(b"x");
            b.write(&v.to_le_bytes());
            assert_eq!(a, b, "{v:#x}");
        }
    }

    #[test]
    fn hash_depends_on_order_and_fields() {
        let a = TraceEvent::Timeout { at: Instant::from_nanos(5), node: NodeId(0) };
        let b = TraceEvent::Timeout { at: Instant::from_nanos(5), node: NodeId(1) };
        let mut t1 = Trace::new(0);
        let mut t2 = Trace::new(0);
        t1.record(a);
        t1.record(b);
        t2.record(b);
        t2.record(a);
        assert_ne!(t1.hash(), t2.hash());
        let mut t3 = Trace::new(0);
        t3.record(a);
        t3.record(b);
        assert_eq!(t1.hash(), t3.hash());
        assert_eq!(t1.event_count(), 2);
    }

    #[test]
    fn log_keeps_the_last_events() {
        let mut t = Trace::new(2);
        for n in 0..5 {
            t.record(TraceEvent::Timeout { at: Instant::from_nanos(n), node: NodeId(0) });
        }
        let kept: Vec<u64> = t.events().map(|e| e.at().as_nanos()).collect();
        assert_eq!(kept, [3, 4]);
        assert_eq!(t.event_count(), 5);
    }
}
