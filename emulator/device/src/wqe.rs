//! Work queue entry formats (the device interface).
//!
//! Send WQE (`stride` bytes, a power of two; fields little-endian):
//!
//! ```text
//!  0  u64 wr_id
//!  8  u8  opcode          (ibv_wr_opcode)
//!  9  u8  flags           (ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8)
//! 10  u8  num_sge         (0 when INLINE)
//! 11  u8  reserved (0)
//! 12  u32 imm_data        (WITH_IMM; the value sent big-endian on the wire)
//!         or invalidate R_Key (SEND_WITH_INV, LOCAL_INV)
//!         or the window's current R_Key (BIND_MW)
//! 16  u64 remote_addr     (RDMA, atomics, FLUSH; BIND_MW: window start)
//! 24  u32 rkey            (RDMA, atomics, FLUSH; BIND_MW: the window's new R_Key)
//! 28  u32 inline_len      (INLINE)
//! 32  u64 compare_add     (CMP_AND_SWP: compare; FETCH_AND_ADD: add;
//!                          FLUSH: length; BIND_MW: length)
//! 40  u64 swap            (CMP_AND_SWP: swap; FLUSH: placement | level << 8;
//!                          BIND_MW: access flags)
//! 48  u32 ah              (UD: address handle; BIND_MW: L_Key of the region)
//! 52  u32 remote_qpn      (UD)
//! 56  u32 remote_qkey     (UD)
//! 60  u32 reserved (0)
//! 64  SGEs: { u64 addr, u32 length, u32 lkey } * num_sge,  or inline data
//! ```
//!
//! Receive WQE:
//!
//! ```text
//!  0  u64 wr_id
//!  8  u8  num_sge
//!  9  7 bytes reserved (0)
//! 16  SGEs: { u64 addr, u32 length, u32 lkey } * num_sge
//! ```
//!
//! The HCA reads a WQE once, into its own memory, and validates every field
//! before acting on it ([`SendWqe::decode`], [`RecvWqe::decode`]).

use crate::types::{Lkey, Qkey, Qpn, Rkey, SendFlags, WcStatus, WrOpcode};

/// Bytes before the SGEs / inline data of a send WQE.
pub const SEND_HEADER_LEN: usize = 64;
/// Bytes before the SGEs of a receive WQE.
pub const RECV_HEADER_LEN: usize = 16;
/// Bytes per SGE.
pub const SGE_LEN: usize = 16;

/// A scatter/gather entry: a piece of registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Key of the memory region.
    pub lkey: Lkey,
}

impl Sge {
    fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..12].copy_from_slice(&self.length.to_le_bytes());
        out[12..16].copy_from_slice(&self.lkey.0.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Sge {
        Sge {
            addr: le64(&bytes[0..8]),
            length: le32(&bytes[8..12]),
            lkey: Lkey(le32(&bytes[12..16])),
        }
    }
}

/// Appends the SGEs of an SGE table to `list` (one push each: cheaper
/// than `extend` for the one or two SGEs of most WQEs).
fn decode_sges(table: &[u8], list: &mut Vec<Sge>) {
    for bytes in table.chunks_exact(SGE_LEN) {
        list.push(Sge::decode(bytes));
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Walks `len` bytes from byte `offset` of an SGE list, calling
/// `step(sge, offset_in_sge, at, piece)` for each piece: `piece` bytes at
/// `offset_in_sge` into `sge`, which are bytes `at..at + piece` of the
/// walk. Fails with LOC_LEN_ERR when the list is shorter than
/// `offset + len`; errors from `step` end the walk.
pub fn walk_sges(
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut step: impl FnMut(&Sge, u64, usize, usize) -> Result<(), WcStatus>,
) -> Result<(), WcStatus> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(sge.length);
        if skip >= sge_len {
            skip -= sge_len;
            continue;
        }
        let piece = ((sge_len - skip) as usize).min(len - done);
        step(sge, skip, done, piece)?;
        done += piece;
        skip = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// The `wr_id` at the start of a raw WQE slot (for the error completion
/// of a WQE that does not decode); 0 for a slot too short to hold one.
pub fn slot_wr_id(slot: &[u8]) -> u64 {
    slot.get(..8).map_or(0, le64)
}

/// Where a UD send goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdDest {
    /// Address handle index.
    pub ah: u32,
    /// Destination QP.
    pub remote_qpn: Qpn,
    /// Q_Key to send (a privileged value means "use the QP's Q_Key").
    pub remote_qkey: Qkey,
}

/// The data of a send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from registered memory.
    Sges(Vec<Sge>),
    /// Carried in the WQE.
    Inline(Vec<u8>),
}

