//! The hello two sides swap over a side channel (TCP, the harness's `Oob`)
//! before connecting: what the peer needs to reach this side's QP.

use super::Remote;
use std::fmt;
use uroce_device::command::Gid;
use uroce_device::types::Qpn;

impl Remote {
    /// The length of a hello: GID (16 bytes), QPN and first PSN (4 bytes
    /// each).
    pub const LEN: usize = 24;

    /// The hello that tells the peer this remote: GID, then QPN and first
    /// PSN as big-endian 32-bit words.
    pub fn to_bytes(&self) -> [u8; Remote::LEN] {
        let mut hello = [0u8; Remote::LEN];
        hello[..16].copy_from_slice(&self.gid.0);
        hello[16..20].copy_from_slice(&self.qpn.value().to_be_bytes());
        hello[20..].copy_from_slice(&self.psn.to_be_bytes());
        hello
    }

    /// The remote a peer's hello names ([`Remote::to_bytes`]); a hello
    /// not of [`Remote::LEN`] bytes is a [`BadHello`].
    pub fn from_bytes(hello: &[u8]) -> Result<Remote, BadHello> {
        let hello: &[u8; Remote::LEN] =
            hello.try_into().map_err(|_| BadHello { len: hello.len() })?;
        let word = |at: usize| u32::from_be_bytes(hello[at..at + 4].try_into().unwrap());
        Ok(Remote {
            gid: Gid(hello[..16].try_into().unwrap()),
            qpn: Qpn::new(word(16)),
            psn: word(20),
        })
    }
}

/// A hello of the wrong length: `len` bytes, not [`Remote::LEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHello {
    /// How many bytes it had.
    pub len: usize,
}

impl fmt::Display for BadHello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hello of {} bytes, not {}", self.len, Remote::LEN)
    }
}

impl std::error::Error for BadHello {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_hello_is_gid_qpn_psn_big_endian_and_reads_back() {
        let remote = Remote {
            gid: Gid::from(Ipv4Addr::new(10, 0, 0, 2)),
            qpn: Qpn::new(0x12_3456),
            psn: 0xab_cdef,
        };
        let hello = remote.to_bytes();
        assert_eq!(hello[..16], remote.gid.0);
        assert_eq!(hello[16..], [0, 0x12, 0x34, 0x56, 0, 0xab, 0xcd, 0xef]);
        let back = Remote::from_bytes(&hello).unwrap();
        assert_eq!((back.gid, back.qpn, back.psn), (remote.gid, remote.qpn, remote.psn));
    }

    #[test]
    fn a_hello_of_another_length_is_refused() {
        let hello = [0u8; 25];
        for len in [0, 23, 25] {
            assert_eq!(Remote::from_bytes(&hello[..len]).unwrap_err(), BadHello { len });
        }
        let error = Remote::from_bytes(&hello[..3]).unwrap_err();
        assert_eq!(error.to_string(), "hello of 3 bytes, not 24");
    }
}
