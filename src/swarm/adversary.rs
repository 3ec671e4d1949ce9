//! The adversary: a node on the fabric's mirror port that replays and
//! forges RC packets, and checks that the HCAs drop every one that answers
//! or asks for nothing outstanding.
//!
//! It sees every packet the fabric delivers ([`Fabric::set_mirror`]), keeps
//! a bounded, seeded sample of the intact RC requests and responses (the
//! last few and a reservoir over the whole run, so that packets of
//! connections long replaced stay in it), and for each packet delivered
//! schedules, with the run's probability, one packet of its own a moment
//! to 30 ms later. Every packet it sends is well formed, with a valid
//! ICRC, the real peer's source address and a QPN it saw; when its time
//! comes it is one of:
//!
//! * **replay** — a captured request or response, verbatim;
//! * **stale response** — a captured response turned into an ACK, a PSN
//!   sequence NAK, an RNR NAK (any timer code, 0 = 655 ms included), an
//!   invalid request, remote access error or remote operational error NAK,
//!   a READ response with garbage payload or an atomic ACK with a garbage
//!   original value, at a PSN behind the requester's window: the PSN it
//!   last saw acknowledged for that QP or the one just behind the window,
//!   then a few back or up to 2^22 - 1 back;
//! * **stale duplicate request** — a captured SEND, WRITE, READ or atomic
//!   request with its PSN moved behind the responder's expected PSN (just
//!   behind, a few back, up to 2^22 back, or its own).
//!
//! Only RC: UC and UD have no replay protection in the IBA (a replayed UC
//! FIRST/ONLY or UD datagram is legitimately delivered again; rxe does the
//! same), so the reference model could not tell an HCA bug from the
//! protocol's own behaviour there.
//!
//! # What is "behind the window"
//!
//! The adversary reads the target QP's state (it is a simulation; an
//! attacker on the wire would have to guess, which makes it weaker, not
//! stronger) when it builds the packet: a response is stale when its PSN
//! is outside the requester's `[comp.psn, req.next_psn)`, a request when
//! its PSN is before the responder's expected PSN. Both edges only move
//! forward on a live QP (a go-back moves `next_psn` back to `comp.psn`, no
//! further), and the distance stays below 2^22, so what was stale when
//! sent is still stale when it lands. The last PSN seen acknowledged is
//! not enough on its own: an ACK that passes a READ whose response was
//! lost leaves the window at the READ; such picks are moved behind the
//! window and counted (`in_window_avoided`).
//!
//! A target QP that is gone (destroyed: the swarm destroys the QPs of a
//! lost connection before it connects their replacement, so the new QP
//! usually takes the old one's table slot with another QPN) or cannot
//! receive (in the error state) makes the packet an *orphan*, which the
//! HCA must drop as for no QP.
//!
//! # What each packet must do
//!
//! The fabric hands the mirror port a copy right after the receiver took
//! it, so the adversary compares the receiver's receive counters with
//! their values after the previous delivery to it: every delivered packet,
//! the real ones included, must be counted exactly once by one of
//! `rcvd_pkts`, `rcvd_icrc_err`, `rcvd_malformed`, `rcvd_bad_key_or_addr`
//! and `rcvd_unknown_qp`. Then, for its own packets:
//!
//! * a stale response must be counted as `rcvd_ghost_response` (and
//!   nothing else: no sequence or RNR NAK seen, no duplicate), or as
//!   `rcvd_unknown_qp` if its QP failed meanwhile;
//! * a stale request must be a `duplicate_request` (answered from state,
//!   never executed again), or `rcvd_unknown_qp`;
//! * an orphan must be `rcvd_unknown_qp`;
//! * a copy the fabric corrupted must be `rcvd_icrc_err`;
//! * a replay may do anything a network duplicate may: a replayed
//!   response or request whose PSN happens to be inside the window again
//!   (a READ response the requester had dropped as out of order, an RNR
//!   NAK while the QP still waits at that PSN, a request whose original
//!   the responder had not received yet) is processed like the original,
//!   and may cost a go-back or an RNR wait, never data or a completion.
//!
//! Anything else is a violation, reported as a model mismatch. The rest
//! of the reference model (completions, data, memory, atomics, liveness)
//! applies unchanged: no injected packet may change any of it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use uroce_hca::config::FIRST_QPN;
use uroce_hca::counters::Counters;
use uroce_hca::{Endpoint, Instant, SharedHca, Transmit};
use uroce_sim::{node_mac, Fnv64, NodeId, Probability, SimRng};
use uroce_wire::aeth::{self, NakCode, Syndrome};
use uroce_wire::frame::{classify, Classified, FrameRepr, IpHeader, Link, RoceFrame};
use uroce_wire::opcode::Transport;
use uroce_wire::{atomic_ack_eth, bth, roce, Mask, Opcode, Psn, Qpn};

