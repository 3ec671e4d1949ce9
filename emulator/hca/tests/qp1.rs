//! QP1 on one HCA, packet by packet: Linux's REQ from
//! `tests/golden/rping.pcap` (frame 20, the whole IP packet, not one byte
//! rewritten) reaches the CM as a connect request, and the REP the HCA
//! sends is Linux's REP (frame 21) in every header byte but those that
//! legitimately differ; the CM commands refuse CM IDs they do not know;
//! and packets to QP1 that are not MADs are dropped and counted, never a
//! panic.

use core::net::{IpAddr, Ipv4Addr};
use proptest::prelude::*;
use std::sync::Arc;
use uroce_device::cm::{
    CmAcceptParams, CmConnectParams, CmEvent, CmEventKind, CmSidrParams, CmTimedOut, CM_MESSAGE_LEN,
};
use uroce_device::command::{CmdError, Command, Gid, Reply};
use uroce_device::mem::SimMemory;
use uroce_hca::config::HcaConfig;
use uroce_hca::endpoint::MAX_PACKET_LEN;
use uroce_hca::{Endpoint, Hca, Instant};
use uroce_wire::frame::{classify, Classified, FrameRepr, Link};
use uroce_wire::mad::{self, rep, req, CmMessage, CommId, TransactionId};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::roce::{self, ExtHeaders};
use uroce_wire::{bth, deth, immdt, Opcode, Psn, Qkey, Qpn};

const RPING: &[u8] = include_bytes!("../../../tests/golden/rping.pcap");
const CLIENT: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
const TID: TransactionId = TransactionId(0x0000_0002_ca32_448f);
const CLIENT_COMM_ID: CommId = CommId(0x8f44_32ca);
/// rping's service ID: the TCP port space, port 7174.
const RPING_SERVICE: u64 = 0x0000_0000_0106_1c06;

/// The IP packet (Ethernet header stripped) of frame `number`.
fn ip_packet_of_frame(number: usize) -> Vec<u8> {
    let frame = CaptureReader::new(RPING)
        .unwrap()
        .map(Result::unwrap)
        .find(|f| f.number == number)
        .unwrap();
    assert_eq!(frame.link, Some(Link::Ethernet));
    let Classified::Roce(roce) = classify(frame.data, Link::Ethernet) else { panic!("not RoCE") };
    assert!(roce.ethernet.as_ref().is_some_and(|e| e.vlan_count == 0));
    let ip = &frame.data[14..];
    ip[..ip.len() - roce.trailer.len()].to_vec()
}

/// The server as rxe was: the link-local GID of MAC 52:54:00:00:00:01 at
/// index 0 (the node GUID comes from it), 169.254.0.1 at index 1.
fn server() -> Hca {
    let gids = vec![Gid::link_local_from_mac([0x52, 0x54, 0, 0, 0, 1]), Gid::from(SERVER)];
    Hca::new(HcaConfig::default(), gids, Arc::new(SimMemory::new(1 << 20))).unwrap()
}

fn at_ms(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn poll_event(hca: &mut Hca) -> Option<CmEvent> {
    match hca.command(hca.now(), Command::CmPollEvent) {
        Ok(Reply::CmEvent(event)) => event,
        other => panic!("CmPollEvent: {other:?}"),
    }
}

fn transmit(hca: &mut Hca, now: Instant) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = hca.poll_transmit(now, &mut buf)?;
    buf.truncate(t.len);
    Some(buf)
}

