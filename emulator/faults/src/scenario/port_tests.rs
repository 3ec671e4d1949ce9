//! The port: flows, ordinals, windows, every packet and link action, the
//! device actions handed out, the background faults' draws, the log.

use super::*;
use crate::injector::Injector;
use core::net::Ipv4Addr;
use proptest::prelude::*;
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::frame::FrameRepr;
use uroce_wire::roce::ExtHeaders;
use uroce_wire::{aeth, bth, reth, roce, Opcode, Psn, Rkey};

const ME: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
/// The local QP.
const LOCAL: u32 = 0x11;
/// The peer's QP.
const REMOTE: u32 = 0x22;
const MS: u64 = 1_000_000;

/// An IP packet `from` → `to`, to QP `dest`.
fn packet(opcode: Opcode, from: Ipv4Addr, to: Ipv4Addr, dest: u32, psn: u32) -> Vec<u8> {
    let info = opcode.info().expect("known opcode");
    let payload: &[u8] = if info.mask.contains(uroce_wire::Mask::PAYLOAD) { &[7; 8] } else { &[] };
    let mut ext = ExtHeaders::default();
    if info.mask.contains(uroce_wire::Mask::AETH) {
        ext.aeth = Some(aeth::Repr { syndrome: Syndrome::Ack { credit_code: 31 }, msn: 0 });
    }
    if info.mask.contains(uroce_wire::Mask::RETH) {
        ext.reth = Some(reth::Repr { va: 0x1000, rkey: Rkey(5), dma_len: 8 });
    }
    let bth = bth::Repr::new(opcode, Qpn::new(dest), Psn::new(psn), payload.len());
    let frame = FrameRepr::ipv4((from, to), 1, 0xc000, roce::Repr { bth, ext, payload }).unwrap();
    let mut buf = vec![0; frame.buffer_len()];
    frame.emit(&mut buf).unwrap();
    buf
}

/// A request this device receives (`Dir::In`).
fn req_in(opcode: Opcode, psn: u32) -> Vec<u8> {
    packet(opcode, PEER, ME, LOCAL, psn)
}

/// A request this device sends (`Dir::Out`, local QP `LOCAL`).
fn req_out(opcode: Opcode, psn: u32) -> Vec<u8> {
    packet(opcode, ME, PEER, REMOTE, psn)
}

/// An acknowledgement this device receives, with `syndrome`.
fn ack_in(psn: u32, syndrome: Syndrome) -> Vec<u8> {
    let mut p = packet(Opcode::RC_ACKNOWLEDGE, PEER, ME, LOCAL, psn);
    let at = p.len() - 4 - 4; // AETH before the ICRC
    p[at] = syndrome.to_u8();
    p
}

fn port_for(text: &str) -> Port {
    let s = Scenario::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    Port::new(&s, DeviceInfo { address: ME.into(), role: Some("server".into()) }, 1)
}

fn port_with(rules: &str) -> Port {
    port_for(&format!("[scenario]\nname = \"t\"\nsummary = \"s\"\n{rules}"))
}

fn port_of(name: &str) -> Port {
    let s = Scenario::load(name).unwrap();
    Port::new(&s, DeviceInfo { address: ME.into(), role: None }, s.seed)
}

fn on(port: &mut Port, now: u64, dir: Dir, p: &[u8]) -> PortVerdict {
    let local = (dir == Dir::Out).then_some(Qpn::new(LOCAL));
    port.on_packet(now, dir, local, p)
}

fn passes(v: &PortVerdict) -> bool {
    v.dropped.is_none() && !v.held && v.copies[0].is_some()
}

