//! What the responder owes and sends (rxe_resp.c's duplicate_request,
//! send_ack, read_reply): duplicates answered from state, the queue of
//! responses in PSN order, and building each response packet.

use crate::endpoint::{PacketKind, Transmit};
use crate::hca::schedule_qp;
use crate::hca::QpStep;
use crate::mr::{MemoryTables, Origin};
use crate::qp::{QpContext, Resource, Responder, Response};
use crate::time::Instant;
use core::net::IpAddr;
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
        if is_plain_ack(&response) {
            // An ACK replaces the plain ACK last in the queue where it lies
            // (what taking that one out, then queueing this one, comes to
            // when the queue is within the bound).
            let within_bound = self.queue.len() <= bound;
            match self.queue.back_mut() {
                Some(last) if is_plain_ack(last) && within_bound => {
                    *last = response;
                    return true;
                }
                Some(last) if is_plain_ack(last) => {
                    self.queue.pop_back();
                }
                _ => {}
            }
        }
        if self.queue.len() >= bound {
            // Full: the requester's retry will ask again.
            return false;
        }
        self.queue.push_back(response);
        true
    }
}

impl QpStep<'_> {
    /// A request behind the expected PSN: answered from the responder's
    /// state, never executed again.
    pub(super) fn duplicate(
        &mut self,
        _now: Instant,
        psn: Psn,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let qp = &mut *self.qp;
        let Some(response) = duplicate_response(&qp.resp, psn, packet) else { return };
        if qp.resp.owe(response) {
            schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
        }
    }

    /// Builds the next packet the responder owes, if any (rxe's send_ack,
    /// send_atomic_ack, read_reply), on the QP's context borrowed once.
    pub(crate) fn next_response_packet(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let qp = &mut *self.qp;
        let response = *qp.resp.queue.front()?;
        let path = qp.path?;
        let plan = match response {
            Response::Ack { psn, syndrome, msn } => {
                qp.resp.queue.pop_front();
                ResponsePlan::ack(Opcode::RC_ACKNOWLEDGE, psn, syndrome, msn)
            }
            Response::ReadResponseAck { psn, msn } => {
                qp.resp.queue.pop_front();
                let ack = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
                ResponsePlan::ack(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, ack, msn)
            }
            Response::AtomicAck { resource, msn } => {
                qp.resp.queue.pop_front();
                let Some(Resource::Atomic { psn, orig }) =
                    qp.resp.resources.get(resource).copied().flatten()
                else {
                    return None;
                };
                let ack = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
                let plan = ResponsePlan::ack(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, ack, msn);
                ResponsePlan { orig: Some(orig), ..plan }
            }
            Response::Read { resource, start, next, msn } => {
                let read = ReadResponse { resource, start, next, msn };
                match read_response(&self.dev.mem, (path.local, &mut *buf), qp, read) {
                    ReadStep::Packet(plan) => plan,
                    ReadStep::Gone | ReadStep::NoRoom => return None,
                    ReadStep::AccessError { psn } => {
                        self.read_access_error(psn, msn);
                        return self.next_response_packet(buf);
                    }
                }
            }
        };
        let dest_qpn = Qpn::new(qp.attr.dest_qp_num);
        let bth = bth::Repr::new(plan.opcode, dest_qpn, plan.psn, plan.payload_len);
        let ext = ExtHeaders {
            aeth: plan.aeth,
            atomic_ack_eth: plan.orig.map(|orig| atomic_ack_eth::Repr { orig }),
            ..ExtHeaders::default()
        };
        let ip_id = self.dev.ip_ids.next();
        let sport = self.dev.source_ports.settle(qp.sport);
        // A READ response's payload is in the buffer already.
        let roce = Repr { bth, ext, payload: &[] };
        let kind_port = (PacketKind::Response, sport);
        let transmit =
            crate::req::emit_frame_around(&path, ip_id, kind_port, &roce, plan.payload_len, buf)?;
        qp.sent_pkts += 1;
        Some(transmit)
    }

    /// The R_Key of a READ being answered was invalidated (or its memory
    /// freed) since the READ was accepted: a remote access error, like any
    /// other, and the NAK for `psn` goes out now.
    fn read_access_error(&mut self, psn: Psn, msn: u32) {
        let qp = &mut *self.qp;
        qp.resp.queue.clear();
        self.dev.counters.send_nak += 1;
        let syndrome = Syndrome::Nak(NakCode::RemoteAccessError);
        qp.resp.queue.push_back(Response::Ack { psn, syndrome, msn });
        qp.state = QpState::Err;
        let qpn = qp.qpn.value();
        self.dev.push_event(crate::hca::Event::Async {
            event: uroce_device::types::EventType::QpAccessErr,
            element: qpn,
        });
        self.enter_error(Instant::ZERO.max(self.dev.last_now));
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

/// The transport fields of one response packet.
#[derive(Debug, Clone, Copy)]
struct ResponsePlan {
    opcode: Opcode,
    psn: Psn,
    aeth: Option<aeth::Repr>,
    /// Bytes of READ data (in the HCA's packet buffer).
    payload_len: usize,
    /// An atomic's original value.
    orig: Option<u64>,
}

impl ResponsePlan {
    /// An acknowledgement without data.
    fn ack(opcode: Opcode, psn: Psn, syndrome: Syndrome, msn: u32) -> ResponsePlan {
        let aeth = Some(aeth::Repr { syndrome, msn });
        ResponsePlan { opcode, psn, aeth, payload_len: 0, orig: None }
    }
}

/// The READ response owed at the head of the queue.
#[derive(Debug, Clone, Copy)]
struct ReadResponse {
    /// Its slot in the resource ring.
    resource: usize,
    /// The packet this run of responses starts at.
    start: u32,
    /// The packet to send now.
    next: u32,
    /// The MSN to report.
    msn: u32,
}

/// What answering a READ came to.
enum ReadStep {
    /// A response packet, its data in the packet buffer.
    Packet(ResponsePlan),
    /// The READ's resource was reused: nothing to send for it.
    Gone,
    /// The packet buffer is too short for the packet: nothing now.
    NoRoom,
    /// Its memory can no longer be read: NAK `psn`.
    AccessError {
        /// The PSN of the response that could not be read.
        psn: Psn,
    },
}

/// The next response packet of a READ (rxe's read_reply): its bytes are
/// read again from memory (a duplicate READ re-runs this path, and the
/// R_Key may have been invalidated since) straight into the packet buffer
/// `buf`, where its payload goes in a packet from `local`
/// (`payload_offset`), and the queue's head moves to the packet after it.
fn read_response(
    mem: &MemoryTables,
    (local, buf): (IpAddr, &mut [u8]),
    qp: &mut QpContext,
    read: ReadResponse,
) -> ReadStep {
    let ReadResponse { resource, start, next, msn } = read;
    let Some(Resource::Read { first_psn, npkts, va, rkey, len }) =
        qp.resp.resources.get(resource).copied().flatten()
    else {
        qp.resp.queue.pop_front();
        return ReadStep::Gone;
    };
    let mtu = qp.mtu();
    let offset = u64::from(next) * u64::from(mtu);
    let this_len = (u64::from(len) - offset.min(u64::from(len))).min(u64::from(mtu)) as usize;
    let last = next + 1 >= npkts;
    let opcode = match (next == start, last) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    };
    // A buffer too short for the packet: nothing is sent, and the READ
    // stays owed (sent when the QP is scheduled again).
    let Some(payload) = crate::req::payload_room(local, opcode, this_len, buf) else {
        return ReadStep::NoRoom;
    };
    let origin = Origin::Remote { qpn: qp.qpn };
    let read = mem
        .check(rkey, qp.pd, va + offset, this_len as u64, Access::REMOTE_READ, origin)
        .and_then(|range| mem.read(&range, &mut payload[..this_len]));
    if read.is_err() {
        return ReadStep::AccessError { psn: first_psn + next };
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
    let ack = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
    let aeth = with_aeth.then_some(aeth::Repr { syndrome: ack, msn });
    ReadStep::Packet(ResponsePlan {
        opcode,
        psn: first_psn + next,
        aeth,
        payload_len: this_len,
        orig: None,
    })
}
