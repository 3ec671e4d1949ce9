//! The fault vocabulary: probabilistic faults applied to every packet, and
//! the network's MTU.

use crate::rng::Probability;

/// Faults drawn for every packet from the fabric's one generator.
///
/// For each packet the fabric draws, in this order and whether or not a
/// fault is enabled (so that switching one fault does not shift the draws of
/// the others): loss, duplication; then for each copy that goes on the
/// wire: corruption, the corrupted bit, reordering, the reordering delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultConfig {
    /// Chance that a packet is lost.
    pub loss: Probability,
    /// Chance that a packet arrives twice.
    pub duplicate: Probability,
    /// Chance that a packet (each copy on its own) is held back by an extra
    /// delay, which lets later packets overtake it.
    pub reorder: Probability,
    /// The largest extra delay of a reordered packet; the delay is uniform
    /// in `1..=reorder_max_delay_ns`.
    pub reorder_max_delay_ns: u64,
    /// Chance that one bit of a packet (each copy on its own) is flipped.
    ///
    /// In a RoCEv2 packet the bit is one the ICRC covers and no router may
    /// change: in the transport packet (BTH, extension headers, payload,
    /// pad or the ICRC itself), never in BTH byte 4, which the ICRC masks.
    /// So a receiver's ICRC check always catches it. Flips in the IP and UDP
    /// headers are left out on purpose: a real host drops those by IP
    /// checksum or port before the HCA sees them, which is plain loss. In
    /// any other packet the bit is anywhere.
    pub corrupt: Probability,
    /// Packets whose IP length exceeds this many bytes are dropped (`None`:
    /// no limit). Not a fault that heals: it is the network's MTU.
    pub mtu_bytes: Option<usize>,
}

impl FaultConfig {
    /// No faults at all.
    pub const NONE: FaultConfig = FaultConfig {
        loss: Probability::NEVER,
        duplicate: Probability::NEVER,
        reorder: Probability::NEVER,
        reorder_max_delay_ns: 0,
        corrupt: Probability::NEVER,
        mtu_bytes: None,
    };

    /// Whether any probabilistic fault is on.
    pub fn any_probabilistic(&self) -> bool {
        !(self.loss.is_never()
            && self.duplicate.is_never()
            && self.reorder.is_never()
            && self.corrupt.is_never())
    }

    /// This configuration with every probabilistic fault off (the MTU
    /// stays).
    pub const fn healed(self) -> FaultConfig {
        FaultConfig { mtu_bytes: self.mtu_bytes, ..FaultConfig::NONE }
    }

    /// Panics if the configuration is inconsistent (reordering on with a
    /// window of 0).
    pub fn assert_valid(&self) {
        assert!(
            self.reorder.is_never() || self.reorder_max_delay_ns > 0,
            "FaultConfig: reorder is on but reorder_max_delay_ns is 0"
        );
    }
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healed_keeps_mtu() {
        let f = FaultConfig {
            loss: Probability::from_percent(10),
            mtu_bytes: Some(1500),
            ..FaultConfig::NONE
        };
        assert!(f.any_probabilistic());
        let h = f.healed();
        assert!(!h.any_probabilistic());
        assert_eq!(h.mtu_bytes, Some(1500));
    }
}
