//! Fuzz bodies for the HCA: hostile packets ([`hca_packets`]) and a hostile
//! application ([`hca_wqes`]), both over host memory that fails the run on
//! the first access outside what the device may touch ([`GuardedMemory`]).
//!
//! Like [`crate::fuzz`], both functions take arbitrary bytes and must never
//! panic: every `assert!` here states something the HCA promises whatever
//! the input (no panic, no access outside registered memory and rings,
//! well-formed packets and completions, sane counters, a device that still
//! works), so a panic is a bug in the emulator — or in this harness —, never
//! in the input. The cargo-fuzz targets `hca_packets` and `hca_wqes` and
//! the proptest suite (`tests/tests/hca_fuzz.rs`) run them.
//!
//! The input is read as a small program: a few bytes of setup (PSNs, MTUs,
//! retry counts), then a sequence of actions, each an action byte and its
//! operands. Running out of bytes reads zeros, so every input is a valid
//! program and libFuzzer's mutations stay meaningful.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard};
use uroce::world::{node_gids, Host, World, WorldBuilder};
use uroce_device::command::{AhAttr, CmdError, Command, Gid, QpAttr, QpCap, Reply};
use uroce_device::cqe::Cqe;
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, MemFault, SimMemory};
use uroce_device::ring::{cq_ring_shape, recv_ring_shape};
use uroce_device::ring::{RingDesc, CONSUMER_OFFSET, PRODUCER_OFFSET};
use uroce_device::types::{
    make_key, Access, AttrMask, EventType, Lkey, Mtu, QpState, QpType, Qpn, SendFlags, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};
use uroce_device::wqe::{RecvWqe, Sge, RECV_HEADER_LEN};
use uroce_device::{Doorbell, Event};
use uroce_hca::config::HcaConfig;
use uroce_hca::endpoint::MAX_PACKET_LEN;
use uroce_hca::{Endpoint, Instant, SharedHca, Transmit};
use uroce_sim::{Fabric, FabricConfig, Probability};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{Context, Cq, Mw, Pd, Qp, QpInitAttr, RecvWr, RemoteTarget, SendWr, Srq};
use uroce_wire::frame::{classify, Classified, FrameRepr, Link};
use uroce_wire::opcode::{Mask, Opcode, Transport};
use uroce_wire::roce::{ExtHeaders, Repr};
use uroce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, icrc, ieth, immdt, rdeth, reth, roce, Psn,
    Qkey, Rkey,
};

mod attacker;
mod forger;
mod frames;
mod guard;
mod input;
mod node;
mod packets;
mod wqes;
mod wrs;

pub use guard::{AllocKind, GuardedMemory};
pub use input::Input;
pub use packets::{hca_packets, hca_packets_report, RunReport};
pub use wqes::{hca_wqes, hca_wqes_report};

use frames::*;
use node::*;
use packets::*;
use wqes::*;
use wrs::*;
