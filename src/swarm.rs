//! `uroce sim`: a seeded swarm in the spirit of TigerBeetle's VOPR.
//!
//! One seed decides everything: how many nodes and connections, which
//! transport each connection uses (RC, UC, UD), the queue sizes, the
//! workload (a random mix of SEND, SEND with immediate, RDMA WRITE, WRITE
//! with immediate, RDMA READ, FETCH_ADD and COMPARE_SWAP; sizes from 0 to
//! 64 KiB biased to MTU boundaries; chains of up to 8 WRs per post; some
//! unsignaled, some inline, some fenced, spread over several SGEs with
//! gaps), the faults (loss, duplication, reordering, bit corruption), the
//! adversary's rate (see below; off for about a third of the seeds) and
//! the disruptions (off for about 40 % of the seeds): link outages (both
//! ways or one way), partitions (some nodes cut off from the others, or
//! one node isolated) and pauses of a node's application (it stops posting
//! and polling for a while), each started once so many WRs are posted.
//! Flags override the seed's choices. Everything runs in one thread in
//! virtual time, so a run is a pure function of its [`Plan`]: the same
//! seed gives the same fabric trace hash.
//!
//! The disruptions came after the rest, and are drawn after everything
//! else (their schedule from a generator of their own): a seed that draws
//! none of them, or a run with `--outages 0 --partitions 0 --pauses 0`,
//! gives the trace hash it gave before they existed; the others changed.
//!
//! A run may also carry a fault scenario (`--scenario NAME|FILE`, roles
//! with `--role node=R`; [`SwarmConfig::scenario`]): it is attached to the
//! world through [`crate::world::WorldBuilder::scenario`], the path the
//! harness (`uroce-harness`) and the scenario tests take, so each node's
//! port runs it and its device faults reach the HCAs. It draws nothing
//! from the seed (a run without it is the run it always was); its firings
//! are in the report and, as the fabric's `ScenarioFired` events, in the
//! trace hash. For the model it makes the run lossy and accepts
//! RETRY_EXC_ERR: its rules, not the rates, decide what is lost.
//!
//! # The code
//!
//! `plan.rs` resolves the flags and the seed; `run.rs` holds the run's
//! state and drives its phases; `world.rs` builds nodes and connections
//! (on [`crate::world`], the world builder the scenario tests and the
//! fuzzers use too); `workload.rs` posts; `checker.rs` checks every
//! completion, and `checker/audit.rs` the final state, against the model
//! of `model.rs`; `liveness.rs` heals and drains; `disrupt.rs` draws and starts the
//! disruptions; `adversary.rs` is the node on the mirror port
//! (`adversary/watch.rs` judges what lands, `adversary/forge.rs` builds
//! what it sends).
//!
//! # The reference model
//!
//! * **Send queues** — completions come in posting order: one per signaled
//!   WR; unsignaled WRs before a completion completed silently. The first
//!   error completion may only be RETRY_EXC_ERR (RC, and only where the
//!   loss, corruption and reordering rates make eight failed go-back
//!   rounds in a row plausible, see [`Plan::retry_exhaustion_plausible`];
//!   elsewhere it means a stuck requester) or WR_FLUSH_ERR on a QP the
//!   application moved to ERR; after it, every later WR completes with
//!   WR_FLUSH_ERR, one completion each, in order. Opcodes and READ lengths
//!   must match.
//! * **RC receives** — the n-th receive WR takes the n-th SEND / WRITE with
//!   immediate its peer posted: exact length, immediate and data, and no
//!   byte of the buffer (slack, gaps between SGEs) outside the message
//!   changed. Receives complete in posting order; once one is flushed, the
//!   rest are.
//! * **UC and UD receives** — delivery is not promised under faults, but
//!   whatever arrives must be, whole, a message sent to that QP (source
//!   QP and GRH addresses for UD), at most once (twice when the fabric
//!   duplicates), never a UD datagram sent with a wrong Q_Key. On a
//!   fault-free fabric every UC/UD message must arrive exactly once.
//! * **Memory** — each RC/UC QP WRITEs into its own window on its peer.
//!   Over RC the final image is exact; WRITEs that may or may not have run
//!   (the QP failed with them outstanding) and every UC WRITE may each
//!   leave their bytes or not. READs return the (never written) source
//!   bytes. Buffers keep a canary wherever the HCA must not write.
//! * **Atomics** — FETCH_ADD counters shared by many QPs must end at the
//!   initial value plus every addition that ran, each returned value must
//!   fit a sequential history, and each QP's results increase in posting
//!   order. COMPARE_SWAP words (unique swap values) must show one chain of
//!   successful swaps from the initial to the final value, every failed
//!   swap must have seen a value of that chain, and each QP saw it in
//!   order.
//! * **Disruptions** — an outage or a partition is loss: an RC QP whose
//!   path was ever cut may fail with RETRY_EXC_ERR whatever the fault
//!   rates (the cut may outlast its retries; the connection is then
//!   replaced), and a run with one is lossy (UC and UD delivery is not
//!   exact). A paused application posts no receive, so a UC or UD message
//!   sent to its node then may be lost; and since any receive of a UC or
//!   UD QP takes any message, one that arrives all the same may take the
//!   receive of another, which is then lost: a QP may lose as many
//!   messages as it received of those sent while it was paused. Its RC
//!   peers meet RNR NAKs and wait (RNR retries are infinite), and its CQs
//!   fill but never overrun (each CQ has room for every WR of the queues
//!   attached to it).
//! * **Counters** — no CQ overrun, malformed WQE, DMA fault, malformed
//!   packet, host memory fault, unexpected asynchronous event, or packet
//!   above the path MTU.
//! * **Injected packets** — none may change any of the above; each must
//!   be dropped as the HCA must drop it (see below).
//!
//! When an RC QP fails (RETRY_EXC_ERR), the application tears the
//! connection down (it moves the peer to ERR, and both sides flush) and,
//! once both QPs have drained, destroys them and connects a new pair in
//! its place (new QPNs, usually in the old QPs' table slots). With the
//! adversary on, the application also closes a healthy RC connection now
//! and then, the same way.
//! The local ACK timeout follows the ports: 1 to 4 ms on infinitely fast
//! ports, 17 to 67 ms on 100 to 10 Gb/s ports, where go-back-N bursts of
//! many QPs queue for milliseconds (a shorter timeout is congestion
//! collapse, not a fault of the HCA).
//!
//! Two knobs relax the run, for narrowing a failure down:
//! [`SwarmConfig::no_fence`] leaves FENCE out of the workload and
//! [`SwarmConfig::allow_retry_exhaustion`] accepts RETRY_EXC_ERR at any
//! fault rate. Both show in the command that reproduces a run. The CI
//! sweeps run with neither.
//!
//! # Liveness
//!
//! Once every operation is posted the fabric heals (outages and partitions
//! end, paused applications resume); every send WR (and
//! every receive on a live RC connection) must then complete or flush
//! within two seconds of virtual time. At the end every QP goes to ERR and
//! every receive still posted must flush. The adversary does not heal: it
//! keeps injecting until the end.
//!
//! # The adversary
//!
//! A node on the fabric's mirror port
//! ([`Fabric::set_mirror`](uroce_sim::Fabric::set_mirror)) sees every
//! packet delivered, keeps a bounded seeded sample of the intact RC
//! requests and responses (recent ones and a reservoir over the whole
//! run), and for each delivered packet, with the plan's probability
//! (`--adversary`, 0 = no adversary node), sends one packet of its own a
//! moment to 30 ms later, with a valid ICRC, the real peer's source
//! address and a QPN it saw: a verbatim replay of a captured request or
//! response; a captured response rewritten, at a PSN behind the
//! requester's window (the PSN it last saw acknowledged or the one just
//! behind the window, then a few back or up to 2^22 - 1 back), into an
//! ACK, a PSN sequence NAK, an RNR NAK (timer code 0, 655 ms, included),
//! an invalid request, remote access or remote operational error NAK, a
//! READ response with garbage payload or an atomic ACK with a garbage
//! original value; or a captured SEND, WRITE, READ or atomic request with
//! its PSN moved behind the responder's expected PSN. Packets for a QPN
//! whose QP was destroyed or failed are orphans.
//!
//! Only RC: UC and UD have no replay protection in the IBA (a replayed UC
//! FIRST/ONLY or UD datagram is legitimately delivered again; rxe does the
//! same), so the model could not tell a bug from the protocol there.
//!
//! What the model expects of them, besides no effect on completions,
//! data, memory or atomics:
//!
//! * a stale response is dropped as `rcvd_ghost_response` before its
//!   syndrome or payload is looked at (no sequence or RNR NAK counted, no
//!   go-back, no RNR wait, no completion);
//! * a stale request is a `duplicate_request`, answered from the
//!   responder's state and never executed again (a duplicate READ is read
//!   again from memory, an atomic answered from its saved result);
//! * an orphan finds no QP (`rcvd_unknown_qp`), even when a new QP holds
//!   the old one's table slot;
//! * a verbatim replay may do what a network duplicate may. Its PSN may
//!   happen to be inside the window again (a READ response the requester
//!   dropped as out of order, an RNR NAK while the QP still waits at that
//!   PSN, a request whose original the responder has not received yet):
//!   that is protocol-inherent, the packet is the original, and it may
//!   cost a go-back or an RNR wait, never a byte or a completion.
//!
//! "Stale" is decided against the target QP's real state when the packet
//! is built: a response's PSN outside `[comp.psn, req.next_psn)`, a
//! request's before the expected PSN. Both edges only move forward and
//! the distance stays below 2^22, so a stale packet is still stale when it
//! lands. The fabric hands the mirror port each packet right after the
//! receiver took it, so the adversary checks each of its packets one by
//! one against the receiver's counters; it also checks that every
//! delivered packet, real or not, was counted once (`rcvd_pkts` or one
//! drop reason). Whatever fails is a mismatch.

