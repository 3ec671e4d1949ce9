//! The uroce verbs API: what applications link.
//!
//! It plays the part of libibverbs plus a vendor user driver. Names and
//! semantics follow libibverbs: open a [`Context`] on a device, allocate a
//! protection domain ([`Pd`]), register memory ([`Mr`]), create completion
//! queues ([`Cq`]) and queue pairs ([`Qp`]), move QPs through their states
//! with [`Qp::modify`], post chained work requests ([`Qp::post_send`],
//! [`Qp::post_recv`] report which WR failed) and poll completions
//! ([`Cq::poll`]).
//!
//! Underneath, the driver writes WQEs into rings in host memory, publishes
//! producer indices and rings doorbells; the HCA writes CQEs into the CQ
//! ring. The control path (create, modify, destroy) goes through the HCA's
//! command interface, as a driver talks to firmware.
//!
//! Memory the HCA writes is only reached through copies ([`Mr::read`],
//! [`Mr::write`]): the safe API hands out no reference into it, so the
//! application can never race the device.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use uroce_device::command::{
    AhAttr, CmdError, Command, DeviceAttr, Gid, PortAttr, QpAttr, QpCap, QpInit, Reply,
};
use uroce_device::cqe::{Cqe, CQE_LEN};
use uroce_device::link::DeviceLink;
use uroce_device::mem::{DriverMemory, MemFault};
use uroce_device::ring::{cq_ring_shape, recv_ring_shape, send_ring_shape};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET, SCHEDULED_OFFSET};
use uroce_device::types::{Lkey, Qkey, QpState, QpType, Qpn, Rkey, SendFlags, WrOpcode};
use uroce_device::wqe::{Payload, RecvWqe, SendWqe, Sge, UdDest};
use uroce_device::{Doorbell, Event};

pub use uroce_device::command::{AhAttr as AddressHandleAttr, QpAttr as QueuePairAttr};
pub use uroce_device::types::{Access, AttrMask, EventType, Mtu, WcFlags, WcOpcode, WcStatus};
pub use uroce_device::wqe::Sge as ScatterGatherEntry;

