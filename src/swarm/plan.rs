//! What a run does: the flags the user gave, and every other choice drawn
//! from the seed.

use uroce_sim::{Probability, Scenario, SimRng};
use uroce_verbs::Mtu;

/// Send work requests a run posts when `--ops` is not given.
pub const DEFAULT_OPS: u64 = 1_000;
/// The most send work requests a run may post.
pub const MAX_OPS: u64 = 10_000_000;
/// The most connections (`--qps`) a run may build.
pub const MAX_QPS: u32 = 1_000;
/// The most nodes (`--nodes`) a run may build.
pub const MAX_NODES: u32 = 16;
/// The most link outages, partitions or application pauses (each) a run
/// may draw.
pub const MAX_DISRUPTIONS: u32 = 16;

/// A fault scenario a run attaches to its world (`--scenario`, `--role`),
/// through [`crate::world::WorldBuilder::scenario`]: the same path the
/// harness (`uroce-harness`) and the scenario tests take.
#[derive(Debug, Clone, PartialEq)]
pub struct SwarmScenario {
    /// The scenario as given: a library name or a file's path (for the
    /// command that reproduces the run).
    pub arg: String,
    /// The scenario.
    pub scenario: Scenario,
    /// Node roles (`--role node=R`), in the order given.
    pub roles: Vec<(usize, String)>,
}

impl SwarmScenario {
    /// The scenario's flags on `uroce sim`'s command line.
    pub fn flags(&self) -> String {
        let mut flags = format!(" --scenario {}", self.arg);
        for (node, role) in &self.roles {
            flags.push_str(&format!(" --role {node}={role}"));
        }
        flags
    }
}

/// The scenario `--scenario ARG` names: a scenario of the library
/// (`uroce scenarios`) by name, else a scenario file's path.
pub fn load_scenario(arg: &str) -> Result<Scenario, String> {
    if uroce_faults::scenario::library::get(arg).is_some() {
        return Scenario::load(arg).map_err(|e| e.to_string());
    }
    let text = std::fs::read_to_string(arg).map_err(|e| {
        format!(
            "`{arg}`: neither a scenario of the library ({}) nor a file that reads: {e}",
            uroce_faults::scenario::library::NAMES.join(", ")
        )
    })?;
    Scenario::parse(&text, arg).map_err(|e| e.to_string())
}

/// `--role node=R`: node `node` has the role `R`.
pub fn parse_role(text: &str) -> Result<(usize, String), String> {
    let (node, role) =
        text.split_once('=').ok_or_else(|| format!("`{text}`: not NODE=ROLE (e.g. 0=server)"))?;
    let node = node.trim().parse().map_err(|_| format!("`{node}` is not a node number"))?;
    let role = role.trim();
    if role.is_empty() {
        return Err(format!("`{text}`: the role is empty"));
    }
    Ok((node, role.to_string()))
}

/// What the user asked for; `None` lets the seed choose.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwarmConfig {
    /// The seed: every choice of the run derives from it.
    pub seed: u64,
    /// Send work requests to post ([`DEFAULT_OPS`] when `None`).
    pub ops: Option<u64>,
    /// Connections: pairs of QPs (RC, UC or UD), 1 to [`MAX_QPS`].
    pub qps: Option<u32>,
    /// Nodes (HCAs) on the fabric, 1 to [`MAX_NODES`].
    pub nodes: Option<u32>,
    /// Chance that a packet is lost.
    pub loss: Option<Probability>,
    /// Chance that a packet is duplicated.
    pub dup: Option<Probability>,
    /// Chance that a packet is held back (reordered).
    pub reorder: Option<Probability>,
    /// Chance that one bit of a packet is flipped.
    pub corrupt: Option<Probability>,
    /// Path MTU of every connection (and the ports' active MTU).
    pub mtu: Option<Mtu>,
    /// Leave FENCE out of the workload (the seed's other choices stay the
    /// same).
    pub no_fence: bool,
    /// Accept RETRY_EXC_ERR at any fault rate (by default only where the
    /// fault rates make seven retries without progress plausible).
    pub allow_retry_exhaustion: bool,
    /// The adversary's rate: the chance that a delivered packet makes it
    /// inject one of its own (never: no adversary).
    pub adversary: Option<Probability>,
    /// Link outages during the faulty phase (both ways or one way), up to
    /// [`MAX_DISRUPTIONS`].
    pub outages: Option<u32>,
    /// Partitions during the faulty phase (a set of nodes cut off from
    /// the rest, or one node isolated), up to [`MAX_DISRUPTIONS`].
    pub partitions: Option<u32>,
    /// Times a node's application stops posting and polling for a while,
    /// up to [`MAX_DISRUPTIONS`].
    pub pauses: Option<u32>,
    /// A fault scenario on every node's port (none by default: the run,
    /// its draws and its trace hash are those of a run without the flag).
    pub scenario: Option<SwarmScenario>,
}

