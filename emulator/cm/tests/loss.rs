//! Lost and duplicated MADs: every exchange completes through the
//! retransmissions, gives up after exactly the time Linux would, and
//! duplicates never raise a second event.

mod common;

use common::*;
use uroce_cm::{ConnectParams, DisconnectCause, Event, State, TimedOut};
use uroce_wire::mad::{req, AttributeId, HEADER_LEN};

/// Connects, then disconnects from `closer`, with the first `n` copies of
/// `victim` lost; checks that everything happened exactly once.
fn lossy_lifecycle(victim: AttributeId, n: u32, closer: Who) -> World {
    let mut w = World::listening();
    w.fault = Box::new(
        move |_, attr, k| if attr == victim && k <= n { vec![] } else { vec![LATENCY_NS] },
    );
    let a_id = w.connect();
    w.run_for(200_000 * MS);
    let b_id = first_id(&w.b, is_request);
    assert_eq!(w.a.cm.state(a_id), Some(State::Established), "{victim:?} x{n}");
    assert_eq!(w.b.cm.state(b_id), Some(State::Established), "{victim:?} x{n}");
    let (id, side) = match closer {
        Who::A => (a_id, &mut w.a),
        Who::B => (b_id, &mut w.b),
    };
    let now = w.now;
    side.cm.disconnect(now, id, &[]).unwrap();
    w.run();
    for side in [&w.a, &w.b] {
        assert_eq!(side.count(is_established), 1, "{victim:?} x{n}");
        assert_eq!(side.count(is_disconnected), 1, "{victim:?} x{n}");
        assert_eq!(side.count(is_timewait_exit), 1, "{victim:?} x{n}");
        assert_eq!(side.cm.id_count(), 0);
    }
    assert_eq!(w.a.count(is_reply), 1);
    assert_eq!(w.b.count(is_request), 1);
    assert!(w.is_quiet());
    w
}

#[test]
fn lost_req_rep_rtu_dreq_drep_are_retried() {
    for victim in
        [AttributeId::REQ, AttributeId::REP, AttributeId::RTU, AttributeId::DREQ, AttributeId::DREP]
    {
        for n in 1..=3 {
            for closer in [Who::A, Who::B] {
                let w = lossy_lifecycle(victim, n, closer);
                let retries = w.a.cm.counters().tx_retries + w.b.cm.counters().tx_retries;
                assert!(retries >= 1 || victim == AttributeId::RTU, "{victim:?} x{n}");
            }
        }
    }
}

#[test]
fn a_lost_req_is_resent_after_its_timeout() {
    let mut w = World::listening();
    w.fault = Box::new(
        |_, attr, k| if attr == AttributeId::REQ && k == 1 { vec![] } else { vec![LATENCY_NS] },
    );
    let t0 = w.now;
    w.connect();
    w.run();
    let reqs = w.sent_of(Who::A, AttributeId::REQ);
    // 2 × 2^(18-8) + 2^(20-8) ms = 6144 ms, and the same bytes.
    assert_eq!(reqs.iter().map(|(t, _)| t - t0).collect::<Vec<_>>(), vec![0, 6144 * MS]);
    assert_eq!(reqs[0].1, reqs[1].1);
}

#[test]
fn a_lost_rtu_is_answered_by_the_rep_retry() {
    let mut w = World::listening();
    w.fault = Box::new(
        |_, attr, k| if attr == AttributeId::RTU && k == 1 { vec![] } else { vec![LATENCY_NS] },
    );
    w.connect();
    w.run_for(60_000 * MS);
    let reps = w.sent_of(Who::B, AttributeId::REP);
    // The REP waits the REQ's local CM response timeout: 2^(20-8) ms.
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1].0 - reps[0].0, 4096 * MS);
    assert_eq!(w.sent_count(Who::A, AttributeId::RTU), 2);
    assert_eq!(w.a.cm.counters().rx_duplicates, 1);
    assert_eq!(w.b.count(is_established), 1);
}

