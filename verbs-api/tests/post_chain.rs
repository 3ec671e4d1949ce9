//! Posting work requests: a chain's WQEs are published with one release
//! of the producer index, and a WR that fails stops the chain with the WRs
//! before it posted (libibverbs' `bad_wr`). A receive post kicks the HCA
//! only in the error state: elsewhere the receive queue's
//! device-scheduled flag is up (the HCA reads the RQ when a SEND needs a
//! WQE), so `post_recv` publishes its producer index and nothing more; in
//! the error state every post kicks and is flushed, and a reset QP skips
//! the kick again (device-interface.md §2.3). An ACK's processing may wait
//! for the runtime's next send only while the send queue has room for a
//! post without it (`Hca::ack_can_wait`).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uroce_device::command::{CmdError, Command, Reply};
use uroce_device::doorbell::{Doorbell, Event};
use uroce_device::link::{DeviceLink, EventNotifier};
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;
use uroce_hca::{Hca, SharedHca};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, AttrMask, Context, Cq, Error, Gid, MemFault, Mtu, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// Host memory that counts the driver's producer index publications (a
/// ring is page-aligned and its producer index is its first word; the
/// HCA's own release stores go to the consumer index and the
/// device-scheduled flag, elsewhere in the header).
struct Counting {
    inner: SimMemory,
    releases: AtomicUsize,
}

impl HostMemory for Counting {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemFault> {
        self.inner.read(addr, dst)
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), MemFault> {
        self.inner.write(addr, src)
    }
    fn load_acquire_u32(&self, addr: u64) -> Result<u32, MemFault> {
        self.inner.load_acquire_u32(addr)
    }
    fn store_release_u32(&self, addr: u64, value: u32) -> Result<(), MemFault> {
        if addr % 4096 == 0 {
            self.releases.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.store_release_u32(addr, value)
    }
    fn compare_swap_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemFault> {
        self.inner.compare_swap_u64(addr, compare, swap)
    }
    fn fetch_add_u64(&self, addr: u64, add: u64) -> Result<u64, MemFault> {
        self.inner.fetch_add_u64(addr, add)
    }
    fn store_u64(&self, addr: u64, value: u64) -> Result<(), MemFault> {
        self.inner.store_u64(addr, value)
    }
}

impl DriverMemory for Counting {
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        self.inner.allocate(len, align)
    }
    fn free(&self, addr: u64) -> bool {
        self.inner.free(addr)
    }
}

/// An in-process HCA at 10.0.0.`last`, on host memory `host`.
fn hca_at<M: DriverMemory + 'static>(host: Arc<M>, last: u8) -> (SharedHca, Ipv4Addr) {
    let ip = Ipv4Addr::new(10, 0, 0, last);
    let gids = vec![Gid::link_local_from_mac([2, 0, 0, 0, 0, last]), Gid::from(ip)];
    let hca = Hca::new(HcaConfig::default(), gids, host.clone()).unwrap();
    (SharedHca::new(hca, host), ip)
}

/// An RC QP on `cq` with `depth` WRs a queue, one SGE each, not
/// signalling every send.
fn rc_init(cq: &Cq, depth: u32) -> QpInitAttr<'_> {
    let cap = QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false }
}

/// The connection's settings, its send PSN `sq_psn`.
fn tuning(sq_psn: u32) -> Tuning {
    Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 1,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    }
}

