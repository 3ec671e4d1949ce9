//! The UDP runtime: a uroce device embedded in the application's process,
//! driving the sans-IO [`Hca`] with real time and kernel UDP sockets.
//!
//! - **Addresses.** The device owns one IP address (config or
//!   `UROCE_ADDR`), receives on `addr:4791`, and sends each QP's packets
//!   from the UDP source port rxe computes for it (one socket per source
//!   port in use, bound to `addr:port`), to destination port 4791. Its GID
//!   table holds a link-local GID at index 0 and the address at index 1,
//!   as rxe's does.
//! - **The exact wire.** The ICRC covers the IP header (IPv4 ID, flags,
//!   length, addresses) and the UDP header, which the kernel writes. Facts
//!   the design rests on (checked by `tests/tests/udp_wire.rs` with a packet
//!   capture): a DF datagram from an unconnected socket leaves with IPv4
//!   ID 0, flags DF, and with `SO_NO_CHECK` UDP checksum 0 on IPv4. So the HCA runs with
//!   [`Ipv4IdPolicy::Zero`] and every transmitted ICRC covers exactly what
//!   the kernel sends. A UDP socket does not show the received IP header;
//!   the runtime rebuilds it as a uroce (or any DF, unconnected) sender
//!   sends it — ID 0, DF, UDP checksum 0 — and the HCA checks the ICRC
//!   over that. Packets with a bad ICRC, bad headers or an unknown QP are
//!   dropped and counted by the HCA.
//! - **Progress.** The application's own verbs calls drive the device in
//!   the application's thread ([`Driver::progress`]): no hand-off to
//!   another thread. A background thread keeps a passive target going: it
//!   stays out of the way while the application is calling verbs and takes
//!   over when the application goes quiet (or arms a CQ to sleep on a
//!   completion channel), waiting per [`ProgressMode`].
//! - **Observability and faults.** `capture` writes every packet sent and
//!   received as a full Ethernet frame to a pcap file; `faults` applies
//!   seeded loss, duplication, delay, reordering and corruption to
//!   outgoing packets.

mod faults;
mod link_tcp;
mod sys;
mod tap;

pub use faults::{FaultSpec, FaultSpecError};
pub use link_tcp::{LinkTcpListener, LinkTcpStream};

use crate::link::{
    path_mtu_for_link, Egress, Ingress, LinkAttach, LinkConfig, LinkHost, LinkStats,
    ETHERNET_HEADER_LEN,
};
use crate::process_mem::ProcessMemory;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use faults::Faults;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use uroce_device::command::Gid;
use uroce_hca::config::{HcaConfig, Ipv4IdPolicy};
use uroce_hca::endpoint::{Endpoint, Transmit, MAX_PACKET_LEN};
use uroce_hca::hca::{Driver, Hca, SharedHca};
use uroce_hca::time::Instant;
use uroce_wire::pcap::PcapSink;

/// The RoCEv2 UDP destination port.
pub const ROCE_PORT: u16 = 4791;

/// How long after the application's last verbs call the background thread
/// leaves the device to it.
const APP_ACTIVE_NS: u64 = 1_000_000;
/// The longest that packets produced by an application-driven receive
/// (ACKs, READ responses) wait for the application's next verbs call before
/// the background thread sends them.
const DEFERRED_ACK_NS: u64 = 50_000;
/// Datagrams received per `recvmmsg` call.
const RECEIVE_BATCH: usize = 32;
/// Room before each received datagram for the IP and UDP headers the
/// runtime rebuilds (IPv6 40 + UDP 8).
const HEADROOM: usize = 48;
/// A receive buffer: one datagram, or one GRO run of datagrams.
const RECEIVE_BUFFER: usize = 65_536;
/// Packets handed out per progress round before receiving again.
const TRANSMIT_BURST: usize = 256;
/// Socket buffer sizes asked for (the kernel caps them at rmem_max/wmem_max).
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// GSO: at most this many segments per send (the kernel's limit is 64).
const GSO_MAX_SEGMENTS: usize = 64;
/// GSO: at most this many bytes per send (a UDP datagram's limit).
const GSO_MAX_BYTES: usize = 65_000;
/// How long a source port that could not be bound is left alone.
const PORT_RETRY_NS: u64 = 1_000_000_000;
/// Packets per `sendmmsg` batch.
const TX_BATCH: usize = 64;

/// How the background thread waits when it is in charge of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Spin on the socket: lowest latency, one core kept busy.
    Busy,
    /// Sleep in `poll(2)` on the socket until a packet or a timer: no CPU
    /// while idle, a thread wake-up per burst.
    Event,
    /// Spin for `spin_us` after the last packet, then sleep as `Event`.
    Hybrid {
        /// Microseconds to keep spinning after the last activity.
        spin_us: u32,
    },
}

impl ProgressMode {
    /// The default hybrid mode (spin 50 µs).
    pub const HYBRID: ProgressMode = ProgressMode::Hybrid { spin_us: 50 };

    /// Parses `busy`, `event`, `hybrid` or `hybrid:<spin_us>`.
    pub fn parse(text: &str) -> Option<ProgressMode> {
        match text.trim() {
            "busy" => Some(ProgressMode::Busy),
            "event" => Some(ProgressMode::Event),
            "hybrid" => Some(ProgressMode::HYBRID),
            other => {
                let spin = other.strip_prefix("hybrid:")?.parse().ok()?;
                Some(ProgressMode::Hybrid { spin_us: spin })
            }
        }
    }
}

impl core::fmt::Display for ProgressMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProgressMode::Busy => f.write_str("busy"),
            ProgressMode::Event => f.write_str("event"),
            ProgressMode::Hybrid { spin_us } => write!(f, "hybrid:{spin_us}"),
        }
    }
}

/// A device's configuration.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// The device's IP address (loopback addresses work without any set-up:
    /// all of 127.0.0.0/8 is local on Linux).
    pub addr: IpAddr,
    /// How the background thread waits.
    pub progress: ProgressMode,
    /// Run the background thread at all (a process that drives the device
    /// itself, e.g. a benchmark loop, may turn it off).
    pub background: bool,
    /// Faults applied to outgoing packets.
    pub faults: Option<FaultSpec>,
    /// Write every packet sent and received to this pcap file.
    pub capture: Option<PathBuf>,
    /// Segmentation offload: UDP GSO on send (equal-sized packets to one
    /// destination leave in one call). Receivers always accept GRO. The
    /// kernel refuses GSO without UDP checksums, so datagrams then carry
    /// one (the ICRC masks it). Only for uroce peers: see `docs/runtime.md`.
    pub offload: bool,
    /// The HCA's limits.
    pub hca: HcaConfig,
    /// Bytes of host memory the device may allocate for rings and MRs.
    pub memory_budget_bytes: u64,
    /// The L2 transport: the device is a host on a link of raw Ethernet
    /// frames (`UROCE_LINK`, or a TAP: `UROCE_TAP`) instead of sending UDP
    /// through the kernel.
    pub link: Option<LinkConfig>,
}

impl UdpConfig {
    /// A device at `addr` with defaults: hybrid progress, background
    /// thread on, no faults, no capture, no offload.
    pub fn new(addr: IpAddr) -> UdpConfig {
        UdpConfig {
            addr,
            progress: ProgressMode::HYBRID,
            background: true,
            faults: None,
            capture: None,
            offload: false,
            hca: HcaConfig::default(),
            memory_budget_bytes: 16 << 30,
            link: None,
        }
    }

