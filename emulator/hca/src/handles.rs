//! Typed handles: an object's index in its HCA table (PD, CQ, SRQ, AH,
//! QP). The device interface carries them as bare `u32`s (the command
//! and doorbell formats are fixed); the HCA turns them into these types
//! where a command or doorbell enters, so that a CQ index can never be
//! used to look up a QP.

use core::fmt;

/// A key of a [`crate::tables::Table`]: a table slot, typed.
pub trait TableIndex: Copy {
    /// The handle of table slot `slot`.
    fn from_slot(slot: usize) -> Self;
    /// The table slot of the handle.
    fn slot(self) -> usize;
}

impl TableIndex for usize {
    fn from_slot(slot: usize) -> usize {
        slot
    }
    fn slot(self) -> usize {
        self
    }
}

macro_rules! handle {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// The index as the device interface carries it.
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl TableIndex for $name {
            fn from_slot(slot: usize) -> $name {
                // Tables are sized from u32 limits: a slot always fits.
                $name(slot as u32)
            }
            fn slot(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

handle!(
    /// A protection domain: its index in the PD table.
    PdIndex
);
handle!(
    /// A completion queue: its index in the CQ table.
    CqIndex
);
handle!(
    /// A shared receive queue: its index in the SRQ table.
    SrqIndex
);
handle!(
    /// An address handle: its index in the AH table.
    AhIndex
);
handle!(
    /// A queue pair's slot in the QP table (its QPN names the slot and the
    /// slot's generation; see `Hca::qp_slot`).
    QpIndex
);
