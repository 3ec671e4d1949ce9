//! Fuzz bodies for the HCA: hostile packets ([`hca_packets`]) and a hostile
//! application ([`hca_wqes`]), both over host memory that fails the run on
//! the first access outside what the device may touch ([`GuardedMemory`]).
//!
//! Like [`crate::fuzz`], both functions take arbitrary bytes and must never
//! panic: every `assert!` here states something the HCA promises whatever
//! the input (no panic, no access outside registered memory and rings,
//! well-formed packets and completions, sane counters, a device that still
//! works), so a panic is a bug in the emulator — or in this harness —, never
//! in the input. The cargo-fuzz targets `hca_packets` and `hca_wqes` and
//! the proptest suite (`tests/tests/hca_fuzz.rs`) run them.
//!
//! The input is read as a small program: a few bytes of setup (PSNs, MTUs,
//! retry counts), then a sequence of actions, each an action byte and its
//! operands. Running out of bytes reads zeros, so every input is a valid
//! program and libFuzzer's mutations stay meaningful.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard};
use uroce_device::command::{AhAttr, CmdError, Command, Gid, QpAttr, QpCap, Reply};
use uroce_device::cqe::Cqe;
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, MemFault, SimMemory};
use uroce_device::ring::{cq_ring_shape, recv_ring_shape};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET};
use uroce_device::types::{
    make_key, Access, AttrMask, EventType, Lkey, Mtu, QpState, QpType, Qpn, SendFlags, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};
use uroce_device::wqe::{RecvWqe, Sge, RECV_HEADER_LEN};
use uroce_device::{Doorbell, Event};
use uroce_hca::config::HcaConfig;
use uroce_hca::endpoint::MAX_PACKET_LEN;
use uroce_hca::{Endpoint, Hca, Instant, SharedHca, Transmit};
use uroce_sim::{Fabric, FabricConfig, Probability};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{Context, Cq, Mw, Pd, Qp, QpInitAttr, RecvWr, RemoteTarget, SendWr, Srq};
use uroce_wire::frame::{classify, Classified, FrameRepr, Link};
use uroce_wire::opcode::{Mask, Opcode, Transport};
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, icrc, ieth, immdt, rdeth, reth, roce, Psn,
    Qkey, Rkey,
};

// ---------------------------------------------------------------------------
// Reading the input
// ---------------------------------------------------------------------------

/// The fuzz input, read front to back; past its end every read gives 0.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A 24-bit value (a PSN or a QPN).
    pub fn u24(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), 0])
    }

    /// A number below `n` (0 when `n` is 0 or 1).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => usize::from(self.u8()) % n,
            _ => self.u32() as usize % n,
        }
    }

    /// A coin.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// True with probability about `1 / n`.
    pub fn one_in(&mut self, n: u8) -> bool {
        self.u8() % n.max(1) == 0
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (taken, rest) = self.data.split_at(n);
        self.data = rest;
        taken
    }

    /// One of `items` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------
// Host memory that fails the run on a stray access
// ---------------------------------------------------------------------------

/// What an allocation is for, as the harness declares it before it (or the
/// verbs library) allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocKind {
    /// A WQE, SRQ or CQ ring with its indices: the device may touch all of it.
    Ring,
    /// A data buffer: the device may touch only the parts registered as
    /// memory regions.
    Buffer,
}

/// One registered memory region, as the harness registered it.
#[derive(Debug, Clone)]
struct GuardRegion {
    key: u32,
    start: u64,
    len: u64,
    /// The device may read it (false for a region of a protection domain
    /// no QP uses: nothing may touch it).
    read: bool,
    /// The device may write it (the region has LOCAL_WRITE).
    write: bool,
    label: &'static str,
}

#[derive(Debug)]
struct GuardState {
    /// Live allocations: start → (length, kind).
    allocations: BTreeMap<u64, (u64, AllocKind)>,
    regions: Vec<GuardRegion>,
    mode: AllocKind,
    /// Allocations since the last [`GuardedMemory::take_recent`].
    recent: Vec<(u64, u64)>,
    /// Accesses checked, for statistics.
    checked: u64,
}

/// Host memory that delegates to a [`SimMemory`] but panics when the
/// device reads or writes anything that is neither inside a ring the
/// driver allocated nor inside a registered memory region's host range;
/// and when it writes a region it may not write (no LOCAL_WRITE).
///
/// [`SimMemory::strict`] only catches accesses outside *allocated* memory;
/// rings and MR buffers are allocated, so a stray access that stays inside
/// an allocation (past the end of a region registered over part of its
/// buffer, a slot of a destroyed QP's ring...) goes unseen there. Here the
/// harness says which allocations are rings and which bytes are
/// registered, and everything else is off limits: the buffers of partial
/// registrations leave unregistered bytes on both sides of their region,
/// and [`SimMemory`] leaves unmapped gaps between allocations.
///
/// The application's own accesses go through [`GuardedMemory::inner`]
/// (pattern fills, hostile ring writes), or through the verbs library,
/// which only touches rings.
pub struct GuardedMemory {
    inner: SimMemory,
    state: Mutex<GuardState>,
}

impl GuardedMemory {
    /// A guarded arena of at most `budget_bytes`.
    pub fn new(budget_bytes: u64) -> GuardedMemory {
        GuardedMemory {
            inner: SimMemory::new(budget_bytes),
            state: Mutex::new(GuardState {
                allocations: BTreeMap::new(),
                regions: Vec::new(),
                mode: AllocKind::Buffer,
                recent: Vec::new(),
                checked: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GuardState> {
        // A panic while the lock is held (a caught violation) must not hide
        // later ones behind a poisoned mutex.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The unguarded memory, for the application's own accesses.
    pub fn inner(&self) -> &SimMemory {
        &self.inner
    }

    /// What the next allocations are for.
    pub fn set_mode(&self, kind: AllocKind) {
        self.lock().mode = kind;
    }

    /// The allocations (start, length) made since the last call.
    pub fn take_recent(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.lock().recent)
    }

    /// Declares a registered region `[start, start + len)` under `key`.
    pub fn add_region(
        &self,
        key: u32,
        start: u64,
        len: u64,
        read: bool,
        write: bool,
        label: &'static str,
    ) {
        self.lock().regions.push(GuardRegion { key, start, len, read, write, label });
    }

    /// Forgets the region registered under `key` (deregistered).
    pub fn remove_region(&self, key: u32) {
        self.lock().regions.retain(|r| r.key != key);
    }

    /// Accesses checked so far.
    pub fn checked(&self) -> u64 {
        self.lock().checked
    }

    fn check(&self, what: &str, addr: u64, len: u64, write: bool) {
        if len == 0 {
            return;
        }
        let mut state = self.lock();
        state.checked += 1;
        let Some(end) = addr.checked_add(len) else {
            drop(state);
            panic!("GuardedMemory: {what} of {len} bytes at {addr:#x} wraps the address space");
        };
        let in_ring = state.allocations.range(..=addr).next_back().is_some_and(
            |(&start, &(alloc_len, kind))| kind == AllocKind::Ring && end <= start + alloc_len,
        );
        if in_ring {
            return;
        }
        let covering: Vec<&GuardRegion> =
            state.regions.iter().filter(|r| addr >= r.start && end <= r.start + r.len).collect();
        let allowed = covering.iter().any(|r| if write { r.write } else { r.read });
        if allowed {
            return;
        }
        let message = if covering.is_empty() {
            format!(
                "GuardedMemory: {what} of {len} bytes at {addr:#x} is outside every ring and \
                 registered region ({})",
                describe(&state, addr)
            )
        } else {
            let labels: Vec<&str> = covering.iter().map(|r| r.label).collect();
            format!(
                "GuardedMemory: {what} of {len} bytes at {addr:#x} touches region(s) {labels:?}, \
                 which the device may not {}",
                if write { "write" } else { "read" }
            )
        };
        drop(state);
        panic!("{message}");
    }
}

/// Where `addr` is relative to the nearest allocation, for messages.
fn describe(state: &GuardState, addr: u64) -> String {
    match state.allocations.range(..=addr).next_back() {
        Some((&start, &(len, kind))) if addr < start + len => {
            let regions: Vec<String> = state
                .regions
                .iter()
                .filter(|r| r.start >= start && r.start < start + len)
                .map(|r| {
                    format!(
                        "{} at +{:#x}..+{:#x}",
                        r.label,
                        r.start - start,
                        r.start - start + r.len
                    )
                })
                .collect();
            format!("offset {:#x} of a {kind:?} allocation of {len:#x} bytes; regions there: {regions:?}", addr - start)
        }
        Some((&start, &(len, kind))) => {
            format!("{:#x} bytes past a {kind:?} allocation of {len:#x} bytes", addr - start - len)
        }
        None => "below every allocation".to_string(),
    }
}

impl HostMemory for GuardedMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        self.check("read", addr, dst.len() as u64, false);
        self.inner.read(addr, dst)
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        self.check("write", addr, src.len() as u64, true);
        self.inner.write(addr, src)
    }

    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        self.check("index load", addr, 4, false);
        self.inner.load_acquire_u32(addr)
    }

    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        self.check("index store", addr, 4, true);
        self.inner.store_release_u32(addr, value)
    }

    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        self.check("compare-and-swap", addr, 8, true);
        self.inner.compare_swap_u64(addr, compare, swap)
    }

    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        self.check("fetch-and-add", addr, 8, true);
        self.inner.fetch_add_u64(addr, add)
    }

    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.check("atomic store", addr, 8, true);
        self.inner.store_u64(addr, value)
    }
}

impl DriverMemory for GuardedMemory {
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        let addr = self.inner.allocate(len, align)?;
        let mut state = self.lock();
        let kind = state.mode;
        state.allocations.insert(addr, (len, kind));
        state.recent.push((addr, len));
        Ok(addr)
    }

    fn free(&self, addr: u64) -> bool {
        self.lock().allocations.remove(&addr);
        self.inner.free(addr)
    }
}

// ---------------------------------------------------------------------------
// One HCA with the application's objects
// ---------------------------------------------------------------------------

const LOCAL_WRITE: Access = Access::LOCAL_WRITE;
const REMOTE_ALL: Access = Access(2 | 4 | 8);
const EVERYTHING: Access = Access(1 | 2 | 4 | 8 | 16);

/// A memory region to register: `len` bytes at `offset` of a fresh buffer
/// of `alloc` bytes, so that bytes before and after it stay unregistered.
struct MrSpec {
    label: &'static str,
    alloc: u64,
    offset: u64,
    len: u64,
    /// The virtual address keys see (`None`: the host address).
    iova: Option<u64>,
    access: Access,
    /// In the protection domain of the QPs (else in a second, unused one).
    own_pd: bool,
}

const MR_SPECS: [MrSpec; 6] = [
    // The main target: everything, seen at an iova unrelated to the host
    // address, registered over the middle of its buffer.
    MrSpec {
        label: "rw",
        alloc: 3 * 4096,
        offset: 128,
        len: 8000,
        iova: Some(0x7000_0000_0080),
        access: EVERYTHING,
        own_pd: true,
    },
    // Remote read only: the device never writes it.
    MrSpec {
        label: "read-only",
        alloc: 8192,
        offset: 512,
        len: 2048,
        iova: None,
        access: Access::REMOTE_READ,
        own_pd: true,
    },
    // Local write only: receive buffers and READ targets.
    MrSpec {
        label: "local",
        alloc: 4096,
        offset: 0,
        len: 4096,
        iova: None,
        access: LOCAL_WRITE,
        own_pd: true,
    },
    // Host address 4 bytes off an 8-byte boundary, iova aligned: atomics
    // land on unaligned host words.
    MrSpec {
        label: "odd",
        alloc: 4096,
        offset: 4,
        len: 1024,
        iova: Some(0x10_0000_0000),
        access: Access(1 | 2 | 4 | 8),
        own_pd: true,
    },
    // The last 8191 bytes of the virtual address space.
    MrSpec {
        label: "top",
        alloc: 3 * 4096,
        offset: 8,
        len: 8191,
        iova: Some(u64::MAX - 8191),
        access: Access(1 | 2 | 4 | 8),
        own_pd: true,
    },
    // Another protection domain: no QP may touch it.
    MrSpec {
        label: "other-pd",
        alloc: 4096,
        offset: 0,
        len: 4096,
        iova: None,
        access: EVERYTHING,
        own_pd: false,
    },
];

