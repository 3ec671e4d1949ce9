//! The requester (rxe_req.c): turns send WQEs into request packets.
//!
//! WQEs are copied out of the application's ring into the SQ shadow once
//! and validated there ([`Hca::fetch_send_wqes`]). The requester walks the
//! shadow in order: it assigns each WQE its PSNs on first transmission,
//! segments SENDs and WRITEs by the path MTU, sends one request per READ
//! (which reserves a PSN per response packet) and per atomic, honours
//! FENCE, `max_rd_atomic` and the unacknowledged-PSN window, and executes
//! local operations (LOCAL_INV, BIND_MW) in order.

use crate::endpoint::{PacketKind, Transmit};
use crate::handles::{AhIndex, PdIndex, QpIndex};
use crate::hca::{Hca, TimerKind};
use crate::mr::Origin;
use crate::qp::{EntryState, Path, SqEntry};
use crate::time::Instant;
use crate::trace::Step;
use uroce_device::ring::RingError;
use uroce_device::types::{Access, QpState, QpType, SendFlags, WcStatus, WrOpcode};
use uroce_device::wqe::{Payload, SendWqe, WqeLimits};
use uroce_wire::frame::FrameRepr;
use uroce_wire::opcode::Opcode;
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{atomic_eth, bth, deth, feth, ieth, immdt, reth, Psn, Qkey, Qpn, Rkey};

