//! The fault model: probabilistic faults applied to every packet, and
//! outages (a link down, a partition) scheduled over intervals of virtual
//! time.

use super::rng::Probability;
use super::NodeId;
use core::ops::Range;
use uroce_hca::time::Instant;

/// Faults drawn for every packet from the fabric's one generator.
///
/// For each packet the fabric draws, in this order and whether or not a
/// fault is enabled (so that switching one fault does not shift the draws of
/// the others): loss, duplication; then for each copy that goes on the
/// wire: corruption, the corrupted bit, reordering, the reordering delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultConfig {
    /// Chance that a packet is lost.
    pub loss: Probability,
    /// Chance that a packet arrives twice.
    pub duplicate: Probability,
    /// Chance that a packet (each copy on its own) is held back by an extra
    /// delay, which lets later packets overtake it.
    pub reorder: Probability,
    /// The largest extra delay of a reordered packet; the delay is uniform
    /// in `1..=reorder_max_delay_ns`.
    pub reorder_max_delay_ns: u64,
    /// Chance that one bit of a packet (each copy on its own) is flipped.
    ///
    /// In a RoCEv2 packet the bit is one the ICRC covers and no router may
    /// change: in the transport packet (BTH, extension headers, payload,
    /// pad or the ICRC itself), never in BTH byte 4, which the ICRC masks.
    /// So a receiver's ICRC check always catches it. Flips in the IP and UDP
    /// headers are left out on purpose: a real host drops those by IP
    /// checksum or port before the HCA sees them, which is plain loss. In
    /// any other packet the bit is anywhere.
    pub corrupt: Probability,
    /// Packets whose IP length exceeds this many bytes are dropped (`None`:
    /// no limit). Not a fault that heals: it is the network's MTU.
    pub mtu_bytes: Option<usize>,
}

impl FaultConfig {
    /// No faults at all.
    pub const NONE: FaultConfig = FaultConfig {
        loss: Probability::NEVER,
        duplicate: Probability::NEVER,
        reorder: Probability::NEVER,
        reorder_max_delay_ns: 0,
        corrupt: Probability::NEVER,
        mtu_bytes: None,
    };

    /// Whether any probabilistic fault is on.
    pub fn any_probabilistic(&self) -> bool {
        !(self.loss.is_never()
            && self.duplicate.is_never()
            && self.reorder.is_never()
            && self.corrupt.is_never())
    }

    /// This configuration with every probabilistic fault off (the MTU
    /// stays).
    pub const fn healed(self) -> FaultConfig {
        FaultConfig { mtu_bytes: self.mtu_bytes, ..FaultConfig::NONE }
    }

    pub(super) fn assert_valid(&self) {
        assert!(
            self.reorder.is_never() || self.reorder_max_delay_ns > 0,
            "FaultConfig: reorder is on but reorder_max_delay_ns is 0"
        );
    }
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig::NONE
    }
}

/// What an outage cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// Packets between two nodes, in both directions.
    Link(NodeId, NodeId),
    /// Packets from one node to another, one direction only.
    OneWay {
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
    },
    /// Packets between a node in `side` and a node outside it, both ways.
    /// `side` is sorted and without repeats.
    Partition {
        /// One side of the partition.
        side: Vec<NodeId>,
    },
}

impl Cut {
    fn cuts(&self, from: NodeId, to: NodeId) -> bool {
        match self {
            Cut::Link(a, b) => (from, to) == (*a, *b) || (from, to) == (*b, *a),
            Cut::OneWay { from: f, to: t } => (from, to) == (*f, *t),
            Cut::Partition { side } => {
                side.binary_search(&from).is_ok() != side.binary_search(&to).is_ok()
            }
        }
    }
}

/// A cut over an interval of virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// What is cut.
    pub cut: Cut,
    /// From when (inclusive) until when (exclusive): packets *sent* in this
    /// interval are dropped. Packets already in flight when it starts still
    /// arrive.
    pub during: Range<Instant>,
}

impl Outage {
    /// Whether a packet sent at `at` from `from` to `to` is dropped.
    pub fn drops(&self, at: Instant, from: NodeId, to: NodeId) -> bool {
        self.during.contains(&at) && self.cut.cuts(from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn link_cuts_both_ways_in_its_window() {
        let o = Outage { cut: Cut::Link(NodeId(0), NodeId(1)), during: t(10)..t(20) };
        assert!(o.drops(t(10), NodeId(0), NodeId(1)));
        assert!(o.drops(t(19), NodeId(1), NodeId(0)));
        assert!(!o.drops(t(20), NodeId(0), NodeId(1)));
        assert!(!o.drops(t(9), NodeId(0), NodeId(1)));
        assert!(!o.drops(t(15), NodeId(0), NodeId(2)));
    }

    #[test]
    fn one_way_and_partition() {
        let o = Outage { cut: Cut::OneWay { from: NodeId(0), to: NodeId(1) }, during: t(0)..t(5) };
        assert!(o.drops(t(1), NodeId(0), NodeId(1)));
        assert!(!o.drops(t(1), NodeId(1), NodeId(0)));
        let p = Outage {
            cut: Cut::Partition { side: vec![NodeId(0), NodeId(2)] },
            during: t(0)..Instant::FAR_FUTURE,
        };
        assert!(p.drops(t(1), NodeId(0), NodeId(1)));
        assert!(p.drops(t(1), NodeId(3), NodeId(2)));
        assert!(!p.drops(t(1), NodeId(0), NodeId(2)));
        assert!(!p.drops(t(1), NodeId(1), NodeId(3)));
    }

    #[test]
    fn healed_keeps_mtu() {
        let f = FaultConfig {
            loss: Probability::from_percent(10),
            mtu_bytes: Some(1500),
            ..FaultConfig::NONE
        };
        assert!(f.any_probabilistic());
        let h = f.healed();
        assert!(!h.any_probabilistic());
        assert_eq!(h.mtu_bytes, Some(1500));
    }
}
