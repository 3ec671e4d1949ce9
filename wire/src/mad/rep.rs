//! ConnectReply (REP, attribute 0x0013): the passive side accepts a REQ,
//! IBA vol 1 table 110. 232 bytes of MAD class data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     remote communication ID (4)
//!    8     local Q_Key (4)
//!   12     local QPN (3)       | vendor ID high byte (1)
//!   16     local EECN (3)      | vendor ID middle byte (1)
//!   20     starting PSN (3)    | vendor ID low byte (1)
//!   24     responder resources (1) | initiator depth (1)
//!   26     target ACK delay:5 failover accepted:2 end-to-end flow control:1
//!   27     RNR retry count:3 SRQ:1 reserved:4
//!   28     local CA GUID (8)
//!   36     private data (196)
//! ```
//!
//! The three vendor ID bytes were reserved until IBA comment 9434; Linux's
//! ECE (enhanced connection establishment) fills them.

use super::{array, get_bits, set_bits, CommId, Guid};
use crate::{bytes, Psn, Qkey, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const REMOTE_COMM_ID: Range<usize> = 4..8;
    pub const LOCAL_QKEY: Range<usize> = 8..12;
    pub const LOCAL_QPN: Range<usize> = 12..15;
    pub const VENDOR_ID_H: usize = 15;
    pub const LOCAL_EECN: Range<usize> = 16..19;
    pub const VENDOR_ID_M: usize = 19;
    pub const STARTING_PSN: Range<usize> = 20..23;
    pub const VENDOR_ID_L: usize = 23;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    /// Target ACK delay (bits 0-4), failover accepted (5-6), end-to-end
    /// flow control (7).
    pub const BYTE26: usize = 26;
    /// RNR retry count (0-2), SRQ (3), reserved (4-7).
    pub const BYTE27: usize = 27;
    pub const LOCAL_CA_GUID: Range<usize> = 28..36;
    pub const PRIVATE_DATA: Range<usize> = 36..232;
}

/// Length of a REP's private data.
pub const PRIVATE_DATA_LEN: usize = 196;

