//! The data path: packets from the HCA to the transport (through the fault
//! injector or the scenario's port, and the capture) and from the
//! transport to the HCA (through the scenario's port: `scenario.rs`).
//! The receive side is in `receive.rs`, the scenario's ingress and egress
//! in `scenario_path.rs`.

use super::capture::Capture;
use super::doorbells::DoorbellBatch;
use super::progress::Runtime;
use super::scenario::{self, ScenarioPort};
use super::sys;
use super::transport::{Leaving, Transport, TxBatch};
use super::UdpStats;
use crate::link::Egress;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use uroce_faults::{CopyVerdict, Injector};
use uroce_hca::endpoint::{Endpoint, Transmit, MAX_PACKET_LEN};
use uroce_hca::mcast::McastChange;
use uroce_hca::time::Instant;
use uroce_hca::Hca;
use uroce_wire::ip;
use uroce_wire::{Mask, Opcode, ROCEV2_UDP_PORT};

/// Datagrams received per `recvmmsg` call.
pub(super) const RECEIVE_BATCH: usize = 32;
/// Room before each received datagram for the IP and UDP headers the
/// runtime rebuilds (IPv6 40 + UDP 8).
pub(super) const HEADROOM: usize = 48;
/// A receive buffer: one datagram, or one GRO run of datagrams.
pub(super) const RECEIVE_BUFFER: usize = 65_536;
/// Packets handed out per progress round before receiving again.
const TRANSMIT_BURST: usize = 256;
/// Packets per `sendmmsg` batch.
const TX_BATCH: usize = 64;

/// What the runtime's threads share under its I/O lock.
pub(super) struct Io {
    pub rx_buffers: Vec<Vec<u8>>,
    pub rx_meta: Vec<sys::Received>,
    pub rx_scratch: sys::ReceiveScratch,
    pub tx_scratch: sys::SendScratch,
    /// The application's last poll found no datagram.
    pub app_poll_was_empty: bool,
    /// Consecutive polls of a waiting application that found nothing to
    /// send (see `Runtime::progress_by`).
    pub idle_polls: u32,
    pub tx_buffer: Vec<u8>,
    pub batch: TxBatch,
    pub transport: Transport,
    pub faults: Option<Injector>,
    /// The fault scenario's port (`UROCE_SCENARIO`); never with `faults`
    /// (the scenario takes `UROCE_FAULTS` as its background faults).
    pub scenario: Option<ScenarioPort>,
    pub delayed: BinaryHeap<Reverse<Delayed>>,
    pub delayed_seq: u64,
    /// Since when packets the application's receive produced wait for its
    /// next verbs call.
    pub deferred_since_ns: Option<u64>,
    /// Send doorbells held for the application's next poll.
    pub doorbells: DoorbellBatch,
    pub capture: Option<Capture>,
    /// Scratch for one frame.
    pub frame: Vec<u8>,
    pub stats: UdpStats,
    /// ACKs received behind a packet that completed work for a waiting
    /// application, handed to the HCA after the next send (see
    /// `receive_datagrams`): the packets, one after another, and where
    /// each lies.
    pub acks_later: Vec<u8>,
    pub acks_later_spans: Vec<std::ops::Range<usize>>,
}

impl Io {
    pub(super) fn new(
        transport: Transport,
        faults: Option<Injector>,
        scenario: Option<ScenarioPort>,
        capture: Option<Capture>,
        stats: UdpStats,
        doorbell_burst_ns: u64,
    ) -> Io {
        Io {
            rx_buffers: vec![vec![0u8; HEADROOM + RECEIVE_BUFFER]; RECEIVE_BATCH],
            rx_meta: Vec::with_capacity(RECEIVE_BATCH),
            rx_scratch: sys::ReceiveScratch::new(),
            tx_scratch: sys::SendScratch::new(),
            app_poll_was_empty: true,
            idle_polls: 0,
            tx_buffer: vec![0u8; MAX_PACKET_LEN],
            batch: TxBatch::default(),
            transport,
            faults,
            scenario,
            delayed: BinaryHeap::new(),
            delayed_seq: 0,
            deferred_since_ns: None,
            doorbells: DoorbellBatch::new(doorbell_burst_ns),
            capture,
            frame: Vec::with_capacity(MAX_PACKET_LEN + 14),
            stats,
            acks_later: Vec::new(),
            acks_later_spans: Vec::new(),
        }
    }

