//! The verbs objects one side of a connection creates before connecting:
//! a PD, one CQ, a QP completing on it, a memory region.

use super::Remote;
use crate::context::Context;
use crate::cq::Cq;
use crate::error::Result;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::{Qp, QpInitAttr};
use crate::srq::Srq;
use uroce_device::command::QpCap;
use uroce_device::types::{Access, QpType};

/// A QP's sizes: `wr` work requests and `sge` scatter/gather entries in
/// each queue, `inline` bytes of inline data.
pub fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// A QP of `qp_type` on `pd` whose sends and receives complete on `cq`,
/// taking its receives from `srq` if one; only the sends flagged
/// `SIGNALED` complete.
pub fn create_qp(pd: &Pd, cq: &Cq, qp_type: QpType, srq: Option<&Srq>, cap: QpCap) -> Result<Qp> {
    let init = QpInitAttr { qp_type, send_cq: cq, recv_cq: cq, srq, cap, sq_sig_all: false };
    pd.create_qp(&init)
}

/// One side of an RC connection: its QP, one memory region, the CQ of
/// both queues and the PD (in that order: the QP is dropped before its
/// CQ, the region before its PD).
pub struct Endpoint {
    /// The RC QP, in RESET.
    pub qp: Qp,
    /// The region the side sends from, receives into and exposes.
    pub mr: Mr,
    /// Sends and receives complete here.
    pub cq: Cq,
    /// The protection domain of the QP and the region.
    pub pd: Pd,
}

impl Endpoint {
    /// A PD, a CQ of `cq_depth` entries, an RC QP of `cap` on it, and a
    /// region of `mr_len` bytes with `access`.
    pub fn rc(
        ctx: &Context,
        cq_depth: u32,
        cap: QpCap,
        mr_len: u64,
        access: Access,
    ) -> Result<Endpoint> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cq_depth)?;
        let qp = create_qp(&pd, &cq, QpType::Rc, None, cap)?;
        let mr = pd.alloc_mr(mr_len, access)?;
        Ok(Endpoint { qp, mr, cq, pd })
    }

    /// What the peer needs to reach this side ([`Remote::to_bytes`] is its
    /// hello): the GID at `sgid_index`, the QPN, and `psn`, this side's
    /// first PSN.
    pub fn remote(&self, ctx: &Context, sgid_index: u8, psn: u32) -> Result<Remote> {
        Ok(Remote { gid: ctx.query_gid(sgid_index)?, qpn: self.qp.qpn(), psn })
    }
}
