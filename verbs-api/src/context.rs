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
use crate::ring_pool::RingPool;
use std::sync::{Arc, Mutex};
use uroce_device::command::{Command, DeviceAttr, Gid, PortAttr, Reply};
use uroce_device::link::DeviceLink;
use uroce_device::mem::DriverMemory;
use uroce_device::ring::RingDesc;
use uroce_device::Doorbell;

/// A device context (`ibv_context`): the application's handle on an HCA.
#[derive(Clone)]
pub struct Context {
    device: Arc<dyn DeviceLink>,
    pub(crate) events: Arc<EventState>,
    /// The device's limits, read once at open (they never change): queue
    /// sizes are checked against them before any ring memory is taken.
    pub(crate) limits: Arc<DeviceAttr>,
    /// Ring memory: small rings share pages.
    rings: Arc<Mutex<RingPool>>,
}

impl Context {
    /// Opens a device through its link (an in-process device's
    /// `SharedHca`, a device in another process...). One context per
    /// device is expected: it takes every event the device raises.
    pub fn open<D: DeviceLink + Clone + 'static>(device: &D) -> Context {
        Context::open_link(Arc::new(device.clone()))
    }

    /// [`Context::open`] on a shared link.
    pub fn open_link(device: Arc<dyn DeviceLink>) -> Context {
        let events = EventState::attach(&device);
        let limits = match device.command(Command::QueryDevice) {
            Ok(Reply::Device(attr)) => Arc::new(attr),
            other => unreachable!("QueryDevice answers Device, not {other:?}"),
        };
        Context { device, events, limits, rings: Arc::default() }
    }

    /// Whether `other` is a context of the same device (objects of one
    /// may be used with the other).
    pub(crate) fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.events, &other.events)
    }

    /// Sends a command to the device (the control path).
    pub(crate) fn command(&self, command: Command) -> Result<Reply> {
        Ok(self.device.command(command)?)
    }

    /// Kicks the device: a queue has new work (its producer index is
    /// published).
    pub(crate) fn doorbell(&self, doorbell: Doorbell) {
        self.device.kick(doorbell);
    }

    /// Refuses work on a device that is gone (its runtime stopped, its
    /// process ended): it would never move.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.device.closed() {
            return Err(Error::Invalid("the device was closed (its runtime has stopped)"));
        }
        Ok(())
    }

    /// Lets the device move packets in this thread (an in-process device
    /// on the real network; nothing otherwise).
    pub(crate) fn progress(&self) {
        self.device.progress();
    }

    /// Tells the device that receives were posted.
    pub(crate) fn posted_receive(&self) {
        self.device.posted_receive();
    }

    /// Tells the device that sends were posted without a doorbell.
    pub(crate) fn posted_send_unkicked(&self) {
        self.device.posted_send_unkicked();
    }

    /// Tells the device that the application is about to sleep until a
    /// completion event.
    pub(crate) fn app_sleeping(&self) {
        self.device.app_sleeping();
    }

    /// The device's host memory (used by `ring.rs` and `mr.rs` only).
    pub(crate) fn host(&self) -> &Arc<dyn DriverMemory> {
        &self.events.host
    }

    /// Allocates a ring of `shape` in host memory.
    pub(crate) fn alloc_ring(&self, shape: RingDesc) -> Result<RingDesc> {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let base = rings
            .allocate(self.host().as_ref(), shape.bytes())
            .map_err(|_| Error::NoMemory("ring memory"))?;
        Ok(RingDesc { base, ..shape })
    }

    /// Frees a ring the HCA no longer uses (its queue was destroyed, or its
    /// creation refused).
    pub(crate) fn free_ring(&self, desc: RingDesc) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings.release(self.host().as_ref(), desc.base);
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
