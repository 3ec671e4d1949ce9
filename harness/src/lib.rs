//! Deterministic tests of RDMA programs written as async code: node tasks
//! on uroce's simulated fabric, in virtual time, under fault scenarios,
//! seed by seed; and the same code on the real UDP runtime.
//!
//! A [`Sim`] is a [`world::World`] (HCAs on the simulated fabric, each with
//! a verbs [`Context`](uroce_verbs::Context)) and a single-threaded executor.
//! Tasks are `async` blocks given a [`Node`] (its context, its [`SimEnv`],
//! its id, address and role); they await completions with
//! [`Cq::next`](uroce_verbs::Cq::next), sleep with [`Env::sleep`] and talk
//! to their peers over an [`Oob`] side channel ([`Sim::oob_pair`]).
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
//! use uroce_harness::{check, Env, Oob, Scenario, Sim};
//!
//! # fn main() {
//! check!(|seed| -> Result<(), Box<dyn std::error::Error>> {
//!     let mut sim = Sim::builder(seed).nodes(2).scenario(Scenario::load("lost-ack")?).build();
//!     let (a, b) = sim.oob_pair(0, 1);
//!     sim.spawn(0, "server", move |_node| async move {
//!         // Create a QP on node.ctx, send its QPN over `a`, await
//!         // `cq.next()`... (see harness/tests/common/mod.rs)
//!         let hello = a.recv().await.unwrap();
//!         a.send(&hello).await.unwrap();
//!     });
//!     let client = sim.spawn(1, "client", move |node| async move {
//!         b.send(b"hello").await.unwrap();
//!         node.env.sleep(Duration::from_millis(1)).await;
//!         b.recv().await.unwrap()
//!     });
//!     let report = sim.run(Duration::from_secs(10))?; // Err: deadlock, timeout, panic
//!     assert_eq!(client.output()?, b"hello");
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
//! `uroce::world`. The harness depends on the emulator (`uroce-device`,
//! `uroce-hca`, `uroce-sim`) and `uroce-verbs`, not on the `uroce`
//! package. `uroce_verbs`' async CQ wakes the tasks (woken from the fabric
//! step that writes the completion).

mod check;
mod env;
mod oob;
pub mod real;
mod report;
mod sim;
pub mod world;

pub use check::{check_seeds, failure_lines, seeds, DEFAULT_SEEDS};
pub use env::{Env, SimEnv};
pub use oob::{Oob, SimOob};
pub use report::{Report, RuleCount};
pub use sim::{Failure, JoinHandle, Node, Sim, SimBuilder, Unfinished};
pub use uroce_hca::config::HcaConfig;
pub use uroce_hca::counters::Counters;
pub use uroce_hca::tally::CompletionTally;
pub use uroce_sim::{FabricConfig, FaultConfig, Probability, Scenario};