fixed_header_view!(super::DATA_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The passive side's communication ID.
    pub fn local_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::LOCAL_COMM_ID]))
    }
    /// The active side's communication ID (from its REQ).
    pub fn remote_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::REMOTE_COMM_ID]))
    }
    /// The passive side's Q_Key (RD only).
    pub fn local_qkey(&self) -> Qkey {
        Qkey(bytes::u32(&self.data()[field::LOCAL_QKEY]))
    }
    /// The passive side's QP.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::new(bytes::u24(&self.data()[field::LOCAL_QPN]))
    }
    /// The passive side's EE context (RD only).
    pub fn local_eecn(&self) -> u32 {
        bytes::u24(&self.data()[field::LOCAL_EECN])
    }
    /// The vendor ID (24 bits, spread over three bytes).
    pub fn vendor_id(&self) -> u32 {
        let d = self.data();
        u32::from_be_bytes([0, d[field::VENDOR_ID_H], d[field::VENDOR_ID_M], d[field::VENDOR_ID_L]])
    }
    /// The first PSN the passive side sends.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(bytes::u24(&self.data()[field::STARTING_PSN]))
    }
    /// RDMA READ/atomic requests the passive side accepts at once.
    pub fn responder_resources(&self) -> u8 {
        self.data()[field::RESPONDER_RESOURCES]
    }
    /// RDMA READ/atomic requests the passive side sends at once.
    pub fn initiator_depth(&self) -> u8 {
        self.data()[field::INITIATOR_DEPTH]
    }
    /// Target ACK delay (5 bits).
    pub fn target_ack_delay(&self) -> u8 {
        get_bits(self.data()[field::BYTE26], 0, 5)
    }
    /// Failover accepted (2 bits: 0 accepted, 1 not supported, 2 rejected).
    pub fn failover_accepted(&self) -> u8 {
        get_bits(self.data()[field::BYTE26], 5, 2)
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        get_bits(self.data()[field::BYTE26], 7, 1) != 0
    }
    /// RNR retry count (3 bits).
    pub fn rnr_retry_count(&self) -> u8 {
        get_bits(self.data()[field::BYTE27], 0, 3)
    }
    /// The passive side's QP uses a shared receive queue.
    pub fn srq(&self) -> bool {
        get_bits(self.data()[field::BYTE27], 3, 1) != 0
    }
    /// The 4 reserved bits after SRQ.
    pub fn resv4(&self) -> u8 {
        get_bits(self.data()[field::BYTE27], 4, 4)
    }
    /// The passive side's CA GUID.
    pub fn local_ca_guid(&self) -> Guid {
        Guid(bytes::u64(&self.data()[field::LOCAL_CA_GUID]))
    }
    /// The private data (196 bytes).
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
    /// Sets the local Q_Key.
    pub fn set_local_qkey(&mut self, value: Qkey) {
        self.data_mut()[field::LOCAL_QKEY].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the local QPN.
    pub fn set_local_qpn(&mut self, value: Qpn) {
        bytes::set_u24(&mut self.data_mut()[field::LOCAL_QPN], value.value());
    }
    /// Sets the local EECN (the low 24 bits of `value`).
    pub fn set_local_eecn(&mut self, value: u32) {
        bytes::set_u24(&mut self.data_mut()[field::LOCAL_EECN], value & 0x00ff_ffff);
    }
    /// Sets the vendor ID (the low 24 bits of `value`).
    pub fn set_vendor_id(&mut self, value: u32) {
        let [_, h, m, l] = value.to_be_bytes();
        let d = self.data_mut();
        d[field::VENDOR_ID_H] = h;
        d[field::VENDOR_ID_M] = m;
        d[field::VENDOR_ID_L] = l;
    }
    /// Sets the starting PSN.
    pub fn set_starting_psn(&mut self, value: Psn) {
        bytes::set_u24(&mut self.data_mut()[field::STARTING_PSN], value.value());
    }
    /// Sets the responder resources.
    pub fn set_responder_resources(&mut self, value: u8) {
        self.data_mut()[field::RESPONDER_RESOURCES] = value;
    }
    /// Sets the initiator depth.
    pub fn set_initiator_depth(&mut self, value: u8) {
        self.data_mut()[field::INITIATOR_DEPTH] = value;
    }
    /// Sets the target ACK delay (low 5 bits of `value`).
    pub fn set_target_ack_delay(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE26], 0, 5, value);
    }
    /// Sets failover accepted (low 2 bits of `value`).
    pub fn set_failover_accepted(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE26], 5, 2, value);
    }
    /// Sets end-to-end flow control.
    pub fn set_end_to_end_flow_control(&mut self, value: bool) {
        set_bits(&mut self.data_mut()[field::BYTE26], 7, 1, u8::from(value));
    }
    /// Sets the RNR retry count (low 3 bits of `value`).
    pub fn set_rnr_retry_count(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE27], 0, 3, value);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, value: bool) {
        set_bits(&mut self.data_mut()[field::BYTE27], 3, 1, u8::from(value));
    }
    /// Sets the 4 reserved bits after SRQ.
    pub fn set_resv4(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE27], 4, 4, value);
    }
    /// Sets the local CA GUID.
    pub fn set_local_ca_guid(&mut self, value: Guid) {
        self.data_mut()[field::LOCAL_CA_GUID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of a REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The passive side's communication ID.
    pub local_comm_id: CommId,
    /// The active side's communication ID.
    pub remote_comm_id: CommId,
    /// The passive side's Q_Key.
    pub local_qkey: Qkey,
    /// The passive side's QP.
    pub local_qpn: Qpn,
    /// The passive side's EE context (24 bits).
    pub local_eecn: u32,
    /// Vendor ID (24 bits; reserved before ECE).
    pub vendor_id: u32,
    /// The passive side's first PSN.
    pub starting_psn: Psn,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// The 4 reserved bits after SRQ.
    pub resv4: u8,
    /// The passive side's CA GUID.
    pub local_ca_guid: Guid,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a REP.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            local_qkey: packet.local_qkey(),
            local_qpn: packet.local_qpn(),
            local_eecn: packet.local_eecn(),
            vendor_id: packet.vendor_id(),
            starting_psn: packet.starting_psn(),
            responder_resources: packet.responder_resources(),
            initiator_depth: packet.initiator_depth(),
            target_ack_delay: packet.target_ack_delay(),
            failover_accepted: packet.failover_accepted(),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            rnr_retry_count: packet.rnr_retry_count(),
            srq: packet.srq(),
            resv4: packet.resv4(),
            local_ca_guid: packet.local_ca_guid(),
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
        packet.set_local_qkey(self.local_qkey);
        packet.set_local_qpn(self.local_qpn);
        packet.set_local_eecn(self.local_eecn);
        packet.set_vendor_id(self.vendor_id);
        packet.set_starting_psn(self.starting_psn);
        packet.set_responder_resources(self.responder_resources);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_target_ack_delay(self.target_ack_delay);
        packet.set_failover_accepted(self.failover_accepted);
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_srq(self.srq);
        packet.set_resv4(self.resv4);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_id_and_bit_fields() {
        let mut buf = [0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_qpn(Qpn::new(0x123456));
        p.set_vendor_id(0xabcdef);
        p.set_local_eecn(0x654321);
        p.set_starting_psn(Psn::new(0x0f0f0f));
        p.set_target_ack_delay(0x0f);
        p.set_failover_accepted(2);
        p.set_end_to_end_flow_control(true);
        p.set_rnr_retry_count(7);
        p.set_srq(true);
        p.set_resv4(0xa);
        assert_eq!(
            buf[12..24],
            [0x12, 0x34, 0x56, 0xab, 0x65, 0x43, 0x21, 0xcd, 0x0f, 0x0f, 0x0f, 0xef]
        );
        assert_eq!(buf[26..28], [0b0111_1101, 0b1111_1010]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.vendor_id(), 0xabcdef);
        assert_eq!(p.local_qpn(), Qpn::new(0x123456));
        assert_eq!(p.local_eecn(), 0x654321);
        assert_eq!((p.target_ack_delay(), p.failover_accepted()), (0x0f, 2));
        assert!(p.end_to_end_flow_control() && p.srq());
        assert_eq!((p.rnr_retry_count(), p.resv4()), (7, 0xa));
        assert_eq!(Packet::new_checked(&buf[..231]).unwrap_err(), crate::Error::Truncated);
    }
}
