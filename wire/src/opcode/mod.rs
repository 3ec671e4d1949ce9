//! The opcode table: for every opcode, which headers follow the BTH and at
//! which offsets, whether a payload follows, and what the packet means.
//!
//! This is the one place that knows opcodes. An engine never lists opcodes;
//! it asks the table (`info.mask.contains(Mask::RWR)`: "does this packet
//! consume a receive WQE?"), as Linux rxe does with `rxe_opcode[]`.
//!
//! The opcode byte is `transport << 5 | operation`: RC 0x00, UC 0x20,
//! RD 0x40, UD 0x60, CNP 0x80, XRC 0xa0. The table knows every RC, UC, RD
//! and UD opcode that Linux rxe knows (RD only so that it decodes: nobody
//! implements RD), including FLUSH and ATOMIC WRITE.
//!
//! Where uroce's table says more than rxe's: READ responses carry
//! [`Mask::READ`] and the ATOMIC ACKNOWLEDGE carries [`Mask::ATOMIC`], so
//! that `RESP | READ` reads "a READ response".

use core::fmt;

/// An opcode byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// `RC_SEND_FIRST` (0x00).
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// `RC_SEND_MIDDLE` (0x01).
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// `RC_SEND_LAST` (0x02).
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// `RC_SEND_LAST_WITH_IMMEDIATE` (0x03).
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// `RC_SEND_ONLY` (0x04).
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// `RC_SEND_ONLY_WITH_IMMEDIATE` (0x05).
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// `RC_RDMA_WRITE_FIRST` (0x06).
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// `RC_RDMA_WRITE_MIDDLE` (0x07).
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// `RC_RDMA_WRITE_LAST` (0x08).
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// `RC_RDMA_WRITE_LAST_WITH_IMMEDIATE` (0x09).
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// `RC_RDMA_WRITE_ONLY` (0x0a).
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0a);
    /// `RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE` (0x0b).
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0b);
    /// `RC_RDMA_READ_REQUEST` (0x0c).
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0c);
    /// `RC_RDMA_READ_RESPONSE_FIRST` (0x0d).
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0d);
    /// `RC_RDMA_READ_RESPONSE_MIDDLE` (0x0e).
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0e);
    /// `RC_RDMA_READ_RESPONSE_LAST` (0x0f).
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0f);
    /// `RC_RDMA_READ_RESPONSE_ONLY` (0x10).
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// `RC_ACKNOWLEDGE` (0x11).
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// `RC_ATOMIC_ACKNOWLEDGE` (0x12).
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// `RC_COMPARE_SWAP` (0x13).
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// `RC_FETCH_ADD` (0x14).
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// `RC_SEND_LAST_WITH_INVALIDATE` (0x16).
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// `RC_SEND_ONLY_WITH_INVALIDATE` (0x17).
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// `RC_FLUSH` (0x1c).
    pub const RC_FLUSH: Opcode = Opcode(0x1c);
    /// `RC_ATOMIC_WRITE` (0x1d).
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1d);
    /// `UC_SEND_FIRST` (0x20).
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// `UC_SEND_MIDDLE` (0x21).
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// `UC_SEND_LAST` (0x22).
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// `UC_SEND_LAST_WITH_IMMEDIATE` (0x23).
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// `UC_SEND_ONLY` (0x24).
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// `UC_SEND_ONLY_WITH_IMMEDIATE` (0x25).
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// `UC_RDMA_WRITE_FIRST` (0x26).
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// `UC_RDMA_WRITE_MIDDLE` (0x27).
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// `UC_RDMA_WRITE_LAST` (0x28).
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// `UC_RDMA_WRITE_LAST_WITH_IMMEDIATE` (0x29).
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// `UC_RDMA_WRITE_ONLY` (0x2a).
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2a);
    /// `UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE` (0x2b).
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2b);
    /// `RD_SEND_FIRST` (0x40).
    pub const RD_SEND_FIRST: Opcode = Opcode(0x40);
    /// `RD_SEND_MIDDLE` (0x41).
    pub const RD_SEND_MIDDLE: Opcode = Opcode(0x41);
    /// `RD_SEND_LAST` (0x42).
    pub const RD_SEND_LAST: Opcode = Opcode(0x42);
    /// `RD_SEND_LAST_WITH_IMMEDIATE` (0x43).
    pub const RD_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x43);
    /// `RD_SEND_ONLY` (0x44).
    pub const RD_SEND_ONLY: Opcode = Opcode(0x44);
    /// `RD_SEND_ONLY_WITH_IMMEDIATE` (0x45).
    pub const RD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x45);
    /// `RD_RDMA_WRITE_FIRST` (0x46).
    pub const RD_RDMA_WRITE_FIRST: Opcode = Opcode(0x46);
    /// `RD_RDMA_WRITE_MIDDLE` (0x47).
    pub const RD_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x47);
    /// `RD_RDMA_WRITE_LAST` (0x48).
    pub const RD_RDMA_WRITE_LAST: Opcode = Opcode(0x48);
    /// `RD_RDMA_WRITE_LAST_WITH_IMMEDIATE` (0x49).
    pub const RD_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x49);
    /// `RD_RDMA_WRITE_ONLY` (0x4a).
    pub const RD_RDMA_WRITE_ONLY: Opcode = Opcode(0x4a);
    /// `RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE` (0x4b).
    pub const RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x4b);
    /// `RD_RDMA_READ_REQUEST` (0x4c).
    pub const RD_RDMA_READ_REQUEST: Opcode = Opcode(0x4c);
    /// `RD_RDMA_READ_RESPONSE_FIRST` (0x4d).
    pub const RD_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x4d);
    /// `RD_RDMA_READ_RESPONSE_MIDDLE` (0x4e).
    pub const RD_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x4e);
    /// `RD_RDMA_READ_RESPONSE_LAST` (0x4f).
    pub const RD_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x4f);
    /// `RD_RDMA_READ_RESPONSE_ONLY` (0x50).
    pub const RD_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x50);
    /// `RD_ACKNOWLEDGE` (0x51).
    pub const RD_ACKNOWLEDGE: Opcode = Opcode(0x51);
    /// `RD_ATOMIC_ACKNOWLEDGE` (0x52).
    pub const RD_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x52);
    /// `RD_COMPARE_SWAP` (0x53).
    pub const RD_COMPARE_SWAP: Opcode = Opcode(0x53);
    /// `RD_FETCH_ADD` (0x54).
    pub const RD_FETCH_ADD: Opcode = Opcode(0x54);
    /// `UD_SEND_ONLY` (0x64).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// `UD_SEND_ONLY_WITH_IMMEDIATE` (0x65).
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);

    /// The table entry, or `None` for an opcode the table does not know.
    pub const fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODE_TABLE[self.0 as usize].as_ref()
    }

    /// The transport service: the top three bits.
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            other => Transport::Reserved(other),
        }
    }

    /// The name in the table (`RC_SEND_FIRST`), or `UNKNOWN`.
    pub const fn name(self) -> &'static str {
        match self.info() {
            Some(info) => info.name,
            None => "UNKNOWN",
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram.
    Rd,
    /// Unreliable datagram.
    Ud,
    /// Congestion notification packet (RoCEv2).
    Cnp,
    /// Extended reliable connected.
    Xrc,
    /// Reserved transport values 6 and 7.
    Reserved(u8),
}

