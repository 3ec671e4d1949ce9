//! Device-side faults (`Hca::inject_fault`), each checked by what the
//! peer sees as IBA says it must: two HCAs on the simulated fabric, the
//! applications on verbs, virtual time. Node 0 is the requester (QPs `a`),
//! node 1 the responder the faults are injected into (QPs `b`).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use uroce_device::mem::SimMemory;
use uroce_hca::config::HcaConfig;
use uroce_hca::trace::{RequestVerdict, Step};
use uroce_hca::{DeviceFault, Endpoint, Hca, Instant, SharedHca};
use uroce_sim::{Action, Fabric, FabricConfig, Matcher, NodeId, Rule};
use uroce_verbs::connect::{self, Tuning, ALL_ACCESS};
use uroce_verbs::{
    CmdError, Context, Cq, Event, EventType, Gid, Mr, Pd, Qp, QpState, QpType, RecvWr,
    RemoteTarget, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use uroce_wire::aeth::Syndrome;
use uroce_wire::frame::{classify, Classified, Link};

const MS: u64 = 1_000_000;

// ---- a two-node world (the fabric-level helpers live here, not in the
// crate) ------------------------------------------------------------------

struct Node {
    hca: SharedHca,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    ip: Ipv4Addr,
}

struct World {
    fabric: Fabric<SharedHca>,
    nodes: Vec<Node>,
}

impl World {
    fn new() -> World {
        World::with(FabricConfig::new(7))
    }

    fn with(config: FabricConfig) -> World {
        let nodes: Vec<Node> = (0..2)
            .map(|i| {
                let ip = Ipv4Addr::new(10, 0, 0, 1 + i as u8);
                let mac = [0x02, 0, 0, 0, 0, 1 + i as u8];
                let gids = vec![Gid::link_local_from_mac(mac), Gid::from_ip(IpAddr::V4(ip))];
                let memory = Arc::new(SimMemory::strict(1 << 30));
                let hca_config = HcaConfig { cm_seed: config.seed, ..HcaConfig::default() };
                let hca = Hca::new(hca_config, gids, memory.clone()).expect("HCA");
                let hca = SharedHca::new(hca, memory);
                let ctx = Context::open(&hca);
                let pd = ctx.alloc_pd().expect("PD");
                let cq = ctx.create_cq(4096).expect("CQ");
                Node { hca, ctx, pd, cq, ip }
            })
            .collect();
        let fabric = Fabric::new(config, nodes.iter().map(|n| n.hca.clone()).collect());
        let world = World { fabric, nodes };
        for n in 0..2 {
            // PORT_ACTIVE: the faults' events come after it.
            assert_eq!(world.async_events(n), vec![(EventType::PortActive, 1)]);
        }
        world
    }

    fn qp(&self, n: usize) -> Qp {
        self.qp_on(n, QpType::Rc, None)
    }

    /// A QP of `qp_type` on node `n`, taking its receives from `srq`, if one.
    fn qp_on(&self, n: usize, qp_type: QpType, srq: Option<&uroce_verbs::Srq>) -> Qp {
        let node = &self.nodes[n];
        connect::create_qp(&node.pd, &node.cq, qp_type, srq, connect::cap(64, 2, 64))
            .expect("create QP")
    }

    /// An RC pair: `a` on node 0, `b` on node 1, connected with `tuning`.
    fn rc_pair(&self, tuning: &Tuning) -> (Qp, Qp) {
        self.connect(self.qp(0), self.qp(1), tuning)
    }

    /// Connects `a` (node 0) and `b` (node 1).
    fn connect(&self, a: Qp, b: Qp, tuning: &Tuning) -> (Qp, Qp) {
        let gid = |n: usize| Gid::from(self.nodes[n].ip);
        connect::pair(&a, gid(0), &b, gid(1), ALL_ACCESS, tuning).expect("connect a and b");
        (a, b)
    }

    fn mr(&self, n: usize) -> Mr {
        self.nodes[n].pd.alloc_mr(64 * 1024, ALL_ACCESS).expect("MR")
    }

    fn now(&self) -> Instant {
        self.fabric.now()
    }

    /// Injects `fault` into node `n`'s HCA now.
    fn inject(&self, n: usize, fault: DeviceFault) -> Result<(), CmdError> {
        let now = self.now();
        self.nodes[n].hca.lock().inject_fault(now, fault)
    }

    /// Runs until node `n`'s CQ has `count` completions, or `max_ns` of
    /// virtual time pass, or nothing is left to happen.
    fn wait(&mut self, n: usize, count: usize, max_ns: u64) -> Vec<WorkCompletion> {
        let deadline = self.fabric.now().plus_nanos(max_ns);
        let mut got = Vec::new();
        loop {
            got.extend(self.nodes[n].cq.poll(count - got.len()).expect("poll"));
            if got.len() >= count || self.fabric.now() >= deadline {
                return got;
            }
            if self.fabric.step().is_none() {
                got.extend(self.nodes[n].cq.poll(count - got.len()).expect("poll"));
                return got;
            }
        }
    }

    /// Runs until nothing is in flight and no timer is due in `max_ns`.
    fn settle(&mut self, max_ns: u64) {
        let until = self.fabric.now().plus_nanos(max_ns);
        self.fabric.run_until_idle(until);
    }

    fn counters(&self, n: usize) -> uroce_hca::counters::Counters {
        self.nodes[n].hca.borrow().counters()
    }

    fn qp_state(&self, n: usize, qp: &Qp) -> QpState {
        self.nodes[n].hca.borrow().qp(qp.qpn()).expect("QP").state
    }

    /// The asynchronous events node `n`'s application has waiting.
    fn async_events(&self, n: usize) -> Vec<(EventType, u32)> {
        let mut events = Vec::new();
        while let Some(event) = self.nodes[n].ctx.next_event() {
            if let Event::Async { event, element } = event {
                events.push((event, element));
            }
        }
        events
    }
}

/// Timeout 8 (4.096 us * 2^8 = 1.05 ms), 7 retries, 7 RNR retries
/// (infinite), min_rnr_timer 1 (0.01 ms): [`Tuning::with_timeout`].
fn tuning() -> Tuning {
    Tuning::with_timeout(8)
}

/// One transport timeout of [`tuning`], in ns.
const TIMEOUT_NS: u64 = 4096 << 8;

fn send(wr_id: u64, mr: &Mr, len: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, len)];
    wr
}

