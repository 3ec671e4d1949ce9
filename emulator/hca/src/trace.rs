//! The HCA's decisions, step by step: what happened to each packet it
//! received and why, what the requester did about responses (go back,
//! wait, give up), which WQEs it refused and which completions it wrote.
//! A learner reads the steps beside the packets; a test or a tool prints
//! them (`uroce demo`, `--trace` on the tools, `uroce sim --trace`).
//!
//! Tracing is off until [`crate::Hca::trace_steps`] turns it on; the HCA
//! keeps at most the capacity it was given, dropping the oldest (counted),
//! and the driver takes them with [`crate::Hca::poll_step`]. Steps never
//! change what the HCA does, and no packet or trace hash depends on them.

use crate::time::Instant;
use core::fmt;
use std::collections::VecDeque;
use uroce_device::types::{Qpn, WcOpcode, WcStatus};
use uroce_wire::aeth::Syndrome;
use uroce_wire::{Opcode, Psn};

/// One decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A received packet went no further than the receive path.
    Dropped {
        /// The QP it was for, when known.
        qpn: Option<Qpn>,
        /// Why.
        reason: DropReason,
    },
    /// A request reached the responder.
    Request {
        /// The QP.
        qpn: Qpn,
        /// Its PSN.
        psn: Psn,
        /// Its opcode.
        opcode: Opcode,
        /// What the responder made of it.
        verdict: RequestVerdict,
    },
    /// A response reached the completer.
    Response {
        /// The QP.
        qpn: Qpn,
        /// Its PSN.
        psn: Psn,
        /// Its opcode.
        opcode: Opcode,
        /// What the completer made of it.
        verdict: ResponseVerdict,
    },
    /// The requester goes back to `from` (go-back-N).
    GoBack {
        /// The QP.
        qpn: Qpn,
        /// The PSN sent again first.
        from: Psn,
        /// Why.
        cause: GoBackCause,
    },
    /// The requester sends its last packet again, asking for an ACK: it
    /// sent the end of a message without AckReq (ACKs on demand) and has
    /// sent nothing since for `HcaConfig::ack_probe_ns`.
    AckProbe {
        /// The QP.
        qpn: Qpn,
        /// The PSN sent again.
        psn: Psn,
    },
    /// An RNR NAK: the requester waits before it sends again.
    RnrWait {
        /// The QP.
        qpn: Qpn,
        /// How long, in microseconds.
        wait_us: u32,
    },
    /// A QP ran out of retries.
    RetriesExhausted {
        /// The QP.
        qpn: Qpn,
        /// RNR retries (else transport retries).
        rnr: bool,
    },
    /// The HCA refused a WQE the application wrote.
    WqeRefused {
        /// The QP.
        qpn: Qpn,
        /// The status its completion carries.
        status: WcStatus,
    },
    /// QP1 received a MAD (handed to the CM) or sent one (from the CM).
    Mad {
        /// Sent (else received).
        sent: bool,
        /// Its attribute ID: which CM message (0x10 REQ ... 0x18 SIDR_REP).
        attribute: u16,
        /// The peer's address.
        peer: core::net::IpAddr,
    },
    /// A completion was written.
    Completion {
        /// The QP.
        qpn: Qpn,
        /// The CQ.
        cq: u32,
        /// The work request.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
        /// Its opcode.
        opcode: WcOpcode,
    },
    /// The runtime injected a device-side fault
    /// ([`crate::Hca::inject_fault`]).
    FaultInjected {
        /// The fault.
        fault: crate::fault::DeviceFault,
    },
}

/// Why the receive path dropped a packet (each has its counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Not a well-formed RoCEv2 packet (`rcvd_malformed`).
    Malformed,
    /// ICRC, IPv4 or UDP checksum wrong (`rcvd_icrc_err`).
    BadChecksum,
    /// Not for one of the device's addresses (`rcvd_bad_key_or_addr`).
    NotOurAddress,
    /// A P_Key the port does not have (`rcvd_bad_key_or_addr`).
    BadPkey,
    /// No live QP has the destination QPN (`rcvd_unknown_qp`).
    UnknownQp,
    /// The QP's transport or state does not take it (`rcvd_unknown_qp`).
    QpCannotTakeIt,
    /// RC/UC: not from the QP's peer (`rcvd_bad_key_or_addr`).
    NotFromPeer,
    /// UD: the wrong Q_Key (`rcvd_bad_key_or_addr`).
    BadQkey,
    /// To QP1 but not a UD SEND_ONLY of one 256-byte MAD with the GSI
    /// Q_Key (`rcvd_gsi_drop`, and `rcvd_unknown_qp`).
    NotAMad,
    /// To the multicast QPN for a group no QP of the device is attached
    /// to (`rcvd_mcast_drop`, and `rcvd_unknown_qp`).
    NoMulticastGroup,
    /// A request to a QP whose responder is stalled by an injected fault
    /// (`rcvd_stalled_drop`).
    Stalled,
    /// The device crashed (an injected fault) and takes nothing
    /// (`rcvd_unknown_qp`: to the peer, its QPs are gone).
    Crashed,
}

