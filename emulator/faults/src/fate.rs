//! The random fate of one packet: a fixed number of draws, and what they
//! decide under a [`FaultConfig`].

use crate::config::FaultConfig;
use crate::rng::{Probability, SimRng};
use uroce_wire::frame::{classify, Classified, Link};
use uroce_wire::{bth, roce};

/// The random fate of one sent packet, drawn all at once: a fixed number of
/// draws per packet (ten), whatever is enabled, so packet `n`'s fate
/// depends only on the seed and `n`, and turning one fault on or off does
/// not shift the draws of the others.
#[derive(Debug, Clone, Copy)]
pub struct Fate {
    /// Decides the loss.
    pub loss: u64,
    /// Decides the duplication.
    pub duplicate: u64,
    /// The fates of the packet and of its duplicate.
    pub copies: [CopyFate; 2],
}

/// The fate of one copy of a packet on the wire.
#[derive(Debug, Clone, Copy)]
pub struct CopyFate {
    /// Decides the corruption.
    pub corrupt: u64,
    /// Picks the flipped bit.
    pub corrupt_bit: u64,
    /// Decides the reordering.
    pub reorder: u64,
    /// Picks the reordering delay.
    pub reorder_delay: u64,
}

impl Fate {
    /// Draws a fate: loss, duplication, then for each of two copies
    /// corruption, the corrupted bit, reordering and its delay.
    pub fn draw(rng: &mut SimRng) -> Fate {
        let loss = rng.next_u64();
        let duplicate = rng.next_u64();
        let mut copy = || CopyFate {
            corrupt: rng.next_u64(),
            corrupt_bit: rng.next_u64(),
            reorder: rng.next_u64(),
            reorder_delay: rng.next_u64(),
        };
        let copies = [copy(), copy()];
        Fate { loss, duplicate, copies }
    }

    /// [`Fate::draw`] for a packet under `faults`: when none of the
    /// random faults can happen (all four chances zero), no draw can
    /// change what happens to the packet, so the generator only steps
    /// past the ten draws (its state afterwards is the same) and the fate
    /// is all zeros.
    pub fn draw_under(rng: &mut SimRng, faults: &FaultConfig) -> Fate {
        let never = Probability::NEVER;
        if [faults.loss, faults.duplicate, faults.corrupt, faults.reorder] != [never; 4] {
            return Fate::draw(rng);
        }
        rng.skip(Self::DRAWS);
        let copy = CopyFate { corrupt: 0, corrupt_bit: 0, reorder: 0, reorder_delay: 0 };
        Fate { loss: 0, duplicate: 0, copies: [copy; 2] }
    }

    /// How many draws a fate takes.
    pub const DRAWS: usize = 10;

    /// Whether the packet is lost.
    pub fn lost(&self, faults: &FaultConfig) -> bool {
        happens(self.loss, faults.loss)
    }

    /// Whether the packet arrives twice.
    pub fn duplicated(&self, faults: &FaultConfig) -> bool {
        happens(self.duplicate, faults.duplicate)
    }
}

impl CopyFate {
    /// Flips one bit of `bytes` (an IP packet) if this copy is corrupted;
    /// returns the bit's index ([`flip_bit`]).
    pub fn corrupt(&self, faults: &FaultConfig, bytes: &mut [u8]) -> Option<usize> {
        let bit = self.corrupted_bit(faults, bytes)?;
        flip(bytes, bit);
        Some(bit)
    }

    /// The bit [`CopyFate::corrupt`] would flip, without flipping it.
    pub fn corrupted_bit(&self, faults: &FaultConfig, bytes: &[u8]) -> Option<usize> {
        if !happens(self.corrupt, faults.corrupt) {
            return None;
        }
        bit_to_flip(bytes, self.corrupt_bit)
    }

