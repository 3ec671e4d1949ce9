//! The latency loops of `uroce bench`: SEND and WRITE ping-pong, READ and
//! atomic round trips, each iteration timed at its post (perftest's
//! `run_iter_lat*`).

use super::*;

impl Side {
    /// The client's latency loop; returns the post times (ns).
    pub fn client_lat(&self, p: &Params, size: u32, peer: &Endpoint) -> Result<Vec<u64>, String> {
        match p.op {
            Op::Write => {
                self.reset_tag(size)?;
                self.write_lat(p, size, peer, Role::Client)
            }
            Op::Send => self.send_lat_client(p, size, peer),
            Op::Read | Op::Atomic => self.single_op_lat(p, size, peer),
        }
    }

    /// What the server does before it says GO: SEND latency posts its
    /// receives, WRITE latency clears its tag byte. Returns the receives
    /// posted.
    pub fn server_lat_prepare(&self, p: &Params, size: u32) -> Result<u64, String> {
        match p.op {
            Op::Send => {
                let count = u64::from(self.rx_depth).min(u64::from(p.iters));
                self.post_receives(0, count, size)?;
                Ok(count)
            }
            Op::Write => {
                self.reset_tag(size)?;
                Ok(0)
            }
            Op::Read | Op::Atomic => Ok(0),
        }
    }

    /// The server's side of a latency run (after GO); READ and atomics
    /// need nothing from it.
    pub fn server_lat(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
        posted_rx: u64,
    ) -> Result<(), String> {
        match p.op {
            Op::Write => self.write_lat(p, size, peer, Role::Server).map(drop),
            Op::Send => self.send_lat_server(p, size, peer, posted_rx),
            Op::Read | Op::Atomic => Ok(()),
        }
    }

    /// Clears the tag byte (stale tags from an earlier size must not
    /// count).
    pub(super) fn reset_tag(&self, size: u32) -> Result<(), String> {
        self.mr.write(u64::from(size - 1), &[0]).map_err(|e| e.to_string())
    }

    /// WRITE ping-pong: each side writes the peer's receive half with the
    /// iteration's tag in the last byte and watches its own last byte for
    /// the peer's answer.
    pub(super) fn write_lat(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
        role: Role,
    ) -> Result<Vec<u64>, String> {
        let last = u64::from(size - 1);
        let mut template = self.template(Op::Write, size, peer, p.inline);
        let mut posts = Vec::with_capacity(p.iters as usize);
        let start = Instant::now();
        let mut outstanding = 0u64;
        for i in 0..p.iters {
            let tag = (i % 255 + 1) as u8;
            if role == Role::Server {
                self.wait_tag(last, tag, &mut outstanding)?;
            }
            posts.push(start.elapsed().as_nanos() as u64);
            match template.inline_data.as_mut() {
                Some(data) => {
                    if let Some(b) = data.last_mut() {
                        *b = tag;
                    }
                }
                None => self.mr.write(self.tx_offset + last, &[tag]).map_err(|e| e.to_string())?,
            }
            template.wr_id = u64::from(i);
            template.flags = lat_flags(u64::from(i), u64::from(p.iters));
            self.post_one(&template, &mut outstanding)?;
            if role == Role::Client {
                self.wait_tag(last, tag, &mut outstanding)?;
            }
        }
        self.drain(&mut outstanding)?;
        Ok(posts)
    }

    /// Posts one WR on QP 0, waiting for room; `outstanding` counts the
    /// signaled ones not completed yet.
    pub(super) fn post_one(&self, wr: &SendWr, outstanding: &mut u64) -> Result<(), String> {
        let mut watchdog = Watchdog::default();
        loop {
            match self.qps[0].post_send(std::slice::from_ref(wr)) {
                Ok(()) => {
                    *outstanding += u64::from(wr.flags.contains(SendFlags::SIGNALED));
                    return Ok(());
                }
                Err((_, Error::NoMemory(_))) => {
                    let wcs = self.poll_kept()?;
                    if wcs.is_empty() {
                        watchdog.idle(self, "waiting for send queue room")?;
                    } else {
                        watchdog.progress();
                    }
                    *outstanding -= count_sends(&wcs).min(*outstanding);
                }
                Err((_, e)) => return Err(format!("post_send: {e}")),
            }
        }
    }

    /// Spins until the last byte of the receive half is `tag`, driving the
    /// device through the CQ meanwhile.
    pub(super) fn wait_tag(&self, last: u64, tag: u8, outstanding: &mut u64) -> Result<(), String> {
        let mut byte = [0u8];
        let mut watchdog = Watchdog::default();
        loop {
            let wcs = self.poll_kept()?;
            *outstanding -= count_sends(&wcs).min(*outstanding);
            self.mr.read(last, &mut byte).map_err(|e| e.to_string())?;
            if byte[0] == tag {
                return Ok(());
            }
            watchdog.idle(self, "waiting for the peer's WRITE")?;
        }
    }

    /// Waits for every outstanding signaled send.
    pub(super) fn drain(&self, outstanding: &mut u64) -> Result<(), String> {
        let mut last_progress = Instant::now();
        while *outstanding > 0 {
            let wcs = self.poll_kept()?;
            if wcs.is_empty() {
                self.stalled(last_progress, "waiting for the last completions")?;
            } else {
                last_progress = Instant::now();
            }
            *outstanding -= count_sends(&wcs).min(*outstanding);
        }
        Ok(())
    }

