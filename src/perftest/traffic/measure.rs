//! The measurement: perftest's traffic for each size (the SEND server's
//! receives, the client's operations through the bandwidth engine) and
//! every check of what arrived, what came back and what the target's
//! memory holds after it.

use super::*;
use std::time::Duration;

/// How long a UC WRITE target waits for the client's last packets before
/// checking what it holds (`--check`).
const UC_LANDING_WAIT: Duration = Duration::from_secs(2);

impl Traffic for Rdma {
    fn my_dests(&self) -> Vec<Dest> {
        (0..self.qps.len())
            .map(|i| Dest {
                lid: 0,
                out_reads: self.out_reads,
                qpn: self.qps[i].qpn().value(),
                psn: self.psns[i],
                rkey: self.mr.rkey().0,
                vaddr: self.mr.addr() + self.region(i),
                gid: self.gid,
                srqn: 0,
            })
            .collect()
    }

    fn connect(&mut self, peers: &[Dest]) -> Result<(), String> {
        for (i, peer) in peers.iter().enumerate() {
            self.bring_up(i, peer)?;
            if self.plan.connection == Connection::Ud && self.role == Role::Client {
                let ah = self
                    .node
                    .pd
                    .create_ah(self.ah_attr(peer))
                    .map_err(|e| format!("Failed to create AH for UD: {e}"))?;
                self.ahs.push(ah);
            }
        }
        self.peers = peers.to_vec();
        Ok(())
    }

    fn post_receives(&mut self, size: u32) -> Result<(), String> {
        let first = u64::from(self.plan.rx_depth.min(self.plan.iters));
        for q in 0..self.qps.len() {
            self.rx_posted[q] = 0;
            self.rx_taken[q] = 0;
            self.post_more_receives(q, size, first)?;
        }
        Ok(())
    }

    fn receive(&mut self, size: u32) -> Result<Measured, String> {
        let iters = u64::from(self.plan.iters);
        let total = iters * self.qps.len() as u64;
        let ud = self.plan.connection == Connection::Ud;
        let expected_len = size + if ud { GRH_LEN as u32 } else { 0 };
        let mut taken = 0u64;
        let mut first_at: Option<Instant> = None;
        let mut last_at = Instant::now();
        let mut last_progress = Instant::now();
        while taken < total {
            let wcs = self.poll()?;
            if wcs.is_empty() {
                self.stalled(
                    last_progress,
                    &format!("receiving ({taken} of {total} messages came)"),
                )?;
                continue;
            }
            last_progress = Instant::now();
            // perftest's clock starts at the first arrival and stops after
            // the last one is handled.
            first_at.get_or_insert(last_progress);
            let mut refill = vec![0u64; self.qps.len()];
            for wc in &wcs {
                let q = (wc.wr_id >> 32) as usize;
                let j = wc.wr_id & 0xffff_ffff;
                if q >= self.qps.len() || j != self.rx_taken[q] || wc.opcode != WcOpcode::Recv {
                    return Err(format!(
                        "unexpected completion: wr_id {:#x}, opcode {:?} (QP #{q} expected \
                         receive #{})",
                        wc.wr_id,
                        wc.opcode,
                        self.rx_taken.get(q).copied().unwrap_or(0)
                    ));
                }
                if wc.byte_len != expected_len {
                    return Err(format!(
                        "message #{j} on QP #{q} has {} bytes; {expected_len} were expected \
                         (both sides need the same -s)",
                        wc.byte_len
                    ));
                }
                if ud && wc.src_qp.value() != self.peers[q].qpn {
                    return Err(format!(
                        "message #{j} on QP #{q} came from QPN {:#x}, not the peer's {:#x}",
                        wc.src_qp.value(),
                        self.peers[q].qpn
                    ));
                }
                if self.plan.check {
                    let at = self.receive_offset(q, size, j) + if ud { GRH_LEN } else { 0 };
                    let source = self.layout.offset(u64::from(size), j);
                    self.check_data(
                        &format!("message #{j} on QP #{q}"),
                        at,
                        source,
                        size as usize,
                    )?;
                }
                self.rx_taken[q] += 1;
                taken += 1;
                if self.rx_posted[q] < iters {
                    refill[q] += 1;
                }
            }
            for (q, &more) in refill.iter().enumerate() {
                self.post_more_receives(q, size, more)?;
            }
            last_at = Instant::now();
        }
        let elapsed = first_at.map_or(0, |first| last_at.duration_since(first).as_nanos() as u64);
        Ok(Measured { size, iters: total, elapsed_ns: elapsed, ..Measured::default() })
    }

