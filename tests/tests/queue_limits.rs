//! Queue sizes are checked against the device's limits before any ring
//! memory is taken: a huge depth is refused at once with EINVAL (as
//! `ibv_create_cq`, `ibv_create_qp` and `ibv_create_srq` refuse it on
//! rxe), never after allocating and zeroing gigabytes.

use std::time::{Duration, Instant};
use uroce_sim::FabricConfig;
use uroce_tests::child;
use uroce_tests::world::{cap, World};
use uroce_verbs::{QpCap, QpInitAttr, QpType};

const EINVAL: i32 = 22;
const CHILD_ENV: &str = "UROCE_QUEUE_LIMITS_CHILD";

#[test]
fn queue_limits_child() {
    child::run_if_child(CHILD_ENV);
}

#[test]
fn cq_depths_outside_1_to_max_cqe_are_einval() {
    let w = World::new(1, FabricConfig::new(1));
    let ctx = &w.nodes[0].ctx;
    let max_cqe = ctx.query_device().unwrap().max_cqe;
    for cqe in [0, max_cqe + 1, 99_999_999, u32::MAX] {
        let err = ctx.create_cq(cqe).err().unwrap_or_else(|| panic!("cqe {cqe} accepted"));
        assert_eq!(err.errno(), EINVAL, "cqe {cqe}: {err}");
    }
    let channel = ctx.create_comp_channel().unwrap();
    let err = ctx.create_cq_with_channel(u32::MAX, &channel).err().expect("refused");
    assert_eq!(err.errno(), EINVAL);
    ctx.create_cq(max_cqe).expect("max_cqe itself is fine").destroy().ok().unwrap();
}

#[test]
fn qp_and_srq_sizes_above_the_device_limits_are_einval() {
    let w = World::new(1, FabricConfig::new(2));
    let node = &w.nodes[0];
    let limits = node.ctx.query_device().unwrap();
    let fine = cap(16, 2, 64);
    let too_big: [(&str, QpCap); 5] = [
        ("max_send_wr", QpCap { max_send_wr: u32::MAX, ..fine }),
        ("max_recv_wr", QpCap { max_recv_wr: limits.max_qp_wr + 1, ..fine }),
        ("max_send_sge", QpCap { max_send_sge: limits.max_sge + 1, ..fine }),
        ("max_recv_sge", QpCap { max_recv_sge: u32::MAX, ..fine }),
        ("max_inline_data", QpCap { max_inline_data: u32::MAX, ..fine }),
    ];
    for (what, cap) in too_big {
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &node.cq,
            recv_cq: &node.cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let err = node.pd.create_qp(&init).err().unwrap_or_else(|| panic!("{what} accepted"));
        assert_eq!(err.errno(), EINVAL, "{what}: {err}");
    }
    // With an SRQ the receive sizes are the SRQ's: not checked on the QP.
    let srq = node.pd.create_srq(16, 1, 0).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &node.cq,
        recv_cq: &node.cq,
        srq: Some(&srq),
        cap: QpCap { max_recv_wr: u32::MAX, max_recv_sge: u32::MAX, ..fine },
        sq_sig_all: false,
    };
    node.pd.create_qp(&init).expect("receive sizes ignored with an SRQ");
    for (max_wr, max_sge) in [(limits.max_srq_wr + 1, 1), (u32::MAX, 1), (16, u32::MAX)] {
        let err = node.pd.create_srq(max_wr, max_sge, 0).err().expect("refused");
        assert_eq!(err.errno(), EINVAL, "SRQ {max_wr} x {max_sge}: {err}");
    }
}

/// The largest resident set of any child this process has waited for,
/// in bytes.
fn children_max_rss_bytes() -> u64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own
    // and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        usage
    };
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn pingpong_with_a_huge_rx_depth_is_refused_at_once_in_bounded_memory() {
    for args in [
        &["pingpong", "-g", "1", "-r", "99999999"][..],
        &["pingpong", "--srq", "-g", "1", "-r", "99999999"],
    ] {
        let started = Instant::now();
        let run = child::spawn(
            "queue_limits_child",
            CHILD_ENV,
            args,
            &[("UROCE_ADDR", "127.83.30.1".to_string())],
        );
        let end = run.finish(Instant::now() + Duration::from_secs(30));
        let elapsed = started.elapsed();
        assert_eq!(end.code, Some(1), "{end:#?}");
        assert!(end.stderr.contains("Couldn't create CQ"), "{end:#?}");
        assert!(end.stderr.contains("max_cqe"), "{end:#?}");
        // Refused before any ring exists: a hang guard, not a speed figure
        // (the old driver took 16 s zeroing 8.4 GB).
        assert!(elapsed < Duration::from_secs(5), "{args:?} took {elapsed:?}");
    }
    let max_rss = children_max_rss_bytes();
    assert!(max_rss < 512 << 20, "a child reached {max_rss} bytes resident");
}
