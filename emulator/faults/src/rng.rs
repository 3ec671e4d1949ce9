//! The simulation's randomness: one seeded generator whose output is
//! specified here, so a seed means the same run on every machine, compiler
//! and release of Rust.
//!
//! [`SimRng`] is xoshiro256** (Blackman and Vigna, 2018) with its state
//! filled from the seed by SplitMix64, the initialisation its authors
//! recommend. Both are a few lines of integer arithmetic: no floating
//! point, no platform-dependent widths, no crate whose algorithm could
//! change under a semver-compatible update.
//!
//! [`Probability`] is an integer number of parts per million, so a fault
//! decision is `draw < ppm` on integers, never a float comparison.

use core::fmt;

/// One step of SplitMix64 (Steele, Lea and Flood, 2014).
const fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded pseudo-random generator (xoshiro256**), the only source of
/// randomness in a simulated run.
///
/// Not for cryptography. Draws happen in program order, so a run that makes
/// the same calls in the same order sees the same numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRng {
    state: [u64; 4],
}

impl SimRng {
    /// A generator whose whole output is a function of `seed`.
    pub const fn new(seed: u64) -> SimRng {
        let mut sm = seed;
        let state =
            [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        // SplitMix64 is a bijection on its counter, so the four words are
        // never all zero (the one state xoshiro cannot leave).
        SimRng { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.state[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        self.advance();
        result
    }

    /// Steps past `n` draws without computing them: the same state as `n`
    /// calls of [`SimRng::next_u64`].
    pub fn skip(&mut self, n: usize) {
        for _ in 0..n {
            self.advance();
        }
    }

    /// xoshiro256's state transition (one draw).
    #[inline(always)]
    fn advance(&mut self) {
        let s = &mut self.state;
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
    }

    /// A number in `0..bound` (multiply-shift: one draw, a bias below
    /// `bound / 2^64`). `bound` must not be 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SimRng::below(0)");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A number in `low..=high`.
    pub fn range_inclusive(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "SimRng::range_inclusive({low}, {high})");
        match (high - low).checked_add(1) {
            Some(span) => low + self.below(span),
            None => self.next_u64(),
        }
    }

    /// `true` with probability `p`. Always consumes exactly one draw, so
    /// turning a fault on or off does not shift the draws that follow.
    pub fn chance(&mut self, p: Probability) -> bool {
        self.below(Probability::SCALE) < u64::from(p.ppm())
    }

    /// A new generator seeded from this one: for a workload that wants its
    /// own stream, so that its draws do not shift the fabric's.
    pub fn fork(&mut self) -> SimRng {
        SimRng::new(self.next_u64())
    }
}

/// A probability in parts per million (0 = never, 1,000,000 = always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Probability(u32);

impl Probability {
    /// The denominator: one million.
    pub const SCALE: u64 = 1_000_000;
    /// Never happens.
    pub const NEVER: Probability = Probability(0);
    /// Always happens.
    pub const ALWAYS: Probability = Probability(1_000_000);

    /// `ppm` parts per million. Panics above one million (a programming
    /// error in a fault configuration).
    pub const fn from_ppm(ppm: u32) -> Probability {
        assert!(ppm as u64 <= Self::SCALE, "probability above one million ppm");
        Probability(ppm)
    }

    /// `percent` percent (0..=100).
    pub const fn from_percent(percent: u32) -> Probability {
        assert!(percent <= 100, "probability above 100 %");
        Probability(percent * 10_000)
    }

    /// `numerator / denominator`, rounded down to a whole ppm.
    pub const fn from_ratio(numerator: u64, denominator: u64) -> Probability {
        assert!(denominator > 0 && numerator <= denominator, "probability ratio outside 0..=1");
        Probability(((numerator as u128 * Self::SCALE as u128) / denominator as u128) as u32)
    }

    /// Parts per million.
    pub const fn ppm(self) -> u32 {
        self.0
    }

    /// Whether this is [`Probability::NEVER`].
    pub const fn is_never(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:04}%", self.0 / 10_000, self.0 % 10_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // The first outputs of SplitMix64 seeded with 1234567, from the
        // reference C code (http://prng.di.unimi.it/splitmix64.c).
        let mut s = 1_234_567;
        assert_eq!(splitmix64(&mut s), 6_457_827_717_110_365_317);
        assert_eq!(splitmix64(&mut s), 3_203_168_211_198_807_973);
        assert_eq!(splitmix64(&mut s), 9_817_491_932_198_370_423);
    }

    #[test]
    fn xoshiro256starstar_reference_values() {
        // State 1, 2, 3, 4 as in the reference implementation's test vector.
        let mut rng = SimRng { state: [1, 2, 3, 4] };
        let expected: [u64; 6] = [
            11_520,
            0,
            1_509_978_240,
            1_215_971_899_390_074_240,
            1_216_172_134_540_287_360,
            607_988_272_756_665_600,
        ];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn same_seed_same_stream() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        let mut c = SimRng::new(43);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn below_and_range_stay_in_bounds() {
        let mut rng = SimRng::new(7);
        for bound in [1, 2, 3, 10, 1_000_000, u64::MAX] {
            for _ in 0..100 {
                assert!(rng.below(bound) < bound);
            }
        }
        for _ in 0..100 {
            let x = rng.range_inclusive(5, 9);
            assert!((5..=9).contains(&x));
        }
        assert_eq!(rng.range_inclusive(3, 3), 3);
        let _ = rng.range_inclusive(0, u64::MAX);
    }

    #[test]
    fn chance_extremes_and_rate() {
        let mut rng = SimRng::new(1);
        assert!((0..1000).all(|_| !rng.chance(Probability::NEVER)));
        assert!((0..1000).all(|_| rng.chance(Probability::ALWAYS)));
        let hits = (0..100_000).filter(|_| rng.chance(Probability::from_percent(30))).count();
        assert!((29_000..31_000).contains(&hits), "{hits}");
    }

    #[test]
    fn probability_constructors() {
        assert_eq!(Probability::from_percent(5).ppm(), 50_000);
        assert_eq!(Probability::from_ratio(1, 3).ppm(), 333_333);
        assert_eq!(Probability::from_ppm(7).to_string(), "0.0007%");
        assert_eq!(Probability::ALWAYS.to_string(), "100.0000%");
    }
}
