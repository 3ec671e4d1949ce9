//! The HCA's decisions, as its trace tells them: a lost packet seen from
//! both ends, step by step, and the printed form a learner reads.

use uroce_hca::trace::{GoBackCause, RequestVerdict, ResponseVerdict, Step};
use uroce_sim::{Action, FabricConfig, Matcher, NodeId, Rule};
use uroce_tests::world::{cap, tuning, World, ALL_ACCESS};
use uroce_verbs::{RecvWr, RemoteTarget, SendWr, WcOpcode, WcStatus, WrOpcode};
use uroce_wire::aeth::{NakCode, Syndrome};
use uroce_wire::Opcode;

const MS: u64 = 1_000_000;

fn steps(w: &World, node: usize) -> Vec<Step> {
    let mut hca = w.nodes[node].hca.lock();
    std::iter::from_fn(|| hca.poll_step().map(|(_, step)| step)).collect()
}

#[test]
fn a_lost_first_packet_told_by_both_ends() {
    let mut w = World::new(2, FabricConfig::new(3));
    let a = w.qp(0, uroce_verbs::QpType::Rc, cap(16, 1, 0));
    let b = w.qp(1, uroce_verbs::QpType::Rc, cap(16, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(8192, ALL_ACCESS).unwrap();
    for node in &w.nodes {
        node.hca.lock().trace_steps(256);
    }
    w.fabric.add_rule(
        Rule::new(Matcher::any().opcode(Opcode::RC_SEND_FIRST).from(NodeId(0)), Action::Drop)
            .nth(1),
    );
    b.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![mr_b.sge(0, 4096)] }]).unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![mr_a.sge(0, 3000)];
    send.flags = uroce_verbs::SendFlags::SIGNALED;
    a.post_send(&[send]).unwrap();
    let done = w.wait(0, 1, 100 * MS);
    assert_eq!(done[0].status, WcStatus::Success);
    w.settle(10 * MS);

    let (qa, qb) = (a.qpn(), b.qpn());
    let responder = steps(&w, 1);
    let request = |opcode, verdict| Step::Request {
        qpn: qb,
        psn: match opcode {
            Opcode::RC_SEND_FIRST => uroce_wire::Psn::new(0),
            Opcode::RC_SEND_MIDDLE => uroce_wire::Psn::new(1),
            _ => uroce_wire::Psn::new(2),
        },
        opcode,
        verdict,
    };
    let expected = uroce_wire::Psn::new(0);
    let gap = |nak| RequestVerdict::OutOfSequence { expected, nak };
    let executed = RequestVerdict::Executed;
    let recv_done = Step::Completion {
        qpn: qb,
        cq: w.nodes[1].cq.index(),
        wr_id: 7,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
    };
    assert_eq!(
        responder,
        vec![
            request(Opcode::RC_SEND_MIDDLE, gap(true)),
            request(Opcode::RC_SEND_LAST, gap(false)),
            request(Opcode::RC_SEND_FIRST, executed),
            request(Opcode::RC_SEND_MIDDLE, executed),
            request(Opcode::RC_SEND_LAST, executed),
            recv_done,
        ],
        "{responder:#?}"
    );

    let requester = steps(&w, 0);
    let nak = Syndrome::Nak(NakCode::PsnSequenceError);
    assert!(
        matches!(
            requester.as_slice(),
            [
                Step::Response { verdict: ResponseVerdict::Nak(n), .. },
                Step::GoBack { cause: GoBackCause::SequenceNak, .. },
                Step::Response { verdict: ResponseVerdict::Ack { progressed: true }, .. },
                Step::Completion { wr_id: 1, status: WcStatus::Success, .. },
            ] if *n == nak
        ),
        "{requester:#?}"
    );
    let Step::GoBack { qpn, from, .. } = requester[1] else { unreachable!() };
    assert_eq!((qpn, from), (qa, uroce_wire::Psn::new(0)));

    // The printed form.
    let lines: Vec<String> = responder.iter().chain(&requester).map(ToString::to_string).collect();
    assert_eq!(
        lines[0],
        format!("QP {qb}: request RC_SEND_MIDDLE PSN 1: ahead of PSN 0, PSN sequence NAK")
    );
    assert!(
        lines.iter().any(|l| l == &format!("QP {qa}: go back to PSN 0 (PSN sequence NAK)")),
        "{lines:#?}"
    );
}

#[test]
fn tracing_is_off_unless_asked_and_bounded_when_on() {
    let mut w = World::new(2, FabricConfig::new(4));
    let a = w.qp(0, uroce_verbs::QpType::Rc, cap(64, 1, 0));
    let b = w.qp(1, uroce_verbs::QpType::Rc, cap(64, 1, 0));
    w.connect(0, &a, 1, &b, &tuning());
    let mr_a = w.nodes[0].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mr_b = w.nodes[1].pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let write = |id| {
        let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
        wr.sg_list = vec![mr_a.sge(0, 64)];
        wr.remote = RemoteTarget { addr: mr_b.addr(), rkey: mr_b.rkey() };
        wr.flags = uroce_verbs::SendFlags::SIGNALED;
        wr
    };
    a.post_send(&[write(1)]).unwrap();
    w.wait(0, 1, 100 * MS);
    assert!(steps(&w, 0).is_empty() && steps(&w, 1).is_empty(), "off by default");
    w.nodes[0].hca.lock().trace_steps(4);
    let wrs: Vec<SendWr> = (0..10).map(write).collect();
    a.post_send(&wrs).unwrap();
    w.wait(0, 10, 100 * MS);
    let kept = steps(&w, 0);
    assert_eq!(kept.len(), 4, "the newest four");
    assert!(w.nodes[0].hca.lock().steps_lost() > 0);
    assert!(matches!(kept.last(), Some(Step::Completion { wr_id: 9, .. })), "{kept:#?}");
}
