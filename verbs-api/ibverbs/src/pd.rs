//! Protection domains, memory regions (on the application's own memory:
//! zero copy, the HCA reads and writes the range in place) and address
//! handles.

use crate::abi::{ibv_ah, ibv_ah_attr, ibv_context, ibv_gid, ibv_mr, ibv_pd, ibv_wc};
use crate::abi::{ibv_parent_domain_init_attr, ibv_td};
use crate::device::{locked, Ctx};
use crate::ffi::{errno, guard, guard_errno, guard_ptr, set_errno, EINVAL};
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;
use uroce_verbs::{Access, AhAttr, Gid};

/// A PD: the `ibv_pd` C sees, then the driver's.
#[repr(C)]
pub struct Pd {
    pub c: ibv_pd,
    pub pd: Mutex<uroce_verbs::Pd>,
    /// A parent domain: another face of this PD (deallocating it leaves
    /// the PD alone).
    pub parent_of: *mut ibv_pd,
}

impl Pd {
    /// # Safety
    ///
    /// `pd` is NULL or came from [`alloc_pd`] and is not deallocated.
    pub unsafe fn from_ptr<'a>(pd: *mut ibv_pd) -> Result<&'a Pd, c_int> {
        // SAFETY: the ibv_pd is the first field of a Pd.
        unsafe { pd.cast::<Pd>().as_ref() }.ok_or(EINVAL)
    }
}

/// `ibv_alloc_pd`.
pub unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard_ptr(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        let pd = ctx.shared.verbs.alloc_pd().map_err(errno)?;
        let c = ibv_pd { context, handle: pd.index() };
        let parent_of = std::ptr::null_mut();
        Ok(Box::into_raw(Box::new(Pd { c, pd: Mutex::new(pd), parent_of })).cast())
    })
}

/// `ibv_dealloc_pd`: EBUSY while anything uses it.
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a live PD.
        let p = unsafe { Pd::from_ptr(pd) }?;
        if p.parent_of.is_null() {
            locked(&p.pd).dealloc().map_err(errno)?;
        }
        // SAFETY: allocated by alloc_pd; deallocated once.
        drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
        Ok(())
    })
}

/// `verbs_context.alloc_parent_domain` (the inline
/// `ibv_alloc_parent_domain`): a face of the PD it names, through which
/// the program creates objects of that PD. Custom allocators are not
/// called: the device allocates its queues itself.
pub unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard_ptr(|| {
        // SAFETY: the caller passes its attributes and a live PD in them.
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        // SAFETY: as above.
        let p = unsafe { Pd::from_ptr(a.pd) }?;
        // IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, _PD_CONTEXT.
        if a.comp_mask & !3 != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let shared = locked(&p.pd).share();
        let c = ibv_pd { context, handle: p.c.handle };
        let pd = Pd { c, pd: Mutex::new(shared), parent_of: a.pd };
        Ok(Box::into_raw(Box::new(pd)).cast())
    })
}

/// `verbs_context.alloc_td` (the inline `ibv_alloc_td`): a thread domain
/// (a hint about locking, which changes nothing here).
pub unsafe extern "C" fn alloc_td(context: *mut ibv_context, _attr: *mut c_void) -> *mut ibv_td {
    Box::into_raw(Box::new(ibv_td { context }))
}

/// `verbs_context.dealloc_td`.
pub unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    if td.is_null() {
        return EINVAL;
    }
    // SAFETY: allocated by alloc_td; freed once.
    drop(unsafe { Box::from_raw(td) });
    0
}

