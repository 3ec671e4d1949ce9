//! What the responder owes and sends (rxe_resp.c's duplicate_request,
//! send_ack, read_reply): duplicates answered from state, the queue of
//! responses in PSN order, and building each response packet.

use crate::endpoint::{PacketKind, Transmit};
use crate::handles::QpIndex;
use crate::hca::schedule_qp;
use crate::hca::Hca;
use crate::mr::Origin;
use crate::qp::{Resource, Responder, Response};
use crate::time::Instant;
use uroce_device::types::{Access, QpState};
use uroce_wire::aeth::{self, NakCode, Syndrome};
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{atomic_ack_eth, bth, Mask, Opcode, Psn, Qpn};

/// The most responses a QP may owe at once beyond its READ/atomic slots.
const MAX_QUEUED_ACKS: usize = 4;

impl Responder {
    /// Queues a response, coalescing ACKs, within the bound. Returns
    /// whether it was queued (the QP has something to send).
    pub(crate) fn owe(&mut self, response: Response) -> bool {
        let bound = self.resources.len() + MAX_QUEUED_ACKS;
        let is_plain_ack =
            |r: &Response| matches!(r, Response::Ack { syndrome: Syndrome::Ack { .. }, .. });
        if is_plain_ack(&response) && self.queue.back().is_some_and(is_plain_ack) {
            self.queue.pop_back();
        }
        if self.queue.len() >= bound {
            // Full: the requester's retry will ask again.
            return false;
        }
        self.queue.push_back(response);
        true
    }
}

impl Hca {
    /// A request behind the expected PSN: answered from the responder's
    /// state, never executed again.
    pub(super) fn duplicate(
        &mut self,
        _now: Instant,
        index: QpIndex,
        psn: Psn,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let Some(qp) = self.qps.get_mut(index) else { return };
        let Some(response) = duplicate_response(&qp.resp, psn, packet) else { return };
        if qp.resp.owe(response) {
            schedule_qp(&mut self.sched, &self.mem, index, qp);
        }
    }

