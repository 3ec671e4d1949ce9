//! Seeded faults for RoCEv2 packets: one vocabulary and one injector for
//! the simulated fabric (`uroce-sim`) and the real runtime (`uroce-net`),
//! so that `--faults loss=0.01,...` means the same thing on both.
//!
//! * [`SimRng`] and [`Probability`]: the seeded generator (xoshiro256**)
//!   and integer probabilities; a seed means the same draws on every
//!   machine.
//! * [`FaultConfig`]: the probabilistic faults (loss, duplication,
//!   reordering with its window, corruption) and the MTU.
//! * [`Fate`]: the draws for one packet, a fixed number whatever is
//!   enabled, and what they decide under a [`FaultConfig`]: lost or not,
//!   duplicated or not, and for each copy a flipped bit (one the ICRC
//!   covers, [`flip_bit`]) and an extra delay. The fabric draws a fate per
//!   packet from its one generator, between its own rules and outages.
//! * [`FaultSpec`]: the user's syntax (`loss=0.01,dup=0.001,delay_us=200,
//!   reorder=0.01,corrupt=0.001,seed=7`): a [`FaultConfig`], a fixed line
//!   delay and a seed.
//! * [`Injector`]: a [`FaultSpec`] with its own generator, deciding each
//!   packet of a stream ([`Injector::apply`]): what the real runtime puts
//!   on its packets.
//! * [`Rule`]: targeted faults ("drop the 3rd packet with opcode X to QP
//!   Y"): a [`Matcher`], an [`Action`] and a [`Fire`], counted in a
//!   [`RuleState`]; the simulated fabric applies them (`Fabric::add_rule`),
//!   nodes named by [`NodeId`].
//!
//! * [`scenario`]: fault scenario files ([`Scenario`], TOML, with a
//!   library of named ones) and the engine each device runs on its port
//!   ([`Port`]): targeted packet and link faults, device-side faults handed
//!   to the runtime, background random faults, a firing log.
//!
//! No clock, no I/O, no hash map: decisions are a function of the seed and
//! the sequence of packets.

mod config;
mod fate;
mod injector;
mod rng;
mod rule;
pub mod scenario;
mod spec;

pub use config::FaultConfig;
pub use fate::{bit_to_flip, flip, flip_bit, happens, scale, CopyFate, Fate};
pub use injector::{CopyVerdict, Injector, Verdict};
pub use rng::{Probability, SimRng};
pub use rule::{Action, BthFacts, Fire, Matcher, NodeId, PacketFacts, Rule, RuleId, RuleState};
pub use scenario::{Port, Scenario, ScenarioError};
pub use spec::{FaultSpec, FaultSpecError};
