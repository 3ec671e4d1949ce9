//! The RDMA side of `uroce perftest`: one buffer region per QP, the QPs
//! brought up as perftest's `ctx_connect` does, and perftest's traffic
//! (`run_iter_bw`, `run_iter_bw_server`) with every result checked.
//!
//! Addresses cycle as perftest's do, so that both ends agree on where each
//! message lands: a message of `size` bytes takes the `k`-th slot of
//! `INC(size) = size rounded up to the cache line` bytes, wrapping after
//! `cycle_buffer / INC` slots, while `size <= cycle_buffer / 2`; larger
//! messages always use the region's start. An atomic's remote address
//! cycles the same way in steps of one cache line.

mod measure;

use super::engine::{self, BwPlan, Requester};
use super::report::Measured;
use super::session::{Agreed, Traffic};
use super::wire::{BwReport, Dest, Role};
use super::{AtomicType, Connection, Plan, Verb, PEAK_LIMIT, UD_QKEY};
use crate::app::{Node, ALL_ACCESS};
use std::time::Instant;
use uroce_verbs::{
    Access, Ah, AhAttr, AttrMask, Cq, Error, Gid, Mr, Mtu, Qkey, Qp, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, Qpn, RecvWr, RemoteTarget, Rkey, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Bytes of GRH in front of every UD receive (`UD_ADDITION`).
const GRH_LEN: u64 = 40;
/// Completions taken per poll (`CTX_POLL_BATCH` is 16; more is cheaper).
const POLL_BATCH: usize = 256;
/// The CQ's largest size (the HCA's `max_cqe`).
const MAX_CQE: u64 = 32_767;
/// perftest's `ATOMIC_ADD_VALUE`.
const ATOMIC_ADD: u64 = 1;
/// perftest's compare and swap operands (both 0, as captured).
const ATOMIC_COMPARE: u64 = 0;
const ATOMIC_SWAP: u64 = 0;
/// Pattern seeds of the two ends' buffers.
const CLIENT_SEED: u64 = 0xc11e_0000_0000_0001;
const SERVER_SEED: u64 = 0x5e7e_0000_0000_0002;

/// perftest's address cycling for the agreed cycle buffer and cache line.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Bytes the addresses cycle within.
    pub cycle_buffer: u64,
    /// The step unit.
    pub cache_line: u64,
}

impl Layout {
    /// perftest's `INC(size, cache_line_size)`.
    pub fn inc(&self, size: u64) -> u64 {
        size.max(1).next_multiple_of(self.cache_line)
    }

    /// Slots before the address wraps (1: no cycling).
    pub fn slots(&self, size: u64) -> u64 {
        if size <= self.cycle_buffer / 2 {
            (self.cycle_buffer / self.inc(size)).max(1)
        } else {
            1
        }
    }

    /// Offset of the `k`-th message of `size` bytes in a QP's region.
    pub fn offset(&self, size: u64, k: u64) -> u64 {
        (k % self.slots(size)) * self.inc(size)
    }
}

/// A deterministic byte pattern: the byte at offset `at` of a region
/// (every QP's region holds the same bytes).
pub fn pattern(seed: u64, at: u64, len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len);
    let end = at + len as u64;
    let mut x = at;
    while x < end {
        let word = mix(seed ^ (x / 8)).to_le_bytes();
        let from = (x % 8) as usize;
        let take = (8 - from).min((end - x) as usize);
        bytes.extend_from_slice(&word[from..from + take]);
        x += take as u64;
    }
    bytes
}

/// splitmix64's finaliser.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random 24-bit PSN (perftest: `lrand48() & 0xffffff`).
fn random_psn(i: usize) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (mix(nanos ^ (u64::from(std::process::id()) << 32) ^ i as u64) & 0xff_ffff) as u32
}

/// One side's QPs, buffer and CQ.
pub struct Rdma {
    plan: Plan,
    role: Role,
    layout: Layout,
    /// The agreed path MTU.
    mtu: Mtu,
    cq: Cq,
    qps: Vec<Qp>,
    psns: Vec<u32>,
    ahs: Vec<Ah>,
    mr: Mr,
    /// Bytes per QP region; QP `i`'s region starts at `i * region_len`.
    region_len: u64,
    /// Where the atomic client's result slots start (`tx_depth` per QP).
    results_at: u64,
    out_reads: u16,
    /// The device's limit on outstanding READs/atomics as a requester.
    max_init_rd_atom: u8,
    gid: Gid,
    peers: Vec<Dest>,
    /// SEND server, per QP: receives posted and taken for the current size.
    rx_posted: Vec<u64>,
    rx_taken: Vec<u64>,
    /// The device (last: dropped after the verbs objects).
    node: Node,
}