fn remote(wr_id: u64, opcode: WrOpcode, mr: &Mr, len: u32, target: &Mr, at: u64) -> SendWr {
    let mut wr = SendWr::new(wr_id, opcode);
    wr.sg_list = vec![mr.sge(0, len)];
    wr.remote = RemoteTarget { addr: target.addr() + at, rkey: target.rkey() };
    wr
}

fn recv(wr_id: u64, mr: &Mr, at: u64, len: u32) -> RecvWr {
    RecvWr { wr_id, sg_list: vec![mr.sge(at, len)] }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

// ---- RNR ------------------------------------------------------------------

#[test]
fn injected_rnr_naks_are_retried_then_the_send_lands_in_the_posted_receive() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    let data = pattern(3000, 1);
    mr_a.write(0, &data).unwrap();
    b.post_recv(&[recv(10, &mr_b, 0, 4096)]).unwrap();
    w.nodes[1].hca.lock().trace_steps(1024);
    let fault = DeviceFault::Rnr { qpn: Some(b.qpn()), count: 3 };
    w.inject(1, fault).unwrap();

    a.post_send(&[send(1, &mr_a, 3000)]).unwrap();
    let done = w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    w.settle(10 * MS);
    // The receive posted before the fault took the message: it stayed in
    // the RQ through the three RNR NAKs.
    let at_b = w.nodes[1].cq.poll(8).unwrap();
    assert_eq!(statuses(&at_b), vec![(10, WcStatus::Success)]);
    assert_eq!((at_b[0].opcode, at_b[0].byte_len), (WcOpcode::Recv, 3000));
    assert_eq!(mr_b.read_vec(0, 3000).unwrap(), data);
    let (ca, cb) = (w.counters(0), w.counters(1));
    assert_eq!((cb.injected_rnr, cb.send_rnr_err), (3, 3), "each NAK injected, each counted");
    assert_eq!(ca.rcvd_rnr_err, 3);
    assert_eq!(ca.retry_rnr_exceeded_err, 0);
    assert_eq!(w.qp_state(1, &b), QpState::Rts, "an RNR NAK is no error at the responder");
    assert_eq!(w.nodes[1].hca.borrow().qp(b.qpn()).unwrap().injected.rnr_left, 0);

    // The trace shows the fault where it was injected, then the refusals.
    let mut steps = Vec::new();
    while let Some((_, step)) = w.nodes[1].hca.lock().poll_step() {
        steps.push(step);
    }
    assert_eq!(steps.first(), Some(&Step::FaultInjected { fault }));
    let text = steps[0].to_string();
    assert!(text.starts_with("fault injected: RNR NAK for the next 3"), "{text}");
    let refused = steps
        .iter()
        .filter(|s| {
            matches!(
                s,
                Step::Request { verdict: RequestVerdict::Refused(Syndrome::RnrNak { .. }), .. }
            )
        })
        .count();
    assert_eq!(refused, 3, "{steps:#?}");
}

