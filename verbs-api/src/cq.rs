//! Completion queues ([`Cq`]).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::events::CompChannel;
use crate::ring::CqRing;
use crate::WorkCompletion;
use core::future::Future;
use core::pin::Pin;
use core::task::{self, Poll};
use uroce_device::command::{Command, Reply};
use uroce_device::ring::cq_ring_shape;
use uroce_device::types::Qpn;
use uroce_device::Doorbell;

impl Context {
    /// `ibv_create_cq` for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        let cq = self.create_cq_unbound(cqe)?;
        // Its index may be a destroyed CQ's: no channel or waker of that
        // one's.
        self.events.set_channel(cq.index, None);
        self.events.forget_waker(cq.index);
        Ok(cq)
    }

    /// `ibv_create_cq` with a completion channel.
    pub fn create_cq_with_channel(&self, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        let cq = self.create_cq_unbound(cqe)?;
        self.events.set_channel(cq.index, Some(channel));
        self.events.forget_waker(cq.index);
        Ok(cq)
    }

    fn create_cq_unbound(&self, cqe: u32) -> Result<Cq> {
        // rxe's rxe_cq_chk_attr: 1 ..= max_cqe, else EINVAL.
        if cqe == 0 || cqe > self.limits.max_cqe {
            return Err(Error::Invalid("CQ depth: cqe must be 1 to the device's max_cqe"));
        }
        let ring = self.alloc_ring(cq_ring_shape(cqe))?;
        match self.command(Command::CreateCq { ring }) {
            Ok(Reply::Index(index)) => Ok(Cq { ctx: self.clone(), index, ring: CqRing::new(ring) }),
            Ok(_) => unreachable!("CreateCq answers Index"),
            Err(e) => {
                self.free_ring(ring);
                Err(e)
            }
        }
    }
}

/// A completion queue (`ibv_cq`).
///
/// `Send` and `Sync`: a `&Cq` may be shared between threads and held
/// across `.await` in a future that a multi-thread executor moves. Polls
/// from several threads each take different completions (the ring is
/// read under a lock). Awaiting is single-consumer: one task at a time
/// awaits a CQ ([`Cq::next`], [`Cq::poll_completion`]); a second one
/// replaces the first's waker, which is then never woken.
pub struct Cq {
    ctx: Context,
    pub(crate) index: u32,
    ring: CqRing,
}

