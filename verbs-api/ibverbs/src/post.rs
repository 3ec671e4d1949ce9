//! Posting work: C chains of `ibv_send_wr` / `ibv_recv_wr` become the
//! driver's `SendWr` / `RecvWr` (which write the WQEs and ring the
//! doorbell: `uroce_verbs`), and a failure names the C WR in `*bad_wr`.

use crate::abi::{ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_srq};
use crate::device::locked;
use crate::ffi::{errno, guard, EINVAL};
use crate::pd::Ah;
use crate::qp::{Qp, Srq};
use std::cell::RefCell;
use std::os::raw::c_int;
use uroce_verbs::{Lkey, Qkey, Qpn, RecvWr, RemoteTarget, Rkey, SendFlags, SendWr, Sge, WrOpcode};

/// The SGEs of a C WR, into `out` (cleared first; its capacity is kept
/// between posts).
///
/// # Safety
///
/// `list` holds `num` SGEs (or `num` is 0).
unsafe fn sges_into(list: *const ibv_sge, num: c_int, out: &mut Vec<Sge>) -> Result<(), c_int> {
    out.clear();
    let num = usize::try_from(num).map_err(|_| EINVAL)?;
    if num == 0 {
        return Ok(());
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the caller's contract.
    let list = unsafe { std::slice::from_raw_parts(list, num) };
    out.extend(list.iter().map(|s| Sge { addr: s.addr, length: s.length, lkey: Lkey(s.lkey) }));
    Ok(())
}

/// The bytes an inline send carries, into `data` (cleared first): its
/// SGEs' memory, gathered now (the program may reuse it as soon as the
/// post returns).
///
/// # Safety
///
/// Each SGE names `length` readable bytes at `addr`, as an inline send
/// promises.
unsafe fn gather_into(sges: &[Sge], data: &mut Vec<u8>) {
    data.clear();
    data.reserve(sges.iter().map(|s| s.length as usize).sum());
    for s in sges {
        // SAFETY: the caller's contract.
        let bytes =
            unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) };
        data.extend_from_slice(bytes);
    }
}

