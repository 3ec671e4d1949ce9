//! Building one request packet (rxe_req.c's steps, in its order): may the
//! WQE go now (`check_fence`, `check_init_depth`, the unacknowledged-PSN
//! window), its PSNs, which packet of the message and which bytes
//! (`next_opcode`, `get_mtu`), the payload through the checked DMA path
//! (`finish_packet`), the headers (`init_req_packet`), and the
//! requester's state after the packet (`update_wqe_state`,
//! `update_state`). The whole build works on the QP's context, borrowed
//! once, next to the device state it needs.

use crate::endpoint::{PacketKind, Transmit};
use crate::handles::{AhIndex, PdIndex};
use crate::hca::{Device, QpStep, TimerKind};
use crate::mr::Origin;
use crate::qp::{EntryState, Path, QpContext};
use crate::send_op::SendOp;
use crate::time::Instant;
use core::net::{IpAddr, Ipv4Addr};
use uroce_device::types::{Access, QpState, QpType, SendFlags, WcStatus, WrOpcode};
use uroce_device::wqe::Payload;
use uroce_wire::frame::{emit_around_payload, emit_ipv4, payload_offset, FrameRepr};
use uroce_wire::opcode::{Opcode, OpcodeInfo};
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{atomic_eth, bth, deth, feth, ieth, immdt, reth, Mask, Psn, Qkey, Qpn};

/// Position of a packet in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// The packet of the current WQE to send next.
#[derive(Debug, Clone, Copy)]
struct PacketPlan {
    /// The WQE's opcode.
    opcode: WrOpcode,
    /// The WQE's flags.
    flags: SendFlags,
    /// The packet's PSN.
    psn: Psn,
    /// Where it is in its message.
    position: Position,
    /// Byte offset of its data in the message (READ: of the data asked
    /// for).
    offset: u64,
    /// Bytes of data it carries.
    len: u64,
    /// Request packets the WQE sends in all (READ and atomics: 1).
    request_pkts: u32,
    /// Bytes of the whole message.
    total: u64,
}