#[test]
fn injected_rnr_leaves_the_srq_wqe_for_the_retry() {
    let mut w = World::new();
    let srq = w.nodes[1].pd.create_srq(4, 1, 0).unwrap();
    let (a, b) = w.connect(w.qp(0), w.qp_on(1, QpType::Rc, Some(&srq)), &tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_a.write(0, &pattern(100, 7)).unwrap();
    // One receive in the SRQ: were a refused attempt to take it, the
    // retries would find none and the SEND would never complete.
    srq.post_recv(&[recv(40, &mr_b, 0, 256)]).unwrap();
    w.inject(1, DeviceFault::Rnr { qpn: Some(b.qpn()), count: 2 }).unwrap();
    a.post_send(&[send(1, &mr_a, 100)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 100 * MS)), vec![(1, WcStatus::Success)]);
    w.settle(10 * MS);
    assert_eq!(statuses(&w.nodes[1].cq.poll(8).unwrap()), vec![(40, WcStatus::Success)]);
    assert_eq!(mr_b.read_vec(0, 100).unwrap(), pattern(100, 7));
    assert_eq!((w.counters(1).injected_rnr, w.counters(0).rcvd_rnr_err), (2, 2));
}

#[test]
fn injected_rnr_on_uc_drops_the_message_as_without_a_receive() {
    let mut w = World::new();
    let (a, b) = w.connect(w.qp_on(0, QpType::Uc, None), w.qp_on(1, QpType::Uc, None), &tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_a.write(0, &pattern(300, 8)).unwrap();
    b.post_recv(&[recv(50, &mr_b, 0, 1024)]).unwrap();
    w.inject(1, DeviceFault::Rnr { qpn: Some(b.qpn()), count: 1 }).unwrap();
    // UC has no NAK and no retry: the first message is lost, the second
    // takes the receive the fault left posted.
    a.post_send(&[send(1, &mr_a, 200), send(2, &mr_a, 300)]).unwrap();
    assert_eq!(
        statuses(&w.wait(0, 2, 10 * MS)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    w.settle(10 * MS);
    let at_b = w.nodes[1].cq.poll(8).unwrap();
    assert_eq!(statuses(&at_b), vec![(50, WcStatus::Success)]);
    assert_eq!(at_b[0].byte_len, 300, "the second message");
    let cb = w.counters(1);
    assert_eq!((cb.injected_rnr, cb.send_rnr_err, cb.send_nak), (1, 0, 0));
}

#[test]
fn injected_rnr_takes_write_with_immediate_but_not_a_plain_write() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_a.write(0, &pattern(512, 2)).unwrap();
    b.post_recv(&[recv(20, &mr_b, 8192, 64)]).unwrap();
    w.inject(1, DeviceFault::Rnr { qpn: None, count: 1 }).unwrap();

    let mut with_imm = remote(2, WrOpcode::RdmaWriteWithImm, &mr_a, 512, &mr_b, 1024);
    with_imm.imm_or_inv = 0xfeed;
    a.post_send(&[remote(1, WrOpcode::RdmaWrite, &mr_a, 512, &mr_b, 0), with_imm]).unwrap();
    let done = w.wait(0, 2, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    w.settle(10 * MS);
    let at_b = w.nodes[1].cq.poll(8).unwrap();
    assert_eq!(statuses(&at_b), vec![(20, WcStatus::Success)]);
    assert_eq!((at_b[0].opcode, at_b[0].imm_or_inv), (WcOpcode::RecvRdmaWithImm, 0xfeed));
    assert_eq!(mr_b.read_vec(0, 512).unwrap(), pattern(512, 2));
    assert_eq!(mr_b.read_vec(1024, 512).unwrap(), pattern(512, 2));
    // The plain WRITE consumes no receive WQE: the fault's one RNR NAK
    // went to the WRITE with immediate.
    let (ca, cb) = (w.counters(0), w.counters(1));
    assert_eq!((cb.injected_rnr, cb.send_rnr_err, ca.rcvd_rnr_err), (1, 1, 1));
}

#[test]
fn injected_rnr_with_rnr_retry_0_gives_rnr_retry_exc_err() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&Tuning { rnr_retry: 0, ..tuning() });
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    b.post_recv(&[recv(10, &mr_b, 0, 4096)]).unwrap();
    w.inject(1, DeviceFault::Rnr { qpn: Some(b.qpn()), count: 1 }).unwrap();

    a.post_send(&[send(1, &mr_a, 64), send(2, &mr_a, 64)]).unwrap();
    let done = w.wait(0, 2, 100 * MS);
    assert_eq!(
        statuses(&done),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
        "a receive is posted, yet the requester gives up as IBA says for rnr_retry 0"
    );
    assert_eq!(w.qp_state(0, &a), QpState::Err);
    assert_eq!(w.counters(0).retry_rnr_exceeded_err, 1);
    assert_eq!(w.counters(1).injected_rnr, 1);
    w.settle(10 * MS);
    // The responder lost nothing: its receive is still posted, its QP fine.
    assert!(w.nodes[1].cq.poll(8).unwrap().is_empty());
    assert_eq!(w.qp_state(1, &b), QpState::Rts);
}

// ---- key checks -------------------------------------------------------------

#[test]
fn an_injected_key_failure_is_a_remote_access_error_on_a_good_key() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_a.write(0, &pattern(256, 3)).unwrap();
    b.post_recv(&[recv(10, &mr_b, 4096, 256), recv(11, &mr_b, 8192, 256)]).unwrap();
    w.inject(1, DeviceFault::FailKeyCheck { qpn: Some(b.qpn()), count: 1 }).unwrap();

    // A SEND checks no R_Key: the fault waits for the WRITE.
    a.post_send(&[send(1, &mr_a, 64), remote(2, WrOpcode::RdmaWrite, &mr_a, 256, &mr_b, 0)])
        .unwrap();
    a.post_send(&[send(3, &mr_a, 8)]).unwrap();
    let done = w.wait(0, 3, 100 * MS);
    assert_eq!(
        statuses(&done),
        vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr)]
    );
    w.settle(10 * MS);
    assert_eq!(mr_b.read_vec(0, 256).unwrap(), vec![0; 256], "nothing written");
    // IBA class C (remote access error): both QPs in error, the
    // responder's application told with a QP access error event, its
    // other receive flushed.
    assert_eq!(w.qp_state(0, &a), QpState::Err);
    assert_eq!(w.qp_state(1, &b), QpState::Err);
    assert_eq!(w.async_events(1), vec![(EventType::QpAccessErr, b.qpn().value())]);
    let at_b = w.nodes[1].cq.poll(8).unwrap();
    assert_eq!(statuses(&at_b), vec![(10, WcStatus::Success), (11, WcStatus::WrFlushErr)]);
    let cb = w.counters(1);
    assert_eq!((cb.injected_key_fail, cb.send_nak), (1, 1));
    // The device's tally: what a scenario's summary line reports.
    let tally = w.nodes[0].hca.borrow().completion_tally().clone();
    assert_eq!((tally.successes(), tally.errors()), (1, 2));
    let first = tally.first_error().expect("an error");
    assert_eq!((first.qpn, first.wr_id, first.status), (a.qpn(), 2, WcStatus::RemAccessErr));
}

