//! Service ID resolution: SIDR_REQ (attribute 0x0017) asks which UD QP
//! serves a service ID, SIDR_REP (0x0018) answers, IBA vol 1 tables 119
//! and 120. rdma_cm uses them for `RDMA_PS_UDP` and `RDMA_PS_IPOIB`
//! (with a `cma` header at the start of the SIDR_REQ's private data).
//!
//! ```text
//!  SIDR_REQ                                SIDR_REP
//!  offset  field                           offset  field
//!    0     request ID (4)                    0     request ID (4)
//!    4     P_Key (2) | reserved (2)          4     status (1) | additional info length (1) | vendor ID high (2)
//!    8     service ID (8)                    8     QPN (3) | vendor ID low (1)
//!   16     private data (216)               12     service ID (8)
//!                                           20     Q_Key (4)
//!                                           24     additional information (72)
//!                                           96     private data (136)
//! ```
//!
//! The SIDR_REP's vendor ID bytes were reserved before IBA comment 9434.

pub use rep::{Packet as RepPacket, Repr as RepRepr};
pub use req::{Packet as ReqPacket, Repr as ReqRepr};

/// What a SIDR_REP says (IBA vol 1 table 121), with a catch-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    Success,
    /// 1: the service ID is not supported (Linux: nobody listens).
    Unsupported,
    /// 2: rejected by the service provider (`rdma_reject()`).
    Reject,
    /// 3: no QP available.
    NoQp,
    /// 4: redirect: the additional information says where.
    Redirect,
    /// 5: unsupported class version.
    UnsupportedVersion,
    /// Any other code.
    Other(u8),
}

impl From<u8> for SidrStatus {
    fn from(code: u8) -> SidrStatus {
        match code {
            0 => SidrStatus::Success,
            1 => SidrStatus::Unsupported,
            2 => SidrStatus::Reject,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            other => SidrStatus::Other(other),
        }
    }
}

impl From<SidrStatus> for u8 {
    fn from(status: SidrStatus) -> u8 {
        match status {
            SidrStatus::Success => 0,
            SidrStatus::Unsupported => 1,
            SidrStatus::Reject => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedVersion => 5,
            SidrStatus::Other(code) => code,
        }
    }
}

/// SIDR_REQ.
pub mod req {
    use super::super::{array, ServiceId};
    use crate::{bytes, Result};

    mod field {
        use core::ops::Range;
        pub const REQUEST_ID: Range<usize> = 0..4;
        pub const PKEY: Range<usize> = 4..6;
        pub const RESV16: Range<usize> = 6..8;
        pub const SERVICE_ID: Range<usize> = 8..16;
        pub const PRIVATE_DATA: Range<usize> = 16..232;
    }

    /// Length of a SIDR_REQ's private data.
    pub const PRIVATE_DATA_LEN: usize = 216;

    fixed_header_view!(super::super::DATA_LEN);

    impl<T: AsRef<[u8]>> Packet<T> {
        fn data(&self) -> &[u8] {
            self.buffer.as_ref()
        }
        /// The requester's ID for this request (the SIDR_REP echoes it).
        pub fn request_id(&self) -> u32 {
            bytes::u32(&self.data()[field::REQUEST_ID])
        }
        /// The partition key the requester will use.
        pub fn pkey(&self) -> u16 {
            bytes::u16(&self.data()[field::PKEY])
        }
        /// The reserved word after the P_Key.
        pub fn resv16(&self) -> u16 {
            bytes::u16(&self.data()[field::RESV16])
        }
        /// The service asked about.
        pub fn service_id(&self) -> ServiceId {
            ServiceId(bytes::u64(&self.data()[field::SERVICE_ID]))
        }
        /// The private data (216 bytes).
        pub fn private_data(&self) -> &[u8] {
            &self.data()[field::PRIVATE_DATA]
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        fn data_mut(&mut self) -> &mut [u8] {
            self.buffer.as_mut()
        }
        /// Sets the request ID.
        pub fn set_request_id(&mut self, value: u32) {
            self.data_mut()[field::REQUEST_ID].copy_from_slice(&value.to_be_bytes());
        }
        /// Sets the partition key.
        pub fn set_pkey(&mut self, value: u16) {
            self.data_mut()[field::PKEY].copy_from_slice(&value.to_be_bytes());
        }
        /// Sets the reserved word.
        pub fn set_resv16(&mut self, value: u16) {
            self.data_mut()[field::RESV16].copy_from_slice(&value.to_be_bytes());
        }
        /// Sets the service ID.
        pub fn set_service_id(&mut self, value: ServiceId) {
            self.data_mut()[field::SERVICE_ID].copy_from_slice(&value.0.to_be_bytes());
        }
        /// The private data, writable.
        pub fn private_data_mut(&mut self) -> &mut [u8] {
            &mut self.data_mut()[field::PRIVATE_DATA]
        }
    }

