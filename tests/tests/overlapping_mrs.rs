//! Memory regions over the same memory (`ibv_reg_mr` twice on one buffer,
//! a region over part of a buffer another one covers whole), as real
//! hardware and rxe allow and programs rely on: each region works with its
//! own rights, and deregistering one leaves the others working. Two UDP
//! runtime devices on loopback addresses; the target's regions are over
//! its application's own buffer (`Pd::reg_mr_raw`), and so are the
//! requester's (two regions over one buffer there too: one the source of
//! the WRITEs, the other the destination of the READs).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use uroce::app::{connect_pair, default_tuning, Node};
use uroce_device::link::DeviceLink;
use uroce_net::udp::UdpConfig;
use uroce_verbs::{
    Access, Mr, QpCap, QpType, RemoteTarget, Rereg, SendFlags, SendWr, WcStatus, WrOpcode,
};

const WRITABLE: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);
const READABLE: Access = Access::REMOTE_READ;
const EVERYTHING: Access =
    Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

fn node(host: u8) -> Node {
    Node::open(UdpConfig::new(IpAddr::V4(Ipv4Addr::new(127, 94, 0, host))), 64).unwrap()
}

fn cap() -> QpCap {
    QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Runs one RDMA WRITE or READ from `a` to `b` through a fresh RC
/// connection (an access error takes both QPs to ERR, so each operation
/// has its own): `len` bytes between `local` at `offset` and `remote` at
/// `addr` under `rkey`. The status of its completion.
fn rdma(
    a: &Node,
    b: &Node,
    opcode: WrOpcode,
    (local, offset): (&Mr, u64),
    remote: RemoteTarget,
    len: u32,
) -> WcStatus {
    let qa = a.qp(QpType::Rc, cap()).unwrap();
    let qb = b.qp(QpType::Rc, cap()).unwrap();
    connect_pair(a, &qa, b, &qb, &default_tuning()).unwrap();
    let mut wr = SendWr::new(1, opcode);
    wr.sg_list = vec![local.sge(offset, len)];
    wr.remote = remote;
    wr.flags = SendFlags::SIGNALED;
    qa.post_send(&[wr]).unwrap();
    let done = a.wait(1, Duration::from_secs(5));
    assert_eq!(done.len(), 1, "{opcode:?} completes");
    qa.destroy().unwrap();
    qb.destroy().unwrap();
    while !b.cq.poll(16).unwrap().is_empty() {}
    done[0].status
}

fn at(mr: &Mr, offset: u64) -> RemoteTarget {
    RemoteTarget { addr: mr.addr() + offset, rkey: mr.rkey() }
}

#[test]
fn regions_over_the_same_memory_each_work_and_outlive_one_another() {
    let (a, b) = (node(1), node(2));
    let mut mine = vec![0u8; 8192];
    let mut theirs = vec![0u8; 8192];
    let (mine_ptr, theirs_ptr) = (mine.as_mut_ptr(), theirs.as_mut_ptr());
    // SAFETY: `mine` and `theirs` are neither touched, grown nor dropped
    // until every region over them is deregistered below; meanwhile they
    // are reached only through the regions (`Mr::read`, `Mr::write`, the
    // devices).
    let (src, dst, whole_w, whole_r) = unsafe {
        (
            a.pd.reg_mr_raw(mine_ptr, 8192, Access::LOCAL_WRITE).unwrap(),
            a.pd.reg_mr_raw(mine_ptr, 8192, Access::LOCAL_WRITE).unwrap(),
            b.pd.reg_mr_raw(theirs_ptr, 8192, WRITABLE).unwrap(),
            b.pd.reg_mr_raw(theirs_ptr, 8192, READABLE).unwrap(),
        )
    };
    assert_eq!((src.addr(), whole_w.addr()), (dst.addr(), whole_r.addr()));
    assert_ne!(src.lkey(), dst.lkey());
    assert_ne!(whole_w.rkey(), whole_r.rkey());

    // A WRITE through one region of the target's buffer, a READ of the
    // same bytes through the other; on the requester, the data leaves
    // through one region and comes back through the other.
    let first = pattern(3000, 1);
    src.write(0, &first).unwrap();
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&whole_w, 100), 3000);
    assert_eq!(wrote, WcStatus::Success);
    let read = rdma(&a, &b, WrOpcode::RdmaRead, (&dst, 4096), at(&whole_r, 100), 3000);
    assert_eq!(read, WcStatus::Success);
    assert_eq!(dst.read_vec(4096, 3000).unwrap(), first, "READ through the other region");
    assert_eq!(whole_w.read_vec(100, 3000).unwrap(), first);
    // Each region keeps its own rights over the shared bytes: no WRITE
    // through the read-only one.
    let refused = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&whole_r, 100), 8);
    assert_eq!(refused, WcStatus::RemAccessErr);

    // A third region over a sub-range of the buffer.
    // SAFETY: as above; `theirs` is only reached through the regions.
    let sub = unsafe { b.pd.reg_mr_raw(theirs_ptr.add(4096), 1024, EVERYTHING) }.unwrap();
    assert_eq!(sub.addr(), whole_w.addr() + 4096);
    let second = pattern(1024, 2);
    src.write(0, &second).unwrap();
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&sub, 0), 1024);
    assert_eq!(wrote, WcStatus::Success);
    let read = rdma(&a, &b, WrOpcode::RdmaRead, (&dst, 0), at(&whole_r, 4096), 1024);
    assert_eq!(read, WcStatus::Success);
    assert_eq!(dst.read_vec(0, 1024).unwrap(), second, "written through the sub-range");
    // The sub-range's region ends where it ends, however far the others go.
    let past = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&sub, 1020), 8);
    assert_eq!(past, WcStatus::RemAccessErr);

    // The writable region over the whole buffer goes: its key is refused,
    // the other two still work over the same memory.
    let gone = whole_w.rkey();
    whole_w.dereg().map_err(|(_, e)| e).unwrap();
    let stale = RemoteTarget { addr: sub.addr(), rkey: gone };
    assert_eq!(rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), stale, 8), WcStatus::RemAccessErr);
    let read = rdma(&a, &b, WrOpcode::RdmaRead, (&dst, 4096), at(&whole_r, 100), 3000);
    assert_eq!(read, WcStatus::Success);
    assert_eq!(dst.read_vec(4096, 3000).unwrap(), first, "still readable through the other");
    let third = pattern(512, 3);
    src.write(0, &third).unwrap();
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&sub, 512), 512);
    assert_eq!(wrote, WcStatus::Success);
    let read = rdma(&a, &b, WrOpcode::RdmaRead, (&dst, 0), at(&whole_r, 4096 + 512), 512);
    assert_eq!(read, WcStatus::Success);
    assert_eq!(dst.read_vec(0, 512).unwrap(), third);

    // One of the requester's two regions goes; the other still gathers.
    src.dereg().map_err(|(_, e)| e).unwrap();
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&dst, 0), at(&sub, 0), 512);
    assert_eq!(wrote, WcStatus::Success);

    for mr in [dst, whole_r, sub] {
        mr.dereg().map_err(|(_, e)| e).unwrap();
    }
    // Every byte landed in the applications' own buffers.
    assert_eq!(&theirs[100..3100], &first[..]);
    assert_eq!(&theirs[4096..4608], &third[..], "the last WRITE (from `dst`, which held `third`)");
    assert_eq!(&theirs[4608..5120], &third[..]);
    assert_eq!(&mine[0..512], &third[..]);
    assert_eq!(&mine[4096..7096], &first[..]);
    mine.push(0);
    theirs.push(0);
}