impl Rdma {
    /// Creates the buffer, CQ and QPs for the agreed sizes.
    pub fn open(plan: &Plan, role: Role, node: Node, agreed: &Agreed) -> Result<Rdma, String> {
        let layout = Layout {
            cycle_buffer: u64::from(agreed.cycle_buffer),
            cache_line: u64::from(agreed.cache_line),
        };
        let largest = u64::from(agreed.sizes.iter().copied().max().unwrap_or(8));
        // The largest message or the cycle buffer, whichever is larger, and
        // a cache line; UD receives are spread a cache line further apart
        // (see `receive_offset`), which at most doubles that.
        let span = largest.max(layout.cycle_buffer);
        let span = if plan.connection == Connection::Ud { 2 * span } else { span };
        let region_len = (span + layout.cache_line).next_multiple_of(layout.cache_line);
        let nq = u64::from(plan.qps);
        let atomic_client = plan.verb == Verb::Atomic && role == Role::Client;
        let results = if atomic_client { nq * u64::from(plan.tx_depth) * 8 } else { 0 };
        let results_at = nq * region_len;
        let mr = node
            .pd
            .alloc_mr(results_at + results, ALL_ACCESS)
            .map_err(|e| format!("Couldn't allocate MR of {} bytes: {e}", results_at + results))?;
        let seed = if role == Role::Client { CLIENT_SEED } else { SERVER_SEED };
        let image = pattern(seed, 0, region_len as usize);
        for q in 0..nq {
            mr.write(q * region_len, &image).map_err(|e| format!("filling the buffer: {e}"))?;
        }
        let dev = node.ctx.query_device().map_err(|e| format!("ibv_query_device: {e}"))?;
        let port = node.ctx.query_port().map_err(|e| format!("ibv_query_port: {e}"))?;
        if u32::from(plan.gid_index) >= port.gid_tbl_len {
            return Err(format!(
                "-x {}: the GID table has {} entries",
                plan.gid_index, port.gid_tbl_len
            ));
        }
        let gid = node
            .ctx
            .query_gid(plan.gid_index)
            .map_err(|e| format!("Couldn't read sgid of index {}: {e}", plan.gid_index))?;
        let max_rd = dev.max_qp_rd_atom.min(u32::from(u8::MAX));
        let out_reads = match plan.verb {
            Verb::Read | Verb::Atomic => plan.outs.unwrap_or(max_rd).min(max_rd) as u16,
            Verb::Send | Verb::Write => 1,
        };
        let sender = role == Role::Client;
        let receiver = plan.verb == Verb::Send && role == Role::Server;
        // Completions outstanding at once: every cq_mod-th send and each
        // QP's last, or every posted receive.
        let per_qp = if sender {
            u64::from(plan.tx_depth.div_ceil(plan.cq_mod)) + 1
        } else if receiver {
            u64::from(plan.rx_depth)
        } else {
            1
        };
        if nq * per_qp + 64 > MAX_CQE {
            return Err(format!(
                "{} QPs with {per_qp} completions outstanding each do not fit one CQ of {MAX_CQE} \
                 entries: use fewer QPs, a smaller -t/-r or a larger -Q",
                plan.qps
            ));
        }
        let cqe = (nq * per_qp + 64) as u32;
        let cq = node.ctx.create_cq(cqe).map_err(|e| format!("Couldn't create CQ: {e}"))?;
        let cap = QpCap {
            max_send_wr: if sender { plan.tx_depth } else { 1 },
            max_recv_wr: if receiver { plan.rx_depth } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: plan.inline_size,
        };
        let qp_type = match plan.connection {
            Connection::Rc => QpType::Rc,
            Connection::Uc => QpType::Uc,
            Connection::Ud => QpType::Ud,
        };
        let mut qps = Vec::with_capacity(plan.qps as usize);
        let mut psns = Vec::with_capacity(plan.qps as usize);
        for i in 0..plan.qps as usize {
            let qp = node
                .pd
                .create_qp(&QpInitAttr {
                    qp_type,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap,
                    sq_sig_all: false,
                })
                .map_err(|e| format!("Couldn't create QP #{i}: {e}"))?;
            qps.push(qp);
            psns.push(random_psn(i));
        }
        Ok(Rdma {
            plan: plan.clone(),
            role,
            layout,
            mtu: agreed.mtu,
            cq,
            qps,
            psns,
            ahs: Vec::new(),
            mr,
            region_len,
            results_at,
            out_reads,
            max_init_rd_atom: dev.max_qp_init_rd_atom.min(u32::from(u8::MAX)) as u8,
            gid,
            peers: Vec::new(),
            rx_posted: vec![0; plan.qps as usize],
            rx_taken: vec![0; plan.qps as usize],
            node,
        })
    }

