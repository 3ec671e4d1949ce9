//! `ibv_rereg_mr` (`Mr::rereg`, `Mr::rereg_alloc`): the region keeps its
//! keys, and what the HCA enforces afterwards is the new range, the new
//! rights and the new protection domain: a peer's RDMA WRITE with the
//! R_Key it already holds lands in the new memory, and is refused (remote
//! access error) in the old range, without the rights taken away, or
//! through a QP of the old PD. What the driver or the HCA refuses leaves
//! the region as it was.

use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{
    Access, Error, Mr, Pd, QpInitAttr, QpType, RemoteTarget, Rereg, SendWr, WcStatus, WrOpcode,
};

const LOCAL: Access = Access::LOCAL_WRITE;
const WRITABLE: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);

/// An RDMA WRITE of `data` from node 0 to `addr` under `target`'s R_Key,
/// through a fresh RC connection whose node-1 end is a QP of `pd` (an
/// access error takes both QPs to ERR, so each write has its own): the
/// status of the WRITE's completion.
fn write(w: &mut World, pd: &Pd, target: &Mr, addr: u64, data: &[u8]) -> WcStatus {
    let a = w.qp(0, QpType::Rc, cap(4, 1, 0));
    let node = &w.nodes[1];
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &node.cq,
        recv_cq: &node.cq,
        srq: None,
        cap: cap(4, 1, 0),
        sq_sig_all: false,
    };
    let b = pd.create_qp(&init).expect("a QP of the PD");
    w.connect(0, &a, 1, &b, &tuning());
    let src = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    src.write(0, data).unwrap();
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
    wr.sg_list = vec![src.sge(0, data.len() as u32)];
    wr.remote = RemoteTarget { addr, rkey: target.rkey() };
    a.post_send(&[wr]).unwrap();
    let done = w.wait(0, 1, 50_000_000);
    assert_eq!(done.len(), 1, "the WRITE completes");
    w.settle(10_000_000);
    while !w.nodes[1].cq.poll(16).unwrap().is_empty() {}
    a.destroy().unwrap();
    b.destroy().unwrap();
    src.dereg().map_err(|(_, e)| e).unwrap();
    done[0].status
}

#[test]
fn a_reregistered_region_keeps_its_keys_and_the_hca_enforces_the_change() {
    let mut w = World::new(2, FabricConfig::new(7));
    let pd = w.nodes[1].pd.share();
    let mut mr = w.nodes[1].pd.alloc_mr(4096, WRITABLE).unwrap();
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    assert_eq!(write(&mut w, &pd, &mr, mr.addr(), b"before"), WcStatus::Success);

    // CHANGE_TRANSLATION: the old range is refused, the new one is written.
    let old = mr.addr();
    mr.rereg_alloc(8192, Rereg::default()).unwrap();
    assert_eq!((mr.lkey(), mr.rkey()), (lkey, rkey), "keys survive");
    assert_ne!(mr.addr(), old);
    assert_eq!(mr.length(), 8192);
    assert_eq!(write(&mut w, &pd, &mr, old, b"old range"), WcStatus::RemAccessErr);
    let far = mr.addr() + 8000;
    assert_eq!(write(&mut w, &pd, &mr, far, b"new range"), WcStatus::Success);
    assert_eq!(mr.read_vec(8000, 9).unwrap(), b"new range");
    assert_eq!(mr.read_vec(0, 6).unwrap(), [0; 6], "fresh memory, zeroed");

    // CHANGE_ACCESS: remote write taken away is refused; given back, allowed.
    mr.rereg(Rereg { access: Some(LOCAL), ..Rereg::default() }).unwrap();
    assert_eq!(write(&mut w, &pd, &mr, mr.addr(), b"no right"), WcStatus::RemAccessErr);
    mr.rereg(Rereg { access: Some(WRITABLE), ..Rereg::default() }).unwrap();
    assert_eq!(write(&mut w, &pd, &mr, mr.addr(), b"right back"), WcStatus::Success);
    assert_eq!(mr.read_vec(0, 10).unwrap(), b"right back");

    // CHANGE_PD: QPs of the old PD are refused, those of the new one not;
    // the old PD is free to go, the new one is in use.
    let other = w.nodes[1].ctx.alloc_pd().unwrap();
    mr.rereg(Rereg { pd: Some(&other), ..Rereg::default() }).unwrap();
    assert_eq!(write(&mut w, &pd, &mr, mr.addr(), b"old PD"), WcStatus::RemAccessErr);
    assert_eq!(write(&mut w, &other, &mr, mr.addr(), b"new PD"), WcStatus::Success);
    assert_eq!(mr.read_vec(0, 6).unwrap(), b"new PD");
    assert_eq!(other.dealloc().unwrap_err().errno(), 16, "the region is in the new PD");
    assert_eq!((mr.lkey(), mr.rkey()), (lkey, rkey), "keys survive every change");
    mr.dereg().map_err(|(_, e)| e).unwrap();
    other.dealloc().unwrap();
}

#[test]
fn bad_reregistrations_are_refused_and_change_nothing() {
    let mut w = World::new(2, FabricConfig::new(8));
    let pd = w.nodes[1].pd.share();
    let mut mr = w.nodes[1].pd.alloc_mr(4096, WRITABLE | Access::MW_BIND).unwrap();
    let (addr, rkey) = (mr.addr(), mr.rkey());
    let invalid = |e: Error| matches!(e, Error::Invalid(_)) && e.errno() == 22;

    // The driver's refusals: nothing to change, no bytes, another
    // device's PD.
    assert!(invalid(mr.rereg(Rereg::default()).unwrap_err()));
    assert!(invalid(mr.rereg_alloc(0, Rereg::default()).unwrap_err()));
    let foreign = Rereg { pd: Some(&w.nodes[0].pd), ..Rereg::default() };
    assert!(invalid(mr.rereg(foreign).unwrap_err()));
    // The HCA's: remote write without local write, unknown rights.
    for access in [Access::REMOTE_WRITE, Access(1 << 29)] {
        let e = mr.rereg(Rereg { access: Some(access), ..Rereg::default() }).unwrap_err();
        assert!(matches!(e, Error::Command(_)) && e.errno() == 22, "{access:?}: {e}");
        let e = mr.rereg_alloc(64, Rereg { access: Some(access), ..Rereg::default() });
        assert_eq!(e.unwrap_err().errno(), 22);
    }
    // A window bound to the region: EBUSY, as for deregistration.
    let a = w.qp(1, QpType::Rc, cap(4, 1, 0));
    let b = w.qp(0, QpType::Rc, cap(4, 1, 0));
    w.connect(1, &a, 0, &b, &tuning());
    let mw = w.nodes[1].pd.alloc_mw(1).unwrap();
    a.bind_mw(9, &mw, &mr, 0, 64, Access::REMOTE_WRITE).unwrap();
    assert_eq!(w.wait(1, 1, 10_000_000)[0].status, WcStatus::Success);
    let e = mr.rereg(Rereg { access: Some(LOCAL), ..Rereg::default() }).unwrap_err();
    assert_eq!(e.errno(), 16, "{e}");
    mw.dealloc().unwrap();

    // Nothing changed: same memory, same keys, still writable.
    assert_eq!((mr.addr(), mr.rkey()), (addr, rkey));
    assert_eq!(write(&mut w, &pd, &mr, addr + 100, b"intact"), WcStatus::Success);
    assert_eq!(mr.read_vec(100, 6).unwrap(), b"intact");
}
