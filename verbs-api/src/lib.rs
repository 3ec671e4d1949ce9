//! The uroce verbs API: what applications link.
//!
//! It will play the part of libibverbs plus a vendor user driver: turn
//! work requests into WQEs in shared rings, ring doorbells and turn CQEs
//! into work completions. It arrives with the HCA issue; today the crate
//! fixes the name and its place above [`uroce_emulator`].

pub use uroce_emulator as emulator;
