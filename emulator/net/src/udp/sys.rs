//! The few socket calls std does not offer: socket options and batched
//! receive (`recvmmsg`) with the UDP GRO segment size (the batched send is
//! in `sys_send.rs`). Every `unsafe` block is an FFI call into the kernel with
//! buffers this module owns for the duration of the call.

use std::io;

pub use super::sys_send::{send_batch, SendScratch, SEND_MAX};
pub(crate) use super::sys_send::{send_messages, Outgoing};
use std::mem::{size_of, zeroed, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// `UDP_SEGMENT` (linux/udp.h): the GSO segment size of a send.
pub(super) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (linux/udp.h): deliver coalesced datagrams with their segment size.
const UDP_GRO: libc::c_int = 104;
/// `SOL_UDP`.
pub(super) const SOL_UDP: libc::c_int = 17;

/// Sets an integer socket option.
pub(crate) fn set_int_option(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` lives on the stack for the call and its size is
    // passed with it; the descriptor is owned by `socket`.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an integer socket option.
pub(crate) fn int_option(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` outlive the call and `len` holds the size
    // of `value`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets "don't fragment" on every datagram (IPv4 DF; IPv6 never fragments
/// in transit anyway): RoCE packets are never fragmented, and an
/// unconnected socket then sends IPv4 ID 0, which the ICRC covers.
pub fn set_dont_fragment(socket: &UdpSocket, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_int_option(socket, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)
    } else {
        set_int_option(socket, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
    }
}

/// IPv4: send UDP checksum 0, as rxe does (the ICRC protects the packet;
/// the checksum is masked out of it). IPv6 keeps its mandatory checksum.
pub fn set_no_udp_checksum(socket: &UdpSocket, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        return Ok(());
    }
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
}

/// Asks for a receive buffer of `bytes` (the kernel caps it at
/// `net.core.rmem_max`); returns what the kernel granted.
pub fn set_receive_buffer(socket: &UdpSocket, bytes: usize) -> io::Result<usize> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, want)?;
    Ok(int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as usize)
}

/// Asks for a send buffer of `bytes`.
pub fn set_send_buffer(socket: &UdpSocket, bytes: usize) -> io::Result<()> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_SNDBUF, want)
}

/// Turns UDP GRO on: the kernel may hand over several equal-sized
/// datagrams of one flow as one buffer, with their size in a control
/// message.
pub fn enable_gro(socket: &UdpSocket) -> io::Result<()> {
    set_int_option(socket, SOL_UDP, UDP_GRO, 1)
}

/// One received datagram (or GRO run of equal-sized datagrams).
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes received into the message's buffer.
    pub len: usize,
    /// Who sent it (`None`: an address family the runtime does not know).
    pub source: Option<SocketAddr>,
    /// The datagram (or GRO run) did not fit the buffer and was cut.
    pub truncated: bool,
    /// The size of each datagram when GRO coalesced several (the last may
    /// be shorter); `None` for a single datagram.
    pub segment_size: Option<usize>,
}

/// Room for one `UDP_GRO` control message (an int), aligned as cmsgs are.
const CONTROL_LEN: usize = 64;

/// Most datagrams one `recvmmsg` call takes.
pub const RECEIVE_MAX: usize = 64;

/// The C structures `recvmmsg` needs, kept between calls so that a poll
/// that finds nothing costs a system call and no set-up.
pub struct ReceiveScratch {
    iovecs: Box<[libc::iovec; RECEIVE_MAX]>,
    names: Box<[libc::sockaddr_storage; RECEIVE_MAX]>,
    controls: Box<[[u64; CONTROL_LEN / 8]; RECEIVE_MAX]>,
    headers: Box<[libc::mmsghdr; RECEIVE_MAX]>,
}

// SAFETY: the raw pointers inside are rewritten at the start of every
// `receive_batch` call and only used by the kernel during that call; between
// calls they point at nothing anyone reads, so moving the scratch to another
// thread (under the runtime's mutex) is sound.
unsafe impl Send for ReceiveScratch {}

impl Default for ReceiveScratch {
    fn default() -> ReceiveScratch {
        ReceiveScratch::new()
    }
}

impl ReceiveScratch {
    /// Scratch for [`receive_batch`].
    pub fn new() -> ReceiveScratch {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        unsafe {
            ReceiveScratch {
                iovecs: Box::new(zeroed()),
                names: Box::new(zeroed()),
                controls: Box::new(zeroed()),
                headers: Box::new(zeroed()),
            }
        }
    }
}

/// Receives up to `buffers.len()` datagrams without blocking, each into
/// its own buffer from byte `offset` on. Returns how many arrived (0 when
/// none is waiting).
pub fn receive_batch(
    socket: &UdpSocket,
    scratch: &mut ReceiveScratch,
    buffers: &mut [Vec<u8>],
    offset: usize,
    out: &mut Vec<Received>,
) -> io::Result<usize> {
    out.clear();
    let count = buffers.len().min(RECEIVE_MAX);
    if count == 0 {
        return Ok(0);
    }
    for (i, buffer) in buffers[..count].iter_mut().enumerate() {
        let Some(space) = buffer.get_mut(offset..) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        scratch.iovecs[i] =
            libc::iovec { iov_base: space.as_mut_ptr().cast(), iov_len: space.len() };
        let hdr = &mut scratch.headers[i].msg_hdr;
        hdr.msg_name = (&mut scratch.names[i] as *mut libc::sockaddr_storage).cast();
        hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_iov = &mut scratch.iovecs[i];
        hdr.msg_iovlen = 1;
        hdr.msg_control = scratch.controls[i].as_mut_ptr().cast();
        hdr.msg_controllen = CONTROL_LEN as _;
        hdr.msg_flags = 0;
    }
    // SAFETY: the first `count` headers point at iovecs, names and control
    // buffers in `scratch`, each with its true length, and the iovecs point
    // into `buffers`, all borrowed mutably for the whole call.
    // MSG_DONTWAIT: the call never blocks.
    let received = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            scratch.headers.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if received < 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(err),
        };
    }
    for i in 0..received as usize {
        out.push(describe(scratch, i));
    }
    Ok(received as usize)
}

