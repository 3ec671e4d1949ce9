//! The injector: a [`FaultSpec`] and its own generator, deciding the fate
//! of each packet of a stream, the way the fabric decides it.

use crate::config::FaultConfig;
use crate::fate::Fate;
use crate::rng::SimRng;
use crate::spec::FaultSpec;

/// What becomes of one copy of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyVerdict {
    /// How long to hold it, in nanoseconds (0 = now): the line delay plus
    /// any reordering delay.
    pub delay_ns: u64,
    /// Whether it was held back by a reordering (an extra delay).
    pub reordered: bool,
    /// The bit to flip in it, if corrupted (an index into the IP packet,
    /// see [`crate::flip_bit`]; apply it with [`crate::flip`]).
    pub flip_bit: Option<usize>,
}

/// What becomes of one packet: no copy (lost), one, or two (duplicated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The copies that go on, in order.
    pub copies: [Option<CopyVerdict>; 2],
}

impl Verdict {
    /// The packet is lost.
    pub fn lost(&self) -> bool {
        self.copies[0].is_none()
    }
    /// The packet goes twice.
    pub fn duplicated(&self) -> bool {
        self.copies[1].is_some()
    }
    /// The copies that go on.
    pub fn copies(&self) -> impl Iterator<Item = CopyVerdict> + '_ {
        self.copies.iter().flatten().copied()
    }
}

/// The fault injector of one stream of packets (a device's way out, or in).
#[derive(Debug, Clone)]
pub struct Injector {
    spec: FaultSpec,
    faults: FaultConfig,
    rng: SimRng,
}

impl Injector {
    /// An injector seeded with the specification's seed.
    pub fn new(spec: FaultSpec) -> Injector {
        Injector { spec, faults: spec.faults(), rng: SimRng::new(spec.seed) }
    }

    /// The specification.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// Decides the fate of `packet` (an IP packet, only read to pick the
    /// bit a corruption flips). Draws a fixed number of values per packet
    /// ([`Fate::draw`]), so one knob's setting never shifts another's
    /// decisions, and the same sequence of packets gets the same verdicts.
    pub fn apply(&mut self, packet: &[u8]) -> Verdict {
        let fate = Fate::draw(&mut self.rng);
        let mut copies = [None, None];
        if fate.lost(&self.faults) {
            return Verdict { copies };
        }
        let count = if fate.duplicated(&self.faults) { 2 } else { 1 };
        for (slot, copy) in copies.iter_mut().zip(fate.copies).take(count) {
            let reorder = copy.reorder_delay_ns(&self.faults);
            *slot = Some(CopyVerdict {
                delay_ns: self.spec.delay_ns() + reorder.unwrap_or(0),
                reordered: reorder.is_some(),
                flip_bit: copy.corrupted_bit(&self.faults, packet),
            });
        }
        Verdict { copies }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_probabilities_and_the_seed() {
        let spec = FaultSpec::parse("loss=0.2,dup=0.1,corrupt=0.05,seed=3").unwrap();
        let mut injector = Injector::new(spec);
        let packet = [0u8; 100];
        let verdicts: Vec<Verdict> = (0..20_000).map(|_| injector.apply(&packet)).collect();
        let lost = verdicts.iter().filter(|v| v.lost()).count();
        let dup = verdicts.iter().filter(|v| v.duplicated()).count();
        let corrupt = verdicts.iter().flat_map(Verdict::copies).filter(|c| c.flip_bit.is_some());
        let corrupt = corrupt.count();
        assert!((3_600..4_400).contains(&lost), "lost {lost}");
        assert!((1_400..2_000).contains(&dup), "dup {dup}");
        assert!((800..1_300).contains(&corrupt), "corrupt {corrupt}");
        assert!(verdicts
            .iter()
            .flat_map(Verdict::copies)
            .all(|c| c.delay_ns == 0 && !c.reordered && c.flip_bit.is_none_or(|b| b < 800)));
        let mut again = Injector::new(spec);
        assert!(verdicts.iter().all(|v| *v == again.apply(&packet)), "same seed, same verdicts");
    }

    #[test]
    fn delays_are_the_line_plus_the_reordering() {
        let spec = FaultSpec::parse("delay_us=100,reorder=0.5,seed=1").unwrap();
        let mut injector = Injector::new(spec);
        for _ in 0..1_000 {
            let verdict = injector.apply(&[0x45; 40]);
            let copy = verdict.copies[0].unwrap();
            match copy.reordered {
                false => assert_eq!(copy.delay_ns, 100_000),
                true => assert!((100_001..=600_000).contains(&copy.delay_ns), "{copy:?}"),
            }
        }
    }
}