    /// The extra delay of this copy if it is reordered: uniform in
    /// `1..=reorder_max_delay_ns`.
    pub fn reorder_delay_ns(&self, faults: &FaultConfig) -> Option<u64> {
        happens(self.reorder, faults.reorder)
            .then(|| 1 + scale(self.reorder_delay, faults.reorder_max_delay_ns))
    }
}

/// Maps a raw draw to `0..bound` (multiply-shift).
pub fn scale(draw: u64, bound: u64) -> u64 {
    ((u128::from(draw) * u128::from(bound)) >> 64) as u64
}

/// Whether a raw draw makes an event of probability `p` happen.
pub fn happens(draw: u64, p: Probability) -> bool {
    scale(draw, Probability::SCALE) < u64::from(p.ppm())
}

/// The bits a corruption may flip: in a RoCEv2 packet, the transport packet
/// minus BTH byte 4 (masked by the ICRC); otherwise the whole packet.
/// Returns `(first byte, byte count, byte to skip)`.
fn corruptible(bytes: &[u8]) -> (usize, usize, Option<usize>) {
    if let Classified::Roce(frame) = classify(bytes, Link::RawIp) {
        let transport = frame.transport();
        if frame.framing_error.is_none() && transport.len() >= roce::MIN_LEN {
            let start = frame.ip_header_bytes().len() + 8;
            return (start, transport.len(), Some(start + bth::VARIANT_BYTE));
        }
    }
    (0, bytes.len(), None)
}

/// Flips one bit of an IP packet, chosen by `draw`: in a RoCEv2 packet one
/// the ICRC covers and no router may change (the transport packet: BTH,
/// extension headers, payload, pad or the ICRC itself, never BTH byte 4,
/// which the ICRC masks), so a receiver's ICRC check always catches it; in
/// any other packet any bit. Returns its index from the start of the
/// packet (bit 0 = most significant bit of byte 0), or `None` when there is
/// no bit to flip.
pub fn flip_bit(bytes: &mut [u8], draw: u64) -> Option<usize> {
    let bit = bit_to_flip(bytes, draw)?;
    flip(bytes, bit);
    Some(bit)
}

/// The bit [`flip_bit`] would flip, without flipping it.
pub fn bit_to_flip(bytes: &[u8], draw: u64) -> Option<usize> {
    let (start, len, skip) = corruptible(bytes);
    let candidates = (len - usize::from(skip.is_some())) * 8;
    if candidates == 0 {
        return None;
    }
    let pick = scale(draw, candidates as u64) as usize;
    let mut byte = start + pick / 8;
    if skip.is_some_and(|s| byte >= s) {
        byte += 1;
    }
    Some(byte * 8 + pick % 8)
}

