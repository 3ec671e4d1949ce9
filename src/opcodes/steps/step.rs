//! [`Step`]: one work request of a table, what it is and what it expects,
//! and the send flags it may carry.

use uroce_verbs::{WcStatus, WrOpcode};

/// `IBV_SEND_SOLICITED`.
pub const F_SOLICITED: u32 = 4;
/// `IBV_SEND_INLINE`.
pub const F_INLINE: u32 = 8;
/// The server's RC receive queue is empty when this step arrives.
pub const F_RNR: u32 = 0x100;
/// FLUSH placement type: global visibility (`IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u64 = 1;
/// FLUSH selectivity level: the range in the RETH (`IBV_FLUSH_RANGE`).
pub const FLUSH_RANGE: u64 = 0;

/// The QP a step runs on (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpKind {
    /// The UD QP.
    Ud = 0,
    /// The UC QP.
    Uc = 1,
    /// The RC QP.
    Rc = 2,
}

/// A step's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Len {
    /// Always these bytes.
    Fixed(u32),
    /// 3000 bytes per 1024 bytes of path MTU: FIRST, MIDDLE and LAST
    /// packets at every MTU.
    Big,
    /// Exactly one path MTU.
    Mtu,
}

/// Which key the WR carries (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// None.
    None = 0,
    /// The server's MR rkey.
    Mr = 1,
    /// The MR rkey with bits flipped: a remote access error.
    Bad = 2,
    /// The first memory window's rkey (to invalidate).
    Mw0 = 3,
    /// The second memory window's rkey (to invalidate).
    Mw1 = 4,
}

/// The remote address (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// None (SEND).
    None = 0,
    /// The step's own slot.
    Slot = 1,
    /// The FETCH_ADD word.
    FetchAdd = 2,
    /// The COMPARE_SWAP word.
    CompareSwap = 3,
    /// Both atomic words (16 bytes).
    Atomics = 4,
    /// The previous step's slot (what it wrote there).
    Previous = 5,
}

/// One step: a work request the client posts and what both sides check.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// What it is called in the output.
    pub name: &'static str,
    /// The QP.
    pub qp: QpKind,
    /// The operation.
    pub op: WrOpcode,
    /// The length.
    pub len: Len,
    /// [`F_SOLICITED`], [`F_INLINE`], [`F_RNR`].
    pub flags: u32,
    /// The immediate data (`*_WITH_IMM`).
    pub imm: u32,
    /// The key.
    pub key: Key,
    /// The remote address.
    pub target: Target,
    /// FETCH_ADD's addend, COMPARE_SWAP's compare value.
    pub compare_add: u64,
    /// COMPARE_SWAP's swap value.
    pub swap: u64,
    /// The value an atomic returns.
    pub expect_orig: u64,
    /// The completion status the client expects.
    pub expect: WcStatus,
}

impl Step {
    /// Its length at path MTU `mtu` bytes.
    pub fn bytes(&self, mtu: u32) -> u32 {
        match self.len {
            Len::Fixed(n) => n,
            Len::Big => 3000 * mtu / 1024,
            Len::Mtu => mtu,
        }
    }

    /// A SEND of any kind.
    pub fn is_send(&self) -> bool {
        matches!(self.op, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv)
    }

    /// An RDMA WRITE of any kind.
    pub fn is_write(&self) -> bool {
        matches!(self.op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm)
    }

    /// An RDMA READ.
    pub fn is_read(&self) -> bool {
        self.op == WrOpcode::RdmaRead
    }

    /// FETCH_ADD or COMPARE_SWAP.
    pub fn is_atomic(&self) -> bool {
        matches!(self.op, WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp)
    }

    /// Its payload (the step's pattern) lands in its slot: a WRITE or an
    /// ATOMIC_WRITE.
    pub fn writes_slot(&self) -> bool {
        self.is_write() || self.op == WrOpcode::AtomicWrite
    }

    /// It carries immediate data.
    pub fn has_imm(&self) -> bool {
        matches!(self.op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }

    /// It consumes one of the server's receives.
    pub fn takes_recv(&self) -> bool {
        self.is_send() || self.op == WrOpcode::RdmaWriteWithImm
    }
}