/// A registered region, from the application's side.
#[derive(Debug, Clone)]
struct MrInfo {
    spec: usize,
    key: u32,
    iova: u64,
    len: u64,
    host: u64,
    live: bool,
}

/// Where a connected QP's peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// RC or UC: the peer's address and QPN.
    Connected { ip: Ipv4Addr, qpn: Qpn },
    /// UD.
    Datagram,
}

/// A QP, from the application's side.
struct QpInfo {
    qp: Option<Qp>,
    qpn: Qpn,
    qp_type: QpType,
    cq: usize,
    uses_srq: bool,
    peer: Peer,
    mtu: u32,
    qkey: u32,
    cap: QpCap,
    sq: RingDesc,
    rq: Option<RingDesc>,
}

/// A CQ, from the application's side.
struct CqInfo {
    cq: Cq,
    ring: RingDesc,
    /// The HCA reported an overrun (CQ_ERR): completions may be lost.
    overrun: bool,
}

/// How a QP is connected.
#[derive(Debug, Clone, Copy)]
struct LinkSpec {
    peer: Peer,
    access: Access,
    qkey: u32,
    sq_psn: u32,
    rq_psn: u32,
    tuning: Tuning,
}

/// One HCA, its guarded memory, and the application's verbs objects.
struct Node {
    hca: SharedHca,
    guard: Arc<GuardedMemory>,
    ctx: Context,
    pd: Pd,
    other_pd: Pd,
    ip: Ipv4Addr,
    ip6: Ipv6Addr,
    cqs: Vec<CqInfo>,
    mrs: Vec<MrInfo>,
    mws: Vec<Mw>,
    srq: Option<(Srq, RingDesc)>,
    qps: Vec<QpInfo>,
    ahs: Vec<u32>,
    /// Keys worth trying that no table above holds (windows after a bind).
    key_hints: Vec<u32>,
    /// Every QPN this node ever had.
    all_qpns: Vec<Qpn>,
}

/// A small device: tables big enough for the harness, small enough that
/// the fuzzer can fill some of them.
fn config() -> HcaConfig {
    HcaConfig {
        max_qp: 64,
        max_qp_wr: 256,
        max_cq: 16,
        max_cqe: 1023,
        max_mr: 64,
        max_pd: 8,
        max_ah: 16,
        max_srq: 4,
        max_srq_wr: 256,
        ..HcaConfig::default()
    }
}

impl Node {
    /// Node `n` at 10.0.0.(n+1): an HCA with two PDs, a big and a tiny CQ,
    /// the regions of [`MR_SPECS`] (pattern-filled), two memory windows and
    /// an SRQ. QPs come later.
    fn new(n: u8) -> Node {
        let ip = Ipv4Addr::new(10, 0, 0, 1 + n);
        let mac = [0x02, 0, 0, 0, 0, 1 + n];
        let link_local = Gid::link_local_from_mac(mac);
        let gids = vec![link_local, Gid::from_ip(IpAddr::V4(ip))];
        let ip6 = match link_local.to_ip() {
            IpAddr::V6(v6) => v6,
            IpAddr::V4(_) => unreachable!("a link-local GID is IPv6"),
        };
        let guard = Arc::new(GuardedMemory::new(64 << 20));
        let hca = Hca::new(config(), gids, guard.clone()).expect("HCA config");
        let hca = SharedHca::new(hca, guard.clone());
        let ctx = Context::open(&hca);
        let pd = ctx.alloc_pd().expect("PD");
        let other_pd = ctx.alloc_pd().expect("second PD");
        guard.set_mode(AllocKind::Ring);
        let mut cqs = Vec::new();
        for size in [1023, 1] {
            let cq = ctx.create_cq(size).expect("CQ");
            let (base, _) = *guard.take_recent().last().expect("CQ ring allocation");
            cqs.push(CqInfo { cq, ring: RingDesc { base, ..cq_ring_shape(size) }, overrun: false });
        }
        let srq = pd.create_srq(16, 2, 4).expect("SRQ");
        let (base, _) = *guard.take_recent().last().expect("SRQ ring allocation");
        let srq_ring = RingDesc { base, ..recv_ring_shape(16, 2) };
        guard.set_mode(AllocKind::Buffer);
        let mws = vec![pd.alloc_mw(1).expect("MW 1"), pd.alloc_mw(2).expect("MW 2")];
        let mut node = Node {
            hca,
            guard,
            ctx,
            pd,
            other_pd,
            ip,
            ip6,
            cqs,
            mrs: Vec::new(),
            mws,
            srq: Some((srq, srq_ring)),
            qps: Vec::new(),
            ahs: Vec::new(),
            key_hints: Vec::new(),
            all_qpns: Vec::new(),
        };
        for spec in 0..MR_SPECS.len() {
            node.register(spec, None).expect("setup registration");
        }
        node
    }

    fn now(&self) -> Instant {
        self.hca.borrow().now()
    }

    fn cmd(&self, command: Command) -> Result<Reply, CmdError> {
        let now = self.now();
        self.hca.borrow_mut().command(now, command)
    }

    /// Registers [`MR_SPECS`]`[spec]` over a fresh buffer (or over the
    /// buffer at `reuse`, as a re-registration), fills the buffer with a
    /// pattern and tells the guard. Returns the index in `mrs`.
    fn register(&mut self, spec: usize, reuse: Option<u64>) -> Option<usize> {
        let s = &MR_SPECS[spec];
        let alloc = match reuse {
            Some(alloc) => alloc,
            None => {
                self.guard.set_mode(AllocKind::Buffer);
                let alloc = self.guard.allocate(s.alloc, 4096).ok()?;
                let pattern: Vec<u8> =
                    (0..s.alloc).map(|i| (i as u8).wrapping_mul(7) ^ spec as u8).collect();
                self.guard.inner().write(alloc, &pattern).expect("fill a fresh buffer");
                alloc
            }
        };
        let host = alloc + s.offset;
        let iova = s.iova.unwrap_or(host);
        let pd = if s.own_pd { self.pd.index() } else { self.other_pd.index() };
        let reply =
            self.cmd(Command::RegMr { pd, addr: host, length: s.len, iova, access: s.access });
        let Ok(Reply::Mr { lkey, rkey }) = reply else { return None };
        assert_eq!(lkey, rkey, "uroce hands out one key per region");
        let write = s.own_pd && s.access.contains(LOCAL_WRITE);
        self.guard.add_region(lkey, host, s.len, s.own_pd, write, s.label);
        self.mrs.push(MrInfo { spec, key: lkey, iova, len: s.len, host, live: true });
        Some(self.mrs.len() - 1)
    }

    /// Deregisters region `i`; the guard forgets it only if the HCA did.
    fn deregister(&mut self, i: usize) {
        let Some(mr) = self.mrs.get(i).filter(|m| m.live) else { return };
        let key = mr.key;
        if self.cmd(Command::DeregMr { lkey: key }).is_ok() {
            self.guard.remove_region(key);
            self.mrs[i].live = false;
        }
    }

    /// Creates a QP (rings allocated as rings) and returns its index.
    fn add_qp(&mut self, qp_type: QpType, cq: usize, with_srq: bool, cap: QpCap) -> usize {
        self.guard.set_mode(AllocKind::Ring);
        let init = QpInitAttr {
            qp_type,
            send_cq: &self.cqs[cq].cq,
            recv_cq: &self.cqs[cq].cq,
            srq: if with_srq { self.srq.as_ref().map(|(s, _)| s) } else { None },
            cap,
            sq_sig_all: false,
        };
        let qp = self.pd.create_qp(&init).expect("create QP");
        self.guard.set_mode(AllocKind::Buffer);
        self.guard.take_recent();
        let qpn = qp.qpn();
        let (sq, rq) = {
            let hca = self.hca.borrow();
            let ctx = hca.qp(qpn).expect("the new QP's context");
            (ctx.sq.desc, ctx.rq.map(|r| r.desc))
        };
        self.all_qpns.push(qpn);
        self.qps.push(QpInfo {
            qp: Some(qp),
            qpn,
            qp_type,
            cq,
            uses_srq: with_srq,
            peer: Peer::Datagram,
            mtu: 4096,
            qkey: 0,
            cap,
            sq,
            rq,
        });
        self.qps.len() - 1
    }

    /// Moves QP `qi` from RESET to RTS.
    fn connect(&mut self, qi: usize, link: LinkSpec) {
        let q = &mut self.qps[qi];
        let Some(qp) = q.qp.as_ref() else { return };
        q.peer = link.peer;
        q.qkey = link.qkey;
        q.mtu = link.tuning.mtu.bytes();
        let remote = match link.peer {
            Peer::Connected { ip, qpn } => {
                Some(Remote { gid: Gid::from(ip), qpn, psn: link.rq_psn })
            }
            Peer::Datagram => None,
        };
        connect::to_init(qp, link.access, link.qkey).expect("to INIT");
        connect::to_rts(qp, remote, &Tuning { sq_psn: link.sq_psn, ..link.tuning })
            .expect("to RTS");
    }

    /// An address handle to `dgid` through source GID `sgid_index`.
    fn add_ah(&mut self, dgid: Gid, sgid_index: u8) {
        let attr = AhAttr { dgid, sgid_index, hop_limit: 64, port_num: 1, ..AhAttr::default() };
        let ah = self.pd.create_ah(attr).expect("AH");
        self.ahs.push(ah.index());
    }

    /// A key to try: one the tables hold, mostly, or a damaged one.
    fn pick_key(&self, inp: &mut Input<'_>) -> u32 {
        let mut keys: Vec<u32> = self.mrs.iter().map(|m| m.key).collect();
        keys.extend(self.mws.iter().map(|w| w.rkey().0));
        keys.extend(self.key_hints.iter().copied());
        let base = if keys.is_empty() { 0 } else { keys[inp.below(keys.len())] };
        damage_key(inp, base)
    }

    /// A virtual range to aim at: `(va, bytes left in its region, key)`.
    fn pick_target(&self, inp: &mut Input<'_>, aligned: bool) -> (u64, u64, u32) {
        if self.mrs.is_empty() || inp.one_in(12) {
            let va = match inp.below(4) {
                0 => inp.u64(),
                1 => u64::MAX - u64::from(inp.u8()),
                2 => u64::from(inp.u32()),
                _ => 0,
            };
            return (va, u64::from(inp.u16()), self.pick_key(inp));
        }
        let mr = &self.mrs[inp.below(self.mrs.len())];
        let offset = match inp.below(8) {
            0 | 1 => 0,
            2 => u64::from(inp.u8()),
            3 => mr.len.saturating_sub(u64::from(inp.u8())),
            4 => mr.len,
            5 => u64::from(inp.u16()) % (mr.len + 1),
            6 => mr.len + u64::from(inp.u8()),
            _ => 8 * u64::from(inp.u8()),
        };
        let offset = if aligned { offset & !7 } else { offset };
        let key = if inp.one_in(4) { self.pick_key(inp) } else { damage_key(inp, mr.key) };
        (mr.iova.wrapping_add(offset), mr.len.saturating_sub(offset), key)
    }

    /// A local SGE: into a region, mostly.
    fn pick_sge(&self, inp: &mut Input<'_>) -> Sge {
        let (addr, room, key) = self.pick_target(inp, false);
        let length = match inp.below(8) {
            0 | 1 => room,
            2 => u64::from(inp.u8()),
            3 => 8,
            4 => room + 1,
            5 => u64::from(inp.u16()),
            6 => 0,
            _ => u64::from(inp.u32()),
        };
        Sge { addr, length: length.min(u64::from(u32::MAX)) as u32, lkey: Lkey(key) }
    }

