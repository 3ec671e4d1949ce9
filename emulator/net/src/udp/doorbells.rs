//! Send doorbells rung back to back leave together.
//!
//! A send doorbell normally sends its packets at once, in the ringing
//! thread: the lowest latency for a single post. An application that posts
//! to many QPs in a row (one `post_send` each, as perftest and `uroce bench`
//! do with `-q`) would pay a system call per doorbell, and the kernel could
//! batch nothing. So, like TCP's autocorking, a doorbell rung within
//! [`BURST_WINDOW_NS`] of the previous one, with no poll between, is held:
//! its packets leave with the application's next poll (or any verbs call
//! that progresses the device), with the [`MAX_HELD`]-th doorbell held,
//! or, if neither comes, from the background thread [`MAX_HOLD_NS`] after
//! the first was held. The first doorbell after a poll is never held, so a
//! ping-pong's post leaves at once.

/// Doorbells further apart than this are not a burst (the default of
/// `UdpConfig::doorbell_burst_ns`).
pub(crate) const BURST_WINDOW_NS: u64 = 5_000;
/// At most this many doorbells are held at once.
pub(super) const MAX_HELD: u32 = 32;
/// The longest a held doorbell waits for the application.
pub(super) const MAX_HOLD_NS: u64 = 20_000;

/// What became of a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Doorbell {
    /// Send now.
    SendNow,
    /// Held, the first of a burst: whoever sends it must know by when.
    HeldFirst,
    /// Held behind others.
    Held,
}

/// The runtime's doorbell batch (kept under its I/O lock).
#[derive(Debug)]
pub(super) struct DoorbellBatch {
    /// Doorbells further apart than this are not a burst (0: none is).
    window_ns: u64,
    /// The last send doorbell since the application's last poll.
    last_rung_ns: Option<u64>,
    /// Doorbells held.
    held: u32,
    /// When the first held doorbell was rung.
    held_since_ns: Option<u64>,
}

impl DoorbellBatch {
    /// Doorbells within `window_ns` of each other are a burst.
    pub(super) fn new(window_ns: u64) -> DoorbellBatch {
        DoorbellBatch { window_ns, last_rung_ns: None, held: 0, held_since_ns: None }
    }

    /// A send doorbell rang at `now_ns`.
    pub(super) fn rang(&mut self, now_ns: u64) -> Doorbell {
        let burst = self.last_rung_ns.is_some_and(|t| now_ns.saturating_sub(t) < self.window_ns);
        self.last_rung_ns = Some(now_ns);
        if !burst || self.held + 1 >= MAX_HELD {
            return Doorbell::SendNow;
        }
        self.held += 1;
        match self.held_since_ns {
            Some(_) => Doorbell::Held,
            None => {
                self.held_since_ns = Some(now_ns);
                Doorbell::HeldFirst
            }
        }
    }

    /// The doorbell sent now was done at `now_ns`: the next one is part
    /// of its burst if it comes within the window from here (unless a
    /// poll came between).
    pub(super) fn rang_until(&mut self, now_ns: u64) {
        if self.last_rung_ns.is_some() {
            self.last_rung_ns = Some(now_ns);
        }
    }

    /// The application polled: its next doorbell starts a new burst.
    pub(super) fn polled(&mut self) {
        self.last_rung_ns = None;
    }

    /// Everything ready was sent: nothing is held.
    pub(super) fn sent(&mut self) {
        self.held = 0;
        self.held_since_ns = None;
    }

    /// When held doorbells must leave even if the application does not
    /// come back.
    pub(super) fn release_at_ns(&self) -> Option<u64> {
        self.held_since_ns.map(|t| t + MAX_HOLD_NS)
    }

    /// Doorbells held now.
    #[cfg(test)]
    pub(super) fn held(&self) -> u32 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_doorbell_and_the_first_after_a_poll_send_now() {
        let mut batch = DoorbellBatch::new(BURST_WINDOW_NS);
        assert_eq!(batch.rang(1_000), Doorbell::SendNow);
        batch.polled();
        assert_eq!(batch.rang(1_500), Doorbell::SendNow, "a poll ends the burst");
        assert_eq!(batch.rang(1_500 + BURST_WINDOW_NS), Doorbell::SendNow, "too far apart");
        assert_eq!(batch.release_at_ns(), None);
    }

    #[test]
    fn a_zero_window_holds_nothing() {
        let mut batch = DoorbellBatch::new(0);
        assert_eq!(batch.rang(1_000), Doorbell::SendNow);
        assert_eq!(batch.rang(1_000), Doorbell::SendNow);
    }

    #[test]
    fn a_burst_is_held_until_sent_and_capped() {
        let mut batch = DoorbellBatch::new(BURST_WINDOW_NS);
        assert_eq!(batch.rang(10_000), Doorbell::SendNow);
        assert_eq!(batch.rang(10_100), Doorbell::HeldFirst);
        assert_eq!(batch.release_at_ns(), Some(10_100 + MAX_HOLD_NS));
        let mut now = 10_100;
        for _ in 2..MAX_HELD {
            now += 100;
            assert_eq!(batch.rang(now), Doorbell::Held);
        }
        assert_eq!(batch.held(), MAX_HELD - 1);
        assert_eq!(batch.rang(now + 100), Doorbell::SendNow, "the cap sends the batch");
        batch.sent();
        assert_eq!((batch.held(), batch.release_at_ns()), (0, None));
        assert_eq!(batch.rang(now + 200), Doorbell::HeldFirst, "still a burst: held again");
    }
}
