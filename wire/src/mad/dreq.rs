//! DisconnectRequest (DREQ, attribute 0x0015): either side closes an
//! established connection, IBA vol 1 table 112. 232 bytes of MAD class
//! data:
//!
//! ```text
//!  offset  field
//!    0     local communication ID (4)
//!    4     remote communication ID (4)
//!    8     remote QPN/EECN (3)  | reserved (1)
//!   12     private data (220)
//! ```

use super::{array, CommId};
use crate::{bytes, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const LOCAL_COMM_ID: Range<usize> = 0..4;
    pub const REMOTE_COMM_ID: Range<usize> = 4..8;
    pub const REMOTE_QPN: Range<usize> = 8..11;
    pub const RESV8: usize = 11;
    pub const PRIVATE_DATA: Range<usize> = 12..232;
}

/// Length of a DREQ's private data.
pub const PRIVATE_DATA_LEN: usize = 220;

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
    /// The receiver's QP (or EE context for RD).
    pub fn remote_qpn(&self) -> Qpn {
        Qpn::new(bytes::u24(&self.data()[field::REMOTE_QPN]))
    }
    /// The reserved byte after the remote QPN.
    pub fn resv8(&self) -> u8 {
        self.data()[field::RESV8]
    }
    /// The private data (220 bytes).
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
    /// Sets the remote QPN/EECN.
    pub fn set_remote_qpn(&mut self, value: Qpn) {
        bytes::set_u24(&mut self.data_mut()[field::REMOTE_QPN], value.value());
    }
    /// Sets the reserved byte.
    pub fn set_resv8(&mut self, value: u8) {
        self.data_mut()[field::RESV8] = value;
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PRIVATE_DATA]
    }
}

/// The fields of a DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The sender's communication ID.
    pub local_comm_id: CommId,
    /// The receiver's communication ID.
    pub remote_comm_id: CommId,
    /// The receiver's QP.
    pub remote_qpn: Qpn,
    /// Reserved byte (kept for bit-exact round trips).
    pub resv8: u8,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a DREQ.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            remote_qpn: packet.remote_qpn(),
            resv8: packet.resv8(),
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
        packet.set_remote_qpn(self.remote_qpn);
        packet.set_resv8(self.resv8);
        packet.private_data_mut().copy_from_slice(&self.private_data);
    }
}
