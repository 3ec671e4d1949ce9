//! QP1, the GSI QP, and the Communication Manager behind it.
//!
//! Every port has QP1. On a Linux host it belongs to the kernel's MAD
//! layer, and `ib_cm` (the CM) sends and receives its MADs there; in uroce
//! the device plays that part: the HCA owns a CM engine (`uroce-cm`, a
//! sans-IO state machine) and carries its MADs on QP1 itself. Drivers
//! reach the CM only through commands and CM events (`hca/cm_command.rs`,
//! the device interface's section 9).
//!
//! ```text
//!  receive(): UD SEND_ONLY to QP1, Q_Key 0x80010000, 256-byte payload
//!             ──▶ Cm::receive(peer GID from the IP source, P_Key index 0)
//!             anything else to QP1: dropped (`rcvd_gsi_drop`)
//!  poll_transmit(): Cm::poll_transmit ──▶ UD SEND_ONLY, QP1 → QP1, AckReq,
//!             P_Key 0xffff, QP1's own PSN, DETH (GSI Q_Key, source QP1),
//!             from rxe's UDP source port for QP1 (0xd872)
//!  poll_timeout() / handle_timeout(): the CM's retransmissions and time-wait
//! ```
//!
//! QP1 has no rings, no QP context and no PSN checks: MADs are datagrams
//! and the CM does its own retries. Nothing here runs unless a CM MAD is
//! sent or received: a device that never uses the CM sends, schedules and
//! times exactly what it did before.

use crate::config::{HcaConfig, SourcePortPolicy};
use crate::endpoint::{PacketKind, Transmit};
use crate::hca::Hca;
use crate::qp::Path;
use crate::time::Instant;
use crate::trace::{DropReason, Step};
use core::net::IpAddr;
use std::collections::BTreeMap;
use uroce_cm::{Cm, CmConfig, Peer};
use uroce_device::command::Gid;
use uroce_wire::mad::{self, MAD_LEN};
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{bth, deth, udp_port, Opcode, Psn, Qpn};

/// QP1's state: the CM engine and the PSNs of the MADs it sends.
#[derive(Debug)]
pub(crate) struct Gsi {
    /// The Communication Manager.
    pub(crate) cm: Cm,
    /// The PSN of the next MAD sent (rxe's QP1 starts at 0, as
    /// tests/golden/rping.pcap shows: REQ PSN 0, RTU PSN 1).
    psn: Psn,
    /// Whether QP1's source port was announced to the runtime
    /// ([`crate::Hca::poll_new_source_port`]), at the first MAD sent.
    port_taken: bool,
    /// The local address MADs to a peer GID leave from: the one its last
    /// MAD came to, or the connect's source GID. At most
    /// [`MAX_ROUTES`] (the oldest peer in GID order goes first).
    routes: BTreeMap<[u8; 16], IpAddr>,
    /// Whether the runtime was told that CM events wait (once until the
    /// driver has taken them all).
    pub(crate) events_notified: bool,
}

/// Peers whose local address QP1 remembers.
const MAX_ROUTES: usize = 4096;

impl Gsi {
    /// QP1 of a device with `config` and GID table `gids`.
    pub(crate) fn new(config: &HcaConfig, gids: &[Gid], node_guid: u64) -> Gsi {
        let seed = cm_seed(config.cm_seed, gids);
        let cm = Cm::new(CmConfig::new(mad::Guid(node_guid), seed));
        Gsi {
            cm,
            psn: Psn::new(0),
            port_taken: false,
            routes: BTreeMap::new(),
            events_notified: false,
        }
    }

    /// MADs to `peer` leave from `local` from now on.
    pub(crate) fn set_route(&mut self, peer: Gid, local: IpAddr) {
        if self.routes.len() >= MAX_ROUTES && !self.routes.contains_key(&peer.0) {
            self.routes.pop_first();
        }
        self.routes.insert(peer.0, local);
    }
}

/// The CM's seed: the configured one mixed with the device's GIDs, so that
/// devices with one configuration still draw different comm IDs (Linux
/// draws a random operand at boot). SplitMix64 over FNV-1a; no OS
/// randomness.
fn cm_seed(configured: u64, gids: &[Gid]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in gids.iter().flat_map(|g| g.0) {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = configured ^ h;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The attribute ID of a MAD (bytes 16..18), for the trace.
fn attribute_of(mad_bytes: &[u8]) -> u16 {
    match mad_bytes.get(16..18) {
        Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]),
        _ => 0,
    }
}