/// What a verb can fail with (the errno libibverbs would return is
/// [`Error::errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The HCA refused a command.
    Command(CmdError),
    /// EINVAL from the driver: the text says what is wrong.
    Invalid(&'static str),
    /// ENOMEM: the queue is full, or host memory ran out.
    NoMemory(&'static str),
    /// The device memory could not be reached.
    Fault(MemFault),
}

impl Error {
    /// The errno libibverbs would return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Command(e) => e.errno(),
            Error::Invalid(_) => 22,
            Error::NoMemory(_) => 12,
            Error::Fault(_) => 14,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Command(e) => write!(f, "{e}"),
            Error::Invalid(why) => write!(f, "invalid argument: {why}"),
            Error::NoMemory(why) => write!(f, "out of memory: {why}"),
            Error::Fault(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Error {
        Error::Command(e)
    }
}

impl From<MemFault> for Error {
    fn from(e: MemFault) -> Error {
        Error::Fault(e)
    }
}

/// A verbs result.
pub type Result<T> = core::result::Result<T, Error>;

/// A device context (`ibv_context`): the application's handle on an HCA.
#[derive(Clone)]
pub struct Context {
    device: Arc<dyn DeviceLink>,
    events: Arc<EventState>,
    /// The device's limits, read once at open (they never change): queue
    /// sizes are checked against them before any ring memory is taken.
    limits: Arc<DeviceAttr>,
}

/// Where the context sorts the HCA's events: completion events of CQs that
/// have a channel go to that channel, everything else waits for
/// [`Context::next_event`].
struct EventState {
    device: Arc<dyn DeviceLink>,
    channels: Mutex<BTreeMap<u32, Weak<ChannelInner>>>,
    other: Mutex<VecDeque<Event>>,
    /// The device's host memory (fixed for its life): reached without
    /// locking the HCA on every poll and post.
    host: Arc<dyn DriverMemory>,
}

impl Context {
    /// Opens a device through its link (an in-process device's
    /// `SharedHca`, a device in another process...). One context per
    /// device is expected: it takes every event the device raises.
    pub fn open<D: DeviceLink + Clone + 'static>(device: &D) -> Context {
        Context::open_link(Arc::new(device.clone()))
    }

    /// [`Context::open`] on a shared link.
    pub fn open_link(device: Arc<dyn DeviceLink>) -> Context {
        let events = Arc::new(EventState {
            device: device.clone(),
            channels: Mutex::new(BTreeMap::new()),
            other: Mutex::new(VecDeque::new()),
            host: device.memory(),
        });
        // The device keeps only a weak link back: no reference cycle.
        let weak = Arc::downgrade(&events);
        device.on_events(Box::new(move || match weak.upgrade() {
            Some(events) => {
                dispatch(&events);
                true
            }
            // The context is gone: stop being called.
            None => false,
        }));
        let limits = match device.command(Command::QueryDevice) {
            Ok(Reply::Device(attr)) => Arc::new(attr),
            other => unreachable!("QueryDevice answers Device, not {other:?}"),
        };
        Context { device, events, limits }
    }

    /// `ibv_create_comp_channel`: a file descriptor that becomes readable
    /// when a CQ attached to it has a completion event (after
    /// [`Cq::req_notify`]). Wait on it with epoll, poll or tokio's
    /// `AsyncFd`, then call [`CompChannel::get_cq_event`].
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|_| Error::NoMemory("eventfd"))?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner { fd, ready: Mutex::new(VecDeque::new()) }),
            ctx: self.clone(),
        })
    }

    /// `ibv_create_cq` with a completion channel.
    pub fn create_cq_with_channel(&self, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        let cq = self.create_cq_unbound(cqe)?;
        locked(&self.events.channels).insert(cq.index, Arc::downgrade(&channel.inner));
        Ok(cq)
    }

    fn command(&self, command: Command) -> Result<Reply> {
        Ok(self.device.command(command)?)
    }

    fn doorbell(&self, doorbell: Doorbell) {
        self.device.kick(doorbell);
    }

    /// Refuses work on a device whose runtime has stopped (its
    /// `UdpDevice` was dropped): it would never move.
    fn check_open(&self) -> Result<()> {
        if self.device.closed() {
            return Err(Error::Invalid("the device was closed (its runtime has stopped)"));
        }
        Ok(())
    }

    /// Lets the device's runtime move packets in this thread (UDP runtime;
    /// nothing on the simulated fabric).
    fn progress(&self) {
        self.device.progress();
    }

    fn host(&self) -> &std::sync::Arc<dyn DriverMemory> {
        &self.events.host
    }

    fn alloc_ring(&self, shape: RingDesc) -> Result<RingDesc> {
        let base = self
            .host()
            .allocate(shape.bytes(), 4096)
            .map_err(|_| Error::NoMemory("ring memory"))?;
        Ok(RingDesc { base, ..shape })
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        match self.command(Command::QueryDevice)? {
            Reply::Device(attr) => Ok(attr),
            _ => unreachable!("QueryDevice answers Device"),
        }
    }

    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> Result<PortAttr> {
        match self.command(Command::QueryPort)? {
            Reply::Port(attr) => Ok(attr),
            _ => unreachable!("QueryPort answers Port"),
        }
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, index: u8) -> Result<Gid> {
        match self.command(Command::QueryGid { index })? {
            Reply::Gid(gid) => Ok(gid),
            _ => unreachable!("QueryGid answers Gid"),
        }
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        match self.command(Command::AllocPd)? {
            Reply::Index(index) => Ok(Pd { ctx: self.clone(), index, freed: Cell::new(false) }),
            _ => unreachable!("AllocPd answers Index"),
        }
    }

    /// `ibv_create_cq` for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        let cq = self.create_cq_unbound(cqe)?;
        // Its index may be a destroyed CQ's: no channel of that one's.
        locked(&self.events.channels).remove(&cq.index);
        Ok(cq)
    }

    fn create_cq_unbound(&self, cqe: u32) -> Result<Cq> {
        // rxe's rxe_cq_chk_attr: 1 ..= max_cqe, else EINVAL.
        if cqe == 0 || cqe > self.limits.max_cqe {
            return Err(Error::Invalid("CQ depth: cqe must be 1 to the device's max_cqe"));
        }
        let ring = self.alloc_ring(cq_ring_shape(cqe))?;
        match self.command(Command::CreateCq { ring }) {
            Ok(Reply::Index(index)) => {
                Ok(Cq { ctx: self.clone(), index, ring, consumer: Cell::new(0) })
            }
            Ok(_) => unreachable!("CreateCq answers Index"),
            Err(e) => {
                self.host().free(ring.base);
                Err(e)
            }
        }
    }

    /// `ibv_get_async_event`: the next asynchronous event (and completion
    /// events of CQs without a channel).
    pub fn next_event(&self) -> Option<Event> {
        dispatch(&self.events);
        locked(&self.events.other).pop_front()
    }
}

