//! The CM between two HCAs on the simulated fabric, through the device
//! interface only: `Cm*` commands in, CM events out (`CmPollEvent`), and
//! the MADs crossing the fabric as UD SENDs between the HCAs' QP1s. Once
//! on a clean fabric, and under loss, duplication and reordering (the CM's
//! own retries, and its answers to duplicates, must carry it through).

use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::sync::Arc;
use uroce_device::cm::{
    CmAcceptParams, CmConnectParams, CmDisconnectCause, CmEvent, CmEventKind, CmId,
};
use uroce_device::command::{Command, Gid, Reply};
use uroce_device::mem::SimMemory;
use uroce_hca::config::HcaConfig;
use uroce_hca::{Hca, Instant};
use uroce_sim::{Fabric, FabricConfig, FaultConfig, NodeId, Probability};
use uroce_wire::mad::{rej, rep, req};
use uroce_wire::Qpn;

const A: usize = 0;
const B: usize = 1;
const SERVICE: u64 = 0x0000_0000_0106_4e21; // rdma_cm's TCP port space, port 20001

fn ip(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, u8::try_from(node + 1).unwrap())
}

fn gid(node: usize) -> Gid {
    Gid::from(ip(node))
}

/// Two HCAs on a fabric, and the CM events each has seen.
struct World {
    fabric: Fabric<Hca>,
    events: [Vec<CmEvent>; 2],
}

impl World {
    fn new(seed: u64, faults: FaultConfig) -> World {
        let hca = |node| {
            let memory = Arc::new(SimMemory::new(1 << 20));
            Hca::new(HcaConfig::default(), vec![Gid::from_ip(IpAddr::V4(ip(node)))], memory)
                .unwrap()
        };
        let config = FabricConfig { faults, ..FabricConfig::new(seed) };
        World { fabric: Fabric::new(config, vec![hca(A), hca(B)]), events: Default::default() }
    }

    fn command(&mut self, node: usize, command: Command) -> Reply {
        let now = self.fabric.now();
        self.fabric.endpoint_mut(NodeId(node)).command(now, command).unwrap()
    }

    fn drain_events(&mut self) {
        for node in [A, B] {
            while let Reply::CmEvent(Some(event)) = self.command(node, Command::CmPollEvent) {
                self.events[node].push(event);
            }
        }
    }

    /// Runs the fabric until `done` holds of the events seen (at most ten
    /// virtual minutes).
    fn run_until(&mut self, what: &str, done: impl Fn(&[Vec<CmEvent>; 2]) -> bool) {
        let deadline = self.fabric.now() + Duration::from_secs(600);
        loop {
            self.drain_events();
            if done(&self.events) {
                return;
            }
            let more = self
                .fabric
                .run_until_condition(deadline, |f| f.endpoints().iter().any(Hca::has_cm_events));
            assert!(more, "{what}: never happened; events {:#?}", self.events);
        }
    }

    /// The one event of `node` that `pick` finds.
    fn find<T>(&self, node: usize, pick: impl Fn(&CmEvent) -> Option<T>) -> T {
        let mut found: Vec<T> = self.events[node].iter().filter_map(pick).collect();
        assert_eq!(found.len(), 1, "node {node}: {:#?}", self.events[node]);
        found.pop().unwrap()
    }
}

fn has(events: &[CmEvent], id: CmId, pred: impl Fn(&CmEventKind) -> bool) -> bool {
    events.iter().any(|e| e.id == id && pred(&e.kind))
}

