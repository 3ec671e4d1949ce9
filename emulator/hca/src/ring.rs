//! The HCA's side of the work and completion rings: it consumes what the
//! application produces into SQs, RQs and SRQs, and produces CQEs. The
//! layout (where the indices and entries are) is the device interface's:
//! [`uroce_device::ring`].
//!
//! The HCA treats an index written by the application as hostile: it reads
//! it once per look, and an advance past the ring's size is refused
//! ([`RingError::IndexJump`]) rather than trusted.

use uroce_device::mem::{HostMemory, MemFault};
pub use uroce_device::ring::{
    RingDesc, RingError, CONSUMER_OFFSET, ENTRIES_OFFSET, PRODUCER_OFFSET, SCHEDULED_OFFSET,
};

/// The HCA's side of a ring the application produces into (SQ, RQ, SRQ):
/// it consumes entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerRing {
    /// The ring.
    pub desc: RingDesc,
    /// The next index the HCA will consume (its own copy: the truth).
    pub consumer: u32,
    /// The producer index last read and accepted.
    pub producer_seen: u32,
}

impl ConsumerRing {
    /// The HCA side of a new, empty ring.
    pub fn new(desc: RingDesc) -> ConsumerRing {
        ConsumerRing { desc, consumer: 0, producer_seen: 0 }
    }

    /// Reads the producer index once and accepts it if it is a plausible
    /// advance. Returns how many entries are available.
    pub fn refresh(&mut self, host: &dyn HostMemory) -> Result<u32, RingError> {
        let producer = host.load_acquire_u32(self.desc.base + PRODUCER_OFFSET)?;
        let available = producer.wrapping_sub(self.consumer);
        let previously = self.producer_seen.wrapping_sub(self.consumer);
        if available > self.desc.entries || available < previously {
            return Err(RingError::IndexJump { index: producer, own: self.consumer });
        }
        self.producer_seen = producer;
        Ok(available)
    }

    /// Entries known to be available without reading the index again.
    pub fn available(&self) -> u32 {
        self.producer_seen.wrapping_sub(self.consumer)
    }

    /// Copies the entry at `index` (which must be available) into `buf`
    /// (exactly `stride` bytes, or fewer to read a prefix).
    pub fn read_entry(
        &self,
        host: &dyn HostMemory,
        index: u32,
        buf: &mut [u8],
    ) -> Result<(), MemFault> {
        debug_assert!(buf.len() <= self.desc.stride as usize);
        host.read(self.desc.entry_addr(index), buf)
    }

    /// Copies the entries from `index` on (which must be available) into
    /// `buf`, a whole number of strides that ends at the ring's end or
    /// before: a run of entries in one read.
    pub fn read_run(
        &self,
        host: &dyn HostMemory,
        index: u32,
        buf: &mut [u8],
    ) -> Result<(), MemFault> {
        let stride = self.desc.stride as usize;
        debug_assert!(buf.len() % stride == 0);
        debug_assert!(buf.len() / stride <= self.run_from(index) as usize);
        host.read(self.desc.entry_addr(index), buf)
    }

    /// How many available entries from `index` on lie before the ring's
    /// end (a run [`ConsumerRing::read_run`] reads at once).
    pub fn run_from(&self, index: u32) -> u32 {
        let to_end = self.desc.entries - (index & (self.desc.entries - 1));
        self.producer_seen.wrapping_sub(index).min(to_end)
    }

    /// Consumes `count` entries and publishes the new consumer index.
    pub fn consume(&mut self, host: &dyn HostMemory, count: u32) -> Result<(), MemFault> {
        self.advance(count);
        self.publish(host)
    }

    /// Consumes `count` entries without publishing the consumer index
    /// (a run of them is published once, by [`ConsumerRing::publish`]).
    pub fn advance(&mut self, count: u32) {
        assert!(count <= self.available(), "consuming more than available");
        self.consumer = self.consumer.wrapping_add(count);
    }

    /// Publishes the consumer index.
    pub fn publish(&self, host: &dyn HostMemory) -> Result<(), MemFault> {
        host.store_release_u32(self.desc.base + CONSUMER_OFFSET, self.consumer)
    }
}

/// The HCA's side of a ring it produces into (CQ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerRing {
    /// The ring.
    pub desc: RingDesc,
    /// The next index the HCA will produce.
    pub producer: u32,
}

impl ProducerRing {
    /// The HCA side of a new, empty ring.
    pub fn new(desc: RingDesc) -> ProducerRing {
        ProducerRing { desc, producer: 0 }
    }

    /// Reads the consumer index and returns the free entries, refusing an
    /// index that claims more was consumed than was produced.
    pub fn free(&self, host: &dyn HostMemory) -> Result<u32, RingError> {
        let consumer = host.load_acquire_u32(self.desc.base + CONSUMER_OFFSET)?;
        let used = self.producer.wrapping_sub(consumer);
        if used > self.desc.entries {
            return Err(RingError::IndexJump { index: consumer, own: self.producer });
        }
        Ok(self.desc.entries - used)
    }

