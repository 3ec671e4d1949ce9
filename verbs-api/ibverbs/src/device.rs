//! The device list (one device, `uroce0`, described by the environment),
//! opening and closing it, and the sysfs files tools read about it.
//!
//! A process has one uroce device (it owns UDP port 4791 of its address):
//! every context opened on it shares it ([`Shared`]), and the device closes
//! with the last context.

use crate::abi::{ibv_context, ibv_context_ops, ibv_device, verbs_context, SYSFS_NAME_MAX};
use crate::abi::{SYSFS_PATH_MAX, VERBS_ABI_IS_EXTENDED};
use crate::ffi::{errno, guard, guard_errno, guard_ptr, set_errno, EINVAL, EIO, ENOENT, ENOMEM};
use crate::{cq, cq_ex, dm, mw, pd, post, qp_ex, query};
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::{c_char, c_int};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use uroce_net::udp::{UdpConfig, UdpDevice};

/// The device's name (`ibv_get_device_name`, `-d` of the tools).
pub const DEVICE_NAME: &str = "uroce0";
/// The sysfs directory tools are told about (served by
/// [`read_sysfs_file`]: it does not exist).
pub const IBDEV_PATH: &str = "/sys/class/infiniband/uroce0";

/// The one device entry and the configuration it was made from.
struct Entry {
    device: Box<ibv_device>,
    config: Result<UdpConfig, String>,
    node_guid: u64,
}

fn entry() -> &'static Entry {
    static ENTRY: OnceLock<Entry> = OnceLock::new();
    ENTRY.get_or_init(|| {
        let config = UdpConfig::from_env().map_err(|e| e.to_string());
        let node_guid = match &config {
            Ok(c) => node_guid_of(c.addr),
            Err(why) => {
                eprintln!("uroce libibverbs: no device: {why}");
                0
            }
        };
        // SAFETY: ibv_device is plain data (integers, arrays, NULL-able
        // function pointers): all zero is a valid value.
        let mut device: Box<ibv_device> = Box::new(unsafe { std::mem::zeroed() });
        device.node_type = 1; // IBV_NODE_CA
        device.transport_type = 0; // IBV_TRANSPORT_IB, as rxe
        copy_str(&mut device.name[..SYSFS_NAME_MAX], DEVICE_NAME);
        copy_str(&mut device.dev_name[..SYSFS_NAME_MAX], "uverbs0");
        copy_str(&mut device.dev_path[..SYSFS_PATH_MAX], "/sys/class/infiniband_verbs/uverbs0");
        copy_str(&mut device.ibdev_path[..SYSFS_PATH_MAX], IBDEV_PATH);
        Entry { device, config, node_guid }
    })
}

/// The node GUID the HCA reports: the EUI-64 of its link-local GID.
fn node_guid_of(addr: std::net::IpAddr) -> u64 {
    let gid = uroce_verbs::Gid::link_local_from_mac(uroce_net::udp::mac_for(addr));
    u64::from_be_bytes(gid.0[8..16].try_into().expect("8 bytes"))
}

fn copy_str(dst: &mut [c_char], src: &str) {
    let room = dst.len() - 1;
    for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
        *d = s as c_char;
    }
}

fn device_ptr() -> *mut ibv_device {
    (&*entry().device as *const ibv_device).cast_mut()
}

/// `ibv_get_device_list`: `uroce0`, or no device when the environment
/// describes none that can exist (the reason is printed once).
pub unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard_ptr(|| {
        let count = usize::from(entry().config.is_ok());
        // SAFETY: calloc of a small array; NULL is handled.
        let list: *mut *mut ibv_device = unsafe { libc::calloc(count + 1, 8) }.cast();
        if list.is_null() {
            return Err(ENOMEM);
        }
        if count == 1 {
            // SAFETY: the array has count + 1 slots.
            unsafe { *list = device_ptr() };
        }
        if !num.is_null() {
            // SAFETY: the caller passes NULL or a valid int.
            unsafe { *num = count as c_int };
        }
        Ok(list)
    })
}

/// `ibv_free_device_list`.
pub unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the list came from get_device_list's calloc (or is NULL).
    unsafe { libc::free(list.cast()) };
}

/// Whether `device` is ours.
fn is_ours(device: *mut ibv_device) -> bool {
    !device.is_null() && device == device_ptr()
}

