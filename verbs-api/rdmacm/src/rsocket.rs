//! The rsocket calls (`<rdma/rsocket.h>`): sockets over RDMA connections.
//! `rsocket` checks its arguments as librdmacm does (ENOTSUP for a domain,
//! type or protocol it does not take) and then answers ENOSYS: rsockets
//! over the device CM's connections are not offered yet. So no rsocket exists, and every call
//! on one is EBADF, as librdmacm answers for a descriptor that is not an
//! rsocket; `rpoll` and `rselect` on ordinary descriptors are `poll` and
//! `select`, as librdmacm's are when no rsocket is among them.

use crate::ffi::{guard, guard_int, set_errno};
use libc::{
    c_int, c_void, fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t,
    ssize_t, timeval,
};

pub unsafe extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    guard(-1, || {
        const AF_IB: c_int = 27;
        if (domain != libc::AF_INET && domain != libc::AF_INET6 && domain != AF_IB)
            || (kind != libc::SOCK_STREAM && kind != libc::SOCK_DGRAM)
            || (kind == libc::SOCK_STREAM && protocol != 0 && protocol != libc::IPPROTO_TCP)
            || (kind == libc::SOCK_DGRAM && protocol != 0 && protocol != libc::IPPROTO_UDP)
        {
            set_errno(libc::ENOTSUP);
            return -1;
        }
        // rsockets (streams and datagrams over connected ids) are not
        // offered yet.
        let _ = protocol;
        set_errno(libc::ENOSYS);
        -1
    })
}

/// No rsocket exists: EBADF.
fn no_socket() -> c_int {
    guard_int(|| Err(libc::EBADF))
}

fn no_socket_len() -> ssize_t {
    set_errno(libc::EBADF);
    -1
}

pub unsafe extern "C" fn rbind(_s: c_int, _a: *const sockaddr, _l: socklen_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rlisten(_s: c_int, _backlog: c_int) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn raccept(_s: c_int, _a: *mut sockaddr, _l: *mut socklen_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rconnect(_s: c_int, _a: *const sockaddr, _l: socklen_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rshutdown(_s: c_int, _how: c_int) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rclose(_s: c_int) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rrecv(_s: c_int, _b: *mut c_void, _l: size_t, _f: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rrecvfrom(
    _s: c_int,
    _b: *mut c_void,
    _l: size_t,
    _f: c_int,
    _a: *mut sockaddr,
    _al: *mut socklen_t,
) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rrecvmsg(_s: c_int, _m: *mut msghdr, _f: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rsend(_s: c_int, _b: *const c_void, _l: size_t, _f: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rsendto(
    _s: c_int,
    _b: *const c_void,
    _l: size_t,
    _f: c_int,
    _a: *const sockaddr,
    _al: socklen_t,
) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rsendmsg(_s: c_int, _m: *const msghdr, _f: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rread(_s: c_int, _b: *mut c_void, _l: size_t) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rreadv(_s: c_int, _v: *const iovec, _n: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rwrite(_s: c_int, _b: *const c_void, _l: size_t) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rwritev(_s: c_int, _v: *const iovec, _n: c_int) -> ssize_t {
    no_socket_len()
}
pub unsafe extern "C" fn rgetpeername(_s: c_int, _a: *mut sockaddr, _l: *mut socklen_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rgetsockname(_s: c_int, _a: *mut sockaddr, _l: *mut socklen_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rsetsockopt(
    _s: c_int,
    _lv: c_int,
    _n: c_int,
    _v: *const c_void,
    _l: socklen_t,
) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn rgetsockopt(
    _s: c_int,
    _lv: c_int,
    _n: c_int,
    _v: *mut c_void,
    _l: *mut socklen_t,
) -> c_int {
    no_socket()
}
/// `int rfcntl(int socket, int cmd, ...)`: the variadic argument is never
/// read (there is no rsocket to apply it to).
pub unsafe extern "C" fn rfcntl(_s: c_int, _cmd: c_int) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn riomap(
    _s: c_int,
    _b: *mut c_void,
    _l: size_t,
    _p: c_int,
    _f: c_int,
    _o: off_t,
) -> off_t {
    set_errno(libc::EBADF);
    -1
}
pub unsafe extern "C" fn riounmap(_s: c_int, _b: *mut c_void, _l: size_t) -> c_int {
    no_socket()
}
pub unsafe extern "C" fn riowrite(
    _s: c_int,
    _b: *const c_void,
    _c: size_t,
    _o: off_t,
    _f: c_int,
) -> size_t {
    set_errno(libc::EBADF);
    usize::MAX
}
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    libc::poll(fds, nfds, timeout)
}
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    libc::select(nfds, readfds, writefds, exceptfds, timeout)
}
