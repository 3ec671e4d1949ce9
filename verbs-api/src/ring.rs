//! The driver's side of the rings: it produces WQEs into work rings (SQ,
//! RQ, SRQ: [`WorkRing`]) and consumes CQEs from completion rings
//! ([`CqRing`]). The HCA's side is `uroce_hca::ring` (`ConsumerRing`,
//! `ProducerRing`); the layout both follow is the device interface's,
//! [`uroce_device::ring`] (`docs/device-interface.md`, section 2).
//!
//! Every access the driver makes to ring memory is in this file (a ring's
//! memory comes from `ring_pool.rs`): write or read an entry, load or
//! publish an index. As on the HCA's side, the host memory is handed to
//! each call rather than kept in the ring.

use crate::error::{Error, PostResult, Result};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use uroce_device::cqe::{Cqe, CQE_LEN};
use uroce_device::mem::{HostMemory, MemFault};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET, SCHEDULED_OFFSET};
use uroce_device::types::Qpn;

/// Loads one of the ring's indices (acquire: what it covers is visible).
fn load(host: &dyn HostMemory, ring: RingDesc, offset: u64) -> core::result::Result<u32, MemFault> {
    host.load_acquire_u32(ring.base + offset)
}

/// Publishes one of the ring's indices (release: what it covers is
/// written).
fn publish(
    host: &dyn HostMemory,
    ring: RingDesc,
    offset: u64,
    index: u32,
) -> core::result::Result<(), MemFault> {
    host.store_release_u32(ring.base + offset, index)
}

/// The driver's side of a work ring (SQ, RQ, SRQ): it writes WQEs and
/// publishes the producer index (the doorbell record); the HCA consumes
/// them and hands the slots back through the consumer index.
pub(crate) struct WorkRing {
    desc: RingDesc,
    /// WQEs that may be outstanding at once (`max_send_wr`, `max_recv_wr`,
    /// or the SRQ's entries): a post beyond it is refused.
    depth: u32,
    /// What a post on a full ring is refused with ("send queue full", ...).
    full: &'static str,
    /// The next index the driver will produce (its own copy: the truth).
    producer: Cell<u32>,
    /// The consumer index last read. Only the HCA advances it, so the real
    /// one is never behind this copy: the ring is read again only when the
    /// copy says it is full.
    consumer_seen: Cell<u32>,
    /// The WQEs of a post built and not yet copied into the ring, a slot
    /// each: a run of them, up to the ring's end, goes in one write
    /// (reused: nothing is allocated per post once it has grown).
    staged: RefCell<Vec<u8>>,
}

impl WorkRing {
    /// The driver's side of the new, empty ring `desc`.
    pub(crate) fn new(desc: RingDesc, depth: u32, full: &'static str) -> WorkRing {
        WorkRing {
            desc,
            depth,
            full,
            producer: Cell::new(0),
            consumer_seen: Cell::new(0),
            staged: RefCell::new(Vec::new()),
        }
    }

    /// Where the ring is.
    pub(crate) fn desc(&self) -> RingDesc {
        self.desc
    }

    /// Posts a chain: for each item, `fill` checks it and writes its WQE
    /// into a zeroed slot, which is copied into the ring if there is room.
    /// The producer index is then published once (release) for every WQE
    /// written. Returns how many WQEs were posted and, if an item failed,
    /// its index and why: the items before it are posted, it and the ones
    /// after it are not (libibverbs' `bad_wr`).
    ///
    /// The slots of a run of items, up to the ring's end, are copied in one
    /// write: a ring lies in one allocation, so a write that faults would
    /// have faulted at the run's first WQE, which is reported (the faulting
    /// access is the run's, not one slot's).
    pub(crate) fn post_chain<T>(
        &self,
        host: &dyn HostMemory,
        chain: &[T],
        mut fill: impl FnMut(&T, &mut [u8]) -> Result<()>,
    ) -> (usize, PostResult) {
        let start = self.producer.get();
        let stride = self.desc.stride as usize;
        let mut staged = self.staged.borrow_mut();
        // The slots are zeroed a piece of up to `ZEROED_AT_ONCE` bytes at a
        // time (a whole number of slots, at least one), not slot by slot.
        let piece = (ZEROED_AT_ONCE / stride).max(1) * stride;
        staged.clear();
        // The staged run starts at ring index `run.0`, with chain item
        // `run.1`, and fills the first `len` bytes of `staged`.
        let mut run = (start, 0);
        let mut len = 0;
        let mut producer = start;
        let mut failed = None;
        for (i, item) in chain.iter().enumerate() {
            if staged.len() < len + stride {
                // No more than the chain's remaining items take.
                let end = len + piece.min((chain.len() - i) * stride);
                staged.resize(end, 0);
            }
            let slot = &mut staged[len..len + stride];
            let checked = fill(item, slot).and_then(|()| self.check_room(host, producer));
            if let Err(e) = checked {
                failed = Some((i, e));
                break;
            }
            len += stride;
            producer = producer.wrapping_add(1);
            if producer & (self.desc.entries - 1) == 0 {
                // The ring wraps: the run ends here.
                if let Err(fault) = host.write(self.desc.entry_addr(run.0), &staged[..len]) {
                    (producer, failed) = (run.0, Some((run.1, fault.into())));
                    len = 0;
                    break;
                }
                // The next run's slots are zeroed again.
                staged.clear();
                len = 0;
                run = (producer, i + 1);
            }
        }
        if len > 0 {
            if let Err(fault) = host.write(self.desc.entry_addr(run.0), &staged[..len]) {
                // The run's WQEs come before the item that failed, if one did.
                (producer, failed) = (run.0, Some((run.1, fault.into())));
            }
        }
        let posted = producer.wrapping_sub(start) as usize;
        if posted > 0 {
            if let Err(fault) = publish(host, self.desc, PRODUCER_OFFSET, producer) {
                // The HCA cannot see any of them: none was posted.
                return (0, Err((0, fault.into())));
            }
            self.producer.set(producer);
        }
        (posted, failed.map_or(Ok(()), Err))
    }