    /// The configuration the environment asks for: `UROCE_ADDR` (default
    /// 127.0.0.1), `UROCE_PROGRESS` (`busy`, `event`, `hybrid[:spin_us]`),
    /// `UROCE_FAULTS` (see [`FaultSpec::parse`]), `UROCE_CAPTURE` (a pcap
    /// path), `UROCE_OFFLOAD` (`1` for GSO), and for the L2 transport
    /// `UROCE_LINK` (`<local ip:port>,<remote ip:port>`) or `UROCE_TAP` (a
    /// TAP interface's name), with `UROCE_ADDR`'s `/prefix` saying what is
    /// on-link, and `UROCE_MTU` (the link MTU).
    pub fn from_env() -> Result<UdpConfig, UdpError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`UdpConfig::from_env`] over any variable source.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<UdpConfig, UdpError> {
        let (addr, prefix_len) = match var("UROCE_ADDR") {
            Some(text) => parse_addr_prefix(&text)?,
            None => (IpAddr::V4(Ipv4Addr::LOCALHOST), None),
        };
        let mut config = UdpConfig::new(addr);
        let mtu = var("UROCE_MTU").filter(|t| !t.trim().is_empty());
        let link = var("UROCE_LINK").filter(|t| !t.trim().is_empty());
        let tap = var("UROCE_TAP").filter(|t| !t.trim().is_empty());
        let attach = match (link, tap) {
            (Some(_), Some(_)) => {
                return Err(UdpError::Config(
                    "UROCE_LINK and UROCE_TAP both name the device's link: set one".into(),
                ))
            }
            (Some(text), None) => {
                let (local, remote) =
                    LinkConfig::parse_endpoints(&text).map_err(UdpError::Config)?;
                Some(LinkAttach::Udp { local, remote })
            }
            (None, Some(name)) => {
                let name = name.trim().to_string();
                tap::Tap::check_name(&name).map_err(UdpError::Config)?;
                Some(LinkAttach::Tap { name })
            }
            (None, None) => None,
        };
        match attach {
            Some(attach) => {
                let mtu = match mtu {
                    Some(text) => LinkConfig::parse_mtu(&text).map_err(UdpError::Config)?,
                    None => LinkConfig::DEFAULT_MTU,
                };
                let prefix_len = prefix_len.unwrap_or(if addr.is_ipv4() { 24 } else { 64 });
                config.link = Some(LinkConfig { attach, prefix_len, mtu });
            }
            None if mtu.is_some() => {
                return Err(UdpError::Config(
                    "UROCE_MTU is the link MTU of the L2 transport: set UROCE_LINK or UROCE_TAP \
                     too"
                    .into(),
                ))
            }
            None => {}
        }
        let subnet_prefix_len = config.link.as_ref().map(|link| link.prefix_len).or(prefix_len);
        if let Some(why) = device_addr_problem(addr, subnet_prefix_len) {
            let text = var("UROCE_ADDR").unwrap_or_default();
            return Err(UdpError::Config(format!(
                "UROCE_ADDR=`{}` cannot be a device address: {why}",
                text.trim()
            )));
        }
        if let Some(text) = var("UROCE_PROGRESS") {
            config.progress = ProgressMode::parse(&text).ok_or_else(|| {
                UdpError::Config(format!(
                    "UROCE_PROGRESS=`{text}`: expected busy, event, hybrid or hybrid:<spin_us>"
                ))
            })?;
        }
        if let Some(text) = var("UROCE_FAULTS") {
            let spec = FaultSpec::parse(&text)
                .map_err(|e| UdpError::Config(format!("UROCE_FAULTS: {e}")))?;
            config.faults = spec.is_active().then_some(spec);
        }
        if let Some(path) = var("UROCE_CAPTURE").filter(|p| !p.is_empty()) {
            config.capture = Some(PathBuf::from(path));
        }
        if let Some(text) = var("UROCE_OFFLOAD") {
            config.offload = match text.trim() {
                "1" | "on" | "yes" | "true" => true,
                "0" | "off" | "no" | "false" | "" => false,
                _ => {
                    return Err(UdpError::Config(format!(
                        "UROCE_OFFLOAD=`{text}`: expected 0 or 1"
                    )))
                }
            };
        }
        Ok(config)
    }
}

/// Parses a device address: an IP, optionally with a `/prefix` (only the
/// L2 transport uses it).
pub fn parse_addr(text: &str) -> Result<IpAddr, UdpError> {
    parse_addr_prefix(text).map(|(ip, _)| ip)
}

/// Parses `ip[/prefix]`.
pub fn parse_addr_prefix(text: &str) -> Result<(IpAddr, Option<u8>), UdpError> {
    let bad = || UdpError::Config(format!("UROCE_ADDR=`{text}` is not an IP address[/prefix]"));
    let (ip, prefix) = match text.trim().split_once('/') {
        Some((ip, prefix)) => (ip, Some(prefix)),
        None => (text.trim(), None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let prefix = match prefix {
        Some(p) => {
            let len: u8 = p.parse().map_err(|_| bad())?;
            if len > if ip.is_ipv4() { 32 } else { 128 } {
                return Err(bad());
            }
            Some(len)
        }
        None => None,
    };
    Ok((ip, prefix))
}

/// Why `addr` cannot be a device's (unicast) address (`it is ...`), or
/// `None` if it can. Refused: the unspecified address (`0.0.0.0`, `::`), multicast, and
/// the IPv4 limited broadcast `255.255.255.255`; with an IPv4 `prefix_len`
/// below 31 (the subnet on the link), also the subnet's network and
/// broadcast addresses (host bits all zero or all one, RFC 1122 3.2.1.3;
/// a /31 has neither, RFC 3021). Everything else is accepted: loopback
/// (127.0.0.0/8, `::1`), link-local, private and public unicast, and the
/// rest of 240.0.0.0/4, which Linux assigns and routes as unicast.
pub fn device_addr_problem(addr: IpAddr, prefix_len: Option<u8>) -> Option<String> {
    if addr.is_unspecified() {
        return Some("it is the unspecified address".into());
    }
    if addr.is_multicast() {
        return Some("it is a multicast address".into());
    }
    let IpAddr::V4(v4) = addr else { return None };
    if v4.is_broadcast() {
        return Some("it is the IPv4 limited broadcast address".into());
    }
    match prefix_len {
        Some(len) if len < 31 => {
            let host_mask = u32::MAX >> len;
            let host_bits = u32::from(v4) & host_mask;
            let subnet = Ipv4Addr::from(u32::from(v4) & !host_mask);
            if host_bits == 0 {
                Some(format!("it is the network address of {subnet}/{len}"))
            } else if host_bits == host_mask {
                Some(format!("it is the broadcast address of {subnet}/{len}"))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Why a device could not be opened.
#[derive(Debug)]
pub enum UdpError {
    /// A configuration value is wrong; the text says which.
    Config(String),
    /// A system call failed; the text says what was being done.
    Io(String, io::Error),
}

impl core::fmt::Display for UdpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            UdpError::Config(text) => f.write_str(text),
            UdpError::Io(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for UdpError {}

/// What the runtime counted (the HCA counts protocol events itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams taken from the socket (a GRO run counts its datagrams).
    pub rx_datagrams: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub rx_batches: u64,
    /// Datagrams that cannot be a RoCE packet or came from a source of
    /// another address family; dropped before the HCA.
    pub rx_dropped: u64,
    /// Packets the HCA handed out.
    pub tx_packets: u64,
    /// Send system calls (a GSO send counts once).
    pub tx_calls: u64,
    /// Sends the kernel refused (the packet is lost; the transport's
    /// retransmission recovers it).
    pub tx_errors: u64,
    /// GSO sends the kernel refused (offload is then turned off; the
    /// packets leave singly).
    pub tx_gso_refused: u64,
    /// Packets sent from port 4791 because the QP's own source port could
    /// not be bound (the ICRC is recomputed for the port actually used).
    pub tx_port_fallbacks: u64,
    /// Packets the fault injector dropped.
    pub faults_lost: u64,
    /// Extra copies the fault injector sent.
    pub faults_duplicated: u64,
    /// Packets the fault injector held back.
    pub faults_delayed: u64,
    /// Packets the fault injector corrupted.
    pub faults_corrupted: u64,
    /// Times the background thread progressed the device.
    pub background_steps: u64,
    /// Frames that could not be written to the capture file.
    pub capture_errors: u64,
    /// The receive buffer the kernel granted the socket (bounded by
    /// `net.core.rmem_max`): bursts beyond it are dropped and retransmitted.
    pub receive_buffer_bytes: usize,
    /// The background thread stopped on a panic (a bug): the device still
    /// moves on the application's own verbs calls, not on its own.
    pub background_failed: bool,
    /// The L2 transport's host (zero without `UROCE_LINK`).
    pub link: LinkStats,
}

impl UdpStats {
    /// Every counter with its name (`link_` in front of the L2
    /// transport's), for reports: the receive buffer's size and the
    /// link's table sizes are not counters, and are left out;
    /// `background_failed` counts 1 when the background thread failed.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let mut named = vec![
            ("rx_datagrams", self.rx_datagrams),
            ("rx_batches", self.rx_batches),
            ("rx_dropped", self.rx_dropped),
            ("tx_packets", self.tx_packets),
            ("tx_calls", self.tx_calls),
            ("tx_errors", self.tx_errors),
            ("tx_gso_refused", self.tx_gso_refused),
            ("tx_port_fallbacks", self.tx_port_fallbacks),
            ("faults_lost", self.faults_lost),
            ("faults_duplicated", self.faults_duplicated),
            ("faults_delayed", self.faults_delayed),
            ("faults_corrupted", self.faults_corrupted),
            ("background_steps", self.background_steps),
            ("capture_errors", self.capture_errors),
            ("background_failed", u64::from(self.background_failed)),
        ];
        named.extend(self.link.named());
        named
    }
}

/// A uroce device on the real network. Keep it alive while the
/// application uses the device: dropping it stops the runtime.
pub struct UdpDevice {
    hca: SharedHca,
    runtime: Arc<Runtime>,
    thread: Option<JoinHandle<()>>,
    /// Where the device leaves its last summary as it closes, for its
    /// observers ([`UdpDevice::observer`]).
    closed: Arc<Mutex<Option<DeviceSummary>>>,
}

impl core::fmt::Debug for UdpDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpDevice").field("addr", &self.runtime.addr).finish()
    }
}

/// A locally administered MAC derived from an IP address: the device has
/// no NIC, but its link-local GID and capture frames need one.
pub fn mac_for(ip: IpAddr) -> [u8; 6] {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            [0x02, 0x00, o[0], o[1], o[2], o[3]]
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [0x02, o[11], o[12], o[13], o[14], o[15]]
        }
    }
}

