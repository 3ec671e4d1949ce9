//! The in-process device: an HCA behind a mutex, shared between the
//! runtime that drives it (the simulated fabric, or the real runtime's
//! threads) and the application's driver, to which it is a
//! [`DeviceLink`]: commands and kicks are function calls, events are
//! handed over with the HCA unlocked, and the memory is the process's.

use crate::endpoint::{Endpoint, Transmit};
use crate::hca::Hca;
use crate::time::Instant;
use core::net::IpAddr;
use std::sync::Arc;
use uroce_device::command::{CmdError, Command, Reply};
use uroce_device::link::{DeviceLink, EventNotifier};
use uroce_device::mem::DriverMemory;
use uroce_device::{Doorbell, Event};

/// An HCA shared between the runtime that drives it and the application
/// (verbs-api): the simulated fabric owns one `SharedHca` per node while
/// the application keeps a clone; the UDP runtime shares it between the
/// application's threads and its background progress thread.
#[derive(Clone)]
pub struct SharedHca {
    hca: Arc<std::sync::Mutex<Hca>>,
    addresses: Vec<IpAddr>,
    /// The host memory, as drivers allocate from it.
    memory: Arc<dyn DriverMemory>,
    /// Called after a runtime step that left events waiting (the driver's
    /// event dispatch: completion channels, async events).
    notifiers: Notifiers,
    /// The runtime that moves packets and time, when one does so on the
    /// application's behalf (the UDP runtime); `None` on the simulated
    /// fabric, whose loop drives everything.
    driver: Arc<std::sync::OnceLock<std::sync::Weak<dyn Driver>>>,
    /// The driver's activity flags, when it has them (taken at
    /// [`SharedHca::set_driver`]): posts raise them without upgrading the
    /// weak link to the driver.
    activity: Arc<std::sync::OnceLock<Arc<AppActivity>>>,
}

/// What the application's posts tell a driver, as flags the driver reads
/// when it next looks: setting one is a load (and a store the first time),
/// where calling the driver means upgrading the HCA's weak link to it (two
/// atomic read-modify-writes) on every post.
#[derive(Debug, Default)]
pub struct AppActivity {
    called: std::sync::atomic::AtomicBool,
    posted_unkicked: std::sync::atomic::AtomicBool,
}

impl AppActivity {
    /// The application called a verb: it is awake. Stores only when the
    /// flag is down, so that back-to-back calls leave its line shared.
    #[inline]
    pub fn called(&self) {
        raise(&self.called);
    }

    /// A send was posted without a doorbell (its queue was scheduled): the
    /// driver's next step must read it, and hold nothing back for it.
    #[inline]
    pub fn posted_unkicked(&self) {
        self.called();
        raise(&self.posted_unkicked);
    }

    /// Whether the application called since the last look (lowers it).
    pub fn take_called(&self) -> bool {
        take(&self.called)
    }

    /// Whether a send was posted without a doorbell since the last look
    /// (lowers it).
    pub fn take_posted_unkicked(&self) -> bool {
        take(&self.posted_unkicked)
    }
}

fn raise(flag: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering::Relaxed;
    if !flag.load(Relaxed) {
        flag.store(true, Relaxed);
    }
}

/// Reads before it lowers: most looks find the flag down, and a swap is
/// an atomic read-modify-write.
fn take(flag: &std::sync::atomic::AtomicBool) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    flag.load(Relaxed) && flag.swap(false, Relaxed)
}

/// The functions a [`SharedHca`] calls when events are waiting.
type Notifiers = Arc<std::sync::Mutex<Vec<Arc<dyn Fn() -> bool + Send + Sync>>>>;

/// A runtime that the application's own verbs calls can drive: `poll_cq`,
/// `post_send` and `post_recv` call [`Driver::progress`] so that packets
/// move in the application's thread, with no hand-off to another thread.
pub trait Driver: Send + Sync {
    /// The runtime's current time.
    fn now(&self) -> Instant;
    /// Receives what has arrived, fires due timers and sends what is
    /// ready, without blocking. Called with the HCA unlocked.
    fn progress(&self);
    /// Sends what is ready (after a doorbell) and fires due timers, without
    /// looking for received packets: the cheap step `post_send` and
    /// `post_recv` take.
    fn flush(&self) {
        self.progress();
    }
    /// A send doorbell was rung at `now` (the driver's time, read for the
    /// doorbell): sends what is ready, as [`Driver::flush`], or holds it
    /// for the application's next call when doorbells come in a burst (the
    /// runtime's choice; it must still send it in bounded time).
    fn rang_send_doorbell(&self, now: Instant) {
        let _ = now;
        self.flush();
    }
    /// A receive was posted: it makes no packet to send, but tells the
    /// runtime the application is awake. (Not called for a driver with
    /// [`Driver::activity`]: its flags are raised instead.)
    fn posted_receive(&self) {}
    /// A send was posted without a doorbell (its queue was scheduled): the
    /// next step reads it, and holds nothing back for it. (As above.)
    fn posted_send_unkicked(&self) {}
    /// Flags the application's posts raise instead of calling the two
    /// functions above, read by the driver when it next looks.
    fn activity(&self) -> Option<Arc<AppActivity>> {
        None
    }
    /// The application is about to sleep on a completion channel (it armed
    /// a CQ): the runtime must keep the device progressing by itself.
    fn app_sleeping(&self) {}
}

