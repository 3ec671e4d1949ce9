//! Building the world: the HCAs on the fabric (and the adversary on its
//! mirror port), each node's READ source and atomic words, and the
//! connections: QPs, CQs, buffers, windows, and their replacement when
//! the application loses or closes an RC connection.

use super::adversary::Adversary;
use super::arena::{random_bytes, Arena};
use super::disrupt;
use super::model::{Counter, Window};
use super::plan::Plan;
use super::run::*;
use super::workload::Knobs;
use super::{Log, Stats};
use crate::world::{Host, World, WorldBuilder};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use uroce_device::mem::SimMemory;
use uroce_hca::config::HcaConfig;
use uroce_hca::{Endpoint, Instant, SharedHca, Transmit};
use uroce_sim::{FabricConfig, FaultConfig, NodeId, SimRng};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{Access, Gid, QpCap, QpInitAttr, QpType};

/// A node of the fabric: an HCA, or the adversary on the mirror port.
pub(super) enum Member {
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

/// A first PSN: sometimes 0, sometimes just before the 24-bit wrap.
pub(super) fn pick_psn(rng: &mut SimRng) -> u32 {
    match rng.below(4) {
        0 => 0,
        1 => 0x00ff_ffff - rng.below(64) as u32,
        _ => rng.below(1 << 24) as u32,
    }
}

impl Sim {
    pub(super) fn new(plan: Plan) -> Sim {
        let mtu = plan.mtu;
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
        let hca_config = HcaConfig {
            active_mtu: mtu,
            max_unacked_psns: plan.max_unacked_psns,
            max_pkt_per_ack: plan.max_pkt_per_ack,
            max_packets_per_turn: plan.max_packets_per_turn,
            max_burst_packets: plan.max_burst_packets,
            max_device_unacked_psns: plan.max_device_unacked_psns,
            ack_probe_ns: plan.ack_probe_ns,
            // A run's CM comm IDs follow from its seed, like everything else.
            cm_seed: plan.seed,
            ..HcaConfig::default()
        };
        let mems: Vec<Arc<SimMemory>> =
            (0..plan.nodes).map(|_| Arc::new(SimMemory::new(1 << 40))).collect();
        // The adversary, when it runs, is the endpoint after the HCAs'.
        let adversary = (!plan.adversary.is_never()).then_some(NodeId(plan.nodes as usize));
        let mut builder = WorldBuilder::new(plan.nodes as usize, config)
            .hca_config(hca_config)
            .memory(|i| mems[i].clone());
        // A scenario goes on the ports as in the harness and the scenario
        // tests (`WorldBuilder::scenario`: ports on the fabric, device
        // faults applied to the HCAs). Without one nothing changes.
        if let Some(s) = &plan.scenario {
            builder = builder.scenario(s.scenario.clone());
            for (node, role) in &s.roles {
                builder = builder.role(*node, role);
            }
        }
        let World { mut fabric, hosts, .. } = builder.build_with(
            |host| Member::Hca(host.hca.clone()),
            |hosts| {
                let Some(id) = adversary else { return Vec::new() };
                let hcas = hosts.iter().map(|h| h.hca.clone()).collect();
                let adversary = Adversary::new(id, plan.adversary, plan.seed, hcas);
                vec![Member::Adversary(Box::new(adversary))]
            },
        );
        fabric.set_mirror(adversary);
        let mut rng = fabric.fork_rng();

        let mut nodes = Vec::new();
        let mut fa = Vec::new();
        let mut cas = Vec::new();
        for (Host { hca, ctx, ip }, mem) in hosts.into_iter().zip(mems) {
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

        let disruptions = disrupt::draw(&plan);
        let paused_until = vec![Instant::ZERO; plan.nodes as usize];
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
            disruptions,
            paused_until,
            cut_paths: BTreeSet::new(),
            steps: None,
        };
        sim.connect_all();
        sim
    }

    pub(super) fn connect_all(&mut self) {
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
    pub(super) fn connect_pair(&mut self, ty: QpType, na: usize, nb: usize) {
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
    pub(super) fn replace_lost(&mut self) {
        let limit = 4 * self.plan.qps as usize + 16;
        for c in 0..self.conns.len() {
            if self.stats.posted >= self.plan.ops || self.stats.rc_replaced as usize >= limit {
                return;
            }
            let conn = &self.conns[c];
            let (a, b) = conn.sides;
            let drained = |s: &Side| s.sq.is_empty() && s.rq.is_empty();
            let (na, nb) = (self.sides[a].node, self.sides[b].node);
            let running = !self.paused(na) && !self.paused(nb);
            if conn.lost
                && !conn.replaced
                && running
                && drained(&self.sides[a])
                && drained(&self.sides[b])
            {
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
                self.connect_pair(QpType::Rc, na, nb);
            }
        }
    }

    /// The application closes a healthy RC connection (both QPs to ERR:
    /// they flush), to be replaced once drained. Only with the adversary
    /// on, so that its sample holds packets of destroyed QPs (and the
    /// workload of runs without it stays as it was).
    pub(super) fn close_one(&mut self) {
        let open: Vec<usize> = (0..self.conns.len())
            .filter(|&c| {
                let (a, b) = self.conns[c].sides;
                !self.conns[c].lost
                    && self.sides[a].ty == QpType::Rc
                    && !self.paused(self.sides[a].node)
                    && !self.paused(self.sides[b].node)
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

    pub(super) fn tuning(&mut self) -> Tuning {
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

    pub(super) fn new_window(&mut self, node: usize) -> usize {
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
    pub(super) fn pick_cq(&mut self, n: usize, depth: u32) -> usize {
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

    pub(super) fn create_side(&mut self, n: usize, ty: QpType, conn: usize) -> usize {
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
}
