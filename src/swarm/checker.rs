//! The checker: every completion against the model (order, status,
//! opcode, received data, READ results, atomic results), and at the end
//! the memory (windows, READ sources, atomic words), the deliveries of
//! UC and UD messages, the HCAs' counters and the adversary's findings.

mod audit;

use super::model::AtomicState;
use super::run::*;
use super::workload::Op;
use std::net::Ipv4Addr;
use uroce_sim::Fnv64;
use uroce_verbs::connect;
use uroce_verbs::{Event, EventType, QpType, WcFlags, WcOpcode, WcStatus, WorkCompletion};

impl Sim {
    pub(super) fn poll_all(&mut self) {
        for n in 0..self.nodes.len() {
            if self.paused(n) {
                continue;
            }
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

    pub(super) fn on_cqe(&mut self, n: usize, c: usize, cqe: &WorkCompletion) {
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

    pub(super) fn on_send_cqe(&mut self, s: usize, c: &WorkCompletion) {
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
            // So is a cut of its path that outlasted the retries.
            WcStatus::RetryExcErr => {
                side.ty == QpType::Rc
                    && (self.plan.retry_exhaustion_plausible() || self.path_cut(s))
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
    pub(super) fn retire_ok(&mut self, s: usize, rec: SendRec) {
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
    pub(super) fn retire_failed(&mut self, s: usize, rec: SendRec) {
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
    pub(super) fn connection_failed(&mut self, s: usize) {
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

    pub(super) fn on_recv_cqe(&mut self, s: usize, c: &WorkCompletion) {
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
    pub(super) fn check_rc_receive(
        &mut self,
        s: usize,
        rec: &RecvRec,
        c: &WorkCompletion,
        id: usize,
    ) -> Option<String> {
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
    pub(super) fn check_datagram(
        &mut self,
        s: usize,
        rec: &RecvRec,
        c: &WorkCompletion,
    ) -> Option<String> {
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
        // Equal keys (empty messages, equal payloads) cannot be told apart:
        // credit a deliverable message delivered the fewest times, and of
        // those one that had to arrive before one sent to a paused node
        // (`may_lose`). When one of each was sent and one arrived, nothing
        // shows which did, and only the first must be delivered.
        let id = *ids
            .iter()
            .min_by_key(|&&id| {
                let m = &self.msgs[id];
                (!m.deliverable, m.deliveries, m.may_lose)
            })
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
}

pub(super) fn kind(write_imm: bool) -> &'static str {
    if write_imm {
        "WRITE with immediate"
    } else {
        "SEND"
    }
}
