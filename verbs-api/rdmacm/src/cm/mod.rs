//! The RDMA CM over the device's CM (`cm_link`: commands and events):
//! what the kernel's `drivers/infiniband/core/cma.c` and librdmacm's
//! `cma.c` do between them, for RoCE.
//!
//! - `rdma_listen`: `CmListen` on the service ID of (port space, port).
//! - `rdma_connect`: `CmConnect` (RC/UC) with the QP, a random 24-bit
//!   starting PSN, the route's GIDs, MTU and flow label, the parameters,
//!   and the rdma_cm header (addresses, ports) before the private data;
//!   `CmSidrRequest` (UD).
//! - A REQ (SIDR_REQ) for a listened service: a new id, child of the
//!   listener (its channel, context, device), its addresses from the
//!   rdma_cm header; `CONNECT_REQUEST` on the listener's channel.
//! - `rdma_accept`: the QP INIT, RTR (the peer's QPN and PSN), RTS, then
//!   `CmAccept`; `ESTABLISHED` when the RTU comes. UD: `CmSidrReply`.
//! - A REP: when the program takes the event (`rdma_get_cm_event`, on its
//!   own thread, as librdmacm), the QP INIT, RTR, RTS, `CmReadyToUse` (the
//!   RTU), `ESTABLISHED` (without a QP: `CONNECT_RESPONSE`,
//!   `rdma_establish` sends the RTU). The event thread never touches a QP.
//! - REJ: `REJECTED` (status the reason), the QP to ERR (when taken).
//!   Requests beyond a listener's backlog are refused. Timeouts:
//!   `UNREACHABLE` (-ETIMEDOUT). DREQ/DREP: `DISCONNECTED`. Time-wait's
//!   end: `TIMEWAIT_EXIT`. SIDR_REP: `ESTABLISHED` with the peer's QPN,
//!   Q_Key and address vector, or `UNREACHABLE`.
//!
//! Locking: the registry (CM IDs and service IDs → ids) is taken before
//! any id's lock, by the calls here and by the event thread, so an id is
//! never used by the event thread once `forget` returned.

mod calls;
mod events;
mod request;

pub use calls::{accept, connect, disconnect, establish, forget, listen, reject};
pub use events::{event, finish};

use crate::abi::*;
use crate::cm_link;
use crate::id::{self, IdPriv, Inner};
use crate::verbs::*;
use libc::c_int;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use uroce_device::command::Command;
use uroce_wire::mad::{cma, ServiceId};

/// Who the device CM's IDs and services belong to.
#[derive(Default)]
pub struct Registry {
    /// CM ID → id (`*mut IdPriv`).
    by_cm: HashMap<u32, usize>,
    /// Service ID → listening id.
    listeners: HashMap<u64, usize>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The registry, locked: taken before any id's lock.
pub fn lock() -> MutexGuard<'static, Option<Registry>> {
    let mut g = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(Registry::default);
    g
}

fn reg<'a>(g: &'a mut MutexGuard<'static, Option<Registry>>) -> &'a mut Registry {
    g.get_or_insert_with(Registry::default)
}

/// IBTA's REJ reason "consumer defined" (librdmacm's `rdma_reject`).
pub const REJ_CONSUMER_DEFINED: u16 = 28;

/// The rdma_cm event kinds not in `channel::kind`.
mod ev {
    use libc::c_int;
    pub const CONNECT_RESPONSE: c_int = 5;
    pub const CONNECT_ERROR: c_int = 6;
    pub const UNREACHABLE: c_int = 7;
    pub const ESTABLISHED: c_int = 9;
    pub const DISCONNECTED: c_int = 10;
    pub const TIMEWAIT_EXIT: c_int = 15;
}

/// The service ID of an rdma_cm port space and port.
fn service_id(ps: c_int, port: u16) -> u64 {
    ServiceId::from_ip(cma::PortSpace(ps as u16), port).0
}

/// The rdma_cm header's length in this port space's private data (none
/// for the IB port space).
fn header_len(ps: c_int) -> usize {
    if ps == RDMA_PS_IB {
        0
    } else {
        cma::HEADER_LEN
    }
}

/// Moves `p`'s QP to INIT (again: the connection's access rights), RTR
/// and RTS with what the CM agreed (`ucma_modify_qp_rtr`/`_rts`).
unsafe fn qp_to_rts(p: *mut IdPriv, g: &Inner) -> Result<(), c_int> {
    let qp = (*p).id.qp;
    if qp.is_null() {
        return Ok(());
    }
    for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        let (mut a, mask) = id::qp_attr(p, g, state)?;
        let r = ibv_modify_qp(qp, &mut a, mask);
        if r != 0 {
            return Err(if r > 0 { r } else { crate::ffi::last_errno() });
        }
    }
    Ok(())
}

/// The QP to ERR (`ucma_modify_qp_err`).
unsafe fn qp_to_err(p: *mut IdPriv) {
    let qp = (*p).id.qp;
    if !qp.is_null() {
        let mut a = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..Default::default() };
        ibv_modify_qp(qp, &mut a, IBV_QP_STATE);
    }
}

/// rdma_cm's `CMA_CM_MRA_SETTING`: an MRA asking `4.096 µs × 2^24` (≈ 69
/// s), sent only to a duplicate of the REQ or REP (`IB_CM_MRA_FLAG_DELAY`).
fn delayed_mra(verbs: *mut ibv_context, cm: u32) {
    let service_timeout = uroce_device::cm::CM_MRA_DELAY | 24;
    let _ = cm_link::command(verbs, &Command::CmMra { id: cm, service_timeout });
}
