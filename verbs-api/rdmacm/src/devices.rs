//! The RDMA devices as librdmacm keeps them: the verbs device list (taken
//! once, kept for the process's life so that its `ibv_device` pointers stay
//! valid), each device opened on first need and kept open, with one PD
//! shared by the ids bound to it (allocated by the first, freed with the
//! last, as `ucma_get_device`/`ucma_put_device`).
//!
//! Addresses: a device owns the IP addresses in its GID tables (RoCE: GID
//! index 0 the fe80 link-local address, 1 the IPv4-mapped address of
//! uroce's device, `UROCE_ADDR`).

use crate::abi::*;
use crate::verbs::*;
use libc::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};

/// One device.
pub struct Device {
    pub dev: *mut ibv_device,
    /// Open context (NULL until first needed).
    pub verbs: *mut ibv_context,
    /// The PD ids bound to this device share (NULL while none is).
    pub pd: *mut ibv_pd,
    /// Ids (and `rdma_get_devices` lists) holding the device.
    pub refcnt: u32,
    pub port_cnt: u8,
    pub max_qpsize: c_int,
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
    /// `active_mtu` of each port (index port - 1).
    pub active_mtu: Vec<c_int>,
}

pub struct Devices {
    pub list: Vec<Device>,
    /// The list `ibv_get_device_list` returned, kept (never freed) as
    /// librdmacm keeps it: the devices' pointers stay valid.
    _raw: *mut *mut ibv_device,
}

// SAFETY: the raw pointers are verbs objects, usable from any thread (the
// verbs are thread safe); the table is only reached through the mutex.
unsafe impl Send for Devices {}

static DEVICES: Mutex<Option<Devices>> = Mutex::new(None);

/// The table, initialised (`ucma_init`): ENODEV when there is no device.
pub fn lock() -> Result<MutexGuard<'static, Option<Devices>>, c_int> {
    let mut guard = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let mut n: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count; the list is kept
        // (never freed) so that its device pointers stay valid.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(libc::ENODEV);
        }
        if n <= 0 {
            // SAFETY: a list ibv_get_device_list returned.
            unsafe { ibv_free_device_list(list) };
            return Err(libc::ENODEV);
        }
        let raw = list;
        let list = (0..n as usize)
            // SAFETY: the list holds n device pointers.
            .map(|i| unsafe { *raw.add(i) })
            .map(|dev| Device {
                dev,
                verbs: std::ptr::null_mut(),
                pd: std::ptr::null_mut(),
                refcnt: 0,
                port_cnt: 0,
                max_qpsize: 0,
                max_initiator_depth: 0,
                max_responder_resources: 0,
                active_mtu: Vec::new(),
            })
            .collect();
        *guard = Some(Devices { list, _raw: raw });
    }
    Ok(guard)
}

/// `ucma_init`: the device list exists (ENODEV when empty).
pub fn init() -> Result<(), c_int> {
    lock().map(drop)
}

impl Devices {
    /// `ucma_init_device`: opens device `i` and reads its limits.
    pub fn open(&mut self, i: usize) -> Result<(), c_int> {
        let d = &mut self.list[i];
        if !d.verbs.is_null() {
            return Ok(());
        }
        // SAFETY: a device of the kept list.
        let verbs = unsafe { ibv_open_device(d.dev) };
        if verbs.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: ibv_device_attr is plain data; the context is open.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        let ret = unsafe { ibv_query_device(verbs, &mut attr) };
        if ret != 0 {
            // SAFETY: the context just opened.
            unsafe { ibv_close_device(verbs) };
            return Err(if ret > 0 { ret } else { libc::EIO });
        }
        d.active_mtu = (1..=attr.phys_port_cnt)
            .map(|port| {
                let mut p = ibv_port_attr::default();
                // SAFETY: the context is open; p is a full ibv_port_attr.
                match unsafe { ibv_query_port(verbs, port, &mut p) } {
                    0 => p.active_mtu,
                    _ => 0,
                }
            })
            .collect();
        d.verbs = verbs;
        d.port_cnt = attr.phys_port_cnt;
        d.max_qpsize = attr.max_qp_wr;
        d.max_initiator_depth = attr.max_qp_init_rd_atom.clamp(0, 255) as u8;
        d.max_responder_resources = attr.max_qp_rd_atom.clamp(0, 255) as u8;
        Ok(())
    }

    /// Opens every device (`ucma_init_all`); stops at the first failure.
    pub fn open_all(&mut self) -> Result<(), c_int> {
        (0..self.list.len()).try_for_each(|i| self.open(i))
    }

