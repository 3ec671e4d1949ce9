//! The bytes of perftest's out-of-band exchange (Debian 12's perftest
//! 4.5-0.17, protocol version "6.06"), and a channel that moves them with
//! every wait bounded.
//!
//! Every exchange is symmetric: the client writes its message and then
//! reads the server's; the server reads first and then writes
//! (`ctx_xchg_data`, `ctx_hand_shake`). Each message is one `write()` on
//! one side and one `read()` of exactly its size on the other: perftest
//! fails ("Couldn't read remote address") when a read returns less, so a
//! message must never be split across writes. The exact layouts, captured
//! between two rxe VMs, are in `docs/design-notes/perftest-oob.md` and
//! `tests/golden/perftest/`.

use crate::oob::OobStream;
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};
use uroce_verbs::Gid;

/// The version this exchange is perftest's (`VERSION` in perftest 4.5-0.17).
pub const VERSION: &str = "6.06";
/// The oldest version perftest 4.5-0.17 talks to
/// (`check_version_compatibility`).
pub const OLDEST_VERSION: f64 = 5.70;
/// `sizeof(user_param->version)`: the version string, NUL-padded.
pub const VERSION_LEN: usize = 16;
/// `sizeof(int)`: the cycle buffer and the cache line size.
pub const SYS_DATA_LEN: usize = 4;
/// `sizeof(char[2])`: the MTU enum as a decimal digit and a NUL.
pub const MTU_LEN: usize = 2;
/// `KEY_MSG_SIZE_GID`: one QP's address with its GID
/// (`KEY_PRINT_FMT_GID`), NUL included.
pub const KEY_LEN: usize = 108;
/// One field of the bandwidth report (`unsigned long`, `uint64_t` or
/// `double`, big-endian).
pub const REPORT_FIELD_LEN: usize = 8;
/// What each side writes before it closes (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";

/// Which end of the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connects, and writes first in every exchange.
    Client,
    /// Listens, and reads first in every exchange.
    Server,
}

/// The version message: [`VERSION`], NUL-padded to [`VERSION_LEN`]
/// (`strncpy` into the zeroed `user_param.version`).
pub fn version_message() -> [u8; VERSION_LEN] {
    let mut msg = [0u8; VERSION_LEN];
    msg[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    msg
}

/// Checks the peer's version message: perftest 4.5-0.17 refuses versions
/// older than 5.70; newer versions changed the exchange (they negotiate
/// more parameters), which this does not speak.
pub fn check_version(msg: &[u8]) -> Result<String, String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end])
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .ok_or_else(|| {
            format!("the peer's version message is not a perftest version: {}", escape(msg))
        })?;
    let number: f64 = text
        .parse()
        .map_err(|_| format!("the peer's version message is not a perftest version: `{text}`"))?;
    if number < OLDEST_VERSION {
        return Err(format!(
            "the peer runs perftest version {text}: not compatible with versions older than \
             5.70"
        ));
    }
    let own: f64 = VERSION.parse().unwrap_or(f64::MAX);
    if number > own {
        return Err(format!(
            "the peer runs perftest version {text}; uroce speaks the exchange of version \
             {VERSION} (perftest 4.5-0.17, Debian 12), and newer versions exchange more"
        ));
    }
    Ok(text.to_string())
}

/// A sys-data value (cycle buffer or cache line size) as perftest sends
/// it: a big-endian `int`.
pub fn sys_data_message(value: u32) -> [u8; SYS_DATA_LEN] {
    value.to_be_bytes()
}

/// Reads the peer's cycle buffer (its page size): a power of two from 256
/// bytes to 16 MiB.
pub fn parse_cycle_buffer(msg: &[u8]) -> Result<u32, String> {
    parse_power_of_two(msg, 256, 1 << 24, "cycle buffer (page size)")
}

/// Reads the peer's cache line size: a power of two from 16 to 4096.
pub fn parse_cache_line(msg: &[u8]) -> Result<u32, String> {
    parse_power_of_two(msg, 16, 4096, "cache line size")
}

