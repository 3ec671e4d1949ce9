//! The link host's neighbour table: IP address to MAC, learned by
//! snooping received frames, and the frames that ask for a missing one.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::HashMap;

use super::{ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};

/// Entries kept at most (a link segment's hosts; the oldest learned goes
/// first when full).
const TABLE_LIMIT: usize = 1024;
const ICMPV6: u8 = 58;
const NEIGHBOR_SOLICITATION: u8 = 135;
const NEIGHBOR_ADVERTISEMENT: u8 = 136;
const OPTION_SOURCE_LINK_ADDR: u8 = 1;
const OPTION_TARGET_LINK_ADDR: u8 = 2;

/// How much a mapping seen on the wire may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trust {
    /// Resolution traffic meant for this host (an ARP request for its
    /// address, a reply to its MAC, a neighbour solicitation or
    /// advertisement): creates or replaces the entry, as Linux does.
    Resolution,
    /// Anything else (another host's ARP, the source of an IP packet to
    /// this host): refreshes an entry with the same MAC, or creates a
    /// missing one, but never replaces a MAC.
    Snooped,
}

/// A mapping seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Learned {
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub trust: Trust,
}

/// IP address to MAC. Entries do not age: a host that changed its MAC
/// announces it with the ARP or NDP traffic that precedes any connection.
/// When the table is full the least recently used entry goes (learning and
/// sending to a neighbour both use it), so a flood of new senders does not
/// push out the peers the HCA is talking to.
#[derive(Debug, Default)]
pub(super) struct NeighborTable {
    entries: HashMap<IpAddr, ([u8; 6], u64)>,
    clock: u64,
}

