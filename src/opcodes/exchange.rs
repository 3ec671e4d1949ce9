//! rxe-opcodes' out-of-band exchange, byte for byte: `struct info` as
//! x86-64 lays it out (little-endian, no padding: 64 bytes), the two
//! memory-window rkeys, `done`, and the server's verdict.

use std::io::{Read, Write};

/// `OPC_MAGIC`: "OPC2" in memory order.
pub const MAGIC: u32 = 0x3243_504f;
/// `OPC_VERSION`.
pub const VERSION: u32 = 2;
/// Bytes of `struct info`.
pub const INFO_LEN: usize = 64;
/// What the client sends after its last step.
pub const DONE: &[u8; 4] = b"done";

/// One side's `struct info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Info {
    /// [`MAGIC`].
    pub magic: u32,
    /// [`VERSION`].
    pub version: u32,
    /// The RC QP's number.
    pub rc_qpn: u32,
    /// The UC QP's number.
    pub uc_qpn: u32,
    /// The UD QP's number.
    pub ud_qpn: u32,
    /// The first PSN of every connected QP.
    pub psn: u32,
    /// The MR's rkey.
    pub rkey: u32,
    /// The path MTU in bytes (`-m`).
    pub mtu: u32,
    /// The MR's first address.
    pub addr: u64,
    /// The GID at `-g`.
    pub gid: [u8; 16],
    /// How many steps the table has.
    pub nsteps: u32,
    /// The table's fingerprint at `mtu`.
    pub fingerprint: u32,
}

impl Info {
    /// The 64 bytes on the wire.
    pub fn to_bytes(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        let words = [
            self.magic,
            self.version,
            self.rc_qpn,
            self.uc_qpn,
            self.ud_qpn,
            self.psn,
            self.rkey,
            self.mtu,
        ];
        for (i, w) in words.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b[32..40].copy_from_slice(&self.addr.to_le_bytes());
        b[40..56].copy_from_slice(&self.gid);
        b[56..60].copy_from_slice(&self.nsteps.to_le_bytes());
        b[60..64].copy_from_slice(&self.fingerprint.to_le_bytes());
        b
    }

    /// Reads the 64 bytes.
    pub fn from_bytes(b: &[u8; INFO_LEN]) -> Info {
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[32..40]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[40..56]);
        Info {
            magic: word(0),
            version: word(4),
            rc_qpn: word(8),
            uc_qpn: word(12),
            ud_qpn: word(16),
            psn: word(20),
            rkey: word(24),
            mtu: word(28),
            addr: u64::from_le_bytes(addr),
            gid,
            nsteps: word(56),
            fingerprint: word(60),
        }
    }

    /// The `local`/`remote` line.
    pub fn line(&self, label: &str) -> String {
        format!(
            "{label:<6} RC 0x{:06x} UC 0x{:06x} UD 0x{:06x} PSN 0x{:06x} rkey 0x{:08x} mtu {}",
            self.rc_qpn, self.uc_qpn, self.ud_qpn, self.psn, self.rkey, self.mtu
        )
    }

    /// Whether `peer` runs the same steps; `Err` says what differs.
    pub fn check_same_steps(&self, peer: &Info) -> Result<(), String> {
        if peer.mtu == self.mtu
            && peer.nsteps == self.nsteps
            && peer.fingerprint == self.fingerprint
        {
            return Ok(());
        }
        Err(format!(
            "the peer runs other steps (mtu {}, {} steps, fingerprint 0x{:08x}; here: mtu {}, {} \
             steps, fingerprint 0x{:08x}): give both sides the same -m and the same build",
            peer.mtu, peer.nsteps, peer.fingerprint, self.mtu, self.nsteps, self.fingerprint
        ))
    }
}

/// Sends `mine` and reads the peer's: magic and version first, so that a
/// peer speaking another exchange (an older rxe-opcodes sends its QPNs
/// there) is named as such instead of read as garbage.
pub fn swap_info(stream: &mut (impl Read + Write), mine: &Info) -> Result<Info, String> {
    stream.write_all(&mine.to_bytes()).map_err(|e| io_error("tcp write", e))?;
    stream.flush().map_err(|e| io_error("tcp write", e))?;
    let mut b = [0u8; INFO_LEN];
    stream.read_exact(&mut b[..8]).map_err(|e| io_error("tcp read", e))?;
    let head = Info::from_bytes(&b);
    if head.magic != MAGIC || head.version != VERSION {
        return Err(format!(
            "the peer speaks another exchange (magic 0x{:08x} version {}; this build: 0x{MAGIC:08x} \
             version {VERSION}): use the same rxe-opcodes/uroce opcodes version on both sides",
            head.magic, head.version
        ));
    }
    stream.read_exact(&mut b[8..]).map_err(|e| io_error("tcp read", e))?;
    Ok(Info::from_bytes(&b))
}

