//! The UDP source ports a device's packets leave from.
//!
//! Each QP's packets carry the source port rxe computes for it
//! (`uroce_wire::udp_port`), and the ICRC covers that port. A runtime that
//! sends through kernel UDP sockets must send each packet from a socket
//! bound to its port; when it cannot bind one (another program holds it,
//! or descriptors ran out), it tells the HCA, which from then on settles
//! that port's packets on 4791 (a port the runtime always has) before
//! computing their ICRC, and makes again the one packet already built for
//! the refused port. The runtime never reads or rewrites a packet.

use crate::hca::Hca;
use std::collections::{BTreeSet, VecDeque};
use uroce_wire::frame::{classify, Classified, Link};
use uroce_wire::ROCEV2_UDP_PORT;

/// The source ports QPs took, and those the runtime cannot send from.
#[derive(Debug, Default)]
pub(crate) struct SourcePorts {
    /// Ports the runtime cannot send from (at most 65,536: one entry per
    /// port).
    refused: BTreeSet<u16>,
    /// Every port a QP ever took, one bit per port (1,024 words once the
    /// first is taken).
    taken: Vec<u64>,
    /// Ports taken for the first time that the runtime has not been told
    /// of ([`Hca::poll_new_source_port`]).
    new: VecDeque<u16>,
}

impl SourcePorts {
    /// The source port a QP whose own port is `port` sends from now.
    pub(crate) fn settle(&self, port: u16) -> u16 {
        if self.refused.is_empty() || !self.refused.contains(&port) {
            port
        } else {
            ROCEV2_UDP_PORT
        }
    }

    /// A QP took `port`: the first time, it is queued for the runtime.
    pub(crate) fn take(&mut self, port: u16) {
        if self.taken.is_empty() {
            self.taken = vec![0; (usize::from(u16::MAX) + 1) / 64];
        }
        let (word, bit) = (usize::from(port / 64), 1u64 << (port % 64));
        if self.taken[word] & bit == 0 {
            self.taken[word] |= bit;
            self.new.push_back(port);
        }
    }
}

impl Hca {
    /// The runtime cannot send from `port`: packets settled on it leave
    /// from 4791 from now on, and `packet` (an IP packet this HCA just
    /// handed out on `port`, whose [`crate::Transmit::source_port`] said
    /// so) is made again from 4791, its ICRC covering the new port.
    /// Returns `false`, leaving `packet` as it was, if it is not a RoCEv2
    /// packet from `port`.
    pub fn refuse_source_port(&mut self, port: u16, packet: &mut [u8]) -> bool {
        if port != ROCEV2_UDP_PORT {
            self.dev.source_ports.refused.insert(port);
        }
        let original = packet.to_vec();
        let Classified::Roce(frame) = classify(&original, Link::RawIp) else { return false };
        if frame.udp.source_port != port {
            return false;
        }
        let Ok(mut repr) = frame.repr() else { return false };
        repr.udp.source_port = ROCEV2_UDP_PORT;
        repr.emit(packet).is_ok_and(|len| len == original.len())
    }

    /// The runtime can send from `port` again: its QPs' packets leave from
    /// it.
    pub fn allow_source_port(&mut self, port: u16) {
        self.dev.source_ports.refused.remove(&port);
    }

    /// A source port a QP took for the first time since the last call
    /// (each port once). A runtime that sends each port's packets from a
    /// socket of its own binds it now, when the QP is connected, rather
    /// than on the first packet, where it would cost a few system calls on
    /// the data path.
    pub fn poll_new_source_port(&mut self) -> Option<u16> {
        self.dev.source_ports.new.pop_front()
    }

    /// The ports the runtime refused, in order.
    pub fn refused_source_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.dev.source_ports.refused.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use uroce_device::command::Gid;
    use uroce_device::mem::SimMemory;
    use uroce_wire::frame::FrameRepr;
    use uroce_wire::{bth, roce, Opcode, Psn, Qpn};

    #[test]
    fn a_refused_port_settles_on_4791_and_its_packet_is_made_again() {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let memory = Arc::new(SimMemory::new(1 << 20));
        let mut hca = Hca::new(Default::default(), vec![Gid::from_ip(ip)], memory).unwrap();
        assert_eq!(hca.dev.source_ports.settle(0xc123), 0xc123);

        let bth = bth::Repr::new(Opcode::RC_SEND_ONLY, Qpn::new(17), Psn::new(5), 3);
        let roce = roce::Repr { bth, ext: roce::ExtHeaders::default(), payload: b"abc" };
        let addrs = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let frame = FrameRepr::ipv4(addrs, 7, 0xc123, roce).unwrap();
        let mut packet = vec![0u8; frame.buffer_len()];
        frame.emit(&mut packet).unwrap();
        let before = packet.clone();
        assert!(!hca.refuse_source_port(0xc124, &mut packet), "not this packet's port");
        assert_eq!(packet, before);
        assert!(hca.refuse_source_port(0xc123, &mut packet));
        let expected = FrameRepr::ipv4(addrs, 7, ROCEV2_UDP_PORT, roce).unwrap();
        let mut bytes = vec![0u8; expected.buffer_len()];
        expected.emit(&mut bytes).unwrap();
        assert_eq!(packet, bytes, "the same packet from 4791, ICRC and all");
        assert_eq!(hca.dev.source_ports.settle(0xc123), ROCEV2_UDP_PORT);
        assert_eq!(hca.refused_source_ports().collect::<Vec<_>>(), [0xc123, 0xc124]);
        hca.allow_source_port(0xc123);
        assert_eq!(hca.dev.source_ports.settle(0xc123), 0xc123);
        assert!(!hca.refuse_source_port(0xc123, &mut [0x45; 10]), "not a RoCEv2 packet");
    }
}