    /// Nothing of the runtime's own waits to leave: no ACKs deferred to the
    /// application's next call, no delayed copies, no ACKs kept back, and
    /// no scenario or link whose timers a transmit round runs.
    pub(super) fn nothing_pending(&self) -> bool {
        self.deferred_since_ns.is_none()
            && self.delayed.is_empty()
            && self.acks_later_spans.is_empty()
            && self.scenario.is_none()
            && !self.transport.is_link()
    }
}

/// A copy of a packet the fault injector (or a scenario rule) holds back.
pub(super) struct Delayed {
    pub due_ns: u64,
    seq: u64,
    packet: Vec<u8>,
    leaving: Leaving,
    /// The capture comment it leaves with (a scenario's firings).
    comment: Option<String>,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.seq) == (other.due_ns, other.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delayed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due_ns, self.seq).cmp(&(other.due_ns, other.seq))
    }
}

impl Runtime {
    /// Sends what the link host has ready (its own frames, packets
    /// released by a resolved neighbour), after running its timers.
    pub(super) fn queue_link_frames(&self, io: &mut Io, now_ns: u64) -> usize {
        let Io { transport, batch, capture, stats, .. } = io;
        let Some(host) = transport.host() else { return 0 };
        host.poll(Instant::from_nanos(now_ns));
        let mut queued = 0;
        let leaving = Leaving {
            destination: self.addr,
            kind: uroce_hca::PacketKind::Request,
            source_port: 0,
        };
        while let Some(frame) = host.take_frame() {
            if let Some(capture) = capture.as_mut() {
                capture.frame(stats, &frame, None);
            }
            batch.push(&frame, leaving);
            queued += 1;
        }
        queued
    }

    /// Fires due timers, releases due delayed packets, and sends up to a
    /// burst of packets.
    pub(super) fn transmit_some(&self, io: &mut Io, now_ns: u64) -> usize {
        io.deferred_since_ns = None;
        io.doorbells.sent();
        let now = Instant::from_nanos(now_ns);
        let mut sent = 0;
        while io.delayed.peek().is_some_and(|Reverse(d)| d.due_ns <= now_ns) {
            let Reverse(d) = io.delayed.pop().expect("peeked");
            self.send_now(io, now_ns, &d.packet, d.leaving, d.comment.as_deref());
            sent += 1;
        }
        let mut buffer = std::mem::take(&mut io.tx_buffer);
        // A panic between the take and the put-back leaves it empty.
        buffer.resize(MAX_PACKET_LEN, 0);
        let mut first_round = true;
        loop {
            // Packets are taken from the HCA under its lock and sent after it
            // is released: no system call holds up the application's verbs.
            let mut drained = true;
            {
                let mut hca = self.hca.lock();
                if first_round {
                    if hca.poll_timeout().is_some_and(|at| at <= now) {
                        hca.handle_timeout(now);
                    }
                    if let Transport::Udp(sockets) = &mut io.transport {
                        for port in sockets.retry_due(now_ns) {
                            hca.allow_source_port(port);
                        }
                    }
                    // A port a QP just took (at its connection: a command,
                    // then this flush) is bound now, off the data path; one
                    // that cannot be is refused with its first packet
                    // (`settle`).
                    while let Some(port) = hca.poll_new_source_port() {
                        if let Transport::Udp(sockets) = &mut io.transport {
                            sockets.can_send_from(port, now_ns);
                        }
                    }
                    // Groups joined or left (an attach or detach command,
                    // then this flush): the sockets follow before the
                    // command returns.
                    while let Some(change) = hca.poll_mcast_change() {
                        follow_group(io, change);
                    }
                    // The scenario's timed rules, its delayed incoming
                    // copies and its reorder holds whose time came.
                    self.scenario_tick(io, &mut hca, now_ns);
                }
                // Without faults, a scenario, a capture or a link, packets
                // are built straight into the batch (no copy).
                let direct = io.faults.is_none()
                    && io.scenario.is_none()
                    && io.capture.is_none()
                    && !io.transport.is_link();
                while direct && io.batch.len() < TX_BATCH && sent < TRANSMIT_BURST {
                    let Io { batch, transport, stats, .. } = io;
                    let room = batch.room(MAX_PACKET_LEN);
                    let Some(transmit) = hca.poll_transmit(now, room) else {
                        break;
                    };
                    count_transmit(stats, &transmit);
                    sent += 1;
                    let nothing_behind = transmit.nothing_behind;
                    let packet = &mut room[..transmit.len];
                    let Some(leaving) =
                        settle(transport, stats, &mut hca, now_ns, transmit, packet)
                    else {
                        continue;
                    };
                    let len = packet.len();
                    match ip::udp_payload_offset(packet) {
                        Some(offset) => batch.commit(offset, len - offset, leaving),
                        None => stats.tx_errors += 1,
                    }
                    if nothing_behind {
                        // Send it now; the look that most likely finds
                        // nothing comes after, in one more round.
                        drained = false;
                        break;
                    }
                }
                while !direct && io.batch.len() < TX_BATCH && sent < TRANSMIT_BURST {
                    let Some(transmit) = hca.poll_transmit(now, &mut buffer) else {
                        break;
                    };
                    count_transmit(&mut io.stats, &transmit);
                    sent += 1;
                    let packet = &mut buffer[..transmit.len];
                    let local_qpn = transmit.local_qpn;
                    let leaving = settle(
                        &mut io.transport,
                        &mut io.stats,
                        &mut hca,
                        now_ns,
                        transmit,
                        packet,
                    );
                    if let Some(leaving) = leaving {
                        if io.scenario.is_some() {
                            self.dispatch_scenario(
                                io, &mut hca, now_ns, local_qpn, packet, leaving,
                            );
                        } else {
                            self.dispatch(io, now_ns, packet, leaving);
                        }
                    }
                }
                if io.batch.len() >= TX_BATCH && sent < TRANSMIT_BURST {
                    drained = false;
                }
            }
            first_round = false;
            sent += self.queue_link_frames(io, now_ns);
            self.flush_batch(io);
            if let Some(capture) = io.capture.as_mut() {
                capture.end_batch();
            }
            if drained {
                break;
            }
        }
        io.tx_buffer = buffer;
        // What was sent has left: now the ACKs kept back.
        self.receive_acks_later(io, now_ns);
        sent
    }

