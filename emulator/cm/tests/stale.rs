//! Stale, spoofed and malformed MADs: dropped and counted, and the
//! connection they aim at goes on as if they had not come.

mod common;

use common::*;
use uroce_cm::{Counters, State};
use uroce_wire::mad::rej::RejectReason;
use uroce_wire::mad::req::transport;
use uroce_wire::mad::{
    self, drep, dreq, mra, AttributeId, CmMessage, CommId, MessageRef, Method, TransactionId,
};
use uroce_wire::Qpn;

fn original(w: &World, who: Who, attr: AttributeId) -> (TransactionId, CmMessage) {
    let (_, m) = w.sent_of(who, attr).into_iter().next().unwrap();
    (common::tid(&m[..]), message(&m[..]))
}

/// Delivers `mad` and returns what changed in the receiver's counters.
fn deliver(w: &mut World, to: Who, from: uroce_wire::mad::Gid, mad: &[u8]) -> Counters {
    let before = *w.side(to).cm.counters();
    w.inject(to, from, mad);
    let after = *w.side(to).cm.counters();
    Counters {
        rx_accepted: after.rx_accepted - before.rx_accepted,
        rx_duplicates: after.rx_duplicates - before.rx_duplicates,
        drop_malformed: after.drop_malformed - before.drop_malformed,
        drop_unsupported: after.drop_unsupported - before.drop_unsupported,
        drop_unknown_id: after.drop_unknown_id - before.drop_unknown_id,
        drop_wrong_peer: after.drop_wrong_peer - before.drop_wrong_peer,
        drop_wrong_state: after.drop_wrong_state - before.drop_wrong_state,
        drop_wrong_qpn: after.drop_wrong_qpn - before.drop_wrong_qpn,
        drep_unknown: after.drep_unknown - before.drep_unknown,
        rej_stale: after.rej_stale - before.rej_stale,
        rej_transport: after.rej_transport - before.rej_transport,
        ..Counters::default()
    }
}