fn parse_power_of_two(msg: &[u8], min: u32, max: u32, what: &str) -> Result<u32, String> {
    let bytes: [u8; SYS_DATA_LEN] =
        msg.try_into().map_err(|_| format!("the peer's {what} is not {SYS_DATA_LEN} bytes"))?;
    let value = u32::from_be_bytes(bytes);
    if value.is_power_of_two() && (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "the peer's {what} is {value} ({}): a power of two from {min} to {max} was expected",
            escape(msg)
        ))
    }
}

/// The MTU message: the `ibv_mtu` value (1 = 256 ... 5 = 4096) as one
/// decimal digit and a NUL (`sprintf("%d")`, 2 bytes sent).
pub fn mtu_message(mtu: uroce_verbs::Mtu) -> [u8; MTU_LEN] {
    [b'0' + mtu.raw(), 0]
}

/// Reads the peer's MTU message.
pub fn parse_mtu(msg: &[u8]) -> Result<uroce_verbs::Mtu, String> {
    match msg {
        [digit @ b'1'..=b'5', 0] => uroce_verbs::Mtu::from_raw(digit - b'0')
            .ok_or_else(|| format!("the peer's MTU message is {}", escape(msg))),
        _ => Err(format!(
            "the peer's MTU message is {}: a digit from 1 (256) to 5 (4096) and a NUL was \
             expected",
            escape(msg)
        )),
    }
}

/// One QP's address (`struct pingpong_dest` as `KEY_PRINT_FMT_GID` writes
/// it): `LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:` then the 16
/// GID bytes as `gg:`, then `SSSSSSSS:` and a NUL, all hexadecimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ/atomic operations the QP accepts as a responder (`out_reads`).
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// R_Key of the QP's buffer.
    pub rkey: u32,
    /// Virtual address of the QP's buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: Gid,
    /// SRQ number (XRC/DC only; 0 here).
    pub srqn: u32,
}

