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

/// Length of the masked pseudo-header that stands in for the LRH.
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
    let mut hasher = Hasher::new();
    hasher.update(&LRH_STANDIN);
    hash_masked_ip(&mut hasher, ip_header)?;

    let mut udp = [0u8; UDP_HEADER_LEN];
    udp.copy_from_slice(&udp_header[..UDP_HEADER_LEN]);
    udp[6] = 0xff;
    udp[7] = 0xff;
    hasher.update(&udp);

    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(&transport[..BTH_LEN]);
    bth[crate::bth::VARIANT_BYTE] = 0xff;
    hasher.update(&bth);
    hasher.update(&transport[BTH_LEN..]);
    Some(hasher.finalize())
}

fn hash_masked_ip(hasher: &mut Hasher, ip_header: &[u8]) -> Option<()> {
    match ip_header.first()? >> 4 {
        4 => {
            let len = ip_header.len();
            if !(20..=MAX_IPV4_HEADER_LEN).contains(&len) {
                return None;
            }
            let mut ip = [0u8; MAX_IPV4_HEADER_LEN];
            ip[..len].copy_from_slice(ip_header);
            ip[1] = 0xff; // TOS (DSCP + ECN)
            ip[8] = 0xff; // TTL
            ip[10] = 0xff; // header checksum
            ip[11] = 0xff;
            hasher.update(&ip[..len]);
        }
        6 => {
            if ip_header.len() != IPV6_HEADER_LEN {
                return None;
            }
            let mut ip = [0u8; IPV6_HEADER_LEN];
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0f; // traffic class, high nibble
            ip[1] = 0xff; // traffic class, low nibble + flow label
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
            hasher.update(&ip);
        }
        _ => return None,
    }
    Some(())
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