#[test]
fn lost_ack_drops_the_tenth_first_time_ack() {
    let mut port = port_of("lost-ack");
    let mut dropped = Vec::new();
    for psn in 0..15u32 {
        let v =
            on(&mut port, u64::from(psn), Dir::In, &ack_in(psn, Syndrome::Ack { credit_code: 31 }));
        if v.dropped.is_some() {
            dropped.push(psn);
        }
        // A repeated ACK (same PSN) is a retransmission: never counted.
        let again = on(&mut port, 0, Dir::In, &ack_in(psn, Syndrome::Ack { credit_code: 31 }));
        assert!(passes(&again));
        // NAKs are not ACKs.
        let nak = ack_in(psn, Syndrome::Nak(NakCode::PsnSequenceError));
        assert!(passes(&on(&mut port, 0, Dir::In, &nak)));
    }
    assert_eq!(dropped, [9]);
    let log: Vec<Firing> = port.take_firings().collect();
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0].to_string(),
        "rule lost-ack fired 1: drop on in RC_ACKNOWLEDGE QP 0x000011 PSN 0x000009 from 10.0.0.2 \
         (qp 1, psn+9, message 10)"
    );
    assert_eq!(port.take_firings().count(), 0, "drained");
    let summary = port.summary();
    assert_eq!(
        (summary.rules[0].matched, summary.rules[0].fired, summary.dropped_rule),
        (15, 1, 1)
    );
    assert!(summary
        .to_string()
        .starts_with("scenario lost-ack 10.0.0.1 rule lost-ack matched 15 fired 1\n"));
}

#[test]
fn syndrome_classes() {
    let mut port = port_with(
        "[[rule]]\nclass = \"rnr_nak\"\naction = \"drop\"\n[[rule]]\nclass = \"seq_nak\"\naction = \"drop\"\n\
         [[rule]]\nclass = \"nak\"\naction = \"delay\"\ndelay_us = 1\n[[rule]]\nclass = \"ack\"\naction = \"delay\"\ndelay_us = 2\n",
    );
    let rnr = on(&mut port, 0, Dir::In, &ack_in(1, Syndrome::RnrNak { timer_code: 3 }));
    assert_eq!(rnr.dropped, Some(DropCause::Rule));
    let seq = on(&mut port, 0, Dir::In, &ack_in(2, Syndrome::Nak(NakCode::PsnSequenceError)));
    assert_eq!(seq.dropped, Some(DropCause::Rule));
    let other = on(&mut port, 0, Dir::In, &ack_in(3, Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(other.copies[0].unwrap().delay_ns, 1_000);
    let ack = on(&mut port, 0, Dir::In, &ack_in(4, Syndrome::Ack { credit_code: 2 }));
    assert_eq!(ack.copies[0].unwrap().delay_ns, 2_000);
    // A READ response carries an AETH too, but is no ACK.
    let read = packet(Opcode::RC_RDMA_READ_RESPONSE_ONLY, PEER, ME, LOCAL, 5);
    assert!(on(&mut port, 0, Dir::In, &read).copies[0].unwrap().delay_ns == 0);
    let s = port.summary();
    let fired: Vec<u64> = s.rules.iter().map(|r| r.fired).collect();
    assert_eq!(fired, [1, 1, 3, 1]);
}

#[test]
fn partition_cuts_the_peer_both_ways_then_heals() {
    let mut port = port_of("partition-heals");
    for psn in 0..9u32 {
        assert!(passes(&on(
            &mut port,
            u64::from(psn) * MS,
            Dir::In,
            &req_in(Opcode::RC_SEND_ONLY, psn)
        )));
    }
    let t = 10 * MS;
    let v = on(&mut port, t, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 9));
    assert_eq!(v.dropped, Some(DropCause::Partition), "the packet meets the cut it made");
    assert!(v.fired);
    assert!(port.partitioned(t + 119 * MS, PEER.into()));
    let ack_out = packet(Opcode::RC_ACKNOWLEDGE, ME, PEER, REMOTE, 8);
    assert_eq!(on(&mut port, t + MS, Dir::Out, &ack_out).dropped, Some(DropCause::Partition));
    let to_other = packet(Opcode::RC_SEND_ONLY, ME, OTHER, REMOTE, 1);
    assert!(passes(&on(&mut port, t + MS, Dir::Out, &to_other)));
    let retry = on(&mut port, t + 119 * MS, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 9));
    assert_eq!(retry.dropped, Some(DropCause::Partition));
    let healed = on(&mut port, t + 120 * MS, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 9));
    assert!(passes(&healed));
    let log: Vec<String> = port.take_firings().map(|f| f.to_string()).collect();
    assert_eq!(
        log,
        ["rule cut fired 1: partition 120ms on in RC_SEND_ONLY QP 0x000011 PSN 0x000009 from 10.0.0.2 \
          (qp 1, psn+9, message 10)"]
    );
    assert_eq!(port.summary().dropped_partition, 3);
}

