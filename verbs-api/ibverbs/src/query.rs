//! The query verbs: device, port, GID table, P_Key table, and the layout
//! the library was built with.

use crate::abi::COMPAT_PORT_ATTR_LEN;
use crate::abi::{ibv_context, ibv_device_attr, ibv_device_attr_ex, ibv_gid, ibv_gid_entry};
use crate::abi::{ibv_port_attr, LAYOUT};
use crate::device::Ctx;
use crate::ffi::{errno, guard, guard_errno, set_errno, EINVAL};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// `device_cap_flags` for what the HCA does (as `uroce devinfo`):
/// BAD_PKEY_CNTR, BAD_QKEY_CNTR, UD_AV_PORT_ENFORCE, PORT_ACTIVE_EVENT,
/// SYS_IMAGE_GUID, RC_RNR_NAK_GEN, MEM_WINDOW, MEM_MGT_EXTENSIONS,
/// MEM_WINDOW_TYPE_2B.
pub const DEVICE_CAP_FLAGS: u32 = 0x0122_1c46;
/// `IB_PORT_CM_SUP`, as rxe.
const PORT_CAP_FLAGS: u32 = 0x0001_0000;
/// The GID type `ibv_query_gid_type` reports (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
const SYSFS_ROCE_V2: u32 = 1;
/// `IBV_GID_TYPE_ROCE_V2`.
const GID_TYPE_ROCE_V2: u32 = 2;
/// The GID table's slots, as the port reports them: the HCA's entries
/// first (link-local, IPv4-mapped), the rest empty (as rxe's table of
/// 1024 is mostly empty: an empty slot reads as zeros, or ENODATA).
const GID_TABLE_SLOTS: u32 = 16;
/// `IBV_ODP_SUPPORT`, and the operations each transport takes on an
/// on-demand region (`IBV_ODP_SUPPORT_SEND`, `_RECV`, `_WRITE`, `_READ`,
/// `_ATOMIC`, `_SRQ_RECV`).
const ODP_SUPPORT: u64 = 1;
const RC_ODP_CAPS: u64 = 0x3f;
const UC_ODP_CAPS: u64 = 0x07;
const UD_ODP_CAPS: u64 = 0x03;
/// The default P_Key.
const DEFAULT_PKEY: u16 = 0xffff;

fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// `vendor_id` when the HCA names none: rxe's (no IEEE OUI); programs
/// take 0 for "no device".
const NO_VENDOR: u32 = 0x00ff_ffff;

/// The C device attributes.
fn device_attr(ctx: &Ctx) -> Result<ibv_device_attr, c_int> {
    let d = ctx.shared.verbs.query_device().map_err(errno)?;
    // SAFETY: all-zero is a valid ibv_device_attr (plain data).
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    for (dst, src) in a.fw_ver.iter_mut().zip(d.fw_ver.bytes().take(63)) {
        *dst = src as c_char;
    }
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = if d.vendor_id == 0 { NO_VENDOR } else { d.vendor_id };
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = clamp(d.max_qp);
    a.max_qp_wr = clamp(d.max_qp_wr);
    a.device_cap_flags = DEVICE_CAP_FLAGS;
    a.max_sge = clamp(d.max_sge);
    a.max_sge_rd = clamp(d.max_sge_rd);
    a.max_cq = clamp(d.max_cq);
    a.max_cqe = clamp(d.max_cqe);
    a.max_mr = clamp(d.max_mr);
    a.max_pd = clamp(d.max_pd);
    a.max_qp_rd_atom = clamp(d.max_qp_rd_atom);
    a.max_res_rd_atom = clamp(d.max_qp.saturating_mul(d.max_qp_rd_atom));
    a.max_qp_init_rd_atom = clamp(d.max_qp_init_rd_atom);
    a.atomic_cap = 1; // IBV_ATOMIC_HCA
    a.max_mw = clamp(d.max_mr);
    a.max_ah = clamp(d.max_ah);
    a.max_srq = clamp(d.max_srq);
    a.max_srq_wr = clamp(d.max_srq_wr);
    a.max_srq_sge = clamp(d.max_srq_sge);
    a.max_mcast_grp = clamp(d.max_mcast_grp);
    a.max_mcast_qp_attach = clamp(d.max_mcast_qp_attach);
    a.max_total_mcast_qp_attach = clamp(d.max_total_mcast_qp_attach);
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    Ok(a)
}