    /// Reads the events the HCA raised, checking that each names an object
    /// of this node, and notes CQ overruns.
    fn drain_events(&mut self) {
        while let Some(event) = self.ctx.next_event() {
            match event {
                Event::Completion { cq } => {
                    assert!((cq as usize) < self.cqs.len(), "completion event for unknown CQ {cq}")
                }
                Event::Async { event: EventType::CqErr, element } => {
                    let cq = self.cqs.get_mut(element as usize);
                    cq.unwrap_or_else(|| panic!("CQ_ERR for unknown CQ {element}")).overrun = true;
                }
                Event::Async { event: EventType::PortActive, element } => {
                    assert_eq!(element, 1, "PORT_ACTIVE names port 1")
                }
                Event::Async { event: EventType::SrqLimitReached, element } => {
                    assert_eq!(element, 0, "SRQ_LIMIT_REACHED for the one SRQ")
                }
                Event::Async { event, element } => assert!(
                    self.all_qpns.iter().any(|q| q.value() == element),
                    "{event:?} for unknown QP {element:#x}"
                ),
            }
        }
    }
}

/// `base`, or a stale, neighbouring or random key.
fn damage_key(inp: &mut Input<'_>, base: u32) -> u32 {
    match inp.below(10) {
        0..=6 => base,
        7 => base ^ u32::from(inp.u8()).max(1),
        8 => base.wrapping_add(0x100),
        _ => inp.u32(),
    }
}

fn tuning(mtu: Mtu) -> Tuning {
    Tuning {
        mtu,
        sq_psn: 0,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 4,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    }
}

fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

const RC_REQUESTS: [Opcode; 19] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_MIDDLE,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_ONLY,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_COMPARE_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_LAST_WITH_INVALIDATE,
    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    Opcode::RC_FLUSH,
    Opcode::RC_ATOMIC_WRITE,
];

/// Responses, ACKs the most common (they drive the completer).
const RC_RESPONSES: [Opcode; 8] = [
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
];

const UD_REQUESTS: [Opcode; 2] = [Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE];

const RC_WRS: [WrOpcode; 12] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
    WrOpcode::LocalInv,
    WrOpcode::BindMw,
    WrOpcode::SendWithInv,
    WrOpcode::Flush,
    WrOpcode::AtomicWrite,
];

const UC_WRS: [WrOpcode; 7] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::LocalInv,
    WrOpcode::BindMw,
    WrOpcode::SendWithInv,
];

const UD_WRS: [WrOpcode; 2] = [WrOpcode::Send, WrOpcode::SendWithImm];

fn wr_opcodes(qp_type: QpType) -> &'static [WrOpcode] {
    match qp_type {
        QpType::Rc => &RC_WRS,
        QpType::Uc => &UC_WRS,
        QpType::Ud => &UD_WRS,
    }
}

/// A send WR as a well-behaved application would post it through the verbs
/// library (which checks only what libibverbs checks: the HCA validates the
/// rest), aimed at `local`'s memory for its SGEs and `remote`'s for its
/// RDMA targets.
/// Returns the WR and, for a BIND_MW, the R_Key the window will have.
fn send_wr(
    inp: &mut Input<'_>,
    wr_id: u64,
    q: &QpInfo,
    local: &Node,
    remote: &Node,
) -> (SendWr, Option<u32>) {
    let mut hint = None;
    let opcode = inp.pick(wr_opcodes(q.qp_type));
    let mut wr = SendWr::new(wr_id, opcode);
    let f = inp.u8();
    let signaled = if f >= 0xf0 { 0 } else { SendFlags::SIGNALED.0 };
    wr.flags = SendFlags(signaled | u32::from(f & 0x5));
    let sges = |inp: &mut Input<'_>, node: &Node| {
        let n = inp.below(q.cap.max_send_sge as usize + 1);
        (0..n).map(|_| node.pick_sge(inp)).collect::<Vec<_>>()
    };
    match opcode {
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            let mut sge = local.pick_sge(inp);
            if !inp.one_in(8) {
                sge.length = 8;
            }
            wr.sg_list = vec![sge];
            let aligned = !inp.one_in(8);
            let (addr, _, rkey) = remote.pick_target(inp, aligned);
            wr.remote = RemoteTarget { addr, rkey: Rkey(rkey) };
            wr.compare_add = inp.u64();
            wr.swap = inp.u64();
        }
        WrOpcode::BindMw => {
            let mw = &local.mws[inp.below(local.mws.len())];
            let (addr, room, lkey) = local.pick_target(inp, false);
            let new_key = inp.u8();
            wr.imm_or_inv = damage_key(inp, mw.rkey().0);
            wr.remote = RemoteTarget { addr, rkey: Rkey(u32::from(new_key)) };
            wr.compare_add = match inp.below(4) {
                0 => room,
                1 => 0,
                2 => u64::from(inp.u16()),
                _ => inp.u64(),
            };
            let wild = inp.u32();
            wr.swap = u64::from(inp.pick(&[REMOTE_ALL.0, 4, 2 | 4, 8, 1, wild]));
            wr.ud = Some((lkey, Qpn::new(0), Qkey(0)));
            hint = Some(make_key(mw.rkey().0 >> 8, new_key));
        }
        WrOpcode::LocalInv => wr.imm_or_inv = local.pick_key(inp),
        _ => {
            let inline_ok = matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::AtomicWrite
            );
            if inline_ok && q.cap.max_inline_data > 0 && inp.one_in(4) {
                let len = if opcode == WrOpcode::AtomicWrite && !inp.one_in(4) {
                    8
                } else {
                    inp.below(q.cap.max_inline_data as usize + 1)
                };
                let b = inp.u8();
                wr.inline_data = Some((0..len).map(|i| b.wrapping_add(i as u8)).collect());
            } else {
                wr.sg_list = sges(inp, local);
                if opcode == WrOpcode::AtomicWrite && !inp.one_in(4) {
                    wr.sg_list = vec![Sge { length: 8, ..local.pick_sge(inp) }];
                }
            }
            let aligned = matches!(opcode, WrOpcode::AtomicWrite) && !inp.one_in(4);
            let (addr, room, rkey) = remote.pick_target(inp, aligned);
            wr.remote = RemoteTarget { addr, rkey: Rkey(rkey) };
            wr.imm_or_inv =
                if opcode == WrOpcode::SendWithInv { remote.pick_key(inp) } else { inp.u32() };
            if opcode == WrOpcode::Flush {
                wr.compare_add = if inp.bool() { room } else { u64::from(inp.u32()) };
                wr.swap = u64::from(inp.u8() & 0xf) | u64::from(inp.u8() & 3) << 8;
            }
        }
    }
    if q.qp_type == QpType::Ud {
        let ah = if local.ahs.is_empty() || inp.one_in(8) {
            u32::from(inp.u8())
        } else {
            local.ahs[inp.below(local.ahs.len())]
        };
        let uds: Vec<&QpInfo> = remote.qps.iter().filter(|q| q.qp_type == QpType::Ud).collect();
        let (qpn, qkey) = match uds.get(inp.below(uds.len() + 1)) {
            Some(target) => (target.qpn, target.qkey),
            None => (Qpn::new(inp.u24()), inp.u32()),
        };
        let qkey = match inp.below(4) {
            0 => 0x8000_0000,
            1 => inp.u32(),
            _ => qkey,
        };
        wr.ud = Some((ah, qpn, Qkey(qkey)));
    }
    (wr, hint)
}

// ---------------------------------------------------------------------------
// Completion book-keeping
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WrKind {
    Send(WrOpcode),
    Recv { capacity: u64 },
}

#[derive(Debug, Clone)]
struct WrRecord {
    /// The QP it was posted on (`None`: the SRQ).
    qp: Option<usize>,
    kind: WrKind,
    /// It must complete (a signaled send or an RQ receive).
    must_complete: bool,
    completed: bool,
    /// Its QP was reset before it completed: it never may.
    discarded: bool,
}

/// Every WR posted, to check each completes at most (and, where the verbs
/// promise it, exactly) once.
#[derive(Debug, Default)]
struct WrBook {
    next: u64,
    records: HashMap<u64, WrRecord>,
}

impl WrBook {
    fn next_id(&mut self) -> u64 {
        self.next += 1;
        0x5eed_0000_0000_0000 | self.next
    }

    fn posted(&mut self, wr_id: u64, qp: Option<usize>, kind: WrKind, must_complete: bool) {
        let record = WrRecord { qp, kind, must_complete, completed: false, discarded: false };
        self.records.insert(wr_id, record);
    }