impl Hca {
    /// A packet to QP1 (after the checks every packet passes: RoCEv2, ICRC,
    /// our address, P_Key). Only a UD SEND_ONLY carrying one 256-byte MAD
    /// with the GSI Q_Key reaches the CM.
    pub(crate) fn receive_gsi(
        &mut self,
        now: Instant,
        (source, destination): (IpAddr, IpAddr),
        packet: &uroce_wire::roce::Packet<&[u8]>,
    ) {
        let is_mad = packet.bth().opcode() == Opcode::UD_SEND_ONLY
            && packet.deth().is_some_and(|d| d.qkey() == deth::GSI_QKEY)
            && packet.payload().len() == MAD_LEN;
        if !is_mad {
            return self.drop_packet(now, Some(Qpn::GSI), DropReason::NotAMad);
        }
        self.dev.counters.rcvd_pkts += 1;
        self.dev.counters.rcvd_mads += 1;
        let mad_bytes = packet.payload();
        self.gsi.set_route(Gid::from_ip(source), destination);
        let peer = Peer { gid: mad::Gid(Gid::from_ip(source).0), pkey_index: 0 };
        let attribute = attribute_of(mad_bytes);
        self.dev.steps.record(now, Step::Mad { sent: false, attribute, peer: source });
        self.gsi.cm.receive(now.as_nanos(), peer, mad_bytes);
    }

    /// The next MAD the CM wants sent, as an IP packet in `buf`. A MAD to
    /// a GID of an IP version the device has no address of is dropped
    /// (`mad_send_err`).
    pub(crate) fn gsi_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(t) = self.gsi.cm.poll_transmit() {
            let remote = Gid(t.peer.gid.0).to_ip();
            let same_version = || self.addresses.iter().find(|a| a.is_ipv4() == remote.is_ipv4());
            let route =
                self.gsi.routes.get(&t.peer.gid.0).filter(|a| a.is_ipv4() == remote.is_ipv4());
            let Some(&local) = route.or_else(same_version) else {
                self.dev.counters.mad_send_err += 1;
                continue;
            };
            let sport = match self.dev.config.source_ports {
                SourcePortPolicy::PerQp => udp_port::datagram_sport(Qpn::GSI),
                SourcePortPolicy::Shared => udp_port::SPORT_BASE,
            };
            if !self.gsi.port_taken {
                self.gsi.port_taken = true;
                self.dev.source_ports.take(sport);
            }
            let sport = self.dev.source_ports.settle(sport);
            let mut bth = bth::Repr::new(Opcode::UD_SEND_ONLY, t.dest_qpn, self.gsi.psn, MAD_LEN);
            bth.ack_req = true;
            let ext = ExtHeaders {
                deth: Some(deth::Repr { qkey: deth::GSI_QKEY, resv8: 0, src_qpn: Qpn::GSI }),
                ..ExtHeaders::default()
            };
            let roce = Repr { bth, ext, payload: &t.mad[..] };
            let ip_id = self.dev.ip_ids.next();
            let path = Path { local, remote };
            let Some(transmit) =
                crate::req::emit_frame(path, ip_id, (PacketKind::Request, sport), roce, buf)
            else {
                self.dev.counters.mad_send_err += 1;
                continue;
            };
            self.gsi.psn = self.gsi.psn + 1;
            self.dev.counters.sent_pkts += 1;
            self.dev.counters.sent_mads += 1;
            let attribute = attribute_of(&t.mad[..]);
            self.dev.steps.record(now, Step::Mad { sent: true, attribute, peer: remote });
            return Some(transmit);
        }
        None
    }

    /// Whether the CM has a MAD to send.
    pub(crate) fn gsi_has_transmit(&self) -> bool {
        self.gsi.cm.has_transmit()
    }

    /// Whether CM events wait that the runtime has not yet been told of:
    /// `true` once when the first arrives, then not until the driver has
    /// taken them all with `CmPollEvent` (and another arrives). A
    /// runtime calls its event notifiers when it is.
    pub fn take_cm_notification(&mut self) -> bool {
        let waiting = self.gsi.cm.has_event();
        let new = waiting && !self.gsi.events_notified;
        self.gsi.events_notified = waiting;
        new
    }

    /// Whether [`Hca::take_cm_notification`] would return `true`: CM
    /// events wait that nobody was told of. A runtime that calls its event
    /// notifiers only when something waits must ask this besides
    /// [`Hca::has_events`] (which is about completion and async events):
    /// else a MAD's event waits until some completion comes, and
    /// librdmacm's thread sleeps on its fallback timer meanwhile.
    pub fn cm_notification_pending(&self) -> bool {
        self.gsi.cm.has_event() && !self.gsi.events_notified
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_by_device_and_configuration() {
        let a = [Gid::from_ip(IpAddr::from([10, 0, 0, 1]))];
        let b = [Gid::from_ip(IpAddr::from([10, 0, 0, 2]))];
        assert_eq!(cm_seed(0, &a), cm_seed(0, &a));
        assert_ne!(cm_seed(0, &a), cm_seed(0, &b));
        assert_ne!(cm_seed(0, &a), cm_seed(1, &a));
    }
}
