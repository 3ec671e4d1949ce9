//! A device's configuration: `UdpConfig`, from code or from the
//! environment (`UROCE_ADDR`, `UROCE_PROGRESS`, `UROCE_FAULTS`,
//! `UROCE_CAPTURE`, `UROCE_OFFLOAD`, `UROCE_LINK`, `UROCE_TAP`,
//! `UROCE_MTU`, `UROCE_CM_RESPONSE_TIMEOUT`, `UROCE_CM_RETRIES`, and the
//! fault scenario's `UROCE_SCENARIO`, `UROCE_SCENARIO_SEED`,
//! `UROCE_SCENARIO_PARAMS`, `UROCE_SCENARIO_ROLE`, `UROCE_SCENARIO_REPORT`,
//! `UROCE_SCENARIO_SUMMARY`),
//! and the checks on a device address.

use super::tap;
use super::UdpError;
use crate::link::{LinkAttach, LinkConfig};
use core::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use uroce_faults::scenario::Scenario;
use uroce_faults::FaultSpec;
use uroce_hca::config::{HcaConfig, SourcePortPolicy};

mod addr;
pub use addr::{device_addr_problem, parse_addr, parse_addr_prefix};

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
    /// Faults applied to outgoing packets. With a scenario, they replace
    /// the scenario's background faults (`[scenario] faults`).
    pub faults: Option<FaultSpec>,
    /// A fault scenario the device runs at its port (`UROCE_SCENARIO`):
    /// see [`ScenarioConfig`].
    pub scenario: Option<ScenarioConfig>,
    /// Write every packet sent and received to this pcap file.
    pub capture: Option<PathBuf>,
    /// Segmentation offload (on by default; `UROCE_OFFLOAD=0` turns it
    /// off): UDP GSO on send (equal-sized packets to one destination leave
    /// in one call); a kernel that refuses it turns it off by itself.
    /// Receivers always accept GRO. The kernel refuses GSO without UDP
    /// checksums, so datagrams then carry one (legal RoCEv2: the ICRC masks
    /// it, and rxe accepts it). See `docs/runtime.md`.
    pub offload: bool,
    /// Send doorbells rung within this many nanoseconds of the previous
    /// one, with no poll between, leave together with the application's
    /// next call (0: every doorbell sends at once). It applies where
    /// different QPs' packets can leave in one send call: a shared source
    /// port, or the L2 transport; with a socket per QP's port, holding
    /// would only delay. See `doorbells.rs`.
    pub doorbell_burst_ns: u64,
    /// What becomes of the HCA's decisions ([`uroce_hca::trace`]).
    pub trace: TraceMode,
    /// The HCA's limits.
    pub hca: HcaConfig,
    /// Bytes of host memory the device may allocate for rings and MRs.
    pub memory_budget_bytes: u64,
    /// The L2 transport: the device is a host on a link of raw Ethernet
    /// frames (`UROCE_LINK`, or a TAP: `UROCE_TAP`) instead of sending UDP
    /// through the kernel.
    pub link: Option<LinkConfig>,
}

/// A fault scenario for a device (design note
/// `docs/design-notes/fault-scenarios.md`; `docs/runtime.md` §Scenarios).
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    /// The scenario, its `[params]` overrides applied.
    pub scenario: Scenario,
    /// The engine's seed (`UROCE_SCENARIO_SEED`; default the file's
    /// `[scenario] seed`).
    pub seed: u64,
    /// The process's role (`UROCE_SCENARIO_ROLE`): rules with a `role`
    /// apply only in a process with that role.
    pub role: Option<String>,
    /// A file the firings and the summary are appended to
    /// (`UROCE_SCENARIO_REPORT`).
    pub report: Option<PathBuf>,
    /// Whether the summary at the end goes to standard error as well as
    /// to the report (`UROCE_SCENARIO_SUMMARY=report`: to the report only,
    /// as `uroce run` asks, which prints its own summary of the report).
    pub summary_on_stderr: bool,
}

impl ScenarioConfig {
    /// A scenario with its own seed, no role and no report.
    pub fn new(scenario: Scenario) -> ScenarioConfig {
        ScenarioConfig {
            seed: scenario.seed,
            scenario,
            role: None,
            report: None,
            summary_on_stderr: true,
        }
    }

