//! Liveness: once every operation is posted the fabric heals and every
//! WR must complete or flush in bounded virtual time; then every QP goes
//! to ERR, leftover receives must flush, and the final checks run.

use super::run::*;
use uroce_hca::Instant;
use uroce_verbs::{connect, QpType};

impl Sim {
    /// Heals the fabric and runs until every WR has completed or flushed.
    pub(super) fn liveness(&mut self) {
        self.fabric.heal();
        self.resume_all();
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

    pub(super) fn all_done(&self) -> bool {
        self.sides.iter().all(|s| {
            s.sq.is_empty()
                && (s.ty != QpType::Rc || s.dead() || (s.rq.is_empty() && s.pending.is_empty()))
        })
    }

    pub(super) fn report_stuck(&mut self) {
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
    pub(super) fn finish(&mut self) {
        let until = self.now().plus_nanos(100_000_000);
        self.fabric.run_until_idle(until);
        self.collect_steps();
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
}
