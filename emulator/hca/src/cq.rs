//! Completion queue contexts (CQC): where completions are written, and
//! when the application is told.

use crate::ring::{ProducerRing, RingError};
use uroce_device::cqe::Cqe;
use uroce_device::mem::HostMemory;

/// How a CQ is armed for a completion event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Not armed: completions raise no event.
    Off,
    /// The next completion raises an event.
    Next,
    /// The next solicited receive completion (or any error) raises one.
    SolicitedOnly,
}

/// One completion queue's context.
#[derive(Debug)]
pub struct CqContext {
    /// The ring the HCA writes CQEs into.
    pub ring: ProducerRing,
    /// Armed for an event.
    pub arm: Arm,
    /// Set when the ring overflowed; the CQ is then in error.
    pub overrun: bool,
    /// QPs using this CQ (it cannot be destroyed while any does).
    pub users: u32,
}

/// What writing a CQE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    /// Written; `notify` says whether the armed CQ must raise an event.
    Written {
        /// Raise a completion event.
        notify: bool,
    },
    /// The ring was full (or its consumer index bogus): the CQE is lost and
    /// the CQ is in error.
    Overrun,
}

impl CqContext {
    /// A new, unarmed CQ.
    pub fn new(ring: ProducerRing) -> CqContext {
        CqContext { ring, arm: Arm::Off, overrun: false, users: 0 }
    }

    /// Writes a CQE. `solicited` marks a receive completion of a packet
    /// with the solicited-event bit; errors count as solicited.
    pub fn post(&mut self, host: &dyn HostMemory, cqe: &Cqe, solicited: bool) -> PostOutcome {
        if self.overrun {
            return PostOutcome::Overrun;
        }
        match self.ring.free(host) {
            Ok(free) if free > 0 => {}
            Ok(_) | Err(RingError::IndexJump { .. }) | Err(_) => {
                self.overrun = true;
                return PostOutcome::Overrun;
            }
        }
        if self.ring.push(host, &cqe.encode()).is_err() {
            self.overrun = true;
            return PostOutcome::Overrun;
        }
        let is_error = cqe.status != uroce_device::types::WcStatus::Success;
        let notify = match self.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::SolicitedOnly => solicited || is_error,
        };
        if notify {
            self.arm = Arm::Off;
        }
        PostOutcome::Written { notify }
    }
}
