//! The uroce HCA.
//!
//! The HCA will be a sans-IO state machine (see `../shared/design`): time
//! enters as an argument, packets and doorbells are inputs, transmits,
//! timeouts and events are polled outputs. Its tables, rings and engines
//! arrive with the HCA issue; today this crate only fixes the name and the
//! dependency on [`uroce_wire`], whose packet formats the engines will use.

pub use uroce_wire as wire;
