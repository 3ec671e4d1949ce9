//! Watching: what the adversary learns from every packet the fabric
//! delivers, and the verdict on each of its own packets when it lands.

use super::*;

/// What one of its own packets must do when it lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// A ghost response (or no QP).
    Ghost,
    /// A duplicate request (or no QP).
    Duplicate,
    /// No QP.
    Unknown,
    /// Whatever a network duplicate may do.
    Any,
}

impl Expect {
    /// Two packets with the same bytes: what both allow.
    pub(super) fn merge(self, other: Expect) -> Expect {
        match (self, other) {
            (a, b) if a == b => a,
            (Expect::Unknown, b) | (b, Expect::Unknown) => b,
            _ => Expect::Any,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Record {
    pub(super) kind: Kind,
    pub(super) expect: Expect,
    pub(super) qpn: u32,
    pub(super) psn: Psn,
    /// The window when it was built, for the report.
    pub(super) window: String,
}

/// The receive counters of one HCA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Rx {
    pub(super) pkts: u64,
    pub(super) icrc: u64,
    pub(super) malformed: u64,
    pub(super) bad_key: u64,
    pub(super) unknown_qp: u64,
    pub(super) ghost: u64,
    pub(super) duplicate: u64,
    pub(super) out_of_seq: u64,
    pub(super) seq_nak: u64,
    pub(super) rnr_nak: u64,
}

impl Rx {
    pub(super) fn of(c: &Counters) -> Rx {
        Rx {
            pkts: c.rcvd_pkts,
            icrc: c.rcvd_icrc_err,
            malformed: c.rcvd_malformed,
            bad_key: c.rcvd_bad_key_or_addr,
            unknown_qp: c.rcvd_unknown_qp,
            ghost: c.rcvd_ghost_response,
            duplicate: c.duplicate_request,
            out_of_seq: c.out_of_seq_request,
            seq_nak: c.rcvd_seq_err,
            rnr_nak: c.rcvd_rnr_err,
        }
    }

    pub(super) fn minus(self, o: Rx) -> Rx {
        Rx {
            pkts: self.pkts.wrapping_sub(o.pkts),
            icrc: self.icrc.wrapping_sub(o.icrc),
            malformed: self.malformed.wrapping_sub(o.malformed),
            bad_key: self.bad_key.wrapping_sub(o.bad_key),
            unknown_qp: self.unknown_qp.wrapping_sub(o.unknown_qp),
            ghost: self.ghost.wrapping_sub(o.ghost),
            duplicate: self.duplicate.wrapping_sub(o.duplicate),
            out_of_seq: self.out_of_seq.wrapping_sub(o.out_of_seq),
            seq_nak: self.seq_nak.wrapping_sub(o.seq_nak),
            rnr_nak: self.rnr_nak.wrapping_sub(o.rnr_nak),
        }
    }

    /// The verdicts of the receive path: rcvd_pkts, ICRC error,
    /// malformed, bad key or address, unknown QP.
    pub(super) fn verdicts(&self) -> [u64; 5] {
        [self.pkts, self.icrc, self.malformed, self.bad_key, self.unknown_qp]
    }

    /// Whether one packet was counted once: either accepted for
    /// processing (`rcvd_pkts`; processing may still drop it as malformed
    /// or for a bad Q_Key, once) or dropped for exactly one reason.
    pub(super) fn counted_once(&self) -> bool {
        if self.pkts == 1 {
            self.icrc == 0 && self.unknown_qp == 0 && self.malformed <= 1 && self.bad_key <= 1
        } else {
            self.pkts == 0 && self.verdicts().iter().sum::<u64>() == 1
        }
    }
}

/// How a delivered packet was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Ghost,
    Duplicate,
    Accepted,
    UnknownQp,
    Corrupted,
    BadKey,
    Malformed,
}

impl Outcome {
    /// `None` when the counters do not show one packet counted once.
    pub(super) fn of(d: &Rx) -> Option<Outcome> {
        if !d.counted_once() {
            return None;
        }
        Some(if d.icrc == 1 {
            Outcome::Corrupted
        } else if d.malformed == 1 {
            Outcome::Malformed
        } else if d.bad_key == 1 {
            Outcome::BadKey
        } else if d.unknown_qp == 1 {
            Outcome::UnknownQp
        } else if d.ghost > 0 {
            Outcome::Ghost
        } else if d.duplicate > 0 {
            Outcome::Duplicate
        } else {
            Outcome::Accepted
        })
    }
}

impl Adversary {
    /// A copy of a delivered packet, from the mirror port.
    pub(super) fn observe(&mut self, now: Instant, frame: &[u8]) {
        if frame.len() < 14 {
            return;
        }
        let node = |mac: &[u8]| u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as usize;
        let (to, from) = (node(&frame[0..6]), node(&frame[6..12]));
        let ip = &frame[14..];
        if to >= self.hcas.len() {
            return;
        }
        debug_assert_eq!(&frame[0..6], &node_mac(NodeId(to)));
        let rx = Rx::of(&self.hcas[to].borrow().counters());
        let delta = rx.minus(self.last[to]);
        self.last[to] = rx;
        let outcome = Outcome::of(&delta);
        if outcome.is_none() {
            self.violation(format!(
                "node{to} did not count one delivered packet (from node{from}) once: receive \
                 counters moved by {delta:?}"
            ));
        }
        if from == self.id.0 {
            self.judge(ip, to, delta, outcome);
            return;
        }
        if !self.rate.is_never() && self.rng.chance(self.rate) {
            self.schedule(now);
        }
        self.capture(ip, to);
    }