#[test]
fn golden_req_is_a_connect_request_and_the_rep_is_linuxs() {
    let mut hca = server();
    hca.trace_steps(16);
    let now = at_ms(5_000);
    hca.command(now, Command::CmListen { service_id: RPING_SERVICE }).unwrap();
    let frame_20 = ip_packet_of_frame(20);
    hca.receive(now, &frame_20);
    let step = hca.poll_step().map(|(_, s)| s.to_string());
    assert_eq!(step.as_deref(), Some("QP 0x000001: received CM REQ from 169.254.0.2"));
    let c = hca.counters();
    assert_eq!((c.rcvd_pkts, c.rcvd_mads, c.rcvd_gsi_drop), (1, 1, 0));
    assert_eq!(hca.cm_counters().rx_accepted, 1);

    let Some(CmEvent { id, kind: CmEventKind::ConnectRequest { peer, pkey_index, req } }) =
        poll_event(&mut hca)
    else {
        panic!("no connect request")
    };
    assert_eq!((peer, pkey_index), (Gid::from(CLIENT), 0));
    assert_eq!(req.len(), CM_MESSAGE_LEN);
    // The event carries the REQ's class data as it came (after IPv4, UDP,
    // BTH, DETH and the MAD's common header).
    let class_data_at = 20 + 8 + 12 + 8 + mad::HEADER_LEN;
    assert_eq!(&frame_20[class_data_at..class_data_at + CM_MESSAGE_LEN], &req[..]);
    let req = req::Repr::parse(&req::Packet::new_checked(&req[..]).unwrap()).unwrap();
    assert_eq!(req.local_comm_id, CLIENT_COMM_ID);
    assert_eq!(req.local_qpn, Qpn::new(0x11));
    assert!(transmit(&mut hca, now).is_none());

    // Accept with the QPN and first PSN Linux's server used.
    let accept = CmAcceptParams::new(Qpn::new(0x11), 0x2f0a44);
    hca.command(now, Command::CmAccept { id, params: accept, private_data: vec![] }).unwrap();
    assert!(hca.has_transmit_ready());
    let ours = transmit(&mut hca, now).expect("the REP");
    let step = hca.poll_step().map(|(_, s)| s.to_string());
    assert_eq!(step.as_deref(), Some("QP 0x000001: sent CM REP to 169.254.0.2"));
    assert!(transmit(&mut hca, now).is_none());
    let linux = ip_packet_of_frame(21);
    assert_eq!(ours.len(), linux.len());

    // Ours parses: a UD SEND_ONLY from QP1 to QP1, the REP answering the
    // REQ's comm ID and TID.
    let Classified::Roce(frame) = classify(&ours, Link::RawIp) else { panic!("not RoCE") };
    assert!(frame.integrity_ok());
    assert_eq!(frame.ip.source(), IpAddr::V4(SERVER));
    assert_eq!(frame.ip.destination(), IpAddr::V4(CLIENT));
    let packet = frame.packet().unwrap();
    assert_eq!(packet.bth().opcode(), Opcode::UD_SEND_ONLY);
    assert_eq!(packet.bth().dest_qpn(), Qpn::GSI);
    assert_eq!(packet.bth().psn(), Psn::new(0));
    assert!(packet.bth().ack_req());
    assert_eq!(packet.deth().unwrap().qkey(), deth::GSI_QKEY);
    assert_eq!(packet.deth().unwrap().src_qpn(), Qpn::GSI);
    let mad_packet = mad::Packet::new_checked(packet.payload()).unwrap();
    assert_eq!(mad::Repr::parse(&mad_packet).unwrap().transaction_id, TID);
    let CmMessage::Rep(rep) = CmMessage::parse(&mad_packet).unwrap() else { panic!("not a REP") };
    assert_eq!(rep.remote_comm_id, CLIENT_COMM_ID);
    assert_eq!(rep.local_comm_id, CommId(id));
    let _: rep::Repr = rep;

    // Byte for byte Linux's packet but: the IPv4 identification and so the
    // header checksum (the kernel's counter, ours), the REP's local comm ID
    // (each side draws its own), and so the ICRC.
    let mut expected = linux.clone();
    expected[4..6].copy_from_slice(&ours[4..6]); // IPv4 ID
    expected[10..12].copy_from_slice(&ours[10..12]); // IPv4 header checksum
    expected[class_data_at..class_data_at + 4].copy_from_slice(&id.to_be_bytes());
    let icrc_at = expected.len() - 4;
    expected[icrc_at..].copy_from_slice(&ours[icrc_at..]);
    assert_eq!(ours, expected);
    // Headers alone: IP (but ID and checksum), UDP (source port 0xd872, rxe's
    // port for QP1, and checksum 0), BTH and DETH are Linux's exactly.
    assert_eq!(&ours[20..48], &linux[20..48]);
    assert_eq!(u16::from_be_bytes([ours[20], ours[21]]), 0xd872);

    let c = hca.counters();
    assert_eq!((c.sent_pkts, c.sent_mads), (1, 1));
    // Nothing answers: the REP is sent again after the REQ's CM response
    // timeout, 2^(20-8) ms, with the next PSN of QP1.
    assert_eq!(hca.poll_timeout(), Some(at_ms(5_000 + 4_096)));
    hca.handle_timeout(at_ms(5_000 + 4_096));
    let again = transmit(&mut hca, at_ms(5_000 + 4_096)).expect("the REP again");
    let Classified::Roce(frame) = classify(&again, Link::RawIp) else { panic!("not RoCE") };
    assert_eq!(frame.packet().unwrap().bth().psn(), Psn::new(1));
    assert_eq!(frame.packet().unwrap().payload(), packet.payload());
}

