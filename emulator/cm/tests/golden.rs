//! The REQ Linux's rdma_cm sent in `tests/golden/rping.pcap` (frame 20,
//! rping client 169.254.0.2 to server 169.254.0.1, rxe on kernel 6.1) fed
//! to a passive engine: the connect request it raises, the REP it answers
//! with (compared with the REP Linux answered with, frame 21), and the
//! RTU of frame 22 completing it.

use core::net::Ipv4Addr;
use uroce_cm::{AcceptParams, Cm, CmConfig, CmId, Event, Peer, State, NS_PER_MS};
use uroce_wire::frame::{classify, Classified};
use uroce_wire::mad::cma::{self, PortSpace};
use uroce_wire::mad::{self, CmMessage, CommId, Gid, Guid, ServiceId, TransactionId};
use uroce_wire::opcode::Opcode;
use uroce_wire::pcap::CaptureReader;
use uroce_wire::{Psn, Qpn};

const RPING: &[u8] = include_bytes!("../../../tests/golden/rping.pcap");
const CLIENT: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
const TID: TransactionId = TransactionId(0x0000_0002_ca32_448f);
const CLIENT_COMM_ID: CommId = CommId(0x8f44_32ca);
const LINUX_SERVER_COMM_ID: CommId = CommId(0x5a6e_41d4);

fn mad_of_frame(number: usize) -> Vec<u8> {
    let frame = CaptureReader::new(RPING)
        .unwrap()
        .map(Result::unwrap)
        .find(|f| f.number == number)
        .unwrap();
    let Classified::Roce(roce) = classify(frame.data, frame.link.unwrap()) else {
        panic!("not RoCE")
    };
    let packet = roce.packet().unwrap();
    assert_eq!(packet.bth().dest_qpn(), Qpn::GSI);
    packet.payload().to_vec()
}

/// A server engine the way rxe's server was: its CA GUID, listening on
/// rping's service.
fn server() -> Cm {
    let mut cm = Cm::new(CmConfig::new(Guid(0x5054_00ff_fe00_0001), 99));
    cm.listen(ServiceId::from_ip(PortSpace::TCP, 7174)).unwrap();
    cm
}

#[test]
fn linux_req_gets_a_linux_rep() {
    let mut cm = server();
    let client = Peer { gid: Gid::from_ipv4(CLIENT), pkey_index: 0 };
    let now = 5_000 * NS_PER_MS;
    cm.receive(now, client, &mad_of_frame(20));
    assert_eq!(cm.counters().rx_accepted, 1);

    let Some(Event::ConnectRequest { id, peer, req }) = cm.poll_event() else { panic!() };
    assert_eq!(peer, client);
    assert_eq!(req.local_comm_id, CLIENT_COMM_ID);
    assert_eq!(req.service_id, ServiceId(0x0106_1c06));
    assert_eq!(req.local_ca_guid, Guid(0x5054_00ff_fe00_0002));
    assert_eq!(req.local_qpn, Qpn::new(0x11));
    assert_eq!(req.starting_psn, Psn::new(0xc708f9));
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    assert_eq!(
        (req.path_mtu, req.retry_count, req.rnr_retry_count, req.max_cm_retries),
        (3, 7, 7, 15)
    );
    assert_eq!(req.primary_path.local_gid, Gid::from_ipv4(CLIENT));
    assert_eq!(req.primary_path.remote_gid, Gid::from_ipv4(SERVER));
    let hdr = cma::Repr::parse(&cma::Packet::new_checked(&req.private_data[..]).unwrap()).unwrap();
    assert_eq!(hdr, cma::Repr::new(CLIENT.into(), 0xbb20, SERVER.into()).unwrap());
    assert_eq!(cm.state(id), Some(State::ReqRcvd));
    assert!(cm.poll_transmit().is_none());

    // Accept with the QPN and PSN Linux's server used.
    cm.accept(now, id, &AcceptParams::new(Qpn::new(0x11), Psn::new(0x2f0a44)), &[]).unwrap();
    let t = cm.poll_transmit().unwrap();
    assert_eq!(t.peer, client);
    assert_eq!(t.dest_qpn, Qpn::GSI);
    let header = mad::Repr::parse(&mad::Packet::new_checked(&t.mad[..]).unwrap()).unwrap();
    assert_eq!(header, mad::Repr::cm(TID, mad::AttributeId::REP));
    let CmMessage::Rep(rep) =
        CmMessage::parse(&mad::Packet::new_checked(&t.mad[..]).unwrap()).unwrap()
    else {
        panic!()
    };
    assert_eq!(rep.remote_comm_id, CLIENT_COMM_ID);
    assert_eq!(rep.local_comm_id, id.0);
    // Byte for byte Linux's REP, but for the server's own comm ID.
    let mut linux = mad_of_frame(21);
    linux[mad::HEADER_LEN..mad::HEADER_LEN + 4].copy_from_slice(&id.0 .0.to_be_bytes());
    assert_eq!(&t.mad[..], &linux[..]);
    // Retransmitted after the REQ's local CM response timeout, 2^(20-8) ms.
    assert_eq!(cm.poll_timeout(), Some(now + 4096 * NS_PER_MS));

    // Frame 22's RTU, addressed to Linux's server comm ID, is not ours...
    let mut rtu = mad_of_frame(22);
    cm.receive(now, client, &rtu);
    assert_eq!(cm.counters().drop_unknown_id, 1);
    assert_eq!(cm.state(id), Some(State::RepSent));
    // ...but the same RTU to our comm ID establishes the connection.
    assert_eq!(
        &rtu[mad::HEADER_LEN + 4..mad::HEADER_LEN + 8],
        &LINUX_SERVER_COMM_ID.0.to_be_bytes()
    );
    rtu[mad::HEADER_LEN + 4..mad::HEADER_LEN + 8].copy_from_slice(&id.0 .0.to_be_bytes());
    cm.receive(now + NS_PER_MS, client, &rtu);
    assert_eq!(cm.poll_event(), Some(Event::Established { id }));
    assert_eq!(cm.state(id), Some(State::Established));
    assert_eq!(cm.poll_timeout(), None);
    let _ = CmId(id.0);
}

