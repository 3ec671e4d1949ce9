//! Batched sends: `sendmmsg` of single datagrams and of UDP GSO runs, each
//! message with its own segment size, in one call. Every `unsafe` block is
//! an FFI call into the kernel with buffers this module owns (or the
//! caller lends, and the kernel only reads) for the duration of the call.

use super::sys::{sockaddr, SOL_UDP, UDP_SEGMENT};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::AsRawFd;

/// Most messages one `sendmmsg` call sends.
pub const SEND_MAX: usize = 64;
/// Most parts one message gathers (UDP GSO takes at most 64 segments, and
/// a run's parts are its segments).
pub(crate) const MAX_PARTS: usize = 64;
/// Room for one `UDP_SEGMENT` control message (a u16), aligned as cmsgs
/// are (`CMSG_SPACE(2)` is 24 bytes on 64-bit Linux).
const SEGMENT_CONTROL_WORDS: usize = 4;

/// The C structures `sendmmsg` needs, kept between calls.
pub struct SendScratch {
    iovecs: Vec<libc::iovec>,
    names: Box<[libc::sockaddr_storage; SEND_MAX]>,
    controls: Box<[[u64; SEGMENT_CONTROL_WORDS]; SEND_MAX]>,
    headers: Box<[libc::mmsghdr; SEND_MAX]>,
}

// SAFETY: the raw pointers inside are rewritten before every call and only
// used by the kernel during it; between calls nobody reads them, so moving
// the scratch to another thread (under the runtime's mutex) is sound.
unsafe impl Send for SendScratch {}

impl Default for SendScratch {
    fn default() -> SendScratch {
        SendScratch::new()
    }
}

impl SendScratch {
    /// Scratch for [`send_batch`] (and the runtime's batched sends).
    pub fn new() -> SendScratch {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        unsafe {
            SendScratch {
                iovecs: Vec::with_capacity(SEND_MAX),
                names: Box::new(zeroed()),
                controls: Box::new(zeroed()),
                headers: Box::new(zeroed()),
            }
        }
    }

    /// Fills message `i`'s header: its name, its `iov_count` iovecs from
    /// `first_iov` on (already in `iovecs`), and with `segment_size` a
    /// `UDP_SEGMENT` control message.
    fn set_message(
        &mut self,
        i: usize,
        destination: SocketAddr,
        first_iov: usize,
        iov_count: usize,
        segment_size: Option<u16>,
    ) {
        let SendScratch { iovecs, names, controls, headers } = self;
        let (name, name_len) = sockaddr(destination);
        names[i] = name;
        let hdr = &mut headers[i].msg_hdr;
        hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
        hdr.msg_namelen = name_len;
        hdr.msg_iov = iovecs[first_iov..].as_mut_ptr();
        hdr.msg_iovlen = iov_count as _;
        hdr.msg_flags = 0;
        let Some(segment_size) = segment_size else {
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            return;
        };
        hdr.msg_control = controls[i].as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        debug_assert!(space <= SEGMENT_CONTROL_WORDS * 8);
        hdr.msg_controllen = space as _;
        // SAFETY: `msg_control` points at `controls[i]`, `space` bytes of
        // it, room for one cmsg header and its u16 (CMSG_FIRSTHDR is then
        // not null); the writes stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(hdr);
            (*cmsg).cmsg_level = SOL_UDP;
            (*cmsg).cmsg_type = UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment_size);
        }
    }

    /// `sendmmsg` of the first `count` messages set; `sendmsg` for one
    /// (the usual case of a ping-pong: the kernel's path is the same, less
    /// the vector's handling).
    fn send(&mut self, socket: &UdpSocket, count: usize) -> io::Result<usize> {
        let sent = if count == 1 {
            // SAFETY: the first header points at iovecs, a name and control
            // messages in `self` with their true lengths (as below); the
            // kernel only reads them and the caller's bytes.
            let bytes = unsafe { libc::sendmsg(socket.as_raw_fd(), &self.headers[0].msg_hdr, 0) };
            if bytes < 0 {
                -1
            } else {
                1
            }
        } else {
            // SAFETY: the first `count` headers point at iovecs, names and
            // control messages in `self` with their true lengths (set by
            // `set_message` after every iovec was pushed, so none moved);
            // the iovecs point into the caller's bytes, which outlive the
            // call and which the kernel only reads.
            unsafe { libc::sendmmsg(socket.as_raw_fd(), self.headers.as_mut_ptr(), count as _, 0) }
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }
}

/// One message of a [`send_messages`] call: its parts' bytes, gathered,
/// to `destination`.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// Its parts: indexes into the call's spans.
    pub parts: Range<usize>,
    pub destination: SocketAddr,
    /// UDP GSO: the kernel cuts the whole into datagrams of this many bytes
    /// (the last may be shorter). `None`: one datagram.
    pub segment_size: Option<u16>,
}

