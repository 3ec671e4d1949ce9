//! Completion queues and channels: create, poll, arm, events (completion
//! and asynchronous), destroy.

use crate::abi::{ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_cq_ex, ibv_wc};
use crate::device::{locked, Ctx};
use crate::ffi::{errno, guard, guard_errno, guard_ptr, set_errno, EINVAL};
use std::os::fd::AsRawFd;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;
use uroce_verbs::{Event, WcFlags, WorkCompletion};

/// A completion channel: the `ibv_comp_channel` C sees, then the driver's.
#[repr(C)]
pub struct Channel {
    pub c: ibv_comp_channel,
    pub channel: uroce_verbs::CompChannel,
}

/// `ibv_create_comp_channel`. Its descriptor is an eventfd, readable while
/// an event waits (`poll`, `epoll`, `select` work on it). It starts
/// blocking, as rdma-core's: `ibv_get_cq_event` waits for it to become
/// readable, or answers EAGAIN if the program made it `O_NONBLOCK` (the
/// driver only reads it when readable, so either mode is safe inside).
pub unsafe extern "C" fn create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard_ptr(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        let channel = ctx.shared.verbs.create_comp_channel().map_err(errno)?;
        let fd = channel.as_raw_fd();
        // SAFETY: fcntl F_GETFL/F_SETFL on the channel's own descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(errno_now());
        }
        let c = ibv_comp_channel { context, fd, refcnt: 0 };
        Ok(Box::into_raw(Box::new(Channel { c, channel })).cast())
    })
}

/// The calling thread's errno (EIO if there is none).
fn errno_now() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Whether the program made `fd` non-blocking.
fn is_nonblocking(fd: c_int) -> bool {
    // SAFETY: fcntl F_GETFL on a descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// The longest a blocking wait sleeps before it looks again.
const WAIT_BOUND_MS: c_int = 100;

/// Waits until `fd` is readable or `timeout_ms` passed.
fn wait_readable(fd: c_int, timeout_ms: c_int) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd on the stack.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
pub unsafe extern "C" fn destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard_errno(|| {
        // SAFETY: the ibv_comp_channel is the first field of a Channel.
        let ch = unsafe { channel.cast::<Channel>().as_ref() }.ok_or(EINVAL)?;
        if ch.c.refcnt > 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: allocated by create_comp_channel; freed once.
        drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
        Ok(())
    })
}

/// A CQ: the `ibv_cq_ex` C sees (an `ibv_cq` followed by the extended
/// polling functions: every CQ has them), then the driver's.
#[repr(C)]
pub struct Cq {
    pub c: ibv_cq_ex,
    pub cq: Mutex<Option<uroce_verbs::Cq>>,
    pub index: u32,
    /// Serialises pollers and event acknowledgements; holds the pollers'
    /// buffer of completions (kept, so that a poll does not allocate).
    polling: Mutex<Vec<uroce_verbs::WorkCompletion>>,
    /// The completion `ibv_start_poll`/`ibv_next_poll` made current.
    pub current: Mutex<ibv_wc>,
}

impl Cq {
    /// # Safety
    ///
    /// `cq` is NULL or came from [`create_cq`] (or `create_cq_ex`) and is
    /// not destroyed.
    pub unsafe fn from_ptr<'a>(cq: *mut ibv_cq) -> Result<&'a Cq, c_int> {
        // SAFETY: the ibv_cq is the first field of a Cq.
        unsafe { cq.cast::<Cq>().as_ref() }.ok_or(EINVAL)
    }

    /// Removes the completions of QP `qpn` not yet polled (a QP moved to
    /// RESET), locked as a poller is.
    pub fn discard_completions_of(&self, qpn: uroce_verbs::Qpn) {
        let _one_poller = locked(&self.polling);
        if let Some(cq) = locked(&self.cq).as_ref() {
            // A ring that cannot be read keeps what it has: polling it
            // reports that.
            let _ = cq.discard_completions_of(qpn);
        }
    }