/// A set of facts about an opcode, tested with [`Mask::contains`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mask(u32);

impl Mask {
    /// An RDETH follows.
    pub const RDETH: Mask = Mask(1 << 0);
    /// A DETH follows.
    pub const DETH: Mask = Mask(1 << 1);
    /// A FETH follows.
    pub const FETH: Mask = Mask(1 << 2);
    /// A RETH follows.
    pub const RETH: Mask = Mask(1 << 3);
    /// An AtomicETH follows.
    pub const ATOMIC_ETH: Mask = Mask(1 << 4);
    /// An AETH follows.
    pub const AETH: Mask = Mask(1 << 5);
    /// An AtomicAckETH follows.
    pub const ATOMIC_ACK_ETH: Mask = Mask(1 << 6);
    /// An ImmDt header follows.
    pub const IMMDT: Mask = Mask(1 << 7);
    /// An IETH follows.
    pub const IETH: Mask = Mask(1 << 8);
    /// A payload may follow the headers.
    pub const PAYLOAD: Mask = Mask(1 << 9);
    /// Sent by a requester.
    pub const REQ: Mask = Mask(1 << 10);
    /// Sent by a responder (ACK, NAK, READ response, ATOMIC ACK).
    pub const RESP: Mask = Mask(1 << 11);
    /// Part of a SEND.
    pub const SEND: Mask = Mask(1 << 12);
    /// Part of an RDMA WRITE.
    pub const WRITE: Mask = Mask(1 << 13);
    /// Part of an RDMA READ (the request or a response).
    pub const READ: Mask = Mask(1 << 14);
    /// An atomic (COMPARE_SWAP, FETCH_ADD, or their acknowledgement).
    pub const ATOMIC: Mask = Mask(1 << 15);
    /// An ATOMIC WRITE.
    pub const ATOMIC_WRITE: Mask = Mask(1 << 16);
    /// A FLUSH.
    pub const FLUSH: Mask = Mask(1 << 17);
    /// Consumes a receive WQE at the responder.
    pub const RWR: Mask = Mask(1 << 18);
    /// Completes a receive WQE at the responder (ends a message that
    /// produces a receive completion).
    pub const COMP: Mask = Mask(1 << 19);
    /// First packet of a message.
    pub const START: Mask = Mask(1 << 20);
    /// Middle packet of a message.
    pub const MIDDLE: Mask = Mask(1 << 21);
    /// Last packet of a message.
    pub const END: Mask = Mask(1 << 22);

    /// The empty set.
    pub const EMPTY: Mask = Mask(0);
    /// Every header-presence bit.
    pub const HEADERS: Mask = Mask(0x1ff);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The union of two sets.
    pub const fn union(self, other: Mask) -> Mask {
        Mask(self.0 | other.0)
    }

    /// The facts in both sets.
    pub const fn intersection(self, other: Mask) -> Mask {
        Mask(self.0 & other.0)
    }

