//! Time: the IBA's `4.096 µs × 2^t` timeouts converted the way Linux's
//! ib_cm converts them, and the set of deadlines the engine waits for.

use std::collections::BTreeSet;
use uroce_wire::mad::CommId;

/// Nanoseconds in a millisecond.
pub const NS_PER_MS: u64 = 1_000_000;

/// An IBA time exponent (`4.096 µs × 2^t`) in milliseconds, rounded the
/// way Linux's `cm_convert_to_ms` rounds it: `2^(t-8)` ms, at least 1 ms.
/// 20 (rdma_cm's CM response timeout) is 4096 ms; 18 (its RoCE packet
/// lifetime) is 1024 ms.
pub const fn iba_time_to_ms(exponent: u8) -> u64 {
    let e = if exponent > 31 { 31 } else { exponent };
    if e <= 8 {
        1
    } else {
        1u64 << (e - 8)
    }
}

/// The local ACK timeout exponent for a path: `4.096 µs × 2^ack_timeout
/// ≈ 4.096 µs × 2^ca_ack_delay + 2 × 4.096 µs × 2^packet_life_time`, as
/// Linux's `cm_ack_timeout` rounds it (the larger exponent, plus one if
/// the other is within a factor of two), at most 31.
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let life = packet_life_time as i32 + 1;
    let delay = ca_ack_delay as i32;
    let t = if life >= delay {
        life + (delay >= life - 1) as i32
    } else {
        delay + (life >= delay - 1) as i32
    };
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// The deadlines of every connection that waits for one, ordered by time
/// and then by comm ID, so that expiries are handled in a fixed order.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    set: BTreeSet<(u64, u32)>,
}

impl Timers {
    /// Arms (or re-arms: the caller cancels the old one) a deadline.
    pub(crate) fn insert(&mut self, deadline_ns: u64, id: CommId) {
        self.set.insert((deadline_ns, id.0));
    }
    /// Disarms a deadline.
    pub(crate) fn remove(&mut self, deadline_ns: u64, id: CommId) {
        self.set.remove(&(deadline_ns, id.0));
    }
    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<u64> {
        self.set.first().map(|&(t, _)| t)
    }
    /// Takes the earliest deadline if it is due at `now_ns`.
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<CommId> {
        let &(t, id) = self.set.first()?;
        if t > now_ns {
            return None;
        }
        self.set.pop_first();
        Some(CommId(id))
    }
    /// How many deadlines are armed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_conversions() {
        assert_eq!(iba_time_to_ms(20), 4096);
        assert_eq!(iba_time_to_ms(18), 1024);
        assert_eq!(iba_time_to_ms(0), 1);
        assert_eq!(iba_time_to_ms(8), 1);
        assert_eq!(iba_time_to_ms(9), 2);
        assert_eq!(iba_time_to_ms(255), 1 << 23);
        // rping.pcap: packet lifetime 18 and rxe's ACK delay 15 give the
        // REQ's local ACK timeout 0x13.
        assert_eq!(ack_timeout(15, 18), 0x13);
        assert_eq!(ack_timeout(15, 14), 16);
        assert_eq!(ack_timeout(31, 31), 31);
        assert_eq!(ack_timeout(0, 0), 2);
    }

    #[test]
    fn timers_in_order() {
        let mut t = Timers::default();
        t.insert(50, CommId(2));
        t.insert(10, CommId(9));
        t.insert(50, CommId(1));
        assert_eq!(t.next(), Some(10));
        assert_eq!(t.pop_due(9), None);
        assert_eq!(t.pop_due(100), Some(CommId(9)));
        assert_eq!(t.pop_due(100), Some(CommId(1)));
        t.remove(50, CommId(2));
        assert_eq!(t.len(), 0);
    }
}