#[test]
fn an_injected_key_failure_on_every_qp_fails_a_read_and_an_atomic() {
    let mut w = World::new();
    let (a1, b1) = w.rc_pair(&tuning());
    let (a2, b2) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_b.write(0, &pattern(512, 4)).unwrap();
    mr_b.write(1024, &7u64.to_le_bytes()).unwrap();
    w.inject(1, DeviceFault::FailKeyCheck { qpn: None, count: 1 }).unwrap();

    a1.post_send(&[remote(1, WrOpcode::RdmaRead, &mr_a, 512, &mr_b, 0)]).unwrap();
    let mut add = remote(2, WrOpcode::AtomicFetchAndAdd, &mr_a, 8, &mr_b, 1024);
    add.compare_add = 5;
    a2.post_send(&[add]).unwrap();
    let done = w.wait(0, 2, 100 * MS);
    let mut got = statuses(&done);
    got.sort_by_key(|&(wr_id, _)| wr_id);
    assert_eq!(got, vec![(1, WcStatus::RemAccessErr), (2, WcStatus::RemAccessErr)]);
    w.settle(10 * MS);
    assert_eq!(mr_a.read_vec(0, 512).unwrap(), vec![0; 512], "no READ data placed");
    assert_eq!(mr_b.read_vec(1024, 8).unwrap(), 7u64.to_le_bytes(), "the atomic never ran");
    for qp in [&b1, &b2] {
        assert_eq!(w.qp_state(1, qp), QpState::Err);
    }
    assert_eq!(w.counters(1).injected_key_fail, 2, "one check failed on each QP");
}

