//! Work requests: [`SendWr`], [`RecvWr`].

use crate::mr::{Mr, Mw};
use uroce_device::types::{Access, Qkey, Qpn, Rkey, SendFlags, WrOpcode};
use uroce_device::wqe::{Payload, SendWqe, Sge, UdDest};

/// Where a send goes and what it carries beyond the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteTarget {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags (SIGNALED, SOLICITED, FENCE, INLINE).
    pub flags: SendFlags,
    /// Data (ignored when `inline_data` is set).
    pub sg_list: Vec<Sge>,
    /// Inline data (sets INLINE).
    pub inline_data: Option<Vec<u8>>,
    /// Immediate data, or the R_Key to invalidate.
    pub imm_or_inv: u32,
    /// Remote address and key (RDMA, atomics).
    pub remote: RemoteTarget,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// UD destination.
    pub ud: Option<(u32, Qpn, Qkey)>,
}

impl SendWr {
    /// A WR with no data and no remote target.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            sg_list: Vec::new(),
            inline_data: None,
            imm_or_inv: 0,
            remote: RemoteTarget::default(),
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }

    /// A type-2 memory window bind (`IBV_WR_BIND_MW`): binds `mw` to
    /// `length` bytes of `mr` from `offset` with `access`, under the new
    /// 8-bit key `new_key`. Returns the WR and the R_Key the window will
    /// have once the bind completes.
    pub fn bind_mw(
        wr_id: u64,
        mw: &Mw,
        mr: &Mr,
        offset: u64,
        length: u64,
        access: Access,
        new_key: u8,
    ) -> (SendWr, Rkey) {
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.imm_or_inv = mw.rkey().0;
        wr.remote = RemoteTarget { addr: mr.addr() + offset, rkey: Rkey(u32::from(new_key)) };
        wr.compare_add = length;
        wr.swap = u64::from(access.0);
        wr.ud = Some((mr.lkey().0, Qpn::new(0), Qkey(0)));
        let new_rkey = Rkey((mw.rkey().0 & !0xff) | u32::from(new_key));
        (wr, new_rkey)
    }

    /// The WQE the driver writes into the send ring for this WR, without
    /// the QP's checks (opcode, SGE and inline limits, UD address).
    pub fn to_wqe(&self) -> SendWqe {
        let (ah, remote_qpn, remote_qkey) = self.ud.unwrap_or((0, Qpn::new(0), Qkey(0)));
        let (payload, flags) = match &self.inline_data {
            Some(data) => (Payload::Inline(data.clone()), self.flags | SendFlags::INLINE),
            None => (Payload::Sges(self.sg_list.clone()), self.flags),
        };
        SendWqe {
            wr_id: self.wr_id,
            opcode: self.opcode,
            flags,
            imm_or_inv: self.imm_or_inv,
            remote_addr: self.remote.addr,
            rkey: self.remote.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
            ud: UdDest { ah, remote_qpn, remote_qkey },
            payload,
        }
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where data goes.
    pub sg_list: Vec<Sge>,
}