#[test]
fn losing_every_req_times_out_after_sixteen_tries() {
    let mut w = World::listening();
    w.fault = Box::new(|_, _, _| vec![]);
    let t0 = w.now;
    let a_id = w.connect();
    w.run();
    // 1 + 15 retries, 6144 ms apart; the last wait ends the attempt.
    assert_eq!(w.sent_count(Who::A, AttributeId::REQ), 16);
    let (t, e) = w.a.events.last().unwrap();
    assert_eq!(*e, Event::Unreachable { id: a_id, stage: TimedOut::Req });
    assert_eq!(t - t0, 16 * 6144 * MS);
    assert_eq!(w.a.events.len(), 1);
    assert_eq!(w.a.cm.id_count(), 0);
    assert_eq!(w.a.cm.counters().timeouts, 1);
    assert_eq!(w.a.cm.counters().tx_retries, 15);
}

/// A connect with a shorter CM response timeout and fewer retries (what
/// a device configured with `UROCE_CM_RESPONSE_TIMEOUT=14` and
/// `UROCE_CM_RETRIES=3` asks for): the REQ carries them, is sent 1 + 3
/// times `2 × 2^(18 − 8) + 2^(14 − 8)` = 2112 ms apart, and the connect is
/// unreachable after 4 × 2112 ms. The passive side waits for the RTU as
/// the REQ asked (its local CM response timeout, 64 ms, and its retries),
/// as Linux's `cm_req_handler` does.
#[test]
fn a_shorter_cm_timeout_and_fewer_retries_bound_the_handshake() {
    let params = ConnectParams {
        local_cm_response_timeout: 14,
        remote_cm_response_timeout: 14,
        max_cm_retries: 3,
        ..World::connect_params()
    };
    let mut w = World::listening();
    w.fault = Box::new(|_, _, _| vec![]);
    let t0 = w.now;
    let a_id = w.a.cm.connect(t0, &params, b"hello").unwrap();
    w.run();
    let reqs = w.sent_of(Who::A, AttributeId::REQ);
    let times: Vec<u64> = reqs.iter().map(|(t, _)| (t - t0) / MS).collect();
    assert_eq!(times, [0, 2112, 2 * 2112, 3 * 2112]);
    let req =
        req::Repr::parse(&req::Packet::new_checked(&reqs[0].1[HEADER_LEN..]).unwrap()).unwrap();
    let timing =
        (req.local_cm_response_timeout, req.remote_cm_response_timeout, req.max_cm_retries);
    assert_eq!(timing, (14, 14, 3));
    let (t, e) = w.a.events.last().unwrap();
    assert_eq!(*e, Event::Unreachable { id: a_id, stage: TimedOut::Req });
    assert_eq!(t - t0, 4 * 2112 * MS);
    assert_eq!(w.a.cm.counters().tx_retries, 3);

    // B gets the REQ, its REPs are lost: 4 REPs 64 ms apart.
    let mut w = World::listening();
    w.fault =
        Box::new(|_, attr, _| if attr == AttributeId::REP { vec![] } else { vec![LATENCY_NS] });
    let t0 = w.now;
    w.a.cm.connect(t0, &params, b"hello").unwrap();
    w.run_for(1000 * MS);
    let b_id = first_id(&w.b, is_request);
    let reps = w.sent_of(Who::B, AttributeId::REP);
    let times: Vec<u64> = reps.iter().map(|(t, _)| t - t0 - LATENCY_NS).collect();
    assert_eq!(times, [0, 64 * MS, 128 * MS, 192 * MS]);
    let (tb, eb) = w.b.events.last().unwrap();
    assert_eq!(*eb, Event::Unreachable { id: b_id, stage: TimedOut::Rep });
    assert_eq!(tb - t0, LATENCY_NS + 4 * 64 * MS);
}

#[test]
fn losing_every_rep_fails_both_sides() {
    let mut w = World::listening();
    w.fault =
        Box::new(|_, attr, _| if attr == AttributeId::REP { vec![] } else { vec![LATENCY_NS] });
    let t0 = w.now;
    let a_id = w.connect();
    w.run();
    let b_id = first_id(&w.b, is_request);
    let unreachable = |e: &Event| matches!(e, Event::Unreachable { stage: TimedOut::Rep, .. });
    let (tb, eb) = w.b.events.iter().find(|(_, e)| unreachable(e)).unwrap();
    assert_eq!(*eb, Event::Unreachable { id: b_id, stage: TimedOut::Rep });
    assert_eq!(tb - t0, LATENCY_NS + 16 * 4096 * MS);
    let (ta, ea) = w.a.events.last().unwrap();
    assert_eq!(*ea, Event::Unreachable { id: a_id, stage: TimedOut::Req });
    assert_eq!(ta - t0, 16 * 6144 * MS);
    assert_eq!(w.a.events.len(), 1);
    // A's REQ retries while B waits for an RTU are duplicates, silently;
    // once B has given up (as Linux, it forgets the REQ), a later retry is
    // a new request, which fails the same way.
    assert_eq!(w.b.count(is_request), w.b.count(unreachable));
    assert_eq!(w.b.count(is_request), 2);
    assert!(w.b.cm.counters().rx_duplicates >= 10);
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
}