#[test]
fn an_injected_dma_fault_is_a_remote_operational_error() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    w.inject(1, DeviceFault::DmaFault { qpn: Some(b.qpn()), count: 1 }).unwrap();
    a.post_send(&[remote(1, WrOpcode::RdmaWrite, &mr_a, 64, &mr_b, 0)]).unwrap();
    let done = w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::RemOpErr)]);
    w.settle(10 * MS);
    assert_eq!(w.qp_state(1, &b), QpState::Err);
    assert_eq!(w.async_events(1), vec![(EventType::QpFatal, b.qpn().value())]);
    let cb = w.counters(1);
    assert_eq!((cb.injected_dma_fault, cb.send_nak, cb.dma_faults), (1, 1, 0));
}

// ---- stall --------------------------------------------------------------------

#[test]
fn a_stall_shorter_than_the_retry_budget_ends_in_success_by_retransmission() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    mr_a.write(0, &pattern(2048, 5)).unwrap();
    let start = w.now();
    let until = start.plus_nanos(3 * MS);
    w.inject(1, DeviceFault::StallResponder { qpn: Some(b.qpn()), until }).unwrap();
    // The stall's end is a timer of the HCA, reported as any other.
    assert_eq!(w.nodes[1].hca.borrow().poll_timeout(), Some(until));

    a.post_send(&[remote(1, WrOpcode::RdmaWrite, &mr_a, 2048, &mr_b, 0)]).unwrap();
    let done = w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert!(w.now() >= until, "not before the stall ended: {}", w.now());
    assert!(w.now() <= until.plus_nanos(TIMEOUT_NS + MS), "soon after: {}", w.now());
    assert_eq!(mr_b.read_vec(0, 2048).unwrap(), pattern(2048, 5));
    let (ca, cb) = (w.counters(0), w.counters(1));
    // 3 ms of silence is two whole timeouts: the first transmission and
    // the first two retransmissions are dropped (two packets each).
    assert_eq!(ca.completer_retry_err, 3, "three timeouts");
    assert_eq!(cb.rcvd_stalled_drop, 6);
    assert_eq!(cb.send_nak + cb.send_rnr_err, 0);
    assert_eq!(w.qp_state(1, &b), QpState::Rts);
    assert_eq!(w.nodes[1].hca.borrow().qp(b.qpn()).unwrap().injected.stalled_until, None);
}

