//! The driver's link to a device: the one seam between a driver
//! (`uroce-verbs`, the C library) and an HCA, wherever the HCA runs.
//!
//! ```text
//!   driver ── command() ─────────▶ control path (create, modify, destroy, query)
//!          ── kick(doorbell) ────▶ "this queue has new work" (after publishing its producer index)
//!          ◀─ poll_event() ─────── completion events of armed CQs, asynchronous events
//!          ── memory() ──────────▶ where rings and buffers live, shared with the device
//! ```
//!
//! Rings and doorbell records are in [`DriverMemory`] both sides reach;
//! the work itself never crosses this trait. A device in the driver's
//! process implements it with a function call per command; a device in
//! another process with a socket for commands, kicks and events and a
//! shared mapping for the memory. The driver cannot tell.

use crate::command::{CmdError, Command, Reply};
use crate::doorbell::{Doorbell, Event};
use crate::mem::DriverMemory;
use std::sync::Arc;

/// A function the device calls when events are waiting; it returns
/// whether it wants to be called again.
pub type EventNotifier = Box<dyn Fn() -> bool + Send + Sync>;

/// A driver's link to one device.
pub trait DeviceLink: Send + Sync {
    /// Runs a command of the control path and returns the device's reply.
    fn command(&self, command: Command) -> Result<Reply, CmdError>;

    /// Tells the device a queue has new work: the driver has written its
    /// entries and published the producer index (the doorbell record)
    /// before calling this. A driver may skip the kick of a send or receive
    /// queue whose device-scheduled flag is set
    /// ([`crate::ring::SCHEDULED_OFFSET`]).
    fn kick(&self, doorbell: Doorbell);

    /// The next event the device raised, if any.
    fn poll_event(&self) -> Option<Event>;

    /// Registers a function called (from any thread, with nothing of the
    /// device locked) whenever events are waiting.
    fn on_events(&self, notify: EventNotifier);

    /// The memory rings and buffers are allocated from.
    fn memory(&self) -> Arc<dyn DriverMemory>;

    /// Lets the device make progress in the caller's thread (a poll of a
    /// CQ calls it): a device that runs on its own does nothing here.
    fn progress(&self) {}

    /// A receive was posted (it makes nothing to send, but says the
    /// application is awake).
    fn posted_receive(&self) {}

    /// A send was posted without a kick (the queue's device-scheduled flag
    /// was set): the device reads it in its next step. A device that holds
    /// packets for the application's next request (the ACKs a receive
    /// left) stops holding them.
    fn posted_send_unkicked(&self) {}

    /// The application is about to sleep on a completion channel: the
    /// device must keep progressing by itself.
    fn app_sleeping(&self) {}

    /// Whether the device is gone (its runtime stopped, its process
    /// exited): nothing posted will ever complete.
    fn closed(&self) -> bool {
        false
    }
}