#[test]
fn cm_commands_refuse_unknown_ids_and_bad_parameters() {
    let mut hca = server();
    let now = Instant::ZERO;
    let unknown = 0x1234_5678;
    let not_found = |r: Result<Reply, CmdError>| matches!(r, Err(CmdError::NotFound(_)));
    let accept = CmAcceptParams::new(Qpn::new(17), 0);
    for command in [
        Command::CmAccept { id: unknown, params: accept, private_data: vec![] },
        Command::CmReject { id: unknown, reason: 28, private_data: vec![] },
        Command::CmReadyToUse { id: unknown, private_data: vec![] },
        Command::CmMra { id: unknown, service_timeout: 20 },
        Command::CmEstablished { id: unknown },
        Command::CmDisconnect { id: unknown, private_data: vec![] },
        Command::CmDestroy { id: unknown },
        Command::CmUnlisten { service_id: 7 },
    ] {
        assert!(not_found(hca.command(now, command.clone())), "{command:?}");
    }
    hca.command(now, Command::CmListen { service_id: 7 }).unwrap();
    assert!(matches!(
        hca.command(now, Command::CmListen { service_id: 7 }),
        Err(CmdError::Busy(_))
    ));
    let remote = Gid::from(CLIENT);
    let connect = CmConnectParams::rdma_cm(1, remote, 7, Qpn::new(17), 0);
    let bad = [
        (CmConnectParams { sgid_index: 9, ..connect }, vec![]),
        (CmConnectParams { sgid_index: 0, ..connect }, vec![]), // IPv6 GID, IPv4 peer
        (CmConnectParams { pkey_index: 1, ..connect }, vec![]),
        (CmConnectParams { path_mtu: 6, ..connect }, vec![]),
        (CmConnectParams { transport: 3, ..connect }, vec![]),
        (connect, vec![0; 93]),
    ];
    for (params, private_data) in bad {
        let r = hca.command(now, Command::CmConnect { params, private_data });
        assert!(matches!(r, Err(CmdError::Invalid(_))), "{params:?}: {r:?}");
    }
    // Nothing refused was sent.
    assert!(transmit(&mut hca, now).is_none());
    assert_eq!(hca.poll_timeout(), None);
    let Ok(Reply::CmId { id }) =
        hca.command(now, Command::CmConnect { params: connect, private_data: vec![1; 92] })
    else {
        panic!("connect")
    };
    // A connect in progress cannot be accepted or disconnected.
    let r = hca.command(now, Command::CmAccept { id, params: accept, private_data: vec![] });
    assert!(matches!(r, Err(CmdError::Invalid(_))));
    assert!(transmit(&mut hca, now).is_some());
    assert_eq!(hca.command(now, Command::CmDestroy { id }), Ok(Reply::Done));
    assert!(not_found(hca.command(now, Command::CmDestroy { id })));
    assert_eq!(poll_event(&mut hca), None);
}

/// A packet to QP1 from the client: `opcode` (UD ones with a DETH of
/// `qkey`), `payload` bytes.
fn to_qp1(opcode: Opcode, qkey: u32, payload: &[u8], psn: u32) -> Vec<u8> {
    let bth = bth::Repr::new(opcode, Qpn::GSI, Psn::new(psn), payload.len());
    let mut ext = ExtHeaders::default();
    if matches!(opcode, Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_WITH_IMMEDIATE) {
        ext.deth = Some(deth::Repr { qkey: Qkey(qkey), resv8: 0, src_qpn: Qpn::GSI });
    }
    if opcode == Opcode::UD_SEND_ONLY_WITH_IMMEDIATE {
        ext.immdt = Some(immdt::Repr { imm: 7 });
    }
    let roce = roce::Repr { bth, ext, payload };
    let frame = FrameRepr::ipv4((CLIENT, SERVER), 1, 0xd872, roce).unwrap();
    let mut buf = vec![0; frame.buffer_len()];
    frame.emit(&mut buf).unwrap();
    buf
}