#[test]
fn a_stall_longer_than_the_retry_budget_ends_in_retry_exc_err() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    let start = w.now();
    let until = start.plus_nanos(100 * MS);
    w.inject(1, DeviceFault::StallResponder { qpn: None, until }).unwrap();

    a.post_send(&[remote(1, WrOpcode::RdmaWrite, &mr_a, 64, &mr_b, 0)]).unwrap();
    let done = w.wait(0, 1, 200 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::RetryExcErr)]);
    // 1 + retry_cnt transmissions, each unanswered for a timeout.
    let took = w.now().nanos_since(start);
    assert!((8 * TIMEOUT_NS..=8 * TIMEOUT_NS + MS).contains(&took), "{took} ns");
    assert_eq!(w.counters(0).retry_exceeded_err, 1);
    assert_eq!(w.counters(1).rcvd_stalled_drop, 8);
    assert_eq!(w.qp_state(0, &a), QpState::Err);
    // The responder was only slow: its QP is fine, the WRITE never ran.
    assert_eq!(w.qp_state(1, &b), QpState::Rts);
    assert_eq!(mr_b.read_vec(0, 64).unwrap(), vec![0; 64]);
}

#[test]
fn responses_owed_when_a_stall_starts_leave_when_it_ends() {
    // One packet per endpoint per step: a READ's responses leave one by
    // one, so the stall can start with most of them still owed.
    let config = FabricConfig { max_transmits_per_poll: 1, ..FabricConfig::new(7) };
    let mut w = World::with(config);
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    let data = pattern(8192, 6);
    mr_b.write(0, &data).unwrap();
    a.post_send(&[remote(1, WrOpcode::RdmaRead, &mr_a, 8192, &mr_b, 0)]).unwrap();
    while w.counters(1).rcvd_pkts == 0 {
        w.fabric.step().expect("the READ is on its way");
    }
    let owed = w.nodes[1].hca.borrow().qp(b.qpn()).unwrap().resp.queue.len();
    assert_eq!(owed, 1, "one READ response entry, its packets not all sent");
    let sent = w.counters(1).sent_pkts;
    assert!(sent < 8, "{sent} of 8 responses sent");
    // Shorter than the requester's timeout: no retransmission, only delay.
    let until = w.now().plus_nanos(TIMEOUT_NS / 2);
    w.inject(1, DeviceFault::StallResponder { qpn: Some(b.qpn()), until }).unwrap();
    w.fabric.run_until(Instant::from_nanos(until.as_nanos() - 1));
    assert_eq!(w.counters(1).sent_pkts, sent, "nothing leaves a stalled responder");

    let done = w.wait(0, 1, 100 * MS);
    assert_eq!(statuses(&done), vec![(1, WcStatus::Success)]);
    assert!(w.now() >= until);
    assert_eq!(mr_a.read_vec(0, 8192).unwrap(), data);
    assert_eq!(w.counters(1).sent_pkts, 8, "each response sent once");
    assert_eq!(w.counters(0).completer_retry_err, 0, "the requester never timed out");
    assert_eq!(w.counters(1).rcvd_stalled_drop, 0);
}

// ---- crash --------------------------------------------------------------------