/// A decoded send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// The application's tag, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: WrOpcode,
    /// How.
    pub flags: SendFlags,
    /// Immediate data, or the R_Key to invalidate.
    pub imm_or_inv: u32,
    /// Remote address (or window start for BIND_MW).
    pub remote_addr: u64,
    /// Remote key (or the window's new R_Key for BIND_MW).
    pub rkey: Rkey,
    /// Compare / add / length operand.
    pub compare_add: u64,
    /// Swap operand / FLUSH placement and level / BIND_MW access.
    pub swap: u64,
    /// UD destination (or BIND_MW region key in `ah`).
    pub ud: UdDest,
    /// The data.
    pub payload: Payload,
}

/// Why a WQE was refused, with the completion status the IBA gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WqeError {
    /// The status of the error completion.
    pub status: WcStatus,
    /// What was wrong.
    pub reason: &'static str,
}

/// Limits a WQE is checked against (from the QP's capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WqeLimits {
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Inline bytes per WQE.
    pub max_inline: u32,
    /// Bytes per message.
    pub max_msg_size: u32,
}

impl SendWqe {
    /// The bytes a WQE needs in the ring.
    pub fn encoded_len(&self) -> usize {
        SEND_HEADER_LEN
            + match &self.payload {
                Payload::Sges(sges) => sges.len() * SGE_LEN,
                Payload::Inline(data) => data.len(),
            }
    }

