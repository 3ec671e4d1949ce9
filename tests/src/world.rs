//! A small simulated world for scenario tests: the nodes of
//! [`uroce::world`] (HCAs on the simulated fabric, each with a verbs
//! context), each with a PD and a CQ, and helpers to connect QPs and run
//! the fabric until completions arrive.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use uroce::world::{Host, WorldBuilder};
use uroce_device::mem::SimMemory;
use uroce_hca::{Instant, SharedHca};
use uroce_sim::{Fabric, FabricConfig, NodeId};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, Context, Cq, Gid, Mtu, Pd, Qp, QpCap, QpInitAttr, QpType, Qpn, WorkCompletion,
};

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
/// timeout (timeout 8 = 1 ms), 7 retries, infinite RNR retries.
pub fn tuning() -> Tuning {
    Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 0,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 16,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    }
}

/// Every access right.
pub const ALL_ACCESS: Access = Access(1 | 2 | 4 | 8 | 16);

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
        let init = QpInitAttr {
            qp_type,
            send_cq: &node.cq,
            recv_cq: &node.cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        node.pd.create_qp(&init).expect("create QP")
    }

    /// Connects QP `a` on node `na` with QP `b` on node `nb` (RC or UC).
    pub fn connect(&self, na: usize, a: &Qp, nb: usize, b: &Qp, tuning: &Tuning) {
        let remote_of = |n: usize, qp: &Qp, psn: u32| Remote {
            gid: Gid::from_ip(IpAddr::V4(self.nodes[n].ip)),
            qpn: qp.qpn(),
            psn,
        };
        connect::to_init(a, ALL_ACCESS, 0).expect("a to INIT");
        connect::to_init(b, ALL_ACCESS, 0).expect("b to INIT");
        let (psn_a, psn_b) = (tuning.sq_psn, tuning.sq_psn.wrapping_add(1000) & 0xff_ffff);
        connect::to_rts(a, Some(remote_of(nb, b, psn_b)), &Tuning { sq_psn: psn_a, ..*tuning })
            .expect("a to RTS");
        connect::to_rts(b, Some(remote_of(na, a, psn_a)), &Tuning { sq_psn: psn_b, ..*tuning })
            .expect("b to RTS");
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

/// A QP capability set for tests.
pub fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// Shorthand: the QPN of a QP.
pub fn qpn(qp: &Qp) -> Qpn {
    qp.qpn()
}
