//! Properties of the CM MAD formats: every message's `Repr` round-trips
//! through its bytes, any 232 bytes parse and emit unchanged (reserved
//! bits included), and no bytes make a view, a parse or `CmMessage`
//! panic.

use proptest::collection::vec;
use proptest::prelude::*;
use uroce_wire::mad::{
    self, cma, drep, dreq, mra, rej, rep, req, rtu, sidr, AttributeId, CmMessage, CommId, Gid,
    Guid, MessageRef, Method, ServiceId, TransactionId,
};
use uroce_wire::{Error, Psn, Qkey, Qpn};

fn array<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    vec(any::<u8>(), N).prop_map(|v| <[u8; N]>::try_from(v).unwrap())
}

fn bits(width: u32) -> impl Strategy<Value = u8> {
    0..=((1u16 << width) - 1) as u8
}

fn comm_id() -> impl Strategy<Value = CommId> {
    any::<u32>().prop_map(CommId)
}

fn qpn() -> impl Strategy<Value = Qpn> {
    (0..=Qpn::MAX).prop_map(Qpn::new)
}

fn psn() -> impl Strategy<Value = Psn> {
    (0..=Psn::MASK).prop_map(Psn::new)
}

fn u24() -> impl Strategy<Value = u32> {
    0..=0x00ff_ffffu32
}

fn path() -> impl Strategy<Value = req::Path> {
    (
        (any::<u16>(), any::<u16>(), array::<16>(), array::<16>()),
        (0..=0xf_ffffu32, bits(6), bits(6), any::<u8>(), any::<u8>()),
        (bits(4), any::<bool>(), bits(3), bits(5), bits(3)),
    )
        .prop_map(|(a, b, c)| req::Path {
            local_lid: a.0,
            remote_lid: a.1,
            local_gid: Gid(a.2),
            remote_gid: Gid(a.3),
            flow_label: b.0,
            resv6: b.1,
            packet_rate: b.2,
            traffic_class: b.3,
            hop_limit: b.4,
            sl: c.0,
            subnet_local: c.1,
            resv3_sl: c.2,
            local_ack_timeout: c.3,
            resv3_ack: c.4,
        })
}

