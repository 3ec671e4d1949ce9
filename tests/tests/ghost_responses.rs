//! A response that acknowledges PSNs but places nothing: a malformed
//! peer's ATOMIC ACKNOWLEDGE or READ response at the PSN of a WQE of
//! another kind. Its AETH still acknowledges everything before it, and a
//! requester held by its window goes on at once, rather than when the next
//! real ACK or its retransmit timer comes. Packets are carried by hand.

use std::sync::Arc;
use uroce::world::WorldBuilder;
use uroce_device::mem::{DriverMemory, SimMemory};
use uroce_device::types::{SendFlags, WrOpcode};
use uroce_hca::config::HcaConfig;
use uroce_hca::Endpoint;
use uroce_sim::FabricConfig;
use uroce_tests::world::{cap, qpn, tuning, World, ALL_ACCESS};
use uroce_verbs::{RecvWr, SendWr};
use uroce_wire::aeth::{self, Syndrome};
use uroce_wire::frame::FrameRepr;
use uroce_wire::{atomic_ack_eth, bth, roce, Opcode};

#[test]
fn an_atomic_ack_at_a_sends_psn_acknowledges_what_is_before_it_and_frees_the_window() {
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr {
            syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
            msn: 1,
        }),
        atomic_ack_eth: Some(atomic_ack_eth::Repr { orig: 0xdead_beef }),
        ..roce::ExtHeaders::default()
    };
    answer_the_second_send_with(Opcode::RC_ATOMIC_ACKNOWLEDGE, ext, &[]);
}

#[test]
fn a_read_response_at_a_sends_psn_acknowledges_what_is_before_it_and_frees_the_window() {
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr {
            syndrome: Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS),
            msn: 1,
        }),
        ..roce::ExtHeaders::default()
    };
    answer_the_second_send_with(Opcode::RC_RDMA_READ_RESPONSE_ONLY, ext, &[0xee; 64]);
}

/// Three SENDs through a window of two PSNs; the second is answered with
/// a forged `opcode` response (AETH: ACK), which must acknowledge the
/// first, place nothing, and let the third leave at once.
fn answer_the_second_send_with(opcode: Opcode, ext: roce::ExtHeaders, payload: &[u8]) {
    // A window of two PSNs: the third SEND waits for an acknowledgement.
    let config = HcaConfig { max_unacked_psns: 2, ..HcaConfig::default() };
    let memory = |_| Arc::new(SimMemory::strict(1 << 30)) as Arc<dyn DriverMemory>;
    let builder = WorldBuilder::new(2, FabricConfig::new(13)).hca_config(config).memory(memory);
    let w = World::from_builder(builder);
    let (a, b) = w.rc_pair(cap(16, 1, 0), cap(16, 1, 0), &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    for i in 0..3 {
        b.post_recv(&[RecvWr { wr_id: i, sg_list: vec![mr_b.sge(64 * i, 64)] }]).unwrap();
    }
    let sends: Vec<SendWr> = (0..3)
        .map(|i| {
            let mut wr = SendWr::new(i, WrOpcode::Send);
            wr.sg_list = vec![mr_a.sge(0, 64)];
            wr.flags = SendFlags::SIGNALED;
            wr
        })
        .collect();
    a.post_send(&sends).unwrap();
    let now = w.now();
    let mut buf = vec![0u8; 9000];
    let mut hca = w.nodes[0].hca.lock();
    let first_psn = hca.qp(qpn(&a)).unwrap().comp.psn;
    // Two SENDs leave (held here, never delivered); the window is full.
    assert!(hca.poll_transmit(now, &mut buf).is_some());
    assert!(hca.poll_transmit(now, &mut buf).is_some());
    assert!(hca.poll_transmit(now, &mut buf).is_none(), "the window holds the third");

    // The malformed answer, at the second SEND's PSN.
    let second = first_psn + 1;
    let bth = bth::Repr::new(opcode, a.qpn(), second, payload.len());
    let repr = roce::Repr { bth, ext, payload };
    let (from, to) = (w.nodes[1].ip, w.nodes[0].ip);
    let frame = FrameRepr::ipv4((from, to), 0, 0xc000, repr).expect("frame");
    let mut bytes = vec![0; frame.buffer_len()];
    frame.emit(&mut bytes).expect("emit");
    let ghosts_before = hca.counters().rcvd_ghost_response;
    hca.receive(now, &bytes);

    // The first SEND is acknowledged; nothing is placed for the second.
    assert_eq!(hca.qp(qpn(&a)).unwrap().comp.psn, second, "acknowledged up to the first");
    assert_eq!(hca.counters().rcvd_ghost_response, ghosts_before + 1);
    // The window has room: the third SEND leaves now.
    let third = hca.poll_transmit(now, &mut buf).expect("the third SEND, at once");
    let packet = roce::Packet::new_checked(&buf[28..third.len]).expect("a RoCE packet");
    assert_eq!(packet.bth().psn(), first_psn + 2);
    assert_eq!(packet.bth().opcode(), Opcode::RC_SEND_ONLY);
}
