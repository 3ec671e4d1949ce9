//! The L2 transport's host: uroce as a host on an Ethernet segment of raw
//! frames, with no kernel stack behind it.
//!
//! Over plain UDP the kernel writes the IP header a RoCE packet's ICRC
//! covers, and a Linux rxe peer writes IPv4 IDs a UDP socket never shows:
//! the two cannot check each other's ICRCs. On a link of raw frames uroce
//! sees and writes every byte. [`LinkHost`] is what a host on that link
//! needs besides the HCA, without any I/O of its own (the runtime in
//! [`crate::udp`] moves its frames):
//!
//! - **Demux** ([`LinkHost::ingress`]): IPv4/IPv6 UDP to port 4791 for the
//!   device's address goes to the HCA as the IP packet exactly as received
//!   (cut to the IP length: Ethernet may pad), so the ICRC is checked over
//!   the peer's own IPv4 ID. Everything else goes to a `smoltcp` interface:
//!   ARP and neighbour discovery replies, ICMP echo, MLD, and the TCP
//!   connections of the tools' out-of-band exchange.
//! - **Neighbours.** smoltcp's neighbour cache is private, so RoCE frames
//!   get their destination MAC from a table of the host's own, filled by
//!   snooping every received frame (ARP senders, NDP link-layer options,
//!   the source MAC of on-link IP traffic). On a miss the host asks (ARP
//!   request or neighbour solicitation, at most once a second, three
//!   tries) and holds up to 212,992 bytes of packets per destination
//!   meanwhile, as Linux does (`unres_qlen_bytes`); RC retransmission
//!   covers what is dropped, and a UC message survives its first ARP.
//! - **Frames out** ([`LinkHost::encapsulate`]): the HCA's IP packet behind
//!   a 14-byte Ethernet header, unpadded, as rxe and smoltcp send on this
//!   link.

mod config;
mod device;
mod neighbor;

pub use config::{path_mtu_for_link, LinkAttach, LinkConfig, LinkStats};

use core::net::{IpAddr, Ipv6Addr};
use device::QueueDevice;
use neighbor::{Learned, NeighborTable};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use std::collections::{HashMap, VecDeque};
use uroce_hca::time::Instant;
use uroce_wire::ethernet::{self, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use uroce_wire::{arp, ipv4, ipv6, ndp, udp, ROCEV2_UDP_PORT};

/// Bytes of packets held per unresolved destination: Linux's default
/// `unres_qlen_bytes` (212,992; what `unres_qlen` reads, 101, is derived
/// from it). A UC message of a few packets must survive its first ARP: UC
/// never resends what was dropped.
const HELD_BYTES_PER_DESTINATION: usize = 212_992;
/// Between two resolution requests for one destination.
const RESOLVE_INTERVAL_NS: u64 = 1_000_000_000;
/// Requests before the held packets are dropped.
const RESOLVE_TRIES: u32 = 3;
/// Frames waiting for smoltcp at most (it runs after every receive batch).
const HOST_QUEUE_LIMIT: usize = 512;
/// Out-of-band TCP socket buffers (the tools' exchanges are small).
const TCP_BUFFER_BYTES: usize = 64 * 1024;
/// How long a released TCP socket may take to close (Linux's
/// `tcp_fin_timeout`): a peer that vanished leaves it in FIN-WAIT forever.
const ORPHAN_LIMIT_NS: u64 = 60_000_000_000;

/// What became of a received frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Ingress<'a> {
    /// A RoCE packet for the HCA: the IP packet, cut to its IP length.
    Roce(&'a [u8]),
    /// Taken by the host stack (run [`LinkHost::poll`]).
    Host,
    /// Dropped (counted).
    Dropped,
}

/// What became of a packet to send.
#[derive(Debug, PartialEq, Eq)]
pub enum Egress {
    /// The frame is in the buffer.
    Ready,
    /// Held until the destination's MAC is known.
    Held,
    /// Dropped (counted): the destination is not on the link, or the hold
    /// queue was full.
    Dropped,
}

/// Packets held for their destination's MAC.
struct Unresolved {
    packets: VecDeque<Vec<u8>>,
    /// The bytes of `packets`.
    held_bytes: usize,
    last_request_ns: u64,
    requests: u32,
}

/// The link host (see the module docs).
pub struct LinkHost {
    mac: [u8; 6],
    addr: IpAddr,
    prefix_len: u8,
    link_local: Ipv6Addr,
    iface: Interface,
    device: QueueDevice,
    sockets: SocketSet<'static>,
    neighbors: NeighborTable,
    unresolved: HashMap<IpAddr, Unresolved>,
    /// Frames ready to leave (host stack, resolution, released packets).
    outbox: VecDeque<Vec<u8>>,
    /// TCP sockets their owner let go of, and when: removed once closed,
    /// or aborted after [`ORPHAN_LIMIT_NS`] (a peer that vanished).
    orphans: Vec<(SocketHandle, u64)>,
    /// The time of the last [`LinkHost::poll`].
    now_ns: u64,
    stats: LinkStats,
}

impl core::fmt::Debug for LinkHost {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkHost").field("addr", &self.addr).field("mac", &self.mac).finish()
    }
}