/// Listen, connect, accept, ready to use, established on both sides,
/// disconnect, time-wait over on both sides; every private data delivered.
fn connect_and_disconnect(seed: u64, faults: FaultConfig) -> World {
    let mut w = World::new(seed, faults);
    assert_eq!(w.command(B, Command::CmListen { service_id: SERVICE }), Reply::Done);
    let params = CmConnectParams::rdma_cm(0, gid(B), SERVICE, Qpn::new(0x11), 0x12_3456);
    let connect = Command::CmConnect { params, private_data: b"hello from A".to_vec() };
    let Reply::CmId { id: a } = w.command(A, connect) else { panic!("connect") };

    w.run_until("connect request at B", |e| !e[B].is_empty());
    let (b, req_bytes) = w.find(B, |e| match &e.kind {
        CmEventKind::ConnectRequest { peer, pkey_index: 0, req } if *peer == gid(A) => {
            Some((e.id, req.clone()))
        }
        _ => None,
    });
    let req = req::Repr::parse(&req::Packet::new_checked(&req_bytes[..]).unwrap()).unwrap();
    assert_eq!(req.local_comm_id.0, a);
    assert_eq!(req.service_id.0, SERVICE);
    assert_eq!((req.local_qpn, req.starting_psn.value()), (Qpn::new(0x11), 0x12_3456));
    assert_eq!(&req.private_data[..12], b"hello from A");

    let accept = CmAcceptParams::new(Qpn::new(0x22), 0x65_4321);
    let accept = Command::CmAccept { id: b, params: accept, private_data: b"hi A".to_vec() };
    assert_eq!(w.command(B, accept), Reply::Done);
    w.run_until("connect reply at A", |e| {
        has(&e[A], a, |k| matches!(k, CmEventKind::ConnectReply { .. }))
    });
    let rep_bytes = w.find(A, |e| match &e.kind {
        CmEventKind::ConnectReply { rep } => Some(rep.clone()),
        _ => None,
    });
    let rep = rep::Repr::parse(&rep::Packet::new_checked(&rep_bytes[..]).unwrap()).unwrap();
    assert_eq!((rep.local_comm_id.0, rep.remote_comm_id.0), (b, a));
    assert_eq!((rep.local_qpn, rep.starting_psn.value()), (Qpn::new(0x22), 0x65_4321));
    assert_eq!(&rep.private_data[..4], b"hi A");

    let rtu = Command::CmReadyToUse { id: a, private_data: vec![] };
    assert_eq!(w.command(A, rtu), Reply::Done);
    w.run_until("established on both sides", |e| {
        has(&e[A], a, |k| *k == CmEventKind::Established)
            && has(&e[B], b, |k| *k == CmEventKind::Established)
    });

    let bye = Command::CmDisconnect { id: a, private_data: b"bye".to_vec() };
    assert_eq!(w.command(A, bye), Reply::Done);
    w.run_until("disconnected and out of time-wait on both sides", |e| {
        [(A, a), (B, b)].iter().all(|&(node, id)| {
            has(&e[node], id, |k| matches!(k, CmEventKind::Disconnected { .. }))
                && has(&e[node], id, |k| *k == CmEventKind::TimewaitExit)
        })
    });
    let cause = |node| {
        w.find(node, |e| match &e.kind {
            CmEventKind::Disconnected { cause, private_data } => {
                Some((*cause, private_data.clone()))
            }
            _ => None,
        })
    };
    let (b_cause, b_data) = cause(B);
    assert_eq!(b_cause, CmDisconnectCause::DreqReceived);
    assert_eq!(&b_data[..3], b"bye");
    assert_eq!(cause(A).0, CmDisconnectCause::DrepReceived);
    // Each side saw each event once, in order.
    let kinds = |node: usize| -> Vec<&'static str> {
        w.events[node]
            .iter()
            .map(|e| match e.kind {
                CmEventKind::ConnectRequest { .. } => "request",
                CmEventKind::ConnectReply { .. } => "reply",
                CmEventKind::Established => "established",
                CmEventKind::Disconnected { .. } => "disconnected",
                CmEventKind::TimewaitExit => "timewait exit",
                _ => "other",
            })
            .collect()
    };
    assert_eq!(kinds(A), ["reply", "established", "disconnected", "timewait exit"]);
    assert_eq!(kinds(B), ["request", "established", "disconnected", "timewait exit"]);
    // Both IDs are gone.
    let now = w.fabric.now();
    assert!(w.fabric.endpoint_mut(NodeId(A)).command(now, Command::CmDestroy { id: a }).is_err());
    w
}

#[test]
fn connect_and_disconnect_on_a_clean_fabric() {
    let w = connect_and_disconnect(1, FaultConfig::NONE);
    let (a, b) = (w.fabric.endpoint(NodeId(A)).counters(), w.fabric.endpoint(NodeId(B)).counters());
    // A: REQ, RTU, DREQ; B: REP, DREP. Each taken by the other's QP1.
    assert_eq!((a.sent_mads, a.rcvd_mads, b.sent_mads, b.rcvd_mads), (3, 2, 2, 3));
    assert_eq!((a.rcvd_gsi_drop, b.rcvd_gsi_drop, a.mad_send_err, b.mad_send_err), (0, 0, 0, 0));
    assert_eq!((a.sent_pkts, b.sent_pkts), (3, 2));
    assert_eq!(w.fabric.counters().delivered, 5);
    let retries = w.fabric.endpoints().iter().map(|h| h.cm_counters().tx_retries).sum::<u64>();
    assert_eq!(retries, 0);
}

