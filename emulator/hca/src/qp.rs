//! Queue pair contexts (QPC): everything the HCA keeps about one QP.
//!
//! A QP has three engines, as in Linux rxe: the requester (`req.rs`) turns
//! send WQEs into request packets, the completer (`comp.rs`) matches
//! responses to them and writes send completions, and the responder
//! (`resp.rs`) executes incoming requests and answers them. Their state
//! lives here, split the same way.

use crate::handles::{CqIndex, PdIndex, SrqIndex};
use crate::ring::ConsumerRing;
use crate::send_op::SendOp;
use crate::time::Instant;
use core::net::IpAddr;
use std::collections::VecDeque;
use uroce_device::command::{QpAttr, QpCap};
use uroce_device::types::{QpState, QpType, Qpn, WcStatus};
use uroce_device::types::{SendFlags, WrOpcode};
use uroce_device::wqe::{Payload, RecvWqe, SendWqe, Sge, UdDest};
use uroce_wire::aeth::Syndrome;
use uroce_wire::Psn;

/// Where a send WQE is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// Fetched, not yet (completely) sent.
    Posted,
    /// Every packet sent; waiting for the ACK or the response (RC).
    Pending,
    /// Finished, with this status; the completer retires it in order.
    Done(WcStatus),
}

/// The HCA's copy of one send WQE (the "SQ shadow"): the WQE is read from
/// the application's ring once, validated and decoded, and from then on
/// only this copy is used.
#[derive(Debug, Clone)]
pub struct SqEntry {
    /// The application's tag, returned in the completion.
    pub wr_id: u64,
    /// The WQE's opcode.
    pub opcode: WrOpcode,
    /// The WQE's flags.
    pub flags: SendFlags,
    /// The operation, decoded.
    pub op: SendOp,
    /// The data: SGEs, or inline bytes.
    pub payload: Payload,
    /// Where it is.
    pub state: EntryState,
    /// Whether its PSNs are assigned (from its first transmission on).
    pub psn_assigned: bool,
    /// Its first PSN.
    pub first_psn: Psn,
    /// PSNs it occupies: packets of a SEND/WRITE, response packets of a
    /// READ, one for an atomic.
    pub npkts: u32,
    /// READ: bytes of the response placed so far.
    pub read_placed: u64,
    /// Produce a completion on success.
    pub signaled: bool,
    /// Why the WQE was refused when fetched, if it was (a malformed WQE
    /// completes with this status when the requester reaches it).
    pub fetch_error: Option<WcStatus>,
    /// The payload's bytes, summed once when the WQE is fetched
    /// ([`SqEntry::length`]).
    length: u64,
}

impl SqEntry {
    /// A fetched WQE, decoded.
    pub fn new(wqe: SendWqe, signaled: bool, fetch_error: Option<WcStatus>) -> SqEntry {
        SqEntry {
            length: wqe.length(),
            wr_id: wqe.wr_id,
            opcode: wqe.opcode,
            flags: wqe.flags,
            op: SendOp::decode(&wqe),
            payload: wqe.payload,
            state: EntryState::Posted,
            psn_assigned: false,
            first_psn: Psn::default(),
            npkts: 0,
            read_placed: 0,
            signaled,
            fetch_error,
        }
    }

    /// A WQE that did not decode: it completes with `status` (signaled)
    /// when the requester reaches it.
    pub fn refused(wr_id: u64, status: WcStatus) -> SqEntry {
        SqEntry {
            wr_id,
            opcode: WrOpcode::Send,
            flags: SendFlags::EMPTY,
            op: SendOp::Send { imm: None, invalidate: None, ud: UdDest::default() },
            payload: Payload::Inline(Vec::new()),
            state: EntryState::Posted,
            psn_assigned: false,
            first_psn: Psn::default(),
            npkts: 0,
            read_placed: 0,
            signaled: true,
            fetch_error: Some(status),
            length: 0,
        }
    }

    /// Total bytes of the message (sum of SGE lengths, or inline length).
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The last PSN of the WQE.
    pub fn last_psn(&self) -> Psn {
        self.first_psn + (self.npkts.max(1) - 1)
    }