/// Captured packets kept per pool and half (recent, reservoir).
const POOL_HALF: usize = 128;
/// Injections scheduled at once at most.
const MAX_SCHEDULED: usize = 4_096;
/// Forged packets remembered for judging their delivery.
const MAX_RECORDS: usize = 16_384;
/// QPs whose last acknowledged PSN (and number) is remembered.
const MAX_QPS_TRACKED: usize = 8_192;
/// Violations spelled out (all are counted).
const MAX_VIOLATIONS: usize = 20;
/// The farthest back a stale PSN goes.
const FAR: u32 = (1 << 22) - 1;

/// What an injected packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A captured request, verbatim.
    ReplayRequest,
    /// A captured response, verbatim.
    ReplayResponse,
    /// A stale ACK.
    StaleAck,
    /// A stale PSN sequence error NAK.
    StaleSeqNak,
    /// A stale RNR NAK.
    StaleRnrNak,
    /// A stale invalid request NAK.
    StaleInvalidRequest,
    /// A stale remote access error NAK.
    StaleAccessError,
    /// A stale remote operational error NAK.
    StaleOperationalError,
    /// A stale READ response with garbage payload.
    StaleReadResponse,
    /// A stale atomic ACK with a garbage original value.
    StaleAtomicAck,
    /// A SEND moved behind the responder's expected PSN.
    DupSend,
    /// A WRITE moved behind.
    DupWrite,
    /// A READ request moved behind.
    DupRead,
    /// A COMPARE_SWAP or FETCH_ADD moved behind.
    DupAtomic,
}

/// Every kind, in counting order.
pub const KINDS: [Kind; 14] = [
    Kind::ReplayRequest,
    Kind::ReplayResponse,
    Kind::StaleAck,
    Kind::StaleSeqNak,
    Kind::StaleRnrNak,
    Kind::StaleInvalidRequest,
    Kind::StaleAccessError,
    Kind::StaleOperationalError,
    Kind::StaleReadResponse,
    Kind::StaleAtomicAck,
    Kind::DupSend,
    Kind::DupWrite,
    Kind::DupRead,
    Kind::DupAtomic,
];

impl Kind {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ReplayRequest => "replay-request",
            Kind::ReplayResponse => "replay-response",
            Kind::StaleAck => "stale-ack",
            Kind::StaleSeqNak => "stale-seq-nak",
            Kind::StaleRnrNak => "stale-rnr-nak",
            Kind::StaleInvalidRequest => "stale-inv-req-nak",
            Kind::StaleAccessError => "stale-access-nak",
            Kind::StaleOperationalError => "stale-op-nak",
            Kind::StaleReadResponse => "stale-read-resp",
            Kind::StaleAtomicAck => "stale-atomic-ack",
            Kind::DupSend => "dup-send",
            Kind::DupWrite => "dup-write",
            Kind::DupRead => "dup-read",
            Kind::DupAtomic => "dup-atomic",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the adversary did and saw, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdversaryStats {
    /// Packets injected.
    pub injected: u64,
    /// Injected, by [`KINDS`] order.
    pub by_kind: [u64; 14],
    /// Injected to a QPN that was gone or could not receive.
    pub orphans: u64,
    /// Orphans whose QPN's table slot held another, live QP.
    pub orphans_slot_reused: u64,
    /// Stale picks (the last PSN seen acknowledged) that were inside the
    /// window and were moved behind it.
    pub in_window_avoided: u64,
    /// Injections due with nothing captured to build them from.
    pub skipped: u64,
    /// RC packets captured into the sample.
    pub captured: u64,
    /// Own packets delivered and counted as ghost responses.
    pub ghost: u64,
    /// ... as duplicate requests.
    pub duplicate: u64,
    /// ... as for no QP.
    pub unknown_qp: u64,
    /// ... processed (replays inside the window).
    pub accepted: u64,
    /// ... corrupted by the fabric (ICRC errors).
    pub corrupted: u64,
    /// Violations found (see the module doc).
    pub violations: u64,
}

impl AdversaryStats {
    /// Injected packets of `kind`.
    pub fn kind(&self, kind: Kind) -> u64 {
        self.by_kind[kind.index()]
    }
}

/// What one of its own packets must do when it lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
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
    fn merge(self, other: Expect) -> Expect {
        match (self, other) {
            (a, b) if a == b => a,
            (Expect::Unknown, b) | (b, Expect::Unknown) => b,
            _ => Expect::Any,
        }
    }
}

