//! The workload: the application posting chains of send WRs (every
//! operation, sizes around MTU boundaries, SGE layouts with gaps, inline,
//! fenced, unsignaled) and the receives they need, telling the model
//! what it posted.

use super::arena::{random_bytes, Layout};
use super::model::{AtomicOp, AtomicState};
use super::run::*;
use std::net::IpAddr;
use std::rc::Rc;
use uroce_sim::{Fnv64, Probability, SimRng};
use uroce_verbs::{
    Ah, AhAttr, Gid, Qkey, QpType, RecvWr, RemoteTarget, SendFlags, SendWr, WrOpcode,
};

/// An operation of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

pub(super) const OPS: [Op; 7] =
    [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read, Op::FetchAdd, Op::CmpSwap];

impl Op {
    pub(super) fn allowed_on(self, ty: QpType) -> bool {
        match ty {
            QpType::Rc => true,
            QpType::Uc => matches!(self, Op::Send | Op::SendImm | Op::Write | Op::WriteImm),
            QpType::Ud => matches!(self, Op::Send | Op::SendImm),
        }
    }

    pub(super) fn opcode(self) -> WrOpcode {
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

/// The workload's knobs, drawn from the seed.
pub(super) struct Knobs {
    pub(super) weights: [u64; 7],
    pub(super) max_chain: u64,
    pub(super) signaled: Probability,
    pub(super) inline: Probability,
    pub(super) late_recv: Probability,
}

/// A WR built but not yet posted.
pub(super) struct Planned {
    pub(super) wr: SendWr,
    pub(super) rec: SendRec,
    pub(super) commit: Commit,
    pub(super) msg: Option<(Msg, MsgKey)>,
}

pub(super) enum Commit {
    Nothing,
    RcWrite { window: usize, tag: u64, off: u64, data: Rc<Vec<u8>> },
    UcWrite { window: usize, off: u64, data: Rc<Vec<u8>> },
    Atomic { cas: bool, counter: usize, op: AtomicOp },
}

/// A message length up to `max`, biased to MTU boundaries.
pub(super) fn pick_len(rng: &mut SimRng, mtu: u64, max: u64) -> u64 {
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

impl Sim {
    pub(super) fn pick_side(&mut self) -> Option<usize> {
        for _ in 0..8 {
            let s = self.rng.below(self.sides.len() as u64) as usize;
            // Dead QPs get a WR now and then: it must flush.
            let side = &self.sides[s];
            if side.qp.is_some()
                && !self.paused(side.node)
                && (!side.dead() || self.rng.chance(percent(10)))
            {
                return Some(s);
            }
        }
        None
    }

    pub(super) fn post_chain(&mut self, s: usize) {
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

    pub(super) fn choose_op(&mut self, ty: QpType) -> Op {
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
    pub(super) fn plan_wr(&mut self, s: usize) -> Option<Planned> {
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
                if consumes && ty != QpType::Rc && qkey == QKEY && !self.plan.lossy() {
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
                        may_lose: false,
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
    pub(super) fn address_handle(&mut self, from: usize, to: usize) -> u32 {
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
    pub(super) fn commit(&mut self, s: usize, mut p: Planned) {
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
        if let Some((mut msg, key)) = p.msg {
            let id = self.msgs.len();
            // A receive for it is posted when its node's application runs.
            msg.may_lose = self.paused(self.sides[msg.dest].node);
            let dest = msg.dest;
            let lossy = self.plan.lossy();
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
                        let late = lossy && r.chance(self.knobs.late_recv);
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

    pub(super) fn post_receives_all(&mut self) {
        for s in 0..self.sides.len() {
            if !self.sides[s].pending.is_empty() && !self.paused(self.sides[s].node) {
                self.post_receives(s);
            }
        }
    }

    pub(super) fn post_receives(&mut self, s: usize) {
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
}