/// Locks a driver-side mutex; a panic elsewhere cannot leave these
/// queues inconsistent, so a poisoned lock is still usable.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sorts the HCA's pending events.
fn dispatch(events: &EventState) {
    while let Some(event) = events.device.poll_event() {
        let channel = match event {
            Event::Completion { cq } => locked(&events.channels).get(&cq).and_then(Weak::upgrade),
            Event::Async { .. } => None,
        };
        match (channel, event) {
            (Some(channel), Event::Completion { cq }) => channel.signal(cq),
            _ => locked(&events.other).push_back(event),
        }
    }
}

struct ChannelInner {
    fd: rustix::fd::OwnedFd,
    ready: Mutex<VecDeque<u32>>,
}

impl ChannelInner {
    fn signal(&self, cq: u32) {
        locked(&self.ready).push_back(cq);
        // An eventfd counter: a write cannot block or fail short of a
        // counter overflow, which 2^64 - 2 pending events cannot reach.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }
}

/// A completion channel (`ibv_comp_channel`).
pub struct CompChannel {
    inner: Arc<ChannelInner>,
    ctx: Context,
}

impl CompChannel {
    /// `ibv_get_cq_event` without blocking: the index of a CQ that had a
    /// completion event, or `None`. Re-arm the CQ with [`Cq::req_notify`]
    /// before polling it, as with libibverbs.
    pub fn get_cq_event(&self) -> Option<u32> {
        dispatch(&self.ctx.events);
        let mut ready = locked(&self.inner.ready);
        let cq = ready.pop_front();
        if ready.is_empty() {
            // Drain the counter so the descriptor stops being readable.
            let mut counter = [0u8; 8];
            let _ = rustix::io::read(&self.inner.fd, &mut counter);
        }
        cq
    }
}

impl rustix::fd::AsFd for CompChannel {
    fn as_fd(&self) -> rustix::fd::BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl std::os::fd::AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use rustix::fd::AsFd;
        self.inner.fd.as_fd().as_raw_fd()
    }
}

/// A protection domain (`ibv_pd`).
pub struct Pd {
    ctx: Context,
    index: u32,
    freed: Cell<bool>,
}

impl Pd {
    /// The PD's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Registers `length` bytes of fresh, zeroed memory with `access`
    /// (`ibv_reg_mr` on a buffer the library allocates). The application
    /// reaches it through [`Mr::read`] and [`Mr::write`].
    pub fn alloc_mr(&self, length: u64, access: Access) -> Result<Mr> {
        let host = self.ctx.host();
        let addr = host.allocate(length.max(1), 4096).map_err(|_| Error::NoMemory("MR memory"))?;
        self.register(addr, length, access, true).inspect_err(|_| {
            host.free(addr);
        })
    }

    /// Registers host memory at `addr` as an MR (`owned`: the MR frees it
    /// when deregistered). The caller undoes its own allocation on error.
    fn register(&self, addr: u64, length: u64, access: Access, owned: bool) -> Result<Mr> {
        let command = Command::RegMr { pd: self.index, addr, length, iova: addr, access };
        match self.ctx.command(command)? {
            Reply::Mr { lkey, rkey } => Ok(Mr {
                ctx: self.ctx.clone(),
                addr,
                length,
                lkey: Lkey(lkey),
                rkey: Rkey(rkey),
                owned,
            }),
            _ => unreachable!("RegMr answers Mr"),
        }
    }

    /// `ibv_reg_mr` on the application's own memory: registers `length`
    /// bytes at `ptr` with `access`. Only devices on real process memory
    /// ([`uroce_net::process_mem::ProcessMemory`]) accept it.
    ///
    /// # Safety
    ///
    /// Until the region is deregistered, the memory must stay allocated,
    /// and the application must neither hold references into it nor read
    /// or write it while the device may (after posting work that uses it
    /// and before its completion, or while a peer holds its R_Key): the
    /// device reads and writes it at any time, like DMA.
    pub unsafe fn reg_mr_raw(&self, ptr: *mut u8, length: usize, access: Access) -> Result<Mr> {
        let host = self.ctx.host();
        // SAFETY: the caller's contract above is the one register_external
        // asks for.
        let addr = unsafe { host.register_external(ptr, length) }
            .map_err(|_| Error::Invalid("this device cannot register external memory"))?;
        self.register(addr, length as u64, access, false).inspect_err(|_| {
            host.unregister_external(addr);
        })
    }

