//! Time for node tasks: [`Env`], and its virtual-time implementation
//! [`SimEnv`] (the real one is [`crate::real::RealEnv`]).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;
use uroce_hca::Instant;

/// What a node task may ask of its environment besides verbs: the time
/// and a timer. Write the program against `impl Env` and it runs in the
/// simulator ([`SimEnv`], virtual time) and on the real runtime
/// ([`crate::real::RealEnv`]).
pub trait Env {
    /// The time since the run (or the environment) started.
    fn now(&self) -> Duration;
    /// A future ready `d` from now.
    fn sleep(&self, d: Duration) -> impl Future<Output = ()>;
}

/// The simulation's clock and application timers, shared by the [`crate::Sim`]
/// and every [`SimEnv`].
#[derive(Default)]
pub(crate) struct Clock {
    pub(crate) now: Cell<Instant>,
    /// Pending sleeps: (due, ticket) → the sleeping task's waker.
    timers: RefCell<BTreeMap<(Instant, u64), Waker>>,
    tickets: Cell<u64>,
}

impl Clock {
    /// The earliest pending timer.
    pub(crate) fn first_timer(&self) -> Option<Instant> {
        self.timers.borrow().keys().next().map(|&(at, _)| at)
    }

    /// Wakes (and forgets) every timer due at or before now, in due order
    /// (ties: the order the sleeps were first polled).
    pub(crate) fn fire_due(&self) {
        let now = self.now.get();
        loop {
            let due = {
                let mut timers = self.timers.borrow_mut();
                match timers.first_key_value() {
                    Some((&(at, _), _)) if at <= now => timers.pop_first(),
                    _ => None,
                }
            };
            match due {
                Some((_, waker)) => waker.wake(),
                None => return,
            }
        }
    }
}

/// A node task's environment in the simulator: virtual time, which only
/// moves when every task waits (`sleep(1 s)` costs no real second).
#[derive(Clone)]
pub struct SimEnv {
    pub(crate) clock: Rc<Clock>,
}

impl Env for SimEnv {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.clock.now.get().as_nanos())
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Sleep { clock: self.clock.clone(), until: self.clock.now.get().plus_nanos(ns), key: None }
    }
}

/// [`SimEnv::sleep`]'s future.
struct Sleep {
    clock: Rc<Clock>,
    until: Instant,
    /// Its entry in the clock's timers, once polled.
    key: Option<(Instant, u64)>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.clock.now.get() >= self.until {
            if let Some(key) = self.key.take() {
                self.clock.timers.borrow_mut().remove(&key);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                let ticket = self.clock.tickets.get();
                self.clock.tickets.set(ticket + 1);
                let key = (self.until, ticket);
                self.key = Some(key);
                key
            }
        };
        self.clock.timers.borrow_mut().insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.clock.timers.borrow_mut().remove(&key);
        }
    }
}
