//! The exchanges between two engines on a lossless network: connect,
//! accept, RTU; reject; no listener; disconnect both ways; SIDR; MRA;
//! traffic before the RTU.

mod common;

use common::*;
use uroce_cm::{transaction_id, CmError, DisconnectCause, Event, SidrParams, State, TimedOut};
use uroce_wire::mad::rej::RejectReason;
use uroce_wire::mad::sidr::SidrStatus;
use uroce_wire::mad::{AttributeId, CmMessage, CommId, MessageRef};
use uroce_wire::Psn;

#[test]
fn connect_accept_rtu_establishes_both_sides() {
    let mut w = World::listening();
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    assert_eq!(w.a.cm.state(a_id), Some(State::Established));
    assert_eq!(w.b.cm.state(b_id), Some(State::Established));
    assert_eq!(w.a.cm.remote_comm_id(a_id), Some(b_id.0));
    assert_eq!(w.b.cm.remote_comm_id(b_id), Some(a_id.0));

    // A: ConnectReply, Established. B: ConnectRequest, Established.
    let a_kinds: Vec<_> = w.a.events.iter().map(|(_, e)| std::mem::discriminant(e)).collect();
    assert_eq!(a_kinds.len(), 2);
    assert!(is_reply(&w.a.events[0].1) && is_established(&w.a.events[1].1));
    assert!(is_request(&w.b.events[0].1) && is_established(&w.b.events[1].1));
    let Event::ConnectRequest { req, peer, .. } = &w.b.events[0].1 else { unreachable!() };
    assert_eq!(peer.gid, A_GID);
    assert_eq!(req.local_comm_id, a_id.0);
    assert_eq!(req.local_qpn, A_QPN);
    assert_eq!(req.starting_psn, Psn::new(0x111));
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.primary_path.local_ack_timeout, 0x13);
    let Event::ConnectReply { rep, .. } = &w.a.events[0].1 else { unreachable!() };
    assert_eq!(rep.local_qpn, B_QPN);
    assert_eq!(rep.remote_comm_id, a_id.0);
    assert_eq!(&rep.private_data[..7], b"welcome");

    // One REQ, one REP, one RTU, all with the REQ's TID, Linux's way.
    let tid = transaction_id(1, a_id.0);
    for (who, attr) in
        [(Who::A, AttributeId::REQ), (Who::B, AttributeId::REP), (Who::A, AttributeId::RTU)]
    {
        let sent = w.sent_of(who, attr);
        assert_eq!(sent.len(), 1, "{attr:?}");
        assert_eq!(common::tid(&sent[0].1[..]), tid);
    }
    assert!(w.is_quiet());
    assert_eq!(w.a.cm.counters().rx_accepted, 1);
    assert_eq!(w.b.cm.counters().rx_accepted, 2);
    assert_eq!(w.a.cm.counters().tx_retries + w.b.cm.counters().tx_retries, 0);
}

#[test]
fn consumer_reject_reaches_the_active_side() {
    let mut w = World::listening();
    w.b.auto.accept = false;
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    assert_eq!(w.b.cm.state(b_id), Some(State::ReqRcvd));
    w.b.cm.reject(w.now, b_id, b"go away").unwrap();
    assert_eq!(w.b.cm.state(b_id), None);
    w.run_for(100 * MS);
    let Some(Event::Rejected { id, rej }) = w.a.last() else { panic!("{:?}", w.a.events) };
    assert_eq!(*id, a_id);
    assert_eq!(rej.reason, RejectReason::ConsumerDefined);
    assert_eq!(rej.message_rejected, MessageRef::REQ);
    assert_eq!(rej.local_comm_id, CommId(0));
    assert_eq!(&rej.private_data[..7], b"go away");
    assert_eq!(w.a.cm.state(a_id), None);
    assert_eq!(w.b.cm.reject(w.now, b_id, &[]), Err(CmError::UnknownId));
    assert!(w.is_quiet());
}

#[test]
fn active_side_can_reject_the_reply() {
    let mut w = World::listening();
    w.a.auto.rtu = false;
    let a_id = w.connect();
    w.run_for(100 * MS);
    assert_eq!(w.a.cm.state(a_id), Some(State::RepRcvd));
    w.a.cm.reject(w.now, a_id, &[]).unwrap();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    let Some(Event::Rejected { id, rej }) = w.b.last() else { panic!() };
    assert_eq!((*id, rej.message_rejected), (b_id, MessageRef::REP));
    assert_eq!(w.b.cm.state(b_id), None);
}

