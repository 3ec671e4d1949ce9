//! The UDP transport's sockets: `addr:4791`, where every packet arrives
//! and packets settled on 4791 leave, and one socket per UDP source port
//! in use (each QP's packets leave from the port rxe computes for it), and
//! the batched sends over them (`sendmmsg`, and UDP GSO runs with
//! offload).

use super::groups::{self, GroupSockets};
use super::sys;
use super::sys::Outgoing;
use super::transport::{Queued, TxBatch};
use super::{UdpError, UdpStats};
use core::net::{IpAddr, SocketAddr};
use rustc_hash::FxHashMap;
use std::io;
use std::net::UdpSocket;
use std::ops::Range;
use std::os::fd::OwnedFd;
use uroce_hca::PacketKind;
use uroce_wire::ROCEV2_UDP_PORT;

/// Socket buffer sizes asked for (the kernel caps them at rmem_max/wmem_max).
pub const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// GSO: at most this many segments per send (the kernel's limit is 64).
const GSO_MAX_SEGMENTS: usize = super::sys_send::MAX_PARTS;
/// GSO: at most this many bytes per send (a UDP datagram's limit).
const GSO_MAX_BYTES: usize = 65_000;
/// How long a source port that could not be bound is left alone.
const PORT_RETRY_NS: u64 = 1_000_000_000;

/// The UDP transport's sockets.
pub(super) struct UdpSockets {
    /// Bound to `addr:4791`.
    main: UdpSocket,
    addr: IpAddr,
    /// UDP GSO on send (`UROCE_OFFLOAD`).
    offload: bool,
    /// The kernel refused a GSO send: offload is off from then on.
    gso_refused: bool,
    /// One socket per UDP source port in use.
    by_port: FxHashMap<u16, UdpSocket>,
    /// Ports that could not be bound (in use by another socket, or out of
    /// descriptors), and when to try again; meanwhile the HCA settles
    /// their packets on 4791.
    unbindable: FxHashMap<u16, u64>,
    /// The multicast groups the device belongs to (`groups.rs`).
    groups: GroupSockets,
    /// Readable when `main` or a group socket is (an epoll descriptor).
    ready: OwnedFd,
    /// The duplicate of `main` through which `ready` watches it, until the
    /// runtime takes it (`take_watched`).
    watched: Option<OwnedFd>,
    /// Scratch for [`UdpSockets::send`]: the batch's packets' byte ranges,
    /// and one port's messages.
    spans: Vec<Range<usize>>,
    plan: Vec<Outgoing>,
}