/// A resolved run: every choice made. Two runs with equal plans do the
/// same thing, and [`Plan::command_line`] gives the `uroce sim` command
/// whose plan is this one.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The seed.
    pub seed: u64,
    /// Send work requests to post.
    pub ops: u64,
    /// Connections (each two QPs).
    pub qps: u32,
    /// Nodes.
    pub nodes: u32,
    /// Packet loss.
    pub loss: Probability,
    /// Packet duplication.
    pub dup: Probability,
    /// Packet reordering.
    pub reorder: Probability,
    /// Bit corruption.
    pub corrupt: Probability,
    /// Path MTU.
    pub mtu: Mtu,
    /// Whether WRs may carry FENCE.
    pub fence: bool,
    /// Accept RETRY_EXC_ERR whatever the fault rates.
    pub allow_retry_exhaustion: bool,
    /// One-way fabric latency (seed-chosen).
    pub latency_ns: u64,
    /// Port speed (seed-chosen; `None`: infinitely fast).
    pub port_rate_bits_per_sec: Option<u64>,
    /// Largest extra delay of a reordered packet (seed-chosen).
    pub reorder_max_delay_ns: u64,
    /// HCA: unacknowledged PSNs a requester may have (seed-chosen).
    pub max_unacked_psns: u32,
    /// HCA: the responder ACKs at least every this many packets
    /// (seed-chosen).
    pub max_pkt_per_ack: u32,
    /// HCA: local operations and refused WQEs a QP finishes per
    /// scheduling turn (seed-chosen).
    pub max_packets_per_turn: u32,
    /// HCA: packets a QP sends in a row before the next QP's turn
    /// (seed-chosen).
    pub max_burst_packets: u32,
    /// HCA: the device-wide budget of unacknowledged PSNs (seed-chosen).
    pub max_device_unacked_psns: u32,
    /// HCA: ACKs on demand, the idle time before an ACK probe (0: an
    /// AckReq at the end of every message; seed-chosen).
    pub ack_probe_ns: u64,
    /// The adversary's rate: for each packet the fabric delivers, the
    /// chance that it injects one (never: no adversary node at all).
    pub adversary: Probability,
    /// Link outages in the faulty phase.
    pub outages: u32,
    /// Partitions in the faulty phase.
    pub partitions: u32,
    /// Application pauses in the faulty phase.
    pub pauses: u32,
    /// The fault scenario on the nodes' ports, if any.
    pub scenario: Option<SwarmScenario>,
}

const MTUS: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];

/// Fault ranges in ppm, `(low, high)` for loss, dup, reorder, corrupt.
type Ranges = [(u32, u32); 4];
const NO_FAULTS: Ranges = [(0, 0); 4];
const LIGHT: Ranges = [(0, 20_000), (0, 10_000), (0, 50_000), (0, 10_000)];
const MEDIUM: Ranges = [(20_000, 100_000), (0, 50_000), (0, 100_000), (0, 30_000)];
const HEAVY: Ranges = [(100_000, 300_000), (0, 100_000), (0, 200_000), (0, 50_000)];