    /// Creates a CQ of at least `cqe` entries on `context` (checked by the
    /// caller), with its C face.
    pub fn create(
        ctx: &Ctx,
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> Result<*mut Cq, c_int> {
        // SAFETY: the caller passes NULL or a channel of this library.
        let ch = unsafe { channel.cast::<Channel>().as_mut() };
        if !(0..ctx.vctx.context.num_comp_vectors).contains(&comp_vector) {
            return Err(EINVAL);
        }
        let depth = u32::try_from(cqe).map_err(|_| EINVAL)?;
        let verbs = &ctx.shared.verbs;
        let cq = match &ch {
            Some(ch) => verbs.create_cq_with_channel(depth, &ch.channel),
            None => verbs.create_cq(depth),
        }
        .map_err(errno)?;
        if let Some(ch) = ch {
            ch.c.refcnt += 1;
        }
        let index = cq.index();
        // SAFETY: ibv_cq_ex is pointers, integers, NULL-able function
        // pointers and all-zero pthread objects (their static initializer).
        let mut c: ibv_cq_ex = unsafe { std::mem::zeroed() };
        c.cq.context = context;
        c.cq.channel = channel;
        c.cq.cq_context = cq_context;
        c.cq.handle = index;
        c.cq.cqe = cqe;
        crate::cq_ex::set_ops(&mut c);
        let boxed = Box::new(Cq {
            c,
            cq: Mutex::new(Some(cq)),
            index,
            polling: Mutex::new(Vec::new()),
            current: Mutex::new(ibv_wc::default()),
        });
        let ptr = Box::into_raw(boxed);
        locked(&ctx.shared.cqs).insert(index, ptr as usize);
        Ok(ptr)
    }
}

/// `ibv_create_cq`.
pub unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard_ptr(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        Ok(Cq::create(ctx, context, cqe, cq_context, channel, comp_vector)?.cast())
    })
}

/// `ibv_destroy_cq`: EBUSY while QPs use it.
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live CQ.
        let q = unsafe { Cq::from_ptr(cq) }?;
        // SAFETY: its context is open while the CQ lives.
        let ctx = unsafe { Ctx::from_ptr(q.c.cq.context) }?;
        let inner = locked(&q.cq).take().ok_or(EINVAL)?;
        if let Err((inner, e)) = inner.destroy() {
            *locked(&q.cq) = Some(inner);
            return Err(errno(e));
        }
        locked(&ctx.shared.cqs).remove(&q.index);
        // SAFETY: the channel outlives the CQs on it (EBUSY above).
        if let Some(ch) = unsafe { q.c.cq.channel.cast::<Channel>().as_mut() } {
            ch.c.refcnt -= 1;
        }
        // SAFETY: allocated by create_cq; freed once.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
        Ok(())
    })
}

/// `ibv_resize_cq` (rxe's): at least `cqe` entries, the completions not
/// yet polled kept in order; EINVAL below them or above `max_cqe`. The new
/// depth is written to `cq->cqe`.
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard_errno(|| {
        let depth = u32::try_from(cqe).map_err(|_| EINVAL)?;
        let depth = {
            // SAFETY: the caller passes a live CQ.
            let q = unsafe { Cq::from_ptr(cq) }?;
            let _one_poller = locked(&q.polling);
            let guard = locked(&q.cq);
            guard.as_ref().ok_or(EINVAL)?.resize(depth).map_err(errno)?
        };
        let depth = c_int::try_from(depth).map_err(|_| EINVAL)?;
        // SAFETY: the CQ is live (the caller's); no reference to it is held
        // here any more.
        unsafe { (*cq).cqe = depth };
        Ok(())
    })
}

/// The C completion of a CQE.
pub fn wc_from(w: &WorkCompletion) -> ibv_wc {
    let imm_data =
        if w.flags.contains(WcFlags::WITH_IMM) { w.imm_or_inv.to_be() } else { w.imm_or_inv };
    ibv_wc {
        wr_id: w.wr_id,
        status: c_int::from(w.status.raw()),
        opcode: c_int::from(w.opcode.raw()),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data,
        qp_num: w.qp_num.value(),
        src_qp: w.src_qp.value(),
        wc_flags: w.flags.0,
        pkey_index: w.pkey_index,
        ..ibv_wc::default()
    }
}

/// `ops.poll_cq` (the inline `ibv_poll_cq`): the number of completions
/// written, or a negative errno.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-libc::EIO, || {
        // SAFETY: the caller passes a live CQ.
        let Ok(q) = (unsafe { Cq::from_ptr(cq) }) else { return -EINVAL };
        let Ok(max) = usize::try_from(num) else { return -EINVAL };
        if max == 0 {
            return 0;
        }
        if wc.is_null() {
            return -EINVAL;
        }
        let mut done = locked(&q.polling);
        done.clear();
        let guard = locked(&q.cq);
        let Some(inner) = guard.as_ref() else { return -EINVAL };
        match inner.poll_into(max, &mut done) {
            Ok(_) => {
                for (i, w) in done.iter().enumerate() {
                    // SAFETY: the caller's array holds `num` entries; the
                    // ring gave at most that many.
                    unsafe { wc.add(i).write(wc_from(w)) };
                }
                done.len() as c_int
            }
            Err(e) => -errno(e),
        }
    })
}

