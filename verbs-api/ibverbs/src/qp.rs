//! Queue pairs and shared receive queues: create, modify, query, destroy.

use crate::abi::ibv_qp_init_attr;
use crate::abi::{ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_ex};
use crate::abi::{ibv_srq, ibv_srq_attr, ibv_srq_init_attr};
use crate::cq::Cq;
use crate::device::{locked, Ctx};
use crate::ffi::{errno, guard_errno, guard_ptr, EINVAL};
use crate::pd::{ah_attr_from_c, ah_attr_to_c, device_access, Pd};
use std::os::raw::c_int;
use std::sync::Mutex;
use uroce_verbs::{AttrMask, Gid, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType};

/// The bytes of one SGE in a send WQE: a QP that asks for less inline
/// data gets this much (as rxe, whose inline space is its SGE space).
const SGE_BYTES: u32 = 16;

/// A QP: the `ibv_qp_ex` C sees (an `ibv_qp` followed by the `ibv_wr_*`
/// functions: every QP has them), then the driver's.
#[repr(C)]
pub struct Qp {
    pub c: ibv_qp_ex,
    pub qp: Mutex<Option<uroce_verbs::Qp>>,
    /// The sizes it was created with (after rounding).
    pub cap: ibv_qp_cap,
    pub sq_sig_all: c_int,
    /// The WRs between `ibv_wr_start` and `ibv_wr_complete`.
    pub batch: Mutex<crate::qp_ex::Batch>,
}

impl Qp {
    /// # Safety
    ///
    /// `qp` is NULL or came from [`create_qp`] (or `create_qp_ex`) and is
    /// not destroyed.
    pub unsafe fn from_ptr<'a>(qp: *mut ibv_qp) -> Result<&'a Qp, c_int> {
        // SAFETY: the ibv_qp is the first field of a Qp.
        unsafe { qp.cast::<Qp>().as_ref() }.ok_or(EINVAL)
    }
}

/// An SRQ: the `ibv_srq` C sees, then the driver's.
#[repr(C)]
pub struct Srq {
    pub c: ibv_srq,
    pub srq: Mutex<Option<uroce_verbs::Srq>>,
    pub attr: Mutex<ibv_srq_attr>,
}

impl Srq {
    /// # Safety
    ///
    /// `srq` is NULL or came from [`create_srq`] and is not destroyed.
    pub unsafe fn from_ptr<'a>(srq: *mut ibv_srq) -> Result<&'a Srq, c_int> {
        // SAFETY: the ibv_srq is the first field of an Srq.
        unsafe { srq.cast::<Srq>().as_ref() }.ok_or(EINVAL)
    }
}

fn cq_of<'a>(cq: *mut ibv_cq) -> Result<&'a Cq, c_int> {
    // SAFETY: the caller of the verb passes live CQs.
    unsafe { Cq::from_ptr(cq) }
}

/// `ibv_create_qp`.
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard_ptr(|| {
        // SAFETY: the caller passes its attributes.
        let init = unsafe { init.as_mut() }.ok_or(EINVAL)?;
        Ok(new_qp(pd, init)?.cast())
    })
}