    /// Checks one completion polled from CQ `cq` of `node`.
    fn complete(&mut self, node: &Node, cq: usize, cqe: &Cqe) {
        let qi = node.qps.iter().position(|q| q.qpn == cqe.qp_num).unwrap_or_else(|| {
            panic!("CQ {cq}: completion for unknown QP {:?}: {cqe:?}", cqe.qp_num)
        });
        let q = &node.qps[qi];
        assert_eq!(q.cq, cq, "completion of QP {:?} on CQ {cq}, not its own CQ {}", q.qpn, q.cq);
        let record = self
            .records
            .get_mut(&cqe.wr_id)
            .unwrap_or_else(|| panic!("CQ {cq}: completion with a wr_id never posted: {cqe:?}"));
        assert!(!record.completed, "CQ {cq}: a second completion for one WR: {cqe:?}");
        assert!(!record.discarded, "CQ {cq}: completion of a WR its QP's reset discarded: {cqe:?}");
        record.completed = true;
        match record.kind {
            WrKind::Send(opcode) => {
                assert_eq!(record.qp, Some(qi), "send completion on another QP: {cqe:?}");
                // Only wr_id, status, qp_num and vendor_err are defined in
                // an error completion (ibv_poll_cq(3)).
                if cqe.status == WcStatus::Success {
                    assert_eq!(cqe.opcode, opcode.completion(), "send completion opcode: {cqe:?}");
                }
            }
            WrKind::Recv { capacity } => {
                match record.qp {
                    Some(posted_on) => {
                        assert_eq!(posted_on, qi, "receive completion on another QP: {cqe:?}")
                    }
                    None => assert!(q.uses_srq, "an SRQ receive completed on a QP without it"),
                }
                if cqe.status == WcStatus::Success {
                    assert!(
                        matches!(cqe.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                        "receive completion opcode: {cqe:?}"
                    );
                }
                if cqe.status == WcStatus::Success && cqe.opcode == WcOpcode::Recv {
                    assert!(
                        u64::from(cqe.byte_len) <= capacity,
                        "received {} bytes into a WR of {capacity}: {cqe:?}",
                        cqe.byte_len
                    );
                    if q.qp_type == QpType::Ud {
                        assert!(cqe.flags.contains(WcFlags::GRH) && cqe.byte_len >= 40, "{cqe:?}");
                    }
                }
            }
        }
    }

    /// QP `qi` was reset: what it had outstanding is gone.
    fn discard(&mut self, qi: usize) {
        for r in self.records.values_mut() {
            if r.qp == Some(qi) && !r.completed {
                r.discarded = true;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

/// The RFC 1071 checksum of `bytes`.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|p| u32::from(u16::from_be_bytes([p[0], *p.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// After the transport part of a raw-IP frame built by [`FrameRepr`] (no
/// IP options) changed: rewrites the IP and UDP lengths, the IPv4
/// checksum and the ICRC, so that the frame passes every integrity check
/// and the change reaches the transport layer.
fn refresh_frame(buf: &mut [u8]) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    let total = buf.len();
    let udp_len = (total - ip_len) as u16;
    if ip_len == 20 {
        buf[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        buf[10..12].fill(0);
        let sum = internet_checksum(&buf[..20]);
        buf[10..12].copy_from_slice(&sum.to_be_bytes());
    } else {
        buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
    }
    buf[ip_len + 4..ip_len + 6].copy_from_slice(&udp_len.to_be_bytes());
    if total >= ip_len + 8 + roce::MIN_LEN {
        let (head, trailer) = buf.split_at_mut(total - icrc::ICRC_LEN);
        let crc = icrc::compute(&head[..ip_len], &head[ip_len..ip_len + 8], &head[ip_len + 8..]);
        if let Some(crc) = crc {
            icrc::write(trailer, crc);
        }
    }
}

/// Changes the transport part of a frame (flips, an opcode, a cut or an
/// extension), then makes the frame intact again.
fn mutate_frame(inp: &mut Input<'_>, buf: &mut Vec<u8>) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    let start = ip_len + 8;
    for _ in 0..1 + inp.below(3) {
        let body = buf.len() - icrc::ICRC_LEN;
        if body <= start {
            break;
        }
        match inp.below(6) {
            0 => buf[start] = inp.u8(),
            1 => {
                let at = start + inp.below(body - start);
                buf[at] ^= inp.u8().max(1);
            }
            2 => {
                let at = start + inp.below((body - start).min(40));
                buf[at] = inp.u8();
            }
            3 => {
                let cut = inp.below(body - start + 1);
                buf.drain(body - cut..body);
            }
            4 => {
                let n = inp.below(64);
                let extra = inp.bytes(n).to_vec();
                buf.splice(body..body, extra);
            }
            _ => buf[start + 1] = inp.u8(),
        }
    }
    refresh_frame(buf);
}

/// Replaces the transport part of `buf` with `transport` and a fresh ICRC.
fn reframe(buf: &mut Vec<u8>, transport: &[u8]) {
    let ip_len = if buf[0] >> 4 == 4 { 20 } else { 40 };
    buf.truncate(ip_len + 8);
    buf.extend_from_slice(transport);
    buf.extend_from_slice(&[0; icrc::ICRC_LEN]);
    refresh_frame(buf);
}

/// Checks a packet the HCA sent: a RoCEv2 frame with intact checksums and
/// ICRC, from one of the HCA's addresses to where the transmit says, with
/// a transport packet that fits the opcode table, the default P_Key, an
/// RC, UC or UD opcode and a payload of at most the port MTU. Returns the
/// transport repr's BTH and payload length.
fn check_transmit(addresses: &[IpAddr], bytes: &[u8], t: &Transmit) -> (bth::Repr, usize) {
    assert!(t.len <= MAX_PACKET_LEN, "transmit of {} bytes", t.len);
    let Classified::Roce(frame) = classify(bytes, Link::RawIp) else {
        panic!("the HCA sent a frame that is not RoCEv2: {bytes:02x?}");
    };
    assert!(frame.framing_error.is_none(), "framing error {:?}: {bytes:02x?}", frame.framing_error);
    assert!(frame.trailer.is_empty(), "bytes after the IP packet: {bytes:02x?}");
    assert!(frame.icrc_ok(), "the HCA sent a bad ICRC: {bytes:02x?}");
    assert!(frame.integrity_ok(), "the HCA sent a bad IP or UDP checksum: {bytes:02x?}");
    assert_eq!(frame.ip.destination(), t.destination, "transmit destination");
    assert!(addresses.contains(&frame.ip.source()), "sent from a foreign address: {bytes:02x?}");
    let packet = frame.packet().unwrap_or_else(|e| panic!("the HCA sent {e}: {bytes:02x?}"));
    let repr = Repr::parse(&packet).unwrap_or_else(|e| panic!("the HCA sent {e}: {bytes:02x?}"));
    assert_eq!(repr.bth.pkey, bth::DEFAULT_PKEY, "P_Key");
    assert!(
        matches!(repr.bth.opcode.transport(), Transport::Rc | Transport::Uc | Transport::Ud),
        "opcode {:?} of no transport uroce speaks",
        repr.bth.opcode
    );
    assert!(repr.payload.len() <= 4096, "payload of {} bytes", repr.payload.len());
    (repr.bth, repr.payload.len())
}

/// Checks a transport packet against the QP it came from: the QP's type,
/// and a payload of at most its path MTU.
fn check_against_sender(q: &QpInfo, bth: &bth::Repr, payload_len: usize) {
    let transport = bth.opcode.transport();
    let expected = match q.qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    assert_eq!(transport, expected, "QP {:?} sent {:?}", q.qpn, bth.opcode);
    assert!(
        payload_len as u32 <= q.mtu,
        "QP {:?} sent {payload_len} bytes with a path MTU of {}",
        q.qpn,
        q.mtu
    );
}

// ---------------------------------------------------------------------------
// hca_packets: arbitrary packets to a device with live QPs
// ---------------------------------------------------------------------------

/// The fake peer every "remote" QP of [`hca_packets`] is connected to.
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// First QPN of the fake peer's QPs.
const PEER_QPN: u32 = 0x100;
/// Actions per run at most.
const MAX_ACTIONS: usize = 400;
/// Packets kept on the loopback "wire" at most.
const MAX_WIRE: usize = 128;

/// What the device expects of a QP, to aim packets at.
struct QpView {
    /// Expected PSN as responder.
    epsn: Psn,
    /// Oldest PSN not yet acknowledged, as requester.
    comp_psn: Psn,
    /// Next PSN the requester will use.
    next_psn: Psn,
    /// Path MTU.
    mtu: u32,
    /// The oldest outstanding send WQE: (first PSN, length, READ bytes placed).
    oldest: Option<(Psn, u64, u64)>,
}

/// The state of one [`hca_packets`] run.
struct Packets {
    node: Node,
    now: Instant,
    /// Packets the device sent to itself (loopback QPs), not yet delivered.
    wire: VecDeque<Vec<u8>>,
    last: Option<Vec<u8>>,
    fed: u64,
    sent: u64,
    buf: Vec<u8>,
    book: WrBook,
    completions: BTreeMap<String, u64>,
}

/// Arbitrary packets against one HCA with live QPs of every type
/// (connected to a fake peer whose packets the input makes, and to each
/// other through the device's own address), registered regions with
/// various rights, memory windows and an SRQ; the input also plays a
/// well-behaved application (posting WRs, polling CQs, moving QPs through
/// their states) and the network (delivering, dropping, duplicating,
/// reordering and damaging the packets the device sends itself).
///
/// Memory is a [`GuardedMemory`]. After the run every QP is moved to the
/// error state and the CQs drained; then every signaled send and every
/// receive posted to an RQ must have completed exactly once (unless its CQ
/// overran), every completion must match what was posted, and the counters
/// must add up.
pub fn hca_packets(data: &[u8]) {
    hca_packets_report(data);
}

/// What a run did, to see that the harness reaches deep (and for tests that
/// say so).
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// The device's counters at the end (node 0 for [`hca_wqes`]).
    pub counters: uroce_hca::counters::Counters,
    /// Packets handed to the device by the harness.
    pub fed: u64,
    /// Packets the device sent.
    pub sent: u64,
    /// Completions polled, by status.
    pub completions: BTreeMap<String, u64>,
    /// Host memory accesses the guard checked.
    pub checked_accesses: u64,
    /// Actions run.
    pub actions: usize,
}

/// [`hca_packets`], returning what the run did.
pub fn hca_packets_report(data: &[u8]) -> RunReport {
    let mut inp = Input::new(data);
    let mut run = Packets::new(&mut inp);
    let mut actions = 0;
    while actions < MAX_ACTIONS && !inp.is_empty() {
        run.step(&mut inp);
        actions += 1;
    }
    let mut report = run.finish();
    report.actions = actions;
    report
}

impl Packets {
    fn new(inp: &mut Input<'_>) -> Packets {
        let mut node = Node::new(0);
        let dut = node.ip;
        let big = cap(16, 4, 64);
        // The QPs the fake peer talks to: their PSNs, MTUs and retry
        // counts come from the input.
        let mtus = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
        let mut remote_tuning = tuning(inp.pick(&mtus));
        remote_tuning.timeout = 1 + inp.below(14) as u8;
        remote_tuning.retry_cnt = inp.u8() & 7;
        remote_tuning.rnr_retry = inp.u8() & 7;
        remote_tuning.rd_atomic = 1 + inp.below(8) as u8;
        remote_tuning.min_rnr_timer = inp.u8() & 31;
        let psn_a = inp.u24();
        let psn_b = inp.u24();
        let specs = [
            (QpType::Rc, 0, false, EVERYTHING, remote_tuning),
            (QpType::Rc, 1, false, Access::REMOTE_READ, Tuning { rd_atomic: 1, ..remote_tuning }),
            (QpType::Uc, 0, false, EVERYTHING, remote_tuning),
            (QpType::Rc, 0, true, EVERYTHING, remote_tuning),
        ];
        for (i, (qp_type, cq, srq, access, t)) in specs.into_iter().enumerate() {
            let qi = node.add_qp(qp_type, cq, srq, big);
            let peer = Peer::Connected { ip: PEER_IP, qpn: Qpn::new(PEER_QPN + i as u32) };
            let link = LinkSpec { peer, access, qkey: 0, sq_psn: psn_a, rq_psn: psn_b, tuning: t };
            node.connect(qi, link);
        }
        // Loopback pairs: an RC and a UC connection from the device to
        // itself, with a small MTU so that messages take several packets.
        for qp_type in [QpType::Rc, QpType::Uc] {
            let a = node.add_qp(qp_type, 0, false, big);
            let b = node.add_qp(qp_type, 0, false, big);
            let (qpn_a, qpn_b) = (node.qps[a].qpn, node.qps[b].qpn);
            let t = tuning(Mtu::Mtu256);
            let link = |qpn, sq_psn, rq_psn| LinkSpec {
                peer: Peer::Connected { ip: dut, qpn },
                access: EVERYTHING,
                qkey: 0,
                sq_psn,
                rq_psn,
                tuning: t,
            };
            node.connect(a, link(qpn_b, 100, 0xff_fff0));
            node.connect(b, link(qpn_a, 0xff_fff0, 100));
        }
        for qkey in [0x1111_1111, 0x2222_2222] {
            let qi = node.add_qp(QpType::Ud, 0, false, big);
            let link = LinkSpec {
                peer: Peer::Datagram,
                access: EVERYTHING,
                qkey,
                sq_psn: inp.u24(),
                rq_psn: 0,
                tuning: tuning(Mtu::Mtu4096),
            };
            node.connect(qi, link);
        }
        node.add_ah(Gid::from(PEER_IP), 1);
        node.add_ah(Gid::from(dut), 1);
        node.add_ah(Gid::from_ip(IpAddr::V6(node.ip6)), 0);
        let mut run = Packets {
            node,
            now: Instant::ZERO,
            wire: VecDeque::new(),
            last: None,
            fed: 0,
            sent: 0,
            buf: vec![0; MAX_PACKET_LEN],
            book: WrBook::default(),
            completions: BTreeMap::new(),
        };
        // Two receives on every RQ and four on the SRQ to start with.
        for qi in 0..run.node.qps.len() {
            if !run.node.qps[qi].uses_srq {
                for _ in 0..2 {
                    run.post_recv_to(Some(qi), &mut Input::new(&[]));
                }
            }
        }
        for _ in 0..4 {
            run.post_recv_to(None, &mut Input::new(&[]));
        }
        run
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        self.now = self.now.plus_nanos(1_000);
        let due = self.node.hca.poll_timeout().is_some_and(|t| t <= self.now);
        if due {
            self.node.hca.handle_timeout(self.now);
        }
        match inp.u8() {
            0..=99 => {
                if let Some(packet) = self.build_packet(inp) {
                    self.deliver(packet);
                }
            }
            100..=117 => {
                if let Some(mut packet) = self.build_packet(inp) {
                    mutate_frame(inp, &mut packet);
                    self.deliver(packet);
                }
            }
            118..=125 => {
                // Arbitrary transport bytes in an intact frame.
                if let Some(mut packet) = self.build_packet(inp) {
                    let n = inp.below(96);
                    let transport = inp.bytes(n).to_vec();
                    reframe(&mut packet, &transport);
                    self.deliver(packet);
                }
            }
            126..=131 => {
                // Arbitrary bytes as an IP packet.
                let n = inp.below(160);
                let raw = inp.bytes(n).to_vec();
                self.deliver(raw);
            }
            132..=135 => {
                if let Some(packet) = self.last.clone() {
                    self.deliver(packet);
                }
            }
            136..=155 => {
                let max = 1 + inp.below(32);
                self.drain(max);
            }
            156..=171 => self.wire_action(inp),
            172..=189 => self.post_send(inp),
            190..=199 => {
                let target = inp.below(self.node.qps.len() + 1);
                let qi = (target < self.node.qps.len()).then_some(target);
                self.post_recv_to(qi, inp);
            }
            200..=211 => {
                let delta = inp.pick(&[1_000, 20_000, 300_000, 2_000_000, 40_000_000, 700_000_000]);
                self.now = self.now.plus_nanos(delta);
                self.node.hca.handle_timeout(self.now);
            }
            212..=223 => {
                let cq = inp.below(self.node.cqs.len());
                let max = 1 + inp.below(16);
                self.poll_cq(cq, max);
            }
            224..=227 => {
                let cq = &self.node.cqs[inp.below(self.node.cqs.len())];
                cq.cq.req_notify(inp.bool());
            }
            228..=235 => self.qp_action(inp),
            _ => self.mr_action(inp),
        }
        self.node.drain_events();
    }

    /// Hands one IP packet to the device.
    fn deliver(&mut self, packet: Vec<u8>) {
        self.fed += 1;
        self.node.hca.receive(self.now, &packet);
        self.last = Some(packet);
    }

    /// Takes up to `max` packets from the device, checks each, and puts
    /// those for the device itself on the wire.
    fn drain(&mut self, max: usize) {
        let addresses = self.node.hca.addresses().to_vec();
        for _ in 0..max {
            let Some(t) = self.node.hca.poll_transmit(self.now, &mut self.buf) else { break };
            self.sent += 1;
            let bytes = self.buf[..t.len].to_vec();
            let (bth, payload_len) = check_transmit(&addresses, &bytes, &t);
            let sender = if t.destination == IpAddr::V4(PEER_IP)
                && bth.opcode.transport() != Transport::Ud
            {
                let i = bth.dest_qpn.value().wrapping_sub(PEER_QPN) as usize;
                let q = self.node.qps.get(i);
                Some(q.unwrap_or_else(|| {
                    panic!("sent to peer QPN {:?}, which no QP is connected to", bth.dest_qpn)
                }))
            } else if bth.opcode.transport() != Transport::Ud {
                // Loopback: the destination QP's peer is the sender.
                let dest = self.node.qps.iter().find(|q| q.qpn == bth.dest_qpn);
                let dest =
                    dest.unwrap_or_else(|| panic!("looped back to unknown QP {:?}", bth.dest_qpn));
                let Peer::Connected { qpn, .. } = dest.peer else {
                    panic!("connected packet to UD QP")
                };
                self.node.qps.iter().find(|q| q.qpn == qpn)
            } else {
                None
            };
            if let Some(q) = sender {
                check_against_sender(q, &bth, payload_len);
            }
            if addresses.contains(&t.destination) {
                if self.wire.len() == MAX_WIRE {
                    self.wire.pop_front();
                }
                self.wire.push_back(bytes);
            }
        }
    }

    /// The network between the device and itself.
    fn wire_action(&mut self, inp: &mut Input<'_>) {
        if self.wire.is_empty() {
            return;
        }
        let i = if inp.bool() { 0 } else { inp.below(self.wire.len()) };
        match inp.below(8) {
            0..=3 => {
                let p = self.wire.remove(i).expect("index below len");
                self.deliver(p);
            }
            4 => {
                let p = self.wire[i].clone();
                self.deliver(p);
            }
            5 => {
                self.wire.remove(i);
            }
            6 => {
                let mut p = self.wire.remove(i).expect("index below len");
                mutate_frame(inp, &mut p);
                self.deliver(p);
            }
            _ => {
                // Everything, in order.
                while let Some(p) = self.wire.pop_front() {
                    self.deliver(p);
                }
            }
        }
    }

    /// What the device expects of QP `qpn`.
    fn view(&self, qpn: Qpn) -> Option<QpView> {
        let hca = self.node.hca.borrow();
        let qp = hca.qp(qpn)?;
        let oldest = qp
            .entry(qp.sq.consumer)
            .filter(|e| e.psn_assigned)
            .map(|e| (e.first_psn, e.wqe.length(), e.read_placed));
        Some(QpView {
            epsn: qp.resp.epsn,
            comp_psn: qp.comp.psn,
            next_psn: qp.req.next_psn,
            mtu: qp.mtu(),
            oldest,
        })
    }

    /// A RoCEv2 frame to the device, its fields from the input but aimed at
    /// what the device holds: a live QP, the PSN it expects, the regions
    /// and keys it has registered.
    fn build_packet(&mut self, inp: &mut Input<'_>) -> Option<Vec<u8>> {
        let node = &self.node;
        let target = inp.below(node.qps.len() + 1);
        let q = node.qps.get(target);
        let dest_qpn = match q {
            Some(q) => q.qpn,
            None => Qpn::new(if inp.bool() { inp.u24() } else { 16 + inp.below(24) as u32 }),
        };
        let qp_type = q.map_or(QpType::Rc, |q| q.qp_type);
        let opcode = match inp.below(16) {
            0..=6 => match qp_type {
                QpType::Rc => inp.pick(&RC_REQUESTS),
                QpType::Uc => Opcode(0x20 + inp.below(12) as u8),
                QpType::Ud => inp.pick(&UD_REQUESTS),
            },
            7..=11 if qp_type == QpType::Rc => inp.pick(&RC_RESPONSES),
            7..=11 => inp.pick(&RC_REQUESTS),
            12..=14 => {
                let known: Vec<Opcode> = uroce_wire::opcode::known().map(|i| i.opcode).collect();
                inp.pick(&known)
            }
            _ => Opcode(inp.u8()),
        };
        // An opcode the table does not know goes out as SEND ONLY with the
        // opcode byte replaced afterwards.
        let (info, raw_opcode) = match opcode.info() {
            Some(info) => (info, None),
            None => (Opcode::RC_SEND_ONLY.info()?, Some(opcode.0)),
        };
        let QpView { epsn, comp_psn, next_psn, mtu, oldest } =
            self.view(dest_qpn).unwrap_or(QpView {
                epsn: Psn::new(0),
                comp_psn: Psn::new(0),
                next_psn: Psn::new(0),
                mtu: 1024,
                oldest: None,
            });
        let base = if info.is(Mask::RESP) { comp_psn } else { epsn };
        let psn = match inp.below(10) {
            0..=3 => base,
            4 => base.wrapping_add(u32::from(inp.u8() % 8)),
            5 => base.wrapping_sub(1 + u32::from(inp.u8() % 8)),
            6 => next_psn.wrapping_sub(1),
            7 => oldest.map_or(base, |(first, len, _)| {
                first.wrapping_add((len.div_ceil(u64::from(mtu)).max(1) - 1) as u32)
            }),
            8 => next_psn,
            _ => Psn::new(inp.u24()),
        };
        let payload_len = if !info.is(Mask::PAYLOAD) {
            0
        } else {
            let mtu = mtu as usize;
            match inp.below(10) {
                0..=2 => mtu,
                3 => 0,
                4 => usize::from(inp.u8()),
                5 => mtu.saturating_sub(1 + inp.below(8)),
                6 => mtu + 1 + inp.below(8),
                7 => 8,
                8 => oldest.map_or(mtu, |(first, len, _)| {
                    let offset = u64::from(first.distance_to(psn).max(0) as u32) * mtu as u64;
                    len.saturating_sub(offset).min(mtu as u64) as usize
                }),
                _ => inp.below(4200),
            }
        };
        let fill = inp.u8();
        let payload: Vec<u8> = (0..payload_len).map(|i| fill.wrapping_add(i as u8)).collect();
        let ext = self.ext_headers(inp, info.mask, payload_len, mtu, q);
        let mut bth = bth::Repr::new(info.opcode, dest_qpn, psn, payload_len);
        let flags = inp.u8();
        bth.ack_req = flags & 1 != 0;
        bth.solicited = flags & 2 != 0;
        if flags & 0x30 == 0x30 && info.is(Mask::PAYLOAD) {
            bth.pad_count = inp.u8() & 3;
        }
        if flags & 0xc0 == 0xc0 {
            let wild = inp.u16();
            bth.pkey = inp.pick(&[0x7fff, 0xffff, 0, wild]);
            bth.mig_req = inp.bool();
            bth.tver = inp.u8() & 0xf;
            bth.fecn = inp.bool();
            bth.becn = inp.bool();
            bth.resv6 = inp.u8() & 0x3f;
            bth.resv7 = inp.u8() & 0x7f;
        }
        let repr = Repr { bth, ext, payload: &payload };
        repr.check().ok()?;
        // Addresses: from whom this QP expects its packets, mostly.
        let source = match q.map(|q| q.peer) {
            Some(Peer::Connected { ip, .. }) => ip,
            _ => inp.pick(&[PEER_IP, node.ip]),
        };
        let sport = inp.u16();
        let ip_id = inp.u16();
        let v6 = qp_type == QpType::Ud && inp.one_in(4);
        let frame = match inp.below(24) {
            _ if v6 => {
                let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, inp.u16());
                FrameRepr::ipv6((src, node.ip6), sport, repr)
            }
            0 => FrameRepr::ipv4((Ipv4Addr::from(inp.u32()), node.ip), ip_id, sport, repr),
            1 => FrameRepr::ipv4((source, Ipv4Addr::from(inp.u32())), ip_id, sport, repr),
            2 => FrameRepr::ipv6((node.ip6, node.ip6), sport, repr),
            _ => FrameRepr::ipv4((source, node.ip), ip_id, sport, repr),
        }
        .ok()?;
        let mut buf = vec![0; frame.buffer_len()];
        let len = frame.emit(&mut buf).ok()?;
        buf.truncate(len);
        if let Some(op) = raw_opcode {
            let at = if buf[0] >> 4 == 4 { 28 } else { 48 };
            buf[at] = op;
            refresh_frame(&mut buf);
        }
        Some(buf)
    }

    /// The extension headers `mask` calls for, aimed at the device's
    /// regions and keys.
    fn ext_headers(
        &self,
        inp: &mut Input<'_>,
        mask: Mask,
        payload_len: usize,
        mtu: u32,
        q: Option<&QpInfo>,
    ) -> ExtHeaders {
        let node = &self.node;
        let mut ext = ExtHeaders::default();
        if mask.contains(Mask::RDETH) {
            ext.rdeth = Some(rdeth::Repr { resv8: 0, eecn: inp.u24() });
        }
        if mask.contains(Mask::DETH) {
            let qkey = match inp.below(6) {
                0 => inp.u32(),
                1 => 0x8000_0000 | inp.u32(),
                _ => q.map_or(0, |q| q.qkey),
            };
            let src_qpn = inp.u24();
            ext.deth = Some(deth::Repr {
                qkey: Qkey(qkey),
                resv8: 0,
                src_qpn: uroce_wire::Qpn::new(src_qpn),
            });
        }
        if mask.contains(Mask::FETH) {
            let b = inp.u8();
            ext.feth = Some(feth::Repr {
                selectivity_level: b >> 4 & 3,
                placement_type: b & 0xf,
                reserved: 0,
            });
        }
        if mask.contains(Mask::RETH) {
            let aligned = mask.contains(Mask::ATOMIC_WRITE) && !inp.one_in(4);
            let (va, room, rkey) = node.pick_target(inp, aligned);
            let dma_len = match inp.below(8) {
                0 | 1 => payload_len as u64,
                2 => room,
                3 => payload_len as u64 * (2 + inp.below(4) as u64),
                4 => 0,
                5 => u64::from(inp.u32()),
                6 => u64::from(mtu) * (1 + inp.below(4) as u64) + inp.below(8) as u64,
                _ => 8,
            };
            ext.reth = Some(reth::Repr { va, rkey: Rkey(rkey), dma_len: dma_len as u32 });
        }
        if mask.contains(Mask::ATOMIC_ETH) {
            let aligned = !inp.one_in(6);
            let (va, _, rkey) = node.pick_target(inp, aligned);
            ext.atomic_eth = Some(atomic_eth::Repr {
                va,
                rkey: Rkey(rkey),
                swap_add: inp.u64(),
                compare: inp.u64(),
            });
        }
        if mask.contains(Mask::AETH) {
            let syndrome = match inp.below(10) {
                0..=2 => 0x1f,
                3 => inp.u8() & 0x1f,
                4 => 0x20 | (inp.u8() & 0x1f),
                5 | 6 => 0x60,
                7 => 0x60 | (inp.u8() % 5),
                _ => inp.u8(),
            };
            let msn = inp.u24();
            ext.aeth = Some(aeth::Repr { syndrome: aeth::Syndrome::from_u8(syndrome), msn });
        }
        if mask.contains(Mask::ATOMIC_ACK_ETH) {
            ext.atomic_ack_eth = Some(atomic_ack_eth::Repr { orig: inp.u64() });
        }
        if mask.contains(Mask::IMMDT) {
            ext.immdt = Some(immdt::Repr { imm: inp.u32() });
        }
        if mask.contains(Mask::IETH) {
            ext.ieth = Some(ieth::Repr { rkey: Rkey(node.pick_key(inp)) });
        }
        ext
    }

    /// Posts a send WR on a QP, as the application would.
    fn post_send(&mut self, inp: &mut Input<'_>) {
        let qi = inp.below(self.node.qps.len());
        let wr_id = self.book.next_id();
        // The device is both sides' memory: local and remote targets alike
        // are its own regions.
        let (wr, hint) = send_wr(inp, wr_id, &self.node.qps[qi], &self.node, &self.node);
        if let Some(hint) = hint.filter(|_| self.node.key_hints.len() < 16) {
            self.node.key_hints.push(hint);
        }
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        let opcode = wr.opcode;
        let Some(qp) = self.node.qps[qi].qp.as_ref() else { return };
        if qp.post_send(&[wr]).is_ok() {
            self.book.posted(wr_id, Some(qi), WrKind::Send(opcode), signaled);
        }
    }

    /// Posts a receive WR on QP `qi`'s RQ, or on the SRQ.
    fn post_recv_to(&mut self, qi: Option<usize>, inp: &mut Input<'_>) {
        let wr_id = self.book.next_id();
        let sg_list: Vec<Sge> = if inp.is_empty() {
            // The setup's receives: a whole page of the local region.
            let local = &self.node.mrs[2];
            vec![Sge { addr: local.iova, length: 4096, lkey: Lkey(local.key) }]
        } else {
            (0..inp.below(3)).map(|_| self.node.pick_sge(inp)).collect()
        };
        let capacity = sg_list.iter().map(|s| u64::from(s.length)).sum();
        let wr = RecvWr { wr_id, sg_list };
        match qi {
            Some(qi) => {
                let q = &self.node.qps[qi];
                let Some(qp) = q.qp.as_ref() else { return };
                if !q.uses_srq && qp.post_recv(&[wr]).is_ok() {
                    self.book.posted(wr_id, Some(qi), WrKind::Recv { capacity }, true);
                }
            }
            None => {
                let Some((srq, _)) = self.node.srq.as_ref() else { return };
                if srq.post_recv(&[wr]).is_ok() {
                    self.book.posted(wr_id, None, WrKind::Recv { capacity }, false);
                }
            }
        }
    }

    /// Polls up to `max` completions from CQ `cq` and checks them.
    fn poll_cq(&mut self, cq: usize, max: usize) -> usize {
        let cqes = self.node.cqs[cq].cq.poll(max).unwrap_or_else(|e| panic!("poll CQ {cq}: {e}"));
        for cqe in &cqes {
            self.book.complete(&self.node, cq, cqe);
            *self.completions.entry(format!("{:?}", cqe.status)).or_default() += 1;
        }
        cqes.len()
    }

    /// State changes: to ERR, to SQD, or a reset and a new connection.
    fn qp_action(&mut self, inp: &mut Input<'_>) {
        let qi = inp.below(self.node.qps.len());
        let Some(qp) = self.node.qps[qi].qp.as_ref() else { return };
        match inp.below(4) {
            0 | 1 => {
                let _ = connect::to_error(qp);
            }
            2 => {
                let attr = QpAttr {
                    qp_state: Some(QpState::Sqd),
                    en_sqd_async_notify: inp.bool(),
                    ..QpAttr::default()
                };
                let _ = qp.modify(&attr, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY);
            }
            _ => {
                // Completions written before the reset are legitimate:
                // take them first.
                let cq = self.node.qps[qi].cq;
                while self.poll_cq(cq, 64) > 0 {}
                let attr = QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() };
                let qp = self.node.qps[qi].qp.as_ref().expect("checked");
                if qp.modify(&attr, AttrMask::STATE).is_err() {
                    return;
                }
                self.book.discard(qi);
                let q = &self.node.qps[qi];
                let link = LinkSpec {
                    peer: q.peer,
                    access: EVERYTHING,
                    qkey: q.qkey,
                    sq_psn: inp.u24(),
                    rq_psn: inp.u24(),
                    tuning: tuning(Mtu::fitting(q.mtu)),
                };
                self.node.connect(qi, link);
            }
        }
    }

    /// Deregisters a region, or registers one again.
    fn mr_action(&mut self, inp: &mut Input<'_>) {
        let i = inp.below(self.node.mrs.len());
        if self.node.mrs[i].live {
            self.node.deregister(i);
        } else if self.node.mrs.len() < 32 {
            let (spec, host) = (self.node.mrs[i].spec, self.node.mrs[i].host);
            self.node.register(spec, Some(host - MR_SPECS[spec].offset));
        }
    }

    fn finish(mut self) -> RunReport {
        self.drain(4096);
        for qi in 0..self.node.qps.len() {
            if let Some(qp) = self.node.qps[qi].qp.as_ref() {
                let _ = connect::to_error(qp);
            }
        }
        self.drain(4096);
        self.node.drain_events();
        for cq in 0..self.node.cqs.len() {
            while self.poll_cq(cq, 256) > 0 {}
        }
        self.node.drain_events();
        for (wr_id, r) in &self.book.records {
            let q = r.qp.map(|qi| &self.node.qps[qi]);
            let overran = q.is_some_and(|q| self.node.cqs[q.cq].overrun);
            if r.must_complete && !r.completed && !r.discarded && !overran {
                panic!("WR {wr_id:#x} ({:?}) on QP {:?} never completed", r.kind, q.map(|q| q.qpn));
            }
        }
        let c = self.node.hca.borrow().counters().clone();
        assert_eq!(c.sent_pkts, self.sent, "sent_pkts counts every transmit: {c:?}");
        let dropped_early = c.rcvd_icrc_err + c.rcvd_unknown_qp;
        assert!(
            c.rcvd_pkts + dropped_early <= self.fed,
            "more packets counted than fed ({}): {c:?}",
            self.fed
        );
        let all = c.rcvd_pkts + dropped_early + c.rcvd_malformed + c.rcvd_bad_key_or_addr;
        assert!(all >= self.fed, "a packet went uncounted ({} fed): {c:?}", self.fed);
        assert!(c.duplicate_request + c.out_of_seq_request <= c.rcvd_pkts, "{c:?}");
        assert!(c.rcvd_ghost_response + c.rcvd_seq_err + c.rcvd_rnr_err <= c.rcvd_pkts, "{c:?}");
        assert!(c.send_nak + c.send_rnr_err <= c.rcvd_pkts, "NAKs without requests: {c:?}");
        assert_eq!(c.link_downed, 0, "{c:?}");
        RunReport {
            counters: c,
            fed: self.fed,
            sent: self.sent,
            completions: self.completions,
            checked_accesses: self.node.guard.checked(),
            actions: 0,
        }
    }
}

// ---------------------------------------------------------------------------
// hca_wqes: a hostile application
// ---------------------------------------------------------------------------

/// An HCA as the fabric drives it, with every packet it sends checked
/// ([`check_transmit`]).
struct CheckedHca {
    hca: SharedHca,
    addresses: Vec<IpAddr>,
    sent: u64,
}

impl Endpoint for CheckedHca {
    fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        self.hca.receive(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.hca.poll_transmit(now, buf)?;
        check_transmit(&self.addresses, &buf[..t.len], &t);
        self.sent += 1;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.hca.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.hca.handle_timeout(now);
    }
}

/// Which ring of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RingKind {
    Sq(usize),
    Rq(usize),
    Srq,
    Cq(usize),
}

/// A ring the application writes, with the producer index it last
/// published.
#[derive(Debug, Clone, Copy)]
struct RingRef {
    node: usize,
    kind: RingKind,
    desc: RingDesc,
    producer: u32,
    live: bool,
}

/// Virtual time one [`hca_wqes`] run may let the fabric run, in all: a
/// QP in an endless RNR loop (`rnr_retry` 7, a 10 us RNR timer, no receive
/// ever posted) sends about 70 packets a millisecond.
const MAX_RUN_NS: u64 = 100_000_000;

/// The state of one [`hca_wqes`] run.
struct Wqes {
    fabric: Fabric<CheckedHca>,
    nodes: Vec<Node>,
    rings: Vec<RingRef>,
    seq: u64,
    completions: BTreeMap<String, u64>,
    /// Virtual time the run actions have used.
    ran_ns: u64,
}

/// The QPs each node of [`hca_wqes`] has, index for index connected to
/// the other node's: (type, CQ, with the SRQ).
const WQE_QPS: [(QpType, usize, bool); 5] = [
    (QpType::Rc, 0, false),
    (QpType::Uc, 0, false),
    (QpType::Ud, 0, false),
    (QpType::Rc, 0, true),
    (QpType::Rc, 1, false),
];

/// A hostile application on two connected HCAs: it writes arbitrary bytes
/// and arbitrary well-formed-looking WQEs into its SQ, RQ and SRQ slots,
/// publishes arbitrary producer indices (and overwrites the indices the
/// device owns), rings doorbells for anything, sends the device random
/// QP modifications and (de)registrations, destroys QPs, and between all
/// that lets the simulated fabric run for a while (with random loss,
/// duplication and reordering when the input asks for them).
///
/// Memory is a [`GuardedMemory`] on both nodes (a destroyed QP's rings
/// are freed, so the device may not touch them again), and every packet on
/// the fabric is checked. At the end every QP goes to the error state, the
/// device must still answer commands, and a fresh RC connection between
/// the two devices must still carry a SEND and a READ correctly.
pub fn hca_wqes(data: &[u8]) {
    hca_wqes_report(data);
}

/// [`hca_wqes`], returning what the run did.
pub fn hca_wqes_report(data: &[u8]) -> RunReport {
    let mut inp = Input::new(data);
    let mut run = Wqes::new(&mut inp);
    let mut actions = 0;
    while actions < MAX_ACTIONS && !inp.is_empty() {
        run.step(&mut inp);
        actions += 1;
    }
    let mut report = run.finish();
    report.actions = actions;
    report
}

impl Wqes {
    fn new(inp: &mut Input<'_>) -> Wqes {
        let mut nodes = vec![Node::new(0), Node::new(1)];
        let mut config = FabricConfig::new(u64::from(inp.u32()));
        let faults = inp.u8();
        if faults & 3 == 3 {
            config.faults.loss = Probability::from_percent(u32::from(faults >> 4));
            config.faults.duplicate = Probability::from_percent(u32::from(inp.u8() % 16));
            config.faults.reorder = Probability::from_percent(u32::from(inp.u8() % 16));
            config.faults.reorder_max_delay_ns = 1 + u64::from(inp.u16()) * 64;
        }
        for node in nodes.iter_mut() {
            for (qp_type, cq, srq) in WQE_QPS {
                node.add_qp(qp_type, cq, srq, cap(8, 3, 48));
            }
        }
        let mtus = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
        for (i, &(qp_type, _, _)) in WQE_QPS.iter().enumerate() {
            let mut t = tuning(inp.pick(&mtus));
            t.timeout = 1 + inp.below(12) as u8;
            t.retry_cnt = inp.u8() & 7;
            t.rnr_retry = inp.u8() & 7;
            t.min_rnr_timer = inp.u8() & 31;
            let psns = [inp.u24(), inp.u24()];
            for n in 0..2 {
                let other = &nodes[1 - n];
                let peer = if qp_type == QpType::Ud {
                    Peer::Datagram
                } else {
                    Peer::Connected { ip: other.ip, qpn: other.qps[i].qpn }
                };
                let link = LinkSpec {
                    peer,
                    access: EVERYTHING,
                    qkey: 0x1111_1111 * (n as u32 + 1),
                    sq_psn: psns[n],
                    rq_psn: psns[1 - n],
                    tuning: t,
                };
                nodes[n].connect(i, link);
            }
        }
        for n in 0..2 {
            let (other, own) = (nodes[1 - n].ip, nodes[n].ip);
            nodes[n].add_ah(Gid::from(other), 1);
            nodes[n].add_ah(Gid::from(own), 1);
        }
        let mut rings = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            let mut add =
                |kind, desc| rings.push(RingRef { node: n, kind, desc, producer: 0, live: true });
            for (qi, q) in node.qps.iter().enumerate() {
                add(RingKind::Sq(qi), q.sq);
                if let Some(rq) = q.rq {
                    add(RingKind::Rq(qi), rq);
                }
            }
            if let Some((_, desc)) = node.srq {
                add(RingKind::Srq, desc);
            }
            for (ci, cq) in node.cqs.iter().enumerate() {
                add(RingKind::Cq(ci), cq.ring);
            }
        }
        let endpoints = nodes
            .iter()
            .map(|n| CheckedHca {
                hca: n.hca.clone(),
                addresses: n.hca.addresses().to_vec(),
                sent: 0,
            })
            .collect();
        let fabric = Fabric::new(config, endpoints);
        let mut run =
            Wqes { fabric, nodes, rings, seq: 0, completions: BTreeMap::new(), ran_ns: 0 };
        // Receives to start with, posted properly.
        for r in 0..run.rings.len() {
            if matches!(run.rings[r].kind, RingKind::Rq(_) | RingKind::Srq) {
                for _ in 0..2 {
                    let slot = run.recv_slot(&mut Input::new(&[]), r);
                    run.publish_next(r, &slot);
                }
            }
        }
        run
    }

