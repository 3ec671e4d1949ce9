//! Events: completion channels ([`CompChannel`]) and asynchronous events
//! ([`Context::next_event`]).
//!
//! The HCA queues events; the context sorts them as they come: completion
//! events of CQs that have a channel go to that channel (whose eventfd
//! becomes readable), everything else waits for [`Context::next_event`].

use crate::context::Context;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use uroce_device::link::DeviceLink;
use uroce_device::mem::DriverMemory;
use uroce_device::Event;

/// Where the context sorts the HCA's events.
pub(crate) struct EventState {
    device: Arc<dyn DeviceLink>,
    /// The channel of each CQ that has one.
    channels: Mutex<BTreeMap<u32, Weak<ChannelInner>>>,
    /// Events for [`Context::next_event`].
    other: Mutex<VecDeque<Event>>,
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
            other: Mutex::new(VecDeque::new()),
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

    /// Sorts the HCA's pending events.
    fn dispatch(&self) {
        while let Some(event) = self.device.poll_event() {
            let channel = match event {
                Event::Completion { cq } => locked(&self.channels).get(&cq).and_then(Weak::upgrade),
                Event::Async { .. } => None,
            };
            match (channel, event) {
                (Some(channel), Event::Completion { cq }) => channel.signal(cq),
                _ => locked(&self.other).push_back(event),
            }
        }
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
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|_| Error::NoMemory("eventfd"))?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner { fd, ready: Mutex::new(VecDeque::new()) }),
            ctx: self.clone(),
        })
    }

    /// `ibv_get_async_event`: the next asynchronous event (and completion
    /// events of CQs without a channel).
    pub fn next_event(&self) -> Option<Event> {
        self.events.dispatch();
        locked(&self.events.other).pop_front()
    }
}

struct ChannelInner {
    fd: rustix::fd::OwnedFd,
    ready: Mutex<VecDeque<u32>>,
}

impl ChannelInner {
    fn signal(&self, cq: u32) {
        locked(&self.ready).push_back(cq);
        // An eventfd counter: a write cannot block or fail short of a
        // counter overflow, which 2^64 - 2 pending events cannot reach.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
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
            // Drain the counter so the descriptor stops being readable; only
            // when it is readable, as a program (libibverbs) may have made
            // it blocking. (Readers take `ready` first, so none races this.)
            let mut pfd =
                [rustix::event::PollFd::new(&self.inner.fd, rustix::event::PollFlags::IN)];
            if matches!(rustix::event::poll(&mut pfd, Some(&NO_WAIT)), Ok(n) if n > 0) {
                let mut counter = [0u8; 8];
                let _ = rustix::io::read(&self.inner.fd, &mut counter);
            }
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