#[test]
fn a_chain_is_published_once_and_stops_at_the_bad_wr() {
    let host = Arc::new(Counting { inner: SimMemory::strict(1 << 24), releases: 0.into() });
    let (hca, ip) = hca_at(host.clone(), 1);
    let ctx = Context::open(&hca);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let init = rc_init(&cq, 4);
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.alloc_mr(4096, Access(1)).unwrap();
    connect::to_init(&qp, Access(1), 0).unwrap();
    let remote = Remote { gid: Gid::from(ip), qpn: qp.qpn(), psn: 0 };
    connect::to_rts(&qp, Some(remote), &tuning(0)).unwrap();

    let send = |wr_id| {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![mr.sge(0, 64)];
        wr
    };
    let releases = || host.releases.load(Ordering::Relaxed);

    let before = releases();
    qp.post_send(&[send(1), send(2), send(3)]).unwrap();
    assert_eq!(releases() - before, 1, "three WQEs, one publication");

    // The second WR has too many SGEs: the first is posted, the rest not.
    let mut bad = send(5);
    bad.sg_list.push(mr.sge(64, 64));
    let before = releases();
    let (index, err) = qp.post_send(&[send(4), bad, send(6)]).unwrap_err();
    assert_eq!((index, err), (1, Error::Invalid("more SGEs than max_send_sge")));
    assert_eq!(releases() - before, 1, "the WR before the bad one is published");

    // The send queue holds 4 and nothing has completed: the next is refused.
    let (index, err) = qp.post_send(&[send(7)]).unwrap_err();
    assert_eq!((index, err.errno()), (0, 12));

    let recv = |wr_id| RecvWr { wr_id, sg_list: vec![mr.sge(0, 64)] };
    let before = releases();
    let (index, err) = qp.post_recv(&[recv(1), recv(2), recv(3), recv(4), recv(5)]).unwrap_err();
    assert_eq!((index, err), (4, Error::NoMemory("receive queue full")));
    assert_eq!(releases() - before, 1, "four receive WQEs, one publication");
}

/// The in-process device, counting the receive queue kicks that reach it.
#[derive(Clone)]
struct CountingLink {
    hca: SharedHca,
    recv_kicks: Arc<AtomicUsize>,
}

impl DeviceLink for CountingLink {
    fn command(&self, command: Command) -> Result<Reply, CmdError> {
        DeviceLink::command(&self.hca, command)
    }
    fn kick(&self, doorbell: Doorbell) {
        if matches!(doorbell, Doorbell::RecvQueue(_)) {
            self.recv_kicks.fetch_add(1, Ordering::Relaxed);
        }
        DeviceLink::kick(&self.hca, doorbell);
    }
    fn poll_event(&self) -> Option<Event> {
        DeviceLink::poll_event(&self.hca)
    }
    fn on_events(&self, notify: EventNotifier) {
        DeviceLink::on_events(&self.hca, notify);
    }
    fn memory(&self) -> Arc<dyn DriverMemory> {
        DeviceLink::memory(&self.hca)
    }
}

/// Moves every packet the HCA has to send back into it (its QPs are
/// connected to themselves), until none is left; returns each packet's
/// opcode, with whether the HCA would let it wait (`Hca::ack_can_wait`,
/// asked just before it is received).
fn loop_back(hca: &SharedHca) -> Vec<(u8, bool)> {
    let mut buf = vec![0u8; 9000];
    let now = Instant::from_nanos(2_000);
    let mut seen = Vec::new();
    for _ in 0..64 {
        let mut hca = hca.lock();
        let Some(transmit) = hca.poll_transmit(now, &mut buf) else { return seen };
        let packet = buf[..transmit.len].to_vec();
        // IPv4 (20 bytes, no options) and UDP (8): the BTH follows.
        let roce = &packet[28..];
        seen.push((roce[0], hca.ack_can_wait(roce)));
        hca.receive(now, &packet);
    }
    panic!("the HCA kept sending");
}

fn poll_all(cq: &uroce_verbs::Cq) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    cq.poll_into(64, &mut out).unwrap();
    out
}

