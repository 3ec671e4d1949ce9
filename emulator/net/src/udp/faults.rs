//! Faults on the real path, for people testing their own applications:
//! `loss=0.01,dup=0.001,delay_us=200,reorder=0.01,corrupt=0.001,seed=7`
//! (the `--faults` flag or `UROCE_FAULTS`). Applied to packets as they
//! leave the device, drawn from one seeded generator, so a run's fault
//! decisions repeat for the same sequence of packets.

use core::fmt;
use uroce_sim::{Probability, SimRng};

/// A parsed fault specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultSpec {
    /// Each packet is dropped with this probability.
    pub loss: Probability,
    /// Each packet is sent twice with this probability.
    pub dup: Probability,
    /// Each packet waits this long before it leaves (a fixed line delay).
    pub delay_us: u64,
    /// Each packet is held back with this probability, by a random extra
    /// delay of up to `max(2 × delay_us, 500 µs)`, so later packets
    /// overtake it.
    pub reorder: Probability,
    /// One bit of the ICRC-covered transport packet is flipped with this
    /// probability (the receiver must drop it on its ICRC).
    pub corrupt: Probability,
    /// The generator's seed.
    pub seed: u64,
}

/// A fault specification that does not parse; the text says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpecError(pub String);

impl fmt::Display for FaultSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad fault specification: {}", self.0)
    }
}

impl std::error::Error for FaultSpecError {}

impl FaultSpec {
    /// Parses `key=value` pairs separated by commas. Probabilities are
    /// fractions in `0..=1` (`0.01` = 1 %).
    pub fn parse(text: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FaultSpecError(format!("`{item}` is not key=value")))?;
            match key.trim() {
                "loss" => spec.loss = probability(key, value)?,
                "dup" => spec.dup = probability(key, value)?,
                "reorder" => spec.reorder = probability(key, value)?,
                "corrupt" => spec.corrupt = probability(key, value)?,
                "delay_us" => spec.delay_us = integer(key, value, 10_000_000)?,
                "seed" => spec.seed = integer(key, value, u64::MAX)?,
                other => {
                    return Err(FaultSpecError(format!(
                        "unknown key `{other}` (loss, dup, delay_us, reorder, corrupt, seed)"
                    )))
                }
            }
        }
        Ok(spec)
    }

    /// Whether the specification does anything.
    pub fn is_active(&self) -> bool {
        !(self.loss.is_never()
            && self.dup.is_never()
            && self.reorder.is_never()
            && self.corrupt.is_never()
            && self.delay_us == 0)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |p: Probability| p.ppm() as f64 / 1e6;
        write!(
            f,
            "loss={},dup={},delay_us={},reorder={},corrupt={},seed={}",
            p(self.loss),
            p(self.dup),
            self.delay_us,
            p(self.reorder),
            p(self.corrupt),
            self.seed
        )
    }
}

fn probability(key: &str, value: &str) -> Result<Probability, FaultSpecError> {
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| FaultSpecError(format!("{key}: `{value}` is not a number")))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(FaultSpecError(format!("{key}: {v} is outside 0..=1")));
    }
    Ok(Probability::from_ppm((v * 1e6).round() as u32))
}

fn integer(key: &str, value: &str, max: u64) -> Result<u64, FaultSpecError> {
    let v: u64 = value
        .trim()
        .parse()
        .map_err(|_| FaultSpecError(format!("{key}: `{value}` is not a whole number")))?;
    if v > max {
        return Err(FaultSpecError(format!("{key}: {v} is above {max}")));
    }
    Ok(v)
}

/// What to do with one outgoing packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// How many copies leave (0 = lost, 2 = duplicated).
    pub copies: u8,
    /// How long to hold them, in nanoseconds (0 = now).
    pub delay_ns: u64,
    /// Flip this bit (an index into the transport packet's bits), if any.
    pub flip_bit: Option<usize>,
}

/// The fault generator of one device.
#[derive(Debug)]
pub(crate) struct Faults {
    spec: FaultSpec,
    rng: SimRng,
}

impl Faults {
    pub(crate) fn new(spec: FaultSpec) -> Faults {
        Faults { spec, rng: SimRng::new(spec.seed) }
    }

    /// Decides a packet's fate. Draws a fixed number of values per packet,
    /// so one knob's setting never shifts another's decisions.
    pub(crate) fn decide(&mut self, transport_len: usize) -> Verdict {
        let lost = self.rng.chance(self.spec.loss);
        let dup = self.rng.chance(self.spec.dup);
        let reorder = self.rng.chance(self.spec.reorder);
        let corrupt = self.rng.chance(self.spec.corrupt);
        let extra_window_ns = (2 * self.spec.delay_us).max(500) * 1_000;
        let extra_ns = self.rng.below(extra_window_ns);
        let bit = self.rng.below((transport_len.max(1) * 8) as u64) as usize;
        let mut delay_ns = self.spec.delay_us * 1_000;
        if reorder {
            delay_ns += extra_ns;
        }
        Verdict {
            copies: if lost {
                0
            } else if dup {
                2
            } else {
                1
            },
            delay_ns,
            flip_bit: corrupt.then_some(bit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let spec =
            FaultSpec::parse("loss=0.01,dup=0.001,delay_us=200,reorder=0.01,corrupt=0.001,seed=7")
                .unwrap();
        assert_eq!(spec.loss, Probability::from_ppm(10_000));
        assert_eq!(spec.dup, Probability::from_ppm(1_000));
        assert_eq!(spec.delay_us, 200);
        assert_eq!(spec.reorder, Probability::from_ppm(10_000));
        assert_eq!(spec.corrupt, Probability::from_ppm(1_000));
        assert_eq!(spec.seed, 7);
        assert!(spec.is_active());
        assert_eq!(FaultSpec::parse(&spec.to_string()).unwrap(), spec);
    }

    #[test]
    fn refuses_bad_specifications() {
        for bad in ["loss", "loss=2", "loss=-0.1", "loss=x", "jitter=1", "seed=1.5", "delay_us=-3"]
        {
            assert!(FaultSpec::parse(bad).is_err(), "{bad} parsed");
        }
        assert!(!FaultSpec::parse("").unwrap().is_active());
        assert!(!FaultSpec::parse("seed=9").unwrap().is_active());
    }

    #[test]
    fn verdicts_follow_the_probabilities_and_the_seed() {
        let spec = FaultSpec::parse("loss=0.2,dup=0.1,corrupt=0.05,seed=3").unwrap();
        let mut faults = Faults::new(spec);
        let verdicts: Vec<Verdict> = (0..20_000).map(|_| faults.decide(100)).collect();
        let lost = verdicts.iter().filter(|v| v.copies == 0).count();
        let dup = verdicts.iter().filter(|v| v.copies == 2).count();
        let corrupt = verdicts.iter().filter(|v| v.flip_bit.is_some()).count();
        assert!((3_600..4_400).contains(&lost), "lost {lost}");
        assert!((1_400..2_000).contains(&dup), "dup {dup}");
        assert!((800..1_200).contains(&corrupt), "corrupt {corrupt}");
        assert!(verdicts.iter().all(|v| v.delay_ns == 0 && v.flip_bit.is_none_or(|b| b < 800)));
        let mut again = Faults::new(spec);
        assert!(verdicts.iter().all(|v| *v == again.decide(100)), "same seed, same verdicts");
    }
}
