//! The CM MADs of a real Linux rdma_cm connection: frames 20-22 of
//! `tests/golden/rping.pcap` (`rping -C 10 -S 64`, client 169.254.0.2,
//! server 169.254.0.1, rxe in Debian 12's kernel 6.1; a copy of
//! `../shared/golden/rping.pcap`) are the REQ, the REP and the RTU. Each
//! is read with the crate's own capture reader and framing, its fields
//! checked against what `tshark -V` shows for it, and its `Repr`s emitted
//! back to the captured 256 bytes.

use core::net::{IpAddr, Ipv4Addr};
use uroce_wire::frame::{classify, Classified};
use uroce_wire::mad::cma::{self, PortSpace};
use uroce_wire::mad::req::{transport, Path};
use uroce_wire::mad::{
    self, rep, req, rtu, AttributeId, CmMessage, CommId, Gid, Guid, Method, ServiceId,
    TransactionId,
};
use uroce_wire::pcap::CaptureReader;
use uroce_wire::{deth, Psn, Qkey, Qpn};

const RPING: &[u8] = include_bytes!("../../tests/golden/rping.pcap");

const CLIENT: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
/// The one transaction ID of the handshake: REP and RTU reuse the REQ's.
const TID: TransactionId = TransactionId(0x0000_0002_ca32_448f);
const CLIENT_COMM_ID: CommId = CommId(0x8f44_32ca);
const SERVER_COMM_ID: CommId = CommId(0x5a6e_41d4);

/// The 256-byte MAD of frame `number`: the payload of a UD SEND to QP1
/// from QP1 with the GSI Q_Key.
fn mad_of_frame(number: usize) -> Vec<u8> {
    let frame = CaptureReader::new(RPING)
        .unwrap()
        .map(Result::unwrap)
        .find(|f| f.number == number)
        .unwrap();
    let Classified::Roce(roce) = classify(frame.data, frame.link.unwrap()) else {
        panic!("frame {number} is not RoCE")
    };
    assert!(roce.icrc_ok());
    let packet = roce.packet().unwrap();
    assert_eq!(packet.bth().dest_qpn(), Qpn::GSI);
    let deth = packet.deth().unwrap();
    assert_eq!(deth.qkey(), deth::GSI_QKEY);
    assert_eq!(deth.src_qpn(), Qpn::GSI);
    assert_eq!(packet.payload().len(), mad::MAD_LEN);
    packet.payload().to_vec()
}

/// Checks the common header and returns it.
fn cm_header(mad: &[u8], attribute_id: AttributeId) -> mad::Repr {
    let header = mad::Repr::parse(&mad::Packet::new_checked(mad).unwrap()).unwrap();
    assert_eq!(header, mad::Repr::cm(TID, attribute_id));
    assert_eq!(header.method, Method::SEND);
    assert!(header.is_cm());
    header
}

/// Emits a header and a message into a fresh MAD (over 0xa5 bytes, so
/// that an unwritten byte shows) and checks it is the captured one.
fn assert_emits(captured: &[u8], header: &mad::Repr, message: &CmMessage) {
    let mut buf = vec![0xa5u8; mad::MAD_LEN];
    let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
    header.emit(&mut packet);
    message.emit(&mut packet).unwrap();
    assert_eq!(buf, captured);
}