    /// Whether the device promised to read the producer index again (the
    /// device-scheduled flag: a send queue in its schedule, a receive queue
    /// outside the error state), so a post may skip its kick. The fence
    /// orders the producer index published before it against the flag read
    /// after it; the HCA fences the other way (`uroce_device::ring`,
    /// `device-interface.md` §2.3).
    pub(crate) fn device_will_look(&self, host: &dyn HostMemory) -> bool {
        host.fence_seq_cst();
        load(host, self.desc, SCHEDULED_OFFSET).is_ok_and(|flag| flag != 0)
    }

    /// Whether a WQE may be written at `producer`: fewer than `depth`
    /// outstanding.
    fn check_room(&self, host: &dyn HostMemory, producer: u32) -> Result<()> {
        if producer.wrapping_sub(self.consumer_seen.get()) < self.depth {
            return Ok(());
        }
        let consumer = load(host, self.desc, CONSUMER_OFFSET)?;
        self.consumer_seen.set(consumer);
        if producer.wrapping_sub(consumer) < self.depth {
            Ok(())
        } else {
            Err(Error::NoMemory(self.full))
        }
    }

    /// Empties the ring after its QP went to RESET (the HCA considers it
    /// empty again): both indices back to 0.
    pub(crate) fn reset(&self, host: &dyn HostMemory) -> Result<()> {
        self.producer.set(0);
        self.consumer_seen.set(0);
        publish(host, self.desc, PRODUCER_OFFSET, 0)?;
        publish(host, self.desc, CONSUMER_OFFSET, 0)?;
        Ok(())
    }
}

/// How many bytes of WQE slots a post zeroes at once: one `memset` for
/// several small slots, below the size where it switches to `rep stosb`.
const ZEROED_AT_ONCE: usize = 1024;

/// The driver's side of a completion ring: the HCA writes CQEs and
/// publishes the producer index; the driver reads them and hands the slots
/// back through the consumer index.
///
/// `Sync`: every operation holds the ring's lock from its first load to
/// its last publish, so two threads polling one CQ each take different
/// completions (and a resize never moves the ring under a poll). The lock
/// is the driver's own and never contended by the HCA, which reads the
/// consumer index from memory.
pub(crate) struct CqRing {
    state: Mutex<CqState>,
    /// Copies of the ring's base and consumer index, kept under the lock,
    /// read without it: a poll that finds the ring empty (most polls of a
    /// waiting application) compares them with the producer index and
    /// returns without taking the lock (two atomic read-modify-writes).
    /// Read apart from the lock, they may disagree with each other during
    /// another thread's resize: a look that is wrong then is one that sees
    /// nothing, as if that thread had polled first.
    peek_base: AtomicU64,
    peek_consumer: AtomicU32,
}

/// What the driver knows of a completion ring.
struct CqState {
    /// Where the ring is (a resize moves it).
    desc: RingDesc,
    /// The next index the driver will consume.
    consumer: u32,
}

/// The most CQEs a poll reads in one access.
const CQES_PER_READ: usize = 16;

impl CqRing {
    /// The driver's side of the new, empty ring `desc`.
    pub(crate) fn new(desc: RingDesc) -> CqRing {
        CqRing {
            state: Mutex::new(CqState { desc, consumer: 0 }),
            peek_base: AtomicU64::new(desc.base),
            peek_consumer: AtomicU32::new(0),
        }
    }

    /// Sets the consumer index the driver keeps (with the lock held: the
    /// caller's `state`), and its copy.
    fn set_consumer(&self, state: &mut CqState, consumer: u32) {
        state.consumer = consumer;
        self.peek_consumer.store(consumer, Ordering::Release);
    }

    /// Whether the ring holds no completion, seen without the lock. A
    /// fault is not empty: the locked poll reports it.
    fn looks_empty(&self, host: &dyn HostMemory) -> bool {
        let base = self.peek_base.load(Ordering::Acquire);
        let consumer = self.peek_consumer.load(Ordering::Acquire);
        matches!(host.load_acquire_u32(base + PRODUCER_OFFSET), Ok(p) if p == consumer)
    }