#[test]
fn message_counts_new_messages_and_nth_picks_the_first_packet() {
    let mut port = port_with(
        "[[rule]]\ndir = \"out\"\nmessage = 2\naction = \"delay\"\ndelay_us = 5\n\
         [[rule]]\ndir = \"out\"\nmessage = 2\nnth = 1\naction = \"drop\"\n",
    );
    let seq = [
        (Opcode::RC_SEND_ONLY, 0),
        (Opcode::RC_SEND_FIRST, 1),
        (Opcode::RC_SEND_MIDDLE, 2),
        (Opcode::RC_SEND_LAST, 3),
        (Opcode::RC_SEND_FIRST, 1), // retransmitted: no message ordinal
    ];
    let v: Vec<PortVerdict> =
        seq.iter().map(|&(op, psn)| on(&mut port, 0, Dir::Out, &req_out(op, psn))).collect();
    assert!(passes(&v[0]) && v[0].copies[0].unwrap().delay_ns == 0);
    assert_eq!(v[1].dropped, Some(DropCause::Rule));
    assert_eq!(v[2].copies[0].unwrap().delay_ns, 5_000);
    assert_eq!(v[3].copies[0].unwrap().delay_ns, 5_000);
    assert!(passes(&v[4]) && v[4].copies[0].unwrap().delay_ns == 0);
    assert_eq!(port.summary().rules[0].matched, 3);
}

#[test]
fn match_keys_narrow() {
    let mut port = port_with(
        "[[rule]]\nname = \"a\"\npeer = \"10.0.0.3\"\naction = \"drop\"\n\
         [[rule]]\nname = \"b\"\nopcode = \"RC_RDMA_WRITE_ONLY\"\naction = \"drop\"\n\
         [[rule]]\nname = \"c\"\nposition = \"middle\"\naction = \"drop\"\n\
         [[rule]]\nname = \"d\"\nqpn = 0x33\naction = \"drop\"\n\
         [[rule]]\nname = \"e\"\nqp = 2\naction = \"drop\"\n\
         [[rule]]\nname = \"f\"\ndir = \"in\"\npsn_offset = 4\naction = \"drop\"\n\
         [[rule]]\nname = \"g\"\nclass = \"read_request\"\nretransmit = true\naction = \"drop\"\n\
         [[rule]]\nname = \"h\"\nrole = \"client\"\naction = \"drop\"\n\
         [[rule]]\nname = \"i\"\ndevice = \"10.0.0.9\"\naction = \"drop\"\n",
    );
    let fired = |port: &mut Port, now, dir, p: &[u8]| -> Vec<String> {
        on(port, now, dir, p);
        port.take_firings().map(|f| f.rule_name).collect()
    };
    let none: Vec<String> = Vec::new();
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 100)), none);
    assert_eq!(
        fired(&mut port, 0, Dir::Out, &packet(Opcode::RC_SEND_ONLY, ME, OTHER, 5, 0)),
        ["a"]
    );
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_RDMA_WRITE_ONLY, 101)), ["b"]);
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_MIDDLE, 102)), ["c"]);
    assert_eq!(
        fired(&mut port, 0, Dir::In, &packet(Opcode::RC_SEND_ONLY, PEER, ME, 0x33, 0)),
        ["d", "e"]
    );
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 104)), ["f"]);
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_RDMA_READ_REQUEST, 105)), none);
    assert_eq!(fired(&mut port, 0, Dir::In, &req_in(Opcode::RC_RDMA_READ_REQUEST, 105)), ["g"]);
    let here: Vec<bool> = port.summary().rules.iter().map(|r| r.here).collect();
    assert_eq!(here, [true, true, true, true, true, true, true, false, false]);
    let summary = port.summary().to_string();
    assert!(summary.contains("rule h: not for this role (role client)"), "{summary}");
    assert!(summary.contains("rule i: not for this device (device 10.0.0.9)"), "{summary}");
}