#[test]
fn no_listener_gets_rej_invalid_service_id() {
    let mut w = World::new();
    let a_id = w.connect();
    w.run_for(100 * MS);
    let Some(Event::Rejected { id, rej }) = w.a.last() else { panic!("{:?}", w.a.events) };
    assert_eq!(*id, a_id);
    assert_eq!(rej.reason, RejectReason::InvalidServiceId);
    assert_eq!(u16::from(rej.reason), 8);
    // Linux's cm_issue_rej: the REQ's TID and comm ID, no local ID.
    let sent = w.sent_of(Who::B, AttributeId::REJ);
    assert_eq!(sent.len(), 1);
    assert_eq!(common::tid(&sent[0].1[..]), transaction_id(1, a_id.0));
    assert_eq!((rej.local_comm_id, rej.remote_comm_id), (CommId(0), a_id.0));
    assert_eq!(w.b.cm.counters().rej_no_listener, 1);
    assert_eq!(w.b.cm.id_count(), 0);
    assert_eq!(w.a.cm.id_count(), 0);
    assert!(w.b.events.is_empty());
}

fn established() -> (World, uroce_cm::CmId, uroce_cm::CmId) {
    let mut w = World::listening();
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    assert_eq!(w.a.cm.state(a_id), Some(State::Established));
    assert_eq!(w.b.cm.state(b_id), Some(State::Established));
    (w, a_id, b_id)
}

#[test]
fn disconnect_from_the_active_side() {
    let (mut w, a_id, b_id) = established();
    let t0 = w.now;
    w.a.cm.disconnect(t0, a_id, b"bye").unwrap();
    w.run_for(10 * MS);
    let Some(Event::Disconnected { id, cause, private_data }) = w.b.last() else { panic!() };
    assert_eq!((*id, *cause), (b_id, DisconnectCause::DreqReceived));
    assert_eq!(&private_data[..3], b"bye");
    let Some(Event::Disconnected { id, cause, .. }) = w.a.last() else { panic!() };
    assert_eq!((*id, *cause), (a_id, DisconnectCause::DrepReceived));
    assert_eq!(w.a.cm.state(a_id), Some(State::Timewait));
    assert_eq!(w.b.cm.state(b_id), Some(State::Timewait));
    // Time-wait: the path's ACK timeout, 2^(19-8) ms.
    assert_eq!(w.b.cm.poll_timeout(), Some(t0 + LATENCY_NS + 2048 * MS));
    assert_eq!(w.a.cm.poll_timeout(), Some(t0 + 2 * LATENCY_NS + 2048 * MS));
    w.run();
    assert!(matches!(w.a.last(), Some(Event::TimewaitExit { id }) if *id == a_id));
    assert!(matches!(w.b.last(), Some(Event::TimewaitExit { id }) if *id == b_id));
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
    assert_eq!(w.sent_count(Who::A, AttributeId::DREQ), 1);
    assert_eq!(w.sent_count(Who::B, AttributeId::DREP), 1);
    // The DREQ carries a fresh Linux TID, the DREP echoes it.
    let dreq = w.sent_of(Who::A, AttributeId::DREQ);
    let drep = w.sent_of(Who::B, AttributeId::DREP);
    assert_eq!(common::tid(&dreq[0].1[..]), transaction_id(1, a_id.0));
    assert_eq!(common::tid(&drep[0].1[..]), common::tid(&dreq[0].1[..]));
}

#[test]
fn disconnect_from_the_passive_side() {
    let (mut w, a_id, b_id) = established();
    w.b.cm.disconnect(w.now, b_id, &[]).unwrap();
    assert_eq!(w.b.cm.disconnect(w.now, b_id, &[]), Err(CmError::WrongState));
    w.run_for(10 * MS);
    assert!(matches!(
        w.a.last(),
        Some(Event::Disconnected { cause: DisconnectCause::DreqReceived, .. })
    ));
    assert!(matches!(
        w.b.last(),
        Some(Event::Disconnected { cause: DisconnectCause::DrepReceived, .. })
    ));
    let Some(CmMessage::Dreq(dreq)) =
        w.sent_of(Who::B, AttributeId::DREQ).first().map(|(_, m)| message(&m[..]))
    else {
        panic!()
    };
    assert_eq!(dreq.remote_qpn, A_QPN);
    assert_eq!((dreq.local_comm_id, dreq.remote_comm_id), (b_id.0, a_id.0));
    w.run();
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
}