    /// The ring's state, locked. A panic cannot leave it half-changed
    /// (each field is set by one store), so a poisoned lock is used as is.
    fn state(&self) -> MutexGuard<'_, CqState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the ring is.
    pub(crate) fn desc(&self) -> RingDesc {
        self.state().desc
    }

    /// Completions written and not yet polled.
    fn pending(state: &CqState, host: &dyn HostMemory) -> Result<u32> {
        let producer = load(host, state.desc, PRODUCER_OFFSET)?;
        Ok(producer.wrapping_sub(state.consumer))
    }

    /// Moves the ring, with no poll in between: refused (EINVAL) when it
    /// holds more than `cqe` completions, else `move_to` has the HCA move
    /// the completions not yet polled to a new ring, whose entry 0 they
    /// start at, and the driver follows. Returns the old ring.
    pub(crate) fn resize(
        &self,
        host: &dyn HostMemory,
        cqe: u32,
        move_to: impl FnOnce() -> Result<RingDesc>,
    ) -> Result<RingDesc> {
        let mut state = self.state();
        if cqe < CqRing::pending(&state, host)? {
            return Err(Error::Invalid("CQ depth below the completions it holds"));
        }
        let desc = move_to()?;
        let old = state.desc;
        state.desc = desc;
        self.peek_base.store(desc.base, Ordering::Release);
        self.set_consumer(&mut state, 0);
        Ok(old)
    }

    /// Up to `max` completions, oldest first, appended to `out`; their
    /// slots are handed back (one release of the consumer index). Returns
    /// how many. A CQE that does not decode fails the poll: nothing is
    /// consumed, and `out` is as it was. Up to [`CQES_PER_READ`] CQEs
    /// before the ring's end are read in one access.
    pub(crate) fn poll_into(
        &self,
        host: &dyn HostMemory,
        max: usize,
        out: &mut Vec<Cqe>,
    ) -> Result<usize> {
        if self.looks_empty(host) {
            return Ok(0);
        }
        let mut state = self.state();
        let desc = state.desc;
        let producer = load(host, desc, PRODUCER_OFFSET)?;
        let stride = desc.stride as usize;
        let before = out.len();
        let mut consumer = state.consumer;
        // Zeroed when a CQE is there to read (a poll that finds none skips
        // it).
        let mut buf = None;
        const BUF_LEN: usize = CQES_PER_READ * CQE_LEN;
        let per_read = ((BUF_LEN - CQE_LEN) / stride.max(1) + 1).min(CQES_PER_READ);
        while consumer != producer && out.len() - before < max {
            let buf = buf.get_or_insert([0u8; BUF_LEN]);
            let to_end = desc.entries - (consumer & (desc.entries - 1));
            let run = (producer.wrapping_sub(consumer).min(to_end) as usize)
                .min(max - (out.len() - before))
                .min(per_read);
            // The bytes each CQE's own read would have covered, at once.
            let entries = &mut buf[..(run - 1) * stride + CQE_LEN];
            if let Err(fault) = host.read(desc.entry_addr(consumer), entries) {
                out.truncate(before);
                return Err(fault.into());
            }
            for k in 0..run {
                let bytes = entries[k * stride..][..CQE_LEN].try_into().expect("a CQE's bytes");
                match Cqe::decode(bytes) {
                    Some(cqe) => out.push(cqe),
                    None => {
                        out.truncate(before);
                        return Err(Error::Invalid("corrupt CQE"));
                    }
                }
            }
            consumer = consumer.wrapping_add(run as u32);
        }
        let taken = out.len() - before;
        if taken > 0 {
            if let Err(fault) = publish(host, desc, CONSUMER_OFFSET, consumer) {
                out.truncate(before);
                return Err(fault.into());
            }
            self.set_consumer(&mut state, consumer);
        }
        Ok(taken)
    }

    /// Removes the completions of QP `qpn` not yet polled, keeping the
    /// others in order (libmlx5's `mlx5_cq_clean`): from the newest down,
    /// each kept CQE moves up past the removed ones, then the consumer
    /// index moves past the slots freed at the bottom. Only entries below
    /// the producer index are touched: the HCA writes above it, and never
    /// into a slot until the consumer index hands it back. Returns how many
    /// were removed.
    pub(crate) fn discard(&self, host: &dyn HostMemory, qpn: Qpn) -> Result<u32> {
        let mut state = self.state();
        let desc = state.desc;
        let producer = load(host, desc, PRODUCER_OFFSET)?;
        let consumer = state.consumer;
        let mut removed = 0u32;
        let mut index = producer;
        while index != consumer {
            index = index.wrapping_sub(1);
            let mut bytes = [0u8; CQE_LEN];
            host.read(desc.entry_addr(index), &mut bytes)?;
            let cqe = Cqe::decode(&bytes).ok_or(Error::Invalid("corrupt CQE"))?;
            if cqe.qp_num == qpn {
                removed += 1;
            } else if removed > 0 {
                host.write(desc.entry_addr(index.wrapping_add(removed)), &bytes)?;
            }
        }
        if removed > 0 {
            let consumer = consumer.wrapping_add(removed);
            self.set_consumer(&mut state, consumer);
            publish(host, desc, CONSUMER_OFFSET, consumer)?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests;
