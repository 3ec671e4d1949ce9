//! The receive path: datagrams and frames from the transport to the HCA
//! (through the fault injector or the scenario's port, and the capture).

use super::datapath::{Io, HEADROOM};
use super::progress::Runtime;
use super::scenario;
use super::scenario_path::scenario_ingress;
use super::UdpStats;
use crate::link::Ingress;
use core::net::IpAddr;
use uroce_faults::Injector;
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;
use uroce_hca::Hca;
use uroce_wire::ip::DatagramHeaders;

/// The opcode byte of an RC ACKNOWLEDGE, the first byte of its BTH.
const ACKNOWLEDGE: u8 = uroce_wire::Opcode::RC_ACKNOWLEDGE.0;

impl Runtime {
    /// Takes one batch from each of the transport's receiving descriptors
    /// (the device's own, and over kernel UDP each multicast group's) into
    /// the HCA.
    pub(super) fn receive_some(&self, io: &mut Io, now_ns: u64, single: bool) -> usize {
        // ACKs kept back go first, before anything received after them;
        // they are this call's packets.
        let kept = self.receive_acks_later(io, now_ns);
        if kept > 0 {
            return kept;
        }
        let mut received = 0;
        for from in 0..io.transport.receiving_count() {
            received += self.receive_from(io, &mut Some(now_ns), single, from);
        }
        received
    }

    /// The poll of an application waiting for a message, with nothing of
    /// the runtime's own to send (`progress_by`): one datagram from each
    /// receiving descriptor, the clock read only when one came. What it
    /// produced (ACKs) waits for the application's next call.
    pub(super) fn receive_waiting(&self, io: &mut Io) -> usize {
        let mut now_ns = None;
        let mut received = 0;
        for from in 0..io.transport.receiving_count() {
            received += self.receive_from(io, &mut now_ns, true, from);
        }
        io.app_poll_was_empty = received == 0;
        if let Some(now_ns) = now_ns.filter(|_| received > 0) {
            io.deferred_since_ns.get_or_insert(now_ns);
        }
        received
    }

    /// Takes one batch from receiving descriptor `from` into the HCA, at
    /// `now_ns` (read when the batch came, if `None`).
    fn receive_from(
        &self,
        io: &mut Io,
        now_ns: &mut Option<u64>,
        single: bool,
        from: usize,
    ) -> usize {
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
        let now_ns = *now_ns.get_or_insert_with(|| self.now_ns());
        io.stats.rx_batches += 1;
        if from > 0 {
            io.stats.rx_mcast_datagrams += count as u64;
        }
        let received = if io.transport.is_link() {
            self.receive_frames(io, now_ns)
        } else {
            self.receive_datagrams(io, now_ns, destination.unwrap_or(self.addr), single)
        };
        if let Some(capture) = io.capture.as_mut() {
            capture.end_batch();
        }
        received
    }

    /// Hands the ACKs kept back to the HCA, in the order they came;
    /// returns how many.
    pub(super) fn receive_acks_later(&self, io: &mut Io, now_ns: u64) -> usize {
        if io.acks_later_spans.is_empty() {
            return 0;
        }
        let now = Instant::from_nanos(now_ns);
        let mut hca = self.hca.lock();
        let count = io.acks_later_spans.len();
        for span in io.acks_later_spans.drain(..) {
            hca.receive(now, &io.acks_later[span]);
        }
        io.acks_later.clear();
        count
    }

    /// The kernel UDP transport's receive: each datagram (or GRO segment)
    /// is one RoCE packet, its IP header rebuilt with `destination` (the
    /// device's address, or the group's a group socket took it for).
    ///
    /// For a waiting application (`single`), the ACKs behind a packet that
    /// completed work (a reply, and the ACK of the request it answers, in
    /// one GRO datagram) are kept back when the HCA says they can wait
    /// (`Hca::ack_can_wait`): the application sees its completion without
    /// the completer's work first, and they are handed over after its next
    /// send (`transmit_some`) or at the next receive, before anything
    /// else. Everything after the first one kept is kept, in order.
    fn receive_datagrams(
        &self,
        io: &mut Io,
        now_ns: u64,
        destination: IpAddr,
        single: bool,
    ) -> usize {
        let Io {
            rx_buffers, rx_meta, capture, stats, scenario, acks_later, acks_later_spans, ..
        } = io;
        let now = Instant::from_nanos(now_ns);
        let mut hca = self.hca.lock();
        let mut datagrams = 0;
        let completions_before = hca.completion_tally().successes();
        let mut keeping = false;
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
                        keeping = keeping
                            || (single
                                && buffer[start] == ACKNOWLEDGE
                                && hca.completion_tally().successes() > completions_before
                                && hca.ack_can_wait(&buffer[start..start + len]));
                        if keeping {
                            stats.rx_acks_later += 1;
                            let start = acks_later.len();
                            acks_later.extend_from_slice(packet);
                            acks_later_spans.push(start..acks_later.len());
                        } else {
                            hca.receive(now, packet);
                        }
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
