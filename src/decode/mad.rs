//! CM MADs in `uroce decode`: a UD SEND to QP1 with the GSI Q_Key carries
//! one 256-byte management datagram; for the Communication Manager's
//! messages the line shows the message and the fields that tie a
//! connection together (comm IDs, service ID, QPN, starting PSN, and the
//! rdma_cm addresses in a REQ's private data).

use core::fmt::Write;
use uroce_wire::mad::{self, cma, CmMessage};

/// Appends ` CM[...]` for a MAD that is a CM message, or
/// ` MAD[not a CM message: why]` for one that is not.
pub(super) fn describe(payload: &[u8], line: &mut String) {
    let message = mad::Packet::new_checked(payload).and_then(|packet| {
        let header = mad::Repr::parse(&packet)?;
        Ok((header.transaction_id, CmMessage::parse(&packet)?))
    });
    let (tid, message) = match message {
        Ok(found) => found,
        Err(e) => {
            let _ = write!(line, " MAD[not a CM message: {e}]");
            return;
        }
    };
    let _ = write!(line, " CM[");
    match message {
        CmMessage::Req(r) => {
            let _ = write!(
                line,
                "REQ lcid={} sid={} qpn={} psn={} mtu={} retry={} rnr={}",
                r.local_comm_id,
                r.service_id,
                r.local_qpn,
                r.starting_psn,
                mtu_bytes(r.path_mtu),
                r.retry_count,
                r.rnr_retry_count
            );
            let header =
                cma::Packet::new_checked(&r.private_data[..]).and_then(|p| cma::Repr::parse(&p));
            if let Ok(h) = header {
                if let (Some(src), Some(dst)) = (h.src_ip(), h.dst_ip()) {
                    let _ = write!(
                        line,
                        " rdma_cm {src}:{} -> {dst}:{}",
                        h.src_port,
                        r.service_id.port()
                    );
                }
            }
        }
        CmMessage::Rep(r) => {
            let _ = write!(
                line,
                "REP lcid={} rcid={} qpn={} psn={}",
                r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
            );
        }
        CmMessage::Rtu(r) => {
            let _ = write!(line, "RTU lcid={} rcid={}", r.local_comm_id, r.remote_comm_id);
        }
        CmMessage::Rej(r) => {
            let _ = write!(
                line,
                "REJ lcid={} rcid={} reason={:?}",
                r.local_comm_id, r.remote_comm_id, r.reason
            );
        }
        CmMessage::Mra(r) => {
            let _ = write!(
                line,
                "MRA lcid={} rcid={} timeout={}",
                r.local_comm_id, r.remote_comm_id, r.service_timeout
            );
        }
        CmMessage::Dreq(r) => {
            let _ = write!(
                line,
                "DREQ lcid={} rcid={} qpn={}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn
            );
        }
        CmMessage::Drep(r) => {
            let _ = write!(line, "DREP lcid={} rcid={}", r.local_comm_id, r.remote_comm_id);
        }
        CmMessage::SidrReq(r) => {
            let _ = write!(line, "SIDR_REQ id={} sid={}", r.request_id, r.service_id);
        }
        CmMessage::SidrRep(r) => {
            let _ = write!(
                line,
                "SIDR_REP id={} status={:?} qpn={} qkey={}",
                r.request_id, r.status, r.qpn, r.qkey
            );
        }
    }
    let _ = write!(line, " tid={tid}]");
}

/// A path MTU code in bytes (1: 256 … 5: 4096), or the code itself in
/// brackets when it names none.
fn mtu_bytes(code: u8) -> String {
    match code {
        1..=5 => (128u32 << code).to_string(),
        other => format!("[code {other}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mad_that_is_no_cm_message_says_so() {
        let mut line = String::new();
        describe(&[0u8; 256], &mut line);
        assert_eq!(line, " MAD[not a CM message: malformed: not a CM class version 2 MAD]");
        let mut line = String::new();
        describe(&[0u8; 10], &mut line);
        assert!(line.starts_with(" MAD[not a CM message: "), "{line}");
    }

    #[test]
    fn mtu_codes_read_as_bytes() {
        assert_eq!(mtu_bytes(1), "256");
        assert_eq!(mtu_bytes(5), "4096");
        assert_eq!(mtu_bytes(9), "[code 9]");
    }
}
