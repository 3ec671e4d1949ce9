//! ConnectReject (REJ, attribute 0x0012): refuses a REQ or a REP, or
//! aborts a connection being set up, IBA vol 1 table 108. 232 bytes of
//! MAD class data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     remote communication ID (4)
//!    8     message rejected:2 reserved:6
//!    9     rejected info length:7 reserved:1
//!   10     reason (2)
//!   12     additional rejection information, ARI (72)
//!   84     private data (148)
//! ```
//!
//! Linux sends reason 8 ([`RejectReason::InvalidServiceId`]) when no one
//! listens on the service ID, 28 ([`RejectReason::ConsumerDefined`]) for
//! `rdma_reject()`, 4 ([`RejectReason::Timeout`]) when a handshake times
//! out and 10 ([`RejectReason::StaleConnection`]) for a REQ that reuses a
//! connection it still knows. A REJ sent for a REQ that found no
//! listener has no local ID of its own: Linux copies the REQ's local ID
//! into the remote ID and leaves the local ID 0.

use super::{array, get_bits, set_bits, CommId, MessageRef};
use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const REMOTE_COMM_ID: Range<usize> = 4..8;
    /// Message rejected (bits 0-1), reserved (2-7).
    pub const BYTE8: usize = 8;
    /// Rejected info length (bits 0-6), reserved (7).
    pub const BYTE9: usize = 9;
    pub const REASON: Range<usize> = 10..12;
    pub const ARI: Range<usize> = 12..84;
    pub const PRIVATE_DATA: Range<usize> = 84..232;
}

/// Length of the additional rejection information.
pub const ARI_LEN: usize = 72;
/// Length of a REJ's private data.
pub const PRIVATE_DATA_LEN: usize = 148;

/// Why a REJ rejects (IBA vol 1 table 109), with a catch-all for codes
/// this list does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// 1: no QP available.
    NoQp,
    /// 2: no EE context available.
    NoEec,
    /// 3: no resources available.
    NoResources,
    /// 4: timeout (the ARI holds the CA GUID of the side that timed out).
    Timeout,
    /// 5: unsupported request.
    Unsupported,
    /// 6: invalid communication ID.
    InvalidCommId,
    /// 7: invalid communication instance.
    InvalidCommInstance,
    /// 8: invalid service ID: what Linux answers when nothing listens.
    InvalidServiceId,
    /// 9: invalid transport service type.
    InvalidTransportType,
    /// 10: stale connection.
    StaleConnection,
    /// 11: RDC does not exist.
    RdcNotExist,
    /// 12: primary remote port GID rejected.
    InvalidGid,
    /// 13: primary remote port LID rejected.
    InvalidLid,
    /// 14: primary SL rejected.
    InvalidSl,
    /// 15: primary traffic class rejected.
    InvalidTrafficClass,
    /// 16: primary hop limit rejected.
    InvalidHopLimit,
    /// 17: primary packet rate rejected.
    InvalidPacketRate,
    /// 18: alternate remote port GID rejected.
    InvalidAltGid,
    /// 19: alternate remote port LID rejected.
    InvalidAltLid,
    /// 20: alternate SL rejected.
    InvalidAltSl,
    /// 21: alternate traffic class rejected.
    InvalidAltTrafficClass,
    /// 22: alternate hop limit rejected.
    InvalidAltHopLimit,
    /// 23: alternate packet rate rejected.
    InvalidAltPacketRate,
    /// 24: port and CM redirection.
    PortCmRedirect,
    /// 25: port redirection (not supported).
    PortRedirect,
    /// 26: invalid path MTU.
    InvalidMtu,
    /// 27: insufficient responder resources.
    InsufficientRespResources,
    /// 28: consumer-defined reject: `rdma_reject()`, the ARI unused and
    /// the consumer's reason in the private data.
    ConsumerDefined,
    /// 29: invalid RNR NAK retry count.
    InvalidRnrRetry,
    /// 30: duplicate local communication ID.
    DuplicateLocalCommId,
    /// 31: unsupported class version.
    InvalidClassVersion,
    /// 32: primary flow label rejected.
    InvalidFlowLabel,
    /// 33: alternate flow label rejected.
    InvalidAltFlowLabel,
    /// 35: vendor option not supported (ECE).
    VendorOptionNotSupported,
    /// Any other code.
    Other(u16),
}

const REASONS: [(u16, RejectReason); 34] = [
    (1, RejectReason::NoQp),
    (2, RejectReason::NoEec),
    (3, RejectReason::NoResources),
    (4, RejectReason::Timeout),
    (5, RejectReason::Unsupported),
    (6, RejectReason::InvalidCommId),
    (7, RejectReason::InvalidCommInstance),
    (8, RejectReason::InvalidServiceId),
    (9, RejectReason::InvalidTransportType),
    (10, RejectReason::StaleConnection),
    (11, RejectReason::RdcNotExist),
    (12, RejectReason::InvalidGid),
    (13, RejectReason::InvalidLid),
    (14, RejectReason::InvalidSl),
    (15, RejectReason::InvalidTrafficClass),
    (16, RejectReason::InvalidHopLimit),
    (17, RejectReason::InvalidPacketRate),
    (18, RejectReason::InvalidAltGid),
    (19, RejectReason::InvalidAltLid),
    (20, RejectReason::InvalidAltSl),
    (21, RejectReason::InvalidAltTrafficClass),
    (22, RejectReason::InvalidAltHopLimit),
    (23, RejectReason::InvalidAltPacketRate),
    (24, RejectReason::PortCmRedirect),
    (25, RejectReason::PortRedirect),
    (26, RejectReason::InvalidMtu),
    (27, RejectReason::InsufficientRespResources),
    (28, RejectReason::ConsumerDefined),
    (29, RejectReason::InvalidRnrRetry),
    (30, RejectReason::DuplicateLocalCommId),
    (31, RejectReason::InvalidClassVersion),
    (32, RejectReason::InvalidFlowLabel),
    (33, RejectReason::InvalidAltFlowLabel),
    (35, RejectReason::VendorOptionNotSupported),
];