    /// Schedules one injection, a moment to 30 ms from now.
    pub(super) fn schedule(&mut self, now: Instant) {
        if self.scheduled.len() >= MAX_SCHEDULED {
            self.stats.skipped += 1;
            return;
        }
        let r = &mut self.rng;
        let delay = match r.below(100) {
            0..=49 => r.below(20_001),
            50..=84 => r.range_inclusive(20_000, 1_000_000),
            _ => r.range_inclusive(1_000_000, 30_000_000),
        };
        self.scheduled.insert((now.plus_nanos(delay), self.next_seq));
        self.next_seq += 1;
    }

    /// Keeps an intact RC packet in the sample and learns from it.
    pub(super) fn capture(&mut self, ip: &[u8], to: usize) {
        let Classified::Roce(frame) = classify(ip, Link::RawIp) else { return };
        if !frame.integrity_ok() {
            return;
        }
        let Ok(packet) = frame.packet() else { return };
        let bth = packet.bth();
        let opcode = bth.opcode();
        if opcode.transport() != Transport::Rc {
            return;
        }
        let key = (to, bth.dest_qpn().value());
        if self.qpns.len() < MAX_QPS_TRACKED {
            self.qpns.insert(key);
        }
        let info = packet.info();
        if info.is(Mask::RESP) {
            // What it acknowledges: an ACK or a response its PSN, a NAK
            // the PSN before it.
            let acked = match packet.aeth().map(|a| a.syndrome()) {
                Some(Syndrome::Ack { .. }) | None => Some(bth.psn()),
                Some(Syndrome::Reserved(_)) => None,
                Some(_) => Some(bth.psn() - 1),
            };
            if let Some(psn) = acked {
                if self.acked.len() < MAX_QPS_TRACKED || self.acked.contains_key(&key) {
                    self.acked.insert(key, psn);
                }
            }
        }
        self.stats.captured += 1;
        let captured = Captured { bytes: ip.to_vec(), to };
        if info.is(Mask::RESP) {
            self.responses.add(&mut self.rng, captured);
        } else {
            self.requests.add(&mut self.rng, captured);
        }
    }

    /// One of its own packets landed: did the HCA do what it must?
    pub(super) fn judge(&mut self, ip: &[u8], to: usize, d: Rx, outcome: Option<Outcome>) {
        let Some(outcome) = outcome else { return };
        let digest = Fnv64::digest(ip);
        let Some(record) = self.records.get(&digest).map(|r| r.0.clone()) else {
            // Not a packet it built: a copy the fabric corrupted.
            if outcome == Outcome::Corrupted {
                self.stats.corrupted += 1;
            } else {
                self.violation(format!(
                    "node{to}: an injected packet of unknown origin taken as {outcome:?}"
                ));
            }
            return;
        };
        match outcome {
            Outcome::Ghost => self.stats.ghost += 1,
            Outcome::Duplicate => self.stats.duplicate += 1,
            Outcome::UnknownQp => self.stats.unknown_qp += 1,
            Outcome::Accepted => self.stats.accepted += 1,
            Outcome::Corrupted => self.stats.corrupted += 1,
            Outcome::BadKey | Outcome::Malformed => {}
        }
        let clean = |extra: u64| d.out_of_seq + d.seq_nak + d.rnr_nak + extra == 0;
        let ok = match (record.expect, outcome) {
            (_, Outcome::UnknownQp) => true,
            (Expect::Ghost, Outcome::Ghost) => d.ghost == 1 && clean(d.duplicate),
            (Expect::Duplicate, Outcome::Duplicate) => d.duplicate == 1 && clean(d.ghost),
            (Expect::Any, o) => !matches!(o, Outcome::Malformed | Outcome::BadKey),
            _ => false,
        };
        if !ok {
            self.violation(format!(
                "node{to} QP {:#x}: {} at PSN {} ({}) was taken as {outcome:?} (receive \
                 counters moved: {d:?}); expected {:?}",
                record.qpn,
                record.kind.name(),
                record.psn.value(),
                record.window,
                record.expect,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_merge_to_what_both_allow() {
        assert_eq!(Expect::Ghost.merge(Expect::Ghost), Expect::Ghost);
        assert_eq!(Expect::Unknown.merge(Expect::Ghost), Expect::Ghost);
        assert_eq!(Expect::Duplicate.merge(Expect::Unknown), Expect::Duplicate);
        assert_eq!(Expect::Ghost.merge(Expect::Duplicate), Expect::Any);
        assert_eq!(Expect::Any.merge(Expect::Unknown), Expect::Any);
    }
}