    fn now(&self) -> Instant {
        self.fabric.now()
    }

    fn doorbell(&self, n: usize, doorbell: Doorbell) {
        let now = self.now();
        self.nodes[n].hca.borrow_mut().doorbell(now, doorbell);
    }

    /// A ring of the given sort: `want` picks SQs, RQs/SRQs or any WQE ring.
    fn pick_ring(&self, inp: &mut Input<'_>, want: fn(RingKind) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.rings.len())
            .filter(|&r| self.rings[r].live && want(self.rings[r].kind))
            .collect();
        (!candidates.is_empty()).then(|| candidates[inp.below(candidates.len())])
    }

    /// The QP (node, index) a ring belongs to.
    fn owner(&self, r: usize) -> (usize, Option<usize>) {
        let ring = &self.rings[r];
        match ring.kind {
            RingKind::Sq(qi) | RingKind::Rq(qi) => (ring.node, Some(qi)),
            RingKind::Srq | RingKind::Cq(_) => (ring.node, None),
        }
    }

    /// The doorbell that tells the device about new entries in ring `r`.
    fn ring_doorbell(&self, r: usize) {
        let ring = self.rings[r];
        let node = &self.nodes[ring.node];
        let doorbell = match ring.kind {
            RingKind::Sq(qi) => Doorbell::SendQueue(node.qps[qi].qpn),
            RingKind::Rq(qi) => Doorbell::RecvQueue(node.qps[qi].qpn),
            RingKind::Srq => Doorbell::Srq(0),
            RingKind::Cq(ci) => Doorbell::ArmCq { cq: ci as u32, solicited_only: false },
        };
        self.doorbell(ring.node, doorbell);
    }

