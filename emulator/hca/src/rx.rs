//! The receive path: from an IP packet to the engine that takes it.
//!
//! Nothing in a received packet is trusted: the frame must be RoCEv2 with
//! a good ICRC (and IPv4/UDP checksums), its transport headers must fit the
//! opcode table, the QP must exist, be able to receive, have the packet's
//! transport type, and (RC/UC) be connected to the packet's source address
//! and QP. Everything dropped is counted.

use crate::endpoint::{Endpoint, Transmit};
use crate::hca::Hca;
use crate::hca::QpStep;
use crate::time::Instant;
use crate::trace::{DropReason, Step};
use uroce_device::command::Gid;
use uroce_device::types::{QpState, QpType, Qpn};
use uroce_wire::frame::RoceDatagram;
use uroce_wire::opcode::Transport;
use uroce_wire::roce::Packet;
use uroce_wire::{bth, Mask};

impl Hca {
    /// Takes one received IP packet.
    pub(crate) fn receive_packet(&mut self, now: Instant, data: &[u8]) {
        // The headers are read where they lie in `data`.
        let Some(frame) = RoceDatagram::parse(data) else {
            return self.drop_packet(now, None, DropReason::Malformed);
        };
        if !frame.integrity_ok() {
            return self.drop_packet(now, None, DropReason::BadChecksum);
        }
        let Ok(packet) = frame.packet() else {
            return self.drop_packet(now, None, DropReason::Malformed);
        };
        let bth = packet.bth();
        let qpn = bth.dest_qpn();
        let destination = frame.destination();
        // A group's packets go to the multicast QPN (and the multicast
        // QPN's to a group: `receive_mcast` finds none for a unicast
        // address).
        let ours = if destination.is_multicast() {
            qpn == Qpn::MULTICAST
        } else {
            self.addresses().contains(&destination)
        };
        if !ours {
            return self.drop_packet(now, Some(qpn), DropReason::NotOurAddress);
        }
        if !matches!(bth.pkey(), bth::DEFAULT_PKEY | 0x7fff) {
            return self.drop_packet(now, Some(qpn), DropReason::BadPkey);
        }
        if qpn == Qpn::MULTICAST {
            return self.receive_mcast(now, &frame, &packet);
        }
        if qpn == Qpn::GSI {
            return self.receive_gsi(now, (frame.source(), frame.destination()), &packet);
        }
        let Some(index) = self.qp_slot(qpn) else {
            return self.drop_packet(now, Some(qpn), DropReason::UnknownQp);
        };
        let Some(mut step) = self.qp_step(index) else {
            return self.drop_packet(now, Some(qpn), DropReason::UnknownQp);
        };
        let qp = &*step.qp;
        let transport_ok = matches!(
            (qp.qp_type, bth.opcode().transport()),
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
        );
        if !transport_ok || !qp.can_receive() {
            return step.dev.drop_packet(now, Some(qpn), DropReason::QpCannotTakeIt);
        }
        if qp.qp_type != QpType::Ud {
            let from_peer = qp
                .path
                .is_some_and(|p| p.remote == frame.source() && p.local == frame.destination());
            if !from_peer {
                return step.dev.drop_packet(now, Some(qpn), DropReason::NotFromPeer);
            }
        }
        let info = packet.info();
        if !info.is(Mask::RESP) && step.qp.injected.stalled(now) {
            // An injected responder stall: the request is not taken.
            return step.dev.drop_packet(now, Some(qpn), DropReason::Stalled);
        }
        step.dev.counters.rcvd_pkts += 1;
        if info.is(Mask::RESP) {
            step.completer_receive(now, &packet);
        } else if step.qp.state != QpState::Err {
            step.responder_receive(now, &frame, &packet);
        }
    }

    /// A packet to the multicast QPN: to every QP attached to the group
    /// its destination address names, each checking it as its own (type,
    /// state, Q_Key), as rxe's `rxe_rcv_mcast_pkt` does. Counted once in
    /// `rcvd_pkts` however many QPs it reaches.
    fn receive_mcast(&mut self, now: Instant, frame: &RoceDatagram<'_>, packet: &Packet<&[u8]>) {
        let group = Gid::from_ip(frame.destination());
        let attached = self.mcast.members(&group).len();
        if attached == 0 {
            return self.drop_packet(now, Some(Qpn::MULTICAST), DropReason::NoMulticastGroup);
        }
        self.dev.counters.rcvd_pkts += 1;
        self.dev.counters.rcvd_mcast_pkts += 1;
        let ud = packet.bth().opcode().transport() == Transport::Ud;
        // Delivering changes no membership: the list is read by position,
        // not copied.
        for at in 0..attached {
            let Some(&qpn) = self.mcast.members(&group).get(at) else { break };
            let Some(mut step) = self.qp_slot(qpn).and_then(|index| self.qp_step(index)) else {
                continue;
            };
            let qp = &*step.qp;
            if !ud || qp.qp_type != QpType::Ud || !qp.can_receive() || qp.state == QpState::Err {
                step.dev.drop_packet(now, Some(qpn), DropReason::QpCannotTakeIt);
                continue;
            }
            if step.qp.injected.stalled(now) {
                step.dev.drop_packet(now, Some(qpn), DropReason::Stalled);
                continue;
            }
            step.responder_receive(now, frame, packet);
        }
    }

