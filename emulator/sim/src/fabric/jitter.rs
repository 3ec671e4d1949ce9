//! Latency jitter ([`FabricConfig::latency_jitter_ns`]): each packet's
//! one-way latency is the configured latency plus a draw in
//! `0..=latency_jitter_ns`, from a generator of its own (so turning jitter
//! on moves no fault decision), and a link (sender, receiver) stays FIFO,
//! as one path through switches is: a packet never overtakes an earlier
//! one of its link through jitter alone (faults and rules still reorder).
//! With jitter 0 nothing is drawn and every latency is the configured one.

use super::{Fabric, FabricConfig};
use crate::NodeId;
use uroce_faults::SimRng;
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;

/// What the fabric keeps for jitter: its generator and each link's last
/// arrival.
#[derive(Debug)]
pub(super) struct Jitter {
    rng: SimRng,
    /// The last arrival time jitter gave each link, by (from, to).
    last: std::collections::BTreeMap<(usize, usize), Instant>,
}

/// Mixed into the seed for the jitter's generator.
const JITTER_STREAM: u64 = 0x6a69_7474_6572_0001;

impl Jitter {
    pub(super) fn new(config: &FabricConfig) -> Jitter {
        Jitter { rng: SimRng::new(config.seed ^ JITTER_STREAM), last: Default::default() }
    }
}

impl<E: Endpoint> Fabric<E> {
    /// When a packet that left `from`'s port for `to` at `departs_at`
    /// arrives, before any fault's or rule's extra delay.
    pub(super) fn link_arrival(
        &mut self,
        from: NodeId,
        to: NodeId,
        departs_at: Instant,
    ) -> Instant {
        let at = departs_at.plus_nanos(self.config.latency_ns);
        let spread = self.config.latency_jitter_ns;
        if spread == 0 {
            return at;
        }
        let at = at.plus_nanos(self.jitter.rng.range_inclusive(0, spread));
        let last = self.jitter.last.entry((from.0, to.0)).or_insert(Instant::ZERO);
        let at = at.max(*last);
        *last = at;
        at
    }
}