    /// Writes `bytes` at byte `offset` of slot `slot` of ring `r`, as the
    /// application (no guard: it is the application's memory).
    fn write_slot(&self, r: usize, slot: u32, offset: usize, bytes: &[u8]) {
        let ring = &self.rings[r];
        let at = ring.desc.entry_addr(slot) + offset as u64;
        let room = (ring.desc.stride as usize).saturating_sub(offset);
        let _ = self.nodes[ring.node].guard.inner().write(at, &bytes[..bytes.len().min(room)]);
    }

    fn write_index(&self, r: usize, offset: u64, value: u32) {
        let ring = &self.rings[r];
        let _ =
            self.nodes[ring.node].guard.inner().store_release_u32(ring.desc.base + offset, value);
    }

    /// Writes a slot at the producer index, publishes it and rings.
    fn publish_next(&mut self, r: usize, slot: &[u8]) {
        let producer = self.rings[r].producer;
        self.write_slot(r, producer, 0, slot);
        let producer = producer.wrapping_add(1);
        self.rings[r].producer = producer;
        self.write_index(r, PRODUCER_OFFSET, producer);
        self.ring_doorbell(r);
    }

    fn next_wr_id(&mut self) -> u64 {
        self.seq += 1;
        0xbad0_0000_0000_0000 | self.seq
    }