/// Position of a packet in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Hca {
    /// Copies newly posted send WQEs into the shadow, validating each once.
    /// A producer index that jumps past the ring is a fatal QP error.
    pub(crate) fn fetch_send_wqes(&mut self, now: Instant, index: QpIndex) {
        let host = self.mem.host().clone();
        let max_msg_size = self.config.max_msg_size;
        let Some(qp) = self.qps.get_mut(index) else { return };
        match qp.sq.refresh(host.as_ref()) {
            Ok(_) => {}
            Err(RingError::IndexJump { .. }) | Err(_) => {
                // Nothing in this ring can be trusted any more. A QP already
                // in error only flushes what it had fetched (going fatal
                // again would flush, fetch and fail here again).
                if qp.state != QpState::Err {
                    self.counters.bad_wqe += 1;
                    let qpn = qp.qpn;
                    self.step(now, Step::WqeRefused { qpn, status: WcStatus::LocQpOpErr });
                    self.fatal(now, index);
                }
                return;
            }
        }
        let limits = WqeLimits {
            max_sge: qp.cap.max_send_sge,
            max_inline: qp.cap.max_inline_data,
            max_msg_size,
        };
        // The WQEs are read into the HCA's slot buffer (zeroed first, as a
        // fresh one would be).
        let slot = &mut self.wqe_slot;
        slot.clear();
        slot.resize(qp.sq.desc.stride as usize, 0);
        while qp.fetched != qp.sq.producer_seen {
            let read = qp.sq.read_entry(host.as_ref(), qp.fetched, slot);
            let decoded = match read {
                Ok(()) => SendWqe::decode(slot, &limits).map_err(|e| e.status),
                Err(_) => Err(WcStatus::LocQpOpErr),
            };
            let entry = match decoded {
                Ok(wqe) => {
                    let legal = wqe.opcode.allowed_on(qp.qp_type);
                    let signaled = qp.sq_sig_all || wqe.flags.contains(SendFlags::SIGNALED);
                    let ud_too_long = qp.qp_type == QpType::Ud
                        && wqe.length() > u64::from(self.config.active_mtu.bytes());
                    let fetch_error = if !legal {
                        Some(WcStatus::LocQpOpErr)
                    } else if ud_too_long {
                        Some(WcStatus::LocLenErr)
                    } else {
                        None
                    };
                    SqEntry {
                        wqe,
                        state: EntryState::Posted,
                        psn_assigned: false,
                        first_psn: Psn::default(),
                        npkts: 0,
                        read_placed: 0,
                        signaled,
                        fetch_error,
                    }
                }
                Err(status) => {
                    let wr_id = uroce_device::wqe::slot_wr_id(slot);
                    SqEntry {
                        wqe: SendWqe {
                            wr_id,
                            opcode: WrOpcode::Send,
                            flags: SendFlags::EMPTY,
                            imm_or_inv: 0,
                            remote_addr: 0,
                            rkey: Rkey(0),
                            compare_add: 0,
                            swap: 0,
                            ud: Default::default(),
                            payload: Payload::Inline(Vec::new()),
                        },
                        state: EntryState::Posted,
                        psn_assigned: false,
                        first_psn: Psn::default(),
                        npkts: 0,
                        read_placed: 0,
                        signaled: true,
                        fetch_error: Some(status),
                    }
                }
            };
            if let Some(status) = entry.fetch_error {
                self.counters.bad_wqe += 1;
                self.steps.record(now, Step::WqeRefused { qpn: qp.qpn, status });
            }
            let s = qp.slot(qp.fetched);
            qp.sq_shadow[s] = Some(entry);
            qp.fetched = qp.fetched.wrapping_add(1);
        }
    }

    /// Builds the next request packet of QP `index`, if it may send one.
    pub(crate) fn next_request_packet(
        &mut self,
        now: Instant,
        index: QpIndex,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let qp = self.qps.get(index)?;
        if !qp.can_send() || qp.comp.rnr_until.is_some() {
            return None;
        }
        if qp.req.index == qp.fetched {
            self.fetch_send_wqes(now, index);
        }
        // Local operations and refused WQEs complete without a packet; a
        // bounded number of them per turn.
        for _ in 0..self.config.max_packets_per_turn {
            let qp = self.qps.get(index)?;
            if qp.req.index == qp.fetched || !qp.can_send() {
                return None;
            }
            let req_index = qp.req.index;
            let entry = qp.entry(req_index)?;
            // SQD starts no new WQE, but finishes (and resends) the ones
            // that already have PSNs.
            if qp.state == QpState::Sqd && qp.req.sent_pkts == 0 && !entry.psn_assigned {
                self.sq_drained_check(index);
                return None;
            }
            if matches!(entry.state, EntryState::Done(_)) {
                // Acknowledged while queued for a resend: skip it.
                let qp = self.qps.get_mut(index)?;
                qp.req.index = req_index.wrapping_add(1);
                qp.req.sent_pkts = 0;
                continue;
            }
            if let Some(status) = entry.fetch_error {
                self.finish_without_packet(now, index, status);
                continue;
            }
            if entry.wqe.opcode.is_local() {
                if entry.wqe.flags.contains(SendFlags::FENCE) && qp.req.rd_atomic_outstanding > 0 {
                    return None;
                }
                let status = self.execute_local(index, req_index);
                self.finish_without_packet(now, index, status);
                continue;
            }
            return self.build_request(now, index, buf);
        }
        // More local work remains: come back next turn.
        None
    }

    /// Completes the current WQE without sending anything.
    fn finish_without_packet(&mut self, now: Instant, index: QpIndex, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(index) else { return };
        let req_index = qp.req.index;
        if let Some(entry) = qp.entry_mut(req_index) {
            entry.state = EntryState::Done(status);
        }
        qp.req.index = req_index.wrapping_add(1);
        qp.req.sent_pkts = 0;
        self.retire(now, index);
    }

    /// LOCAL_INV and BIND_MW.
    fn execute_local(&mut self, index: QpIndex, req_index: u32) -> WcStatus {
        let Some(qp) = self.qps.get(index) else { return WcStatus::LocQpOpErr };
        let (pd, qpn) = (qp.pd, qp.qpn);
        let Some(entry) = qp.entry(req_index) else { return WcStatus::LocQpOpErr };
        // The operands are copied out: the memory tables change below.
        let wqe = &entry.wqe;
        let (opcode, imm_or_inv, rkey, ud, remote_addr, compare_add, swap) = (
            wqe.opcode,
            wqe.imm_or_inv,
            wqe.rkey,
            wqe.ud,
            wqe.remote_addr,
            wqe.compare_add,
            wqe.swap,
        );
        match opcode {
            WrOpcode::LocalInv => match self.mem.invalidate_for(imm_or_inv, pd) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            WrOpcode::BindMw => {
                let access = Access(swap as u32);
                let bound = self.mem.bind_window(
                    imm_or_inv,
                    Some(rkey.0 as u8),
                    ud.ah,
                    remote_addr,
                    compare_add,
                    access,
                    pd,
                    qpn,
                );
                match bound {
                    Ok(_) => WcStatus::Success,
                    Err(_) => WcStatus::MwBindErr,
                }
            }
            _ => WcStatus::LocQpOpErr,
        }
    }

    /// Builds the next packet of the current WQE (RC, UC, UD).
    fn build_request(&mut self, now: Instant, index: QpIndex, buf: &mut [u8]) -> Option<Transmit> {
        let max_unacked = self.config.max_unacked_psns;
        let max_pkt_per_ack = self.config.max_pkt_per_ack;
        let active_mtu = self.config.active_mtu.bytes();
        let qp = self.qps.get_mut(index)?;
        let mtu = if qp.qp_type == QpType::Ud { active_mtu } else { qp.mtu() };
        let req_index = qp.req.index;
        let outstanding = qp.req.rd_atomic_outstanding;
        let max_rd_atomic = u32::from(qp.attr.max_rd_atomic.max(1));
        let window_used = qp.comp.psn.distance_to(qp.req.next_psn).max(0) as u32;
        let qp_type = qp.qp_type;
        let starting = qp.req.sent_pkts == 0;
        let entry = qp.entry(req_index)?;
        let opcode = entry.wqe.opcode;
        if starting {
            // FENCE holds a WQE's first transmission until the READs and
            // atomics before it completed. A resend after a go-back is not
            // held: the READs outstanding then may be ones posted after it,
            // which cannot complete before it is resent.
            if entry.wqe.flags.contains(SendFlags::FENCE) && outstanding > 0 && !entry.psn_assigned
            {
                return None;
            }
            if opcode.is_read_or_atomic() && !entry.psn_assigned && outstanding >= max_rd_atomic {
                return None;
            }
            if qp_type == QpType::Rc && !entry.psn_assigned && window_used >= max_unacked {
                return None;
            }
        }
        let next_psn = qp.req.next_psn;
        let entry = qp.entry_mut(req_index)?;
        if !entry.psn_assigned {
            let len = entry.wqe.length();
            entry.npkts = match opcode {
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 1,
                WrOpcode::AtomicWrite | WrOpcode::Flush => 1,
                _ => len.div_ceil(u64::from(mtu)).max(1) as u32,
            };
            entry.first_psn = next_psn;
            entry.psn_assigned = true;
            let npkts = entry.npkts;
            qp.req.next_psn = next_psn + npkts;
            if opcode.is_read_or_atomic() {
                qp.req.rd_atomic_outstanding += 1;
            }
        }
        // What the packet needs of the WQE, copied out (the payload is
        // gathered from the shadow entry in place).
        let entry = qp.entry(req_index)?;
        let (first_psn, npkts, read_placed) = (entry.first_psn, entry.npkts, entry.read_placed);
        let wqe = &entry.wqe;
        let (flags, imm_or_inv, remote_addr, rkey) =
            (wqe.flags, wqe.imm_or_inv, wqe.remote_addr, wqe.rkey);
        let (compare_add, swap, ud) = (wqe.compare_add, wqe.swap, wqe.ud);
        let total = wqe.length();
        // Which packet, which bytes.
        let (psn, position, offset, len, request_pkts) = match opcode {
            WrOpcode::RdmaRead => {
                let done_pkts = (read_placed / u64::from(mtu)) as u32;
                (first_psn + done_pkts, Position::Only, read_placed, 0, 1)
            }
            WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
            | WrOpcode::AtomicWrite
            | WrOpcode::Flush => (first_psn, Position::Only, 0, 0, 1),
            _ => {
                let k = qp.req.sent_pkts;
                let offset = u64::from(k) * u64::from(mtu);
                let len = (total - offset.min(total)).min(u64::from(mtu));
                let position = match (k == 0, k + 1 == npkts) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, true) => Position::Last,
                    (false, false) => Position::Middle,
                };
                (first_psn + k, position, offset, len, npkts)
            }
        };
        // Gather the payload through the checked DMA path.
        let pd = qp.pd;
        let (offset_gathered, len_gathered) = match opcode {
            WrOpcode::AtomicWrite => (0, 8),
            _ => (offset, len),
        };
        let wqe = &self.qps.get(index)?.entry(req_index)?.wqe;
        let gathered = gather(&self.mem, pd, wqe, offset_gathered, len_gathered, &mut self.scratch);
        let payload_len = match gathered {
            Ok(n) => n,
            Err(status) => {
                // A local protection error ends the WQE (and the QP).
                let qp = self.qps.get_mut(index)?;
                if opcode.is_read_or_atomic() {
                    qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
                }
                self.finish_without_packet(now, index, status);
                return None;
            }
        };
        let qp = self.qps.get_mut(index)?;
        let last = matches!(position, Position::Last | Position::Only);
        let ack_req = qp_type == QpType::Rc
            && (last || opcode.is_read_or_atomic() || qp.req.noack_pkts + 1 >= max_pkt_per_ack);
        let wire_opcode = select_opcode(qp_type, opcode, position)?;
        let mut bth = bth::Repr::new(wire_opcode, Qpn::default(), psn, payload_len);
        bth.ack_req = ack_req;
        bth.solicited = last && flags.contains(SendFlags::SOLICITED);
        let mut ext = ExtHeaders::default();
        let info = wire_opcode.info()?;
        use uroce_wire::Mask;
        if info.is(Mask::RETH) {
            let (va, dma_len) = match opcode {
                WrOpcode::RdmaRead => (remote_addr + offset, (total - offset) as u32),
                WrOpcode::Flush => (remote_addr, compare_add as u32),
                _ => (remote_addr, total as u32),
            };
            ext.reth = Some(reth::Repr { va, rkey, dma_len });
        }
        if info.is(Mask::IMMDT) {
            ext.immdt = Some(immdt::Repr { imm: imm_or_inv });
        }
        if info.is(Mask::IETH) {
            ext.ieth = Some(ieth::Repr { rkey: Rkey(imm_or_inv) });
        }
        if info.is(Mask::ATOMIC_ETH) {
            let (swap_add, compare) = match opcode {
                WrOpcode::AtomicCmpAndSwp => (swap, compare_add),
                _ => (compare_add, 0),
            };
            ext.atomic_eth = Some(atomic_eth::Repr { va: remote_addr, rkey, swap_add, compare });
        }
        if info.is(Mask::FETH) {
            ext.feth = Some(feth::Repr {
                selectivity_level: ((swap >> 8) & 0x3) as u8,
                placement_type: (swap & 0xf) as u8,
                reserved: 0,
            });
        }
        let (path, dest_qpn) = if qp_type == QpType::Ud {
            let qkey = if Qkey(ud.remote_qkey.0).is_privileged() {
                Qkey(qp.attr.qkey)
            } else {
                ud.remote_qkey
            };
            ext.deth = Some(deth::Repr { qkey, resv8: 0, src_qpn: qp.qpn });
            let path = self.ah_path(AhIndex(ud.ah), pd);
            (path, ud.remote_qpn)
        } else {
            (qp.path, Qpn::new(qp.attr.dest_qp_num))
        };
        let Some(path) = path else {
            // A UD WQE naming no address handle of this PD.
            let qp = self.qps.get_mut(index)?;
            qp.req.sent_pkts = 0;
            self.finish_without_packet(now, index, WcStatus::LocQpOpErr);
            return None;
        };
        bth.dest_qpn = dest_qpn;
        let sport = self.settled_source_port(self.qps.get(index)?.sport);
        let ip_id = self.next_ip_id();
        let roce = Repr { bth, ext, payload: &self.scratch[..payload_len] };
        let transmit = emit_frame(path, ip_id, (PacketKind::Request, sport), roce, buf)?;
        // Account for the packet.
        let qp = self.qps.get_mut(index)?;
        qp.sent_pkts += 1;
        qp.req.noack_pkts = if ack_req { 0 } else { qp.req.noack_pkts + 1 };
        qp.req.sent_pkts += 1;
        if qp.req.sent_pkts >= request_pkts {
            qp.req.sent_pkts = 0;
            qp.req.index = req_index.wrapping_add(1);
            let done_state = if qp_type == QpType::Rc {
                EntryState::Pending
            } else {
                EntryState::Done(WcStatus::Success)
            };
            if let Some(e) = qp.entry_mut(req_index) {
                e.state = done_state;
            }
            if qp_type == QpType::Rc {
                if qp.comp.retransmit_at.is_none() {
                    if let Some(timeout_ns) = qp.ack_timeout_ns() {
                        self.set_timer(
                            index,
                            TimerKind::Retransmit,
                            Some(now.plus_nanos(timeout_ns)),
                        );
                    }
                }
            } else {
                self.retire(now, index);
            }
        }
        Some(transmit)
    }
}