#[test]
fn a_region_reregistered_onto_memory_another_region_covers() {
    let (a, b) = (node(3), node(4));
    let src = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mut theirs = vec![0u8; 8192];
    let base = theirs.as_mut_ptr();
    let memory = b.dev.hca().memory();
    // Whether `[addr, addr + len)` has a registration of its own left: a
    // probe that removes nothing when the answer is no (the answer the
    // test expects each time).
    let registered = |addr: u64, len: usize| memory.unregister_external(addr, len);
    // SAFETY: `theirs` is neither touched, grown nor dropped until every
    // region over it is deregistered below; meanwhile it is reached only
    // through the regions.
    let (keep, mut mover) = unsafe {
        (
            b.pd.reg_mr_raw(base, 8192, EVERYTHING).unwrap(),
            b.pd.reg_mr_raw(base, 1024, EVERYTHING).unwrap(),
        )
    };
    let whole = keep.addr();
    src.write(0, &pattern(4096, 4)).unwrap();

    // Onto exactly the range the other region covers, then away from it:
    // the other region keeps its own registration all along.
    // SAFETY: as above, for the new ranges (inside `theirs`).
    unsafe { mover.rereg_raw(base, 8192, Rereg::default()) }.unwrap();
    assert!(!registered(whole, 1024), "the old range went with the move");
    // SAFETY: as above.
    unsafe { mover.rereg_raw(base.add(4096), 2048, Rereg::default()) }.unwrap();
    assert_eq!((mover.addr(), mover.length()), (whole + 4096, 2048));
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&keep, 0), 4096);
    assert_eq!(wrote, WcStatus::Success, "the other region still covers the whole buffer");
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 100), at(&mover, 2040), 8);
    assert_eq!(wrote, WcStatus::Success);
    let past = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 0), at(&mover, 2044), 8);
    assert_eq!(past, WcStatus::RemAccessErr, "the moved region is 2048 bytes");

    // A re-registration the device refuses (remote write without local
    // write) onto a range inside both: the region stays where it was and
    // the new range's registration is undone.
    let refused = Rereg { access: Some(Access::REMOTE_WRITE), ..Rereg::default() };
    // SAFETY: as above.
    let e = unsafe { mover.rereg_raw(base.add(100), 64, refused) }.unwrap_err();
    assert_eq!(e.errno(), 22, "{e}");
    assert!(!registered(whole + 100, 64), "the refused range is not left registered");
    assert_eq!((mover.addr(), mover.length()), (whole + 4096, 2048));
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 200), at(&mover, 0), 16);
    assert_eq!(wrote, WcStatus::Success, "the region still works where it was");

    // The moved region goes; the other one still covers its bytes.
    mover.dereg().map_err(|(_, e)| e).unwrap();
    assert!(!registered(whole + 4096, 2048));
    let wrote = rdma(&a, &b, WrOpcode::RdmaWrite, (&src, 300), at(&keep, 4096), 8);
    assert_eq!(wrote, WcStatus::Success);
    keep.dereg().map_err(|(_, e)| e).unwrap();
    assert!(!registered(whole, 8192));

    let data = pattern(4096, 4);
    assert_eq!(&theirs[..4096], &data[..]);
    assert_eq!(&theirs[4096..4104], &data[300..308]);
    assert_eq!(&theirs[4096 + 16..4096 + 2040], &[0; 2024][..]);
    assert_eq!(&theirs[4096 + 2040..4096 + 2048], &data[100..108]);
    theirs.push(0);
}
