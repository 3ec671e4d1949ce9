//! The user's syntax for faults on the real path:
//! `loss=0.01,dup=0.001,delay_us=200,reorder=0.01,corrupt=0.001,seed=7`
//! (the `--faults` flag or `UROCE_FAULTS`).

use crate::config::FaultConfig;
use crate::rng::Probability;
use core::fmt;

/// A parsed fault specification: the probabilistic faults of a
/// [`FaultConfig`], a fixed line delay, and the generator's seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultSpec {
    /// Each packet is dropped with this probability.
    pub loss: Probability,
    /// Each packet is sent twice with this probability.
    pub dup: Probability,
    /// Each packet waits this long before it leaves (a fixed line delay).
    pub delay_us: u64,
    /// Each copy of a packet is held back with this probability, by a
    /// random extra delay of up to `max(2 × delay_us, 500 µs)`, so later
    /// packets overtake it.
    pub reorder: Probability,
    /// One bit of the ICRC-covered transport packet of a copy is flipped
    /// with this probability (the receiver must drop it on its ICRC).
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
        self.faults().any_probabilistic() || self.delay_us != 0
    }

    /// The probabilistic faults in the shared vocabulary (no MTU).
    pub fn faults(&self) -> FaultConfig {
        FaultConfig {
            loss: self.loss,
            duplicate: self.dup,
            reorder: self.reorder,
            reorder_max_delay_ns: (2 * self.delay_us).max(500) * 1_000,
            corrupt: self.corrupt,
            mtu_bytes: None,
        }
    }

    /// The fixed line delay in nanoseconds.
    pub fn delay_ns(&self) -> u64 {
        self.delay_us * 1_000
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
        assert_eq!(
            spec.to_string(),
            "loss=0.01,dup=0.001,delay_us=200,reorder=0.01,corrupt=0.001,seed=7"
        );
        let faults = spec.faults();
        assert_eq!((faults.duplicate, faults.reorder_max_delay_ns), (spec.dup, 500_000));
        assert_eq!(spec.delay_ns(), 200_000);
        faults.assert_valid();
    }

    #[test]
    fn refuses_bad_specifications() {
        for bad in ["loss", "loss=2", "loss=-0.1", "loss=x", "jitter=1", "seed=1.5", "delay_us=-3"]
        {
            assert!(FaultSpec::parse(bad).is_err(), "{bad} parsed");
        }
        assert!(!FaultSpec::parse("").unwrap().is_active());
        assert!(!FaultSpec::parse("seed=9").unwrap().is_active());
        assert!(FaultSpec::parse("delay_us=1").unwrap().is_active());
    }
}
