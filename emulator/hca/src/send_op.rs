//! Decoded send operations: what a send WQE asks for, one variant per
//! opcode family, each operand under its own name.
//!
//! The WQE format reuses its fields from one opcode to the next
//! (`imm_or_inv` is immediate data, the R_Key to invalidate, the key for
//! LOCAL_INV or the window for BIND_MW; `compare_add` is a compare value,
//! an addend, a FLUSH length or a window length; `swap` is a swap value,
//! FLUSH's placement and level, or a window's access; `ud.ah` is an
//! address handle or the region a window binds to). The WQE is decoded
//! into a [`SendOp`] once, when it is fetched, and the engines only read
//! the operation.

use uroce_device::types::{Access, WrOpcode};
use uroce_device::wqe::{SendWqe, UdDest};
use uroce_wire::Rkey;

/// Remote memory a request names: address and R_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The remote virtual address of the first byte.
    pub va: u64,
    /// The R_Key.
    pub rkey: Rkey,
}

/// A send operation, decoded from its WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND, SEND with immediate, SEND with invalidate.
    Send {
        /// Immediate data (SEND with immediate).
        imm: Option<u32>,
        /// The R_Key the responder invalidates (SEND with invalidate).
        invalidate: Option<Rkey>,
        /// Where a UD QP sends it.
        ud: UdDest,
    },
    /// RDMA WRITE, with immediate or not.
    Write {
        /// Where the data goes.
        remote: RemoteAddr,
        /// Immediate data (WRITE with immediate).
        imm: Option<u32>,
    },
    /// RDMA READ.
    Read {
        /// Where the data comes from.
        remote: RemoteAddr,
    },
    /// COMPARE_SWAP.
    CompareSwap {
        /// The 8-byte word.
        remote: RemoteAddr,
        /// The value expected.
        compare: u64,
        /// The value stored on a match.
        swap: u64,
    },
    /// FETCH_ADD.
    FetchAdd {
        /// The 8-byte word.
        remote: RemoteAddr,
        /// The value added.
        add: u64,
    },
    /// ATOMIC WRITE (the 8 bytes are the WQE's data).
    AtomicWrite {
        /// The 8-byte word.
        remote: RemoteAddr,
    },
    /// FLUSH.
    Flush {
        /// The start of the range.
        remote: RemoteAddr,
        /// Bytes in the range.
        len: u32,
        /// The FETH selectivity level.
        selectivity_level: u8,
        /// The FETH placement type.
        placement_type: u8,
    },
    /// LOCAL_INV.
    LocalInv {
        /// The key invalidated.
        key: u32,
    },
    /// BIND_MW.
    BindMw {
        /// The window's R_Key.
        window: u32,
        /// The 8-bit key the window's new R_Key gets.
        window_key: u8,
        /// The L_Key of the region the window binds to.
        region: u32,
        /// The window's start.
        va: u64,
        /// The window's length.
        len: u64,
        /// The rights the window grants.
        access: Access,
    },
}

impl SendOp {
    /// The operation a WQE asks for.
    pub fn decode(wqe: &SendWqe) -> SendOp {
        let remote = RemoteAddr { va: wqe.remote_addr, rkey: wqe.rkey };
        match wqe.opcode {
            WrOpcode::Send => SendOp::Send { imm: None, invalidate: None, ud: wqe.ud },
            WrOpcode::SendWithImm => {
                SendOp::Send { imm: Some(wqe.imm_or_inv), invalidate: None, ud: wqe.ud }
            }
            WrOpcode::SendWithInv => {
                SendOp::Send { imm: None, invalidate: Some(Rkey(wqe.imm_or_inv)), ud: wqe.ud }
            }
            WrOpcode::RdmaWrite => SendOp::Write { remote, imm: None },
            WrOpcode::RdmaWriteWithImm => SendOp::Write { remote, imm: Some(wqe.imm_or_inv) },
            WrOpcode::RdmaRead => SendOp::Read { remote },
            WrOpcode::AtomicCmpAndSwp => {
                SendOp::CompareSwap { remote, compare: wqe.compare_add, swap: wqe.swap }
            }
            WrOpcode::AtomicFetchAndAdd => SendOp::FetchAdd { remote, add: wqe.compare_add },
            WrOpcode::AtomicWrite => SendOp::AtomicWrite { remote },
            WrOpcode::Flush => SendOp::Flush {
                remote,
                len: wqe.compare_add as u32,
                selectivity_level: ((wqe.swap >> 8) & 0x3) as u8,
                placement_type: (wqe.swap & 0xf) as u8,
            },
            WrOpcode::LocalInv => SendOp::LocalInv { key: wqe.imm_or_inv },
            WrOpcode::BindMw => SendOp::BindMw {
                window: wqe.imm_or_inv,
                window_key: wqe.rkey.0 as u8,
                region: wqe.ud.ah,
                va: wqe.remote_addr,
                len: wqe.compare_add,
                access: Access(wqe.swap as u32),
            },
        }
    }

    /// The remote memory the request names, if it names any.
    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::Write { remote, .. }
            | SendOp::Read { remote }
            | SendOp::CompareSwap { remote, .. }
            | SendOp::FetchAdd { remote, .. }
            | SendOp::AtomicWrite { remote }
            | SendOp::Flush { remote, .. } => Some(remote),
            SendOp::Send { .. } | SendOp::LocalInv { .. } | SendOp::BindMw { .. } => None,
        }
    }

    /// The immediate data the message carries, if any.
    pub fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::Send { imm, .. } | SendOp::Write { imm, .. } => imm,
            _ => None,
        }
    }

    /// Where a UD QP sends the message (SENDs only).
    pub fn ud(&self) -> Option<UdDest> {
        match *self {
            SendOp::Send { ud, .. } => Some(ud),
            _ => None,
        }
    }
}