    fn region(&self, q: usize) -> u64 {
        q as u64 * self.region_len
    }

    /// perftest's QP access flags per test.
    fn access(&self) -> Access {
        match self.plan.verb {
            Verb::Send => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Verb::Write => Access::REMOTE_WRITE,
            Verb::Read => Access::REMOTE_READ,
            Verb::Atomic => Access::REMOTE_ATOMIC,
        }
    }

    /// One QP through INIT, RTR and RTS (`ctx_modify_qp_to_init/rtr/rts`).
    fn bring_up(&self, i: usize, peer: &Dest) -> Result<(), String> {
        let qp = &self.qps[i];
        let step = |what: &str, attr: &QpAttr, mask: AttrMask| {
            qp.modify(attr, mask).map_err(|e| format!("Failed to modify QP #{i} to {what}: {e}"))
        };
        let ud = self.plan.connection == Connection::Ud;
        let rc = self.plan.connection == Connection::Rc;
        let mut init = QpAttr {
            qp_state: Some(QpState::Init),
            port_num: 1,
            pkey_index: 0,
            ..QpAttr::default()
        };
        let mut mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
        if ud {
            init.qkey = UD_QKEY;
            mask = mask | AttrMask::QKEY;
        } else {
            init.qp_access_flags = self.access();
            mask = mask | AttrMask::ACCESS_FLAGS;
        }
        step("INIT", &init, mask)?;
        let mut rtr = QpAttr { qp_state: Some(QpState::Rtr), ..QpAttr::default() };
        let mut mask = AttrMask::STATE;
        if !ud {
            rtr.path_mtu = Some(self.mtu);
            rtr.dest_qp_num = peer.qpn;
            rtr.rq_psn = peer.psn;
            rtr.ah_attr = self.ah_attr(peer);
            mask = mask | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
            if rc {
                rtr.max_dest_rd_atomic = self.out_reads as u8;
                rtr.min_rnr_timer = 12;
                mask = mask | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
            }
        }
        step("RTR", &rtr, mask)?;
        let mut rts =
            QpAttr { qp_state: Some(QpState::Rts), sq_psn: self.psns[i], ..QpAttr::default() };
        let mut mask = AttrMask::STATE | AttrMask::SQ_PSN;
        if rc {
            rts.timeout = self.plan.qp_timeout;
            rts.retry_cnt = 7;
            rts.rnr_retry = 7;
            // The peer's responder resources, within what this device may
            // issue.
            rts.max_rd_atomic = peer.out_reads.clamp(1, u16::from(self.max_init_rd_atom)) as u8;
            mask = mask
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC;
        }
        step("RTS", &rts, mask)
    }

    fn ah_attr(&self, peer: &Dest) -> AhAttr {
        AhAttr {
            dgid: peer.gid,
            sgid_index: self.plan.gid_index,
            hop_limit: 0xff,
            port_num: 1,
            ..AhAttr::default()
        }
    }

    /// Polls the CQ; an error completion fails the run.
    fn poll(&self) -> Result<Vec<WorkCompletion>, String> {
        let wcs = self.cq.poll(POLL_BATCH).map_err(|e| format!("poll CQ failed: {e}"))?;
        if let Some(bad) = wcs.iter().find(|wc| wc.status != WcStatus::Success) {
            let q = (bad.wr_id >> 32) as usize;
            return Err(format!(
                "Completion with error at QP #{q} (QPN {:#x}): status {:?} ({}), opcode {:?}, \
                 vendor_err {:#x}",
                bad.qp_num.value(),
                bad.status,
                bad.status.raw(),
                bad.opcode,
                bad.vendor_err
            ));
        }
        Ok(wcs)
    }

    fn stalled(&self, since: Instant, what: &str) -> Result<(), String> {
        if since.elapsed() >= self.plan.timeout {
            Err(format!(
                "no progress for {} s while {what} (--timeout): the peer stopped responding",
                self.plan.timeout.as_secs_f64()
            ))
        } else {
            Ok(())
        }
    }