    /// SEND ping-pong, client side: send, then wait for the answer.
    pub(super) fn send_lat_client(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
    ) -> Result<Vec<u64>, String> {
        let iters = u64::from(p.iters);
        let mut wr = self.template(Op::Send, size, peer, p.inline);
        // The server posted its receives before it said GO.
        let posted_rx = u64::from(self.rx_depth).min(iters);
        self.post_receives(0, posted_rx, size)?;
        let mut posts = Vec::with_capacity(p.iters as usize);
        let start = Instant::now();
        let mut outstanding = 0u64;
        let mut rx = Receives { posted: posted_rx, taken: 0, iters, size };
        for i in 0..iters {
            posts.push(start.elapsed().as_nanos() as u64);
            wr.wr_id = i;
            wr.flags = lat_flags(i, iters);
            self.post_one(&wr, &mut outstanding)?;
            // After the send, while it travels: off the measured path.
            self.replenish(&mut rx)?;
            self.wait_receive(&mut outstanding, &mut rx)?;
        }
        self.drain(&mut outstanding)?;
        Ok(posts)
    }

    /// SEND ping-pong, server side: wait for a message, answer it.
    pub(super) fn send_lat_server(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
        posted_rx: u64,
    ) -> Result<(), String> {
        let iters = u64::from(p.iters);
        let mut wr = self.template(Op::Send, size, peer, p.inline);
        let mut outstanding = 0u64;
        let mut rx = Receives { posted: posted_rx, taken: 0, iters, size };
        for i in 0..iters {
            self.wait_receive(&mut outstanding, &mut rx)?;
            wr.wr_id = i;
            wr.flags = lat_flags(i, iters);
            self.post_one(&wr, &mut outstanding)?;
            self.replenish(&mut rx)?;
        }
        self.drain(&mut outstanding)
    }

    /// Posts a receive for each one taken, while fewer than `iters` were
    /// posted.
    fn replenish(&self, rx: &mut Receives) -> Result<(), String> {
        let more = rx.taken.min(rx.iters - rx.posted.min(rx.iters));
        rx.taken = 0;
        if more > 0 {
            self.post_receives(0, more, rx.size)?;
            rx.posted += more;
        }
        Ok(())
    }

    /// Waits for one receive completion. With a receive queue of one, its
    /// receive is posted again at once (the peer's next message could come
    /// first); deeper queues leave it to `replenish`, after the next send.
    fn wait_receive(&self, outstanding: &mut u64, rx: &mut Receives) -> Result<(), String> {
        let mut watchdog = Watchdog::default();
        loop {
            let wcs = self.poll_kept()?;
            *outstanding -= count_sends(&wcs).min(*outstanding);
            let got = wcs.iter().filter(|wc| wc.opcode == WcOpcode::Recv).count() as u64;
            if got > 0 {
                rx.taken += got;
                if self.rx_depth <= 1 {
                    self.replenish(rx)?;
                }
                if got > 1 {
                    return Err("more than one message arrived in a ping-pong".into());
                }
                return Ok(());
            }
            watchdog.idle(self, "waiting for the peer's SEND")?;
        }
    }

    /// READ or atomic latency: one operation outstanding, timed from post
    /// to post.
    pub(super) fn single_op_lat(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
    ) -> Result<Vec<u64>, String> {
        let mut wr = self.template(p.op, size, peer, 0);
        let mut posts = Vec::with_capacity(p.iters as usize);
        let start = Instant::now();
        let mut outstanding = 0u64;
        for i in 0..p.iters {
            posts.push(start.elapsed().as_nanos() as u64);
            wr.wr_id = u64::from(i);
            self.post_one(&wr, &mut outstanding)?;
            self.drain(&mut outstanding)?;
        }
        Ok(posts)
    }
}

/// The receives of a SEND ping-pong: `posted` of the `iters` needed so
/// far, `taken` completed and not yet posted again (of `size` bytes).
pub(super) struct Receives {
    posted: u64,
    taken: u64,
    iters: u64,
    size: u32,
}

/// The flags of ping-pong WR `n` of `iters`: every `LAT_SIGNAL_EVERY`-th
/// and the last are signaled, the others not (inline data, when the
/// template has it, is in the WR itself).
fn lat_flags(n: u64, iters: u64) -> SendFlags {
    if (n + 1) % LAT_SIGNAL_EVERY == 0 || n + 1 == iters {
        SendFlags::SIGNALED
    } else {
        SendFlags::EMPTY
    }
}

/// Send-side completions among `wcs`.
fn count_sends(wcs: &[WorkCompletion]) -> u64 {
    wcs.iter().filter(|wc| wc.opcode != WcOpcode::Recv).count() as u64
}

/// Notices a peer that stopped responding without reading the clock on
/// the measured path: the clock starts at the first poll that found
/// nothing, and is read again only every `WATCHDOG_POLLS` such polls.
#[derive(Default)]
struct Watchdog {
    since: Option<Instant>,
    empty_polls: u32,
}

/// Empty polls between two looks at the clock (a poll takes about 0.5 µs).
const WATCHDOG_POLLS: u32 = 64;

impl Watchdog {
    /// A poll found nothing: an error once `side`'s timeout has passed
    /// since the first of them.
    fn idle(&mut self, side: &Side, what: &str) -> Result<(), String> {
        let since = *self.since.get_or_insert_with(Instant::now);
        self.empty_polls = self.empty_polls.wrapping_add(1);
        match self.empty_polls % WATCHDOG_POLLS {
            0 => side.stalled(since, what),
            _ => Ok(()),
        }
    }

    /// Something moved: the silence starts again.
    fn progress(&mut self) {
        *self = Watchdog::default();
    }
}
