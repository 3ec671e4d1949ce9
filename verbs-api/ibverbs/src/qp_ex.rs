//! The extended QP: `ibv_create_qp_ex`, `ibv_qp_to_qp_ex` and the
//! `ibv_wr_*` calls. Between `ibv_wr_start` and `ibv_wr_complete` each
//! `ibv_wr_<op>` call starts a WR (its `wr_id` and `wr_flags` are those of
//! the `ibv_qp_ex` at the call), the setters complete it, and
//! `ibv_wr_complete` posts the batch through the driver as one chain.

use crate::abi::{ibv_ah, ibv_context, ibv_data_buf, ibv_mw, ibv_mw_bind_info, ibv_qp};
use crate::abi::{ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_sge};
use crate::device::locked;
use crate::ffi::{errno, guard, guard_ptr, EINVAL, EOPNOTSUPP};
use crate::pd::Ah;
use crate::qp::{new_qp, Qp};
use std::os::raw::{c_int, c_void};
use uroce_verbs::{Lkey, Qkey, Qpn, RemoteTarget, Rkey, SendFlags, SendWr, Sge, WrOpcode};

/// `IBV_QP_INIT_ATTR_PD`, `_CREATE_FLAGS`, `_SEND_OPS_FLAGS`: what
/// `ibv_create_qp_ex` takes (XRC domains, TSO, RSS are not offered).
const INIT_ATTR_PD: u32 = 1;
const INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// The WRs of a batch, and the first mistake in it (reported by
/// `ibv_wr_complete`, which then posts nothing).
#[derive(Default)]
pub struct Batch {
    wrs: Vec<SendWr>,
    error: c_int,
}

/// Fills the `ibv_wr_*` functions of a QP's C face.
pub fn set_ops(c: &mut ibv_qp_ex) {
    c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    c.wr_bind_mw = Some(wr_bind_mw);
    c.wr_local_inv = Some(wr_local_inv);
    c.wr_rdma_read = Some(wr_rdma_read);
    c.wr_rdma_write = Some(wr_rdma_write);
    c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    c.wr_send = Some(wr_send);
    c.wr_send_imm = Some(wr_send_imm);
    c.wr_send_inv = Some(wr_send_inv);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
    c.wr_atomic_write = Some(wr_atomic_write);
}

/// `verbs_context.create_qp_ex` (the inline `ibv_create_qp_ex`).
pub unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard_ptr(|| {
        // SAFETY: the caller passes its attributes.
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        let known = INIT_ATTR_PD | INIT_ATTR_CREATE_FLAGS | INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & INIT_ATTR_PD == 0 {
            return Err(EINVAL);
        }
        if a.comp_mask & !known != 0
            || (a.comp_mask & INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        {
            return Err(EOPNOTSUPP);
        }
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let qp = new_qp(a.pd, &mut init)?;
        a.cap = init.cap;
        Ok(qp.cast())
    })
}

/// `ibv_qp_to_qp_ex`: every QP of the library has the extended face.
pub unsafe extern "C" fn qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    qp.cast()
}

/// Runs `f` on the QP's batch (nothing if the QP is not ours).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut Batch, &ibv_qp_ex)) {
    guard((), || {
        // SAFETY: the program passes a QP of this library.
        if let Ok(q) = unsafe { Qp::from_ptr(qp.cast::<ibv_qp>()) } {
            f(&mut locked(&q.batch), &q.c);
        }
    })
}

/// Starts a WR of `opcode` (its id and flags from the QP's face), set up
/// by `fill`.
fn start(qp: *mut ibv_qp_ex, opcode: WrOpcode, fill: impl FnOnce(&mut SendWr)) {
    with_batch(qp, |batch, c| {
        let mut wr = SendWr::new(c.wr_id, opcode);
        wr.flags = SendFlags(c.wr_flags & SendFlags::ALL.0);
        fill(&mut wr);
        batch.wrs.push(wr);
    });
}

/// Changes the WR started last (a mistake if there is none).
fn last(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr) -> Result<(), c_int>) {
    with_batch(qp, |batch, _| {
        let result = batch.wrs.last_mut().ok_or(EINVAL).and_then(f);
        if let Err(e) = result {
            if batch.error == 0 {
                batch.error = e;
            }
        }
    });
}

