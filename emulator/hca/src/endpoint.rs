//! What a network runtime drives: anything that takes IP packets in and
//! hands IP packets out, with timers, and never does I/O itself.
//!
//! The HCA implements it; the simulated fabric and (later) the UDP and L2
//! runtimes drive it. Packets are whole IP packets — IPv4 or IPv6 header,
//! UDP header, RoCEv2 transport packet with its ICRC — because the ICRC
//! covers the IP and UDP headers: whoever builds the transport packet must
//! know them.

use crate::time::Instant;
use core::net::IpAddr;

/// One IP packet ready to leave, written into the caller's buffer, with
/// what a runtime needs to send it without reading it: where it goes,
/// whether it is a request or a response, and its UDP source port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where it goes (the IP destination).
    pub destination: IpAddr,
    /// Length of the IP packet at the start of the buffer.
    pub len: usize,
    /// A requester's packet or a responder's (ACK, READ response, atomic
    /// ACK): separate PSN streams, so a runtime may send one class ahead
    /// of the other (the UDP runtime sends requests first).
    pub kind: PacketKind,
    /// The UDP source port in the packet, settled before its ICRC was
    /// computed: the port a runtime sending through UDP sockets must send
    /// from for the ICRC to hold.
    pub source_port: u16,
    /// The QP that sent it (`None`: QP1's MADs, and endpoints that are
    /// not HCAs). A packet's BTH names the remote QP; a runtime that
    /// follows flows per local QP (fault scenarios) reads this.
    pub local_qpn: Option<uroce_wire::Qpn>,
    /// Nothing else was ready when this packet was made: a request whose
    /// QP read its send queue for it and found nothing posted behind it (no
    /// further packet of its message either), with no response of its own
    /// queued and no other QP scheduled. A runtime
    /// that gathers packets into one system call may send what it holds
    /// at once: asking again would most likely find nothing, and that
    /// look (at the send queue the application writes) would sit between
    /// an application's post and its packet leaving. A hint only: asking
    /// again later is still needed (and may find a WQE posted meanwhile).
    pub nothing_behind: bool,
}

impl Transmit {
    /// A request to `destination` of `len` bytes from source port 0: for
    /// endpoints whose packets no runtime sorts or sends through sockets
    /// (the simulated fabric's toys and adversaries).
    pub const fn new(destination: IpAddr, len: usize) -> Transmit {
        Transmit {
            destination,
            len,
            kind: PacketKind::Request,
            source_port: 0,
            local_qpn: None,
            nothing_behind: false,
        }
    }
}

/// Which engine a packet comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PacketKind {
    /// The requester's: SEND, WRITE, READ request, atomic...
    Request,
    /// The responder's: ACK/NAK, READ response, atomic ACK.
    Response,
}

/// The largest IP packet an endpoint emits: a 4096-byte path MTU payload
/// plus IPv6 (40), UDP (8), BTH and extension headers (at most 40 with
/// RDETH+DETH+RETH... in practice 32), pad (3) and ICRC (4), rounded up.
pub const MAX_PACKET_LEN: usize = 4096 + 256;

/// A sans-IO network endpoint.
pub trait Endpoint {
    /// The endpoint's IP addresses: packets to any of them are its own.
    fn addresses(&self) -> &[IpAddr];

    /// Takes one received IP packet. Bad packets are dropped and counted,
    /// never trusted.
    fn receive(&mut self, now: Instant, packet: &[u8]);

    /// Writes the next packet to send into `buf` (at least
    /// [`MAX_PACKET_LEN`] bytes) and says where it goes, or `None` when
    /// there is nothing to send now.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit>;

    /// When the endpoint next needs [`Endpoint::handle_timeout`], if ever.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Lets timers that are due fire. Calling it early is harmless.
    fn handle_timeout(&mut self, now: Instant);
}
