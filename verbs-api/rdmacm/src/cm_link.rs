//! The one door to the device's connection manager (IB CM: REQ, REP, RTU,
//! REJ, DREQ/DREP, SIDR, multicast joins). Everything librdmacm does that
//! needs a message on the wire goes through [`CmDevice`]; everything else
//! (addresses, ports, routes, QPs, events) is done by this library before
//! it gets here, with librdmacm's and the kernel's argument and state
//! checks.
//!
//! uroce's device does not offer its CM to this library yet, so
//! [`device`] is [`NotYet`]: each call fails with ENOSYS, which the
//! exported function returns as -1 with errno ENOSYS (`rdma_listen:
//! Function not implemented`), leaving the id in the state it had. When
//! the device's CM commands (`CmListen`, `CmConnect`, `CmAccept`...) and
//! events land, an implementation of this trait sends them, and raises the
//! CM's events (CONNECT_REQUEST, ESTABLISHED, REJECTED, DISCONNECTED...) on
//! the id's channel with `channel::push`, as address and route resolution
//! do now.

use libc::c_int;
use std::net::SocketAddr;

/// What the device CM needs to know of an id.
#[derive(Clone, Debug)]
pub struct CmId {
    /// The id (`struct rdma_cm_id *`, as a number): the key its events
    /// come back with.
    pub owner: usize,
    /// `enum rdma_port_space`.
    pub ps: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    pub port_num: u8,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
}

/// A connection's parameters (`struct rdma_conn_param`, copied), with the
/// QP it connects.
#[derive(Clone, Debug, Default)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub qp_num: u32,
}

/// The device's connection manager, as librdmacm uses the kernel's.
pub trait CmDevice: Sync {
    /// `rdma_listen` (the id is bound; the port is its).
    fn listen(&self, id: &CmId, backlog: c_int) -> Result<(), c_int>;
    /// `rdma_connect`: a REQ (RC/UC) or a SIDR REQ (UD).
    fn connect(&self, id: &CmId, param: &ConnParam) -> Result<(), c_int>;
    /// `rdma_accept`: a REP (the QP is in RTS) or a SIDR REP.
    fn accept(&self, id: &CmId, param: &ConnParam) -> Result<(), c_int>;
    /// `rdma_reject`, `rdma_reject_ece` (reason 35).
    fn reject(&self, id: &CmId, private_data: &[u8], reason: Option<u8>) -> Result<(), c_int>;
    /// `rdma_establish`: the RTU of an id without a QP.
    fn establish(&self, id: &CmId) -> Result<(), c_int>;
    /// `rdma_disconnect`: a DREQ (or the DREP of one received).
    fn disconnect(&self, id: &CmId) -> Result<(), c_int>;
    /// `rdma_notify`: a QP event the CM should know (COMM_EST).
    fn notify(&self, id: &CmId, event: c_int) -> Result<(), c_int>;
    /// `rdma_join_multicast(_ex)`.
    fn join_multicast(&self, id: &CmId, group: SocketAddr, join_flags: u32) -> Result<(), c_int>;
    /// `rdma_leave_multicast`.
    fn leave_multicast(&self, id: &CmId, group: SocketAddr) -> Result<(), c_int>;
    /// `rsocket`: rsockets are streams and datagrams over connected (or
    /// resolved) ids, so they come with the CM.
    fn rsocket(&self, domain: c_int, kind: c_int, protocol: c_int) -> Result<c_int, c_int>;
    /// The id is destroyed: the CM forgets it (a connection is ended).
    fn forget(&self, owner: usize);
}

/// The device CM while uroce's device has none for this library: ENOSYS.
pub struct NotYet;

impl CmDevice for NotYet {
    fn listen(&self, _: &CmId, _: c_int) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn connect(&self, _: &CmId, _: &ConnParam) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn accept(&self, _: &CmId, _: &ConnParam) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn reject(&self, _: &CmId, _: &[u8], _: Option<u8>) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn establish(&self, _: &CmId) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn disconnect(&self, _: &CmId) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn notify(&self, _: &CmId, _: c_int) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn join_multicast(&self, _: &CmId, _: SocketAddr, _: u32) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn leave_multicast(&self, _: &CmId, _: SocketAddr) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
    fn rsocket(&self, _: c_int, _: c_int, _: c_int) -> Result<c_int, c_int> {
        Err(libc::ENOSYS)
    }
    fn forget(&self, _: usize) {}
}

/// The device CM in use.
pub fn device() -> &'static dyn CmDevice {
    &NotYet
}
