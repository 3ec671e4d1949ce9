//! The invariant CRC (ICRC) that ends every RoCEv2 packet, computed as
//! Linux rxe computes it.
//!
//! The ICRC protects what no router may change. It is the zlib CRC-32 of:
//!
//! 1. eight bytes of 0xff (standing in for the InfiniBand LRH, which
//!    RoCEv2 does not have);
//! 2. the IP header, with the fields a router may change set to all ones:
//!    IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label
//!    and hop limit;
//! 3. the UDP header, with the checksum set to all ones;
//! 4. the BTH, with byte 4 (FECN, BECN, reserved) set to all ones;
//! 5. everything after the BTH up to the ICRC: extension headers, payload
//!    and pad.
//!
//! The 4-byte result is stored least-significant byte first.

use crc32fast::Hasher;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// The masked pseudo-header that stands in for the LRH.
const LRH_STANDIN: [u8; 8] = [0xff; 8];

/// The largest IPv4 header (IHL 15).
const MAX_IPV4_HEADER_LEN: usize = 60;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
const BTH_LEN: usize = crate::bth::HEADER_LEN;

/// Computes the ICRC of one packet.
///
/// * `ip_header`: the IPv4 header (20..=60 bytes, options included) or the
///   40-byte IPv6 header, as on the wire;
/// * `udp_header`: the 8-byte UDP header;
/// * `transport`: the BTH and everything after it up to, not including,
///   the ICRC.
///
/// Returns `None` when a slice is too short to be the header it stands for
/// or the IP version is neither 4 nor 6.
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Option<u32> {
    if udp_header.len() < UDP_HEADER_LEN || transport.len() < BTH_LEN {
        return None;
    }
    // The masked headers, and the rest when it fits, go to the CRC as one
    // contiguous run: a few long updates are much cheaper than five short
    // ones. The LRH stand-in is already in the hasher.
    let mut head = [0u8; HEAD_CAPACITY];
    let mut n = masked_ip(ip_header, &mut head)?;

    head[n..n + UDP_HEADER_LEN].copy_from_slice(&udp_header[..UDP_HEADER_LEN]);
    head[n + 6] = 0xff;
    head[n + 7] = 0xff;
    n += UDP_HEADER_LEN;

    head[n..n + BTH_LEN].copy_from_slice(&transport[..BTH_LEN]);
    head[n + crate::bth::VARIANT_BYTE] = 0xff;
    n += BTH_LEN;

    let rest = &transport[BTH_LEN..];
    let mut hasher = after_lrh_standin();
    if rest.len() <= HEAD_CAPACITY - n {
        crate::copy::copy_short(&mut head[n..n + rest.len()], rest);
        hasher.update(&head[..n + rest.len()]);
    } else {
        hasher.update(&head[..n]);
        hasher.update(rest);
    }
    Some(hasher.finalize())
}

/// A CRC-32 hasher that has taken the LRH stand-in (the same state for
/// every packet), made once and copied: `Hasher::new` also looks up the
/// CPU's features on every call.
fn after_lrh_standin() -> Hasher {
    static AFTER: std::sync::OnceLock<Hasher> = std::sync::OnceLock::new();
    AFTER
        .get_or_init(|| {
            let mut hasher = Hasher::new();
            hasher.update(&LRH_STANDIN);
            hasher
        })
        .clone()
}

/// Room for the largest IP header, the UDP header and the BTH (80 bytes),
/// and a small packet's rest (an ACK's AETH, a short SEND's payload).
const HEAD_CAPACITY: usize = 128;

/// Copies the IP header into `out` with the fields a router may change
/// set to all ones; returns its length.
fn masked_ip(ip_header: &[u8], out: &mut [u8]) -> Option<usize> {
    match ip_header.first()? >> 4 {
        4 => {
            let len = ip_header.len();
            if !(20..=MAX_IPV4_HEADER_LEN).contains(&len) {
                return None;
            }
            let ip = &mut out[..len];
            match <&[u8; 20]>::try_from(ip_header) {
                // The usual header, without options: a fixed-size copy.
                Ok(plain) => ip.copy_from_slice(plain),
                Err(_) => ip.copy_from_slice(ip_header),
            }
            ip[1] = 0xff; // TOS (DSCP + ECN)
            ip[8] = 0xff; // TTL
            ip[10] = 0xff; // header checksum
            ip[11] = 0xff;
            Some(len)
        }
        6 => {
            if ip_header.len() != IPV6_HEADER_LEN {
                return None;
            }
            let ip = &mut out[..IPV6_HEADER_LEN];
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0f; // traffic class, high nibble
            ip[1] = 0xff; // traffic class, low nibble + flow label
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
            Some(IPV6_HEADER_LEN)
        }
        _ => None,
    }
}

/// Reads a stored ICRC (least-significant byte first).
pub fn read(trailer: &[u8]) -> Option<u32> {
    let bytes: [u8; ICRC_LEN] = trailer.get(..ICRC_LEN)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes))
}

/// Writes an ICRC into the 4-byte trailer.
pub fn write(trailer: &mut [u8], icrc: u32) {
    trailer[..ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ICRC as the module's doc states it, one piece at a time.
    fn reference(ip: &[u8], udp: &[u8], transport: &[u8]) -> u32 {
        let mut h = Hasher::new();
        h.update(&[0xff; 8]);
        let mut ip = ip.to_vec();
        if ip[0] >> 4 == 4 {
            for i in [1, 8, 10, 11] {
                ip[i] = 0xff;
            }
        } else {
            ip[0] |= 0x0f;
            for i in [1, 2, 3, 7] {
                ip[i] = 0xff;
            }
        }
        h.update(&ip);
        let mut udp = udp.to_vec();
        udp[6] = 0xff;
        udp[7] = 0xff;
        h.update(&udp);
        let mut t = transport.to_vec();
        t[crate::bth::VARIANT_BYTE] = 0xff;
        h.update(&t);
        h.finalize()
    }

    #[test]
    fn compute_matches_the_piecewise_definition_at_every_length() {
        let bytes: Vec<u8> =
            (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut ip4 = bytes[..24].to_vec();
        ip4[0] = 0x46;
        let mut ip6 = bytes[100..140].to_vec();
        ip6[0] = 0x60;
        let udp = &bytes[200..208];
        for ip in [&ip4[..], &ip6[..]] {
            for len in (BTH_LEN..400).chain([1000, 4096 + 28]) {
                let transport = &bytes[300..300 + len];
                assert_eq!(compute(ip, udp, transport), Some(reference(ip, udp, transport)));
            }
        }
        assert_eq!(compute(&[0x50; 20], udp, &bytes[..BTH_LEN]), None);
        assert_eq!(compute(&ip4[..19], udp, &bytes[..BTH_LEN]), None);
        assert_eq!(compute(&ip4, &udp[..7], &bytes[..BTH_LEN]), None);
        assert_eq!(compute(&ip4, udp, &bytes[..BTH_LEN - 1]), None);
    }
}
