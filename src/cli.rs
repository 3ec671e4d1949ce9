//! Command-line parsing: one subcommand per job.

use crate::decode::{self, Format};
use crate::swarm::{self, SwarmConfig};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use uroce_sim::Probability;
use uroce_verbs::Mtu;

/// uroce: a software RoCEv2 RDMA NIC in user space.
#[derive(Debug, Parser)]
#[command(name = "uroce", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Two devices (127.0.0.1 and 127.0.0.2) in this process run every
    /// operation type over real UDP and print what happened, step by step.
    Demo(crate::demo::DemoArgs),
    /// Show the device's attributes, shaped like `ibv_devinfo -v`.
    Devinfo(crate::devinfo::DevinfoArgs),
    /// `ibv_rc_pingpong` (and `--ud`/`--uc`): same flags, same out-of-band
    /// TCP exchange, same summary lines.
    Pingpong(crate::pingpong::PingpongArgs),
    /// perftest-style benchmarks: `uroce bench {send|write|read|atomic}
    /// {bw|lat}`; server without a host, client with one, or both ends in
    /// this process with `--loopback`.
    Bench(crate::bench::BenchArgs),
    /// rxe-opcodes (tests/interop/vm): the opcodes and cases the stock tools never send, data checked end to end, against uroce or rxe in either role.
    Opcodes(crate::opcodes::OpcodesArgs),
    /// A peer of perftest's ib_{send,write,read,atomic}_bw: its flags, its out-of-band exchange, its table.
    Perftest(crate::perftest::PerftestArgs),
    /// Run an unmodified verbs program (`ibv_devinfo`, `ibv_rc_pingpong`,
    /// perftest...) on a uroce device: `uroce run [flags] -- PROGRAM
    /// ARGS...` loads uroce's libibverbs.so.1 into it. With `--scenario`
    /// the program runs under a fault scenario, a summary follows it, and
    /// `--check` compares it with the scenario's `[expect]`.
    Run(crate::run::RunArgs),
    /// The fault scenarios shipped with uroce: `uroce scenarios` lists
    /// them (marking roles and params), `uroce scenarios NAME` prints one
    /// (its rules, what a correct program observes, how to run it),
    /// `uroce scenarios --check FILE|NAME...` validates scenarios as `uroce
    /// run --scenario` does (a malformed file: its file, line and column).
    Scenarios(crate::scenarios::ScenariosArgs),
    /// Decode a RoCEv2 capture (pcap or pcapng): one line per frame.
    ///
    /// Every UDP datagram to port 4791 is read as RoCEv2: its transport
    /// headers are checked against the opcode table and its ICRC is
    /// recomputed. Exit status: 0 when every RoCEv2 frame is well formed
    /// with a good ICRC, 1 otherwise, 2 when the file cannot be read.
    Decode {
        /// The capture file.
        file: PathBuf,
        /// `text`: a line a person reads, with every extension header.
        /// `tsv`: exactly one tab-separated line per RoCEv2 frame (frame,
        /// src, dst, opcode, name, dqpn, psn, ackreq, paylen, icrc), then a
        /// `# frames=... roce=... icrc_ok=... icrc_bad=... malformed=...`
        /// line.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Run a seeded swarm: random RC, UC and UD traffic over a faulty
    /// simulated fabric, checked against a reference model.
    ///
    /// The seed chooses the nodes, the connections and their transports,
    /// queue sizes, the workload (every operation, sizes from 0 to 64 KiB
    /// around MTU boundaries, chained posts, unsignaled and inline WRs) and
    /// the faults; the flags override its choices. A reference model checks
    /// completions (order, status, opcode, length, immediates), received
    /// data, remote memory images, READ results and atomic histories. Then
    /// the faults heal and every WR must complete or flush within 2 s of
    /// virtual time.
    ///
    /// The seed also decides whether an adversary runs, and at what rate
    /// (`--adversary`): a node on the fabric's mirror port that replays
    /// captured RC packets and injects stale responses and duplicate
    /// requests, which must change no completion and no byte. And it draws
    /// link outages, partitions and pauses of a node's application
    /// (`--outages`, `--partitions`, `--pauses`) while the workload runs.
    ///
    /// The last line printed is `seed=<n> ops=<n> completed=<n>
    /// mismatches=<n> retransmits=<n> trace_hash=<hex> adversary=<n>`: ops
    /// are the send WRs posted, completed those that completed
    /// successfully, retransmits the requesters' go-back-N restarts summed
    /// over the HCAs (the counter completer_retry_err: after a retransmit
    /// timeout, a PSN sequence NAK, an RNR NAK or an implied NAK),
    /// trace_hash the fabric's trace hash (the same for the same flags),
    /// adversary the packets the adversary injected; with --scenario it
    /// ends with ` scenario=<name> firings=<n>`, and the report lists the
    /// firings (`fired: node<n>: ...`). Exit status: 0 when
    /// nothing mismatched and liveness held, 1 otherwise (with the command
    /// that reproduces the run), 2 on bad flags.
    Sim {
        /// The seed (random, and printed, when absent).
        #[arg(long)]
        seed: Option<u64>,
        /// Send work requests to post.
        #[arg(long, default_value_t = swarm::DEFAULT_OPS,
              value_parser = clap::value_parser!(u64).range(0..=swarm::MAX_OPS))]
        ops: u64,
        /// Connections (each a pair of QPs: RC, UC or UD).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=swarm::MAX_QPS as i64))]
        qps: Option<u32>,
        /// Nodes (HCAs) on the fabric.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=swarm::MAX_NODES as i64))]
        nodes: Option<u32>,
        /// Packet loss, as a fraction (0.3 = 30%).
        #[arg(long, value_parser = swarm::parse_fraction)]
        loss: Option<Probability>,
        /// Packet duplication, as a fraction.
        #[arg(long, value_parser = swarm::parse_fraction)]
        dup: Option<Probability>,
        /// Packet reordering (an extra delay), as a fraction.
        #[arg(long, value_parser = swarm::parse_fraction)]
        reorder: Option<Probability>,
        /// Bit corruption (caught by the ICRC), as a fraction.
        #[arg(long, value_parser = swarm::parse_fraction)]
        corrupt: Option<Probability>,
        /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
        #[arg(long, value_parser = swarm::parse_mtu)]
        mtu: Option<Mtu>,
        /// Leave FENCE out of the workload (the seed's other choices stay
        /// the same), to tell a fault apart from an ordering effect.
        #[arg(long)]
        no_fence: bool,
        /// Accept RETRY_EXC_ERR at any fault rate. By default the model
        /// accepts it only where the loss, corruption and reordering rates
        /// make seven go-backs in a row without progress plausible, and
        /// takes it as a stuck requester elsewhere.
        #[arg(long)]
        allow_retry_exhaustion: bool,
        /// The adversary's rate, as a fraction: for each packet delivered,
        /// the chance that a node on the fabric's mirror port injects a
        /// replayed or stale RC request or response (0 = no adversary).
        #[arg(long, value_parser = swarm::parse_fraction)]
        adversary: Option<Probability>,
        /// Link outages while the workload is posted (both ways or one
        /// way; RC retransmits, and may spend its retries if the cut lasts).
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=swarm::MAX_DISRUPTIONS as i64))]
        outages: Option<u32>,
        /// Partitions while the workload is posted (some nodes cut off from
        /// the others, or one node isolated).
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=swarm::MAX_DISRUPTIONS as i64))]
        partitions: Option<u32>,
        /// Times a node's application stops posting and polling for a while
        /// (CQs fill, receives come late: RNR NAKs, backpressure).
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=swarm::MAX_DISRUPTIONS as i64))]
        pauses: Option<u32>,
        /// Print every HCA's decisions, in virtual time order, before the
        /// report: `trace <ns> node <n> <decision>` (the newest million of
        /// them; tracing changes nothing the run does).
        #[arg(long)]
        trace: bool,
        /// A fault scenario on every node's port, as the harness and the
        /// scenario tests attach one: a library name (`uroce scenarios`)
        /// or a scenario file. Its firings are in the report and the
        /// trace hash; it makes the run lossy for the model (UC/UD
        /// delivery not exact, RETRY_EXC_ERR accepted). The seed's
        /// choices stay the same.
        #[arg(long, value_name = "NAME|FILE")]
        scenario: Option<String>,
        /// A node's role for the scenario's `role =` rules (repeatable),
        /// e.g. `--role 0=server`.
        #[arg(long, value_name = "NODE=ROLE", requires = "scenario",
              value_parser = swarm::parse_role)]
        role: Vec<(usize, String)>,
    },
}