    /// The `k`-th operation of QP `q` (1-based `n = k + 1` in its wr_id).
    fn work_request(&self, q: usize, size: u32, k: u64) -> SendWr {
        let plan = &self.plan;
        let peer = &self.peers[q];
        let size64 = u64::from(size);
        let (opcode, len) = match (plan.verb, plan.atomic) {
            (Verb::Send, _) => (WrOpcode::Send, size),
            (Verb::Write, _) => (WrOpcode::RdmaWrite, size),
            (Verb::Read, _) => (WrOpcode::RdmaRead, size),
            (Verb::Atomic, AtomicType::FetchAndAdd) => (WrOpcode::AtomicFetchAndAdd, 8),
            (Verb::Atomic, AtomicType::CmpAndSwap) => (WrOpcode::AtomicCmpAndSwp, 8),
        };
        let mut wr = SendWr::new(((q as u64) << 32) | (k + 1), opcode);
        let remote = self.layout.offset(u64::from(len), k);
        wr.sg_list = vec![if plan.verb == Verb::Atomic {
            // A result slot of its own until the WR has completed.
            self.mr.sge(
                self.results_at
                    + (q as u64 * u64::from(plan.tx_depth) + k % u64::from(plan.tx_depth)) * 8,
                8,
            )
        } else {
            self.mr.sge(self.region(q) + self.layout.offset(size64, k), size)
        }];
        if matches!(plan.verb, Verb::Send | Verb::Write) && size <= plan.inline_size {
            let at = self.region(q) + self.layout.offset(size64, k);
            wr.inline_data = self.mr.read_vec(at, size as usize).ok();
        }
        wr.remote = RemoteTarget { addr: peer.vaddr.wrapping_add(remote), rkey: Rkey(peer.rkey) };
        match plan.atomic {
            AtomicType::FetchAndAdd => wr.compare_add = ATOMIC_ADD,
            AtomicType::CmpAndSwap => {
                wr.compare_add = ATOMIC_COMPARE;
                wr.swap = ATOMIC_SWAP;
            }
        }
        if let Some(ah) = self.ahs.get(q) {
            wr.ud = Some((ah.index(), Qpn::new(peer.qpn), Qkey(UD_QKEY)));
        }
        let n = k + 1;
        let last = n == u64::from(plan.iters);
        wr.flags = if n % u64::from(plan.cq_mod) == 0 || last {
            SendFlags::SIGNALED
        } else {
            SendFlags::EMPTY
        };
        wr
    }

    fn expected_opcode(&self) -> WcOpcode {
        match (self.plan.verb, self.plan.atomic) {
            (Verb::Send, _) => WcOpcode::Send,
            (Verb::Write, _) => WcOpcode::RdmaWrite,
            (Verb::Read, _) => WcOpcode::RdmaRead,
            (Verb::Atomic, AtomicType::FetchAndAdd) => WcOpcode::FetchAdd,
            (Verb::Atomic, AtomicType::CmpAndSwap) => WcOpcode::CompSwap,
        }
    }

    /// Checks the atomic results of QP `q`'s operations `from..to`: each
    /// returns what the last one on the same address left there.
    fn check_atomics(
        &self,
        q: usize,
        from: u64,
        to: u64,
        last: &mut [Option<u64>],
    ) -> Result<(), String> {
        let tx = u64::from(self.plan.tx_depth);
        for k in from..to {
            let at = self.results_at + (q as u64 * tx + k % tx) * 8;
            let mut value = [0u8; 8];
            self.mr.read(at, &mut value).map_err(|e| format!("reading a result: {e}"))?;
            let value = u64::from_le_bytes(value);
            let slot = (k % last.len() as u64) as usize;
            if let Some(before) = last[slot] {
                let expected = match self.plan.atomic {
                    AtomicType::FetchAndAdd => before.wrapping_add(ATOMIC_ADD),
                    AtomicType::CmpAndSwap if before == ATOMIC_COMPARE => ATOMIC_SWAP,
                    AtomicType::CmpAndSwap => before,
                };
                if value != expected {
                    return Err(format!(
                        "atomic #{k} of QP #{q} returned {value:#x} from remote address {:#x}; \
                         the previous one there returned {before:#x}, so {expected:#x} was \
                         expected",
                        self.peers[q].vaddr.wrapping_add(slot as u64 * self.layout.inc(8))
                    ));
                }
            }
            last[slot] = Some(value);
        }
        Ok(())
    }

    /// Compares `len` bytes at `at` (in the MR) with the other end's
    /// pattern at offset `source` of its region.
    fn check_data(&self, what: &str, at: u64, source: u64, len: usize) -> Result<(), String> {
        let seed = if self.role == Role::Client { SERVER_SEED } else { CLIENT_SEED };
        let expected = pattern(seed, source, len);
        let got = self.mr.read_vec(at, len).map_err(|e| format!("reading the buffer: {e}"))?;
        match got.iter().zip(&expected).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{what}: byte {i} is {:#04x}, {:#04x} was sent (--check)",
                got[i], expected[i]
            )),
        }
    }
}
