//! The driver: builds the world from the plan, runs the workload under
//! faults, heals the fabric and waits for every work request, then checks
//! everything against the model.

use super::adversary::Adversary;
use super::arena::{random_bytes, Arena, Layout};
use super::model::{AtomicOp, AtomicState, Counter, Window};
use super::plan::Plan;
use super::{Log, Stats, SwarmReport};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;
use std::sync::Arc;
use uroce_device::command::{AhAttr, Gid, QpCap};
use uroce_device::cqe::Cqe;
use uroce_device::mem::SimMemory;
use uroce_device::types::{Qkey, QpType, Qpn, SendFlags, WrOpcode};
use uroce_device::Event;
use uroce_hca::config::HcaConfig;
use uroce_hca::{Endpoint, Hca, Instant, SharedHca, Transmit};
use uroce_sim::{Fabric, FabricConfig, FaultConfig, Fnv64, NodeId, Probability, SimRng};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, Ah, Context, Cq, EventType, Mr, Pd, Qp, QpInitAttr, RecvWr, RemoteTarget, SendWr,
    WcFlags, WcOpcode, WcStatus,
};

/// Q_Key of every UD QP.
const QKEY: u32 = 0x1111_2222;
/// A Q_Key no QP has: datagrams sent with it must be dropped.
const BAD_QKEY: u32 = 0x3333_4444;
/// Entries per CQ; QPs share a CQ while their queues fit in it.
const CQ_ENTRIES: u32 = 4096;
/// Bytes of each node's READ source region (read-only data).
const SRC_LEN: u64 = 256 * 1024;
/// Bytes of the region each RC/UC QP WRITEs into on its peer.
const WINDOW_LEN: u64 = 192 * 1024;
/// Bytes of each QP's send-side buffer ring.
const LOCAL_ARENA: u64 = 1 << 20;
/// Bytes of each QP's receive buffer ring.
const RECV_ARENA: u64 = 1 << 20;
/// The largest message.
const MAX_MSG: u64 = 65_536;
/// FETCH_ADD counters per node.
const FA_PER_NODE: usize = 4;
/// COMPARE_SWAP words per node.
const CAS_PER_NODE: usize = 4;
/// Bytes between atomic words (the bytes between must never change).
const COUNTER_STRIDE: u64 = 64;
/// Virtual time the liveness phase allows for every WR to finish.
const LIVENESS_NS: u64 = 2_000_000_000;
/// With the adversary on, the chance (ppm) that the application closes a
/// healthy RC connection at one turn of the workload.
const CLOSE_PPM: u32 = 10_000;
/// Virtual time the faulty phase may last at most.
const FAULT_PHASE_MAX_NS: u64 = 600_000_000_000;

/// An operation of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

const OPS: [Op; 7] =
    [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read, Op::FetchAdd, Op::CmpSwap];

impl Op {
    fn allowed_on(self, ty: QpType) -> bool {
        match ty {
            QpType::Rc => true,
            QpType::Uc => matches!(self, Op::Send | Op::SendImm | Op::Write | Op::WriteImm),
            QpType::Ud => matches!(self, Op::Send | Op::SendImm),
        }
    }

    fn opcode(self) -> WrOpcode {
        match self {
            Op::Send => WrOpcode::Send,
            Op::SendImm => WrOpcode::SendWithImm,
            Op::Write => WrOpcode::RdmaWrite,
            Op::WriteImm => WrOpcode::RdmaWriteWithImm,
            Op::Read => WrOpcode::RdmaRead,
            Op::FetchAdd => WrOpcode::AtomicFetchAndAdd,
            Op::CmpSwap => WrOpcode::AtomicCmpAndSwp,
        }
    }
}

/// A node of the fabric: an HCA, or the adversary on the mirror port.
pub(crate) enum Member {
    Hca(SharedHca),
    Adversary(Box<Adversary>),
}

impl Endpoint for Member {
    fn addresses(&self) -> &[IpAddr] {
        match self {
            Member::Hca(h) => h.addresses(),
            Member::Adversary(a) => a.addresses(),
        }
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        match self {
            Member::Hca(h) => h.receive(now, packet),
            Member::Adversary(a) => a.receive(now, packet),
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        match self {
            Member::Hca(h) => h.poll_transmit(now, buf),
            Member::Adversary(a) => a.poll_transmit(now, buf),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Member::Hca(h) => h.poll_timeout(),
            Member::Adversary(a) => a.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Member::Hca(h) => h.handle_timeout(now),
            Member::Adversary(a) => a.handle_timeout(now),
        }
    }
}

struct Node {
    hca: SharedHca,
    ctx: Context,
    pd: Pd,
    ip: Ipv4Addr,
    mem: Arc<SimMemory>,
    /// CQs and the queue depth attached to each.
    cqs: Vec<(Cq, u32)>,
    /// READ sources: never written by anyone.
    src: Mr,
    src_data: Vec<u8>,
    /// FETCH_ADD and COMPARE_SWAP words, with filler between them.
    atomics: Mr,
    atomics_initial: Vec<u8>,
    /// Address handles by destination node.
    ahs: Vec<Option<Ah>>,
    /// QPN to side.
    sides: BTreeMap<u32, usize>,
}

/// What the model must do when a send WR retires.
enum SendKind {
    Plain,
    /// An RC WRITE into a window.
    Write {
        window: usize,
        tag: u64,
    },
    /// A READ of `len` bytes from a node's source region.
    Read {
        layout: Layout,
        src_node: usize,
        src_off: u64,
    },
    /// An atomic whose original value lands in `layout`.
    Atomic {
        layout: Layout,
        cas: bool,
        counter: usize,
        op: usize,
    },
}

struct SendRec {
    wr_id: u64,
    op: Op,
    signaled: bool,
    len: u64,
    /// Holds a buffer in the side's send ring.
    alloc: bool,
    kind: SendKind,
}

/// What a receive WR must end up holding.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// RC: exactly this message.
    Msg(usize),
    /// UC, UD: some message sent to this QP.
    Any,
}

struct RecvRec {
    wr_id: u64,
    layout: Layout,
    expect: Expect,
}

/// A receive the application will post once `not_before` has come.
struct RecvNeed {
    capacity: u64,
    expect: Expect,
    not_before: Instant,
}

/// A message that consumes a receive WR (SEND, SEND with immediate,
/// WRITE with immediate).
struct Msg {
    dest: usize,
    write_imm: bool,
    len: u32,
    imm: Option<u32>,
    /// The payload, kept until an RC receive has checked it.
    data: Option<Rc<Vec<u8>>>,
    /// UD only: sent with the right Q_Key.
    deliverable: bool,
    deliveries: u32,
}

/// (source side, WRITE with immediate, length, immediate, data hash).
type MsgKey = (usize, bool, u32, Option<u32>, u64);

/// One QP and the application's view of it.
struct Side {
    node: usize,
    conn: usize,
    ty: QpType,
    /// `None` once destroyed (an RC connection lost or closed, and replaced).
    qp: Option<Qp>,
    qpn: Qpn,
    peer: usize,
    cap: QpCap,
    sig_all: bool,
    send_cq: usize,
    recv_cq: usize,
    local: Arena,
    recv: Arena,
    /// The window this side WRITEs into (RC, UC).
    window: Option<usize>,
    /// Largest message this side sends.
    max_msg: u64,
    /// Receives this side can hold at once (UC/UD reservation).
    recv_slots: usize,
    /// Receives reserved by WRs planned but not yet committed.
    reserved: usize,
    next_seq: u64,
    next_recv: u64,
    sq: VecDeque<SendRec>,
    rq: VecDeque<RecvRec>,
    pending: VecDeque<RecvNeed>,
    /// A send WR failed: every later one flushes.
    sq_failed: bool,
    /// A receive was flushed.
    recv_flushed: bool,
    /// The application moved the QP to the error state.
    torn_down: bool,
    /// COMPARE_SWAP: the value this side last saw in each word of its peer.
    cas_seen: Vec<u64>,
    /// UC/UD: the messages that may arrive here.
    catalog: BTreeMap<MsgKey, Vec<usize>>,
}

impl Side {
    fn qp(&self) -> &Qp {
        self.qp.as_ref().expect("a QP not destroyed")
    }

    fn dead(&self) -> bool {
        self.sq_failed || self.recv_flushed || self.torn_down
    }
}

/// A pair of QPs.
struct Conn {
    sides: (usize, usize),
    /// An RC QP of the pair failed; the pair was torn down.
    lost: bool,
    /// A new pair replaced it.
    replaced: bool,
}

struct WindowSlot {
    node: usize,
    mr: Mr,
    model: Window,
}

/// The workload's knobs, drawn from the seed.
struct Knobs {
    weights: [u64; 7],
    max_chain: u64,
    signaled: Probability,
    inline: Probability,
    late_recv: Probability,
}