#[test]
fn a_receive_post_kicks_only_in_the_error_state() {
    let (hca, ip) = hca_at(Arc::new(SimMemory::strict(1 << 24)), 1);
    let link = CountingLink { hca: hca.clone(), recv_kicks: Arc::new(AtomicUsize::new(0)) };
    let kicks = || link.recv_kicks.load(Ordering::Relaxed);
    let ctx = Context::open(&link);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, 8)).unwrap();
    let mr = pd.alloc_mr(4096, Access(1)).unwrap();
    let recv = |wr_id| RecvWr { wr_id, sg_list: vec![mr.sge(0, 64)] };
    let connect = |psn: u32| {
        connect::to_init(&qp, Access(1), 0).unwrap();
        let remote = Remote { gid: Gid::from(ip), qpn: qp.qpn(), psn };
        connect::to_rts(&qp, Some(remote), &tuning(psn)).unwrap();
    };

    // In INIT and RTS, receives are posted without a kick, and a SEND
    // still finds them: the HCA reads the RQ when it needs a WQE.
    connect::to_init(&qp, Access(1), 0).unwrap();
    qp.post_recv(&[recv(1)]).unwrap();
    let remote = Remote { gid: Gid::from(ip), qpn: qp.qpn(), psn: 0 };
    connect::to_rts(&qp, Some(remote), &tuning(0)).unwrap();
    qp.post_recv(&[recv(2)]).unwrap();
    assert_eq!(kicks(), 0, "no receive post kicked outside the error state");
    // Signalled: its completion shows the SEND went round.
    let mut send = SendWr::new(10, WrOpcode::Send);
    send.sg_list = vec![mr.sge(64, 16)];
    qp.post_send(&[send.clone()]).unwrap();
    loop_back(&hca);
    let wcs = poll_all(&cq);
    let received: Vec<(u64, WcStatus)> = wcs
        .iter()
        .filter(|wc| wc.opcode == WcOpcode::Recv)
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(received, [(1, WcStatus::Success)], "{wcs:?}");

    // The error state: the outstanding receive is flushed, and each new
    // post kicks and is flushed at once.
    let error = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
    qp.modify(&error, AttrMask::STATE).unwrap();
    let flushed: Vec<u64> = poll_all(&cq)
        .iter()
        .filter(|wc| wc.status == WcStatus::WrFlushErr && wc.opcode == WcOpcode::Recv)
        .map(|wc| wc.wr_id)
        .collect();
    assert_eq!(flushed, [2]);
    qp.post_recv(&[recv(3)]).unwrap();
    assert_eq!(kicks(), 1, "a post in the error state kicks");
    let wcs = poll_all(&cq);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::WrFlushErr));

    // Reset: the kick is skipped again, and the QP works as new.
    let reset = QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() };
    qp.modify(&reset, AttrMask::STATE).unwrap();
    connect(100);
    qp.post_recv(&[recv(4)]).unwrap();
    assert_eq!(kicks(), 1, "no kick after the reset");
    qp.post_send(&[send]).unwrap();
    loop_back(&hca);
    let received: Vec<(u64, WcStatus)> = poll_all(&cq)
        .iter()
        .filter(|wc| wc.opcode == WcOpcode::Recv)
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(received, [(4, WcStatus::Success)]);
}

#[test]
fn an_ack_may_wait_only_while_the_send_queue_has_room() {
    let (hca, ip) = hca_at(Arc::new(SimMemory::strict(1 << 24)), 2);
    let ctx = Context::open(&hca);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.alloc_mr(4096, Access(1)).unwrap();
    let recv = |wr_id| RecvWr { wr_id, sg_list: vec![mr.sge(0, 64)] };
    let send = |wr_id| {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![mr.sge(64, 16)];
        wr
    };
    const SEND: u8 = 0x04;
    const ACK: u8 = 0x11;
    for (depth, ack_waits) in [(4, true), (1, false)] {
        let qp = pd.create_qp(&rc_init(&cq, depth)).unwrap();
        connect::to_init(&qp, Access(1), 0).unwrap();
        let remote = Remote { gid: Gid::from(ip), qpn: qp.qpn(), psn: 0 };
        connect::to_rts(&qp, Some(remote), &tuning(0)).unwrap();
        qp.post_recv(&[recv(1)]).unwrap();
        qp.post_send(&[send(2)]).unwrap();
        // A SEND is never let wait; its ACK is while the queue has room
        // for another post without the WQE the ACK retires.
        let seen = loop_back(&hca);
        assert_eq!(seen, [(SEND, false), (ACK, ack_waits)], "depth {depth}");
        assert_eq!(poll_all(&cq).len(), 2, "the receive and the send completed");
        // No receive posted: the SEND draws an RNR NAK, which never waits.
        qp.post_send(&[send(3)]).unwrap();
        let seen = loop_back(&hca);
        assert_eq!(seen, [(SEND, false), (ACK, false)], "depth {depth}: the RNR NAK");
        let error = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
        qp.modify(&error, AttrMask::STATE).unwrap();
        poll_all(&cq);
    }
}
