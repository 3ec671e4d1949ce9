//! ConnectRequest (REQ, attribute 0x0010): the active side's request for a
//! connection, IBA vol 1 table 106. 232 bytes of MAD class data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     reserved (4; Linux's ECE puts a vendor ID here)
//!    8     service ID (8)
//!   16     local CA GUID (8)
//!   24     reserved (4)
//!   28     local Q_Key (4)
//!   32     local QPN (3)        | responder resources (1)
//!   36     local EECN (3)       | initiator depth (1)
//!   40     remote EECN (3)      | remote CM response timeout:5 transport service type:2 end-to-end flow control:1
//!   44     starting PSN (3)     | local CM response timeout:5 retry count:3
//!   48     P_Key (2)            | path MTU:4 RDC exists:1 RNR retry count:3 | max CM retries:4 SRQ:1 extended transport type:3
//!   52     primary path (44)
//!   96     alternate path (44)
//!  140     private data (92; rdma_cm starts it with a `cma` header)
//! ```
//!
//! A path (see [`Path`]): local LID (2), remote LID (2), local GID (16),
//! remote GID (16), flow label:20 reserved:6 packet rate:6, traffic class
//! (1), hop limit (1), SL:4 subnet local:1 reserved:3, local ACK
//! timeout:5 reserved:3 (in the alternate path the first reserved bit is
//! SAP Supported since IBA 1.3).

use super::{array, get_bits, gid, set_bits, CommId, Gid, Guid, ServiceId};
use crate::{bytes, Psn, Qkey, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const RESV4: Range<usize> = 4..8;
    pub const SERVICE_ID: Range<usize> = 8..16;
    pub const LOCAL_CA_GUID: Range<usize> = 16..24;
    pub const RESV24: Range<usize> = 24..28;
    pub const LOCAL_QKEY: Range<usize> = 28..32;
    pub const LOCAL_QPN: Range<usize> = 32..35;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: Range<usize> = 36..39;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: Range<usize> = 40..43;
    /// Remote CM response timeout (bits 0-4), transport service type
    /// (5-6), end-to-end flow control (7).
    pub const BYTE43: usize = 43;
    pub const STARTING_PSN: Range<usize> = 44..47;
    /// Local CM response timeout (0-4), retry count (5-7).
    pub const BYTE47: usize = 47;
    pub const PKEY: Range<usize> = 48..50;
    /// Path MTU (0-3), RDC exists (4), RNR retry count (5-7).
    pub const BYTE50: usize = 50;
    /// Max CM retries (0-3), SRQ (4), extended transport type (5-7).
    pub const BYTE51: usize = 51;
    pub const PRIMARY_PATH: Range<usize> = 52..96;
    pub const ALTERNATE_PATH: Range<usize> = 96..140;
    pub const PRIVATE_DATA: Range<usize> = 140..232;

    /// Within a path.
    pub mod path {
        use core::ops::Range;
        pub const LOCAL_LID: Range<usize> = 0..2;
        pub const REMOTE_LID: Range<usize> = 2..4;
        pub const LOCAL_GID: Range<usize> = 4..20;
        pub const REMOTE_GID: Range<usize> = 20..36;
        /// Flow label (20 bits), reserved (6), packet rate (6).
        pub const FLOW_RATE: Range<usize> = 36..40;
        pub const TRAFFIC_CLASS: usize = 40;
        pub const HOP_LIMIT: usize = 41;
        /// SL (0-3), subnet local (4), reserved (5-7).
        pub const SL_BYTE: usize = 42;
        /// Local ACK timeout (0-4), reserved (5-7).
        pub const ACK_BYTE: usize = 43;
    }
}

/// Length of a path in a REQ.
pub const PATH_LEN: usize = 44;
/// Length of a REQ's private data.
pub const PRIVATE_DATA_LEN: usize = 92;

/// The transport service type of a REQ (2 bits).
pub mod transport {
    /// Reliable Connected.
    pub const RC: u8 = 0;
    /// Unreliable Connected.
    pub const UC: u8 = 1;
    /// Reliable Datagram.
    pub const RD: u8 = 2;
    /// Extended: see the extended transport type (XRC is 1).
    pub const EXTENDED: u8 = 3;
}

