//! The extended CQ (`ibv_create_cq_ex`, `ibv_start_poll`, `ibv_next_poll`,
//! `ibv_end_poll`, `ibv_wc_read_*`): every CQ of the library carries these
//! functions; a poll makes one completion current and the reads return
//! its fields.

use crate::abi::{ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_poll_cq_attr, ibv_wc};
use crate::cq::{wc_from, Cq};
use crate::device::{locked, Ctx};
use crate::ffi::{errno, guard, guard_ptr, EINVAL, ENOENT, EOPNOTSUPP};
use std::os::raw::c_int;

/// `IBV_WC_STANDARD_FLAGS`: the fields every completion has.
const STANDARD_WC_FLAGS: u64 = 0x7f;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS` (single-threaded, ignore overrun: hints
/// uroce may ignore) and `IBV_CQ_INIT_ATTR_MASK_PD` (a parent domain whose
/// allocators the device does not need).
const INIT_ATTR_MASK_KNOWN: u32 = 1 | 2;

/// Fills the extended functions of a CQ's C face.
pub fn set_ops(c: &mut ibv_cq_ex) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// `verbs_context.create_cq_ex` (the inline `ibv_create_cq_ex`).
pub unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard_ptr(|| {
        // SAFETY: the caller passes an open context and its attributes.
        let (ctx, a) = unsafe { (Ctx::from_ptr(context)?, attr.as_ref().ok_or(EINVAL)?) };
        if a.wc_flags & !STANDARD_WC_FLAGS != 0 || a.comp_mask & !INIT_ATTR_MASK_KNOWN != 0 {
            return Err(EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| EINVAL)?;
        let vector = c_int::try_from(a.comp_vector).map_err(|_| EINVAL)?;
        Ok(Cq::create(ctx, context, cqe, a.cq_context, a.channel, vector)?.cast())
    })
}

/// Makes the next completion current: 0, ENOENT when there is none.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the program passes a CQ of this library.
        let Ok(q) = (unsafe { Cq::from_ptr(cq.cast::<ibv_cq>()) }) else { return EINVAL };
        let guard = locked(&q.cq);
        let Some(inner) = guard.as_ref() else { return EINVAL };
        match inner.poll(1) {
            Ok(done) => match done.first() {
                Some(w) => {
                    let wc = wc_from(w);
                    *locked(&q.current) = wc;
                    // SAFETY: the pointer create_cq handed out: C reads
                    // `status` and `wr_id` directly.
                    unsafe {
                        (*cq).status = wc.status;
                        (*cq).wr_id = wc.wr_id;
                    }
                    0
                }
                None => ENOENT,
            },
            Err(e) => errno(e),
        }
    })
}

/// `ibv_start_poll`.
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: NULL or the caller's attributes.
    if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
        return EINVAL;
    }
    advance(cq)
}

/// `ibv_next_poll`.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    advance(cq)
}

/// `ibv_end_poll`: nothing is held between polls.
unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// The current completion's field `f`.
fn current<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: the program passes a CQ of this library.
    match unsafe { Cq::from_ptr(cq.cast::<ibv_cq>()) } {
        Ok(q) => f(&locked(&q.current)),
        Err(_) => T::default(),
    }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_int {
    current(cq, |w| w.opcode)
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.imm_data)
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| w.wc_flags)
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |w| u32::from(w.slid))
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    current(cq, |w| w.sl)
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    current(cq, |w| w.dlid_path_bits)
}
