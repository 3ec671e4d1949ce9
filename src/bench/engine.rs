//! The verbs side of `uroce bench`: one side's QPs, buffer and CQ, and the
//! measurement loops of the requester (client) and the responder (server).

mod latency;

use super::oob::Endpoint;
use super::{Op, Params, Test};
use crate::app::{bring_up, default_tuning, Node, ALL_ACCESS};
use crate::perftest::engine::{self, BwPlan, QpCompletion, Requester};
use crate::perftest::report::Measured;
use std::cell::{RefCell, RefMut};
use std::time::{Duration, Instant};
use uroce_device::ring::{recv_ring_shape, send_ring_shape};
use uroce_verbs::{
    Cq, Error, Gid, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType, Qpn, RecvWr, RemoteTarget, Rkey,
    SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// Send queue depth of the latency tests: one WR is in flight at a time,
/// and the unsignaled ones before a signaled one wait for its ACK.
const LAT_SQ_DEPTH: u32 = 32;
/// A SEND or WRITE ping-pong signals every this many WRs and the last
/// (selective signaling, as latency-minded programs post): the others
/// need no ACK of their own (ACKs on demand, `HcaConfig::ack_probe_ns`).
const LAT_SIGNAL_EVERY: u64 = 16;
/// Completions taken per poll.
const POLL_BATCH: usize = 256;

/// Which end of the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The requester: posts the measured operations.
    Client,
    /// The target (and the echo of the ping-pong tests).
    Server,
}

/// What the QPs of one side cost in host memory.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QpMemory {
    /// Send ring bytes per QP.
    pub sq_bytes: u64,
    /// Receive ring bytes per QP.
    pub rq_bytes: u64,
    /// The HCA's QP context (its fixed part) in bytes.
    pub context_bytes: u64,
    /// Growth of the process's resident memory per QP (creation and
    /// bring-up), when /proc tells it.
    pub rss_per_qp: Option<u64>,
}

/// How evenly the device served the QPs of a bandwidth run (`--qps` N > 1).
///
/// Each QP's service rate is its messages over its own active span, from
/// its first post to its last completion (a signaled completion counts
/// every WR it retires, the unsignaled ones before it included). A QP
/// cannot be served before it is posted, so the spans start at each QP's
/// own first post: the measure is the device's arbitration between the
/// QPs that have work, not the order the tool posts them in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct QpShare {
    /// The slowest QP's rate divided by the mean rate: 1.0 when every QP
    /// was served alike, near 0 when one waited while the others ran.
    pub share: f64,
    /// That slowest QP's active span divided by the run's (first post to
    /// last completion).
    pub finish: f64,
}

impl QpShare {
    /// The share of `nq` QPs from their first posts (`first_posts`) and
    /// completions (`per_qp`), times since the loop started; the run is
    /// `first_post..last_completion`. `None` with fewer than two QPs, or
    /// when a QP has no post or no completion.
    pub fn compute(
        nq: usize,
        first_post: u64,
        last_completion: u64,
        first_posts: &[u64],
        per_qp: &[QpCompletion],
    ) -> Option<QpShare> {
        if nq < 2 || first_posts.len() != nq {
            return None;
        }
        let mut messages = vec![0u64; nq];
        let mut last = vec![0u64; nq];
        for c in per_qp {
            let q = c.qp as usize;
            if q < nq {
                messages[q] += u64::from(c.wrs);
                last[q] = last[q].max(c.ns);
            }
        }
        let mut rates = Vec::with_capacity(nq);
        for q in 0..nq {
            if messages[q] == 0 || first_posts[q] == u64::MAX {
                return None;
            }
            let span = last[q].saturating_sub(first_posts[q]).max(1);
            rates.push(messages[q] as f64 / span as f64);
        }
        let mean = rates.iter().sum::<f64>() / nq as f64;
        let slowest = (0..nq).min_by(|&a, &b| rates[a].total_cmp(&rates[b]))?;
        let run = last_completion.saturating_sub(first_post).max(1);
        Some(QpShare {
            share: rates[slowest] / mean,
            finish: last[slowest].saturating_sub(first_posts[slowest]) as f64 / run as f64,
        })
    }
}