/// The adversary's rates in ppm: low, medium and high ranges.
const ADVERSARY_LOW: (u32, u32) = (1_000, 10_000);
const ADVERSARY_MEDIUM: (u32, u32) = (10_000, 50_000);
const ADVERSARY_HIGH: (u32, u32) = (50_000, 250_000);

impl Plan {
    /// Resolves a configuration. The seed's choices are drawn in a fixed
    /// order whether or not a flag overrides them, so a plan printed by
    /// [`Plan::command_line`] reproduces the same run.
    pub fn resolve(config: &SwarmConfig) -> Plan {
        let mut r = SimRng::new(config.seed ^ 0x5357_4152_4d50_4c4e);
        let nodes = 2 + r.below(3) as u32;
        let qps = 3 + r.below(14) as u32;
        let mtu = MTUS[r.below(MTUS.len() as u64) as usize];
        let ranges = match r.below(100) {
            0..=14 => NO_FAULTS,
            15..=44 => LIGHT,
            45..=79 => MEDIUM,
            _ => HEAVY,
        };
        let mut fault = |(low, high): (u32, u32)| {
            let d = r.below(1_000_001);
            let ppm = u64::from(low) + d * u64::from(high - low) / 1_000_000;
            Probability::from_ppm(ppm as u32)
        };
        let loss = fault(ranges[0]);
        let dup = fault(ranges[1]);
        let reorder = fault(ranges[2]);
        let corrupt = fault(ranges[3]);
        let latency_ns = 1_000 + r.below(9_001);
        let port_rate_bits_per_sec = match r.below(4) {
            0 => None,
            1 => Some(10_000_000_000),
            2 => Some(25_000_000_000),
            _ => Some(100_000_000_000),
        };
        let reorder_max_delay_ns = 5_000 + r.below(1_995_001);
        let max_unacked_psns = [8, 32, 128][r.below(3) as usize];
        let max_pkt_per_ack = [1, 8, 64][r.below(3) as usize];
        let max_packets_per_turn = [1, 4, 64][r.below(3) as usize];
        // Drawn last, so that adding it changed none of the choices above.
        let adversary_range = match r.below(100) {
            0..=34 => (0, 0),
            35..=59 => ADVERSARY_LOW,
            60..=84 => ADVERSARY_MEDIUM,
            _ => ADVERSARY_HIGH,
        };
        let adversary = {
            let (low, high) = adversary_range;
            let d = r.below(1_000_001);
            Probability::from_ppm((u64::from(low) + d * u64::from(high - low) / 1_000_000) as u32)
        };
        // Drawn after the adversary, for the same reason: a seed whose
        // draws give none of them runs as it did before they existed.
        let disrupted = r.below(100) >= 40;
        let (outages, partitions, pauses) = (r.below(4), r.below(3), r.below(5));
        let (outages, partitions, pauses) =
            if disrupted { (outages as u32, partitions as u32, pauses as u32) } else { (0, 0, 0) };
        // Drawn after the disruptions, for the same reason.
        let max_burst_packets = [1, 4, 64][r.below(3) as usize];
        let max_device_unacked_psns = [16, 128, 1024][r.below(3) as usize];
        // Drawn last, for the same reason.
        let ack_probe_ns = [0, 20_000, 1_000_000][r.below(3) as usize];
        let disruptions = |given: Option<u32>, drawn| given.unwrap_or(drawn).min(MAX_DISRUPTIONS);
        Plan {
            seed: config.seed,
            ops: config.ops.unwrap_or(DEFAULT_OPS).min(MAX_OPS),
            qps: config.qps.unwrap_or(qps).clamp(1, MAX_QPS),
            nodes: config.nodes.unwrap_or(nodes).clamp(1, MAX_NODES),
            loss: config.loss.unwrap_or(loss),
            dup: config.dup.unwrap_or(dup),
            reorder: config.reorder.unwrap_or(reorder),
            corrupt: config.corrupt.unwrap_or(corrupt),
            mtu: config.mtu.unwrap_or(mtu),
            fence: !config.no_fence,
            allow_retry_exhaustion: config.allow_retry_exhaustion,
            latency_ns,
            port_rate_bits_per_sec,
            reorder_max_delay_ns,
            max_unacked_psns,
            max_pkt_per_ack,
            max_packets_per_turn,
            max_burst_packets,
            max_device_unacked_psns,
            ack_probe_ns,
            adversary: config.adversary.unwrap_or(adversary),
            outages: disruptions(config.outages, outages),
            partitions: disruptions(config.partitions, partitions),
            pauses: disruptions(config.pauses, pauses),
            // Nothing drawn: a scenario changes none of the choices above.
            scenario: config.scenario.clone(),
        }
    }