#[test]
fn frame_20_connect_request() {
    let bytes = mad_of_frame(20);
    let header = cm_header(&bytes, AttributeId::REQ);
    // Linux's TID is the MAD agent's number, then the local communication
    // ID in host (little-endian) byte order.
    assert_eq!(TID.0 as u32, CLIENT_COMM_ID.0.swap_bytes());

    let data = &bytes[mad::HEADER_LEN..];
    let p = req::Packet::new_checked(data).unwrap();
    assert_eq!(p.local_comm_id(), CLIENT_COMM_ID);
    assert_eq!(p.service_id(), ServiceId(0x0000_0000_0106_1c06));
    assert_eq!(p.service_id(), ServiceId::from_ip(PortSpace::TCP, 7174));
    assert!(p.service_id().has_ip_prefix());
    assert_eq!(p.local_ca_guid(), Guid(0x5054_00ff_fe00_0002));
    assert_eq!(p.local_qkey(), Qkey(0));
    assert_eq!(p.local_qpn(), Qpn::new(0x11));
    assert_eq!((p.responder_resources(), p.initiator_depth()), (1, 1));
    assert_eq!((p.local_eecn(), p.remote_eecn()), (0, 0));
    assert_eq!(p.remote_cm_response_timeout(), 0x14);
    assert_eq!(p.transport_service_type(), transport::RC);
    assert!(!p.end_to_end_flow_control());
    assert_eq!(p.starting_psn(), Psn::new(0xc708f9));
    assert_eq!(p.local_cm_response_timeout(), 0x14);
    assert_eq!(p.retry_count(), 7);
    assert_eq!(p.pkey(), 0xffff);
    assert_eq!(p.path_mtu(), 3); // 1024
    assert!(!p.rdc_exists());
    assert_eq!(p.rnr_retry_count(), 7);
    assert_eq!(p.max_cm_retries(), 15);
    assert!(!p.srq());
    assert_eq!(p.extended_transport_type(), 0);
    assert!(!p.sap_supported());

    // The CMA's flow label for RoCEv2 is (sport * 31 + dport) & 0xfffff
    // over the rdma_cm ports; rxe then derives the RC QP's UDP source port
    // from it (frame 23 goes from port 50429).
    let (sport, dport) = (0xbb20u32, 7174u32);
    let flow_label = (sport * 31 + dport) & 0xf_ffff;
    assert_eq!(flow_label, 0x6c4e6);
    assert_eq!(0xc000 | ((flow_label & 0x3fff) ^ (flow_label >> 14)), 50429);
    let primary = Path {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: Gid::from_ipv4(CLIENT),
        remote_gid: Gid::from_ipv4(SERVER),
        flow_label,
        resv6: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        resv3_sl: 0,
        local_ack_timeout: 0x13,
        resv3_ack: 0,
    };
    assert_eq!(p.primary_path(), primary);
    assert_eq!(p.alternate_path(), Path::default());

    let cma_hdr = cma::Packet::new_checked(p.private_data()).unwrap();
    assert_eq!(cma_hdr.version(), cma::CMA_VERSION);
    assert_eq!(cma_hdr.ip_version(), 4);
    assert_eq!(cma_hdr.src_port(), 0xbb20);
    assert_eq!(cma_hdr.src_ip(), Some(IpAddr::V4(CLIENT)));
    assert_eq!(cma_hdr.dst_ip(), Some(IpAddr::V4(SERVER)));
    let cma_repr = cma::Repr::parse(&cma_hdr).unwrap();
    assert_eq!(cma_repr, cma::Repr::new(CLIENT.into(), 0xbb20, SERVER.into()).unwrap());
    assert!(p.private_data()[cma::HEADER_LEN..].iter().all(|&b| b == 0));
    assert_eq!(p.private_data().len() - cma::HEADER_LEN, cma::REQ_CONSUMER_DATA_LEN);

    let repr = req::Repr::parse(&p).unwrap();
    assert_eq!(repr.primary_path, primary);
    let message = CmMessage::parse(&mad::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(message, CmMessage::Req(repr));
    assert_eq!(message.attribute_id(), AttributeId::REQ);
    assert_emits(&bytes, &header, &message);

    // The same REQ built from its values, private data from the CMA header.
    let mut private_data = [0u8; req::PRIVATE_DATA_LEN];
    cma_repr.emit(&mut cma::Packet::new_unchecked(&mut private_data[..]));
    let built = req::Repr {
        local_comm_id: CLIENT_COMM_ID,
        resv4: 0,
        service_id: ServiceId::from_ip(PortSpace::TCP, 7174),
        local_ca_guid: Guid(0x5054_00ff_fe00_0002),
        resv24: 0,
        local_qkey: Qkey(0),
        local_qpn: Qpn::new(0x11),
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: transport::RC,
        end_to_end_flow_control: false,
        starting_psn: Psn::new(0xc708f9),
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: primary,
        alternate_path: Path::default(),
        private_data,
    };
    assert_eq!(built, repr);
    assert_emits(&bytes, &header, &CmMessage::Req(built));
}

#[test]
fn frame_21_connect_reply() {
    let bytes = mad_of_frame(21);
    let header = cm_header(&bytes, AttributeId::REP);
    let p = rep::Packet::new_checked(&bytes[mad::HEADER_LEN..]).unwrap();
    let expected = rep::Repr {
        local_comm_id: SERVER_COMM_ID,
        remote_comm_id: CLIENT_COMM_ID,
        local_qkey: Qkey(0),
        local_qpn: Qpn::new(0x11),
        local_eecn: 0,
        vendor_id: 0,
        starting_psn: Psn::new(0x2f0a44),
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 0x0f,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        resv4: 0,
        local_ca_guid: Guid(0x5054_00ff_fe00_0001),
        // Linux's CMA puts no header in a REP: rping sends no private data.
        private_data: [0; rep::PRIVATE_DATA_LEN],
    };
    assert_eq!(p.local_comm_id(), SERVER_COMM_ID);
    assert_eq!(p.remote_comm_id(), CLIENT_COMM_ID);
    assert_eq!(p.local_qpn(), Qpn::new(0x11));
    assert_eq!(p.starting_psn(), Psn::new(0x2f0a44));
    assert_eq!(p.target_ack_delay(), 0x0f);
    assert_eq!(p.rnr_retry_count(), 7);
    assert_eq!(p.local_ca_guid(), Guid(0x5054_00ff_fe00_0001));
    assert_eq!(rep::Repr::parse(&p).unwrap(), expected);
    let message = CmMessage::parse(&mad::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(message, CmMessage::Rep(expected));
    assert_emits(&bytes, &header, &message);
}

#[test]
fn frame_22_ready_to_use() {
    let bytes = mad_of_frame(22);
    let header = cm_header(&bytes, AttributeId::RTU);
    let p = rtu::Packet::new_checked(&bytes[mad::HEADER_LEN..]).unwrap();
    assert_eq!(p.local_comm_id(), CLIENT_COMM_ID);
    assert_eq!(p.remote_comm_id(), SERVER_COMM_ID);
    let expected = rtu::Repr {
        local_comm_id: CLIENT_COMM_ID,
        remote_comm_id: SERVER_COMM_ID,
        private_data: [0; rtu::PRIVATE_DATA_LEN],
    };
    assert_eq!(rtu::Repr::parse(&p).unwrap(), expected);
    let message = CmMessage::parse(&mad::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(message, CmMessage::Rtu(expected));
    assert_emits(&bytes, &header, &message);
}

#[test]
fn short_or_foreign_mads_are_errors() {
    let bytes = mad_of_frame(22);
    let short = mad::Packet::new_checked(&bytes[..255]).unwrap();
    assert_eq!(CmMessage::parse(&short).unwrap_err(), uroce_wire::Error::Truncated);
    let mut other_class = bytes.clone();
    other_class[1] = 0x03; // subnet administration
    let p = mad::Packet::new_checked(&other_class[..]).unwrap();
    assert!(matches!(CmMessage::parse(&p), Err(uroce_wire::Error::Malformed(_))));
    let mut lap = bytes.clone();
    lap[16..18].copy_from_slice(&AttributeId::LAP.0.to_be_bytes());
    let p = mad::Packet::new_checked(&lap[..]).unwrap();
    assert!(matches!(CmMessage::parse(&p), Err(uroce_wire::Error::Malformed(_))));
    let mut buf = [0u8; 255];
    let message = CmMessage::parse(&mad::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(
        message.emit(&mut mad::Packet::new_unchecked(&mut buf[..])),
        Err(uroce_wire::Error::Truncated)
    );
}