fn arb_opcode() -> impl Strategy<Value = Opcode> {
    prop_oneof![
        4 => Just(Opcode::UD_SEND_ONLY),
        1 => Just(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE),
        1 => Just(Opcode::RC_SEND_ONLY),
        1 => Just(Opcode::UC_SEND_ONLY),
        1 => Just(Opcode::RC_RDMA_WRITE_MIDDLE),
    ]
}

fn arb_qkey() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(deth::GSI_QKEY.0), 1 => any::<u32>()]
}

fn arb_len() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(mad::MAD_LEN), 1 => 0usize..600]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Each packet to QP1 is either a MAD for the CM or dropped and counted
    /// in `rcvd_gsi_drop`; MADs of any content never panic the CM (which
    /// counts each); bytes that are no RoCEv2 packet at all are dropped
    /// before QP1. The device still accepts a real REQ afterwards.
    #[test]
    fn malformed_packets_to_qp1_are_dropped_and_counted(
        packets in prop::collection::vec(
            (arb_opcode(), arb_qkey(), arb_len(), any::<u8>(), any::<bool>()), 1..24),
        garbage in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..320), 0..4),
    ) {
        let mut hca = server();
        hca.command(Instant::ZERO, Command::CmListen { service_id: RPING_SERVICE }).unwrap();
        let mut mads = 0u64;
        let mut drops = 0u64;
        for (i, (opcode, qkey, len, fill, cm_header)) in packets.into_iter().enumerate() {
            let mut payload = vec![fill; len];
            if cm_header && len >= 24 {
                payload[..4].copy_from_slice(&[1, 7, 2, 3]);
            }
            let is_mad = opcode == Opcode::UD_SEND_ONLY && qkey == deth::GSI_QKEY.0 && len == 256;
            if is_mad { mads += 1 } else { drops += 1 }
            let now = at_ms(i as u64);
            hca.receive(now, &to_qp1(opcode, qkey, &payload, i as u32));
            while transmit(&mut hca, now).is_some() {}
            while poll_event(&mut hca).is_some() {}
        }
        let c = hca.counters();
        prop_assert_eq!(c.rcvd_mads, mads);
        prop_assert_eq!(c.rcvd_gsi_drop, drops);
        prop_assert_eq!(c.rcvd_unknown_qp, drops);
        prop_assert_eq!(c.rcvd_pkts, mads);
        prop_assert_eq!(hca.cm_counters().rx_mads, mads);
        for bytes in &garbage {
            hca.receive(at_ms(100), bytes);
        }
        prop_assert_eq!(hca.counters().rcvd_mads, mads);
        hca.receive(at_ms(200), &ip_packet_of_frame(20));
        let got = poll_event(&mut hca);
        let is_request =
            matches!(got, Some(CmEvent { kind: CmEventKind::ConnectRequest { .. }, .. }));
        prop_assert!(is_request);
    }
}

/// MADs leave from the address the peer reached, or the connect's source
/// GID, not merely the first address of the IP version.
#[test]
fn mads_leave_from_the_address_the_peer_knows() {
    let other = Ipv4Addr::new(192, 168, 1, 1);
    let gids = vec![
        Gid::link_local_from_mac([0x52, 0x54, 0, 0, 0, 1]),
        Gid::from(other),
        Gid::from(SERVER),
    ];
    let memory = Arc::new(SimMemory::new(1 << 20));
    let mut hca = Hca::new(HcaConfig::default(), gids.clone(), memory.clone()).unwrap();
    let now = at_ms(1);
    hca.command(now, Command::CmListen { service_id: RPING_SERVICE }).unwrap();
    hca.receive(now, &ip_packet_of_frame(20));
    let Some(CmEvent { id, .. }) = poll_event(&mut hca) else { panic!("no request") };
    let accept = CmAcceptParams::new(Qpn::new(0x11), 1);
    hca.command(now, Command::CmAccept { id, params: accept, private_data: vec![] }).unwrap();
    let rep = transmit(&mut hca, now).unwrap();
    assert_eq!(&rep[12..16], &SERVER.octets()); // not 192.168.1.1, the first IPv4 address

    let mut hca = Hca::new(HcaConfig::default(), gids, memory).unwrap();
    let params = CmConnectParams::rdma_cm(2, Gid::from(CLIENT), RPING_SERVICE, Qpn::new(17), 0);
    hca.command(now, Command::CmConnect { params, private_data: vec![] }).unwrap();
    let req = transmit(&mut hca, now).unwrap();
    assert_eq!(&req[12..16], &SERVER.octets());
}