    /// Writes the WQE into `out` (at least [`SendWqe::encoded_len`] bytes).
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= self.encoded_len(), "WQE does not fit its slot");
        out[..SEND_HEADER_LEN].fill(0);
        out[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        out[8] = self.opcode.raw();
        let (num_sge, inline_len, flags) = match &self.payload {
            Payload::Sges(sges) => (sges.len(), 0, self.flags.without(SendFlags::INLINE)),
            Payload::Inline(data) => (0, data.len(), self.flags.with(SendFlags::INLINE)),
        };
        out[9] = flags.0 as u8;
        out[10] = u8::try_from(num_sge).expect("at most 255 SGEs");
        out[12..16].copy_from_slice(&self.imm_or_inv.to_le_bytes());
        out[16..24].copy_from_slice(&self.remote_addr.to_le_bytes());
        out[24..28].copy_from_slice(&self.rkey.0.to_le_bytes());
        out[28..32].copy_from_slice(&(inline_len as u32).to_le_bytes());
        out[32..40].copy_from_slice(&self.compare_add.to_le_bytes());
        out[40..48].copy_from_slice(&self.swap.to_le_bytes());
        out[48..52].copy_from_slice(&self.ud.ah.to_le_bytes());
        out[52..56].copy_from_slice(&self.ud.remote_qpn.value().to_le_bytes());
        out[56..60].copy_from_slice(&self.ud.remote_qkey.0.to_le_bytes());
        match &self.payload {
            Payload::Sges(sges) => {
                for (i, sge) in sges.iter().enumerate() {
                    let at = SEND_HEADER_LEN + i * SGE_LEN;
                    sge.encode(&mut out[at..at + SGE_LEN]);
                }
            }
            Payload::Inline(data) => {
                out[SEND_HEADER_LEN..SEND_HEADER_LEN + data.len()].copy_from_slice(data)
            }
        }
    }

    /// Reads and validates a WQE from its slot (`slot` is the whole
    /// `stride` bytes as copied out of the ring). Never panics.
    pub fn decode(slot: &[u8], limits: &WqeLimits) -> Result<SendWqe, WqeError> {
        SendWqe::decode_reusing(slot, limits, &mut Vec::new(), &mut Vec::new())
    }

    /// [`SendWqe::decode`], reusing buffers: the WQE's data goes into
    /// `sges` or `inline` (taken, cleared and filled; the other is left as
    /// it was), so a queue that gives a finished WQE's buffer back
    /// allocates nothing once warm. Never panics.
    pub fn decode_reusing(
        slot: &[u8],
        limits: &WqeLimits,
        sges: &mut Vec<Sge>,
        inline: &mut Vec<u8>,
    ) -> Result<SendWqe, WqeError> {
        let err = |status, reason| Err(WqeError { status, reason });
        if slot.len() < SEND_HEADER_LEN {
            return err(WcStatus::LocQpOpErr, "slot shorter than a WQE header");
        }
        let Some(opcode) = WrOpcode::from_raw(slot[8]) else {
            return err(WcStatus::LocQpOpErr, "unknown opcode");
        };
        let flags = SendFlags(u32::from(slot[9]));
        if flags.has_unknown_bits() {
            return err(WcStatus::LocQpOpErr, "unknown send flags");
        }
        let num_sge = u32::from(slot[10]);
        let inline_len = le32(&slot[28..32]);
        let payload = if flags.contains(SendFlags::INLINE) {
            if num_sge != 0 {
                return err(WcStatus::LocQpOpErr, "inline WQE with SGEs");
            }
            if inline_len > limits.max_inline {
                return err(WcStatus::LocLenErr, "inline data longer than max_inline_data");
            }
            let end = SEND_HEADER_LEN + inline_len as usize;
            let Some(data) = slot.get(SEND_HEADER_LEN..end) else {
                return err(WcStatus::LocQpOpErr, "inline data past the slot");
            };
            if !matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::AtomicWrite
            ) {
                return err(WcStatus::LocQpOpErr, "inline data on an opcode that sends none");
            }
            let mut bytes = core::mem::take(inline);
            bytes.clear();
            bytes.extend_from_slice(data);
            Payload::Inline(bytes)
        } else {
            if num_sge > limits.max_sge {
                return err(WcStatus::LocQpOpErr, "more SGEs than the QP allows");
            }
            let end = SEND_HEADER_LEN + num_sge as usize * SGE_LEN;
            let Some(table) = slot.get(SEND_HEADER_LEN..end) else {
                return err(WcStatus::LocQpOpErr, "SGE list past the slot");
            };
            let mut list = core::mem::take(sges);
            list.clear();
            decode_sges(table, &mut list);
            Payload::Sges(list)
        };
        let wqe = SendWqe {
            wr_id: le64(&slot[0..8]),
            opcode,
            flags,
            imm_or_inv: le32(&slot[12..16]),
            remote_addr: le64(&slot[16..24]),
            rkey: Rkey(le32(&slot[24..28])),
            compare_add: le64(&slot[32..40]),
            swap: le64(&slot[40..48]),
            ud: UdDest {
                ah: le32(&slot[48..52]),
                remote_qpn: Qpn::new(le32(&slot[52..56])),
                remote_qkey: Qkey(le32(&slot[56..60])),
            },
            payload,
        };
        if wqe.length() > u64::from(limits.max_msg_size) {
            return err(WcStatus::LocLenErr, "message longer than max_msg_size");
        }
        if matches!(opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
            && wqe.length() != 8
        {
            return err(WcStatus::LocLenErr, "an atomic's result buffer must be 8 bytes");
        }
        if opcode == WrOpcode::AtomicWrite && wqe.length() != 8 {
            return err(WcStatus::LocLenErr, "ATOMIC WRITE carries exactly 8 bytes");
        }
        Ok(wqe)
    }

    /// Total bytes of the message (sum of SGE lengths, or inline length).
    pub fn length(&self) -> u64 {
        match &self.payload {
            Payload::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
            Payload::Inline(data) => data.len() as u64,
        }
    }
}

