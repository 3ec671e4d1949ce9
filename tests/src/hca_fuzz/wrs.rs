//! Work requests: which opcodes each transport takes, building a send WR
//! from the input, and the book of what was posted and must complete.

use super::*;

pub(super) const RC_REQUESTS: [Opcode; 19] = [
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
pub(super) const RC_RESPONSES: [Opcode; 8] = [
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
];

pub(super) const UD_REQUESTS: [Opcode; 2] =
    [Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE];

pub(super) const RC_WRS: [WrOpcode; 12] = [
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

pub(super) const UC_WRS: [WrOpcode; 7] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::LocalInv,
    WrOpcode::BindMw,
    WrOpcode::SendWithInv,
];

pub(super) const UD_WRS: [WrOpcode; 2] = [WrOpcode::Send, WrOpcode::SendWithImm];

pub(super) fn wr_opcodes(qp_type: QpType) -> &'static [WrOpcode] {
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
pub(super) fn send_wr(
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WrKind {
    Send(WrOpcode),
    Recv { capacity: u64 },
}

#[derive(Debug, Clone)]
pub(super) struct WrRecord {
    /// The QP it was posted on (`None`: the SRQ).
    pub(super) qp: Option<usize>,
    pub(super) kind: WrKind,
    /// It must complete (a signaled send or an RQ receive).
    pub(super) must_complete: bool,
    pub(super) completed: bool,
    /// Its QP was reset before it completed: it never may.
    pub(super) discarded: bool,
}

/// Every WR posted, to check each completes at most (and, where the verbs
/// promise it, exactly) once.
#[derive(Debug, Default)]
pub(super) struct WrBook {
    pub(super) next: u64,
    pub(super) records: HashMap<u64, WrRecord>,
}

impl WrBook {
    pub(super) fn next_id(&mut self) -> u64 {
        self.next += 1;
        0x5eed_0000_0000_0000 | self.next
    }

    pub(super) fn posted(
        &mut self,
        wr_id: u64,
        qp: Option<usize>,
        kind: WrKind,
        must_complete: bool,
    ) {
        let record = WrRecord { qp, kind, must_complete, completed: false, discarded: false };
        self.records.insert(wr_id, record);
    }

    /// Checks one completion polled from CQ `cq` of `node`.
    pub(super) fn complete(&mut self, node: &Node, cq: usize, cqe: &Cqe) {
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
    pub(super) fn discard(&mut self, qi: usize) {
        for r in self.records.values_mut() {
            if r.qp == Some(qi) && !r.completed {
                r.discarded = true;
            }
        }
    }
}