/// A driver's event notifiers run when CM events arrive: once, until it
/// has taken them all.
#[test]
fn cm_events_wake_the_driver_once_until_taken() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use uroce_device::DeviceLink;
    use uroce_hca::SharedHca;
    let memory = Arc::new(SimMemory::new(1 << 20));
    let gids = vec![Gid::from(SERVER)];
    let hca = Hca::new(HcaConfig::default(), gids, memory.clone()).unwrap();
    let mut shared = SharedHca::new(hca, memory);
    while shared.poll_event().is_some() {} // PORT_ACTIVE
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    shared.on_events(Box::new(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        true
    }));
    shared.command(Command::CmListen { service_id: RPING_SERVICE }).unwrap();
    let before = calls.load(Ordering::Relaxed);
    let req = ip_packet_of_frame(20);
    Endpoint::receive(&mut shared, at_ms(1), &req);
    assert_eq!(calls.load(Ordering::Relaxed), before + 1);
    // A second request (another comm ID) while the first waits: no call.
    let again = with_comm_id_changed(&req, 1);
    Endpoint::receive(&mut shared, at_ms(2), &again);
    assert_eq!(shared.lock().counters().rcvd_mads, 2);
    assert_eq!(calls.load(Ordering::Relaxed), before + 1);
    // Taken, then another: called again.
    let take = |s: &SharedHca| match s.command(Command::CmPollEvent) {
        Ok(Reply::CmEvent(e)) => e,
        other => panic!("{other:?}"),
    };
    assert!(take(&shared).is_some());
    assert!(take(&shared).is_some());
    assert!(take(&shared).is_none());
    let calls_now = calls.load(Ordering::Relaxed);
    let third = with_comm_id_changed(&req, 2);
    Endpoint::receive(&mut shared, at_ms(3), &third);
    assert_eq!(calls.load(Ordering::Relaxed), calls_now + 1);
}

/// A REQ packet from another QP of the peer: its local comm ID and its
/// local QPN changed (`xor` on a byte of each; a second REQ from the same
/// QP would be refused as stale), its ICRC made again.
fn with_comm_id_changed(packet: &[u8], xor: u8) -> Vec<u8> {
    let mut changed = packet.to_vec();
    let class_data_at = 20 + 8 + 12 + 8 + mad::HEADER_LEN;
    changed[class_data_at] ^= xor;
    changed[class_data_at + 34] ^= xor << 4;
    let Classified::Roce(frame) = classify(&changed, Link::RawIp) else { panic!("not RoCE") };
    let mut out = vec![0; changed.len()];
    assert_eq!(frame.repr().unwrap().emit(&mut out).unwrap(), changed.len());
    out
}

/// The client as rxe was: the link-local GID of MAC 52:54:00:00:00:02,
/// then 169.254.0.2.
fn client() -> Hca {
    let gids = vec![Gid::link_local_from_mac([0x52, 0x54, 0, 0, 0, 2]), Gid::from(CLIENT)];
    Hca::new(HcaConfig::default(), gids, Arc::new(SimMemory::new(1 << 20))).unwrap()
}

/// `packet` with `bytes` written at `at`, its ICRC made again.
fn rewritten(packet: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut changed = packet.to_vec();
    changed[at..at + bytes.len()].copy_from_slice(bytes);
    let Classified::Roce(frame) = classify(&changed, Link::RawIp) else { panic!("not RoCE") };
    let mut out = vec![0; changed.len()];
    assert_eq!(frame.repr().unwrap().emit(&mut out).unwrap(), changed.len());
    out
}

