//! One HCA with the application's objects: the regions, QPs, CQs, SRQ,
//! windows and address handles both fuzz bodies build on.

use super::*;

pub(super) const LOCAL_WRITE: Access = Access::LOCAL_WRITE;
pub(super) const REMOTE_ALL: Access = Access(2 | 4 | 8);
pub(super) const EVERYTHING: Access = Access(1 | 2 | 4 | 8 | 16);

/// A memory region to register: `len` bytes at `offset` of a fresh buffer
/// of `alloc` bytes, so that bytes before and after it stay unregistered.
pub(super) struct MrSpec {
    pub(super) label: &'static str,
    pub(super) alloc: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
    /// The virtual address keys see (`None`: the host address).
    pub(super) iova: Option<u64>,
    pub(super) access: Access,
    /// In the protection domain of the QPs (else in a second, unused one).
    pub(super) own_pd: bool,
}

pub(super) const MR_SPECS: [MrSpec; 6] = [
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
pub(super) struct MrInfo {
    pub(super) spec: usize,
    pub(super) key: u32,
    pub(super) iova: u64,
    pub(super) len: u64,
    pub(super) host: u64,
    pub(super) live: bool,
}

/// Where a connected QP's peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peer {
    /// RC or UC: the peer's address and QPN.
    Connected { ip: Ipv4Addr, qpn: Qpn },
    /// UD.
    Datagram,
}

/// A QP, from the application's side.
pub(super) struct QpInfo {
    pub(super) qp: Option<Qp>,
    pub(super) qpn: Qpn,
    pub(super) qp_type: QpType,
    pub(super) cq: usize,
    pub(super) uses_srq: bool,
    pub(super) peer: Peer,
    pub(super) mtu: u32,
    pub(super) qkey: u32,
    pub(super) cap: QpCap,
    pub(super) sq: RingDesc,
    pub(super) rq: Option<RingDesc>,
}

/// A CQ, from the application's side.
pub(super) struct CqInfo {
    pub(super) cq: Cq,
    pub(super) ring: RingDesc,
    /// The HCA reported an overrun (CQ_ERR): completions may be lost.
    pub(super) overrun: bool,
}

/// How a QP is connected.
#[derive(Debug, Clone, Copy)]
pub(super) struct LinkSpec {
    pub(super) peer: Peer,
    pub(super) access: Access,
    pub(super) qkey: u32,
    pub(super) sq_psn: u32,
    pub(super) rq_psn: u32,
    pub(super) tuning: Tuning,
}

/// One HCA, its guarded memory, and the application's verbs objects.
pub(super) struct Node {
    pub(super) hca: SharedHca,
    pub(super) guard: Arc<GuardedMemory>,
    pub(super) ctx: Context,
    pub(super) pd: Pd,
    pub(super) other_pd: Pd,
    pub(super) ip: Ipv4Addr,
    pub(super) ip6: Ipv6Addr,
    pub(super) cqs: Vec<CqInfo>,
    pub(super) mrs: Vec<MrInfo>,
    pub(super) mws: Vec<Mw>,
    pub(super) srq: Option<(Srq, RingDesc)>,
    pub(super) qps: Vec<QpInfo>,
    pub(super) ahs: Vec<u32>,
    /// Keys worth trying that no table above holds (windows after a bind).
    pub(super) key_hints: Vec<u32>,
    /// Every QPN this node ever had.
    pub(super) all_qpns: Vec<Qpn>,
}

/// A small device: tables big enough for the harness, small enough that
/// the fuzzer can fill some of them.
pub(super) fn config() -> HcaConfig {
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
    pub(super) fn new(n: usize) -> Node {
        let guard = Arc::new(GuardedMemory::new(64 << 20));
        Node::on(n, Host::new(n, config(), guard.clone()), guard)
    }

    /// [`Node::new`] on a host already built (node `n` of a
    /// [`uroce::world::World`] whose memory is `guard`).
    pub(super) fn on(n: usize, host: Host, guard: Arc<GuardedMemory>) -> Node {
        let Host { hca, ctx, ip } = host;
        let ip6 = match node_gids(n)[0].to_ip() {
            IpAddr::V6(v6) => v6,
            IpAddr::V4(_) => unreachable!("a link-local GID is IPv6"),
        };
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

    pub(super) fn now(&self) -> Instant {
        self.hca.borrow().now()
    }

    pub(super) fn cmd(&self, command: Command) -> Result<Reply, CmdError> {
        let now = self.now();
        self.hca.borrow_mut().command(now, command)
    }

    /// Registers [`MR_SPECS`]`[spec]` over a fresh buffer (or over the
    /// buffer at `reuse`, as a re-registration), fills the buffer with a
    /// pattern and tells the guard. Returns the index in `mrs`.
    pub(super) fn register(&mut self, spec: usize, reuse: Option<u64>) -> Option<usize> {
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
    pub(super) fn deregister(&mut self, i: usize) {
        let Some(mr) = self.mrs.get(i).filter(|m| m.live) else { return };
        let key = mr.key;
        if self.cmd(Command::DeregMr { lkey: key }).is_ok() {
            self.guard.remove_region(key);
            self.mrs[i].live = false;
        }
    }

    /// Creates a QP (rings allocated as rings) and returns its index.
    pub(super) fn add_qp(
        &mut self,
        qp_type: QpType,
        cq: usize,
        with_srq: bool,
        cap: QpCap,
    ) -> usize {
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
    pub(super) fn connect(&mut self, qi: usize, link: LinkSpec) {
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
    pub(super) fn add_ah(&mut self, dgid: Gid, sgid_index: u8) {
        let attr = AhAttr { dgid, sgid_index, hop_limit: 64, port_num: 1, ..AhAttr::default() };
        let ah = self.pd.create_ah(attr).expect("AH");
        self.ahs.push(ah.index());
    }

    /// A key to try: one the tables hold, mostly, or a damaged one.
    pub(super) fn pick_key(&self, inp: &mut Input<'_>) -> u32 {
        let mut keys: Vec<u32> = self.mrs.iter().map(|m| m.key).collect();
        keys.extend(self.mws.iter().map(|w| w.rkey().0));
        keys.extend(self.key_hints.iter().copied());
        let base = if keys.is_empty() { 0 } else { keys[inp.below(keys.len())] };
        damage_key(inp, base)
    }

    /// A virtual range to aim at: `(va, bytes left in its region, key)`.
    pub(super) fn pick_target(&self, inp: &mut Input<'_>, aligned: bool) -> (u64, u64, u32) {
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
    pub(super) fn pick_sge(&self, inp: &mut Input<'_>) -> Sge {
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
    pub(super) fn drain_events(&mut self) {
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
pub(super) fn damage_key(inp: &mut Input<'_>, base: u32) -> u32 {
    match inp.below(10) {
        0..=6 => base,
        7 => base ^ u32::from(inp.u8()).max(1),
        8 => base.wrapping_add(0x100),
        _ => inp.u32(),
    }
}

pub(super) fn tuning(mtu: Mtu) -> Tuning {
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

pub(super) use uroce_verbs::connect::cap;