impl Cq {
    /// The CQ's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first. Completions
    /// already in the ring are returned without driving the device (as a
    /// hardware CQ is read): a program polling two CQs (perftest: the send
    /// CQ, then the receive CQ) does not make the runtime send the ACKs a
    /// receive left before the request it posts in reaction.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut done = Vec::new();
        self.poll_into(max, &mut done)?;
        Ok(done)
    }

    /// [`Cq::poll`] into a buffer the caller keeps (no allocation once it
    /// has room): up to `max` completions appended to `out`, oldest first;
    /// returns how many. On an error `out` is as it was.
    pub fn poll_into(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        self.ctx.check_open()?;
        let taken = self.ring.poll_into(self.ctx.host().as_ref(), max, out)?;
        if taken > 0 {
            return Ok(taken);
        }
        self.ctx.progress();
        self.ring.poll_into(self.ctx.host().as_ref(), max, out)
    }

    /// Removes the completions of QP `qpn` not yet polled, keeping the
    /// others in order; returns how many went. What a provider does to the
    /// CQs of a QP it moves to RESET (libmlx5's `mlx5_cq_clean`): the QP's
    /// next life must not poll the last one's completions (the library's
    /// `ibv_modify_qp` calls it).
    pub fn discard_completions_of(&self, qpn: Qpn) -> Result<u32> {
        self.ring.discard(self.ctx.host().as_ref(), qpn)
    }

    /// The next completion, as a future: `cq.next().await`. See
    /// [`Cq::poll_completion`]; works under any executor (tokio's too),
    /// with no busy polling: the task sleeps until the device raises the
    /// CQ's completion event.
    pub fn next(&self) -> Next<'_> {
        Next { cq: self }
    }

    /// The next completion, or `Pending` with `cx`'s waker registered:
    /// [`Cq::poll`] of one (which drives an in-process device), else the
    /// waker is left with the device's event state, the CQ is armed (as
    /// [`Cq::req_notify`]`(false)`) and polled once more, since a
    /// completion written before the arm raises no event (the race
    /// `ibv_req_notify_cq` users close the same way). Then the runtime is
    /// told the application sleeps (the UDP runtime's thread keeps the
    /// device going), and the CQ's next completion event wakes the task,
    /// from the runtime's thread or the simulator's step.
    ///
    /// The CQ stays awaited until destroyed: its completion events no
    /// longer reach [`Context::next_event`] (a channel it has still gets
    /// them). One task at a time awaits a CQ.
    pub fn poll_completion(&self, cx: &mut task::Context<'_>) -> Poll<Result<WorkCompletion>> {
        if let Err(e) = self.ctx.check_open() {
            return Poll::Ready(Err(e));
        }
        let host = self.ctx.host().as_ref();
        let take = || {
            let mut one = Vec::with_capacity(1);
            self.ring.poll_into(host, 1, &mut one).map(|_| one.pop()).transpose()
        };
        if let Some(done) = take() {
            return Poll::Ready(done);
        }
        self.ctx.progress();
        if let Some(done) = take() {
            return Poll::Ready(done);
        }
        self.ctx.events.set_waker(self.index, cx.waker());
        self.ctx.doorbell(Doorbell::ArmCq { cq: self.index, solicited_only: false });
        if let Some(done) = take() {
            // The waker stays: the event of the arm may wake the task once
            // more, for nothing.
            return Poll::Ready(done);
        }
        self.ctx.app_sleeping();
        Poll::Pending
    }

    /// `ibv_req_notify_cq`: the next completion (or the next solicited one)
    /// raises an [`Event::Completion`](crate::Event::Completion).
    pub fn req_notify(&self, solicited_only: bool) {
        self.ctx.doorbell(Doorbell::ArmCq { cq: self.index, solicited_only });
        self.ctx.app_sleeping();
    }

    /// `ibv_resize_cq` (rxe's rxe_cq_resize_queue): moves the CQ to a ring
    /// of at least `cqe` entries, keeping the completions not yet polled, in
    /// order. EINVAL when `cqe` is 0, above the device's `max_cqe`, or below
    /// the completions the CQ holds. Returns the new depth.
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        self.ctx.check_open()?;
        if cqe == 0 || cqe > self.ctx.limits.max_cqe {
            return Err(Error::Invalid("CQ depth: cqe must be 1 to the device's max_cqe"));
        }
        // As the kernel would have by now: the work already posted that the
        // device can finish completes first, and counts.
        self.ctx.progress();
        // Under the ring's lock: no poll takes a completion the HCA is
        // copying to the new ring.
        let old = self.ring.resize(self.ctx.host().as_ref(), cqe, || {
            let ring = self.ctx.alloc_ring(cq_ring_shape(cqe))?;
            match self.ctx.command(Command::ResizeCq { cq: self.index, ring }) {
                Ok(_) => Ok(ring),
                Err(e) => {
                    self.ctx.free_ring(ring);
                    Err(e)
                }
            }
        })?;
        self.ctx.free_ring(old);
        Ok(cqe)
    }

    /// `ibv_destroy_cq`: refused (EBUSY) while QPs use it.
    pub fn destroy(self) -> core::result::Result<(), (Cq, Error)> {
        match self.ctx.command(Command::DestroyCq { cq: self.index }) {
            Ok(_) => {
                self.ctx.events.set_channel(self.index, None);
                self.ctx.events.forget_waker(self.index);
                self.ctx.free_ring(self.ring.desc());
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// The future of [`Cq::next`]: the CQ's next completion.
#[must_use = "a future does nothing unless awaited"]
pub struct Next<'a> {
    cq: &'a Cq,
}

impl Future for Next<'_> {
    type Output = Result<WorkCompletion>;

    fn poll(self: Pin<&mut Self>, cx: &mut task::Context<'_>) -> Poll<Self::Output> {
        self.cq.poll_completion(cx)
    }
}

/// `Cq` is `Send + Sync`, so a future holding `&Cq` is `Send`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Cq>();
    send_sync::<Next<'static>>();
};
