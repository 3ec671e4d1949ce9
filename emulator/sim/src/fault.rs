//! Outages (a link down, a partition) scheduled over intervals of virtual
//! time. The probabilistic faults are
//! [`uroce_faults::FaultConfig`]'s, shared with the real runtime.

use super::NodeId;
use core::ops::Range;
use uroce_hca::time::Instant;

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
}
