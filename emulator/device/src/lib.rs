//! The uroce device interface: the "hardware manual" as code.
//!
//! Everything a driver and the device agree on lives here, and nothing
//! else: the vocabulary (keys, states, statuses, opcodes, access flags),
//! the ring layouts, the WQE and CQE formats, the commands of the control
//! path and their replies, the doorbells and the events, and the host
//! memory the device reaches. Drivers (`uroce-verbs`, the C library) are
//! written against it, never against the HCA's internals; the HCA
//! (`uroce-hca`) implements it. `docs/device-interface.md` is its prose.

pub mod cm;
pub mod command;
pub mod cqe;
pub mod doorbell;
pub mod link;
pub mod mem;
pub mod ring;
pub mod types;
pub mod wqe;

pub use doorbell::{Doorbell, Event};
pub use link::DeviceLink;
