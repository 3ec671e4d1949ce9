//! [`hca_packets`]: arbitrary packets to a device with live QPs.

use super::*;

/// The fake peer every "remote" QP of [`hca_packets`] is connected to.
pub(super) const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// First QPN of the fake peer's QPs.
pub(super) const PEER_QPN: u32 = 0x100;
/// Actions per run at most.
pub(super) const MAX_ACTIONS: usize = 400;
/// Packets kept on the loopback "wire" at most.
pub(super) const MAX_WIRE: usize = 128;

/// What the device expects of a QP, to aim packets at.
pub(super) struct QpView {
    /// Expected PSN as responder.
    pub(super) epsn: Psn,
    /// Oldest PSN not yet acknowledged, as requester.
    pub(super) comp_psn: Psn,
    /// Next PSN the requester will use.
    pub(super) next_psn: Psn,
    /// Path MTU.
    pub(super) mtu: u32,
    /// The oldest outstanding send WQE: (first PSN, length, READ bytes placed).
    pub(super) oldest: Option<(Psn, u64, u64)>,
}

/// The state of one [`hca_packets`] run.
pub(super) struct Packets {
    pub(super) node: Node,
    pub(super) now: Instant,
    /// Packets the device sent to itself (loopback QPs), not yet delivered.
    pub(super) wire: VecDeque<Vec<u8>>,
    pub(super) last: Option<Vec<u8>>,
    pub(super) fed: u64,
    pub(super) sent: u64,
    pub(super) buf: Vec<u8>,
    pub(super) book: WrBook,
    pub(super) completions: BTreeMap<String, u64>,
}

/// Arbitrary packets against one HCA with live QPs of every type
/// (connected to a fake peer whose packets the input makes, and to each
/// other through the device's own address), registered regions with
/// various rights, memory windows and an SRQ; the input also plays a
/// well-behaved application (posting WRs, polling CQs, moving QPs through
/// their states) and the network (delivering, dropping, duplicating,
/// reordering and damaging the packets the device sends itself).
///
/// Memory is a [`GuardedMemory`]. After the run every QP is moved to the
/// error state and the CQs drained; then every signaled send and every
/// receive posted to an RQ must have completed exactly once (unless its CQ
/// overran), every completion must match what was posted, and the counters
/// must add up.
pub fn hca_packets(data: &[u8]) {
    hca_packets_report(data);
}

/// What a run did, to see that the harness reaches deep (and for tests that
/// say so).
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// The device's counters at the end (node 0 for [`hca_wqes`]).
    pub counters: uroce_hca::counters::Counters,
    /// Packets handed to the device by the harness.
    pub fed: u64,
    /// Packets the device sent.
    pub sent: u64,
    /// Completions polled, by status.
    pub completions: BTreeMap<String, u64>,
    /// Host memory accesses the guard checked.
    pub checked_accesses: u64,
    /// Actions run.
    pub actions: usize,
}

/// [`hca_packets`], returning what the run did.
pub fn hca_packets_report(data: &[u8]) -> RunReport {
    let mut inp = Input::new(data);
    let mut run = Packets::new(&mut inp);
    let mut actions = 0;
    while actions < MAX_ACTIONS && !inp.is_empty() {
        run.step(&mut inp);
        actions += 1;
    }
    let mut report = run.finish();
    report.actions = actions;
    report
}