impl SharedHca {
    /// Wraps an HCA whose host memory is `memory` (the same memory the HCA
    /// was given as its DMA view; drivers allocate from it).
    pub fn new(hca: Hca, memory: Arc<dyn DriverMemory>) -> SharedHca {
        let addresses = hca.addresses().to_vec();
        SharedHca {
            hca: Arc::new(std::sync::Mutex::new(hca)),
            addresses,
            memory,
            notifiers: Default::default(),
            driver: Default::default(),
            activity: Default::default(),
        }
    }

    /// Attaches the runtime that drives this HCA (once). The HCA keeps a
    /// weak link: the runtime owns the HCA, not the other way round.
    pub fn set_driver(
        &self,
        driver: std::sync::Weak<dyn Driver>,
    ) -> Result<(), std::sync::Weak<dyn Driver>> {
        let activity = driver.upgrade().and_then(|d| d.activity());
        self.driver.set(driver)?;
        if let Some(activity) = activity {
            let _ = self.activity.set(activity);
        }
        Ok(())
    }

    /// The attached driver, while it runs.
    pub fn driver(&self) -> Option<Arc<dyn Driver>> {
        self.driver.get().and_then(std::sync::Weak::upgrade)
    }

    /// Whether a driver was attached and has since stopped (its device was
    /// closed): nothing moves packets for this HCA any more.
    pub fn driver_gone(&self) -> bool {
        self.driver.get().is_some_and(|d| d.strong_count() == 0)
    }

    /// The time to hand the HCA: the driver's clock, or (on the simulated
    /// fabric) the latest time the HCA saw.
    pub fn now(&self) -> Instant {
        match self.driver() {
            Some(driver) => driver.now(),
            None => self.lock().now(),
        }
    }

    /// Lets the driver move packets and time (no-op without a driver).
    pub fn progress(&self) {
        if let Some(driver) = self.driver() {
            driver.progress();
        }
    }

    /// Tells the driver a receive was posted (no-op without a driver).
    pub fn posted_receive(&self) {
        if let Some(activity) = self.activity.get() {
            activity.called();
        } else if let Some(driver) = self.driver() {
            driver.posted_receive();
        }
    }

    /// Lets the driver send what is ready (no-op without a driver).
    pub fn flush(&self) {
        if let Some(driver) = self.driver() {
            driver.flush();
        }
    }

    /// Registers a function called (with the HCA unlocked, possibly from
    /// the runtime's thread) whenever a runtime step leaves events waiting.
    /// It returns whether it wants to be called again: a driver whose
    /// context is gone returns `false` and is dropped.
    pub fn on_events(&self, notify: Box<dyn Fn() -> bool + Send + Sync>) {
        self.notifiers.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::from(notify));
    }

    /// Calls the notifiers if events are waiting, or CM events arrived
    /// (`CmPollEvent` takes them).
    pub fn notify_if_events(&self) {
        let waiting = events_waiting(&mut self.lock());
        if waiting {
            self.notify();
        }
    }

    /// Calls the notifiers (with no lock held: a notifier may drive the
    /// device).
    fn notify(&self) {
        let notifiers = self.notifiers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let finished: Vec<_> = notifiers.into_iter().filter(|notify| !notify()).collect();
        if !finished.is_empty() {
            self.notifiers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|n| !finished.iter().any(|f| Arc::ptr_eq(f, n)));
        }
    }

    /// Locks the HCA. The engines never call back into the application,
    /// so a lock is never taken twice by one thread unless the caller
    /// holds a guard across another call (a programming error).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Hca> {
        // A panic while holding the lock leaves tables consistent enough
        // to inspect (each command either finishes or returns early).
        self.hca.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`SharedHca::lock`] without waiting: `None` while another thread
    /// holds the HCA.
    pub fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, Hca>> {
        match self.hca.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Same as [`SharedHca::lock`] (read access for dumps).
    pub fn borrow(&self) -> std::sync::MutexGuard<'_, Hca> {
        self.lock()
    }

    /// Same as [`SharedHca::lock`].
    pub fn borrow_mut(&self) -> std::sync::MutexGuard<'_, Hca> {
        self.lock()
    }
}

