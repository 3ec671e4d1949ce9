//! The UDP runtime: a uroce device embedded in the application's process,
//! driving the sans-IO [`Hca`] with real time and kernel UDP sockets.
//!
//! - **Addresses.** The device owns one IP address (config or
//!   `UROCE_ADDR`), receives on `addr:4791`, and sends each QP's packets
//!   from the UDP source port rxe computes for it, or with
//!   `UROCE_SOURCE_PORTS=shared` from one port for all (one socket per
//!   source port in use, bound to `addr:port`), to destination port 4791. Its GID
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
//!   received as a full Ethernet frame to a pcap file (the simulated
//!   fabric's writer, `uroce_wire::pcap::CaptureWriter`); `faults` applies
//!   seeded loss, duplication, delay, reordering and corruption to
//!   outgoing packets (`uroce_faults`, the fabric's vocabulary and draws).
//!
//! Files: `config.rs` (configuration and the environment), `transport.rs`
//! (the `Transport` of three kinds: kernel UDP, the L2 link
//! over UDP-carried frames, a TAP), `sockets.rs` (kernel UDP: a socket per
//! source port, `sendmmsg` and GSO batching), `groups.rs` (kernel UDP: a
//! socket per multicast group joined), `datapath.rs` (packets
//! between the HCA and the transport, faults, capture; its receive side in
//! `receive.rs`, the scenario's ingress and egress in `scenario_path.rs`), `doorbells.rs`
//! (send doorbells rung back to back leave together), `progress.rs` (the
//! application's thread and the background thread), `capture.rs`,
//! `stats.rs`, `sys.rs` and `sys_send.rs` (the socket calls std lacks), `tap.rs`,
//! `link_tcp.rs` (the tools' TCP over the link).

mod capture;
mod config;
mod datapath;
mod doorbells;
mod groups;
mod link_tcp;
mod progress;
mod receive;
mod scenario;
mod scenario_path;
mod scenario_summary;
mod sockets;
mod stats;
mod sys;
mod sys_send;
mod tap;
mod transport;

pub use config::{
    device_addr_problem, parse_addr, parse_addr_prefix, ProgressMode, ScenarioConfig, TraceMode,
    UdpConfig, TRACE_CAPACITY,
};
pub use link_tcp::{LinkTcpListener, LinkTcpStream};

/// The runtime's own socket calls, without the HCA: for measuring uroce's
/// socket style alone (`uroce-perf udp-pingpong`, the reference of issue
/// 14's P2), with exactly the options and batching the runtime uses.
pub mod raw {
    pub use super::sockets::SOCKET_BUFFER_BYTES;
    pub use super::sys::{
        enable_gro, receive_batch, receive_one, send_batch, set_dont_fragment, set_no_udp_checksum,
        set_receive_buffer, set_send_buffer, ReceiveScratch, Received, SendScratch, RECEIVE_MAX,
        SEND_MAX,
    };
}
pub use stats::UdpStats;
pub use uroce_faults::scenario::{PortSummary, Scenario, ScenarioError};
pub use uroce_faults::{FaultSpec, FaultSpecError};

use crate::link::path_mtu_for_link;
use crate::process_mem::ProcessMemory;
use capture::Capture;
use core::net::IpAddr;
use datapath::Io;
use progress::Runtime;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use transport::Transport;
use uroce_device::command::Gid;
use uroce_faults::Injector;
use uroce_hca::config::{Ipv4IdPolicy, SourcePortPolicy};
use uroce_hca::{Driver, Hca, SharedHca};

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