/// A WR built but not yet posted.
struct Planned {
    wr: SendWr,
    rec: SendRec,
    commit: Commit,
    msg: Option<(Msg, MsgKey)>,
}

enum Commit {
    Nothing,
    RcWrite { window: usize, tag: u64, off: u64, data: Rc<Vec<u8>> },
    UcWrite { window: usize, off: u64, data: Rc<Vec<u8>> },
    Atomic { cas: bool, counter: usize, op: AtomicOp },
}

pub(crate) struct Sim {
    plan: Plan,
    fabric: Fabric<Member>,
    /// The adversary's node, when it runs.
    adversary: Option<NodeId>,
    rng: SimRng,
    knobs: Knobs,
    nodes: Vec<Node>,
    sides: Vec<Side>,
    ud_sides: Vec<usize>,
    conns: Vec<Conn>,
    windows: Vec<WindowSlot>,
    fa: Vec<Counter>,
    cas: Vec<Counter>,
    next_swap: u64,
    msgs: Vec<Msg>,
    stats: Stats,
    log: Log,
    healed_at: Instant,
    done_at: Option<Instant>,
}

fn pick<T: Copy>(rng: &mut SimRng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

fn percent(p: u32) -> Probability {
    Probability::from_percent(p)
}

/// A message length up to `max`, biased to MTU boundaries.
fn pick_len(rng: &mut SimRng, mtu: u64, max: u64) -> u64 {
    let len = match rng.below(100) {
        0..=29 => {
            let k = rng.below(max / mtu + 1);
            (k * mtu + rng.below(3)).saturating_sub(1)
        }
        30..=49 => rng.below(17),
        50..=79 => rng.below(2 * mtu + 1),
        80..=94 => rng.below(16_385),
        _ => {
            if rng.chance(percent(50)) {
                max
            } else {
                rng.below(max + 1)
            }
        }
    };
    len.min(max)
}

/// A first PSN: sometimes 0, sometimes just before the 24-bit wrap.
fn pick_psn(rng: &mut SimRng) -> u32 {
    match rng.below(4) {
        0 => 0,
        1 => 0x00ff_ffff - rng.below(64) as u32,
        _ => rng.below(1 << 24) as u32,
    }
}

impl Sim {
    pub(crate) fn new(plan: Plan) -> Sim {
        let mtu = plan.mtu;
        let mut hcas = Vec::new();
        let mut built = Vec::new();
        for i in 0..plan.nodes {
            let ip = Ipv4Addr::new(10, 0, (i >> 8) as u8, 1 + (i & 0xff) as u8);
            let mac = [0x02, 0, 0, 0, (i >> 8) as u8, 1 + (i & 0xff) as u8];
            let gids = vec![Gid::link_local_from_mac(mac), Gid::from_ip(IpAddr::V4(ip))];
            let mem = Arc::new(SimMemory::new(1 << 40));
            let config = HcaConfig {
                active_mtu: mtu,
                max_unacked_psns: plan.max_unacked_psns,
                max_pkt_per_ack: plan.max_pkt_per_ack,
                max_packets_per_turn: plan.max_packets_per_turn,
                ..HcaConfig::default()
            };
            let hca = Hca::new(config, gids, mem.clone()).expect("HCA configuration");
            let hca = SharedHca::new(hca, mem.clone());
            hcas.push(hca.clone());
            built.push((hca, ip, mem));
        }
        let faults = FaultConfig {
            loss: plan.loss,
            duplicate: plan.dup,
            reorder: plan.reorder,
            reorder_max_delay_ns: plan.reorder_max_delay_ns,
            corrupt: plan.corrupt,
            // The largest packet at this path MTU: IPv4 20 + UDP 8 + BTH 12
            // + RETH 16 + ImmDt 4 + payload + ICRC 4. Anything longer is a
            // segmentation bug, and is dropped.
            mtu_bytes: Some(mtu.bytes() as usize + 64),
        };
        let config = FabricConfig {
            latency_ns: plan.latency_ns,
            port_rate_bits_per_sec: plan.port_rate_bits_per_sec,
            faults,
            ..FabricConfig::new(plan.seed)
        };
        let mut members: Vec<Member> = hcas.iter().cloned().map(Member::Hca).collect();
        let adversary = (!plan.adversary.is_never()).then(|| {
            let id = NodeId(members.len());
            let adversary = Adversary::new(id, plan.adversary, plan.seed, hcas.clone());
            members.push(Member::Adversary(Box::new(adversary)));
            id
        });
        let mut fabric = Fabric::new(config, members);
        fabric.set_mirror(adversary);
        let mut rng = fabric.fork_rng();

        let mut nodes = Vec::new();
        let mut fa = Vec::new();
        let mut cas = Vec::new();
        for (hca, ip, mem) in built {
            let ctx = Context::open(&hca);
            let pd = ctx.alloc_pd().expect("PD");
            let src = pd.alloc_mr(SRC_LEN, Access::REMOTE_READ).expect("source MR");
            let src_data = random_bytes(&mut rng, SRC_LEN as usize);
            src.write(0, &src_data).expect("source data");
            let words = (FA_PER_NODE + CAS_PER_NODE) as u64;
            let atomics = pd
                .alloc_mr(words * COUNTER_STRIDE, Access::REMOTE_ATOMIC | Access::LOCAL_WRITE)
                .expect("atomics MR");
            let mut atomics_initial = random_bytes(&mut rng, (words * COUNTER_STRIDE) as usize);
            for k in 0..words as usize {
                let offset = k as u64 * COUNTER_STRIDE;
                let initial = if k < FA_PER_NODE { rng.below(1 << 40) } else { rng.below(1 << 62) };
                atomics_initial[offset as usize..offset as usize + 8]
                    .copy_from_slice(&initial.to_le_bytes());
                let counter = Counter { offset, initial, ops: Vec::new() };
                if k < FA_PER_NODE {
                    fa.push(counter);
                } else {
                    cas.push(counter);
                }
            }
            atomics.write(0, &atomics_initial).expect("atomics data");
            nodes.push(Node {
                hca,
                ctx,
                pd,
                ip,
                mem,
                cqs: Vec::new(),
                src,
                src_data,
                atomics,
                atomics_initial,
                ahs: (0..plan.nodes).map(|_| None).collect(),
                sides: BTreeMap::new(),
            });
        }

        let mut weights = [0u64; 7];
        for w in &mut weights {
            *w = 1 + rng.below(10);
        }
        let knobs = Knobs {
            weights,
            max_chain: 1 + rng.below(8),
            signaled: percent(pick(&mut rng, &[100, 70, 40, 10])),
            inline: percent(pick(&mut rng, &[0, 30, 70])),
            late_recv: percent(pick(&mut rng, &[0, 5, 20])),
        };

        let mut sim = Sim {
            plan,
            fabric,
            adversary,
            rng,
            knobs,
            nodes,
            sides: Vec::new(),
            ud_sides: Vec::new(),
            conns: Vec::new(),
            windows: Vec::new(),
            fa,
            cas,
            next_swap: 1,
            msgs: Vec::new(),
            stats: Stats::default(),
            log: Log::default(),
            healed_at: Instant::ZERO,
            done_at: None,
        };
        sim.connect_all();
        sim
    }

    fn connect_all(&mut self) {
        let nodes = self.plan.nodes as u64;
        for c in 0..self.plan.qps as usize {
            let ty = if self.plan.qps >= 3 && c < 3 {
                [QpType::Rc, QpType::Uc, QpType::Ud][c]
            } else {
                match self.rng.below(4) {
                    0 | 1 => QpType::Rc,
                    2 => QpType::Uc,
                    _ => QpType::Ud,
                }
            };
            let na = self.rng.below(nodes) as usize;
            let loopback = nodes == 1 || (ty != QpType::Ud && self.rng.chance(percent(10)));
            let nb = if loopback {
                na
            } else {
                (na + 1 + self.rng.below(nodes - 1) as usize) % nodes as usize
            };
            self.connect_pair(ty, na, nb);
        }
    }

    /// Creates and connects a pair of QPs of type `ty` on nodes `na` and
    /// `nb`: a new connection.
    fn connect_pair(&mut self, ty: QpType, na: usize, nb: usize) {
        let conn = self.conns.len();
        let a = self.create_side(na, ty, conn);
        let b = self.create_side(nb, ty, conn);
        self.conns.push(Conn { sides: (a, b), lost: false, replaced: false });
        self.sides[a].peer = b;
        self.sides[b].peer = a;
        // Both ends of a UC connection send messages of the same bound,
        // and size their receives for it.
        let max_msg = self.sides[a].max_msg;
        self.sides[b].max_msg = max_msg;
        for (s, peer_node) in [(a, nb), (b, na)] {
            let cas_seen =
                (0..CAS_PER_NODE).map(|k| self.cas[peer_node * CAS_PER_NODE + k].initial).collect();
            let side = &mut self.sides[s];
            let largest = if ty == QpType::Ud { 40 + max_msg } else { max_msg };
            side.recv_slots = (side.cap.max_recv_wr as usize)
                .min((RECV_ARENA / (largest + 256)) as usize - 1)
                .max(1);
            side.cas_seen = cas_seen;
        }
        if ty == QpType::Ud {
            let tuning = self.tuning();
            for s in [a, b] {
                let qp = self.sides[s].qp();
                connect::to_init(qp, Access::EMPTY, QKEY).expect("UD to INIT");
                connect::to_rts(qp, None, &tuning).expect("UD to RTS");
                self.ud_sides.push(s);
            }
            return;
        }
        let tuning = self.tuning();
        let access = if ty == QpType::Rc {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
        } else {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        };
        let (psn_a, psn_b) = (pick_psn(&mut self.rng), pick_psn(&mut self.rng));
        let remote = |s: &Side, ip: Ipv4Addr, psn| Remote {
            gid: Gid::from_ip(IpAddr::V4(ip)),
            qpn: s.qpn,
            psn,
        };
        let (ip_a, ip_b) = (self.nodes[na].ip, self.nodes[nb].ip);
        let (sa, sb) = (&self.sides[a], &self.sides[b]);
        connect::to_init(sa.qp(), access, 0).expect("to INIT");
        connect::to_init(sb.qp(), access, 0).expect("to INIT");
        let ta = Tuning { sq_psn: psn_a, ..tuning };
        let tb = Tuning { sq_psn: psn_b, ..tuning };
        connect::to_rts(sa.qp(), Some(remote(sb, ip_b, psn_b)), &ta).expect("to RTS");
        connect::to_rts(sb.qp(), Some(remote(sa, ip_a, psn_a)), &tb).expect("to RTS");
        for (writer, target) in [(a, nb), (b, na)] {
            let w = self.new_window(target);
            self.sides[writer].window = Some(w);
        }
    }

    /// A lost RC connection whose QPs have drained gets a new pair of QPs
    /// (new QPNs), as an application reconnects: it destroys the old pair
    /// first, so the new QPs usually take their table slots (with other
    /// QPNs: a late or replayed packet of the old connection must find no
    /// QP).
    fn replace_lost(&mut self) {
        let limit = 4 * self.plan.qps as usize + 16;
        for c in 0..self.conns.len() {
            if self.stats.posted >= self.plan.ops || self.stats.rc_replaced as usize >= limit {
                return;
            }
            let conn = &self.conns[c];
            let (a, b) = conn.sides;
            let drained = |s: &Side| s.sq.is_empty() && s.rq.is_empty();
            if conn.lost && !conn.replaced && drained(&self.sides[a]) && drained(&self.sides[b]) {
                self.conns[c].replaced = true;
                self.stats.rc_replaced += 1;
                for s in [a, b] {
                    let Some(qp) = self.sides[s].qp.take() else { continue };
                    if let Err(e) = qp.destroy() {
                        let msg = format!("{}: destroy QP failed: {e}", self.name(s));
                        self.log.mismatch(msg);
                    }
                    let (node, qpn) = (self.sides[s].node, self.sides[s].qpn);
                    if let Some(id) = self.adversary {
                        if let Member::Adversary(adversary) = self.fabric.endpoint_mut(id) {
                            adversary.destroyed(node, qpn);
                        }
                    }
                }
                let (na, nb) = (self.sides[a].node, self.sides[b].node);
                self.connect_pair(QpType::Rc, na, nb);
            }
        }
    }

    /// The application closes a healthy RC connection (both QPs to ERR:
    /// they flush), to be replaced once drained. Only with the adversary
    /// on, so that its sample holds packets of destroyed QPs (and the
    /// workload of runs without it stays as it was).
    fn close_one(&mut self) {
        let open: Vec<usize> = (0..self.conns.len())
            .filter(|&c| {
                let (a, b) = self.conns[c].sides;
                !self.conns[c].lost
                    && self.sides[a].ty == QpType::Rc
                    && !self.sides[a].dead()
                    && !self.sides[b].dead()
            })
            .collect();
        if open.is_empty() {
            return;
        }
        let c = pick(&mut self.rng, &open);
        self.conns[c].lost = true;
        self.stats.rc_closed += 1;
        let (a, b) = self.conns[c].sides;
        for s in [a, b] {
            let side = &mut self.sides[s];
            side.torn_down = true;
            side.pending.clear();
            if let Err(e) = connect::to_error(side.qp()) {
                let msg = format!("{}: modify to ERR failed: {e}", self.name(s));
                self.log.mismatch(msg);
            }
        }
    }

    fn tuning(&mut self) -> Tuning {
        // The local ACK timeout (4.096 us << timeout) must outlast the
        // fabric's queueing delay: on infinitely fast ports 1 to 4 ms; on
        // slower ones, where go-back-N bursts of dozens of QPs queue
        // behind each other for many milliseconds, 17 to 67 ms (without
        // it, RC connections fail by congestion collapse).
        let short = 8 + self.rng.below(3) as u8;
        let timeout = match self.plan.port_rate_bits_per_sec {
            None => short,
            Some(rate) if rate <= 10_000_000_000 => 14,
            Some(rate) if rate <= 25_000_000_000 => 13,
            Some(_) => 12,
        };
        Tuning {
            mtu: self.plan.mtu,
            sq_psn: 0,
            timeout,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1 + self.rng.below(6) as u8,
            rd_atomic: 1 + self.rng.below(16) as u8,
            sgid_index: 1,
            hop_limit: 64,
            sl: 0,
        }
    }

    fn new_window(&mut self, node: usize) -> usize {
        let mr = self.nodes[node]
            .pd
            .alloc_mr(WINDOW_LEN, Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .expect("window MR");
        let initial = random_bytes(&mut self.rng, WINDOW_LEN as usize);
        mr.write(0, &initial).expect("window data");
        self.windows.push(WindowSlot { node, mr, model: Window::new(initial) });
        self.windows.len() - 1
    }

    /// A CQ of node `n` with room for a queue of `depth` more entries.
    fn pick_cq(&mut self, n: usize, depth: u32) -> usize {
        let node = &mut self.nodes[n];
        let fits: Vec<usize> =
            (0..node.cqs.len()).filter(|&i| node.cqs[i].1 + depth <= CQ_ENTRIES).collect();
        let fresh = node.cqs.len() < 4 && self.rng.chance(percent(25));
        if fits.is_empty() || fresh {
            let cq = node.ctx.create_cq(CQ_ENTRIES).expect("CQ");
            node.cqs.push((cq, depth));
            return node.cqs.len() - 1;
        }
        let i = pick(&mut self.rng, &fits);
        node.cqs[i].1 += depth;
        i
    }

    fn create_side(&mut self, n: usize, ty: QpType, conn: usize) -> usize {
        let r = &mut self.rng;
        let cap = QpCap {
            max_send_wr: pick(r, &[8, 16, 32, 64, 128]),
            max_recv_wr: pick(r, &[8, 16, 32, 64, 128]),
            max_send_sge: 1 + r.below(4) as u32,
            max_recv_sge: 1 + r.below(4) as u32,
            max_inline_data: pick(r, &[0, 16, 64, 128, 256, 400]),
        };
        let sig_all = r.chance(percent(15));
        let mtu = u64::from(self.plan.mtu.bytes());
        let max_msg = match ty {
            QpType::Rc => MAX_MSG,
            QpType::Uc => pick(r, &[2 * mtu, 4096, 16_384, MAX_MSG]),
            QpType::Ud => mtu,
        };
        let send_cq = self.pick_cq(n, cap.max_send_wr);
        let recv_cq = self.pick_cq(n, cap.max_recv_wr);
        let node = &self.nodes[n];
        let init = QpInitAttr {
            qp_type: ty,
            send_cq: &node.cqs[send_cq].0,
            recv_cq: &node.cqs[recv_cq].0,
            srq: None,
            cap,
            sq_sig_all: sig_all,
        };
        let qp = node.pd.create_qp(&init).expect("create QP");
        let local = Arena::new(node.pd.alloc_mr(LOCAL_ARENA, Access::LOCAL_WRITE).expect("MR"));
        let recv = Arena::new(node.pd.alloc_mr(RECV_ARENA, Access::LOCAL_WRITE).expect("MR"));
        let qpn = qp.qpn();
        let s = self.sides.len();
        self.nodes[n].sides.insert(qpn.value(), s);
        self.sides.push(Side {
            node: n,
            conn,
            ty,
            qp: Some(qp),
            qpn,
            peer: usize::MAX,
            cap,
            sig_all,
            send_cq,
            recv_cq,
            local,
            recv,
            window: None,
            max_msg,
            recv_slots: 1,
            reserved: 0,
            next_seq: 0,
            next_recv: 0,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            pending: VecDeque::new(),
            sq_failed: false,
            recv_flushed: false,
            torn_down: false,
            cas_seen: Vec::new(),
            catalog: BTreeMap::new(),
        });
        s
    }

    fn now(&self) -> Instant {
        self.fabric.now()
    }

    fn name(&self, s: usize) -> String {
        let side = &self.sides[s];
        format!("side{s} ({:?} node{} qpn {})", side.ty, side.node, side.qpn.value())
    }

    // ---- the run ---------------------------------------------------------

    /// Posts the workload with faults on, until every operation is posted.
    pub(crate) fn workload(&mut self) {
        let deadline = Instant::from_nanos(FAULT_PHASE_MAX_NS);
        let max_iterations = 5_000_000 + 500 * self.plan.ops;
        let mut extra_until: Option<Instant> = None;
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            self.poll_all();
            self.replace_lost();
            if self.adversary.is_some()
                && self.stats.posted < self.plan.ops
                && self.rng.chance(Probability::from_ppm(CLOSE_PPM))
            {
                self.close_one();
            }
            self.post_receives_all();
            if self.stats.posted < self.plan.ops {
                for _ in 0..1 + self.rng.below(3) {
                    if self.stats.posted >= self.plan.ops {
                        break;
                    }
                    if let Some(s) = self.pick_side() {
                        self.post_chain(s);
                    }
                }
                self.post_receives_all();
            } else {
                let extra = self.rng.below(5_000_000);
                let until = *extra_until.get_or_insert(self.now().plus_nanos(extra));
                if self.now() >= until {
                    break;
                }
            }
            if self.now() >= deadline || iterations >= max_iterations {
                self.log.liveness(format!(
                    "the faulty phase did not post every operation within {} of virtual time \
                     and {max_iterations} iterations ({} of {} posted)",
                    deadline, self.stats.posted, self.plan.ops
                ));
                break;
            }
            let idle = !self.may_post();
            self.advance(idle);
        }
    }

    /// Heals the fabric and runs until every WR has completed or flushed.
    pub(crate) fn liveness(&mut self) {
        self.fabric.heal();
        self.healed_at = self.now();
        let deadline = self.healed_at.plus_nanos(LIVENESS_NS);
        loop {
            self.poll_all();
            self.post_receives_all();
            if self.all_done() {
                self.done_at = Some(self.now());
                return;
            }
            if self.now() >= deadline {
                self.report_stuck();
                return;
            }
            self.advance(true);
        }
    }

    fn all_done(&self) -> bool {
        self.sides.iter().all(|s| {
            s.sq.is_empty()
                && (s.ty != QpType::Rc || s.dead() || (s.rq.is_empty() && s.pending.is_empty()))
        })
    }

    fn report_stuck(&mut self) {
        let mut stuck = 0;
        for s in 0..self.sides.len() {
            let side = &self.sides[s];
            let recv_stuck = side.ty == QpType::Rc
                && !side.dead()
                && (!side.rq.is_empty() || !side.pending.is_empty());
            if side.sq.is_empty() && !recv_stuck {
                continue;
            }
            stuck += 1;
            if stuck > 8 {
                continue;
            }
            let hca = self.nodes[side.node].hca.borrow();
            let state = hca.qp(side.qpn).map(|q| {
                format!(
                    "state {:?}, requester next PSN {}, completer PSN {}, responder ePSN {}, \
                     retries left {}",
                    q.state, q.req.next_psn, q.comp.psn, q.resp.epsn, q.comp.retry_left
                )
            });
            let first = side.sq.front().map(|r| format!("{:#x} ({:?})", r.wr_id, r.op));
            let msg = format!(
                "{}: {} send WRs never completed (oldest {}), {} receives outstanding, {} not \
                 posted; {}",
                self.name(s),
                side.sq.len(),
                first.unwrap_or_else(|| "none".into()),
                side.rq.len(),
                side.pending.len(),
                state.unwrap_or_else(|| "no QP".into())
            );
            drop(hca);
            self.log.liveness(msg);
        }
        self.log.liveness(format!(
            "{stuck} QPs still had work {} after the faults healed",
            Instant::from_nanos(LIVENESS_NS)
        ));
    }

    /// Lets late packets land, tears every QP down (leftover receives
    /// flush) and checks memory, atomics and counters.
    pub(crate) fn finish(&mut self) {
        let until = self.now().plus_nanos(100_000_000);
        self.fabric.run_until_idle(until);
        self.poll_all();
        for s in 0..self.sides.len() {
            let side = &self.sides[s];
            if side.recv_flushed && !(side.sq_failed || side.torn_down) {
                let msg =
                    format!("{}: receives were flushed but the QP never failed", self.name(s));
                self.log.mismatch(msg);
            }
        }
        for s in 0..self.sides.len() {
            let side = &mut self.sides[s];
            side.torn_down = true;
            side.pending.clear();
            let Some(qp) = &side.qp else { continue };
            if let Err(e) = connect::to_error(qp) {
                let msg = format!("{}: modify to ERR failed: {e}", self.name(s));
                self.log.mismatch(msg);
            }
        }
        self.poll_all();
        for s in 0..self.sides.len() {
            let side = &self.sides[s];
            if !side.rq.is_empty() {
                let msg = format!(
                    "{}: {} receive WRs never completed, even after the QP went to ERR",
                    self.name(s),
                    side.rq.len()
                );
                self.log.mismatch(msg);
            }
        }
        self.check_memory();
        self.check_deliveries();
        self.check_counters();
        self.check_adversary();
    }

    /// The adversary's node, when it runs.
    fn adversary(&self) -> Option<&Adversary> {
        match self.fabric.endpoint(self.adversary?) {
            Member::Adversary(a) => Some(a),
            Member::Hca(_) => None,
        }
    }

    /// What the adversary found: injected packets an HCA did not drop as
    /// it must, and packets counted other than exactly once.
    fn check_adversary(&mut self) {
        let Some(adversary) = self.adversary() else { return };
        let found: Vec<String> = adversary.violations().to_vec();
        let count = adversary.stats().violations;
        for text in &found {
            self.log.mismatch(format!("adversary: {text}"));
        }
        for _ in found.len() as u64..count {
            self.log.mismatches += 1;
        }
    }

    pub(crate) fn report(self) -> SwarmReport {
        let mut hca: Vec<(&'static str, u64)> = Vec::new();
        for node in &self.nodes {
            for (i, (name, value)) in node.hca.borrow().counters().named().into_iter().enumerate() {
                match hca.get_mut(i) {
                    Some(slot) => slot.1 += value,
                    None => hca.push((name, value)),
                }
            }
        }
        let retransmits =
            hca.iter().find(|(name, _)| *name == "completer_retry_err").map_or(0, |c| c.1);
        let count = |ty| self.sides.iter().filter(|s| s.ty == ty).count() as u32 / 2;
        let adversary = self.adversary().map(|a| a.stats().clone()).unwrap_or_default();
        SwarmReport {
            adversary,
            connections: [count(QpType::Rc), count(QpType::Uc), count(QpType::Ud)],
            stats: self.stats,
            mismatches: self.log.mismatches,
            mismatch_log: self.log.mismatch_log,
            liveness_log: self.log.liveness_log,
            retransmits,
            trace_hash: self.fabric.trace_hash(),
            healed_at: self.healed_at,
            done_at: self.done_at,
            ended_at: self.fabric.now(),
            fabric: *self.fabric.counters(),
            hca,
            plan: self.plan,
        }
    }

    /// Runs the fabric for a random slice of virtual time.
    /// Runs the fabric for a random slice of virtual time; when the
    /// application has nothing to do (`idle`) until the fabric does
    /// something or a delayed receive is due, at least until then.
    fn advance(&mut self, idle: bool) {
        let q = match self.rng.below(10) {
            0..=3 => 1_000,
            4..=7 => 1_000 + self.rng.below(20_000),
            _ => 20_000 + self.rng.below(480_000),
        };
        let now = self.now();
        let mut deadline = now.plus_nanos(q);
        // The application rang doorbells: let the fabric take the packets.
        let _ = self.fabric.endpoints_mut();
        self.fabric.run_until(now);
        if idle {
            let due = self
                .sides
                .iter()
                .filter_map(|s| s.pending.front().map(|n| n.not_before))
                .filter(|&t| t > now)
                .min();
            let next = match (self.fabric.next_event(), due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(next) = next {
                deadline = deadline.max(next);
            }
        }
        self.fabric.run_until(deadline);
    }

    /// Whether the application could post a send WR now.
    fn may_post(&self) -> bool {
        self.stats.posted < self.plan.ops
            && self.sides.iter().any(|s| s.sq.len() < s.cap.max_send_wr as usize)
    }

    // ---- posting -----------------------------------------------------------

    fn pick_side(&mut self) -> Option<usize> {
        for _ in 0..8 {
            let s = self.rng.below(self.sides.len() as u64) as usize;
            // Dead QPs get a WR now and then: it must flush.
            let side = &self.sides[s];
            if side.qp.is_some() && (!side.dead() || self.rng.chance(percent(10))) {
                return Some(s);
            }
        }
        None
    }

    fn post_chain(&mut self, s: usize) {
        let side = &self.sides[s];
        let room = side.cap.max_send_wr as usize - side.sq.len();
        let left = (self.plan.ops - self.stats.posted) as usize;
        let n = (1 + self.rng.below(self.knobs.max_chain) as usize).min(room).min(left);
        let mut planned = Vec::new();
        for _ in 0..n {
            match self.plan_wr(s) {
                Some(p) => planned.push(p),
                None => break,
            }
        }
        let Some(last) = planned.last_mut() else { return };
        last.rec.signaled = true;
        last.wr.flags = last.wr.flags | SendFlags::SIGNALED;
        let wrs: Vec<SendWr> = planned.iter().map(|p| p.wr.clone()).collect();
        let posted = match self.sides[s].qp().post_send(&wrs) {
            Ok(()) => planned.len(),
            Err((i, e)) => {
                let msg =
                    format!("{}: post_send refused WR {i} of {}: {e}", self.name(s), wrs.len());
                self.log.mismatch(msg);
                i
            }
        };
        let rest = planned.split_off(posted);
        for p in rest.iter().rev() {
            if p.rec.alloc {
                self.sides[s].local.free_newest();
            }
        }
        for p in planned.iter().chain(&rest) {
            if let Some((msg, _)) = &p.msg {
                let d = &mut self.sides[msg.dest];
                d.reserved = d.reserved.saturating_sub(1);
            }
        }
        for p in planned {
            self.commit(s, p);
        }
    }

    fn choose_op(&mut self, ty: QpType) -> Op {
        let allowed: Vec<(Op, u64)> = OPS
            .iter()
            .zip(self.knobs.weights)
            .filter(|(op, _)| op.allowed_on(ty))
            .map(|(&op, w)| (op, w))
            .collect();
        let total: u64 = allowed.iter().map(|(_, w)| w).sum();
        let mut x = self.rng.below(total);
        for (op, w) in allowed {
            if x < w {
                return op;
            }
            x -= w;
        }
        unreachable!("weights cover the draw")
    }

    /// Builds one WR for side `s`; `None` when its buffers are full.
    fn plan_wr(&mut self, s: usize) -> Option<Planned> {
        let ty = self.sides[s].ty;
        let op = self.choose_op(ty);
        let mtu = u64::from(self.plan.mtu.bytes());
        let side = &mut self.sides[s];
        let wr_id = ((s as u64) << 40) | side.next_seq;
        side.next_seq += 1;
        let mut wr = SendWr::new(wr_id, op.opcode());
        let r = &mut self.rng;
        wr.flags = SendFlags::EMPTY;
        if r.chance(percent(5)) && self.plan.fence {
            wr.flags = wr.flags | SendFlags::FENCE;
        }
        if r.chance(percent(10)) {
            wr.flags = wr.flags | SendFlags::SOLICITED;
        }
        let signaled = r.chance(self.knobs.signaled);
        if signaled {
            wr.flags = wr.flags | SendFlags::SIGNALED;
        }
        let peer = side.peer;
        let peer_node = self.sides[peer].node;
        let mut commit = Commit::Nothing;
        let mut msg = None;
        let mut alloc = false;
        let (kind, len) = match op {
            Op::Send | Op::SendImm | Op::Write | Op::WriteImm => {
                let side = &self.sides[s];
                let write = matches!(op, Op::Write | Op::WriteImm);
                let mut max = side.max_msg;
                if write {
                    max = max.min(WINDOW_LEN);
                }
                // UD: the destination, and whether it has room for a
                // receive (fault-free runs reserve one for every message).
                let (dest, qkey) = if ty == QpType::Ud {
                    let dest = if r.chance(percent(50)) { peer } else { pick(r, &self.ud_sides) };
                    let dest = if dest == s { peer } else { dest };
                    let qkey = if r.chance(percent(3)) { BAD_QKEY } else { QKEY };
                    (dest, qkey)
                } else {
                    (peer, QKEY)
                };
                let consumes = op != Op::Write;
                if consumes && ty != QpType::Rc && qkey == QKEY && !self.plan.faulty() {
                    let d = &self.sides[dest];
                    if d.rq.len() + d.pending.len() + d.reserved >= d.recv_slots {
                        return None;
                    }
                }
                let len = pick_len(r, mtu, max);
                let data = Rc::new(random_bytes(r, len as usize));
                let imm = matches!(op, Op::SendImm | Op::WriteImm).then(|| r.next_u64() as u32);
                wr.imm_or_inv = imm.unwrap_or(0);
                if len <= u64::from(side.cap.max_inline_data) && r.chance(self.knobs.inline) {
                    wr.inline_data = Some(data.to_vec());
                } else {
                    let mut layout = Layout::draw(r, len, side.cap.max_send_sge, true);
                    let side = &mut self.sides[s];
                    layout.base = side.local.alloc(layout.total)?;
                    alloc = true;
                    side.local.mr.write(layout.base, &layout.image(&data)).expect("send buffer");
                    wr.sg_list = layout.sges(&side.local.mr);
                }
                if write {
                    let w = self.sides[s].window.expect("RC and UC sides have a window");
                    // Hot spots, so that later WRITEs overwrite earlier
                    // ones (a stale duplicate executed again shows).
                    let off = match r.below(4) {
                        0 => 0,
                        1 => (r.below(16) * 1024).min(WINDOW_LEN - len),
                        _ => r.range_inclusive(0, WINDOW_LEN - len),
                    };
                    let mr = &self.windows[w].mr;
                    wr.remote = RemoteTarget { addr: mr.addr() + off, rkey: mr.rkey() };
                    commit = if ty == QpType::Rc {
                        Commit::RcWrite { window: w, tag: wr_id, off, data: data.clone() }
                    } else {
                        Commit::UcWrite { window: w, off, data: data.clone() }
                    };
                }
                if ty == QpType::Ud {
                    let src_node = self.sides[s].node;
                    let dest_node = self.sides[dest].node;
                    let ah = self.address_handle(src_node, dest_node);
                    wr.ud = Some((ah, self.sides[dest].qpn, Qkey(qkey)));
                }
                if consumes {
                    let hash = if op == Op::WriteImm { 0 } else { Fnv64::digest(&data) };
                    let m = Msg {
                        dest,
                        write_imm: op == Op::WriteImm,
                        len: len as u32,
                        imm,
                        data: (ty == QpType::Rc && op != Op::WriteImm).then_some(data),
                        deliverable: qkey == QKEY,
                        deliveries: 0,
                    };
                    msg = Some((m, (s, op == Op::WriteImm, len as u32, imm, hash)));
                }
                let kind = match &commit {
                    Commit::RcWrite { window, tag, .. } => {
                        SendKind::Write { window: *window, tag: *tag }
                    }
                    _ => SendKind::Plain,
                };
                (kind, len)
            }
            Op::Read => {
                let len = pick_len(r, mtu, MAX_MSG);
                let src_off = r.range_inclusive(0, SRC_LEN - len);
                let side = &mut self.sides[s];
                let mut layout = Layout::draw(r, len, side.cap.max_send_sge, true);
                layout.base = side.local.alloc(layout.total)?;
                alloc = true;
                side.local.mr.write(layout.base, &layout.image(&[])).expect("read buffer");
                wr.sg_list = layout.sges(&side.local.mr);
                let src = &self.nodes[peer_node].src;
                wr.remote = RemoteTarget { addr: src.addr() + src_off, rkey: src.rkey() };
                (SendKind::Read { layout, src_node: peer_node, src_off }, len)
            }
            Op::FetchAdd | Op::CmpSwap => {
                let cas = op == Op::CmpSwap;
                let k = r.below(if cas { CAS_PER_NODE } else { FA_PER_NODE } as u64) as usize;
                let counter = peer_node * if cas { CAS_PER_NODE } else { FA_PER_NODE } + k;
                let offset = if cas { self.cas[counter].offset } else { self.fa[counter].offset };
                let gap = r.below(3) * 8;
                let side = &mut self.sides[s];
                let mut layout = Layout { base: 0, total: gap + 8 + gap, pieces: vec![(gap, 8)] };
                layout.base = side.local.alloc(layout.total)?;
                alloc = true;
                side.local.mr.write(layout.base, &layout.image(&[])).expect("result buffer");
                wr.sg_list = layout.sges(&side.local.mr);
                let atomics = &self.nodes[peer_node].atomics;
                wr.remote = RemoteTarget { addr: atomics.addr() + offset, rkey: atomics.rkey() };
                let op = if cas {
                    let compare =
                        if r.chance(percent(85)) { side.cas_seen[k] } else { r.next_u64() };
                    let swap = (1 << 63) | self.next_swap;
                    self.next_swap += 1;
                    wr.compare_add = compare;
                    wr.swap = swap;
                    AtomicOp { side: s, operand: compare, swap, state: AtomicState::Pending }
                } else {
                    let add = if r.chance(percent(10)) { 0 } else { r.range_inclusive(1, 1000) };
                    wr.compare_add = add;
                    AtomicOp { side: s, operand: add, swap: 0, state: AtomicState::Pending }
                };
                commit = Commit::Atomic { cas, counter, op };
                (SendKind::Atomic { layout, cas, counter, op: usize::MAX }, 8)
            }
        };
        if let Some((m, _)) = &msg {
            self.sides[m.dest].reserved += 1;
        }
        let rec =
            SendRec { wr_id, op, signaled: signaled || self.sides[s].sig_all, len, alloc, kind };
        Some(Planned { wr, rec, commit, msg })
    }

    /// The address handle from node `from` to node `to`.
    fn address_handle(&mut self, from: usize, to: usize) -> u32 {
        if self.nodes[from].ahs[to].is_none() {
            let attr = AhAttr {
                dgid: Gid::from_ip(IpAddr::V4(self.nodes[to].ip)),
                sgid_index: 1,
                hop_limit: 64,
                port_num: 1,
                ..AhAttr::default()
            };
            let ah = self.nodes[from].pd.create_ah(attr).expect("address handle");
            self.nodes[from].ahs[to] = Some(ah);
        }
        self.nodes[from].ahs[to].as_ref().map_or(0, Ah::index)
    }

    /// A WR was posted: the model learns about it.
    fn commit(&mut self, s: usize, mut p: Planned) {
        self.stats.posted += 1;
        self.stats.posted_by_op[p.rec.op as usize] += 1;
        match p.commit {
            Commit::Nothing => {}
            Commit::RcWrite { window, tag, off, data } => {
                self.windows[window].model.pending.push_back((tag, off, data));
            }
            Commit::UcWrite { window, off, data } => {
                self.windows[window].model.uncertain.push((off, data));
            }
            Commit::Atomic { cas, counter, op } => {
                let list = if cas { &mut self.cas } else { &mut self.fa };
                list[counter].ops.push(op);
                if let SendKind::Atomic { op: index, .. } = &mut p.rec.kind {
                    *index = list[counter].ops.len() - 1;
                }
            }
        }
        if let Some((msg, key)) = p.msg {
            let id = self.msgs.len();
            let dest = msg.dest;
            let faulty = self.plan.faulty();
            let now = self.now();
            let d = &mut self.sides[dest];
            let r = &mut self.rng;
            match d.ty {
                QpType::Rc => {
                    if !d.dead() {
                        let slack = match r.below(10) {
                            0..=3 => 0,
                            4..=7 => r.range_inclusive(1, 64),
                            _ => r.below(4097),
                        };
                        let data_len = if msg.write_imm { 0 } else { u64::from(msg.len) };
                        let late = r.chance(self.knobs.late_recv);
                        let not_before =
                            if late { now.plus_nanos(r.below(2_000_000)) } else { now };
                        if late {
                            self.stats.late_recvs += 1;
                        }
                        d.pending.push_back(RecvNeed {
                            capacity: data_len + slack,
                            expect: Expect::Msg(id),
                            not_before,
                        });
                    }
                }
                _ => {
                    if msg.deliverable {
                        let capacity = if d.ty == QpType::Ud { 40 + d.max_msg } else { d.max_msg };
                        let late = faulty && r.chance(self.knobs.late_recv);
                        let not_before = if late { now.plus_nanos(r.below(500_000)) } else { now };
                        d.pending.push_back(RecvNeed { capacity, expect: Expect::Any, not_before });
                    }
                    d.catalog.entry(key).or_default().push(id);
                }
            }
            self.msgs.push(msg);
        }
        self.sides[s].sq.push_back(p.rec);
    }

    fn post_receives_all(&mut self) {
        for s in 0..self.sides.len() {
            if !self.sides[s].pending.is_empty() {
                self.post_receives(s);
            }
        }
    }

    fn post_receives(&mut self, s: usize) {
        let now = self.now();
        let side = &mut self.sides[s];
        if side.dead() {
            side.pending.clear();
            return;
        }
        let mut wrs = Vec::new();
        let mut recs = Vec::new();
        while let Some(need) = side.pending.front() {
            if need.not_before > now || side.rq.len() + wrs.len() >= side.cap.max_recv_wr as usize {
                break;
            }
            let mut layout =
                Layout::draw(&mut self.rng, need.capacity, side.cap.max_recv_sge, true);
            let Some(base) = side.recv.alloc(layout.total) else { break };
            layout.base = base;
            side.recv.mr.write(base, &layout.image(&[])).expect("receive buffer");
            let wr_id = (1 << 63) | ((s as u64) << 40) | side.next_recv;
            side.next_recv += 1;
            wrs.push(RecvWr { wr_id, sg_list: layout.sges(&side.recv.mr) });
            recs.push(RecvRec { wr_id, layout, expect: need.expect });
            side.pending.pop_front();
        }
        if wrs.is_empty() {
            return;
        }
        let posted = match side.qp().post_recv(&wrs) {
            Ok(()) => wrs.len(),
            Err((i, e)) => {
                let msg =
                    format!("{}: post_recv refused WR {i} of {}: {e}", self.name(s), wrs.len());
                self.log.mismatch(msg);
                i
            }
        };
        let side = &mut self.sides[s];
        for _ in posted..wrs.len() {
            side.recv.free_newest();
        }
        recs.truncate(posted);
        side.rq.extend(recs);
    }

    // ---- completions -------------------------------------------------------

    fn poll_all(&mut self) {
        for n in 0..self.nodes.len() {
            for c in 0..self.nodes[n].cqs.len() {
                loop {
                    let cqes = match self.nodes[n].cqs[c].0.poll(256) {
                        Ok(cqes) => cqes,
                        Err(e) => {
                            self.log.mismatch(format!("node{n} CQ {c}: poll failed: {e}"));
                            break;
                        }
                    };
                    if cqes.is_empty() {
                        break;
                    }
                    for cqe in &cqes {
                        self.on_cqe(n, c, cqe);
                    }
                }
            }
            while let Some(event) = self.nodes[n].ctx.next_event() {
                match event {
                    Event::Async { event: EventType::PortActive, .. }
                    | Event::Completion { .. } => {}
                    other => self.log.mismatch(format!("node{n}: unexpected event {other:?}")),
                }
            }
        }
    }

    fn on_cqe(&mut self, n: usize, c: usize, cqe: &Cqe) {
        let Some(&s) = self.nodes[n].sides.get(&cqe.qp_num.value()) else {
            self.log.mismatch(format!("node{n}: completion for unknown QP: {cqe:?}"));
            return;
        };
        let is_recv = matches!(cqe.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
        let side = &self.sides[s];
        let want = if is_recv { side.recv_cq } else { side.send_cq };
        if c != want {
            let msg =
                format!("{}: completion on CQ {c}, expected CQ {want}: {cqe:?}", self.name(s));
            self.log.mismatch(msg);
        }
        if is_recv {
            self.on_recv_cqe(s, cqe);
        } else {
            self.on_send_cqe(s, cqe);
        }
    }

    fn on_send_cqe(&mut self, s: usize, c: &Cqe) {
        if self.sides[s].sq_failed {
            // After the first error every WR completes, flushed, in order.
            let Some(rec) = self.sides[s].sq.pop_front() else {
                let msg =
                    format!("{}: send completion with nothing outstanding: {c:?}", self.name(s));
                self.log.mismatch(msg);
                return;
            };
            if rec.wr_id != c.wr_id || c.status != WcStatus::WrFlushErr {
                let msg = format!(
                    "{}: after an error, expected WR {:#x} flushed, got WR {:#x} {:?}",
                    self.name(s),
                    rec.wr_id,
                    c.wr_id,
                    c.status
                );
                self.log.mismatch(msg);
            }
            self.stats.flushed += 1;
            self.retire_failed(s, rec);
            return;
        }
        // Unsignaled WRs before the completed one completed silently.
        loop {
            let Some(front) = self.sides[s].sq.front() else {
                let msg = format!("{}: completion for a WR not outstanding: {c:?}", self.name(s));
                self.log.mismatch(msg);
                return;
            };
            if front.wr_id == c.wr_id {
                break;
            }
            if front.signaled {
                let msg = format!(
                    "{}: expected the completion of WR {:#x} ({:?}) first, got WR {:#x} {:?}",
                    self.name(s),
                    front.wr_id,
                    front.op,
                    c.wr_id,
                    c.status
                );
                self.log.mismatch(msg);
                if !self.sides[s].sq.iter().any(|r| r.wr_id == c.wr_id) {
                    return;
                }
            }
            let rec = self.sides[s].sq.pop_front().expect("front exists");
            self.retire_ok(s, rec);
        }
        let rec = self.sides[s].sq.pop_front().expect("front exists");
        if c.status == WcStatus::Success {
            let mut problems = Vec::new();
            if !rec.signaled {
                problems.push("a completion for an unsignaled WR".to_string());
            }
            if c.opcode != rec.op.opcode().completion() {
                problems.push(format!("opcode {:?}", c.opcode));
            }
            if rec.op == Op::Read && u64::from(c.byte_len) != rec.len {
                problems.push(format!("byte_len {} for a {}-byte READ", c.byte_len, rec.len));
            }
            if !problems.is_empty() {
                let msg = format!(
                    "{}: WR {:#x} ({:?}): {}",
                    self.name(s),
                    rec.wr_id,
                    rec.op,
                    problems.join(", ")
                );
                self.log.mismatch(msg);
            }
            self.retire_ok(s, rec);
            return;
        }
        let side = &self.sides[s];
        let allowed = match c.status {
            // Seven go-backs in a row without progress: a legitimate end
            // only where the fault rates make it plausible.
            WcStatus::RetryExcErr => {
                side.ty == QpType::Rc && self.plan.retry_exhaustion_plausible()
            }
            WcStatus::WrFlushErr => side.torn_down,
            _ => false,
        };
        if !allowed {
            let msg = format!(
                "{}: WR {:#x} ({:?}, {} bytes) completed with {:?} (vendor_err {})",
                self.name(s),
                rec.wr_id,
                rec.op,
                rec.len,
                c.status,
                c.vendor_err
            );
            self.log.mismatch(msg);
        }
        if c.status == WcStatus::RetryExcErr {
            self.stats.retry_exc += 1;
        } else {
            self.stats.flushed += 1;
        }
        self.sides[s].sq_failed = true;
        self.retire_failed(s, rec);
        self.connection_failed(s);
    }

    /// A send WR completed successfully: check what it brought back.
    fn retire_ok(&mut self, s: usize, rec: SendRec) {
        self.stats.completed += 1;
        if rec.alloc {
            self.sides[s].local.free_oldest();
        }
        let problem = match rec.kind {
            SendKind::Plain => None,
            SendKind::Write { window, tag } => self.windows[window].model.complete(tag).err(),
            SendKind::Read { layout, src_node, src_off } => {
                let side = &self.sides[s];
                match layout.read_back(&side.local.mr, rec.len) {
                    Err(e) => Some(e),
                    Ok((data, broken)) => {
                        let want = &self.nodes[src_node].src_data
                            [src_off as usize..(src_off + rec.len) as usize];
                        if data != want {
                            let at = data.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                            Some(format!(
                                "READ of {} bytes from node{src_node}+{src_off:#x}: byte {at} \
                                 differs from the source",
                                rec.len
                            ))
                        } else {
                            broken.any().map(|at| {
                                format!(
                                    "READ of {} bytes wrote outside its buffer (byte {at})",
                                    rec.len
                                )
                            })
                        }
                    }
                }
            }
            SendKind::Atomic { layout, cas, counter, op } => {
                match layout.read_back(&self.sides[s].local.mr, 8) {
                    Err(e) => Some(e),
                    Ok((data, broken)) => {
                        let orig = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                        let list = if cas { &mut self.cas } else { &mut self.fa };
                        let atomic = &mut list[counter].ops[op];
                        atomic.state = AtomicState::Done(orig);
                        if cas {
                            let seen = if orig == atomic.operand { atomic.swap } else { orig };
                            self.sides[s].cas_seen[counter % CAS_PER_NODE] = seen;
                        }
                        broken
                            .any()
                            .map(|at| format!("atomic result written outside its 8 bytes ({at})"))
                    }
                }
            }
        };
        if let Some(problem) = problem {
            let msg = format!("{}: WR {:#x} ({:?}): {problem}", self.name(s), rec.wr_id, rec.op);
            self.log.mismatch(msg);
        }
    }

    /// A send WR failed or was flushed: whatever it did is uncertain.
    fn retire_failed(&mut self, s: usize, rec: SendRec) {
        if rec.alloc {
            self.sides[s].local.free_oldest();
        }
        match rec.kind {
            SendKind::Write { window, tag } => {
                if let Err(e) = self.windows[window].model.abandon(tag) {
                    self.log.mismatch(e);
                }
            }
            SendKind::Atomic { cas, counter, op, .. } => {
                let list = if cas { &mut self.cas } else { &mut self.fa };
                list[counter].ops[op].state = AtomicState::Uncertain;
            }
            SendKind::Plain | SendKind::Read { .. } => {}
        }
    }

    /// An RC QP failed: the application tears the connection down (moves
    /// the peer to ERR, which flushes it).
    fn connection_failed(&mut self, s: usize) {
        self.sides[s].pending.clear();
        if self.sides[s].ty != QpType::Rc {
            return;
        }
        let conn = self.sides[s].conn;
        if !self.conns[conn].lost {
            self.conns[conn].lost = true;
            self.stats.rc_lost += 1;
        }
        let p = self.sides[s].peer;
        if !self.sides[p].torn_down {
            self.sides[p].torn_down = true;
            self.sides[p].pending.clear();
            if let Err(e) = connect::to_error(self.sides[p].qp()) {
                let msg = format!("{}: modify to ERR failed: {e}", self.name(p));
                self.log.mismatch(msg);
            }
        }
    }

    fn on_recv_cqe(&mut self, s: usize, c: &Cqe) {
        let Some(rec) = self.sides[s].rq.pop_front() else {
            let msg = format!("{}: receive completion with no receive posted: {c:?}", self.name(s));
            self.log.mismatch(msg);
            return;
        };
        self.sides[s].recv.free_oldest();
        if rec.wr_id != c.wr_id {
            let msg = format!(
                "{}: receive completions out of order: expected WR {:#x}, got {:#x}",
                self.name(s),
                rec.wr_id,
                c.wr_id
            );
            self.log.mismatch(msg);
            return;
        }
        if c.status == WcStatus::WrFlushErr {
            self.sides[s].recv_flushed = true;
            self.stats.recv_flushed += 1;
            if self.sides[s].ty == QpType::Rc {
                self.connection_failed(s);
            } else if !self.sides[s].torn_down {
                let msg = format!("{}: receive WR {:#x} flushed", self.name(s), c.wr_id);
                self.log.mismatch(msg);
            }
            return;
        }
        if c.status != WcStatus::Success {
            let msg = format!(
                "{}: receive WR {:#x} completed with {:?}",
                self.name(s),
                c.wr_id,
                c.status
            );
            self.log.mismatch(msg);
            return;
        }
        if self.sides[s].recv_flushed {
            let msg = format!("{}: a receive succeeded after one was flushed", self.name(s));
            self.log.mismatch(msg);
        }
        self.stats.recv_ok += 1;
        let problem = match rec.expect {
            Expect::Msg(id) => self.check_rc_receive(s, &rec, c, id),
            Expect::Any => self.check_datagram(s, &rec, c),
        };
        if let Some(problem) = problem {
            let msg = format!("{}: receive WR {:#x}: {problem}", self.name(s), c.wr_id);
            self.log.mismatch(msg);
        }
    }

    /// RC: the n-th receive holds the n-th message the peer posted.
    fn check_rc_receive(&mut self, s: usize, rec: &RecvRec, c: &Cqe, id: usize) -> Option<String> {
        let msg = &mut self.msgs[id];
        msg.deliveries += 1;
        let want_opcode = if msg.write_imm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        let mut problems = Vec::new();
        if c.opcode != want_opcode {
            problems.push(format!("opcode {:?}, expected {want_opcode:?}", c.opcode));
        }
        if c.byte_len != msg.len {
            problems.push(format!("byte_len {}, expected {}", c.byte_len, msg.len));
        }
        let imm = c.flags.contains(WcFlags::WITH_IMM).then_some(c.imm_or_inv);
        if imm != msg.imm {
            problems.push(format!("immediate {imm:x?}, expected {:x?}", msg.imm));
        }
        if c.flags.contains(WcFlags::GRH) {
            problems.push("GRH flag on an RC receive".into());
        }
        let data_len =
            if msg.write_imm { 0 } else { u64::from(msg.len).min(rec.layout.capacity()) };
        match rec.layout.read_back(&self.sides[s].recv.mr, data_len) {
            Err(e) => problems.push(e),
            Ok((data, broken)) => {
                if let Some(want) = msg.data.take() {
                    if data != *want {
                        let at = data.iter().zip(want.iter()).position(|(a, b)| a != b);
                        problems.push(format!(
                            "data differs from the message sent (first at byte {})",
                            at.unwrap_or(data.len().min(want.len()))
                        ));
                    }
                }
                if let Some(at) = broken.any() {
                    problems.push(format!("buffer written outside the message (byte {at})"));
                }
            }
        }
        (!problems.is_empty()).then(|| {
            format!(
                "message {id} (a {}-byte {}): {}",
                msg.len,
                kind(msg.write_imm),
                problems.join(", ")
            )
        })
    }

    /// UC and UD: the receive holds, whole, some message sent to this QP.
    fn check_datagram(&mut self, s: usize, rec: &RecvRec, c: &Cqe) -> Option<String> {
        let side = &self.sides[s];
        let ud = side.ty == QpType::Ud;
        let write_imm = c.opcode == WcOpcode::RecvRdmaWithImm;
        if ud && (write_imm || !c.flags.contains(WcFlags::GRH)) {
            return Some(format!("UD receive with opcode {:?}, flags {:?}", c.opcode, c.flags));
        }
        let grh = if ud { 40 } else { 0 };
        if u64::from(c.byte_len) < grh
            || u64::from(c.byte_len) > rec.layout.capacity() && !write_imm
        {
            return Some(format!(
                "byte_len {} for a {}-byte buffer",
                c.byte_len,
                rec.layout.capacity()
            ));
        }
        let read_len = if write_imm { 0 } else { u64::from(c.byte_len) };
        let (bytes, broken) = match rec.layout.read_back(&side.recv.mr, read_len) {
            Ok(x) => x,
            Err(e) => return Some(e),
        };
        // UC may leave bytes of an abandoned message past this one.
        if let Some(at) = if ud { broken.any() } else { broken.gap } {
            return Some(format!("buffer written outside the message (byte {at})"));
        }
        let src = if ud {
            let (head, _) = bytes.split_at(40);
            let src_ip = Ipv4Addr::new(head[32], head[33], head[34], head[35]);
            let dst_ip = Ipv4Addr::new(head[36], head[37], head[38], head[39]);
            if head[..20].iter().any(|&b| b != 0)
                || head[20] != 0x45
                || dst_ip != self.nodes[side.node].ip
            {
                return Some(format!("bad GRH {:02x?}", head));
            }
            let Some(src_node) = self.nodes.iter().position(|n| n.ip == src_ip) else {
                return Some(format!("GRH source {src_ip} is no node"));
            };
            match self.nodes[src_node].sides.get(&c.src_qp.value()) {
                Some(&src) => src,
                None => {
                    return Some(format!(
                        "source QP {} on node{src_node} does not exist",
                        c.src_qp.value()
                    ))
                }
            }
        } else {
            side.peer
        };
        let data = &bytes[grh as usize..];
        let imm = c.flags.contains(WcFlags::WITH_IMM).then_some(c.imm_or_inv);
        let len = c.byte_len - grh as u32;
        let hash = if write_imm { 0 } else { Fnv64::digest(data) };
        let key = (src, write_imm, len, imm, hash);
        let Some(ids) = side.catalog.get(&key) else {
            return Some(format!(
                "a {len}-byte {} (immediate {imm:x?}) that {} never sent here",
                kind(write_imm),
                self.name(src)
            ));
        };
        let limit = if self.plan.dup.is_never() { 1 } else { 2 };
        // Equal keys (empty messages): the likeliest one, a deliverable
        // message delivered the fewest times.
        let id = *ids
            .iter()
            .min_by_key(|&&id| (!self.msgs[id].deliverable, self.msgs[id].deliveries))
            .expect("non-empty");
        let msg = &mut self.msgs[id];
        msg.deliveries += 1;
        if ud {
            self.stats.ud_delivered += 1;
        } else {
            self.stats.uc_delivered += 1;
        }
        if msg.deliveries > 1 {
            self.stats.dup_delivered += 1;
        }
        if !msg.deliverable {
            return Some(format!("message {id} was delivered although its Q_Key is wrong"));
        }
        (msg.deliveries > limit)
            .then(|| format!("message {id} was delivered {} times", msg.deliveries))
    }

    // ---- final checks ------------------------------------------------------

    fn check_memory(&mut self) {
        for w in 0..self.windows.len() {
            let slot = &mut self.windows[w];
            let actual = match slot.mr.read_vec(0, WINDOW_LEN as usize) {
                Ok(a) => a,
                Err(e) => {
                    self.log.mismatch(format!("window {w}: read failed: {e}"));
                    continue;
                }
            };
            if let Some((bad, first)) = slot.model.check(&actual) {
                let node = slot.node;
                let writer = (0..self.sides.len()).find(|&s| self.sides[s].window == Some(w));
                let msg = format!(
                    "window {w} on node{node} (written by {}): {bad} bytes hold data no legal \
                     history explains, first at offset {first:#x}",
                    writer.map_or_else(|| "?".into(), |s| self.name(s)),
                );
                self.log.mismatch(msg);
            }
        }
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            match node.src.read_vec(0, SRC_LEN as usize) {
                Ok(now) if now == node.src_data => {}
                Ok(_) => self.log.mismatch(format!("node{n}: the read-only READ source changed")),
                Err(e) => self.log.mismatch(format!("node{n}: reading the READ source: {e}")),
            }
            let atomics = match node.atomics.read_vec(0, node.atomics_initial.len()) {
                Ok(a) => a,
                Err(e) => {
                    self.log.mismatch(format!("node{n}: reading the atomics: {e}"));
                    continue;
                }
            };
            for (i, (&a, &b)) in atomics.iter().zip(&node.atomics_initial).enumerate() {
                if a != b && (i as u64 % COUNTER_STRIDE) >= 8 {
                    self.log.mismatch(format!("node{n}: atomics filler byte {i} changed"));
                    break;
                }
            }
            let word = |k: usize| {
                let at = k * COUNTER_STRIDE as usize;
                u64::from_le_bytes(atomics[at..at + 8].try_into().expect("8 bytes"))
            };
            for k in 0..FA_PER_NODE {
                let counter = &self.fa[n * FA_PER_NODE + k];
                if let Err(e) = counter.check_fetch_add(word(k)) {
                    self.log.mismatch(format!("node{n} FETCH_ADD counter {k}: {e}"));
                }
            }
            for k in 0..CAS_PER_NODE {
                let counter = &self.cas[n * CAS_PER_NODE + k];
                if let Err(e) = counter.check_compare_swap(word(FA_PER_NODE + k)) {
                    self.log.mismatch(format!("node{n} COMPARE_SWAP word {k}: {e}"));
                }
            }
        }
    }

    fn check_deliveries(&mut self) {
        for (id, msg) in self.msgs.iter().enumerate() {
            let ty = self.sides[msg.dest].ty;
            match ty {
                QpType::Ud => self.stats.ud_sent += 1,
                QpType::Uc => self.stats.uc_sent += 1,
                QpType::Rc => {}
            }
            // On a fault-free fabric, with a receive reserved for each,
            // UC and UD lose nothing.
            let exact = ty != QpType::Rc && !self.plan.faulty();
            if exact && msg.deliverable && msg.deliveries != 1 {
                self.log.mismatch(format!(
                    "message {id} ({:?} to {}) was delivered {} times on a fault-free fabric",
                    ty,
                    self.name(msg.dest),
                    msg.deliveries
                ));
            }
        }
    }

    fn check_counters(&mut self) {
        for n in 0..self.nodes.len() {
            let named = self.nodes[n].hca.borrow().counters().named();
            for (name, value) in named {
                let bad =
                    matches!(name, "cq_overrun" | "bad_wqe" | "dma_faults" | "rcvd_malformed");
                if bad && value > 0 {
                    self.log.mismatch(format!("node{n}: HCA counter {name} = {value}"));
                }
            }
            let faults = self.nodes[n].mem.faults();
            if faults > 0 {
                self.log.mismatch(format!("node{n}: {faults} host memory faults"));
            }
        }
        let f = *self.fabric.counters();
        if f.dropped_mtu > 0 {
            self.log.mismatch(format!(
                "{} packets exceeded the path MTU ({} bytes of payload) and were dropped",
                f.dropped_mtu,
                self.plan.mtu.bytes()
            ));
        }
        if f.dropped_no_route > 0 {
            self.log.mismatch(format!("{} packets had no route", f.dropped_no_route));
        }
    }
}

fn kind(write_imm: bool) -> &'static str {
    if write_imm {
        "WRITE with immediate"
    } else {
        "SEND"
    }
}