impl Packets {
    pub(super) fn new(inp: &mut Input<'_>) -> Packets {
        let mut node = Node::new(0);
        let dut = node.ip;
        let big = cap(16, 4, 64);
        // The QPs the fake peer talks to: their PSNs, MTUs and retry
        // counts come from the input.
        let mtus = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
        let mut remote_tuning = tuning(inp.pick(&mtus));
        remote_tuning.timeout = 1 + inp.below(14) as u8;
        remote_tuning.retry_cnt = inp.u8() & 7;
        remote_tuning.rnr_retry = inp.u8() & 7;
        remote_tuning.rd_atomic = 1 + inp.below(8) as u8;
        remote_tuning.min_rnr_timer = inp.u8() & 31;
        let psn_a = inp.u24();
        let psn_b = inp.u24();
        let specs = [
            (QpType::Rc, 0, false, EVERYTHING, remote_tuning),
            (QpType::Rc, 1, false, Access::REMOTE_READ, Tuning { rd_atomic: 1, ..remote_tuning }),
            (QpType::Uc, 0, false, EVERYTHING, remote_tuning),
            (QpType::Rc, 0, true, EVERYTHING, remote_tuning),
        ];
        for (i, (qp_type, cq, srq, access, t)) in specs.into_iter().enumerate() {
            let qi = node.add_qp(qp_type, cq, srq, big);
            let peer = Peer::Connected { ip: PEER_IP, qpn: Qpn::new(PEER_QPN + i as u32) };
            let link = LinkSpec { peer, access, qkey: 0, sq_psn: psn_a, rq_psn: psn_b, tuning: t };
            node.connect(qi, link);
        }
        // Loopback pairs: an RC and a UC connection from the device to
        // itself, with a small MTU so that messages take several packets.
        for qp_type in [QpType::Rc, QpType::Uc] {
            let a = node.add_qp(qp_type, 0, false, big);
            let b = node.add_qp(qp_type, 0, false, big);
            let (qpn_a, qpn_b) = (node.qps[a].qpn, node.qps[b].qpn);
            let t = tuning(Mtu::Mtu256);
            let link = |qpn, sq_psn, rq_psn| LinkSpec {
                peer: Peer::Connected { ip: dut, qpn },
                access: EVERYTHING,
                qkey: 0,
                sq_psn,
                rq_psn,
                tuning: t,
            };
            node.connect(a, link(qpn_b, 100, 0xff_fff0));
            node.connect(b, link(qpn_a, 0xff_fff0, 100));
        }
        for qkey in [0x1111_1111, 0x2222_2222] {
            let qi = node.add_qp(QpType::Ud, 0, false, big);
            let link = LinkSpec {
                peer: Peer::Datagram,
                access: EVERYTHING,
                qkey,
                sq_psn: inp.u24(),
                rq_psn: 0,
                tuning: tuning(Mtu::Mtu4096),
            };
            node.connect(qi, link);
        }
        node.add_ah(Gid::from(PEER_IP), 1);
        node.add_ah(Gid::from(dut), 1);
        node.add_ah(Gid::from_ip(IpAddr::V6(node.ip6)), 0);
        let mut run = Packets {
            node,
            now: Instant::ZERO,
            wire: VecDeque::new(),
            last: None,
            fed: 0,
            sent: 0,
            buf: vec![0; MAX_PACKET_LEN],
            book: WrBook::default(),
            completions: BTreeMap::new(),
        };
        // Two receives on every RQ and four on the SRQ to start with.
        for qi in 0..run.node.qps.len() {
            if !run.node.qps[qi].uses_srq {
                for _ in 0..2 {
                    run.post_recv_to(Some(qi), &mut Input::new(&[]));
                }
            }
        }
        for _ in 0..4 {
            run.post_recv_to(None, &mut Input::new(&[]));
        }
        run
    }