impl From<u16> for RejectReason {
    fn from(code: u16) -> RejectReason {
        REASONS
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(RejectReason::Other(code), |(_, reason)| *reason)
    }
}

impl From<RejectReason> for u16 {
    fn from(reason: RejectReason) -> u16 {
        match reason {
            RejectReason::Other(code) => code,
            named => REASONS.iter().find(|(_, r)| *r == named).map_or(0, |(c, _)| *c),
        }
    }
}

fixed_header_view!(super::DATA_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The rejecting side's communication ID.
    pub fn local_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::LOCAL_COMM_ID]))
    }
    /// The other side's communication ID.
    pub fn remote_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::REMOTE_COMM_ID]))
    }
    /// Which message is rejected (2 bits: REQ, REP or none).
    pub fn message_rejected(&self) -> MessageRef {
        MessageRef(get_bits(self.data()[field::BYTE8], 0, 2))
    }
    /// The 6 reserved bits after the message rejected.
    pub fn resv6(&self) -> u8 {
        get_bits(self.data()[field::BYTE8], 2, 6)
    }
    /// How many bytes of the ARI are meaningful (7 bits).
    pub fn rejected_info_length(&self) -> u8 {
        get_bits(self.data()[field::BYTE9], 0, 7)
    }
    /// The reserved bit after the rejected info length.
    pub fn resv1(&self) -> bool {
        get_bits(self.data()[field::BYTE9], 7, 1) != 0
    }
    /// Why.
    pub fn reason(&self) -> RejectReason {
        RejectReason::from(bytes::u16(&self.data()[field::REASON]))
    }
    /// The additional rejection information (72 bytes; the first
    /// [`Packet::rejected_info_length`] are meaningful).
    pub fn ari(&self) -> &[u8] {
        &self.data()[field::ARI]
    }
    /// The private data (148 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.data()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, value: CommId) {
        self.data_mut()[field::LOCAL_COMM_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, value: CommId) {
        self.data_mut()[field::REMOTE_COMM_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the message rejected (low 2 bits).
    pub fn set_message_rejected(&mut self, value: MessageRef) {
        set_bits(&mut self.data_mut()[field::BYTE8], 0, 2, value.0);
    }
    /// Sets the 6 reserved bits after the message rejected.
    pub fn set_resv6(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE8], 2, 6, value);
    }
    /// Sets the rejected info length (low 7 bits).
    pub fn set_rejected_info_length(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE9], 0, 7, value);
    }
    /// Sets the reserved bit after the rejected info length.
    pub fn set_resv1(&mut self, value: bool) {
        set_bits(&mut self.data_mut()[field::BYTE9], 7, 1, u8::from(value));
    }
    /// Sets the reason.
    pub fn set_reason(&mut self, value: RejectReason) {
        self.data_mut()[field::REASON].copy_from_slice(&u16::from(value).to_be_bytes());
    }
    /// The additional rejection information, writable.
    pub fn ari_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::ARI]
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of a REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The rejecting side's communication ID.
    pub local_comm_id: CommId,
    /// The other side's communication ID.
    pub remote_comm_id: CommId,
    /// Which message is rejected (2 bits).
    pub message_rejected: MessageRef,
    /// The 6 reserved bits after it.
    pub resv6: u8,
    /// Meaningful bytes of the ARI (7 bits).
    pub rejected_info_length: u8,
    /// The reserved bit after it.
    pub resv1: bool,
    /// Why.
    pub reason: RejectReason,
    /// Additional rejection information.
    pub ari: [u8; ARI_LEN],
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a REJ.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_rejected: packet.message_rejected(),
            resv6: packet.resv6(),
            rejected_info_length: packet.rejected_info_length(),
            resv1: packet.resv1(),
            reason: packet.reason(),
            ari: array(packet.ari()),
            private_data: array(packet.private_data()),
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the message. Fields wider than their bit width are cut to it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_message_rejected(self.message_rejected);
        packet.set_resv6(self.resv6);
        packet.set_rejected_info_length(self.rejected_info_length);
        packet.set_resv1(self.resv1);
        packet.set_reason(self.reason);
        packet.ari_mut().copy_from_slice(&self.ari);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_both_ways() {
        for code in 0..=u16::MAX {
            assert_eq!(u16::from(RejectReason::from(code)), code);
        }
        assert_eq!(RejectReason::from(28), RejectReason::ConsumerDefined);
        assert_eq!(RejectReason::from(8), RejectReason::InvalidServiceId);
        assert_eq!(RejectReason::from(34), RejectReason::Other(34));
        assert_eq!(RejectReason::from(0), RejectReason::Other(0));
    }
}
