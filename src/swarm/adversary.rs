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

mod forge;
mod watch;

use watch::{Record, Rx};

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
pub(super) enum Target {
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