/// One path of a REQ (primary or alternate): the addressing the passive
/// side's QP will use, seen from the active side ("local" is the sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Path {
    /// The sender's port LID (0xffff, the permissive LID, under RoCE).
    pub local_lid: u16,
    /// The receiver's port LID (0xffff under RoCE).
    pub remote_lid: u16,
    /// The sender's port GID.
    pub local_gid: Gid,
    /// The receiver's port GID.
    pub remote_gid: Gid,
    /// Flow label (20 bits). Linux sets it from the QPNs under RoCEv2;
    /// rxe derives the UDP source port from it.
    pub flow_label: u32,
    /// The 6 reserved bits between the flow label and the packet rate.
    pub resv6: u8,
    /// Packet rate (6 bits, IBA's static rate encoding).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local: the peer is on the local subnet (no GRH needed).
    pub subnet_local: bool,
    /// The 3 reserved bits after subnet local.
    pub resv3_sl: u8,
    /// Local ACK timeout (5 bits): 4.096 us * 2^value.
    pub local_ack_timeout: u8,
    /// The 3 bits after the local ACK timeout (reserved; in the
    /// alternate path the first is SAP Supported).
    pub resv3_ack: u8,
}

impl Path {
    fn read(b: &[u8]) -> Path {
        use field::path as f;
        let flow_rate = bytes::u32(&b[f::FLOW_RATE]);
        let sl = b[f::SL_BYTE];
        let ack = b[f::ACK_BYTE];
        Path {
            local_lid: bytes::u16(&b[f::LOCAL_LID]),
            remote_lid: bytes::u16(&b[f::REMOTE_LID]),
            local_gid: gid(&b[f::LOCAL_GID]),
            remote_gid: gid(&b[f::REMOTE_GID]),
            flow_label: flow_rate >> 12,
            resv6: ((flow_rate >> 6) & 0x3f) as u8,
            packet_rate: (flow_rate & 0x3f) as u8,
            traffic_class: b[f::TRAFFIC_CLASS],
            hop_limit: b[f::HOP_LIMIT],
            sl: get_bits(sl, 0, 4),
            subnet_local: get_bits(sl, 4, 1) != 0,
            resv3_sl: get_bits(sl, 5, 3),
            local_ack_timeout: get_bits(ack, 0, 5),
            resv3_ack: get_bits(ack, 5, 3),
        }
    }

    fn write(&self, b: &mut [u8]) {
        use field::path as f;
        b[f::LOCAL_LID].copy_from_slice(&self.local_lid.to_be_bytes());
        b[f::REMOTE_LID].copy_from_slice(&self.remote_lid.to_be_bytes());
        b[f::LOCAL_GID].copy_from_slice(&self.local_gid.0);
        b[f::REMOTE_GID].copy_from_slice(&self.remote_gid.0);
        let flow_rate = ((self.flow_label & 0xf_ffff) << 12)
            | (u32::from(self.resv6 & 0x3f) << 6)
            | u32::from(self.packet_rate & 0x3f);
        b[f::FLOW_RATE].copy_from_slice(&flow_rate.to_be_bytes());
        b[f::TRAFFIC_CLASS] = self.traffic_class;
        b[f::HOP_LIMIT] = self.hop_limit;
        let mut sl = 0;
        set_bits(&mut sl, 0, 4, self.sl);
        set_bits(&mut sl, 4, 1, u8::from(self.subnet_local));
        set_bits(&mut sl, 5, 3, self.resv3_sl);
        b[f::SL_BYTE] = sl;
        let mut ack = 0;
        set_bits(&mut ack, 0, 5, self.local_ack_timeout);
        set_bits(&mut ack, 5, 3, self.resv3_ack);
        b[f::ACK_BYTE] = ack;
    }
}

