//! Events: completion channels ([`CompChannel`]) and asynchronous events
//! ([`Context::next_event`]).
//!
//! The HCA queues events; the context sorts them as they come: completion
//! events of CQs that have a channel go to that channel (whose eventfd
//! becomes readable), everything else waits for [`Context::next_event`]
//! (and [`Context::async_fd`] is readable while an asynchronous event
//! does). Events are sorted whenever the device says it has some, from
//! whatever thread it says so (the runtime's own, while the application
//! sleeps in `poll`).
//!
//! A CQ awaited with [`Cq::next`](crate::Cq::next) leaves its waker here:
//! its completion event wakes it, from the same place (the runtime's
//! thread on the real network, the fabric's step in the simulator).

use crate::context::Context;
use crate::error::{Error, Result};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::Waker;
use uroce_device::link::DeviceLink;
use uroce_device::mem::DriverMemory;
use uroce_device::Event;

/// Where the context sorts the HCA's events.
pub(crate) struct EventState {
    device: Arc<dyn DeviceLink>,
    /// The channel of each CQ that has one.
    channels: Mutex<BTreeMap<u32, Weak<ChannelInner>>>,
    /// The CQs awaited asynchronously ([`Cq::poll_completion`]), each with
    /// the waker of the task waiting for it, if one waits. A completion
    /// event of an awaited CQ wakes that task, and is not queued for
    /// [`Context::next_event`] (its channel, if it has one, still gets it).
    ///
    /// [`Cq::poll_completion`]: crate::Cq::poll_completion
    wakers: Mutex<BTreeMap<u32, Option<Waker>>>,
    /// Events for [`Context::next_event`].
    other: Mutex<Pending>,
    /// [`Context::async_fd`]: readable while `other` holds an asynchronous
    /// event. Made (and signalled, and drained) under `other`'s lock.
    async_fd: OnceLock<OwnedFd>,
    /// The device's host memory (fixed for its life): reached without
    /// locking the HCA on every poll and post.
    pub(crate) host: Arc<dyn DriverMemory>,
}

impl EventState {
    /// The event state of a device just opened: the device calls it back
    /// when it has events, through a weak link (no reference cycle).
    pub(crate) fn attach(device: &Arc<dyn DeviceLink>) -> Arc<EventState> {
        let events = Arc::new(EventState {
            device: device.clone(),
            channels: Mutex::new(BTreeMap::new()),
            wakers: Mutex::new(BTreeMap::new()),
            other: Mutex::new(Pending::default()),
            async_fd: OnceLock::new(),
            host: device.memory(),
        });
        let weak = Arc::downgrade(&events);
        device.on_events(Box::new(move || match weak.upgrade() {
            Some(events) => {
                events.dispatch();
                true
            }
            // The context is gone: stop being called.
            None => false,
        }));
        events
    }

    /// Sends the completion events of CQ `cq` to `channel` from now on, or
    /// to [`Context::next_event`] (`None`).
    pub(crate) fn set_channel(&self, cq: u32, channel: Option<&CompChannel>) {
        let mut channels = locked(&self.channels);
        match channel {
            Some(channel) => channels.insert(cq, Arc::downgrade(&channel.inner)),
            None => channels.remove(&cq),
        };
    }

    /// Wakes `waker` at CQ `cq`'s next completion event (replacing the
    /// waker of an earlier wait: one task awaits a CQ at a time). The CQ
    /// counts as awaited from now until it is destroyed.
    pub(crate) fn set_waker(&self, cq: u32, waker: &Waker) {
        let mut wakers = locked(&self.wakers);
        let slot = wakers.entry(cq).or_default();
        match slot {
            Some(old) if old.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
    }

    /// CQ `cq` is gone (or its index is new): nothing awaits it.
    pub(crate) fn forget_waker(&self, cq: u32) {
        locked(&self.wakers).remove(&cq);
    }

    /// Sorts the HCA's pending events.
    pub(crate) fn dispatch(&self) {
        while let Some(event) = self.device.poll_event() {
            let (channel, awaited) = match event {
                Event::Completion { cq } => {
                    let channel = locked(&self.channels).get(&cq).and_then(Weak::upgrade);
                    let awaited = locked(&self.wakers).get_mut(&cq).map(Option::take);
                    (channel, awaited)
                }
                Event::Async { .. } => (None, None),
            };
            let is_awaited = awaited.is_some();
            // Woken with no lock held: an executor may poll at once.
            if let Some(Some(waker)) = awaited {
                waker.wake();
            }
            match (channel, event) {
                (Some(channel), Event::Completion { cq }) => channel.signal(cq),
                // The awaiting task had this event: it is not queued.
                _ if is_awaited => {}
                _ => self.queue(event),
            }
        }
    }

    /// Queues an event for [`Context::next_event`]; the first asynchronous
    /// one waiting makes the descriptor readable.
    fn queue(&self, event: Event) {
        let mut other = locked(&self.other);
        other.events.push_back(event);
        if matches!(event, Event::Async { .. }) {
            other.asynchronous += 1;
            if other.asynchronous == 1 {
                if let Some(fd) = self.async_fd.get() {
                    signal(fd);
                }
            }
        }
    }

    /// The next event for [`Context::next_event`]; taking the last
    /// asynchronous one waiting drains the descriptor.
    fn take(&self) -> Option<Event> {
        let mut other = locked(&self.other);
        let event = other.events.pop_front()?;
        if matches!(event, Event::Async { .. }) {
            other.asynchronous -= 1;
            if other.asynchronous == 0 {
                if let Some(fd) = self.async_fd.get() {
                    drain(fd);
                }
            }
        }
        Some(event)
    }

    /// The asynchronous events' descriptor, made at the first call.
    fn async_fd(&self) -> Result<BorrowedFd<'_>> {
        if let Some(fd) = self.async_fd.get() {
            return Ok(fd.as_fd());
        }
        let other = locked(&self.other);
        if self.async_fd.get().is_none() {
            let fd = new_eventfd()?;
            if other.asynchronous > 0 {
                signal(&fd);
            }
            let _ = self.async_fd.set(fd);
        }
        drop(other);
        Ok(self.async_fd.get().expect("set above, under the lock").as_fd())
    }
}