/// One bandwidth run of the client: perftest's figures and, with more than
/// one QP, how evenly the QPs progressed.
pub(crate) struct BwResult {
    /// perftest's measurement.
    pub measured: Measured,
    /// The slowest QP's share (`None` with one QP).
    pub share: Option<QpShare>,
}

/// One side's resources.
pub(crate) struct Side {
    /// The QPs (RC).
    pub qps: Vec<Qp>,
    /// Their first PSNs.
    pub psns: Vec<u32>,
    /// The buffer (bandwidth tests: one message, shared by every WR and
    /// QP; latency tests: a receive half and a send half).
    pub mr: Mr,
    /// Offset of the send half in `mr`.
    pub tx_offset: u64,
    /// The CQ of every QP.
    pub cq: Cq,
    /// Receive queue depth per QP (0: no receives).
    pub rx_depth: u32,
    /// Memory per QP.
    pub memory: QpMemory,
    /// The resident set size before the QPs were created.
    rss_before: Option<u64>,
    /// How long without progress is a failure.
    pub timeout: Duration,
    /// The latency loops' buffer of completions, kept between polls (no
    /// allocation per poll).
    completions: RefCell<Vec<WorkCompletion>>,
    /// The receive WRs last posted, kept to post again (perftest builds
    /// its receive WRs once, too).
    recv_wrs: RefCell<Vec<RecvWr>>,
    /// The device (last: dropped after the verbs objects).
    pub node: Node,
}

/// A small xorshift for PSNs (perftest uses `lrand48() & 0xffffff`).
fn psn_source() -> impl FnMut() -> u32 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x & 0xff_ffff) as u32
    }
}

