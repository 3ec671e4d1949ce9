//! The link host's neighbour table: IP address to MAC, learned by
//! snooping received frames, and the frames that ask for a missing one.

use core::net::IpAddr;
use std::collections::HashMap;
use uroce_wire::ethernet::{self, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use uroce_wire::{arp, ipv4, ipv6, ndp};

/// Entries kept at most (a link segment's hosts; the oldest learned goes
/// first when full).
const TABLE_LIMIT: usize = 1024;

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
        if usable && ethernet::is_unicast(mac) {
            learned.push(Learned { ip, mac, trust });
        }
    };
    match ethertype {
        // Ethernet/IPv4 ARP: the sender's addresses, request or reply.
        ETHERTYPE_ARP => {
            let Ok(message) = arp::Packet::new_checked(payload).and_then(|p| arp::Repr::parse(&p))
            else {
                return learned;
            };
            let for_us = own_ips.contains(&IpAddr::V4(message.target_ip))
                || (message.operation == arp::Operation::Reply && to_us);
            let trust = if for_us { Trust::Resolution } else { Trust::Snooped };
            push(IpAddr::V4(message.sender_ip), message.sender_mac, trust);
        }
        ETHERTYPE_IPV4 if to_us => {
            if let Ok(ip) = ipv4::Packet::new_checked(payload) {
                if ip.verify_checksum() {
                    push(IpAddr::V4(ip.source()), source_mac, Trust::Snooped);
                }
            }
        }
        ETHERTYPE_IPV6 => {
            let Ok(ip) = ipv6::Packet::new_checked(payload) else { return learned };
            if ip.check_version().is_err() {
                return learned;
            }
            let source = ip.source();
            if to_us {
                push(IpAddr::V6(source), source_mac, Trust::Snooped);
            }
            // Neighbour discovery messages carry no extension headers and
            // always arrive with hop limit 255 (RFC 4861).
            if ip.next_header() != ipv6::NEXT_HEADER_ICMPV6 || ip.hop_limit() != ndp::HOP_LIMIT {
                return learned;
            }
            let Ok(message) = ndp::Packet::new_checked(ip.payload()) else { return learned };
            let (kind, ip) = match message.msg_type() {
                ndp::NEIGHBOR_SOLICITATION => (ndp::OPTION_SOURCE_LINK_ADDR, source),
                _ => (ndp::OPTION_TARGET_LINK_ADDR, message.target()),
            };
            for mac in message.link_layer_addrs(kind) {
                push(IpAddr::V6(ip), mac, Trust::Resolution);
            }
        }
        _ => {}
    }
    learned
}
