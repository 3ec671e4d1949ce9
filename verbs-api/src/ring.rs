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
mod tests {
    use super::*;
    use uroce_device::mem::SimMemory;
    use uroce_device::types::{WcOpcode, WcStatus};

    fn ring(host: &SimMemory, entries: u32, stride: u32) -> RingDesc {
        let shape = RingDesc { base: 0, entries, stride };
        let base = crate::ring_pool::RingPool::default().allocate(host, shape.bytes()).unwrap();
        RingDesc { base, ..shape }
    }

    fn index(host: &SimMemory, ring: RingDesc, offset: u64) -> u32 {
        load(host, ring, offset).unwrap()
    }

    /// Writes the item into its slot's first byte; a zero is refused.
    fn fill_nonzero(item: &u8, slot: &mut [u8]) -> Result<()> {
        if *item == 0 {
            return Err(Error::Invalid("zero"));
        }
        slot[0] = *item;
        Ok(())
    }

    #[test]
    fn a_chain_is_published_once_up_to_the_failing_item() {
        let host = SimMemory::strict(1 << 20);
        let sq = WorkRing::new(ring(&host, 8, 32), 8, "full");
        let fill = fill_nonzero;
        assert_eq!(sq.post_chain(&host, &[1, 2], fill), (2, Ok(())));
        assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 2);
        let (posted, result) = sq.post_chain(&host, &[3, 0, 4], fill);
        assert_eq!((posted, result), (1, Err((1, Error::Invalid("zero")))));
        assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 3, "the WR before the bad one");
        let mut entry = [0u8; 32];
        host.read(sq.desc.entry_addr(2), &mut entry).unwrap();
        assert_eq!(entry[0], 3);
        assert_eq!(sq.post_chain(&host, &[0], fill), (0, Err((0, Error::Invalid("zero")))));
        assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 3);
    }

    #[test]
    fn a_full_ring_refuses_until_the_consumer_moves() {
        let host = SimMemory::strict(1 << 20);
        let rq = WorkRing::new(ring(&host, 4, 32), 3, "receive queue full");
        let fill = |_: &u8, _: &mut [u8]| Ok(());
        let (posted, result) = rq.post_chain(&host, &[0; 5], fill);
        assert_eq!((posted, result), (3, Err((3, Error::NoMemory("receive queue full")))));
        // The HCA consumes two: the driver sees it when it next looks.
        publish(&host, rq.desc, CONSUMER_OFFSET, 2).unwrap();
        assert_eq!(rq.post_chain(&host, &[0; 3], fill).0, 2);
        assert_eq!(index(&host, rq.desc, PRODUCER_OFFSET), 5);
        rq.reset(&host).unwrap();
        assert_eq!(index(&host, rq.desc, PRODUCER_OFFSET), 0);
        assert_eq!(index(&host, rq.desc, CONSUMER_OFFSET), 0);
        assert_eq!(rq.post_chain(&host, &[0; 4], fill).0, 3, "empty again after a reset");
    }

    #[test]
    fn each_wqe_gets_a_zeroed_slot_across_the_wrap() {
        let host = SimMemory::strict(1 << 20);
        let srq = WorkRing::new(ring(&host, 2, 16), 2, "full");
        for round in 0..5u8 {
            let used = usize::from(16 - round);
            let fill = |_: &u8, slot: &mut [u8]| {
                slot[..used].fill(round + 1);
                Ok(())
            };
            assert_eq!(srq.post_chain(&host, &[0], fill), (1, Ok(())));
            let mut entry = [0xffu8; 16];
            host.read(srq.desc.entry_addr(u32::from(round)), &mut entry).unwrap();
            assert!(entry[..used].iter().all(|&b| b == round + 1));
            assert!(entry[used..].iter().all(|&b| b == 0), "the rest of the slot is zero");
            publish(&host, srq.desc, CONSUMER_OFFSET, u32::from(round) + 1).unwrap();
        }
    }

    /// What one poll of up to `max` takes.
    fn polled(cq: &CqRing, host: &SimMemory, max: usize) -> Vec<Cqe> {
        let mut out = Vec::new();
        let taken = cq.poll_into(host, max, &mut out).unwrap();
        assert_eq!(taken, out.len());
        out
    }

    #[test]
    fn the_lockless_look_sees_new_completions_a_resize_and_reports_faults() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
        assert!(polled(&cq, &host, 8).is_empty());
        let write = |cq: &CqRing, n: u32| {
            let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Recv, Qpn::new(16));
            host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
            publish(&host, cq.desc(), PRODUCER_OFFSET, n + 1).unwrap();
        };
        write(&cq, 0);
        assert_eq!(polled(&cq, &host, 8).len(), 1, "seen past the empty look");
        assert!(polled(&cq, &host, 8).is_empty(), "consumed: empty again");
        // A resize starts a new ring at index 0: the look follows it.
        let bigger = ring(&host, 8, CQE_LEN as u32);
        cq.resize(&host, 8, || Ok(bigger)).unwrap();
        assert!(polled(&cq, &host, 8).is_empty());
        write(&cq, 0);
        assert_eq!(polled(&cq, &host, 8).len(), 1, "the new ring's first completion");
        // A ring whose index cannot be read is not empty: the poll fails.
        let lenient = SimMemory::new(1 << 20);
        let lost = CqRing::new(RingDesc { base: 1 << 40, entries: 4, stride: CQE_LEN as u32 });
        assert!(lost.poll_into(&lenient, 8, &mut Vec::new()).is_err());
        assert_eq!(lenient.faults(), 2, "looked at without, then with the lock");
    }

    #[test]
    fn a_poll_appends_and_a_corrupt_cqe_leaves_the_buffer_and_the_ring_as_they_were() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
        let cqe = Cqe::new(7, WcStatus::Success, WcOpcode::Send, Qpn::new(16));
        host.write(cq.desc().entry_addr(0), &cqe.encode()).unwrap();
        host.write(cq.desc().entry_addr(1), &[0xff; CQE_LEN]).unwrap();
        publish(&host, cq.desc(), PRODUCER_OFFSET, 2).unwrap();
        let mut out = vec![Cqe::new(1, WcStatus::Success, WcOpcode::Recv, Qpn::new(16))];
        assert!(cq.poll_into(&host, 4, &mut out).is_err(), "the second CQE does not decode");
        assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1], "as it was");
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 0, "nothing consumed");
        assert_eq!(cq.poll_into(&host, 1, &mut out).unwrap(), 1);
        assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1, 7], "appended");
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 1);
    }

    #[test]
    fn a_chain_across_the_ring_end_lands_in_order() {
        let host = SimMemory::strict(1 << 20);
        let sq = WorkRing::new(ring(&host, 4, 16), 4, "full");
        let fill = fill_nonzero;
        assert_eq!(sq.post_chain(&host, &[1, 2], fill), (2, Ok(())));
        publish(&host, sq.desc, CONSUMER_OFFSET, 2).unwrap();
        // Slots 2 and 3, then 0 after the wrap; the fourth item is refused,
        // and slot 1 keeps the first post's WQE.
        let (posted, result) = sq.post_chain(&host, &[3, 4, 5, 0, 6], fill);
        assert_eq!((posted, result), (3, Err((3, Error::Invalid("zero")))));
        assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 5);
        for (slot, expected) in [(2u32, 3u8), (3, 4), (0, 5), (1, 2)] {
            let mut entry = [0xffu8; 16];
            host.read(sq.desc.entry_addr(slot), &mut entry).unwrap();
            assert_eq!(entry[0], expected, "slot {slot}");
            assert!(entry[1..].iter().all(|&b| b == 0), "slot {slot} zeroed");
        }
    }

    #[test]
    fn a_write_that_faults_posts_nothing_from_its_run() {
        let host = SimMemory::new(1 << 20);
        // No memory behind the ring: its first WQE's write faults.
        let sq = WorkRing::new(RingDesc { base: 0x40, entries: 4, stride: 16 }, 4, "full");
        let (posted, result) = sq.post_chain(&host, &[1u8, 2], |_, _| Ok(()));
        let fault = MemFault { addr: sq.desc.entry_addr(0), len: 32 };
        assert_eq!((posted, result), (0, Err((0, fault.into()))));
        assert_eq!(host.faults(), 1, "one write, nothing published");
    }

    #[test]
    fn completions_across_the_ring_end_are_read_in_order() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
        publish(&host, cq.desc(), PRODUCER_OFFSET, 3).unwrap();
        cq.set_consumer(&mut cq.state(), 3);
        for n in 3..6u32 {
            let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Recv, Qpn::new(16));
            host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
        }
        publish(&host, cq.desc(), PRODUCER_OFFSET, 6).unwrap();
        let got = polled(&cq, &host, 8);
        assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 6);
    }

    #[test]
    fn completions_are_read_in_order_and_handed_back() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
        assert!(polled(&cq, &host, 4).is_empty());
        for n in 0..3u32 {
            let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Send, Qpn::new(16));
            host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
        }
        publish(&host, cq.desc(), PRODUCER_OFFSET, 3).unwrap();
        let got = polled(&cq, &host, 2);
        assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 2);
        assert_eq!(polled(&cq, &host, 4)[0].wr_id, 2);
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 3);
    }

    #[test]
    fn two_threads_polling_one_cq_take_each_completion_once() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 512, CQE_LEN as u32));
        for n in 0..500u32 {
            let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Send, Qpn::new(16));
            host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
        }
        publish(&host, cq.desc(), PRODUCER_OFFSET, 500).unwrap();
        let take = || {
            let mut got = Vec::new();
            while let Some(cqe) = polled(&cq, &host, 1).pop() {
                got.push(cqe.wr_id);
            }
            got
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(take);
            let b = s.spawn(take);
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a.windows(2).all(|w| w[0] < w[1]) && b.windows(2).all(|w| w[0] < w[1]));
        let mut all: Vec<u64> = a.into_iter().chain(b).collect();
        all.sort_unstable();
        assert_eq!(all, (0..500).collect::<Vec<u64>>(), "each once");
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 500);
    }

    #[test]
    fn a_qps_completions_are_discarded_and_the_others_kept_in_order() {
        let host = SimMemory::strict(1 << 20);
        let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
        // Indices from 2, so that the six CQEs wrap the four slots.
        publish(&host, cq.desc(), PRODUCER_OFFSET, 2).unwrap();
        publish(&host, cq.desc(), CONSUMER_OFFSET, 2).unwrap();
        cq.set_consumer(&mut cq.state(), 2);
        let write = |n: u32, qpn: u32| {
            let cqe = Cqe::new(u64::from(n), WcStatus::WrFlushErr, WcOpcode::Recv, Qpn::new(qpn));
            host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
        };
        for (n, qpn) in [(2, 17), (3, 16), (4, 17), (5, 16)] {
            write(n, qpn);
        }
        publish(&host, cq.desc(), PRODUCER_OFFSET, 6).unwrap();
        assert_eq!(cq.discard(&host, Qpn::new(17)).unwrap(), 2);
        assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 4, "two slots handed back");
        assert_eq!(cq.discard(&host, Qpn::new(17)).unwrap(), 0);
        // The HCA goes on writing above its producer index.
        write(6, 16);
        publish(&host, cq.desc(), PRODUCER_OFFSET, 7).unwrap();
        let got = polled(&cq, &host, 8);
        assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 5, 6]);
    }
}