#[test]
fn linux_req_without_listener_gets_rej_8() {
    let mut cm = Cm::new(CmConfig::new(Guid(1), 1));
    let client = Peer { gid: Gid::from_ipv4(CLIENT), pkey_index: 0 };
    cm.receive(0, client, &mad_of_frame(20));
    let t = cm.poll_transmit().unwrap();
    let header = mad::Repr::parse(&mad::Packet::new_checked(&t.mad[..]).unwrap()).unwrap();
    assert_eq!(header.transaction_id, TID);
    let CmMessage::Rej(rej) =
        CmMessage::parse(&mad::Packet::new_checked(&t.mad[..]).unwrap()).unwrap()
    else {
        panic!()
    };
    assert_eq!(u16::from(rej.reason), 8);
    assert_eq!((rej.local_comm_id, rej.remote_comm_id), (CommId(0), CLIENT_COMM_ID));
    assert_eq!(cm.id_count(), 0);
    assert!(cm.poll_event().is_none());
}

/// The first RoCE request of a connection's QP in the capture: who sent
/// it (the IP source) and its PSN.
fn first_request_psn_from(source: Ipv4Addr) -> Psn {
    CaptureReader::new(RPING)
        .unwrap()
        .map(Result::unwrap)
        .find_map(|frame| {
            let Classified::Roce(roce) = classify(frame.data, frame.link.unwrap()) else {
                return None;
            };
            let packet = roce.packet().ok()?;
            let request = packet.bth().dest_qpn() != Qpn::GSI
                && packet.bth().opcode() != Opcode::RC_ACKNOWLEDGE;
            (request && roce.ip.source() == core::net::IpAddr::V4(source))
                .then(|| packet.bth().psn())
        })
        .unwrap()
}

/// What the starting PSNs mean to Linux, which librdmacm and uroce's
/// CM users must follow to talk to it: the REQ's starting PSN is the PSN
/// the *passive* side sends from (the active side's `rq_psn`; kernel
/// `ib_send_cm_req` keeps it as `rq_psn`), the REP's the PSN the *active*
/// side sends from (the passive side's `rq_psn`). In rping.pcap the
/// client (active) sends its first SEND with the REP's PSN 0x2f0a44 (frame
/// 23) and the server its first READ with the REQ's 0xc708f9 (frame 25).
/// Taking them the other way round (each side sending from its own
/// message's PSN) works between two such peers but not with Linux: rxe
/// then ACKs every request as a duplicate and nothing is ever received
/// (the interop matrix's lib_rping rows).
#[test]
fn starting_psns_are_what_each_side_receives_from() {
    let CmMessage::Req(req) =
        CmMessage::parse(&mad::Packet::new_checked(&mad_of_frame(20)[..]).unwrap()).unwrap()
    else {
        panic!("frame 20 is the REQ")
    };
    let CmMessage::Rep(rep) =
        CmMessage::parse(&mad::Packet::new_checked(&mad_of_frame(21)[..]).unwrap()).unwrap()
    else {
        panic!("frame 21 is the REP")
    };
    assert_eq!((req.starting_psn, rep.starting_psn), (Psn::new(0xc708f9), Psn::new(0x2f0a44)));
    assert_eq!(
        first_request_psn_from(CLIENT),
        rep.starting_psn,
        "the active side sends from the REP's PSN"
    );
    assert_eq!(
        first_request_psn_from(SERVER),
        req.starting_psn,
        "the passive side sends from the REQ's PSN"
    );
}
