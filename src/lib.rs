//! The `uroce` command's subcommands, as a library so that tests run them
//! in-process. `src/main.rs` only hands `std::env::args` to [`cli::run`].

pub mod app;
pub mod bench;
pub mod cli;
pub mod decode;
pub mod demo;
pub mod devinfo;
pub mod oob;
pub mod opcodes;
pub mod perftest;
pub mod pingpong;
pub mod run;
pub mod scenario_check;
pub mod scenario_run;
pub mod scenarios;
pub mod swarm;
/// The simulated world (HCAs on the simulated fabric, each with a verbs
/// context) and its stepping function: [`uroce_harness::world`], re-exported
/// for the swarm, the fuzz bodies and the tests that name it `uroce::world`.
pub use uroce_harness::world;