/// Creates a QP in `pd` as `init` asks (its `cap` is updated to what the
/// QP got), with its C face.
pub fn new_qp(pd: *mut ibv_pd, init: &mut ibv_qp_init_attr) -> Result<*mut Qp, c_int> {
    // SAFETY: the caller of the verb passes a live PD.
    let p = unsafe { Pd::from_ptr(pd) }?;
    let qp_type = QpType::from_raw(u8::try_from(init.qp_type).map_err(|_| EINVAL)?)
        .ok_or(libc::EOPNOTSUPP)?;
    let (send, recv) = (cq_of(init.send_cq)?, cq_of(init.recv_cq)?);
    // SAFETY: NULL or a live SRQ.
    let srq = unsafe { init.srq.cast::<Srq>().as_ref() };
    let mut cap = init.cap;
    cap.max_inline_data = cap.max_inline_data.max(cap.max_send_sge.max(1) * SGE_BYTES);
    let send_guard = locked(&send.cq);
    let recv_guard = (init.recv_cq != init.send_cq).then(|| locked(&recv.cq));
    let srq_guard = srq.map(|s| locked(&s.srq));
    let send_cq = send_guard.as_ref().ok_or(EINVAL)?;
    let recv_cq = match &recv_guard {
        Some(g) => g.as_ref().ok_or(EINVAL)?,
        None => send_cq,
    };
    let srq_ref = match &srq_guard {
        Some(g) => Some(g.as_ref().ok_or(EINVAL)?),
        None => None,
    };
    let attr = QpInitAttr {
        qp_type,
        send_cq,
        recv_cq,
        srq: srq_ref,
        cap: QpCap {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        },
        sq_sig_all: init.sq_sig_all != 0,
    };
    let qp = locked(&p.pd).create_qp(&attr).map_err(errno)?;
    drop((send_guard, recv_guard, srq_guard));
    init.cap = cap;
    let qpn = qp.qpn().value();
    // SAFETY: ibv_qp_ex is pointers, integers, NULL-able function
    // pointers and all-zero pthread objects (their static initializer).
    let mut c: ibv_qp_ex = unsafe { std::mem::zeroed() };
    c.qp_base.context = p.c.context;
    c.qp_base.qp_context = init.qp_context;
    c.qp_base.pd = pd;
    c.qp_base.send_cq = init.send_cq;
    c.qp_base.recv_cq = init.recv_cq;
    c.qp_base.srq = init.srq;
    c.qp_base.handle = qpn;
    c.qp_base.qp_num = qpn;
    c.qp_base.state = 0;
    c.qp_base.qp_type = init.qp_type;
    crate::qp_ex::set_ops(&mut c);
    let boxed = Box::new(Qp {
        c,
        qp: Mutex::new(Some(qp)),
        cap,
        sq_sig_all: init.sq_sig_all,
        batch: Mutex::new(crate::qp_ex::Batch::default()),
    });
    let ptr = Box::into_raw(boxed);
    // SAFETY: the PD's context is open.
    let ctx = unsafe { Ctx::from_ptr(p.c.context) }?;
    locked(&ctx.shared.qps).insert(qpn, ptr as usize);
    Ok(ptr)
}

fn state(raw: c_int) -> Result<QpState, c_int> {
    u8::try_from(raw).ok().and_then(QpState::from_raw).ok_or(EINVAL)
}

/// The driver's attributes for a C `ibv_qp_attr` and mask.
fn qp_attr_from_c(a: &ibv_qp_attr, mask: AttrMask) -> Result<QpAttr, c_int> {
    let mut attr = QpAttr::default();
    if mask.contains(AttrMask::STATE) {
        attr.qp_state = Some(state(a.qp_state)?);
    }
    if mask.contains(AttrMask::CUR_STATE) {
        attr.cur_qp_state = Some(state(a.cur_qp_state)?);
    }
    if mask.contains(AttrMask::PATH_MTU) {
        let mtu = u8::try_from(a.path_mtu).ok().and_then(Mtu::from_raw).ok_or(EINVAL)?;
        attr.path_mtu = Some(mtu);
    }
    if mask.contains(AttrMask::AV) {
        attr.ah_attr = ah_attr_from_c(&a.ah_attr)?;
    }
    attr.qkey = a.qkey;
    attr.rq_psn = a.rq_psn;
    attr.sq_psn = a.sq_psn;
    attr.dest_qp_num = a.dest_qp_num;
    attr.qp_access_flags = device_access(a.qp_access_flags as c_int);
    attr.cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    attr.pkey_index = a.pkey_index;
    attr.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    attr.max_rd_atomic = a.max_rd_atomic;
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr.min_rnr_timer = a.min_rnr_timer;
    attr.port_num = a.port_num;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    Ok(attr)
}

/// `ibv_modify_qp`: an errno.
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live QP and its attributes.
        let (q, a) = unsafe { (Qp::from_ptr(qp)?, attr.as_ref().ok_or(EINVAL)?) };
        let mask = AttrMask(mask as u32);
        let converted = qp_attr_from_c(a, mask)?;
        let qpn = {
            let guard = locked(&q.qp);
            let inner = guard.as_ref().ok_or(EINVAL)?;
            inner.modify(&converted, mask).map_err(errno)?;
            inner.qpn()
        };
        if let Some(s) = converted.qp_state {
            // SAFETY: the pointer create_qp handed out; C reads `state`.
            unsafe { (*qp).state = c_int::from(s.raw()) };
        }
        if converted.qp_state == Some(QpState::Reset) {
            // SAFETY: the QP's CQs outlive it (destroying them is EBUSY
            // while it exists).
            unsafe { discard_completions(qp, qpn) };
        }
        Ok(())
    })
}