/// Receives one datagram (or GRO run) without blocking into `buffer` from
/// byte `offset` on, with `recvmsg`: cheaper than `recvmmsg` for the polls
/// of a waiting application, which mostly find nothing.
pub fn receive_one(
    socket: &UdpSocket,
    scratch: &mut ReceiveScratch,
    buffer: &mut [u8],
    offset: usize,
    out: &mut Vec<Received>,
) -> io::Result<usize> {
    out.clear();
    let Some(space) = buffer.get_mut(offset..) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    scratch.iovecs[0] = libc::iovec { iov_base: space.as_mut_ptr().cast(), iov_len: space.len() };
    let hdr = &mut scratch.headers[0].msg_hdr;
    hdr.msg_name = (&mut scratch.names[0] as *mut libc::sockaddr_storage).cast();
    hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_iov = &mut scratch.iovecs[0];
    hdr.msg_iovlen = 1;
    hdr.msg_control = scratch.controls[0].as_mut_ptr().cast();
    hdr.msg_controllen = CONTROL_LEN as _;
    hdr.msg_flags = 0;
    // SAFETY: the header points at an iovec, a name and a control buffer
    // in `scratch` with their true lengths, and the iovec into `buffer`,
    // all borrowed mutably for the call. MSG_DONTWAIT: it never blocks.
    let received = unsafe { libc::recvmsg(socket.as_raw_fd(), hdr, libc::MSG_DONTWAIT) };
    if received < 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(err),
        };
    }
    scratch.headers[0].msg_len = received as u32;
    out.push(describe(scratch, 0));
    Ok(1)
}

/// What the kernel reported for message `i` of the scratch.
fn describe(scratch: &ReceiveScratch, i: usize) -> Received {
    let hdr = &scratch.headers[i].msg_hdr;
    // Every message is reported, so that `out[i]` stays `buffers[i]`.
    let source = socket_addr(&scratch.names[i]);
    let truncated = hdr.msg_flags & libc::MSG_TRUNC != 0;
    let mut segment_size = None;
    // SAFETY: the kernel filled `msg_control`/`msg_controllen` for this
    // header; CMSG_FIRSTHDR/CMSG_NXTHDR stay within that length, and
    // CMSG_DATA of a UDP_GRO message of at least CMSG_LEN(int) bytes holds
    // one int.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            let int_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize;
            if (*cmsg).cmsg_level == SOL_UDP
                && (*cmsg).cmsg_type == UDP_GRO
                && (*cmsg).cmsg_len as usize >= int_len
            {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                segment_size = usize::try_from(size).ok().filter(|&s| s > 0);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    let len = scratch.headers[i].msg_len as usize;
    // A GRO "run" shorter than one segment is just a datagram.
    let segment_size = segment_size.filter(|&s| s < len);
    Received { len, source, truncated, segment_size }
}

pub(super) fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            let mut sin = MaybeUninit::<libc::sockaddr_in>::uninit();
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is at least that large.
            let sin = unsafe {
                std::ptr::copy_nonoverlapping(
                    (storage as *const libc::sockaddr_storage).cast::<u8>(),
                    sin.as_mut_ptr().cast::<u8>(),
                    size_of::<libc::sockaddr_in>(),
                );
                sin.assume_init()
            };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            let mut sin6 = MaybeUninit::<libc::sockaddr_in6>::uninit();
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe {
                std::ptr::copy_nonoverlapping(
                    (storage as *const libc::sockaddr_storage).cast::<u8>(),
                    sin6.as_mut_ptr().cast::<u8>(),
                    size_of::<libc::sockaddr_in6>(),
                );
                sin6.assume_init()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Kills the process as a crash would (`SIGKILL`: no unwinding, no exit
/// hooks, no flush of anything not flushed yet): a scenario's `crash`
/// with `exit`. The caller has written its last words (the firing, the
/// capture) before.
pub(crate) fn kill_self() -> ! {
    use rustix::process::{getpid, kill_process, Signal};
    let _ = kill_process(getpid(), Signal::KILL);
    // SIGKILL to oneself is delivered before `kill` returns; should it not
    // be, die as abruptly anyway.
    std::process::abort()
}

/// Registers (once per process) the hook that writes the scenario summary
/// of every device still open when the process exits.
pub(crate) fn at_exit_summaries() {
    extern "C" fn hook() {
        // A panic must not unwind into libc.
        let _ = std::panic::catch_unwind(super::scenario::summaries_at_exit);
    }
    // SAFETY: `atexit` registers a function pointer with no arguments; the
    // hook is a plain `extern "C" fn` of this library that catches every
    // panic. In a shared object (libibverbs.so.1) glibc's `atexit` binds
    // it to the object's `__dso_handle`, so it runs (or is dropped) at
    // `dlclose` too and never outlives the code.
    let _ = unsafe { libc::atexit(hook) };
}