/// The events waiting for [`Context::next_event`].
#[derive(Default)]
struct Pending {
    events: VecDeque<Event>,
    /// How many of them are asynchronous events (the others are completion
    /// events of CQs without a channel).
    asynchronous: usize,
}

/// A non-blocking eventfd (the program may make it blocking: the driver
/// reads it only when it is readable).
fn new_eventfd() -> Result<OwnedFd> {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
    )
    .map_err(|_| Error::NoMemory("eventfd"))
}

/// Makes an eventfd readable. An eventfd counter: a write cannot block or
/// fail short of a counter overflow, which 2^64 - 2 pending events cannot
/// reach.
fn signal(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Makes an eventfd unreadable: its counter is read, only when it is
/// readable, as a program (libibverbs) may have made it blocking. Callers
/// serialise, so none races another's read.
fn drain(fd: &OwnedFd) {
    let mut pfd = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    if matches!(rustix::event::poll(&mut pfd, Some(&NO_WAIT)), Ok(n) if n > 0) {
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(fd, &mut counter);
    }
}

/// Locks a driver-side mutex; a panic elsewhere cannot leave these
/// queues inconsistent, so a poisoned lock is still usable.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    /// `ibv_create_comp_channel`: a file descriptor that becomes readable
    /// when a CQ attached to it has a completion event (after
    /// [`Cq::req_notify`](crate::Cq::req_notify)). Wait on it with epoll,
    /// poll or tokio's `AsyncFd`, then call [`CompChannel::get_cq_event`].
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let fd = new_eventfd()?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner { fd, ready: Mutex::new(VecDeque::new()) }),
            ctx: self.clone(),
        })
    }

    /// `ibv_get_async_event`: the next asynchronous event (and completion
    /// events of CQs without a channel, unless awaited with
    /// [`Cq::next`](crate::Cq::next): those wake the awaiting task instead).
    pub fn next_event(&self) -> Option<Event> {
        self.events.dispatch();
        self.events.take()
    }

    /// `ibv_context.async_fd`: a descriptor (an eventfd) readable while an
    /// asynchronous event waits for [`Context::next_event`], and not
    /// otherwise: it becomes readable when the device raises one (from the
    /// runtime's thread too, while the application sleeps in `poll`), and
    /// stops being readable when [`Context::next_event`] takes the last
    /// one. Completion events of CQs without a channel do not count. Wait
    /// on it with epoll, poll or tokio's `AsyncFd`; it is non-blocking
    /// (the driver never blocks on it, whatever a program makes it).
    pub fn async_fd(&self) -> Result<BorrowedFd<'_>> {
        self.events.dispatch();
        self.events.async_fd()
    }
}

struct ChannelInner {
    fd: rustix::fd::OwnedFd,
    ready: Mutex<VecDeque<u32>>,
}

impl ChannelInner {
    fn signal(&self, cq: u32) {
        // Under the lock, so that a reader who takes the last event before
        // this write cannot leave the descriptor readable with none ready.
        let mut ready = locked(&self.ready);
        ready.push_back(cq);
        signal(&self.fd);
    }
}

/// A poll that does not wait.
const NO_WAIT: rustix::event::Timespec = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };

/// A completion channel (`ibv_comp_channel`).
pub struct CompChannel {
    inner: Arc<ChannelInner>,
    ctx: Context,
}

impl CompChannel {
    /// `ibv_get_cq_event` without blocking: the index of a CQ that had a
    /// completion event, or `None`. Re-arm the CQ with
    /// [`Cq::req_notify`](crate::Cq::req_notify) before polling it, as with
    /// libibverbs.
    pub fn get_cq_event(&self) -> Option<u32> {
        self.ctx.events.dispatch();
        let mut ready = locked(&self.inner.ready);
        let cq = ready.pop_front();
        if ready.is_empty() {
            // The descriptor stops being readable. (Readers take `ready`
            // first, so none races this.)
            drain(&self.inner.fd);
        }
        cq
    }
}

impl rustix::fd::AsFd for CompChannel {
    fn as_fd(&self) -> rustix::fd::BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl std::os::fd::AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use rustix::fd::AsFd;
        self.inner.fd.as_fd().as_raw_fd()
    }
}