/// A QP moved to RESET starts a new life: the completions of the last
/// one still in its CQs go, as rdma-core's providers clean them (libmlx5's
/// `mlx5_modify_qp`). Each CQ is locked as a poller locks it.
///
/// # Safety
///
/// `qp` is live, and so are its CQs.
unsafe fn discard_completions(qp: *mut ibv_qp, qpn: uroce_verbs::Qpn) {
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { ((*qp).send_cq, (*qp).recv_cq) };
    let recv = if recv == send { std::ptr::null_mut() } else { recv };
    for cq in [send, recv] {
        // SAFETY: the caller's contract: NULL or a live CQ of this library.
        if let Ok(c) = unsafe { Cq::from_ptr(cq) } {
            c.discard_completions_of(qpn);
        }
    }
}

/// `ibv_query_qp`: an errno.
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live QP.
        let q = unsafe { Qp::from_ptr(qp) }?;
        if attr.is_null() || init.is_null() {
            return Err(EINVAL);
        }
        let a = locked(&q.qp).as_ref().ok_or(EINVAL)?.query().map_err(errno)?;
        let raw = |s: Option<QpState>| s.map_or(0, |s| c_int::from(s.raw()));
        let c = ibv_qp_attr {
            qp_state: raw(a.qp_state),
            cur_qp_state: raw(a.cur_qp_state.or(a.qp_state)),
            path_mtu: a.path_mtu.map_or(0, |m| c_int::from(m.raw())),
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags.0,
            cap: q.cap,
            ah_attr: ah_attr_to_c(&a.ah_attr),
            pkey_index: a.pkey_index,
            en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: a.port_num,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            ..ibv_qp_attr::default()
        };
        // SAFETY: both checked non-NULL; the caller's structs.
        unsafe {
            attr.write(c);
            init.write(ibv_qp_init_attr {
                qp_context: q.c.qp_base.qp_context,
                send_cq: q.c.qp_base.send_cq,
                recv_cq: q.c.qp_base.recv_cq,
                srq: q.c.qp_base.srq,
                cap: q.cap,
                qp_type: q.c.qp_base.qp_type,
                sq_sig_all: q.sq_sig_all,
            });
        }
        Ok(())
    })
}

/// `ibv_destroy_qp`.
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live QP.
        let q = unsafe { Qp::from_ptr(qp) }?;
        // SAFETY: its context is open while it lives.
        let ctx = unsafe { Ctx::from_ptr(q.c.qp_base.context) }?;
        if q.c.qp_base.qp_type == c_int::from(QpType::Rc.raw()) {
            ctx.shared.quiesce();
        }
        let inner = locked(&q.qp).take().ok_or(EINVAL)?;
        inner.destroy().map_err(errno)?;
        locked(&ctx.shared.qps).remove(&q.c.qp_base.qp_num);
        // SAFETY: allocated by create_qp; freed once.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
        Ok(())
    })
}

/// `ibv_attach_mcast`: 0 or an errno (EINVAL for a QP that is not UD or a
/// GID that is not multicast, ENOMEM past the device's limits).
pub unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: the caller passes a live QP and a GID.
    unsafe { mcast(qp, gid, lid, true) }
}

/// `ibv_detach_mcast`: 0 or an errno (EINVAL when the QP is not attached).
pub unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: the caller passes a live QP and a GID.
    unsafe { mcast(qp, gid, lid, false) }
}

/// # Safety
///
/// `qp` is NULL or a live QP; `gid` is NULL or points to 16 bytes.
unsafe fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16, attach: bool) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live QP.
        let q = unsafe { Qp::from_ptr(qp) }?;
        // SAFETY: NULL or 16 readable bytes (the caller's).
        let gid = Gid(unsafe { gid.as_ref() }.ok_or(EINVAL)?.0);
        let guard = locked(&q.qp);
        let inner = guard.as_ref().ok_or(EINVAL)?;
        let done = if attach { inner.attach_mcast(gid, lid) } else { inner.detach_mcast(gid, lid) };
        done.map_err(errno)
    })
}