#[test]
fn nth_times_and_chance() {
    let mut port = port_with(
        "[[rule]]\nnth = 3\ntimes = 2\naction = \"delay\"\ndelay_us = 1\n\
         [[rule]]\nnth = 2\ntimes = \"all\"\nchance = 0\naction = \"drop\"\n\
         [[rule]]\nchance = 1\naction = \"delay\"\ndelay_us = 10\n",
    );
    let delays: Vec<u64> = (0..6)
        .map(|psn| {
            on(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, psn)).copies[0]
                .unwrap()
                .delay_ns
        })
        .collect();
    assert_eq!(delays, [10_000, 10_000, 11_000, 11_000, 10_000, 10_000]);
    let s = port.summary();
    assert_eq!((s.rules[1].matched, s.rules[1].fired, s.rules[2].fired), (6, 0, 6));
}

#[test]
fn windows_bound_packet_rules() {
    let mut port = port_with("[[rule]]\nafter_ms = 10\nuntil_ms = 20\naction = \"drop\"\n");
    let at = |port: &mut Port, ms: u64| {
        on(port, ms * MS, Dir::In, &req_in(Opcode::RC_SEND_ONLY, ms as u32)).dropped
    };
    assert_eq!(
        [at(&mut port, 9), at(&mut port, 10), at(&mut port, 19), at(&mut port, 20)],
        [None, Some(DropCause::Rule), Some(DropCause::Rule), None]
    );
    assert_eq!(port.next_deadline(), None, "not a timed rule");
}

#[test]
fn duplicate_delay_and_corrupt() {
    let mut port = port_with(
        "[[rule]]\nnth = 1\naction = \"duplicate\"\ncopies = 2\ngap_us = 3000\n\
         [[rule]]\nnth = 2\naction = \"delay\"\ndelay_us = 250\n\
         [[rule]]\nnth = 3\naction = \"corrupt\"\nbit = 400\n\
         [[rule]]\nnth = 4\naction = \"corrupt\"\n",
    );
    let p = req_in(Opcode::RC_SEND_ONLY, 0);
    let dup = on(&mut port, 0, Dir::In, &p);
    assert_eq!((dup.extra, dup.extra_gap_ns, dup.copies[0].unwrap().delay_ns), (2, 3_000_000, 0));
    let delayed = on(&mut port, 0, Dir::In, &p);
    assert_eq!(delayed.copies[0].unwrap().delay_ns, 250_000);
    assert_eq!(delayed.extra, 0);
    assert_eq!(on(&mut port, 0, Dir::In, &p).copies[0].unwrap().flip_bit, Some(400));
    let drawn = on(&mut port, 0, Dir::In, &p).copies[0].unwrap().flip_bit.unwrap();
    // One the ICRC covers: past the IPv4 and UDP headers.
    assert!((28 * 8..p.len() * 8).contains(&drawn), "{drawn}");
    let s = port.summary();
    assert_eq!((s.duplicated, s.delayed, s.corrupted), (2, 1, 2));
}

#[test]
fn reorder_holds_until_later_packets_of_the_flow_pass() {
    let mut port = port_with(
        "[[rule]]\ndir = \"out\"\nclass = \"request\"\nposition = \"first\"\naction = \"reorder\"\nbehind = 2\nmax_hold_us = 500\n",
    );
    let first = req_out(Opcode::RC_SEND_FIRST, 0);
    let v = on(&mut port, 0, Dir::Out, &first);
    assert!(v.held && v.copies == [None, None] && v.dropped.is_none());
    assert_eq!(port.next_deadline(), Some(500_000));
    // Another flow (other QP) and the other direction do not count.
    let other_qp = packet(Opcode::RC_SEND_ONLY, ME, PEER, REMOTE, 7);
    assert!(passes(&port.on_packet(1, Dir::Out, Some(Qpn::new(0x99)), &other_qp)));
    assert!(passes(&on(&mut port, 1, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 7))));
    assert_eq!(port.take_released(1), None);
    assert!(passes(&on(&mut port, 2, Dir::Out, &req_out(Opcode::RC_SEND_MIDDLE, 1))));
    assert_eq!(port.take_released(2), None);
    assert!(passes(&on(&mut port, 3, Dir::Out, &req_out(Opcode::RC_SEND_LAST, 2))));
    let held = port.take_released(3).expect("two passed it");
    assert_eq!(
        (held.dir, held.local_qpn, held.packet.as_slice()),
        (Dir::Out, Some(Qpn::new(LOCAL)), &first[..])
    );
    assert!(held.copies[0].is_some());
    assert_eq!(port.next_deadline(), None);
    // Alone, it leaves at max_hold_us.
    assert!(on(&mut port, 10, Dir::Out, &req_out(Opcode::RC_SEND_FIRST, 3)).held);
    assert_eq!(port.take_released(500_009), None);
    assert!(port.take_released(500_010).is_some());
    assert_eq!(port.summary().reordered, 2);
}

