//! The RDMA CM port spaces (TCP, UDP, IB, IPoIB), as the kernel's
//! `cma_alloc_port`/`cma_check_port` keep them: an id binds a port of its
//! space at an address; another id of the same space may not take the same
//! port at the same address (EADDRINUSE), nor at an overlapping one (one
//! of the two the unspecified address: EADDRNOTAVAIL), unless both set
//! `RDMA_OPTION_ID_REUSEADDR` and neither listens. Port 0 takes a free port
//! of the local port range. Ports below 1024 need root (EACCES).
//!
//! The table is the process's: a uroce device belongs to one process (its
//! address is `UROCE_ADDR`), so ports at its addresses are only ever taken
//! here.

use libc::c_int;
use std::net::IpAddr;
use std::sync::Mutex;

/// One bound id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The id (its address, as a number: the key of the binding).
    pub owner: usize,
    pub ps: c_int,
    pub ip: IpAddr,
    pub port: u16,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub listening: bool,
}

static TABLE: Mutex<Vec<Binding>> = Mutex::new(Vec::new());

fn table() -> std::sync::MutexGuard<'static, Vec<Binding>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel's check of `b` against the others on its port
/// (`cma_check_port`), with `reuseaddr` the reuse to allow.
fn check(all: &[Binding], b: &Binding, reuseaddr: bool) -> Result<(), c_int> {
    for cur in all.iter().filter(|c| c.owner != b.owner && c.ps == b.ps && c.port == b.port) {
        if reuseaddr && cur.reuseaddr && !cur.listening {
            continue;
        }
        if b.afonly && cur.afonly && b.ip.is_ipv4() != cur.ip.is_ipv4() {
            continue;
        }
        if b.ip.is_unspecified() || cur.ip.is_unspecified() {
            return Err(libc::EADDRNOTAVAIL);
        }
        if b.ip == cur.ip {
            return Err(libc::EADDRINUSE);
        }
    }
    Ok(())
}

/// The local port range (`/proc/sys/net/ipv4/ip_local_port_range`, as the
/// kernel's `inet_get_local_port_range`).
fn local_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|w| w.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .filter(|(lo, hi)| lo <= hi && *lo > 0)
        .unwrap_or((32768, 60999))
}

/// Binds `b` (port 0: a free one). Returns the port bound.
pub fn bind(mut b: Binding) -> Result<u16, c_int> {
    let mut all = table();
    if b.port == 0 {
        let (lo, hi) = local_range();
        let span = u32::from(hi - lo) + 1;
        // A random start, as the kernel's cma_alloc_any_port.
        let mut seed = [0u8; 4];
        // SAFETY: getrandom writes at most 4 bytes into seed.
        unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 4, 0) };
        let start = u32::from_ne_bytes(seed) % span;
        for k in 0..span {
            let port = lo + ((start + k) % span) as u16;
            let candidate = Binding { port, ..b };
            // Ports the space uses at all are skipped (cma_alloc_any_port
            // takes a port no id of the space holds).
            if all.iter().all(|c| c.ps != b.ps || c.port != port)
                && check(&all, &candidate, false).is_ok()
            {
                b.port = port;
                all.push(b);
                return Ok(port);
            }
        }
        return Err(libc::EADDRNOTAVAIL);
    }
    // SAFETY: geteuid has no preconditions.
    if b.port < 1024 && unsafe { libc::geteuid() } != 0 {
        return Err(libc::EACCES);
    }
    check(&all, &b, b.reuseaddr)?;
    all.push(b);
    Ok(b.port)
}

/// Changes the address of `owner`'s binding (an id bound to the
/// unspecified address that resolved a source address).
pub fn rebind(owner: usize, ip: IpAddr) {
    if let Some(b) = table().iter_mut().find(|b| b.owner == owner) {
        b.ip = ip;
    }
}

/// Marks `owner` listening (or not). `rdma_listen` checks the port again,
/// allowing no reuse (`cma_check_port(..., 0)`) when the id set REUSEADDR.
pub fn listen(owner: usize, on: bool) -> Result<(), c_int> {
    let mut all = table();
    let Some(i) = all.iter().position(|b| b.owner == owner) else {
        return Err(libc::EINVAL);
    };
    if on && all[i].reuseaddr {
        check(&all, &all[i], false)?;
    }
    all[i].listening = on;
    Ok(())
}

/// Sets `owner`'s reuse and AF-only options (while bound).
pub fn options(owner: usize, reuseaddr: bool, afonly: bool) {
    if let Some(b) = table().iter_mut().find(|b| b.owner == owner) {
        b.reuseaddr = reuseaddr;
        b.afonly = afonly;
    }
}

/// Frees `owner`'s port.
pub fn release(owner: usize) {
    table().retain(|b| b.owner != owner);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(owner: usize, ip: &str, port: u16) -> Binding {
        Binding {
            owner,
            ps: crate::abi::RDMA_PS_TCP,
            ip: ip.parse().unwrap(),
            port,
            reuseaddr: false,
            afonly: false,
            listening: false,
        }
    }

    #[test]
    fn a_used_port_is_refused_as_the_kernel_does() {
        let port = bind(b(1001, "10.9.8.7", 0)).unwrap();
        assert!(port >= 1024);
        assert_eq!(bind(b(1002, "10.9.8.7", port)), Err(libc::EADDRINUSE));
        assert_eq!(bind(b(1003, "0.0.0.0", port)), Err(libc::EADDRNOTAVAIL));
        // Another address, or another port space, is free.
        assert_eq!(bind(b(1004, "10.9.8.6", port)), Ok(port));
        let udp = Binding { ps: crate::abi::RDMA_PS_UDP, ..b(1005, "10.9.8.7", port) };
        assert_eq!(bind(udp), Ok(port));
        // Both with REUSEADDR share it; listening takes it back.
        release(1004);
        release(1005);
        release(1001);
        let r1 = Binding { reuseaddr: true, ..b(1006, "10.9.8.7", port) };
        let r2 = Binding { reuseaddr: true, ..b(1007, "10.9.8.7", port) };
        assert_eq!(bind(r1), Ok(port));
        assert_eq!(bind(r2), Ok(port));
        assert_eq!(listen(1006, true), Err(libc::EADDRINUSE));
        release(1007);
        assert_eq!(listen(1006, true), Ok(()));
        release(1006);
        assert_eq!(bind(b(1008, "10.9.8.7", port)), Ok(port));
        release(1008);
    }
}
