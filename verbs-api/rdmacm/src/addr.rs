//! Socket addresses as the C side passes them (`struct sockaddr *`).

use libc::{c_int, sa_family_t, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `ucma_addrlen`: the length of an address of a family librdmacm takes
/// (AF_INET, AF_INET6; AF_IB only where the kernel binds AF_IB, which
/// uroce does not offer), 0 for any other or NULL.
///
/// # Safety
/// `addr` is NULL or points at a socket address.
pub unsafe fn addrlen(addr: *const sockaddr) -> socklen_t {
    if addr.is_null() {
        return 0;
    }
    match c_int::from((*addr).sa_family) {
        libc::AF_INET => size_of::<sockaddr_in>() as socklen_t,
        libc::AF_INET6 => size_of::<sockaddr_in6>() as socklen_t,
        _ => 0,
    }
}

/// Reads an AF_INET/AF_INET6 address (None for another family or NULL).
///
/// # Safety
/// `addr` is NULL or points at a socket address as long as its family's.
pub unsafe fn read(addr: *const sockaddr) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    match c_int::from((*addr).sa_family) {
        libc::AF_INET => {
            let sin = addr.cast::<sockaddr_in>().read_unaligned();
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            let sin6 = addr.cast::<sockaddr_in6>().read_unaligned();
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A `sockaddr_storage` holding `a` (zeros past it).
pub fn storage(a: SocketAddr) -> sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; zero is its empty value.
    let mut s: sockaddr_storage = unsafe { std::mem::zeroed() };
    let p = std::ptr::addr_of_mut!(s);
    match a {
        SocketAddr::V4(v4) => {
            let sin = sockaddr_in {
                sin_family: libc::AF_INET as sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage.
            unsafe { p.cast::<sockaddr_in>().write(sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = sockaddr_in6 {
                sin6_family: libc::AF_INET6 as sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage.
            unsafe { p.cast::<sockaddr_in6>().write(sin6) };
        }
    }
    s
}

/// The address in a `sockaddr_storage` (None when empty or of another
/// family).
pub fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: a storage is as long as any family's address.
    unsafe { read(std::ptr::from_ref(s).cast()) }
}

/// `a` with the IP `ip` (port, flow and scope kept).
pub fn with_ip(a: SocketAddr, ip: IpAddr) -> SocketAddr {
    match (a, ip) {
        (SocketAddr::V6(v6), IpAddr::V6(ip)) => {
            SocketAddr::V6(SocketAddrV6::new(ip, v6.port(), v6.flowinfo(), v6.scope_id()))
        }
        (_, ip) => SocketAddr::new(ip, a.port()),
    }
}

/// Copies `len` bytes of `src` into a fresh `malloc` block (for the C
/// side to free, or `rdma_freeaddrinfo`).
///
/// # Safety
/// `src` holds `len` readable bytes.
pub unsafe fn malloc_copy(src: *const u8, len: usize) -> Result<*mut u8, c_int> {
    let dst = libc::malloc(len.max(1)).cast::<u8>();
    if dst.is_null() {
        return Err(libc::ENOMEM);
    }
    std::ptr::copy_nonoverlapping(src, dst, len);
    Ok(dst)
}
