//! The L2 transport on a TAP device (`UROCE_TAP=<name>`): the device is a
//! host on a Linux virtual Ethernet interface, one frame per `read`/`write`
//! on `/dev/net/tun` (`IFF_TAP | IFF_NO_PI`: no packet-information
//! prefix). The kernel side of the interface can be bridged to a VM's tap,
//! a veth towards a namespace running `rdma_rxe`, or given an address of
//! its own. Creating a TAP needs `CAP_NET_ADMIN`; attaching to one made
//! persistent for the user (`ip tuntap add dev NAME mode tap user USER`)
//! does not.

use super::sys::Received;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::io;

/// An attached TAP interface.
pub(crate) struct Tap {
    fd: OwnedFd,
}

impl Tap {
    /// Checks an interface name: 1 to 15 bytes, none of `/`, whitespace or
    /// NUL, and not `.` or `..` (the kernel's `dev_valid_name`).
    pub fn check_name(name: &str) -> Result<(), String> {
        let valid = !name.is_empty()
            && name.len() < libc::IFNAMSIZ
            && name != "."
            && name != ".."
            && !name
                .bytes()
                .any(|b| matches!(b, b'/' | b':' | b'%' | 0) || b.is_ascii_whitespace());
        if valid {
            Ok(())
        } else {
            Err(format!(
                "UROCE_TAP=`{name}`: an interface name is 1 to {} bytes, without `/`, `:`, `%` \
                 or spaces",
                libc::IFNAMSIZ - 1
            ))
        }
    }

    /// Attaches to TAP interface `name` (creating it when the caller may),
    /// non-blocking.
    pub fn open(name: &str) -> io::Result<Tap> {
        Self::check_name(name).map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        let fd = rustix::fs::open(
            "/dev/net/tun",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // SAFETY: `ifreq` is plain old data (a name array and a union of
        // integers, addresses and a pointer); all zeroes is a valid value.
        let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
        for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
            *slot = byte as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which
        // `request` is, borrowed mutably for the call; the name is
        // NUL-terminated (at most IFNAMSIZ - 1 bytes, checked above, in a
        // zeroed array) and the descriptor is ours.
        let result = unsafe {
            libc::ioctl(
                rustix::fd::AsRawFd::as_raw_fd(&fd),
                libc::TUNSETIFF,
                &mut request as *mut libc::ifreq,
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tap { fd })
    }

    /// Reads up to `buffers.len()` frames without blocking, each into its
    /// own buffer from byte `offset` on (as `sys::receive_batch`); returns
    /// how many. A frame that fills its buffer is marked truncated.
    pub fn receive_batch(
        &self,
        buffers: &mut [Vec<u8>],
        offset: usize,
        out: &mut Vec<Received>,
    ) -> io::Result<usize> {
        out.clear();
        for buffer in buffers.iter_mut() {
            let Some(space) = buffer.get_mut(offset..) else {
                return Err(io::Error::from(io::ErrorKind::InvalidInput));
            };
            let room = space.len();
            match rustix::io::read(&self.fd, space) {
                Ok(0) => break,
                Ok(len) => out.push(Received {
                    len,
                    source: None,
                    truncated: len == room,
                    segment_size: None,
                }),
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => break,
                // The interface went down: nothing to read until it is up.
                Err(rustix::io::Errno::IO) if out.is_empty() => return Ok(0),
                Err(e) => {
                    if out.is_empty() {
                        return Err(e.into());
                    }
                    break;
                }
            }
        }
        Ok(out.len())
    }

    /// Writes one frame.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let written = rustix::io::write(&self.fd, frame)?;
        if written == frame.len() {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::WriteZero, "the TAP took part of a frame"))
        }
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
