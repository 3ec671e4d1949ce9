//! The device context ([`Context`]): the driver's one link to the HCA.
//!
//! Everything the driver asks of the device goes through the few private
//! methods here: a command (the control path), a doorbell, and the
//! runtime's hooks (progress, flush, wake-ups). The verbs that create
//! objects are `impl Context` blocks beside their object: [`Context::alloc_pd`]
//! in `pd.rs`, [`Context::create_cq`] in `cq.rs`,
//! [`Context::create_comp_channel`] and [`Context::next_event`] in
//! `events.rs`.

use crate::error::{Error, Result};
use crate::events::EventState;
use crate::ring;
use std::sync::Arc;
use uroce_device::command::{Command, DeviceAttr, Gid, PortAttr, Reply};
use uroce_device::mem::HostMemory;
use uroce_device::ring::RingDesc;
use uroce_device::Doorbell;
use uroce_hca::hca::SharedHca;
use uroce_hca::Instant;

/// A device context (`ibv_context`): the application's handle on an HCA.
#[derive(Clone)]
pub struct Context {
    hca: SharedHca,
    pub(crate) events: Arc<EventState>,
    /// The device's limits, read once at open (they never change): queue
    /// sizes are checked against them before any ring memory is taken.
    pub(crate) limits: Arc<DeviceAttr>,
}

impl Context {
    /// Opens a device. One context per device is expected: it takes every
    /// event the device raises.
    pub fn open(hca: &SharedHca) -> Context {
        let events = EventState::attach(hca);
        let now = hca.now();
        let limits = match hca.lock().command(now, Command::QueryDevice) {
            Ok(Reply::Device(attr)) => Arc::new(attr),
            other => unreachable!("QueryDevice answers Device, not {other:?}"),
        };
        Context { hca: hca.clone(), events, limits }
    }

    fn now(&self) -> Instant {
        self.hca.now()
    }

    /// Sends a command to the HCA (the control path).
    pub(crate) fn command(&self, command: Command) -> Result<Reply> {
        let now = self.now();
        let reply = self.hca.lock().command(now, command);
        // A command can raise events (a QP moved to ERR flushes its WRs)
        // and make packets ready (a QP back in RTS): hand both on now.
        self.hca.notify_if_events();
        self.flush();
        Ok(reply?)
    }

    /// Rings a doorbell.
    pub(crate) fn doorbell(&self, doorbell: Doorbell) {
        let now = self.now();
        self.hca.lock().doorbell(now, doorbell);
        self.hca.notify_if_events();
    }

    /// Refuses work on a device whose runtime has stopped (its
    /// `UdpDevice` was dropped): it would never move.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.hca.driver_gone() {
            return Err(Error::Invalid("the device was closed (its runtime has stopped)"));
        }
        Ok(())
    }

    /// Lets the device's runtime move packets in this thread (UDP runtime;
    /// nothing on the simulated fabric).
    pub(crate) fn progress(&self) {
        self.hca.progress();
    }

    /// Lets the device's runtime send what a doorbell made ready.
    pub(crate) fn flush(&self) {
        self.hca.flush();
    }

    /// Tells the device's runtime that receives were posted.
    pub(crate) fn posted_receive(&self) {
        self.hca.posted_receive();
    }

    /// Tells the device's runtime that the application is about to sleep
    /// until a completion event.
    pub(crate) fn app_sleeping(&self) {
        if let Some(driver) = self.hca.driver() {
            driver.app_sleeping();
        }
    }

    /// The device's host memory (used by `ring.rs` and `mr.rs` only).
    pub(crate) fn host(&self) -> &Arc<dyn HostMemory> {
        &self.events.host
    }

    /// Allocates a ring of `shape` in host memory.
    pub(crate) fn alloc_ring(&self, shape: RingDesc) -> Result<RingDesc> {
        ring::alloc(self.host().as_ref(), shape)
    }

    /// Frees a ring the HCA no longer uses.
    pub(crate) fn free_ring(&self, desc: RingDesc) {
        ring::free(self.host().as_ref(), desc);
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        match self.command(Command::QueryDevice)? {
            Reply::Device(attr) => Ok(attr),
            _ => unreachable!("QueryDevice answers Device"),
        }
    }

    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> Result<PortAttr> {
        match self.command(Command::QueryPort)? {
            Reply::Port(attr) => Ok(attr),
            _ => unreachable!("QueryPort answers Port"),
        }
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, index: u8) -> Result<Gid> {
        match self.command(Command::QueryGid { index })? {
            Reply::Gid(gid) => Ok(gid),
            _ => unreachable!("QueryGid answers Gid"),
        }
    }
}
