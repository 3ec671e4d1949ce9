//! Device-side faults: what a runtime or a test harness makes the device
//! itself do wrong, as a real HCA or its host could (fault-scenarios
//! design note, §4). Packet faults (loss, delay, corruption) belong to the
//! network and live in `uroce-faults`; these act inside the HCA, where
//! only the HCA can act: answer a SEND with an RNR NAK although a receive
//! WQE is posted, fail an R_Key check on a good key, stop answering for a
//! while, or die.
//!
//! A fault is an input of the sans-IO core like a packet or a doorbell:
//! [`Hca::inject_fault`] takes `(now, fault)`, and a stall's end is an
//! [`Instant`] the runtime computed. It is a method of [`Hca`], not a
//! device [`Command`](uroce_device::command::Command): the application's
//! driver cannot issue it, only the runtime that owns the HCA.
//!
//! | fault | hook | what the peer sees (IBA) |
//! | --- | --- | --- |
//! | [`DeviceFault::Rnr`] | `resp/recv_wqe.rs`, `take_recv_wqe`, before the RQ/SRQ is read | RNR NAK with the QP's `min_rnr_timer`; the requester retries per `rnr_retry` |
//! | [`DeviceFault::FailKeyCheck`] | `resp/execute.rs`, `check_remote`, before the real check | NAK remote access error; both QPs to ERR |
//! | [`DeviceFault::DmaFault`] | `check_remote`, after the real check | NAK remote operational error; both QPs to ERR |
//! | [`DeviceFault::StallResponder`] | `rx.rs`: requests dropped; `QpStep::transmit`: no response sent; `TimerKind::StallEnd` | silence: retransmissions, then success or retry exceeded |
//! | [`DeviceFault::Crash`] | `inject_fault` kills every QP; `Hca`'s `Endpoint` methods and `doorbell` stop at `crashed` | silence for ever: retry exceeded |

use crate::hca::{Hca, TimerKind};
use crate::time::Instant;
use crate::trace::Step;
use core::fmt;
use uroce_device::command::CmdError;
use uroce_device::types::Qpn;

/// A fault the device commits.
///
/// `qpn: None` targets every QP alive when the fault is injected (each
/// gets its own `count`); QPs created later are not affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceFault {
    /// The next `count` receive-consuming requests (SEND, RDMA WRITE with
    /// immediate) find no receive WQE, as if none were posted: on RC an
    /// RNR NAK with the QP's `min_rnr_timer` (each retry of the same
    /// message is one more request); on UC/UD the message is dropped.
    Rnr {
        /// The QP, or every live QP.
        qpn: Option<Qpn>,
        /// How many requests.
        count: u32,
    },
    /// The next `count` R_Key checks of requests (RDMA WRITE, READ,
    /// atomics, ATOMIC WRITE, FLUSH) fail as a bad R_Key does: NAK remote
    /// access error, the responder QP to ERR with `QpAccessErr`.
    FailKeyCheck {
        /// The QP, or every live QP.
        qpn: Option<Qpn>,
        /// How many checks.
        count: u32,
    },
    /// The next `count` responder memory accesses that pass their R_Key
    /// check fault as a DMA to freed memory does: NAK remote operational
    /// error, the responder QP to ERR with `QpFatal`.
    DmaFault {
        /// The QP, or every live QP.
        qpn: Option<Qpn>,
        /// How many accesses.
        count: u32,
    },
    /// The responder takes no request (each is dropped, counted in
    /// `rcvd_stalled_drop`) and sends no response (ACK, NAK, READ
    /// response, atomic ACK) until `until`; what it owed leaves then. The
    /// QP's requester side goes on.
    StallResponder {
        /// The QP, or every live QP.
        qpn: Option<Qpn>,
        /// When the stall ends (the runtime's time, like every `now`).
        until: Instant,
    },
    /// The device dies: every QP stops where it is, silently (no packet,
    /// completion or event ever again, no flush), as the adapter of a
    /// host that lost power; the CM and QP1 go silent too. Commands still
    /// work, so a surviving program can tear down.
    Crash,
}

impl DeviceFault {
    /// The QP the fault names, if one.
    pub fn qpn(&self) -> Option<Qpn> {
        match *self {
            DeviceFault::Rnr { qpn, .. }
            | DeviceFault::FailKeyCheck { qpn, .. }
            | DeviceFault::DmaFault { qpn, .. }
            | DeviceFault::StallResponder { qpn, .. } => qpn,
            DeviceFault::Crash => None,
        }
    }
}

