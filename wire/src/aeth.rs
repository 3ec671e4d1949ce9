//! ACK Extended Transport Header (AETH): 4 bytes, in every ACK, NAK, READ
//! response first/last/only and ATOMIC ACKNOWLEDGE.
//!
//! ```text
//! +-----------+-----------------------------+
//! | syndrome  |  MSN (message sequence no.) |
//! +-----------+-----------------------------+
//!  bit 7: 0   bits 6-5: type   bits 4-0: value
//!  type 00 ACK       value = credit count code (31: no credit information)
//!  type 01 RNR NAK   value = RNR timer code (how long to wait, see RNR_TIMER_US)
//!  type 11 NAK       value = NAK code (0 PSN sequence error, 1 invalid request,
//!                    2 remote access error, 3 remote operational error,
//!                    4 invalid RD request)
//! ```
//!
//! The MSN counts the messages the responder has completed; the requester
//! uses it with the PSN to retire its send queue.

use crate::{bytes, Result};
use core::fmt;

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

fixed_header_view!(4);

/// The syndrome rxe sends on a plain ACK: ACK with credit code 31 (no
/// end-to-end credit information).
pub const SYNDROME_ACK_NO_CREDITS: u8 = 0x1f;

/// RNR NAK timer (IBA table 45): code → microseconds to wait before
/// retrying. Code 0 is the longest wait, 655.36 ms.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// End-to-end credit count (IBA 9.7.5.1.2): code → number of receive WQEs
/// the responder has available. Code 31 means "no credit information".
pub const CREDIT_COUNT: [u16; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Why a responder refused a request (a NAK's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// A PSN was skipped: the requester must go back to the expected PSN.
    PsnSequenceError,
    /// The request is invalid (bad opcode sequence, length, or QP type).
    InvalidRequest,
    /// R_Key, access rights or bounds check failed.
    RemoteAccessError,
    /// The responder could not complete the request (e.g. a DMA failure).
    RemoteOperationalError,
    /// Invalid RD request (reliable datagram only).
    InvalidRdRequest,
    /// A reserved NAK code (5..=31), kept as received.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(code) => code & 0x1f,
        }
    }

    /// The NAK code for a 5-bit value.
    pub const fn from_code(code: u8) -> NakCode {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }
}

/// The decoded AETH syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit code.
    Ack {
        /// Credit count code (0..=31); 31 means no credit information.
        credit_code: u8,
    },
    /// Receiver not ready: retry after the timer the code names.
    RnrNak {
        /// RNR timer code (0..=31), see [`RNR_TIMER_US`].
        timer_code: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with the reserved type 10 or bit 7 set, kept as received.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte. Every byte decodes, and [`Syndrome::to_u8`]
    /// gives it back unchanged.
    pub const fn from_u8(byte: u8) -> Syndrome {
        if byte & 0x80 != 0 {
            return Syndrome::Reserved(byte);
        }
        let value = byte & 0x1f;
        match (byte >> 5) & 0x3 {
            0b00 => Syndrome::Ack { credit_code: value },
            0b01 => Syndrome::RnrNak { timer_code: value },
            0b11 => Syndrome::Nak(NakCode::from_code(value)),
            _ => Syndrome::Reserved(byte),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credit_code } => credit_code & 0x1f,
            Syndrome::RnrNak { timer_code } => 0x20 | (timer_code & 0x1f),
            Syndrome::Nak(code) => 0x60 | code.code(),
            Syndrome::Reserved(byte) => byte,
        }
    }

    /// For an ACK, the number of credits, or `None` for "no credit
    /// information" (code 31) and for non-ACK syndromes.
    pub const fn credits(self) -> Option<u16> {
        match self {
            Syndrome::Ack { credit_code } if credit_code < 31 => {
                Some(CREDIT_COUNT[credit_code as usize])
            }
            _ => None,
        }
    }

    /// For an RNR NAK, how long the requester must wait, in microseconds.
    pub const fn rnr_wait_us(self) -> Option<u32> {
        match self {
            Syndrome::RnrNak { timer_code } => Some(RNR_TIMER_US[(timer_code & 0x1f) as usize]),
            _ => None,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack { credit_code: 31 } => write!(f, "ACK"),
            Syndrome::Ack { credit_code } => {
                write!(f, "ACK credits={}", CREDIT_COUNT[credit_code as usize])
            }
            Syndrome::RnrNak { timer_code } => write!(
                f,
                "RNR-NAK timer={} ({} us)",
                timer_code,
                RNR_TIMER_US[(timer_code & 0x1f) as usize]
            ),
            Syndrome::Nak(NakCode::PsnSequenceError) => write!(f, "NAK psn-sequence-error"),
            Syndrome::Nak(NakCode::InvalidRequest) => write!(f, "NAK invalid-request"),
            Syndrome::Nak(NakCode::RemoteAccessError) => write!(f, "NAK remote-access-error"),
            Syndrome::Nak(NakCode::RemoteOperationalError) => {
                write!(f, "NAK remote-operational-error")
            }
            Syndrome::Nak(NakCode::InvalidRdRequest) => write!(f, "NAK invalid-rd-request"),
            Syndrome::Nak(NakCode::Reserved(code)) => write!(f, "NAK reserved-code={code}"),
            Syndrome::Reserved(byte) => write!(f, "reserved-syndrome=0x{byte:02x}"),
        }
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.buffer.as_ref()[field::SYNDROME])
    }
    /// The message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        bytes::u24(&self.buffer.as_ref()[field::MSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, syndrome: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = syndrome.to_u8();
    }
    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, msn: u32) {
        bytes::set_u24(&mut self.buffer.as_mut()[field::MSN], msn & 0x00ff_ffff);
    }
}

