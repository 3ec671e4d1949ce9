//! A small simulated world for scenario tests: the nodes of
//! [`uroce::world`] (HCAs on the simulated fabric, each with a verbs
//! context), each with a PD and a CQ, and helpers to connect QPs and run
//! the fabric until completions arrive.

use std::net::Ipv4Addr;
use std::sync::Arc;
use uroce::world::{Host, WorldBuilder};
use uroce_device::mem::SimMemory;
use uroce_hca::{Instant, SharedHca};
use uroce_sim::{Fabric, FabricConfig, NodeId};
use uroce_verbs::connect::{self, Tuning};
use uroce_verbs::{Context, Cq, Gid, Pd, Qp, QpCap, QpType, Qpn, WorkCompletion};

/// A QP's sizes, and every access right, as the tests' connections use
/// them.
pub use uroce_verbs::connect::{cap, ALL_ACCESS};

/// One node: its HCA and the application's handles.
pub struct Node {
    /// The HCA (also owned by the fabric).
    pub hca: SharedHca,
    /// The verbs context.
    pub ctx: Context,
    /// A protection domain.
    pub pd: Pd,
    /// A CQ for everything.
    pub cq: Cq,
    /// The node's IPv4 address.
    pub ip: Ipv4Addr,
}

/// The world: nodes on a fabric.
pub struct World {
    /// The fabric driving the HCAs.
    pub fabric: Fabric<SharedHca>,
    /// The nodes, by id.
    pub nodes: Vec<Node>,
}

/// The default tuning of test connections: path MTU 1024, a short ACK
/// timeout (timeout 8 = 1 ms), 7 retries, infinite RNR retries
/// ([`Tuning::with_timeout`]).
pub fn tuning() -> Tuning {
    Tuning::with_timeout(8)
}

impl World {
    /// `n` nodes (10.0.0.1 ... in the simulation only) on a fabric with
    /// `config`.
    pub fn new(n: usize, config: FabricConfig) -> World {
        World::with_memory(n, config, || Arc::new(SimMemory::strict(1 << 30)))
    }

    /// Like [`World::new`], with each HCA's host memory from `memory`.
    pub fn with_memory(
        n: usize,
        config: FabricConfig,
        memory: impl Fn() -> Arc<dyn uroce_device::mem::DriverMemory>,
    ) -> World {
        World::from_builder(WorldBuilder::new(n, config).memory(|_| memory()))
    }

    /// The world `builder` builds (a scenario, roles), each node with a PD
    /// and a CQ.
    pub fn from_builder(builder: WorldBuilder<'_>) -> World {
        let built = builder.build();
        let nodes = built
            .hosts
            .into_iter()
            .map(|Host { hca, ctx, ip }| {
                let pd = ctx.alloc_pd().expect("PD");
                let cq = ctx.create_cq(4096).expect("CQ");
                Node { hca, ctx, pd, cq, ip }
            })
            .collect();
        World { fabric: built.fabric, nodes }
    }

    /// A QP of `qp_type` on node `n`.
    pub fn qp(&self, n: usize, qp_type: QpType, cap: QpCap) -> Qp {
        let node = &self.nodes[n];
        connect::create_qp(&node.pd, &node.cq, qp_type, None, cap).expect("create QP")
    }

    /// An RC QP of `cap_a` on node 0 connected ([`World::connect`]) to
    /// one of `cap_b` on node 1.
    pub fn rc_pair(&self, cap_a: QpCap, cap_b: QpCap, tuning: &Tuning) -> (Qp, Qp) {
        let a = self.qp(0, QpType::Rc, cap_a);
        let b = self.qp(1, QpType::Rc, cap_b);
        self.connect(0, &a, 1, &b, tuning);
        (a, b)
    }

    /// Connects QP `a` on node `na` with QP `b` on node `nb` (RC or UC):
    /// [`connect::pair`], `b` sending from 1000 past `tuning.sq_psn`.
    pub fn connect(&self, na: usize, a: &Qp, nb: usize, b: &Qp, tuning: &Tuning) {
        let gid = |n: usize| Gid::from(self.nodes[n].ip);
        connect::pair(a, gid(na), b, gid(nb), ALL_ACCESS, tuning).expect("connect a and b");
    }

    /// Runs the fabric until node `n`'s CQ has `count` completions or the
    /// virtual deadline passes; returns them.
    pub fn wait(&mut self, n: usize, count: usize, max_ns: u64) -> Vec<WorkCompletion> {
        let deadline = self.fabric.now().plus_nanos(max_ns);
        let mut got = Vec::new();
        loop {
            got.extend(self.nodes[n].cq.poll(count - got.len()).expect("poll"));
            if got.len() >= count || self.fabric.now() >= deadline {
                return got;
            }
            if self.fabric.step().is_none() {
                // Nothing scheduled at all: idle.
                got.extend(self.nodes[n].cq.poll(count - got.len()).expect("poll"));
                return got;
            }
        }
    }

    /// Runs the fabric until nothing is in flight and no timer is due
    /// before `max_ns` from now.
    pub fn settle(&mut self, max_ns: u64) {
        let until = self.fabric.now().plus_nanos(max_ns);
        self.fabric.run_until_idle(until);
    }

    /// The node id of node `n`.
    pub fn id(n: usize) -> NodeId {
        NodeId(n)
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.fabric.now()
    }
}

/// Shorthand: the QPN of a QP.
pub fn qpn(qp: &Qp) -> Qpn {
    qp.qpn()
}