/// An MR: the `ibv_mr` C sees, then the driver's.
#[repr(C)]
pub struct Mr {
    pub c: ibv_mr,
    pub mr: Mutex<Option<uroce_verbs::Mr>>,
    /// The count of MRs on the device memory this MR is on (it goes down
    /// when this MR is deregistered).
    pub dm_refs: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: access flags a device may ignore.
const ACCESS_OPTIONAL: c_int = 0x3ff0_0000;
/// `IBV_ACCESS_ON_DEMAND` and `IBV_ACCESS_HUGETLB`: uroce never pins
/// memory (the HCA reaches the application's pages as they are, faulting
/// them in like any access), so every registration is on demand, and a
/// huge-page mapping is memory like any other. `IBV_ACCESS_ZERO_BASED`:
/// the region's addresses start at its `iova`, which the library sets.
const ACCESS_ON_DEMAND_HUGETLB: c_int = 0x40 | 0x80 | 0x20;

/// The device's access flags for the C ones (of an MR or a QP).
pub fn device_access(access: c_int) -> Access {
    Access((access & !(ACCESS_OPTIONAL | ACCESS_ON_DEMAND_HUGETLB)) as u32)
}

fn register(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard_ptr(|| {
        // SAFETY: the application hands this range to the device until
        // ibv_dereg_mr, as ibv_reg_mr(3) says: the device reads and writes
        // it like DMA while work that uses it is outstanding.
        // IBV_ACCESS_ZERO_BASED: the region's first byte is address 0.
        let iova = if access & 0x20 != 0 { 0 } else { iova };
        let mr = unsafe { register_range(pd, addr, len, iova, access, addr, None) }?;
        Ok(mr.cast())
    })
}

/// Registers `len` bytes at `host` in `pd` as the region that SGEs and
/// peers address from `iova`; the C face shows `addr`.
///
/// # Safety
///
/// As [`uroce_verbs::Pd::reg_mr_raw_iova`]: the range stays allocated and
/// is the device's (like DMA) until the region is deregistered.
pub unsafe fn register_range(
    pd: *mut ibv_pd,
    host: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
    addr: *mut c_void,
    dm_refs: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
) -> Result<*mut Mr, c_int> {
    // SAFETY: the caller passes a live PD.
    let p = unsafe { Pd::from_ptr(pd) }?;
    let access = device_access(access);
    if host.is_null() || len == 0 {
        return Err(EINVAL);
    }
    // SAFETY: the caller's contract.
    let mr =
        unsafe { locked(&p.pd).reg_mr_raw_iova(host.cast(), len, iova, access) }.map_err(errno)?;
    let c = ibv_mr {
        context: p.c.context,
        pd,
        addr,
        length: len,
        handle: mr.lkey().0,
        lkey: mr.lkey().0,
        rkey: mr.rkey().0,
    };
    if let Some(refs) = &dm_refs {
        refs.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    Ok(Box::into_raw(Box::new(Mr { c, mr: Mutex::new(Some(mr)), dm_refs })))
}

/// `ibv_reg_mr` (the 1.1 function; the inline `ibv_reg_mr` of newer
/// headers calls `ibv_reg_mr_iova2`).
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    register(pd, addr, len, addr as u64, access)
}

/// `ibv_reg_mr_iova`.
pub unsafe extern "C" fn reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    register(pd, addr, len, iova, access)
}

/// `ibv_reg_mr_iova2`.
pub unsafe extern "C" fn reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    register(pd, addr, len, iova, access as c_int)
}

/// `ibv_dereg_mr`: the device stops touching the range before it returns.
pub unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard_errno(|| {
        // SAFETY: the ibv_mr is the first field of an Mr from register.
        let m = unsafe { mr.cast::<Mr>().as_ref() }.ok_or(EINVAL)?;
        let inner = locked(&m.mr).take().ok_or(EINVAL)?;
        if let Err((inner, e)) = inner.dereg() {
            *locked(&m.mr) = Some(inner);
            return Err(errno(e));
        }
        if let Some(refs) = &m.dm_refs {
            refs.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        // SAFETY: allocated by register; freed once.
        drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
        Ok(())
    })
}

/// `verbs_context.advise_mr` (the inline `ibv_advise_mr`): a prefetch
/// hint, with nothing to do (the HCA reaches the pages when it needs
/// them; nothing is pinned or mapped ahead).
pub unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: c_int,
    _flags: u32,
    _sg_list: *mut crate::abi::ibv_sge,
    _num_sge: u32,
) -> c_int {
    // IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH, _PREFETCH_WRITE, _PREFETCH_NO_FAULT.
    match (pd.is_null(), advice) {
        (false, 0..=2) => 0,
        (true, _) => EINVAL,
        _ => libc::EOPNOTSUPP,
    }
}

/// An AH: the `ibv_ah` C sees, then the driver's.
#[repr(C)]
pub struct Ah {
    pub c: ibv_ah,
    pub ah: Mutex<Option<uroce_verbs::Ah>>,
}

/// The device's address vector for a C `ibv_ah_attr` (RoCE: a GRH is
/// required).
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        return Err(EINVAL);
    }
    Ok(AhAttr {
        dgid: Gid(a.grh.dgid.0),
        sgid_index: a.grh.sgid_index,
        flow_label: a.grh.flow_label,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        sl: a.sl,
        port_num: a.port_num,
    })
}