/// `ibv_query_device`.
pub unsafe extern "C" fn query_device(
    context: *mut ibv_context,
    out: *mut ibv_device_attr,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        if out.is_null() {
            return Err(EINVAL);
        }
        let a = device_attr(ctx)?;
        // SAFETY: checked non-NULL; the caller's struct is this size.
        unsafe { out.write(a) };
        Ok(())
    })
}

/// `verbs_context.query_device_ex` (the inline `ibv_query_device_ex`):
/// the device attributes, the extended capabilities all absent, into the
/// first `len` bytes of the caller's struct (its size in its header).
pub unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const c_void,
    out: *mut c_void,
    len: usize,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        if out.is_null() || len < std::mem::size_of::<ibv_device_attr>() {
            return Err(EINVAL);
        }
        // SAFETY: all-zero is a valid ibv_device_attr_ex (plain data).
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        ex.orig_attr = device_attr(ctx)?;
        ex.device_cap_flags_ex = u64::from(DEVICE_CAP_FLAGS);
        // On-demand paging: uroce never pins memory, so every registration
        // is on demand (not implicit ones: a region is a range).
        ex.odp_caps = [ODP_SUPPORT, RC_ODP_CAPS | UC_ODP_CAPS << 32, UD_ODP_CAPS];
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        ex.max_dm_size = crate::dm::MAX_DM_SIZE;
        let ours = std::mem::size_of::<ibv_device_attr_ex>();
        // SAFETY: the caller's struct holds `len` bytes: what we know of it
        // is copied, the rest (a newer header's fields) zeroed.
        unsafe {
            std::ptr::write_bytes(out.cast::<u8>(), 0, len);
            std::ptr::copy_nonoverlapping(
                (&ex as *const ibv_device_attr_ex).cast::<u8>(),
                out.cast::<u8>(),
                len.min(ours),
            );
        }
        Ok(())
    })
}

fn port_attr(ctx: &Ctx, port: u8) -> Result<ibv_port_attr, c_int> {
    if port != 1 {
        return Err(EINVAL);
    }
    let p = ctx.shared.verbs.query_port().map_err(errno)?;
    Ok(ibv_port_attr {
        state: c_int::from(p.state),
        max_mtu: c_int::from(p.max_mtu.raw()),
        active_mtu: c_int::from(p.active_mtu.raw()),
        gid_tbl_len: clamp(p.gid_tbl_len.max(GID_TABLE_SLOTS)),
        port_cap_flags: PORT_CAP_FLAGS,
        max_msg_sz: p.max_msg_sz,
        pkey_tbl_len: p.pkey_tbl_len,
        max_vl_num: 1,
        active_width: 1,
        active_speed: 1,
        phys_state: 5, // LinkUp
        link_layer: p.link_layer,
        flags: 1, // IBV_QPF_GRH_REQUIRED: RoCE
        ..ibv_port_attr::default()
    })
}

/// Copies the first `len` bytes of `attr` to `out`.
fn copy_port_attr(attr: &ibv_port_attr, out: *mut ibv_port_attr, len: usize) {
    let len = len.min(std::mem::size_of::<ibv_port_attr>());
    // SAFETY: the caller's struct holds at least `len` bytes (the size it
    // passed, or the 1.1 ABI's compat struct).
    unsafe {
        std::ptr::copy_nonoverlapping((attr as *const ibv_port_attr).cast::<u8>(), out.cast(), len)
    };
}

/// `verbs_context.query_port`: what the inline `ibv_query_port` calls.
pub unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port: u8,
    out: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        if out.is_null() {
            return Err(EINVAL);
        }
        copy_port_attr(&port_attr(ctx, port)?, out, len);
        Ok(())
    })
}

/// The exported `ibv_query_port@@IBVERBS_1.1` (its struct is the 1.1 ABI's
/// shorter `_compat_ibv_port_attr`).
pub unsafe extern "C" fn query_port_compat(
    context: *mut ibv_context,
    port: u8,
    out: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded from our caller.
    unsafe { query_port_ex(context, port, out, COMPAT_PORT_ATTR_LEN) }
}

/// The GID at `index` (port 1): None for an empty slot, EINVAL past the
/// table.
fn gid(ctx: &Ctx, port: u32, index: u32) -> Result<Option<[u8; 16]>, c_int> {
    let len = ctx.shared.verbs.query_port().map_err(errno)?.gid_tbl_len;
    if port != 1 || index >= len.max(GID_TABLE_SLOTS) {
        return Err(EINVAL);
    }
    if index >= len {
        return Ok(None);
    }
    Ok(Some(ctx.shared.verbs.query_gid(index as u8).map_err(errno)?.0))
}

