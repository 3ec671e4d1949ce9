//! Posting work: C chains of `ibv_send_wr` / `ibv_recv_wr` become the
//! driver's `SendWr` / `RecvWr` (which write the WQEs and ring the
//! doorbell: `uroce_verbs`), and a failure names the C WR in `*bad_wr`.

use crate::abi::{ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_srq};
use crate::device::locked;
use crate::ffi::{errno, guard, EINVAL};
use crate::pd::Ah;
use crate::qp::{Qp, Srq};
use std::os::raw::c_int;
use uroce_verbs::{Lkey, Qkey, Qpn, RecvWr, RemoteTarget, Rkey, SendFlags, SendWr, Sge, WrOpcode};

/// The SGEs of a C WR.
///
/// # Safety
///
/// `list` holds `num` SGEs (or `num` is 0).
unsafe fn sges(list: *const ibv_sge, num: c_int) -> Result<Vec<Sge>, c_int> {
    let num = usize::try_from(num).map_err(|_| EINVAL)?;
    if num == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the caller's contract.
    let list = unsafe { std::slice::from_raw_parts(list, num) };
    Ok(list.iter().map(|s| Sge { addr: s.addr, length: s.length, lkey: Lkey(s.lkey) }).collect())
}

/// The bytes an inline send carries: its SGEs' memory, gathered now (the
/// program may reuse it as soon as the post returns).
///
/// # Safety
///
/// Each SGE names `length` readable bytes at `addr`, as an inline send
/// promises.
unsafe fn gather(sges: &[Sge]) -> Vec<u8> {
    let mut data = Vec::with_capacity(sges.iter().map(|s| s.length as usize).sum());
    for s in sges {
        // SAFETY: the caller's contract.
        let bytes =
            unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) };
        data.extend_from_slice(bytes);
    }
    data
}

/// The driver's WR for a C send WR.
///
/// # Safety
///
/// `wr` is a valid C send WR (its SGE list, its AH, its inline memory).
unsafe fn send_wr(wr: &ibv_send_wr) -> Result<SendWr, c_int> {
    let opcode = u8::try_from(wr.opcode).ok().and_then(WrOpcode::from_raw).ok_or(EINVAL)?;
    let mut out = SendWr::new(wr.wr_id, opcode);
    out.flags = SendFlags(wr.send_flags & SendFlags::ALL.0);
    // SAFETY: the caller's contract.
    let list = unsafe { sges(wr.sg_list, wr.num_sge) }?;
    if out.flags.contains(SendFlags::INLINE) {
        // SAFETY: the caller's contract.
        out.inline_data = Some(unsafe { gather(&list) });
    } else {
        out.sg_list = list;
    }
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
                out = crate::mw::bind_wr(wr.wr_id, wr.send_flags, b.mw, &b.bind_info, key)?.0;
            }
            _ => {}
        }
    }
    Ok(out)
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

/// Walks a C chain: the WRs as the driver's, each with its C pointer, up
/// to the first that cannot be converted (and why).
fn collect<C, T>(
    first: *mut C,
    next: impl Fn(&C) -> *mut C,
    mut convert: impl FnMut(&C) -> Result<T, c_int>,
) -> (Vec<T>, Vec<*mut C>, Option<c_int>) {
    let (mut wrs, mut ptrs) = (Vec::new(), Vec::new());
    let mut at = first;
    // SAFETY: the program passes a NULL-terminated chain of valid WRs.
    while let Some(wr) = unsafe { at.as_ref() } {
        match convert(wr) {
            Ok(w) => wrs.push(w),
            Err(e) => {
                ptrs.push(at);
                return (wrs, ptrs, Some(e));
            }
        }
        ptrs.push(at);
        at = next(wr);
    }
    (wrs, ptrs, None)
}

/// Posts what could be converted, then reports the first failure: the WR
/// the driver refused, or the one that could not be converted.
fn finish<C>(
    posted: uroce_verbs::PostResult,
    ptrs: &[*mut C],
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
                // SAFETY: the program's out-pointer.
                unsafe { *bad = ptrs[index] };
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
        let (wrs, ptrs, refused) = collect(
            wr,
            |w| w.next,
            |w| {
                // SAFETY: the program's WR, valid as ibv_post_send(3) asks.
                let mut out = unsafe { send_wr(w) }?;
                if ud {
                    // SAFETY: as above.
                    unsafe { ud_dest(w, &mut out) }?;
                }
                Ok(out)
            },
        );
        let guard = locked(&q.qp);
        let Some(inner) = guard.as_ref() else { return EINVAL };
        let posted = if wrs.is_empty() { Ok(()) } else { inner.post_send(&wrs) };
        let count = match &posted {
            Ok(()) => wrs.len(),
            Err((index, _)) => *index,
        };
        // A type-2 bind gives its window the R_Key the WR names (at once,
        // as for a type-1 bind: the window's key is what later verbs use).
        for (wr, &ptr) in wrs.iter().zip(&ptrs).take(count) {
            if wr.opcode == WrOpcode::BindMw {
                // SAFETY: the program's WR; its window is this library's.
                unsafe { crate::mw::rekey((*ptr).bind_mw.mw, (*ptr).bind_mw.rkey) };
            }
        }
        finish(posted, &ptrs, refused, bad)
    })
}

fn recv_chain(wr: *mut ibv_recv_wr) -> (Vec<RecvWr>, Vec<*mut ibv_recv_wr>, Option<c_int>) {
    collect(
        wr,
        |w| w.next,
        |w| {
            // SAFETY: the program's WR, valid as ibv_post_recv(3) asks.
            let sg_list = unsafe { sges(w.sg_list, w.num_sge) }?;
            Ok(RecvWr { wr_id: w.wr_id, sg_list })
        },
    )
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
        let (wrs, ptrs, refused) = recv_chain(wr);
        let guard = locked(&q.qp);
        let Some(inner) = guard.as_ref() else { return EINVAL };
        let posted = if wrs.is_empty() { Ok(()) } else { inner.post_recv(&wrs) };
        finish(posted, &ptrs, refused, bad)
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
        let (wrs, ptrs, refused) = recv_chain(wr);
        let guard = locked(&s.srq);
        let Some(inner) = guard.as_ref() else { return EINVAL };
        let posted = if wrs.is_empty() { Ok(()) } else { inner.post_recv(&wrs) };
        finish(posted, &ptrs, refused, bad)
    })
}
