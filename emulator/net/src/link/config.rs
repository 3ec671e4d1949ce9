//! The L2 transport's settings (`UROCE_LINK`, `UROCE_TAP`, `UROCE_MTU`)
//! and what its host counts.

use core::net::SocketAddr;

/// Rxe's rule for the path MTU of a link: the largest IB MTU that fits in
/// the link MTU less 96 bytes of headers (1500 gives 1024, 4200 gives
/// 4096); `None` below 256 + 96.
pub fn path_mtu_for_link(link_mtu: u32) -> Option<uroce_device::types::Mtu> {
    use uroce_device::types::Mtu;
    let room = link_mtu.checked_sub(96)?;
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512, Mtu::Mtu256]
        .into_iter()
        .find(|mtu| mtu.bytes() <= room)
}

/// How the device joins its link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkAttach {
    /// One Ethernet frame per UDP datagram between two local sockets
    /// (QEMU's `-netdev socket,udp=...` convention: no length prefix, no
    /// FCS; `UROCE_LINK`).
    Udp {
        /// Where this host receives its frames.
        local: SocketAddr,
        /// Where the other end of the link (a VM, another uroce) receives.
        remote: SocketAddr,
    },
    /// A Linux TAP interface (`UROCE_TAP`): one frame per read or write on
    /// `/dev/net/tun`.
    Tap {
        /// The interface's name.
        name: String,
    },
}

/// The L2 transport's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// Where the link's frames travel.
    pub attach: LinkAttach,
    /// The device address's prefix length: which addresses are on-link.
    pub prefix_len: u8,
    /// The link's IP MTU in bytes (the Ethernet payload).
    pub mtu: u32,
}

impl LinkConfig {
    /// The default link MTU (Ethernet's).
    pub const DEFAULT_MTU: u32 = 1500;

    /// Parses `UROCE_LINK`'s `<local ip:port>,<remote ip:port>`.
    pub fn parse_endpoints(text: &str) -> Result<(SocketAddr, SocketAddr), String> {
        let (local, remote) = text.split_once(',').ok_or_else(|| {
            format!("UROCE_LINK=`{text}`: expected <local ip:port>,<remote ip:port>")
        })?;
        let parse = |part: &str, which: &str| -> Result<SocketAddr, String> {
            part.trim().parse().map_err(|_| {
                format!("UROCE_LINK=`{text}`: the {which} endpoint `{part}` is not an ip:port")
            })
        };
        let (local, remote) = (parse(local, "local")?, parse(remote, "remote")?);
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(format!(
                "UROCE_LINK=`{text}`: the remote endpoint needs an address and a port"
            ));
        }
        Ok((local, remote))
    }

    /// Parses `UROCE_MTU` (the link MTU in bytes).
    pub fn parse_mtu(text: &str) -> Result<u32, String> {
        let mtu: u32 = text
            .trim()
            .parse()
            .map_err(|_| format!("UROCE_MTU=`{text}` is not a number of bytes"))?;
        if !(352..=9000).contains(&mtu) {
            return Err(format!(
                "UROCE_MTU={mtu}: a link MTU is 352..=9000 bytes (path MTU 256 needs 352)"
            ));
        }
        Ok(mtu)
    }
}

/// What the link host counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames received from the link.
    pub rx_frames: u64,
    /// RoCE frames handed to the HCA.
    pub rx_roce: u64,
    /// Frames handed to the host stack (ARP, NDP, ICMP, TCP...).
    pub rx_host: u64,
    /// Frames dropped before the HCA or the host stack: runts, RoCE
    /// frames for another address or MAC, bad IP framing, a full queue.
    pub rx_dropped: u64,
    /// RoCE frames sent.
    pub tx_roce: u64,
    /// Frames the host stack sent.
    pub tx_host: u64,
    /// Neighbour resolution requests sent (ARP requests, solicitations).
    pub resolve_requests: u64,
    /// Packets dropped for want of a neighbour: held too long, the hold
    /// queue full, or the destination not on the link.
    pub tx_unresolved: u64,
    /// Neighbours in the table.
    pub neighbors: usize,
    /// TCP sockets open (listening, connected, or closing after their
    /// owner let go).
    pub tcp_sockets: usize,
}

impl LinkStats {
    /// Every counter with its name, `link_` in front (the neighbour table's
    /// and the TCP sockets' sizes are not counters, and are left out).
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("link_rx_frames", self.rx_frames),
            ("link_rx_roce", self.rx_roce),
            ("link_rx_host", self.rx_host),
            ("link_rx_dropped", self.rx_dropped),
            ("link_tx_roce", self.tx_roce),
            ("link_tx_host", self.tx_host),
            ("link_resolve_requests", self.resolve_requests),
            ("link_tx_unresolved", self.tx_unresolved),
        ]
    }
}