fn req_repr() -> impl Strategy<Value = req::Repr> {
    (
        (comm_id(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()),
        (qpn(), any::<u8>(), u24(), any::<u8>(), u24()),
        (bits(5), bits(2), any::<bool>(), psn(), bits(5), bits(3), any::<u16>()),
        (bits(4), any::<bool>(), bits(3), bits(4), any::<bool>(), bits(3)),
        (path(), path(), array::<{ req::PRIVATE_DATA_LEN }>()),
    )
        .prop_map(|(a, b, c, d, e)| req::Repr {
            local_comm_id: a.0,
            resv4: a.1,
            service_id: ServiceId(a.2),
            local_ca_guid: Guid(a.3),
            resv24: a.4,
            local_qkey: Qkey(a.5),
            local_qpn: b.0,
            responder_resources: b.1,
            local_eecn: b.2,
            initiator_depth: b.3,
            remote_eecn: b.4,
            remote_cm_response_timeout: c.0,
            transport_service_type: c.1,
            end_to_end_flow_control: c.2,
            starting_psn: c.3,
            local_cm_response_timeout: c.4,
            retry_count: c.5,
            pkey: c.6,
            path_mtu: d.0,
            rdc_exists: d.1,
            rnr_retry_count: d.2,
            max_cm_retries: d.3,
            srq: d.4,
            extended_transport_type: d.5,
            primary_path: e.0,
            alternate_path: e.1,
            private_data: e.2,
        })
}

fn rep_repr() -> impl Strategy<Value = rep::Repr> {
    (
        (comm_id(), comm_id(), any::<u32>(), qpn(), u24(), u24(), psn()),
        (any::<u8>(), any::<u8>(), bits(5), bits(2), any::<bool>()),
        (bits(3), any::<bool>(), bits(4), any::<u64>(), array::<{ rep::PRIVATE_DATA_LEN }>()),
    )
        .prop_map(|(a, b, c)| rep::Repr {
            local_comm_id: a.0,
            remote_comm_id: a.1,
            local_qkey: Qkey(a.2),
            local_qpn: a.3,
            local_eecn: a.4,
            vendor_id: a.5,
            starting_psn: a.6,
            responder_resources: b.0,
            initiator_depth: b.1,
            target_ack_delay: b.2,
            failover_accepted: b.3,
            end_to_end_flow_control: b.4,
            rnr_retry_count: c.0,
            srq: c.1,
            resv4: c.2,
            local_ca_guid: Guid(c.3),
            private_data: c.4,
        })
}

fn rtu_repr() -> impl Strategy<Value = rtu::Repr> {
    (comm_id(), comm_id(), array::<{ rtu::PRIVATE_DATA_LEN }>()).prop_map(|(l, r, pd)| rtu::Repr {
        local_comm_id: l,
        remote_comm_id: r,
        private_data: pd,
    })
}

fn drep_repr() -> impl Strategy<Value = drep::Repr> {
    (comm_id(), comm_id(), array::<{ drep::PRIVATE_DATA_LEN }>())
        .prop_map(|(l, r, pd)| drep::Repr { local_comm_id: l, remote_comm_id: r, private_data: pd })
}

fn dreq_repr() -> impl Strategy<Value = dreq::Repr> {
    (comm_id(), comm_id(), qpn(), any::<u8>(), array::<{ dreq::PRIVATE_DATA_LEN }>()).prop_map(
        |(l, r, q, resv8, pd)| dreq::Repr {
            local_comm_id: l,
            remote_comm_id: r,
            remote_qpn: q,
            resv8,
            private_data: pd,
        },
    )
}

fn rej_repr() -> impl Strategy<Value = rej::Repr> {
    (
        (comm_id(), comm_id(), bits(2), bits(6), bits(7), any::<bool>()),
        any::<u16>(),
        array::<{ rej::ARI_LEN }>(),
        array::<{ rej::PRIVATE_DATA_LEN }>(),
    )
        .prop_map(|(a, reason, ari, pd)| rej::Repr {
            local_comm_id: a.0,
            remote_comm_id: a.1,
            message_rejected: MessageRef(a.2),
            resv6: a.3,
            rejected_info_length: a.4,
            resv1: a.5,
            reason: rej::RejectReason::from(reason),
            ari,
            private_data: pd,
        })
}

fn mra_repr() -> impl Strategy<Value = mra::Repr> {
    (
        (comm_id(), comm_id(), bits(2), bits(6), bits(5), bits(3)),
        array::<{ mra::PRIVATE_DATA_LEN }>(),
    )
        .prop_map(|(a, pd)| mra::Repr {
            local_comm_id: a.0,
            remote_comm_id: a.1,
            message_mraed: MessageRef(a.2),
            resv6: a.3,
            service_timeout: a.4,
            resv3: a.5,
            private_data: pd,
        })
}

fn sidr_req_repr() -> impl Strategy<Value = sidr::ReqRepr> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        any::<u64>(),
        array::<{ sidr::req::PRIVATE_DATA_LEN }>(),
    )
        .prop_map(|(id, pkey, resv16, sid, pd)| sidr::ReqRepr {
            request_id: id,
            pkey,
            resv16,
            service_id: ServiceId(sid),
            private_data: pd,
        })
}

fn sidr_rep_repr() -> impl Strategy<Value = sidr::RepRepr> {
    (
        (any::<u32>(), any::<u8>(), any::<u8>(), u24(), qpn(), any::<u64>(), any::<u32>()),
        array::<{ sidr::rep::ADDITIONAL_INFO_LEN }>(),
        array::<{ sidr::rep::PRIVATE_DATA_LEN }>(),
    )
        .prop_map(|(a, info, pd)| sidr::RepRepr {
            request_id: a.0,
            status: sidr::SidrStatus::from(a.1),
            additional_info_length: a.2,
            vendor_id: a.3,
            qpn: a.4,
            service_id: ServiceId(a.5),
            qkey: Qkey(a.6),
            additional_info: info,
            private_data: pd,
        })
}

fn cm_message() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        req_repr().prop_map(CmMessage::Req),
        mra_repr().prop_map(CmMessage::Mra),
        rej_repr().prop_map(CmMessage::Rej),
        rep_repr().prop_map(CmMessage::Rep),
        rtu_repr().prop_map(CmMessage::Rtu),
        dreq_repr().prop_map(CmMessage::Dreq),
        drep_repr().prop_map(CmMessage::Drep),
        sidr_req_repr().prop_map(CmMessage::SidrReq),
        sidr_rep_repr().prop_map(CmMessage::SidrRep),
    ]
}