    /// Whether every fact in `other` holds.
    pub const fn contains(self, other: Mask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any fact in `other` holds.
    pub const fn intersects(self, other: Mask) -> bool {
        self.0 & other.0 != 0
    }
}

impl core::ops::BitOr for Mask {
    type Output = Mask;
    fn bitor(self, other: Mask) -> Mask {
        self.union(other)
    }
}

impl fmt::Debug for Mask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 23] = [
            "RDETH",
            "DETH",
            "FETH",
            "RETH",
            "ATOMIC_ETH",
            "AETH",
            "ATOMIC_ACK_ETH",
            "IMMDT",
            "IETH",
            "PAYLOAD",
            "REQ",
            "RESP",
            "SEND",
            "WRITE",
            "READ",
            "ATOMIC",
            "ATOMIC_WRITE",
            "FLUSH",
            "RWR",
            "COMP",
            "START",
            "MIDDLE",
            "END",
        ];
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("EMPTY")?;
        }
        Ok(())
    }
}

/// The extension headers that may follow the BTH, in the order they appear
/// on the wire when several are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HeaderKind {
    /// Reliable datagram ETH.
    Rdeth,
    /// Datagram ETH.
    Deth,
    /// FLUSH ETH.
    Feth,
    /// RDMA ETH.
    Reth,
    /// Atomic ETH.
    AtomicEth,
    /// ACK ETH.
    Aeth,
    /// Atomic acknowledge ETH.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate ETH.
    Ieth,
}

impl HeaderKind {
    /// Every kind, in wire order.
    pub const ALL: [HeaderKind; 9] = [
        HeaderKind::Rdeth,
        HeaderKind::Deth,
        HeaderKind::Feth,
        HeaderKind::Reth,
        HeaderKind::AtomicEth,
        HeaderKind::Aeth,
        HeaderKind::AtomicAckEth,
        HeaderKind::ImmDt,
        HeaderKind::Ieth,
    ];

    /// Length of the header in bytes.
    pub const fn header_len(self) -> usize {
        match self {
            HeaderKind::Rdeth => crate::rdeth::HEADER_LEN,
            HeaderKind::Deth => crate::deth::HEADER_LEN,
            HeaderKind::Feth => crate::feth::HEADER_LEN,
            HeaderKind::Reth => crate::reth::HEADER_LEN,
            HeaderKind::AtomicEth => crate::atomic_eth::HEADER_LEN,
            HeaderKind::Aeth => crate::aeth::HEADER_LEN,
            HeaderKind::AtomicAckEth => crate::atomic_ack_eth::HEADER_LEN,
            HeaderKind::ImmDt => crate::immdt::HEADER_LEN,
            HeaderKind::Ieth => crate::ieth::HEADER_LEN,
        }
    }

    /// The mask bit saying that this header is present.
    pub const fn mask(self) -> Mask {
        match self {
            HeaderKind::Rdeth => Mask::RDETH,
            HeaderKind::Deth => Mask::DETH,
            HeaderKind::Feth => Mask::FETH,
            HeaderKind::Reth => Mask::RETH,
            HeaderKind::AtomicEth => Mask::ATOMIC_ETH,
            HeaderKind::Aeth => Mask::AETH,
            HeaderKind::AtomicAckEth => Mask::ATOMIC_ACK_ETH,
            HeaderKind::ImmDt => Mask::IMMDT,
            HeaderKind::Ieth => Mask::IETH,
        }
    }

    /// The header's name as the IBA spells it.
    pub const fn name(self) -> &'static str {
        match self {
            HeaderKind::Rdeth => "RDETH",
            HeaderKind::Deth => "DETH",
            HeaderKind::Feth => "FETH",
            HeaderKind::Reth => "RETH",
            HeaderKind::AtomicEth => "AtomicETH",
            HeaderKind::Aeth => "AETH",
            HeaderKind::AtomicAckEth => "AtomicAckETH",
            HeaderKind::ImmDt => "ImmDt",
            HeaderKind::Ieth => "IETH",
        }
    }
}

/// What the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// Its name, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    /// Headers present and role bits.
    pub mask: Mask,
    /// Length of BTH plus extension headers: the payload's offset.
    pub length: usize,
    /// Offset of each extension header from the start of the BTH, indexed
    /// by `HeaderKind as usize`; meaningful only where the mask says the
    /// header is present.
    pub offsets: [u8; 9],
}

impl OpcodeInfo {
    /// Offset of header `kind` from the start of the BTH, if present.
    pub const fn offset(&self, kind: HeaderKind) -> Option<usize> {
        if self.mask.contains(kind.mask()) {
            Some(self.offsets[kind as usize] as usize)
        } else {
            None
        }
    }

    /// Whether the mask holds every fact in `facts`.
    pub const fn is(&self, facts: Mask) -> bool {
        self.mask.contains(facts)
    }
}

mod table;

pub use table::OPCODE_TABLE;

/// Every known opcode's entry, in opcode order.
pub fn known() -> impl Iterator<Item = &'static OpcodeInfo> {
    OPCODE_TABLE.iter().flatten()
}

#[cfg(test)]
mod tests;