    /// A send WQE for SQ ring `r`: a well-formed one (as [`send_wr`]
    /// builds it), then, unless `legit`, with up to four fields broken.
    fn send_slot(&mut self, inp: &mut Input<'_>, r: usize, legit: bool) -> Vec<u8> {
        let (n, qi) = self.owner(r);
        let qi = qi.expect("an SQ has a QP");
        let wr_id = self.next_wr_id();
        let stride = self.rings[r].desc.stride as usize;
        let (wr, hint) =
            send_wr(inp, wr_id, &self.nodes[n].qps[qi], &self.nodes[n], &self.nodes[1 - n]);
        if let Some(hint) = hint.filter(|_| self.nodes[n].key_hints.len() < 16) {
            self.nodes[n].key_hints.push(hint);
        }
        let wqe = wr.to_wqe();
        let mut slot = vec![0u8; stride];
        if wqe.encoded_len() <= stride {
            wqe.encode(&mut slot);
        }
        if !legit {
            for _ in 0..inp.below(5) {
                let word = inp.u64().to_le_bytes();
                match inp.below(12) {
                    0 => slot[8] = inp.u8(),
                    1 => slot[9] = inp.u8(),
                    2 => slot[10] = inp.u8(),
                    3 => slot[28..32].copy_from_slice(&word[..4]),
                    4 => slot[16..24].copy_from_slice(&word),
                    5 => slot[24..28].copy_from_slice(&word[..4]),
                    6 => slot[32..40].copy_from_slice(&word),
                    7 => slot[40..48].copy_from_slice(&word),
                    8 => slot[48..52].copy_from_slice(&word[..4]),
                    9 => slot[52..56].copy_from_slice(&word[..4]),
                    10 => slot[12..16].copy_from_slice(&word[..4]),
                    _ => {
                        let at = inp.below(stride);
                        slot[at] = inp.u8();
                    }
                }
            }
        }
        slot
    }