#[test]
fn both_sides_disconnect_at_once() {
    let (mut w, a_id, b_id) = established();
    let now = w.now;
    w.a.cm.disconnect(now, a_id, &[]).unwrap();
    w.b.cm.disconnect(now, b_id, &[]).unwrap();
    w.run();
    assert_eq!(w.a.count(is_disconnected), 1);
    assert_eq!(w.b.count(is_disconnected), 1);
    assert_eq!(w.a.count(is_timewait_exit), 1);
    assert_eq!(w.b.count(is_timewait_exit), 1);
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
}

#[test]
fn sidr_request_and_reply() {
    let mut w = World::listening();
    let params = SidrParams::rdma_cm(w.b.peer(), SERVICE);
    let a_id = w.a.cm.sidr_request(w.now, &params, b"who").unwrap();
    w.run_for(100 * MS);
    let Some(Event::SidrRequest { req, .. }) = w.b.events.first().map(|(_, e)| e) else { panic!() };
    assert_eq!(req.service_id, SERVICE);
    assert_eq!(req.request_id, a_id.0 .0);
    assert_eq!(&req.private_data[..3], b"who");
    let Some(Event::SidrReply { id, rep }) = w.a.last() else { panic!() };
    assert_eq!(*id, a_id);
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey, rep.service_id),
        (SidrStatus::Success, SIDR_QPN, SIDR_QKEY, SERVICE)
    );
    assert_eq!(&rep.private_data[..3], b"udp");
    let req_tid = common::tid(&w.sent_of(Who::A, AttributeId::SIDR_REQ)[0].1[..]);
    assert_eq!(req_tid, transaction_id(1, a_id.0));
    assert_eq!(common::tid(&w.sent_of(Who::B, AttributeId::SIDR_REP)[0].1[..]), req_tid);
    // B remembers the answer a while for duplicates, then forgets it.
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 1));
    w.run();
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
    assert_eq!(w.b.events.len(), 1);
    assert!(w.is_quiet());
}

#[test]
fn sidr_without_listener_is_unsupported() {
    let mut w = World::new();
    let params = SidrParams::rdma_cm(w.b.peer(), SERVICE);
    w.a.cm.sidr_request(w.now, &params, &[]).unwrap();
    w.run_for(100 * MS);
    let Some(Event::SidrReply { rep, .. }) = w.a.last() else { panic!() };
    assert_eq!(rep.status, SidrStatus::Unsupported);
    assert_eq!(w.b.cm.counters().sidr_no_listener, 1);
}

#[test]
fn traffic_before_the_rtu_establishes_the_passive_side() {
    let mut w = World::listening();
    w.fault =
        Box::new(|_, attr, _| if attr == AttributeId::RTU { vec![] } else { vec![LATENCY_NS] });
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    assert_eq!(w.a.cm.state(a_id), Some(State::Established));
    assert_eq!(w.b.cm.state(b_id), Some(State::RepSent));
    w.b.cm.established(w.now, b_id).unwrap();
    assert_eq!(w.b.cm.established(w.now, b_id), Err(CmError::WrongState));
    w.run();
    assert_eq!(w.b.count(is_established), 1);
    assert_eq!(w.b.cm.state(b_id), Some(State::Established));
    assert_eq!(w.sent_count(Who::B, AttributeId::REP), 1);
}

#[test]
fn mra_stretches_the_req_wait() {
    let mut w = World::listening();
    w.b.auto.accept = false;
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    // 4.096 µs × 2^24 ≈ 65 s more.
    w.b.cm.mra(w.now, b_id, 24).unwrap();
    assert_eq!(w.b.cm.mra(w.now, b_id, 24), Err(CmError::WrongState));
    let t_mra = w.now;
    w.run_for(10 * MS);
    assert_eq!(w.a.cm.state(a_id), Some(State::MraReqRcvd));
    // The new wait: the service timeout plus the path's ACK timeout (19).
    assert_eq!(w.a.cm.poll_timeout(), Some(t_mra + LATENCY_NS + (65536 + 2048) * MS));
    w.run_for(30_000 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::REQ), 1);
    w.b.cm.accept(w.now, b_id, &uroce_cm::AcceptParams::new(B_QPN, Psn::new(1)), &[]).unwrap();
    w.run();
    assert_eq!(w.a.count(is_established), 1);
    assert_eq!(w.b.count(is_established), 1);
    assert_eq!(w.sent_count(Who::A, AttributeId::REQ), 1);
}

