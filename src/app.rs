//! What the `uroce` tools (demo, pingpong, bench) and the tests share: a
//! device on the real network with a verbs context, a protection domain
//! and a CQ, and the usual steps to connect QPs and wait for completions.

use std::net::IpAddr;
use std::time::{Duration, Instant};
use uroce_emulator::command::{Gid, QpCap};
use uroce_emulator::types::{QpType, Qpn};
use uroce_emulator::udp::{UdpConfig, UdpDevice, UdpError};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{Access, Context, Cq, Mtu, Pd, Qp, QpInitAttr, WorkCompletion};

/// Every access right (local write, remote write/read/atomic, bind).
pub const ALL_ACCESS: Access = Access(1 | 2 | 4 | 8 | 16);

/// A device with a context, a PD and one CQ.
pub struct Node {
    /// The verbs context.
    pub ctx: Context,
    /// A protection domain.
    pub pd: Pd,
    /// A CQ for everything.
    pub cq: Cq,
    /// The device (last: dropped after the verbs objects).
    pub dev: UdpDevice,
}

impl Node {
    /// Opens a device with `config` and a CQ of `cqe` entries.
    pub fn open(config: UdpConfig, cqe: u32) -> Result<Node, String> {
        let dev = UdpDevice::open(config).map_err(|e: UdpError| e.to_string())?;
        let ctx = Context::open(dev.hca());
        let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
        let cq = ctx.create_cq(cqe).map_err(|e| format!("create_cq: {e}"))?;
        Ok(Node { ctx, pd, cq, dev })
    }

    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.dev.addr()
    }

    /// The device's GID at index 1 (its IP address).
    pub fn gid(&self) -> Gid {
        Gid::from_ip(self.addr())
    }

    /// A QP of `qp_type` on the node's CQ.
    pub fn qp(&self, qp_type: QpType, cap: QpCap) -> Result<Qp, String> {
        self.pd
            .create_qp(&QpInitAttr {
                qp_type,
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                cap,
                sq_sig_all: false,
            })
            .map_err(|e| format!("create_qp: {e}"))
    }

    /// Polls the CQ until `count` completions arrived or `timeout` passed.
    pub fn wait(&self, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
        wait_cq(&self.cq, count, timeout)
    }
}

/// Polls `cq` until `count` completions arrived or `timeout` passed.
pub fn wait_cq(cq: &Cq, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < count {
        match cq.poll(count - got.len()) {
            Ok(more) if more.is_empty() => {
                if Instant::now() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
            Ok(more) => got.extend(more),
            Err(_) => break,
        }
    }
    got
}

/// The tuning the tools use unless told otherwise: path MTU 1024 as
/// `ibv_rc_pingpong`, timeout 14 (67 ms), 7 retries, infinite RNR retries.
pub fn default_tuning() -> Tuning {
    Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        rd_atomic: 16,
        sgid_index: 1,
    }
}

/// Moves `qp` to RTS towards `remote` (RC/UC) or on its own (UD).
pub fn bring_up(
    qp: &Qp,
    remote: Option<(Gid, Qpn, u32)>,
    tuning: &Tuning,
    qkey: u32,
) -> Result<(), String> {
    connect::to_init(qp, ALL_ACCESS, qkey).map_err(|e| format!("modify to INIT: {e}"))?;
    let remote = remote.map(|(gid, qpn, psn)| Remote { gid, qpn, psn });
    connect::to_rts(qp, remote, tuning).map_err(|e| format!("modify to RTR/RTS: {e}"))
}