fn mad_header() -> impl Strategy<Value = mad::Repr> {
    (
        (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<u16>()),
        (any::<u16>(), any::<u64>(), any::<u16>(), any::<u16>(), any::<u32>()),
    )
        .prop_map(|(a, b)| mad::Repr {
            base_version: a.0,
            mgmt_class: a.1,
            class_version: a.2,
            method: Method(a.3),
            status: a.4,
            class_specific: b.0,
            transaction_id: TransactionId(b.1),
            attribute_id: AttributeId(b.2),
            resv: b.3,
            attribute_modifier: b.4,
        })
}

fn cma_repr() -> impl Strategy<Value = cma::Repr> {
    (any::<u8>(), bits(4), bits(4), any::<u16>(), array::<16>(), array::<16>()).prop_map(
        |(version, ip_version, resv4, src_port, src_addr, dst_addr)| cma::Repr {
            version,
            ip_version,
            resv4,
            src_port,
            src_addr,
            dst_addr,
        },
    )
}

/// Emits `$repr` into a 0xa5-filled buffer of `$len`, parses it back.
macro_rules! round_trip {
    ($module:ident :: $packet:ident, $repr_ty:ty, $repr:expr, $len:expr) => {{
        let repr: $repr_ty = $repr;
        let mut buf = vec![0xa5u8; $len];
        assert_eq!(repr.buffer_len(), $len);
        repr.emit(&mut $module::$packet::new_unchecked(&mut buf[..]));
        let parsed = <$repr_ty>::parse(&$module::$packet::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
    }};
}

/// Parses any bytes of the view's length and emits them unchanged.
macro_rules! bit_exact {
    ($module:ident :: $packet:ident, $repr_ty:ty, $bytes:expr) => {{
        let bytes: &[u8] = $bytes;
        let repr = <$repr_ty>::parse(&$module::$packet::new_checked(bytes).unwrap()).unwrap();
        let mut buf = vec![!bytes[0]; bytes.len()];
        repr.emit(&mut $module::$packet::new_unchecked(&mut buf[..]));
        prop_assert_eq!(&buf[..], bytes);
    }};
}

/// Any bytes: the view is refused exactly when too short, and reading a
/// refused or accepted view never panics.
macro_rules! no_panic {
    ($module:ident :: $packet:ident, $repr_ty:ty, $bytes:expr, $len:expr) => {{
        let bytes: &[u8] = $bytes;
        match $module::$packet::new_checked(bytes) {
            Ok(p) => {
                prop_assert!(bytes.len() >= $len);
                let _ = <$repr_ty>::parse(&p).unwrap();
            }
            Err(e) => {
                prop_assert!(bytes.len() < $len);
                prop_assert_eq!(e, Error::Truncated);
            }
        }
    }};
}

proptest! {
    #[test]
    fn req_round_trips(repr in req_repr()) {
        round_trip!(req::Packet, req::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn rep_round_trips(repr in rep_repr()) {
        round_trip!(rep::Packet, rep::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn rtu_round_trips(repr in rtu_repr()) {
        round_trip!(rtu::Packet, rtu::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn rej_round_trips(repr in rej_repr()) {
        round_trip!(rej::Packet, rej::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn mra_round_trips(repr in mra_repr()) {
        round_trip!(mra::Packet, mra::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn dreq_round_trips(repr in dreq_repr()) {
        round_trip!(dreq::Packet, dreq::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn drep_round_trips(repr in drep_repr()) {
        round_trip!(drep::Packet, drep::Repr, repr, mad::DATA_LEN);
    }

    #[test]
    fn sidr_req_round_trips(repr in sidr_req_repr()) {
        round_trip!(sidr::ReqPacket, sidr::ReqRepr, repr, mad::DATA_LEN);
    }

    #[test]
    fn sidr_rep_round_trips(repr in sidr_rep_repr()) {
        round_trip!(sidr::RepPacket, sidr::RepRepr, repr, mad::DATA_LEN);
    }

    #[test]
    fn mad_header_round_trips(repr in mad_header()) {
        round_trip!(mad::Packet, mad::Repr, repr, mad::HEADER_LEN);
    }

    #[test]
    fn cma_header_round_trips(repr in cma_repr()) {
        round_trip!(cma::Packet, cma::Repr, repr, cma::HEADER_LEN);
    }

    /// A whole MAD: a CM header for the message's attribute, the message,
    /// read back through `CmMessage`.
    #[test]
    fn cm_message_round_trips(message in cm_message(), tid in any::<u64>()) {
        let mut buf = vec![0xa5u8; mad::MAD_LEN];
        let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
        mad::Repr::cm(TransactionId(tid), message.attribute_id()).emit(&mut packet);
        message.emit(&mut packet).unwrap();
        prop_assert_eq!(message.buffer_len(), mad::DATA_LEN);
        let parsed = CmMessage::parse(&mad::Packet::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, message);
    }

    /// Every bit of every message is a field or a kept reserved bit.
    #[test]
    fn any_bytes_parse_and_emit_unchanged(data in array::<{ mad::DATA_LEN }>()) {
        bit_exact!(req::Packet, req::Repr, &data);
        bit_exact!(rep::Packet, rep::Repr, &data);
        bit_exact!(rtu::Packet, rtu::Repr, &data);
        bit_exact!(rej::Packet, rej::Repr, &data);
        bit_exact!(mra::Packet, mra::Repr, &data);
        bit_exact!(dreq::Packet, dreq::Repr, &data);
        bit_exact!(drep::Packet, drep::Repr, &data);
        bit_exact!(sidr::ReqPacket, sidr::ReqRepr, &data);
        bit_exact!(sidr::RepPacket, sidr::RepRepr, &data);
        bit_exact!(mad::Packet, mad::Repr, &data[..mad::HEADER_LEN]);
        bit_exact!(cma::Packet, cma::Repr, &data[..cma::HEADER_LEN]);
    }

    #[test]
    fn no_bytes_make_a_view_panic(bytes in vec(any::<u8>(), 0..300)) {
        no_panic!(req::Packet, req::Repr, &bytes, mad::DATA_LEN);
        no_panic!(rep::Packet, rep::Repr, &bytes, mad::DATA_LEN);
        no_panic!(rtu::Packet, rtu::Repr, &bytes, mad::DATA_LEN);
        no_panic!(rej::Packet, rej::Repr, &bytes, mad::DATA_LEN);
        no_panic!(mra::Packet, mra::Repr, &bytes, mad::DATA_LEN);
        no_panic!(dreq::Packet, dreq::Repr, &bytes, mad::DATA_LEN);
        no_panic!(drep::Packet, drep::Repr, &bytes, mad::DATA_LEN);
        no_panic!(sidr::ReqPacket, sidr::ReqRepr, &bytes, mad::DATA_LEN);
        no_panic!(sidr::RepPacket, sidr::RepRepr, &bytes, mad::DATA_LEN);
        no_panic!(mad::Packet, mad::Repr, &bytes, mad::HEADER_LEN);
        no_panic!(cma::Packet, cma::Repr, &bytes, cma::HEADER_LEN);
        if let Ok(p) = cma::Packet::new_checked(&bytes[..]) {
            let _ = (p.src_ip(), p.dst_ip());
        }
        if let Ok(p) = mad::Packet::new_checked(&bytes[..]) {
            prop_assert_eq!(p.data().len(), bytes.len().min(mad::MAD_LEN) - mad::HEADER_LEN);
            let _ = CmMessage::parse(&p);
        }
    }

    /// Any 256 bytes that claim to be a CM MAD: `CmMessage` reads them or
    /// says why not, and what it reads emits the same class data.
    #[test]
    fn any_cm_mad_parses_or_errs(
        data in array::<{ mad::DATA_LEN }>(),
        attribute in 0x0010u16..=0x001a,
    ) {
        let mut buf = vec![0u8; mad::MAD_LEN];
        let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
        mad::Repr::cm(TransactionId(1), AttributeId(attribute)).emit(&mut packet);
        packet.data_mut().copy_from_slice(&data);
        match CmMessage::parse(&mad::Packet::new_checked(&buf[..]).unwrap()) {
            Ok(message) => {
                prop_assert_eq!(message.attribute_id(), AttributeId(attribute));
                let mut out = vec![0u8; mad::MAD_LEN];
                message.emit(&mut mad::Packet::new_unchecked(&mut out[..])).unwrap();
                prop_assert_eq!(&out[mad::HEADER_LEN..], &data[..]);
            }
            Err(e) => {
                prop_assert!(matches!(e, Error::Malformed(_)));
                prop_assert!(attribute == 0x0019 || attribute == 0x001a);
            }
        }
    }
}