/// The active side against rping.pcap: the REQ uroce sends for rping's
/// connect is frame 20 but for the comm ID (and the TID made from it),
/// the IPv4 identification and the checksums; Linux's REP (frame 21),
/// addressed to uroce's comm ID, is a connect reply; and the RTU is frame
/// 22 but for the same fields.
#[test]
fn the_active_side_sends_linuxs_req_and_rtu() {
    let class_data_at = 20 + 8 + 12 + 8 + mad::HEADER_LEN;
    let tid_at = 20 + 8 + 12 + 8 + 8;
    let mut hca = client();
    let now = at_ms(3_254);
    let frame_20 = ip_packet_of_frame(20);
    let linux_req =
        req::Repr::parse(&req::Packet::new_checked(&frame_20[class_data_at..]).unwrap()).unwrap();
    let mut params =
        CmConnectParams::rdma_cm(1, Gid::from(SERVER), RPING_SERVICE, Qpn::new(0x11), 0xc708f9);
    params.flow_label = linux_req.primary_path.flow_label;
    let private_data = linux_req.private_data.to_vec();
    let Ok(Reply::CmId { id }) = hca.command(now, Command::CmConnect { params, private_data })
    else {
        panic!("connect")
    };
    let ours = transmit(&mut hca, now).expect("the REQ");
    let only_ours = |golden: &[u8], ours: &[u8], fields: &[(usize, usize)]| {
        let mut expected = golden.to_vec();
        let icrc_at = expected.len() - 4;
        for &(at, len) in fields.iter().chain(&[(4, 2), (10, 2), (icrc_at, 4)]) {
            expected[at..at + len].copy_from_slice(&ours[at..at + len]);
        }
        assert_eq!(ours, &expected[..]);
    };
    // TID: uroce's agent number and comm ID; the REQ's local comm ID.
    only_ours(&frame_20, &ours, &[(tid_at, 8), (class_data_at, 4)]);
    assert_eq!(&ours[class_data_at..class_data_at + 4], &id.to_be_bytes());

    // Linux's REP, to our comm ID (its remote comm ID, class data 4..8)
    // and TID.
    let frame_21 = ip_packet_of_frame(21);
    let rep = rewritten(&frame_21, class_data_at + 4, &id.to_be_bytes());
    let rep = rewritten(&rep, tid_at, &ours[tid_at..tid_at + 8]);
    hca.receive(at_ms(3_305), &rep);
    let Some(CmEvent { id: got, kind: CmEventKind::ConnectReply { rep } }) = poll_event(&mut hca)
    else {
        panic!("no connect reply")
    };
    assert_eq!(got, id);
    let rep = rep::Repr::parse(&rep::Packet::new_checked(&rep[..]).unwrap()).unwrap();
    assert_eq!((rep.local_qpn, rep.starting_psn), (Qpn::new(0x11), Psn::new(0x2f0a44)));

    let now = at_ms(3_321);
    hca.command(now, Command::CmReadyToUse { id, private_data: vec![] }).unwrap();
    let rtu = transmit(&mut hca, now).expect("the RTU");
    let frame_22 = ip_packet_of_frame(22);
    // The RTU's PSN is 1, as Linux's: QP1's second MAD.
    only_ours(&frame_22, &rtu, &[(tid_at, 8), (class_data_at, 4)]);
    assert_eq!(poll_event(&mut hca).map(|e| e.kind), Some(CmEventKind::Established));
    assert_eq!(hca.counters().sent_mads, 2);
}

/// Every MAD `hca` sends from `start` until it has an event, driving its
/// timers: (time in ms, the MAD's class data) and the event.
fn transmits_until_event(hca: &mut Hca, start: Instant) -> (Vec<(u64, Vec<u8>)>, CmEvent) {
    let class_data_at = 20 + 8 + 12 + 8 + mad::HEADER_LEN;
    let mut sent = Vec::new();
    let mut now = start;
    for _ in 0..100 {
        while let Some(packet) = transmit(hca, now) {
            let ms = (now.as_nanos() - start.as_nanos()) / 1_000_000;
            sent.push((ms, packet[class_data_at..class_data_at + CM_MESSAGE_LEN].to_vec()));
        }
        if let Some(event) = poll_event(hca) {
            return (sent, event);
        }
        now = hca.poll_timeout().expect("a CM timer");
        hca.handle_timeout(now);
    }
    panic!("no event after 100 timers: {} sent", sent.len());
}