    /// `ucma_get_device`: device `i` open, its PD allocated, one more
    /// holder. Returns (context, PD).
    pub fn acquire(&mut self, i: usize) -> Result<(*mut ibv_context, *mut ibv_pd), c_int> {
        self.open(i)?;
        let d = &mut self.list[i];
        if d.pd.is_null() {
            // SAFETY: the context is open.
            d.pd = unsafe { ibv_alloc_pd(d.verbs) };
            if d.pd.is_null() {
                return Err(crate::ffi::last_errno());
            }
        }
        d.refcnt += 1;
        Ok((d.verbs, d.pd))
    }

    /// `ucma_put_device`: one holder fewer; the last frees the PD.
    pub fn release(&mut self, i: usize) {
        let d = &mut self.list[i];
        d.refcnt = d.refcnt.saturating_sub(1);
        if d.refcnt == 0 && !d.pd.is_null() {
            // SAFETY: the PD this table allocated; no id holds it any more.
            unsafe { ibv_dealloc_pd(d.pd) };
            d.pd = std::ptr::null_mut();
        }
    }

    /// The index of the device whose context is `verbs`.
    pub fn index_of(&self, verbs: *mut ibv_context) -> Option<usize> {
        self.list.iter().position(|d| d.verbs == verbs && !verbs.is_null())
    }

    /// Every address the opened devices own: (device, port, GID index, IP).
    pub fn addresses(&mut self) -> Vec<(usize, u8, IpAddr)> {
        let mut out = Vec::new();
        for i in 0..self.list.len() {
            if self.open(i).is_err() {
                continue;
            }
            let d = &self.list[i];
            for port in 1..=d.port_cnt {
                let mut p = ibv_port_attr::default();
                // SAFETY: the context is open.
                if unsafe { ibv_query_port(d.verbs, port, &mut p) } != 0 {
                    continue;
                }
                for index in 0..p.gid_tbl_len.max(0) {
                    let mut gid = ibv_gid::default();
                    // SAFETY: the context is open; gid is 16 bytes.
                    if unsafe { ibv_query_gid(d.verbs, port, index, &mut gid) } != 0 {
                        continue;
                    }
                    if gid.raw != [0; 16] {
                        out.push((i, port, gid_ip(&gid)));
                    }
                }
            }
        }
        out
    }

    /// The device and port owning `ip` (an address of one of their GIDs).
    pub fn owner(&mut self, ip: IpAddr) -> Option<(usize, u8)> {
        let want = canonical(ip);
        self.addresses().into_iter().find(|(_, _, a)| *a == want).map(|(i, port, _)| (i, port))
    }

    /// Where a packet to `dst` leaves from: (device, port, source address),
    /// restricted to device `only` when the id is bound to one. An IPv4
    /// destination goes out of a device with an IPv4 address (a uroce
    /// device reaches every IPv4 address from its own); an IPv6 one from
    /// the device owning it, or, link-local, from a device's fe80 address,
    /// or else from a device's own global IPv6 address.
    pub fn route(&mut self, dst: IpAddr, only: Option<usize>) -> Option<(usize, u8, IpAddr)> {
        let dst = canonical(dst);
        let candidates: Vec<_> =
            self.addresses().into_iter().filter(|(i, _, _)| only.is_none_or(|o| o == *i)).collect();
        if let Some(own) = candidates.iter().find(|(_, _, a)| *a == dst) {
            return Some(*own);
        }
        let fits = |a: &IpAddr| match (dst, a) {
            (IpAddr::V4(_), IpAddr::V4(_)) => true,
            (IpAddr::V6(d), IpAddr::V6(s)) => link_local(&d) == link_local(s),
            _ => false,
        };
        candidates.into_iter().find(|(_, _, a)| fits(a))
    }
}

fn link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// An address as a GID holds it: an IPv4-mapped IPv6 address is the IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The address a RoCE GID stands for.
pub fn gid_ip(gid: &ibv_gid) -> IpAddr {
    canonical(IpAddr::V6(Ipv6Addr::from(gid.raw)))
}

/// `rdma_ip2gid`: the GID of an address (IPv4-mapped for IPv4).
pub fn ip_gid(ip: IpAddr) -> ibv_gid {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    ibv_gid { raw: v6.octets() }
}

/// Whether `ip` is an address of this host (a socket binds to it): for an
/// address no RDMA device owns, the kernel answers ENODEV when it is the
/// host's and EADDRNOTAVAIL when it is not.
pub fn host_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The unspecified address of a family.
pub fn any(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_and_addresses_convert_both_ways() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let gid = ip_gid(v4);
        assert_eq!(gid.raw[10..12], [0xff, 0xff]);
        assert_eq!(gid_ip(&gid), v4);
        let ll: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(gid_ip(&ip_gid(ll)), ll);
        assert_eq!(
            canonical("::ffff:10.0.0.1".parse().unwrap()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
