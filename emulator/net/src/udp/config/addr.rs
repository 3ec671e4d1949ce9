//! The checks on a device address: parsing `UROCE_ADDR` and what cannot be
//! a device's address.

use crate::udp::UdpError;
use core::net::{IpAddr, Ipv4Addr};

/// Parses a device address: an IP, optionally with a `/prefix` (only the
/// L2 transport uses it).
pub fn parse_addr(text: &str) -> Result<IpAddr, UdpError> {
    parse_addr_prefix(text).map(|(ip, _)| ip)
}

/// Parses `ip[/prefix]`.
pub fn parse_addr_prefix(text: &str) -> Result<(IpAddr, Option<u8>), UdpError> {
    let bad = || UdpError::Config(format!("UROCE_ADDR=`{text}` is not an IP address[/prefix]"));
    let (ip, prefix) = match text.trim().split_once('/') {
        Some((ip, prefix)) => (ip, Some(prefix)),
        None => (text.trim(), None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let prefix = match prefix {
        Some(p) => {
            let len: u8 = p.parse().map_err(|_| bad())?;
            if len > if ip.is_ipv4() { 32 } else { 128 } {
                return Err(bad());
            }
            Some(len)
        }
        None => None,
    };
    Ok((ip, prefix))
}

/// Why `addr` cannot be a device's (unicast) address (`it is ...`), or
/// `None` if it can. Refused: the unspecified address (`0.0.0.0`, `::`), multicast, and
/// the IPv4 limited broadcast `255.255.255.255`; with an IPv4 `prefix_len`
/// below 31 (the subnet on the link), also the subnet's network and
/// broadcast addresses (host bits all zero or all one, RFC 1122 3.2.1.3;
/// a /31 has neither, RFC 3021). Everything else is accepted: loopback
/// (127.0.0.0/8, `::1`), link-local, private and public unicast, and the
/// rest of 240.0.0.0/4, which Linux assigns and routes as unicast.
pub fn device_addr_problem(addr: IpAddr, prefix_len: Option<u8>) -> Option<String> {
    if addr.is_unspecified() {
        return Some("it is the unspecified address".into());
    }
    if addr.is_multicast() {
        return Some("it is a multicast address".into());
    }
    let IpAddr::V4(v4) = addr else { return None };
    if v4.is_broadcast() {
        return Some("it is the IPv4 limited broadcast address".into());
    }
    match prefix_len {
        Some(len) if len < 31 => {
            let host_mask = u32::MAX >> len;
            let host_bits = u32::from(v4) & host_mask;
            let subnet = Ipv4Addr::from(u32::from(v4) & !host_mask);
            if host_bits == 0 {
                Some(format!("it is the network address of {subnet}/{len}"))
            } else if host_bits == host_mask {
                Some(format!("it is the broadcast address of {subnet}/{len}"))
            } else {
                None
            }
        }
        _ => None,
    }
}