    /// Whether any probabilistic fault is on.
    pub fn faulty(&self) -> bool {
        [self.loss, self.dup, self.reorder, self.corrupt].iter().any(|p| !p.is_never())
    }

    /// Whether the fabric may lose packets: a probabilistic fault, a link
    /// outage or a partition (with two nodes at least), or a fault scenario.
    pub fn lossy(&self) -> bool {
        self.faulty()
            || (self.nodes > 1 && self.outages + self.partitions > 0)
            || self.scenario.is_some()
    }

    /// Whether an RC QP may legitimately spend all seven transport
    /// retries: when a go-back round (a request and its response, either
    /// of which a packet loss, corruption or a long reordering delay
    /// defeats) fails eight times in a row with a chance of at least one
    /// in ten million. Below that a RETRY_EXC_ERR means a stuck requester.
    /// Always under a fault scenario, whose rules may target every retry.
    pub fn retry_exhaustion_plausible(&self) -> bool {
        // A scenario may drop every retransmission (`retry-exceeded`) or
        // cut a link for good: its rules, not the rates, decide.
        if self.allow_retry_exhaustion || self.scenario.is_some() {
            return true;
        }
        let ppm = u64::from(self.loss.ppm())
            + u64::from(self.corrupt.ppm())
            + u64::from(self.reorder.ppm());
        let bad = (ppm as f64 / 1e6).min(1.0);
        let round_fails = 1.0 - (1.0 - bad) * (1.0 - bad);
        round_fails.powi(8) >= 1e-7
    }

    /// The `uroce sim` command that runs this plan again.
    pub fn command_line(&self) -> String {
        format!(
            "uroce sim --seed {} --ops {} --qps {} --nodes {} --loss {} --dup {} --reorder {} \
             --corrupt {} --mtu {} --adversary {} --outages {} --partitions {} --pauses {}{}{}{}",
            self.seed,
            self.ops,
            self.qps,
            self.nodes,
            fraction(self.loss),
            fraction(self.dup),
            fraction(self.reorder),
            fraction(self.corrupt),
            self.mtu.bytes(),
            fraction(self.adversary),
            self.outages,
            self.partitions,
            self.pauses,
            if self.fence { "" } else { " --no-fence" },
            if self.allow_retry_exhaustion { " --allow-retry-exhaustion" } else { "" },
            self.scenario.as_ref().map_or_else(String::new, SwarmScenario::flags)
        )
    }
}

/// A probability as the fraction `uroce sim` takes (`0.3` for 30 %),
/// exact to the ppm.
pub fn fraction(p: Probability) -> String {
    match p.ppm() {
        0 => "0".to_string(),
        1_000_000 => "1".to_string(),
        ppm => {
            let digits = format!("{ppm:06}");
            format!("0.{}", digits.trim_end_matches('0'))
        }
    }
}

/// Parses a probability given as a fraction from 0 to 1 (`0.3` = 30 %),
/// rounded to a whole ppm.
pub fn parse_fraction(text: &str) -> Result<Probability, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("`{text}` is not a fraction between 0 and 1 (0.3 means 30%)"));
    }
    Ok(Probability::from_ppm((value * 1_000_000.0).round() as u32))
}