    /// `ibv_alloc_mw`.
    pub fn alloc_mw(&self, mw_type: u8) -> Result<Mw> {
        match self.ctx.command(Command::AllocMw { pd: self.index, mw_type })? {
            Reply::Mw { rkey } => {
                Ok(Mw { ctx: self.ctx.clone(), rkey: Cell::new(Rkey(rkey)), mw_type })
            }
            _ => unreachable!("AllocMw answers Mw"),
        }
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: AhAttr) -> Result<Ah> {
        match self.ctx.command(Command::CreateAh { pd: self.index, attr })? {
            Reply::Index(index) => Ok(Ah { ctx: self.ctx.clone(), index }),
            _ => unreachable!("CreateAh answers Index"),
        }
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        let limits = &self.ctx.limits;
        if max_wr > limits.max_srq_wr || max_sge > limits.max_srq_sge {
            return Err(Error::Invalid("SRQ size: max_wr or max_sge above the device's limit"));
        }
        let ring = self.ctx.alloc_ring(recv_ring_shape(max_wr, max_sge))?;
        let cmd = Command::CreateSrq { pd: self.index, ring, max_sge, limit };
        match self.ctx.command(cmd) {
            Ok(Reply::Index(index)) => {
                Ok(Srq { ctx: self.ctx.clone(), index, ring, max_sge, producer: Cell::new(0) })
            }
            Ok(_) => unreachable!("CreateSrq answers Index"),
            Err(e) => {
                self.ctx.host().free(ring.base);
                Err(e)
            }
        }
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        let cap = init.cap;
        check_qp_cap(&cap, init.srq.is_some(), &self.ctx.limits)?;
        let sq = self.ctx.alloc_ring(send_ring_shape(
            cap.max_send_wr,
            cap.max_send_sge,
            cap.max_inline_data,
        ))?;
        let rq = match init.srq {
            Some(_) => None,
            None => Some(self.ctx.alloc_ring(recv_ring_shape(cap.max_recv_wr, cap.max_recv_sge))?),
        };
        let cmd = Command::CreateQp(QpInit {
            pd: self.index,
            qp_type: init.qp_type,
            send_cq: init.send_cq.index,
            recv_cq: init.recv_cq.index,
            srq: init.srq.map(|s| s.index),
            sq,
            rq,
            cap,
            sq_sig_all: init.sq_sig_all,
        });
        match self.ctx.command(cmd) {
            Ok(Reply::Qp { qpn }) => Ok(Qp {
                ctx: self.ctx.clone(),
                qpn,
                qp_type: init.qp_type,
                cap,
                sq,
                rq,
                sq_producer: Cell::new(0),
                rq_producer: Cell::new(0),
                state: Cell::new(QpState::Reset),
            }),
            Ok(_) => unreachable!("CreateQp answers Qp"),
            Err(e) => {
                let host = self.ctx.host();
                host.free(sq.base);
                if let Some(rq) = rq {
                    host.free(rq.base);
                }
                Err(e)
            }
        }
    }

    /// `ibv_dealloc_pd`: refused (EBUSY) while anything uses the PD.
    pub fn dealloc(&self) -> Result<()> {
        self.ctx.command(Command::DeallocPd { pd: self.index })?;
        self.freed.set(true);
        Ok(())
    }
}

/// rxe's `rxe_qp_chk_cap`: every size within the device's limits (EINVAL),
/// checked before the rings are allocated.
fn check_qp_cap(cap: &QpCap, has_srq: bool, limits: &DeviceAttr) -> Result<()> {
    if cap.max_send_wr > limits.max_qp_wr || cap.max_send_sge > limits.max_sge {
        return Err(Error::Invalid(
            "QP size: max_send_wr or max_send_sge above the device's limit",
        ));
    }
    if cap.max_inline_data > limits.max_inline_data {
        return Err(Error::Invalid("QP size: max_inline_data above the device's limit"));
    }
    if !has_srq && (cap.max_recv_wr > limits.max_qp_wr || cap.max_recv_sge > limits.max_sge) {
        return Err(Error::Invalid(
            "QP size: max_recv_wr or max_recv_sge above the device's limit",
        ));
    }
    Ok(())
}

/// A registered memory region (`ibv_mr`).
pub struct Mr {
    ctx: Context,
    addr: u64,
    length: u64,
    lkey: Lkey,
    rkey: Rkey,
    /// The library allocated the memory (else the application registered
    /// its own with [`Pd::reg_mr_raw`]).
    owned: bool,
}