/// A decoded receive WQE.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWqe {
    /// The application's tag.
    pub wr_id: u64,
    /// Where received data goes.
    pub sges: Vec<Sge>,
}

impl RecvWqe {
    /// The bytes the WQE needs in the ring.
    pub fn encoded_len(&self) -> usize {
        RECV_HEADER_LEN + self.sges.len() * SGE_LEN
    }

    /// Writes the WQE into `out`.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= self.encoded_len(), "WQE does not fit its slot");
        out[..RECV_HEADER_LEN].fill(0);
        out[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        out[8] = u8::try_from(self.sges.len()).expect("at most 255 SGEs");
        for (i, sge) in self.sges.iter().enumerate() {
            let at = RECV_HEADER_LEN + i * SGE_LEN;
            sge.encode(&mut out[at..at + SGE_LEN]);
        }
    }

    /// Reads and validates a receive WQE. Never panics.
    pub fn decode(slot: &[u8], max_sge: u32) -> Result<RecvWqe, WqeError> {
        let mut wqe = RecvWqe { wr_id: 0, sges: Vec::new() };
        wqe.decode_into(slot, max_sge)?;
        Ok(wqe)
    }

    /// [`RecvWqe::decode`] into `self`, reusing its SGE list's buffer. A
    /// WQE that does not decode leaves `self` as it was. Never panics.
    pub fn decode_into(&mut self, slot: &[u8], max_sge: u32) -> Result<(), WqeError> {
        let err = |reason| Err(WqeError { status: WcStatus::LocQpOpErr, reason });
        if slot.len() < RECV_HEADER_LEN {
            return err("slot shorter than a receive WQE header");
        }
        let num_sge = u32::from(slot[8]);
        if num_sge > max_sge {
            return err("more SGEs than the queue allows");
        }
        let end = RECV_HEADER_LEN + num_sge as usize * SGE_LEN;
        let Some(table) = slot.get(RECV_HEADER_LEN..end) else {
            return err("SGE list past the slot");
        };
        self.wr_id = le64(&slot[0..8]);
        self.sges.clear();
        decode_sges(table, &mut self.sges);
        Ok(())
    }

