use super::*;

#[test]
fn every_entry_sits_at_its_own_index() {
    for (index, entry) in OPCODE_TABLE.iter().enumerate() {
        if let Some(info) = entry {
            assert_eq!(usize::from(info.opcode.0), index, "{}", info.name);
            assert!(info.name.starts_with(match info.opcode.transport() {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Rd => "RD_",
                Transport::Ud => "UD_",
                other => panic!("{} has transport {other:?}", info.name),
            }));
        }
    }
    assert_eq!(known().count(), 60);
}

#[test]
fn offsets_add_up_to_the_header_length() {
    for info in known() {
        let mut expected_offset = crate::bth::HEADER_LEN;
        for kind in HeaderKind::ALL {
            if let Some(offset) = info.offset(kind) {
                assert_eq!(offset, expected_offset, "{} {}", info.name, kind.name());
                expected_offset += kind.header_len();
            }
        }
        assert_eq!(info.length, expected_offset, "{} length", info.name);
    }
}

#[test]
fn header_bits_agree_with_the_names() {
    for info in known() {
        let n = info.name;
        let has = |m: Mask| info.is(m);
        let imm = n.contains("WITH_IMMEDIATE");
        assert_eq!(has(Mask::IMMDT), imm, "{n} ImmDt");
        assert_eq!(has(Mask::IETH), n.contains("WITH_INVALIDATE"), "{n} IETH");
        let reth = n.ends_with("RDMA_WRITE_FIRST")
            || n.contains("RDMA_WRITE_ONLY")
            || n.ends_with("READ_REQUEST")
            || n.ends_with("FLUSH")
            || n.ends_with("ATOMIC_WRITE");
        assert_eq!(has(Mask::RETH), reth, "{n} RETH");
        let aeth =
            n.ends_with("ACKNOWLEDGE") || (n.contains("READ_RESPONSE") && !n.ends_with("MIDDLE"));
        assert_eq!(has(Mask::AETH), aeth, "{n} AETH");
        assert_eq!(has(Mask::ATOMIC_ACK_ETH), n.ends_with("ATOMIC_ACKNOWLEDGE"), "{n}");
        let atomic = n.ends_with("COMPARE_SWAP") || n.ends_with("FETCH_ADD");
        assert_eq!(has(Mask::ATOMIC_ETH), atomic, "{n} AtomicETH");
        assert_eq!(has(Mask::FETH), n.ends_with("FLUSH"), "{n} FETH");
        let transport = info.opcode.transport();
        assert_eq!(has(Mask::RDETH), transport == Transport::Rd, "{n} RDETH");
        let deth = transport == Transport::Ud || (transport == Transport::Rd && has(Mask::REQ));
        assert_eq!(has(Mask::DETH), deth, "{n} DETH");
    }
}

#[test]
fn role_bits_are_consistent() {
    for info in known() {
        let n = info.name;
        let has = |m: Mask| info.is(m);
        // Exactly one direction.
        assert!(has(Mask::REQ) ^ has(Mask::RESP), "{n} direction");
        // Position in the message follows the name.
        let first = n.ends_with("_FIRST");
        let middle = n.ends_with("_MIDDLE");
        let last = n.contains("_LAST");
        assert_eq!(has(Mask::START), !middle && !last, "{n} START");
        assert_eq!(has(Mask::MIDDLE), middle, "{n} MIDDLE");
        assert_eq!(has(Mask::END), !first && !middle, "{n} END");
        // Exactly one operation class for requests.
        let ops =
            [Mask::SEND, Mask::WRITE, Mask::READ, Mask::ATOMIC, Mask::ATOMIC_WRITE, Mask::FLUSH];
        let classes = ops.iter().filter(|&&m| has(m)).count();
        if has(Mask::REQ) {
            assert_eq!(classes, 1, "{n} operation class");
        }
        // Only SENDs and WRITE-with-immediate consume a receive WQE, on
        // their first packet (or the immediate-carrying last packet).
        if has(Mask::RWR) {
            assert!(has(Mask::SEND) || (has(Mask::WRITE) && has(Mask::IMMDT)), "{n} RWR");
            assert!(has(Mask::START) || has(Mask::IMMDT), "{n} RWR position");
        }
        // A receive completion is produced by the end of a message that
        // consumed a receive WQE.
        if has(Mask::COMP) {
            assert!(has(Mask::END) && (has(Mask::SEND) || has(Mask::IMMDT)), "{n} COMP");
        }
        if has(Mask::SEND) && has(Mask::END) {
            assert!(has(Mask::COMP), "{n} SEND end completes");
        }
        // Payload: everything that moves data.
        let payload = has(Mask::SEND)
            || has(Mask::WRITE)
            || has(Mask::ATOMIC_WRITE)
            || (has(Mask::READ) && has(Mask::RESP));
        assert_eq!(has(Mask::PAYLOAD), payload, "{n} PAYLOAD");
    }
}

#[test]
fn known_values_from_the_spec() {
    assert_eq!(Opcode::RC_SEND_FIRST.0, 0x00);
    assert_eq!(Opcode::RC_ACKNOWLEDGE.0, 0x11);
    assert_eq!(Opcode::RC_FETCH_ADD.0, 0x14);
    assert_eq!(Opcode::RC_SEND_ONLY_WITH_INVALIDATE.0, 0x17);
    assert_eq!(Opcode::RC_FLUSH.0, 0x1c);
    assert_eq!(Opcode::RC_ATOMIC_WRITE.0, 0x1d);
    assert_eq!(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.0, 0x2b);
    assert_eq!(Opcode::UD_SEND_ONLY.0, 0x64);
    assert_eq!(Opcode(0x15).info(), None);
    assert_eq!(Opcode(0x81).transport(), Transport::Cnp);
    assert_eq!(Opcode(0x15).name(), "UNKNOWN");
    let flush = Opcode::RC_FLUSH.info().unwrap();
    assert_eq!(flush.offset(HeaderKind::Feth), Some(12));
    assert_eq!(flush.offset(HeaderKind::Reth), Some(16));
    assert_eq!(flush.length, 32);
    let ack = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
    assert_eq!(ack.offset(HeaderKind::AtomicAckEth), Some(16));
    assert_eq!(ack.length, 24);
    let ud_imm = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
    assert_eq!(ud_imm.offset(HeaderKind::ImmDt), Some(20));
    assert_eq!(ud_imm.length, 24);
}
