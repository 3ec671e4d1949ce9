//! Engine speed: simulated packets per second through two HCAs on the
//! lossless simulated fabric (requester, responder and completer work,
//! ICRC on every packet, the fabric's bookkeeping), single thread.
//!
//! `cargo bench -p uroce-tests --bench engine` (`benches/engine.rs`) and
//! `uroce-perf engine` (what `tests/perf/vs-peers.sh` runs) print one line
//! per case: `metric=<name> value=<number> unit=<unit>`. Each case runs twice: as the
//! swarm runs the fabric (the trace digests every packet's bytes,
//! `uroce_sim::packet_digest`) and, suffixed `_nodigest`, with
//! `FabricConfig::trace_packet_digests` off: the engine alone.
//!
//! The clock starts once a tenth of a case's messages have completed
//! (`Warmup`): before that the run pays its start-up (the first touch of
//! every ring, buffer and table, the fabric's packet pool filling), about
//! 0.6–1.7 ms of a 37 ms 8 B run at scale 20 on this machine. At scale 20
//! the rates are the steady state's; at scale 1 (the quick check) the
//! timed part is short, and the WRITE case's is mostly its queue draining.

use crate::world::{cap, tuning, World, ALL_ACCESS};
use std::time::Instant as WallClock;
use uroce_device::types::{QpType, SendFlags, WrOpcode};
use uroce_sim::FabricConfig;
use uroce_verbs::{Mtu, RecvWr, RemoteTarget, SendWr, WcStatus};

fn total_packets(w: &World) -> u64 {
    w.nodes.iter().map(|n| n.hca.borrow().counters().sent_pkts).sum()
}

/// The steady state's clock: it starts when the first tenth of the
/// messages have completed, with the packet count at that moment.
struct Warmup {
    messages: u64,
    started: Option<(WallClock, u64, u64)>,
}

impl Warmup {
    fn new(messages: u64) -> Warmup {
        Warmup { messages: messages / 10, started: None }
    }

    /// Notes progress: `completed` messages so far.
    fn note(&mut self, w: &World, completed: u64) {
        if self.started.is_none() && completed >= self.messages {
            self.started = Some((WallClock::now(), total_packets(w), completed));
        }
    }

    /// Seconds, packets and messages since the clock started.
    fn measured(&self, w: &World, completed: u64) -> (f64, u64, u64) {
        let (start, packets, messages) = self.started.expect("the run passed its warm-up");
        (start.elapsed().as_secs_f64(), total_packets(w) - packets, completed - messages)
    }
}

fn fabric(seed: u64, digests: bool) -> FabricConfig {
    FabricConfig { trace_packet_digests: digests, ..FabricConfig::new(seed) }
}

fn suffix(digests: bool) -> &'static str {
    if digests {
        ""
    } else {
        "_nodigest"
    }
}

fn write_stream(messages: u64, digests: bool) {
    let mut w = World::new(2, fabric(1, digests));
    let a = w.qp(0, QpType::Rc, cap(256, 1, 0));
    let b = w.qp(1, QpType::Rc, cap(256, 1, 0));
    let mut t = tuning();
    t.mtu = Mtu::Mtu4096;
    w.connect(0, &a, 1, &b, &t);
    let len = 64 * 1024u32;
    let mr_a = w.nodes[0].pd.alloc_mr(u64::from(len), ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(u64::from(len), ALL_ACCESS).unwrap();
    // Built once, posted again with new IDs (see `small_sends`).
    let batch = 32u64;
    let mut wrs: Vec<SendWr> = (0..batch)
        .map(|_| {
            let mut wr = SendWr::new(0, WrOpcode::RdmaWrite);
            wr.sg_list = vec![mr_a.sge(0, len)];
            wr.remote = RemoteTarget { addr: mr_b.addr(), rkey: mr_b.rkey() };
            wr.flags = SendFlags::SIGNALED;
            wr
        })
        .collect();
    let mut warmup = Warmup::new(messages);
    let mut posted = 0u64;
    let mut completed = 0u64;
    while completed < messages {
        warmup.note(&w, completed);
        while posted < messages && posted - completed < 128 {
            let n = batch.min(messages - posted) as usize;
            for (i, wr) in wrs.iter_mut().take(n).enumerate() {
                wr.wr_id = posted + i as u64;
            }
            a.post_send(&wrs[..n]).unwrap();
            posted += n as u64;
        }
        for wc in w.wait(0, 64, 1_000_000_000) {
            assert_eq!(wc.status, WcStatus::Success);
            completed += 1;
        }
    }
    let (secs, packets, timed) = warmup.measured(&w, completed);
    let s = suffix(digests);
    println!("metric=engine_write_64k_mtu4096_pps{s} value={:.0} unit=pps", packets as f64 / secs);
    println!(
        "metric=engine_write_64k_mtu4096_goodput{s} value={:.3} unit=GB/s",
        (timed * u64::from(len)) as f64 / secs / 1e9
    );
}

fn small_sends(messages: u64, digests: bool) {
    let mut w = World::new(2, fabric(2, digests));
    let a = w.qp(0, QpType::Rc, cap(512, 1, 64));
    let b = w.qp(1, QpType::Rc, cap(512, 1, 64));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    // The work requests are built once and posted again and again with new
    // IDs, as perftest does: the case measures the engine, not allocation.
    let batch = 32u64;
    let mut recvs: Vec<RecvWr> =
        (0..batch).map(|_| RecvWr { wr_id: 0, sg_list: vec![mr_b.sge(0, 8)] }).collect();
    let mut sends: Vec<SendWr> = (0..batch)
        .map(|_| {
            let mut wr = SendWr::new(0, WrOpcode::Send);
            wr.sg_list = vec![mr_a.sge(0, 8)];
            wr
        })
        .collect();
    let mut warmup = Warmup::new(messages);
    let (mut posted, mut received) = (0u64, 0u64);
    while received < messages {
        warmup.note(&w, received);
        while posted < messages && posted - received < 256 {
            let n = batch.min(messages - posted) as usize;
            for (i, (recv, send)) in recvs.iter_mut().zip(sends.iter_mut()).take(n).enumerate() {
                recv.wr_id = posted + i as u64;
                send.wr_id = posted + i as u64;
                send.flags = if i + 1 == n { SendFlags::SIGNALED } else { SendFlags::EMPTY };
            }
            b.post_recv(&recvs[..n]).unwrap();
            a.post_send(&sends[..n]).unwrap();
            posted += n as u64;
        }
        received += w.wait(1, 64, 1_000_000_000).len() as u64;
        w.nodes[0].cq.poll(64).unwrap();
    }
    let (secs, packets, timed) = warmup.measured(&w, received);
    let s = suffix(digests);
    println!("metric=engine_send_8b_pps{s} value={:.0} unit=pps", packets as f64 / secs);
    println!("metric=engine_send_8b_msg_rate{s} value={:.0} unit=msg/s", timed as f64 / secs);
}

/// Runs the cases `filter` names (all when it is empty: a case runs when
/// its name, `write_digest`, `write_nodigest`, `send_digest` or
/// `send_nodigest`, contains one of the words), `scale` times the quick
/// size (`cargo bench` runs 20).
pub fn run(scale: u64, filter: &[String]) {
    let wanted = |case: &str| filter.is_empty() || filter.iter().any(|f| case.contains(f.as_str()));
    for digests in [true, false] {
        let s = if digests { "digest" } else { "nodigest" };
        if wanted(&format!("write_{s}")) {
            write_stream(200 * scale, digests);
        }
        if wanted(&format!("send_{s}")) {
            small_sends(5_000 * scale, digests);
        }
    }
}
