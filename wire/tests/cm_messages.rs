//! The CM messages no capture holds (REJ, MRA, DREQ, DREP, SIDR_REQ,
//! SIDR_REP), written from field values as Linux would send them and
//! compared with bytes laid out by hand from IBA vol 1 tables 107, 108,
//! 112, 113, 119 and 120 (offsets below are into the MAD's class data,
//! after the 24-byte common header).

use core::net::Ipv6Addr;
use uroce_wire::mad::cma::{self, PortSpace};
use uroce_wire::mad::rej::RejectReason;
use uroce_wire::mad::sidr::SidrStatus;
use uroce_wire::mad::{
    self, drep, dreq, mra, rej, req, sidr, AttributeId, CmMessage, CommId, MessageRef, ServiceId,
    TransactionId,
};
use uroce_wire::{Qkey, Qpn};

const ACTIVE: CommId = CommId(0x8f44_32ca);
const PASSIVE: CommId = CommId(0x5a6e_41d4);

/// Puts `bytes` at `offset` of 232 zero bytes.
fn data_with(fields: &[(usize, &[u8])]) -> Vec<u8> {
    let mut data = vec![0u8; mad::DATA_LEN];
    for (offset, bytes) in fields {
        data[*offset..*offset + bytes.len()].copy_from_slice(bytes);
    }
    data
}