/// What the responder made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestVerdict {
    /// In sequence, and executed.
    Executed,
    /// Behind the expected PSN: answered from state, not executed again.
    Duplicate,
    /// Ahead of the expected PSN: a PSN sequence NAK (once per gap).
    OutOfSequence {
        /// The PSN expected.
        expected: Psn,
        /// Whether this one drew the NAK.
        nak: bool,
    },
    /// Refused: an RNR NAK or an error NAK (the QP goes to ERR).
    Refused(Syndrome),
    /// UC/UD: dropped (the rest of a broken message, no receive WQE...).
    Dropped,
}

/// What the completer made of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseVerdict {
    /// Its PSN answers nothing outstanding (stale, duplicated, never
    /// sent, or forged): dropped (`rcvd_ghost_response`).
    NotOutstanding,
    /// An ACK; whether it acknowledged anything new.
    Ack {
        /// The oldest unacknowledged PSN moved.
        progressed: bool,
    },
    /// A NAK acted on.
    Nak(Syndrome),
    /// A NAK whose own syndrome was not acted on: it passed a lost READ
    /// or atomic response, or repeats a go-back already under way.
    NakIgnored(Syndrome),
    /// READ response data placed.
    ReadPlaced,
    /// An atomic's original value placed.
    AtomicPlaced,
    /// Out of order or for no WQE of its kind: not placed.
    NotPlaced,
}

/// Why the requester went back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoBackCause {
    /// The retransmit timer fired.
    Timeout,
    /// A PSN sequence NAK.
    SequenceNak,
    /// An RNR NAK (after its wait).
    RnrNak,
    /// An ACK passed a READ or atomic whose response was lost.
    ImpliedNak,
    /// A READ response or atomic ACK came ahead of the one expected.
    ResponseAhead,
}

/// The steps kept for the driver.
#[derive(Debug, Default)]
pub(crate) struct StepLog {
    steps: VecDeque<(Instant, Step)>,
    capacity: usize,
    /// Steps recorded so far (the sequence number of the next one).
    recorded: u64,
    /// Steps dropped because the log was full.
    pub(crate) lost: u64,
}

impl StepLog {
    /// Keeps up to `capacity` steps (0: off).
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        while self.steps.len() > capacity {
            self.steps.pop_front();
        }
    }

    /// Whether steps are kept (a caller may skip building one when not).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.capacity != 0
    }

    #[inline]
    pub(crate) fn record(&mut self, at: Instant, step: Step) {
        self.insert(self.recorded, at, step);
    }

    /// The sequence number the next step gets.
    pub(crate) fn recorded(&self) -> u64 {
        self.recorded
    }

    /// Records `step` as if it had been recorded when the sequence number
    /// was `seq`: before the steps recorded since (a request's verdict
    /// before the completions executing it wrote).
    #[inline]
    pub(crate) fn insert(&mut self, seq: u64, at: Instant, step: Step) {
        // Checked where the step is made: with the log off (the usual
        // case), nothing is called and no step is moved.
        if self.capacity != 0 {
            self.keep(seq, at, step);
        }
    }

    fn keep(&mut self, seq: u64, at: Instant, step: Step) {
        let first = self.recorded - self.steps.len() as u64;
        let mut position = seq.saturating_sub(first).min(self.steps.len() as u64) as usize;
        if self.steps.len() == self.capacity {
            self.steps.pop_front();
            self.lost += 1;
            position = position.saturating_sub(1);
        }
        if position == self.steps.len() {
            // The usual case: an append.
            self.steps.push_back((at, step));
        } else {
            self.steps.insert(position, (at, step));
        }
        self.recorded += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, Step)> {
        self.steps.pop_front()
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Step::Dropped { qpn: Some(qpn), reason } => write!(f, "QP {qpn}: dropped, {reason}"),
            Step::Dropped { qpn: None, reason } => write!(f, "dropped, {reason}"),
            Step::Request { qpn, psn, opcode, verdict } => {
                write!(f, "QP {qpn}: request {} PSN {}: {verdict}", opcode.name(), psn.value())
            }
            Step::Response { qpn, psn, opcode, verdict } => {
                write!(f, "QP {qpn}: response {} PSN {}: {verdict}", opcode.name(), psn.value())
            }
            Step::GoBack { qpn, from, cause } => {
                write!(f, "QP {qpn}: go back to PSN {} ({cause})", from.value())
            }
            Step::AckProbe { qpn, psn } => {
                write!(f, "QP {qpn}: ACK probe, PSN {} sent again with AckReq", psn.value())
            }
            Step::RnrWait { qpn, wait_us } => write!(f, "QP {qpn}: RNR wait {wait_us} us"),
            Step::RetriesExhausted { qpn, rnr: true } => {
                write!(f, "QP {qpn}: RNR retries exhausted")
            }
            Step::RetriesExhausted { qpn, rnr: false } => {
                write!(f, "QP {qpn}: transport retries exhausted")
            }
            Step::WqeRefused { qpn, status } => write!(f, "QP {qpn}: WQE refused, {status:?}"),
            Step::Mad { sent: true, attribute, peer } => {
                write!(f, "QP 0x000001: sent CM {} to {peer}", mad_name(attribute))
            }
            Step::Mad { sent: false, attribute, peer } => {
                write!(f, "QP 0x000001: received CM {} from {peer}", mad_name(attribute))
            }
            Step::Completion { qpn, cq, wr_id, status, opcode } => {
                write!(f, "QP {qpn}: completion on CQ {cq}: wr_id {wr_id} {opcode:?} {status:?}")
            }
            Step::FaultInjected { fault } => write!(f, "fault injected: {fault}"),
        }
    }
}

