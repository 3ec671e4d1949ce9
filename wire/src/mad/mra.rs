//! MsgRcptAck (MRA, attribute 0x0011): "your REQ, REP or LAP arrived,
//! the answer will take a while", IBA vol 1 table 107. 232 bytes of MAD
//! class data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     remote communication ID (4)
//!    8     message MRAed:2 reserved:6
//!    9     service timeout:5 reserved:3
//!   10     private data (222)
//! ```

use super::{array, get_bits, set_bits, CommId, MessageRef};
use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const REMOTE_COMM_ID: Range<usize> = 4..8;
    /// Message MRAed (bits 0-1), reserved (2-7).
    pub const BYTE8: usize = 8;
    /// Service timeout (bits 0-4), reserved (5-7).
    pub const BYTE9: usize = 9;
    pub const PRIVATE_DATA: Range<usize> = 10..232;
}

/// Length of an MRA's private data.
pub const PRIVATE_DATA_LEN: usize = 222;

fixed_header_view!(super::DATA_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The sender's communication ID.
    pub fn local_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::LOCAL_COMM_ID]))
    }
    /// The receiver's communication ID.
    pub fn remote_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.data()[field::REMOTE_COMM_ID]))
    }
    /// Which message is acknowledged (2 bits: REQ, REP or LAP).
    pub fn message_mraed(&self) -> MessageRef {
        MessageRef(get_bits(self.data()[field::BYTE8], 0, 2))
    }
    /// The 6 reserved bits after the message MRAed.
    pub fn resv6(&self) -> u8 {
        get_bits(self.data()[field::BYTE8], 2, 6)
    }
    /// How long the answer may take (5 bits: 4.096 us * 2^value).
    pub fn service_timeout(&self) -> u8 {
        get_bits(self.data()[field::BYTE9], 0, 5)
    }
    /// The 3 reserved bits after the service timeout.
    pub fn resv3(&self) -> u8 {
        get_bits(self.data()[field::BYTE9], 5, 3)
    }
    /// The private data (222 bytes).
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
    /// Sets the message MRAed (low 2 bits).
    pub fn set_message_mraed(&mut self, value: MessageRef) {
        set_bits(&mut self.data_mut()[field::BYTE8], 0, 2, value.0);
    }
    /// Sets the 6 reserved bits after the message MRAed.
    pub fn set_resv6(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE8], 2, 6, value);
    }
    /// Sets the service timeout (low 5 bits).
    pub fn set_service_timeout(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE9], 0, 5, value);
    }
    /// Sets the 3 reserved bits after the service timeout.
    pub fn set_resv3(&mut self, value: u8) {
        set_bits(&mut self.data_mut()[field::BYTE9], 5, 3, value);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of an MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The sender's communication ID.
    pub local_comm_id: CommId,
    /// The receiver's communication ID.
    pub remote_comm_id: CommId,
    /// Which message is acknowledged (2 bits).
    pub message_mraed: MessageRef,
    /// The 6 reserved bits after it.
    pub resv6: u8,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// The 3 reserved bits after it.
    pub resv3: u8,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads an MRA.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_mraed: packet.message_mraed(),
            resv6: packet.resv6(),
            service_timeout: packet.service_timeout(),
            resv3: packet.resv3(),
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
        packet.set_message_mraed(self.message_mraed);
        packet.set_resv6(self.resv6);
        packet.set_service_timeout(self.service_timeout);
        packet.set_resv3(self.resv3);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}