/// Emits `message` in a whole CM MAD, checks its class data against
/// `expected` and its header's attribute ID, and reads it back.
fn check(message: CmMessage, attribute: u16, expected: &[u8]) {
    let mut buf = vec![0xa5u8; mad::MAD_LEN];
    let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
    mad::Repr::cm(TransactionId(0x0000_0002_0000_0001), message.attribute_id()).emit(&mut packet);
    message.emit(&mut packet).unwrap();
    assert_eq!(buf[16..18], attribute.to_be_bytes());
    assert_eq!(&buf[mad::HEADER_LEN..], expected);
    let parsed = CmMessage::parse(&mad::Packet::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(parsed, message);
}

#[test]
fn rej_no_listener() {
    // What Linux's CM answers a REQ for a service ID nobody listens on:
    // no local ID, the REQ's ID as remote, reason 8.
    let repr = rej::Repr {
        local_comm_id: CommId(0),
        remote_comm_id: ACTIVE,
        message_rejected: MessageRef::REQ,
        resv6: 0,
        rejected_info_length: 0,
        resv1: false,
        reason: RejectReason::InvalidServiceId,
        ari: [0; rej::ARI_LEN],
        private_data: [0; rej::PRIVATE_DATA_LEN],
    };
    let expected = data_with(&[(4, &[0x8f, 0x44, 0x32, 0xca]), (10, &[0x00, 0x08])]);
    check(CmMessage::Rej(repr), 0x0012, &expected);
    let p = rej::Packet::new_checked(&expected[..]).unwrap();
    assert_eq!(p.reason(), RejectReason::InvalidServiceId);
    assert_eq!(p.message_rejected(), MessageRef::REQ);
}

#[test]
fn rej_consumer_reject_with_private_data() {
    // rdma_reject(id, "busy", 4) from the passive side.
    let mut private_data = [0; rej::PRIVATE_DATA_LEN];
    private_data[..4].copy_from_slice(b"busy");
    let repr = rej::Repr {
        local_comm_id: PASSIVE,
        remote_comm_id: ACTIVE,
        message_rejected: MessageRef::REQ,
        resv6: 0,
        rejected_info_length: 0,
        resv1: false,
        reason: RejectReason::ConsumerDefined,
        ari: [0; rej::ARI_LEN],
        private_data,
    };
    let expected = data_with(&[
        (0, &[0x5a, 0x6e, 0x41, 0xd4]),
        (4, &[0x8f, 0x44, 0x32, 0xca]),
        (10, &[0x00, 28]),
        (84, b"busy"),
    ]);
    check(CmMessage::Rej(repr), 0x0012, &expected);
    assert_eq!(rej::Packet::new_checked(&expected[..]).unwrap().private_data()[..4], *b"busy");
}

#[test]
fn rej_timeout_of_a_rep_with_ari() {
    // A REP that got no RTU: message rejected 1 (REP, bits 7-6 of byte 8),
    // 8 bytes of ARI (bits 7-1 of byte 9) holding the CA GUID.
    let guid = 0x5054_00ff_fe00_0001u64.to_be_bytes();
    let mut ari = [0; rej::ARI_LEN];
    ari[..8].copy_from_slice(&guid);
    let repr = rej::Repr {
        local_comm_id: PASSIVE,
        remote_comm_id: ACTIVE,
        message_rejected: MessageRef::REP,
        resv6: 0,
        rejected_info_length: 8,
        resv1: false,
        reason: RejectReason::Timeout,
        ari,
        private_data: [0; rej::PRIVATE_DATA_LEN],
    };
    let expected = data_with(&[
        (0, &[0x5a, 0x6e, 0x41, 0xd4]),
        (4, &[0x8f, 0x44, 0x32, 0xca]),
        (8, &[0x40, 0x10, 0x00, 0x04]),
        (12, &guid),
    ]);
    check(CmMessage::Rej(repr), 0x0012, &expected);
    let p = rej::Packet::new_checked(&expected[..]).unwrap();
    assert_eq!(p.rejected_info_length(), 8);
    assert_eq!(p.ari()[..8], guid);
    // An unnamed code survives as itself.
    let mut other = expected.clone();
    other[10..12].copy_from_slice(&0x1234u16.to_be_bytes());
    let p = rej::Packet::new_checked(&other[..]).unwrap();
    assert_eq!(p.reason(), RejectReason::Other(0x1234));
}

#[test]
fn mra_for_a_rep() {
    // Message MRAed 1 (REP) in bits 7-6 of byte 8, service timeout 0x17 in
    // bits 7-3 of byte 9, private data at 10.
    let mut private_data = [0; mra::PRIVATE_DATA_LEN];
    private_data[..2].copy_from_slice(&[0xde, 0xad]);
    let repr = mra::Repr {
        local_comm_id: ACTIVE,
        remote_comm_id: PASSIVE,
        message_mraed: MessageRef::REP,
        resv6: 0,
        service_timeout: 0x17,
        resv3: 0,
        private_data,
    };
    let expected = data_with(&[
        (0, &[0x8f, 0x44, 0x32, 0xca]),
        (4, &[0x5a, 0x6e, 0x41, 0xd4]),
        (8, &[0x40, 0xb8, 0xde, 0xad]),
    ]);
    check(CmMessage::Mra(repr), 0x0011, &expected);
    let p = mra::Packet::new_checked(&expected[..]).unwrap();
    assert_eq!((p.message_mraed(), p.service_timeout()), (MessageRef::REP, 0x17));
}

#[test]
fn dreq_and_drep() {
    // The active side disconnects rping's QP 0x11 pair.
    let dreq = dreq::Repr {
        local_comm_id: ACTIVE,
        remote_comm_id: PASSIVE,
        remote_qpn: Qpn::new(0x11),
        resv8: 0,
        private_data: [0; dreq::PRIVATE_DATA_LEN],
    };
    let expected = data_with(&[
        (0, &[0x8f, 0x44, 0x32, 0xca]),
        (4, &[0x5a, 0x6e, 0x41, 0xd4]),
        (8, &[0x00, 0x00, 0x11, 0x00]),
    ]);
    check(CmMessage::Dreq(dreq), 0x0015, &expected);
    assert_eq!(dreq::Packet::new_checked(&expected[..]).unwrap().remote_qpn(), Qpn::new(0x11));

    let mut private_data = [0; drep::PRIVATE_DATA_LEN];
    private_data[0] = 0x42;
    let drep = drep::Repr { local_comm_id: PASSIVE, remote_comm_id: ACTIVE, private_data };
    let expected =
        data_with(&[(0, &[0x5a, 0x6e, 0x41, 0xd4]), (4, &[0x8f, 0x44, 0x32, 0xca]), (8, &[0x42])]);
    check(CmMessage::Drep(drep), 0x0016, &expected);
}

#[test]
fn sidr_req_and_rep_for_rdma_ps_udp() {
    // A UDP-port-space resolution to port 7174 over IPv6, with the CMA
    // header at the start of the SIDR_REQ's private data.
    let src: Ipv6Addr = "fe80::5054:ff:fe00:2".parse().unwrap();
    let dst: Ipv6Addr = "fe80::5054:ff:fe00:1".parse().unwrap();
    let sid = ServiceId::from_ip(PortSpace::UDP, 7174);
    assert_eq!(sid, ServiceId(0x0000_0000_0111_1c06));
    let mut private_data = [0; sidr::req::PRIVATE_DATA_LEN];
    cma::Repr::new(src.into(), 0xbb20, dst.into())
        .unwrap()
        .emit(&mut cma::Packet::new_unchecked(&mut private_data[..]));
    let req = sidr::ReqRepr {
        request_id: 0x0102_0304,
        pkey: 0xffff,
        resv16: 0,
        service_id: sid,
        private_data,
    };
    let expected = data_with(&[
        (0, &[0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0x00, 0x00]),
        (8, &[0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]),
        (16, &[0x00, 0x60, 0xbb, 0x20]),
        (20, &src.octets()),
        (36, &dst.octets()),
    ]);
    check(CmMessage::SidrReq(req), 0x0017, &expected);
    let p = sidr::ReqPacket::new_checked(&expected[..]).unwrap();
    let hdr = cma::Packet::new_checked(p.private_data()).unwrap();
    assert_eq!(
        (hdr.ip_version(), hdr.src_ip(), hdr.dst_ip()),
        (6, Some(src.into()), Some(dst.into()))
    );

    // The answer: UD QP 0x12 with rdma_cm's UDP Q_Key 0x01234567.
    let rep = sidr::RepRepr {
        request_id: 0x0102_0304,
        status: SidrStatus::Success,
        additional_info_length: 0,
        vendor_id: 0,
        qpn: Qpn::new(0x12),
        service_id: sid,
        qkey: Qkey(0x0123_4567),
        additional_info: [0; sidr::rep::ADDITIONAL_INFO_LEN],
        private_data: [0; sidr::rep::PRIVATE_DATA_LEN],
    };
    let expected = data_with(&[
        (0, &[0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00]),
        (8, &[0x00, 0x00, 0x12, 0x00]),
        (12, &[0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]),
        (20, &[0x01, 0x23, 0x45, 0x67]),
    ]);
    check(CmMessage::SidrRep(rep), 0x0018, &expected);

    // Nobody listens: status 1.
    let unsupported = sidr::RepRepr { status: SidrStatus::Unsupported, qpn: Qpn::new(0), ..rep };
    let mut expected = data_with(&[
        (0, &[0x01, 0x02, 0x03, 0x04, 0x01]),
        (12, &[0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]),
        (20, &[0x01, 0x23, 0x45, 0x67]),
    ]);
    check(CmMessage::SidrRep(unsupported), 0x0018, &expected);
    expected[4] = 0x42;
    let p = sidr::RepPacket::new_checked(&expected[..]).unwrap();
    assert_eq!(p.status(), SidrStatus::Other(0x42));
}

#[test]
fn values_wider_than_their_fields_are_cut() {
    // Emitting never panics, and an oversized value only fills its bits.
    let mut buf = [0u8; mad::DATA_LEN];
    let mut p = req::Packet::new_unchecked(&mut buf[..]);
    p.set_local_cm_response_timeout(0xff);
    assert_eq!(buf[47], 0xf8);
    let mut p = req::Packet::new_unchecked(&mut buf[..]);
    p.set_local_eecn(0xffff_ffff);
    assert_eq!(buf[35..40], [0x00, 0xff, 0xff, 0xff, 0x00]);
    let mut p = mra::Packet::new_unchecked(&mut buf[..]);
    p.set_message_mraed(MessageRef(0xff));
    assert_eq!(buf[8], 0xc0);
    let path = req::Path { flow_label: u32::MAX, packet_rate: 0xff, ..req::Path::default() };
    let mut buf = [0u8; mad::DATA_LEN];
    req::Packet::new_unchecked(&mut buf[..]).set_primary_path(&path);
    assert_eq!(buf[52 + 36..52 + 40], [0xff, 0xff, 0xf0, 0x3f]);
}

#[test]
fn attribute_ids() {
    let ids = [
        (AttributeId::REQ, 0x10),
        (AttributeId::MRA, 0x11),
        (AttributeId::REJ, 0x12),
        (AttributeId::REP, 0x13),
        (AttributeId::RTU, 0x14),
        (AttributeId::DREQ, 0x15),
        (AttributeId::DREP, 0x16),
        (AttributeId::SIDR_REQ, 0x17),
        (AttributeId::SIDR_REP, 0x18),
    ];
    for (id, value) in ids {
        assert_eq!(id.0, value);
    }
}
