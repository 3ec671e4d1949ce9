//! The simulated world: HCAs on the simulated fabric, each with the
//! application's verbs context. One builder for every harness that runs
//! devices in virtual time: [`crate::Sim`] (node tasks in virtual time),
//! the scenario tests (`tests/src/world.rs` adds their conveniences on
//! top), `uroce sim` (the swarm, with its adversary as an extra endpoint)
//! and the HCA fuzz bodies (each HCA over a guarded memory, driven through
//! a checking endpoint). `uroce` re-exports this module as `uroce::world`.
//!
//! One way to move it in time ([`World::take_posted`], [`World::advance`],
//! [`advance`] on a bare fabric): `Sim` goes one event at a time, the
//! swarm in random slices of virtual time, both through [`advance`].
//!
//! Node `i` is at 10.0.(i / 256).(1 + i % 256) with the MAC
//! 02:00:00:00:(i / 256):(1 + i % 256); its GID table holds the
//! link-local GID of that MAC (index 0) and the IPv4-mapped GID of its
//! address (index 1, the one RoCEv2 connections use).
//!
//! A world may run a fault scenario ([`WorldBuilder::scenario`], roles by
//! node with [`WorldBuilder::role`]): each node gets a [`Port`] on the
//! fabric ([`Fabric::with_ports`]), and the device faults the ports decide
//! are applied to the node's HCA ([`Hca::inject_fault`], converted by
//! [`device_fault`]) at the moment the fabric hands them out, whatever
//! drives the fabric.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use uroce_device::mem::{DriverMemory, SimMemory};
use uroce_hca::config::HcaConfig;
use uroce_hca::{DeviceFault, Endpoint, Hca, Instant, SharedHca};
use uroce_sim::{
    DeviceAction, DeviceActionKind, DeviceInfo, Fabric, FabricConfig, NodeId, Port, Scenario,
};
use uroce_verbs::{Context, Gid};

mod step;
pub use step::{advance, Stop};

/// The IPv4 address of node `i`.
pub fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, (i >> 8) as u8, 1 + (i & 0xff) as u8)
}

/// The GID table of node `i`: the link-local GID of its MAC, then the
/// IPv4-mapped GID of [`node_ip`].
pub fn node_gids(i: usize) -> Vec<Gid> {
    let mac = [0x02, 0, 0, 0, (i >> 8) as u8, 1 + (i & 0xff) as u8];
    vec![Gid::link_local_from_mac(mac), Gid::from_ip(IpAddr::V4(node_ip(i)))]
}

/// The HCA fault a scenario's device action asks for, `now` being when it
/// is applied (a stall ends `for_ns` later). A crash's `exit` has no
/// process to kill in the simulator: the world's handler records it
/// ([`World::take_exits`]) and [`crate::Sim`] stops the node's tasks.
pub fn device_fault(action: &DeviceAction, now: Instant) -> DeviceFault {
    let (qpn, count) = (action.qpn, action.count);
    match action.kind {
        DeviceActionKind::Rnr => DeviceFault::Rnr { qpn, count },
        DeviceActionKind::FailKey => DeviceFault::FailKeyCheck { qpn, count },
        DeviceActionKind::DmaFault => DeviceFault::DmaFault { qpn, count },
        DeviceActionKind::Stall => {
            DeviceFault::StallResponder { qpn, until: now.plus_nanos(action.for_ns) }
        }
        DeviceActionKind::Crash => DeviceFault::Crash,
    }
}

/// One node: its HCA and the application's context on it.
pub struct Host {
    /// The HCA (the fabric's endpoint for it holds a clone).
    pub hca: SharedHca,
    /// The verbs context.
    pub ctx: Context,
    /// The node's IPv4 address ([`node_ip`]).
    pub ip: Ipv4Addr,
}

impl Host {
    /// Node `i`: an HCA with `config` over `memory`, and a context on it.
    pub fn new(i: usize, config: HcaConfig, memory: Arc<dyn DriverMemory>) -> Host {
        let hca = Hca::new(config, node_gids(i), memory.clone()).expect("HCA configuration");
        let hca = SharedHca::new(hca, memory);
        let ctx = Context::open(&hca);
        Host { hca, ctx, ip: node_ip(i) }
    }
}

/// Nodes on a fabric. `E` is what the fabric drives: the HCAs themselves,
/// or a wrapper (a checking endpoint, an enum with other kinds of nodes).
pub struct World<E: Endpoint = SharedHca> {
    /// The fabric; node `i`'s endpoint is `NodeId(i)`, and extra endpoints
    /// follow the hosts'.
    pub fabric: Fabric<E>,
    /// The nodes, by id.
    pub hosts: Vec<Host>,
    /// The nodes whose process a `crash` with `exit` killed, not taken yet
    /// ([`World::take_exits`]).
    pub exits: Exits,
}

/// A node whose device crashed with `exit`: on the real runtime the
/// process dies (SIGKILL); in the simulator its tasks stop
/// ([`crate::Sim`] drops them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The node.
    pub node: usize,
    /// When its device crashed.
    pub at: Instant,
}

/// The exits the world's device-fault handler records.
pub type Exits = Arc<Mutex<Vec<Exit>>>;