    fn send(&mut self, size: u32) -> Result<Measured, String> {
        let nq = self.qps.len();
        let iters = u64::from(self.plan.iters);
        let total = nq as u64 * iters;
        let record = self.plan.peak && total <= PEAK_LIMIT;
        let atomic_slots = (self.layout.cycle_buffer / self.layout.inc(8)).max(1) as usize;
        let plan = BwPlan {
            iters,
            tx_depth: u64::from(self.plan.tx_depth),
            max_inflight: u64::MAX,
            rotate: false,
            record_posts: record,
            record_qps: 0,
        };
        let mut sender = Sender {
            rdma: self,
            size,
            expected: self.expected_opcode(),
            last_atomic: vec![vec![None; atomic_slots]; nq],
        };
        let run = engine::bandwidth(&mut sender, &plan)?;
        let mut m = Measured {
            size,
            iters: total,
            elapsed_ns: run.last_completion,
            posted_ns: run.posted,
            completed_ns: run.completed,
        };
        if self.plan.check && self.plan.verb == Verb::Read {
            for q in 0..nq {
                for k in 0..iters.min(self.layout.slots(u64::from(size))) {
                    let offset = self.layout.offset(u64::from(size), k);
                    let what = format!("READ #{k} of QP #{q}");
                    self.check_data(&what, self.region(q) + offset, offset, size as usize)?;
                }
            }
        }
        if !record {
            m.completed_ns.clear();
        }
        Ok(m)
    }