/// `ops.req_notify_cq` (the inline `ibv_req_notify_cq`).
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live CQ.
        let q = unsafe { Cq::from_ptr(cq) }?;
        let guard = locked(&q.cq);
        guard.as_ref().ok_or(EINVAL)?.req_notify(solicited_only != 0);
        Ok(())
    })
}

/// `ibv_get_cq_event`: blocks until a CQ on the channel has a completion
/// event, or -1 with errno EAGAIN if none waits and the program made the
/// channel's descriptor `O_NONBLOCK` (looked up at each call).
pub unsafe extern "C" fn get_cq_event(
    channel: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: the ibv_comp_channel is the first field of a Channel.
        let Some(ch) = (unsafe { channel.cast::<Channel>().as_ref() }) else {
            set_errno(EINVAL);
            return -1;
        };
        // SAFETY: the channel's context is open while it lives.
        let Ok(ctx) = (unsafe { Ctx::from_ptr(ch.c.context) }) else {
            set_errno(EINVAL);
            return -1;
        };
        loop {
            if let Some(index) = ch.channel.get_cq_event() {
                let Some(&ptr) = locked(&ctx.shared.cqs).get(&index) else {
                    continue; // the CQ was destroyed since
                };
                let cq = ptr as *mut ibv_cq;
                // SAFETY: the caller passes two out-pointers; the CQ is live
                // (it is in the map).
                unsafe {
                    if !cq_out.is_null() {
                        *cq_out = cq;
                    }
                    if !cq_context.is_null() {
                        *cq_context = (*cq).cq_context;
                    }
                }
                return 0;
            }
            if is_nonblocking(ch.c.fd) {
                set_errno(libc::EAGAIN);
                return -1;
            }
            ctx.shared.sleeping();
            // Woken by the event; the bound only keeps a missed wake-up from
            // becoming a hang.
            wait_readable(ch.c.fd, WAIT_BOUND_MS);
        }
    })
}

/// `ibv_ack_cq_events`.
pub unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    // SAFETY: the caller passes a live CQ.
    if let Ok(q) = unsafe { Cq::from_ptr(cq) } {
        let _lock = locked(&q.polling);
        // SAFETY: the counter is only written here, under the CQ's lock,
        // through the pointer create_cq handed out.
        unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents) };
    }
}

/// `ibv_get_async_event`: blocks until the device raises an asynchronous
/// event (unless the program made `async_fd` non-blocking: EAGAIN).
pub unsafe extern "C" fn get_async_event(
    context: *mut ibv_context,
    out: *mut ibv_async_event,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes an open context.
        let Ok(ctx) = (unsafe { Ctx::from_ptr(context) }) else {
            set_errno(EINVAL);
            return -1;
        };
        if out.is_null() {
            set_errno(EINVAL);
            return -1;
        }
        loop {
            match ctx.shared.verbs.next_event() {
                Some(Event::Async { event, element }) => {
                    let kind = event.raw();
                    let map = match kind {
                        0 => Some(&ctx.shared.cqs),
                        14 | 15 => Some(&ctx.shared.srqs),
                        9 | 10 => None,
                        _ => Some(&ctx.shared.qps),
                    };
                    let element = match map {
                        Some(map) => match locked(map).get(&element) {
                            Some(&ptr) => ptr as *mut c_void,
                            None => continue,
                        },
                        None => element as usize as *mut c_void,
                    };
                    // SAFETY: checked non-NULL.
                    unsafe {
                        out.write(ibv_async_event { element, event_type: c_int::from(kind) })
                    };
                    return 0;
                }
                Some(Event::Completion { .. }) => continue,
                None => {
                    if is_nonblocking(ctx.vctx.context.async_fd) {
                        set_errno(libc::EAGAIN);
                        return -1;
                    }
                    ctx.shared.sleeping();
                    // Readable once an event is queued; the bound only keeps
                    // a missed wake-up from becoming a hang.
                    wait_readable(ctx.vctx.context.async_fd, WAIT_BOUND_MS);
                }
            }
        }
    })
}

/// `ibv_ack_async_event`: nothing to release.
pub unsafe extern "C" fn ack_async_event(_event: *mut ibv_async_event) {}