    /// Total bytes the WQE can take.
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// The smallest power-of-two stride that holds a send WQE with `max_sge`
/// SGEs or `max_inline` inline bytes.
pub fn send_stride(max_sge: u32, max_inline: u32) -> u32 {
    let need = SEND_HEADER_LEN as u32 + (max_sge * SGE_LEN as u32).max(max_inline);
    need.next_power_of_two()
}

/// The smallest power-of-two stride that holds a receive WQE with
/// `max_sge` SGEs.
pub fn recv_stride(max_sge: u32) -> u32 {
    (RECV_HEADER_LEN as u32 + max_sge.max(1) * SGE_LEN as u32).next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: WqeLimits = WqeLimits { max_sge: 4, max_inline: 64, max_msg_size: 1 << 31 };

    fn write_wqe() -> SendWqe {
        SendWqe {
            wr_id: 0x1122_3344_5566_7788,
            opcode: WrOpcode::RdmaWriteWithImm,
            flags: SendFlags::SIGNALED | SendFlags::FENCE,
            imm_or_inv: 0xcafe,
            remote_addr: 0x7000_1000,
            rkey: Rkey(0x1234),
            compare_add: 0,
            swap: 0,
            ud: UdDest::default(),
            payload: Payload::Sges(vec![
                Sge { addr: 0x1000, length: 100, lkey: Lkey(0x101) },
                Sge { addr: 0x2000, length: 28, lkey: Lkey(0x202) },
            ]),
        }
    }

    #[test]
    fn send_wqe_round_trip_and_layout() {
        let wqe = write_wqe();
        let mut slot = vec![0xa5u8; send_stride(4, 64) as usize];
        wqe.encode(&mut slot);
        assert_eq!(&slot[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(slot[8], 1, "ibv_wr_opcode RDMA_WRITE_WITH_IMM");
        assert_eq!(slot[9], 3, "FENCE | SIGNALED");
        assert_eq!(slot[10], 2);
        assert_eq!(&slot[64..72], &0x1000u64.to_le_bytes());
        let back = SendWqe::decode(&slot, &LIMITS).unwrap();
        assert_eq!(back, wqe);
        assert_eq!(back.length(), 128);
    }

    #[test]
    fn inline_round_trip() {
        let mut wqe = write_wqe();
        wqe.opcode = WrOpcode::Send;
        wqe.payload = Payload::Inline(b"inline!".to_vec());
        let mut slot = vec![0u8; 128];
        wqe.encode(&mut slot);
        let back = SendWqe::decode(&slot, &LIMITS).unwrap();
        assert_eq!(back.payload, Payload::Inline(b"inline!".to_vec()));
        assert!(back.flags.contains(SendFlags::INLINE));
    }

    #[test]
    fn malformed_wqes_get_the_iba_status() {
        let mut slot = vec![0u8; 128];
        write_wqe().encode(&mut slot);
        let status = |s: &[u8]| SendWqe::decode(s, &LIMITS).unwrap_err().status;
        let mut bad = slot.clone();
        bad[8] = 13; // no such ibv_wr_opcode
        assert_eq!(status(&bad), WcStatus::LocQpOpErr);
        let mut bad = slot.clone();
        bad[10] = 5; // more SGEs than allowed
        assert_eq!(status(&bad), WcStatus::LocQpOpErr);
        let mut bad = slot.clone();
        bad[10] = 4; // allowed, but the table runs past a short slot
        assert_eq!(SendWqe::decode(&bad[..100], &LIMITS).unwrap_err().status, WcStatus::LocQpOpErr);
        let mut bad = slot.clone();
        bad[9] |= 8; // INLINE with SGEs
        assert_eq!(status(&bad), WcStatus::LocQpOpErr);
        let mut bad = slot.clone();
        bad[9] = 8;
        bad[10] = 0;
        bad[28..32].copy_from_slice(&65u32.to_le_bytes());
        assert_eq!(status(&bad), WcStatus::LocLenErr, "inline longer than allowed");
        let mut bad = slot.clone();
        bad[9] |= 0x40; // unknown flag
        assert_eq!(status(&bad), WcStatus::LocQpOpErr);
        let mut atomic = write_wqe();
        atomic.opcode = WrOpcode::AtomicFetchAndAdd;
        atomic.encode(&mut slot);
        assert_eq!(status(&slot), WcStatus::LocLenErr, "atomic result buffer of 128 bytes");
        assert_eq!(status(&slot[..10]), WcStatus::LocQpOpErr);
    }

    #[test]
    fn message_length_limit() {
        let mut wqe = write_wqe();
        wqe.payload = Payload::Sges(vec![Sge { addr: 0, length: u32::MAX, lkey: Lkey(1) }; 3]);
        let mut slot = vec![0u8; 128];
        wqe.encode(&mut slot);
        let err = SendWqe::decode(&slot, &LIMITS).unwrap_err();
        assert_eq!(err.status, WcStatus::LocLenErr);
    }

    #[test]
    fn recv_wqe_round_trip_and_limits() {
        let wqe = RecvWqe { wr_id: 7, sges: vec![Sge { addr: 0x40, length: 4096, lkey: Lkey(9) }] };
        let mut slot = vec![0xa5u8; recv_stride(2) as usize];
        wqe.encode(&mut slot);
        assert_eq!(RecvWqe::decode(&slot, 2).unwrap(), wqe);
        slot[8] = 3;
        assert!(RecvWqe::decode(&slot, 2).is_err());
        slot[8] = 4;
        assert!(RecvWqe::decode(&slot, 4).is_err(), "16 + 4 * 16 bytes run past a 64-byte slot");
    }

    #[test]
    fn strides() {
        assert_eq!(send_stride(1, 0), 128);
        assert_eq!(send_stride(4, 0), 128);
        assert_eq!(send_stride(4, 400), 512);
        assert_eq!(recv_stride(1), 32);
        assert_eq!(recv_stride(2), 64);
    }
}
