//! Work requests ([`SendWr`], [`RecvWr`]) and the WQEs the driver writes
//! for them.
//!
//! The bytes are the device interface's WQE formats
//! ([`uroce_device::wqe`], `docs/device-interface.md` section 3), written
//! straight from the WR into the ring's slot, as a vendor driver does:
//! nothing is allocated per WR. They are the bytes `SendWqe::encode` and
//! `RecvWqe::encode` give (the tests below check it).

use crate::mr::{Mr, Mw};
use uroce_device::types::{Access, Qkey, Qpn, Rkey, SendFlags, WrOpcode};
use uroce_device::wqe::{Payload, SendWqe, Sge, UdDest, RECV_HEADER_LEN, SEND_HEADER_LEN, SGE_LEN};

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
    /// the QP's checks (opcode, SGE and inline limits, UD address), as a
    /// value (the driver itself writes the bytes with no value between).
    pub fn to_wqe(&self) -> SendWqe {
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
            ud: self.ud_dest(),
            payload,
        }
    }

    fn ud_dest(&self) -> UdDest {
        let (ah, remote_qpn, remote_qkey) = self.ud.unwrap_or((0, Qpn::new(0), Qkey(0)));
        UdDest { ah, remote_qpn, remote_qkey }
    }

    /// Writes this WR's send WQE into `slot`, which is zeroed and large
    /// enough (the QP checked the SGE count and inline length against the
    /// slot it sized).
    pub(crate) fn write_wqe(&self, slot: &mut [u8]) {
        let (num_sge, inline_len, flags) = match &self.inline_data {
            Some(data) => (0, data.len(), self.flags.with(SendFlags::INLINE)),
            None => (self.sg_list.len(), 0, self.flags.without(SendFlags::INLINE)),
        };
        let ud = self.ud_dest();
        slot[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        slot[8] = self.opcode.raw();
        slot[9] = flags.0 as u8;
        slot[10] = u8::try_from(num_sge).expect("at most 255 SGEs");
        slot[12..16].copy_from_slice(&self.imm_or_inv.to_le_bytes());
        slot[16..24].copy_from_slice(&self.remote.addr.to_le_bytes());
        slot[24..28].copy_from_slice(&self.remote.rkey.0.to_le_bytes());
        slot[28..32].copy_from_slice(&(inline_len as u32).to_le_bytes());
        slot[32..40].copy_from_slice(&self.compare_add.to_le_bytes());
        slot[40..48].copy_from_slice(&self.swap.to_le_bytes());
        slot[48..52].copy_from_slice(&ud.ah.to_le_bytes());
        slot[52..56].copy_from_slice(&ud.remote_qpn.value().to_le_bytes());
        slot[56..60].copy_from_slice(&ud.remote_qkey.0.to_le_bytes());
        match &self.inline_data {
            Some(data) => slot[SEND_HEADER_LEN..SEND_HEADER_LEN + data.len()].copy_from_slice(data),
            None => write_sges(&mut slot[SEND_HEADER_LEN..], &self.sg_list),
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

impl RecvWr {
    /// Writes this WR's receive WQE into `slot`, which is zeroed and large
    /// enough (the queue checked the SGE count).
    pub(crate) fn write_wqe(&self, slot: &mut [u8]) {
        slot[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        slot[8] = u8::try_from(self.sg_list.len()).expect("at most 255 SGEs");
        write_sges(&mut slot[RECV_HEADER_LEN..], &self.sg_list);
    }
}

/// Writes an SGE table: `{ u64 addr, u32 length, u32 lkey }` each.
fn write_sges(table: &mut [u8], sges: &[Sge]) {
    assert!(table.len() >= sges.len() * SGE_LEN, "WQE does not fit its slot");
    for (sge, out) in sges.iter().zip(table.chunks_exact_mut(SGE_LEN)) {
        out[0..8].copy_from_slice(&sge.addr.to_le_bytes());
        out[8..12].copy_from_slice(&sge.length.to_le_bytes());
        out[12..16].copy_from_slice(&sge.lkey.0.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_device::types::Lkey;
    use uroce_device::wqe::{recv_stride, send_stride, RecvWqe};

    fn sges(n: u32) -> Vec<Sge> {
        (0..n)
            .map(|i| Sge {
                addr: 0x1_0000_0000 * u64::from(i) + 0x1234_5678,
                length: 1000 + i,
                lkey: Lkey(0x100 + i),
            })
            .collect()
    }

    fn send_wrs() -> Vec<SendWr> {
        let mut wrs = Vec::new();
        for opcode in (0..=15).filter_map(WrOpcode::from_raw) {
            for n in [0, 1, 3] {
                let mut wr = SendWr::new(0x1122_3344_5566_7788 ^ u64::from(n), opcode);
                wr.sg_list = sges(n);
                wr.flags = SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE;
                wr.imm_or_inv = 0xdead_beef;
                wr.remote = RemoteTarget { addr: 0xfeed_f00d_0000, rkey: Rkey(0xabcd_ef01) };
                wr.compare_add = u64::MAX - 1;
                wr.swap = 0x0102_0304_0506_0708;
                wrs.push(wr.clone());
                wr.ud = Some((7, Qpn::new(0xff_ffff), Qkey(0x8000_0001)));
                wrs.push(wr.clone());
                wr.flags = SendFlags::INLINE;
                wrs.push(wr.clone());
                wr.inline_data = Some((0..40 * n as u8).collect());
                wrs.push(wr);
            }
        }
        wrs
    }

    #[test]
    fn send_wqes_are_the_bytes_of_the_device_encoder() {
        let stride = send_stride(3, 120) as usize;
        for wr in send_wrs() {
            let mut ours = vec![0u8; stride];
            wr.write_wqe(&mut ours);
            let mut theirs = vec![0u8; stride];
            wr.to_wqe().encode(&mut theirs);
            assert_eq!(ours, theirs, "{wr:?}");
        }
    }

    #[test]
    fn recv_wqes_are_the_bytes_of_the_device_encoder() {
        let stride = recv_stride(3) as usize;
        for n in 0..=3 {
            let wr = RecvWr { wr_id: 0xa5a5_0000_0000_0001 + u64::from(n), sg_list: sges(n) };
            let mut ours = vec![0u8; stride];
            wr.write_wqe(&mut ours);
            let mut theirs = vec![0u8; stride];
            RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.clone() }.encode(&mut theirs);
            assert_eq!(ours, theirs, "{wr:?}");
        }
    }
}