/// The resident set size of this process, in bytes.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Side {
    /// Creates the buffer, CQ and QPs `p` asks for on `node`.
    pub fn create(node: Node, p: &Params, role: Role, timeout: Duration) -> Result<Side, String> {
        let max_size = u64::from(p.sizes.iter().copied().max().unwrap_or(8).max(8));
        let (mr_len, tx_offset) = match p.test {
            Test::Bw => (max_size, 0),
            Test::Lat => {
                let half = max_size.next_multiple_of(4096);
                (2 * half, half)
            }
        };
        let mr = node.pd.alloc_mr(mr_len, ALL_ACCESS).map_err(|e| format!("reg_mr: {e}"))?;
        let receives = p.op == Op::Send && (p.test == Test::Lat || role == Role::Server);
        let rx_depth = if receives { p.rx_depth } else { 0 };
        let sq_depth = match p.test {
            Test::Bw => p.tx_depth,
            Test::Lat => LAT_SQ_DEPTH,
        };
        let qps = p.qps as usize;
        let signaled_per_qp = match (p.test, role) {
            // Every WR may be signaled (see client_bw's global cap).
            (Test::Bw, Role::Client) => p.tx_depth,
            (Test::Bw, Role::Server) => 0,
            (Test::Lat, _) => LAT_SQ_DEPTH,
        };
        let cqe = (u64::from(signaled_per_qp + rx_depth) * qps as u64 + 64).min(32_767) as u32;
        let cq = node.ctx.create_cq(cqe).map_err(|e| format!("create_cq({cqe}): {e}"))?;
        let cap = QpCap {
            max_send_wr: sq_depth,
            max_recv_wr: rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: p.inline,
        };
        let rss_before = rss_bytes();
        let mut next_psn = psn_source();
        let mut list = Vec::with_capacity(qps);
        let mut psns = Vec::with_capacity(qps);
        for i in 0..qps {
            let qp = node
                .pd
                .create_qp(&QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap,
                    sq_sig_all: false,
                })
                .map_err(|e| format!("create_qp #{i} of {qps}: {e}"))?;
            list.push(qp);
            psns.push(next_psn());
        }
        let memory = QpMemory {
            sq_bytes: send_ring_shape(cap.max_send_wr, cap.max_send_sge, cap.max_inline_data)
                .bytes(),
            rq_bytes: recv_ring_shape(cap.max_recv_wr, cap.max_recv_sge).bytes(),
            context_bytes: std::mem::size_of::<uroce_hca::qp::QpContext>() as u64,
            rss_per_qp: None,
        };
        Ok(Side {
            qps: list,
            psns,
            mr,
            tx_offset,
            cq,
            rx_depth,
            memory,
            rss_before,
            timeout,
            completions: RefCell::new(Vec::new()),
            recv_wrs: RefCell::new(Vec::new()),
            node,
        })
    }

    /// This side's connection data.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            ip: self.node.addr(),
            rkey: self.mr.rkey().0,
            vaddr: self.mr.addr(),
            qps: self.qps.iter().zip(&self.psns).map(|(q, &psn)| (q.qpn().value(), psn)).collect(),
        }
    }

    /// Moves every QP to RTS towards `peer`; finishes the memory figures.
    pub fn connect(&mut self, p: &Params, peer: &Endpoint) -> Result<(), String> {
        let mut tuning = default_tuning();
        tuning.mtu = Mtu::fitting(p.mtu);
        tuning.rd_atomic = match p.test {
            Test::Bw => p.tx_depth.clamp(1, 128) as u8,
            Test::Lat => 16,
        };
        let gid = Gid::from_ip(peer.ip);
        for (i, qp) in self.qps.iter().enumerate() {
            let (qpn, psn) = peer.qps[i];
            tuning.sq_psn = self.psns[i];
            bring_up(qp, Some((gid, Qpn::new(qpn), psn)), &tuning, 0)
                .map_err(|e| format!("QP #{i}: {e}"))?;
        }
        self.memory.rss_per_qp = match (self.rss_before, rss_bytes()) {
            (Some(before), Some(after)) => {
                Some(after.saturating_sub(before) / self.qps.len().max(1) as u64)
            }
            _ => None,
        };
        Ok(())
    }

    /// Packets the device received so far (progress of a passive side).
    pub fn rx_packets(&self) -> u64 {
        self.node.dev.hca().lock().counters().rcvd_pkts
    }

    /// Polls the CQ (which also drives the device); fails on an error
    /// completion.
    fn poll(&self) -> Result<Vec<WorkCompletion>, String> {
        let wcs = self.cq.poll(POLL_BATCH).map_err(|e| format!("poll_cq: {e}"))?;
        check_statuses(&wcs)?;
        Ok(wcs)
    }

    /// [`Side::poll`] into the kept buffer (the latency loops).
    fn poll_kept(&self) -> Result<RefMut<'_, Vec<WorkCompletion>>, String> {
        let mut wcs = self.completions.borrow_mut();
        wcs.clear();
        self.cq.poll_into(POLL_BATCH, &mut wcs).map_err(|e| format!("poll_cq: {e}"))?;
        check_statuses(&wcs)?;
        Ok(wcs)
    }

    fn stalled(&self, last_progress: Instant, what: &str) -> Result<(), String> {
        if last_progress.elapsed() >= self.timeout {
            Err(format!(
                "no progress for {} s while {what}: the peer stopped responding",
                self.timeout.as_secs_f64()
            ))
        } else {
            Ok(())
        }
    }

    /// The measured WR of `op` for a message of `size` bytes to `peer`.
    fn template(&self, op: Op, size: u32, peer: &Endpoint, inline: u32) -> SendWr {
        let (opcode, size) = match op {
            Op::Send => (WrOpcode::Send, size),
            Op::Write => (WrOpcode::RdmaWrite, size),
            Op::Read => (WrOpcode::RdmaRead, size),
            Op::Atomic => (WrOpcode::AtomicFetchAndAdd, 8),
        };
        let mut wr = SendWr::new(0, opcode);
        wr.sg_list = vec![self.mr.sge(self.tx_offset, size)];
        wr.remote = RemoteTarget { addr: peer.vaddr, rkey: Rkey(peer.rkey) };
        if op == Op::Atomic {
            wr.compare_add = 1;
        }
        if matches!(op, Op::Send | Op::Write) && size <= inline {
            wr.inline_data = self.mr.read_vec(self.tx_offset, size as usize).ok();
        }
        wr
    }

    /// Posts `count` receives of `size` bytes on QP `q` (wr_id: the QP's
    /// index in the high half).
    fn post_receives(&self, q: usize, count: u64, size: u32) -> Result<(), String> {
        if count == 0 {
            return Ok(());
        }
        let count = count as usize;
        let (wr_id, sge) = ((q as u64) << 32, self.mr.sge(0, size));
        let mut wrs = self.recv_wrs.borrow_mut();
        if wrs.first().is_some_and(|wr| wr.wr_id != wr_id || wr.sg_list != [sge]) {
            wrs.clear();
        }
        if wrs.len() < count {
            wrs.resize(count, RecvWr { wr_id, sg_list: vec![sge] });
        }
        self.qps[q]
            .post_recv(&wrs[..count])
            .map_err(|(i, e)| format!("post_recv #{i} on QP #{q}: {e}"))
    }

    /// The bandwidth loop of the requester ([`engine::bandwidth`]): every
    /// QP keeps up to `tx_depth` WRs outstanding, signals every `cq_mod`-th
    /// WR and its last one, and posts what its window allows as one chain;
    /// all QPs together keep at most `max_inflight_packets` packets' worth
    /// of WRs outstanding (0: no limit). Timed from the first post to the
    /// last completion. With more than one QP it also records each
    /// completion's QP and time for [`QpShare`].
    pub fn client_bw(
        &self,
        p: &Params,
        size: u32,
        peer: &Endpoint,
        record_posts: bool,
        max_inflight_packets: u32,
    ) -> Result<BwResult, String> {
        let iters = u64::from(p.iters);
        let nq = self.qps.len() as u64;
        // Signaled completions per QP: every cq_mod-th WR and the last (and
        // where the cap cut a chain: the Vec grows if those are many).
        let record_qps = if nq > 1 {
            (nq * (iters.div_ceil(u64::from(p.cq_mod)) + 2)).min(nq * iters) as usize
        } else {
            0
        };
        // Packets one WR puts on the wire (READ: its responses).
        let packets_per_wr = u64::from(size.max(1).div_ceil(p.mtu));
        let max_inflight = match max_inflight_packets {
            0 => u64::MAX,
            cap => (u64::from(cap) / packets_per_wr).max(1),
        };
        let plan = BwPlan {
            iters,
            tx_depth: u64::from(p.tx_depth),
            max_inflight,
            rotate: true,
            record_posts,
            record_qps,
        };
        let mut client = ClientBw {
            side: self,
            template: self.template(p.op, size, peer, p.inline),
            iters,
            cq_mod: u64::from(p.cq_mod),
        };
        let run = engine::bandwidth(&mut client, &plan)?;
        let share = QpShare::compute(
            nq as usize,
            run.first_post,
            run.last_completion,
            &run.qp_first_post,
            &run.per_qp,
        );
        let measured = Measured {
            size,
            iters: nq * iters,
            elapsed_ns: run.last_completion.saturating_sub(run.first_post),
            posted_ns: run.posted,
            completed_ns: run.completed,
        };
        Ok(BwResult { measured, share })
    }

    /// The SEND bandwidth target: keeps receives posted (up to `rx_depth`
    /// per QP, `iters` in all per QP) until every message arrived.
    pub fn server_send_bw(&self, p: &Params, size: u32) -> Result<(), String> {
        let nq = self.qps.len();
        let iters = u64::from(p.iters);
        let depth = u64::from(self.rx_depth.max(1));
        let mut posted = vec![0u64; nq];
        for (q, count) in posted.iter_mut().enumerate() {
            *count = depth.min(iters);
            self.post_receives(q, *count, size)?;
        }
        let total = nq as u64 * iters;
        let mut received = 0u64;
        let mut last_progress = Instant::now();
        let mut refill = vec![0u64; nq];
        while received < total {
            let wcs = self.poll()?;
            if wcs.is_empty() {
                self.stalled(last_progress, "receiving SENDs")?;
                continue;
            }
            last_progress = Instant::now();
            for wc in wcs {
                let q = (wc.wr_id >> 32) as usize;
                if wc.opcode != WcOpcode::Recv || q >= nq {
                    continue;
                }
                received += 1;
                refill[q] += 1;
            }
            for q in 0..nq {
                let more = refill[q].min(iters - posted[q]);
                refill[q] = 0;
                self.post_receives(q, more, size)?;
                posted[q] += more;
            }
        }
        Ok(())
    }
}

