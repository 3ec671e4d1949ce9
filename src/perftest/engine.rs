//! The bandwidth engine of `uroce perftest` and `uroce bench`: perftest's
//! `run_iter_bw`. Each QP keeps up to `tx_depth` WRs outstanding and posts
//! what its window allows as one chain; the CQ is polled for the signaled
//! completions that open the windows again; the run is timed from the
//! first post to the last completion, with every post time (when asked)
//! and every completion point recorded for the peak
//! ([`super::report::Measured`]).
//!
//! What differs between the tools is theirs ([`Requester`]): the work
//! requests and their signalling, the checks on each completion, and the
//! words of their errors. `uroce bench` also caps the WRs all QPs keep
//! outstanding together (`--max-inflight`), and then starts each pass at
//! the QP after the last one that posted, so that every QP gets its turn.

use std::collections::VecDeque;
use std::time::Instant;
use uroce_verbs::{Error, Qp, SendWr, WorkCompletion};

/// How the loop runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BwPlan {
    /// WRs per QP.
    pub iters: u64,
    /// WRs outstanding per QP at most.
    pub tx_depth: u64,
    /// WRs outstanding over all QPs at most (`u64::MAX`: no cap, as
    /// perftest).
    pub max_inflight: u64,
    /// Start each pass at the QP after the last one that posted (rather
    /// than at QP 0, as perftest).
    pub rotate: bool,
    /// Record every WR's post time (for the peak).
    pub record_posts: bool,
    /// Record each completion's QP, WRs retired and time
    /// ([`BwRun::per_qp`]), in a Vec with room for this many completions
    /// reserved before the loop (0: not recorded).
    pub record_qps: usize,
}

/// The tool's side of the loop.
pub(crate) trait Requester {
    /// The QPs, in order (QP `q`'s WRs carry `q << 32 | n`, `n` from 1).
    fn qps(&self) -> &[Qp];
    /// WR `n` (1-based) of QP `q`; `close` when it ends a chain the cap cut
    /// short (it must be signaled, or what the chain leaves outstanding
    /// might never complete).
    fn work_request(&mut self, q: usize, n: u64, close: bool) -> SendWr;
    /// The error of a post the QP refused at WR `i` of the chain (the QP's
    /// `scnt`-th WR, 0-based).
    fn post_error(&self, q: usize, i: usize, scnt: u64, e: Error) -> String;
    /// Polls the CQ; an error completion fails the run.
    fn poll(&mut self) -> Result<Vec<WorkCompletion>, String>;
    /// Fails the run once nothing completed for too long since `since`.
    fn stalled(&self, since: Instant, done: u64, total: u64) -> Result<(), String>;
    /// A completion of QP `q` that retires its WRs `prev + 1 ..= n`;
    /// `known` is false when `q` or `n` is no WR outstanding (an error).
    fn completed(
        &mut self,
        wc: &WorkCompletion,
        q: usize,
        prev: u64,
        n: u64,
        known: bool,
    ) -> Result<(), String>;
}

/// What a run recorded, in nanoseconds since the loop started.
#[derive(Debug, Clone, Default)]
pub(crate) struct BwRun {
    /// The first post.
    pub first_post: u64,
    /// The last completion.
    pub last_completion: u64,
    /// Every WR's post time, in post order (empty unless recorded).
    pub posted: Vec<u64>,
    /// Per completion: WRs completed so far over all QPs, and when.
    pub completed: Vec<(u64, u64)>,
    /// Per completion (when [`BwPlan::record_qps`] asks): the QP's index,
    /// the WRs it retired (a signaled completion retires the unsignaled
    /// WRs before it), and when.
    pub per_qp: Vec<QpCompletion>,
    /// Each QP's first post (when [`BwPlan::record_qps`] asks; else empty).
    pub qp_first_post: Vec<u64>,
}

/// One completion of one QP ([`BwRun::per_qp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpCompletion {
    /// The QP's index.
    pub qp: u32,
    /// WRs the completion retired.
    pub wrs: u32,
    /// When, in nanoseconds since the loop started.
    pub ns: u64,
}