    /// Whether the WQE's completion needs data back (READ, atomics,
    /// FLUSH) rather than a plain ACK.
    pub fn wants_response(&self) -> bool {
        self.opcode.is_read_or_atomic()
    }
}

/// One slot of the SQ shadow: the entry fetched into it, if any, and the
/// data buffers of the entries it held before, kept for the next one (a
/// WQE fetched into a warm slot allocates nothing).
#[derive(Debug, Default)]
pub struct SqSlot {
    /// The entry, from its fetch until it is retired.
    pub entry: Option<SqEntry>,
    /// An SGE list buffer for the next entry.
    pub spare_sges: Vec<Sge>,
    /// An inline data buffer for the next entry.
    pub spare_inline: Vec<u8>,
}

impl SqSlot {
    /// Empties the slot, keeping its entry's data buffer (the larger of
    /// it and the spare one of its kind).
    pub fn clear(&mut self) {
        // Swapped where the entry lies (taking the entry out moves it all).
        let Some(entry) = self.entry.as_mut() else { return };
        match &mut entry.payload {
            Payload::Sges(list) if list.capacity() > self.spare_sges.capacity() => {
                core::mem::swap(list, &mut self.spare_sges);
            }
            Payload::Inline(bytes) if bytes.capacity() > self.spare_inline.capacity() => {
                core::mem::swap(bytes, &mut self.spare_inline);
            }
            _ => {}
        }
        self.entry = None;
    }
}

/// Requester state (`qp->req` in rxe).
#[derive(Debug, Clone, Default)]
pub struct Requester {
    /// The next PSN to assign to a new WQE.
    pub next_psn: Psn,
    /// Ring index of the WQE being sent.
    pub index: u32,
    /// Packets of that WQE already sent (READ: 0 or 1 request).
    pub sent_pkts: u32,
    /// READ/atomic WQEs sent and not completed (against `max_rd_atomic`).
    pub rd_atomic_outstanding: u32,
    /// Packets sent since the last AckReq (coalescing).
    pub noack_pkts: u32,
    /// Messages whose last packet went without AckReq (ACKs on demand,
    /// [`crate::config::HcaConfig::ack_probe_ns`]) since a packet last
    /// asked for an ACK.
    pub unrequested_wqes: u32,
    /// That packet's PSN: what an ACK probe sends again.
    pub unrequested_psn: Psn,
    /// The next packet asks for an ACK (it is an ACK probe).
    pub probe_wanted: bool,
    /// The PSN of the last request packet sent (a WQE whose gather failed
    /// has PSNs but sent none).
    pub last_sent_psn: Psn,
    /// When the first of those messages went: by `ack_probe_ns` after it
    /// a packet asks, or the probe goes.
    pub unrequested_since: Instant,
    /// When the send queue was last read for new WQEs: a packet made at
    /// that same instant that leaves nothing fetched behind it had
    /// nothing posted behind it ([`crate::Transmit::nothing_behind`]).
    pub ring_read_at: Instant,
}

/// Completer state (`qp->comp` in rxe).
#[derive(Debug, Clone, Default)]
pub struct Completer {
    /// The oldest PSN not yet acknowledged or answered.
    pub psn: Psn,
    /// Transport retries left (reset whenever an ACK makes progress).
    pub retry_left: u8,
    /// RNR retries left (7 = infinite).
    pub rnr_retry_left: u8,
    /// When the retransmit timer fires, if armed.
    pub retransmit_at: Option<Instant>,
    /// When an RNR wait ends, if waiting.
    pub rnr_until: Option<Instant>,
    /// When to look whether an ACK probe is due, if armed.
    pub probe_at: Option<Instant>,
    /// A go-back caused by an out-of-sequence response or an implied NAK
    /// is under way: later such responses do not start (or pay for)
    /// another one until the acknowledged point moves (rxe's
    /// `started_retry`).
    pub started_retry: bool,
}