/// Whether events are waiting, or CM events arrived (`CmPollEvent` takes
/// them).
fn events_waiting(hca: &mut Hca) -> bool {
    let cm = hca.take_cm_notification();
    hca.has_events() || cm
}

impl Endpoint for SharedHca {
    fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }
    // The per-packet calls look for events under the lock they already
    // hold ([`SharedHca::notify_if_events`] would take it again).
    fn receive(&mut self, now: Instant, packet: &[u8]) {
        let waiting = {
            let mut hca = self.lock();
            hca.receive(now, packet);
            events_waiting(&mut hca)
        };
        if waiting {
            self.notify();
        }
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (transmit, waiting) = {
            let mut hca = self.lock();
            let transmit = hca.poll_transmit(now, buf);
            (transmit, events_waiting(&mut hca))
        };
        if waiting {
            self.notify();
        }
        transmit
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.lock().poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.lock().handle_timeout(now);
        self.notify_if_events();
    }
}

impl DeviceLink for SharedHca {
    fn command(&self, command: Command) -> Result<Reply, CmdError> {
        let now = self.now();
        let reply = self.lock().command(now, command);
        // A command can raise events (a QP moved to ERR flushes its WRs)
        // and make packets ready (a QP back in RTS): hand both on now.
        self.notify_if_events();
        self.flush();
        reply
    }

    fn kick(&self, doorbell: Doorbell) {
        // The driver taken once for the whole kick: each upgrade of its
        // weak reference is two atomic operations.
        let driver = self.driver();
        let now = match &driver {
            Some(driver) => driver.now(),
            None => self.lock().now(),
        };
        // One lock for the doorbell and the look at the events it left.
        let (ready, waiting) = {
            let mut hca = self.lock();
            hca.doorbell(now, doorbell);
            (hca.has_transmit_ready(), events_waiting(&mut hca))
        };
        if waiting {
            self.notify();
        }
        // A doorbell that left nothing to send (its QP waits for the
        // device's transmit budget) needs no send round.
        if matches!(doorbell, Doorbell::SendQueue(_)) && ready {
            if let Some(driver) = driver {
                driver.rang_send_doorbell(now);
            }
        }
    }

    fn poll_event(&self) -> Option<Event> {
        self.lock().poll_event()
    }

    fn on_events(&self, notify: EventNotifier) {
        SharedHca::on_events(self, notify);
    }

    fn memory(&self) -> Arc<dyn DriverMemory> {
        self.memory.clone()
    }

    fn progress(&self) {
        SharedHca::progress(self);
    }

    fn posted_receive(&self) {
        SharedHca::posted_receive(self);
    }

    fn posted_send_unkicked(&self) {
        if let Some(activity) = self.activity.get() {
            activity.posted_unkicked();
        } else if let Some(driver) = self.driver() {
            driver.posted_send_unkicked();
        }
    }

    fn app_sleeping(&self) {
        if let Some(driver) = self.driver() {
            driver.app_sleeping();
        }
    }

    fn closed(&self) -> bool {
        self.driver_gone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver with activity flags: posts raise them, and never call it.
    struct Flagged(Arc<AppActivity>);

    impl Driver for Flagged {
        fn now(&self) -> Instant {
            Instant::from_nanos(0)
        }
        fn progress(&self) {}
        fn posted_receive(&self) {
            panic!("called instead of raising the flag");
        }
        fn posted_send_unkicked(&self) {
            panic!("called instead of raising the flag");
        }
        fn activity(&self) -> Option<Arc<AppActivity>> {
            Some(self.0.clone())
        }
    }

    #[test]
    fn posts_raise_the_drivers_flags_which_a_look_lowers() {
        let memory = Arc::new(uroce_device::mem::SimMemory::new(1 << 20));
        let ip = IpAddr::V4(core::net::Ipv4Addr::new(10, 0, 0, 1));
        let gids = vec![uroce_device::command::Gid::from_ip(ip)];
        let hca = Hca::new(crate::config::HcaConfig::default(), gids, memory.clone()).unwrap();
        let shared = SharedHca::new(hca, memory);
        let activity = Arc::new(AppActivity::default());
        let driver: Arc<dyn Driver> = Arc::new(Flagged(activity.clone()));
        assert!(shared.set_driver(Arc::downgrade(&driver)).is_ok());
        assert!(!activity.take_called() && !activity.take_posted_unkicked());
        DeviceLink::posted_receive(&shared);
        assert!(activity.take_called(), "a receive post says the application is awake");
        assert!(!activity.take_called(), "lowered by the look");
        assert!(!activity.take_posted_unkicked());
        DeviceLink::posted_send_unkicked(&shared);
        assert!(activity.take_posted_unkicked() && activity.take_called());
        assert!(!activity.take_posted_unkicked());
    }
}