    /// The fields of a SIDR_REQ.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Repr {
        /// Request ID.
        pub request_id: u32,
        /// Partition key.
        pub pkey: u16,
        /// Reserved word (kept for bit-exact round trips).
        pub resv16: u16,
        /// Service ID.
        pub service_id: ServiceId,
        /// Private data.
        pub private_data: [u8; PRIVATE_DATA_LEN],
    }

    impl Repr {
        /// Reads a SIDR_REQ.
        pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
            packet.check_len()?;
            Ok(Repr {
                request_id: packet.request_id(),
                pkey: packet.pkey(),
                resv16: packet.resv16(),
                service_id: packet.service_id(),
                private_data: array(packet.private_data()),
            })
        }
        /// Length of the emitted message.
        pub const fn buffer_len(&self) -> usize {
            HEADER_LEN
        }
        /// Writes the message.
        pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
            packet.set_request_id(self.request_id);
            packet.set_pkey(self.pkey);
            packet.set_resv16(self.resv16);
            packet.set_service_id(self.service_id);
            packet.private_data_mut().copy_from_slice(&self.private_data);
        }
    }
}

/// SIDR_REP.
pub mod rep {
    use super::super::{array, ServiceId};
    use super::SidrStatus;
    use crate::{bytes, Qkey, Qpn, Result};

    mod field {
        use core::ops::Range;
        pub const REQUEST_ID: Range<usize> = 0..4;
        pub const STATUS: usize = 4;
        pub const ADDITIONAL_INFO_LEN: usize = 5;
        pub const VENDOR_ID_H: Range<usize> = 6..8;
        pub const QPN: Range<usize> = 8..11;
        pub const VENDOR_ID_L: usize = 11;
        pub const SERVICE_ID: Range<usize> = 12..20;
        pub const QKEY: Range<usize> = 20..24;
        pub const ADDITIONAL_INFO: Range<usize> = 24..96;
        pub const PRIVATE_DATA: Range<usize> = 96..232;
    }

    /// Length of the additional information.
    pub const ADDITIONAL_INFO_LEN: usize = 72;
    /// Length of a SIDR_REP's private data.
    pub const PRIVATE_DATA_LEN: usize = 136;

    fixed_header_view!(super::super::DATA_LEN);