/// The driver's WR for a C send WR, written over `out` (whose SGE list
/// and inline bytes keep their capacity: no allocation once warm).
///
/// # Safety
///
/// `wr` is a valid C send WR (its SGE list, its AH, its inline memory).
unsafe fn send_wr_into(wr: &ibv_send_wr, out: &mut SendWr) -> Result<(), c_int> {
    let opcode = u8::try_from(wr.opcode).ok().and_then(WrOpcode::from_raw).ok_or(EINVAL)?;
    let mut list = std::mem::take(&mut out.sg_list);
    let inline = out.inline_data.take();
    *out = SendWr::new(wr.wr_id, opcode);
    out.flags = SendFlags(wr.send_flags & SendFlags::ALL.0);
    // SAFETY: the caller's contract.
    unsafe { sges_into(wr.sg_list, wr.num_sge, &mut list) }?;
    if out.flags.contains(SendFlags::INLINE) {
        let mut data = inline.unwrap_or_default();
        // SAFETY: the caller's contract.
        unsafe { gather_into(&list, &mut data) };
        out.inline_data = Some(data);
        list.clear();
    }
    out.sg_list = list;
    // SAFETY: the union member each opcode uses, as libibverbs reads it.
    unsafe {
        match opcode {
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
                out.imm_or_inv = u32::from_be(wr.imm_data)
            }
            WrOpcode::SendWithInv | WrOpcode::LocalInv => out.imm_or_inv = wr.imm_data,
            _ => {}
        }
        match opcode {
            WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::Flush
            | WrOpcode::AtomicWrite => {
                out.remote =
                    RemoteTarget { addr: wr.wr.rdma.remote_addr, rkey: Rkey(wr.wr.rdma.rkey) };
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let a = wr.wr.atomic;
                out.remote = RemoteTarget { addr: a.remote_addr, rkey: Rkey(a.rkey) };
                out.compare_add = a.compare_add;
                out.swap = a.swap;
            }
            WrOpcode::BindMw => {
                // SAFETY: the caller's contract: a window and an MR of
                // this library. The new key is the 8 bits the WR names.
                let b = wr.bind_mw;
                let key = b.rkey as u8;
                *out = crate::mw::bind_wr(wr.wr_id, wr.send_flags, b.mw, &b.bind_info, key)?.0;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Fills the UD destination of `out` from `wr` (UD QPs only).
///
/// # Safety
///
/// `wr.wr.ud.ah` is NULL or an AH of this library.
unsafe fn ud_dest(wr: &ibv_send_wr, out: &mut SendWr) -> Result<(), c_int> {
    // SAFETY: a UD WR's union member; the AH is the first field of an Ah.
    let ud = unsafe { wr.wr.ud };
    // SAFETY: as above.
    let ah = unsafe { ud.ah.cast::<Ah>().as_ref() }.ok_or(EINVAL)?;
    out.ud = Some((ah.c.handle, Qpn::new(ud.remote_qpn), Qkey(ud.remote_qkey)));
    Ok(())
}

/// The driver's WRs a C chain became and the C pointers they came from,
/// kept between posts (one per thread and kind): the WRs' vectors keep
/// their capacity, so a post allocates nothing once its thread has posted
/// a chain as long.
struct Scratch<T> {
    wrs: Vec<T>,
    /// The C WRs, as addresses (a thread-local holds no raw pointer).
    ptrs: Vec<usize>,
}

impl<T> Scratch<T> {
    const fn new() -> Scratch<T> {
        Scratch { wrs: Vec::new(), ptrs: Vec::new() }
    }
}

/// Chains longer than this leave no more WRs behind in the scratch.
const SCRATCH_KEPT: usize = 64;

thread_local! {
    static SENDS: RefCell<Scratch<SendWr>> = const { RefCell::new(Scratch::new()) };
    static RECVS: RefCell<Scratch<RecvWr>> = const { RefCell::new(Scratch::new()) };
}

/// Runs `f` with this thread's scratch of `key`, then trims it; with a
/// fresh one if it is in use further up the stack, or if the thread is
/// past destroying its thread-locals (a post from a TLS destructor).
fn with_scratch<T: 'static, R>(
    key: &'static std::thread::LocalKey<RefCell<Scratch<T>>>,
    f: impl FnOnce(&mut Scratch<T>) -> R,
) -> R {
    if key.try_with(|_| ()).is_err() {
        return f(&mut Scratch::new());
    }
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let r = f(&mut scratch);
            scratch.wrs.truncate(SCRATCH_KEPT);
            scratch.ptrs.clear();
            r
        }
        Err(_) => f(&mut Scratch::new()),
    })
}

/// A C work request of a chain.
trait Chained {
    /// The next WR of the chain (NULL after the last).
    fn next_wr(&self) -> *mut Self;
}

impl Chained for ibv_send_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}

impl Chained for ibv_recv_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}

/// Walks a C chain into `scratch`: its first `n` WRs become the driver's
/// (each converted over a kept one, or a `fresh` one), with their C
/// pointers, up to the first that cannot be converted (and why). Returns
/// `n`; the pointers then number `n`, or `n + 1` with the one refused.
fn collect<C: Chained, T>(
    first: *mut C,
    scratch: &mut Scratch<T>,
    fresh: fn() -> T,
    mut convert: impl FnMut(&C, &mut T) -> Result<(), c_int>,
) -> (usize, Option<c_int>) {
    scratch.ptrs.clear();
    let mut n = 0;
    let mut at = first;
    // SAFETY: the program passes a NULL-terminated chain of valid WRs.
    while let Some(wr) = unsafe { at.as_ref() } {
        if scratch.wrs.len() == n {
            scratch.wrs.push(fresh());
        }
        scratch.ptrs.push(at as usize);
        if let Err(e) = convert(wr, &mut scratch.wrs[n]) {
            return (n, Some(e));
        }
        n += 1;
        at = wr.next_wr();
    }
    (n, None)
}

