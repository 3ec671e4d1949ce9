//! The packets in flight, in delivery order: by (delivery time, packet
//! number), a total order. Most packets arrive in the order they were sent
//! (the latency is the same for all): they queue at the back of a ring in
//! O(1). A packet due before the ring's last (one held back by jitter, a
//! rule or a busy port let others pass) goes to a B-tree. Delivery takes
//! the smaller of the two fronts, so the order is the B-tree's alone.

use super::InFlight;
use std::collections::{BTreeMap, VecDeque};
use uroce_hca::time::Instant;

/// Delivery time and packet number.
pub(super) type Key = (Instant, u64);

#[derive(Debug, Default)]
pub(super) struct InFlightQueue {
    /// Keys strictly increasing from front to back.
    in_order: VecDeque<(Key, InFlight)>,
    /// The rest.
    passed: BTreeMap<Key, InFlight>,
}

impl InFlightQueue {
    pub(super) fn len(&self) -> usize {
        self.in_order.len() + self.passed.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.in_order.is_empty() && self.passed.is_empty()
    }

    /// Puts a packet in flight; `key` is new (packet numbers are unique).
    pub(super) fn insert(&mut self, key: Key, packet: InFlight) {
        if self.in_order.back().is_none_or(|&(last, _)| last < key) {
            self.in_order.push_back((key, packet));
        } else {
            self.passed.insert(key, packet);
        }
    }

    /// The first key in delivery order.
    pub(super) fn first_key(&self) -> Option<Key> {
        let ring = self.in_order.front().map(|&(k, _)| k);
        let tree = self.passed.keys().next().copied();
        match (ring, tree) {
            (Some(r), Some(t)) => Some(r.min(t)),
            (r, t) => r.or(t),
        }
    }

    /// Takes the first packet in delivery order if it is due at or before
    /// `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(Key, InFlight)> {
        let ring = self.in_order.front().map(|&(k, _)| k);
        let tree = self.passed.keys().next().copied();
        let from_ring = match (ring, tree) {
            (Some(r), Some(t)) => r < t,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        if from_ring {
            if ring?.0 > now {
                return None;
            }
            self.in_order.pop_front()
        } else {
            if tree?.0 > now {
                return None;
            }
            self.passed.pop_first()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Packet;
    use crate::NodeId;

    fn packet() -> InFlight {
        InFlight {
            from: NodeId(0),
            to: NodeId(1),
            bytes: Packet::from_vec(Vec::new()),
            digest: None,
            scenario: None,
        }
    }

    #[test]
    fn delivers_in_key_order_whatever_the_insertion_order() {
        let mut q = InFlightQueue::default();
        let times = [5u64, 7, 7, 3, 9, 1, 9, 8, 2, 10, 10, 4];
        for (n, &t) in times.iter().enumerate() {
            q.insert((Instant::from_nanos(t), n as u64), packet());
        }
        assert_eq!(q.len(), times.len());
        let mut expected: Vec<Key> =
            times.iter().enumerate().map(|(n, &t)| (Instant::from_nanos(t), n as u64)).collect();
        expected.sort_unstable();
        assert_eq!(q.first_key(), Some(expected[0]));
        assert!(q.pop_due(Instant::from_nanos(0)).is_none());
        let mut got = Vec::new();
        while let Some((k, _)) = q.pop_due(Instant::from_nanos(8)) {
            got.push(k);
        }
        assert_eq!(q.first_key().map(|k| k.0), Some(Instant::from_nanos(9)));
        while let Some((k, _)) = q.pop_due(Instant::from_nanos(100)) {
            got.push(k);
        }
        assert_eq!(got, expected);
        assert!(q.is_empty());
    }
}
