//! Multicast groups on kernel UDP: one socket per group the device belongs
//! to, and the descriptor the progress thread waits on for all sockets.
//!
//! The HCA says when the device joins a group (its first QP attached) and
//! leaves it (its last QP detached): [`uroce_hca::Hca::poll_mcast_change`].
//! Joining opens a socket bound to `group:4791` with `SO_REUSEADDR` and
//! `SO_REUSEPORT` (every device on the host that belongs to the group has
//! one, and the kernel hands each a copy of every datagram) and joins the
//! group on the interface of the device's address (`IP_ADD_MEMBERSHIP`
//! with the address as `imr_interface`; `IPV6_JOIN_GROUP` with that
//! interface's index). Leaving closes it. Its datagrams go to the HCA with
//! the group as their destination, the address the ICRC covers.
//!
//! Multicast sends need no socket of their own: they leave from the QP's
//! source port socket like any packet, each set up with
//! [`set_multicast_sending`].

use core::net::{IpAddr, Ipv6Addr, SocketAddr};
use rustix::event::epoll;
use rustix::net::{sockopt, AddressFamily, SocketType};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use uroce_wire::ROCEV2_UDP_PORT;

/// The hop limit of multicast packets (the kernel's default is 1: one
/// link; rxe's packets carry the address vector's, 64 from rdma_cm).
const MULTICAST_HOPS: u32 = 64;

/// One group the device belongs to.
struct Joined {
    group: IpAddr,
    socket: UdpSocket,
}

/// The device's group sockets.
#[derive(Default)]
pub(super) struct GroupSockets {
    joined: Vec<Joined>,
}

impl GroupSockets {
    /// Opens `group:4791` and joins `group` on the interface of `addr`;
    /// the socket is added to `ready` (the descriptor the progress thread
    /// waits on). Joining a group already joined does nothing.
    pub(super) fn join(&mut self, group: IpAddr, addr: IpAddr, ready: &OwnedFd) -> io::Result<()> {
        if self.joined.iter().any(|j| j.group == group) {
            return Ok(());
        }
        if group.is_ipv4() != addr.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("group {group} is not of the device address {addr}'s IP version"),
            ));
        }
        let socket = open_group_socket(group, addr)?;
        watch(ready, &socket, true)?;
        self.joined.push(Joined { group, socket });
        Ok(())
    }

    /// Closes the socket of `group` (the kernel drops its membership);
    /// whether there was one.
    pub(super) fn leave(&mut self, group: IpAddr, ready: &OwnedFd) -> bool {
        let Some(at) = self.joined.iter().position(|j| j.group == group) else { return false };
        let left = self.joined.remove(at);
        let _ = watch(ready, &left.socket, false);
        true
    }

    /// How many groups.
    pub(super) fn len(&self) -> usize {
        self.joined.len()
    }

    /// The `index`th group and its socket.
    pub(super) fn get(&self, index: usize) -> Option<(IpAddr, &UdpSocket)> {
        self.joined.get(index).map(|j| (j.group, &j.socket))
    }
}

/// A socket bound to `group:4791`, sharing the port with the other
/// devices of the host, member of `group` on `addr`'s interface.
fn open_group_socket(group: IpAddr, addr: IpAddr) -> io::Result<UdpSocket> {
    let family = if group.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    if group.is_ipv6() {
        sockopt::set_ipv6_v6only(&fd, true)?;
    }
    rustix::net::bind(&fd, &SocketAddr::new(group, ROCEV2_UDP_PORT))?;
    match (group, addr) {
        (IpAddr::V4(group), IpAddr::V4(addr)) => {
            sockopt::set_ip_add_membership(&fd, &group, &addr)?;
        }
        (IpAddr::V6(group), IpAddr::V6(addr)) => {
            sockopt::set_ipv6_add_membership(&fd, &group, interface_of(addr)?)?;
        }
        _ => unreachable!("checked by join"),
    }
    Ok(UdpSocket::from(fd))
}

/// Sets a sending socket of the device at `addr` up for multicast: out of
/// `addr`'s interface, with a hop limit of [`MULTICAST_HOPS`], looped back
/// to the host's own members (the kernel's default, set anyway: the
/// device's own attached QPs take its multicast sends, as rxe's do).
pub(super) fn set_multicast_sending(socket: &impl AsFd, addr: IpAddr) -> io::Result<()> {
    match addr {
        IpAddr::V4(v4) => {
            sockopt::set_ip_multicast_if(socket, &v4)?;
            sockopt::set_ip_multicast_ttl(socket, MULTICAST_HOPS)?;
            sockopt::set_ip_multicast_loop(socket, true)?;
        }
        IpAddr::V6(v6) => {
            // An address on no interface (a test's) still sends unicast.
            if let Ok(index) = interface_of(v6) {
                sockopt::set_ipv6_multicast_if(socket, index)?;
            }
            sockopt::set_ipv6_multicast_hops(socket, MULTICAST_HOPS)?;
            sockopt::set_ipv6_multicast_loop(socket, true)?;
        }
    }
    Ok(())
}

/// The index of the interface that holds IPv6 address `addr`, from
/// `/proc/net/if_inet6` (`address ifindex prefix scope flags name`, the
/// address in 32 hex digits).
fn interface_of(addr: Ipv6Addr) -> io::Result<u32> {
    let table = std::fs::read_to_string("/proc/net/if_inet6")?;
    let want = format!("{:032x}", u128::from(addr));
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.next()?;
            let index = u32::from_str_radix(fields.next()?, 16).ok()?;
            (address == want).then_some(index)
        })
        .next()
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no interface holds {addr}"))
        })
}

/// An epoll descriptor watching `main` for input: readable when any socket
/// added to it is (the progress thread polls it; group sockets join it).
/// `main` is watched through a duplicate, returned with it: the progress
/// thread takes it out of the set while the application drives the device
/// (`watch`), and puts it back before it sleeps on the set.
pub(super) fn ready_set(main: &impl AsFd) -> io::Result<(OwnedFd, OwnedFd)> {
    let ready = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let watched = main.as_fd().try_clone_to_owned()?;
    watch(&ready, &watched, true)?;
    Ok((ready, watched))
}

/// Puts `socket` in the epoll set `ready` (`on`) or takes it out. While a
/// socket is in a set, every datagram queued to it runs the set's
/// callback, on loopback inside the sender's system call.
pub(super) fn watch(ready: &impl AsFd, socket: &impl AsFd, on: bool) -> io::Result<()> {
    if on {
        epoll::add(ready, socket, epoll::EventData::new_u64(0), epoll::EventFlags::IN)?;
    } else {
        epoll::delete(ready, socket)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_on_an_interface() {
        // ::1 is on lo wherever IPv6 is enabled.
        if std::fs::read_to_string("/proc/net/if_inet6").is_ok_and(|t| t.contains(&"0".repeat(31)))
        {
            assert!(interface_of(Ipv6Addr::LOCALHOST).is_ok());
        }
        assert!(interface_of("2001:db8::77".parse().unwrap()).is_err());
    }
}