mod adversary;
mod arena;
mod checker;
mod disrupt;
mod liveness;
mod model;
mod plan;
mod run;
mod workload;
pub use run::{Steps, MAX_TRACED_STEPS};
mod world;

pub use adversary::{AdversaryStats, Kind as AdversaryKind, KINDS as ADVERSARY_KINDS};
pub use plan::{
    fraction, load_scenario, parse_fraction, parse_mtu, parse_role, Plan, SwarmConfig,
    SwarmScenario, DEFAULT_OPS, MAX_DISRUPTIONS, MAX_NODES, MAX_OPS, MAX_QPS,
};

use std::io::Write;
use uroce_hca::Instant;
use uroce_sim::FabricCounters;

/// Mismatches kept in the report's log (all are counted).
const MAX_LOG: usize = 40;

/// What the run counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Send WRs posted.
    pub posted: u64,
    /// Posted, by operation: SEND, SEND with immediate, WRITE, WRITE with
    /// immediate, READ, FETCH_ADD, COMPARE_SWAP.
    pub posted_by_op: [u64; 7],
    /// Send WRs that completed successfully (signaled or not).
    pub completed: u64,
    /// Send WRs that failed with RETRY_EXC_ERR.
    pub retry_exc: u64,
    /// Send WRs flushed.
    pub flushed: u64,
    /// Receives that completed successfully.
    pub recv_ok: u64,
    /// Receives flushed.
    pub recv_flushed: u64,
    /// RC connections lost (a QP failed and the connection was torn down).
    pub rc_lost: u64,
    /// Lost RC connections replaced by a new pair of QPs.
    pub rc_replaced: u64,
    /// RC connections the application closed on purpose (with the
    /// adversary on); they are replaced too.
    pub rc_closed: u64,
    /// RC receives posted late on purpose (to provoke RNR NAKs).
    pub late_recvs: u64,
    /// UC messages sent (SEND, WRITE with immediate).
    pub uc_sent: u64,
    /// UC messages delivered.
    pub uc_delivered: u64,
    /// UD datagrams sent.
    pub ud_sent: u64,
    /// UD datagrams delivered.
    pub ud_delivered: u64,
    /// UC/UD deliveries of a message already delivered once.
    pub dup_delivered: u64,
    /// Link outages started (both ways or one way).
    pub outages: u64,
    /// Partitions started (isolations included).
    pub partitions: u64,
    /// Application pauses started.
    pub pauses: u64,
}