/// `ibv_get_device_name`.
pub unsafe extern "C" fn get_device_name(device: *mut ibv_device) -> *const c_char {
    if !is_ours(device) {
        set_errno(EINVAL);
        return std::ptr::null();
    }
    entry().device.name.as_ptr()
}

/// `ibv_get_device_guid` (network byte order).
pub unsafe extern "C" fn get_device_guid(device: *mut ibv_device) -> u64 {
    if !is_ours(device) {
        return 0;
    }
    entry().node_guid.to_be()
}

/// `ibv_get_device_index`.
pub unsafe extern "C" fn get_device_index(device: *mut ibv_device) -> c_int {
    if is_ours(device) {
        0
    } else {
        -1
    }
}

/// The device as a process has it open: the runtime and the verbs
/// context every `ibv_context` shares.
pub struct Shared {
    /// The driver's context (dropped before the device).
    pub verbs: uroce_verbs::Context,
    /// Each CQ's `ibv_cq`, by CQ index (completion events name the index).
    pub cqs: Mutex<HashMap<u32, usize>>,
    /// Each QP's `ibv_qp`, by QPN, and each SRQ's `ibv_srq`, by index
    /// (asynchronous events name them).
    pub qps: Mutex<HashMap<u32, usize>>,
    pub srqs: Mutex<HashMap<u32, usize>>,
    /// The eventfd readable while CM events wait (the device's notifier
    /// writes it once `uroce_private_cm_event_fd` was first called).
    cm_events: Arc<OwnedFd>,
    cm_watched: std::sync::atomic::AtomicBool,
    device: UdpDevice,
}

impl Shared {
    /// Moves what the device has queued (an ACK of the last message a QP
    /// received) before a QP goes: a program destroys its QP as soon as
    /// its last completion arrives. On a lossy link (`UROCE_FAULTS`, or a
    /// fault scenario: `has_faults` covers both) that ACK may be lost, and
    /// the peer's retransmission (a QP timeout, 67 ms, later) must still
    /// find the QP: stay for a few of its timeouts, as `uroce pingpong`
    /// does before it closes.
    pub fn quiesce(&self) {
        if self.device.has_faults() {
            self.linger(600);
        } else {
            for _ in 0..3 {
                self.device.progress();
            }
        }
    }

    /// The program is about to block on a completion channel (or the
    /// async descriptor): the device must keep moving by itself. (An event
    /// delivered on one channel marks the program awake again, and the CQ
    /// it then waits on may have been armed long before.)
    pub fn sleeping(&self) {
        use uroce_device::link::DeviceLink;
        self.device.hca().app_sleeping();
    }

    /// Runs a device command (the control path), for uroce's librdmacm.
    pub fn command(
        &self,
        command: uroce_device::command::Command,
    ) -> Result<uroce_device::command::Reply, uroce_device::command::CmdError> {
        use uroce_device::link::DeviceLink;
        self.device.hca().command(command)
    }

