//! What the device's completions came to, counted as they are written: how
//! many of each status, and the first error (when, which QP and work
//! request, which status). A runtime prints it when a run ends (the fault
//! scenarios' summary line, design note fault-scenarios.md §3) and checks
//! an expected outcome against it, without tracing every step.

use crate::time::Instant;
use uroce_device::types::{Qpn, WcStatus};

/// Statuses counted: `IBV_WC_SUCCESS` (0) to `IBV_WC_GENERAL_ERR` (21).
const STATUSES: usize = 22;

/// The first completion that was not a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstError {
    /// When it was written.
    pub at: Instant,
    /// Its QP.
    pub qpn: Qpn,
    /// Its work request.
    pub wr_id: u64,
    /// Its status.
    pub status: WcStatus,
}

/// The completions an HCA wrote (or tried to: a CQE lost to a CQ overrun
/// counts too), from [`crate::Hca::completion_tally`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionTally {
    by_status: [u64; STATUSES],
    first_error: Option<FirstError>,
}

impl CompletionTally {
    /// Counts one completion.
    pub(crate) fn count(&mut self, at: Instant, qpn: Qpn, wr_id: u64, status: WcStatus) {
        if let Some(n) = self.by_status.get_mut(usize::from(status.raw())) {
            *n += 1;
        }
        if status != WcStatus::Success && self.first_error.is_none() {
            self.first_error = Some(FirstError { at, qpn, wr_id, status });
        }
    }

    /// Completions with `status`.
    pub fn count_of(&self, status: WcStatus) -> u64 {
        self.by_status.get(usize::from(status.raw())).copied().unwrap_or(0)
    }

    /// Successful completions.
    pub fn successes(&self) -> u64 {
        self.count_of(WcStatus::Success)
    }

    /// Completions in error (flushes included).
    pub fn errors(&self) -> u64 {
        self.by_status.iter().sum::<u64>() - self.successes()
    }

    /// The first completion in error, if any.
    pub fn first_error(&self) -> Option<FirstError> {
        self.first_error
    }

    /// Each status seen, with its count, in status order.
    pub fn by_status(&self) -> impl Iterator<Item = (WcStatus, u64)> + '_ {
        self.by_status
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .filter_map(|(raw, &n)| Some((WcStatus::from_raw(u8::try_from(raw).ok()?)?, n)))
    }
}

impl crate::hca::Hca {
    /// The completions written so far, by status, and the first error.
    pub fn completion_tally(&self) -> &CompletionTally {
        &self.dev.tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_status_and_keeps_the_first_error() {
        let mut t = CompletionTally::default();
        let q = Qpn::new(17);
        t.count(Instant::from_nanos(1), q, 1, WcStatus::Success);
        t.count(Instant::from_nanos(2), q, 2, WcStatus::RetryExcErr);
        t.count(Instant::from_nanos(3), q, 3, WcStatus::WrFlushErr);
        t.count(Instant::from_nanos(4), q, 4, WcStatus::WrFlushErr);
        assert_eq!((t.successes(), t.errors()), (1, 3));
        assert_eq!(t.count_of(WcStatus::WrFlushErr), 2);
        let first = t.first_error().unwrap();
        assert_eq!(
            (first.at, first.wr_id, first.status),
            (Instant::from_nanos(2), 2, WcStatus::RetryExcErr)
        );
        let seen: Vec<_> = t.by_status().collect();
        assert_eq!(
            seen,
            vec![(WcStatus::Success, 1), (WcStatus::WrFlushErr, 2), (WcStatus::RetryExcErr, 1)]
        );
    }
}