#[test]
fn losing_every_dreq_times_out_into_timewait() {
    let mut w = World::listening();
    w.fault =
        Box::new(|_, attr, _| if attr == AttributeId::DREQ { vec![] } else { vec![LATENCY_NS] });
    let a_id = w.connect();
    w.run_for(100 * MS);
    let t0 = w.now;
    w.a.cm.disconnect(t0, a_id, &[]).unwrap();
    w.run_for(16 * 6144 * MS - 1);
    assert_eq!(w.a.cm.state(a_id), Some(State::DreqSent));
    w.run_for(1);
    let (t, e) = w.a.events.last().unwrap();
    assert_eq!(
        *e,
        Event::Disconnected {
            id: a_id,
            cause: DisconnectCause::DreqTimedOut,
            private_data: vec![]
        }
    );
    assert_eq!(t - t0, 16 * 6144 * MS);
    assert_eq!(w.a.cm.state(a_id), Some(State::Timewait));
    assert_eq!(w.sent_count(Who::A, AttributeId::DREQ), 16);
}

#[test]
fn every_message_three_times_raises_each_event_once() {
    for closer in [Who::A, Who::B] {
        let mut w = World::listening();
        w.fault = Box::new(|_, _, _| vec![LATENCY_NS, LATENCY_NS + 1, LATENCY_NS + 5 * MS]);
        let a_id = w.connect();
        w.run_for(1_000 * MS);
        let b_id = first_id(&w.b, is_request);
        let now = w.now;
        match closer {
            Who::A => w.a.cm.disconnect(now, a_id, &[]).unwrap(),
            Who::B => w.b.cm.disconnect(now, b_id, &[]).unwrap(),
        }
        w.run();
        for side in [&w.a, &w.b] {
            assert_eq!(side.count(is_established), 1);
            assert_eq!(side.count(is_disconnected), 1);
            assert_eq!(side.count(is_timewait_exit), 1);
            assert_eq!(side.events.len(), 4, "{:?}", side.events);
            assert!(side.cm.counters().rx_duplicates >= 2);
            assert_eq!(side.cm.id_count(), 0);
        }
    }
}

#[test]
fn sidr_survives_loss_and_duplicates() {
    let mut w = World::listening();
    w.fault = Box::new(|_, attr, k| match (attr, k) {
        (AttributeId::SIDR_REQ, 1) | (AttributeId::SIDR_REP, 1) => vec![],
        _ => vec![LATENCY_NS, LATENCY_NS + 1],
    });
    let params = uroce_cm::SidrParams::rdma_cm(w.b.peer(), SERVICE);
    let t0 = w.now;
    w.a.cm.sidr_request(t0, &params, &[]).unwrap();
    w.run();
    assert_eq!(w.a.count(|e| matches!(e, Event::SidrReply { .. })), 1);
    // The first SIDR_REQ lost, the second delivered twice; its first
    // SIDR_REP lost, the copy answering the duplicate arrives (twice).
    assert_eq!(w.sent_count(Who::A, AttributeId::SIDR_REQ), 2);
    assert_eq!(w.sent_count(Who::B, AttributeId::SIDR_REP), 2);
    assert_eq!(w.b.count(|e| matches!(e, Event::SidrRequest { .. })), 1);
    let reqs = w.sent_of(Who::A, AttributeId::SIDR_REQ);
    assert_eq!(reqs[1].0 - reqs[0].0, 4096 * MS);
    assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
    // Lose them all: SidrUnreachable after 16 × 4096 ms.
    let mut w = World::listening();
    w.fault = Box::new(|_, _, _| vec![]);
    let t0 = w.now;
    let id = w.a.cm.sidr_request(t0, &params, &[]).unwrap();
    w.run();
    let (t, e) = w.a.events.last().unwrap();
    assert_eq!(*e, Event::SidrUnreachable { id });
    assert_eq!(t - t0, 16 * 4096 * MS);
}