/// Runs the command line `args` (program name first); returns the exit
/// status.
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            let is_help = !e.use_stderr();
            let _ = if is_help { write!(out, "{text}") } else { write!(err, "{text}") };
            return if is_help { 0 } else { 2 };
        }
    };
    match cli.command {
        Command::Demo(args) => crate::demo::run(&args, out, err),
        Command::Devinfo(args) => crate::devinfo::run(&args, out, err),
        Command::Pingpong(args) => crate::pingpong::run(&args, out, err),
        Command::Bench(args) => crate::bench::run(&args, out, err),
        Command::Opcodes(args) => crate::opcodes::run(&args, out, err),
        Command::Perftest(args) => crate::perftest::run(&args, out, err),
        Command::Run(args) => crate::run::run(&args, err),
        Command::Scenarios(args) => crate::scenarios::run(&args, out, err),
        Command::Decode { file, format } => decode::run(&file, format, out, err),
        Command::Sim {
            seed,
            ops,
            qps,
            nodes,
            loss,
            dup,
            reorder,
            corrupt,
            mtu,
            no_fence,
            allow_retry_exhaustion,
            adversary,
            outages,
            partitions,
            pauses,
            trace,
            scenario,
            role,
        } => {
            let scenario = match scenario.map(|arg| swarm::load_scenario(&arg).map(|s| (arg, s))) {
                None => None,
                Some(Ok((arg, scenario))) => {
                    Some(swarm::SwarmScenario { arg, scenario, roles: role })
                }
                Some(Err(e)) => {
                    let _ = writeln!(err, "uroce sim: --scenario {e}");
                    return 2;
                }
            };
            let config = SwarmConfig {
                seed: seed.unwrap_or_else(random_seed),
                ops: Some(ops),
                qps,
                nodes,
                loss,
                dup,
                reorder,
                corrupt,
                mtu,
                no_fence,
                allow_retry_exhaustion,
                adversary,
                outages,
                partitions,
                pauses,
                scenario,
            };
            sim(&config, seed.is_none(), trace, out, err)
        }
    }
}

