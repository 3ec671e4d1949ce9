//! [`pair`], [`Endpoint`] and [`Tuning::with_timeout`] on one simulated
//! HCA (no fabric: the QPs only change state).

use super::*;
use crate::context::Context;
use std::net::Ipv4Addr;
use std::sync::Arc;
use uroce_device::mem::SimMemory;
use uroce_hca::config::HcaConfig;
use uroce_hca::{Hca, SharedHca};

fn context() -> Context {
    let memory = Arc::new(SimMemory::strict(1 << 24));
    let gids = vec![Gid::link_local_from_mac([2, 0, 0, 0, 0, 1]), Gid::from(IP)];
    let hca = Hca::new(HcaConfig::default(), gids, memory.clone()).unwrap();
    Context::open(&SharedHca::new(hca, memory))
}

const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

#[test]
fn a_pair_is_in_rts_each_aimed_at_the_other_with_psns_1000_apart() {
    let ctx = context();
    let (a, b) = (
        Endpoint::rc(&ctx, 16, cap(4, 1, 0), 4096, ALL_ACCESS).unwrap(),
        Endpoint::rc(&ctx, 16, cap(4, 1, 0), 4096, ALL_ACCESS).unwrap(),
    );
    let (gid_a, gid_b) = (Gid::from(IP), Gid::from(Ipv4Addr::new(10, 0, 0, 2)));
    let tuning = Tuning { sq_psn: 0xff_fff0, ..Tuning::with_timeout(8) };
    pair(&a.qp, gid_a, &b.qp, gid_b, ALL_ACCESS, &tuning).unwrap();
    let (at_a, at_b) = (a.qp.query().unwrap(), b.qp.query().unwrap());
    for at in [&at_a, &at_b] {
        assert_eq!(at.qp_state, Some(QpState::Rts));
        assert_eq!(at.qp_access_flags, ALL_ACCESS);
        assert_eq!((at.path_mtu, at.timeout, at.retry_cnt), (Some(Mtu::Mtu1024), 8, 7));
    }
    assert_eq!((at_a.dest_qp_num, at_a.ah_attr.dgid), (b.qp.qpn().value(), gid_b));
    assert_eq!((at_b.dest_qp_num, at_b.ah_attr.dgid), (a.qp.qpn().value(), gid_a));
    // b's first PSN wraps at 2^24.
    assert_eq!((at_a.sq_psn, at_b.rq_psn), (0xff_fff0, 0xff_fff0));
    assert_eq!((at_b.sq_psn, at_a.rq_psn), (1000 - 16, 1000 - 16));
}

#[test]
fn an_endpoint_names_its_gid_qpn_and_psn_to_the_peer() {
    let ctx = context();
    let side = Endpoint::rc(&ctx, 16, cap(4, 1, 0), 64, ALL_ACCESS).unwrap();
    assert_eq!(side.qp.qp_type(), QpType::Rc);
    assert_eq!(side.mr.length(), 64);
    let remote = side.remote(&ctx, 1, 7).unwrap();
    assert_eq!(remote, Remote { gid: Gid::from(IP), qpn: side.qp.qpn(), psn: 7 });
}

#[test]
fn all_access_is_every_right_but_zero_based_and_flush() {
    assert_eq!(ALL_ACCESS, Access(1 | 2 | 4 | 8 | 16));
}
