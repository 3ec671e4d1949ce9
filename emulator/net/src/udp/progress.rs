//! Progress: who moves the packets. The application's own verbs calls
//! drive the device in its thread ([`Driver`]); a background thread keeps a
//! passive target going, waiting per [`ProgressMode`] (see
//! `docs/runtime.md`).

use super::datapath::Io;
use super::doorbells::{Doorbell, MAX_HOLD_NS};
use super::{lock, try_lock, DeviceSummary, ProgressMode, UdpStats};
use core::net::IpAddr;
use std::cmp::Reverse;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;
use uroce_hca::{AppActivity, Driver, SharedHca};

/// How long after it last saw the application's flag (`AppActivity`) up
/// the background thread leaves the device to it.
const APP_ACTIVE_NS: u64 = 1_000_000;
/// The longest that packets produced by an application-driven receive
/// (ACKs, READ responses) wait for the application's next verbs call before
/// the background thread sends them, when it finds the device free (while
/// the application is in a call at its looks, up to `APP_ACTIVE_NS` more:
/// see `background`).
const DEFERRED_ACK_NS: u64 = 50_000;
/// The background thread's first look again at a device the application
/// holds; each further look that finds it held waits twice as long, up to
/// `APP_ACTIVE_NS` (see `background`).
const BUSY_LOOK_NS: u64 = DEFERRED_ACK_NS;
/// How long the application's polls may keep those packets back for its
/// next verbs call (see `progress_by`).
const ACK_HOLD_NS: u64 = 5_000;
/// A waiting application's polls with nothing to send run a whole round
/// (timers, a transmit) once in this many; the others only receive.
const IDLE_POLLS_PER_ROUND: u32 = 8;

/// The part of the runtime shared by the application's threads and the
/// background thread.
pub(super) struct Runtime {
    pub hca: SharedHca,
    pub addr: IpAddr,
    pub mode: ProgressMode,
    /// Print the HCA's decisions as they are taken (`TraceMode::Print`).
    pub print_steps: bool,
    /// Readable when something arrives on the transport (a duplicate of
    /// its descriptor, or over kernel UDP of the epoll set of its
    /// receiving sockets; waited on without the I/O lock).
    pub ready_fd: OwnedFd,
    /// Over kernel UDP, the descriptor through which `ready_fd` watches the
    /// device's socket: the background thread takes the socket out of the
    /// set while the application drives, so that a datagram's arrival does
    /// not run the set's callback inside the peer's send call, and puts it
    /// back before it sleeps on the set.
    pub watched: Option<OwnedFd>,
    /// Wakes the background thread (stop, or the application went to sleep).
    pub wake: OwnedFd,
    pub epoch: std::time::Instant,
    /// The application's flags (shared with the HCA, which raises them on
    /// posts): it called a verb since the background thread last looked
    /// (the thread lowers it as it notes the time: a flag rather than a
    /// time, so that a verbs call does not read the clock for it); it
    /// posted a send without a doorbell since its last poll (nothing is
    /// held back for its next request any more).
    pub activity: Arc<AppActivity>,
    /// The application armed a CQ and may be asleep on a channel.
    pub app_sleeping: AtomicBool,
    pub stop: AtomicBool,
    /// The background thread is (about to be) asleep on the socket.
    pub background_idle: AtomicBool,
    /// Doorbells rung back to back may be held (`doorbells.rs`): a burst
    /// window above 0, where QPs' packets can share a send call.
    pub holds_doorbells: bool,
    /// Until when (runtime nanoseconds) the background thread sleeps while
    /// the application drives (`u64::MAX`: on the socket, for any packet).
    pub background_until_ns: AtomicU64,
    /// Looks of the background thread that found the device held by
    /// another thread (`UdpStats::background_busy_looks`): counted outside
    /// the I/O lock, which such a look does not take.
    pub background_busy_looks: AtomicU64,
    pub io: Mutex<Io>,
}

