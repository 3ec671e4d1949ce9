//! UD multicast on the simulated fabric: three devices, QPs attached to a
//! group on two of them, a UD SEND to QPN 0xFFFFFF and the group's GID from
//! the third (docs/hca.md, "Multicast").

use std::net::IpAddr;
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{
    connect, AhAttr, CmdError, Error, Gid, Mr, Qkey, Qp, QpType, Qpn, RecvWr, SendWr, WcStatus,
    WrOpcode,
};

const MS: u64 = 1_000_000;
/// rdma_cm's Q_Key for UDP port spaces (`RDMA_UDP_QKEY`).
const QKEY: u32 = 0x0123_4567;

fn group() -> Gid {
    Gid::from_ip("230.88.0.7".parse().unwrap())
}

fn ud_qp(w: &World, n: usize, qkey: u32) -> Qp {
    let qp = w.qp(n, QpType::Ud, cap(16, 1, 64));
    connect::to_init(&qp, ALL_ACCESS, qkey).unwrap();
    connect::to_rts(&qp, None, &tuning()).unwrap();
    qp
}

fn recv(qp: &Qp, mr: &Mr, wr_id: u64, offset: u64) {
    qp.post_recv(&[RecvWr { wr_id, sg_list: vec![mr.sge(offset, 40 + 256)] }]).unwrap();
}

fn send_to_group(w: &World, qp: &Qp, mr: &Mr, wr_id: u64) {
    let ah = w.nodes[0]
        .pd
        .create_ah(AhAttr { dgid: group(), sgid_index: 1, port_num: 1, ..AhAttr::default() })
        .unwrap();
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, 64)];
    wr.ud = Some((ah.index(), Qpn::MULTICAST, Qkey(QKEY)));
    qp.post_send(&[wr]).unwrap();
}

fn counters(w: &World, n: usize) -> uroce_hca::counters::Counters {
    w.nodes[n].hca.lock().counters()
}

fn invalid(result: Result<(), Error>) -> bool {
    matches!(result, Err(Error::Command(CmdError::Invalid(_))))
}

#[test]
fn a_send_to_a_group_reaches_every_attached_qp_with_its_own_qkey_until_it_detaches() {
    let mut w = World::new(3, FabricConfig::new(88));
    let sender = ud_qp(&w, 0, QKEY);
    let (one, two) = (ud_qp(&w, 1, QKEY), ud_qp(&w, 1, QKEY));
    let (three, wrong_qkey) = (ud_qp(&w, 2, QKEY), ud_qp(&w, 2, 0x9999));
    let attr = w.nodes[1].ctx.query_device().unwrap();
    assert_eq!(
        (attr.max_mcast_grp, attr.max_mcast_qp_attach, attr.max_total_mcast_qp_attach),
        (8192, 56, 8192 * 56),
        "rxe's limits"
    );
    for qp in [&one, &two, &three, &wrong_qkey] {
        qp.attach_mcast(group(), 0).unwrap();
    }
    one.attach_mcast(group(), 0).unwrap();
    let mrs: Vec<Mr> = (0..3).map(|n| w.nodes[n].pd.alloc_mr(4096, ALL_ACCESS).unwrap()).collect();
    mrs[0].write(0, &[0x5a; 64]).unwrap();
    for (n, qp, at) in [(1, &one, 0), (1, &two, 1024), (2, &three, 0), (2, &wrong_qkey, 1024)] {
        recv(qp, &mrs[n], 1, at);
        recv(qp, &mrs[n], 2, at + 512);
    }

    send_to_group(&w, &sender, &mrs[0], 1);
    assert_eq!(w.wait(0, 1, 10 * MS)[0].status, WcStatus::Success);
    let mut at_one = w.wait(1, 2, 10 * MS);
    at_one.sort_by_key(|wc| wc.qp_num);
    assert_eq!(at_one.iter().map(|wc| wc.qp_num).collect::<Vec<_>>(), [one.qpn(), two.qpn()]);
    let at_two = w.wait(2, 2, 10 * MS);
    assert_eq!(at_two.iter().map(|wc| wc.qp_num).collect::<Vec<_>>(), [three.qpn()]);
    for wc in at_one.iter().chain(&at_two) {
        assert_eq!((wc.status, wc.byte_len, wc.src_qp), (WcStatus::Success, 40 + 64, sender.qpn()));
    }
    let grh = mrs[2].read_vec(0, 40 + 64).unwrap();
    assert_eq!(&grh[32..36], &w.nodes[0].ip.octets(), "the GRH's source: the sender");
    assert_eq!(&grh[36..40], &[230, 88, 0, 7], "the GRH's destination: the group");
    assert_eq!(&grh[40..], &[0x5a; 64][..]);
    assert_eq!(counters(&w, 2).rcvd_bad_key_or_addr, 1, "the wrong Q_Key's copy was dropped");
    assert_eq!(
        (counters(&w, 1).rcvd_mcast_pkts, counters(&w, 1).rcvd_pkts),
        (1, 1),
        "counted once"
    );
    assert_eq!(counters(&w, 0).rcvd_mcast_drop, 1, "the sender's own copy: no QP of its attached");

    // Detached, and destroyed: no more copies for them.
    two.detach_mcast(group(), 0).unwrap();
    assert!(invalid(two.detach_mcast(group(), 0)), "not attached any more");
    three.destroy().unwrap();
    wrong_qkey.destroy().unwrap();
    send_to_group(&w, &sender, &mrs[0], 2);
    assert_eq!(w.wait(0, 1, 10 * MS)[0].status, WcStatus::Success);
    let at_one = w.wait(1, 2, 10 * MS);
    assert_eq!(at_one.iter().map(|wc| wc.qp_num).collect::<Vec<_>>(), [one.qpn()]);
    assert_eq!(counters(&w, 2).rcvd_mcast_drop, 1, "node 2 left the group with its last QP");
    let groups: Vec<_> = w.nodes[2].hca.lock().mcast_groups().map(|(g, _)| g).collect();
    assert!(groups.is_empty());
}