#[test]
fn connect_and_disconnect_through_loss_duplication_and_reordering() {
    let faults = FaultConfig {
        loss: Probability::from_percent(25),
        duplicate: Probability::from_percent(25),
        reorder: Probability::from_percent(25),
        reorder_max_delay_ns: 50_000_000,
        ..FaultConfig::NONE
    };
    let mut lossy_runs = 0;
    for seed in [2, 3, 4, 5, 6, 7] {
        let w = connect_and_disconnect(seed, faults);
        let c = w.fabric.counters();
        if c.dropped_loss > 0 && c.duplicated > 0 {
            lossy_runs += 1;
        }
        // Retries happened only where something was lost.
        let retries: u64 = w.fabric.endpoints().iter().map(|h| h.cm_counters().tx_retries).sum();
        assert!(retries <= 2 * c.dropped_loss, "seed {seed}: {retries} retries, {c:?}");
    }
    assert!(lossy_runs >= 3, "the faults hardly fired: {lossy_runs} runs lost and duplicated");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let faults = FaultConfig {
        loss: Probability::from_percent(20),
        duplicate: Probability::from_percent(20),
        ..FaultConfig::NONE
    };
    let one = connect_and_disconnect(9, faults).fabric.trace_hash();
    let two = connect_and_disconnect(9, faults).fabric.trace_hash();
    assert_eq!(one, two);
}

#[test]
fn a_connect_nobody_listens_for_is_rejected_with_reason_8() {
    let mut w = World::new(1, FaultConfig::NONE);
    let params = CmConnectParams::rdma_cm(0, gid(B), SERVICE, Qpn::new(0x11), 1);
    let Reply::CmId { id: a } = w.command(A, Command::CmConnect { params, private_data: vec![] })
    else {
        panic!("connect")
    };
    w.run_until("rejected", |e| !e[A].is_empty());
    let (reason, rej_bytes) = w.find(A, |e| match &e.kind {
        CmEventKind::Rejected { reason, rej } if e.id == a => Some((*reason, rej.clone())),
        _ => None,
    });
    assert_eq!(reason, 8);
    let rej = rej::Repr::parse(&rej::Packet::new_checked(&rej_bytes[..]).unwrap()).unwrap();
    assert_eq!(rej.remote_comm_id.0, a);
    assert_eq!(u16::from(rej.reason), 8);
    assert!(w.events[B].is_empty());
    assert_eq!(w.fabric.endpoint(NodeId(B)).cm_counters().rej_no_listener, 1);
    // The ID is gone, and nothing is left to time.
    assert!(w
        .fabric
        .endpoint_mut(NodeId(A))
        .command(Instant::ZERO, Command::CmDestroy { id: a })
        .is_err());
    assert!(w.fabric.run_until_idle(w.fabric.now() + Duration::from_secs(60)));
}

#[test]
fn sidr_finds_the_ud_qp_of_a_service() {
    use uroce_device::cm::{CmSidrParams, CmSidrReplyParams};
    use uroce_wire::mad::sidr;
    let faults = FaultConfig { loss: Probability::from_percent(30), ..FaultConfig::NONE };
    let mut w = World::new(11, faults);
    assert_eq!(w.command(B, Command::CmListen { service_id: SERVICE }), Reply::Done);
    let params = CmSidrParams {
        remote_gid: gid(B),
        pkey_index: 0,
        pkey: 0xffff,
        service_id: SERVICE,
        timeout_ms: 4096,
        max_retries: 15,
    };
    let ask = Command::CmSidrRequest { params, private_data: b"which QP?".to_vec() };
    let Reply::CmId { id: a } = w.command(A, ask) else { panic!("SIDR request") };
    w.run_until("SIDR request at B", |e| !e[B].is_empty());
    let (b, req) = w.find(B, |e| match &e.kind {
        CmEventKind::SidrRequest { peer, req, .. } if *peer == gid(A) => Some((e.id, req.clone())),
        _ => None,
    });
    let req = sidr::ReqRepr::parse(&sidr::ReqPacket::new_checked(&req[..]).unwrap()).unwrap();
    assert_eq!(req.service_id.0, SERVICE);
    assert_eq!(&req.private_data[..9], b"which QP?");
    let answer = CmSidrReplyParams { status: 0, qpn: Qpn::new(0x33), qkey: 0x1234_5678 };
    let reply = Command::CmSidrReply { id: b, params: answer, private_data: vec![] };
    assert_eq!(w.command(B, reply), Reply::Done);
    w.run_until("SIDR reply at A", |e| {
        has(&e[A], a, |k| matches!(k, CmEventKind::SidrReply { .. }))
    });
    let rep = w.find(A, |e| match &e.kind {
        CmEventKind::SidrReply { rep } => Some(rep.clone()),
        _ => None,
    });
    let rep = sidr::RepRepr::parse(&sidr::RepPacket::new_checked(&rep[..]).unwrap()).unwrap();
    assert_eq!((rep.qpn, rep.qkey.0), (Qpn::new(0x33), 0x1234_5678));
    assert_eq!(u8::from(rep.status), 0);
}