#[test]
fn reorder_hold_is_bounded() {
    let mut port = port_with("[[rule]]\naction = \"reorder\"\nbehind = 64\n");
    for psn in 0..(MAX_HELD as u32 + 3) {
        on(&mut port, 0, Dir::Out, &req_out(Opcode::RC_SEND_ONLY, psn));
    }
    let notes = port.take_firings().filter(|f| f.note.is_some()).count();
    assert_eq!((port.summary().reordered, notes), (MAX_HELD as u64, 3));
}

#[test]
fn link_down_then_up() {
    let mut port = port_with(
        "[[rule]]\nname = \"down\"\ndir = \"in\"\nmessage = 2\naction = \"link_down\"\n\
         [[rule]]\nname = \"up\"\ndir = \"in\"\nmessage = 4\naction = \"link_up\"\n",
    );
    let d: Vec<Option<DropCause>> = (0..5)
        .map(|psn| on(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, psn)).dropped)
        .collect();
    let down = Some(DropCause::LinkDown);
    assert_eq!(d, [None, down, down, None, None]);
    // Non-RoCE packets (ARP, other UDP) are not the port's to drop.
    let mut q = port_with("[[rule]]\nnth = 1\naction = \"link_down\"\nfor_ms = 1\n");
    assert_eq!(on(&mut q, 0, Dir::Out, &req_out(Opcode::RC_SEND_ONLY, 0)).dropped, down);
    assert!(q.link_down(MS - 1) && !q.link_down(MS));
    assert!(passes(&on(&mut q, 5, Dir::Out, &[0x45, 0, 0])));
    assert_eq!(on(&mut q, 5, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 1)).dropped, down);
    assert!(passes(&on(&mut q, MS, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 2))));
}

#[test]
fn timed_rules_fire_once_at_their_time() {
    let mut port = port_with(
        "[[rule]]\nname = \"cut\"\nafter_ms = 5\naction = \"link_down\"\nfor_ms = 10\n\
         [[rule]]\nname = \"boom\"\nafter_ms = 30\naction = \"crash\"\nexit = false\n\
         [[rule]]\nname = \"split\"\nafter_ms = 7\npeer = \"10.0.0.2\"\naction = \"partition\"\nfor_ms = 1\n",
    );
    assert_eq!(port.next_deadline(), Some(5 * MS));
    assert_eq!(port.poll_timed(5 * MS - 1), None);
    let t = port.poll_timed(5 * MS).unwrap();
    assert_eq!(t.rule, 0);
    assert_eq!(port.poll_timed(6 * MS), None, "once");
    assert!(port.link_down(14 * MS) && !port.link_down(15 * MS));
    assert_eq!(port.next_deadline(), Some(30 * MS));
    assert_eq!(port.poll_device_action(), None);
    assert_eq!(port.poll_timed(40 * MS).map(|t| t.rule), Some(1));
    let crash = port.poll_device_action().unwrap();
    assert_eq!(
        crash,
        DeviceAction {
            kind: DeviceActionKind::Crash,
            qpn: None,
            count: 1,
            for_ns: 0,
            exit: false,
            at_ns: 40 * MS,
            rule: 1
        }
    );
    assert_eq!(port.next_deadline(), None);
    // The partition with a peer matches packets: not timed.
    let p = on(&mut port, 20 * MS, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 0));
    assert_eq!(p.dropped, Some(DropCause::Partition));
    let log: Vec<String> = port.take_firings().map(|f| f.to_string()).collect();
    assert_eq!(log[0], "rule cut fired 1: link_down 10ms at 5ms");
    assert_eq!(log[1], "rule boom fired 1: crash at 40ms");
}