    /// Builds the next packet the responder owes, if any.
    pub(crate) fn next_response_packet(
        &mut self,
        index: QpIndex,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        // The whole packet is built on the QP's context, borrowed once.
        let qp = self.qps.get_mut(index)?;
        let response = *qp.resp.queue.front()?;
        let path = qp.path?;
        let sport = qp.sport;
        let dest_qpn = Qpn::new(qp.attr.dest_qp_num);
        let mtu = qp.mtu();
        let pd = qp.pd;
        let ack_syndrome = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
        let (opcode, psn, aeth_repr, payload_len, orig) = match response {
            Response::Ack { psn, syndrome, msn } => {
                qp.resp.queue.pop_front();
                (Opcode::RC_ACKNOWLEDGE, psn, Some(aeth::Repr { syndrome, msn }), 0, None)
            }
            Response::AtomicAck { resource, msn } => {
                qp.resp.queue.pop_front();
                let Some(Resource::Atomic { psn, orig }) =
                    qp.resp.resources.get(resource).copied().flatten()
                else {
                    return None;
                };
                let aeth = aeth::Repr { syndrome: ack_syndrome, msn };
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, Some(aeth), 0, Some(orig))
            }
            Response::Read { resource, start, next, msn } => {
                let Some(Resource::Read { first_psn, npkts, va, rkey, len }) =
                    qp.resp.resources.get(resource).copied().flatten()
                else {
                    qp.resp.queue.pop_front();
                    return None;
                };
                let offset = u64::from(next) * u64::from(mtu);
                let this_len =
                    (u64::from(len) - offset.min(u64::from(len))).min(u64::from(mtu)) as usize;
                let last = next + 1 >= npkts;
                let opcode = match (next == start, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                // Read the bytes again from memory (a duplicate READ re-runs
                // this path): the R_Key may have been invalidated since.
                let qpn = qp.qpn;
                let read = self
                    .mem
                    .check(
                        rkey,
                        pd,
                        va + offset,
                        this_len as u64,
                        Access::REMOTE_READ,
                        Origin::Remote { qpn },
                    )
                    .and_then(|range| self.mem.read(&range, &mut self.scratch[..this_len]));
                if read.is_err() {
                    // The key was invalidated (or the memory freed) since the
                    // READ was accepted: a remote access error, like any
                    // other, and the NAK goes out now.
                    let psn = first_psn + next;
                    qp.resp.queue.clear();
                    self.counters.send_nak += 1;
                    let syndrome = Syndrome::Nak(NakCode::RemoteAccessError);
                    qp.resp.queue.push_back(Response::Ack { psn, syndrome, msn });
                    qp.state = QpState::Err;
                    let qpn = qp.qpn.value();
                    self.push_event(crate::hca::Event::Async {
                        event: uroce_device::types::EventType::QpAccessErr,
                        element: qpn,
                    });
                    self.enter_error(Instant::ZERO.max(self.now()), index);
                    return self.next_response_packet(index, buf);
                }
                if last {
                    qp.resp.queue.pop_front();
                } else if let Some(Response::Read { next: n, .. }) = qp.resp.queue.front_mut() {
                    *n += 1;
                }
                let with_aeth = matches!(
                    opcode,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST
                        | Opcode::RC_RDMA_READ_RESPONSE_LAST
                        | Opcode::RC_RDMA_READ_RESPONSE_ONLY
                );
                let aeth = with_aeth.then_some(aeth::Repr { syndrome: ack_syndrome, msn });
                (opcode, first_psn + next, aeth, this_len, None)
            }
        };
        let bth = bth::Repr::new(opcode, dest_qpn, psn, payload_len);
        let ext = ExtHeaders {
            aeth: aeth_repr,
            atomic_ack_eth: orig.map(|orig| atomic_ack_eth::Repr { orig }),
            ..ExtHeaders::default()
        };
        let ip_id = self.ip_ids.next();
        let sport = self.source_ports.settle(sport);
        let roce = Repr { bth, ext, payload: &self.scratch[..payload_len] };
        let transmit =
            crate::req::emit_frame(path, ip_id, (PacketKind::Response, sport), roce, buf)?;
        qp.sent_pkts += 1;
        Some(transmit)
    }
}

/// What the responder answers a duplicate request at `psn` with, if
/// anything: a READ it still holds is read again from the duplicate's PSN
/// on, an atomic is answered from its saved result, and a SEND, WRITE,
/// ATOMIC WRITE or FLUSH is acknowledged again (rxe ACKs the last PSN it
/// completed), never delivered twice.
fn duplicate_response(
    resp: &Responder,
    psn: Psn,
    packet: &uroce_wire::roce::Packet<&[u8]>,
) -> Option<Response> {
    let info = packet.info();
    let msn = resp.msn;
    if info.is(Mask::READ) {
        let (slot, next) = resp.resources.iter().enumerate().find_map(|(slot, r)| match r {
            Some(Resource::Read { first_psn, npkts, .. }) if psn.in_window(*first_psn, *npkts) => {
                Some((slot, first_psn.distance_to(psn) as u32))
            }
            _ => None,
        })?;
        // A resumed READ asks from `psn` on, with its own RETH.
        return Some(Response::Read { resource: slot, start: next, next, msn });
    }
    if info.is(Mask::ATOMIC) {
        let slot = resp
            .resources
            .iter()
            .position(|r| matches!(r, Some(Resource::Atomic { psn: p, .. }) if *p == psn))?;
        return Some(Response::AtomicAck { resource: slot, msn });
    }
    if packet.bth().ack_req() || info.is(Mask::END) {
        let syndrome = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
        return Some(Response::Ack { psn: resp.epsn.wrapping_sub(1), syndrome, msn });
    }
    None
}