/// The wire opcode of a packet.
fn select_opcode(qp_type: QpType, op: WrOpcode, position: Position) -> Option<Opcode> {
    use Position::*;
    use WrOpcode::*;
    let rc_like = match (op, position) {
        (Send, First) | (SendWithImm, First) | (SendWithInv, First) => Opcode::RC_SEND_FIRST,
        (Send, Middle) | (SendWithImm, Middle) | (SendWithInv, Middle) => Opcode::RC_SEND_MIDDLE,
        (Send, Last) => Opcode::RC_SEND_LAST,
        (Send, Only) => Opcode::RC_SEND_ONLY,
        (SendWithImm, Last) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (SendWithImm, Only) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (SendWithInv, Last) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (SendWithInv, Only) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (RdmaWrite, First) | (RdmaWriteWithImm, First) => Opcode::RC_RDMA_WRITE_FIRST,
        (RdmaWrite, Middle) | (RdmaWriteWithImm, Middle) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (RdmaWrite, Last) => Opcode::RC_RDMA_WRITE_LAST,
        (RdmaWrite, Only) => Opcode::RC_RDMA_WRITE_ONLY,
        (RdmaWriteWithImm, Last) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (RdmaWriteWithImm, Only) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (RdmaRead, _) => Opcode::RC_RDMA_READ_REQUEST,
        (AtomicCmpAndSwp, _) => Opcode::RC_COMPARE_SWAP,
        (AtomicFetchAndAdd, _) => Opcode::RC_FETCH_ADD,
        (AtomicWrite, _) => Opcode::RC_ATOMIC_WRITE,
        (Flush, _) => Opcode::RC_FLUSH,
        _ => return None,
    };
    match qp_type {
        QpType::Rc => Some(rc_like),
        // UC opcodes are the RC ones plus 0x20, for SEND and WRITE only.
        QpType::Uc => (rc_like.0 <= Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.0)
            .then_some(Opcode(rc_like.0 | 0x20)),
        QpType::Ud => match (op, position) {
            (Send, Only) => Some(Opcode::UD_SEND_ONLY),
            (SendWithImm, Only) => Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE),
            _ => None,
        },
    }
}

