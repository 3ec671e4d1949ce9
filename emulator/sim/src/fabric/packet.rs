//! A packet's bytes on the fabric: a buffer from the fabric's pool and the
//! packet's length in it. The buffer keeps its full size while it travels
//! and when it goes back to the pool, so reusing it for the next
//! `poll_transmit` costs no zeroing.

use core::ops::{Deref, DerefMut};
use uroce_hca::endpoint::MAX_PACKET_LEN;

/// The first `len` bytes of `buf` are the packet.
#[derive(Debug)]
pub(super) struct Packet {
    buf: Vec<u8>,
    len: usize,
}

impl Packet {
    /// A packet of exactly `bytes`.
    pub(super) fn from_vec(bytes: Vec<u8>) -> Packet {
        Packet { len: bytes.len(), buf: bytes }
    }

    /// The first `len` bytes of `buf` (`len <= buf.len()`).
    pub(super) fn new(buf: Vec<u8>, len: usize) -> Packet {
        assert!(len <= buf.len(), "Packet::new: {len} bytes in a buffer of {}", buf.len());
        Packet { buf, len }
    }

    /// A copy of `bytes` in `buf` (a pooled buffer, grown if it must be).
    pub(super) fn copy_of(mut buf: Vec<u8>, bytes: &[u8]) -> Packet {
        let size = bytes.len().max(MAX_PACKET_LEN);
        if buf.len() < size {
            buf.resize(size, 0);
        }
        buf[..bytes.len()].copy_from_slice(bytes);
        Packet { buf, len: bytes.len() }
    }

    /// The buffer back, at its full size, for the pool.
    pub(super) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

impl Deref for Packet {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Packet {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}