#[test]
fn spoofed_and_stale_messages_leave_the_connection_alone() {
    let (mut w, a_id, b_id) = established();
    let (tid, CmMessage::Rep(rep)) = original(&w, Who::B, AttributeId::REP) else { panic!() };
    let (_, CmMessage::Rtu(rtu)) = original(&w, Who::A, AttributeId::RTU) else { panic!() };
    let a_events = w.a.events.len();
    let b_events = w.b.events.len();

    // REP: another comm ID, the right ones from elsewhere, a wrong sender ID.
    let mut r = rep;
    r.remote_comm_id = CommId(a_id.0 .0 ^ 1);
    assert_eq!(deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Rep(r))).drop_unknown_id, 1);
    assert_eq!(
        deliver(&mut w, Who::A, EVIL_GID, &mad_of(tid, &CmMessage::Rep(rep))).drop_wrong_peer,
        1
    );
    let mut r = rep;
    r.local_comm_id = CommId(7);
    assert_eq!(deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Rep(r))).drop_unknown_id, 1);

    // RTU: a wrong sender ID, from elsewhere; the real one again is a duplicate.
    let mut r = rtu;
    r.local_comm_id = CommId(9);
    assert_eq!(deliver(&mut w, Who::B, A_GID, &mad_of(tid, &CmMessage::Rtu(r))).drop_unknown_id, 1);
    assert_eq!(
        deliver(&mut w, Who::B, EVIL_GID, &mad_of(tid, &CmMessage::Rtu(rtu))).drop_wrong_peer,
        1
    );
    assert_eq!(deliver(&mut w, Who::B, A_GID, &mad_of(tid, &CmMessage::Rtu(rtu))).rx_duplicates, 1);

    // DREQ: from elsewhere, for another QP, for no connection.
    let dreq = dreq::Repr {
        local_comm_id: a_id.0,
        remote_comm_id: b_id.0,
        remote_qpn: B_QPN,
        resv8: 0,
        private_data: [0; dreq::PRIVATE_DATA_LEN],
    };
    let d = |r: dreq::Repr| mad_of(TransactionId(5), &CmMessage::Dreq(r));
    assert_eq!(deliver(&mut w, Who::B, EVIL_GID, &d(dreq)).drop_wrong_peer, 1);
    assert_eq!(
        deliver(&mut w, Who::B, A_GID, &d(dreq::Repr { remote_qpn: Qpn::new(0x99), ..dreq }))
            .drop_wrong_qpn,
        1
    );
    let drep_before = w.sent_count(Who::B, AttributeId::DREP);
    let unknown = dreq::Repr { local_comm_id: CommId(1234), ..dreq };
    assert_eq!(deliver(&mut w, Who::B, A_GID, &d(unknown)).drep_unknown, 1);
    // Linux answers a DREQ for no connection with a DREP echoing its IDs.
    assert_eq!(w.sent_count(Who::B, AttributeId::DREP), drep_before + 1);

    // DREP, REJ, MRA that nothing is waiting for.
    let drep = drep::Repr {
        local_comm_id: b_id.0,
        remote_comm_id: a_id.0,
        private_data: [0; drep::PRIVATE_DATA_LEN],
    };
    assert_eq!(
        deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Drep(drep))).drop_wrong_state,
        1
    );
    let rej = uroce_wire::mad::rej::Repr {
        local_comm_id: b_id.0,
        remote_comm_id: a_id.0,
        message_rejected: MessageRef::OTHER,
        resv6: 0,
        rejected_info_length: 0,
        resv1: false,
        reason: RejectReason::ConsumerDefined,
        ari: [0; 72],
        private_data: [0; 148],
    };
    assert_eq!(
        deliver(&mut w, Who::A, EVIL_GID, &mad_of(tid, &CmMessage::Rej(rej))).drop_wrong_peer,
        1
    );
    let wrong_ids = uroce_wire::mad::rej::Repr { local_comm_id: CommId(3), ..rej };
    assert_eq!(
        deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Rej(wrong_ids))).drop_unknown_id,
        1
    );
    let mra = mra::Repr {
        local_comm_id: b_id.0,
        remote_comm_id: a_id.0,
        message_mraed: MessageRef::REP,
        resv6: 0,
        service_timeout: 20,
        resv3: 0,
        private_data: [0; mra::PRIVATE_DATA_LEN],
    };
    assert_eq!(
        deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Mra(mra))).drop_wrong_state,
        1
    );

    // Nothing happened to the connection.
    w.run_for(100_000 * MS);
    assert_eq!((w.a.events.len(), w.b.events.len()), (a_events, b_events));
    assert_eq!(w.a.cm.state(a_id), Some(State::Established));
    assert_eq!(w.b.cm.state(b_id), Some(State::Established));
    // And it still closes normally.
    w.a.cm.disconnect(w.now, a_id, &[]).unwrap();
    w.run();
    assert_eq!(w.a.count(is_disconnected) + w.b.count(is_disconnected), 2);
}

#[test]
fn a_rej_from_elsewhere_does_not_kill_a_pending_req() {
    let mut w = World::listening();
    w.fault = Box::new(|_, _, _| vec![]);
    let a_id = w.connect();
    w.pump();
    let rej = uroce_wire::mad::rej::Repr {
        local_comm_id: CommId(0),
        remote_comm_id: a_id.0,
        message_rejected: MessageRef::REQ,
        resv6: 0,
        rejected_info_length: 0,
        resv1: false,
        reason: RejectReason::InvalidServiceId,
        ari: [0; 72],
        private_data: [0; 148],
    };
    let tid = uroce_cm::transaction_id(1, a_id.0);
    assert_eq!(
        deliver(&mut w, Who::A, EVIL_GID, &mad_of(tid, &CmMessage::Rej(rej))).drop_wrong_peer,
        1
    );
    assert_eq!(w.a.cm.state(a_id), Some(State::ReqSent));
    assert_eq!(deliver(&mut w, Who::A, B_GID, &mad_of(tid, &CmMessage::Rej(rej))).rx_accepted, 1);
    assert_eq!(w.a.cm.state(a_id), None);
}