impl Driver for Runtime {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.now_ns())
    }

    fn progress(&self) {
        self.progress_by(true);
    }

    fn flush(&self) {
        self.flush_at(self.now_ns());
    }

    fn rang_send_doorbell(&self, now: Instant) {
        // The doorbell's time: no second clock read on the send's path.
        let now = now.as_nanos();
        if !self.holds_doorbells {
            // A socket per QP's port: nothing to gain by holding (the
            // default), and no lock taken for it on every post.
            self.flush_at(now);
            return;
        }
        self.mark_app_active();
        let doorbell = {
            let mut io = lock(&self.io);
            let doorbell = io.doorbells.rang(now);
            if doorbell != Doorbell::SendNow {
                io.stats.tx_doorbells_held += 1;
            }
            doorbell
        };
        match doorbell {
            Doorbell::SendNow => {
                self.flush_at(now);
                // The burst window runs from the end of the send: the
                // system call is not the application's gap between posts.
                lock(&self.io).doorbells.rang_until(self.now_ns());
            }
            Doorbell::HeldFirst | Doorbell::Held => {
                // The next poll sends it: nothing held back for it there.
                self.activity.posted_unkicked();
                // A background thread asleep past the hold must look again
                // (once per burst).
                if doorbell == Doorbell::HeldFirst
                    && self.background_until_ns.load(Ordering::SeqCst) > now + MAX_HOLD_NS
                {
                    self.wake();
                }
            }
        }
    }

    fn posted_receive(&self) {
        self.activity.called();
    }

    fn posted_send_unkicked(&self) {
        self.activity.posted_unkicked();
    }

    fn activity(&self) -> Option<Arc<AppActivity>> {
        Some(self.activity.clone())
    }

    fn app_sleeping(&self) {
        self.app_sleeping.store(true, Ordering::Release);
        self.wake();
    }
}

impl Runtime {
    pub(super) fn stats(&self) -> UdpStats {
        let mut io = lock(&self.io);
        let mut stats = io.stats.clone();
        stats.background_busy_looks = self.background_busy_looks.load(Ordering::Relaxed);
        if let Some(host) = io.transport.host() {
            stats.link = host.stats();
        }
        stats
    }

    pub(super) fn flush_capture(&self) -> io::Result<()> {
        let mut io = lock(&self.io);
        match io.capture.as_mut() {
            Some(capture) => capture.flush(),
            None => Ok(()),
        }
    }

    /// Each lock in a statement of its own: the I/O lock is taken before
    /// the HCA's, never while holding it.
    pub(super) fn summary(&self) -> DeviceSummary {
        let stats = self.stats();
        let capture_failure = self.flush_capture().err().map(|e| e.to_string());
        let counters = self.hca.lock().counters();
        DeviceSummary { addr: self.addr, counters, stats, capture_failure }
    }

    /// Writes the scenario's summary on standard error and to its report
    /// (once: at close, or at exit for a device never closed). Each lock
    /// in a statement of its own, the I/O lock first.
    pub(super) fn write_scenario_summary(&self) {
        let lines = lock(&self.io).scenario.as_mut().and_then(|sp| sp.take_summary_lines());
        let Some(lines) = lines else { return };
        let stats = self.stats();
        let (tally, events, counters) = {
            let hca = self.hca.lock();
            (hca.completion_tally().clone(), hca.async_log().clone(), hca.counters())
        };
        if let Some(sp) = lock(&self.io).scenario.as_mut() {
            sp.write_summary(lines, &tally, &events, &counters, &stats);
        }
    }