    /// Loads `UROCE_SCENARIO`'s value: a file when it contains `/` or ends
    /// in `.toml` (read here, parsed with [`Scenario::parse`]), else a name
    /// in the library. An error is the [`ScenarioError`]'s text (file,
    /// line, column, what is wrong, the line and a caret), or says why the
    /// file cannot be read.
    ///
    /// [`ScenarioError`]: uroce_faults::scenario::ScenarioError
    pub fn load(name_or_path: &str) -> Result<Scenario, UdpError> {
        let name_or_path = name_or_path.trim();
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            let text = std::fs::read_to_string(name_or_path).map_err(|e| {
                UdpError::Config(format!(
                    "UROCE_SCENARIO: cannot read the scenario file {name_or_path}: {e}"
                ))
            })?;
            Scenario::parse(&text, name_or_path).map_err(|e| UdpError::Config(e.to_string()))
        } else {
            Scenario::load(name_or_path).map_err(|e| UdpError::Config(e.to_string()))
        }
    }

    /// Parses `UROCE_SCENARIO_PARAMS`: `name=value,...` (integers).
    pub fn parse_params(text: &str) -> Result<Vec<(String, i64)>, UdpError> {
        let bad = |why: String| UdpError::Config(format!("UROCE_SCENARIO_PARAMS=`{text}`: {why}"));
        let mut params = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((name, value)) = item.split_once('=') else {
                return Err(bad(format!("`{item}` is not name=value")));
            };
            let value: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{}` is not an integer", value.trim())))?;
            params.push((name.trim().to_owned(), value));
        }
        Ok(params)
    }

    /// The scenario part of the environment: `None` without
    /// `UROCE_SCENARIO`; the other `UROCE_SCENARIO_*` variables without it
    /// are an error (they would be ignored).
    fn from_vars(
        var: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<ScenarioConfig>, UdpError> {
        let set = |name: &str| var(name).filter(|t| !t.trim().is_empty());
        let Some(name) = set("UROCE_SCENARIO") else {
            for name in [
                "UROCE_SCENARIO_SEED",
                "UROCE_SCENARIO_PARAMS",
                "UROCE_SCENARIO_ROLE",
                "UROCE_SCENARIO_REPORT",
                "UROCE_SCENARIO_SUMMARY",
            ] {
                if set(name).is_some() {
                    return Err(UdpError::Config(format!(
                        "{name} is for a fault scenario: set UROCE_SCENARIO too"
                    )));
                }
            }
            return Ok(None);
        };
        let mut scenario = ScenarioConfig::load(&name)?;
        if let Some(text) = set("UROCE_SCENARIO_PARAMS") {
            let params = ScenarioConfig::parse_params(&text)?;
            scenario =
                scenario.with_params(&params).map_err(|e| UdpError::Config(e.to_string()))?;
        }
        let mut config = ScenarioConfig::new(scenario);
        if let Some(text) = set("UROCE_SCENARIO_SEED") {
            config.seed = text.trim().parse().map_err(|_| {
                UdpError::Config(format!(
                    "UROCE_SCENARIO_SEED=`{text}`: expected an unsigned integer"
                ))
            })?;
        }
        config.role = set("UROCE_SCENARIO_ROLE").map(|r| r.trim().to_owned());
        config.report = set("UROCE_SCENARIO_REPORT").map(PathBuf::from);
        config.summary_on_stderr = match set("UROCE_SCENARIO_SUMMARY").as_deref().map(str::trim) {
            None | Some("stderr") => true,
            Some("report") => false,
            Some(other) => {
                return Err(UdpError::Config(format!(
                    "UROCE_SCENARIO_SUMMARY=`{other}`: expected `stderr` or `report`"
                )))
            }
        };
        Ok(Some(config))
    }
}

/// What the runtime does with the HCA's decisions (see
/// `uroce_hca::trace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    /// Not recorded.
    Off,
    /// Kept (the newest [`TRACE_CAPACITY`]) for [`super::UdpDevice::take_steps`].
    Keep,
    /// Printed on standard error as they are taken, one line each:
    /// `trace <device address> <microseconds since open> <decision>`.
    Print,
}

/// Decisions a device keeps for its application when tracing.
pub const TRACE_CAPACITY: usize = 1 << 16;

impl UdpConfig {
    /// A device at `addr` with defaults: hybrid progress, background
    /// thread on, no faults, no capture, offload on.
    pub fn new(addr: IpAddr) -> UdpConfig {
        UdpConfig {
            addr,
            progress: ProgressMode::HYBRID,
            background: true,
            faults: None,
            scenario: None,
            capture: None,
            offload: true,
            doorbell_burst_ns: super::doorbells::BURST_WINDOW_NS,
            trace: TraceMode::Off,
            hca: HcaConfig::default(),
            memory_budget_bytes: 16 << 30,
            link: None,
        }
    }