/// The C `ibv_ah_attr` of an address vector.
pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut c = ibv_ah_attr::default();
    c.grh.dgid = ibv_gid(a.dgid.0);
    c.grh.sgid_index = a.sgid_index;
    c.grh.flow_label = a.flow_label;
    c.grh.hop_limit = a.hop_limit;
    c.grh.traffic_class = a.traffic_class;
    c.sl = a.sl;
    c.is_global = 1;
    c.port_num = a.port_num;
    c
}

/// `ibv_create_ah`.
pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard_ptr(|| {
        // SAFETY: the caller passes a live PD and its attributes.
        let (p, attr) = unsafe { (Pd::from_ptr(pd)?, attr.as_ref().ok_or(EINVAL)?) };
        let ah = locked(&p.pd).create_ah(ah_attr_from_c(attr)?).map_err(errno)?;
        let c = ibv_ah { context: p.c.context, pd, handle: ah.index() };
        Ok(Box::into_raw(Box::new(Ah { c, ah: Mutex::new(Some(ah)) })).cast())
    })
}

/// `ibv_destroy_ah`.
pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard_errno(|| {
        // SAFETY: the ibv_ah is the first field of an Ah from create_ah.
        let a = unsafe { ah.cast::<Ah>().as_ref() }.ok_or(EINVAL)?;
        let inner = locked(&a.ah).take().ok_or(EINVAL)?;
        inner.destroy().map_err(errno)?;
        // SAFETY: allocated by create_ah; freed once.
        drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
        Ok(())
    })
}

/// The GRH area (40 bytes) of a UD receive: on RoCE v2 over IPv4 its last
/// 20 bytes are the IPv4 header; over IPv6 it is the IPv6 header.
fn reply_attr(ctx: &Ctx, port: u8, wc: &ibv_wc, grh: &[u8; 40]) -> Result<ibv_ah_attr, c_int> {
    const WC_GRH: u32 = 1;
    if wc.wc_flags & WC_GRH == 0 {
        return Err(EINVAL);
    }
    let (src, dst, traffic_class, flow_label) = if grh[20] >> 4 == 4 {
        let v4 =
            |at: usize| std::net::Ipv4Addr::new(grh[at], grh[at + 1], grh[at + 2], grh[at + 3]);
        (Gid::from(v4(32)), Gid::from(v4(36)), grh[21], 0)
    } else {
        let g = |at: usize| Gid(grh[at..at + 16].try_into().expect("16 bytes"));
        let word = u32::from_be_bytes(grh[0..4].try_into().expect("4 bytes"));
        (g(8), g(24), (word >> 20) as u8, word & 0xf_ffff)
    };
    let table = ctx.shared.verbs.query_port().map_err(errno)?.gid_tbl_len;
    let sgid_index = (0..table.min(256))
        .find(|&i| ctx.shared.verbs.query_gid(i as u8).is_ok_and(|g| g == dst))
        .ok_or(libc::ENOENT)?;
    let mut attr = ibv_ah_attr::default();
    attr.grh.dgid = ibv_gid(src.0);
    attr.grh.sgid_index = sgid_index as u8;
    attr.grh.hop_limit = 0xff;
    attr.grh.traffic_class = traffic_class;
    attr.grh.flow_label = flow_label;
    attr.is_global = 1;
    attr.sl = wc.sl;
    attr.port_num = port;
    Ok(attr)
}

/// `ibv_init_ah_from_wc`: 0, or -1 with errno.
pub unsafe extern "C" fn init_ah_from_wc(
    context: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut [u8; 40],
    out: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes an open context, a completion, the
        // 40-byte GRH area of its buffer and an attribute struct.
        let result = unsafe {
            match (Ctx::from_ptr(context), wc.as_ref(), grh.as_ref(), out.is_null()) {
                (Ok(ctx), Some(wc), Some(grh), false) => reply_attr(ctx, port, wc, grh),
                _ => Err(EINVAL),
            }
        };
        match result {
            Ok(attr) => {
                // SAFETY: checked non-NULL.
                unsafe { out.write(attr) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

/// `ibv_create_ah_from_wc`.
pub unsafe extern "C" fn create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut [u8; 40],
    port: u8,
) -> *mut ibv_ah {
    let mut attr = ibv_ah_attr::default();
    // SAFETY: forwarded from our caller; the PD is live.
    let context = match unsafe { Pd::from_ptr(pd) } {
        Ok(p) => p.c.context,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    // SAFETY: forwarded from our caller.
    if unsafe { init_ah_from_wc(context, port, wc, grh, &mut attr) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded from our caller.
    unsafe { create_ah(pd, &mut attr) }
}
