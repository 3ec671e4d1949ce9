//! The device's way onto the network: one [`Transport`], of three kinds.
//!
//! * UDP through the kernel (the default): sockets bound to the device's
//!   address, the kernel writes the IP and UDP headers;
//! * the L2 transport over UDP-carried frames (`UROCE_LINK`): the device is
//!   a host ([`LinkHost`]) on a link of raw Ethernet frames, one per
//!   datagram between two local UDP endpoints;
//! * the L2 transport on a TAP interface (`UROCE_TAP`): the same host, one
//!   frame per read or write on `/dev/net/tun`.
//!
//! A link host exists exactly when the transport is a link, so no device
//! can have a link host and kernel UDP, or a TAP without a host.

use super::sockets::{self, UdpSockets, SOCKET_BUFFER_BYTES};
use super::tap::Tap;
use super::{mac_for, sys, UdpConfig, UdpError, UdpStats};
use crate::link::{LinkAttach, LinkHost};
use core::net::{IpAddr, SocketAddr};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use uroce_hca::time::Instant;
use uroce_hca::PacketKind;

/// The device's transport (see the module docs).
pub(super) enum Transport {
    /// UDP through the kernel: bound to `addr:4791`, and to each source
    /// port in use.
    Udp(UdpSockets),
    /// The L2 transport over UDP datagrams: bound to the link's local end,
    /// every frame to its remote end.
    LinkUdp {
        /// Bound to the local end, connected to the remote one.
        socket: UdpSocket,
        /// The remote end.
        remote: SocketAddr,
        /// The host on the link.
        host: Box<LinkHost>,
    },
    /// The L2 transport on a TAP interface.
    LinkTap {
        /// The interface.
        tap: Tap,
        /// The host on the link.
        host: Box<LinkHost>,
    },
}

/// A packet (a UDP payload, or a whole frame on a link) waiting in a
/// [`TxBatch`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Queued {
    pub start: usize,
    pub len: usize,
    pub destination: IpAddr,
    pub kind: PacketKind,
    /// The UDP source port it leaves from (UDP transport only).
    pub source_port: u16,
}

/// Packets waiting to leave, sent after the HCA lock is released.
///
/// Its buffer keeps its size between batches, so the HCA can build a
/// packet straight into the batch ([`TxBatch::room`], then
/// [`TxBatch::commit`]): no copy and no zero-fill per packet.
#[derive(Default)]
pub(super) struct TxBatch {
    /// Their bytes, back to back, from 0 to `used` (beyond: room).
    bytes: Vec<u8>,
    used: usize,
    pub packets: Vec<Queued>,
}

impl TxBatch {
    /// Queues a copy of `bytes`.
    pub(super) fn push(&mut self, bytes: &[u8], leaving: Leaving) {
        self.room(bytes.len()).copy_from_slice(bytes);
        self.commit(0, bytes.len(), leaving);
    }

    /// `len` bytes at the batch's end to build the next packet in (what
    /// an earlier packet left there, or zeros).
    pub(super) fn room(&mut self, len: usize) -> &mut [u8] {
        let end = self.used + len;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        &mut self.bytes[self.used..end]
    }

    /// Queues the `len` bytes from `offset` on in the [`TxBatch::room`]
    /// just written (`offset`: the IP and UDP headers the kernel writes).
    pub(super) fn commit(&mut self, offset: usize, len: usize, leaving: Leaving) {
        let Leaving { destination, kind, source_port } = leaving;
        let start = self.used + offset;
        debug_assert!(start + len <= self.bytes.len(), "committed beyond the room");
        self.packets.push(Queued { start, len, destination, kind, source_port });
        self.used = start + len;
    }

    /// The bytes of a queued packet.
    pub(super) fn bytes_of(&self, packet: &Queued) -> &[u8] {
        &self.bytes[packet.start..packet.start + packet.len]
    }

    /// All the batch's bytes (each [`Queued`] says where its packet is).
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.used]
    }

    pub(super) fn len(&self) -> usize {
        self.packets.len()
    }

    pub(super) fn clear(&mut self) {
        self.used = 0;
        self.packets.clear();
    }
}

/// Where an IP packet goes and how it leaves: what the HCA's `Transmit`
/// said of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Leaving {
    pub destination: IpAddr,
    pub kind: PacketKind,
    pub source_port: u16,
}

impl Transport {
    /// Opens the transport `config` asks for; returns it and the receive
    /// buffer the kernel granted (0 for a TAP).
    pub(super) fn open(config: &UdpConfig, seed: u64) -> Result<(Transport, usize), UdpError> {
        let Some(link) = &config.link else {
            let (sockets, receive_buffer_bytes) = UdpSockets::open(config.addr, config.offload)?;
            return Ok((Transport::Udp(sockets), receive_buffer_bytes));
        };
        let host = Box::new(LinkHost::new(
            mac_for(config.addr),
            config.addr,
            link.prefix_len,
            link.mtu,
            seed,
            Instant::from_nanos(0),
        ));
        match &link.attach {
            LinkAttach::Udp { local, remote } => {
                let (socket, receive_buffer_bytes) = open_link_socket(*local, *remote)?;
                Ok((Transport::LinkUdp { socket, remote: *remote, host }, receive_buffer_bytes))
            }
            LinkAttach::Tap { name } => Ok((Transport::LinkTap { tap: open_tap(name)?, host }, 0)),
        }
    }

