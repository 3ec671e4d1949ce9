//! DisconnectReply (DREP, attribute 0x0016): the answer to a DREQ, IBA
//! vol 1 table 113; after it both sides' QPs go to time-wait. 232 bytes
//! of MAD class data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     remote communication ID (4)
//!    8     private data (224)
//! ```

use super::{array, CommId};
use crate::{bytes, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const REMOTE_COMM_ID: Range<usize> = 4..8;
    pub const PRIVATE_DATA: Range<usize> = 8..232;
}

/// Length of a DREP's private data.
pub const PRIVATE_DATA_LEN: usize = 224;

fixed_header_view!(super::DATA_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The sender's communication ID.
    pub fn local_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.buffer.as_ref()[field::LOCAL_COMM_ID]))
    }
    /// The DREQ sender's communication ID.
    pub fn remote_comm_id(&self) -> CommId {
        CommId(bytes::u32(&self.buffer.as_ref()[field::REMOTE_COMM_ID]))
    }
    /// The private data (224 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, value: CommId) {
        self.buffer.as_mut()[field::LOCAL_COMM_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, value: CommId) {
        self.buffer.as_mut()[field::REMOTE_COMM_ID].copy_from_slice(&value.0.to_be_bytes());
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of a DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The sender's communication ID.
    pub local_comm_id: CommId,
    /// The DREQ sender's communication ID.
    pub remote_comm_id: CommId,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a DREP.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            private_data: array(packet.private_data()),
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}