    /// The descriptor readable while CM events wait for `CmPollEvent`: an
    /// eventfd (made with the device, so that it is one of the device's
    /// descriptors) that the device's event notifier writes, one count per
    /// notification, once a first caller asked for it; the reader resets
    /// it and takes every event. The notifier ends with the device.
    pub fn cm_event_fd(&self) -> Result<c_int, c_int> {
        let fd = &self.cm_events;
        if !self.cm_watched.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let weak = Arc::downgrade(fd);
            self.device.hca().on_events(Box::new(move || match weak.upgrade() {
                Some(fd) => {
                    let _ = rustix::io::write(&*fd, &1u64.to_ne_bytes());
                    true
                }
                None => false,
            }));
            // Events that came before the notifier: say so now.
            let _ = rustix::io::write(&**fd, &1u64.to_ne_bytes());
        }
        Ok(fd.as_raw_fd())
    }

    /// Moves packets for `ms` milliseconds.
    fn linger(&self, ms: u64) {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        while std::time::Instant::now() < until {
            self.device.progress();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Drop for Shared {
    /// Lets the last packets leave before the device stops.
    fn drop(&mut self) {
        self.linger(20);
    }
}

/// Locks a library mutex (a panic never leaves their maps inconsistent).
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_shared() -> Result<Arc<Shared>, c_int> {
    static OPEN: Mutex<Weak<Shared>> = Mutex::new(Weak::new());
    let mut open = locked(&OPEN);
    if let Some(shared) = open.upgrade() {
        return Ok(shared);
    }
    let config = entry().config.clone().map_err(|_| ENOENT)?;
    let device = UdpDevice::open(config).map_err(|e| {
        eprintln!("uroce libibverbs: cannot open {DEVICE_NAME}: {e}");
        libc::EADDRINUSE
    })?;
    let verbs = uroce_verbs::Context::open(device.hca());
    let cm_events = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .map_err(|e| e.raw_os_error())?;
    let cm_events = Arc::new(cm_events);
    let shared = Arc::new(Shared {
        verbs,
        cqs: Mutex::new(HashMap::new()),
        qps: Mutex::new(HashMap::new()),
        srqs: Mutex::new(HashMap::new()),
        cm_events,
        cm_watched: Default::default(),
        device,
    });
    *open = Arc::downgrade(&shared);
    Ok(shared)
}

/// A context: the `verbs_context` C sees (its `context` is the
/// `ibv_context` returned), then the library's own.
#[repr(C)]
pub struct Ctx {
    pub vctx: verbs_context,
    pub shared: Arc<Shared>,
    /// `ibv_context.async_fd`: the driver's asynchronous-event descriptor
    /// (`uroce_verbs::Context::async_fd`), duplicated, so readable while
    /// an asynchronous event waits. Every context of the process shares
    /// the device's events, and so the descriptor's state (`O_NONBLOCK`
    /// included: one open file description).
    pub async_fd: OwnedFd,
    /// `ibv_context.cmd_fd`: there is no kernel to command, but programs
    /// duplicate it (to import the context elsewhere, which uroce refuses).
    pub cmd_fd: OwnedFd,
}

impl Ctx {
    /// The context behind an `ibv_context` the library returned.
    ///
    /// # Safety
    ///
    /// `context` is NULL or came from [`open_device`] and is not closed.
    pub unsafe fn from_ptr<'a>(context: *mut ibv_context) -> Result<&'a Ctx, c_int> {
        if context.is_null() {
            return Err(EINVAL);
        }
        let offset = std::mem::offset_of!(verbs_context, context);
        // SAFETY: the ibv_context is the `context` field of a Ctx's
        // verbs_context, which is the Ctx's first field.
        Ok(unsafe { &*context.cast::<u8>().sub(offset).cast::<Ctx>() })
    }

    /// The `ibv_context` C sees.
    pub fn as_ptr(&self) -> *mut ibv_context {
        (&self.vctx.context as *const ibv_context).cast_mut()
    }
}

fn ops() -> ibv_context_ops {
    // SAFETY: the ops table is NULL-able function pointers: all zero is
    // valid (every verb absent).
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops.poll_cq = Some(cq::poll_cq);
    ops.req_notify_cq = Some(cq::req_notify_cq);
    ops.post_send = Some(post::post_send);
    ops.post_recv = Some(post::post_recv);
    ops.post_srq_recv = Some(post::post_srq_recv);
    ops.alloc_mw = Some(mw::alloc_mw);
    ops.bind_mw = Some(mw::bind_mw);
    ops.dealloc_mw = Some(mw::dealloc_mw);
    ops
}

/// `ibv_open_device`.
pub unsafe extern "C" fn open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard_ptr(|| {
        if !is_ours(device) {
            return Err(EINVAL);
        }
        let shared = open_shared()?;
        let cmd_fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| e.raw_os_error())?;
        let async_fd = shared.verbs.async_fd().map_err(errno)?;
        let async_fd =
            async_fd.try_clone_to_owned().map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
        // It starts blocking, as rdma-core's (the driver only reads it when
        // it is readable).
        set_blocking(&async_fd)?;
        // SAFETY: verbs_context is NULL-able pointers, integers and
        // all-zero pthread objects (their static initializer): all zero is
        // valid; the fields that matter are set below.
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        vctx.query_port = Some(query::query_port_ex);
        vctx.query_device_ex = Some(query::query_device_ex);
        vctx.create_cq_ex = Some(cq_ex::create_cq_ex);
        vctx.create_qp_ex = Some(qp_ex::create_qp_ex);
        vctx.create_srq_ex = Some(crate::qp::create_srq_ex);
        vctx.advise_mr = Some(pd::advise_mr);
        vctx.alloc_parent_domain = Some(pd::alloc_parent_domain);
        vctx.alloc_td = Some(pd::alloc_td);
        vctx.dealloc_td = Some(pd::dealloc_td);
        vctx.alloc_dm = Some(dm::alloc_dm);
        vctx.free_dm = Some(dm::free_dm);
        vctx.reg_dm_mr = Some(dm::reg_dm_mr);
        vctx.sz = std::mem::size_of::<verbs_context>();
        vctx.context.device = device;
        vctx.context.ops = ops();
        vctx.context.cmd_fd = cmd_fd.as_raw_fd();
        vctx.context.async_fd = async_fd.as_raw_fd();
        vctx.context.num_comp_vectors = 1;
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        let ctx = Box::leak(Box::new(Ctx { vctx, shared, async_fd, cmd_fd }));
        Ok(ctx.as_ptr())
    })
}