/// The client's side of the bandwidth engine: the measured WR, signaled
/// every `cq_mod`-th, at each QP's last and where the cap cut a chain.
struct ClientBw<'a> {
    side: &'a Side,
    template: SendWr,
    iters: u64,
    cq_mod: u64,
}

impl Requester for ClientBw<'_> {
    fn qps(&self) -> &[Qp] {
        &self.side.qps
    }

    fn work_request(&mut self, q: usize, n: u64, close: bool) -> SendWr {
        let mut wr = self.template.clone();
        wr.wr_id = ((q as u64) << 32) | n;
        wr.flags = if n % self.cq_mod == 0 || n == self.iters || close {
            SendFlags::SIGNALED
        } else {
            SendFlags::EMPTY
        };
        wr
    }

    fn post_error(&self, q: usize, i: usize, _scnt: u64, e: Error) -> String {
        format!("post_send #{i} on QP #{q}: {e}")
    }

    fn poll(&mut self) -> Result<Vec<WorkCompletion>, String> {
        self.side.poll()
    }

    fn stalled(&self, since: Instant, _done: u64, _total: u64) -> Result<(), String> {
        self.side.stalled(since, "waiting for completions")
    }

    fn completed(
        &mut self,
        wc: &WorkCompletion,
        _q: usize,
        _prev: u64,
        _n: u64,
        known: bool,
    ) -> Result<(), String> {
        if known {
            Ok(())
        } else {
            Err(format!("unexpected completion wr_id {:#x}", wc.wr_id))
        }
    }
}

