//! The final checks, once every QP went to ERR and every receive flushed:
//! the windows' images, the READ sources, the atomic words and the filler
//! between them, the deliveries of UC and UD messages, the HCAs' and the
//! fabric's counters, and what the adversary found.

use super::*;

impl Sim {
    pub(in crate::swarm) fn check_memory(&mut self) {
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

    pub(in crate::swarm) fn check_deliveries(&mut self) {
        // A message sent to a paused node (`may_lose`) that arrives all the
        // same takes a receive: any receive of a UC or UD QP takes any
        // message, so it may be one posted for another message, which then
        // finds none. A QP may lose as many of the messages that had to
        // arrive as it received of those that need not have.
        let mut taken = vec![0u32; self.sides.len()];
        for msg in self.msgs.iter().filter(|m| m.may_lose && m.deliverable) {
            taken[msg.dest] += msg.deliveries;
        }
        for (id, msg) in self.msgs.iter().enumerate() {
            let ty = self.sides[msg.dest].ty;
            match ty {
                QpType::Ud => self.stats.ud_sent += 1,
                QpType::Uc => self.stats.uc_sent += 1,
                QpType::Rc => {}
            }
            // On a fault-free fabric, with a receive reserved for each,
            // UC and UD lose nothing.
            // (Unless it went to a paused node.)
            let exact = ty != QpType::Rc && !self.plan.lossy() && !msg.may_lose;
            if exact && msg.deliverable && msg.deliveries == 0 && taken[msg.dest] > 0 {
                taken[msg.dest] -= 1;
                continue;
            }
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

    pub(in crate::swarm) fn check_counters(&mut self) {
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

    /// What the adversary found: injected packets an HCA did not drop as
    /// it must, and packets counted other than exactly once.
    pub(in crate::swarm) fn check_adversary(&mut self) {
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
}
