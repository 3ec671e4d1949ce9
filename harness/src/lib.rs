//! Deterministic tests of RDMA programs written as async code: node tasks
//! on uroce's simulated fabric, in virtual time, under fault scenarios,
//! seed by seed; and the same code on the real UDP runtime.
//!
//! A [`Sim`] is a [`world::World`] (HCAs on the simulated fabric, each with
//! a verbs [`Context`](uroce_verbs::Context)) and a single-threaded executor.
//! Tasks are `async` blocks given a [`Node`] (its context, its [`SimEnv`],
//! its id, address and role); they await completions with
//! [`Cq::next`](uroce_verbs::Cq::next), sleep with [`Env::sleep`] and talk
//! to their peers over an [`Oob`] side channel ([`Sim::oob_pair`]);
//! [`connect_rc`] connects two RC QPs over it.
//! [`Sim::run`] polls the ready tasks in wake order; when none is ready it
//! moves the fabric to its next event (a delivery, an HCA timer, a
//! scenario port's deadline) or to the first sleep's end
//! ([`world::advance`] with [`world::Stop::FirstEvent`]). No thread, no
//! clock: a run is a function of its seed ([`Sim::trace_hash`]), and
//! [`check!`] runs a test over seeds and prints the command that
//! reproduces a failing one.
//!
//! ```
//! use std::time::Duration;
//! use uroce_harness::{check, connect_rc, Scenario, Sim};
//! use uroce_verbs::connect::{cap, Endpoint, Tuning, ALL_ACCESS};
//! use uroce_verbs::{RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};
//!
//! # fn main() {
//! check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
//!     // The client's device loses the first ACK it receives (or use a library
//!     // scenario: Scenario::load("lost-ack")).
//!     let lose_ack = "[scenario]\nname = \"first-ack\"\nsummary = \"the first ACK is lost\"\n\
//!         [[rule]]\nname = \"lose\"\ndir = \"in\"\nclass = \"ack\"\nnth = 1\naction = \"drop\"\n";
//!     let mut sim = Sim::builder(seed).scenario(Scenario::parse(lose_ack, "inline")?).build();
//!     let (a, b) = sim.oob_pair(0, 1); // a lossless side channel
//!     let tuning = Tuning::with_timeout(10); // ACK timeout 4 ms
//!     // The server: a receive posted before the client may send, then its completion.
//!     let server = sim.spawn(0, "server", move |node| async move {
//!         let side = Endpoint::rc(&node.ctx, 16, cap(8, 1, 0), 64, ALL_ACCESS)?;
//!         let recv = |s: &Endpoint| {
//!             let wr = RecvWr { wr_id: 1, sg_list: vec![s.mr.sge(0, 64)] };
//!             s.qp.post_recv(&[wr]).map_err(|(_, e)| e)
//!         };
//!         connect_rc(&side, &node.ctx, &a, 1000, &tuning, ALL_ACCESS, recv).await?;
//!         let wc = side.cq.next().await?;
//!         Ok::<_, Box<dyn std::error::Error>>((wc.status, side.mr.read_vec(0, 5)?))
//!     });
//!     // The client: one SEND, awaited.
//!     sim.spawn(1, "client", move |node| async move {
//!         let side = Endpoint::rc(&node.ctx, 16, cap(8, 1, 0), 64, ALL_ACCESS).unwrap();
//!         connect_rc(&side, &node.ctx, &b, 0, &tuning, ALL_ACCESS, |_| Ok(())).await.unwrap();
//!         side.mr.write(0, b"hello").unwrap();
//!         let mut wr = SendWr::new(7, WrOpcode::Send);
//!         wr.sg_list = vec![side.mr.sge(0, 5)];
//!         wr.flags = SendFlags::SIGNALED;
//!         side.qp.post_send(&[wr]).map_err(|(_, e)| e).unwrap();
//!         assert_eq!(side.cq.next().await.unwrap().status, WcStatus::Success);
//!     });
//!     let report = sim.run(Duration::from_secs(10))?; // Err: deadlock, timeout, panic
//!     let (status, bytes) = server.output()??;
//!     assert_eq!((status, bytes.as_slice()), (WcStatus::Success, &b"hello"[..]));
//!     // The client's requester retransmitted after its ACK timeout.
//!     assert_eq!(report.fired_at(1, "lose"), 1);
//!     assert!(report.counters[1].completer_retry_err >= 1);
//!     assert!(report.elapsed >= Duration::from_millis(4));
//!     println!("{report}"); // firings per rule, completions per node, trace hash
//!     Ok(())
//! });
//! # }
//! ```
//!
//! On the real runtime, the same `async` functions run under
//! [`real::block_on`] with [`real::RealEnv`] and [`real::TcpOob`], one
//! thread per node (`harness/tests/real.rs`).
//!
//! The simulated world is the harness's own module, [`world`]:
//! [`world::WorldBuilder`] builds the nodes (a scenario's ports on the
//! fabric, its device faults applied to the HCAs by the world's handler)
//! and [`world::advance`] is the one function that moves a world in time.
//! `uroce sim` (the swarm) builds its world with the same builder and
//! steps it with the same function, in random slices of virtual time
//! ([`world::Stop::AtTime`]); `uroce` re-exports the module as
//! `uroce::world`. The harness depends on the emulator (`uroce-device`, `uroce-faults`,
//! `uroce-hca`, `uroce-sim`) and `uroce-verbs`, not on the `uroce`
//! package. `uroce_verbs`' async CQ wakes the tasks (woken from the fabric
//! step that writes the completion).

mod check;
mod connect;
mod env;
mod expect;
mod oob;
pub mod real;
mod report;
mod sim;
pub mod world;

pub use check::{check_seeds, failure_lines, seeds, DEFAULT_SEEDS};
pub use connect::{connect_rc, ConnectError};
pub use env::{Env, SimEnv};
pub use expect::Checked;
pub use oob::{Oob, SimOob};
pub use report::{Report, RuleCount};
pub use sim::{Failure, JoinHandle, Node, Sim, SimBuilder, Unfinished, DEFAULT_LATENCY_JITTER};
pub use uroce_faults::scenario::{ExpectExit, ExpectLine, Observed, RoleExpect};
pub use uroce_hca::async_log::AsyncLog;
pub use uroce_hca::config::HcaConfig;
pub use uroce_hca::counters::Counters;
pub use uroce_hca::tally::CompletionTally;
pub use uroce_sim::{FabricConfig, FaultConfig, Probability, Scenario};