    pub(super) fn step(&mut self, inp: &mut Input<'_>) {
        self.now = self.now.plus_nanos(1_000);
        let due = self.node.hca.poll_timeout().is_some_and(|t| t <= self.now);
        if due {
            self.node.hca.handle_timeout(self.now);
        }
        match inp.u8() {
            0..=99 => {
                if let Some(packet) = self.build_packet(inp) {
                    self.deliver(packet);
                }
            }
            100..=117 => {
                if let Some(mut packet) = self.build_packet(inp) {
                    mutate_frame(inp, &mut packet);
                    self.deliver(packet);
                }
            }
            118..=125 => {
                // Arbitrary transport bytes in an intact frame.
                if let Some(mut packet) = self.build_packet(inp) {
                    let n = inp.below(96);
                    let transport = inp.bytes(n).to_vec();
                    reframe(&mut packet, &transport);
                    self.deliver(packet);
                }
            }
            126..=131 => {
                // Arbitrary bytes as an IP packet.
                let n = inp.below(160);
                let raw = inp.bytes(n).to_vec();
                self.deliver(raw);
            }
            132..=135 => {
                if let Some(packet) = self.last.clone() {
                    self.deliver(packet);
                }
            }
            136..=155 => {
                let max = 1 + inp.below(32);
                self.drain(max);
            }
            156..=171 => self.wire_action(inp),
            172..=189 => self.post_send(inp),
            190..=199 => {
                let target = inp.below(self.node.qps.len() + 1);
                let qi = (target < self.node.qps.len()).then_some(target);
                self.post_recv_to(qi, inp);
            }
            200..=211 => {
                let delta = inp.pick(&[1_000, 20_000, 300_000, 2_000_000, 40_000_000, 700_000_000]);
                self.now = self.now.plus_nanos(delta);
                self.node.hca.handle_timeout(self.now);
            }
            212..=223 => {
                let cq = inp.below(self.node.cqs.len());
                let max = 1 + inp.below(16);
                self.poll_cq(cq, max);
            }
            224..=227 => {
                let cq = &self.node.cqs[inp.below(self.node.cqs.len())];
                cq.cq.req_notify(inp.bool());
            }
            228..=235 => self.qp_action(inp),
            _ => self.mr_action(inp),
        }
        self.node.drain_events();
    }

    /// Hands one IP packet to the device.
    pub(super) fn deliver(&mut self, packet: Vec<u8>) {
        self.fed += 1;
        self.node.hca.receive(self.now, &packet);
        self.last = Some(packet);
    }

    /// Takes up to `max` packets from the device, checks each, and puts
    /// those for the device itself on the wire.
    pub(super) fn drain(&mut self, max: usize) {
        let addresses = self.node.hca.addresses().to_vec();
        for _ in 0..max {
            let Some(t) = self.node.hca.poll_transmit(self.now, &mut self.buf) else { break };
            self.sent += 1;
            let bytes = self.buf[..t.len].to_vec();
            let (bth, payload_len) = check_transmit(&addresses, &bytes, &t);
            let sender = if t.destination == IpAddr::V4(PEER_IP)
                && bth.opcode.transport() != Transport::Ud
            {
                let i = bth.dest_qpn.value().wrapping_sub(PEER_QPN) as usize;
                let q = self.node.qps.get(i);
                Some(q.unwrap_or_else(|| {
                    panic!("sent to peer QPN {:?}, which no QP is connected to", bth.dest_qpn)
                }))
            } else if bth.opcode.transport() != Transport::Ud {
                // Loopback: the destination QP's peer is the sender.
                let dest = self.node.qps.iter().find(|q| q.qpn == bth.dest_qpn);
                let dest =
                    dest.unwrap_or_else(|| panic!("looped back to unknown QP {:?}", bth.dest_qpn));
                let Peer::Connected { qpn, .. } = dest.peer else {
                    panic!("connected packet to UD QP")
                };
                self.node.qps.iter().find(|q| q.qpn == qpn)
            } else {
                None
            };
            if let Some(q) = sender {
                check_against_sender(q, &bth, payload_len);
            }
            if addresses.contains(&t.destination) {
                if self.wire.len() == MAX_WIRE {
                    self.wire.pop_front();
                }
                self.wire.push_back(bytes);
            }
        }
    }