impl UdpDevice {
    /// Opens a device: binds `addr:4791`, creates the HCA, starts the
    /// background thread.
    pub fn open(config: UdpConfig) -> Result<UdpDevice, UdpError> {
        let addr = config.addr;
        let prefix_len = config.link.as_ref().map(|link| link.prefix_len);
        if let Some(why) = device_addr_problem(addr, prefix_len) {
            return Err(UdpError::Config(format!("{addr} cannot be a device address: {why}")));
        }
        let (port, receive_buffer_bytes) = match &config.link {
            Some(link) => Self::open_link_port(link)?,
            None => {
                let (socket, receive_buffer_bytes) = Self::open_roce_socket(&config)?;
                (Port::Udp(socket), receive_buffer_bytes)
            }
        };
        let mut hca_config = config.hca.clone();
        let link = match &config.link {
            Some(link) => {
                // Every byte of the frame is ours: IPv4 IDs count, as rxe's
                // do, and the port's MTU follows the link's.
                hca_config.ipv4_id = Ipv4IdPolicy::Counter;
                hca_config.active_mtu = path_mtu_for_link(link.mtu).ok_or_else(|| {
                    UdpError::Config(format!("UROCE_MTU={} is too small for RoCE", link.mtu))
                })?;
                let host = LinkHost::new(
                    mac_for(addr),
                    addr,
                    link.prefix_len,
                    link.mtu,
                    random_seed(),
                    Instant::from_nanos(0),
                );
                Some(host)
            }
            None => {
                hca_config.ipv4_id = Ipv4IdPolicy::Zero;
                None
            }
        };
        let gids = vec![Gid::link_local_from_mac(mac_for(addr)), Gid::from_ip(addr)];
        let memory = Arc::new(ProcessMemory::new(config.memory_budget_bytes));
        let hca =
            Hca::new(hca_config, gids, memory).map_err(|e| UdpError::Config(e.to_string()))?;
        let hca = SharedHca::new(hca);

        let (capture, capture_file) = match &config.capture {
            Some(path) => {
                let file = File::create(path).map_err(|e| {
                    UdpError::Io(format!("cannot create the capture file {}", path.display()), e)
                })?;
                let file = CaptureFile::new(file, path.clone());
                let sink = PcapSink::new(file.clone()).map_err(|e| {
                    UdpError::Io(format!("cannot write the capture file {}", path.display()), e)
                })?;
                (Some(sink), Some(file))
            }
            None => (None, None),
        };
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|e| UdpError::Io("creating an eventfd".into(), e.into()))?;
        let epoch = std::time::Instant::now();
        let runtime = Arc::new(Runtime {
            hca: hca.clone(),
            addr,
            mode: config.progress,
            offload: config.offload,
            port,
            wake,
            epoch,
            last_app_ns: AtomicU64::new(0),
            app_sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            background_idle: AtomicBool::new(false),
            io: Mutex::new(Io {
                rx_buffers: vec![vec![0u8; HEADROOM + RECEIVE_BUFFER]; RECEIVE_BATCH],
                rx_meta: Vec::with_capacity(RECEIVE_BATCH),
                rx_scratch: sys::ReceiveScratch::new(),
                tx_scratch: sys::SendScratch::new(),
                gso_refused: false,
                app_poll_was_empty: true,
                tx_buffer: vec![0u8; MAX_PACKET_LEN],
                batch: TxBatch::default(),
                send_sockets: HashMap::new(),
                unbindable_ports: HashMap::new(),
                faults: config.faults.map(Faults::new),
                delayed: BinaryHeap::new(),
                delayed_seq: 0,
                deferred_since_ns: None,
                capture,
                capture_file,
                frame: Vec::with_capacity(MAX_PACKET_LEN + 14),
                stats: UdpStats { receive_buffer_bytes, ..UdpStats::default() },
                link,
            }),
        });
        let driver: Arc<dyn Driver> = runtime.clone();
        let _ = hca.set_driver(Arc::downgrade(&driver));
        let thread = if config.background {
            let rt = runtime.clone();
            let handle = std::thread::Builder::new()
                .name(format!("uroce {addr}"))
                .spawn(move || {
                    let run = std::panic::AssertUnwindSafe(|| rt.background());
                    if std::panic::catch_unwind(run).is_err() {
                        lock(&rt.io).stats.background_failed = true;
                    }
                })
                .map_err(|e| UdpError::Io("starting the progress thread".into(), e))?;
            Some(handle)
        } else {
            None
        };
        Ok(UdpDevice { hca, runtime, thread, closed: Arc::new(Mutex::new(None)) })
    }

    /// The socket RoCE packets arrive on (`addr:4791`), and the receive
    /// buffer the kernel granted it.
    fn open_roce_socket(config: &UdpConfig) -> Result<(UdpSocket, usize), UdpError> {
        let addr = config.addr;
        raise_file_limit();
        let socket = UdpSocket::bind(SocketAddr::new(addr, ROCE_PORT))
            .map_err(|e| UdpError::Io(format!("binding {addr}:{ROCE_PORT}"), e))?;
        let ipv6 = addr.is_ipv6();
        let setup = |what: &str, r: io::Result<()>| {
            r.map_err(|e| UdpError::Io(format!("{what} on {addr}:{ROCE_PORT}"), e))
        };
        setup("setting don't-fragment", sys::set_dont_fragment(&socket, ipv6))?;
        // UDP GSO refuses sockets without checksums (EINVAL): with offload
        // the datagrams carry one (masked out of the ICRC, so harmless).
        if !config.offload {
            setup("turning the UDP checksum off", sys::set_no_udp_checksum(&socket, ipv6))?;
        }
        // The kernel grants at most net.core.rmem_max (doubled for its
        // bookkeeping); a small grant means bursts overflow into drops and
        // retransmissions, so the figure is reported in the stats.
        let receive_buffer_bytes =
            sys::set_receive_buffer(&socket, SOCKET_BUFFER_BYTES).map_err(|e| {
                UdpError::Io(format!("sizing the receive buffer on {addr}:{ROCE_PORT}"), e)
            })?;
        setup("sizing the send buffer", sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES))?;
        // GRO is an optimisation: a kernel without it still works.
        let _ = sys::enable_gro(&socket);
        Ok((socket, receive_buffer_bytes))
    }

    /// The link's port: a UDP socket bound to the local end and connected
    /// to the remote one (datagrams from anywhere else are not the link's),
    /// or a TAP interface.
    fn open_link_port(link: &LinkConfig) -> Result<(Port, usize), UdpError> {
        let (local, remote) = match &link.attach {
            LinkAttach::Udp { local, remote } => (*local, *remote),
            LinkAttach::Tap { name } => {
                let tap = tap::Tap::open(name).map_err(|e| {
                    let hint = match e.kind() {
                        io::ErrorKind::PermissionDenied => {
                            " (creating a TAP needs CAP_NET_ADMIN: create it first with \
                             `ip tuntap add dev NAME mode tap user $USER`)"
                        }
                        io::ErrorKind::NotFound => " (no /dev/net/tun: load the tun module)",
                        _ => "",
                    };
                    UdpError::Io(format!("attaching to the TAP interface {name}{hint}"), e)
                })?;
                return Ok((Port::LinkTap(tap), 0));
            }
        };
        let socket = UdpSocket::bind(local)
            .map_err(|e| UdpError::Io(format!("binding the link's end {local}"), e))?;
        socket
            .connect(remote)
            .map_err(|e| UdpError::Io(format!("connecting the link to {remote}"), e))?;
        let receive_buffer_bytes = sys::set_receive_buffer(&socket, SOCKET_BUFFER_BYTES)
            .map_err(|e| UdpError::Io(format!("sizing the receive buffer on {local}"), e))?;
        let _ = sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES);
        Ok((Port::LinkUdp(socket, remote), receive_buffer_bytes))
    }

    /// Whether the device injects faults (`UROCE_FAULTS`).
    pub fn has_faults(&self) -> bool {
        lock(&self.runtime.io).faults.is_some()
    }

    /// Whether the device is on the L2 transport (`UROCE_LINK` or
    /// `UROCE_TAP`).
    pub fn is_link(&self) -> bool {
        !matches!(self.runtime.port, Port::Udp(_))
    }

    /// Opens the device the environment describes ([`UdpConfig::from_env`]).
    pub fn open_from_env() -> Result<UdpDevice, UdpError> {
        UdpDevice::open(UdpConfig::from_env()?)
    }

    /// The HCA, for `uroce_verbs::Context::open`. Lock order: the runtime
    /// takes its I/O lock before the HCA's, so never call [`UdpDevice::stats`],
    /// [`UdpDevice::progress`] or a verb while holding `hca().lock()`.
    pub fn hca(&self) -> &SharedHca {
        &self.hca
    }

    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.runtime.addr
    }

    /// What the runtime counted (takes the runtime's I/O lock: see
    /// [`UdpDevice::hca`] for the lock order).
    pub fn stats(&self) -> UdpStats {
        self.runtime.stats()
    }

    /// The HCA's counters (takes only the HCA lock).
    pub fn counters(&self) -> uroce_hca::counters::Counters {
        self.hca.lock().counters()
    }

    /// Moves packets and time now, in the caller's thread.
    pub fn progress(&self) {
        self.runtime.progress_by(false);
    }

    /// Writes buffered capture frames to the file. An error is this
    /// flush's or an earlier write's (the first one): the capture file
    /// misses frames.
    pub fn flush_capture(&self) -> io::Result<()> {
        self.runtime.flush_capture()
    }

    /// The device's counters, the runtime's, and its capture file's state
    /// (flushing it): what a tool reports at exit.
    pub fn summary(&self) -> DeviceSummary {
        self.runtime.summary()
    }

    /// A handle that reports on the device even after it is closed, and
    /// keeps nothing of it alive (its socket, its memory and its runtime go
    /// when the device is dropped).
    pub fn observer(&self) -> DeviceObserver {
        DeviceObserver {
            addr: self.addr(),
            runtime: Arc::downgrade(&self.runtime),
            closed: self.closed.clone(),
        }
    }
}