impl UdpSockets {
    /// Binds `addr:4791`; returns the sockets and the receive buffer the
    /// kernel granted.
    pub(super) fn open(addr: IpAddr, offload: bool) -> Result<(UdpSockets, usize), UdpError> {
        let port = ROCEV2_UDP_PORT;
        raise_file_limit();
        let socket = UdpSocket::bind(SocketAddr::new(addr, port))
            .map_err(|e| UdpError::Io(format!("binding {addr}:{port}"), e))?;
        let ipv6 = addr.is_ipv6();
        let setup = |what: &str, r: io::Result<()>| {
            r.map_err(|e| UdpError::Io(format!("{what} on {addr}:{port}"), e))
        };
        setup("setting don't-fragment", sys::set_dont_fragment(&socket, ipv6))?;
        // UDP GSO refuses sockets without checksums (EINVAL): with offload
        // the datagrams carry one (masked out of the ICRC, so harmless).
        if !offload {
            setup("turning the UDP checksum off", sys::set_no_udp_checksum(&socket, ipv6))?;
        }
        // The kernel grants at most net.core.rmem_max (doubled for its
        // bookkeeping); a small grant means bursts overflow into drops and
        // retransmissions, so the figure is reported in the stats.
        let receive_buffer_bytes = sys::set_receive_buffer(&socket, SOCKET_BUFFER_BYTES)
            .map_err(|e| UdpError::Io(format!("sizing the receive buffer on {addr}:{port}"), e))?;
        setup("sizing the send buffer", sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES))?;
        // GRO is an optimisation: a kernel without it still works.
        let _ = sys::enable_gro(&socket);
        // Without it, a multicast send takes the kernel's route (none on a
        // host with only loopback): unicast is unaffected.
        let _ = groups::set_multicast_sending(&socket, addr);
        let (ready, watched) = groups::ready_set(&socket)
            .map_err(|e| UdpError::Io(format!("watching {addr}:{port} with epoll"), e))?;
        let sockets = UdpSockets {
            main: socket,
            addr,
            offload,
            gso_refused: false,
            by_port: FxHashMap::default(),
            unbindable: FxHashMap::default(),
            groups: GroupSockets::default(),
            ready,
            watched: Some(watched),
            spans: Vec::new(),
            plan: Vec::new(),
        };
        Ok((sockets, receive_buffer_bytes))
    }

    /// Readable when a packet waits on any of the receiving sockets.
    pub(super) fn ready(&self) -> &OwnedFd {
        &self.ready
    }

    /// The descriptor through which the epoll set watches the device's
    /// socket (once): who holds it can take the socket out of the set and
    /// put it back (`groups::watch`).
    pub(super) fn take_watched(&mut self) -> Option<OwnedFd> {
        self.watched.take()
    }

    /// The receiving sockets: 0 is `main`, then one per group joined;
    /// each with the destination address of its packets.
    pub(super) fn receiving(&self, index: usize) -> Option<(IpAddr, &UdpSocket)> {
        match index {
            0 => Some((self.addr, &self.main)),
            _ => self.groups.get(index - 1),
        }
    }

    /// How many receiving sockets.
    pub(super) fn receiving_count(&self) -> usize {
        1 + self.groups.len()
    }

    /// Joins multicast group `group` (`groups.rs`).
    pub(super) fn join(&mut self, group: IpAddr) -> io::Result<()> {
        self.groups.join(group, self.addr, &self.ready)
    }

    /// Leaves multicast group `group`; whether it was joined.
    pub(super) fn leave(&mut self, group: IpAddr) -> bool {
        self.groups.leave(group, &self.ready)
    }

    /// Whether packets can leave from `port`, binding its socket on first
    /// use. A port that cannot be bound is remembered and tried again
    /// after a while ([`UdpSockets::retry_due`]).
    pub(super) fn can_send_from(&mut self, port: u16, now_ns: u64) -> bool {
        if port == ROCEV2_UDP_PORT || self.by_port.contains_key(&port) {
            return true;
        }
        if self.unbindable.get(&port).is_some_and(|&retry_at_ns| now_ns < retry_at_ns) {
            return false;
        }
        match self.bind_source_port(port) {
            Some(socket) => {
                self.by_port.insert(port, socket);
                self.unbindable.remove(&port);
                true
            }
            None => {
                self.unbindable.insert(port, now_ns + PORT_RETRY_NS);
                false
            }
        }
    }

    /// Tries again the ports whose wait is over; returns those that can be
    /// sent from now (the HCA may settle packets on them again).
    pub(super) fn retry_due(&mut self, now_ns: u64) -> Vec<u16> {
        if self.unbindable.is_empty() {
            return Vec::new();
        }
        let due: Vec<u16> =
            self.unbindable.iter().filter(|&(_, &at)| at <= now_ns).map(|(&p, _)| p).collect();
        due.into_iter().filter(|&port| self.can_send_from(port, now_ns)).collect()
    }

    fn bind_source_port(&self, port: u16) -> Option<UdpSocket> {
        let socket = UdpSocket::bind(SocketAddr::new(self.addr, port)).ok()?;
        sys::set_dont_fragment(&socket, self.addr.is_ipv6()).ok()?;
        if !self.offload {
            sys::set_no_udp_checksum(&socket, self.addr.is_ipv6()).ok()?;
        }
        let _ = sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES);
        // A UD QP's sends to a multicast group leave from its port.
        let _ = groups::set_multicast_sending(&socket, self.addr);
        // Nothing is sent to these ports; keep their receive queues small.
        let _ = sys::set_receive_buffer(&socket, 4096);
        Some(socket)
    }

    /// Sends the batched packets (UDP payloads), one group per source
    /// port, in each group in the batch's order (requests before
    /// responses): with offload, runs of equal-sized packets to one
    /// destination as GSO messages, and everything of a group in as few
    /// `sendmmsg` calls as it takes (one for up to 64 runs and singles).
    pub(super) fn send(
        &mut self,
        batch: &mut TxBatch,
        stats: &mut UdpStats,
        scratch: &mut sys::SendScratch,
    ) {
        let UdpSockets { main, by_port, offload, gso_refused, spans, plan, .. } = self;
        // Grouped by port; in each, requests before responses (each class
        // in its own order: they are separate PSN streams, and a GSO run,
        // the packets of one message, is all of one class): a request an
        // application posted in reaction to a completion must not wait
        // behind the ACK of the packet that completed.
        batch.packets.sort_by_key(|p| (p.source_port, p.kind == PacketKind::Response));
        let packets = &batch.packets;
        spans.clear();
        spans.extend(packets.iter().map(|p| p.start..p.start + p.len));
        let mut group = 0;
        while group < packets.len() {
            let port = packets[group].source_port;
            let group_end = packets[group..]
                .iter()
                .position(|p| p.source_port != port)
                .map_or(packets.len(), |n| group + n);
            let socket = by_port.get(&port).unwrap_or(main);
            plan_group(packets, group..group_end, *offload && !*gso_refused, plan);
            send_plan(socket, scratch, batch.bytes(), spans, plan, stats, gso_refused);
            group = group_end;
        }
        batch.clear();
    }
}