    impl<T: AsRef<[u8]>> Packet<T> {
        fn data(&self) -> &[u8] {
            self.buffer.as_ref()
        }
        /// The request ID of the SIDR_REQ answered.
        pub fn request_id(&self) -> u32 {
            bytes::u32(&self.data()[field::REQUEST_ID])
        }
        /// The answer.
        pub fn status(&self) -> SidrStatus {
            SidrStatus::from(self.data()[field::STATUS])
        }
        /// How many bytes of the additional information are meaningful.
        pub fn additional_info_length(&self) -> u8 {
            self.data()[field::ADDITIONAL_INFO_LEN]
        }
        /// The vendor ID (24 bits: two bytes at offset 6, one at 11).
        pub fn vendor_id(&self) -> u32 {
            let d = self.data();
            let h = bytes::u16(&d[field::VENDOR_ID_H]);
            (u32::from(h) << 8) | u32::from(d[field::VENDOR_ID_L])
        }
        /// The service's UD QP.
        pub fn qpn(&self) -> Qpn {
            Qpn::new(bytes::u24(&self.data()[field::QPN]))
        }
        /// The service ID answered for.
        pub fn service_id(&self) -> ServiceId {
            ServiceId(bytes::u64(&self.data()[field::SERVICE_ID]))
        }
        /// The Q_Key datagrams to the service must carry.
        pub fn qkey(&self) -> Qkey {
            Qkey(bytes::u32(&self.data()[field::QKEY]))
        }
        /// The additional information (72 bytes).
        pub fn additional_info(&self) -> &[u8] {
            &self.data()[field::ADDITIONAL_INFO]
        }
        /// The private data (136 bytes).
        pub fn private_data(&self) -> &[u8] {
            &self.data()[field::PRIVATE_DATA]
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        fn data_mut(&mut self) -> &mut [u8] {
            self.buffer.as_mut()
        }
        /// Sets the request ID.
        pub fn set_request_id(&mut self, value: u32) {
            self.data_mut()[field::REQUEST_ID].copy_from_slice(&value.to_be_bytes());
        }
        /// Sets the status.
        pub fn set_status(&mut self, value: SidrStatus) {
            self.data_mut()[field::STATUS] = u8::from(value);
        }
        /// Sets the additional information length.
        pub fn set_additional_info_length(&mut self, value: u8) {
            self.data_mut()[field::ADDITIONAL_INFO_LEN] = value;
        }
        /// Sets the vendor ID (the low 24 bits of `value`).
        pub fn set_vendor_id(&mut self, value: u32) {
            let [_, h, m, l] = value.to_be_bytes();
            let d = self.data_mut();
            d[field::VENDOR_ID_H].copy_from_slice(&[h, m]);
            d[field::VENDOR_ID_L] = l;
        }
        /// Sets the QPN.
        pub fn set_qpn(&mut self, value: Qpn) {
            bytes::set_u24(&mut self.data_mut()[field::QPN], value.value());
        }
        /// Sets the service ID.
        pub fn set_service_id(&mut self, value: ServiceId) {
            self.data_mut()[field::SERVICE_ID].copy_from_slice(&value.0.to_be_bytes());
        }
        /// Sets the Q_Key.
        pub fn set_qkey(&mut self, value: Qkey) {
            self.data_mut()[field::QKEY].copy_from_slice(&value.0.to_be_bytes());
        }
        /// The additional information, writable.
        pub fn additional_info_mut(&mut self) -> &mut [u8] {
            &mut self.data_mut()[field::ADDITIONAL_INFO]
        }
        /// The private data, writable.
        pub fn private_data_mut(&mut self) -> &mut [u8] {
            &mut self.data_mut()[field::PRIVATE_DATA]
        }
    }

    /// The fields of a SIDR_REP.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Repr {
        /// Request ID.
        pub request_id: u32,
        /// Status.
        pub status: SidrStatus,
        /// Meaningful bytes of the additional information.
        pub additional_info_length: u8,
        /// Vendor ID (24 bits; reserved before ECE).
        pub vendor_id: u32,
        /// The service's QP.
        pub qpn: Qpn,
        /// Service ID.
        pub service_id: ServiceId,
        /// The service's Q_Key.
        pub qkey: Qkey,
        /// Additional information.
        pub additional_info: [u8; ADDITIONAL_INFO_LEN],
        /// Private data.
        pub private_data: [u8; PRIVATE_DATA_LEN],
    }

    impl Repr {
        /// Reads a SIDR_REP.
        pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
            packet.check_len()?;
            Ok(Repr {
                request_id: packet.request_id(),
                status: packet.status(),
                additional_info_length: packet.additional_info_length(),
                vendor_id: packet.vendor_id(),
                qpn: packet.qpn(),
                service_id: packet.service_id(),
                qkey: packet.qkey(),
                additional_info: array(packet.additional_info()),
                private_data: array(packet.private_data()),
            })
        }
        /// Length of the emitted message.
        pub const fn buffer_len(&self) -> usize {
            HEADER_LEN
        }
        /// Writes the message.
        pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
            packet.set_request_id(self.request_id);
            packet.set_status(self.status);
            packet.set_additional_info_length(self.additional_info_length);
            packet.set_vendor_id(self.vendor_id);
            packet.set_qpn(self.qpn);
            packet.set_service_id(self.service_id);
            packet.set_qkey(self.qkey);
            packet.additional_info_mut().copy_from_slice(&self.additional_info);
            packet.private_data_mut().copy_from_slice(&self.private_data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_both_ways() {
        for code in 0..=u8::MAX {
            assert_eq!(u8::from(SidrStatus::from(code)), code);
        }
        assert_eq!(SidrStatus::from(1), SidrStatus::Unsupported);
    }

    #[test]
    fn rep_vendor_id_split() {
        let mut buf = [0u8; rep::HEADER_LEN];
        let mut p = RepPacket::new_unchecked(&mut buf[..]);
        p.set_vendor_id(0x123456);
        p.set_qpn(crate::Qpn::new(0xabcdef));
        assert_eq!(buf[6..12], [0x12, 0x34, 0xab, 0xcd, 0xef, 0x56]);
        let p = RepPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.vendor_id(), 0x123456);
        assert_eq!(p.qpn(), crate::Qpn::new(0xabcdef));
    }
}