/// Sends `messages` (at most [`SEND_MAX`]) with one `sendmmsg` call; each
/// gathers its parts, which are `spans` of `bytes`. Returns how many left;
/// an error only when the first one was refused (a GSO message the kernel
/// cannot segment is refused with `EINVAL` or `EIO`).
pub(crate) fn send_messages(
    socket: &UdpSocket,
    scratch: &mut SendScratch,
    bytes: &[u8],
    spans: &[Range<usize>],
    messages: &[Outgoing],
) -> io::Result<usize> {
    let count = messages.len().min(SEND_MAX);
    if count == 0 {
        return Ok(0);
    }
    let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
    scratch.iovecs.clear();
    for message in &messages[..count] {
        let parts = spans
            .get(message.parts.clone())
            .filter(|parts| !parts.is_empty() && parts.len() <= MAX_PARTS)
            .ok_or_else(invalid)?;
        for span in parts {
            let part = bytes.get(span.clone()).ok_or_else(invalid)?;
            scratch
                .iovecs
                .push(libc::iovec { iov_base: part.as_ptr() as *mut _, iov_len: part.len() });
        }
    }
    let mut first_iov = 0;
    for (i, message) in messages[..count].iter().enumerate() {
        let iov_count = message.parts.len();
        scratch.set_message(i, message.destination, first_iov, iov_count, message.segment_size);
        first_iov += iov_count;
    }
    scratch.send(socket, count)
}

/// Sends each `(payload, destination)` as its own datagram with one
/// `sendmmsg` call (at most [`SEND_MAX`] per call). Returns how many left;
/// an error only when the first one was refused.
pub fn send_batch(
    socket: &UdpSocket,
    scratch: &mut SendScratch,
    datagrams: &[(&[u8], SocketAddr)],
) -> io::Result<usize> {
    let count = datagrams.len().min(SEND_MAX);
    if count == 0 {
        return Ok(0);
    }
    scratch.iovecs.clear();
    for (payload, _) in &datagrams[..count] {
        scratch
            .iovecs
            .push(libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: payload.len() });
    }
    for (i, (_, destination)) in datagrams[..count].iter().enumerate() {
        scratch.set_message(i, *destination, i, 1, None);
    }
    scratch.send(socket, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A GSO run and single datagrams, to two destinations, in one call:
    /// every datagram arrives with its size, in order.
    #[test]
    fn one_call_sends_runs_and_singles() {
        let here = UdpSocket::bind("127.161.202.1:0").unwrap();
        let peers: Vec<UdpSocket> = ["127.161.202.2:0", "127.161.202.3:0"]
            .iter()
            .map(|a| UdpSocket::bind(a).unwrap())
            .collect();
        for peer in &peers {
            peer.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let to: Vec<SocketAddr> = peers.iter().map(|p| p.local_addr().unwrap()).collect();
        // Packets of 300, 200, 200, 150 bytes (a run of 200s ending in a
        // 150), then a single of 90 to the other peer, then one of 300.
        let sizes = [300usize, 200, 200, 150, 90, 300];
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        for (n, len) in sizes.iter().enumerate() {
            let start = bytes.len();
            bytes.extend(std::iter::repeat_n(n as u8, *len));
            spans.push(start..start + len);
        }
        let messages = [
            Outgoing { parts: 0..1, destination: to[0], segment_size: None },
            Outgoing { parts: 1..4, destination: to[0], segment_size: Some(200) },
            Outgoing { parts: 4..5, destination: to[1], segment_size: None },
            Outgoing { parts: 5..6, destination: to[0], segment_size: None },
        ];
        let mut scratch = SendScratch::new();
        match send_messages(&here, &mut scratch, &bytes, &spans, &messages) {
            Ok(4) => {}
            // A kernel without UDP GSO: nothing to test here.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => return,
            other => panic!("sendmmsg: {other:?}"),
        }
        let mut buf = [0u8; 512];
        let mut got = |peer: &UdpSocket| {
            let n = peer.recv(&mut buf).expect("a datagram arrives");
            (buf[0], n)
        };
        let first: Vec<(u8, usize)> = (0..5).map(|_| got(&peers[0])).collect();
        assert_eq!(first, [(0, 300), (1, 200), (2, 200), (3, 150), (5, 300)]);
        assert_eq!(got(&peers[1]), (4, 90));
    }

    #[test]
    fn spans_outside_the_bytes_are_refused() {
        let here = UdpSocket::bind("127.161.202.4:0").unwrap();
        let to: SocketAddr = "127.161.202.5:9".parse().unwrap();
        let messages = [Outgoing { parts: 0..1, destination: to, segment_size: None }];
        let mut scratch = SendScratch::new();
        let outside: [Range<usize>; 1] = [Range { start: 5, end: 20 }];
        let refused = send_messages(&here, &mut scratch, &[0u8; 10], &outside, &messages);
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let refused = send_messages(&here, &mut scratch, &[0u8; 10], &[], &messages);
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