/// Plans the sends of `packets[group]` (one source port's): consecutive
/// packets to one destination make a GSO run, with `gso`, when every one
/// but the last has the first one's size (so a request and the smaller
/// ACK behind it, to one peer, go as one: the peer takes both with one
/// receive); the others leave as single datagrams, all in order.
fn plan_group(packets: &[Queued], group: Range<usize>, gso: bool, plan: &mut Vec<Outgoing>) {
    plan.clear();
    let mut i = group.start;
    while i < group.end {
        let first = &packets[i];
        let segment = first.len;
        let mut j = i + 1;
        let mut run_bytes = segment;
        // Packets to a multicast group leave singly: GSO to a group (and
        // the kernel's loopback copy of it) is not tested.
        if gso && !first.destination.is_multicast() {
            while j < group.end
                && j - i < GSO_MAX_SEGMENTS
                && packets[j].destination == first.destination
                && packets[j].len <= segment
                && packets[j - 1].len == segment
                && run_bytes + packets[j].len <= GSO_MAX_BYTES
            {
                run_bytes += packets[j].len;
                j += 1;
            }
        }
        let segment_size = (j - i > 1).then_some(segment as u16);
        plan.push(Outgoing { parts: i..j, destination: to(first.destination), segment_size });
        i = j;
    }
}

/// Sends the planned messages with `sendmmsg` calls. A refused GSO run
/// (no checksum offload on the way out, or a route MTU below the segment)
/// would fail on every retransmission too, so offload stops (`gso_refused`)
/// and the rest of the plan leaves as single datagrams; a refused single
/// datagram is lost (counted) and the rest go on.
fn send_plan(
    socket: &UdpSocket,
    scratch: &mut sys::SendScratch,
    bytes: &[u8],
    spans: &[Range<usize>],
    plan: &mut Vec<Outgoing>,
    stats: &mut UdpStats,
    gso_refused: &mut bool,
) {
    let mut sent = 0;
    let mut retried = false;
    while sent < plan.len() {
        stats.tx_calls += 1;
        match sys::send_messages(socket, scratch, bytes, spans, &plan[sent..]) {
            Ok(n) if n > 0 => {
                let runs = plan[sent..sent + n].iter().filter(|m| m.segment_size.is_some()).count();
                stats.tx_gso_runs += runs as u64;
                sent += n;
                retried = false;
            }
            _ if plan[sent].segment_size.is_some() => {
                *gso_refused = true;
                stats.tx_gso_refused += 1;
                let rest: Vec<Outgoing> = plan.drain(sent..).collect();
                for message in rest {
                    for part in message.parts {
                        let destination = message.destination;
                        plan.push(Outgoing {
                            parts: part..part + 1,
                            destination,
                            segment_size: None,
                        });
                    }
                }
            }
            // A connected socket (the L2 link's) reports the ICMP "port
            // unreachable" of an earlier datagram (sent before the link's
            // other end was up) on the next send, which it then does not
            // send: that error is not this datagram's, send it again once.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && !retried => {
                stats.tx_errors += 1;
                retried = true;
            }
            _ => {
                stats.tx_errors += 1;
                sent += 1;
                retried = false;
            }
        }
    }
}

fn to(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, ROCEV2_UDP_PORT)
}

/// Sends every packet of `batch` to `destination` as its own datagram,
/// in order, with `sendmmsg` calls (the L2 link's frames); a refused one
/// is lost (counted), the rest go on.
pub(super) fn send_all_to(
    socket: &UdpSocket,
    scratch: &mut sys::SendScratch,
    batch: &TxBatch,
    destination: SocketAddr,
    stats: &mut UdpStats,
) {
    let spans: Vec<Range<usize>> = batch.packets.iter().map(|p| p.start..p.start + p.len).collect();
    let mut plan: Vec<Outgoing> = (0..spans.len())
        .map(|i| Outgoing { parts: i..i + 1, destination, segment_size: None })
        .collect();
    let mut no_gso = true;
    send_plan(socket, scratch, batch.bytes(), &spans, &mut plan, stats, &mut no_gso);
}

