//! The addresses the two ends exchange over TCP (`struct pingpong_dest`
//! and its 52-byte message), how they are printed, and the exchange.

use super::*;

/// One end's address, as exchanged over TCP (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Gid,
}

impl Dest {
    /// The message the C tools send: `sprintf("%04x:%06x:%06x:%s")` with
    /// the GID as `gid_to_wire_gid` writes it, NUL-padded to [`MSG_LEN`].
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let gid = gid_to_wire_gid(&self.gid);
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Reads a message as `sscanf("%x:%x:%x:%s")` and `wire_gid_to_gid`
    /// do; `None` if it is malformed.
    pub fn from_wire(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut fields = text.trim().splitn(4, ':');
        let mut hex = || u32::from_str_radix(fields.next()?.trim(), 16).ok();
        let (lid, qpn, psn) = (hex()?, hex()?, hex()?);
        let gid = wire_gid_to_gid(fields.next()?.trim())?;
        Some(Dest { lid, qpn, psn, gid })
    }
}

/// `gid_to_wire_gid`: each 32-bit word of the GID, in network order, as
/// eight hex digits (so the bytes in order).
pub fn gid_to_wire_gid(gid: &Gid) -> String {
    gid.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// `wire_gid_to_gid`: the inverse of [`gid_to_wire_gid`].
pub fn wire_gid_to_gid(text: &str) -> Option<Gid> {
    let bytes = text.as_bytes();
    if bytes.len() < 32 {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, word) in bytes[..32].chunks_exact(8).enumerate() {
        let word = std::str::from_utf8(word).ok()?;
        let value = u32::from_str_radix(word, 16).ok()?;
        gid[i * 4..i * 4 + 4].copy_from_slice(&value.to_be_bytes());
    }
    Some(Gid(gid))
}

/// glibc's `inet_ntop(AF_INET6)`, which the C tools print GIDs with (it
/// differs from Rust's `Ipv6Addr` display on IPv4-compatible addresses).
pub fn inet_ntop6(gid: &Gid) -> String {
    let b = gid.0;
    let words: Vec<u16> = b.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]])).collect();
    // The longest run of zero words (the first of equal ones), if >= 2.
    // Runs of zero words as (first word, length).
    type Run = Option<(usize, usize)>;
    let (mut best, mut cur): (Run, Run) = (None, None);
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(match cur {
                None => (i, 1),
                Some((base, len)) => (base, len + 1),
            });
        } else if let Some(run) = cur.take() {
            if best.is_none_or(|b| run.1 > b.1) {
                best = Some(run);
            }
        }
    }
    if let Some(run) = cur {
        if best.is_none_or(|b| run.1 > b.1) {
            best = Some(run);
        }
    }
    let best = best.filter(|run| run.1 >= 2);
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    s.push(':');
                }
                i += 1;
                continue;
            }
        }
        if i != 0 {
            s.push(':');
        }
        let embedded_v4 =
            matches!(best, Some((0, 6))) || (matches!(best, Some((0, 5))) && words[5] == 0xffff);
        if i == 6 && embedded_v4 {
            s.push_str(&format!("{}.{}.{}.{}", b[12], b[13], b[14], b[15]));
            return s;
        }
        s.push_str(&format!("{:x}", words[i]));
        i += 1;
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        s.push(':');
    }
    s
}

