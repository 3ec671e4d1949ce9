//! Attributes for the usual RC/UC connection steps, as `ibv_rc_pingpong`
//! sets them.

use crate::error::Result;
use crate::qp::Qp;
use uroce_device::command::{AhAttr, Gid, QpAttr};
use uroce_device::types::{Access, AttrMask, Mtu, QpState, QpType, Qpn};

/// RESET → INIT.
pub fn to_init(qp: &Qp, access: Access, qkey: u32) -> Result<()> {
    let mut attr = QpAttr { qp_state: Some(QpState::Init), port_num: 1, ..QpAttr::default() };
    let mut mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
    if qp.qp_type() == QpType::Ud {
        attr.qkey = qkey;
        mask = mask | AttrMask::QKEY;
    } else {
        attr.qp_access_flags = access;
        mask = mask | AttrMask::ACCESS_FLAGS;
    }
    qp.modify(&attr, mask)
}

/// The remote end of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    /// Its GID.
    pub gid: Gid,
    /// Its QPN.
    pub qpn: Qpn,
    /// Its first PSN.
    pub psn: u32,
}

/// Timers and limits of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Path MTU.
    pub mtu: Mtu,
    /// Our first PSN.
    pub sq_psn: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code we send.
    pub min_rnr_timer: u8,
    /// READ/atomic credits both ways.
    pub rd_atomic: u8,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL) of the path.
    pub hop_limit: u8,
    /// Service level of the path.
    pub sl: u8,
}

/// INIT → RTR → RTS for RC and UC; INIT → RTR → RTS for UD.
pub fn to_rts(qp: &Qp, remote: Option<Remote>, tuning: &Tuning) -> Result<()> {
    let mut attr = QpAttr { qp_state: Some(QpState::Rtr), ..QpAttr::default() };
    let mut mask = AttrMask::STATE;
    if let Some(remote) = remote {
        attr.path_mtu = Some(tuning.mtu);
        attr.dest_qp_num = remote.qpn.value();
        attr.rq_psn = remote.psn;
        attr.ah_attr = AhAttr {
            dgid: remote.gid,
            sgid_index: tuning.sgid_index,
            hop_limit: tuning.hop_limit,
            sl: tuning.sl,
            port_num: 1,
            ..AhAttr::default()
        };
        mask = mask | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
        if qp.qp_type() == QpType::Rc {
            attr.max_dest_rd_atomic = tuning.rd_atomic;
            attr.min_rnr_timer = tuning.min_rnr_timer;
            mask = mask | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
        }
    }
    qp.modify(&attr, mask)?;
    let mut attr =
        QpAttr { qp_state: Some(QpState::Rts), sq_psn: tuning.sq_psn, ..QpAttr::default() };
    let mut mask = AttrMask::STATE | AttrMask::SQ_PSN;
    if qp.qp_type() == QpType::Rc {
        attr.timeout = tuning.timeout;
        attr.retry_cnt = tuning.retry_cnt;
        attr.rnr_retry = tuning.rnr_retry;
        attr.max_rd_atomic = tuning.rd_atomic;
        mask = mask
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::MAX_QP_RD_ATOMIC;
    }
    qp.modify(&attr, mask)
}

/// Moves a QP to the error state.
pub fn to_error(qp: &Qp) -> Result<()> {
    let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
    qp.modify(&attr, AttrMask::STATE)
}