    /// The network between the device and itself.
    pub(super) fn wire_action(&mut self, inp: &mut Input<'_>) {
        if self.wire.is_empty() {
            return;
        }
        let i = if inp.bool() { 0 } else { inp.below(self.wire.len()) };
        match inp.below(8) {
            0..=3 => {
                let p = self.wire.remove(i).expect("index below len");
                self.deliver(p);
            }
            4 => {
                let p = self.wire[i].clone();
                self.deliver(p);
            }
            5 => {
                self.wire.remove(i);
            }
            6 => {
                let mut p = self.wire.remove(i).expect("index below len");
                mutate_frame(inp, &mut p);
                self.deliver(p);
            }
            _ => {
                // Everything, in order.
                while let Some(p) = self.wire.pop_front() {
                    self.deliver(p);
                }
            }
        }
    }

    /// What the device expects of QP `qpn`.
    pub(super) fn view(&self, qpn: Qpn) -> Option<QpView> {
        let hca = self.node.hca.borrow();
        let qp = hca.qp(qpn)?;
        let oldest = qp
            .entry(qp.sq.consumer)
            .filter(|e| e.psn_assigned)
            .map(|e| (e.first_psn, e.length(), e.read_placed));
        Some(QpView {
            epsn: qp.resp.epsn,
            comp_psn: qp.comp.psn,
            next_psn: qp.req.next_psn,
            mtu: qp.mtu(),
            oldest,
        })
    }
}

impl Packets {
    /// Posts a send WR on a QP, as the application would.
    pub(super) fn post_send(&mut self, inp: &mut Input<'_>) {
        let qi = inp.below(self.node.qps.len());
        let wr_id = self.book.next_id();
        // The device is both sides' memory: local and remote targets alike
        // are its own regions.
        let (wr, hint) = send_wr(inp, wr_id, &self.node.qps[qi], &self.node, &self.node);
        if let Some(hint) = hint.filter(|_| self.node.key_hints.len() < 16) {
            self.node.key_hints.push(hint);
        }
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        let opcode = wr.opcode;
        let Some(qp) = self.node.qps[qi].qp.as_ref() else { return };
        if qp.post_send(&[wr]).is_ok() {
            self.book.posted(wr_id, Some(qi), WrKind::Send(opcode), signaled);
        }
    }

    /// Posts a receive WR on QP `qi`'s RQ, or on the SRQ.
    pub(super) fn post_recv_to(&mut self, qi: Option<usize>, inp: &mut Input<'_>) {
        let wr_id = self.book.next_id();
        let sg_list: Vec<Sge> = if inp.is_empty() {
            // The setup's receives: a whole page of the local region.
            let local = &self.node.mrs[2];
            vec![Sge { addr: local.iova, length: 4096, lkey: Lkey(local.key) }]
        } else {
            (0..inp.below(3)).map(|_| self.node.pick_sge(inp)).collect()
        };
        let capacity = sg_list.iter().map(|s| u64::from(s.length)).sum();
        let wr = RecvWr { wr_id, sg_list };
        match qi {
            Some(qi) => {
                let q = &self.node.qps[qi];
                let Some(qp) = q.qp.as_ref() else { return };
                if !q.uses_srq && qp.post_recv(&[wr]).is_ok() {
                    self.book.posted(wr_id, Some(qi), WrKind::Recv { capacity }, true);
                }
            }
            None => {
                let Some((srq, _)) = self.node.srq.as_ref() else { return };
                if srq.post_recv(&[wr]).is_ok() {
                    self.book.posted(wr_id, None, WrKind::Recv { capacity }, false);
                }
            }
        }
    }

    /// Polls up to `max` completions from CQ `cq` and checks them.
    pub(super) fn poll_cq(&mut self, cq: usize, max: usize) -> usize {
        let cqes = self.node.cqs[cq].cq.poll(max).unwrap_or_else(|e| panic!("poll CQ {cq}: {e}"));
        for cqe in &cqes {
            self.book.complete(&self.node, cq, cqe);
            *self.completions.entry(format!("{:?}", cqe.status)).or_default() += 1;
        }
        cqes.len()
    }