/// Clears `O_NONBLOCK` on `fd`.
fn set_blocking(fd: &OwnedFd) -> Result<(), c_int> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor this library owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(EIO));
    }
    Ok(())
}

/// `ibv_close_device`. The device closes with its last context.
pub unsafe extern "C" fn close_device(context: *mut ibv_context) -> c_int {
    guard_errno(|| {
        // SAFETY: the caller passes a context from open_device, closed
        // once.
        let ctx = unsafe { Ctx::from_ptr(context) }?;
        // SAFETY: it was leaked from a Box in open_device.
        drop(unsafe { Box::from_raw((ctx as *const Ctx).cast_mut()) });
        Ok(())
    })
}

/// `ibv_get_sysfs_path`.
pub extern "C" fn get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// The files of the device's sysfs directory that tools read.
fn virtual_file(file: &str) -> Option<String> {
    let guid = entry().node_guid;
    let guid = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    );
    let file = file.trim_start_matches('/');
    Some(match file {
        "node_guid" | "sys_image_guid" => guid,
        "node_type" => "1: CA".into(),
        "fw_ver" => format!("uroce {}", env!("CARGO_PKG_VERSION")),
        "hca_type" | "board_id" => "uroce".into(),
        "ports/1/state" => "4: ACTIVE".into(),
        "ports/1/phys_state" => "5: LinkUp".into(),
        "ports/1/link_layer" => "Ethernet".into(),
        "ports/1/gid_attrs/types/0" | "ports/1/gid_attrs/types/1" => "RoCE v2".into(),
        _ => return None,
    })
}

/// `ibv_read_sysfs_file`: the device's own directory is served from
/// [`virtual_file`]; any other path is read from the file system.
pub unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(EINVAL);
            return -1;
        }
        // SAFETY: the caller passes NUL-terminated strings.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let (dir, file) = (dir.to_string_lossy(), file.to_string_lossy());
        let text = if dir.trim_end_matches('/') == IBDEV_PATH {
            match virtual_file(&file) {
                Some(text) => format!("{text}\n").into_bytes(),
                None => {
                    set_errno(ENOENT);
                    return -1;
                }
            }
        } else {
            match std::fs::read(format!("{dir}/{file}")) {
                Ok(bytes) => bytes,
                Err(e) => {
                    set_errno(e.raw_os_error().unwrap_or(ENOENT));
                    return -1;
                }
            }
        };
        // SAFETY: the caller's buffer holds `size` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        let mut len = text.len().min(size);
        out[..len].copy_from_slice(&text[..len]);
        if len == 0 {
            out[0] = 0;
            return 0;
        }
        // As rdma-core: the newline goes, the text ends with a NUL.
        if len == size {
            out[len - 1] = 0;
        } else if out[len - 1] == b'\n' {
            len -= 1;
            out[len] = 0;
        } else {
            out[len] = 0;
        }
        len as c_int
    })
}

/// `ibv_read_ibdev_sysfs_file` (private, for providers): nothing.
pub extern "C" fn read_ibdev_sysfs_file() -> c_int {
    set_errno(ENOENT);
    -1
}

/// Programs call verbs from any thread: what every context shares, and
/// each object's driver half behind its lock, must be safe to share.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Shared>();
    shared::<Mutex<uroce_verbs::Pd>>();
    shared::<Mutex<Option<uroce_verbs::Mr>>>();
    shared::<Mutex<Option<uroce_verbs::Mw>>>();
    shared::<Mutex<Option<uroce_verbs::Cq>>>();
    shared::<Mutex<Option<uroce_verbs::Qp>>>();
    shared::<Mutex<Option<uroce_verbs::Srq>>>();
    shared::<Mutex<Option<uroce_verbs::Ah>>>();
    shared::<uroce_verbs::CompChannel>();
};