impl QpStep<'_> {
    /// Builds the next packet of the current WQE (RC, UC, UD).
    pub(super) fn build_request(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.waits_for_budget() {
            return None;
        }
        let config = &self.dev.config;
        let max_pkt_per_ack = config.max_pkt_per_ack;
        let qp = &mut *self.qp;
        let mtu = if qp.qp_type == QpType::Ud { config.active_mtu.bytes() } else { qp.mtu() };
        let req_index = qp.req.index;
        if !may_send(qp, req_index, config.max_unacked_psns)? {
            return None;
        }
        assign_psns(qp, req_index, mtu)?;
        let plan = plan_packet(qp, req_index, mtu)?;
        let wire_opcode = select_opcode(qp.qp_type, plan.opcode, plan.position)?;
        // Where it goes: the QP's path, or for UD the WQE's address handle.
        let op = &qp.entry(req_index)?.op;
        let (path, dest_qpn, deth) = if qp.qp_type == QpType::Ud {
            let ud = op.ud().unwrap_or_default();
            let qkey = if Qkey(ud.remote_qkey.0).is_privileged() {
                Qkey(qp.attr.qkey)
            } else {
                ud.remote_qkey
            };
            let deth = deth::Repr { qkey, resv8: 0, src_qpn: qp.qpn };
            (self.dev.ahs.path(AhIndex(ud.ah), qp.pd).copied(), ud.remote_qpn, Some(deth))
        } else {
            (qp.path, Qpn::new(qp.attr.dest_qp_num), None)
        };
        // The payload, through the checked DMA path, straight into the
        // packet buffer after the headers that will go before it.
        let (offset, len) = match plan.opcode {
            WrOpcode::AtomicWrite => (0, 8),
            _ => (plan.offset, plan.len),
        };
        let local = path.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |path| path.local);
        // A buffer too short for the packet breaks `Endpoint::poll_transmit`'s
        // contract: nothing is sent, and the WQE is not blamed for it.
        let room = payload_room(local, wire_opcode, usize::try_from(len).ok()?, buf)?;
        let payload = &qp.entry(req_index)?.payload;
        let payload_len = match gather(&self.dev.mem, qp.pd, payload, offset, len, room) {
            Ok(n) => n,
            Err(status) => {
                // A local protection error ends the WQE (and the QP).
                if plan.opcode.is_read_or_atomic() {
                    qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
                }
                self.finish_without_packet(now, status);
                return None;
            }
        };
        // The headers.
        let last = matches!(plan.position, Position::Last | Position::Only);
        let ack_req = qp.qp_type == QpType::Rc
            && ((last && !self.dev.ack_can_wait_for_later(qp, req_index, &plan, now))
                || plan.opcode.is_read_or_atomic()
                || qp.req.noack_pkts + 1 >= max_pkt_per_ack
                || qp.req.probe_wanted);
        let mut bth = bth::Repr::new(wire_opcode, dest_qpn, plan.psn, payload_len);
        bth.ack_req = ack_req;
        bth.solicited = last && plan.flags.contains(SendFlags::SOLICITED);
        // Built where it stays: the repr has room for every extension
        // header, and moving it is a copy. Its payload is the buffer's.
        let mut roce = Repr { bth, ext: ExtHeaders::default(), payload: &[] };
        // The operation where it lies in the entry (a copy is 40 bytes).
        let op = &qp.entry(req_index)?.op;
        set_extension_headers(wire_opcode.info()?, &plan, op, &mut roce.ext);
        roce.ext.deth = deth;
        let Some(path) = path else {
            // A UD WQE naming no address handle of this PD.
            qp.req.sent_pkts = 0;
            self.finish_without_packet(now, WcStatus::LocQpOpErr);
            return None;
        };
        let sport = self.dev.source_ports.settle(qp.sport);
        let ip_id = self.dev.ip_ids.next();
        let kind_port = (PacketKind::Request, sport);
        let transmit = emit_frame_around(&path, ip_id, kind_port, &roce, payload_len, buf)?;
        // The requester's state after the packet.
        qp.sent_pkts += 1;
        qp.req.noack_pkts = if ack_req { 0 } else { qp.req.noack_pkts + 1 };
        qp.req.last_sent_psn = plan.psn;
        let unrequested_end = last && !ack_req && qp.qp_type == QpType::Rc;
        if ack_req {
            qp.req.unrequested_wqes = 0;
            qp.req.probe_wanted = false;
        } else if unrequested_end {
            if qp.req.unrequested_wqes == 0 {
                qp.req.unrequested_since = now;
            }
            qp.req.unrequested_wqes += 1;
            qp.req.unrequested_psn = plan.psn;
        }
        qp.req.sent_pkts += 1;
        if qp.req.sent_pkts >= plan.request_pkts {
            qp.req.sent_pkts = 0;
            qp.req.index = req_index.wrapping_add(1);
            let rc = qp.qp_type == QpType::Rc;
            let done_state =
                if rc { EntryState::Pending } else { EntryState::Done(WcStatus::Success) };
            if let Some(e) = qp.entry_mut(req_index) {
                e.state = done_state;
            }
            if !rc {
                self.retire(now);
            } else if qp.comp.retransmit_at.is_none() {
                if let Some(timeout_ns) = qp.ack_timeout_ns() {
                    let at = Some(now.plus_nanos(timeout_ns));
                    self.dev.timers.set(self.index, qp, TimerKind::Retransmit, at);
                }
            }
        }
        if unrequested_end && self.qp.comp.probe_at.is_none() {
            let at = self.qp.req.unrequested_since.plus_nanos(self.dev.config.ack_probe_ns);
            self.set_timer(TimerKind::AckProbe, Some(at));
        }
        Some(transmit)
    }
}

impl Device {
    /// Whether the last packet of the RC WQE at `req_index` may go without
    /// AckReq (ACKs on demand, [`crate::config::HcaConfig::ack_probe_ns`]):
    /// a SEND or WRITE nobody waits for (unsignaled), the last WQE fetched
    /// (a stream behind it keeps an ACK per message, as rxe), on a QP in
    /// RTS; fewer such WQEs since the last AckReq than half the send queue
    /// (at most 16), the first of them less than `ack_probe_ns` ago, so
    /// that posts never wait long for the ACK a later message asks for;
    /// less than half the QP's window and of the device's transmit budget
    /// held by unacknowledged PSNs; and a retransmit timer long enough for
    /// an ACK probe to be answered first.
    fn ack_can_wait_for_later(
        &self,
        qp: &QpContext,
        req_index: u32,
        plan: &PacketPlan,
        now: Instant,
    ) -> bool {
        const MAX_UNREQUESTED_WQES: u32 = 16;
        let config = &self.config;
        let probe_ns = config.ack_probe_ns;
        let signaled = qp.sq_sig_all || plan.flags.contains(SendFlags::SIGNALED);
        let last_fetched = qp.fetched == req_index.wrapping_add(1);
        let unrequested = qp.req.unrequested_wqes;
        let room = unrequested + 1 < (qp.cap.max_send_wr / 2).min(MAX_UNREQUESTED_WQES);
        let young = unrequested == 0
            || now.as_nanos().saturating_sub(qp.req.unrequested_since.as_nanos()) < probe_ns;
        let window = qp.unacked_psns() < config.max_unacked_psns / 2
            && self.unacked_psns < config.max_device_unacked_psns / 2;
        let probe_in_time = qp.ack_timeout_ns().is_none_or(|timeout_ns| {
            timeout_ns / crate::config::ACK_PROBE_TIMEOUT_FACTOR >= probe_ns
        });
        probe_ns != 0
            && !signaled
            && last_fetched
            && room
            && young
            && window
            && probe_in_time
            && qp.state == QpState::Rts
            && matches!(
                plan.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
            )
    }
}

