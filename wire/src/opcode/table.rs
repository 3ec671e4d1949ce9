//! The opcode table itself: one entry per opcode rxe knows.

use super::{HeaderKind, Mask, Opcode, OpcodeInfo};

/// Builds a table entry from its mask bits and the (header, offset) list.
const fn entry(
    opcode: Opcode,
    name: &'static str,
    facts: &[Mask],
    headers: &[(HeaderKind, u8)],
    length: usize,
) -> Option<OpcodeInfo> {
    let mut mask = Mask::EMPTY;
    let mut i = 0;
    while i < facts.len() {
        mask = mask.union(facts[i]);
        i += 1;
    }
    let mut offsets = [0u8; 9];
    let mut j = 0;
    while j < headers.len() {
        offsets[headers[j].0 as usize] = headers[j].1;
        j += 1;
    }
    Some(OpcodeInfo { opcode, name, mask, length, offsets })
}

type M = Mask;
type H = HeaderKind;

/// The opcode table, indexed by opcode byte; `None` for unknown opcodes.
pub const OPCODE_TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    t[0x00] = entry(
        Opcode::RC_SEND_FIRST,
        "RC_SEND_FIRST",
        &[M::PAYLOAD, M::REQ, M::RWR, M::SEND, M::START],
        &[],
        12,
    );
    t[0x01] = entry(
        Opcode::RC_SEND_MIDDLE,
        "RC_SEND_MIDDLE",
        &[M::PAYLOAD, M::REQ, M::SEND, M::MIDDLE],
        &[],
        12,
    );
    t[0x02] = entry(
        Opcode::RC_SEND_LAST,
        "RC_SEND_LAST",
        &[M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[],
        12,
    );
    t[0x03] = entry(
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        "RC_SEND_LAST_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x04] = entry(
        Opcode::RC_SEND_ONLY,
        "RC_SEND_ONLY",
        &[M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[],
        12,
    );
    t[0x05] = entry(
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x06] = entry(
        Opcode::RC_RDMA_WRITE_FIRST,
        "RC_RDMA_WRITE_FIRST",
        &[M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START],
        &[(H::Reth, 12)],
        28,
    );
    t[0x07] = entry(
        Opcode::RC_RDMA_WRITE_MIDDLE,
        "RC_RDMA_WRITE_MIDDLE",
        &[M::PAYLOAD, M::REQ, M::WRITE, M::MIDDLE],
        &[],
        12,
    );
    t[0x08] = entry(
        Opcode::RC_RDMA_WRITE_LAST,
        "RC_RDMA_WRITE_LAST",
        &[M::PAYLOAD, M::REQ, M::WRITE, M::END],
        &[],
        12,
    );
    t[0x09] = entry(
        Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::WRITE, M::COMP, M::RWR, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x0a] = entry(
        Opcode::RC_RDMA_WRITE_ONLY,
        "RC_RDMA_WRITE_ONLY",
        &[M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START, M::END],
        &[(H::Reth, 12)],
        28,
    );
    t[0x0b] = entry(
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        &[M::RETH, M::IMMDT, M::PAYLOAD, M::REQ, M::WRITE, M::COMP, M::RWR, M::START, M::END],
        &[(H::Reth, 12), (H::ImmDt, 28)],
        32,
    );
    t[0x0c] = entry(
        Opcode::RC_RDMA_READ_REQUEST,
        "RC_RDMA_READ_REQUEST",
        &[M::RETH, M::REQ, M::READ, M::START, M::END],
        &[(H::Reth, 12)],
        28,
    );
    t[0x0d] = entry(
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        "RC_RDMA_READ_RESPONSE_FIRST",
        &[M::AETH, M::PAYLOAD, M::RESP, M::READ, M::START],
        &[(H::Aeth, 12)],
        16,
    );
    t[0x0e] = entry(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        &[M::PAYLOAD, M::RESP, M::READ, M::MIDDLE],
        &[],
        12,
    );
    t[0x0f] = entry(
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        "RC_RDMA_READ_RESPONSE_LAST",
        &[M::AETH, M::PAYLOAD, M::RESP, M::READ, M::END],
        &[(H::Aeth, 12)],
        16,
    );
    t[0x10] = entry(
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        "RC_RDMA_READ_RESPONSE_ONLY",
        &[M::AETH, M::PAYLOAD, M::RESP, M::READ, M::START, M::END],
        &[(H::Aeth, 12)],
        16,
    );
    t[0x11] = entry(
        Opcode::RC_ACKNOWLEDGE,
        "RC_ACKNOWLEDGE",
        &[M::AETH, M::RESP, M::START, M::END],
        &[(H::Aeth, 12)],
        16,
    );
    t[0x12] = entry(
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        "RC_ATOMIC_ACKNOWLEDGE",
        &[M::AETH, M::ATOMIC_ACK_ETH, M::RESP, M::ATOMIC, M::START, M::END],
        &[(H::Aeth, 12), (H::AtomicAckEth, 16)],
        24,
    );
    t[0x13] = entry(
        Opcode::RC_COMPARE_SWAP,
        "RC_COMPARE_SWAP",
        &[M::ATOMIC_ETH, M::REQ, M::ATOMIC, M::START, M::END],
        &[(H::AtomicEth, 12)],
        40,
    );
    t[0x14] = entry(
        Opcode::RC_FETCH_ADD,
        "RC_FETCH_ADD",
        &[M::ATOMIC_ETH, M::REQ, M::ATOMIC, M::START, M::END],
        &[(H::AtomicEth, 12)],
        40,
    );
    t[0x16] = entry(
        Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        "RC_SEND_LAST_WITH_INVALIDATE",
        &[M::IETH, M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[(H::Ieth, 12)],
        16,
    );
    t[0x17] = entry(
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        "RC_SEND_ONLY_WITH_INVALIDATE",
        &[M::IETH, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::Ieth, 12)],
        16,
    );
    t[0x1c] = entry(
        Opcode::RC_FLUSH,
        "RC_FLUSH",
        &[M::FETH, M::RETH, M::REQ, M::FLUSH, M::START, M::END],
        &[(H::Feth, 12), (H::Reth, 16)],
        32,
    );
    t[0x1d] = entry(
        Opcode::RC_ATOMIC_WRITE,
        "RC_ATOMIC_WRITE",
        &[M::RETH, M::PAYLOAD, M::REQ, M::ATOMIC_WRITE, M::START, M::END],
        &[(H::Reth, 12)],
        28,
    );
    t[0x20] = entry(
        Opcode::UC_SEND_FIRST,
        "UC_SEND_FIRST",
        &[M::PAYLOAD, M::REQ, M::RWR, M::SEND, M::START],
        &[],
        12,
    );
    t[0x21] = entry(
        Opcode::UC_SEND_MIDDLE,
        "UC_SEND_MIDDLE",
        &[M::PAYLOAD, M::REQ, M::SEND, M::MIDDLE],
        &[],
        12,
    );
    t[0x22] = entry(
        Opcode::UC_SEND_LAST,
        "UC_SEND_LAST",
        &[M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[],
        12,
    );
    t[0x23] = entry(
        Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
        "UC_SEND_LAST_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x24] = entry(
        Opcode::UC_SEND_ONLY,
        "UC_SEND_ONLY",
        &[M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[],
        12,
    );
    t[0x25] = entry(
        Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x26] = entry(
        Opcode::UC_RDMA_WRITE_FIRST,
        "UC_RDMA_WRITE_FIRST",
        &[M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START],
        &[(H::Reth, 12)],
        28,
    );
    t[0x27] = entry(
        Opcode::UC_RDMA_WRITE_MIDDLE,
        "UC_RDMA_WRITE_MIDDLE",
        &[M::PAYLOAD, M::REQ, M::WRITE, M::MIDDLE],
        &[],
        12,
    );
    t[0x28] = entry(
        Opcode::UC_RDMA_WRITE_LAST,
        "UC_RDMA_WRITE_LAST",
        &[M::PAYLOAD, M::REQ, M::WRITE, M::END],
        &[],
        12,
    );
    t[0x29] = entry(
        Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        &[M::IMMDT, M::PAYLOAD, M::REQ, M::WRITE, M::COMP, M::RWR, M::END],
        &[(H::ImmDt, 12)],
        16,
    );
    t[0x2a] = entry(
        Opcode::UC_RDMA_WRITE_ONLY,
        "UC_RDMA_WRITE_ONLY",
        &[M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START, M::END],
        &[(H::Reth, 12)],
        28,
    );
    t[0x2b] = entry(
        Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        &[M::RETH, M::IMMDT, M::PAYLOAD, M::REQ, M::WRITE, M::COMP, M::RWR, M::START, M::END],
        &[(H::Reth, 12), (H::ImmDt, 28)],
        32,
    );
    t[0x40] = entry(
        Opcode::RD_SEND_FIRST,
        "RD_SEND_FIRST",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::RWR, M::SEND, M::START],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x41] = entry(
        Opcode::RD_SEND_MIDDLE,
        "RD_SEND_MIDDLE",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::SEND, M::MIDDLE],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x42] = entry(
        Opcode::RD_SEND_LAST,
        "RD_SEND_LAST",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x43] = entry(
        Opcode::RD_SEND_LAST_WITH_IMMEDIATE,
        "RD_SEND_LAST_WITH_IMMEDIATE",
        &[M::RDETH, M::DETH, M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::SEND, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::ImmDt, 24)],
        28,
    );
    t[0x44] = entry(
        Opcode::RD_SEND_ONLY,
        "RD_SEND_ONLY",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x45] = entry(
        Opcode::RD_SEND_ONLY_WITH_IMMEDIATE,
        "RD_SEND_ONLY_WITH_IMMEDIATE",
        &[
            M::RDETH,
            M::DETH,
            M::IMMDT,
            M::PAYLOAD,
            M::REQ,
            M::COMP,
            M::RWR,
            M::SEND,
            M::START,
            M::END,
        ],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::ImmDt, 24)],
        28,
    );
    t[0x46] = entry(
        Opcode::RD_RDMA_WRITE_FIRST,
        "RD_RDMA_WRITE_FIRST",
        &[M::RDETH, M::DETH, M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::Reth, 24)],
        40,
    );
    t[0x47] = entry(
        Opcode::RD_RDMA_WRITE_MIDDLE,
        "RD_RDMA_WRITE_MIDDLE",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::WRITE, M::MIDDLE],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x48] = entry(
        Opcode::RD_RDMA_WRITE_LAST,
        "RD_RDMA_WRITE_LAST",
        &[M::RDETH, M::DETH, M::PAYLOAD, M::REQ, M::WRITE, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16)],
        24,
    );
    t[0x49] = entry(
        Opcode::RD_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        "RD_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        &[M::RDETH, M::DETH, M::IMMDT, M::PAYLOAD, M::REQ, M::WRITE, M::COMP, M::RWR, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::ImmDt, 24)],
        28,
    );
    t[0x4a] = entry(
        Opcode::RD_RDMA_WRITE_ONLY,
        "RD_RDMA_WRITE_ONLY",
        &[M::RDETH, M::DETH, M::RETH, M::PAYLOAD, M::REQ, M::WRITE, M::START, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::Reth, 24)],
        40,
    );
    t[0x4b] = entry(
        Opcode::RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        &[
            M::RDETH,
            M::DETH,
            M::RETH,
            M::IMMDT,
            M::PAYLOAD,
            M::REQ,
            M::WRITE,
            M::COMP,
            M::RWR,
            M::START,
            M::END,
        ],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::Reth, 24), (H::ImmDt, 40)],
        44,
    );
    t[0x4c] = entry(
        Opcode::RD_RDMA_READ_REQUEST,
        "RD_RDMA_READ_REQUEST",
        &[M::RDETH, M::DETH, M::RETH, M::REQ, M::READ, M::START, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::Reth, 24)],
        40,
    );
    t[0x4d] = entry(
        Opcode::RD_RDMA_READ_RESPONSE_FIRST,
        "RD_RDMA_READ_RESPONSE_FIRST",
        &[M::RDETH, M::AETH, M::PAYLOAD, M::RESP, M::READ, M::START],
        &[(H::Rdeth, 12), (H::Aeth, 16)],
        20,
    );
    t[0x4e] = entry(
        Opcode::RD_RDMA_READ_RESPONSE_MIDDLE,
        "RD_RDMA_READ_RESPONSE_MIDDLE",
        &[M::RDETH, M::PAYLOAD, M::RESP, M::READ, M::MIDDLE],
        &[(H::Rdeth, 12)],
        16,
    );
    t[0x4f] = entry(
        Opcode::RD_RDMA_READ_RESPONSE_LAST,
        "RD_RDMA_READ_RESPONSE_LAST",
        &[M::RDETH, M::AETH, M::PAYLOAD, M::RESP, M::READ, M::END],
        &[(H::Rdeth, 12), (H::Aeth, 16)],
        20,
    );
    t[0x50] = entry(
        Opcode::RD_RDMA_READ_RESPONSE_ONLY,
        "RD_RDMA_READ_RESPONSE_ONLY",
        &[M::RDETH, M::AETH, M::PAYLOAD, M::RESP, M::READ, M::START, M::END],
        &[(H::Rdeth, 12), (H::Aeth, 16)],
        20,
    );
    t[0x51] = entry(
        Opcode::RD_ACKNOWLEDGE,
        "RD_ACKNOWLEDGE",
        &[M::RDETH, M::AETH, M::RESP, M::START, M::END],
        &[(H::Rdeth, 12), (H::Aeth, 16)],
        20,
    );
    t[0x52] = entry(
        Opcode::RD_ATOMIC_ACKNOWLEDGE,
        "RD_ATOMIC_ACKNOWLEDGE",
        &[M::RDETH, M::AETH, M::ATOMIC_ACK_ETH, M::RESP, M::ATOMIC, M::START, M::END],
        &[(H::Rdeth, 12), (H::Aeth, 16), (H::AtomicAckEth, 20)],
        28,
    );
    t[0x53] = entry(
        Opcode::RD_COMPARE_SWAP,
        "RD_COMPARE_SWAP",
        &[M::RDETH, M::DETH, M::ATOMIC_ETH, M::REQ, M::ATOMIC, M::START, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::AtomicEth, 24)],
        52,
    );
    t[0x54] = entry(
        Opcode::RD_FETCH_ADD,
        "RD_FETCH_ADD",
        &[M::RDETH, M::DETH, M::ATOMIC_ETH, M::REQ, M::ATOMIC, M::START, M::END],
        &[(H::Rdeth, 12), (H::Deth, 16), (H::AtomicEth, 24)],
        52,
    );
    t[0x64] = entry(
        Opcode::UD_SEND_ONLY,
        "UD_SEND_ONLY",
        &[M::DETH, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::Deth, 12)],
        20,
    );
    t[0x65] = entry(
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        &[M::DETH, M::IMMDT, M::PAYLOAD, M::REQ, M::COMP, M::RWR, M::SEND, M::START, M::END],
        &[(H::Deth, 12), (H::ImmDt, 20)],
        24,
    );
    t
};