    /// Applies faults, then sends (or holds) one packet.
    fn dispatch(&self, io: &mut Io, now_ns: u64, packet: &[u8], leaving: Leaving) {
        let Some(faults) = io.faults.as_mut() else {
            self.send_now(io, now_ns, packet, leaving, None);
            return;
        };
        let verdict = faults.apply(packet);
        if verdict.lost() {
            io.stats.faults_lost += 1;
            return;
        }
        if verdict.duplicated() {
            io.stats.faults_duplicated += 1;
        }
        for copy in verdict.copies() {
            self.send_copy(io, now_ns, packet, &copy, 0, leaving, None);
        }
    }

    /// Sends one copy of a packet now, or queues it for its delay
    /// (`copy.delay_ns + after_ns`), its bit flipped if it is corrupted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_copy(
        &self,
        io: &mut Io,
        now_ns: u64,
        packet: &[u8],
        copy: &CopyVerdict,
        after_ns: u64,
        leaving: Leaving,
        comment: Option<String>,
    ) {
        let mut scratch = Vec::new();
        let bytes = scenario::copy_bytes(packet, copy, &mut scratch);
        if copy.flip_bit.is_some() {
            io.stats.faults_corrupted += 1;
        }
        let delay = copy.delay_ns.saturating_add(after_ns);
        if delay == 0 {
            self.send_now(io, now_ns, bytes, leaving, comment.as_deref());
        } else {
            io.stats.faults_delayed += 1;
            io.delayed_seq += 1;
            io.delayed.push(Reverse(Delayed {
                due_ns: now_ns.saturating_add(delay),
                seq: io.delayed_seq,
                packet: bytes.to_vec(),
                leaving,
                comment,
            }));
        }
    }

    /// Queues one IP packet: its UDP payload for the socket of its source
    /// port, or on a link its Ethernet frame (or holds it while its
    /// destination's MAC is asked for).
    fn send_now(
        &self,
        io: &mut Io,
        now_ns: u64,
        packet: &[u8],
        leaving: Leaving,
        comment: Option<&str>,
    ) {
        let Io { transport, frame, capture, stats, batch, .. } = io;
        match transport.host() {
            None => {
                let Some(offset) = ip::udp_payload_offset(packet) else {
                    stats.tx_errors += 1;
                    return;
                };
                if let Some(capture) = capture.as_mut() {
                    capture.packet(stats, self.addr, leaving.destination, packet, comment);
                }
                batch.push(&packet[offset..], leaving);
            }
            Some(host) => {
                let now = Instant::from_nanos(now_ns);
                if host.encapsulate(now, packet, leaving.destination, frame) != Egress::Ready {
                    return;
                }
                if let Some(capture) = capture.as_mut() {
                    capture.frame(stats, frame, comment);
                }
                batch.push(frame, leaving);
            }
        }
    }

    /// Sends the batched packets.
    pub(super) fn flush_batch(&self, io: &mut Io) {
        let Io { transport, batch, stats, tx_scratch, .. } = io;
        transport.send(batch, stats, tx_scratch);
    }
}