/// A READ or atomic the responder has executed, kept to answer it again
/// (rxe's responder resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// An RDMA READ.
    Read {
        /// PSN of the request (first response PSN).
        first_psn: Psn,
        /// Response packets.
        npkts: u32,
        /// Remote address of the first byte.
        va: u64,
        /// R_Key.
        rkey: u32,
        /// Bytes.
        len: u32,
    },
    /// An atomic, with its result.
    Atomic {
        /// PSN of the request.
        psn: Psn,
        /// The original value returned.
        orig: u64,
    },
}

/// Something the responder owes the requester, in PSN order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// An ACK or NAK for `psn`.
    Ack {
        /// PSN acknowledged (or NAKed).
        psn: Psn,
        /// What it says.
        syndrome: Syndrome,
        /// MSN to report.
        msn: u32,
    },
    /// READ response packets for a resource, from its `next`-th packet.
    Read {
        /// Index in the resource ring.
        resource: usize,
        /// The packet this run of responses starts at (0, or where a
        /// duplicate request asked to resume): it goes out as FIRST/ONLY.
        start: u32,
        /// Next response packet to send (0-based).
        next: u32,
        /// MSN to report in the AETHs.
        msn: u32,
    },
    /// The answer to an ATOMIC WRITE or a FLUSH (IBA 1.5, as rxe's
    /// `send_read_response_ack`): an RDMA READ RESPONSE ONLY without
    /// payload, its AETH an ACK of `psn`.
    ReadResponseAck {
        /// PSN acknowledged (the request's).
        psn: Psn,
        /// MSN to report.
        msn: u32,
    },
    /// An ATOMIC ACKNOWLEDGE.
    AtomicAck {
        /// Index in the resource ring.
        resource: usize,
        /// MSN to report.
        msn: u32,
    },
}

/// The kind of multi-packet message being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InMessage {
    /// A SEND into the receive WQE in [`Responder::recv_wqe`].
    Send {
        /// Bytes placed so far.
        offset: u64,
    },
    /// An RDMA WRITE.
    Write {
        /// Next remote address to write.
        va: u64,
        /// R_Key.
        rkey: u32,
        /// Bytes announced in the RETH.
        dma_len: u32,
        /// Bytes written so far.
        offset: u64,
    },
}

/// Responder state (`qp->resp` in rxe).
#[derive(Debug, Clone, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number: messages completed.
    pub msn: u32,
    /// A PSN sequence NAK was sent for the current gap (send only one).
    pub nak_sent: bool,
    /// The message in progress.
    pub msg: Option<InMessage>,
    /// The receive WQE taken last (from the RQ or the SRQ): a SEND's while
    /// it is received. Its SGE list's buffer is reused from one WQE to the
    /// next.
    pub recv_wqe: RecvWqe,
    /// UC: drop packets until the next FIRST/ONLY.
    pub drop_msg: bool,
    /// READ/atomic resources, a ring of `max_dest_rd_atomic` slots.
    pub resources: Vec<Option<Resource>>,
    /// Next slot to use.
    pub res_head: usize,
    /// Responses owed, in PSN order.
    pub queue: VecDeque<Response>,
    /// Packets accepted since the last ACK (coalescing).
    pub unacked_pkts: u32,
}

/// Where a connected QP's packets go and come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Our address (from the source GID).
    pub local: IpAddr,
    /// The peer's address (from the destination GID).
    pub remote: IpAddr,
}