    /// State changes: to ERR, to SQD, or a reset and a new connection.
    pub(super) fn qp_action(&mut self, inp: &mut Input<'_>) {
        let qi = inp.below(self.node.qps.len());
        let Some(qp) = self.node.qps[qi].qp.as_ref() else { return };
        match inp.below(4) {
            0 | 1 => {
                let _ = connect::to_error(qp);
            }
            2 => {
                let attr = QpAttr {
                    qp_state: Some(QpState::Sqd),
                    en_sqd_async_notify: inp.bool(),
                    ..QpAttr::default()
                };
                let _ = qp.modify(&attr, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY);
            }
            _ => {
                // Completions written before the reset are legitimate:
                // take them first.
                let cq = self.node.qps[qi].cq;
                while self.poll_cq(cq, 64) > 0 {}
                let attr = QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() };
                let qp = self.node.qps[qi].qp.as_ref().expect("checked");
                if qp.modify(&attr, AttrMask::STATE).is_err() {
                    return;
                }
                self.book.discard(qi);
                let q = &self.node.qps[qi];
                let link = LinkSpec {
                    peer: q.peer,
                    access: EVERYTHING,
                    qkey: q.qkey,
                    sq_psn: inp.u24(),
                    rq_psn: inp.u24(),
                    tuning: tuning(Mtu::fitting(q.mtu)),
                };
                self.node.connect(qi, link);
            }
        }
    }

    /// Deregisters a region, or registers one again.
    pub(super) fn mr_action(&mut self, inp: &mut Input<'_>) {
        let i = inp.below(self.node.mrs.len());
        if self.node.mrs[i].live {
            self.node.deregister(i);
        } else if self.node.mrs.len() < 32 {
            let (spec, host) = (self.node.mrs[i].spec, self.node.mrs[i].host);
            self.node.register(spec, Some(host - MR_SPECS[spec].offset));
        }
    }

    pub(super) fn finish(mut self) -> RunReport {
        self.drain(4096);
        for qi in 0..self.node.qps.len() {
            if let Some(qp) = self.node.qps[qi].qp.as_ref() {
                let _ = connect::to_error(qp);
            }
        }
        self.drain(4096);
        self.node.drain_events();
        for cq in 0..self.node.cqs.len() {
            while self.poll_cq(cq, 256) > 0 {}
        }
        self.node.drain_events();
        for (wr_id, r) in &self.book.records {
            let q = r.qp.map(|qi| &self.node.qps[qi]);
            let overran = q.is_some_and(|q| self.node.cqs[q.cq].overrun);
            if r.must_complete && !r.completed && !r.discarded && !overran {
                panic!("WR {wr_id:#x} ({:?}) on QP {:?} never completed", r.kind, q.map(|q| q.qpn));
            }
        }
        let c = self.node.hca.borrow().counters().clone();
        assert_eq!(c.sent_pkts, self.sent, "sent_pkts counts every transmit: {c:?}");
        let dropped_early = c.rcvd_icrc_err + c.rcvd_unknown_qp;
        assert!(
            c.rcvd_pkts + dropped_early <= self.fed,
            "more packets counted than fed ({}): {c:?}",
            self.fed
        );
        let all = c.rcvd_pkts + dropped_early + c.rcvd_malformed + c.rcvd_bad_key_or_addr;
        assert!(all >= self.fed, "a packet went uncounted ({} fed): {c:?}", self.fed);
        assert!(c.duplicate_request + c.out_of_seq_request <= c.rcvd_pkts, "{c:?}");
        assert!(c.rcvd_ghost_response + c.rcvd_seq_err + c.rcvd_rnr_err <= c.rcvd_pkts, "{c:?}");
        assert!(c.send_nak + c.send_rnr_err <= c.rcvd_pkts, "NAKs without requests: {c:?}");
        assert_eq!(c.link_downed, 0, "{c:?}");
        RunReport {
            counters: c,
            fed: self.fed,
            sent: self.sent,
            completions: self.completions,
            checked_accesses: self.node.guard.checked(),
            actions: 0,
        }
    }
}