    /// A descriptor that is readable when something arrives (a duplicate
    /// of the transport's own, to wait on without the I/O lock).
    pub(super) fn ready_fd(&self) -> io::Result<OwnedFd> {
        match self {
            Transport::Udp(sockets) => sockets.ready().try_clone(),
            Transport::LinkUdp { socket, .. } => socket.as_fd().try_clone_to_owned(),
            Transport::LinkTap { tap, .. } => tap.as_fd().try_clone_to_owned(),
        }
    }

    /// Over kernel UDP, the descriptor through which the ready set watches
    /// the device's socket (`UdpSockets::take_watched`).
    pub(super) fn take_watched(&mut self) -> Option<OwnedFd> {
        match self {
            Transport::Udp(sockets) => sockets.take_watched(),
            Transport::LinkUdp { .. } | Transport::LinkTap { .. } => None,
        }
    }

    /// Whether the device is a host on a link.
    pub(super) fn is_link(&self) -> bool {
        !matches!(self, Transport::Udp(_))
    }

    /// The host on the link, if the transport is one.
    pub(super) fn host(&mut self) -> Option<&mut LinkHost> {
        match self {
            Transport::Udp(_) => None,
            Transport::LinkUdp { host, .. } | Transport::LinkTap { host, .. } => Some(host),
        }
    }

    /// How many descriptors packets arrive on: kernel UDP has the device
    /// address's socket and one per multicast group joined.
    pub(super) fn receiving_count(&self) -> usize {
        match self {
            Transport::Udp(sockets) => sockets.receiving_count(),
            Transport::LinkUdp { .. } | Transport::LinkTap { .. } => 1,
        }
    }

    /// Takes what has arrived on receiving descriptor `from` (0: the
    /// device's own; see [`Transport::receiving_count`]) without blocking:
    /// one datagram (or frame) with `single`, else up to one per buffer,
    /// each into its buffer from `headroom` on. Returns how many, and for
    /// kernel UDP the destination address they were sent to.
    pub(super) fn receive(
        &self,
        from: usize,
        buffers: &mut [Vec<u8>],
        headroom: usize,
        scratch: &mut sys::ReceiveScratch,
        meta: &mut Vec<sys::Received>,
        single: bool,
    ) -> io::Result<(usize, Option<IpAddr>)> {
        let (socket, destination) = match self {
            Transport::LinkTap { tap, .. } => {
                let take = if single { 1 } else { buffers.len() };
                return Ok((tap.receive_batch(&mut buffers[..take], headroom, meta)?, None));
            }
            Transport::Udp(sockets) => {
                let Some((destination, socket)) = sockets.receiving(from) else {
                    return Ok((0, None));
                };
                (socket, Some(destination))
            }
            Transport::LinkUdp { socket, .. } => (socket, None),
        };
        let received = if single {
            sys::receive_one(socket, scratch, &mut buffers[0], headroom, meta)
        } else {
            sys::receive_batch(socket, scratch, buffers, headroom, meta)
        };
        Ok((received?, destination))
    }

    /// Sends the batch and empties it.
    pub(super) fn send(
        &mut self,
        batch: &mut TxBatch,
        stats: &mut UdpStats,
        scratch: &mut sys::SendScratch,
    ) {
        if batch.packets.is_empty() {
            return;
        }
        match self {
            Transport::Udp(sockets) => sockets.send(batch, stats, scratch),
            Transport::LinkUdp { socket, remote, .. } => {
                // Every frame to the link's other end, in order (a released
                // packet follows the ARP exchange, a TCP segment its
                // predecessor).
                sockets::send_all_to(socket, scratch, batch, *remote, stats);
            }
            Transport::LinkTap { tap, .. } => {
                // One write per frame, in order.
                for p in &batch.packets {
                    stats.tx_calls += 1;
                    if tap.send(batch.bytes_of(p)).is_err() {
                        stats.tx_errors += 1;
                    }
                }
            }
        }
        batch.clear();
    }
}

/// The link's UDP socket: bound to the local end and connected to the
/// remote one (datagrams from anywhere else are not the link's).
fn open_link_socket(local: SocketAddr, remote: SocketAddr) -> Result<(UdpSocket, usize), UdpError> {
    let socket = UdpSocket::bind(local)
        .map_err(|e| UdpError::Io(format!("binding the link's end {local}"), e))?;
    socket
        .connect(remote)
        .map_err(|e| UdpError::Io(format!("connecting the link to {remote}"), e))?;
    let receive_buffer_bytes = sys::set_receive_buffer(&socket, SOCKET_BUFFER_BYTES)
        .map_err(|e| UdpError::Io(format!("sizing the receive buffer on {local}"), e))?;
    let _ = sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES);
    Ok((socket, receive_buffer_bytes))
}

fn open_tap(name: &str) -> Result<Tap, UdpError> {
    Tap::open(name).map_err(|e| {
        let hint = match e.kind() {
            io::ErrorKind::PermissionDenied => {
                " (creating a TAP needs CAP_NET_ADMIN: create it first with \
                 `ip tuntap add dev NAME mode tap user $USER`)"
            }
            io::ErrorKind::NotFound => " (no /dev/net/tun: load the tun module)",
            _ => "",
        };
        UdpError::Io(format!("attaching to the TAP interface {name}{hint}"), e)
    })
}