/// One QP's context.
#[derive(Debug)]
pub struct QpContext {
    /// Its number.
    pub qpn: Qpn,
    /// Transport.
    pub qp_type: QpType,
    /// State.
    pub state: QpState,
    /// Protection domain.
    pub pd: PdIndex,
    /// CQ for send completions.
    pub send_cq: CqIndex,
    /// CQ for receive completions.
    pub recv_cq: CqIndex,
    /// SRQ, if receives come from one.
    pub srq: Option<SrqIndex>,
    /// The send queue ring.
    pub sq: ConsumerRing,
    /// The receive queue ring (none with an SRQ).
    pub rq: Option<ConsumerRing>,
    /// Sizes.
    pub cap: QpCap,
    /// Every send WR completes.
    pub sq_sig_all: bool,
    /// Current attributes.
    pub attr: QpAttr,
    /// Connected QPs: the path (set at RTR).
    pub path: Option<Path>,
    /// UDP source port.
    pub sport: u16,
    /// The SQ shadow, indexed by ring slot.
    pub sq_shadow: Vec<SqSlot>,
    /// Ring index up to which WQEs were copied into the shadow.
    pub fetched: u32,
    /// Requester.
    pub req: Requester,
    /// Completer.
    pub comp: Completer,
    /// Responder.
    pub resp: Responder,
    /// In the HCA's transmit schedule (and the send queue's
    /// device-scheduled flag is up).
    pub scheduled: bool,
    /// The unacknowledged PSNs this QP counts in the device's total
    /// (`Device::unacked_psns`), as of the end of its last step.
    pub charged_psns: u32,
    /// In the device's `budget_waiters`.
    pub waiting_for_budget: bool,
    /// The send queue's producer index when the HCA last took the
    /// QP out of its schedule: a post published after it was not seen.
    pub sq_doorbell_seen: u32,
    /// Packets sent by this QP (for tests and dumps).
    pub sent_pkts: u64,
    /// Device-side faults injected into this QP, still to act
    /// ([`crate::Hca::inject_fault`]).
    pub injected: crate::fault::Injected,
}

impl QpContext {
    /// The path MTU in bytes (256 until RTR sets it).
    pub fn mtu(&self) -> u32 {
        self.attr.path_mtu.map_or(256, |m| m.bytes())
    }

    /// The SQ shadow slot of ring index `index`.
    pub fn slot(&self, index: u32) -> usize {
        (index & (self.sq.desc.entries - 1)) as usize
    }

    /// The shadow entry of ring index `index`, if fetched.
    pub fn entry(&self, index: u32) -> Option<&SqEntry> {
        self.sq_shadow[self.slot(index)].entry.as_ref()
    }

    /// The shadow entry of ring index `index`, mutably.
    pub fn entry_mut(&mut self, index: u32) -> Option<&mut SqEntry> {
        let slot = self.slot(index);
        self.sq_shadow[slot].entry.as_mut()
    }

    /// The local ACK timeout in nanoseconds (4.096 us * 2^timeout), or
    /// `None` for timeout 0 (wait forever).
    pub fn ack_timeout_ns(&self) -> Option<u64> {
        match self.attr.timeout {
            0 => None,
            t => Some(4096u64 << u32::from(t.min(31))),
        }
    }

    /// Whether a response at `psn` can answer something outstanding: the
    /// requester sent that PSN and it is not acknowledged yet, i.e. it is
    /// in `[comp.psn, req.next_psn)`. Nothing else may move the completer.
    pub fn awaits_response(&self, psn: Psn) -> bool {
        let outstanding = self.comp.psn.distance_to(self.req.next_psn);
        outstanding > 0 && psn.in_window(self.comp.psn, outstanding as u32)
    }

    /// The completer moved forward to `psn`, the oldest PSN not yet
    /// acknowledged or answered: the retry budgets are whole again, and a
    /// later go-back may start (and pay) anew.
    pub fn completer_progressed(&mut self, psn: Psn) {
        self.comp.psn = psn;
        self.comp.retry_left = self.attr.retry_cnt;
        self.comp.rnr_retry_left = self.attr.rnr_retry;
        self.comp.started_retry = false;
    }

    /// The PSNs this QP's requester has assigned and not seen
    /// acknowledged: an RC QP that can send (none otherwise: its window
    /// is flushed or not open).
    pub fn unacked_psns(&self) -> u32 {
        if self.qp_type != QpType::Rc || !self.can_send() {
            return 0;
        }
        self.comp.psn.distance_to(self.req.next_psn).max(0) as u32
    }

    /// Whether the requester is between WQEs: its next packet would start
    /// the next one (or there is none yet).
    pub fn between_wqes(&self) -> bool {
        self.req.sent_pkts == 0 && !self.entry(self.req.index).is_some_and(|e| e.psn_assigned)
    }

    /// Whether the QP can send requests.
    pub fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// Whether the QP takes incoming packets.
    pub fn can_receive(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    }
}
