//! The responder (rxe_resp.c): executes incoming requests and answers
//! them.
//!
//! For each request: check the PSN (RC: ahead → one PSN sequence NAK per
//! gap; behind → a duplicate; UC: resynchronise on the next FIRST/ONLY),
//! check the opcode sequence, find a receive WQE for a SEND (none: RNR NAK
//! on RC, drop on UC/UD), check the R_Key for WRITE/READ/atomics, execute,
//! then owe an ACK when AckReq is set. Duplicates are never executed
//! twice: a SEND or WRITE is acknowledged again, a READ is read again from
//! memory, an atomic is answered from its saved result.
//!
//! What is owed goes into one queue per QP, in PSN order, so an ACK never
//! overtakes the READ responses before it; consecutive ACKs coalesce.

use crate::endpoint::{PacketKind, Transmit};
use crate::hca::Hca;
use crate::mr::{AccessError, Origin, WordOp};
use crate::qp::{InMessage, QpContext, Resource, Response};
use crate::time::Instant;
use crate::trace::{DropReason, RequestVerdict, Step};
use uroce_device::cqe::Cqe;
use uroce_device::types::{Access, Qkey, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use uroce_device::wqe::RecvWqe;
use uroce_wire::aeth::{self, NakCode, Syndrome};
use uroce_wire::frame::RoceFrame;
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{atomic_ack_eth, bth, Mask, Opcode, Psn, Qpn};

/// How the responder must answer a request it cannot execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// RNR NAK: no receive WQE yet.
    NotReady,
    /// NAK invalid request, QP to error.
    InvalidRequest,
    /// NAK remote access error, QP to error.
    AccessError,
    /// NAK remote operational error, QP to error.
    OperationalError,
    /// Drop silently (UC/UD, or an unusable duplicate).
    Drop,
}

/// The most responses a QP may owe at once beyond its READ/atomic slots.
const MAX_QUEUED_ACKS: usize = 4;

impl Hca {
    /// Takes a request packet for QP `index`.
    pub(crate) fn responder_receive(
        &mut self,
        now: Instant,
        index: u32,
        frame: &RoceFrame<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        let qp_type = qp.qp_type;
        let psn = packet.bth().psn();
        if qp_type == QpType::Ud {
            self.receive_ud(now, index, frame, packet);
            return;
        }
        let epsn = qp.resp.epsn;
        let info = packet.info();
        if qp_type == QpType::Uc {
            // UC resynchronises on every FIRST/ONLY: a message that lost a
            // packet is dropped whole, silently, and counted once.
            let qp = self.qps.get_mut(index as usize).expect("checked");
            if info.is(Mask::START) {
                if psn != epsn || qp.resp.msg.is_some() {
                    self.counters.out_of_seq_request += 1;
                }
                // A message cut short by loss is abandoned (its receive WQE
                // stays at the head of the RQ for the next message).
                qp.resp.msg = None;
                qp.resp.drop_msg = false;
                qp.resp.epsn = psn;
            } else if qp.resp.drop_msg {
                qp.resp.epsn = psn.next();
                return self.request_step(now, index, packet, RequestVerdict::Dropped);
            } else if psn != epsn {
                self.counters.out_of_seq_request += 1;
                qp.resp.drop_msg = true;
                qp.resp.msg = None;
                qp.resp.epsn = psn.next();
                return self.request_step(now, index, packet, RequestVerdict::Dropped);
            }
        } else if psn != epsn {
            if psn.is_after(epsn) {
                let qp = self.qps.get_mut(index as usize).expect("checked");
                let nak = !qp.resp.nak_sent;
                if nak {
                    // Counted once per gap, as rxe does.
                    self.counters.out_of_seq_request += 1;
                    qp.resp.nak_sent = true;
                    let msn = qp.resp.msn;
                    self.owe(
                        index,
                        Response::Ack {
                            psn: epsn,
                            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                            msn,
                        },
                    );
                    self.counters.send_nak += 1;
                }
                let verdict = RequestVerdict::OutOfSequence { expected: epsn, nak };
                self.request_step(now, index, packet, verdict);
            } else {
                self.counters.duplicate_request += 1;
                self.request_step(now, index, packet, RequestVerdict::Duplicate);
                self.duplicate(now, index, psn, packet);
            }
            return;
        }
        // The step goes first: what executing it completes or raises
        // follows it.
        let verdict_at = self.steps_recorded();
        let result = self.execute(now, index, frame, packet);
        let verdict = match result {
            Ok(()) => RequestVerdict::Executed,
            Err(Refusal::Drop) => RequestVerdict::Dropped,
            Err(refusal) if qp_type == QpType::Uc => {
                let _ = refusal;
                RequestVerdict::Dropped
            }
            Err(refusal) => RequestVerdict::Refused(self.refusal_syndrome(index, refusal)),
        };
        self.request_step_at(verdict_at, now, index, packet, verdict);
        if let Err(refusal) = result {
            if refusal != Refusal::Drop {
                self.refuse(now, index, psn, refusal, qp_type);
            }
        }
    }