/// Whether the WQE at `req_index` may send now (`None`: no such entry).
/// FENCE holds a WQE's first transmission until the READs and atomics
/// before it completed; a READ or atomic waits for a `max_rd_atomic`
/// slot; an RC WQE waits for room in the unacknowledged-PSN window. A
/// WQE already under way (or one being resent after a go-back) is not
/// held: the READs outstanding then may be ones posted after it, which
/// cannot complete before it is resent.
fn may_send(qp: &QpContext, req_index: u32, max_unacked: u32) -> Option<bool> {
    let entry = qp.entry(req_index)?;
    if qp.req.sent_pkts != 0 || entry.psn_assigned {
        return Some(true);
    }
    let outstanding = qp.req.rd_atomic_outstanding;
    let max_rd_atomic = u32::from(qp.attr.max_rd_atomic.max(1));
    // RC only: the others count none.
    let window_used = qp.unacked_psns();
    let fenced = entry.flags.contains(SendFlags::FENCE) && outstanding > 0;
    let no_rd_atomic_slot = entry.opcode.is_read_or_atomic() && outstanding >= max_rd_atomic;
    let window_full = window_used >= max_unacked;
    Some(!(fenced || no_rd_atomic_slot || window_full))
}

/// Gives the WQE at `req_index` its PSNs on its first transmission: one
/// per packet of a SEND or WRITE, one per response packet of a READ, one
/// for an atomic or FLUSH.
fn assign_psns(qp: &mut QpContext, req_index: u32, mtu: u32) -> Option<()> {
    let next_psn = qp.req.next_psn;
    let entry = qp.entry_mut(req_index)?;
    if entry.psn_assigned {
        return Some(());
    }
    let opcode = entry.opcode;
    entry.npkts = match opcode {
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 1,
        WrOpcode::AtomicWrite | WrOpcode::Flush => 1,
        _ => entry.length().div_ceil(u64::from(mtu)).max(1) as u32,
    };
    entry.first_psn = next_psn;
    entry.psn_assigned = true;
    qp.req.next_psn = next_psn + entry.npkts;
    if opcode.is_read_or_atomic() {
        qp.req.rd_atomic_outstanding += 1;
    }
    Some(())
}