/// Raises the soft limit on open files to the hard limit: a device opens
/// one socket per UDP source port in use (up to 16,384 for many QPs).
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            rustix::process::Rlimit { current: limit.maximum, ..limit },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_not_lost_to_an_earlier_frames_port_unreachable() {
        let here = UdpSocket::bind("127.161.200.1:0").unwrap();
        let there: SocketAddr = "127.161.200.2:47162".parse().unwrap();
        here.connect(there).unwrap();
        let mut scratch = sys::SendScratch::new();
        let mut stats = UdpStats::default();
        let frame = |bytes: &[u8]| {
            let mut batch = TxBatch::default();
            let leaving = super::super::transport::Leaving {
                destination: there.ip(),
                kind: PacketKind::Request,
                source_port: 0,
            };
            batch.push(bytes, leaving);
            batch
        };
        // Nobody at the other end yet: the ICMP error waits on the socket.
        send_all_to(&here, &mut scratch, &frame(b"early"), there, &mut stats);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let peer = UdpSocket::bind(there).unwrap();
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        send_all_to(&here, &mut scratch, &frame(b"second"), there, &mut stats);
        let mut buf = [0u8; 16];
        let n = peer.recv(&mut buf).expect("the second frame arrived");
        assert_eq!(&buf[..n], b"second");
        assert_eq!(stats.tx_errors, 1, "the earlier frame's error, counted once");
    }

    /// A kernel that refuses GSO (here: a socket without UDP checksums,
    /// which UDP GSO requires): the run leaves as single datagrams, in
    /// order, and offload stays off for the device.
    #[test]
    fn a_refused_gso_run_leaves_as_singles_in_order() {
        let here: IpAddr = "127.161.201.3".parse().unwrap();
        let there: IpAddr = "127.161.201.4".parse().unwrap();
        let peer = UdpSocket::bind(SocketAddr::new(there, ROCEV2_UDP_PORT)).unwrap();
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let (mut sockets, _) = UdpSockets::open(here, false).unwrap();
        sockets.offload = true;
        let leaving = super::super::transport::Leaving {
            destination: there,
            kind: PacketKind::Request,
            source_port: ROCEV2_UDP_PORT,
        };
        let mut stats = UdpStats::default();
        let mut scratch = sys::SendScratch::new();
        for round in 0..2u8 {
            let mut batch = TxBatch::default();
            for n in 0..5u8 {
                batch.push(&[round * 10 + n; 600], leaving);
            }
            sockets.send(&mut batch, &mut stats, &mut scratch);
            let mut buf = [0u8; 1024];
            for n in 0..5u8 {
                let len = peer.recv(&mut buf).expect("every packet arrives");
                assert_eq!((buf[0], len), (round * 10 + n, 600), "{stats:?}");
            }
        }
        assert_eq!(stats.tx_gso_refused, 1, "refused once, then not asked again: {stats:?}");
        assert_eq!(stats.tx_gso_runs, 0, "{stats:?}");
        assert_eq!(stats.tx_errors, 0, "{stats:?}");
    }

    /// Two READ responses' packets as the HCA emits them: FIRST and LAST
    /// carry an AETH (4 bytes more) than the MIDDLEs, so with offload they
    /// make GSO runs with singles between them.
    #[test]
    fn gso_runs_and_singles_leave_in_the_batchs_order() {
        let here: IpAddr = "127.161.201.1".parse().unwrap();
        let there: IpAddr = "127.161.201.2".parse().unwrap();
        let peer = UdpSocket::bind(SocketAddr::new(there, ROCEV2_UDP_PORT)).unwrap();
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let (mut sockets, _) = UdpSockets::open(here, true).unwrap();
        let mut batch = TxBatch::default();
        // GSO runs: [1028, 1024], [1024, 1024], [1028, 1028, 1024], [1024,
        // 1024]; a single: the last 1028.
        let sizes = [1028, 1024, 1024, 1024, 1028, 1028, 1024, 1024, 1024, 1028];
        for (n, len) in sizes.iter().enumerate() {
            let mut bytes = vec![0u8; *len];
            bytes[0] = n as u8;
            let leaving = super::super::transport::Leaving {
                destination: there,
                kind: PacketKind::Response,
                source_port: ROCEV2_UDP_PORT,
            };
            batch.push(&bytes, leaving);
        }
        let mut stats = UdpStats::default();
        sockets.send(&mut batch, &mut stats, &mut sys::SendScratch::new());
        let mut order = Vec::new();
        let mut buf = [0u8; 2048];
        for _ in 0..sizes.len() {
            let n = peer.recv(&mut buf).expect("every packet arrives");
            order.push((buf[0], n));
        }
        let sent: Vec<(u8, usize)> = sizes.iter().enumerate().map(|(n, l)| (n as u8, *l)).collect();
        assert_eq!(order, sent, "{stats:?}");
        assert_eq!(stats.tx_gso_refused, 0, "offload refused: the test proves nothing");
        assert_eq!(stats.tx_gso_runs, 4, "{stats:?}");
        assert_eq!(stats.tx_calls, 1, "runs and singles leave in one call: {stats:?}");
    }
}