    /// The configuration the environment asks for: `UROCE_ADDR` (default
    /// 127.0.0.1), `UROCE_PROGRESS` (`busy`, `event`, `hybrid[:spin_us]`),
    /// `UROCE_FAULTS` (see [`FaultSpec::parse`]), `UROCE_CAPTURE` (a pcap
    /// path), `UROCE_OFFLOAD` (`1` for GSO), `UROCE_SOURCE_PORTS` (`per-qp`,
    /// rxe's, or `shared`: see [`SourcePortPolicy`]), `UROCE_TRACE` (`1`: print the
    /// HCA's decisions on standard error), and for the L2 transport
    /// `UROCE_LINK` (`<local ip:port>,<remote ip:port>`) or `UROCE_TAP` (a
    /// TAP interface's name), with `UROCE_ADDR`'s `/prefix` saying what is
    /// on-link, and `UROCE_MTU` (the link MTU). `UROCE_CM_RESPONSE_TIMEOUT`
    /// (0..=31, an IBA time exponent) and `UROCE_CM_RETRIES` (0..=15) set
    /// the CM's response timeout and retries (rdma_cm's 20 and 15 by
    /// default: [`HcaConfig::cm_response_timeout`]). `UROCE_TX_BUDGET`
    /// sets the device's budget of unacknowledged packets
    /// ([`HcaConfig::max_device_unacked_psns`]). `UROCE_ACK_PROBE_US`
    /// sets ACKs on demand's probe time, 0 turning them off
    /// ([`HcaConfig::ack_probe_ns`]). `UROCE_SCENARIO` (a
    /// library name or a file) runs a fault scenario at the device's port,
    /// with `UROCE_SCENARIO_SEED`, `UROCE_SCENARIO_PARAMS` (`k=v,...`),
    /// `UROCE_SCENARIO_ROLE` and `UROCE_SCENARIO_REPORT` (a file): see
    /// [`ScenarioConfig`].
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
        config.scenario = ScenarioConfig::from_vars(&var)?;
        if let Some(path) = var("UROCE_CAPTURE").filter(|p| !p.is_empty()) {
            config.capture = Some(PathBuf::from(path));
        }
        if let Some(text) = var("UROCE_TRACE") {
            config.trace = match text.trim() {
                "1" | "on" | "yes" | "true" => TraceMode::Print,
                "0" | "off" | "no" | "false" | "" => TraceMode::Off,
                _ => {
                    return Err(UdpError::Config(format!("UROCE_TRACE=`{text}`: expected 0 or 1")))
                }
            };
        }
        if let Some(text) = var("UROCE_SOURCE_PORTS") {
            config.hca.source_ports = SourcePortPolicy::parse(&text).ok_or_else(|| {
                UdpError::Config(format!("UROCE_SOURCE_PORTS=`{text}`: expected per-qp or shared"))
            })?;
        }
        if let Some(t) = number_var(&var, "UROCE_CM_RESPONSE_TIMEOUT", 31, "an IBA time exponent")?
        {
            config.hca.cm_response_timeout = t;
        }
        if let Some(n) = number_var(&var, "UROCE_CM_RETRIES", 15, "CM retries")? {
            config.hca.cm_max_retries = n;
        }
        if let Some(text) = var("UROCE_TX_BUDGET").filter(|t| !t.trim().is_empty()) {
            config.hca.max_device_unacked_psns = match text.trim().parse::<u32>() {
                Ok(n) if (1..1 << 24).contains(&n) => n,
                _ => {
                    return Err(UdpError::Config(format!(
                        "UROCE_TX_BUDGET=`{text}`: expected the device's unacknowledged \
                         packets at most, 1 to 16777215"
                    )))
                }
            };
        }
        if let Some(text) = var("UROCE_ACK_PROBE_US").filter(|t| !t.trim().is_empty()) {
            config.hca.ack_probe_ns = match text.trim().parse::<u64>() {
                Ok(us) if us <= 1_000_000 => us * 1_000,
                _ => {
                    return Err(UdpError::Config(format!(
                        "UROCE_ACK_PROBE_US=`{text}`: expected microseconds, 0 (an ACK \
                         asked for every message, as rxe) to 1000000"
                    )))
                }
            };
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

/// Variable `name` as a number from 0 to `max` (`what` it is), or `None`
/// when unset or empty.
fn number_var(
    var: &impl Fn(&str) -> Option<String>,
    name: &str,
    max: u8,
    what: &str,
) -> Result<Option<u8>, UdpError> {
    let Some(text) = var(name).filter(|t| !t.trim().is_empty()) else { return Ok(None) };
    match text.trim().parse::<u8>() {
        Ok(n) if n <= max => Ok(Some(n)),
        _ => Err(UdpError::Config(format!("{name}=`{text}`: expected {what}, 0 to {max}"))),
    }
}

#[cfg(test)]
mod tests;
