//! The uroce HCA: a sans-IO RoCEv2 host channel adapter.
//!
//! The HCA is a state machine (quinn-proto style): time enters as an
//! argument, packets and doorbells are inputs, transmits, timeouts and
//! events are polled outputs; it never touches a socket, a thread or a
//! clock. Runtimes drive it: the simulated fabric
//! (`uroce-sim`) and the real network (`uroce-net`). What it shares with
//! drivers (rings, WQEs, CQEs, commands, doorbells, events) is the device
//! interface, `uroce-device`.

#![forbid(unsafe_code)]

pub mod async_log;
mod comp;
pub mod config;
pub mod counters;
pub mod cq;
pub mod endpoint;
pub mod fault;
mod gsi;
pub mod handles;
pub mod hca;
pub mod mcast;
pub mod mr;
mod ports;
pub mod qp;
pub mod qp_state;
mod req;
mod resp;
pub mod ring;
mod rx;
pub mod send_op;
pub mod shared;
pub mod tables;
pub mod tally;
pub mod time;
pub mod trace;

pub use endpoint::{Endpoint, PacketKind, Transmit};
pub use fault::DeviceFault;
pub use hca::Hca;
pub use shared::{AppActivity, Driver, SharedHca};
pub use time::Instant;
