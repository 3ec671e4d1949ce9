//! RoCEv2 packet formats, bit-exact with Linux rxe.
//!
//! This crate only describes bytes: it never does I/O, never allocates on the
//! parse path and never panics on received input. It follows smoltcp's style:
//!
//! * every header has a zero-copy view `Packet<T: AsRef<[u8]>>` whose byte
//!   ranges live in a private `field` module, built with `new_checked` for
//!   bytes that came from outside (`new_unchecked` accessors may panic on a
//!   buffer that was never checked);
//! * every header has a `Repr` — a plain struct of its fields — with
//!   `parse` (from a checked view) and `emit` (into a view of
//!   `buffer_len()` bytes);
//! * one const opcode table ([`opcode::OPCODE_TABLE`]) states, for every
//!   opcode, which headers follow the BTH, where, and what the packet means;
//!   engines test its mask bits instead of listing opcodes.
//!
//! Layers, innermost first:
//!
//! | module | what |
//! | --- | --- |
//! | [`bth`], [`reth`], [`aeth`], [`atomic_eth`], [`atomic_ack_eth`], [`deth`], [`rdeth`], [`immdt`], [`ieth`], [`feth`] | the InfiniBand transport headers |
//! | [`opcode`] | the opcode table and its mask bits |
//! | [`roce`] | a whole transport packet: BTH, extension headers, payload, pad, ICRC |
//! | [`icrc`] | the invariant CRC as rxe computes it |
//! | [`ethernet`], [`ipv4`], [`ipv6`], [`udp`] | the outer headers: Ethernet II, IPv4, IPv6, UDP |
//! | [`arp`], [`ndp`] | neighbour resolution: ARP, IPv6 neighbour solicitation and advertisement |
//! | [`checksum`] | the internet checksum (IPv4 header, UDP, ICMPv6) |
//! | [`copy`] | copying and zeroing short byte runs without a `memcpy` call |
//! | [`ip`] | IP packets of either version: headers, a datagram's headers as rxe writes them |
//! | [`frame`] | RoCEv2 framing: Ethernet (optional), IPv4/IPv6, UDP 4791 |
//! | [`udp_port`] | the UDP source port rule rxe uses |
//! | [`pcap`] | reading and writing capture files, and the capture writer the simulator and the runtime share |
//! | [`psn`] | 24-bit packet sequence numbers with serial arithmetic |
//! | [`mad`] | CM MADs on QP1: the common MAD header, REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REQ/REP, and rdma_cm's IP header and service IDs |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;
mod bytes;

pub mod aeth;
pub mod arp;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod checksum;
pub mod copy;
pub mod deth;
pub mod ethernet;
pub mod feth;
pub mod frame;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod ndp;
pub mod opcode;
pub mod pcap;
pub mod psn;
pub mod rdeth;
pub mod reth;
pub mod roce;
pub mod udp;
pub mod udp_port;

mod ids;

pub use ids::{Qkey, Qpn, Rkey};
pub use opcode::{HeaderKind, Mask, Opcode, OpcodeInfo, Transport};
pub use psn::Psn;

/// The UDP destination port of RoCEv2 (IANA assigned): the one constant
/// for 4791 in uroce.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Why bytes could not be read as the format they claim to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field says.
    Truncated,
    /// The opcode is not in the opcode table.
    UnknownOpcode(u8),
    /// A field holds a value the format does not allow; the text says which.
    Malformed(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => write!(f, "truncated"),
            Error::UnknownOpcode(op) => write!(f, "unknown opcode 0x{op:02x}"),
            Error::Malformed(what) => write!(f, "malformed: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// The result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;