#[test]
fn device_actions_are_handed_out_with_their_qp() {
    let mut port = port_of("rnr-retry");
    for psn in 0..12 {
        let v = on(&mut port, u64::from(psn), Dir::In, &req_in(Opcode::RC_SEND_ONLY, psn));
        assert!(passes(&v), "a device action leaves the packet to the device");
        if psn == 9 {
            let a = port.poll_device_action().expect("the 10th message");
            assert_eq!(
                (a.kind, a.qpn, a.count, a.rule, a.at_ns),
                (DeviceActionKind::Rnr, Some(Qpn::new(LOCAL)), 3, 0, 9)
            );
        }
        assert_eq!(port.poll_device_action(), None);
    }
    // Targets: a QP ordinal resolves to the QP first seen k-th; unknown
    // ones are logged and not applied.
    let mut port = port_with(
        "[[rule]]\nnth = 2\naction = \"fail_key\"\ntarget = 1\n\
         [[rule]]\nnth = 2\naction = \"dma_fault\"\ntarget = 3\n\
         [[rule]]\nnth = 2\naction = \"stall\"\nfor_ms = 4\ntarget = \"all\"\n",
    );
    on(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, 0));
    on(&mut port, 0, Dir::In, &packet(Opcode::RC_SEND_ONLY, PEER, ME, 0x44, 0));
    let a = port.poll_device_action().unwrap();
    assert_eq!((a.kind, a.qpn), (DeviceActionKind::FailKey, Some(Qpn::new(LOCAL))));
    let b = port.poll_device_action().unwrap();
    assert_eq!((b.kind, b.qpn, b.for_ns), (DeviceActionKind::Stall, None, 4 * MS));
    assert_eq!(port.poll_device_action(), None);
    let notes: Vec<Option<&str>> = port.take_firings().map(|f| f.note).collect();
    assert_eq!(notes, [None, Some("target QP not seen yet: not applied"), None]);
    assert_eq!(port.summary().device_actions, 2);
}

/// Background faults: the same draws per packet with and without rules,
/// and the same as the runtime's `Injector` alone.
#[test]
fn background_draws_do_not_move_with_rules() {
    let faults = "faults = \"loss=0.2,dup=0.2,reorder=0.2,corrupt=0.2,delay_us=10,seed=9\"\n";
    let head = format!("[scenario]\nname = \"t\"\nsummary = \"s\"\n{faults}");
    let bare = Scenario::parse(&head, "t").unwrap();
    let ruled = Scenario::parse(
        &format!(
            "{head}[[rule]]\nnth = 3\ntimes = \"all\"\nchance = 0.5\naction = \"drop\"\n\
             [[rule]]\naction = \"corrupt\"\n[[rule]]\nnth = 40\naction = \"link_down\"\nfor_ms = 1\n\
             [[rule]]\naction = \"reorder\"\n"
        ),
        "t",
    )
    .unwrap();
    let me = DeviceInfo { address: ME.into(), role: None };
    let mut a = Port::new(&bare, me.clone(), 5);
    let mut b = Port::new(&ruled, me, 5);
    let mut injector = Injector::new(
        FaultSpec::parse("loss=0.2,dup=0.2,reorder=0.2,corrupt=0.2,delay_us=10,seed=9").unwrap(),
    );
    let mut differ = 0;
    for psn in 0..2_000u32 {
        let p = req_out(Opcode::RC_SEND_ONLY, psn);
        let now = u64::from(psn) * 1_000;
        let va = on(&mut a, now, Dir::Out, &p);
        let vb = on(&mut b, now, Dir::Out, &p);
        let alone = injector.apply(&p);
        assert_eq!(va.background, Some(alone));
        assert_eq!(vb.background, Some(alone));
        assert_eq!(va.copies, if alone.lost() { [None, None] } else { alone.copies });
        differ += usize::from(va.copies != vb.copies);
        // Ingress: no background draws.
        assert_eq!(on(&mut a, now, Dir::In, &req_in(Opcode::RC_SEND_ONLY, psn)).background, None);
    }
    assert!(differ > 1_000, "the rules did act ({differ})");
    let s = a.summary();
    assert!((300..500).contains(&s.dropped_background), "{}", s.dropped_background);
}

