//! Properties: random loss, duplication and reordering still end both
//! sides in the same place, with each event once; no bytes make the engine
//! panic, and every received MAD is counted exactly once.

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use uroce_cm::{Counters, Event, Peer, SidrParams, State};
use uroce_wire::mad::{self, AttributeId, TransactionId, MAD_LEN};

/// xorshift64*: the network's dice, seeded by the test case.
fn dice(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn faulty(seed: u64, loss_pct: u64, dup_pct: u64, jitter_ms: u64) -> Fault {
    let mut roll = dice(seed);
    Box::new(move |_, _, _| {
        if roll() % 100 < loss_pct {
            return vec![];
        }
        let copies = 1 + u64::from(roll() % 100 < dup_pct);
        (0..copies).map(|_| LATENCY_NS + roll() % (jitter_ms * MS + 1)).collect()
    })
}

/// Every event kind at most once per CM ID.
fn each_event_once(side: &Side) {
    let mut seen = BTreeMap::new();
    for (_, e) in &side.events {
        let key = (e.id().0 .0, format!("{:?}", std::mem::discriminant(e)));
        *seen.entry(key).or_insert(0) += 1;
    }
    for (key, n) in seen {
        assert_eq!(n, 1, "{key:?} {:?}", side.events);
    }
}

fn classified(c: &Counters) -> u64 {
    c.rx_accepted
        + c.rx_duplicates
        + c.drop_malformed
        + c.drop_unsupported
        + c.drop_unknown_id
        + c.drop_wrong_peer
        + c.drop_wrong_state
        + c.drop_wrong_qpn
        + c.rej_no_listener
        + c.rej_stale
        + c.rej_transport
        + c.rej_no_resources
        + c.sidr_no_listener
        + c.drep_unknown
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn faults_end_in_a_consistent_state(
        seed in any::<u64>(),
        loss_pct in 0u64..=25,
        dup_pct in 0u64..=30,
        jitter_ms in 0u64..=20,
        passive_closes in any::<bool>(),
    ) {
        let mut w = World::listening();
        w.fault = faulty(seed, loss_pct, dup_pct, jitter_ms);
        let a_id = w.connect();
        w.run();
        let a_est = w.a.cm.state(a_id) == Some(State::Established);
        let b_est: Vec<_> = w.b.events.iter().filter(|(_, e)| is_established(e)).map(|(_, e)| e.id()).collect();
        if a_est {
            // B established exactly the connection A did.
            prop_assert_eq!(b_est.len(), 1);
            let b_id = b_est[0];
            prop_assert_eq!(w.b.cm.state(b_id), Some(State::Established));
            prop_assert_eq!(w.b.cm.remote_comm_id(b_id), Some(a_id.0));
            prop_assert_eq!(w.a.cm.remote_comm_id(a_id), Some(b_id.0));
            let now = w.now;
            if passive_closes {
                w.b.cm.disconnect(now, b_id, &[]).unwrap();
            } else {
                w.a.cm.disconnect(now, a_id, &[]).unwrap();
            }
            w.run();
            prop_assert_eq!(w.a.count(is_disconnected), 1);
            prop_assert_eq!(w.b.count(is_disconnected), 1);
        } else {
            // Both failed: A was told, B never established anything.
            prop_assert!(b_est.is_empty(), "{:?}", w.b.events);
            prop_assert!(matches!(w.a.last(), Some(Event::Unreachable { .. })), "{:?}", w.a.events);
        }
        prop_assert!(w.is_quiet());
        prop_assert_eq!(w.a.cm.id_count(), 0);
        prop_assert_eq!(w.b.cm.id_count(), 0);
        each_event_once(&w.a);
        each_event_once(&w.b);
        for side in [&w.a, &w.b] {
            prop_assert_eq!(classified(side.cm.counters()), side.cm.counters().rx_mads);
        }
    }

    #[test]
    fn sidr_ends_once_under_faults(
        seed in any::<u64>(),
        loss_pct in 0u64..=40,
        dup_pct in 0u64..=30,
        jitter_ms in 0u64..=20,
    ) {
        let mut w = World::listening();
        w.fault = faulty(seed, loss_pct, dup_pct, jitter_ms);
        let params = SidrParams::rdma_cm(w.b.peer(), SERVICE);
        let now = w.now;
        let id = w.a.cm.sidr_request(now, &params, &[]).unwrap();
        w.run();
        let ends = w.a.count(|e| matches!(e, Event::SidrReply { .. } | Event::SidrUnreachable { .. }));
        prop_assert_eq!(ends, 1);
        prop_assert_eq!(w.a.events[0].1.id(), id);
        prop_assert!(w.is_quiet());
        prop_assert_eq!((w.a.cm.id_count(), w.b.cm.id_count()), (0, 0));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        inputs in prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..300), any::<bool>(), 0u16..0x20, any::<bool>()),
            1..40,
        ),
    ) {
        let (mut w, _, _) = established();
        let a_id = first_id(&w.a, is_reply);
        let now = w.now;
        w.a.cm.disconnect(now, a_id, &[]).unwrap();
        let mut sidr = SidrParams::rdma_cm(w.a.peer(), SERVICE);
        sidr.peer = w.a.peer();
        let now = w.now;
        w.b.cm.sidr_request(now, &sidr, &[]).unwrap();
        for (bytes, cm_header, attr, evil) in inputs {
            let mut mad = bytes;
            if cm_header {
                // A CM header in front, so that the message parsers and the
                // state machines (not just the header check) see the bytes.
                mad.resize(MAD_LEN, 0);
                let header = mad::Repr::cm(TransactionId(7), AttributeId(0x10 + attr % 0x0b));
                header.emit(&mut mad::Packet::new_unchecked(&mut mad[..]));
            }
            let gid = if evil { EVIL_GID } else { A_GID };
            w.now += MS;
            let now = w.now;
            w.b.cm.receive(now, Peer { gid, pkey_index: 0 }, &mad);
            w.b.cm.handle_timeout(now);
            while w.b.cm.poll_transmit().is_some() {}
            while w.b.cm.poll_event().is_some() {}
        }
        let c = *w.b.cm.counters();
        prop_assert_eq!(classified(&c), c.rx_mads);
        w.run();
    }
}

/// The same seeds give the same run: every MAD byte and every event.
#[test]
fn runs_are_deterministic() {
    let transcript = |seed: u64| {
        let mut w = World::listening();
        w.fault = faulty(seed, 20, 20, 10);
        let a_id = w.connect();
        w.run();
        if w.a.cm.state(a_id) == Some(State::Established) {
            let now = w.now;
            w.a.cm.disconnect(now, a_id, b"x").unwrap();
            w.run();
        }
        let sent: Vec<_> =
            w.sent.iter().map(|(t, who, _, m)| (*t, *who == Who::A, m.to_vec())).collect();
        let events: Vec<_> =
            w.a.events.iter().chain(&w.b.events).map(|(t, e)| (*t, format!("{e:?}"))).collect();
        (sent, events)
    };
    for seed in [1, 2, 3, 0xdead_beef] {
        assert_eq!(transcript(seed), transcript(seed));
    }
    assert_ne!(transcript(1), transcript(2));
}
