//! Time as the HCA sees it: a count of nanoseconds handed in by whoever
//! drives it. The simulated fabric passes virtual time, real runtimes pass
//! a monotonic clock; the HCA never reads a clock itself.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since the driver's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);
    /// Later than any time a run reaches.
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// The instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + ns`, saturating at [`Instant::FAR_FUTURE`].
    pub const fn plus_nanos(self, ns: u64) -> Instant {
        Instant(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<core::time::Duration> for Instant {
    type Output = Instant;
    fn add(self, d: core::time::Duration) -> Instant {
        self.plus_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl AddAssign<core::time::Duration> for Instant {
    fn add_assign(&mut self, d: core::time::Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = core::time::Duration;
    fn sub(self, earlier: Instant) -> core::time::Duration {
        core::time::Duration::from_nanos(self.nanos_since(earlier))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 / 1_000;
        write!(f, "{}.{:06}s", us / 1_000_000, us % 1_000_000)
    }
}