/// The name of a CM attribute ID.
fn mad_name(attribute: u16) -> &'static str {
    match attribute {
        0x10 => "REQ",
        0x11 => "MRA",
        0x12 => "REJ",
        0x13 => "REP",
        0x14 => "RTU",
        0x15 => "DREQ",
        0x16 => "DREP",
        0x17 => "SIDR_REQ",
        0x18 => "SIDR_REP",
        _ => "MAD",
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::Malformed => "not well-formed RoCEv2",
            DropReason::BadChecksum => "bad ICRC or checksum",
            DropReason::NotOurAddress => "not for this device's address",
            DropReason::BadPkey => "unknown P_Key",
            DropReason::UnknownQp => "no such QP",
            DropReason::QpCannotTakeIt => "the QP's transport or state does not take it",
            DropReason::NotFromPeer => "not from the QP's peer",
            DropReason::BadQkey => "wrong Q_Key",
            DropReason::NotAMad => "not a UD SEND_ONLY of one 256-byte MAD with the GSI Q_Key",
            DropReason::NoMulticastGroup => "to a multicast group no QP is attached to",
            DropReason::Stalled => "the responder is stalled (injected fault)",
            DropReason::Crashed => "the device crashed (injected fault)",
        })
    }
}

impl fmt::Display for RequestVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestVerdict::Executed => f.write_str("in sequence, executed"),
            RequestVerdict::Duplicate => f.write_str("duplicate, answered from state"),
            RequestVerdict::OutOfSequence { expected, nak: true } => {
                write!(f, "ahead of PSN {}, PSN sequence NAK", expected.value())
            }
            RequestVerdict::OutOfSequence { expected, nak: false } => {
                write!(f, "ahead of PSN {}, dropped (NAK already sent)", expected.value())
            }
            RequestVerdict::Refused(syndrome) => write!(f, "refused, {syndrome}"),
            RequestVerdict::Dropped => f.write_str("dropped"),
        }
    }
}

impl fmt::Display for ResponseVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseVerdict::NotOutstanding => f.write_str("answers nothing outstanding, dropped"),
            ResponseVerdict::Ack { progressed: true } => f.write_str("ACK, progress"),
            ResponseVerdict::Ack { progressed: false } => f.write_str("ACK, nothing new"),
            ResponseVerdict::Nak(syndrome) => write!(f, "{syndrome}"),
            ResponseVerdict::NakIgnored(syndrome) => write!(f, "{syndrome}, not acted on"),
            ResponseVerdict::ReadPlaced => f.write_str("READ data placed"),
            ResponseVerdict::AtomicPlaced => f.write_str("original value placed"),
            ResponseVerdict::NotPlaced => f.write_str("not expected, not placed"),
        }
    }
}

impl fmt::Display for GoBackCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GoBackCause::Timeout => "retransmit timer",
            GoBackCause::SequenceNak => "PSN sequence NAK",
            GoBackCause::RnrNak => "RNR NAK",
            GoBackCause::ImpliedNak => "implied NAK: a READ or atomic response was lost",
            GoBackCause::ResponseAhead => "a response came ahead of the expected one",
        })
    }
}