impl Dest {
    /// The [`KEY_LEN`]-byte message.
    pub fn to_wire(self) -> [u8; KEY_LEN] {
        let gid: Vec<String> = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:{}:{:08x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr,
            gid.join(":"),
            self.srqn
        );
        let mut msg = [0u8; KEY_LEN];
        let n = text.len().min(KEY_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Reads a [`KEY_LEN`]-byte message; every field must have its exact
    /// width, as perftest's `sprintf` writes it.
    pub fn from_wire(msg: &[u8]) -> Result<Dest, String> {
        let bad = |why: &str| format!("the peer's QP address {why}: {}", escape(msg));
        if msg.len() != KEY_LEN || msg[KEY_LEN - 1] != 0 {
            return Err(bad("is not 107 characters and a NUL"));
        }
        let text =
            std::str::from_utf8(&msg[..KEY_LEN - 1]).map_err(|_| bad("is not ASCII text"))?;
        let fields: Vec<&str> = text.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQ number, and the empty rest after
        // the final ':'.
        let widths = [4, 4, 6, 6, 8, 16].into_iter().chain([2; 16]).chain([8, 0]);
        if fields.len() != 24 || fields.iter().zip(widths).any(|(f, w)| f.len() != w) {
            return Err(bad("has not perftest's fields (LID:OUT:QPN:PSN:RKEY:VADDR:GID:SRQN:)"));
        }
        let hex = |field: &str| {
            if field.bytes().all(|b| b.is_ascii_hexdigit()) {
                u64::from_str_radix(field, 16).map_err(|_| bad("has a field that is not hex"))
            } else {
                Err(bad("has a field that is not hex"))
            }
        };
        let mut gid = [0u8; 16];
        for (byte, field) in gid.iter_mut().zip(&fields[6..22]) {
            *byte = hex(field)? as u8;
        }
        Ok(Dest {
            lid: hex(fields[0])? as u16,
            out_reads: hex(fields[1])? as u16,
            qpn: hex(fields[2])? as u32,
            psn: hex(fields[3])? as u32,
            rkey: hex(fields[4])? as u32,
            vaddr: hex(fields[5])?,
            gid: Gid(gid),
            srqn: hex(fields[22])? as u32,
        })
    }
}

/// The bandwidth report the client of a WRITE, READ or atomic test sends
/// the (passive) server, which prints it (`xchg_bw_reports` with a peer of
/// version 5.33 or later): five exchanges of 8 bytes, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes (`unsigned long`).
    pub size: u64,
    /// Messages over all QPs (`uint64_t`).
    pub iters: u64,
    /// Peak bandwidth, in the client's unit (MB/s or Gb/s).
    pub peak: f64,
    /// Average bandwidth, in the client's unit.
    pub average: f64,
    /// Message rate in Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five messages, in order.
    pub fn to_wire(self) -> [[u8; REPORT_FIELD_LEN]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.peak.to_bits().to_be_bytes(),
            self.average.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// Reads the five messages.
    pub fn from_wire(fields: &[[u8; REPORT_FIELD_LEN]; 5]) -> BwReport {
        let float = |b: &[u8; 8]| f64::from_bits(u64::from_be_bytes(*b));
        BwReport {
            size: u64::from_be_bytes(fields[0]),
            iters: u64::from_be_bytes(fields[1]),
            peak: float(&fields[2]),
            average: float(&fields[3]),
            msg_rate: float(&fields[4]),
        }
    }
}

/// Bytes as a short readable string for error messages: printable ASCII
/// as is, the rest as `\xNN`.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes.iter().take(120) {
        match b {
            b'"' | b'\\' => s.push_str(&format!("\\{}", b as char)),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > 120 {
        s.push_str("...");
    }
    s.push('"');
    s
}

/// How long one read waits before it checks the deadline and the device.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// The out-of-band connection, as one side of perftest's exchange.
pub struct Channel {
    stream: OobStream,
    role: Role,
    /// How long the peer may stay silent (no byte on the connection and no
    /// packet on the device) before the run fails.
    timeout: Duration,
    /// Packets the device has received so far: while a peer is busy with
    /// the RDMA traffic (a WRITE test's server waits for the client's next
    /// message through the whole measurement), arriving packets show it is
    /// alive.
    progress: Box<dyn Fn() -> u64>,
}

impl Channel {
    /// A channel over `stream`; `progress` counts the device's received
    /// packets.
    pub fn new(
        stream: OobStream,
        role: Role,
        timeout: Duration,
        progress: Box<dyn Fn() -> u64>,
    ) -> Channel {
        Channel { stream, role, timeout, progress }
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// One exchange (`ctx_xchg_data`): sends `mine` and returns the peer's
    /// message of the same length; the client writes first.
    pub fn exchange(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
        match self.role {
            Role::Client => {
                self.write_message(mine, what)?;
                self.read_message(mine.len(), what)
            }
            Role::Server => {
                let theirs = self.read_message(mine.len(), what)?;
                self.write_message(mine, what)?;
                Ok(theirs)
            }
        }
    }

    /// One `ctx_hand_shake`: exchanges a QP address.
    pub fn hand_shake(&mut self, mine: &Dest, what: &str) -> Result<Dest, String> {
        let theirs = self.exchange(&mine.to_wire(), what)?;
        Dest::from_wire(&theirs)
    }

    /// The end (`ctx_close_connection` after its hand-shake): writes
    /// `done` and takes the peer's, which perftest writes without waiting
    /// for ours. A peer that closes before its `done` arrives is fine (the
    /// test is over); anything else it sends is an error.
    pub fn finish(mut self) -> Result<(), String> {
        self.write_message(DONE, "done")?;
        let wait = self.timeout.min(Duration::from_secs(2));
        let mut got = Vec::new();
        let deadline = Instant::now() + wait;
        self.stream.set_timeout(Some(POLL_SLICE));
        let mut buf = [0u8; DONE.len()];
        while got.len() < DONE.len() && Instant::now() < deadline {
            match self.stream.read(&mut buf[..DONE.len() - got.len()]) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if is_timeout(&e) || e.kind() == ErrorKind::Interrupted => {}
                // Reset: the peer closed with our `done` unread.
                Err(_) => break,
            }
        }
        if !DONE.starts_with(&got) {
            return Err(format!("the peer ended with {} instead of \"done\"", escape(&got)));
        }
        Ok(())
    }

    fn write_message(&mut self, msg: &[u8], what: &str) -> Result<(), String> {
        self.stream.set_timeout(Some(self.timeout));
        // The whole message at once (the peer reads it with one read());
        // a stream that takes only part of it gets the rest right after.
        self.stream
            .write_all(msg)
            .and_then(|()| self.stream.flush())
            .map_err(|e| format!("sending the {what} ({} bytes) failed: {e}", msg.len()))
    }

    fn read_message(&mut self, len: usize, what: &str) -> Result<Vec<u8>, String> {
        self.stream.set_timeout(Some(POLL_SLICE));
        let mut msg = vec![0u8; len];
        let mut got = 0;
        let mut seen = (self.progress)();
        let mut last_progress = Instant::now();
        while got < len {
            match self.stream.read(&mut msg[got..]) {
                Ok(0) => {
                    return Err(format!(
                        "the peer closed the connection while this side waited for its {what} \
                         ({got} of {len} bytes came)"
                    ))
                }
                Ok(n) => {
                    got += n;
                    last_progress = Instant::now();
                }
                Err(e) if is_timeout(&e) || e.kind() == ErrorKind::Interrupted => {
                    let now = (self.progress)();
                    if now != seen {
                        seen = now;
                        last_progress = Instant::now();
                    } else if last_progress.elapsed() >= self.timeout {
                        return Err(format!(
                            "no {what} from the peer for {} s ({got} of {len} bytes came; \
                             --timeout)",
                            self.timeout.as_secs_f64()
                        ));
                    }
                }
                Err(e) => {
                    return Err(format!(
                        "reading the peer's {what} failed after {got} of {len} bytes: {e}"
                    ))
                }
            }
        }
        Ok(msg)
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use uroce_verbs::Mtu;

    /// A test vector: (client?, bytes) per captured segment, and the
    /// report lines.
    pub(crate) struct Vector {
        pub messages: Vec<(Role, Vec<u8>)>,
        pub server_line: String,
        pub client_line: String,
    }

    pub(crate) fn vector(name: &str) -> Vector {
        let path = format!("{}/tests/golden/perftest/{name}.txt", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut messages = Vec::new();
        let (mut server_line, mut client_line) = (String::new(), String::new());
        for line in text.lines() {
            if let Some(l) = line.strip_prefix("# server report line: ") {
                server_line = l.to_string();
            } else if let Some(l) = line.strip_prefix("# client report line: ") {
                client_line = l.to_string();
            } else if !line.starts_with('#') {
                let (side, hex) = line.split_once(' ').expect("`C hex` or `S hex`");
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                    .collect();
                let role = if side == "C" { Role::Client } else { Role::Server };
                messages.push((role, bytes));
            }
        }
        Vector { messages, server_line, client_line }
    }

    #[test]
    fn fixed_messages_are_perftests_bytes() {
        let v = vector("send_bw");
        let m = &v.messages;
        assert_eq!(m[0].1, version_message());
        assert_eq!(m[1].1, version_message());
        assert_eq!(m[2].1, sys_data_message(4096));
        assert_eq!(m[4].1, sys_data_message(64));
        assert_eq!(m[6].1, mtu_message(Mtu::Mtu1024));
        assert_eq!(m.last().unwrap().1, DONE);
        assert_eq!(check_version(&m[1].1).unwrap(), "6.06");
        assert_eq!(parse_cycle_buffer(&m[3].1).unwrap(), 4096);
        assert_eq!(parse_cache_line(&m[5].1).unwrap(), 64);
        assert_eq!(parse_mtu(&m[7].1).unwrap(), Mtu::Mtu1024);
    }

    #[test]
    fn every_captured_address_reads_and_writes_back_byte_for_byte() {
        let mut seen = 0;
        for name in ["send_bw", "send_bw_q2", "send_bw_ud", "write_bw", "read_bw", "atomic_bw"] {
            for (_, msg) in vector(name).messages.iter().filter(|(_, m)| m.len() == KEY_LEN) {
                let dest = Dest::from_wire(msg).unwrap();
                assert_eq!(&dest.to_wire()[..], &msg[..], "{name}");
                seen += 1;
            }
        }
        assert!(seen > 40);
        // The read test's server: QPN 0x11, 128 outstanding reads, its R_Key,
        // buffer and IPv4 GID.
        let v = vector("read_bw");
        let server = Dest::from_wire(&v.messages[9].1).unwrap();
        assert_eq!(server.qpn, 0x11);
        assert_eq!(server.psn, 0x49_3404);
        assert_eq!(server.out_reads, 128);
        assert_eq!(server.rkey, 0x28b);
        assert_eq!(server.vaddr, 0x5645_73fb_1000);
        assert_eq!(server.gid, Gid::from_ip("169.254.0.1".parse().unwrap()));
        assert_eq!(server.lid, 0);
        assert_eq!(server.srqn, 0);
    }

    #[test]
    fn the_clients_report_reads_back_as_the_vms_printed_it() {
        let v = vector("write_bw");
        // After 4 hand-shakes (8 + 8 messages): 5 exchanges, the client's first.
        let fields: Vec<[u8; 8]> = v.messages[16..26]
            .iter()
            .filter(|(role, _)| *role == Role::Client)
            .map(|(_, m)| m.as_slice().try_into().unwrap())
            .collect();
        let fields: [[u8; 8]; 5] = fields.try_into().unwrap();
        let report = BwReport::from_wire(&fields);
        assert_eq!(report.size, 4096);
        assert_eq!(report.iters, 100);
        assert_eq!(format!("{:.2}", report.peak), "8.82");
        assert_eq!(format!("{:.2}", report.average), "7.66");
        assert_eq!(format!("{:.6}", report.msg_rate), "0.001961");
        assert_eq!(report.to_wire(), fields);
    }

    #[test]
    fn bad_messages_are_refused_with_a_reason() {
        assert!(check_version(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0").unwrap_err().contains("5.70"));
        assert!(check_version(b"7.10\0\0\0\0\0\0\0\0\0\0\0\0").unwrap_err().contains("6.06"));
        assert!(check_version(b"GET / HTTP/1.1\r\n").unwrap_err().contains("not a perftest"));
        assert!(check_version(&[0; 16]).is_err());
        assert!(check_version(b"5.70\0\0\0\0\0\0\0\0\0\0\0\0").is_ok());
        assert!(parse_cycle_buffer(&[0, 0, 0x10, 1]).is_err());
        assert!(parse_cycle_buffer(&[0, 0, 0, 0]).is_err());
        assert!(parse_cache_line(&[0xff, 0xff, 0xff, 0xc0]).is_err());
        assert!(parse_mtu(b"6\0").is_err());
        assert!(parse_mtu(b"3x").is_err());
        let good = vector("send_bw").messages[8].1.clone();
        for (at, byte) in [(0, b'g'), (4, b'-'), (106, b'0'), (107, b'x'), (50, b':')] {
            let mut bad = good.clone();
            bad[at] = byte;
            assert!(Dest::from_wire(&bad).is_err(), "byte {at} = {byte}");
        }
        assert!(Dest::from_wire(&good[..100]).is_err());
        assert!(Dest::from_wire(&[b'0'; KEY_LEN]).is_err());
    }
}