    pub(super) fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn wake(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    /// Wakes the background thread if it is asleep in charge of the device,
    /// so that it recomputes its deadline after the application changed
    /// the device's state (Dekker with `background`: it announces the sleep
    /// before computing the deadline it sleeps on).
    pub(super) fn kick_background(&self) {
        if self.background_idle.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// The application called a verb: it is awake and driving (unless it
    /// armed a CQ, see `app_sleeping`).
    #[inline]
    fn mark_app_active(&self) {
        self.activity.called();
    }

    /// Sends what is ready at `now_ns` (the application's thread).
    fn flush_at(&self, now_ns: u64) {
        self.mark_app_active();
        {
            let mut io = lock(&self.io);
            self.transmit_some(&mut io, now_ns);
        }
        // New timers, held packets or more than one burst: a background
        // thread asleep on an older deadline must look again.
        self.kick_background();
        self.deliver_events();
    }

    /// Hands waiting events to the application (completion channels). An
    /// event is what an application that armed a CQ sleeps for: once one
    /// is raised, it is awake again.
    /// CM events (a MAD received or timed out) are announced too: the
    /// driver's CM thread sleeps on the notifiers as well.
    fn deliver_events(&self) {
        let (events, cm) = {
            let hca = self.hca.lock();
            (hca.has_events(), hca.cm_notification_pending())
        };
        if events {
            self.app_sleeping.store(false, Ordering::Release);
        }
        if events || cm {
            self.hca.notify_if_events();
        }
    }

    /// One progress step: receive what is waiting, fire timers, send what
    /// is ready, until nothing moves (bounded); `app` when the
    /// application's thread calls. Returns whether anything moved.
    pub(super) fn progress_by(&self, app: bool) -> bool {
        // While a CQ is armed (`app_sleeping`), the application's calls do
        // not put the background thread off: the libibverbs event loop arms
        // the CQ, polls and posts, then sleeps on the channel, and only the
        // event it waits for ends that (`deliver_events`).
        if app {
            self.mark_app_active();
        }
        let moved;
        // A waiting application's poll that found nothing made no event
        // (the background thread hands over its own, a command its own).
        let mut quiet = false;
        {
            let mut io = lock(&self.io);
            if app {
                io.doorbells.polled();
                let posted = self.activity.take_posted_unkicked();
                // An application waiting for a message (its last poll found
                // nothing) with nothing posted and nothing of the runtime's
                // own to send: most of its polls only look for a datagram,
                // and read the clock only if one came. Every
                // `IDLE_POLLS_PER_ROUND`-th still runs a whole round (timers,
                // packets another thread made ready without a doorbell);
                // the background thread also wakes for the HCA's timers.
                let idle = !posted
                    && io.app_poll_was_empty
                    && !self.holds_doorbells
                    && io.nothing_pending();
                io.idle_polls = if idle { io.idle_polls.wrapping_add(1) } else { 0 };
                if idle && io.idle_polls % IDLE_POLLS_PER_ROUND != 0 {
                    moved = self.receive_waiting(&mut io) > 0;
                    quiet = !moved;
                } else {
                    moved = self.app_round(&mut io, posted);
                }
                if moved {
                    self.kick_background();
                }
            } else {
                moved = self.background_rounds(&mut io);
            }
        }
        if !quiet {
            self.deliver_events();
        }
        if self.print_steps {
            self.print_steps();
        }
        moved
    }

    /// A step outside the application's calls: receive and send until
    /// nothing moves (at most eight rounds). Returns whether anything
    /// moved.
    fn background_rounds(&self, io: &mut Io) -> bool {
        let mut moved = false;
        for _ in 0..8 {
            let now = self.now_ns();
            let received = self.receive_some(io, now, false);
            let sent = self.transmit_some(io, now);
            if received == 0 && sent == 0 {
                break;
            }
            moved = true;
        }
        moved
    }

    /// The application's round: sends what is ready, then takes what
    /// arrived. Returns whether anything moved.
    fn app_round(&self, io: &mut Io, posted: bool) -> bool {
        let now = self.now_ns();
        // The application's thread: send what is ready (including
        // what the last receive produced), then take what arrived
        // and return, so the application sees its completions
        // before the runtime spends a system call on the ACKs
        // they produced. Those leave with the application's next
        // verbs call, after any request it posts in reaction (see
        // `flush_batch`): the ACK is off the ping-pong's critical
        // path. If no call comes, the background thread sends them:
        // at once if it is asleep in charge (`kick_background`),
        // else when it takes over (one to two `APP_ACTIVE_NS` after
        // the last call), or `DEFERRED_ACK_NS` after the receive if it
        // looks at its deadline before that.
        // Deferred responses younger than `ACK_HOLD_NS` stay held
        // through this poll: an application that polls its send CQ
        // before its receive CQ (perftest's `ib_send_lat`) would
        // otherwise send the ACK of the reply it just received alone,
        // a system call on the round trip's path, just before it
        // posts its next request, which the ACK can go with.
        let hold = !posted
            && io.deferred_since_ns.is_some_and(|since| now.saturating_sub(since) < ACK_HOLD_NS);
        let sent = if hold { 0 } else { self.transmit_some(io, now) };
        // A poll after an empty one is an application waiting for a
        // message: one datagram with `recvmsg` (cheaper) and back to
        // it; a stream (the last poll found something) is taken in
        // batches.
        let single = io.app_poll_was_empty;
        let received = self.receive_some(io, now, single);
        io.app_poll_was_empty = received == 0;
        if received > 0 {
            io.deferred_since_ns.get_or_insert(now);
        }
        sent + received > 0
    }

    /// Prints the HCA's decisions taken since the last call on standard
    /// error (`trace <address> <microseconds> <decision>`).
    fn print_steps(&self) {
        use std::io::Write;
        let steps: Vec<_> = {
            let mut hca = self.hca.lock();
            std::iter::from_fn(|| hca.poll_step()).collect()
        };
        if steps.is_empty() {
            return;
        }
        let mut err = std::io::stderr().lock();
        for (at, step) in steps {
            let _ = writeln!(err, "trace {} {} {step}", self.addr, at.as_nanos() / 1_000);
        }
    }

    /// When the device next needs attention by itself (a timer or a
    /// delayed packet), in runtime nanoseconds.
    fn next_deadline_ns(&self) -> Option<u64> {
        self.deadline_if_free(true).flatten()
    }

    /// [`Runtime::next_deadline_ns`], or `None` without waiting when
    /// another thread holds the device (`wait` false) or its I/O state.
    fn deadline_if_free(&self, wait: bool) -> Option<Option<u64>> {
        let (ready, timer) = {
            let hca = if wait { self.hca.lock() } else { self.hca.try_lock()? };
            (hca.has_transmit_ready(), hca.poll_timeout().map(Instant::as_nanos))
        };
        let delayed = {
            let mut io = if wait { lock(&self.io) } else { try_lock(&self.io)? };
            // Packets ready are due now (left behind by a burst limit), or
            // when held doorbells must leave (the application sends them
            // with its next poll before that).
            let doorbells = io.doorbells.release_at_ns();
            let ready = ready.then_some(doorbells.unwrap_or(0));
            let held = io.delayed.peek().map(|Reverse(d)| d.due_ns);
            let deferred = io.deferred_since_ns.map(|t| t + DEFERRED_ACK_NS);
            let now = Instant::from_nanos(self.now_ns());
            let link = io.transport.host().and_then(|host| {
                if host.has_work() {
                    Some(0)
                } else {
                    host.poll_at_ns(now)
                }
            });
            let scenario = io.scenario.as_ref().and_then(|sp| sp.next_deadline());
            let acks_later = (!io.acks_later_spans.is_empty()).then_some(0);
            [ready, doorbells, held, deferred, link, scenario, acks_later]
                .into_iter()
                .flatten()
                .min()
        };
        Some(match (timer, delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// The background thread: keeps the device progressing while the
    /// application is not calling verbs.
    pub(super) fn background(&self) {
        let mut last_activity_ns = 0u64;
        // When this thread last saw the application's flag up (0: never).
        // The application is taken as silent `APP_ACTIVE_NS` after that:
        // between one and two such spans after its last call.
        let mut app_seen_ns = 0u64;
        let mut more = false;
        // Whether the device's socket is in the ready set.
        let mut watching = true;
        // When the application holds the device, how long until the next
        // look (`BUSY_LOOK_NS`, doubling while it stays held).
        let mut busy_look_ns = BUSY_LOOK_NS;
        while !self.stop.load(Ordering::Acquire) {
            let now = self.now_ns();
            if self.activity.take_called() {
                app_seen_ns = now;
            }
            let app_active = !self.app_sleeping.load(Ordering::Acquire)
                && app_seen_ns != 0
                && now.saturating_sub(app_seen_ns) < APP_ACTIVE_NS;
            // In the set exactly while the thread may sleep on it.
            let in_charge = !app_active;
            if watching != in_charge {
                watching = self.watch_socket(in_charge);
            }
            if app_active {
                // The application drives; wake for its silence, a timer,
                // or a stop/sleep signal.
                let quiet_at = app_seen_ns + APP_ACTIVE_NS;
                // Announce the wait, then compute its deadline: a doorbell
                // held after this wakes it if it would sleep past the hold
                // (`rang_send_doorbell`).
                self.background_until_ns.store(quiet_at, Ordering::SeqCst);
                // Only while the application's thread is not in the
                // runtime: waiting for its locks would queue this thread
                // behind each of its calls (a wake-up system call on the
                // application's path at every release, and this thread
                // scheduled in, on a busy machine in place of the peer,
                // only to find them taken again). While they are taken,
                // the application is in a call (its polls run whole rounds:
                // timers, ready packets, deferred ACKs); look again later,
                // less often while it stays in, never past the point where
                // its silence is noticed anyway (`quiet_at`). A device that
                // holds doorbells waits for them as before: its held
                // doorbells must leave 20 µs after the first, and only the
                // first of a burst wakes this thread.
                let look = if self.holds_doorbells {
                    Some(self.next_deadline_ns())
                } else {
                    self.deadline_if_free(false)
                };
                let (deadline, free) = match look {
                    Some(deadline) => {
                        busy_look_ns = BUSY_LOOK_NS;
                        (deadline, true)
                    }
                    None => {
                        let look = self.now_ns() + busy_look_ns;
                        busy_look_ns = (busy_look_ns * 2).min(APP_ACTIVE_NS);
                        self.background_busy_looks.fetch_add(1, Ordering::Relaxed);
                        (Some(look), false)
                    }
                };
                let until = deadline.map_or(quiet_at, |d| d.min(quiet_at));
                self.background_until_ns.store(until, Ordering::SeqCst);
                self.wait(false, until.saturating_sub(self.now_ns()));
                self.background_until_ns.store(u64::MAX, Ordering::SeqCst);
                if free && deadline.is_some_and(|d| d <= self.now_ns()) {
                    if self.holds_doorbells {
                        self.step();
                    } else {
                        self.try_step();
                    }
                }
                continue;
            }
            let spin = match self.mode {
                ProgressMode::Busy => true,
                ProgressMode::Event => false,
                ProgressMode::Hybrid { spin_us } => {
                    now.saturating_sub(last_activity_ns) < u64::from(spin_us) * 1_000
                }
            };
            // In charge: the application's next call is looked at afresh.
            busy_look_ns = BUSY_LOOK_NS;
            if !spin && !more {
                // Announce the sleep, then compute the deadline: anything
                // the application changes after this wakes us
                // (`kick_background`).
                self.background_idle.store(true, Ordering::SeqCst);
                let now = self.now_ns();
                let deadline = self.next_deadline_ns();
                let timeout = deadline.map_or(u64::MAX, |d| d.saturating_sub(now));
                if timeout > 0 {
                    self.wait(true, timeout);
                }
                self.background_idle.store(false, Ordering::SeqCst);
            }
            // A step that moved something may have left more (a burst cap,
            // a full receive batch): step again before sleeping.
            more = self.step();
            if more {
                last_activity_ns = self.now_ns();
            } else if spin {
                std::hint::spin_loop();
            }
        }
    }

    /// Puts the device's socket in the ready set (`on`) or takes it out;
    /// returns whether it is in the set now. A refused change leaves it as
    /// it was (and is tried again on the next turn).
    fn watch_socket(&self, on: bool) -> bool {
        let Some(watched) = self.watched.as_ref() else { return true };
        match super::groups::watch(&self.ready_fd, watched, on) {
            Ok(()) => on,
            Err(_) => !on,
        }
    }

    /// A step of the background thread, counted in `background_steps`
    /// when it moved something. Returns whether it did.
    fn step(&self) -> bool {
        self.background_step(true)
    }

    /// [`Runtime::step`] unless another thread holds the I/O state (the
    /// application, doing the same work).
    fn try_step(&self) {
        self.background_step(false);
    }

    /// [`Runtime::background_rounds`] under the I/O lock (without `wait`,
    /// none while another thread holds it), counted, then the events they
    /// made.
    fn background_step(&self, wait: bool) -> bool {
        let moved = {
            let io = if wait { Some(lock(&self.io)) } else { try_lock(&self.io) };
            let Some(mut io) = io else { return false };
            let moved = self.background_rounds(&mut io);
            io.stats.background_steps += u64::from(moved);
            moved
        };
        self.deliver_events();
        if self.print_steps {
            self.print_steps();
        }
        moved
    }

    /// Sleeps until the wake descriptor (and, with `socket`, the socket)
    /// is readable, or `timeout_ns` passes.
    fn wait(&self, socket: bool, timeout_ns: u64) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let capped = timeout_ns.min(1_000_000_000);
        let timeout = Timespec {
            tv_sec: (capped / 1_000_000_000) as _,
            tv_nsec: (capped % 1_000_000_000) as _,
        };
        let mut fds = [
            PollFd::new(&self.wake, PollFlags::IN),
            PollFd::from_borrowed_fd(self.ready_fd.as_fd(), PollFlags::IN),
        ];
        let n = if socket { 2 } else { 1 };
        if poll(&mut fds[..n], Some(&timeout)).is_ok() && fds[0].revents().contains(PollFlags::IN) {
            let mut counter = [0u8; 8];
            let _ = rustix::io::read(&self.wake, &mut counter);
        }
    }
}

#[cfg(test)]
mod tests;
