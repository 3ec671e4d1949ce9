//! What the kv example's tests on the real UDP runtime share.

use std::net::{IpAddr, Ipv4Addr};
use uroce_net::udp::{ProgressMode, UdpConfig, UdpDevice};

/// A UDP device at 127.181.`net`.`host` (this example's block), its
/// progress thread woken by events.
pub fn device(net: u8, host: u8) -> UdpDevice {
    let mut c = UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 181, net, host)));
    c.progress = ProgressMode::Event;
    UdpDevice::open(c).expect("open the UDP device")
}