#[test]
fn seeds_and_addresses_pick_the_draws() {
    let s = Scenario::parse(
        "[scenario]\nname = \"t\"\nsummary = \"s\"\n[[rule]]\nchance = 0.5\naction = \"drop\"\n",
        "t",
    )
    .unwrap();
    let run = |address: Ipv4Addr, seed: u64| -> Vec<bool> {
        let mut port = Port::new(&s, DeviceInfo { address: address.into(), role: None }, seed);
        (0..64)
            .map(|psn| {
                on(&mut port, 0, Dir::In, &req_in(Opcode::RC_SEND_ONLY, psn)).dropped.is_some()
            })
            .collect()
    };
    assert_eq!(run(ME, 1), run(ME, 1));
    assert_ne!(run(ME, 1), run(ME, 2));
    assert_ne!(run(ME, 1), run(PEER, 1));
}

/// A scenario with every kind of draw and state, for the property tests.
const BUSY: &str = r#"
[scenario]
name = "busy"
summary = "every action"
faults = "loss=0.05,dup=0.05,reorder=0.05,corrupt=0.05,seed=4"
[[rule]]
class = "ack"
chance = 0.3
action = "drop"
[[rule]]
dir = "out"
position = "first"
action = "reorder"
behind = 2
max_hold_us = 50
[[rule]]
chance = 0.1
action = "corrupt"
[[rule]]
message = 5
action = "partition"
for_ms = 1
[[rule]]
nth = 30
times = 3
action = "duplicate"
copies = 2
gap_us = 7
[[rule]]
psn_offset = 17
action = "rnr"
count = 2
[[rule]]
after_ms = 2
action = "link_down"
for_ms = 1
"#;

fn arb_step() -> impl Strategy<Value = (u64, bool, u8, u32, u8)> {
    (0u64..200_000, any::<bool>(), 0u8..6, 0u32..64, 0u8..3)
}

fn build(kind: u8, out: bool, psn: u32, qp: u8) -> Vec<u8> {
    let opcode = [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_RDMA_READ_REQUEST,
    ][usize::from(kind)];
    let qpn = 0x10 + u32::from(qp);
    if out {
        packet(opcode, ME, PEER, qpn + 0x100, psn)
    } else {
        packet(opcode, PEER, ME, qpn, psn)
    }
}

/// Everything a port says about a run.
fn run_all(
    steps: &[(u64, bool, u8, u32, u8)],
) -> (Vec<PortVerdict>, Vec<Firing>, Vec<Held>, Vec<DeviceAction>, PortSummary) {
    let s = Scenario::parse(BUSY, "busy").unwrap();
    let mut port = Port::new(&s, DeviceInfo { address: ME.into(), role: None }, 11);
    let (mut verdicts, mut log, mut held, mut device) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut now = 0;
    for &(dt, out, kind, psn, qp) in steps {
        now += dt;
        while port.poll_timed(now).is_some() {}
        let dir = if out { Dir::Out } else { Dir::In };
        let p = build(kind, out, psn, qp);
        verdicts.push(port.on_packet(now, dir, Some(Qpn::new(0x10 + u32::from(qp))), &p));
        held.extend(core::iter::from_fn(|| port.take_released(now)));
        device.extend(core::iter::from_fn(|| port.poll_device_action()));
        log.extend(port.take_firings());
    }
    (verdicts, log, held, device, port.summary())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Same seed, same packets, same times: same verdicts, log, releases,
    /// device actions and summary.
    #[test]
    fn same_seed_same_packets_same_everything(steps in proptest::collection::vec(arb_step(), 0..200)) {
        let a = run_all(&steps);
        let b = run_all(&steps);
        prop_assert_eq!(&a.0, &b.0);
        prop_assert_eq!(&a.1, &b.1);
        prop_assert_eq!(&a.2, &b.2);
        prop_assert_eq!(&a.3, &b.3);
        prop_assert_eq!(&a.4, &b.4);
        prop_assert_eq!(a.4.packets_in + a.4.packets_out, steps.len() as u64);
    }

    /// Whatever the bytes: a verdict, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), out in any::<bool>(), now in any::<u64>()) {
        let s = Scenario::parse(BUSY, "busy").unwrap();
        let mut port = Port::new(&s, DeviceInfo { address: ME.into(), role: None }, 0);
        let dir = if out { Dir::Out } else { Dir::In };
        port.on_packet(now, dir, None, &bytes);
        let _ = port.poll_timed(now);
        let _ = port.take_released(now);
        let _ = port.next_deadline();
    }
}