#[test]
fn duplicate_req_while_mraed_gets_the_mra_again() {
    let mut w = World::listening();
    w.b.auto.accept = false;
    w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    w.b.cm.mra(w.now, b_id, 10).unwrap();
    // A short service timeout: A retries its REQ, B answers with the MRA.
    w.run_for(20_000 * MS);
    assert!(w.sent_count(Who::A, AttributeId::REQ) > 1);
    assert_eq!(w.sent_count(Who::B, AttributeId::MRA), w.sent_count(Who::A, AttributeId::REQ));
    assert_eq!(w.b.count(is_request), 1);
}

#[test]
fn a_delayed_mra_goes_only_to_a_duplicate_req_as_rdma_cm_sends_it() {
    let mut w = World::listening();
    w.b.auto.accept = false;
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    // rdma_cm's CMA_CM_MRA_SETTING: delayed, 24 (≈ 69 s).
    w.b.cm.mra(w.now, b_id, uroce_cm::MRA_DELAY | 24).unwrap();
    assert_eq!(w.b.cm.state(b_id), Some(State::MraReqSent));
    w.run_for(1_000 * MS);
    assert_eq!(w.sent_count(Who::B, AttributeId::MRA), 0, "nothing sent while A waits");
    assert_eq!(w.a.cm.state(a_id), Some(State::ReqSent));
    // A's REQ times out and is sent again: the duplicate gets the MRA,
    // and A waits the service timeout instead of retrying on.
    w.run_for(10_000 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::REQ), 2);
    assert_eq!(w.sent_count(Who::B, AttributeId::MRA), 1);
    assert_eq!(w.a.cm.state(a_id), Some(State::MraReqRcvd));
    w.run_for(60_000 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::REQ), 2, "no retry within the MRA's 69 s");
    w.b.cm.accept(w.now, b_id, &uroce_cm::AcceptParams::new(B_QPN, Psn::new(1)), &[]).unwrap();
    w.run();
    assert_eq!(w.a.count(is_established), 1);
    assert_eq!(w.b.count(is_established), 1);
}

#[test]
fn consumer_errors() {
    let mut w = World::listening();
    assert_eq!(w.b.cm.listen(SERVICE), Err(CmError::ServiceIdInUse));
    let mut params = World::connect_params();
    assert_eq!(w.a.cm.connect(0, &params, &[0; 93]), Err(CmError::PrivateDataTooLong));
    params.transport = 2;
    assert_eq!(w.a.cm.connect(0, &params, &[]), Err(CmError::InvalidParameter));
    let ghost = uroce_cm::CmId(CommId(42));
    assert_eq!(
        w.b.cm.accept(0, ghost, &uroce_cm::AcceptParams::new(B_QPN, Psn::new(0)), &[]),
        Err(CmError::UnknownId)
    );
    assert_eq!(w.b.cm.disconnect(0, ghost, &[]), Err(CmError::UnknownId));
    let a_id = w.connect();
    assert_eq!(w.a.cm.ready_to_use(0, a_id, &[]), Err(CmError::WrongState));
    assert_eq!(w.a.cm.disconnect(0, a_id, &[]), Err(CmError::WrongState));
    w.b.cm.unlisten(SERVICE).unwrap();
    assert_eq!(w.b.cm.unlisten(SERVICE), Err(CmError::NotListening));
}

#[test]
fn destroy_sends_what_linux_sends() {
    // An unanswered REQ: REJ timeout with the GUID in the ARI.
    let mut w = World::listening();
    w.fault = Box::new(|who, _, _| if who == Who::B { vec![] } else { vec![LATENCY_NS] });
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    w.a.cm.destroy(w.now, a_id).unwrap();
    w.run_for(100 * MS);
    let Some(Event::Rejected { id, rej }) = w.b.last() else { panic!("{:?}", w.b.events) };
    assert_eq!((*id, rej.reason), (b_id, RejectReason::Timeout));
    assert_eq!(&rej.ari[..8], &0xa_u64.to_be_bytes());
    assert_eq!(w.b.cm.id_count(), 0);
    // An established connection: one DREQ.
    let (mut w, a_id, b_id) = established();
    w.a.cm.destroy(w.now, a_id).unwrap();
    assert_eq!(w.a.cm.id_count(), 0);
    w.run();
    assert_eq!(w.sent_count(Who::A, AttributeId::DREQ), 1);
    assert!(w
        .b
        .events
        .iter()
        .any(|(_, e)| matches!(e, Event::Disconnected { id, .. } if *id == b_id)));
    assert_eq!(w.b.cm.id_count(), 0);
    let _ = TimedOut::Req;
}