impl NeighborTable {
    /// The MAC of `ip`, marking the entry used.
    pub fn get(&mut self, ip: IpAddr) -> Option<[u8; 6]> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(&ip).map(|(mac, used)| {
            *used = clock;
            *mac
        })
    }

    /// The MAC of `ip`, without marking it.
    pub fn peek(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.entries.get(&ip).map(|&(mac, _)| mac)
    }

    /// Learns `ip` at `mac`, as far as `trust` allows; returns whether
    /// the table now maps `ip` to `mac`.
    pub fn insert(&mut self, ip: IpAddr, mac: [u8; 6], trust: Trust) -> bool {
        self.clock += 1;
        if let Some((known, used)) = self.entries.get_mut(&ip) {
            if *known != mac && trust == Trust::Snooped {
                return false;
            }
            *known = mac;
            *used = self.clock;
            return true;
        }
        if self.entries.len() >= TABLE_LIMIT {
            if let Some(oldest) =
                self.entries.iter().min_by_key(|(_, &(_, used))| used).map(|(k, _)| *k)
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(ip, (mac, self.clock));
        true
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

fn is_unicast_mac(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

/// What a received frame tells about its sender (and, for a neighbour
/// advertisement, its target): at most two mappings. `own` is this host's
/// MAC and addresses: resolution traffic for them is trusted, and the
/// source of an IP packet is learned only from a frame to this host's MAC
/// with a valid IPv4 header checksum.
pub(super) fn snoop(
    own_mac: [u8; 6],
    own_ips: [IpAddr; 2],
    destination_mac: [u8; 6],
    ethertype: u16,
    source_mac: [u8; 6],
    payload: &[u8],
) -> Vec<Learned> {
    let mut learned = Vec::new();
    let to_us = destination_mac == own_mac;
    let mut push = |ip: IpAddr, mac: [u8; 6], trust: Trust| {
        let usable = match ip {
            IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_broadcast() && !v4.is_multicast(),
            IpAddr::V6(v6) => !v6.is_unspecified() && !v6.is_multicast(),
        };
        if usable && is_unicast_mac(mac) {
            learned.push(Learned { ip, mac, trust });
        }
    };
    match ethertype {
        // Ethernet/IPv4 ARP: the sender's addresses, request or reply.
        ETHERTYPE_ARP if payload.len() >= 28 && payload[0..6] == [0, 1, 0x08, 0x00, 6, 4] => {
            let mac: [u8; 6] = payload[8..14].try_into().expect("6 bytes");
            let ip: [u8; 4] = payload[14..18].try_into().expect("4 bytes");
            let target: [u8; 4] = payload[24..28].try_into().expect("4 bytes");
            let for_us =
                own_ips.contains(&IpAddr::V4(Ipv4Addr::from(target))) || (payload[7] == 2 && to_us);
            let trust = if for_us { Trust::Resolution } else { Trust::Snooped };
            push(IpAddr::V4(Ipv4Addr::from(ip)), mac, trust);
        }
        ETHERTYPE_IPV4 if to_us && payload.len() >= 20 && payload[0] >> 4 == 4 => {
            let header_len = usize::from(payload[0] & 0x0f) * 4;
            let valid = header_len >= 20
                && payload.len() >= header_len
                && internet_checksum(&payload[..header_len]) == 0;
            if valid {
                let ip: [u8; 4] = payload[12..16].try_into().expect("4 bytes");
                push(IpAddr::V4(Ipv4Addr::from(ip)), source_mac, Trust::Snooped);
            }
        }
        ETHERTYPE_IPV6 => {
            if payload.len() < 40 || payload[0] >> 4 != 6 {
                return learned;
            }
            let source: [u8; 16] = payload[8..24].try_into().expect("16 bytes");
            let source = Ipv6Addr::from(source);
            if to_us {
                push(IpAddr::V6(source), source_mac, Trust::Snooped);
            }
            let end =
                (40 + usize::from(u16::from_be_bytes([payload[4], payload[5]]))).min(payload.len());
            let icmp = &payload[40..end];
            // Neighbour discovery messages carry no extension headers and
            // always arrive with hop limit 255 (RFC 4861).
            if payload[6] != ICMPV6 || payload[7] != 255 || icmp.len() < 24 {
                return learned;
            }
            let target: [u8; 16] = icmp[8..24].try_into().expect("16 bytes");
            let wanted = match icmp[0] {
                NEIGHBOR_SOLICITATION => OPTION_SOURCE_LINK_ADDR,
                NEIGHBOR_ADVERTISEMENT => OPTION_TARGET_LINK_ADDR,
                _ => return learned,
            };
            let mut options = &icmp[24..];
            while options.len() >= 8 {
                let len = usize::from(options[1]) * 8;
                if len == 0 || len > options.len() {
                    break;
                }
                if options[0] == wanted {
                    let mac: [u8; 6] = options[2..8].try_into().expect("6 bytes");
                    let ip = if wanted == OPTION_SOURCE_LINK_ADDR {
                        source
                    } else {
                        Ipv6Addr::from(target)
                    };
                    push(IpAddr::V6(ip), mac, Trust::Resolution);
                }
                options = &options[len..];
            }
        }
        _ => {}
    }
    learned
}

/// The ones' complement sum of `bytes` (16-bit words), folded: 0 over an
/// IPv4 header whose checksum is right.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ARP request for `target` (42 bytes, unpadded, as Linux and smoltcp
/// send on this link).
pub(super) fn arp_request(mac: [u8; 6], own: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut frame = Vec::with_capacity(42);
    frame.extend_from_slice(&[0xff; 6]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    // Ethernet, IPv4, 6-byte and 4-byte addresses, request.
    frame.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&own.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&target.octets());
    frame
}

/// A neighbour solicitation for `target`, from `source`, to its
/// solicited-node multicast group, with our link-layer address.
pub(super) fn neighbor_solicitation(mac: [u8; 6], source: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let t = target.octets();
    let group =
        Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15]]);
    let mut icmp = Vec::with_capacity(32);
    icmp.extend_from_slice(&[NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0]);
    icmp.extend_from_slice(&t);
    icmp.extend_from_slice(&[OPTION_SOURCE_LINK_ADDR, 1]);
    icmp.extend_from_slice(&mac);
    // The ICMPv6 checksum covers a pseudo-header: addresses, length, 58.
    let mut sum = 0u32;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    };
    add(&source.octets());
    add(&group.octets());
    add(&(icmp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(&icmp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    icmp[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());

    let mut frame = Vec::with_capacity(14 + 40 + icmp.len());
    frame.extend_from_slice(&[0x33, 0x33, 0xff, t[13], t[14], t[15]]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[ICMPV6, 255]);
    frame.extend_from_slice(&source.octets());
    frame.extend_from_slice(&group.octets());
    frame.extend_from_slice(&icmp);
    frame
}