impl Mr {
    /// Its first virtual address (what SGEs and remote peers use).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Its length.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// Local key.
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        self.rkey
    }
    /// An SGE covering `len` bytes from `offset`. The SGE is not checked
    /// against the region (the HCA checks it when the WR runs, as hardware
    /// does); an address past 2^64 wraps, and the HCA refuses it.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.addr.wrapping_add(offset), length: len, lkey: self.lkey }
    }

    fn check(&self, offset: u64, len: usize) -> Result<u64> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.length => Ok(self.addr + offset),
            _ => Err(Error::Invalid("range outside the memory region")),
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = self.check(offset, dst.len())?;
        Ok(self.ctx.host().read(at, dst)?)
    }

    /// Copies `len` bytes out of the region into a new vector.
    pub fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let at = self.check(offset, src.len())?;
        Ok(self.ctx.host().write(at, src)?)
    }

    /// `ibv_dereg_mr`. Memory the library allocated is freed with it;
    /// the application's own memory is handed back.
    pub fn dereg(self) -> core::result::Result<(), (Mr, Error)> {
        match self.ctx.command(Command::DeregMr { lkey: self.lkey.0 }) {
            Ok(_) => {
                let host = self.ctx.host();
                if self.owned {
                    host.free(self.addr);
                } else {
                    host.unregister_external(self.addr);
                }
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// A memory window (`ibv_mw`).
pub struct Mw {
    ctx: Context,
    rkey: Cell<Rkey>,
    mw_type: u8,
}

impl Mw {
    /// The window's current R_Key.
    pub fn rkey(&self) -> Rkey {
        self.rkey.get()
    }
    /// Type 1 or 2.
    pub fn mw_type(&self) -> u8 {
        self.mw_type
    }
    /// Records the R_Key a bind WR gave the window.
    pub fn set_rkey(&self, rkey: Rkey) {
        self.rkey.set(rkey);
    }
    /// `ibv_dealloc_mw`.
    pub fn dealloc(self) -> Result<()> {
        self.ctx.command(Command::DeallocMw { rkey: self.rkey.get().0 })?;
        Ok(())
    }
}

/// An address handle (`ibv_ah`).
pub struct Ah {
    ctx: Context,
    index: u32,
}

impl Ah {
    /// The AH's index.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// `ibv_destroy_ah`.
    pub fn destroy(self) -> Result<()> {
        self.ctx.command(Command::DestroyAh { ah: self.index })?;
        Ok(())
    }
}

/// A work completion (`ibv_wc`).
pub type WorkCompletion = Cqe;

/// A completion queue (`ibv_cq`).
pub struct Cq {
    ctx: Context,
    index: u32,
    ring: RingDesc,
    consumer: Cell<u32>,
}

impl Cq {
    /// The CQ's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>> {
        self.ctx.check_open()?;
        self.ctx.progress();
        let host = self.ctx.host();
        let producer = host.load_acquire_u32(self.ring.base + PRODUCER_OFFSET)?;
        let mut out = Vec::new();
        let mut consumer = self.consumer.get();
        while consumer != producer && out.len() < max {
            let mut bytes = [0u8; CQE_LEN];
            host.read(self.ring.entry_addr(consumer), &mut bytes)?;
            let cqe = Cqe::decode(&bytes).ok_or(Error::Invalid("corrupt CQE"))?;
            out.push(cqe);
            consumer = consumer.wrapping_add(1);
        }
        if !out.is_empty() {
            self.consumer.set(consumer);
            host.store_release_u32(self.ring.base + CONSUMER_OFFSET, consumer)?;
        }
        Ok(out)
    }

    /// `ibv_req_notify_cq`: the next completion (or the next solicited one)
    /// raises an [`Event::Completion`].
    pub fn req_notify(&self, solicited_only: bool) {
        self.ctx.doorbell(Doorbell::ArmCq { cq: self.index, solicited_only });
        self.ctx.device.app_sleeping();
    }

    /// `ibv_destroy_cq`: refused (EBUSY) while QPs use it.
    pub fn destroy(self) -> core::result::Result<(), (Cq, Error)> {
        match self.ctx.command(Command::DestroyCq { cq: self.index }) {
            Ok(_) => {
                locked(&self.ctx.events.channels).remove(&self.index);
                self.ctx.host().free(self.ring.base);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// A shared receive queue (`ibv_srq`).
pub struct Srq {
    ctx: Context,
    index: u32,
    ring: RingDesc,
    max_sge: u32,
    producer: Cell<u32>,
}

impl Srq {
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), (usize, Error)> {
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let mut producer = self.producer.get();
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge as usize {
                return Err((i, Error::Invalid("more SGEs than max_sge")));
            }
            let consumer = host
                .load_acquire_u32(self.ring.base + CONSUMER_OFFSET)
                .map_err(|e| (i, e.into()))?;
            if producer.wrapping_sub(consumer) >= self.ring.entries {
                return Err((i, Error::NoMemory("SRQ full")));
            }
            let wqe = RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.clone() };
            let mut slot = vec![0u8; self.ring.stride as usize];
            wqe.encode(&mut slot);
            host.write(self.ring.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
            producer = producer.wrapping_add(1);
            self.producer.set(producer);
            host.store_release_u32(self.ring.base + PRODUCER_OFFSET, producer)
                .map_err(|e| (i, e.into()))?;
        }
        self.ctx.doorbell(Doorbell::Srq(self.index));
        self.ctx.device.posted_receive();
        Ok(())
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.ctx.command(Command::ModifySrq { srq: self.index, limit })?;
        Ok(())
    }
}

/// QP creation attributes (`ibv_qp_init_attr`).
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// Send completions go here.
    pub send_cq: &'a Cq,
    /// Receive completions go here.
    pub recv_cq: &'a Cq,
    /// Receives come from this SRQ instead of an RQ.
    pub srq: Option<&'a Srq>,
    /// Sizes.
    pub cap: QpCap,
    /// Every send WR is signaled.
    pub sq_sig_all: bool,
}

/// Where a send goes and what it carries beyond the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteTarget {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags (SIGNALED, SOLICITED, FENCE, INLINE).
    pub flags: SendFlags,
    /// Data (ignored when `inline_data` is set).
    pub sg_list: Vec<Sge>,
    /// Inline data (sets INLINE).
    pub inline_data: Option<Vec<u8>>,
    /// Immediate data, or the R_Key to invalidate.
    pub imm_or_inv: u32,
    /// Remote address and key (RDMA, atomics).
    pub remote: RemoteTarget,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// UD destination.
    pub ud: Option<(u32, Qpn, Qkey)>,
}

impl SendWr {
    /// The WQE the driver writes into the send ring for this WR, without
    /// the QP's checks (opcode, SGE and inline limits, UD address).
    pub fn to_wqe(&self) -> SendWqe {
        let (ah, remote_qpn, remote_qkey) = self.ud.unwrap_or((0, Qpn::new(0), Qkey(0)));
        let (payload, flags) = match &self.inline_data {
            Some(data) => (Payload::Inline(data.clone()), self.flags | SendFlags::INLINE),
            None => (Payload::Sges(self.sg_list.clone()), self.flags),
        };
        SendWqe {
            wr_id: self.wr_id,
            opcode: self.opcode,
            flags,
            imm_or_inv: self.imm_or_inv,
            remote_addr: self.remote.addr,
            rkey: self.remote.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
            ud: UdDest { ah, remote_qpn, remote_qkey },
            payload,
        }
    }

    /// A WR with no data and no remote target.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            sg_list: Vec::new(),
            inline_data: None,
            imm_or_inv: 0,
            remote: RemoteTarget::default(),
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
}

impl SendWr {
    /// A type-2 memory window bind (`IBV_WR_BIND_MW`): binds `mw` to
    /// `length` bytes of `mr` from `offset` with `access`, under the new
    /// 8-bit key `new_key`. Returns the WR and the R_Key the window will
    /// have once the bind completes.
    pub fn bind_mw(
        wr_id: u64,
        mw: &Mw,
        mr: &Mr,
        offset: u64,
        length: u64,
        access: Access,
        new_key: u8,
    ) -> (SendWr, Rkey) {
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.imm_or_inv = mw.rkey().0;
        wr.remote = RemoteTarget { addr: mr.addr() + offset, rkey: Rkey(u32::from(new_key)) };
        wr.compare_add = length;
        wr.swap = u64::from(access.0);
        wr.ud = Some((mr.lkey().0, Qpn::new(0), Qkey(0)));
        let new_rkey = Rkey((mw.rkey().0 & !0xff) | u32::from(new_key));
        (wr, new_rkey)
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where data goes.
    pub sg_list: Vec<Sge>,
}

/// A queue pair (`ibv_qp`).
pub struct Qp {
    ctx: Context,
    qpn: Qpn,
    qp_type: QpType,
    cap: QpCap,
    sq: RingDesc,
    rq: Option<RingDesc>,
    sq_producer: Cell<u32>,
    rq_producer: Cell<u32>,
    state: Cell<QpState>,
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.ctx.command(Command::ModifyQp { qpn: self.qpn, attr: *attr, mask })?;
        if mask.contains(AttrMask::STATE) {
            if let Some(state) = attr.qp_state {
                if state == QpState::Reset {
                    self.sq_producer.set(0);
                    self.rq_producer.set(0);
                    let host = self.ctx.host();
                    for ring in std::iter::once(self.sq).chain(self.rq) {
                        host.store_release_u32(ring.base + PRODUCER_OFFSET, 0)?;
                        host.store_release_u32(ring.base + CONSUMER_OFFSET, 0)?;
                    }
                }
                self.state.set(state);
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        match self.ctx.command(Command::QueryQp { qpn: self.qpn })? {
            Reply::QpAttr(attr) => {
                if let Some(state) = attr.qp_state {
                    self.state.set(state);
                }
                Ok(attr)
            }
            _ => unreachable!("QueryQp answers QpAttr"),
        }
    }

    /// `ibv_post_send`: posts a chain; on failure, the index of the WR that
    /// failed (the ones before it were posted) and why. One doorbell for
    /// the whole chain.
    pub fn post_send(&self, wrs: &[SendWr]) -> core::result::Result<(), (usize, Error)> {
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let state = self.state.get();
        let mut posted = 0;
        let result = (|| {
            if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
                return Err((0, Error::Invalid("post_send on a QP that is not ready to send")));
            }
            let mut producer = self.sq_producer.get();
            for (i, wr) in wrs.iter().enumerate() {
                let wqe = self.build_send_wqe(wr).map_err(|e| (i, e))?;
                let consumer = host
                    .load_acquire_u32(self.sq.base + CONSUMER_OFFSET)
                    .map_err(|e| (i, e.into()))?;
                if producer.wrapping_sub(consumer) >= self.cap.max_send_wr {
                    return Err((i, Error::NoMemory("send queue full")));
                }
                let mut slot = vec![0u8; self.sq.stride as usize];
                wqe.encode(&mut slot);
                host.write(self.sq.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
                producer = producer.wrapping_add(1);
                self.sq_producer.set(producer);
                host.store_release_u32(self.sq.base + PRODUCER_OFFSET, producer)
                    .map_err(|e| (i, e.into()))?;
                posted += 1;
            }
            Ok(())
        })();
        if posted > 0 && !self.device_will_look(host) {
            self.ctx.doorbell(Doorbell::SendQueue(self.qpn));
        }
        result
    }

    /// Whether the device has the send queue in its schedule and promised
    /// to read the producer index again (its device-scheduled flag), so the
    /// kick can be skipped. The fence orders the producer index published
    /// before it against the flag read after it; the device fences the
    /// other way (`uroce_device::ring`).
    fn device_will_look(&self, host: &Arc<dyn DriverMemory>) -> bool {
        host.fence_seq_cst();
        host.load_acquire_u32(self.sq.base + SCHEDULED_OFFSET).is_ok_and(|flag| flag != 0)
    }

    fn build_send_wqe(&self, wr: &SendWr) -> Result<SendWqe> {
        if !wr.opcode.allowed_on(self.qp_type) {
            return Err(Error::Invalid("opcode not allowed on this QP type"));
        }
        match &wr.inline_data {
            Some(data) if data.len() > self.cap.max_inline_data as usize => {
                return Err(Error::Invalid("inline data above max_inline_data"));
            }
            None if wr.sg_list.len() > self.cap.max_send_sge as usize => {
                return Err(Error::Invalid("more SGEs than max_send_sge"));
            }
            _ => {}
        }
        if self.qp_type == QpType::Ud && wr.ud.is_none() {
            return Err(Error::Invalid("a UD send needs an address handle"));
        }
        Ok(wr.to_wqe())
    }

    /// `ibv_post_recv`: posts a chain; on failure, the index of the WR that
    /// failed and why.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), (usize, Error)> {
        let Some(rq) = self.rq else {
            return Err((0, Error::Invalid("the QP receives from an SRQ")));
        };
        if self.state.get() == QpState::Reset {
            return Err((0, Error::Invalid("post_recv on a QP in RESET")));
        }
        self.ctx.check_open().map_err(|e| (0, e))?;
        let host = self.ctx.host();
        let mut producer = self.rq_producer.get();
        let mut posted = 0;
        let result = (|| {
            for (i, wr) in wrs.iter().enumerate() {
                if wr.sg_list.len() > self.cap.max_recv_sge as usize {
                    return Err((i, Error::Invalid("more SGEs than max_recv_sge")));
                }
                let consumer =
                    host.load_acquire_u32(rq.base + CONSUMER_OFFSET).map_err(|e| (i, e.into()))?;
                if producer.wrapping_sub(consumer) >= self.cap.max_recv_wr {
                    return Err((i, Error::NoMemory("receive queue full")));
                }
                let wqe = RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.clone() };
                let mut slot = vec![0u8; rq.stride as usize];
                wqe.encode(&mut slot);
                host.write(rq.entry_addr(producer), &slot).map_err(|e| (i, e.into()))?;
                producer = producer.wrapping_add(1);
                self.rq_producer.set(producer);
                host.store_release_u32(rq.base + PRODUCER_OFFSET, producer)
                    .map_err(|e| (i, e.into()))?;
                posted += 1;
            }
            Ok(())
        })();
        if posted > 0 {
            self.ctx.doorbell(Doorbell::RecvQueue(self.qpn));
            self.ctx.device.posted_receive();
        }
        result
    }

    /// `ibv_bind_mw` for a type-1 window: posts the bind through this QP's
    /// send queue (as libibverbs does) under the next 8-bit key, and updates
    /// the window's R_Key at once. The bind completes like any WR.
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &Mw,
        mr: &Mr,
        offset: u64,
        length: u64,
        access: Access,
    ) -> Result<Rkey> {
        if mw.mw_type() != 1 {
            return Err(Error::Invalid("ibv_bind_mw binds type-1 windows; use a BIND_MW WR"));
        }
        let next_key = (mw.rkey().0 as u8).wrapping_add(1);
        let (wr, rkey) = SendWr::bind_mw(wr_id, mw, mr, offset, length, access, next_key);
        self.post_send(&[wr]).map_err(|(_, e)| e)?;
        mw.set_rkey(rkey);
        Ok(rkey)
    }

    /// `ibv_destroy_qp`.
    pub fn destroy(self) -> Result<()> {
        self.ctx.command(Command::DestroyQp { qpn: self.qpn })?;
        let host = self.ctx.host();
        host.free(self.sq.base);
        if let Some(rq) = self.rq {
            host.free(rq.base);
        }
        Ok(())
    }
}

/// Attributes for the usual RC/UC connection steps, as `ibv_rc_pingpong`
/// sets them.
pub mod connect {
    use super::*;

    /// RESET → INIT.
    pub fn to_init(qp: &Qp, access: Access, qkey: u32) -> Result<()> {
        let mut attr = QpAttr { qp_state: Some(QpState::Init), port_num: 1, ..QpAttr::default() };
        let mut mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
        if qp.qp_type() == QpType::Ud {
            attr.qkey = qkey;
            mask = mask | AttrMask::QKEY;
        } else {
            attr.qp_access_flags = access;
            mask = mask | AttrMask::ACCESS_FLAGS;
        }
        qp.modify(&attr, mask)
    }

    /// The remote end of a connection.
    #[derive(Debug, Clone, Copy)]
    pub struct Remote {
        /// Its GID.
        pub gid: Gid,
        /// Its QPN.
        pub qpn: Qpn,
        /// Its first PSN.
        pub psn: u32,
    }

    /// Timers and limits of a connection.
    #[derive(Debug, Clone, Copy)]
    pub struct Tuning {
        /// Path MTU.
        pub mtu: Mtu,
        /// Our first PSN.
        pub sq_psn: u32,
        /// Local ACK timeout exponent.
        pub timeout: u8,
        /// Transport retries.
        pub retry_cnt: u8,
        /// RNR retries (7 = infinite).
        pub rnr_retry: u8,
        /// RNR timer code we send.
        pub min_rnr_timer: u8,
        /// READ/atomic credits both ways.
        pub rd_atomic: u8,
        /// Source GID index.
        pub sgid_index: u8,
        /// Hop limit (IPv4 TTL) of the path.
        pub hop_limit: u8,
        /// Service level of the path.
        pub sl: u8,
    }

    /// INIT → RTR → RTS for RC and UC; INIT → RTR → RTS for UD.
    pub fn to_rts(qp: &Qp, remote: Option<Remote>, tuning: &Tuning) -> Result<()> {
        let mut attr = QpAttr { qp_state: Some(QpState::Rtr), ..QpAttr::default() };
        let mut mask = AttrMask::STATE;
        if let Some(remote) = remote {
            attr.path_mtu = Some(tuning.mtu);
            attr.dest_qp_num = remote.qpn.value();
            attr.rq_psn = remote.psn;
            attr.ah_attr = AhAttr {
                dgid: remote.gid,
                sgid_index: tuning.sgid_index,
                hop_limit: tuning.hop_limit,
                sl: tuning.sl,
                port_num: 1,
                ..AhAttr::default()
            };
            mask = mask | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
            if qp.qp_type() == QpType::Rc {
                attr.max_dest_rd_atomic = tuning.rd_atomic;
                attr.min_rnr_timer = tuning.min_rnr_timer;
                mask = mask | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
            }
        }
        qp.modify(&attr, mask)?;
        let mut attr =
            QpAttr { qp_state: Some(QpState::Rts), sq_psn: tuning.sq_psn, ..QpAttr::default() };
        let mut mask = AttrMask::STATE | AttrMask::SQ_PSN;
        if qp.qp_type() == QpType::Rc {
            attr.timeout = tuning.timeout;
            attr.retry_cnt = tuning.retry_cnt;
            attr.rnr_retry = tuning.rnr_retry;
            attr.max_rd_atomic = tuning.rd_atomic;
            mask = mask
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC;
        }
        qp.modify(&attr, mask)
    }

    /// Moves a QP to the error state.
    pub fn to_error(qp: &Qp) -> Result<()> {
        let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
        qp.modify(&attr, AttrMask::STATE)
    }
}