impl fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |f: &mut fmt::Formatter<'_>, qpn: Option<Qpn>| match qpn {
            Some(qpn) => write!(f, " on QP {qpn}"),
            None => f.write_str(" on every QP"),
        };
        match *self {
            DeviceFault::Rnr { qpn, count } => {
                write!(f, "RNR NAK for the next {count} receive-consuming requests")?;
                on(f, qpn)
            }
            DeviceFault::FailKeyCheck { qpn, count } => {
                write!(f, "the next {count} R_Key checks fail")?;
                on(f, qpn)
            }
            DeviceFault::DmaFault { qpn, count } => {
                write!(f, "the next {count} responder memory accesses fault")?;
                on(f, qpn)
            }
            DeviceFault::StallResponder { qpn, until } => {
                write!(f, "responder stalled until {until}")?;
                on(f, qpn)
            }
            DeviceFault::Crash => f.write_str("device crash: every QP dies silently"),
        }
    }
}

/// A QP's injected faults still to act.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Injected {
    /// Receive-consuming requests still to answer with an RNR NAK.
    pub rnr_left: u32,
    /// R_Key checks still to fail.
    pub key_fail_left: u32,
    /// Responder memory accesses still to fault.
    pub dma_fault_left: u32,
    /// The responder is stalled until then (the `StallEnd` timer's slot).
    pub stalled_until: Option<Instant>,
    /// The device crashed with this QP: it is dead.
    pub killed: bool,
}

impl Injected {
    /// Whether the responder is stalled at `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        self.stalled_until.is_some_and(|until| now < until)
    }
}

impl Hca {
    /// Makes the device commit `fault` from `now` on (see
    /// [`DeviceFault`]). Only the runtime that owns the HCA calls it; the
    /// application's driver cannot. Recorded as [`Step::FaultInjected`].
    ///
    /// Errors: `NotFound` for a QPN that names no live QP. On a crashed
    /// device every fault is accepted and changes nothing.
    pub fn inject_fault(&mut self, now: Instant, fault: DeviceFault) -> Result<(), CmdError> {
        self.saw(now);
        let targets: Vec<_> = match fault.qpn() {
            Some(qpn) => vec![self.qp_slot(qpn).ok_or(CmdError::NotFound("no such QP"))?],
            None => self.qps.iter().map(|(index, _)| index).collect(),
        };
        self.dev.steps.record(now, Step::FaultInjected { fault });
        if self.crashed {
            return Ok(());
        }
        if fault == DeviceFault::Crash {
            self.crashed = true;
        }
        for index in targets {
            let Some(mut step) = self.qp_step(index) else { continue };
            let injected = &mut step.qp.injected;
            match fault {
                DeviceFault::Rnr { count, .. } => injected.rnr_left = count,
                DeviceFault::FailKeyCheck { count, .. } => injected.key_fail_left = count,
                DeviceFault::DmaFault { count, .. } => injected.dma_fault_left = count,
                DeviceFault::StallResponder { until, .. } => {
                    // A stall already under way ends at the later time.
                    let until = injected.stalled_until.map_or(until, |u| u.max(until));
                    if now < until {
                        step.set_timer(TimerKind::StallEnd, Some(until));
                    }
                }
                DeviceFault::Crash => step.kill(),
            }
        }
        Ok(())
    }

    /// Whether the device crashed ([`DeviceFault::Crash`]).
    pub fn crashed(&self) -> bool {
        self.crashed
    }
}

impl crate::hca::QpStep<'_> {
    /// The crash, on this QP: its timers stop, what the responder owed and
    /// the message it was receiving are forgotten, it leaves the transmit
    /// schedule and is dead: no flush, no completion, no event, no NAK.
    fn kill(&mut self) {
        for kind in TimerKind::ALL {
            self.cancel_timer(kind);
        }
        let qp = &mut *self.qp;
        qp.resp.queue.clear();
        qp.resp.msg = None;
        qp.state = uroce_device::types::QpState::Err;
        qp.injected.killed = true;
        if qp.scheduled {
            qp.scheduled = false;
            let index = self.index;
            self.dev.sched.retain(|&i| i != index);
        }
        self.dev.counters.killed_qps += 1;
    }

    /// The stall of this QP's responder ended: what it owed may leave.
    pub(crate) fn stall_ended(&mut self) {
        self.qp.injected.stalled_until = None;
        if !self.qp.injected.killed {
            self.schedule();
        }
    }
}