fn remote(rkey: u32, addr: u64) -> RemoteTarget {
    RemoteTarget { addr, rkey: Rkey(rkey) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    cmp: u64,
    swap: u64,
) {
    start(qp, WrOpcode::AtomicCmpAndSwp, |wr| {
        wr.remote = remote(rkey, addr);
        wr.compare_add = cmp;
        wr.swap = swap;
    });
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    start(qp, WrOpcode::AtomicFetchAndAdd, |wr| {
        wr.remote = remote(rkey, addr);
        wr.compare_add = add;
    });
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    data: *const c_void,
) {
    // SAFETY: `atomic_wr` points at the 8 bytes to write.
    let bytes = unsafe { data.cast::<[u8; 8]>().as_ref() }.copied();
    start(qp, WrOpcode::AtomicWrite, |wr| {
        wr.remote = remote(rkey, addr);
        wr.inline_data = bytes.map(|b| b.to_vec());
    });
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    with_batch(qp, |batch, c| {
        // SAFETY: the program passes a window and bind information of
        // this library.
        let result = unsafe { info.as_ref() }.ok_or(EINVAL).and_then(|info| {
            // SAFETY: as above.
            unsafe { crate::mw::bind_wr(c.wr_id, c.wr_flags, mw, info, rkey as u8) }
        });
        match result {
            Ok((wr, _)) => {
                batch.wrs.push(wr);
                // SAFETY: the program's window: its key is the WR's.
                unsafe { crate::mw::rekey(mw, rkey) };
            }
            Err(e) if batch.error == 0 => batch.error = e,
            Err(_) => {}
        }
    });
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    start(qp, WrOpcode::LocalInv, |wr| wr.imm_or_inv = rkey);
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    start(qp, WrOpcode::RdmaRead, |wr| wr.remote = remote(rkey, addr));
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    start(qp, WrOpcode::RdmaWrite, |wr| wr.remote = remote(rkey, addr));
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    start(qp, WrOpcode::RdmaWriteWithImm, |wr| {
        wr.remote = remote(rkey, addr);
        wr.imm_or_inv = u32::from_be(imm);
    });
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    start(qp, WrOpcode::Send, |_| {});
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    start(qp, WrOpcode::SendWithImm, |wr| wr.imm_or_inv = u32::from_be(imm));
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    start(qp, WrOpcode::SendWithInv, |wr| wr.imm_or_inv = rkey);
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    last(qp, |wr| {
        // SAFETY: the program passes an AH of this library.
        let ah = unsafe { ah.cast::<Ah>().as_ref() }.ok_or(EINVAL)?;
        wr.ud = Some((ah.c.handle, Qpn::new(qpn), Qkey(qkey)));
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(qp, |wr| {
        wr.sg_list = vec![Sge { addr, length, lkey: Lkey(lkey) }];
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num: usize, list: *const ibv_sge) {
    last(qp, |wr| {
        if num > 0 && list.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the program's array of `num` SGEs.
        let list =
            if num == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(list, num) } };
        wr.sg_list = list
            .iter()
            .map(|s| Sge { addr: s.addr, length: s.length, lkey: Lkey(s.lkey) })
            .collect();
        Ok(())
    });
}

/// Copies the program's inline buffers now (it may reuse them at once).
///
/// # Safety
///
/// Each buffer is `length` readable bytes.
unsafe fn set_inline(wr: &mut SendWr, bufs: &[(*const u8, usize)]) -> Result<(), c_int> {
    let mut data = Vec::new();
    for &(addr, len) in bufs {
        if len > 0 {
            if addr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the caller's contract.
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(addr, len) });
        }
    }
    wr.inline_data = Some(data);
    wr.flags = wr.flags.with(SendFlags::INLINE);
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: the program's buffer of `length` bytes.
    last(qp, |wr| unsafe { set_inline(wr, &[(addr.cast_const().cast(), length)]) });
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num: usize,
    list: *const ibv_data_buf,
) {
    last(qp, |wr| {
        if num > 0 && list.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the program's array of `num` buffers.
        let list =
            if num == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(list, num) } };
        let bufs: Vec<_> = list.iter().map(|b| (b.addr.cast_const().cast(), b.length)).collect();
        // SAFETY: each buffer is the program's, `length` bytes.
        unsafe { set_inline(wr, &bufs) }
    });
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_batch(qp, |batch, _| *batch = Batch::default());
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_batch(qp, |batch, _| *batch = Batch::default());
}

/// `ibv_wr_complete`: posts the batch; an errno.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the program passes a QP of this library.
        let Ok(q) = (unsafe { Qp::from_ptr(qp.cast::<ibv_qp>()) }) else { return EINVAL };
        let batch = std::mem::take(&mut *locked(&q.batch));
        if batch.error != 0 {
            return batch.error;
        }
        if batch.wrs.is_empty() {
            return 0;
        }
        let guard = locked(&q.qp);
        let Some(inner) = guard.as_ref() else { return EINVAL };
        match inner.post_send(&batch.wrs) {
            Ok(()) => 0,
            Err((_, e)) => errno(e),
        }
    })
}