    /// Drops a received packet: its counter, and the step.
    pub(crate) fn drop_packet(&mut self, now: Instant, qpn: Option<Qpn>, reason: DropReason) {
        count_drop(&mut self.dev.counters, &mut self.dev.steps, now, qpn, reason);
    }
}

impl QpStep<'_> {
    /// One packet from this QP: what the responder owes first (unless an
    /// injected stall holds it), then the requester's next request. The
    /// one place both engines' packets pass: it stamps the local QPN.
    pub(crate) fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let response =
            if self.qp.injected.stalled(now) { None } else { self.next_response_packet(buf) };
        let mut transmit = response.or_else(|| self.next_request_packet(now, buf))?;
        transmit.local_qpn = Some(self.qp.qpn);
        Some(transmit)
    }
}

/// Counts a dropped packet and records the step.
pub(crate) fn count_drop(
    c: &mut crate::counters::Counters,
    steps: &mut crate::trace::StepLog,
    now: Instant,
    qpn: Option<Qpn>,
    reason: DropReason,
) {
    match reason {
        DropReason::Malformed => c.rcvd_malformed += 1,
        DropReason::BadChecksum => c.rcvd_icrc_err += 1,
        DropReason::NotOurAddress
        | DropReason::BadPkey
        | DropReason::NotFromPeer
        | DropReason::BadQkey => c.rcvd_bad_key_or_addr += 1,
        DropReason::UnknownQp | DropReason::QpCannotTakeIt | DropReason::Crashed => {
            c.rcvd_unknown_qp += 1
        }
        DropReason::Stalled => c.rcvd_stalled_drop += 1,
        DropReason::NotAMad => {
            // QP1 cannot take it: counted with the packets no QP takes, as
            // before QP1 existed, and apart.
            c.rcvd_unknown_qp += 1;
            c.rcvd_gsi_drop += 1;
        }
        DropReason::NoMulticastGroup => {
            c.rcvd_unknown_qp += 1;
            c.rcvd_mcast_drop += 1;
        }
    }
    steps.record(now, Step::Dropped { qpn, reason });
}

impl Hca {
    /// Whether `roce`, the UDP payload (BTH onward) of a received packet,
    /// is a positive ACK whose processing may wait until after the
    /// runtime's next send: an RC ACKNOWLEDGE without a NAK, to a QP in
    /// RTS whose send queue has room for another post without the WQEs
    /// this ACK retires. A runtime that hands it over later (before any
    /// packet received after it) takes the completer's work off an
    /// application's path from a receive to its next post. A hint only:
    /// nothing is checked or counted here, and the packet is checked in
    /// full when it is received.
    pub fn ack_can_wait(&self, roce: &[u8]) -> bool {
        let Ok(packet) = uroce_wire::roce::Packet::new_checked(roce) else { return false };
        let bth = packet.bth();
        if bth.opcode() != uroce_wire::Opcode::RC_ACKNOWLEDGE {
            return false;
        }
        let Some(qp) = self.qp(bth.dest_qpn()) else { return false };
        // What the HCA fetched is at most what the driver published: a
        // queue already full on the HCA's count needs no further look.
        let room = |posted: u32| posted.wrapping_sub(qp.sq.consumer) < qp.cap.max_send_wr;
        if qp.qp_type != QpType::Rc || qp.state != QpState::Rts || !room(qp.fetched) {
            return false;
        }
        let positive = packet
            .aeth()
            .is_some_and(|aeth| matches!(aeth.syndrome(), uroce_wire::aeth::Syndrome::Ack { .. }));
        // What the driver published (it may have posted past what the HCA
        // fetched): room for one more without this ACK's retirements.
        let producer_at = qp.sq.desc.base + uroce_device::ring::PRODUCER_OFFSET;
        positive && self.dev.mem.host().load_acquire_u32(producer_at).is_ok_and(room)
    }
}