/// smoltcp's clock from the runtime's.
fn smol_now(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros((now.as_nanos() / 1_000) as i64)
}

/// The IPv6 link-local address a MAC gives (modified EUI-64): the same
/// one rxe's GID index 0 holds.
pub fn link_local_for(mac: [u8; 6]) -> Ipv6Addr {
    ipv6::link_local_from_mac(mac)
}

impl LinkHost {
    /// A host with `mac` and `addr/prefix_len` on a link of `ip_mtu`;
    /// `seed` seeds smoltcp (TCP initial sequence numbers, ports).
    pub fn new(
        mac: [u8; 6],
        addr: IpAddr,
        prefix_len: u8,
        ip_mtu: u32,
        seed: u64,
        now: Instant,
    ) -> LinkHost {
        let mut device =
            QueueDevice { rx: VecDeque::new(), tx: VecDeque::new(), ip_mtu: ip_mtu as usize };
        let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        config.random_seed = seed;
        let mut iface = Interface::new(config, &mut device, smol_now(now));
        let link_local = link_local_for(mac);
        let max_prefix = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = prefix_len.min(max_prefix);
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(IpAddress::from(addr), prefix_len));
            if addr != IpAddr::V6(link_local) {
                let _ = addrs.push(IpCidr::new(IpAddress::Ipv6(link_local), 64));
            }
        });
        LinkHost {
            mac,
            addr,
            prefix_len,
            link_local,
            iface,
            device,
            sockets: SocketSet::new(Vec::new()),
            neighbors: NeighborTable::default(),
            unresolved: HashMap::new(),
            outbox: VecDeque::new(),
            orphans: Vec::new(),
            now_ns: now.as_nanos(),
            stats: LinkStats::default(),
        }
    }

    /// The host's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// What the host counted.
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            neighbors: self.neighbors.len(),
            tcp_sockets: self.sockets.iter().count(),
            ..self.stats.clone()
        }
    }

    /// The MAC the host knows for `ip`, if any.
    pub fn neighbor(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.neighbors.peek(ip)
    }

    /// Whether `ip` is on the link (and so reachable without a router).
    fn on_link(&self, ip: IpAddr) -> bool {
        match (ip, self.addr) {
            (IpAddr::V4(ip), IpAddr::V4(own)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix_len)).unwrap_or(0);
                u32::from(ip) & mask == u32::from(own) & mask
            }
            (IpAddr::V6(ip), _) if ip.segments()[0] & 0xffc0 == 0xfe80 => true,
            (IpAddr::V6(ip), IpAddr::V6(own)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix_len)).unwrap_or(0);
                u128::from(ip) & mask == u128::from(own) & mask
            }
            _ => false,
        }
    }

    fn is_own(&self, ip: IpAddr) -> bool {
        ip == self.addr || ip == IpAddr::V6(self.link_local)
    }

    /// Takes one frame from the link: a RoCE packet for the HCA, or food
    /// for the host stack. Learns neighbours from every frame.
    pub fn ingress<'a>(&mut self, frame: &'a [u8]) -> Ingress<'a> {
        self.stats.rx_frames += 1;
        let Ok(header) = ethernet::Packet::new_checked(frame) else {
            self.stats.rx_dropped += 1;
            return Ingress::Dropped;
        };
        let (destination_mac, source_mac) = (header.destination(), header.source());
        let ethertype = header.ether_type();
        if !matches!(ethertype, ETHERTYPE_ARP | ETHERTYPE_IPV4 | ETHERTYPE_IPV6) {
            // VLAN tags, LLDP, anything else: nothing here speaks it.
            self.stats.rx_dropped += 1;
            return Ingress::Dropped;
        }
        let payload = &frame[ethernet::HEADER_LEN..];
        let own_ips = [self.addr, IpAddr::V6(self.link_local)];
        let learned =
            neighbor::snoop(self.mac, own_ips, destination_mac, ethertype, source_mac, payload);
        for learned in learned {
            self.learn(learned);
        }
        if let Some(packet) = roce_packet(ethertype, payload) {
            let destination = packet.destination;
            // A multicast packet under its group's MAC goes to the HCA,
            // which keeps it if a QP is attached to the group.
            let mine = if destination.is_multicast() {
                destination_mac == ethernet::multicast_mac(destination)
            } else {
                destination_mac == self.mac && self.is_own(destination)
            };
            if !mine {
                self.stats.rx_dropped += 1;
                return Ingress::Dropped;
            }
            self.stats.rx_roce += 1;
            return Ingress::Roce(&payload[..packet.len]);
        }
        if self.device.rx.len() >= HOST_QUEUE_LIMIT {
            self.stats.rx_dropped += 1;
            return Ingress::Dropped;
        }
        self.stats.rx_host += 1;
        self.device.rx.push_back(frame.to_vec());
        Ingress::Host
    }

    fn learn(&mut self, learned: Learned) {
        if !self.on_link(learned.ip) || self.is_own(learned.ip) {
            return;
        }
        if !self.neighbors.insert(learned.ip, learned.mac, learned.trust) {
            return;
        }
        // Packets held for it can leave now.
        if let Some(held) = self.unresolved.remove(&learned.ip) {
            for packet in held.packets {
                let mut frame = Vec::with_capacity(ethernet::HEADER_LEN + packet.len());
                self.write_frame(&mut frame, learned.mac, &packet);
                self.stats.tx_roce += 1;
                self.outbox.push_back(frame);
            }
        }
    }

    fn write_frame(&self, out: &mut Vec<u8>, destination_mac: [u8; 6], packet: &[u8]) {
        let header = ethernet::Repr {
            source: self.mac,
            destination: destination_mac,
            ether_type: ethernet::ether_type_of_ip(packet),
        };
        header.frame_into(packet, out);
    }

    /// Puts the HCA's IP packet to `destination` in an Ethernet frame in
    /// `out`, or holds it while the destination's MAC is asked for.
    pub fn encapsulate(
        &mut self,
        now: Instant,
        packet: &[u8],
        destination: IpAddr,
        out: &mut Vec<u8>,
    ) -> Egress {
        if destination.is_multicast() {
            // No resolution: the group's MAC (the link's other hosts
            // filter by it, and their HCAs by their groups).
            self.write_frame(out, ethernet::multicast_mac(destination), packet);
            self.stats.tx_roce += 1;
            return Egress::Ready;
        }
        if let Some(mac) = self.neighbors.get(destination) {
            self.write_frame(out, mac, packet);
            self.stats.tx_roce += 1;
            return Egress::Ready;
        }
        if !self.on_link(destination) {
            self.stats.tx_unresolved += 1;
            return Egress::Dropped;
        }
        let now_ns = now.as_nanos();
        let entry = self.unresolved.entry(destination).or_insert(Unresolved {
            packets: VecDeque::new(),
            held_bytes: 0,
            last_request_ns: 0,
            requests: 0,
        });
        let mut verdict = Egress::Held;
        entry.held_bytes += packet.len();
        entry.packets.push_back(packet.to_vec());
        while entry.held_bytes > HELD_BYTES_PER_DESTINATION {
            let Some(oldest) = entry.packets.pop_front() else { break };
            entry.held_bytes -= oldest.len();
            self.stats.tx_unresolved += 1;
            verdict = Egress::Dropped;
        }
        if entry.requests == 0 {
            entry.requests = 1;
            entry.last_request_ns = now_ns;
            self.send_resolution_request(destination);
        }
        verdict
    }

    /// Asks the link for `ip`'s MAC.
    fn send_resolution_request(&mut self, ip: IpAddr) {
        let frame = match (ip, self.addr) {
            (IpAddr::V4(target), IpAddr::V4(own)) => {
                arp::Repr::request(self.mac, own, target).to_frame()
            }
            (IpAddr::V6(target), _) => {
                // From the address the peer will answer to on-link.
                let source = match self.addr {
                    IpAddr::V6(own) if !target.is_unicast_link_local() => own,
                    _ => self.link_local,
                };
                ndp::solicitation_frame(self.mac, source, target)
            }
            _ => return,
        };
        self.stats.resolve_requests += 1;
        self.outbox.push_back(frame);
    }

    /// Runs the host stack over the frames it was given and its timers,
    /// and retries resolution; its frames join the outbox.
    pub fn poll(&mut self, now: Instant) {
        let now_ns = now.as_nanos();
        self.now_ns = self.now_ns.max(now_ns);
        let mut retry = Vec::new();
        let mut dropped = 0;
        self.unresolved.retain(|&ip, entry| {
            if now_ns.saturating_sub(entry.last_request_ns) < RESOLVE_INTERVAL_NS {
                return true;
            }
            if entry.requests >= RESOLVE_TRIES {
                dropped += entry.packets.len() as u64;
                return false;
            }
            entry.requests += 1;
            entry.last_request_ns = now_ns;
            retry.push(ip);
            true
        });
        self.stats.tx_unresolved += dropped;
        for ip in retry {
            self.send_resolution_request(ip);
        }
        let _ = self.iface.poll(smol_now(now), &mut self.device, &mut self.sockets);
        let Self { device, outbox, stats, .. } = self;
        stats.tx_host += device.tx.len() as u64;
        outbox.extend(device.tx.drain(..));
        self.reap_orphans();
    }

    /// Frames ready to leave, oldest first.
    pub fn take_frame(&mut self) -> Option<Vec<u8>> {
        self.outbox.pop_front()
    }

    /// Whether frames wait in the outbox or for the host stack.
    pub fn has_work(&self) -> bool {
        !self.outbox.is_empty() || !self.device.rx.is_empty()
    }

    /// When the host next needs [`LinkHost::poll`] by itself (a TCP
    /// timer, a resolution retry), in runtime nanoseconds.
    pub fn poll_at_ns(&mut self, now: Instant) -> Option<u64> {
        let smol = self
            .iface
            .poll_at(smol_now(now), &self.sockets)
            .map(|at| u64::try_from(at.total_micros()).unwrap_or(0).saturating_mul(1_000));
        let retry =
            self.unresolved.values().map(|entry| entry.last_request_ns + RESOLVE_INTERVAL_NS).min();
        match (smol, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn new_tcp_socket() -> tcp::Socket<'static> {
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; TCP_BUFFER_BYTES]),
            tcp::SocketBuffer::new(vec![0; TCP_BUFFER_BYTES]),
        );
        // The exchanges are request/response: no reason to hold segments
        // or ACKs back.
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        socket
    }

    /// A TCP socket listening on `port` (it takes one connection).
    pub fn tcp_listen(&mut self, port: u16) -> Result<SocketHandle, String> {
        let mut socket = Self::new_tcp_socket();
        socket.listen(port).map_err(|e| format!("listening on TCP port {port}: {e}"))?;
        Ok(self.sockets.add(socket))
    }

    /// A TCP socket connecting from `local_port` to `remote:port`.
    pub fn tcp_connect(
        &mut self,
        remote: IpAddr,
        port: u16,
        local_port: u16,
    ) -> Result<SocketHandle, String> {
        let mut socket = Self::new_tcp_socket();
        socket
            .connect(self.iface.context(), (IpAddress::from(remote), port), local_port)
            .map_err(|e| format!("connecting to {remote}:{port}: {e}"))?;
        Ok(self.sockets.add(socket))
    }

    /// The TCP socket behind `handle`.
    pub fn tcp(&mut self, handle: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(handle)
    }

    /// Lets go of a TCP socket: it closes (FIN) and is removed once
    /// closed.
    pub fn tcp_release(&mut self, handle: SocketHandle) {
        self.tcp(handle).close();
        self.orphans.push((handle, self.now_ns));
    }

    /// Removes a TCP socket at once (aborting it if still open).
    pub fn tcp_remove(&mut self, handle: SocketHandle) {
        self.tcp(handle).abort();
        self.orphans.push((handle, self.now_ns));
    }

    fn reap_orphans(&mut self) {
        let Self { sockets, orphans, now_ns, .. } = self;
        orphans.retain(|&(handle, released_ns)| {
            let socket = sockets.get_mut::<tcp::Socket>(handle);
            if now_ns.saturating_sub(released_ns) >= ORPHAN_LIMIT_NS {
                socket.abort();
            }
            let done = matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait);
            if done {
                sockets.remove(handle);
            }
            !done
        });
    }
}

