//! Receive WQEs (rxe_resp.c's get_srq_wqe, do_complete for receives):
//! taking one from the RQ or the SRQ, giving its slot back, writing the
//! receive completion; and UD datagrams, one receive WQE each.

use super::Refusal;
use crate::hca::QpStep;
use crate::time::Instant;
use crate::trace::{DropReason, RequestVerdict, Step};
use uroce_device::cqe::Cqe;
use uroce_device::types::{Qkey, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use uroce_wire::frame::RoceDatagram;

impl QpStep<'_> {
    /// Takes the receive WQE a SEND (or WRITE with immediate) goes into,
    /// into the QP's `resp.recv_wqe`, and returns its `wr_id`: from the SRQ
    /// (taken at once) or peeked from the RQ (consumed at completion).
    pub(super) fn take_recv_wqe(&mut self, now: Instant) -> Result<u64, Refusal> {
        if self.qp.injected.rnr_left > 0 {
            // An injected RNR fault: the request finds no WQE, before the
            // RQ or SRQ is read, so the posted one stays for the retry.
            self.qp.injected.rnr_left -= 1;
            self.dev.counters.injected_rnr += 1;
            return Err(Refusal::NotReady);
        }
        let host = &**self.dev.mem.host();
        let qp = &mut *self.qp;
        // The WQE is read into the HCA's slot buffer, sized to the stride:
        // the read fills all of it, so its old bytes need no zeroing.
        let slot = &mut self.dev.wqe_slot;
        let mut limit_reached = None;
        let max_sge = match qp.srq {
            Some(srq_index) => {
                let srq = self.dev.srqs.get_mut(srq_index).ok_or(Refusal::OperationalError)?;
                if srq.ring.refresh(host).is_err() {
                    return Err(Refusal::OperationalError);
                }
                if srq.ring.available() == 0 {
                    return Err(Refusal::NotReady);
                }
                slot.resize(srq.ring.desc.stride as usize, 0);
                srq.ring
                    .read_entry(host, srq.ring.consumer, slot)
                    .map_err(|_| Refusal::OperationalError)?;
                // An SRQ WQE is taken at once: other QPs share the ring.
                srq.ring.consume(host, 1).map_err(|_| Refusal::OperationalError)?;
                if srq.limit > 0 && srq.ring.available() < srq.limit {
                    srq.limit = 0;
                    limit_reached = Some(srq_index);
                }
                srq.max_sge
            }
            None => {
                let max_sge = qp.cap.max_recv_sge;
                let rq = qp.rq.as_mut().ok_or(Refusal::OperationalError)?;
                if rq.refresh(host).is_err() {
                    return Err(Refusal::OperationalError);
                }
                if rq.available() == 0 {
                    return Err(Refusal::NotReady);
                }
                slot.resize(rq.desc.stride as usize, 0);
                rq.read_entry(host, rq.consumer, slot).map_err(|_| Refusal::OperationalError)?;
                // An RQ WQE stays at the head until its message completes.
                max_sge
            }
        };
        let decoded = qp.resp.recv_wqe.decode_into(slot, max_sge);
        let wr_id = uroce_device::wqe::slot_wr_id(slot);
        if let Some(srq_index) = limit_reached {
            self.dev.push_event(crate::hca::Event::Async {
                event: uroce_device::types::EventType::SrqLimitReached,
                element: srq_index.value(),
            });
        }
        match decoded {
            Ok(()) => Ok(wr_id),
            Err(error) => {
                // A malformed receive WQE completes with its status and
                // takes the QP to the error state.
                self.dev.counters.bad_wqe += 1;
                let qpn = self.qp.qpn;
                self.step(now, Step::WqeRefused { qpn, status: error.status });
                self.complete_recv(now, wr_id, error.status, WcOpcode::Recv, 0, None, true);
                if self.qp.qp_type != QpType::Rc && self.qp.state != QpState::Err {
                    self.qp.state = QpState::Err;
                    self.enter_error(now);
                }
                Err(Refusal::OperationalError)
            }
        }
    }

    /// Gives the RQ slot of a finished receive back (SRQ WQEs were taken
    /// already).
    fn release_recv_wqe(&mut self) {
        let qp = &mut *self.qp;
        if qp.srq.is_none() {
            if let Some(rq) = qp.rq.as_mut() {
                if rq.available() > 0 {
                    let _ = rq.consume(self.dev.mem.host().as_ref(), 1);
                }
            }
        }
    }

    /// Writes a receive completion and releases the RQ slot.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_recv(
        &mut self,
        now: Instant,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        extra: Option<(WcFlags, u32)>,
        solicited: bool,
    ) {
        self.release_recv_wqe();
        let qp = &*self.qp;
        let mut cqe = Cqe::new(wr_id, status, opcode, qp.qpn);
        cqe.byte_len = byte_len;
        if let Some((flags, value)) = extra {
            cqe.flags = flags;
            cqe.imm_or_inv = value;
        }
        let cq = qp.recv_cq;
        self.post_cqe(now, cq, &cqe, solicited);
    }
}

impl QpStep<'_> {
    /// UD: one packet per message, Q_Key checked, GRH at the buffer start.
    pub(super) fn receive_ud(
        &mut self,
        now: Instant,
        frame: &RoceDatagram<'_>,
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let Some(deth) = packet.deth() else { return };
        let qp = &*self.qp;
        if deth.qkey() != Qkey(qp.attr.qkey) {
            let qpn = qp.qpn;
            return self.dev.drop_packet(now, Some(qpn), DropReason::BadQkey);
        }
        let wr_id = match self.take_recv_wqe(now) {
            Ok(wr_id) => wr_id,
            // No receive WQE: a UD datagram is dropped.
            Err(_) => return self.request_step(now, packet, RequestVerdict::Dropped),
        };
        self.request_step(now, packet, RequestVerdict::Executed);
        let qp = &*self.qp;
        let pd = qp.pd;
        let mut grh = [0u8; 40];
        let ip = frame.ip_header_bytes();
        if ip.len() == 40 {
            grh.copy_from_slice(ip);
        } else if ip.len() >= 20 {
            grh[20..40].copy_from_slice(&ip[..20]);
        }
        let payload = packet.payload();
        let wqe = &qp.resp.recv_wqe;
        let sges = &wqe.sges;
        let total = 40 + payload.len() as u64;
        let status = if total > wqe.capacity() {
            Err(WcStatus::LocLenErr)
        } else {
            crate::comp::scatter(&self.dev.mem, pd, sges, 0, &grh)
                .and_then(|()| crate::comp::scatter(&self.dev.mem, pd, sges, 40, payload))
        };
        let qpn = qp.qpn;
        let cq = qp.recv_cq;
        self.release_recv_wqe();
        let mut cqe = Cqe::new(wr_id, WcStatus::Success, WcOpcode::Recv, qpn);
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
            self.qp.state = QpState::Err;
            self.enter_error(now);
        }
    }
}