    fn check_target(&mut self, report: &BwReport) -> Result<(), String> {
        let size = report.size;
        let per_qp = report.iters / self.qps.len() as u64;
        for q in 0..self.qps.len() {
            match self.plan.verb {
                Verb::Atomic => self.check_atomic_target(q, per_qp)?,
                Verb::Write if self.plan.check => {
                    let check = || {
                        for k in 0..per_qp.min(self.layout.slots(size)) {
                            let offset = self.layout.offset(size, k);
                            let what = format!("WRITE #{k} of QP #{q}");
                            self.check_data(&what, self.region(q) + offset, offset, size as usize)?;
                        }
                        Ok::<(), String>(())
                    };
                    // An RC client's last completion means its WRITEs were
                    // acknowledged, so they are here. A UC client's means
                    // only that they were sent: its last packets may still
                    // be on their way (the report crosses TCP, which can be
                    // quicker), so a UC check waits for them a while; a
                    // WRITE that never lands still fails it.
                    let deadline = Instant::now() + UC_LANDING_WAIT;
                    let mut result = check();
                    while result.is_err()
                        && self.plan.connection == Connection::Uc
                        && Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(10));
                        result = check();
                    }
                    result?;
                }
                Verb::Read if self.plan.check => {
                    // READs leave the buffer as it was.
                    let image = pattern(SERVER_SEED, 0, self.region_len as usize);
                    let now = self
                        .mr
                        .read_vec(self.region(q), self.region_len as usize)
                        .map_err(|e| format!("reading the buffer: {e}"))?;
                    if now != image {
                        return Err(format!("QP #{q}'s buffer changed under READs"));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The client's side of the bandwidth engine: perftest's work requests,
/// and every completion checked (opcode, length, atomic results).
struct Sender<'a> {
    rdma: &'a Rdma,
    size: u32,
    expected: WcOpcode,
    /// Per QP, the last result seen at each atomic address slot.
    last_atomic: Vec<Vec<Option<u64>>>,
}

impl Requester for Sender<'_> {
    fn qps(&self) -> &[Qp] {
        &self.rdma.qps
    }

    fn work_request(&mut self, q: usize, n: u64, _close: bool) -> SendWr {
        self.rdma.work_request(q, self.size, n - 1)
    }

    fn post_error(&self, q: usize, _i: usize, scnt: u64, e: Error) -> String {
        format!("Couldn't post send: QP #{q} scnt={scnt}: {e}")
    }

    fn poll(&mut self) -> Result<Vec<WorkCompletion>, String> {
        self.rdma.poll()
    }

    fn stalled(&self, since: Instant, done: u64, total: u64) -> Result<(), String> {
        self.rdma.stalled(since, &format!("waiting for completions ({done} of {total})"))
    }

    fn completed(
        &mut self,
        wc: &WorkCompletion,
        q: usize,
        prev: u64,
        n: u64,
        known: bool,
    ) -> Result<(), String> {
        if !known || wc.opcode != self.expected {
            return Err(format!(
                "unexpected completion: wr_id {:#x}, opcode {:?}",
                wc.wr_id, wc.opcode
            ));
        }
        let want_len = match self.rdma.plan.verb {
            Verb::Read => self.size,
            Verb::Atomic => 8,
            Verb::Send | Verb::Write => wc.byte_len,
        };
        if wc.byte_len != want_len {
            return Err(format!(
                "operation #{n} of QP #{q} completed with {} bytes, not {want_len}",
                wc.byte_len
            ));
        }
        if self.rdma.plan.verb == Verb::Atomic {
            self.rdma.check_atomics(q, prev, n, &mut self.last_atomic[q])?;
        }
        Ok(())
    }
}

impl Rdma {
    /// Where the SEND server's `j`-th receive of a size points: the slot
    /// the client's `j`-th message comes from. A UD receive starts a cache
    /// line minus the GRH in, so that the payload starts a cache line in
    /// (as perftest's), and its slots are a cache line further apart than
    /// perftest's, so that one message's GRH never lands on the previous
    /// one's payload (which perftest, not looking at the data, allows).
    fn receive_offset(&self, q: usize, size: u32, j: u64) -> u64 {
        let size = u64::from(size);
        let slot = j % self.layout.slots(size);
        if self.plan.connection == Connection::Ud {
            let stride = (self.layout.inc(size) + self.layout.cache_line)
                .next_multiple_of(self.layout.cache_line);
            self.region(q) + self.layout.cache_line - GRH_LEN + slot * stride
        } else {
            self.region(q) + slot * self.layout.inc(size)
        }
    }

    fn post_more_receives(&mut self, q: usize, size: u32, count: u64) -> Result<(), String> {
        if count == 0 {
            return Ok(());
        }
        let grh = if self.plan.connection == Connection::Ud { GRH_LEN as u32 } else { 0 };
        let first = self.rx_posted[q];
        let wrs: Vec<RecvWr> = (first..first + count)
            .map(|j| RecvWr {
                wr_id: ((q as u64) << 32) | j,
                sg_list: vec![self.mr.sge(self.receive_offset(q, size, j), size + grh)],
            })
            .collect();
        self.qps[q].post_recv(&wrs).map_err(|(i, e)| {
            format!("Couldn't post recv Qp={q} rcnt={}: {e}", first + i as u64)
        })?;
        self.rx_posted[q] += count;
        Ok(())
    }

    /// The atomic server's memory after `per_qp` operations of QP `q`:
    /// every slot was hit `per_qp / slots` or one more times (perftest
    /// cycles the address); FETCH_AND_ADD added 1 each time, CMP_AND_SWAP
    /// of 0 with 0 changed nothing.
    fn check_atomic_target(&self, q: usize, per_qp: u64) -> Result<(), String> {
        let step = self.layout.inc(8);
        let slots = (self.layout.cycle_buffer / step).max(1);
        for s in 0..slots {
            let hits = per_qp / slots + u64::from(s < per_qp % slots);
            let initial =
                u64::from_le_bytes(pattern(SERVER_SEED, s * step, 8).try_into().expect("8 bytes"));
            let expected = match self.plan.atomic {
                AtomicType::FetchAndAdd => initial.wrapping_add(hits * ATOMIC_ADD),
                AtomicType::CmpAndSwap if initial == ATOMIC_COMPARE && hits > 0 => ATOMIC_SWAP,
                AtomicType::CmpAndSwap => initial,
            };
            let mut now = [0u8; 8];
            self.mr
                .read(self.region(q) + s * step, &mut now)
                .map_err(|e| format!("reading the buffer: {e}"))?;
            let now = u64::from_le_bytes(now);
            if now != expected {
                return Err(format!(
                    "QP #{q}'s word at offset {} is {now:#x} after {hits} atomics; {expected:#x} \
                     was expected (from {initial:#x})",
                    s * step
                ));
            }
        }
        Ok(())
    }
}