#[test]
fn only_ud_qps_attach_and_only_to_multicast_gids() {
    let w = World::new(1, FabricConfig::new(89));
    let rc = w.qp(0, QpType::Rc, cap(4, 1, 0));
    assert!(invalid(rc.attach_mcast(group(), 0)), "an RC QP");
    let ud = ud_qp(&w, 0, QKEY);
    let unicast = Gid::from_ip(IpAddr::V4(w.nodes[0].ip));
    assert!(invalid(ud.attach_mcast(unicast, 0)), "a unicast GID");
    assert!(invalid(ud.attach_mcast(Gid::from_ip("240.0.0.1".parse().unwrap()), 0)));
    assert!(invalid(ud.detach_mcast(group(), 0)), "never attached");
    ud.attach_mcast(Gid::from_ip("ff0e::88".parse().unwrap()), 0).unwrap();
}

#[test]
fn each_nodes_copy_is_a_packet_of_its_own_to_the_faults() {
    use uroce_sim::{Action, Matcher, NodeId, Rule};
    let mut w = World::new(3, FabricConfig::new(90));
    let sender = ud_qp(&w, 0, QKEY);
    let (one, two) = (ud_qp(&w, 1, QKEY), ud_qp(&w, 2, QKEY));
    let mrs: Vec<Mr> = (0..3).map(|n| w.nodes[n].pd.alloc_mr(4096, ALL_ACCESS).unwrap()).collect();
    for (n, qp) in [(1, &one), (2, &two)] {
        recv(qp, &mrs[n], 1, 0);
        qp.attach_mcast(group(), 0).unwrap();
    }
    // The copy to node 2 is lost; node 1's arrives.
    let matcher = Matcher::any().dest_qpn(Qpn::MULTICAST).to(NodeId(2));
    let rule = w.fabric.add_rule(Rule::new(matcher, Action::Drop));
    send_to_group(&w, &sender, &mrs[0], 1);
    assert_eq!(w.wait(0, 1, 10 * MS).len(), 1);
    assert_eq!(w.wait(1, 1, 10 * MS).len(), 1, "node 1's copy");
    assert!(w.wait(2, 1, 10 * MS).is_empty(), "node 2's copy was dropped");
    assert_eq!(w.fabric.rule(rule).hits, 1);
    let sent = w.fabric.counters().sent;
    assert_eq!(sent, 3, "one copy per node, the sender's own included");
}
