//! Connecting QPs: the usual RC/UC connection steps with the attributes
//! `ibv_rc_pingpong` sets ([`to_init`], [`to_rts`]), the hello two sides
//! swap over a side channel first ([`Remote::to_bytes`],
//! [`Remote::from_bytes`]), the objects a side creates before
//! ([`Endpoint`], [`create_qp`], [`cap`]), and two QPs of one process
//! connected to each other ([`pair`]).
//!
//! | file | what |
//! | --- | --- |
//! | `connect.rs` | [`Remote`], [`Tuning`], the state changes, [`pair`] |
//! | `connect/hello.rs` | [`Remote::to_bytes`], [`Remote::from_bytes`], [`BadHello`] |
//! | `connect/endpoint.rs` | [`Endpoint`], [`create_qp`], [`cap`] |

mod endpoint;
mod hello;
#[cfg(test)]
mod tests;

pub use endpoint::{cap, create_qp, Endpoint};
pub use hello::BadHello;

use crate::error::Result;
use crate::qp::Qp;
use uroce_device::command::{AhAttr, Gid, QpAttr};
use uroce_device::types::{Access, AttrMask, Mtu, QpState, QpType, Qpn};

/// The access rights the tests and examples grant their QPs and regions:
/// local write, remote write, read and atomics, memory window binding.
pub const ALL_ACCESS: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0
        | Access::MW_BIND.0,
);

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Tuning {
    /// A connection as the tests and examples make it: path MTU 1024, ACK
    /// timeout exponent `timeout` (4.096 µs × 2^timeout: 8 ≈ 1 ms, 14 ≈
    /// 67 ms), 7 transport retries, infinite RNR retries, RNR timer code 1
    /// (0.01 ms), 16 READ/atomic credits, source GID index 1 (the IPv4
    /// GID), hop limit 64, service level 0, first PSN 0.
    pub fn with_timeout(timeout: u8) -> Tuning {
        Tuning {
            mtu: Mtu::Mtu1024,
            sq_psn: 0,
            timeout,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            sgid_index: 1,
            hop_limit: 64,
            sl: 0,
        }
    }
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

/// Connects two QPs of one process (RC or UC, in RESET) to each other: `a`,
/// reached at `a_gid`, and `b`, at `b_gid`, both brought to INIT with
/// `access`, then to RTS with `tuning`; `a` sends from PSN
/// `tuning.sq_psn`, `b` from 1000 past it.
pub fn pair(a: &Qp, a_gid: Gid, b: &Qp, b_gid: Gid, access: Access, tuning: &Tuning) -> Result<()> {
    let (psn_a, psn_b) = (tuning.sq_psn, tuning.sq_psn.wrapping_add(1000) & 0xff_ffff);
    let to_a = Remote { gid: a_gid, qpn: a.qpn(), psn: psn_a };
    let to_b = Remote { gid: b_gid, qpn: b.qpn(), psn: psn_b };
    to_init(a, access, 0)?;
    to_init(b, access, 0)?;
    to_rts(a, Some(to_b), &Tuning { sq_psn: psn_a, ..*tuning })?;
    to_rts(b, Some(to_a), &Tuning { sq_psn: psn_b, ..*tuning })
}

/// Moves a QP to the error state.
pub fn to_error(qp: &Qp) -> Result<()> {
    let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
    qp.modify(&attr, AttrMask::STATE)
}
