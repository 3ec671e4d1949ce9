//! The steps `uroce opcodes` and `rxe-opcodes` run, the memory layout
//! both sides share, the payload pattern and the byte checks.
//!
//! This table is `steps[]` in `tests/interop/vm/rxe-opcodes.c`, field for
//! field, and [`StepSet`] its `-S` sets (`steps_awrite[]`, `steps_flush[]`). Both programs send a fingerprint of it (for their path MTU) in
//! the exchange, so a difference between the two stops the run before any
//! RDMA instead of showing up as a data mismatch; `-L` prints it.

mod layout;
mod payload;
mod step;
mod tables;
#[cfg(test)]
mod tests;

pub use layout::*;
pub use payload::*;
pub use step::*;
pub use tables::*;
