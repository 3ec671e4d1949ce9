//! Building the MADs the engine sends: a CM header and one message, in a
//! 256-byte buffer.

use uroce_wire::mad::rej::RejectReason;
use uroce_wire::mad::{
    self, drep, dreq, mra, rej, rtu, CmMessage, CommId, MessageRef, TransactionId, MAD_LEN,
};
use uroce_wire::Qpn;

/// The MAD of `message` with the TID `tid`, as Linux's CM sends it.
pub(crate) fn build(tid: TransactionId, message: &CmMessage) -> Box<[u8; MAD_LEN]> {
    let mut buf = Box::new([0u8; MAD_LEN]);
    let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
    mad::Repr::cm(tid, message.attribute_id()).emit(&mut packet);
    // A 256-byte buffer always holds a header and a message.
    let emitted = message.emit(&mut packet);
    debug_assert!(emitted.is_ok());
    buf
}

/// `data` at the start of `N` zero bytes (the caller checked its length;
/// anything longer is cut).
pub(crate) fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    out
}

/// A REJ.
pub(crate) fn rej(
    local: CommId,
    remote: CommId,
    message_rejected: MessageRef,
    reason: RejectReason,
    ari: &[u8],
    private_data: &[u8],
) -> CmMessage {
    let ari_len = ari.len().min(rej::ARI_LEN);
    CmMessage::Rej(rej::Repr {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected,
        resv6: 0,
        rejected_info_length: ari_len as u8,
        resv1: false,
        reason,
        ari: padded(ari),
        private_data: padded(private_data),
    })
}

/// An RTU.
pub(crate) fn rtu(local: CommId, remote: CommId, private_data: &[u8]) -> CmMessage {
    CmMessage::Rtu(rtu::Repr {
        local_comm_id: local,
        remote_comm_id: remote,
        private_data: padded(private_data),
    })
}

/// An MRA.
pub(crate) fn mra(
    local: CommId,
    remote: CommId,
    mraed: MessageRef,
    service_timeout: u8,
) -> CmMessage {
    CmMessage::Mra(mra::Repr {
        local_comm_id: local,
        remote_comm_id: remote,
        message_mraed: mraed,
        resv6: 0,
        service_timeout: service_timeout & 0x1f,
        resv3: 0,
        private_data: [0; mra::PRIVATE_DATA_LEN],
    })
}

/// A DREQ.
pub(crate) fn dreq(
    local: CommId,
    remote: CommId,
    remote_qpn: Qpn,
    private_data: &[u8],
) -> CmMessage {
    CmMessage::Dreq(dreq::Repr {
        local_comm_id: local,
        remote_comm_id: remote,
        remote_qpn,
        resv8: 0,
        private_data: padded(private_data),
    })
}

/// A DREP.
pub(crate) fn drep(local: CommId, remote: CommId, private_data: &[u8]) -> CmMessage {
    CmMessage::Drep(drep::Repr {
        local_comm_id: local,
        remote_comm_id: remote,
        private_data: padded(private_data),
    })
}