/// What a device did, for a report at the application's exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// The device's address.
    pub addr: IpAddr,
    /// The HCA's counters.
    pub counters: uroce_hca::counters::Counters,
    /// The runtime's own counters (and the link's).
    pub stats: UdpStats,
    /// Why the capture file misses frames: the first error writing it
    /// (`None`: no capture, or every frame written).
    pub capture_failure: Option<String>,
}

/// Reports on a device while it is open and after it closed
/// ([`UdpDevice::observer`]).
#[derive(Debug, Clone)]
pub struct DeviceObserver {
    addr: IpAddr,
    runtime: Weak<Runtime>,
    closed: Arc<Mutex<Option<DeviceSummary>>>,
}

impl DeviceObserver {
    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The device's summary now (flushing its capture), or as it was when
    /// the device closed.
    pub fn summary(&self) -> DeviceSummary {
        if let Some(summary) = lock(&self.closed).clone() {
            return summary;
        }
        match self.runtime.upgrade() {
            Some(runtime) => runtime.summary(),
            // A device leaves its summary before its runtime goes; this is
            // only reached by a device whose drop never ran (leaked).
            None => DeviceSummary {
                addr: self.addr,
                counters: uroce_hca::counters::Counters::default(),
                stats: UdpStats::default(),
                capture_failure: Some("the device vanished without a summary".into()),
            },
        }
    }
}

/// The capture file, shared between the pcap writer and whoever flushes;
/// it keeps the first error writing it.
#[derive(Clone)]
struct CaptureFile(Arc<Mutex<CaptureState>>);

struct CaptureState {
    writer: BufWriter<File>,
    path: PathBuf,
    /// The first write or flush that failed, as a sentence.
    failure: Option<String>,
}

impl CaptureFile {
    fn new(file: File, path: PathBuf) -> CaptureFile {
        let state = CaptureState { writer: BufWriter::new(file), path, failure: None };
        CaptureFile(Arc::new(Mutex::new(state)))
    }

    /// The first error writing the file, if any.
    fn failure(&self) -> Option<String> {
        lock(&self.0).failure.clone()
    }
}

impl CaptureState {
    fn note<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            if self.failure.is_none() {
                let path = self.path.display();
                self.failure = Some(format!("could not write the capture file {path}: {e}"));
            }
        }
        result
    }
}

impl Write for CaptureFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = lock(&self.0);
        let result = state.writer.write(buf);
        state.note(result)
    }
    fn flush(&mut self) -> io::Result<()> {
        let mut state = lock(&self.0);
        let result = state.writer.flush();
        state.note(result)
    }
}

type Capture = PcapSink<CaptureFile>;

impl Drop for UdpDevice {
    fn drop(&mut self) {
        self.runtime.stop.store(true, Ordering::Release);
        self.runtime.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Flushes the capture too.
        let summary = self.summary();
        *lock(&self.closed) = Some(summary);
    }
}

/// Locks a runtime mutex; a panic elsewhere leaves the I/O state usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The part of the runtime shared by the application's threads and the
/// background thread.
struct Runtime {
    hca: SharedHca,
    addr: IpAddr,
    mode: ProgressMode,
    offload: bool,
    /// Where every packet (or frame) arrives, and leaves unless a source
    /// port has a socket of its own.
    port: Port,
    /// Wakes the background thread (stop, or the application went to sleep).
    wake: OwnedFd,
    epoch: std::time::Instant,
    /// When the application last drove the device (runtime nanoseconds).
    last_app_ns: AtomicU64,
    /// The application armed a CQ and may be asleep on a channel.
    app_sleeping: AtomicBool,
    stop: AtomicBool,
    /// The background thread is (about to be) asleep on the socket.
    background_idle: AtomicBool,
    io: Mutex<Io>,
}

/// The runtime's way onto the network.
enum Port {
    /// UDP through the kernel: bound to `addr:4791`.
    Udp(UdpSocket),
    /// The L2 transport over UDP datagrams (`UROCE_LINK`): bound to the
    /// link's local end, every frame to its remote end.
    LinkUdp(UdpSocket, SocketAddr),
    /// The L2 transport on a TAP interface (`UROCE_TAP`).
    LinkTap(tap::Tap),
}

impl Port {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Port::Udp(socket) | Port::LinkUdp(socket, _) => socket.as_fd(),
            Port::LinkTap(tap) => tap.as_fd(),
        }
    }
}

/// A packet the fault injector holds back.
struct Delayed {
    due_ns: u64,
    seq: u64,
    packet: Vec<u8>,
    destination: IpAddr,
    /// The bit the fault injector flips when it leaves.
    flip_bit: Option<usize>,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.seq) == (other.due_ns, other.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delayed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due_ns, self.seq).cmp(&(other.due_ns, other.seq))
    }
}

/// Packets waiting to leave, sent after the HCA lock is released.
#[derive(Default)]
struct TxBatch {
    /// Their UDP payloads, back to back.
    bytes: Vec<u8>,
    /// (offset in `bytes`, length, destination, source port; `None`: port
    /// 4791's socket) of each.
    packets: Vec<(usize, usize, IpAddr, Option<u16>)>,
}

struct Io {
    rx_buffers: Vec<Vec<u8>>,
    rx_meta: Vec<sys::Received>,
    rx_scratch: sys::ReceiveScratch,
    tx_scratch: sys::SendScratch,
    /// The kernel refused a GSO send: offload is off from then on.
    gso_refused: bool,
    /// The application's last poll found no datagram.
    app_poll_was_empty: bool,
    tx_buffer: Vec<u8>,
    batch: TxBatch,
    /// One socket per UDP source port in use.
    send_sockets: HashMap<u16, UdpSocket>,
    /// Ports that could not be bound (in use by another socket, or out of
    /// descriptors), and when to try again; meanwhile their packets leave
    /// from port 4791.
    unbindable_ports: HashMap<u16, u64>,
    faults: Option<Faults>,
    delayed: BinaryHeap<Reverse<Delayed>>,
    delayed_seq: u64,
    /// Since when packets the application's receive produced wait for its
    /// next verbs call.
    deferred_since_ns: Option<u64>,
    capture: Option<Capture>,
    capture_file: Option<CaptureFile>,
    /// Scratch for one capture frame.
    frame: Vec<u8>,
    stats: UdpStats,
    /// The L2 transport's host (ARP, NDP, TCP, frames).
    link: Option<LinkHost>,
}

impl Driver for Runtime {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.now_ns())
    }

    fn progress(&self) {
        self.progress_by(true);
    }

    fn flush(&self) {
        self.mark_app_active();
        {
            let mut io = lock(&self.io);
            self.transmit_some(&mut io, self.now_ns());
        }
        // New timers, held packets or more than one burst: a background
        // thread asleep on an older deadline must look again.
        self.kick_background();
        self.deliver_events();
    }

    fn posted_receive(&self) {
        self.mark_app_active();
    }

    fn app_sleeping(&self) {
        self.app_sleeping.store(true, Ordering::Release);
        self.wake();
    }
}

impl Runtime {
    fn stats(&self) -> UdpStats {
        let io = lock(&self.io);
        let mut stats = io.stats.clone();
        if let Some(link) = &io.link {
            stats.link = link.stats();
        }
        stats
    }

    fn flush_capture(&self) -> io::Result<()> {
        let mut io = lock(&self.io);
        let Some(file) = io.capture_file.as_mut() else { return Ok(()) };
        // A failed flush is noted as the file's failure, if it is the first.
        let _ = file.flush();
        match file.failure() {
            Some(failure) => Err(io::Error::other(failure)),
            None => Ok(()),
        }
    }