#[test]
fn malformed_and_unsupported_mads_are_counted() {
    let (mut w, a_id, _) = established();
    let (tid, req) = original(&w, Who::A, AttributeId::REQ);
    let good = mad_of(tid, &req);
    assert_eq!(deliver(&mut w, Who::B, A_GID, &good[..100]).drop_malformed, 1);
    assert_eq!(deliver(&mut w, Who::B, A_GID, &[]).drop_malformed, 1);
    let mut other_class = good.clone();
    other_class[1] = 0x03;
    assert_eq!(deliver(&mut w, Who::B, A_GID, &other_class).drop_malformed, 1);
    let mut lap = good.clone();
    lap[16..18].copy_from_slice(&AttributeId::LAP.0.to_be_bytes());
    assert_eq!(deliver(&mut w, Who::B, A_GID, &lap).drop_unsupported, 1);
    let mut get = good.clone();
    get[3] = Method::GET.0;
    assert_eq!(deliver(&mut w, Who::B, A_GID, &get).drop_unsupported, 1);
    let mut unknown_attr = good.clone();
    unknown_attr[16..18].copy_from_slice(&0x0042u16.to_be_bytes());
    assert_eq!(deliver(&mut w, Who::B, A_GID, &unknown_attr).drop_malformed, 1);
    // An RD REQ gets REJ 9.
    let CmMessage::Req(mut rd) = req else { panic!() };
    rd.local_comm_id = CommId(77);
    rd.local_qpn = Qpn::new(0x77);
    rd.transport_service_type = transport::RD;
    assert_eq!(
        deliver(&mut w, Who::B, A_GID, &mad_of(TransactionId(77), &CmMessage::Req(rd)))
            .rej_transport,
        1
    );
    let (_, m) = w.sent_of(Who::B, AttributeId::REJ).pop().unwrap();
    let CmMessage::Rej(rej) = message(&m[..]) else { panic!() };
    assert_eq!((rej.reason, rej.remote_comm_id), (RejectReason::InvalidTransportType, CommId(77)));
    assert_eq!(w.a.cm.state(a_id), Some(State::Established));
    let _ = mad::MAD_LEN;
}

#[test]
fn a_new_req_from_a_connected_qp_is_stale() {
    let (mut w, a_id, b_id) = established();
    let (_, CmMessage::Req(mut req)) = original(&w, Who::A, AttributeId::REQ) else { panic!() };
    // The same QP asks again under a new comm ID (its old connection
    // forgotten on its side): Linux refuses it and disconnects the old one.
    req.local_comm_id = CommId(0x4242);
    let c = deliver(&mut w, Who::B, A_GID, &mad_of(TransactionId(0x4242), &CmMessage::Req(req)));
    assert_eq!(c.rej_stale, 1);
    let (_, m) = w.sent_of(Who::B, AttributeId::REJ).pop().unwrap();
    let CmMessage::Rej(rej) = message(&m[..]) else { panic!() };
    assert_eq!(
        (rej.reason, rej.remote_comm_id, rej.local_comm_id),
        (RejectReason::StaleConnection, CommId(0x4242), CommId(0))
    );
    assert_eq!(w.b.cm.state(b_id), Some(State::DreqSent));
    w.run();
    assert_eq!(w.a.count(is_disconnected), 1);
    assert_eq!(w.a.cm.state(a_id), None);
    assert_eq!(w.b.count(is_request), 1);
}

#[test]
fn a_req_again_in_timewait_gets_rej_stale() {
    let (mut w, a_id, b_id) = established();
    let (tid, req) = original(&w, Who::A, AttributeId::REQ);
    w.a.cm.disconnect(w.now, a_id, &[]).unwrap();
    w.run_for(10 * MS);
    assert_eq!(w.b.cm.state(b_id), Some(State::Timewait));
    let c = deliver(&mut w, Who::B, A_GID, &mad_of(tid, &req));
    assert_eq!(c.rx_duplicates, 1);
    let (_, m) = w.sent_of(Who::B, AttributeId::REJ).pop().unwrap();
    let CmMessage::Rej(rej) = message(&m[..]) else { panic!() };
    assert_eq!(
        (rej.reason, rej.local_comm_id, rej.remote_comm_id),
        (RejectReason::StaleConnection, b_id.0, a_id.0)
    );
    assert_eq!(w.b.count(is_request), 1);
}

#[test]
fn a_dreq_again_in_timewait_gets_the_drep_again() {
    let (mut w, a_id, b_id) = established();
    w.a.cm.disconnect(w.now, a_id, &[]).unwrap();
    w.run_for(10 * MS);
    let (tid, dreq) = original(&w, Who::A, AttributeId::DREQ);
    assert_eq!(deliver(&mut w, Who::B, A_GID, &mad_of(tid, &dreq)).rx_duplicates, 1);
    assert_eq!(w.sent_count(Who::B, AttributeId::DREP), 2);
    assert_eq!(w.b.count(is_disconnected), 1);
    assert_eq!(w.b.cm.state(b_id), Some(State::Timewait));
}