    /// A receive WQE for RQ/SRQ ring `r` (an empty input gives one whole
    /// page of the local region).
    fn recv_slot(&mut self, inp: &mut Input<'_>, r: usize) -> Vec<u8> {
        let node = &self.nodes[self.rings[r].node];
        let stride = self.rings[r].desc.stride as usize;
        let sges = if inp.is_empty() {
            let local = &node.mrs[2];
            vec![Sge { addr: local.iova, length: 4096, lkey: Lkey(local.key) }]
        } else {
            (0..inp.below(4)).map(|_| node.pick_sge(inp)).collect()
        };
        let wr_id = self.next_wr_id();
        let wqe = RecvWqe { wr_id, sges };
        let mut slot = vec![0u8; stride];
        if wqe.encoded_len() <= stride {
            wqe.encode(&mut slot);
        }
        if !inp.is_empty() && inp.one_in(3) {
            match inp.below(3) {
                0 => slot[8] = inp.u8(),
                1 => {
                    let at = inp.below(stride);
                    slot[at] = inp.u8();
                }
                _ => {
                    let at = RECV_HEADER_LEN + inp.below(stride - RECV_HEADER_LEN);
                    let word = inp.u64().to_le_bytes();
                    let end = (at + 8).min(stride);
                    slot[at..end].copy_from_slice(&word[..end - at]);
                }
            }
        }
        slot
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        match inp.u8() {
            0..=49 => {
                // A broken send WQE where the next one goes, published.
                if let Some(r) = self.pick_ring(inp, |k| matches!(k, RingKind::Sq(_))) {
                    let slot = self.send_slot(inp, r, false);
                    self.publish_next(r, &slot);
                }
            }
            50..=69 => {
                if let Some(r) =
                    self.pick_ring(inp, |k| matches!(k, RingKind::Rq(_) | RingKind::Srq))
                {
                    let slot = self.recv_slot(inp, r);
                    self.publish_next(r, &slot);
                }
            }
            70..=84 => {
                // Raw bytes anywhere in a slot, published or not.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let slot = inp.u8() as u32;
                    let offset = inp.below(self.rings[r].desc.stride as usize);
                    let n = inp.below(64);
                    let bytes = inp.bytes(n).to_vec();
                    self.write_slot(r, slot, offset, &bytes);
                }
            }
            85..=109 => {
                // A producer index: one more, a jump, a step back, anything.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let ring = self.rings[r];
                    let value = match inp.below(6) {
                        0..=2 => ring.producer.wrapping_add(1),
                        3 => ring
                            .producer
                            .wrapping_add(inp.below(2 * ring.desc.entries as usize + 2) as u32),
                        4 => ring.producer.wrapping_sub(1 + inp.below(4) as u32),
                        _ => inp.u32(),
                    };
                    self.rings[r].producer = value;
                    self.write_index(r, PRODUCER_OFFSET, value);
                    if inp.u8() < 200 {
                        self.ring_doorbell(r);
                    }
                }
            }
            110..=119 => {
                // An index the device owns: a consumer index, or a CQ's
                // producer index.
                if let Some(r) = self.pick_ring(inp, |_| true) {
                    let offset = if inp.bool() { CONSUMER_OFFSET } else { PRODUCER_OFFSET };
                    let offset = if matches!(self.rings[r].kind, RingKind::Cq(_)) {
                        offset
                    } else {
                        CONSUMER_OFFSET
                    };
                    let value = if inp.bool() { self.rings[r].producer } else { inp.u32() };
                    self.write_index(r, offset, value);
                }
            }
            120..=134 => {
                // A doorbell for anything.
                let n = inp.below(2);
                let qpns = &self.nodes[n].all_qpns;
                let qpn =
                    if inp.one_in(4) { Qpn::new(inp.u24()) } else { qpns[inp.below(qpns.len())] };
                let doorbell = match inp.below(4) {
                    0 => Doorbell::SendQueue(qpn),
                    1 => Doorbell::RecvQueue(qpn),
                    2 => Doorbell::Srq(u32::from(inp.u8() % 3)),
                    _ => {
                        Doorbell::ArmCq { cq: u32::from(inp.u8() % 4), solicited_only: inp.bool() }
                    }
                };
                self.doorbell(n, doorbell);
            }
            135..=159 => {
                // Proper work, so that hostile and normal WQEs mix.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let slot = match self.rings[r].kind {
                        RingKind::Sq(_) => self.send_slot(inp, r, true),
                        _ => self.recv_slot(&mut Input::new(&[]), r),
                    };
                    self.publish_next(r, &slot);
                }
            }
            160..=194 => {
                let delta = inp.pick(&[2_000, 10_000, 100_000, 1_000_000, 20_000_000]);
                let delta = delta.min(MAX_RUN_NS - self.ran_ns);
                self.ran_ns += delta;
                let until = self.now().plus_nanos(delta);
                self.fabric.run_until(until);
            }
            195..=209 => {
                let n = inp.below(2);
                let ci = inp.below(self.nodes[n].cqs.len());
                let max = 1 + inp.below(32);
                self.poll_cq(n, ci, max);
            }
            210..=229 => self.qp_action(inp),
            230..=241 => {
                let n = inp.below(2);
                let i = inp.below(self.nodes[n].mrs.len());
                let node = &mut self.nodes[n];
                if node.mrs[i].live {
                    node.deregister(i);
                } else if node.mrs.len() < 32 {
                    let (spec, host) = (node.mrs[i].spec, node.mrs[i].host);
                    node.register(spec, Some(host - MR_SPECS[spec].offset));
                }
            }
            242..=245 => {
                // Destroy a QP: its rings are freed, and the device may not
                // touch them again.
                let n = inp.below(2);
                let qi = inp.below(self.nodes[n].qps.len());
                if let Some(qp) = self.nodes[n].qps[qi].qp.take() {
                    if qp.destroy().is_ok() {
                        for ring in self.rings.iter_mut() {
                            if ring.node == n
                                && matches!(ring.kind, RingKind::Sq(q) | RingKind::Rq(q) if q == qi)
                            {
                                ring.live = false;
                            }
                        }
                    }
                }
            }
            _ => {
                for n in 0..2 {
                    self.nodes[n].drain_events();
                }
            }
        }
    }

    /// Polls CQ `ci` of node `n`: whatever the application did to the
    /// indices, the device writes only well-formed completions of its own
    /// QPs.
    fn poll_cq(&mut self, n: usize, ci: usize, max: usize) {
        let node = &self.nodes[n];
        let cqes = node.cqs[ci].cq.poll(max).unwrap_or_else(|e| panic!("node {n} CQ {ci}: {e}"));
        for cqe in cqes {
            // A slot the device never wrote reads as zeros (QPN 0).
            if cqe.qp_num.value() != 0 {
                assert!(
                    node.all_qpns.contains(&cqe.qp_num),
                    "node {n} CQ {ci}: completion of unknown QP: {cqe:?}"
                );
            }
            *self.completions.entry(format!("{:?}", cqe.status)).or_default() += 1;
        }
    }

    /// QP state changes: to ERR, a properly reconnected pair, or a random
    /// modification.
    fn qp_action(&mut self, inp: &mut Input<'_>) {
        let n = inp.below(2);
        let qi = inp.below(self.nodes[n].qps.len());
        let qpn = self.nodes[n].qps[qi].qpn;
        match inp.below(4) {
            0 => {
                let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
                let _ = self.nodes[n].cmd(Command::ModifyQp { qpn, attr, mask: AttrMask::STATE });
            }
            1 => self.reconnect(inp, qi),
            _ => {
                let attr = random_attr(inp, &self.nodes[n], &self.nodes[1 - n]);
                let mask =
                    AttrMask(inp.u32() & if inp.one_in(4) { u32::MAX } else { AttrMask::ALL.0 });
                let _ = self.nodes[n].cmd(Command::ModifyQp { qpn, attr, mask });
            }
        }
    }

    /// Resets pair `qi` on both nodes and connects it again, properly.
    fn reconnect(&mut self, inp: &mut Input<'_>, qi: usize) {
        let psns = [inp.u24(), inp.u24()];
        let mtu = inp.pick(&[Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096]);
        for n in 0..2 {
            let Some(qp) = self.nodes[n].qps[qi].qp.as_ref() else { return };
            let attr = QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() };
            if qp.modify(&attr, AttrMask::STATE).is_err() {
                return;
            }
            for ring in self.rings.iter_mut() {
                if ring.node == n
                    && matches!(ring.kind, RingKind::Sq(q) | RingKind::Rq(q) if q == qi)
                {
                    ring.producer = 0;
                }
            }
        }
        for n in 0..2 {
            let q = &self.nodes[n].qps[qi];
            let other = &self.nodes[1 - n];
            let peer = match q.peer {
                Peer::Datagram => Peer::Datagram,
                Peer::Connected { .. } => Peer::Connected { ip: other.ip, qpn: other.qps[qi].qpn },
            };
            let link = LinkSpec {
                peer,
                access: EVERYTHING,
                qkey: q.qkey,
                sq_psn: psns[n],
                rq_psn: psns[1 - n],
                tuning: tuning(mtu),
            };
            self.nodes[n].connect(qi, link);
        }
    }

    fn finish(mut self) -> RunReport {
        // Everything to ERR, and let the fabric settle.
        for node in &self.nodes {
            for q in node.qps.iter().filter(|q| q.qp.is_some()) {
                let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
                let _ = node.cmd(Command::ModifyQp { qpn: q.qpn, attr, mask: AttrMask::STATE });
            }
        }
        self.fabric.set_faults(uroce_sim::FaultConfig::NONE);
        let until = self.now().plus_nanos(50_000_000);
        self.fabric.run_until_idle(until);
        for n in 0..2 {
            self.nodes[n].drain_events();
            for ci in 0..self.nodes[n].cqs.len() {
                self.poll_cq(n, ci, 1 << 12);
            }
        }
        // The device still answers commands...
        for node in &self.nodes {
            assert!(matches!(node.cmd(Command::QueryDevice), Ok(Reply::Device(_))), "QueryDevice");
            assert!(matches!(node.cmd(Command::QueryPort), Ok(Reply::Port(_))), "QueryPort");
        }
        // ...and a fresh connection still works.
        self.fresh_connection();
        let c = self.nodes[0].hca.borrow().counters().clone();
        let sent: u64 = self.fabric.endpoints().iter().map(|e| e.sent).sum();
        RunReport {
            counters: c,
            fed: self.fabric.counters().delivered,
            sent,
            completions: self.completions,
            checked_accesses: self.nodes.iter().map(|n| n.guard.checked()).sum(),
            actions: 0,
        }
    }

    /// A new CQ, region and RC QP on each node, connected: a 3000-byte SEND
    /// and a 2000-byte READ from node 0 must complete and move the bytes.
    fn fresh_connection(&mut self) {
        let mut ends = Vec::new();
        for node in self.nodes.iter_mut() {
            node.guard.set_mode(AllocKind::Ring);
            let cq = node.ctx.create_cq(16).expect("a fresh CQ");
            let (base, _) = *node.guard.take_recent().last().expect("CQ ring allocation");
            node.cqs.push(CqInfo {
                cq,
                ring: RingDesc { base, ..cq_ring_shape(16) },
                overrun: false,
            });
            let ci = node.cqs.len() - 1;
            let qi = node.add_qp(QpType::Rc, ci, false, cap(4, 1, 0));
            let mr = node.register(0, None).expect("a fresh region");
            ends.push((ci, qi, mr));
        }
        for n in 0..2 {
            let (_, qi, _) = ends[n];
            let peer = Peer::Connected {
                ip: self.nodes[1 - n].ip,
                qpn: self.nodes[1 - n].qps[ends[1 - n].1].qpn,
            };
            let link = LinkSpec {
                peer,
                access: EVERYTHING,
                qkey: 0,
                sq_psn: 7 + n as u32,
                rq_psn: 8 - n as u32,
                tuning: tuning(Mtu::Mtu1024),
            };
            self.nodes[n].connect(qi, link);
        }
        let (mr_a, mr_b) =
            (self.nodes[0].mrs[ends[0].2].clone(), self.nodes[1].mrs[ends[1].2].clone());
        let qp_a = self.nodes[0].qps[ends[0].1].qp.as_ref().expect("fresh QP");
        let qp_b = self.nodes[1].qps[ends[1].1].qp.as_ref().expect("fresh QP");
        let recv = RecvWr {
            wr_id: 1,
            sg_list: vec![Sge { addr: mr_b.iova, length: 3000, lkey: Lkey(mr_b.key) }],
        };
        qp_b.post_recv(&[recv]).expect("post a fresh receive");
        let mut send = SendWr::new(2, WrOpcode::Send);
        send.sg_list = vec![Sge { addr: mr_a.iova, length: 3000, lkey: Lkey(mr_a.key) }];
        let mut read = SendWr::new(3, WrOpcode::RdmaRead);
        read.sg_list = vec![Sge { addr: mr_a.iova + 4000, length: 2000, lkey: Lkey(mr_a.key) }];
        read.remote = RemoteTarget { addr: mr_b.iova + 4000, rkey: Rkey(mr_b.key) };
        qp_a.post_send(&[send, read]).expect("post fresh sends");
        let deadline = self.now().plus_nanos(200_000_000);
        let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
        while (at_a.len() < 2 || at_b.is_empty()) && self.now() < deadline {
            let until = self.now().plus_nanos(100_000);
            self.fabric.run_until(until);
            at_a.extend(self.nodes[0].cqs[ends[0].0].cq.poll(4).expect("poll the fresh CQ"));
            at_b.extend(self.nodes[1].cqs[ends[1].0].cq.poll(4).expect("poll the fresh CQ"));
        }
        let summary = |c: &[Cqe]| c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
        assert_eq!(
            summary(&at_a),
            [(2, WcStatus::Success), (3, WcStatus::Success)],
            "fresh sender"
        );
        assert_eq!(summary(&at_b), [(1, WcStatus::Success)], "fresh receiver");
        assert_eq!(at_b[0].byte_len, 3000);
        let read_back = |node: &Node, addr: u64, len: usize| {
            let mut v = vec![0; len];
            node.guard.inner().read(addr, &mut v).expect("read a fresh region");
            v
        };
        assert_eq!(
            read_back(&self.nodes[1], mr_b.host, 3000),
            read_back(&self.nodes[0], mr_a.host, 3000),
            "SEND data"
        );
        assert_eq!(
            read_back(&self.nodes[0], mr_a.host + 4000, 2000),
            read_back(&self.nodes[1], mr_b.host + 4000, 2000),
            "READ data"
        );
    }
}

/// QP attributes from the input, near what a real modify would carry.
fn random_attr(inp: &mut Input<'_>, own: &Node, other: &Node) -> QpAttr {
    let state = |inp: &mut Input<'_>| QpState::from_raw(inp.u8() % 8);
    let dgid = match inp.below(4) {
        0 => Gid::from(own.ip),
        1 => Gid::from_ip(IpAddr::V6(other.ip6)),
        2 => Gid(inp.u64().to_le_bytes().repeat(2).try_into().expect("16 bytes")),
        _ => Gid::from(other.ip),
    };
    let small = |inp: &mut Input<'_>| if inp.one_in(4) { inp.u8() } else { inp.u8() % 8 };
    QpAttr {
        qp_state: state(inp),
        cur_qp_state: state(inp),
        path_mtu: Mtu::from_raw(inp.u8() % 7),
        qkey: inp.u32(),
        rq_psn: inp.u32(),
        sq_psn: inp.u32(),
        dest_qp_num: if inp.bool() {
            other.all_qpns[inp.below(other.all_qpns.len())].value()
        } else {
            inp.u32()
        },
        qp_access_flags: Access(if inp.one_in(4) { inp.u32() } else { u32::from(inp.u8() & 0x1f) }),
        cap: QpCap::default(),
        ah_attr: AhAttr {
            dgid,
            sgid_index: inp.u8() % 3,
            flow_label: inp.u32() & 0xfffff,
            hop_limit: inp.u8(),
            traffic_class: inp.u8(),
            sl: inp.u8() & 0xf,
            port_num: if inp.one_in(8) { inp.u8() } else { 1 },
        },
        pkey_index: if inp.one_in(8) { inp.u16() } else { 0 },
        en_sqd_async_notify: inp.bool(),
        max_rd_atomic: small(inp),
        max_dest_rd_atomic: small(inp),
        min_rnr_timer: small(inp),
        port_num: if inp.one_in(8) { inp.u8() } else { 1 },
        timeout: small(inp),
        retry_cnt: small(inp),
        rnr_retry: small(inp),
    }
}