#[test]
fn a_destroyed_connection_goes_through_timewait_unseen() {
    // Destroyed while established: one DREQ, then time-wait, no event.
    let (mut w, a_id, _) = established();
    let before = w.a.events.len();
    w.a.cm.destroy(w.now, a_id).unwrap();
    assert_eq!(w.a.cm.state(a_id), None);
    assert_eq!(w.a.cm.disconnect(w.now, a_id, &[]), Err(CmError::UnknownId));
    assert_eq!(w.a.cm.destroy(w.now, a_id), Err(CmError::UnknownId));
    // Its comm ID is held: the time-wait's deadline is still armed.
    assert!(w.a.cm.poll_timeout().is_some());
    w.run_for(10_000 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::DREQ), 1);
    assert_eq!(w.a.events.len(), before, "no event for a destroyed ID: {:?}", w.a.events);
    assert_eq!(w.a.cm.poll_timeout(), None, "the time-wait ended, the ID freed");
    // Destroyed with its DREQ unanswered (the DREP lost): no more DREQs.
    let (mut w, a_id, _) = established();
    w.fault = Box::new(|who, _, _| if who == Who::B { vec![] } else { vec![LATENCY_NS] });
    w.a.cm.disconnect(w.now, a_id, &[]).unwrap();
    w.run_for(10 * MS);
    let before = w.a.events.len();
    w.a.cm.destroy(w.now, a_id).unwrap();
    w.run_for(60_000 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::DREQ), 1);
    assert_eq!(w.a.events.len(), before, "{:?}", w.a.events);
    assert_eq!(w.a.cm.poll_timeout(), None);
}

#[test]
fn a_full_id_table_answers_rej_no_resources() {
    let mut w = World::listening();
    let mut config = common::config(0xb, 2);
    config.max_ids = 1;
    w.b.cm = uroce_cm::Cm::new(config);
    w.b.cm.listen(SERVICE).unwrap();
    w.connect();
    let mut second = World::connect_params();
    second.qpn = uroce_wire::Qpn::new(0x12);
    let now = w.now;
    let a2 = w.a.cm.connect(now, &second, &[]).unwrap();
    w.run_for(100 * MS);
    assert_eq!(w.b.cm.counters().rej_no_resources, 1);
    assert!(w.a.events.iter().any(|(_, e)| matches!(e, Event::Rejected { id, rej } if *id == a2 && rej.reason == RejectReason::NoResources)));
    assert_eq!(w.a.count(is_established), 1);
}

#[test]
fn a_consumer_that_does_not_take_its_events_gets_new_reqs_refused_not_events_lost() {
    // B's consumer takes no event: with max_queue waiting, a REQ that would
    // make a new ID is refused (REJ no resources); nothing queued is lost.
    let mut config = common::config(0xb, 3);
    config.max_queue = 1;
    let mut b = uroce_cm::Cm::new(config);
    b.listen(SERVICE).unwrap();
    let mut a = uroce_cm::Cm::new(common::config(0xa, 4));
    let a_peer = uroce_cm::Peer { gid: A_GID, pkey_index: 0 };
    let first = World::connect_params();
    let mut second = first;
    second.qpn = uroce_wire::Qpn::new(0x12);
    let id1 = a.connect(0, &first, &[]).unwrap();
    let id2 = a.connect(0, &second, &[]).unwrap();
    while let Some(t) = a.poll_transmit() {
        b.receive(LATENCY_NS, a_peer, &t.mad[..]);
    }
    assert_eq!(b.counters().event_queue_full, 1, "{:?}", b.counters());
    let refusal = b.poll_transmit().expect("B answers the second REQ");
    let b_peer = uroce_cm::Peer { gid: B_GID, pkey_index: 0 };
    a.receive(2 * LATENCY_NS, b_peer, &refusal.mad[..]);
    let rejected: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
    assert!(
        matches!(&rejected[..], [Event::Rejected { id, rej }] if *id == id2 && rej.reason == RejectReason::NoResources),
        "{rejected:?}"
    );
    let waiting: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    assert!(matches!(&waiting[..], [Event::ConnectRequest { .. }]), "{waiting:?}");
    let _ = id1;
}
