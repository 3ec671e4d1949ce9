//! The internet checksum (RFC 1071): the ones' complement of the ones'
//! complement sum of 16-bit big-endian words. The one implementation in
//! uroce: the IPv4 header checksum, the UDP and ICMPv6 checksums (over a
//! pseudo-header) and the checks of received headers all use it.
//!
//! ```
//! use uroce_wire::checksum;
//! // An IPv4 header with a right checksum sums to 0xffff: its checksum is 0.
//! let header = [0x45, 0, 0, 0x30, 0xca, 0x1d, 0x40, 0, 0x40, 0x11, 0x1c, 0xa0,
//!               169, 254, 0, 1, 169, 254, 0, 2];
//! assert_eq!(checksum::checksum(&header), 0);
//! ```

use core::net::IpAddr;

/// The ones' complement sum of `bytes` as big-endian 16-bit words (an odd
/// last byte is padded with a zero), folded to 16 bits; not inverted.
pub fn sum(bytes: &[u8]) -> u16 {
    // Two words at a time: a big-endian u32 is `high << 16 | low`, and
    // 2^16 is 1 in ones' complement arithmetic, so it adds the same.
    let mut total: u64 = 0;
    let mut pairs = bytes.chunks_exact(4);
    for pair in &mut pairs {
        total += u64::from(u32::from_be_bytes([pair[0], pair[1], pair[2], pair[3]]));
    }
    let mut words = pairs.remainder().chunks_exact(2);
    for word in &mut words {
        total += u64::from(u16::from_be_bytes([word[0], word[1]]));
    }
    if let [last] = words.remainder() {
        total += u64::from(u16::from_be_bytes([*last, 0]));
    }
    fold(total)
}

/// Adds partial sums (each from [`sum`] or [`pseudo_header`]), folded.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// Folds a sum of 16-bit words (carries added back in) to 16 bits.
pub(crate) fn fold(mut total: u64) -> u16 {
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}

/// The checksum of `bytes`: the inverted [`sum`]. Over a header whose
/// checksum field holds the right value it is 0; over a header whose
/// checksum field is 0, it is the value to store.
pub fn checksum(bytes: &[u8]) -> u16 {
    !sum(bytes)
}

/// The sum of the pseudo-header the UDP, TCP and ICMPv6 checksums cover:
/// the addresses, the protocol (next header) and the upper-layer length.
/// `None` when the addresses are of different families.
pub fn pseudo_header(
    source: IpAddr,
    destination: IpAddr,
    protocol: u8,
    length: u32,
) -> Option<u16> {
    let len = length.to_be_bytes();
    match (source, destination) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Some(combine(&[sum(&s.octets()), sum(&d.octets()), u16::from(protocol), sum(&len)]))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Some(combine(&[sum(&s.octets()), sum(&d.octets()), sum(&len), u16::from(protocol)]))
        }
        _ => None,
    }
}

/// A transport checksum (UDP, ICMPv6) to store: the inverted sum of the
/// pseudo-header and the message (its checksum field 0), with a result of
/// 0 sent as `0xffff` (for UDP, 0 means "no checksum").
pub fn transport(pseudo_header: u16, message: &[u8]) -> u16 {
    match !combine(&[pseudo_header, sum(message)]) {
        0 => 0xffff,
        value => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn sum_equals_the_word_by_word_sum() {
        let naive = |bytes: &[u8]| {
            let mut total = 0u64;
            for (i, &b) in bytes.iter().enumerate() {
                total += u64::from(b) << if i % 2 == 0 { 8 } else { 0 };
            }
            fold(total)
        };
        let mut x = 0x1234_5678u32;
        let bytes: Vec<u8> = (0..300)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (x >> 16) as u8
            })
            .collect();
        for len in 0..bytes.len() {
            assert_eq!(sum(&bytes[..len]), naive(&bytes[..len]), "{len} bytes");
        }
        assert_eq!(sum(&[0xff; 40]), naive(&[0xff; 40]));
        assert_eq!(sum(&[0; 7]), 0);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2);
        // An odd byte is the high half of a last word.
        assert_eq!(sum(&[0x12]), 0x1200);
        assert_eq!(sum(&[]), 0);
        // Folding carries more than once.
        assert_eq!(sum(&[0xff; 1 << 17]), 0xffff);
    }

    #[test]
    fn pseudo_headers_of_both_families() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let p = pseudo_header(v4(10, 0, 0, 1), v4(10, 0, 0, 2), 17, 8).unwrap();
        assert_eq!(p, combine(&[0x0a00, 0x0001, 0x0a00, 0x0002, 17, 8]));
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(pseudo_header(v6, v6, 58, 32), Some(combine(&[1, 1, 32, 58])));
        assert_eq!(pseudo_header(v4(1, 2, 3, 4), v6, 17, 8), None);
    }

    #[test]
    fn a_zero_transport_checksum_is_sent_as_all_ones() {
        // A message that sums to exactly 0xffff with its pseudo-header.
        assert_eq!(transport(0xfffe, &[0, 1]), 0xffff);
        assert_eq!(transport(0, &[0x12, 0x34]), !0x1234);
    }
}
