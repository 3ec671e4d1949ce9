//! `ibv_resize_cq` (issue 13): a CQ holding completions moves to a larger
//! and then a smaller ring, keeps them in order, refuses a depth below
//! them (EINVAL), and goes on receiving completions on the new ring.

use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{Error, QpType, RemoteTarget, SendWr, WcStatus, WrOpcode};

fn writes(w: &World, qp: &uroce_verbs::Qp, ids: std::ops::Range<u64>) {
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let wrs: Vec<SendWr> = ids
        .map(|id| {
            let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
            wr.sg_list = vec![mr_a.sge(0, 64)];
            wr.remote = RemoteTarget { addr: mr_b.addr(), rkey: mr_b.rkey() };
            wr
        })
        .collect();
    qp.post_send(&wrs).unwrap();
}

#[test]
fn resize_keeps_outstanding_completions_in_order() {
    let mut w = World::new(2, FabricConfig::new(1));
    let a = w.qp(0, QpType::Rc, cap(64, 4, 64));
    let b = w.qp(1, QpType::Rc, cap(64, 4, 64));
    w.connect(0, &a, 1, &b, &tuning());

    // A ring of 8 entries whose indices are moved to 6 first, so that the
    // 5 completions below wrap around it and the copy crosses the wrap.
    assert_eq!(w.nodes[0].cq.resize(6).unwrap(), 6);
    writes(&w, &a, 0..6);
    assert_eq!(w.wait(0, 6, 10_000_000).len(), 6);

    const N: u64 = 5;
    writes(&w, &a, 100..100 + N);
    w.settle(10_000_000);
    let cq = &w.nodes[0].cq;
    // Up, then down to exactly what it holds.
    assert_eq!(cq.resize(1000).unwrap(), 1000);
    assert_eq!(cq.resize(N as u32).unwrap(), N as u32);
    // Below the completions it holds, 0, or above max_cqe: EINVAL, and
    // nothing is lost.
    for bad in [N as u32 - 1, 0, u32::MAX] {
        let e = cq.resize(bad).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "resize({bad}): {e}");
        assert_eq!(e.errno(), 22);
    }
    let got = cq.poll(64).unwrap();
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (100..100 + N).collect::<Vec<_>>());
    assert!(got.iter().all(|c| c.status == WcStatus::Success));

    // More completions land on the new ring.
    writes(&w, &a, 200..204);
    let more = w.wait(0, 4, 10_000_000);
    assert_eq!(more.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (200..204).collect::<Vec<_>>());
    assert!(more.iter().all(|c| c.status == WcStatus::Success));
    // An empty CQ shrinks to 1.
    assert_eq!(w.nodes[0].cq.resize(1).unwrap(), 1);
}
