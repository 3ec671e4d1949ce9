//! Executing an in-sequence request (rxe_resp.c's check_op_seq,
//! check_length, check_rkey, execute, do_complete): SEND, WRITE, READ,
//! the atomics, ATOMIC WRITE and FLUSH, and the READ/atomic resources.

use super::{access_refusal, Refusal};
use crate::handles::PdIndex;
use crate::hca::schedule_qp;
use crate::hca::QpStep;
use crate::mr::{Checked, Origin, WordOp};
use crate::qp::{InMessage, QpContext, Resource, Responder, Response};
use crate::time::Instant;
use uroce_device::types::{Access, QpType, WcFlags, WcOpcode, WcStatus};
use uroce_wire::aeth::{self, Syndrome};
use uroce_wire::frame::RoceDatagram;
use uroce_wire::{Mask, Opcode, Psn};

impl QpStep<'_> {
    /// Executes an in-sequence request.
    pub(super) fn execute(
        &mut self,
        now: Instant,
        frame: &RoceDatagram<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let _ = frame;
        let info = packet.info();
        let bth = packet.bth();
        let psn = bth.psn();
        let qp = &*self.qp;
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
            self.execute_send(now, packet)?;
        } else if info.is(Mask::WRITE) {
            self.execute_write(now, packet)?;
        } else if info.is(Mask::READ) {
            return self.execute_read(packet);
        } else if info.is(Mask::ATOMIC) {
            return self.execute_atomic(packet);
        } else if info.is(Mask::ATOMIC_WRITE) || info.is(Mask::FLUSH) {
            self.execute_atomic_write_or_flush(packet)?;
        } else {
            return Err(Refusal::InvalidRequest);
        }
        // SEND/WRITE/ATOMIC WRITE/FLUSH: one PSN per packet, and the ACK
        // when it is asked for (or enough packets went unacknowledged).
        let qp = &mut *self.qp;
        qp.resp.accept_request(psn.next(), info.is(Mask::END), false);
        qp.resp.unacked_pkts += 1;
        let coalesce_limit = self.dev.config.max_pkt_per_ack;
        if qp.qp_type == QpType::Rc && (info.is(Mask::ATOMIC_WRITE) || info.is(Mask::FLUSH)) {
            // IBA 1.5 (rxe 6.12's `acknowledge`): always answered, by an
            // RDMA READ RESPONSE ONLY without payload.
            let msn = qp.resp.msn;
            qp.resp.unacked_pkts = 0;
            if qp.resp.owe(Response::ReadResponseAck { psn, msn }) {
                schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
            }
        } else if qp.qp_type == QpType::Rc
            && (bth.ack_req() || qp.resp.unacked_pkts >= coalesce_limit)
        {
            let msn = qp.resp.msn;
            qp.resp.unacked_pkts = 0;
            let syndrome = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
            if qp.resp.owe(Response::Ack { psn, syndrome, msn }) {
                schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
            }
        }
        Ok(())
    }

    fn execute_send(
        &mut self,
        now: Instant,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let info = packet.info();
        if info.is(Mask::START) {
            self.take_recv_wqe(now)?;
            let qp = &mut *self.qp;
            qp.resp.msg = Some(InMessage::Send { offset: 0 });
        }
        let qp = &mut *self.qp;
        let pd = qp.pd;
        let Some(InMessage::Send { offset }) = qp.resp.msg.as_mut() else {
            return Err(Refusal::InvalidRequest);
        };
        let wqe = &qp.resp.recv_wqe;
        let payload = packet.payload();
        let at = *offset;
        let fits = at + payload.len() as u64 <= wqe.capacity();
        let placed = if fits {
            crate::comp::scatter(&self.dev.mem, pd, &wqe.sges, at, payload)
        } else {
            Err(WcStatus::LocLenErr)
        };
        if let Err(status) = placed {
            // The receive completes in error; the requester gets a NAK.
            let wr_id = wqe.wr_id;
            self.complete_recv(now, wr_id, status, WcOpcode::Recv, 0, None, false);
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
            return self.finish_send_message(now, packet, pd, wr_id, byte_len);
        }
        Ok(())
    }

    /// The last packet of a SEND was placed (rxe's do_complete): the
    /// R_Key a SEND with invalidate names is invalidated, and the receive
    /// completes, with the immediate data or the invalidated key.
    fn finish_send_message(
        &mut self,
        now: Instant,
        packet: &uroce_wire::roce::Packet<&[u8]>,
        pd: PdIndex,
        wr_id: u64,
        byte_len: u32,
    ) -> Result<(), Refusal> {
        let mut extra = None;
        if let Some(imm) = packet.immdt() {
            extra = Some((WcFlags::WITH_IMM, imm.imm()));
        }
        if let Some(ieth) = packet.ieth() {
            let rkey = ieth.rkey().0;
            if self.dev.mem.invalidate_for(rkey, pd).is_err() {
                self.complete_recv(
                    now,
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
            wr_id,
            WcStatus::Success,
            WcOpcode::Recv,
            byte_len,
            extra,
            solicited,
        );
        Ok(())
    }

    fn execute_write(
        &mut self,
        now: Instant,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let info = packet.info();
        let qp = &mut *self.qp;
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
        let Some(&InMessage::Write { va, rkey, dma_len, offset }) = qp.resp.msg.as_ref() else {
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
        let recv_wr_id = match (info.is(Mask::END), packet.immdt()) {
            (true, Some(_)) => match self.take_recv_wqe(now) {
                Ok(wr_id) => Some(wr_id),
                Err(refusal) => {
                    if info.is(Mask::START) {
                        self.qp.resp.msg = None;
                    }
                    return Err(refusal);
                }
            },
            _ => None,
        };
        let range =
            self.check_remote(rkey, va + offset, payload.len() as u64, Access::REMOTE_WRITE)?;
        self.dev.mem.write(&range, payload).map_err(access_refusal)?;
        let qp = &mut *self.qp;
        if let Some(InMessage::Write { offset, .. }) = qp.resp.msg.as_mut() {
            *offset = end;
        }
        if info.is(Mask::END) {
            qp.resp.msg = None;
            if let (Some(imm), Some(wr_id)) = (packet.immdt(), recv_wr_id) {
                let solicited = packet.bth().solicited();
                self.complete_recv(
                    now,
                    wr_id,
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

    /// RDMA READ: check the R_Key over the whole range, keep the READ as a
    /// resource (a duplicate is answered from it), owe its responses.
    fn execute_read(&mut self, packet: &uroce_wire::roce::Packet<&[u8]>) -> Result<(), Refusal> {
        let reth = packet.reth().ok_or(Refusal::InvalidRequest)?;
        let psn = packet.bth().psn();
        let qp = &mut *self.qp;
        rc_granting(qp, Access::REMOTE_READ)?;
        let mtu = qp.mtu();
        let len = reth.dma_len();
        if len > self.dev.config.max_msg_size {
            return Err(Refusal::InvalidRequest);
        }
        self.check_remote(reth.rkey().0, reth.va(), u64::from(len), Access::REMOTE_READ)?;
        let qp = &mut *self.qp;
        let npkts = len.div_ceil(mtu).max(1);
        let resource =
            Resource::Read { first_psn: psn, npkts, va: reth.va(), rkey: reth.rkey().0, len };
        let slot = qp.resp.store_resource(resource).ok_or(Refusal::Drop)?;
        let msn = qp.resp.accept_request(psn + npkts, true, true);
        if qp.resp.owe(Response::Read { resource: slot, start: 0, next: 0, msn }) {
            schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
        }
        Ok(())
    }

    /// COMPARE_SWAP and FETCH_ADD: check the R_Key, run the operation,
    /// keep its result as a resource, owe the ATOMIC ACKNOWLEDGE.
    fn execute_atomic(&mut self, packet: &uroce_wire::roce::Packet<&[u8]>) -> Result<(), Refusal> {
        let atomic = packet.atomic_eth().ok_or(Refusal::InvalidRequest)?;
        let psn = packet.bth().psn();
        let qp = &mut *self.qp;
        rc_granting(qp, Access::REMOTE_ATOMIC)?;
        if atomic.va() % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        let range = self.check_remote(atomic.rkey().0, atomic.va(), 8, Access::REMOTE_ATOMIC)?;
        let op = if packet.bth().opcode() == Opcode::RC_COMPARE_SWAP {
            WordOp::CompareSwap { compare: atomic.compare(), swap: atomic.swap_add() }
        } else {
            WordOp::FetchAdd(atomic.swap_add())
        };
        let orig = self.dev.mem.atomic(&range, op).map_err(access_refusal)?;
        let qp = &mut *self.qp;
        let slot = qp.resp.store_resource(Resource::Atomic { psn, orig }).ok_or(Refusal::Drop)?;
        let msn = qp.resp.accept_request(psn.next(), true, true);
        if qp.resp.owe(Response::AtomicAck { resource: slot, msn }) {
            schedule_qp(&mut self.dev.sched, &self.dev.mem, self.index, qp);
        }
        Ok(())
    }
}

impl Responder {
    /// An in-sequence request was executed: expect `next_epsn`, allow one
    /// PSN sequence NAK for the next gap, and count the message if this
    /// packet completes it. A READ or atomic is `answered` by its own
    /// responses, which acknowledge everything before them: the ACK
    /// coalescing count starts again. Returns the MSN to report.
    fn accept_request(&mut self, next_epsn: Psn, completes_message: bool, answered: bool) -> u32 {
        self.epsn = next_epsn;
        self.nak_sent = false;
        if completes_message {
            self.msn = (self.msn + 1) & 0x00ff_ffff;
        }
        if answered {
            self.unacked_pkts = 0;
        }
        self.msn
    }

    /// Stores a READ/atomic resource in the ring, replacing the oldest.
    fn store_resource(&mut self, resource: Resource) -> Option<usize> {
        let slots = self.resources.len();
        if slots == 0 {
            return None;
        }
        let slot = self.res_head % slots;
        // Responses still owed for the slot being reused go: the requester
        // exceeded max_dest_rd_atomic and will retry.
        self.queue.retain(|r| !matches!(r, Response::Read { resource, .. } | Response::AtomicAck { resource, .. } if *resource == slot));
        self.resources[slot] = Some(resource);
        self.res_head = (slot + 1) % slots;
        Some(slot)
    }
}

/// Whether `qp` is RC (READ and atomics exist only there) and grants its
/// peer `access`.
fn rc_granting(qp: &QpContext, access: Access) -> Result<(), Refusal> {
    if qp.qp_type != QpType::Rc {
        return Err(Refusal::InvalidRequest);
    }
    if !qp.attr.qp_access_flags.contains(access) {
        return Err(Refusal::AccessError);
    }
    Ok(())
}

impl QpStep<'_> {
    /// ATOMIC WRITE (store the 8 bytes) and FLUSH (check the rights and
    /// the range).
    fn execute_atomic_write_or_flush(
        &mut self,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) -> Result<(), Refusal> {
        let reth = packet.reth().ok_or(Refusal::InvalidRequest)?;
        let qp = &*self.qp;
        if packet.info().is(Mask::ATOMIC_WRITE) {
            if !qp.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
                return Err(Refusal::AccessError);
            }
            let payload = packet.payload();
            if payload.len() != 8 || reth.dma_len() != 8 || reth.va() % 8 != 0 {
                return Err(Refusal::InvalidRequest);
            }
            let range = self.check_remote(reth.rkey().0, reth.va(), 8, Access::REMOTE_WRITE)?;
            let value =
                u64::from_le_bytes(payload.try_into().map_err(|_| Refusal::InvalidRequest)?);
            self.dev.mem.atomic(&range, WordOp::Store(value)).map_err(access_refusal)?;
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
                self.check_remote(reth.rkey().0, reth.va(), len, needed)?;
            }
        }
        Ok(())
    }

    /// A request's R_Key check: may the peer access `[va, va + len)` of
    /// this QP's protection domain with `needed` rights through `key`?
    /// The one place request-time checks are made (a READ's responses,
    /// which read memory again, check in `reply.rs`), and so where the
    /// injected faults act: a [`crate::DeviceFault::FailKeyCheck`] fails
    /// the check before it is made, a [`crate::DeviceFault::DmaFault`]
    /// fails the access after it passed. A zero-length access checks no
    /// key and touches no memory (IBA 9.4.1.1): no fault acts on it.
    fn check_remote(
        &mut self,
        key: u32,
        va: u64,
        len: u64,
        needed: Access,
    ) -> Result<Checked, Refusal> {
        let qp = &mut *self.qp;
        let injected = &mut qp.injected;
        if len > 0 && injected.key_fail_left > 0 {
            injected.key_fail_left -= 1;
            self.dev.counters.injected_key_fail += 1;
            return Err(Refusal::AccessError);
        }
        let origin = Origin::Remote { qpn: qp.qpn };
        let range =
            self.dev.mem.check(key, qp.pd, va, len, needed, origin).map_err(access_refusal)?;
        let injected = &mut qp.injected;
        if len > 0 && injected.dma_fault_left > 0 {
            injected.dma_fault_left -= 1;
            self.dev.counters.injected_dma_fault += 1;
            return Err(Refusal::OperationalError);
        }
        Ok(range)
    }
}
