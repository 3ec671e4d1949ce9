//! Placing what a response carries (rxe_comp.c's do_read, do_atomic):
//! READ response data into the READ's SGEs, an atomic's original value
//! into its buffer, after finding the WQE the response belongs to.

use crate::handles::PdIndex;
use crate::hca::QpStep;
use crate::mr::Origin;
use crate::qp::EntryState;
use crate::time::Instant;
use crate::trace::ResponseVerdict;
use uroce_device::types::{Access, WcStatus, WrOpcode};
use uroce_device::wqe::Payload;
use uroce_wire::aeth::Syndrome;
use uroce_wire::{roce, Mask, Opcode, Psn};

impl QpStep<'_> {
    /// The send-queue entry a READ response or atomic ACK at `psn` belongs
    /// to, if `psn` is the one the completer expects. A response ahead of
    /// it means something before it was lost: go back (once). One behind is
    /// a duplicate: dropped. An expected PSN no WQE owns is a ghost:
    /// counted and dropped.
    fn expected_response_entry(&mut self, now: Instant, psn: Psn) -> Option<u32> {
        let expected = self.qp.comp.psn;
        if psn != expected {
            if psn.is_after(expected) {
                self.go_back_once(now);
            }
            return None;
        }
        let entry = entry_at_psn(self.qp, psn);
        if entry.is_none() {
            self.dev.counters.rcvd_ghost_response += 1;
        }
        entry
    }

    pub(super) fn on_atomic_ack(&mut self, now: Instant, psn: Psn, orig: u64) -> ResponseVerdict {
        const NOT_PLACED: ResponseVerdict = ResponseVerdict::NotPlaced;
        // Its AETH acknowledges everything before it: the requester may go
        // on at once, even if the rest of it turns out to be a ghost.
        if psn.is_after(self.qp.comp.psn) && self.ack_up_to(now, psn.wrapping_sub(1)) {
            self.after_progress(now);
        }
        let Some(entry_index) = self.expected_response_entry(now, psn) else {
            return NOT_PLACED;
        };
        // The original value goes into the WQE's 8-byte buffer.
        let qp = &*self.qp;
        let pd = qp.pd;
        let Some(entry) = qp.entry(entry_index) else { return NOT_PLACED };
        if !matches!(entry.opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) {
            self.dev.counters.rcvd_ghost_response += 1;
            return NOT_PLACED;
        }
        let status = match &entry.payload {
            Payload::Sges(sges) if sges.len() == 1 => {
                let sge = sges[0];
                match self.dev.mem.check(
                    sge.lkey.0,
                    pd,
                    sge.addr,
                    8,
                    Access::LOCAL_WRITE,
                    Origin::Local,
                ) {
                    Ok(range) => match self.dev.mem.write(&range, &orig.to_le_bytes()) {
                        Ok(()) => WcStatus::Success,
                        Err(_) => WcStatus::LocProtErr,
                    },
                    Err(_) => WcStatus::LocProtErr,
                }
            }
            _ => WcStatus::LocLenErr,
        };
        // Everything before it is acknowledged; the atomic is done.
        self.ack_up_to(now, psn.wrapping_sub(1));
        let qp = &mut *self.qp;
        if let Some(entry) = qp.entry_mut(entry_index) {
            entry.state = EntryState::Done(status);
        }
        qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        qp.completer_progressed(psn.next());
        self.retire(now);
        self.after_progress(now);
        ResponseVerdict::AtomicPlaced
    }

    pub(super) fn on_read_response(
        &mut self,
        now: Instant,
        psn: Psn,
        packet: &roce::Packet<&[u8]>,
    ) -> ResponseVerdict {
        const NOT_PLACED: ResponseVerdict = ResponseVerdict::NotPlaced;
        // The AETH of a READ response acknowledges every request before
        // the READ (an ACK for them may have been lost; rxe completes them
        // too), never the READ's own response PSNs.
        if packet.aeth().is_some() {
            if let Some(first) =
                entry_at_psn(self.qp, psn).and_then(|i| self.qp.entry(i).map(|e| e.first_psn))
            {
                if self.ack_up_to(now, first.wrapping_sub(1)) {
                    self.after_progress(now);
                }
            }
        }
        let Some(entry_index) = self.expected_response_entry(now, psn) else {
            return NOT_PLACED;
        };
        // Place the data, and move the completer and the WQE on, on the
        // QP's context borrowed once.
        let qp = &mut *self.qp;
        let (pd, mtu) = (qp.pd, u64::from(qp.mtu()));
        let Some(entry) = qp.entry(entry_index) else { return NOT_PLACED };
        if matches!(entry.opcode, WrOpcode::AtomicWrite | WrOpcode::Flush) {
            // IBA 1.5's answer to an ATOMIC WRITE or a FLUSH (rxe 6.12's):
            // a READ RESPONSE ONLY without payload whose AETH acknowledges
            // it. (An ACK is accepted too: uroce before, and coalescing.)
            let acked = packet.bth().opcode() == Opcode::RC_RDMA_READ_RESPONSE_ONLY
                && packet.payload().is_empty()
                && packet.aeth().is_some_and(|a| matches!(a.syndrome(), Syndrome::Ack { .. }));
            if acked {
                return self.on_ack(now, psn);
            }
            self.dev.counters.rcvd_ghost_response += 1;
            return NOT_PLACED;
        }
        if entry.opcode != WrOpcode::RdmaRead {
            self.dev.counters.rcvd_ghost_response += 1;
            return NOT_PLACED;
        }
        let offset = u64::from(entry.first_psn.distance_to(psn) as u32) * mtu;
        let total = entry.length();
        let payload = packet.payload();
        let is_last = psn == entry.last_psn();
        let expected_len = if is_last { total - offset.min(total) } else { mtu };
        let opcode = packet.bth().opcode();
        let ends = opcode.info().is_some_and(|i| i.is(Mask::END));
        let status = if payload.len() as u64 != expected_len || ends != is_last {
            Some(WcStatus::BadRespErr)
        } else {
            match &entry.payload {
                Payload::Sges(sges) => scatter(&self.dev.mem, pd, sges, offset, payload).err(),
                Payload::Inline(_) => Some(WcStatus::LocQpOpErr),
            }
        };
        qp.completer_progressed(psn.next());
        let Some(entry) = qp.entry_mut(entry_index) else { return NOT_PLACED };
        entry.read_placed = offset + payload.len() as u64;
        if let Some(status) = status {
            entry.state = EntryState::Done(status);
            qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        } else if is_last {
            entry.state = EntryState::Done(WcStatus::Success);
            qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        }
        self.retire(now);
        self.after_progress(now);
        ResponseVerdict::ReadPlaced
    }
}

/// The shadow index of the WQE of `qp` whose PSN range holds `psn`.
pub(super) fn entry_at_psn(qp: &crate::qp::QpContext, psn: Psn) -> Option<u32> {
    let mut i = qp.sq.consumer;
    while i != qp.fetched {
        let entry = qp.entry(i)?;
        if !entry.psn_assigned {
            return None;
        }
        if psn.in_window(entry.first_psn, entry.npkts.max(1)) {
            return Some(i);
        }
        i = i.wrapping_add(1);
    }
    None
}

/// Writes `data` at byte `offset` of a WQE's SGE list (READ responses),
/// checking LOCAL_WRITE on every SGE.
pub(crate) fn scatter(
    mem: &crate::mr::MemoryTables,
    pd: PdIndex,
    sges: &[uroce_device::wqe::Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), WcStatus> {
    uroce_device::wqe::walk_sges(sges, offset, data.len(), |sge, skip, at, piece| {
        let range = mem
            .check(
                sge.lkey.0,
                pd,
                sge.addr + skip,
                piece as u64,
                Access::LOCAL_WRITE,
                Origin::Local,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        mem.write(&range, &data[at..at + piece]).map_err(|_| WcStatus::LocProtErr)
    })
}