/// The device's CM timing (`HcaConfig::cm_response_timeout`,
/// `cm_max_retries`, `UROCE_CM_RESPONSE_TIMEOUT`/`UROCE_CM_RETRIES`)
/// replaces the command's: the REQ carries the configured exponent in
/// both response timeouts and the configured retries, and is sent
/// 1 + retries times, `2 × 2^(18 − 8) + 2^(14 − 8)` = 2112 ms apart, before
/// `Unreachable`; a SIDR_REQ waits `2^(14 − 8)` = 64 ms each time.
#[test]
fn the_configured_cm_timeout_and_retries_bound_a_connect_to_a_silent_peer() {
    let config = HcaConfig { cm_response_timeout: 14, cm_max_retries: 3, ..HcaConfig::default() };
    let gids = vec![Gid::link_local_from_mac([0x52, 0x54, 0, 0, 0, 2]), Gid::from(CLIENT)];
    let mut hca = Hca::new(config, gids, Arc::new(SimMemory::new(1 << 20))).unwrap();
    let start = at_ms(1);
    // rdma_cm's values in the command (20, 20, 15): the device's win.
    let params = CmConnectParams::rdma_cm(1, Gid::from(SERVER), RPING_SERVICE, Qpn::new(17), 5);
    let Ok(Reply::CmId { id }) =
        hca.command(start, Command::CmConnect { params, private_data: vec![] })
    else {
        panic!("connect")
    };
    let (sent, event) = transmits_until_event(&mut hca, start);
    assert_eq!(event, CmEvent { id, kind: CmEventKind::Unreachable { stage: CmTimedOut::Req } });
    let times: Vec<u64> = sent.iter().map(|(ms, _)| *ms).collect();
    assert_eq!(times, [0, 2112, 2 * 2112, 3 * 2112]);
    for (_, data) in &sent {
        let req = req::Repr::parse(&req::Packet::new_checked(&data[..]).unwrap()).unwrap();
        let timing =
            (req.local_cm_response_timeout, req.remote_cm_response_timeout, req.max_cm_retries);
        assert_eq!(timing, (14, 14, 3));
    }
    assert_eq!(hca.now().as_nanos() - start.as_nanos(), 4 * 2112 * 1_000_000);

    // A SIDR_REQ: 64 ms per try, the command's 4096 ms and 15 retries
    // notwithstanding.
    let start = hca.now();
    let params = CmSidrParams {
        remote_gid: Gid::from(SERVER),
        pkey_index: 0,
        pkey: 0xffff,
        service_id: RPING_SERVICE,
        timeout_ms: 4096,
        max_retries: 15,
    };
    let Ok(Reply::CmId { id }) =
        hca.command(start, Command::CmSidrRequest { params, private_data: vec![] })
    else {
        panic!("SIDR request")
    };
    let (sent, event) = transmits_until_event(&mut hca, start);
    assert_eq!(event, CmEvent { id, kind: CmEventKind::SidrUnreachable });
    let times: Vec<u64> = sent.iter().map(|(ms, _)| *ms).collect();
    assert_eq!(times, [0, 64, 128, 192]);
    assert_eq!(hca.now().as_nanos() - start.as_nanos(), 4 * 64 * 1_000_000);
}

/// rdma_cm's timing by default, and a device refuses timing the CM
/// cannot carry.
#[test]
fn the_cm_timing_defaults_to_rdma_cms_and_is_checked() {
    let config = HcaConfig::default();
    assert_eq!((config.cm_response_timeout, config.cm_max_retries), (20, 15));
    let gids = || vec![Gid::from(CLIENT)];
    let memory = || Arc::new(SimMemory::new(1 << 20));
    for config in [
        HcaConfig { cm_response_timeout: 32, ..HcaConfig::default() },
        HcaConfig { cm_max_retries: 16, ..HcaConfig::default() },
    ] {
        let Err(e) = Hca::new(config, gids(), memory()) else { panic!("accepted") };
        assert!(e.0.starts_with("cm_"), "{e}");
    }
    let config = HcaConfig { cm_response_timeout: 31, cm_max_retries: 0, ..HcaConfig::default() };
    assert!(Hca::new(config, gids(), memory()).is_ok());
}