    /// Each lock in a statement of its own: the I/O lock is taken before
    /// the HCA's, never while holding it.
    fn summary(&self) -> DeviceSummary {
        let stats = self.stats();
        let capture_failure = self.flush_capture().err().map(|e| e.to_string());
        let counters = self.hca.lock().counters();
        DeviceSummary { addr: self.addr, counters, stats, capture_failure }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn wake(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    /// One progress step: receive what is waiting, fire timers, send what
    /// is ready, until nothing moves (bounded). Returns whether anything
    /// moved.
    /// Wakes the background thread if it is asleep in charge of the device,
    /// so that it recomputes its deadline after the application changed
    /// the device's state (Dekker with `background`: it announces the sleep
    /// before computing the deadline it sleeps on).
    fn kick_background(&self) {
        if self.background_idle.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// The application called a verb: it is awake and driving (unless it
    /// armed a CQ, see `app_sleeping`).
    fn mark_app_active(&self) {
        self.last_app_ns.store(self.now_ns(), Ordering::Relaxed);
    }

    /// Hands waiting events to the application (completion channels). An
    /// event is what an application that armed a CQ sleeps for: once one
    /// is raised, it is awake again.
    fn deliver_events(&self) {
        if self.hca.lock().has_events() {
            self.app_sleeping.store(false, Ordering::Release);
            self.hca.notify_if_events();
        }
    }

    fn progress_by(&self, app: bool) -> bool {
        // While a CQ is armed (`app_sleeping`), the application's calls do
        // not put the background thread off: the libibverbs event loop arms
        // the CQ, polls and posts, then sleeps on the channel, and only the
        // event it waits for ends that (`deliver_events`).
        let started_ns = self.now_ns();
        if app {
            self.last_app_ns.store(started_ns, Ordering::Relaxed);
        }
        let mut moved = false;
        {
            let mut io = lock(&self.io);
            if app {
                // The application's thread: send what is ready (including
                // what the last receive produced), then take what arrived
                // and return, so the application sees its completions
                // before the runtime spends a system call on the ACKs
                // they produced. Those leave with the application's next
                // verbs call, after any request it posts in reaction (see
                // `flush_batch`): the ACK is off the ping-pong's critical
                // path. If no call comes, the background thread sends them:
                // at once if it is asleep in charge (`kick_background`),
                // else when it takes over (`APP_ACTIVE_NS` after the last
                // call), or `DEFERRED_ACK_NS` after the receive if it
                // looks at its deadline before that.
                let now = started_ns;
                let sent = self.transmit_some(&mut io, now);
                // A poll after an empty one is an application waiting for a
                // message: one datagram with `recvmsg` (cheaper) and back to
                // it; a stream (the last poll found something) is taken in
                // batches.
                let single = io.app_poll_was_empty;
                let received = self.receive_some(&mut io, now, single);
                io.app_poll_was_empty = received == 0;
                if received > 0 {
                    io.deferred_since_ns.get_or_insert(now);
                }
                moved = sent + received > 0;
                if moved {
                    self.kick_background();
                }
            } else {
                for _ in 0..8 {
                    let now = self.now_ns();
                    let received = self.receive_some(&mut io, now, false);
                    let sent = self.transmit_some(&mut io, now);
                    if received == 0 && sent == 0 {
                        break;
                    }
                    moved = true;
                }
            }
        }
        self.deliver_events();
        moved
    }

    /// Takes one batch from the socket into the HCA.
    fn receive_some(&self, io: &mut Io, now_ns: u64, single: bool) -> usize {
        let count = {
            let Io { rx_buffers, rx_meta, rx_scratch, stats, .. } = &mut *io;
            let result = match &self.port {
                Port::LinkTap(tap) => {
                    let take = if single { 1 } else { rx_buffers.len() };
                    tap.receive_batch(&mut rx_buffers[..take], HEADROOM, rx_meta)
                }
                Port::Udp(socket) | Port::LinkUdp(socket, _) if single => {
                    sys::receive_one(socket, rx_scratch, &mut rx_buffers[0], HEADROOM, rx_meta)
                }
                Port::Udp(socket) | Port::LinkUdp(socket, _) => {
                    sys::receive_batch(socket, rx_scratch, rx_buffers, HEADROOM, rx_meta)
                }
            };
            match result {
                Ok(n) => n,
                Err(_) => {
                    stats.rx_dropped += 1;
                    0
                }
            }
        };
        if count == 0 {
            return 0;
        }
        io.stats.rx_batches += 1;
        if io.link.is_some() {
            return self.receive_frames(io, now_ns);
        }
        let Io { rx_buffers, rx_meta, capture, frame, stats, .. } = io;
        let now = Instant::from_nanos(now_ns);
        let mut hca = self.hca.lock();
        let mut datagrams = 0;
        for (meta, buffer) in rx_meta.iter().zip(rx_buffers.iter_mut()) {
            let Some(source) = meta.source.filter(|_| !meta.truncated) else {
                stats.rx_dropped += 1;
                continue;
            };
            let segment = meta.segment_size.unwrap_or(meta.len).max(1);
            let mut offset = 0;
            while offset < meta.len {
                let len = segment.min(meta.len - offset);
                datagrams += 1;
                let start = HEADROOM + offset;
                match rebuild_headers(buffer, start, len, source, self.addr) {
                    Some(packet_start) => {
                        let packet = &buffer[packet_start..start + len];
                        if let Some(sink) = capture.as_mut() {
                            write_frame(sink, frame, stats, now_ns, packet);
                        }
                        hca.receive(now, packet);
                    }
                    None => stats.rx_dropped += 1,
                }
                offset += len;
            }
        }
        stats.rx_datagrams += datagrams;
        datagrams as usize
    }

    /// The L2 transport's receive: each datagram is one Ethernet frame;
    /// RoCE frames go to the HCA as received (the fault injector may drop,
    /// duplicate or corrupt them first), the rest to the link host.
    fn receive_frames(&self, io: &mut Io, now_ns: u64) -> usize {
        let now = Instant::from_nanos(now_ns);
        let Io { rx_buffers, rx_meta, capture, stats, link, faults, .. } = io;
        let Some(link) = link.as_mut() else { return 0 };
        let mut frames = 0;
        let mut host_frames = false;
        {
            let mut hca = self.hca.lock();
            for (meta, buffer) in rx_meta.iter().zip(rx_buffers.iter()) {
                if meta.truncated {
                    stats.rx_dropped += 1;
                    continue;
                }
                frames += 1;
                let bytes = &buffer[HEADROOM..HEADROOM + meta.len];
                if let Some(sink) = capture.as_mut() {
                    write_raw_frame(sink, stats, bytes);
                }
                match link.ingress(bytes) {
                    Ingress::Roce(packet) => {
                        let Some(faults) = faults.as_mut() else {
                            hca.receive(now, packet);
                            continue;
                        };
                        let transport_start = ip_header_len(packet) + 8;
                        let verdict = faults.decide(packet.len().saturating_sub(transport_start));
                        if verdict.copies == 0 {
                            stats.faults_lost += 1;
                            continue;
                        }
                        if verdict.copies > 1 {
                            stats.faults_duplicated += u64::from(verdict.copies - 1);
                        }
                        let mut corrupted;
                        let packet = match verdict.flip_bit {
                            Some(bit) => {
                                stats.faults_corrupted += 1;
                                corrupted = packet.to_vec();
                                if let Some(byte) = corrupted.get_mut(transport_start + bit / 8) {
                                    *byte ^= 1 << (bit % 8);
                                }
                                &corrupted[..]
                            }
                            None => packet,
                        };
                        for _ in 0..verdict.copies {
                            hca.receive(now, packet);
                        }
                    }
                    Ingress::Host => host_frames = true,
                    Ingress::Dropped => stats.rx_dropped += 1,
                }
            }
        }
        if host_frames {
            // ARP and NDP answers, TCP: queued for the next transmit.
            link.poll(now);
        }
        stats.rx_datagrams += frames;
        frames as usize
    }

    /// Sends what the link host has ready (its own frames, packets
    /// released by a resolved neighbour), after running its timers.
    fn queue_link_frames(&self, io: &mut Io, now_ns: u64) -> usize {
        let Io { link, batch, capture, stats, .. } = io;
        let Some(link) = link.as_mut() else { return 0 };
        link.poll(Instant::from_nanos(now_ns));
        let mut queued = 0;
        while let Some(frame) = link.take_frame() {
            if let Some(sink) = capture.as_mut() {
                write_raw_frame(sink, stats, &frame);
            }
            batch.packets.push((batch.bytes.len(), frame.len(), self.addr, None));
            batch.bytes.extend_from_slice(&frame);
            queued += 1;
        }
        queued
    }

    /// The L2 transport's send: the packet in an Ethernet frame (or held
    /// while its destination's MAC is asked for).
    fn send_link_packet(
        &self,
        io: &mut Io,
        now_ns: u64,
        packet: &[u8],
        destination: IpAddr,
        flip_bit: Option<usize>,
    ) {
        let Io { link, frame, capture, stats, batch, .. } = io;
        let Some(link) = link.as_mut() else { return };
        let now = Instant::from_nanos(now_ns);
        if link.encapsulate(now, packet, destination, frame) != Egress::Ready {
            return;
        }
        if let Some(bit) = flip_bit {
            let at = ETHERNET_HEADER_LEN + ip_header_len(packet) + 8 + bit / 8;
            if let Some(byte) = frame.get_mut(at) {
                *byte ^= 1 << (bit % 8);
            }
        }
        if let Some(sink) = capture.as_mut() {
            write_raw_frame(sink, stats, frame);
        }
        batch.packets.push((batch.bytes.len(), frame.len(), destination, None));
        batch.bytes.extend_from_slice(frame);
    }

    /// Fires due timers, releases due delayed packets, and sends up to a
    /// burst of packets.
    fn transmit_some(&self, io: &mut Io, now_ns: u64) -> usize {
        io.deferred_since_ns = None;
        let now = Instant::from_nanos(now_ns);
        let mut sent = 0;
        while io.delayed.peek().is_some_and(|Reverse(d)| d.due_ns <= now_ns) {
            let Reverse(mut d) = io.delayed.pop().expect("peeked");
            self.send_packet(io, now_ns, &mut d.packet, d.destination, d.flip_bit);
            sent += 1;
        }
        let mut buffer = std::mem::take(&mut io.tx_buffer);
        // A panic between the take and the put-back leaves it empty.
        buffer.resize(MAX_PACKET_LEN, 0);
        let mut first_round = true;
        loop {
            // Packets are taken from the HCA under its lock and sent after it
            // is released: no system call holds up the application's verbs.
            let mut drained = true;
            {
                let mut hca = self.hca.lock();
                if first_round && hca.poll_timeout().is_some_and(|at| at <= now) {
                    hca.handle_timeout(now);
                }
                while io.batch.packets.len() < TX_BATCH && sent < TRANSMIT_BURST {
                    let Some(Transmit { destination, len, .. }) =
                        hca.poll_transmit(now, &mut buffer)
                    else {
                        break;
                    };
                    io.stats.tx_packets += 1;
                    sent += 1;
                    self.dispatch(io, now_ns, &mut buffer[..len], destination);
                }
                if io.batch.packets.len() >= TX_BATCH && sent < TRANSMIT_BURST {
                    drained = false;
                }
            }
            first_round = false;
            sent += self.queue_link_frames(io, now_ns);
            self.flush_batch(io);
            if drained {
                break;
            }
        }
        io.tx_buffer = buffer;
        sent
    }

    /// Applies faults, then sends (or holds) one packet.
    fn dispatch(&self, io: &mut Io, now_ns: u64, packet: &mut [u8], destination: IpAddr) {
        let Some(faults) = io.faults.as_mut() else {
            self.send_packet(io, now_ns, packet, destination, None);
            return;
        };
        let header_len = ip_header_len(packet);
        let transport_start = header_len + 8;
        let verdict = faults.decide(packet.len().saturating_sub(transport_start));
        if verdict.copies == 0 {
            io.stats.faults_lost += 1;
            return;
        }
        if verdict.flip_bit.is_some() {
            io.stats.faults_corrupted += 1;
        }
        if verdict.copies > 1 {
            io.stats.faults_duplicated += u64::from(verdict.copies - 1);
        }
        for _ in 0..verdict.copies {
            if verdict.delay_ns == 0 {
                self.send_packet(io, now_ns, packet, destination, verdict.flip_bit);
            } else {
                io.stats.faults_delayed += 1;
                io.delayed_seq += 1;
                io.delayed.push(Reverse(Delayed {
                    due_ns: now_ns + verdict.delay_ns,
                    seq: io.delayed_seq,
                    packet: packet.to_vec(),
                    destination,
                    flip_bit: verdict.flip_bit,
                }));
            }
        }
    }

    /// Sends one IP packet the HCA built: its UDP payload leaves from the
    /// socket bound to its source port. `flip_bit` (the fault injector's
    /// corruption, a bit of the transport packet) is applied last, after any
    /// rewrite that recomputes the ICRC, so the receiver always sees it.
    fn send_packet(
        &self,
        io: &mut Io,
        now_ns: u64,
        packet: &mut [u8],
        destination: IpAddr,
        flip_bit: Option<usize>,
    ) {
        if io.link.is_some() {
            self.send_link_packet(io, now_ns, packet, destination, flip_bit);
            return;
        }
        let header_len = ip_header_len(packet);
        if packet.len() < header_len + 8 {
            io.stats.tx_errors += 1;
            return;
        }
        let source_port = u16::from_be_bytes([packet[header_len], packet[header_len + 1]]);
        let bound = io.send_sockets.contains_key(&source_port)
            || match io.unbindable_ports.get(&source_port) {
                Some(&retry_at_ns) if now_ns < retry_at_ns => false,
                _ => match self.bind_source_port(source_port) {
                    Some(socket) => {
                        io.send_sockets.insert(source_port, socket);
                        io.unbindable_ports.remove(&source_port);
                        true
                    }
                    None => {
                        io.unbindable_ports.insert(source_port, now_ns + PORT_RETRY_NS);
                        false
                    }
                },
            };
        let flip = |bytes: &mut [u8]| {
            if let Some(bit) = flip_bit {
                if let Some(byte) = bytes.get_mut(header_len + 8 + bit / 8) {
                    *byte ^= 1 << (bit % 8);
                }
            }
        };
        if !bound {
            // Leave from port 4791 and cover that port with the ICRC.
            let mut fixed = packet.to_vec();
            fixed[header_len..header_len + 2].copy_from_slice(&ROCE_PORT.to_be_bytes());
            if !recompute_icrc(&mut fixed, header_len) {
                io.stats.tx_errors += 1;
                return;
            }
            flip(&mut fixed);
            io.stats.tx_port_fallbacks += 1;
            self.capture_and_send(io, now_ns, &fixed, destination, None);
            return;
        }
        if flip_bit.is_some() {
            // Duplicates share the buffer: corrupt a copy.
            let mut corrupted = packet.to_vec();
            flip(&mut corrupted);
            self.capture_and_send(io, now_ns, &corrupted, destination, Some(source_port));
            return;
        }
        self.capture_and_send(io, now_ns, packet, destination, Some(source_port));
    }

    fn capture_and_send(
        &self,
        io: &mut Io,
        now_ns: u64,
        packet: &[u8],
        destination: IpAddr,
        source_port: Option<u16>,
    ) {
        let Io { capture, frame, stats, .. } = io;
        if let Some(sink) = capture.as_mut() {
            write_frame(sink, frame, stats, now_ns, packet);
        }
        let payload = &packet[ip_header_len(packet) + 8..];
        let batch = &mut io.batch;
        batch.packets.push((batch.bytes.len(), payload.len(), destination, source_port));
        batch.bytes.extend_from_slice(payload);
    }

    /// Sends the batched packets, one group per source port: with
    /// `sendmmsg`, or with offload, runs of equal-sized packets to one
    /// destination as single GSO sends.
    fn flush_batch(&self, io: &mut Io) {
        let Io { batch, send_sockets, stats, tx_scratch, gso_refused, .. } = io;
        if batch.packets.is_empty() {
            return;
        }
        let main_socket = match &self.port {
            Port::Udp(socket) => socket,
            Port::LinkUdp(socket, remote) => {
                // The L2 transport: every frame to the link's other end, in
                // order (a released packet follows the ARP exchange, a TCP
                // segment its predecessor).
                let bytes = &batch.bytes;
                let frames: Vec<(&[u8], SocketAddr)> = batch
                    .packets
                    .iter()
                    .map(|&(start, len, _, _)| (&bytes[start..start + len], *remote))
                    .collect();
                let mut sent = 0;
                while sent < frames.len() {
                    stats.tx_calls += 1;
                    match sys::send_batch(socket, tx_scratch, &frames[sent..]) {
                        Ok(n) if n > 0 => sent += n,
                        _ => {
                            stats.tx_errors += 1;
                            sent += 1;
                        }
                    }
                }
                batch.bytes.clear();
                batch.packets.clear();
                return;
            }
            Port::LinkTap(tap) => {
                // One write per frame, in order.
                for &(start, len, _, _) in &batch.packets {
                    stats.tx_calls += 1;
                    if tap.send(&batch.bytes[start..start + len]).is_err() {
                        stats.tx_errors += 1;
                    }
                }
                batch.bytes.clear();
                batch.packets.clear();
                return;
            }
        };
        let to = |ip: IpAddr| SocketAddr::new(ip, ROCE_PORT);
        let bytes = &batch.bytes;
        if self.offload {
            // Grouped by port, each group in its order (GSO runs need the
            // packets back to back).
            batch.packets.sort_by_key(|&(_, _, _, port)| port);
        } else {
            // Grouped by port; in each, requests before responses (each
            // class in its own order: they are separate PSN streams): a
            // request an application posted in reaction to a completion
            // must not wait behind the ACK of the packet that completed.
            batch.packets.sort_by_key(|&(start, _, _, port)| {
                (port, bytes.get(start).is_some_and(|&op| is_response(op)))
            });
        }
        let packets = &batch.packets;
        let mut group = 0;
        while group < packets.len() {
            let port = packets[group].3;
            let group_end = packets[group..]
                .iter()
                .position(|p| p.3 != port)
                .map_or(packets.len(), |n| group + n);
            let socket = port.and_then(|p| send_sockets.get(&p)).unwrap_or(main_socket);
            let mut singles: Vec<(&[u8], SocketAddr)> = Vec::with_capacity(group_end - group);
            let mut i = group;
            while i < group_end {
                let (start, segment, destination, _) = packets[i];
                let mut j = i + 1;
                let mut end = start + segment;
                if self.offload && !*gso_refused {
                    // Every packet of a GSO run but the last has the run's
                    // size.
                    while j < group_end
                        && packets[j].0 == end
                        && j - i < GSO_MAX_SEGMENTS
                        && packets[j].2 == destination
                        && packets[j].1 <= segment
                        && packets[j - 1].1 == segment
                        && packets[j].0 + packets[j].1 - start <= GSO_MAX_BYTES
                    {
                        end = packets[j].0 + packets[j].1;
                        j += 1;
                    }
                }
                let mut gso_sent = false;
                if j - i > 1 {
                    stats.tx_calls += 1;
                    let run = &bytes[start..end];
                    match sys::send_segmented(socket, run, to(destination), segment as u16) {
                        Ok(_) => gso_sent = true,
                        // Refused (no checksum offload on the way out, or a
                        // route MTU below the segment): the same runs would
                        // fail on every retransmission, so send these singly
                        // and stop asking for GSO.
                        Err(_) => {
                            *gso_refused = true;
                            stats.tx_gso_refused += 1;
                        }
                    }
                }
                if !gso_sent {
                    for &(start, len, destination, _) in &packets[i..j] {
                        singles.push((&bytes[start..start + len], to(destination)));
                    }
                }
                i = j;
            }
            let mut sent = 0;
            while sent < singles.len() {
                stats.tx_calls += 1;
                match sys::send_batch(socket, tx_scratch, &singles[sent..]) {
                    Ok(n) if n > 0 => sent += n,
                    _ => {
                        // The first datagram is refused (lost); go on with
                        // the rest.
                        stats.tx_errors += 1;
                        sent += 1;
                    }
                }
            }
            group = group_end;
        }
        batch.bytes.clear();
        batch.packets.clear();
    }

    fn bind_source_port(&self, port: u16) -> Option<UdpSocket> {
        let socket = UdpSocket::bind(SocketAddr::new(self.addr, port)).ok()?;
        sys::set_dont_fragment(&socket, self.addr.is_ipv6()).ok()?;
        if !self.offload {
            sys::set_no_udp_checksum(&socket, self.addr.is_ipv6()).ok()?;
        }
        let _ = sys::set_send_buffer(&socket, SOCKET_BUFFER_BYTES);
        // Nothing is sent to these ports; keep their receive queues small.
        let _ = sys::set_receive_buffer(&socket, 4096);
        Some(socket)
    }

    /// When the device next needs attention by itself (a timer or a
    /// delayed packet), in runtime nanoseconds.
    fn next_deadline_ns(&self) -> Option<u64> {
        let timer = {
            let hca = self.hca.lock();
            // Packets left behind by a burst limit are due now.
            if hca.has_transmit_ready() {
                Some(0)
            } else {
                hca.poll_timeout().map(Instant::as_nanos)
            }
        };
        let delayed = {
            let mut io = lock(&self.io);
            let held = io.delayed.peek().map(|Reverse(d)| d.due_ns);
            let deferred = io.deferred_since_ns.map(|t| t + DEFERRED_ACK_NS);
            let link = io.link.as_mut().and_then(|link| {
                if link.has_work() {
                    Some(0)
                } else {
                    link.poll_at_ns(Instant::from_nanos(self.now_ns()))
                }
            });
            [held, deferred, link].into_iter().flatten().min()
        };
        match (timer, delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The background thread: keeps the device progressing while the
    /// application is not calling verbs.
    fn background(&self) {
        let mut last_activity_ns = 0u64;
        let mut more = false;
        while !self.stop.load(Ordering::Acquire) {
            let now = self.now_ns();
            let deadline = self.next_deadline_ns();
            let app_active = !self.app_sleeping.load(Ordering::Acquire)
                && now.saturating_sub(self.last_app_ns.load(Ordering::Relaxed)) < APP_ACTIVE_NS
                && self.last_app_ns.load(Ordering::Relaxed) != 0;
            if app_active {
                // The application drives; wake for its silence, a timer,
                // or a stop/sleep signal.
                let quiet_at = self.last_app_ns.load(Ordering::Relaxed) + APP_ACTIVE_NS;
                let until = deadline.map_or(quiet_at, |d| d.min(quiet_at));
                self.wait(false, until.saturating_sub(now));
                if deadline.is_some_and(|d| d <= self.now_ns()) {
                    self.step();
                }
                continue;
            }
            let spin = match self.mode {
                ProgressMode::Busy => true,
                ProgressMode::Event => false,
                ProgressMode::Hybrid { spin_us } => {
                    now.saturating_sub(last_activity_ns) < u64::from(spin_us) * 1_000
                }
            };
            if !spin && !more {
                // Announce the sleep, then compute the deadline: anything
                // the application changes after this wakes us
                // (`kick_background`).
                self.background_idle.store(true, Ordering::SeqCst);
                let now = self.now_ns();
                let deadline = self.next_deadline_ns();
                let timeout = deadline.map_or(u64::MAX, |d| d.saturating_sub(now));
                if timeout > 0 {
                    self.wait(true, timeout);
                }
                self.background_idle.store(false, Ordering::SeqCst);
            }
            // A step that moved something may have left more (a burst cap,
            // a full receive batch): step again before sleeping.
            more = self.step();
            if more {
                last_activity_ns = self.now_ns();
            } else if spin {
                std::hint::spin_loop();
            }
        }
    }

    fn step(&self) -> bool {
        let moved = self.progress_by(false);
        if moved {
            lock(&self.io).stats.background_steps += 1;
        }
        moved
    }

    /// Sleeps until the wake descriptor (and, with `socket`, the socket)
    /// is readable, or `timeout_ns` passes.
    fn wait(&self, socket: bool, timeout_ns: u64) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let capped = timeout_ns.min(1_000_000_000);
        let timeout = Timespec {
            tv_sec: (capped / 1_000_000_000) as _,
            tv_nsec: (capped % 1_000_000_000) as _,
        };
        let mut fds = [
            PollFd::new(&self.wake, PollFlags::IN),
            PollFd::from_borrowed_fd(self.port.as_fd(), PollFlags::IN),
        ];
        let n = if socket { 2 } else { 1 };
        if poll(&mut fds[..n], Some(&timeout)).is_ok() && fds[0].revents().contains(PollFlags::IN) {
            let mut counter = [0u8; 8];
            let _ = rustix::io::read(&self.wake, &mut counter);
        }
    }
}

/// A seed nobody else has (smoltcp's TCP sequence numbers and ports):
/// std's per-process random hash keys over the time.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Raises the soft limit on open files to the hard limit: a device opens
/// one socket per UDP source port in use (up to 16,384 for many QPs).
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            rustix::process::Rlimit { current: limit.maximum, ..limit },
        );
    }
}

/// Whether a BTH opcode is a responder's (ACK, READ response, atomic
/// ACK): everything else is a request.
fn is_response(opcode: u8) -> bool {
    uroce_wire::Opcode(opcode).info().is_some_and(|info| info.is(uroce_wire::Mask::RESP))
}

/// The IP header length of a packet the HCA built (IPv4 without options,
/// or IPv6).
fn ip_header_len(packet: &[u8]) -> usize {
    match packet.first().map(|b| b >> 4) {
        Some(6) => 40,
        _ => 20,
    }
}

/// Writes, just before `buffer[start..start + len]` (a received UDP
/// payload), the IP and UDP headers a uroce sender's datagram carried:
/// IPv4 ID 0, DF, TTL 64, UDP checksum 0. Returns where the IP packet
/// starts, or `None` if the datagram cannot be a RoCE packet from a
/// source of the device's address family.
fn rebuild_headers(
    buffer: &mut [u8],
    start: usize,
    len: usize,
    source: SocketAddr,
    local: IpAddr,
) -> Option<usize> {
    let udp_len = u16::try_from(len + 8).ok()?;
    let udp = [source.port().to_be_bytes(), ROCE_PORT.to_be_bytes(), udp_len.to_be_bytes(), [0, 0]];
    match (source.ip(), local) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let begin = start.checked_sub(28)?;
            let total = u16::try_from(len + 28).ok()?;
            let header = ipv4_header(src, dst, total);
            buffer[begin..begin + 20].copy_from_slice(&header);
            buffer[begin + 20..start].copy_from_slice(udp.as_flattened());
            Some(begin)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let begin = start.checked_sub(48)?;
            let mut header = [0u8; 40];
            header[0] = 0x60;
            header[4..6].copy_from_slice(&udp_len.to_be_bytes());
            header[6] = 17;
            header[7] = 64;
            header[8..24].copy_from_slice(&src.octets());
            header[24..40].copy_from_slice(&dst.octets());
            buffer[begin..begin + 40].copy_from_slice(&header);
            buffer[begin + 40..start].copy_from_slice(udp.as_flattened());
            Some(begin)
        }
        _ => None,
    }
}

fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, total_len: u16) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total_len.to_be_bytes());
    // Identification 0, flags DF, fragment offset 0.
    h[6] = 0x40;
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let mut sum = 0u32;
    for pair in h.chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

/// Recomputes the ICRC of an IP packet after its UDP header changed.
fn recompute_icrc(packet: &mut [u8], header_len: usize) -> bool {
    let udp_end = header_len + 8;
    if packet.len() < udp_end + 4 {
        return false;
    }
    let (headers, transport) = packet.split_at_mut(udp_end);
    let (ip, udp) = headers.split_at(header_len);
    let body_len = transport.len() - 4;
    let Some(icrc) = uroce_wire::icrc::compute(ip, udp, &transport[..body_len]) else {
        return false;
    };
    uroce_wire::icrc::write(&mut transport[body_len..], icrc);
    true
}

/// Writes one IP packet as an Ethernet frame (MACs derived from the IP
/// addresses) to the capture.
fn write_frame(
    sink: &mut Capture,
    frame: &mut Vec<u8>,
    stats: &mut UdpStats,
    now_ns: u64,
    packet: &[u8],
) {
    let (src, dst, ethertype) = match packet.first().map(|b| b >> 4) {
        Some(4) if packet.len() >= 20 => {
            let s: [u8; 4] = packet[12..16].try_into().expect("4 bytes");
            let d: [u8; 4] = packet[16..20].try_into().expect("4 bytes");
            (IpAddr::from(s), IpAddr::from(d), [0x08, 0x00])
        }
        Some(6) if packet.len() >= 40 => {
            let s: [u8; 16] = packet[8..24].try_into().expect("16 bytes");
            let d: [u8; 16] = packet[24..40].try_into().expect("16 bytes");
            (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), [0x86, 0xdd])
        }
        _ => {
            stats.capture_errors += 1;
            return;
        }
    };
    frame.clear();
    frame.extend_from_slice(&mac_for(dst));
    frame.extend_from_slice(&mac_for(src));
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(packet);
    let timestamp = wall_clock_since_epoch(now_ns);
    if sink.write_frame(timestamp, frame).is_err() {
        stats.capture_errors += 1;
    }
}

