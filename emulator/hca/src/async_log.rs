//! The asynchronous events the HCA raised, recorded as they are raised
//! (whether or not the application ever takes them from
//! [`crate::Hca::poll_event`]): how many of each type, and the first
//! [`KEPT_EVENTS`] with their time and element. A runtime prints them when a
//! run ends (the fault scenarios' report, design note fault-scenarios.md
//! §10e), beside the [`crate::tally::CompletionTally`].

use crate::time::Instant;
use uroce_device::types::EventType;

/// Events kept with their time and element (the counts go on).
pub const KEPT_EVENTS: usize = 64;

/// `ibv_event_type` values counted (0 to 31; the HCA raises fewer).
const TYPES: usize = 32;

/// One asynchronous event as raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaisedEvent {
    /// When (the latest time the HCA had been given).
    pub at: Instant,
    /// Which.
    pub event: EventType,
    /// The QPN, CQ, SRQ or port it concerns.
    pub element: u32,
}

/// The asynchronous events an HCA raised, from [`crate::Hca::async_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncLog {
    kept: Vec<RaisedEvent>,
    by_type: [u64; TYPES],
}

impl Default for AsyncLog {
    fn default() -> AsyncLog {
        AsyncLog { kept: Vec::new(), by_type: [0; TYPES] }
    }
}

impl AsyncLog {
    /// Records one event.
    pub(crate) fn record(&mut self, at: Instant, event: EventType, element: u32) {
        if let Some(n) = self.by_type.get_mut(usize::from(event.raw())) {
            *n += 1;
        }
        if self.kept.len() < KEPT_EVENTS {
            self.kept.push(RaisedEvent { at, event, element });
        }
    }

    /// The first [`KEPT_EVENTS`] events, in the order raised.
    pub fn kept(&self) -> &[RaisedEvent] {
        &self.kept
    }

    /// Events of type `event` raised.
    pub fn count_of(&self, event: EventType) -> u64 {
        self.by_type.get(usize::from(event.raw())).copied().unwrap_or(0)
    }

    /// Events raised, of every type.
    pub fn total(&self) -> u64 {
        self.by_type.iter().sum()
    }

    /// Each type raised, with its count, in `ibv_event_type` order.
    pub fn by_type(&self) -> impl Iterator<Item = (EventType, u64)> + '_ {
        self.by_type
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .filter_map(|(raw, &n)| Some((EventType::from_raw(u8::try_from(raw).ok()?)?, n)))
    }
}

impl crate::hca::Hca {
    /// The asynchronous events raised so far.
    pub fn async_log(&self) -> &AsyncLog {
        &self.dev.async_log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_event_and_keeps_the_first() {
        let mut log = AsyncLog::default();
        log.record(Instant::ZERO, EventType::PortActive, 1);
        log.record(Instant::from_nanos(5_000), EventType::QpAccessErr, 0x11);
        for _ in 0..KEPT_EVENTS {
            log.record(Instant::from_nanos(9_000), EventType::CqErr, 3);
        }
        assert_eq!(log.total(), 2 + KEPT_EVENTS as u64);
        assert_eq!(log.count_of(EventType::CqErr), KEPT_EVENTS as u64);
        assert_eq!(log.count_of(EventType::QpFatal), 0);
        assert_eq!(log.kept().len(), KEPT_EVENTS);
        assert_eq!(
            log.kept()[1],
            RaisedEvent {
                at: Instant::from_nanos(5_000),
                event: EventType::QpAccessErr,
                element: 0x11
            }
        );
        let types: Vec<_> = log.by_type().collect();
        assert_eq!(
            types,
            vec![
                (EventType::CqErr, KEPT_EVENTS as u64),
                (EventType::QpAccessErr, 1),
                (EventType::PortActive, 1)
            ]
        );
    }
}
