//! One side of an RC connection made by a node task of a
//! [`uroce_harness::Sim`] (or any program with an [`Oob`]): its verbs
//! objects, and [`RcSide::connect`], which swaps GID, QPN and first PSN
//! with the peer over the side channel, brings the QP to RTS and waits
//! until the peer is there too. The scenario tests on `Sim`
//! (`tests/tests/scenario_sim.rs`) are written on it.

use std::error::Error;
use uroce_harness::Oob;
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{Access, Context, Cq, Gid, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, Qpn};

/// What a node task's setup fails with.
pub type TaskError = Box<dyn Error>;

/// The bytes of a hello: GID (16), QPN and first PSN (4 each, big-endian).
const HELLO_LEN: usize = 24;

/// The message each side sends once its QP is in RTS.
const READY: &[u8] = b"ready";

/// One side's verbs objects, declared so that they drop in order: the QP
/// before its CQ, the region before its PD.
pub struct RcSide {
    /// The RC QP (sends and receives complete on [`RcSide::cq`]; only
    /// sends flagged `SIGNALED` complete).
    pub qp: Qp,
    /// A region of the requested length, with the requested access.
    pub mr: Mr,
    /// The CQ of both queues.
    pub cq: Cq,
    /// The QP's and the region's protection domain.
    pub pd: Pd,
}

impl RcSide {
    /// A PD, a CQ of `cq_depth` entries, an RC QP of `cap` on it (in
    /// RESET) and a region of `mr_len` bytes with `access`.
    pub fn new(
        ctx: &Context,
        cq_depth: u32,
        cap: QpCap,
        mr_len: u64,
        access: Access,
    ) -> Result<RcSide, TaskError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cq_depth)?;
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let qp = pd.create_qp(&init)?;
        let mr = pd.alloc_mr(mr_len, access)?;
        Ok(RcSide { qp, mr, cq, pd })
    }

    /// Connects the QP to the peer's over `oob`: sends this side's hello
    /// (the GID at `tuning.sgid_index`, the QPN, `psn`), reads the peer's,
    /// moves the QP to INIT with `access`, runs `in_init` (post the first
    /// receives there: they are in place before the peer may send), moves
    /// it to RTS with `psn` as its first PSN, then swaps "ready" with the
    /// peer. Returns the peer's remote.
    pub async fn connect(
        &self,
        ctx: &Context,
        oob: &impl Oob,
        psn: u32,
        tuning: &Tuning,
        access: Access,
        in_init: impl FnOnce(&RcSide) -> Result<(), TaskError>,
    ) -> Result<Remote, TaskError> {
        let gid = ctx.query_gid(tuning.sgid_index)?;
        let mut hello = gid.0.to_vec();
        hello.extend_from_slice(&self.qp.qpn().value().to_be_bytes());
        hello.extend_from_slice(&psn.to_be_bytes());
        oob.send(&hello).await?;
        let peer = oob.recv().await?;
        let remote = remote_of(&peer)?;
        connect::to_init(&self.qp, access, 0)?;
        in_init(self)?;
        connect::to_rts(&self.qp, Some(remote), &Tuning { sq_psn: psn, ..*tuning })?;
        oob.send(READY).await?;
        let ready = oob.recv().await?;
        if ready != READY {
            return Err(format!("the peer sent {ready:?}, not ready").into());
        }
        Ok(remote)
    }
}

/// The remote a peer's hello names.
fn remote_of(hello: &[u8]) -> Result<Remote, TaskError> {
    if hello.len() != HELLO_LEN {
        return Err(format!("a hello of {} bytes, not {HELLO_LEN}", hello.len()).into());
    }
    let word =
        |at: usize| u32::from_be_bytes([hello[at], hello[at + 1], hello[at + 2], hello[at + 3]]);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&hello[..16]);
    Ok(Remote { gid: Gid(gid), qpn: Qpn::new(word(16)), psn: word(20) })
}