    /// The syndrome `refuse` answers `refusal` with.
    fn refusal_syndrome(&self, index: u32, refusal: Refusal) -> Syndrome {
        let timer_code = self.qps.get(index as usize).map_or(0, |qp| qp.attr.min_rnr_timer);
        match refusal {
            Refusal::NotReady => Syndrome::RnrNak { timer_code },
            Refusal::InvalidRequest | Refusal::Drop => Syndrome::Nak(NakCode::InvalidRequest),
            Refusal::AccessError => Syndrome::Nak(NakCode::RemoteAccessError),
            Refusal::OperationalError => Syndrome::Nak(NakCode::RemoteOperationalError),
        }
    }

    /// Records what the responder made of `packet`.
    fn request_step(
        &mut self,
        now: Instant,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
        verdict: RequestVerdict,
    ) {
        let at = self.steps_recorded();
        self.request_step_at(at, now, index, packet, verdict);
    }

    /// Records what the responder made of `packet`, before the steps taken
    /// since `at` (the completions and NAKs it caused).
    fn request_step_at(
        &mut self,
        at: u64,
        now: Instant,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
        verdict: RequestVerdict,
    ) {
        let Some(qp) = self.qps.get(index as usize) else { return };
        let bth = packet.bth();
        let step = Step::Request { qpn: qp.qpn, psn: bth.psn(), opcode: bth.opcode(), verdict };
        self.step_before(at, now, step);
    }

