//! The one way drivers move a world in time: [`World::take_posted`] and
//! [`World::advance`] (or [`advance`] on a bare fabric). The harness's
//! executor (`Sim`) and the swarm (`uroce sim`) both step the fabric with
//! them; what differs between the two is only the driver's choice of
//! `until` and [`Stop`]: the harness goes one event at a time, never past
//! its first sleep's end, and polls its tasks in between; the swarm runs
//! random slices of virtual time whole.

use super::World;
use uroce_hca::{Endpoint, Instant};
use uroce_sim::Fabric;

/// Where [`advance`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After the first event due by `until` (everything the fabric does at
    /// that instant: deliveries, HCA timers, a port's deadline), or at
    /// `until` if none is due by then. The harness's pace: its tasks run
    /// between two events.
    FirstEvent,
    /// At `until`: every event due by then, in time order.
    AtTime,
}

/// Lets the fabric take what the endpoints queued (the doorbells the
/// application rang), then runs its events in time order up to `until`,
/// stopping after the first one with [`Stop::FirstEvent`]. When no event
/// (or no further one, with [`Stop::AtTime`]) is due by `until`, the clock
/// moves to `until`; [`Instant::FAR_FUTURE`] is no bound: the clock then
/// stays at the last event. Returns the virtual time reached.
///
/// With [`Stop::AtTime`] this is [`Fabric::run_until`] exactly (give a
/// finite `until`); with [`Stop::FirstEvent`], [`Fabric::step`] bounded by
/// `until`, the fabric taking what the event made the endpoints send.
pub fn advance<E: Endpoint>(fabric: &mut Fabric<E>, until: Instant, stop: Stop) -> Instant {
    match stop {
        Stop::AtTime => fabric.run_until(until),
        Stop::FirstEvent => {
            // `done` is asked after each drain: the second time, one event
            // has run.
            let mut asked = 0u32;
            let ran = fabric.run_until_condition(until, |_| {
                asked += 1;
                asked > 1
            });
            if !ran && until != Instant::FAR_FUTURE {
                fabric.run_until(until);
            }
        }
    }
    fabric.now()
}

impl<E: Endpoint> World<E> {
    /// Lets the fabric take what the endpoints queued, without running
    /// any event: the application sees at once what sending completed
    /// before time moves.
    pub fn take_posted(&mut self) {
        let now = self.fabric.now();
        self.fabric.run_until_condition(now, |_| true);
    }

    /// [`advance`] on the world's fabric.
    pub fn advance(&mut self, until: Instant, stop: Stop) -> Instant {
        advance(&mut self.fabric, until, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::WorldBuilder;
    use uroce_hca::SharedHca;
    use uroce_sim::{FabricConfig, Scenario};

    const MS: u64 = 1_000_000;

    /// Two nodes whose server stalls at 2 ms and again at 3 ms: two port
    /// deadlines, the fabric's only events.
    fn world() -> World<SharedHca> {
        let text = r#"
            [scenario]
            name = "two-stalls"
            summary = "the server stalls at 2 ms and at 3 ms"
            [[rule]]
            role = "server"
            after_ms = 2
            action = "stall"
            for_ms = 1
            target = "all"
            [[rule]]
            role = "server"
            after_ms = 3
            action = "stall"
            for_ms = 1
            target = "all"
        "#;
        let scenario = Scenario::parse(text, "inline").unwrap();
        WorldBuilder::new(2, FabricConfig::new(1)).scenario(scenario).role(1, "server").build()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    #[test]
    fn first_event_stops_at_the_first_deadline_and_never_past_until() {
        let mut w = world();
        // Nothing due by 1 ms: the clock moves there.
        assert_eq!(w.advance(at(1), Stop::FirstEvent), at(1));
        assert_eq!(w.fabric.counters().device_faults, 0);
        // The first stall at 2 ms, not the second.
        assert_eq!(w.advance(at(10), Stop::FirstEvent), at(2));
        assert_eq!(w.fabric.counters().device_faults, 1);
        // No bound: the next event, wherever it is.
        assert_eq!(w.advance(Instant::FAR_FUTURE, Stop::FirstEvent), at(3));
        assert_eq!(w.fabric.counters().device_faults, 2);
        // Nothing left: with no bound the clock stays.
        assert_eq!(w.advance(Instant::FAR_FUTURE, Stop::FirstEvent), at(3));
        assert_eq!(w.fabric.next_event(), None);
    }

    #[test]
    fn at_time_runs_every_event_by_until_as_run_until() {
        let mut w = world();
        assert_eq!(w.advance(at(10), Stop::AtTime), at(10));
        assert_eq!(w.fabric.counters().device_faults, 2);
        let mut other = world();
        other.fabric.run_until(at(10));
        assert_eq!(w.fabric.trace_hash(), other.fabric.trace_hash());
        assert_eq!(w.fabric.firings(), other.fabric.firings());
    }

    #[test]
    fn take_posted_moves_no_time() {
        let mut w = world();
        w.take_posted();
        assert_eq!((w.now(), w.fabric.counters().device_faults), (at(0), 0));
        assert_eq!(w.fabric.next_event(), Some(at(2)));
    }
}