    /// Writes one entry at the producer index and publishes it. The caller
    /// checked [`ProducerRing::free`].
    pub fn push(&mut self, host: &dyn HostMemory, entry: &[u8]) -> Result<(), MemFault> {
        debug_assert!(entry.len() <= self.desc.stride as usize);
        let index_addr = self.desc.base + PRODUCER_OFFSET;
        let next = self.producer.wrapping_add(1);
        match host.write_and_publish_u32(
            self.desc.entry_addr(self.producer),
            entry,
            index_addr,
            next,
        ) {
            Ok(()) => {
                self.producer = next;
                Ok(())
            }
            // The entry was written, its index not: the producer advances
            // all the same (the entries lie past the index).
            Err(fault) if fault.addr == index_addr => {
                self.producer = next;
                Err(fault)
            }
            Err(fault) => Err(fault),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_device::mem::{DriverMemory, SimMemory};

    fn ring(host: &SimMemory, entries: u32, stride: u32) -> RingDesc {
        let desc = RingDesc { base: 0, entries, stride };
        let base = host.allocate(desc.bytes(), 4096).unwrap();
        RingDesc { base, ..desc }
    }

    #[test]
    fn produce_and_consume_across_the_wrap() {
        let host = SimMemory::strict(1 << 20);
        let desc = ring(&host, 4, 32);
        let mut hca = ConsumerRing::new(desc);
        let mut app_producer = 0u32;
        for round in 0..10u32 {
            // The application writes two entries and publishes.
            for k in 0..2u32 {
                host.write(desc.entry_addr(app_producer), &[(round * 2 + k) as u8; 32]).unwrap();
                app_producer = app_producer.wrapping_add(1);
            }
            host.store_release_u32(desc.base, app_producer).unwrap();
            assert_eq!(hca.refresh(&host).unwrap(), 2);
            let mut buf = [0u8; 32];
            hca.read_entry(&host, hca.consumer, &mut buf).unwrap();
            assert_eq!(buf[0], (round * 2) as u8);
            hca.consume(&host, 2).unwrap();
            assert_eq!(host.load_acquire_u32(desc.base + CONSUMER_OFFSET).unwrap(), app_producer);
        }
    }

    #[test]
    fn a_run_ends_at_the_ring_end_or_the_producer() {
        let host = SimMemory::strict(1 << 20);
        let desc = ring(&host, 4, 8);
        let mut hca = ConsumerRing::new(desc);
        // Six entries, 0 to 5: slots 0..3, then 4 and 5 again in 0 and 1.
        for n in 0..6u32 {
            host.write(desc.entry_addr(n), &[n as u8; 8]).unwrap();
            host.store_release_u32(desc.base, n + 1).unwrap();
            if n == 3 {
                assert_eq!(hca.refresh(&host).unwrap(), 4);
                assert_eq!((hca.run_from(0), hca.run_from(2)), (4, 2));
                hca.consume(&host, 4).unwrap();
            }
        }
        assert_eq!(hca.refresh(&host).unwrap(), 2);
        assert_eq!((hca.run_from(4), hca.run_from(5), hca.run_from(6)), (2, 1, 0));
        let mut buf = [0u8; 16];
        hca.read_run(&host, 4, &mut buf).unwrap();
        assert_eq!(buf, [[4u8; 8], [5; 8]].concat()[..]);
    }

    #[test]
    fn a_producer_index_past_the_ring_is_refused() {
        let host = SimMemory::strict(1 << 20);
        let desc = ring(&host, 4, 32);
        let mut hca = ConsumerRing::new(desc);
        host.store_release_u32(desc.base, 5).unwrap();
        assert_eq!(hca.refresh(&host), Err(RingError::IndexJump { index: 5, own: 0 }));
        host.store_release_u32(desc.base, 3).unwrap();
        assert_eq!(hca.refresh(&host).unwrap(), 3);
        // Going backwards past what was already published is refused too.
        host.store_release_u32(desc.base, 1).unwrap();
        assert!(matches!(hca.refresh(&host), Err(RingError::IndexJump { .. })));
        assert_eq!(hca.available(), 3, "the accepted index stays");
    }

    #[test]
    fn producer_ring_sees_free_space_and_refuses_bogus_consumers() {
        let host = SimMemory::strict(1 << 20);
        let desc = ring(&host, 2, 64);
        let mut cq = ProducerRing::new(desc);
        assert_eq!(cq.free(&host).unwrap(), 2);
        cq.push(&host, &[1; 64]).unwrap();
        cq.push(&host, &[2; 64]).unwrap();
        assert_eq!(cq.free(&host).unwrap(), 0);
        host.store_release_u32(desc.base + CONSUMER_OFFSET, 1).unwrap();
        assert_eq!(cq.free(&host).unwrap(), 1);
        host.store_release_u32(desc.base + CONSUMER_OFFSET, 7).unwrap();
        assert!(matches!(cq.free(&host), Err(RingError::IndexJump { .. })));
    }

    #[test]
    fn shapes_are_validated() {
        let d = RingDesc { base: 4096, entries: 8, stride: 64 };
        assert!(d.validate(8, 64).is_ok());
        assert!(RingDesc { entries: 6, ..d }.validate(8, 64).is_err());
        assert!(RingDesc { stride: 32, ..d }.validate(8, 64).is_err());
        assert!(RingDesc { base: 4100, ..d }.validate(8, 64).is_err());
        assert!(RingDesc { base: u64::MAX - 64, ..d }.validate(8, 64).is_err());
    }
}