#[derive(Debug, Clone)]
struct Record {
    kind: Kind,
    expect: Expect,
    qpn: u32,
    psn: Psn,
    /// The window when it was built, for the report.
    window: String,
}

/// The receive counters of one HCA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Rx {
    pkts: u64,
    icrc: u64,
    malformed: u64,
    bad_key: u64,
    unknown_qp: u64,
    ghost: u64,
    duplicate: u64,
    out_of_seq: u64,
    seq_nak: u64,
    rnr_nak: u64,
}

impl Rx {
    fn of(c: &Counters) -> Rx {
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

    fn minus(self, o: Rx) -> Rx {
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
    fn verdicts(&self) -> [u64; 5] {
        [self.pkts, self.icrc, self.malformed, self.bad_key, self.unknown_qp]
    }

    /// Whether one packet was counted once: either accepted for
    /// processing (`rcvd_pkts`; processing may still drop it as malformed
    /// or for a bad Q_Key, once) or dropped for exactly one reason.
    fn counted_once(&self) -> bool {
        if self.pkts == 1 {
            self.icrc == 0 && self.unknown_qp == 0 && self.malformed <= 1 && self.bad_key <= 1
        } else {
            self.pkts == 0 && self.verdicts().iter().sum::<u64>() == 1
        }
    }
}

/// How a delivered packet was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
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
    fn of(d: &Rx) -> Option<Outcome> {
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

/// A captured RC packet: the IP packet and the nodes it went between.
#[derive(Debug, Clone)]
struct Captured {
    bytes: Vec<u8>,
    to: usize,
}

/// A bounded sample of captured packets: the last [`POOL_HALF`] and a
/// reservoir of [`POOL_HALF`] over everything older.
#[derive(Debug, Default)]
struct Pool {
    recent: VecDeque<Captured>,
    reservoir: Vec<Captured>,
    aged: u64,
}

impl Pool {
    fn add(&mut self, rng: &mut SimRng, packet: Captured) {
        self.recent.push_back(packet);
        if self.recent.len() <= POOL_HALF {
            return;
        }
        let old = self.recent.pop_front().expect("over the bound");
        self.aged += 1;
        if self.reservoir.len() < POOL_HALF {
            self.reservoir.push(old);
        } else {
            let j = rng.below(self.aged);
            if (j as usize) < POOL_HALF {
                self.reservoir[j as usize] = old;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.recent.is_empty() && self.reservoir.is_empty()
    }

    fn pick(&self, rng: &mut SimRng) -> Option<&Captured> {
        let old = !self.reservoir.is_empty()
            && (self.recent.is_empty() || rng.chance(Probability::from_percent(40)));
        if old {
            Some(&self.reservoir[rng.below(self.reservoir.len() as u64) as usize])
        } else if self.recent.is_empty() {
            None
        } else {
            Some(&self.recent[rng.below(self.recent.len() as u64) as usize])
        }
    }
}

/// The state of the QP a packet is for.
enum Target {
    /// It can receive: the requester's window `[comp.psn, next_psn)` and
    /// the responder's expected PSN.
    Live { comp: Psn, next: Psn, epsn: Psn },
    /// Gone, or unable to receive; whether another live QP holds its
    /// table slot.
    Orphan { slot_reused: bool },
}

/// The adversary node.
pub struct Adversary {
    id: NodeId,
    rate: Probability,
    rng: SimRng,
    hcas: Vec<SharedHca>,
    max_qp: u32,
    requests: Pool,
    responses: Pool,
    /// (node, QPN) of a requester to the last PSN seen acknowledged.
    acked: BTreeMap<(usize, u32), Psn>,
    /// (node, QPN) of every QP seen as a destination.
    qpns: BTreeSet<(usize, u32)>,
    /// (node, QPN) of the QPs the application destroyed.
    destroyed: BTreeSet<(usize, u32)>,
    scheduled: BTreeSet<(Instant, u64)>,
    next_seq: u64,
    due: u64,
    /// Its packets by digest (the same bytes sent again share one), with
    /// the sequence number of the last time each was sent.
    records: BTreeMap<u64, (Record, u64)>,
    /// Digests by the sequence number of the last time each was sent:
    /// the oldest is forgotten first.
    record_order: BTreeMap<u64, u64>,
    next_record: u64,
    /// Each HCA's receive counters after the last delivery to it.
    last: Vec<Rx>,
    stats: AdversaryStats,
    violations: Vec<String>,
}

impl Adversary {
    /// An adversary at node `id` against `hcas` (node `i` is `hcas[i]`),
    /// sending one packet per delivered packet with probability `rate`.
    pub fn new(id: NodeId, rate: Probability, seed: u64, hcas: Vec<SharedHca>) -> Adversary {
        let last = hcas.iter().map(|h| Rx::of(&h.borrow().counters())).collect();
        let max_qp = hcas.first().map_or(1, |h| h.borrow().config().max_qp).max(1);
        Adversary {
            id,
            rate,
            rng: SimRng::new(seed ^ 0x4144_5645_5253_4152),
            hcas,
            max_qp,
            requests: Pool::default(),
            responses: Pool::default(),
            acked: BTreeMap::new(),
            qpns: BTreeSet::new(),
            destroyed: BTreeSet::new(),
            scheduled: BTreeSet::new(),
            next_seq: 0,
            due: 0,
            records: BTreeMap::new(),
            record_order: BTreeMap::new(),
            next_record: 0,
            last,
            stats: AdversaryStats::default(),
            violations: Vec::new(),
        }
    }

    /// The application destroyed QP `qpn` of node `node`: its number must
    /// name nothing from now on.
    pub fn destroyed(&mut self, node: usize, qpn: Qpn) {
        if self.destroyed.len() < MAX_QPS_TRACKED {
            self.destroyed.insert((node, qpn.value()));
        }
    }

    /// What it did.
    pub fn stats(&self) -> &AdversaryStats {
        &self.stats
    }

    /// The violations spelled out (the first [`MAX_VIOLATIONS`]).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    fn violation(&mut self, text: String) {
        self.stats.violations += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(text);
        }
    }

    // ---- watching ------------------------------------------------------

    /// A copy of a delivered packet, from the mirror port.
    fn observe(&mut self, now: Instant, frame: &[u8]) {
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
    fn schedule(&mut self, now: Instant) {
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
    fn capture(&mut self, ip: &[u8], to: usize) {
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
    fn judge(&mut self, ip: &[u8], to: usize, d: Rx, outcome: Option<Outcome>) {
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

    // ---- forging -------------------------------------------------------

    /// The state of QP `qpn` on node `node`.
    fn target(&mut self, node: usize, qpn: u32) -> Target {
        let hca = self.hcas[node].borrow();
        let destroyed = self.destroyed.contains(&(node, qpn));
        let live = hca.qp(Qpn::new(qpn));
        if destroyed && live.is_some() {
            drop(hca);
            self.violation(format!(
                "node{node}: QPN {qpn:#x} of a destroyed QP names a live QP again"
            ));
            return Target::Orphan { slot_reused: true };
        }
        if let Some(qp) = live.filter(|qp| qp.can_receive()) {
            return Target::Live { comp: qp.comp.psn, next: qp.req.next_psn, epsn: qp.resp.epsn };
        }
        let slot = |q: u32| q.wrapping_sub(FIRST_QPN) % self.max_qp;
        let slot_reused = self
            .qpns
            .range((node, 0)..(node + 1, 0))
            .any(|&(_, q)| q != qpn && slot(q) == slot(qpn) && hca.qp(Qpn::new(q)).is_some());
        Target::Orphan { slot_reused }
    }

    /// Builds the next packet; `None` when nothing is captured yet.
    fn forge(&mut self) -> Option<(Vec<u8>, IpAddr)> {
        for _ in 0..4 {
            let group = self.rng.below(100);
            let built = match group {
                0..=24 => self.replay(),
                25..=64 => self.stale_response(),
                _ => self.stale_request(),
            };
            if let Some((bytes, record)) = built {
                let Classified::Roce(frame) = classify(&bytes, Link::RawIp) else {
                    unreachable!("the adversary built a frame it cannot read")
                };
                debug_assert!(frame.integrity_ok());
                let destination = frame.ip.destination();
                self.stats.injected += 1;
                self.stats.by_kind[record.kind.index()] += 1;
                self.remember(Fnv64::digest(&bytes), record);
                return Some((bytes, destination));
            }
        }
        self.stats.skipped += 1;
        None
    }

    fn remember(&mut self, digest: u64, mut record: Record) {
        let seq = self.next_record;
        self.next_record += 1;
        if let Some((old, old_seq)) = self.records.remove(&digest) {
            self.record_order.remove(&old_seq);
            record.expect = old.expect.merge(record.expect);
        } else if self.records.len() >= MAX_RECORDS {
            if let Some((_, oldest)) = self.record_order.pop_first() {
                self.records.remove(&oldest);
            }
        }
        self.record_order.insert(seq, digest);
        self.records.insert(digest, (record, seq));
    }

    fn count_orphan(&mut self, slot_reused: bool) {
        self.stats.orphans += 1;
        if slot_reused {
            self.stats.orphans_slot_reused += 1;
        }
    }

    /// A captured packet, verbatim.
    fn replay(&mut self) -> Option<(Vec<u8>, Record)> {
        let responses = self.rng.chance(Probability::from_percent(50));
        let pool = if responses { &self.responses } else { &self.requests };
        let pool = if pool.is_empty() {
            if responses {
                &self.requests
            } else {
                &self.responses
            }
        } else {
            pool
        };
        let c = pool.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let packet = frame.packet().ok()?;
        let (qpn, psn) = (packet.bth().dest_qpn().value(), packet.bth().psn());
        let is_response = packet.info().is(Mask::RESP);
        let kind = if is_response { Kind::ReplayResponse } else { Kind::ReplayRequest };
        let (expect, window) = match self.target(c.to, qpn) {
            Target::Live { comp, next, epsn } => (Expect::Any, window(comp, next, epsn)),
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                (Expect::Unknown, orphan(slot_reused))
            }
        };
        Some((c.bytes, Record { kind, expect, qpn, psn, window }))
    }

    /// How far back from a base PSN a stale one goes.
    fn back(&mut self) -> u32 {
        let r = &mut self.rng;
        match r.below(100) {
            0..=39 => 0,
            40..=69 => r.range_inclusive(1, 4) as u32,
            70..=89 => r.range_inclusive(5, u64::from(FAR)) as u32,
            _ => FAR,
        }
    }

    /// A captured response turned into a stale ACK, NAK, READ response or
    /// atomic ACK.
    fn stale_response(&mut self) -> Option<(Vec<u8>, Record)> {
        let c = self.responses.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let packet = frame.packet().ok()?;
        let bth = packet.bth();
        let (qpn, captured_psn) = (bth.dest_qpn(), bth.psn());
        let msn = packet.aeth().map_or(0, |a| a.msn());
        let back = self.back();
        let (psn, expect, window) = match self.target(c.to, qpn.value()) {
            Target::Live { comp, next, epsn } => {
                let just_behind = comp - 1;
                let seen = self.acked.get(&(c.to, qpn.value())).copied();
                let base = match seen {
                    Some(a) if self.rng.chance(Probability::from_percent(60)) => {
                        if outside(a - back, comp, next) {
                            a
                        } else {
                            self.stats.in_window_avoided += 1;
                            just_behind
                        }
                    }
                    _ => just_behind,
                };
                let mut psn = base - back;
                if !outside(psn, comp, next) {
                    psn = just_behind - back;
                }
                if !outside(psn, comp, next) {
                    return None;
                }
                (psn, Expect::Ghost, window(comp, next, epsn))
            }
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                (captured_psn - back, Expect::Unknown, orphan(slot_reused))
            }
        };
        let r = &mut self.rng;
        let ack = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
        let (kind, syndrome) = match r.below(8) {
            0 => {
                let credits = if r.chance(Probability::from_percent(50)) {
                    ack
                } else {
                    Syndrome::from_u8(r.below(32) as u8)
                };
                (Kind::StaleAck, credits)
            }
            1 => (Kind::StaleSeqNak, Syndrome::Nak(NakCode::PsnSequenceError)),
            2 => {
                let timer_code =
                    if r.chance(Probability::from_percent(30)) { 0 } else { r.below(32) as u8 };
                (Kind::StaleRnrNak, Syndrome::RnrNak { timer_code })
            }
            3 => (Kind::StaleInvalidRequest, Syndrome::Nak(NakCode::InvalidRequest)),
            4 => (Kind::StaleAccessError, Syndrome::Nak(NakCode::RemoteAccessError)),
            5 => (Kind::StaleOperationalError, Syndrome::Nak(NakCode::RemoteOperationalError)),
            6 => (Kind::StaleReadResponse, ack),
            _ => (Kind::StaleAtomicAck, ack),
        };
        let aeth = aeth::Repr { syndrome, msn };
        let garbage: Vec<u8>;
        let (opcode, ext, payload): (Opcode, roce::ExtHeaders, &[u8]) = match kind {
            Kind::StaleReadResponse => {
                let captured = bth.opcode();
                let is_read = packet.info().is(Mask::READ);
                let (opcode, len) = if is_read {
                    (captured, packet.payload().len())
                } else {
                    (Opcode::RC_RDMA_READ_RESPONSE_ONLY, r.below(257) as usize)
                };
                garbage = super::arena::random_bytes(r, len);
                let with_aeth = opcode.info().is_some_and(|i| i.is(Mask::AETH));
                let ext = roce::ExtHeaders {
                    aeth: with_aeth.then_some(aeth),
                    ..roce::ExtHeaders::default()
                };
                (opcode, ext, &garbage)
            }
            Kind::StaleAtomicAck => {
                let ext = roce::ExtHeaders {
                    aeth: Some(aeth),
                    atomic_ack_eth: Some(atomic_ack_eth::Repr { orig: r.next_u64() }),
                    ..roce::ExtHeaders::default()
                };
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, ext, &[])
            }
            _ => {
                let ext = roce::ExtHeaders { aeth: Some(aeth), ..roce::ExtHeaders::default() };
                (Opcode::RC_ACKNOWLEDGE, ext, &[])
            }
        };
        let repr =
            roce::Repr { bth: bth::Repr::new(opcode, qpn, psn, payload.len()), ext, payload };
        let bytes = emit_like(&frame, repr)?;
        let record = Record { kind, expect, qpn: qpn.value(), psn, window };
        Some((bytes, record))
    }

    /// A captured request with its PSN moved behind the responder's.
    fn stale_request(&mut self) -> Option<(Vec<u8>, Record)> {
        let c = self.requests.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let mut repr = frame.repr().ok()?;
        let info = repr.roce.bth.opcode.info()?;
        let kind = if info.is(Mask::READ) {
            Kind::DupRead
        } else if info.is(Mask::ATOMIC) {
            Kind::DupAtomic
        } else if info.is(Mask::WRITE) {
            Kind::DupWrite
        } else {
            Kind::DupSend
        };
        let qpn = repr.roce.bth.dest_qpn.value();
        let captured_psn = repr.roce.bth.psn;
        let (psn, expect, window) = match self.target(c.to, qpn) {
            Target::Live { comp, next, epsn } => {
                let own = captured_psn.distance_to(epsn);
                let r = &mut self.rng;
                let distance = match r.below(100) {
                    0..=34 if (1..=FAR as i32 + 1).contains(&own) => own as u32,
                    0..=49 => 1,
                    50..=79 => r.range_inclusive(2, 5) as u32,
                    _ => r.range_inclusive(6, u64::from(FAR) + 1) as u32,
                };
                (epsn - distance, Expect::Duplicate, window(comp, next, epsn))
            }
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                let back = self.back();
                (captured_psn - back, Expect::Unknown, orphan(slot_reused))
            }
        };
        repr.roce.bth.psn = psn;
        let mut bytes = vec![0; repr.buffer_len()];
        repr.emit(&mut bytes).ok()?;
        Some((bytes, Record { kind, expect, qpn, psn, window }))
    }
}

/// Whether `psn` is outside the requester's window `[comp, next)`.
fn outside(psn: Psn, comp: Psn, next: Psn) -> bool {
    let outstanding = comp.distance_to(next).max(0) as u32;
    psn.value().wrapping_sub(comp.value()) & Psn::MASK >= outstanding
}

fn window(comp: Psn, next: Psn, epsn: Psn) -> String {
    format!(
        "requester window [{}, {}), responder expects {}",
        comp.value(),
        next.value(),
        epsn.value()
    )
}

fn orphan(slot_reused: bool) -> String {
    if slot_reused {
        "no such QP; its slot holds another".into()
    } else {
        "no QP that can receive".into()
    }
}

/// Emits `roce` with the IP addresses, IP ID and UDP source port of
/// `frame`, and a fresh ICRC.
fn emit_like(frame: &RoceFrame<'_>, roce: roce::Repr<'_>) -> Option<Vec<u8>> {
    let sport = frame.udp.source_port;
    let repr = match &frame.ip {
        IpHeader::V4(h) => {
            FrameRepr::ipv4((h.source.into(), h.destination.into()), h.identification, sport, roce)
        }
        IpHeader::V6(h) => FrameRepr::ipv6((h.source.into(), h.destination.into()), sport, roce),
    }
    .ok()?;
    let mut bytes = vec![0; repr.buffer_len()];
    repr.emit(&mut bytes).ok()?;
    Some(bytes)
}

impl Endpoint for Adversary {
    fn addresses(&self) -> &[IpAddr] {
        &[]
    }

    fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.observe(now, frame);
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while self.due > 0 {
            self.due -= 1;
            if let Some((bytes, destination)) = self.forge() {
                buf[..bytes.len()].copy_from_slice(&bytes);
                return Some(Transmit::new(destination, bytes.len()));
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.scheduled.first().map(|&(at, _)| at)
    }

    fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, seq)) = self.scheduled.first() {
            if at > now {
                break;
            }
            self.scheduled.remove(&(at, seq));
            self.due += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_edges() {
        let (c, n) = (Psn::new(10), Psn::new(14));
        assert!(outside(Psn::new(9), c, n));
        assert!(!outside(Psn::new(10), c, n));
        assert!(!outside(Psn::new(13), c, n));
        assert!(outside(Psn::new(14), c, n));
        assert!(outside(Psn::new(10) - FAR, c, n));
        // Nothing outstanding: every PSN is outside.
        assert!(outside(Psn::new(10), c, c));
        // Across the wrap.
        let (c, n) = (Psn::new(0xff_fffe), Psn::new(2));
        assert!(!outside(Psn::new(0), c, n));
        assert!(outside(Psn::new(0xff_fffd), c, n));
        assert!(outside(Psn::new(2), c, n));
    }

    #[test]
    fn expectations_merge_to_what_both_allow() {
        assert_eq!(Expect::Ghost.merge(Expect::Ghost), Expect::Ghost);
        assert_eq!(Expect::Unknown.merge(Expect::Ghost), Expect::Ghost);
        assert_eq!(Expect::Duplicate.merge(Expect::Unknown), Expect::Duplicate);
        assert_eq!(Expect::Ghost.merge(Expect::Duplicate), Expect::Any);
        assert_eq!(Expect::Any.merge(Expect::Unknown), Expect::Any);
    }
}