/// `ibv_query_gid`: 0, or -1 with errno.
pub unsafe extern "C" fn query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    out: *mut [u8; 16],
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes an open context.
        let result = unsafe { Ctx::from_ptr(context) }.and_then(|ctx| {
            let index = u32::try_from(index).map_err(|_| EINVAL)?;
            gid(ctx, u32::from(port), index)
        });
        match result {
            Ok(g) if !out.is_null() => {
                // SAFETY: checked non-NULL; a union ibv_gid is 16 bytes. An
                // empty slot reads as zeros.
                unsafe { out.write(g.unwrap_or_default()) };
                0
            }
            Ok(_) => {
                set_errno(EINVAL);
                -1
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

fn gid_entry(ctx: &Ctx, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    Ok(ibv_gid_entry {
        gid: ibv_gid(gid(ctx, port, index)?.ok_or(libc::ENODATA)?),
        gid_index: index,
        port_num: port,
        gid_type: GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

/// `_ibv_query_gid_ex` (the inline `ibv_query_gid_ex`): an errno.
pub unsafe extern "C" fn query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    out: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes an open context.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        if out.is_null() || flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(EINVAL);
        }
        let entry = gid_entry(ctx, port, index)?;
        // SAFETY: checked non-NULL and large enough.
        unsafe { out.write(entry) };
        Ok(())
    })
}

/// `_ibv_query_gid_table`: the number of entries, or a negative errno.
pub unsafe extern "C" fn query_gid_table(
    context: *mut ibv_context,
    out: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(crate::ffi::EIO as isize), || {
        // SAFETY: the caller passes an open context.
        let ctx = match unsafe { Ctx::from_ptr(context) } {
            Ok(ctx) => ctx,
            Err(e) => return -(e as isize),
        };
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return -(EINVAL as isize);
        }
        let len = match ctx.shared.verbs.query_port() {
            Ok(p) => p.gid_tbl_len,
            Err(e) => return -(errno(e) as isize),
        };
        let mut n = 0;
        for index in 0..len {
            let entry = match gid_entry(ctx, 1, index) {
                Ok(entry) => entry,
                Err(e) => return -(e as isize),
            };
            if n >= max {
                return -(EINVAL as isize);
            }
            // SAFETY: the caller's array holds `max` entries of
            // `entry_size` bytes.
            unsafe { out.cast::<u8>().add(n * entry_size).cast::<ibv_gid_entry>().write(entry) };
            n += 1;
        }
        n as isize
    })
}

/// `ibv_query_gid_type` (private; `ibv_devinfo` prints it): RoCE v2.
pub unsafe extern "C" fn query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: u32,
    out: *mut u32,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes an open context.
        match unsafe { Ctx::from_ptr(context) }.and_then(|ctx| gid(ctx, u32::from(port), index)) {
            Ok(Some(_)) if !out.is_null() => {
                // SAFETY: checked non-NULL.
                unsafe { out.write(SYSFS_ROCE_V2) };
                0
            }
            _ => {
                set_errno(EINVAL);
                -1
            }
        }
    })
}

/// `ibv_query_pkey`: the default P_Key at index 0, zeros after it.
pub unsafe extern "C" fn query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    out: *mut u16,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes an open context.
        let len = unsafe { Ctx::from_ptr(context) }
            .and_then(|ctx| ctx.shared.verbs.query_port().map_err(errno))
            .map(|p| c_int::from(p.pkey_tbl_len));
        match len {
            Ok(len) if port == 1 && (0..len).contains(&index) && !out.is_null() => {
                let pkey = if index == 0 { DEFAULT_PKEY } else { 0 };
                // SAFETY: checked non-NULL.
                unsafe { out.write(pkey.to_be()) };
                0
            }
            _ => {
                set_errno(EINVAL);
                -1
            }
        }
    })
}

/// `ibv_get_pkey_index`.
pub unsafe extern "C" fn get_pkey_index(_context: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    if port == 1 && u16::from_be(pkey) == DEFAULT_PKEY {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

/// `uroce_ibverbs_layout` (uroce's own): the struct sizes and field offsets
/// the library was built with, `struct field offset` per line.
pub extern "C" fn layout() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| CString::new(LAYOUT).expect("no NUL in the table")).as_ptr()
}