/// A seed for a run the user gave none: from the OS's hash keys and the
/// clock.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.finish()
}

fn sim(
    config: &SwarmConfig,
    random: bool,
    trace: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let plan = swarm::Plan::resolve(config);
    let mut roles = plan.scenario.iter().flat_map(|s| &s.roles);
    if let Some((node, _)) = roles.find(|(node, _)| *node >= plan.nodes as usize) {
        let _ = writeln!(err, "uroce sim: --role {node}=...: the run has {} nodes", plan.nodes);
        return 2;
    }
    let mut header = swarm::describe(&plan);
    if random {
        header.push_str(" [random seed]");
    }
    let _ = writeln!(out, "{header}");
    let _ = out.flush();
    let started = std::time::Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        swarm::run_plan_with(plan.clone(), trace)
    }));
    let elapsed = started.elapsed();
    match outcome {
        Ok(report) => {
            if let Some(steps) = &report.steps {
                if steps.lost > 0 {
                    let _ =
                        writeln!(out, "trace: the {} oldest decisions were not kept", steps.lost);
                }
                for (at, node, step) in &steps.kept {
                    let _ = writeln!(out, "trace {} node {node} {step}", at.as_nanos());
                }
            }
            let _ = writeln!(out, "wall time: {:.2} s", elapsed.as_secs_f64());
            if report.write(out).is_err() {
                let _ = writeln!(err, "uroce sim: cannot write the report");
                return 2;
            }
            i32::from(!report.passed())
        }
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            let _ = writeln!(out, "PANIC: {why}");
            let _ = writeln!(out, "FAILED; reproduce: {}", plan.command_line());
            let _ = writeln!(
                out,
                "seed={} ops={} completed=0 mismatches=1 retransmits=0 trace_hash={:016x} \
                 adversary=0",
                plan.seed, plan.ops, 0
            );
            1
        }
    }
}