fixed_header_view!(super::DATA_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The active side's communication ID.
    pub fn local_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::LOCAL_COMM_ID]))
    }
    /// The reserved word at offset 4.
    pub fn resv4(&self) -> u32 {
        bytes::u32(&self.data()[field::RESV4])
    }
    /// The service the REQ asks for.
    pub fn service_id(&self) -> ServiceId {
        ServiceId(bytes::u64(&self.data()[field::SERVICE_ID]))
    }
    /// The active side's CA GUID.
    pub fn local_ca_guid(&self) -> Guid {
        Guid(bytes::u64(&self.data()[field::LOCAL_CA_GUID]))
    }
    /// The reserved word at offset 24.
    pub fn resv24(&self) -> u32 {
        bytes::u32(&self.data()[field::RESV24])
    }
    /// The active side's Q_Key (RD only; 0 from Linux for RC).
    pub fn local_qkey(&self) -> Qkey {
        Qkey(bytes::u32(&self.data()[field::LOCAL_QKEY]))
    }
    /// The active side's QP.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::new(bytes::u24(&self.data()[field::LOCAL_QPN]))
    }
    /// RDMA READ/atomic requests the active side accepts at once.
    pub fn responder_resources(&self) -> u8 {
        self.data()[field::RESPONDER_RESOURCES]
    }
    /// The active side's EE context (RD only).
    pub fn local_eecn(&self) -> u32 {
        bytes::u24(&self.data()[field::LOCAL_EECN])
    }
    /// RDMA READ/atomic requests the active side sends at once.
    pub fn initiator_depth(&self) -> u8 {
        self.data()[field::INITIATOR_DEPTH]
    }
    /// The passive side's EE context (RD only).
    pub fn remote_eecn(&self) -> u32 {
        bytes::u24(&self.data()[field::REMOTE_EECN])
    }
    /// How long the passive side's CM may take to answer (5 bits:
    /// 4.096 us * 2^value).
    pub fn remote_cm_response_timeout(&self) -> u8 {
        get_bits(self.data()[field::BYTE43], 0, 5)
    }
    /// Transport service type (2 bits, see [`transport`]).
    pub fn transport_service_type(&self) -> u8 {
        get_bits(self.data()[field::BYTE43], 5, 2)
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        get_bits(self.data()[field::BYTE43], 7, 1) != 0
    }
    /// The first PSN the active side sends.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(bytes::u24(&self.data()[field::STARTING_PSN]))
    }
    /// How long the active side's CM may take to answer (5 bits).
    pub fn local_cm_response_timeout(&self) -> u8 {
        get_bits(self.data()[field::BYTE47], 0, 5)
    }
    /// Transport retry count (3 bits).
    pub fn retry_count(&self) -> u8 {
        get_bits(self.data()[field::BYTE47], 5, 3)
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        bytes::u16(&self.data()[field::PKEY])
    }
    /// Path MTU (4 bits, IBA encoding: 1 = 256 ... 5 = 4096).
    pub fn path_mtu(&self) -> u8 {
        get_bits(self.data()[field::BYTE50], 0, 4)
    }
    /// RDC exists (RD only).
    pub fn rdc_exists(&self) -> bool {
        get_bits(self.data()[field::BYTE50], 4, 1) != 0
    }
    /// RNR retry count (3 bits; 7 means forever).
    pub fn rnr_retry_count(&self) -> u8 {
        get_bits(self.data()[field::BYTE50], 5, 3)
    }
    /// How many times the active side's CM resends the REQ (4 bits).
    pub fn max_cm_retries(&self) -> u8 {
        get_bits(self.data()[field::BYTE51], 0, 4)
    }
    /// The active side's QP uses a shared receive queue.
    pub fn srq(&self) -> bool {
        get_bits(self.data()[field::BYTE51], 4, 1) != 0
    }
    /// Extended transport type (3 bits; meaningful when the transport
    /// service type is [`transport::EXTENDED`]).
    pub fn extended_transport_type(&self) -> u8 {
        get_bits(self.data()[field::BYTE51], 5, 3)
    }
    /// The primary path.
    pub fn primary_path(&self) -> Path {
        Path::read(&self.data()[field::PRIMARY_PATH])
    }
    /// The alternate path (all zero when there is none).
    pub fn alternate_path(&self) -> Path {
        Path::read(&self.data()[field::ALTERNATE_PATH])
    }
    /// SAP Supported (IBA 1.3): the first bit after the alternate path's
    /// local ACK timeout.
    pub fn sap_supported(&self) -> bool {
        self.alternate_path().resv3_ack & 0x4 != 0
    }
    /// The private data (92 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.data()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bits_of(&mut self, at: usize, offset: u32, width: u32, value: u8) {
        set_bits(&mut self.data_mut()[at], offset, width, value);
    }
    /// Sets the active side's communication ID.
    pub fn set_local_comm_id(&mut self, value: CommId) {
        self.data_mut()[field::LOCAL_COMM_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the reserved word at offset 4.
    pub fn set_resv4(&mut self, value: u32) {
        self.data_mut()[field::RESV4].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the service ID.
    pub fn set_service_id(&mut self, value: ServiceId) {
        self.data_mut()[field::SERVICE_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the active side's CA GUID.
    pub fn set_local_ca_guid(&mut self, value: Guid) {
        self.data_mut()[field::LOCAL_CA_GUID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the reserved word at offset 24.
    pub fn set_resv24(&mut self, value: u32) {
        self.data_mut()[field::RESV24].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the local Q_Key.
    pub fn set_local_qkey(&mut self, value: Qkey) {
        self.data_mut()[field::LOCAL_QKEY].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the local QPN.
    pub fn set_local_qpn(&mut self, value: Qpn) {
        bytes::set_u24(&mut self.data_mut()[field::LOCAL_QPN], value.value());
    }
    /// Sets the responder resources.
    pub fn set_responder_resources(&mut self, value: u8) {
        self.data_mut()[field::RESPONDER_RESOURCES] = value;
    }
    /// Sets the local EECN (the low 24 bits of `value`).
    pub fn set_local_eecn(&mut self, value: u32) {
        bytes::set_u24(&mut self.data_mut()[field::LOCAL_EECN], value & 0x00ff_ffff);
    }
    /// Sets the initiator depth.
    pub fn set_initiator_depth(&mut self, value: u8) {
        self.data_mut()[field::INITIATOR_DEPTH] = value;
    }
    /// Sets the remote EECN (the low 24 bits of `value`).
    pub fn set_remote_eecn(&mut self, value: u32) {
        bytes::set_u24(&mut self.data_mut()[field::REMOTE_EECN], value & 0x00ff_ffff);
    }
    /// Sets the remote CM response timeout (low 5 bits of `value`).
    pub fn set_remote_cm_response_timeout(&mut self, value: u8) {
        self.set_bits_of(field::BYTE43, 0, 5, value);
    }
    /// Sets the transport service type (low 2 bits of `value`).
    pub fn set_transport_service_type(&mut self, value: u8) {
        self.set_bits_of(field::BYTE43, 5, 2, value);
    }
    /// Sets end-to-end flow control.
    pub fn set_end_to_end_flow_control(&mut self, value: bool) {
        self.set_bits_of(field::BYTE43, 7, 1, u8::from(value));
    }
    /// Sets the starting PSN.
    pub fn set_starting_psn(&mut self, value: Psn) {
        bytes::set_u24(&mut self.data_mut()[field::STARTING_PSN], value.value());
    }
    /// Sets the local CM response timeout (low 5 bits of `value`).
    pub fn set_local_cm_response_timeout(&mut self, value: u8) {
        self.set_bits_of(field::BYTE47, 0, 5, value);
    }
    /// Sets the retry count (low 3 bits of `value`).
    pub fn set_retry_count(&mut self, value: u8) {
        self.set_bits_of(field::BYTE47, 5, 3, value);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, value: u16) {
        self.data_mut()[field::PKEY].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the path MTU (low 4 bits of `value`).
    pub fn set_path_mtu(&mut self, value: u8) {
        self.set_bits_of(field::BYTE50, 0, 4, value);
    }
    /// Sets RDC exists.
    pub fn set_rdc_exists(&mut self, value: bool) {
        self.set_bits_of(field::BYTE50, 4, 1, u8::from(value));
    }
    /// Sets the RNR retry count (low 3 bits of `value`).
    pub fn set_rnr_retry_count(&mut self, value: u8) {
        self.set_bits_of(field::BYTE50, 5, 3, value);
    }
    /// Sets the max CM retries (low 4 bits of `value`).
    pub fn set_max_cm_retries(&mut self, value: u8) {
        self.set_bits_of(field::BYTE51, 0, 4, value);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, value: bool) {
        self.set_bits_of(field::BYTE51, 4, 1, u8::from(value));
    }
    /// Sets the extended transport type (low 3 bits of `value`).
    pub fn set_extended_transport_type(&mut self, value: u8) {
        self.set_bits_of(field::BYTE51, 5, 3, value);
    }
    /// Sets the primary path.
    pub fn set_primary_path(&mut self, value: &Path) {
        value.write(&mut self.data_mut()[field::PRIMARY_PATH]);
    }
    /// Sets the alternate path.
    pub fn set_alternate_path(&mut self, value: &Path) {
        value.write(&mut self.data_mut()[field::ALTERNATE_PATH]);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The active side's communication ID.
    pub local_comm_id: CommId,
    /// Reserved word at offset 4 (kept for bit-exact round trips).
    pub resv4: u32,
    /// The service asked for.
    pub service_id: ServiceId,
    /// The active side's CA GUID.
    pub local_ca_guid: Guid,
    /// Reserved word at offset 24.
    pub resv24: u32,
    /// The active side's Q_Key.
    pub local_qkey: Qkey,
    /// The active side's QP.
    pub local_qpn: Qpn,
    /// Responder resources.
    pub responder_resources: u8,
    /// The active side's EE context.
    pub local_eecn: u32,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// The passive side's EE context.
    pub remote_eecn: u32,
    /// Remote CM response timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The active side's first PSN.
    pub starting_psn: Psn,
    /// Local CM response timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary_path: Path,
    /// The alternate path.
    pub alternate_path: Path,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a REQ.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            resv4: packet.resv4(),
            service_id: packet.service_id(),
            local_ca_guid: packet.local_ca_guid(),
            resv24: packet.resv24(),
            local_qkey: packet.local_qkey(),
            local_qpn: packet.local_qpn(),
            responder_resources: packet.responder_resources(),
            local_eecn: packet.local_eecn(),
            initiator_depth: packet.initiator_depth(),
            remote_eecn: packet.remote_eecn(),
            remote_cm_response_timeout: packet.remote_cm_response_timeout(),
            transport_service_type: packet.transport_service_type(),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            starting_psn: packet.starting_psn(),
            local_cm_response_timeout: packet.local_cm_response_timeout(),
            retry_count: packet.retry_count(),
            pkey: packet.pkey(),
            path_mtu: packet.path_mtu(),
            rdc_exists: packet.rdc_exists(),
            rnr_retry_count: packet.rnr_retry_count(),
            max_cm_retries: packet.max_cm_retries(),
            srq: packet.srq(),
            extended_transport_type: packet.extended_transport_type(),
            primary_path: packet.primary_path(),
            alternate_path: packet.alternate_path(),
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
        packet.set_resv4(self.resv4);
        packet.set_service_id(self.service_id);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet.set_resv24(self.resv24);
        packet.set_local_qkey(self.local_qkey);
        packet.set_local_qpn(self.local_qpn);
        packet.set_responder_resources(self.responder_resources);
        packet.set_local_eecn(self.local_eecn);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_remote_eecn(self.remote_eecn);
        packet.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        packet.set_transport_service_type(self.transport_service_type);
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_starting_psn(self.starting_psn);
        packet.set_local_cm_response_timeout(self.local_cm_response_timeout);
        packet.set_retry_count(self.retry_count);
        packet.set_pkey(self.pkey);
        packet.set_path_mtu(self.path_mtu);
        packet.set_rdc_exists(self.rdc_exists);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_max_cm_retries(self.max_cm_retries);
        packet.set_srq(self.srq);
        packet.set_extended_transport_type(self.extended_transport_type);
        packet.set_primary_path(&self.primary_path);
        packet.set_alternate_path(&self.alternate_path);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_share_bytes_without_clobbering() {
        let mut buf = [0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_remote_cm_response_timeout(0x14);
        p.set_transport_service_type(transport::UC);
        p.set_end_to_end_flow_control(true);
        p.set_path_mtu(3);
        p.set_rdc_exists(true);
        p.set_rnr_retry_count(7);
        p.set_max_cm_retries(15);
        p.set_srq(true);
        p.set_extended_transport_type(1);
        assert_eq!(buf[43], 0b1010_0011);
        assert_eq!(buf[50], 0b0011_1111);
        assert_eq!(buf[51], 0b1111_1001);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.transport_service_type(), transport::UC);
        assert!(p.end_to_end_flow_control() && p.rdc_exists() && p.srq());
        assert_eq!((p.path_mtu(), p.rnr_retry_count()), (3, 7));
        assert_eq!((p.max_cm_retries(), p.extended_transport_type()), (15, 1));
        assert_eq!(Packet::new_checked(&buf[..231]).unwrap_err(), crate::Error::Truncated);
    }

    #[test]
    fn path_flow_label_rate_and_sap() {
        let path = Path {
            flow_label: 0xfedcb,
            resv6: 0x2a,
            packet_rate: 0x15,
            sl: 0xf,
            subnet_local: true,
            resv3_sl: 0x5,
            local_ack_timeout: 0x1f,
            resv3_ack: 0x4,
            ..Path::default()
        };
        let mut buf = [0u8; HEADER_LEN];
        Packet::new_unchecked(&mut buf[..]).set_alternate_path(&path);
        assert_eq!(buf[96 + 36..96 + 44], [0xfe, 0xdc, 0xba, 0x95, 0, 0, 0xfd, 0xfc]);
        let p = Packet::new_unchecked(&buf[..]);
        assert_eq!(p.alternate_path(), path);
        assert!(p.sap_supported());
        assert_eq!(p.primary_path(), Path::default());
    }
}