/// `ibv_create_srq`.
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard_ptr(|| {
        // SAFETY: the caller passes a live PD and its attributes.
        let (p, init) = unsafe { (Pd::from_ptr(pd)?, init.as_mut().ok_or(EINVAL)?) };
        let a = init.attr;
        let srq = locked(&p.pd).create_srq(a.max_wr, a.max_sge, a.srq_limit).map_err(errno)?;
        let index = srq.index();
        // SAFETY: ibv_srq is pointers, integers and all-zero pthread
        // objects (their static initializer).
        let mut c: ibv_srq = unsafe { std::mem::zeroed() };
        c.context = p.c.context;
        c.srq_context = init.srq_context;
        c.pd = pd;
        c.handle = index;
        let boxed = Box::new(Srq { c, srq: Mutex::new(Some(srq)), attr: Mutex::new(a) });
        let ptr = Box::into_raw(boxed);
        // SAFETY: the PD's context is open.
        let ctx = unsafe { Ctx::from_ptr(p.c.context) }?;
        locked(&ctx.shared.srqs).insert(index, ptr as usize);
        Ok(ptr.cast())
    })
}

/// `verbs_context.create_srq_ex` (the inline `ibv_create_srq_ex`): basic
/// SRQs (XRC and tag-matching SRQs are not offered).
pub unsafe extern "C" fn create_srq_ex(
    _context: *mut crate::abi::ibv_context,
    attr: *mut crate::abi::ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // IBV_SRQ_INIT_ATTR_TYPE, _PD; IBV_SRQT_BASIC.
    const TYPE: u32 = 1;
    const PD: u32 = 2;
    const BASIC: c_int = 0;
    guard_ptr(|| {
        // SAFETY: the caller passes its attributes.
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        if a.comp_mask & PD == 0 {
            return Err(EINVAL);
        }
        if a.comp_mask & !(TYPE | PD) != 0 || (a.comp_mask & TYPE != 0 && a.srq_type != BASIC) {
            return Err(libc::EOPNOTSUPP);
        }
        let mut init = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
        // SAFETY: forwarded: the caller's PD and our local attributes.
        let srq = unsafe { create_srq(a.pd, &mut init) };
        if srq.is_null() {
            return Err(crate::ffi::errno_now());
        }
        a.attr = init.attr;
        Ok(srq)
    })
}

/// `IBV_SRQ_MAX_WR`, `IBV_SRQ_LIMIT`.
const SRQ_MAX_WR: c_int = 1;
const SRQ_LIMIT: c_int = 2;

/// `ibv_modify_srq`: arming the limit; resizing is not offered.
pub unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live SRQ and its attributes.
        let (s, a) = unsafe { (Srq::from_ptr(srq)?, attr.as_ref().ok_or(EINVAL)?) };
        if mask & SRQ_MAX_WR != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if mask & SRQ_LIMIT != 0 {
            locked(&s.srq).as_ref().ok_or(EINVAL)?.arm_limit(a.srq_limit).map_err(errno)?;
            locked(&s.attr).srq_limit = a.srq_limit;
        }
        Ok(())
    })
}

/// `ibv_query_srq`.
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live SRQ.
        let s = unsafe { Srq::from_ptr(srq) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL.
        unsafe { attr.write(*locked(&s.attr)) };
        Ok(())
    })
}

/// `ibv_destroy_srq`: EBUSY while QPs use it.
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live SRQ.
        let s = unsafe { Srq::from_ptr(srq) }?;
        // SAFETY: its context is open while it lives.
        let ctx = unsafe { Ctx::from_ptr(s.c.context) }?;
        {
            let mut inner = locked(&s.srq);
            inner.as_ref().ok_or(EINVAL)?.destroy().map_err(errno)?;
            *inner = None;
        }
        locked(&ctx.shared.srqs).remove(&s.c.handle);
        // SAFETY: allocated by create_srq; freed once.
        drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
        Ok(())
    })
}