#[test]
fn a_crashed_device_is_silent_and_the_peer_ends_in_retry_exc_err() {
    let mut w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let (mr_a, mr_b) = (w.mr(0), w.mr(1));
    // It worked before the crash.
    b.post_recv(&[recv(10, &mr_b, 0, 256), recv(11, &mr_b, 256, 256)]).unwrap();
    a.post_send(&[send(1, &mr_a, 64)]).unwrap();
    assert_eq!(statuses(&w.wait(0, 1, 10 * MS)), vec![(1, WcStatus::Success)]);
    w.settle(10 * MS);
    assert_eq!(statuses(&w.nodes[1].cq.poll(8).unwrap()), vec![(10, WcStatus::Success)]);
    w.async_events(1);
    let sent_before = w.counters(1).sent_pkts;
    let tally_before = w.nodes[1].hca.borrow().completion_tally().clone();

    w.inject(1, DeviceFault::Crash).unwrap();
    let from_crashed = w.fabric.add_rule(Rule::new(Matcher::any().from(NodeId(1)), Action::Drop));
    assert!(w.nodes[1].hca.borrow().crashed());
    // The dead device's application posts too: nothing ever happens.
    b.post_send(&[send(30, &mr_b, 64)]).unwrap();
    let start = w.now();
    a.post_send(&[send(2, &mr_a, 64), send(3, &mr_a, 64)]).unwrap();
    let done = w.wait(0, 2, 200 * MS);
    assert_eq!(statuses(&done), vec![(2, WcStatus::RetryExcErr), (3, WcStatus::WrFlushErr)]);
    let took = w.now().nanos_since(start);
    assert!((8 * TIMEOUT_NS..=8 * TIMEOUT_NS + MS).contains(&took), "{took} ns");
    w.settle(100 * MS);

    // Not one packet, completion or event from the crashed device.
    assert_eq!(w.fabric.rule(from_crashed).matches, 0);
    let cb = w.counters(1);
    assert_eq!(cb.sent_pkts, sent_before);
    assert_eq!(cb.killed_qps, 1);
    // 1 + retry_cnt go-backs, each sending both SENDs: 16 packets met a
    // dead device.
    assert_eq!(cb.rcvd_unknown_qp, 16);
    assert!(w.nodes[1].cq.poll(8).unwrap().is_empty(), "no flush, no completion");
    assert_eq!(w.nodes[1].hca.borrow().completion_tally(), &tally_before);
    let first = w.nodes[0].hca.borrow().completion_tally().first_error().expect("an error");
    assert_eq!((first.wr_id, first.status), (2, WcStatus::RetryExcErr));
    assert!(w.async_events(1).is_empty());
    let hca = w.nodes[1].hca.borrow();
    assert!(hca.qp(b.qpn()).unwrap().injected.killed);
    assert_eq!(hca.poll_timeout(), None);
    assert!(!hca.has_transmit_ready());
}

#[test]
fn a_fault_for_a_qp_that_does_not_exist_is_refused() {
    let w = World::new();
    let (_a, b) = w.rc_pair(&tuning());
    let bad = uroce_verbs::Qpn::new(b.qpn().value() + 1);
    let refused = w.inject(1, DeviceFault::Rnr { qpn: Some(bad), count: 1 });
    assert!(matches!(refused, Err(CmdError::NotFound(_))), "{refused:?}");
    let injected = w.nodes[1].hca.borrow().qp(b.qpn()).unwrap().injected;
    assert_eq!(injected, Default::default());
}

// ---- for the runtimes ------------------------------------------------------------

#[test]
fn a_transmit_names_the_qp_that_sent_it() {
    let w = World::new();
    let (a, b) = w.rc_pair(&tuning());
    let mr_a = w.mr(0);
    a.post_send(&[send(1, &mr_a, 64)]).unwrap();
    let mut buf = vec![0u8; uroce_hca::endpoint::MAX_PACKET_LEN];
    let now = w.now();
    let transmit = w.nodes[0].hca.lock().poll_transmit(now, &mut buf).expect("the SEND");
    assert_eq!(transmit.local_qpn, Some(a.qpn()));
    // Its BTH names the other end.
    let packet = &buf[..transmit.len];
    let Classified::Roce(frame) = classify(packet, Link::RawIp) else { panic!("not RoCE") };
    assert_eq!(frame.packet().unwrap().bth().dest_qpn(), b.qpn());
}