/// Writes one Ethernet frame as it is (the L2 transport) to the capture.
fn write_raw_frame(sink: &mut Capture, stats: &mut UdpStats, frame: &[u8]) {
    if sink.write_frame(wall_clock_since_epoch(0), frame).is_err() {
        stats.capture_errors += 1;
    }
}

/// Capture timestamps: the wall clock (so captures from several processes
/// line up); `now_ns` is unused beyond ordering within one process.
fn wall_clock_since_epoch(_now_ns: u64) -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuilt_ipv4_header_is_what_a_df_unconnected_sender_sends() {
        let mut buffer = vec![0u8; 48 + 16];
        let source = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0xc123);
        let begin =
            rebuild_headers(&mut buffer, 48, 16, source, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        assert_eq!(begin, 20);
        let header = etherparse::Ipv4HeaderSlice::from_slice(&buffer[20..40]).unwrap();
        assert_eq!(header.identification(), 0);
        assert!(header.dont_fragment());
        assert_eq!(header.total_len(), 44);
        assert_eq!(header.header_checksum(), header.to_header().calc_header_checksum());
        assert_eq!(&buffer[40..48], &[0xc1, 0x23, 0x12, 0xb7, 0, 24, 0, 0]);
        // A family mismatch or a datagram too large for a UDP length is refused.
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 1);
        assert!(rebuild_headers(&mut buffer, 48, 16, v6, IpAddr::V4(Ipv4Addr::LOCALHOST)).is_none());
    }

    #[test]
    fn progress_modes_parse() {
        assert_eq!(ProgressMode::parse("busy"), Some(ProgressMode::Busy));
        assert_eq!(ProgressMode::parse("event"), Some(ProgressMode::Event));
        assert_eq!(ProgressMode::parse("hybrid"), Some(ProgressMode::HYBRID));
        assert_eq!(ProgressMode::parse("hybrid:7"), Some(ProgressMode::Hybrid { spin_us: 7 }));
        assert_eq!(ProgressMode::parse("spin"), None);
        for mode in [ProgressMode::Busy, ProgressMode::Event, ProgressMode::Hybrid { spin_us: 9 }] {
            assert_eq!(ProgressMode::parse(&mode.to_string()), Some(mode));
        }
    }

    #[test]
    fn config_from_variables() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let c = UdpConfig::from_vars(vars(&[])).unwrap();
        assert_eq!(c.addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let c = UdpConfig::from_vars(vars(&[
            ("UROCE_ADDR", "127.0.0.2"),
            ("UROCE_PROGRESS", "event"),
            ("UROCE_FAULTS", "loss=0.5,seed=3"),
            ("UROCE_OFFLOAD", "1"),
        ]))
        .unwrap();
        assert_eq!(c.addr, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(c.progress, ProgressMode::Event);
        assert_eq!(c.faults.unwrap().seed, 3);
        assert!(c.offload);
        assert!(UdpConfig::from_vars(vars(&[("UROCE_ADDR", "nowhere")])).is_err());
        assert!(UdpConfig::from_vars(vars(&[("UROCE_PROGRESS", "fast")])).is_err());
        assert!(UdpConfig::from_vars(vars(&[("UROCE_FAULTS", "loss=3")])).is_err());
        assert!(UdpConfig::from_vars(vars(&[("UROCE_OFFLOAD", "maybe")])).is_err());
    }

    #[test]
    fn addresses_that_cannot_be_a_devices_are_refused_by_name() {
        let refused = |pairs: &[(&str, &str)]| {
            let var =
                |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
            match UdpConfig::from_vars(var) {
                Ok(c) => panic!("{pairs:?} accepted as {}", c.addr),
                Err(e) => e.to_string(),
            }
        };
        let accepted = |pairs: &[(&str, &str)]| {
            let var =
                |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
            UdpConfig::from_vars(var).unwrap_or_else(|e| panic!("{pairs:?} refused: {e}")).addr
        };
        for (value, why) in [
            ("255.255.255.255", "limited broadcast"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
        ] {
            let e = refused(&[("UROCE_ADDR", value)]);
            assert!(e.contains(&format!("UROCE_ADDR=`{value}`")) && e.contains(why), "{e}");
        }
        // A subnet's network and broadcast addresses, given by the prefix
        // or by the L2 transport's default /24.
        let link = ("UROCE_LINK", "127.0.0.1:47100,127.0.0.1:47101");
        let e = refused(&[("UROCE_ADDR", "169.254.255.255/16"), link]);
        assert!(
            e.contains(
                "UROCE_ADDR=`169.254.255.255/16` cannot be a device address: it is the broadcast \
                 address of 169.254.0.0/16"
            ),
            "{e}"
        );
        let e = refused(&[("UROCE_ADDR", "10.1.2.0/24"), link]);
        assert!(e.contains("the network address of 10.1.2.0/24"), "{e}");
        let e = refused(&[("UROCE_ADDR", "10.1.2.255"), link]);
        assert!(e.contains("the broadcast address of 10.1.2.0/24"), "{e}");
        let e = refused(&[("UROCE_ADDR", "10.1.2.127/25")]);
        assert!(e.contains("10.1.2.0/25"), "the prefix alone says the subnet: {e}");
        for (value, ip) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.255.255.254", "127.255.255.254"),
            ("::1", "::1"),
            ("fe80::1", "fe80::1"),
            ("169.254.7.1/16", "169.254.7.1"),
            ("10.0.0.255/16", "10.0.0.255"),
            ("192.168.1.0/23", "192.168.1.0"),
            ("10.0.0.0/31", "10.0.0.0"),
            ("10.0.0.1/31", "10.0.0.1"),
            ("10.0.0.7/32", "10.0.0.7"),
            ("8.8.8.8", "8.8.8.8"),
            ("240.0.0.1", "240.0.0.1"),
            ("2001:db8::/64", "2001:db8::"),
        ] {
            assert_eq!(accepted(&[("UROCE_ADDR", value)]).to_string(), ip, "{value}");
        }
        assert_eq!(
            accepted(&[("UROCE_ADDR", "10.1.2.255")]).to_string(),
            "10.1.2.255",
            "no link, no subnet"
        );
        // Opening checks the address too (a flag may set it).
        let mut config = UdpConfig::new(IpAddr::V4(Ipv4Addr::BROADCAST));
        config.background = false;
        let e = UdpDevice::open(config).expect_err("a broadcast device");
        assert!(e.to_string().contains("255.255.255.255 cannot be a device address"), "{e}");
    }
}