/// Parses a path MTU in bytes: 256, 512, 1024, 2048 or 4096.
pub fn parse_mtu(text: &str) -> Result<Mtu, String> {
    let bytes: u32 = text.trim().parse().map_err(|_| format!("`{text}` is not a number"))?;
    MTUS.iter()
        .copied()
        .find(|m| m.bytes() == bytes)
        .ok_or_else(|| format!("MTU {bytes}: must be 256, 512, 1024, 2048 or 4096"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_trip() {
        for ppm in [0, 1, 10, 300_000, 123_456, 999_999, 1_000_000] {
            let p = Probability::from_ppm(ppm);
            assert_eq!(parse_fraction(&fraction(p)), Ok(p), "{ppm}");
        }
        assert_eq!(fraction(Probability::from_percent(30)), "0.3");
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("-0.1").is_err());
        assert!(parse_fraction("x").is_err());
    }

    #[test]
    fn the_command_line_reproduces_the_plan() {
        for seed in 0..50 {
            let plan = Plan::resolve(&SwarmConfig { seed, ..SwarmConfig::default() });
            let line = plan.command_line();
            let words: Vec<&str> = line.split_whitespace().collect();
            let value = |flag: &str| {
                let i = words.iter().position(|w| *w == flag).expect(flag);
                words[i + 1]
            };
            let config = SwarmConfig {
                seed,
                ops: Some(value("--ops").parse().unwrap()),
                qps: Some(value("--qps").parse().unwrap()),
                nodes: Some(value("--nodes").parse().unwrap()),
                loss: Some(parse_fraction(value("--loss")).unwrap()),
                dup: Some(parse_fraction(value("--dup")).unwrap()),
                reorder: Some(parse_fraction(value("--reorder")).unwrap()),
                corrupt: Some(parse_fraction(value("--corrupt")).unwrap()),
                mtu: Some(parse_mtu(value("--mtu")).unwrap()),
                no_fence: false,
                allow_retry_exhaustion: false,
                adversary: Some(parse_fraction(value("--adversary")).unwrap()),
                outages: Some(value("--outages").parse().unwrap()),
                partitions: Some(value("--partitions").parse().unwrap()),
                pauses: Some(value("--pauses").parse().unwrap()),
                scenario: None,
            };
            assert_eq!(Plan::resolve(&config), plan, "seed {seed}");
        }
        let plan = Plan::resolve(&SwarmConfig {
            seed: 7,
            no_fence: true,
            allow_retry_exhaustion: true,
            ..SwarmConfig::default()
        });
        assert!(plan.command_line().ends_with(" --no-fence --allow-retry-exhaustion"));
    }

    #[test]
    fn a_scenario_draws_nothing_and_shows_in_the_command_line() {
        let bare = SwarmConfig { seed: 11, ..SwarmConfig::default() };
        let scenario = SwarmScenario {
            arg: "lost-ack".into(),
            scenario: load_scenario("lost-ack").unwrap(),
            roles: vec![(1, "server".into())],
        };
        let with = SwarmConfig { scenario: Some(scenario.clone()), ..bare.clone() };
        let (plan, planned) = (Plan::resolve(&bare), Plan::resolve(&with));
        assert_eq!(Plan { scenario: Some(scenario), ..plan.clone() }, planned);
        assert!(planned.lossy() && planned.retry_exhaustion_plausible());
        let line = planned.command_line();
        assert_eq!(line, plan.command_line() + " --scenario lost-ack --role 1=server");
        assert_eq!(parse_role("0=client"), Ok((0, "client".to_string())));
        assert!(parse_role("client").is_err() && parse_role("x=y").is_err());
        assert!(parse_role("0=").is_err());
        assert!(load_scenario("/no/such/scenario.toml").unwrap_err().contains("lost-ack"));
    }
}