impl<E: Endpoint> World<E> {
    /// The nodes a `crash` with `exit` killed since the last call, in
    /// order.
    pub fn take_exits(&self) -> Vec<Exit> {
        std::mem::take(&mut *self.exits.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.fabric.now()
    }

    /// Runs the fabric until nothing is in flight and no timer is due
    /// before `max_ns` from now.
    pub fn settle(&mut self, max_ns: u64) {
        let until = self.fabric.now().plus_nanos(max_ns);
        self.fabric.run_until_idle(until);
    }
}

/// How to build a [`World`]: so many nodes, an HCA configuration, each
/// node's host memory, the fabric's configuration, and a fault scenario
/// with each node's role.
pub struct WorldBuilder<'a> {
    nodes: usize,
    fabric: FabricConfig,
    hca: HcaConfig,
    memory: Box<dyn Fn(usize) -> Arc<dyn DriverMemory> + 'a>,
    scenario: Option<Scenario>,
    roles: Vec<Option<String>>,
}

impl<'a> WorldBuilder<'a> {
    /// `nodes` nodes on a fabric with `fabric`; by default each HCA has
    /// [`HcaConfig::default`] with the fabric's seed as its CM seed, and
    /// 1 GiB of strict [`SimMemory`].
    pub fn new(nodes: usize, fabric: FabricConfig) -> WorldBuilder<'a> {
        let hca = HcaConfig { cm_seed: fabric.seed, ..HcaConfig::default() };
        WorldBuilder {
            nodes,
            fabric,
            hca,
            memory: Box::new(|_| Arc::new(SimMemory::strict(1 << 30))),
            scenario: None,
            roles: vec![None; nodes],
        }
    }

    /// Runs `scenario` on every node's port. The ports draw from the
    /// scenario's seed xor the fabric's, so each seed of a run is a
    /// different draw of the scenario's random parts (`chance`, drawn bits,
    /// background faults keep their own `seed=`).
    pub fn scenario(mut self, scenario: Scenario) -> WorldBuilder<'a> {
        self.scenario = Some(scenario);
        self
    }

    /// Node `node`'s role: the scenario's rules with a `role` apply only on
    /// the nodes that have it.
    pub fn role(mut self, node: usize, role: &str) -> WorldBuilder<'a> {
        assert!(node < self.nodes, "WorldBuilder::role: no node {node}");
        self.roles[node] = Some(role.to_owned());
        self
    }

    /// The ports of the scenario, node by node (none without one).
    pub fn ports(&self) -> Vec<Port> {
        let Some(scenario) = &self.scenario else { return Vec::new() };
        let seed = scenario.seed ^ self.fabric.seed;
        (0..self.nodes)
            .map(|i| {
                let me =
                    DeviceInfo { address: IpAddr::V4(node_ip(i)), role: self.roles[i].clone() };
                Port::new(scenario, me, seed)
            })
            .collect()
    }

    /// Every HCA's configuration.
    pub fn hca_config(mut self, config: HcaConfig) -> WorldBuilder<'a> {
        self.hca = config;
        self
    }

    /// Node `i`'s host memory is `memory(i)`.
    pub fn memory(
        mut self,
        memory: impl Fn(usize) -> Arc<dyn DriverMemory> + 'a,
    ) -> WorldBuilder<'a> {
        self.memory = Box::new(memory);
        self
    }

    /// The nodes, without a fabric (for a harness that drives an HCA
    /// itself).
    pub fn hosts(&self) -> Vec<Host> {
        (0..self.nodes).map(|i| Host::new(i, self.hca.clone(), (self.memory)(i))).collect()
    }

    /// The world, the fabric driving the HCAs themselves.
    pub fn build(self) -> World<SharedHca> {
        self.build_with(|host| host.hca.clone(), |_| Vec::new())
    }

    /// The world, the fabric driving `endpoint(host)` for each node, then
    /// the endpoints `extra(hosts)` (ids from `hosts.len()` on).
    pub fn build_with<E: Endpoint>(
        self,
        endpoint: impl FnMut(&Host) -> E,
        extra: impl FnOnce(&[Host]) -> Vec<E>,
    ) -> World<E> {
        let hosts = self.hosts();
        let ports = self.ports();
        let mut endpoints: Vec<E> = hosts.iter().map(endpoint).collect();
        endpoints.extend(extra(&hosts));
        let mut fabric = Fabric::new(self.fabric, endpoints);
        let exits = Exits::default();
        if !ports.is_empty() {
            fabric = fabric.with_ports(ports);
            let hcas: Vec<SharedHca> = hosts.iter().map(|h| h.hca.clone()).collect();
            let exits = exits.clone();
            fabric.set_device_fault_handler(Box::new(move |_, node: NodeId, now, action| {
                if let Some(hca) = hcas.get(node.0) {
                    // A fault on a QP gone meanwhile is refused: nothing to do.
                    let _ = hca.lock().inject_fault(now, device_fault(action, now));
                    hca.notify_if_events();
                    if action.kind == DeviceActionKind::Crash && action.exit {
                        let mut exits = exits.lock().unwrap_or_else(|e| e.into_inner());
                        exits.push(Exit { node: node.0, at: now });
                    }
                }
            }));
        }
        World { fabric, hosts, exits }
    }
}