#[derive(Debug, Default)]
struct Log {
    mismatches: u64,
    mismatch_log: Vec<String>,
    liveness_log: Vec<String>,
}

impl Log {
    fn mismatch(&mut self, text: String) {
        self.mismatches += 1;
        if self.mismatch_log.len() < MAX_LOG {
            self.mismatch_log.push(text);
        }
    }

    fn liveness(&mut self, text: String) {
        if self.liveness_log.len() < MAX_LOG {
            self.liveness_log.push(text);
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct SwarmReport {
    /// What ran.
    pub plan: Plan,
    /// Connections by transport: RC, UC, UD.
    pub connections: [u32; 3],
    /// Counts.
    pub stats: Stats,
    /// Model mismatches (every one counted).
    pub mismatches: u64,
    /// The first mismatches, spelled out.
    pub mismatch_log: Vec<String>,
    /// Liveness failures, spelled out; empty when liveness held.
    pub liveness_log: Vec<String>,
    /// Requester go-back-N restarts over all HCAs (the HCA counter
    /// `completer_retry_err`: after a retransmit timeout, a PSN sequence
    /// NAK, an RNR NAK or an implied NAK).
    pub retransmits: u64,
    /// The fabric's trace hash.
    pub trace_hash: u64,
    /// The HCAs' decisions, when the run was traced.
    pub steps: Option<Steps>,
    /// When the faults healed (virtual time).
    pub healed_at: Instant,
    /// When every WR had finished, if it did.
    pub done_at: Option<Instant>,
    /// When the run ended.
    pub ended_at: Instant,
    /// The fabric's counters.
    pub fabric: FabricCounters,
    /// The HCAs' counters, summed, by name.
    pub hca: Vec<(&'static str, u64)>,
    /// What the adversary did (all zero when it did not run).
    pub adversary: AdversaryStats,
    /// The fault scenario's name, when the run had one.
    pub scenario: Option<String>,
    /// The scenario's firings in order, `node<n>: <Firing>` (as the
    /// harness's `Report::firings`); at most the fabric's `MAX_FIRINGS`.
    pub firings: Vec<String>,
    /// Firings past that bound (counted, not kept).
    pub firings_lost: u64,
}

impl SwarmReport {
    /// An HCA counter summed over the nodes (0 if there is no such
    /// counter).
    pub fn counter(&self, name: &str) -> u64 {
        self.hca.iter().find(|(n, _)| *n == name).map_or(0, |c| c.1)
    }

    /// Whether liveness held.
    pub fn liveness_ok(&self) -> bool {
        self.liveness_log.is_empty()
    }

    /// Nothing mismatched and liveness held.
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && self.liveness_ok()
    }

    /// The scenario's firings, kept and lost.
    pub fn fired(&self) -> u64 {
        self.firings.len() as u64 + self.firings_lost
    }

    /// The last line `uroce sim` prints (with ` scenario=NAME firings=N`
    /// at the end when the run had a scenario).
    pub fn last_line(&self) -> String {
        let mut line = format!(
            "seed={} ops={} completed={} mismatches={} retransmits={} trace_hash={:016x} \
             adversary={}",
            self.plan.seed,
            self.stats.posted,
            self.stats.completed,
            self.mismatches,
            self.retransmits,
            self.trace_hash,
            self.adversary.injected
        );
        if let Some(name) = &self.scenario {
            line.push_str(&format!(" scenario={name} firings={}", self.fired()));
        }
        line
    }

    /// The command that reproduces the run.
    pub fn reproduce(&self) -> String {
        self.plan.command_line()
    }

    /// Writes the summary, the failures (with the command that reproduces
    /// them) and the last line.
    pub fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let s = &self.stats;
        let [rc, uc, ud] = self.connections;
        writeln!(out, "connections: {rc} RC (replacements included), {uc} UC, {ud} UD")?;
        let by_op = s.posted_by_op;
        writeln!(
            out,
            "posted: {} WRs (send {}, send+imm {}, write {}, write+imm {}, read {}, fetch_add {}, \
             cmp_swap {})",
            s.posted, by_op[0], by_op[1], by_op[2], by_op[3], by_op[4], by_op[5], by_op[6]
        )?;
        writeln!(
            out,
            "send WRs: {} completed, {} RETRY_EXC_ERR, {} flushed; receives: {} completed, {} \
             flushed; RC connections lost: {}, closed: {} (replaced {})",
            s.completed,
            s.retry_exc,
            s.flushed,
            s.recv_ok,
            s.recv_flushed,
            s.rc_lost,
            s.rc_closed,
            s.rc_replaced
        )?;
        writeln!(
            out,
            "unreliable: UC {}/{} delivered, UD {}/{} delivered, {} duplicate deliveries; {} \
             late RC receives",
            s.uc_delivered, s.uc_sent, s.ud_delivered, s.ud_sent, s.dup_delivered, s.late_recvs
        )?;
        let f = &self.fabric;
        writeln!(
            out,
            "fabric: {} sent, {} delivered, {} lost, {} duplicated, {} reordered, {} corrupted; \
             HCAs: {} ICRC errors, {} duplicate requests, {} go-backs, {} sequence NAKs, {} RNR \
             NAKs",
            f.sent,
            f.delivered,
            f.dropped_loss,
            f.duplicated,
            f.delayed_reorder,
            f.corrupted,
            self.counter("rcvd_icrc_err"),
            self.counter("duplicate_request"),
            self.counter("completer_retry_err"),
            self.counter("rcvd_seq_err"),
            self.counter("rcvd_rnr_err")
        )?;
        if s.outages + s.partitions + s.pauses > 0 {
            writeln!(
                out,
                "disruptions: {} link outages, {} partitions, {} application pauses started \
                 (of {}, {}, {} planned); {} packets cut",
                s.outages,
                s.partitions,
                s.pauses,
                self.plan.outages,
                self.plan.partitions,
                self.plan.pauses,
                self.fabric.dropped_partition
            )?;
        }
        let a = &self.adversary;
        if a.injected > 0 || !self.plan.adversary.is_never() {
            let kinds: Vec<String> = ADVERSARY_KINDS
                .iter()
                .filter(|&&k| a.kind(k) > 0)
                .map(|&k| format!("{} {}", a.kind(k), k.name()))
                .collect();
            writeln!(
                out,
                "adversary: {} injected ({}); landed as {} ghost responses, {} duplicate \
                 requests, {} for no QP, {} taken (replays inside the window), {} corrupted; {} \
                 orphans ({} to a reused slot), {} picks moved behind the window, {} skipped, {} \
                 violations",
                a.injected,
                kinds.join(", "),
                a.ghost,
                a.duplicate,
                a.unknown_qp,
                a.accepted,
                a.corrupted,
                a.orphans,
                a.orphans_slot_reused,
                a.in_window_avoided,
                a.skipped,
                a.violations
            )?;
        }
        if let Some(name) = &self.scenario {
            writeln!(
                out,
                "scenario: {name}, {} firings; fabric: {} dropped, {} delayed, {} held by it, {} \
                 device faults",
                self.fired(),
                self.fabric.dropped_scenario,
                self.fabric.delayed_scenario,
                self.fabric.held_scenario,
                self.fabric.device_faults
            )?;
            for line in self.firings.iter().take(MAX_LOG) {
                writeln!(out, "fired: {line}")?;
            }
            if self.fired() > MAX_LOG as u64 {
                writeln!(out, "fired: ... {} in all", self.fired())?;
            }
        }
        let nonzero: Vec<String> =
            self.hca.iter().filter(|c| c.1 > 0).map(|(n, v)| format!("{n}={v}")).collect();
        writeln!(out, "HCA counters: {}", nonzero.join(" "))?;
        let done = self.done_at.map_or_else(|| "never".to_string(), |t| t.to_string());
        writeln!(
            out,
            "time: faults healed at {}, every WR done at {}, end at {} (virtual)",
            self.healed_at, done, self.ended_at
        )?;
        for line in &self.mismatch_log {
            writeln!(out, "MISMATCH: {line}")?;
        }
        if self.mismatches > self.mismatch_log.len() as u64 {
            writeln!(out, "MISMATCH: ... {} in all", self.mismatches)?;
        }
        for line in &self.liveness_log {
            writeln!(out, "LIVENESS: {line}")?;
        }
        if self.passed() {
            writeln!(out, "ok: the model agrees and liveness held")?;
        } else {
            writeln!(out, "FAILED; reproduce: {}", self.reproduce())?;
        }
        writeln!(out, "{}", self.last_line())
    }
}

/// The plan's first line: what the run is.
pub fn describe(plan: &Plan) -> String {
    let rate = plan
        .port_rate_bits_per_sec
        .map_or_else(|| "unlimited".to_string(), |r| format!("{} Gb/s", r / 1_000_000_000));
    let mut knobs = String::new();
    if !plan.fence {
        knobs.push_str(" no-fence");
    }
    if plan.allow_retry_exhaustion {
        knobs.push_str(" allow-retry-exhaustion");
    }
    format!(
        "uroce sim: seed={} ops={} qps={} nodes={} mtu={} loss={} dup={} reorder={} corrupt={} \
         adversary={} outages={} partitions={} pauses={}{knobs} (latency {} ns, ports {rate}, \
         reorder delay up to {} ns)",
        plan.seed,
        plan.ops,
        plan.qps,
        plan.nodes,
        plan.mtu.bytes(),
        fraction(plan.loss),
        fraction(plan.dup),
        fraction(plan.reorder),
        fraction(plan.corrupt),
        fraction(plan.adversary),
        plan.outages,
        plan.partitions,
        plan.pauses,
        plan.latency_ns,
        plan.reorder_max_delay_ns
    ) + &plan.scenario.as_ref().map_or_else(String::new, |s| {
        let roles: Vec<String> = s.roles.iter().map(|(n, r)| format!(" node{n}={r}")).collect();
        format!(" scenario={}{}", s.scenario.name, roles.concat())
    })
}

/// Runs a swarm.
pub fn run(config: &SwarmConfig) -> SwarmReport {
    run_plan(Plan::resolve(config))
}

/// Runs a resolved plan.
pub fn run_plan(plan: Plan) -> SwarmReport {
    run_plan_with(plan, false)
}

/// Runs a resolved plan; with `trace`, the report keeps every HCA's
/// decisions ([`SwarmReport::steps`]). Tracing changes nothing the run
/// does (the same trace hash).
pub fn run_plan_with(plan: Plan, trace: bool) -> SwarmReport {
    let mut sim = run::Sim::new(plan);
    if trace {
        sim.trace();
    }
    sim.workload();
    sim.liveness();
    sim.finish();
    sim.report()
}