/// Which packet of the WQE at `req_index` goes next, and which bytes.
fn plan_packet(qp: &QpContext, req_index: u32, mtu: u32) -> Option<PacketPlan> {
    let entry = qp.entry(req_index)?;
    let (first_psn, npkts, total) = (entry.first_psn, entry.npkts, entry.length());
    let (psn, position, offset, len, request_pkts) = match entry.opcode {
        WrOpcode::RdmaRead => {
            // A READ asks again only for the bytes not placed yet.
            let done_pkts = (entry.read_placed / u64::from(mtu)) as u32;
            (first_psn + done_pkts, Position::Only, entry.read_placed, 0, 1)
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
    Some(PacketPlan {
        opcode: entry.opcode,
        flags: entry.flags,
        psn,
        position,
        offset,
        len,
        request_pkts,
        total,
    })
}

/// The extension headers a request packet builds from its operation:
/// all but the DETH (set from the QP and address handle).
const FROM_OPERATION: Mask =
    Mask::RETH.union(Mask::IMMDT).union(Mask::IETH).union(Mask::ATOMIC_ETH).union(Mask::FETH);

/// Sets in `ext` (all unset) the extension headers (all but the DETH) a
/// request packet with opcode `info` carries, from its operation. An
/// opcode without any (a SEND, a WRITE's middle or last packet) leaves
/// `ext` as it is, without looking at the operation.
fn set_extension_headers(info: &OpcodeInfo, plan: &PacketPlan, op: &SendOp, ext: &mut ExtHeaders) {
    if !info.mask.intersects(FROM_OPERATION) {
        return;
    }
    let op = *op;
    if let (true, Some(remote)) = (info.is(Mask::RETH), op.remote()) {
        let (va, dma_len) = match op {
            SendOp::Read { .. } => (remote.va + plan.offset, (plan.total - plan.offset) as u32),
            SendOp::Flush { len, .. } => (remote.va, len),
            _ => (remote.va, plan.total as u32),
        };
        ext.reth = Some(reth::Repr { va, rkey: remote.rkey, dma_len });
    }
    if let (true, Some(imm)) = (info.is(Mask::IMMDT), op.imm()) {
        ext.immdt = Some(immdt::Repr { imm });
    }
    if let (true, SendOp::Send { invalidate: Some(rkey), .. }) = (info.is(Mask::IETH), op) {
        ext.ieth = Some(ieth::Repr { rkey });
    }
    if info.is(Mask::ATOMIC_ETH) {
        let operands = match op {
            SendOp::CompareSwap { remote, compare, swap } => Some((remote, swap, compare)),
            SendOp::FetchAdd { remote, add } => Some((remote, add, 0)),
            _ => None,
        };
        if let Some((remote, swap_add, compare)) = operands {
            ext.atomic_eth =
                Some(atomic_eth::Repr { va: remote.va, rkey: remote.rkey, swap_add, compare });
        }
    }
    if let (true, SendOp::Flush { selectivity_level, placement_type, .. }) =
        (info.is(Mask::FETH), op)
    {
        ext.feth = Some(feth::Repr { selectivity_level, placement_type, reserved: 0 });
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

/// Where the `len`-byte payload of a packet with `opcode` from `local`
/// goes in `buf` (`payload_offset`), if `buf` also has room for the pad
/// and ICRC after it (`None` breaks `Endpoint::poll_transmit`'s
/// `MAX_PACKET_LEN` contract).
pub(crate) fn payload_room(
    local: IpAddr,
    opcode: Opcode,
    len: usize,
    buf: &mut [u8],
) -> Option<&mut [u8]> {
    let at = payload_offset(local, opcode)?;
    let frame_end =
        at.checked_add(len)? + usize::from(bth::pad_for(len)) + uroce_wire::icrc::ICRC_LEN;
    buf.get_mut(at..frame_end).map(|room| &mut room[..len])
}

/// Gathers `len` bytes from byte `offset` of a WQE's data into `out`,
/// checking every SGE's L_Key. Returns the bytes gathered.
fn gather(
    mem: &crate::mr::MemoryTables,
    pd: PdIndex,
    payload: &Payload,
    offset: u64,
    len: u64,
    out: &mut [u8],
) -> Result<usize, WcStatus> {
    let len = len as usize;
    if len > out.len() {
        return Err(WcStatus::LocLenErr);
    }
    match payload {
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
    let len = match (path.local, path.remote) {
        // Written straight into the buffer, without a frame representation.
        (IpAddr::V4(local), IpAddr::V4(remote)) => {
            emit_ipv4((local, remote), ip_id, sport, &roce, buf).ok()?
        }
        (IpAddr::V6(local), IpAddr::V6(remote)) => {
            FrameRepr::ipv6((local, remote), sport, roce).ok()?.emit(buf).ok()?
        }
        _ => return None,
    };
    Some(transmit_of(&path, kind, sport, len))
}

/// [`emit_frame`] of a transport repr where it lies (the repr, with room
/// for every extension header, is not moved), around its `payload_len`
/// bytes of payload already in `buf` (at `payload_offset`).
pub(crate) fn emit_frame_around(
    path: &Path,
    ip_id: u16,
    (kind, sport): (PacketKind, u16),
    roce: &Repr<'_>,
    payload_len: usize,
    buf: &mut [u8],
) -> Option<Transmit> {
    let addrs = (path.local, path.remote);
    let len = emit_around_payload(addrs, ip_id, sport, roce, payload_len, buf).ok()?;
    Some(transmit_of(path, kind, sport, len))
}

/// What a runtime needs to send a packet of `len` bytes on `path`.
fn transmit_of(path: &Path, kind: PacketKind, source_port: u16, len: usize) -> Transmit {
    Transmit {
        destination: path.remote,
        len,
        kind,
        source_port,
        local_qpn: None,
        nothing_behind: false,
    }
}