/// The first completion with an error, as the benchmark's error.
fn check_statuses(wcs: &[WorkCompletion]) -> Result<(), String> {
    match wcs.iter().find(|wc| wc.status != WcStatus::Success) {
        Some(bad) => Err(format!(
            "completion with error: status {:?} ({}) on QP {} (wr_id {:#x}, vendor_err {:#x})",
            bad.status,
            bad.status.raw(),
            bad.qp_num,
            bad.wr_id,
            bad.vendor_err
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(qp: u32, wrs: u32, ns: u64) -> QpCompletion {
        QpCompletion { qp, wrs, ns }
    }

    #[test]
    fn slowest_qp_share() {
        // QP 0: 6 messages from 10 to 70 (0.1 per ns); QP 1: 6 from 40 to 100
        // (0.1): posted later, served alike.
        let alike = [c(0, 4, 40), c(1, 3, 70), c(0, 2, 70), c(1, 3, 100)];
        let s = QpShare::compute(2, 10, 100, &[10, 40], &alike).unwrap();
        assert_eq!(s.share, 1.0);
        assert!((s.finish - 60.0 / 90.0).abs() < 1e-9);
        // QP 2 posted at 0 like the others but served at the very end: 2
        // messages over 100 (0.02) against 0.2 and 0.2: mean 0.14.
        let starved = [c(0, 2, 10), c(1, 2, 10), c(2, 2, 100)];
        let s = QpShare::compute(3, 0, 100, &[0, 0, 0], &starved).unwrap();
        assert!((s.share - 0.02 / 0.14).abs() < 1e-9, "{s:?}");
        assert_eq!(s.finish, 1.0);
        // A QP without a completion, or one QP: no figure.
        assert!(QpShare::compute(2, 0, 100, &[0, 0], &[c(0, 5, 100)]).is_none());
        assert!(QpShare::compute(1, 0, 100, &[0], &[c(0, 5, 100)]).is_none());
    }
}