/// Where a RoCE packet inside a frame's payload goes, and its IP length.
struct RocePacket {
    destination: IpAddr,
    len: usize,
}

/// Whether an Ethernet payload is a RoCEv2 packet (IPv4 or IPv6, UDP to
/// port 4791, not a fragment, lengths consistent), with its IP length.
fn roce_packet(ethertype: u16, payload: &[u8]) -> Option<RocePacket> {
    let (destination, header_len, len, protocol) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ip = ipv4::Packet::new_checked(payload).ok()?;
            if ip.is_fragment() {
                return None;
            }
            let len = usize::from(ip.total_len());
            (IpAddr::V4(ip.destination()), ip.header_len(), len, ip.protocol())
        }
        ETHERTYPE_IPV6 => {
            let ip = ipv6::Packet::new_checked(payload).ok()?;
            ip.check_version().ok()?;
            let len = ipv6::HEADER_LEN + usize::from(ip.payload_length());
            (IpAddr::V6(ip.destination()), ipv6::HEADER_LEN, len, ip.next_header())
        }
        _ => return None,
    };
    if protocol != ipv4::PROTOCOL_UDP || len < header_len + udp::HEADER_LEN || len > payload.len() {
        return None;
    }
    let datagram = udp::Packet::new_checked(&payload[header_len..]).ok()?;
    (datagram.destination_port() == ROCEV2_UDP_PORT).then_some(RocePacket { destination, len })
}

#[cfg(test)]
mod tests;