/// Runs the loop until every QP's `iters` WRs completed.
pub(crate) fn bandwidth(r: &mut impl Requester, plan: &BwPlan) -> Result<BwRun, String> {
    let nq = r.qps().len();
    let total = nq as u64 * plan.iters;
    let mut run = BwRun::default();
    if plan.record_posts {
        run.posted.reserve(total as usize);
    }
    run.per_qp.reserve(plan.record_qps);
    if plan.record_qps > 0 {
        run.qp_first_post = vec![u64::MAX; nq];
    }
    let mut posting = Posting {
        scnt: vec![0u64; nq],
        ccnt: vec![0u64; nq],
        inflight: 0,
        batch: Vec::with_capacity(plan.tx_depth as usize),
        start: Instant::now(),
        first: true,
    };
    // Rotating: the QPs that may have room, in the order they get their
    // turn (each goes to the back once it has posted): a pass costs what it
    // posts, not a look at every QP (10,000 QPs of 5 WRs each would
    // otherwise spend more time looking than posting).
    let mut turns: VecDeque<usize> = if plan.rotate { (0..nq).collect() } else { VecDeque::new() };
    let mut waiting_turn = vec![plan.rotate; nq];
    let mut done = 0u64;
    let mut last_progress = posting.start;
    while done < total {
        if plan.rotate {
            // One turn per QP and pass: a QP whose ring is full waits for
            // the poll below, not for itself.
            for _ in 0..turns.len() {
                if posting.inflight >= plan.max_inflight {
                    break;
                }
                let Some(q) = turns.pop_front() else { break };
                waiting_turn[q] = false;
                if posting.turn(r, plan, &mut run, q)? {
                    turns.push_back(q);
                    waiting_turn[q] = true;
                }
            }
        } else {
            for q in 0..nq {
                if posting.inflight >= plan.max_inflight {
                    break;
                }
                posting.turn(r, plan, &mut run, q)?;
            }
        }
        let wcs = r.poll()?;
        if wcs.is_empty() {
            r.stalled(last_progress, done, total)?;
            continue;
        }
        let now = posting.start.elapsed().as_nanos() as u64;
        last_progress = Instant::now();
        let Posting { scnt, ccnt, inflight, .. } = &mut posting;
        for wc in &wcs {
            let q = (wc.wr_id >> 32) as usize;
            let n = wc.wr_id & 0xffff_ffff;
            let known = q < nq && n > ccnt[q] && n <= scnt[q];
            r.completed(wc, q, if known { ccnt[q] } else { 0 }, n, known)?;
            if !known {
                return Err(format!("unexpected completion wr_id {:#x}", wc.wr_id));
            }
            done += n - ccnt[q];
            *inflight -= (n - ccnt[q]).min(*inflight);
            if plan.record_qps > 0 {
                let wrs = (n - ccnt[q]) as u32;
                run.per_qp.push(QpCompletion { qp: q as u32, wrs, ns: now });
            }
            ccnt[q] = n;
            run.completed.push((done, now));
            if plan.rotate && !waiting_turn[q] && scnt[q] < plan.iters {
                turns.push_back(q);
                waiting_turn[q] = true;
            }
        }
        run.last_completion = now;
    }
    Ok(run)
}

/// The posting side of [`bandwidth`]'s loop.
struct Posting {
    /// WRs posted, per QP.
    scnt: Vec<u64>,
    /// WRs completed, per QP.
    ccnt: Vec<u64>,
    /// WRs outstanding over all QPs.
    inflight: u64,
    /// The chain being posted (kept: no allocation per post).
    batch: Vec<SendWr>,
    start: Instant,
    first: bool,
}

impl Posting {
    /// QP `q`'s turn: posts what its window and the cap allow, as one
    /// chain. Returns whether it may have room left after this (the cap cut
    /// its chain, or its ring was full): it wants another turn without
    /// waiting for a completion.
    fn turn(
        &mut self,
        r: &mut impl Requester,
        plan: &BwPlan,
        run: &mut BwRun,
        q: usize,
    ) -> Result<bool, String> {
        let window = (plan.tx_depth - (self.scnt[q] - self.ccnt[q])).min(plan.iters - self.scnt[q]);
        let room = window.min(plan.max_inflight - self.inflight);
        if room == 0 {
            return Ok(false);
        }
        let cut = room < window;
        self.batch.clear();
        for j in 1..=room {
            self.batch.push(r.work_request(q, self.scnt[q] + j, cut && j == room));
        }
        let now = self.start.elapsed().as_nanos() as u64;
        if self.first {
            run.first_post = now;
            self.first = false;
        }
        let posted = match r.qps()[q].post_send(&self.batch) {
            Ok(()) => room,
            // The ring is full until the device catches up.
            Err((i, Error::NoMemory(_))) => i as u64,
            Err((i, e)) => return Err(r.post_error(q, i, self.scnt[q] + i as u64, e)),
        };
        if plan.record_posts {
            run.posted.extend(std::iter::repeat_n(now, posted as usize));
        }
        if let Some(first_post) = run.qp_first_post.get_mut(q) {
            *first_post = (*first_post).min(now);
        }
        self.scnt[q] += posted;
        self.inflight += posted;
        Ok(posted < window)
    }
}