/// Writes the little-endian `u32`s in `words`.
pub fn write_u32s(stream: &mut impl Write, words: &[u32]) -> Result<(), String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    stream.write_all(&bytes).map_err(|e| io_error("tcp write", e))?;
    stream.flush().map_err(|e| io_error("tcp write", e))
}

/// Reads `N` little-endian `u32`s.
pub fn read_u32s<const N: usize>(stream: &mut impl Read) -> Result<[u32; N], String> {
    let mut out = [0u32; N];
    for w in &mut out {
        let mut b = [0u8; 4];
        stream.read_exact(&mut b).map_err(|e| io_error("tcp read", e))?;
        *w = u32::from_le_bytes(b);
    }
    Ok(out)
}

/// An I/O error in the C program's words.
pub fn io_error(what: &str, e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => format!("{what}: the peer closed the connection"),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("{what} failed (timed out)")
        }
        _ => format!("{what} failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Info {
        Info {
            magic: MAGIC,
            version: VERSION,
            rc_qpn: 0x11,
            uc_qpn: 0x12,
            ud_qpn: 0x13,
            psn: 0xabcdef,
            rkey: 0x0000_0209,
            mtu: 1024,
            addr: 0x0000_7f00_1234_5000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 0, 1],
            nsteps: 26,
            fingerprint: 0x97cf_8137,
        }
    }

    #[test]
    fn struct_info_is_the_c_layout() {
        let b = sample().to_bytes();
        // "OPC2", version 2, then the QPNs, PSN, rkey, MTU, address, GID.
        assert_eq!(&b[0..8], b"OPC2\x02\x00\x00\x00");
        assert_eq!(&b[8..12], &[0x11, 0, 0, 0]);
        assert_eq!(&b[20..24], &[0xef, 0xcd, 0xab, 0]);
        assert_eq!(&b[28..32], &[0x00, 0x04, 0, 0]);
        assert_eq!(&b[32..40], &[0x00, 0x50, 0x34, 0x12, 0x00, 0x7f, 0, 0]);
        assert_eq!(&b[52..56], &[169, 254, 0, 1]);
        assert_eq!(&b[56..64], &[26, 0, 0, 0, 0x37, 0x81, 0xcf, 0x97]);
        assert_eq!(Info::from_bytes(&b), sample());
    }

    /// A stream that reads from one buffer and writes into another.
    struct Pipe {
        input: std::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }
    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_swap_names_an_old_peer_and_a_short_one() {
        let mut peer = sample();
        peer.rc_qpn = 0x22;
        let mut ok = Pipe { input: std::io::Cursor::new(peer.to_bytes().to_vec()), output: vec![] };
        assert_eq!(swap_info(&mut ok, &sample()), Ok(peer));
        assert_eq!(ok.output, sample().to_bytes());

        // rxe-opcodes v1 sent 56 bytes starting with its RC QPN.
        let mut v1 = vec![0x11, 0, 0, 0, 0x12, 0, 0, 0];
        v1.resize(56, 0);
        let mut old = Pipe { input: std::io::Cursor::new(v1), output: vec![] };
        let err = swap_info(&mut old, &sample()).unwrap_err();
        assert!(err.contains("another exchange (magic 0x00000011 version 18"), "{err}");

        let mut short = Pipe {
            input: std::io::Cursor::new(sample().to_bytes()[..40].to_vec()),
            output: vec![],
        };
        let err = swap_info(&mut short, &sample()).unwrap_err();
        assert_eq!(err, "tcp read: the peer closed the connection");
    }

    #[test]
    fn other_steps_are_refused() {
        let mine = sample();
        assert_eq!(mine.check_same_steps(&mine), Ok(()));
        let other = Info { mtu: 4096, fingerprint: 0xb1ef_3df3, ..mine };
        let err = mine.check_same_steps(&other).unwrap_err();
        assert!(
            err.contains("mtu 4096, 26 steps, fingerprint 0xb1ef3df3; here: mtu 1024"),
            "{err}"
        );
    }

    #[test]
    fn the_lines_are_the_c_programs() {
        assert_eq!(
            sample().line("local"),
            "local  RC 0x000011 UC 0x000012 UD 0x000013 PSN 0xabcdef rkey 0x00000209 mtu 1024"
        );
        assert_eq!(
            sample().line("remote"),
            "remote RC 0x000011 UC 0x000012 UD 0x000013 PSN 0xabcdef rkey 0x00000209 mtu 1024"
        );
    }
}
