//! The data path: packets from the HCA to the transport (through the fault
//! injector or the scenario's port, and the capture) and from the
//! transport to the HCA (through the scenario's port: `scenario.rs`).

use super::capture::Capture;
use super::doorbells::DoorbellBatch;
use super::progress::Runtime;
use super::scenario::{self, ScenarioPort};
use super::sys;
use super::transport::{Leaving, Transport, TxBatch};
use super::UdpStats;
use crate::link::{Egress, Ingress};
use core::net::IpAddr;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use uroce_faults::scenario::Dir;
use uroce_faults::{CopyVerdict, Injector};
use uroce_hca::endpoint::{Endpoint, Transmit, MAX_PACKET_LEN};
use uroce_hca::mcast::McastChange;
use uroce_hca::time::Instant;
use uroce_hca::Hca;
use uroce_wire::ip::{self, DatagramHeaders};
use uroce_wire::{Mask, Opcode, Qpn, ROCEV2_UDP_PORT};

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
        }
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
    /// Takes one batch from each of the transport's receiving descriptors
    /// (the device's own, and over kernel UDP each multicast group's) into
    /// the HCA.
    pub(super) fn receive_some(&self, io: &mut Io, now_ns: u64, single: bool) -> usize {
        let mut received = 0;
        for from in 0..io.transport.receiving_count() {
            received += self.receive_from(io, now_ns, single, from);
        }
        received
    }

    /// Takes one batch from receiving descriptor `from` into the HCA.
    fn receive_from(&self, io: &mut Io, now_ns: u64, single: bool, from: usize) -> usize {
        let (count, destination) = {
            let Io { rx_buffers, rx_meta, rx_scratch, stats, transport, .. } = &mut *io;
            match transport.receive(from, rx_buffers, HEADROOM, rx_scratch, rx_meta, single) {
                Ok(received) => received,
                Err(_) => {
                    stats.rx_dropped += 1;
                    (0, None)
                }
            }
        };
        if count == 0 {
            return 0;
        }
        io.stats.rx_batches += 1;
        if from > 0 {
            io.stats.rx_mcast_datagrams += count as u64;
        }
        let received = if io.transport.is_link() {
            self.receive_frames(io, now_ns)
        } else {
            self.receive_datagrams(io, now_ns, destination.unwrap_or(self.addr))
        };
        if let Some(capture) = io.capture.as_mut() {
            capture.end_batch();
        }
        received
    }

    /// The kernel UDP transport's receive: each datagram (or GRO segment)
    /// is one RoCE packet, its IP header rebuilt with `destination` (the
    /// device's address, or the group's a group socket took it for).
    fn receive_datagrams(&self, io: &mut Io, now_ns: u64, destination: IpAddr) -> usize {
        let Io { rx_buffers, rx_meta, capture, stats, scenario, .. } = io;
        let now = Instant::from_nanos(now_ns);
        let mut hca = self.hca.lock();
        let mut datagrams = 0;
        for (meta, buffer) in rx_meta.iter().zip(rx_buffers.iter_mut()) {
            let Some(source) = meta.source.filter(|_| !meta.truncated) else {
                stats.rx_dropped += 1;
                continue;
            };
            let segment = meta.segment_size.unwrap_or(meta.len).max(1);
            let mut offset = 0;
            while offset < meta.len {
                let len = segment.min(meta.len - offset);
                datagrams += 1;
                let start = HEADROOM + offset;
                // A UDP socket does not show the IP header: rebuild it as a
                // DF, unconnected sender (uroce) wrote it, ID 0, and let the
                // HCA check the ICRC over it.
                let Ok(headers) = DatagramHeaders::new(source, destination, 0, len) else {
                    stats.rx_dropped += 1;
                    offset += len;
                    continue;
                };
                let packet_start = start - headers.buffer_len();
                if headers.emit(&mut buffer[packet_start..start]).is_err() {
                    stats.rx_dropped += 1;
                    offset += len;
                    continue;
                }
                let packet = &buffer[packet_start..start + len];
                let (comment, die) = match scenario.as_mut() {
                    Some(sp) => scenario_ingress(sp, &mut hca, now_ns, stats, packet),
                    None => {
                        hca.receive(now, packet);
                        (None, false)
                    }
                };
                if let Some(capture) = capture.as_mut() {
                    capture.packet(stats, source.ip(), destination, packet, comment.as_deref());
                }
                if die {
                    if let Some(sp) = scenario.as_mut() {
                        scenario::die(sp, capture, now_ns);
                    }
                }
                offset += len;
            }
        }
        stats.rx_datagrams += datagrams;
        datagrams as usize
    }

    /// The L2 transport's receive: each datagram is one Ethernet frame;
    /// RoCE frames go to the HCA as received (the fault injector may drop,
    /// duplicate or corrupt them first), the rest to the link host.
    fn receive_frames(&self, io: &mut Io, now_ns: u64) -> usize {
        let now = Instant::from_nanos(now_ns);
        let Io { rx_buffers, rx_meta, capture, stats, transport, faults, scenario, .. } = io;
        let Some(host) = transport.host() else { return 0 };
        let mut frames = 0;
        let mut host_frames = false;
        {
            let mut hca = self.hca.lock();
            for (meta, buffer) in rx_meta.iter().zip(rx_buffers.iter()) {
                if meta.truncated {
                    stats.rx_dropped += 1;
                    continue;
                }
                frames += 1;
                let bytes = &buffer[HEADROOM..HEADROOM + meta.len];
                let mut comment = None;
                let mut die = false;
                match host.ingress(bytes) {
                    Ingress::Roce(packet) => match (scenario.as_mut(), faults.as_mut()) {
                        (Some(sp), _) => {
                            (comment, die) = scenario_ingress(sp, &mut hca, now_ns, stats, packet)
                        }
                        (None, None) => hca.receive(now, packet),
                        (None, Some(faults)) => {
                            receive_with_faults(&mut hca, now, faults, stats, packet)
                        }
                    },
                    Ingress::Host => host_frames = true,
                    Ingress::Dropped => stats.rx_dropped += 1,
                }
                if let Some(capture) = capture.as_mut() {
                    capture.frame(stats, bytes, comment.as_deref());
                }
                if die {
                    if let Some(sp) = scenario.as_mut() {
                        scenario::die(sp, capture, now_ns);
                    }
                }
            }
        }
        if host_frames {
            // ARP and NDP answers, TCP: queued for the next transmit.
            host.poll(now);
        }
        stats.rx_datagrams += frames;
        frames as usize
    }

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
                while io.batch.len() < TX_BATCH && sent < TRANSMIT_BURST {
                    let Some(transmit) = hca.poll_transmit(now, &mut buffer) else {
                        break;
                    };
                    io.stats.tx_packets += 1;
                    if transmit.destination.is_multicast() {
                        io.stats.tx_mcast_packets += 1;
                    }
                    sent += 1;
                    let packet = &mut buffer[..transmit.len];
                    let local_qpn = transmit.local_qpn;
                    if let Some(leaving) = settle(io, &mut hca, now_ns, transmit, packet) {
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
    fn send_copy(
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

    /// Passes one outgoing packet through the scenario's port, then sends
    /// (or holds, or drops) it as the verdict says; device actions it
    /// triggered go to the HCA, reorder holds it released follow it.
    fn dispatch_scenario(
        &self,
        io: &mut Io,
        hca: &mut Hca,
        now_ns: u64,
        local_qpn: Option<Qpn>,
        packet: &[u8],
        leaving: Leaving,
    ) {
        let Some(sp) = io.scenario.as_mut() else { return };
        let verdict = sp.port.on_packet(now_ns, Dir::Out, local_qpn, packet);
        let firings = sp.log_firings(now_ns);
        let die = sp.apply_device_actions(hca, now_ns);
        match verdict.dropped {
            Some(cause) => {
                io.stats.faults_lost += 1;
                if let Some(capture) = io.capture.as_mut() {
                    let comment = scenario::dropped_comment(cause, firings.as_deref());
                    let to = leaving.destination;
                    capture.packet(&mut io.stats, self.addr, to, packet, Some(&comment));
                }
            }
            None => {
                let mut comment = firings;
                if verdict.held {
                    if let (Some(sp), Some(c)) = (io.scenario.as_mut(), comment.take()) {
                        sp.hold_comment(packet, c);
                    }
                }
                if verdict.copies[1].is_some() || verdict.extra > 0 {
                    io.stats.faults_duplicated += 1;
                }
                for copy in verdict.copies.iter().flatten() {
                    self.send_copy(io, now_ns, packet, copy, 0, leaving, comment.take());
                }
                if let Some(first) = verdict.copies[0] {
                    for i in 1..=u64::from(verdict.extra) {
                        let after = i.saturating_mul(verdict.extra_gap_ns);
                        self.send_copy(io, now_ns, packet, &first, after, leaving, None);
                    }
                }
            }
        }
        if let Some(sp) = io.scenario.as_mut() {
            scenario::drain_released(sp, hca, now_ns);
        }
        self.send_released(io, now_ns);
        if die {
            if let Some(sp) = io.scenario.as_mut() {
                scenario::die(sp, &mut io.capture, now_ns);
            }
        }
    }

    /// Sends the outgoing packets reorder holds released.
    fn send_released(&self, io: &mut Io, now_ns: u64) {
        while let Some(held) = io.scenario.as_mut().and_then(|sp| sp.out_ready.pop_front()) {
            let Some(leaving) = leaving_of(&held.packet) else {
                io.stats.tx_errors += 1;
                continue;
            };
            let mut comment =
                io.scenario.as_mut().and_then(|sp| sp.take_held_comment(&held.packet));
            for copy in held.copies.iter().flatten() {
                self.send_copy(io, now_ns, &held.packet, copy, 0, leaving, comment.take());
            }
        }
    }

    /// The scenario's work that comes with time, not with a packet: timed
    /// rules (and the device actions they decide), delayed incoming
    /// copies, reorder holds whose `max_hold_us` passed.
    fn scenario_tick(&self, io: &mut Io, hca: &mut Hca, now_ns: u64) {
        let Some(sp) = io.scenario.as_mut() else { return };
        while sp.port.poll_timed(now_ns).is_some() {}
        let _ = sp.log_firings(now_ns);
        let die = sp.apply_device_actions(hca, now_ns);
        if die {
            scenario::die(sp, &mut io.capture, now_ns);
        }
        let now = Instant::from_nanos(now_ns);
        while let Some(packet) = sp.due_in(now_ns) {
            hca.receive(now, &packet);
        }
        scenario::drain_released(sp, hca, now_ns);
        self.send_released(io, now_ns);
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

/// Where a packet the HCA handed out leaves from. Over kernel UDP it
/// leaves from a socket bound to its source port; a port that cannot be
/// bound is refused to the HCA, which settles its packets on 4791 and makes
/// this one again (`tx_port_fallbacks`). `None`: the packet cannot leave.
fn settle(
    io: &mut Io,
    hca: &mut Hca,
    now_ns: u64,
    transmit: Transmit,
    packet: &mut [u8],
) -> Option<Leaving> {
    let Transmit { destination, kind, source_port, .. } = transmit;
    let leaving = Leaving { destination, kind, source_port };
    let Transport::Udp(sockets) = &mut io.transport else { return Some(leaving) };
    if source_port == ROCEV2_UDP_PORT {
        // No QP's own port (rxe's are 0xC000 and up): settled on 4791.
        io.stats.tx_port_fallbacks += 1;
        return Some(leaving);
    }
    if sockets.can_send_from(source_port, now_ns) {
        return Some(leaving);
    }
    if !hca.refuse_source_port(source_port, packet) {
        io.stats.tx_errors += 1;
        return None;
    }
    io.stats.tx_port_fallbacks += 1;
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
fn leaving_of(packet: &[u8]) -> Option<Leaving> {
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

/// Passes one received RoCE packet through the scenario's port: device
/// actions it triggered go to the HCA first, then its copies (now, or
/// queued for their delay), then the reorder holds it released. Returns
/// the capture comment and whether the process must die (`crash`).
fn scenario_ingress(
    sp: &mut ScenarioPort,
    hca: &mut Hca,
    now_ns: u64,
    stats: &mut UdpStats,
    packet: &[u8],
) -> (Option<String>, bool) {
    let verdict = sp.port.on_packet(now_ns, Dir::In, None, packet);
    let firings = sp.log_firings(now_ns);
    let die = sp.apply_device_actions(hca, now_ns);
    let comment = match verdict.dropped {
        Some(cause) => {
            stats.faults_lost += 1;
            Some(scenario::dropped_comment(cause, firings.as_deref()))
        }
        None => {
            if verdict.copies[1].is_some() || verdict.extra > 0 {
                stats.faults_duplicated += 1;
            }
            for copy in verdict.copies.iter().flatten() {
                if copy.flip_bit.is_some() {
                    stats.faults_corrupted += 1;
                }
                if copy.delay_ns > 0 {
                    stats.faults_delayed += 1;
                }
                scenario::receive_copy(sp, hca, now_ns, packet, copy, 0);
            }
            if let Some(first) = verdict.copies[0] {
                for i in 1..=u64::from(verdict.extra) {
                    let after = i.saturating_mul(verdict.extra_gap_ns);
                    scenario::receive_copy(sp, hca, now_ns, packet, &first, after);
                }
            }
            firings
        }
    };
    scenario::drain_released(sp, hca, now_ns);
    (comment, die)
}

/// Hands a received RoCE packet to the HCA through the fault injector.
fn receive_with_faults(
    hca: &mut Hca,
    now: Instant,
    faults: &mut Injector,
    stats: &mut UdpStats,
    packet: &[u8],
) {
    let verdict = faults.apply(packet);
    if verdict.lost() {
        stats.faults_lost += 1;
        return;
    }
    if verdict.duplicated() {
        stats.faults_duplicated += 1;
    }
    for copy in verdict.copies() {
        match copy.flip_bit {
            Some(bit) => {
                stats.faults_corrupted += 1;
                let mut corrupted = packet.to_vec();
                uroce_faults::flip(&mut corrupted, bit);
                hca.receive(now, &corrupted);
            }
            None => hca.receive(now, packet),
        }
    }
}