/// The fields of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What the responder says.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Repr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr { syndrome: packet.syndrome(), msn: packet.msn() })
    }
    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_fixture() {
        let bytes = [0x1f, 0x00, 0x00, 0x2a];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.syndrome(), Syndrome::Ack { credit_code: 31 });
        assert_eq!(p.syndrome().credits(), None);
        assert_eq!(p.msn(), 42);
        let mut buf = [0xa5u8; 4];
        Repr::parse(&p).unwrap().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }

    #[test]
    fn nak_and_rnr_fixtures() {
        let cases = [
            (0x60, Syndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, Syndrome::Nak(NakCode::InvalidRequest)),
            (0x62, Syndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, Syndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, Syndrome::Nak(NakCode::InvalidRdRequest)),
            (0x65, Syndrome::Nak(NakCode::Reserved(5))),
            (0x2c, Syndrome::RnrNak { timer_code: 12 }),
            (0x05, Syndrome::Ack { credit_code: 5 }),
            (0x40, Syndrome::Reserved(0x40)),
            (0x9f, Syndrome::Reserved(0x9f)),
        ];
        for (byte, syndrome) in cases {
            assert_eq!(Syndrome::from_u8(byte), syndrome, "byte {byte:#x}");
            assert_eq!(syndrome.to_u8(), byte);
        }
        assert_eq!(Syndrome::RnrNak { timer_code: 12 }.rnr_wait_us(), Some(640));
        assert_eq!(Syndrome::Ack { credit_code: 5 }.credits(), Some(6));
    }

    #[test]
    fn every_syndrome_byte_round_trips() {
        for byte in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(byte).to_u8(), byte);
        }
    }

    #[test]
    fn rnr_timer_table_matches_iba() {
        assert_eq!(RNR_TIMER_US[0], 655_360);
        assert_eq!(RNR_TIMER_US[1], 10);
        assert_eq!(RNR_TIMER_US[14], 1_280);
        assert_eq!(RNR_TIMER_US[31], 491_520);
        // From code 4 on, each code doubles the one two below it.
        for code in 4..32 {
            assert_eq!(RNR_TIMER_US[code], 2 * RNR_TIMER_US[code - 2], "code {code}");
        }
    }

    #[test]
    fn truncated() {
        assert_eq!(Packet::new_checked(&[0u8; 3][..]).unwrap_err(), crate::Error::Truncated);
    }
}