/// A uroce device on the real network. Keep it alive while the
/// application uses the device: dropping it stops the runtime.
pub struct UdpDevice {
    hca: SharedHca,
    runtime: Arc<Runtime>,
    /// On the L2 transport (`UROCE_LINK`, `UROCE_TAP`).
    is_link: bool,
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
    /// Opens a device: binds `addr:4791` (or joins its link), creates the
    /// HCA, starts the background thread.
    pub fn open(config: UdpConfig) -> Result<UdpDevice, UdpError> {
        let addr = config.addr;
        let prefix_len = config.link.as_ref().map(|link| link.prefix_len);
        if let Some(why) = device_addr_problem(addr, prefix_len) {
            return Err(UdpError::Config(format!("{addr} cannot be a device address: {why}")));
        }
        let mut hca_config = config.hca.clone();
        match &config.link {
            Some(link) => {
                // Every byte of the frame is ours: IPv4 IDs count, as rxe's
                // do, and the port's MTU follows the link's.
                hca_config.ipv4_id = Ipv4IdPolicy::Counter;
                hca_config.active_mtu = path_mtu_for_link(link.mtu).ok_or_else(|| {
                    UdpError::Config(format!("UROCE_MTU={} is too small for RoCE", link.mtu))
                })?;
            }
            None => hca_config.ipv4_id = Ipv4IdPolicy::Zero,
        }
        // Linux's CM draws its comm IDs at random at boot. A device opened
        // again at the same address must not reuse those of its last life:
        // a peer still in time-wait would take its REQ for a stale one. A
        // seed set in the configuration (tests) is kept.
        if hca_config.cm_seed == 0 {
            hca_config.cm_seed = random_seed();
        }
        let (mut transport, receive_buffer_bytes) = Transport::open(&config, random_seed())?;
        let watched = transport.take_watched();
        let is_link = transport.is_link();
        // Held doorbells pay where different QPs' packets can share a send
        // call: not from a socket per QP.
        let batches_across_qps = is_link || hca_config.source_ports == SourcePortPolicy::Shared;
        let doorbell_burst_ns = if batches_across_qps { config.doorbell_burst_ns } else { 0 };
        let ready_fd = transport
            .ready_fd()
            .map_err(|e| UdpError::Io("duplicating the transport's descriptor".into(), e))?;
        let gids = vec![Gid::link_local_from_mac(mac_for(addr)), Gid::from_ip(addr)];
        let memory = Arc::new(
            ProcessMemory::new(config.memory_budget_bytes)
                .map_err(|e| UdpError::Config(format!("device memory: {e}")))?,
        );
        let hca = Hca::new(hca_config, gids, memory.clone())
            .map_err(|e| UdpError::Config(e.to_string()))?;
        let hca = SharedHca::new(hca, memory);
        // Under a scenario the capture is pcapng: firings are frame comments.
        let format = if config.scenario.is_some() {
            uroce_wire::pcap::CaptureFormat::PcapNg
        } else {
            uroce_wire::pcap::CaptureFormat::Pcap
        };
        let capture = config.capture.as_deref().map(|p| Capture::create(p, format)).transpose()?;
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|e| UdpError::Io("creating an eventfd".into(), e.into()))?;
        let stats = UdpStats { receive_buffer_bytes, ..UdpStats::default() };
        // One engine per device: a scenario takes `UROCE_FAULTS` as its
        // background faults, else they are the injector's.
        let (faults, scenario) = match &config.scenario {
            Some(s) => (None, Some(scenario::ScenarioPort::new(s, addr, config.faults)?)),
            None => (config.faults.map(Injector::new), None),
        };
        let has_scenario = scenario.is_some();
        if config.trace != TraceMode::Off {
            hca.lock().trace_steps(TRACE_CAPACITY);
        }
        let runtime = Arc::new(Runtime {
            hca: hca.clone(),
            addr,
            mode: config.progress,
            print_steps: config.trace == TraceMode::Print,
            ready_fd,
            watched,
            wake,
            epoch: std::time::Instant::now(),
            activity: Default::default(),
            app_sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            background_idle: AtomicBool::new(false),
            background_until_ns: AtomicU64::new(u64::MAX),
            background_busy_looks: AtomicU64::new(0),
            holds_doorbells: doorbell_burst_ns > 0,
            io: Mutex::new(Io::new(transport, faults, scenario, capture, stats, doorbell_burst_ns)),
        });
        if has_scenario {
            scenario::register_for_exit(&runtime);
        }
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
        Ok(UdpDevice { hca, runtime, is_link, thread, closed: Arc::new(Mutex::new(None)) })
    }

    /// Whether the device injects faults (`UROCE_FAULTS`) or runs a fault
    /// scenario (`UROCE_SCENARIO`): a program should then linger before it
    /// closes, for its peer's retransmissions.
    pub fn has_faults(&self) -> bool {
        let io = lock(&self.runtime.io);
        io.faults.is_some() || io.scenario.is_some()
    }

    /// Whether the device runs a fault scenario (`UROCE_SCENARIO`).
    pub fn has_scenario(&self) -> bool {
        lock(&self.runtime.io).scenario.is_some()
    }

    /// The scenario's summary now, as printed at close (`None` without a
    /// scenario): per rule matched and fired, the port's counts.
    pub fn scenario_summary(&self) -> Option<uroce_faults::scenario::PortSummary> {
        lock(&self.runtime.io).scenario.as_ref().map(|sp| sp.port.summary())
    }

    /// Whether the device is on the L2 transport (`UROCE_LINK` or
    /// `UROCE_TAP`).
    pub fn is_link(&self) -> bool {
        self.is_link
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

    /// The HCA's decisions since the last call, with their times (a device
    /// opened with [`TraceMode::Keep`]; none otherwise).
    pub fn take_steps(&self) -> Vec<(uroce_hca::Instant, uroce_hca::trace::Step)> {
        let mut hca = self.hca.lock();
        std::iter::from_fn(|| hca.poll_step()).collect()
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
        self.runtime.write_scenario_summary();
    }
}

/// [`lock`] without waiting: `None` while another thread holds the mutex.
fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Locks a runtime mutex; a panic elsewhere leaves the I/O state usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A seed nobody else has (smoltcp's TCP sequence numbers and ports):
/// std's per-process random hash keys over the time.
pub(crate) fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}
