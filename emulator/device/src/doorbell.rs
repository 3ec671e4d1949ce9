//! Doorbells (the driver tells the device about new work) and events (the
//! device tells the driver what happened on its own).

use crate::types::{EventType, Qpn};

/// A doorbell: the application tells the HCA that a queue has new work.
/// It only marks work runnable; the work happens in `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Doorbell {
    /// New send WQEs on a QP's send queue.
    SendQueue(Qpn),
    /// New receive WQEs on a QP's receive queue.
    RecvQueue(Qpn),
    /// New receive WQEs on an SRQ.
    Srq(u32),
    /// Arm a CQ for one completion event.
    ArmCq {
        /// The CQ.
        cq: u32,
        /// Only solicited completions (and errors) raise the event.
        solicited_only: bool,
    },
}

/// What the HCA tells the application asynchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Event {
    /// An armed CQ got a completion (the completion channel).
    Completion {
        /// The CQ.
        cq: u32,
    },
    /// An affiliated or unaffiliated asynchronous event.
    Async {
        /// Which.
        event: EventType,
        /// The QPN, CQ, SRQ or port it concerns.
        element: u32,
    },
}
