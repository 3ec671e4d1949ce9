//! The uroce HCA: a sans-IO RoCEv2 host channel adapter.
//!
//! The HCA is a state machine (quinn-proto style): time enters as an
//! argument, packets and doorbells are inputs, transmits, timeouts and
//! events are polled outputs; it never touches a socket, a thread or a
//! clock. Runtimes drive it: the simulated fabric ([`sim`]) here, real UDP
//! and L2 transports later.

pub use uroce_wire as wire;

pub mod command;
mod comp;
pub mod config;
pub mod counters;
pub mod cq;
pub mod cqe;
pub mod endpoint;
pub mod hca;
pub mod link;
pub mod mem;
pub mod mr;
pub mod process_mem;
pub mod qp;
pub mod qp_state;
mod req;
mod resp;
pub mod ring;
mod rx;
pub mod sim;
pub mod tables;
pub mod time;
pub mod types;
pub mod udp;
pub mod wqe;

pub use endpoint::{Endpoint, Transmit};
pub use hca::{Doorbell, Driver, Event, Hca, SharedHca};
pub use time::Instant;
