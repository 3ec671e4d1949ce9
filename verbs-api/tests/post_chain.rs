//! Posting a chain of work requests: the WQEs are published with one
//! release of the producer index, and a WR that fails stops the chain with
//! the WRs before it posted (libibverbs' `bad_wr`).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uroce_device::mem::{AllocError, HostMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::{Hca, SharedHca};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, Context, Error, Gid, MemFault, Mtu, QpCap, QpInitAttr, QpType, RecvWr, SendWr, WrOpcode,
};

/// Host memory that counts the driver's index publications.
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
        self.releases.fetch_add(1, Ordering::Relaxed);
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
    fn allocate(&self, len: u64, align: u64) -> Result<u64, AllocError> {
        self.inner.allocate(len, align)
    }
    fn free(&self, addr: u64) -> bool {
        self.inner.free(addr)
    }
}

#[test]
fn a_chain_is_published_once_and_stops_at_the_bad_wr() {
    let host = Arc::new(Counting { inner: SimMemory::strict(1 << 24), releases: 0.into() });
    let ip = Ipv4Addr::new(10, 0, 0, 1);
    let gids = vec![Gid::link_local_from_mac([2, 0, 0, 0, 0, 1]), Gid::from(ip)];
    let hca = SharedHca::new(Hca::new(HcaConfig::default(), gids, host.clone()).unwrap());
    let ctx = Context::open(&hca);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.alloc_mr(4096, Access(1)).unwrap();
    connect::to_init(&qp, Access(1), 0).unwrap();
    let tuning = Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 0,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 1,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    };
    let remote = Remote { gid: Gid::from(ip), qpn: qp.qpn(), psn: 0 };
    connect::to_rts(&qp, Some(remote), &tuning).unwrap();

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
