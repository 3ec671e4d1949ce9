//! The completion queue entry format (the device interface).
//!
//! ```text
//!  0  u64 wr_id
//!  8  u8  status          (ibv_wc_status)
//!  9  u8  opcode          (ibv_wc_opcode)
//! 10  u8  wc_flags        (ibv_wc_flags)
//! 11  u8  sl
//! 12  u32 byte_len
//! 16  u32 imm_data or invalidated R_Key
//! 20  u32 qp_num
//! 24  u32 src_qp          (UD)
//! 28  u16 pkey_index
//! 30  u16 slid
//! 32  u32 vendor_err
//! 36  28 bytes reserved (0)
//! ```

use crate::types::{Qpn, WcFlags, WcOpcode, WcStatus};

/// Bytes per CQE (the CQ ring's stride).
pub const CQE_LEN: usize = 64;

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cqe {
    /// The WR's tag.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Which optional fields are valid.
    pub flags: WcFlags,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data or the invalidated R_Key.
    pub imm_or_inv: u32,
    /// The QP the WR belonged to.
    pub qp_num: Qpn,
    /// The sending QP (UD receives).
    pub src_qp: Qpn,
    /// Partition key index.
    pub pkey_index: u16,
    /// Vendor error code (always 0 today).
    pub vendor_err: u32,
}

impl Cqe {
    /// A completion with only the fields every CQE has.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: Qpn) -> Cqe {
        Cqe {
            wr_id,
            status,
            opcode,
            flags: WcFlags::EMPTY,
            byte_len: 0,
            imm_or_inv: 0,
            qp_num,
            src_qp: Qpn::new(0),
            pkey_index: 0,
            vendor_err: 0,
        }
    }

    /// Writes the CQE.
    pub fn encode(&self) -> [u8; CQE_LEN] {
        let mut out = [0u8; CQE_LEN];
        out[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        out[8] = self.status.raw();
        out[9] = self.opcode.raw();
        out[10] = self.flags.0 as u8;
        out[12..16].copy_from_slice(&self.byte_len.to_le_bytes());
        out[16..20].copy_from_slice(&self.imm_or_inv.to_le_bytes());
        out[20..24].copy_from_slice(&self.qp_num.value().to_le_bytes());
        out[24..28].copy_from_slice(&self.src_qp.value().to_le_bytes());
        out[28..30].copy_from_slice(&self.pkey_index.to_le_bytes());
        out[32..36].copy_from_slice(&self.vendor_err.to_le_bytes());
        out
    }

    /// Reads a CQE (the application side). `None` for values no HCA
    /// writes (a corrupted ring).
    pub fn decode(bytes: &[u8; CQE_LEN]) -> Option<Cqe> {
        let le32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Some(Cqe {
            wr_id: u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes")),
            status: WcStatus::from_raw(bytes[8])?,
            opcode: WcOpcode::from_raw(bytes[9])?,
            flags: WcFlags(u32::from(bytes[10])),
            byte_len: le32(12),
            imm_or_inv: le32(16),
            qp_num: Qpn::new(le32(20)),
            src_qp: Qpn::new(le32(24)),
            pkey_index: u16::from_le_bytes([bytes[28], bytes[29]]),
            vendor_err: le32(32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let mut cqe = Cqe::new(42, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, Qpn::new(17));
        cqe.flags = WcFlags::WITH_IMM;
        cqe.byte_len = 4096;
        cqe.imm_or_inv = 0xabcd;
        let bytes = cqe.encode();
        assert_eq!(bytes[8], 10);
        assert_eq!(bytes[9], 1);
        assert_eq!(&bytes[20..24], &17u32.to_le_bytes());
        assert_eq!(Cqe::decode(&bytes), Some(cqe));
        let mut bad = bytes;
        bad[8] = 200;
        assert_eq!(Cqe::decode(&bad), None);
    }
}