/// `ibv_wc_status_str`.
pub fn wc_status_str(status: WcStatus) -> &'static str {
    match status {
        WcStatus::Success => "success",
        WcStatus::LocLenErr => "local length error",
        WcStatus::LocQpOpErr => "local QP operation error",
        WcStatus::LocEecOpErr => "local EE context operation error",
        WcStatus::LocProtErr => "local protection error",
        WcStatus::WrFlushErr => "Work Request Flushed Error",
        WcStatus::MwBindErr => "memory management operation error",
        WcStatus::BadRespErr => "bad response error",
        WcStatus::LocAccessErr => "local access error",
        WcStatus::RemInvReqErr => "remote invalid request error",
        WcStatus::RemAccessErr => "remote access error",
        WcStatus::RemOpErr => "remote operation error",
        WcStatus::RetryExcErr => "transport retry counter exceeded",
        WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
        WcStatus::LocRddViolErr => "local RDD violation error",
        WcStatus::RemInvRdReqErr => "remote invalid RD request",
        WcStatus::RemAbortErr => "operation aborted",
        WcStatus::InvEecnErr => "invalid EE context number",
        WcStatus::InvEecStateErr => "invalid EE context state",
        WcStatus::FatalErr => "fatal error",
        WcStatus::RespTimeoutErr => "response timeout error",
        WcStatus::GeneralErr => "general error",
    }
}

/// A random 24-bit PSN (`lrand48() & 0xffffff`).
pub(super) fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// The address lines: `  local address:  LID 0x%04x, QPN 0x%06x, PSN
/// 0x%06x, GID %s` (ibv_ud_pingpong has a colon before `GID` on the local
/// line, reproduced here).
pub(super) fn address_line(label: &str, dest: &Dest, transport: Transport) -> String {
    let sep = if transport == Transport::Ud && label == "local" { ':' } else { ',' };
    let pad = if label == "local" { "  " } else { " " };
    format!(
        "  {label} address:{pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        dest.lid,
        dest.qpn,
        dest.psn,
        inet_ntop6(&dest.gid)
    )
}

pub(super) fn io_error(what: &str, e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            format!("{what}: the other side closed the connection")
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("{what}: timed out")
        }
        _ => format!("{what}: {e}"),
    }
}

/// `pp_client_exch_dest`: connect, send ours, read theirs, send `done`.
pub(super) fn client_exchange(
    dev: &UdpDevice,
    host: &str,
    port: u16,
    mine: &Dest,
    timeout: Duration,
) -> Result<Dest, String> {
    let mut stream = oob::connect(dev, host, port, timeout)?;
    stream.set_timeout(Some(timeout));
    stream.write_all(&mine.to_wire()).map_err(|e| io_error("Couldn't send local address", e))?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg).map_err(|e| io_error("Couldn't read/write remote address", e))?;
    stream.write_all(DONE).map_err(|e| io_error("Couldn't read/write remote address", e))?;
    Dest::from_wire(&msg).ok_or_else(|| {
        format!(
            "Couldn't read remote address: malformed message {:?}",
            String::from_utf8_lossy(&msg)
        )
    })
}

/// `pp_server_exch_dest`: read theirs, connect the QP, send ours, read
/// `done`.
pub(super) fn server_exchange(
    session: &mut Session,
    listener: &OobListener,
    mine: &Dest,
) -> Result<Dest, String> {
    let plan = session.plan.clone();
    let deadline = Instant::now() + plan.accept_timeout;
    let never = AtomicBool::new(false);
    let mut stream = listener.accept(Some(deadline), &never).map_err(|e| {
        if e.ends_with("in time") {
            format!(
                "accept() failed: no client connected within {} s",
                plan.accept_timeout.as_secs()
            )
        } else {
            e
        }
    })?;
    stream.set_timeout(Some(plan.timeout));
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg).map_err(|e| io_error("Couldn't read remote address", e))?;
    let remote = Dest::from_wire(&msg).ok_or_else(|| {
        format!(
            "Couldn't read remote address: malformed message {:?}",
            String::from_utf8_lossy(&msg)
        )
    })?;
    session
        .connect(mine.psn, &remote)
        .map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    stream
        .write_all(&mine.to_wire())
        .map_err(|e| io_error("Couldn't send/recv local address", e))?;
    let mut done = [0u8; DONE.len()];
    stream.read_exact(&mut done).map_err(|e| io_error("Couldn't send/recv local address", e))?;
    Ok(remote)
}