/// Gathers `len` bytes from byte `offset` of a WQE's data into `out`,
/// checking every SGE's L_Key. Returns the bytes gathered.
pub(crate) fn gather(
    mem: &crate::mr::MemoryTables,
    pd: PdIndex,
    wqe: &SendWqe,
    offset: u64,
    len: u64,
    out: &mut [u8],
) -> Result<usize, WcStatus> {
    let len = len as usize;
    if len > out.len() {
        return Err(WcStatus::LocLenErr);
    }
    match &wqe.payload {
        Payload::Inline(data) => {
            let start = offset as usize;
            let src = data.get(start..start + len).ok_or(WcStatus::LocLenErr)?;
            out[..len].copy_from_slice(src);
        }
        Payload::Sges(sges) => {
            uroce_device::wqe::walk_sges(sges, offset, len, |sge, skip, at, piece| {
                let range = mem
                    .check(
                        sge.lkey.0,
                        pd,
                        sge.addr + skip,
                        piece as u64,
                        Access::EMPTY,
                        Origin::Local,
                    )
                    .map_err(|_| WcStatus::LocProtErr)?;
                mem.read(&range, &mut out[at..at + piece]).map_err(|_| WcStatus::LocProtErr)
            })?;
        }
    }
    Ok(len)
}

/// Writes a whole IP packet (IP + UDP + transport + ICRC) into `buf`: a
/// `kind` packet from source port `sport`.
pub(crate) fn emit_frame(
    path: Path,
    ip_id: u16,
    (kind, sport): (PacketKind, u16),
    roce: Repr<'_>,
    buf: &mut [u8],
) -> Option<Transmit> {
    use core::net::IpAddr;
    let frame = match (path.local, path.remote) {
        (IpAddr::V4(local), IpAddr::V4(remote)) => {
            FrameRepr::ipv4((local, remote), ip_id, sport, roce)
        }
        (IpAddr::V6(local), IpAddr::V6(remote)) => FrameRepr::ipv6((local, remote), sport, roce),
        _ => return None,
    };
    let len = frame.ok()?.emit(buf).ok()?;
    Some(Transmit { destination: path.remote, len, kind, source_port: sport })
}
