//! Work and completion rings in host memory (the device interface).
//!
//! ```text
//! ring base + 0     producer index (u32)   own 64-byte cache line
//! ring base + 64    consumer index (u32)   own 64-byte cache line
//! ring base + 128   device-scheduled flag  (u32) own 64-byte cache line
//! ring base + 192   reserved               (up to 256)
//! ring base + 256   entry 0, entry 1, ... entry N-1   (N a power of two,
//!                   each `stride` bytes, stride a power of two >= 16)
//! ```
//!
//! Indices are free-running 32-bit counters; the slot of index `i` is
//! `i & (N - 1)`. A producer writes entries, then publishes its index
//! with release ordering; a consumer reads the index with acquire
//! ordering, then the entries. `producer - consumer` (wrapping) is the
//! number of entries in the ring and never exceeds N.
//!
//! The device-scheduled flag (EVENT_IDX in spirit) lets a driver skip the
//! doorbell's notification: the device sets it while the queue is in its
//! schedule, promising to read the producer index again before it stops
//! looking at the queue. It clears it when it stops, then fences and reads
//! the producer index once more. A driver publishes its producer index,
//! fences, then reads the flag: if set, the device will see the new
//! entries without being told ([`crate::mem::HostMemory::fence_seq_cst`]
//! on both sides makes this the store-load pattern it must be). A send
//! queue's flag is up while the queue is in the device's transmit schedule;
//! a receive queue's is up except in the error state (the device reads a
//! receive queue when a SEND needs a WQE, and only in the error state must
//! it be told, to flush new WQEs). SRQs and CQs leave it at 0.
//!
//! The HCA treats an index written by the application as hostile: it reads
//! it once per look, and an advance past the ring's size is refused
//! ([`RingError::IndexJump`]) rather than trusted.

use crate::cqe::CQE_LEN;
use crate::mem::MemFault;
use crate::wqe::{recv_stride, send_stride};

/// Offset of the producer index from the ring base.
pub const PRODUCER_OFFSET: u64 = 0;
/// Offset of the consumer index.
pub const CONSUMER_OFFSET: u64 = 64;
/// Offset of the device-scheduled flag (non-zero: the device will read the
/// producer index again without a notification).
pub const SCHEDULED_OFFSET: u64 = 128;
/// Offset of entry 0.
pub const ENTRIES_OFFSET: u64 = 256;

/// Where a ring lives and its shape, as given to the HCA at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RingDesc {
    /// Host address of the ring base (64-byte aligned).
    pub base: u64,
    /// Number of entries, a power of two.
    pub entries: u32,
    /// Bytes per entry, a power of two.
    pub stride: u32,
}

impl RingDesc {
    /// Bytes of host memory the ring needs.
    pub const fn bytes(&self) -> u64 {
        ENTRIES_OFFSET + self.entries as u64 * self.stride as u64
    }

    /// Checks the shape.
    pub fn validate(&self, max_entries: u32, min_stride: u32) -> Result<(), RingError> {
        let ok = self.entries.is_power_of_two()
            && self.entries <= max_entries.next_power_of_two()
            && self.stride.is_power_of_two()
            && self.stride >= min_stride.max(16)
            && self.base % 64 == 0
            && self.base.checked_add(self.bytes()).is_some();
        if ok {
            Ok(())
        } else {
            Err(RingError::BadShape)
        }
    }

    /// Host address of the entry for index `index`.
    pub const fn entry_addr(&self, index: u32) -> u64 {
        self.base + ENTRIES_OFFSET + (index & (self.entries - 1)) as u64 * self.stride as u64
    }
}

/// What went wrong with a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// Entries not a power of two, stride too small, base misaligned.
    BadShape,
    /// The other side's index moved further than the ring holds.
    IndexJump {
        /// The index read.
        index: u32,
        /// The index it was compared with.
        own: u32,
    },
    /// The ring's memory could not be reached.
    Fault(MemFault),
}

impl From<MemFault> for RingError {
    fn from(fault: MemFault) -> RingError {
        RingError::Fault(fault)
    }
}

/// Ring shape helper for drivers: the ring a QP's send queue needs.
pub fn send_ring_shape(max_send_wr: u32, max_send_sge: u32, max_inline: u32) -> RingDesc {
    RingDesc {
        base: 0,
        entries: max_send_wr.max(1).next_power_of_two(),
        stride: send_stride(max_send_sge, max_inline),
    }
}

/// Ring shape helper for drivers: the ring a receive queue needs.
pub fn recv_ring_shape(max_recv_wr: u32, max_recv_sge: u32) -> RingDesc {
    RingDesc {
        base: 0,
        entries: max_recv_wr.max(1).next_power_of_two(),
        stride: recv_stride(max_recv_sge),
    }
}

/// Ring shape helper for drivers: the ring a CQ of `cqe` entries needs.
pub fn cq_ring_shape(cqe: u32) -> RingDesc {
    RingDesc { base: 0, entries: (cqe.max(1) + 1).next_power_of_two(), stride: CQE_LEN as u32 }
}