/// Counts a packet the HCA handed out.
fn count_transmit(stats: &mut UdpStats, transmit: &Transmit) {
    stats.tx_packets += 1;
    if transmit.destination.is_multicast() {
        stats.tx_mcast_packets += 1;
    }
}

/// Where a packet the HCA handed out leaves from. Over kernel UDP it
/// leaves from a socket bound to its source port; a port that cannot be
/// bound is refused to the HCA, which settles its packets on 4791 and makes
/// this one again (`tx_port_fallbacks`). `None`: the packet cannot leave.
fn settle(
    transport: &mut Transport,
    stats: &mut UdpStats,
    hca: &mut Hca,
    now_ns: u64,
    transmit: Transmit,
    packet: &mut [u8],
) -> Option<Leaving> {
    let Transmit { destination, kind, source_port, .. } = transmit;
    let leaving = Leaving { destination, kind, source_port };
    let Transport::Udp(sockets) = transport else { return Some(leaving) };
    if source_port == ROCEV2_UDP_PORT {
        // No QP's own port (rxe's are 0xC000 and up): settled on 4791.
        stats.tx_port_fallbacks += 1;
        return Some(leaving);
    }
    if sockets.can_send_from(source_port, now_ns) {
        return Some(leaving);
    }
    if !hca.refuse_source_port(source_port, packet) {
        stats.tx_errors += 1;
        return None;
    }
    stats.tx_port_fallbacks += 1;
    Some(Leaving { source_port: ROCEV2_UDP_PORT, ..leaving })
}

/// Joins or leaves a multicast group on the network as the HCA's groups
/// changed. Over kernel UDP a group is a socket (`groups.rs`). A device on
/// a link has nothing to join: it takes every RoCE frame under a
/// multicast MAC, and its HCA keeps those of its groups (docs/runtime.md).
fn follow_group(io: &mut Io, change: McastChange) {
    let Transport::Udp(sockets) = &mut io.transport else { return };
    let group = change.gid().to_ip();
    match change {
        McastChange::Joined(_) => match sockets.join(group) {
            Ok(()) => io.stats.mcast_joins += 1,
            Err(_) => io.stats.mcast_join_errors += 1,
        },
        McastChange::Left(_) => {
            if sockets.leave(group) {
                io.stats.mcast_leaves += 1;
            }
        }
    }
}

/// Where an outgoing IP packet leaves from, read back from its headers (a
/// packet a reorder hold kept: its source port was settled before).
pub(super) fn leaving_of(packet: &[u8]) -> Option<Leaving> {
    let (_, destination) = ip::addresses(packet)?;
    let offset = ip::udp_payload_offset(packet)?;
    let source_port = u16::from_be_bytes([packet[offset - 8], packet[offset - 7]]);
    let response = packet
        .get(offset)
        .and_then(|&op| Opcode(op).info())
        .is_some_and(|info| info.mask.contains(Mask::RESP));
    let kind =
        if response { uroce_hca::PacketKind::Response } else { uroce_hca::PacketKind::Request };
    Some(Leaving { destination, kind, source_port })
}