/// Posts what could be converted, then reports the first failure: the WR
/// the driver refused, or the one that could not be converted.
fn finish<C>(
    posted: uroce_verbs::PostResult,
    ptrs: &[usize],
    refused: Option<c_int>,
    bad: *mut *mut C,
) -> c_int {
    let failure = match posted {
        Err((index, e)) => Some((index, errno(e))),
        Ok(()) => refused.map(|e| (ptrs.len() - 1, e)),
    };
    match failure {
        None => 0,
        Some((index, e)) => {
            if !bad.is_null() {
                // SAFETY: the program's out-pointer; the WR is one of its
                // chain.
                unsafe { *bad = ptrs[index] as *mut C };
            }
            e
        }
    }
}

/// `ops.post_send` (the inline `ibv_post_send`): an errno; `*bad_wr` is
/// the first WR not posted.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP.
        let Ok(q) = (unsafe { Qp::from_ptr(qp) }) else { return EINVAL };
        let ud = q.c.qp_base.qp_type == c_int::from(uroce_verbs::QpType::Ud.raw());
        with_scratch(&SENDS, |scratch| {
            let fresh = || SendWr::new(0, WrOpcode::Send);
            let (count, refused) = collect(wr, scratch, fresh, |w, out| {
                // SAFETY: the program's WR, valid as ibv_post_send(3) asks.
                unsafe { send_wr_into(w, out) }?;
                if ud {
                    // SAFETY: as above.
                    unsafe { ud_dest(w, out) }?;
                }
                Ok(())
            });
            let wrs = &scratch.wrs[..count];
            let guard = locked(&q.qp);
            let Some(inner) = guard.as_ref() else { return EINVAL };
            let posted = if wrs.is_empty() { Ok(()) } else { inner.post_send(wrs) };
            let posted_count = match &posted {
                Ok(()) => wrs.len(),
                Err((index, _)) => *index,
            };
            // A type-2 bind gives its window the R_Key the WR names (at
            // once, as for a type-1 bind: the window's key is what later
            // verbs use).
            for (wr, &ptr) in wrs.iter().zip(&scratch.ptrs).take(posted_count) {
                if wr.opcode == WrOpcode::BindMw {
                    let ptr = ptr as *mut ibv_send_wr;
                    // SAFETY: the program's WR; its window is this library's.
                    unsafe { crate::mw::rekey((*ptr).bind_mw.mw, (*ptr).bind_mw.rkey) };
                }
            }
            finish(posted, &scratch.ptrs, refused, bad)
        })
    })
}

/// Posts the C receive chain `wr` with `post` (a QP's or an SRQ's).
fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl FnOnce(&[RecvWr]) -> Option<uroce_verbs::PostResult>,
) -> c_int {
    with_scratch(&RECVS, |scratch| {
        let fresh = || RecvWr { wr_id: 0, sg_list: Vec::new() };
        let (count, refused) = collect(wr, scratch, fresh, |w, out| {
            out.wr_id = w.wr_id;
            // SAFETY: the program's WR, valid as ibv_post_recv(3) asks.
            unsafe { sges_into(w.sg_list, w.num_sge, &mut out.sg_list) }
        });
        let wrs = &scratch.wrs[..count];
        let posted = if wrs.is_empty() { Some(Ok(())) } else { post(wrs) };
        match posted {
            Some(posted) => finish(posted, &scratch.ptrs, refused, bad),
            None => EINVAL,
        }
    })
}

/// `ops.post_recv` (the inline `ibv_post_recv`).
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP.
        let Ok(q) = (unsafe { Qp::from_ptr(qp) }) else { return EINVAL };
        post_recv_chain(wr, bad, |wrs| locked(&q.qp).as_ref().map(|inner| inner.post_recv(wrs)))
    })
}

/// `ops.post_srq_recv` (the inline `ibv_post_srq_recv`).
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live SRQ.
        let Ok(s) = (unsafe { Srq::from_ptr(srq) }) else { return EINVAL };
        post_recv_chain(wr, bad, |wrs| locked(&s.srq).as_ref().map(|inner| inner.post_recv(wrs)))
    })
}