/// Flips bit `bit` of `bytes` (bit 0 = most significant bit of byte 0);
/// nothing if it is past the end.
pub fn flip(bytes: &mut [u8], bit: usize) {
    if let Some(byte) = bytes.get_mut(bit / 8) {
        *byte ^= 0x80 >> (bit % 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use uroce_wire::frame::FrameRepr;
    use uroce_wire::{Opcode, Psn, Qpn};

    fn packet(v6: bool, payload: &[u8]) -> Vec<u8> {
        let bth = bth::Repr::new(Opcode::RC_SEND_ONLY, Qpn::new(17), Psn::new(5), payload.len());
        let repr = roce::Repr { bth, ext: roce::ExtHeaders::default(), payload };
        let frame = if v6 {
            let addrs = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
            FrameRepr::ipv6(addrs, 0xc000, repr).unwrap()
        } else {
            FrameRepr::ipv4((Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST), 1, 0xc000, repr).unwrap()
        };
        let mut buf = vec![0; frame.buffer_len()];
        frame.emit(&mut buf).unwrap();
        buf
    }

    fn icrc_ok(bytes: &[u8]) -> Option<bool> {
        match classify(bytes, Link::RawIp) {
            Classified::Roce(frame) => Some(frame.icrc_ok()),
            Classified::Other(_) => None,
        }
    }

    /// The draw that [`scale`] maps to `k` of `bound`.
    fn draw_for(k: u64, bound: u64) -> u64 {
        (u128::from(k) << 64).div_ceil(u128::from(bound)) as u64
    }

    #[test]
    fn scale_covers_the_range() {
        assert_eq!(scale(0, 10), 0);
        assert_eq!(scale(u64::MAX, 10), 9);
        for k in 0..10 {
            assert_eq!(scale(draw_for(k, 10), 10), k);
        }
        assert!(happens(0, Probability::from_ppm(1)));
        assert!(!happens(0, Probability::NEVER));
        assert!(happens(u64::MAX, Probability::ALWAYS));
    }

    #[test]
    fn every_possible_flip_is_caught_by_the_icrc() {
        for v6 in [false, true] {
            let original = packet(v6, b"hello, fabric");
            assert_eq!(icrc_ok(&original), Some(true));
            let ip_udp_len = if v6 { 48 } else { 28 };
            let candidates = ((original.len() - ip_udp_len - 1) * 8) as u64;
            let mut hit = vec![false; original.len()];
            for k in 0..candidates {
                let mut bytes = original.clone();
                let bit = flip_bit(&mut bytes, draw_for(k, candidates)).unwrap();
                assert_ne!(bytes, original);
                assert_eq!(icrc_ok(&bytes), Some(false), "v6={v6} bit {bit}");
                hit[bit / 8] = true;
            }
            let hit_bytes: Vec<usize> = (0..hit.len()).filter(|&i| hit[i]).collect();
            let expected: Vec<usize> =
                (ip_udp_len..original.len()).filter(|&i| i != ip_udp_len + 4).collect();
            assert_eq!(hit_bytes, expected, "v6={v6}");
        }
    }

    #[test]
    fn other_packets_flip_anywhere_and_empty_ones_not_at_all() {
        let mut bytes = vec![0u8; 3];
        assert_eq!(flip_bit(&mut bytes, u64::MAX), Some(23));
        assert_eq!(bytes, [0, 0, 1]);
        assert_eq!(flip_bit(&mut [], 0), None);
    }

    #[test]
    fn a_fate_is_ten_draws_and_decides_by_the_configuration() {
        let mut rng = SimRng::new(5);
        let mut again = rng.clone();
        let fate = Fate::draw(&mut rng);
        for _ in 0..10 {
            again.next_u64();
        }
        assert_eq!(rng, again, "ten draws");
        let mut skipped = SimRng::new(5);
        let none = Fate::draw_under(&mut skipped, &FaultConfig::NONE);
        assert_eq!(skipped, rng, "a fate that cannot matter steps past the same ten draws");
        assert!(!none.lost(&FaultConfig::NONE) && !none.duplicated(&FaultConfig::NONE));
        let mut drawn = SimRng::new(5);
        let lossy = FaultConfig { loss: Probability::from_ppm(1), ..FaultConfig::NONE };
        assert_eq!(Fate::draw_under(&mut drawn, &lossy).loss, fate.loss);
        let never = FaultConfig::NONE;
        assert!(!fate.lost(&never) && !fate.duplicated(&never));
        let mut bytes = packet(false, b"x");
        assert_eq!(fate.copies[0].corrupt(&never, &mut bytes), None);
        assert_eq!(fate.copies[0].reorder_delay_ns(&never), None);
        let always = FaultConfig {
            loss: Probability::ALWAYS,
            duplicate: Probability::ALWAYS,
            reorder: Probability::ALWAYS,
            reorder_max_delay_ns: 10,
            corrupt: Probability::ALWAYS,
            mtu_bytes: None,
        };
        assert!(fate.lost(&always) && fate.duplicated(&always));
        assert!(fate.copies[1].corrupt(&always, &mut bytes).is_some());
        assert_eq!(icrc_ok(&bytes), Some(false));
        assert!(fate.copies[1].reorder_delay_ns(&always).is_some_and(|d| (1..=10).contains(&d)));
    }
}