    /// Answers a request the responder will not execute.
    fn refuse(&mut self, now: Instant, index: u32, psn: Psn, refusal: Refusal, qp_type: QpType) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        if qp_type == QpType::Uc {
            // UC never NAKs: drop the rest of the message.
            qp.resp.drop_msg = true;
            qp.resp.msg = None;
            return;
        }
        let msn = qp.resp.msn;
        let syndrome = match refusal {
            Refusal::NotReady => {
                self.counters.send_rnr_err += 1;
                Syndrome::RnrNak { timer_code: qp.attr.min_rnr_timer }
            }
            Refusal::InvalidRequest => Syndrome::Nak(NakCode::InvalidRequest),
            Refusal::AccessError => Syndrome::Nak(NakCode::RemoteAccessError),
            Refusal::OperationalError => Syndrome::Nak(NakCode::RemoteOperationalError),
            Refusal::Drop => return,
        };
        if refusal == Refusal::NotReady {
            // The packets behind this one are out of sequence now; they
            // must not draw a PSN sequence NAK on top of the RNR NAK.
            qp.resp.nak_sent = true;
            self.owe(index, Response::Ack { psn, syndrome, msn });
            return;
        }
        self.counters.send_nak += 1;
        // A class C error: NAK, then the QP goes to the error state (the
        // queue keeps only the NAK).
        qp.resp.queue.clear();
        qp.resp.queue.push_back(Response::Ack { psn, syndrome, msn });
        qp.state = QpState::Err;
        let qpn = qp.qpn.value();
        let event = match refusal {
            Refusal::AccessError => uroce_device::types::EventType::QpAccessErr,
            Refusal::InvalidRequest => uroce_device::types::EventType::QpReqErr,
            _ => uroce_device::types::EventType::QpFatal,
        };
        self.push_event(crate::hca::Event::Async { event, element: qpn });
        self.enter_error(now, index);
        self.schedule(index);
    }

    /// Executes an in-sequence request.
    fn execute(
        &mut self,
        now: Instant,
        index: u32,
        frame: &RoceFrame<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let _ = frame;
        let info = packet.info();
        let bth = packet.bth();
        let psn = bth.psn();
        let qp = self.qps.get(index as usize).ok_or(Refusal::Drop)?;
        let mtu = qp.mtu() as usize;
        let payload = packet.payload();
        // Opcode sequence: a START only outside a message, MIDDLE/END
        // only inside one of the same kind.
        let in_msg = qp.resp.msg.as_ref();
        let seq_ok = match (info.is(Mask::START), in_msg) {
            (true, None) => true,
            (true, Some(_)) => false,
            (false, Some(InMessage::Send { .. })) => info.is(Mask::SEND),
            (false, Some(InMessage::Write { .. })) => info.is(Mask::WRITE),
            (false, None) => false,
        };
        if !seq_ok {
            return Err(Refusal::InvalidRequest);
        }
        // Packet length: FIRST and MIDDLE carry exactly an MTU, the rest at
        // most one.
        let full = !info.is(Mask::END) && info.is(Mask::PAYLOAD);
        if payload.len() > mtu || (full && payload.len() != mtu) {
            return Err(Refusal::InvalidRequest);
        }
        if info.is(Mask::SEND) {
            self.execute_send(now, index, packet)?;
        } else if info.is(Mask::WRITE) {
            self.execute_write(now, index, packet)?;
        } else if info.is(Mask::READ) {
            return self.execute_read(index, packet);
        } else if info.is(Mask::ATOMIC) {
            return self.execute_atomic(index, packet);
        } else if info.is(Mask::ATOMIC_WRITE) || info.is(Mask::FLUSH) {
            self.execute_atomic_write_or_flush(index, packet)?;
        } else {
            return Err(Refusal::InvalidRequest);
        }
        // SEND/WRITE/ATOMIC WRITE/FLUSH: one PSN per packet.
        self.accept_request(index, psn.next(), info.is(Mask::END), false).ok_or(Refusal::Drop)?;
        let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
        qp.resp.unacked_pkts += 1;
        let coalesce_limit = self.config.max_pkt_per_ack;
        if qp.qp_type == QpType::Rc && (bth.ack_req() || qp.resp.unacked_pkts >= coalesce_limit) {
            let msn = qp.resp.msn;
            qp.resp.unacked_pkts = 0;
            self.owe(
                index,
                Response::Ack {
                    psn,
                    syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
                    msn,
                },
            );
        }
        Ok(())
    }

    /// An in-sequence request was executed: expect `next_epsn`, allow one
    /// PSN sequence NAK for the next gap, and count the message if this
    /// packet completes it. A READ or atomic is `answered` by its own
    /// responses, which acknowledge everything before them: the ACK
    /// coalescing count starts again. Returns the MSN to report.
    fn accept_request(
        &mut self,
        index: u32,
        next_epsn: Psn,
        completes_message: bool,
        answered: bool,
    ) -> Option<u32> {
        let resp = &mut self.qps.get_mut(index as usize)?.resp;
        resp.epsn = next_epsn;
        resp.nak_sent = false;
        if completes_message {
            resp.msn = (resp.msn + 1) & 0x00ff_ffff;
        }
        if answered {
            resp.unacked_pkts = 0;
        }
        Some(resp.msn)
    }

    /// The receive WQE a SEND (or WRITE with immediate) goes into: from the
    /// SRQ (taken at once) or peeked from the RQ (consumed at completion).
    fn take_recv_wqe(&mut self, now: Instant, index: u32) -> Result<RecvWqe, Refusal> {
        let host = self.mem.host().clone();
        let qp = self.qps.get(index as usize).ok_or(Refusal::Drop)?;
        let (slot, max_sge) = match qp.srq {
            Some(srq_index) => {
                let srq = self.srqs.get_mut(srq_index as usize).ok_or(Refusal::OperationalError)?;
                if srq.ring.refresh(host.as_ref()).is_err() {
                    return Err(Refusal::OperationalError);
                }
                if srq.ring.available() == 0 {
                    return Err(Refusal::NotReady);
                }
                let mut slot = vec![0u8; srq.ring.desc.stride as usize];
                srq.ring
                    .read_entry(host.as_ref(), srq.ring.consumer, &mut slot)
                    .map_err(|_| Refusal::OperationalError)?;
                // An SRQ WQE is taken at once: other QPs share the ring.
                srq.ring.consume(host.as_ref(), 1).map_err(|_| Refusal::OperationalError)?;
                let max_sge = srq.max_sge;
                if srq.limit > 0 && srq.ring.available() < srq.limit {
                    srq.limit = 0;
                    self.push_event(crate::hca::Event::Async {
                        event: uroce_device::types::EventType::SrqLimitReached,
                        element: srq_index,
                    });
                }
                (slot, max_sge)
            }
            None => {
                let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
                let max_sge = qp.cap.max_recv_sge;
                let rq = qp.rq.as_mut().ok_or(Refusal::OperationalError)?;
                if rq.refresh(host.as_ref()).is_err() {
                    return Err(Refusal::OperationalError);
                }
                if rq.available() == 0 {
                    return Err(Refusal::NotReady);
                }
                let mut slot = vec![0u8; rq.desc.stride as usize];
                rq.read_entry(host.as_ref(), rq.consumer, &mut slot)
                    .map_err(|_| Refusal::OperationalError)?;
                // An RQ WQE stays at the head until its message completes.
                (slot, max_sge)
            }
        };
        match RecvWqe::decode(&slot, max_sge) {
            Ok(wqe) => Ok(wqe),
            Err(error) => {
                // A malformed receive WQE completes with its status and
                // takes the QP to the error state.
                self.counters.bad_wqe += 1;
                if let Some(qpn) = self.qps.get(index as usize).map(|qp| qp.qpn) {
                    self.step(now, Step::WqeRefused { qpn, status: error.status });
                }
                let wr_id = uroce_device::wqe::slot_wr_id(&slot);
                self.complete_recv(now, index, wr_id, error.status, WcOpcode::Recv, 0, None, true);
                let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
                if qp.qp_type != QpType::Rc && qp.state != QpState::Err {
                    qp.state = QpState::Err;
                    self.enter_error(now, index);
                }
                Err(Refusal::OperationalError)
            }
        }
    }

    /// Gives the RQ slot of a finished receive back (SRQ WQEs were taken
    /// already).
    fn release_recv_wqe(&mut self, index: u32) {
        let host = self.mem.host().clone();
        if let Some(qp) = self.qps.get_mut(index as usize) {
            if qp.srq.is_none() {
                if let Some(rq) = qp.rq.as_mut() {
                    if rq.available() > 0 {
                        let _ = rq.consume(host.as_ref(), 1);
                    }
                }
            }
        }
    }

    fn execute_send(
        &mut self,
        now: Instant,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let info = packet.info();
        if info.is(Mask::START) {
            let wqe = self.take_recv_wqe(now, index)?;
            let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
            qp.resp.msg = Some(InMessage::Send { wqe, offset: 0 });
        }
        let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
        let pd = qp.pd;
        let Some(InMessage::Send { wqe, offset }) = qp.resp.msg.as_mut() else {
            return Err(Refusal::InvalidRequest);
        };
        let payload = packet.payload();
        let at = *offset;
        let fits = at + payload.len() as u64 <= wqe.capacity();
        let placed = if fits {
            crate::comp::scatter(&self.mem, pd, &wqe.sges, at, payload)
        } else {
            Err(WcStatus::LocLenErr)
        };
        if let Err(status) = placed {
            // The receive completes in error; the requester gets a NAK.
            let wr_id = wqe.wr_id;
            self.complete_recv(now, index, wr_id, status, WcOpcode::Recv, 0, None, false);
            return Err(if status == WcStatus::LocLenErr {
                Refusal::InvalidRequest
            } else {
                Refusal::OperationalError
            });
        }
        *offset += payload.len() as u64;
        if info.is(Mask::END) {
            let (wr_id, byte_len) = (wqe.wr_id, *offset as u32);
            qp.resp.msg = None;
            let mut extra = None;
            if let Some(imm) = packet.immdt() {
                extra = Some((WcFlags::WITH_IMM, imm.imm()));
            }
            if let Some(ieth) = packet.ieth() {
                let rkey = ieth.rkey().0;
                if self.mem.invalidate_for(rkey, pd).is_err() {
                    self.complete_recv(
                        now,
                        index,
                        wr_id,
                        WcStatus::RemInvReqErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        false,
                    );
                    return Err(Refusal::InvalidRequest);
                }
                extra = Some((WcFlags::WITH_INV, rkey));
            }
            let solicited = packet.bth().solicited();
            self.complete_recv(
                now,
                index,
                wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                byte_len,
                extra,
                solicited,
            );
        }
        Ok(())
    }

    /// Writes a receive completion and releases the RQ slot.
    #[allow(clippy::too_many_arguments)]
    fn complete_recv(
        &mut self,
        now: Instant,
        index: u32,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        extra: Option<(WcFlags, u32)>,
        solicited: bool,
    ) {
        self.release_recv_wqe(index);
        let Some(qp) = self.qps.get(index as usize) else { return };
        let mut cqe = Cqe::new(wr_id, status, opcode, qp.qpn);
        cqe.byte_len = byte_len;
        if let Some((flags, value)) = extra {
            cqe.flags = flags;
            cqe.imm_or_inv = value;
        }
        let cq = qp.recv_cq;
        self.post_cqe(now, cq, &cqe, solicited);
    }

    fn execute_write(
        &mut self,
        now: Instant,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let info = packet.info();
        let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
        if !qp.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
            return Err(Refusal::AccessError);
        }
        if info.is(Mask::START) {
            let reth = packet.reth().ok_or(Refusal::InvalidRequest)?;
            qp.resp.msg = Some(InMessage::Write {
                va: reth.va(),
                rkey: reth.rkey().0,
                dma_len: reth.dma_len(),
                offset: 0,
            });
        }
        let (pd, qpn) = (qp.pd, qp.qpn);
        let Some(InMessage::Write { va, rkey, dma_len, offset }) = qp.resp.msg.clone() else {
            return Err(Refusal::InvalidRequest);
        };
        let payload = packet.payload();
        let end = offset + payload.len() as u64;
        if end > u64::from(dma_len) || (info.is(Mask::END) && end != u64::from(dma_len)) {
            return Err(Refusal::InvalidRequest);
        }
        // WRITE with immediate consumes a receive WQE: find it before
        // touching memory, so that after an RNR NAK the requester's resent
        // packet finds the message exactly as it was.
        let recv_wqe = match (info.is(Mask::END), packet.immdt()) {
            (true, Some(_)) => match self.take_recv_wqe(now, index) {
                Ok(wqe) => Some(wqe),
                Err(refusal) => {
                    if info.is(Mask::START) {
                        if let Some(qp) = self.qps.get_mut(index as usize) {
                            qp.resp.msg = None;
                        }
                    }
                    return Err(refusal);
                }
            },
            _ => None,
        };
        let range = self
            .mem
            .check(
                rkey,
                pd,
                va + offset,
                payload.len() as u64,
                Access::REMOTE_WRITE,
                Origin::Remote { qpn },
            )
            .map_err(access_refusal)?;
        self.mem.write(&range, payload).map_err(access_refusal)?;
        let qp = self.qps.get_mut(index as usize).ok_or(Refusal::Drop)?;
        if let Some(InMessage::Write { offset, .. }) = qp.resp.msg.as_mut() {
            *offset = end;
        }
        if info.is(Mask::END) {
            qp.resp.msg = None;
            if let (Some(imm), Some(wqe)) = (packet.immdt(), recv_wqe) {
                let solicited = packet.bth().solicited();
                self.complete_recv(
                    now,
                    index,
                    wqe.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    dma_len,
                    Some((WcFlags::WITH_IMM, imm.imm())),
                    solicited,
                );
            }
        }
        Ok(())
    }

    /// QP `index`, if it is RC (READ and atomics exist only there) and
    /// grants its peer `access`.
    fn rc_granting(&self, index: u32, access: Access) -> Result<&QpContext, Refusal> {
        let qp = self.qps.get(index as usize).ok_or(Refusal::Drop)?;
        if qp.qp_type != QpType::Rc {
            return Err(Refusal::InvalidRequest);
        }
        if !qp.attr.qp_access_flags.contains(access) {
            return Err(Refusal::AccessError);
        }
        Ok(qp)
    }

    fn execute_read(
        &mut self,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let reth = packet.reth().ok_or(Refusal::InvalidRequest)?;
        let psn = packet.bth().psn();
        let qp = self.rc_granting(index, Access::REMOTE_READ)?;
        let (pd, qpn, mtu) = (qp.pd, qp.qpn, qp.mtu());
        let len = reth.dma_len();
        if len > self.config.max_msg_size {
            return Err(Refusal::InvalidRequest);
        }
        self.mem
            .check(
                reth.rkey().0,
                pd,
                reth.va(),
                u64::from(len),
                Access::REMOTE_READ,
                Origin::Remote { qpn },
            )
            .map_err(access_refusal)?;
        let npkts = len.div_ceil(mtu).max(1);
        let resource =
            Resource::Read { first_psn: psn, npkts, va: reth.va(), rkey: reth.rkey().0, len };
        let slot = self.store_resource(index, resource).ok_or(Refusal::Drop)?;
        let msn = self.accept_request(index, psn + npkts, true, true).ok_or(Refusal::Drop)?;
        self.owe(index, Response::Read { resource: slot, start: 0, next: 0, msn });
        Ok(())
    }

    fn execute_atomic(
        &mut self,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let atomic = packet.atomic_eth().ok_or(Refusal::InvalidRequest)?;
        let psn = packet.bth().psn();
        let qp = self.rc_granting(index, Access::REMOTE_ATOMIC)?;
        if atomic.va() % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        let (pd, qpn) = (qp.pd, qp.qpn);
        let range = self
            .mem
            .check(
                atomic.rkey().0,
                pd,
                atomic.va(),
                8,
                Access::REMOTE_ATOMIC,
                Origin::Remote { qpn },
            )
            .map_err(access_refusal)?;
        let op = if packet.bth().opcode() == Opcode::RC_COMPARE_SWAP {
            WordOp::CompareSwap { compare: atomic.compare(), swap: atomic.swap_add() }
        } else {
            WordOp::FetchAdd(atomic.swap_add())
        };
        let orig = self.mem.atomic(&range, op).map_err(access_refusal)?;
        let slot =
            self.store_resource(index, Resource::Atomic { psn, orig }).ok_or(Refusal::Drop)?;
        let msn = self.accept_request(index, psn.next(), true, true).ok_or(Refusal::Drop)?;
        self.owe(index, Response::AtomicAck { resource: slot, msn });
        Ok(())
    }

    fn execute_atomic_write_or_flush(
        &mut self,
        index: u32,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let reth = packet.reth().ok_or(Refusal::InvalidRequest)?;
        let qp = self.qps.get(index as usize).ok_or(Refusal::Drop)?;
        let (pd, qpn) = (qp.pd, qp.qpn);
        if packet.info().is(Mask::ATOMIC_WRITE) {
            if !qp.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
                return Err(Refusal::AccessError);
            }
            let payload = packet.payload();
            if payload.len() != 8 || reth.dma_len() != 8 || reth.va() % 8 != 0 {
                return Err(Refusal::InvalidRequest);
            }
            let range = self
                .mem
                .check(
                    reth.rkey().0,
                    pd,
                    reth.va(),
                    8,
                    Access::REMOTE_WRITE,
                    Origin::Remote { qpn },
                )
                .map_err(access_refusal)?;
            let value =
                u64::from_le_bytes(payload.try_into().map_err(|_| Refusal::InvalidRequest)?);
            self.mem.atomic(&range, WordOp::Store(value)).map_err(access_refusal)?;
        } else {
            // FLUSH: memory here is always coherent and "persistent" as far
            // as the emulator can make it; check the rights and range.
            let feth = packet.feth().ok_or(Refusal::InvalidRequest)?;
            let mut needed = Access::EMPTY;
            if feth.placement_type() & 0x1 != 0 {
                needed = needed | Access::FLUSH_GLOBAL;
            }
            if feth.placement_type() & 0x2 != 0 {
                needed = needed | Access::FLUSH_PERSISTENT;
            }
            let len = if feth.selectivity_level() == 1 { 0 } else { u64::from(reth.dma_len()) };
            if len > 0 {
                self.mem
                    .check(reth.rkey().0, pd, reth.va(), len, needed, Origin::Remote { qpn })
                    .map_err(access_refusal)?;
            }
        }
        Ok(())
    }

    /// Stores a READ/atomic resource in the ring, replacing the oldest.
    fn store_resource(&mut self, index: u32, resource: Resource) -> Option<usize> {
        let qp = self.qps.get_mut(index as usize)?;
        let slots = qp.resp.resources.len();
        if slots == 0 {
            return None;
        }
        let slot = qp.resp.res_head % slots;
        // Responses still owed for the slot being reused go: the requester
        // exceeded max_dest_rd_atomic and will retry.
        qp.resp.queue.retain(|r| !matches!(r, Response::Read { resource, .. } | Response::AtomicAck { resource, .. } if *resource == slot));
        qp.resp.resources[slot] = Some(resource);
        qp.resp.res_head = (slot + 1) % slots;
        Some(slot)
    }

    /// A request behind the expected PSN.
    fn duplicate(
        &mut self,
        _now: Instant,
        index: u32,
        psn: Psn,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let info = packet.info();
        let Some(qp) = self.qps.get(index as usize) else { return };
        let msn = qp.resp.msn;
        if info.is(Mask::READ) {
            // Re-execute from the duplicate's PSN if we still hold the READ.
            let found = qp.resp.resources.iter().enumerate().find_map(|(slot, r)| match r {
                Some(Resource::Read { first_psn, npkts, .. })
                    if psn.in_window(*first_psn, *npkts) =>
                {
                    Some((slot, first_psn.distance_to(psn) as u32))
                }
                _ => None,
            });
            if let Some((slot, next)) = found {
                // A resumed READ asks from `psn` on, with its own RETH.
                self.owe(index, Response::Read { resource: slot, start: next, next, msn });
            }
            return;
        }
        if info.is(Mask::ATOMIC) {
            let found = qp
                .resp
                .resources
                .iter()
                .position(|r| matches!(r, Some(Resource::Atomic { psn: p, .. }) if *p == psn));
            if let Some(slot) = found {
                self.owe(index, Response::AtomicAck { resource: slot, msn });
            }
            return;
        }
        // SEND, WRITE, ATOMIC WRITE, FLUSH: acknowledge again, never
        // deliver twice (rxe ACKs the last PSN it completed).
        if packet.bth().ack_req() || info.is(Mask::END) {
            let last = qp.resp.epsn.wrapping_sub(1);
            self.owe(
                index,
                Response::Ack {
                    psn: last,
                    syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
                    msn,
                },
            );
        }
    }

    /// Queues a response, coalescing ACKs, within the bound.
    fn owe(&mut self, index: u32, response: Response) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let bound = qp.resp.resources.len() + MAX_QUEUED_ACKS;
        let is_plain_ack =
            |r: &Response| matches!(r, Response::Ack { syndrome: Syndrome::Ack { .. }, .. });
        if is_plain_ack(&response) && qp.resp.queue.back().is_some_and(is_plain_ack) {
            qp.resp.queue.pop_back();
        }
        if qp.resp.queue.len() >= bound {
            // Full: the requester's retry will ask again.
            return;
        }
        qp.resp.queue.push_back(response);
        self.schedule(index);
    }

    /// UD: one packet per message, Q_Key checked, GRH at the buffer start.
    fn receive_ud(
        &mut self,
        now: Instant,
        index: u32,
        frame: &RoceFrame<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let Some(deth) = packet.deth() else { return };
        let Some(qp) = self.qps.get(index as usize) else { return };
        if deth.qkey() != Qkey(qp.attr.qkey) {
            let qpn = qp.qpn;
            return self.drop_packet(now, Some(qpn), DropReason::BadQkey);
        }
        let wqe = match self.take_recv_wqe(now, index) {
            Ok(wqe) => wqe,
            // No receive WQE: a UD datagram is dropped.
            Err(_) => return self.request_step(now, index, packet, RequestVerdict::Dropped),
        };
        self.request_step(now, index, packet, RequestVerdict::Executed);
        let qp = self.qps.get(index as usize).expect("checked");
        let pd = qp.pd;
        let mut grh = [0u8; 40];
        let ip = frame.ip_header_bytes();
        if ip.len() == 40 {
            grh.copy_from_slice(ip);
        } else if ip.len() >= 20 {
            grh[20..40].copy_from_slice(&ip[..20]);
        }
        let payload = packet.payload();
        let sges = &wqe.sges;
        let total = 40 + payload.len() as u64;
        let status = if total > wqe.capacity() {
            Err(WcStatus::LocLenErr)
        } else {
            crate::comp::scatter(&self.mem, pd, sges, 0, &grh)
                .and_then(|()| crate::comp::scatter(&self.mem, pd, sges, 40, payload))
        };
        let qpn = qp.qpn;
        let cq = qp.recv_cq;
        self.release_recv_wqe(index);
        let mut cqe = Cqe::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, qpn);
        match status {
            Ok(()) => {
                cqe.byte_len = total as u32;
                cqe.flags = WcFlags::GRH;
                cqe.src_qp = deth.src_qpn();
                if let Some(imm) = packet.immdt() {
                    cqe.flags = cqe.flags | WcFlags::WITH_IMM;
                    cqe.imm_or_inv = imm.imm();
                }
            }
            Err(status) => cqe.status = status,
        }
        let solicited = packet.bth().solicited();
        self.post_cqe(now, cq, &cqe, solicited);
        if cqe.status != WcStatus::Success {
            if let Some(qp) = self.qps.get_mut(index as usize) {
                qp.state = QpState::Err;
            }
            self.enter_error(now, index);
        }
    }

    /// Builds the next packet the responder owes, if any.
    pub(crate) fn next_response_packet(&mut self, index: u32, buf: &mut [u8]) -> Option<Transmit> {
        let qp = self.qps.get_mut(index as usize)?;
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
                let qp = self.qps.get_mut(index as usize)?;
                if read.is_err() {
                    // The key was invalidated (or the memory freed) since the
                    // READ was accepted: a remote access error, like any
                    // other, and the NAK goes out now.
                    let psn = first_psn + next;
                    qp.resp.queue.clear();
                    self.counters.send_nak += 1;
                    let syndrome = Syndrome::Nak(NakCode::RemoteAccessError);
                    let qp = self.qps.get_mut(index as usize)?;
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
        let ip_id = self.next_ip_id();
        let sport = self.settled_source_port(sport);
        let roce = Repr { bth, ext, payload: &self.scratch[..payload_len] };
        let transmit =
            crate::req::emit_frame(path, ip_id, (PacketKind::Response, sport), roce, buf)?;
        if let Some(qp) = self.qps.get_mut(index as usize) {
            qp.sent_pkts += 1;
        }
        Some(transmit)
    }
}

fn access_refusal(e: AccessError) -> Refusal {
    match e {
        AccessError::Fault(_) => Refusal::OperationalError,
        _ => Refusal::AccessError,
    }
}
