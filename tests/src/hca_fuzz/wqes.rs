//! [`hca_wqes`]: a hostile application on two connected HCAs.

use super::*;

/// An HCA as the fabric drives it, with every packet it sends checked
/// ([`check_transmit`]).
pub(super) struct CheckedHca {
    pub(super) hca: SharedHca,
    pub(super) addresses: Vec<IpAddr>,
    pub(super) sent: u64,
}

impl Endpoint for CheckedHca {
    fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        self.hca.receive(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.hca.poll_transmit(now, buf)?;
        check_transmit(&self.addresses, &buf[..t.len], &t);
        self.sent += 1;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.hca.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.hca.handle_timeout(now);
    }
}

/// Which ring of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RingKind {
    Sq(usize),
    Rq(usize),
    Srq,
    Cq(usize),
}

/// A ring the application writes, with the producer index it last
/// published.
#[derive(Debug, Clone, Copy)]
pub(super) struct RingRef {
    pub(super) node: usize,
    pub(super) kind: RingKind,
    pub(super) desc: RingDesc,
    pub(super) producer: u32,
    pub(super) live: bool,
}

/// Virtual time one [`hca_wqes`] run may let the fabric run, in all: a
/// QP in an endless RNR loop (`rnr_retry` 7, a 10 us RNR timer, no receive
/// ever posted) sends about 70 packets a millisecond.
pub(super) const MAX_RUN_NS: u64 = 100_000_000;

/// The state of one [`hca_wqes`] run.
pub(super) struct Wqes {
    pub(super) fabric: Fabric<CheckedHca>,
    pub(super) nodes: Vec<Node>,
    pub(super) rings: Vec<RingRef>,
    pub(super) seq: u64,
    pub(super) completions: BTreeMap<String, u64>,
    /// Virtual time the run actions have used.
    pub(super) ran_ns: u64,
}

/// The QPs each node of [`hca_wqes`] has, index for index connected to
/// the other node's: (type, CQ, with the SRQ).
pub(super) const WQE_QPS: [(QpType, usize, bool); 5] = [
    (QpType::Rc, 0, false),
    (QpType::Uc, 0, false),
    (QpType::Ud, 0, false),
    (QpType::Rc, 0, true),
    (QpType::Rc, 1, false),
];

/// A hostile application on two connected HCAs: it writes arbitrary bytes
/// and arbitrary well-formed-looking WQEs into its SQ, RQ and SRQ slots,
/// publishes arbitrary producer indices (and overwrites the indices the
/// device owns), rings doorbells for anything, sends the device random
/// QP modifications and (de)registrations, destroys QPs, and between all
/// that lets the simulated fabric run for a while (with random loss,
/// duplication and reordering when the input asks for them).
///
/// Memory is a [`GuardedMemory`] on both nodes (a destroyed QP's rings
/// are freed, so the device may not touch them again), and every packet on
/// the fabric is checked. At the end every QP goes to the error state, the
/// device must still answer commands, and a fresh RC connection between
/// the two devices must still carry a SEND and a READ correctly.
pub fn hca_wqes(data: &[u8]) {
    hca_wqes_report(data);
}

/// [`hca_wqes`], returning what the run did.
pub fn hca_wqes_report(data: &[u8]) -> RunReport {
    let mut inp = Input::new(data);
    let mut run = Wqes::new(&mut inp);
    let mut actions = 0;
    while actions < MAX_ACTIONS && !inp.is_empty() {
        run.step(&mut inp);
        actions += 1;
    }
    let mut report = run.finish();
    report.actions = actions;
    report
}

impl Wqes {
    pub(super) fn new(inp: &mut Input<'_>) -> Wqes {
        let mut config = FabricConfig::new(u64::from(inp.u32()));
        let faults = inp.u8();
        if faults & 3 == 3 {
            config.faults.loss = Probability::from_percent(u32::from(faults >> 4));
            config.faults.duplicate = Probability::from_percent(u32::from(inp.u8() % 16));
            config.faults.reorder = Probability::from_percent(u32::from(inp.u8() % 16));
            config.faults.reorder_max_delay_ns = 1 + u64::from(inp.u16()) * 64;
        }
        let guards: Vec<Arc<GuardedMemory>> =
            (0..2).map(|_| Arc::new(GuardedMemory::new(64 << 20))).collect();
        let World { fabric, hosts, .. } = WorldBuilder::new(2, config)
            .hca_config(super::node::config())
            .memory(|i| guards[i].clone())
            .build_with(
                |host| CheckedHca {
                    hca: host.hca.clone(),
                    addresses: host.hca.addresses().to_vec(),
                    sent: 0,
                },
                |_| Vec::new(),
            );
        let mut nodes: Vec<Node> = hosts
            .into_iter()
            .zip(guards.iter().cloned())
            .enumerate()
            .map(|(n, (host, guard))| Node::on(n, host, guard))
            .collect();
        for node in nodes.iter_mut() {
            for (qp_type, cq, srq) in WQE_QPS {
                node.add_qp(qp_type, cq, srq, cap(8, 3, 48));
            }
        }
        let mtus = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
        for (i, &(qp_type, _, _)) in WQE_QPS.iter().enumerate() {
            let mut t = tuning(inp.pick(&mtus));
            t.timeout = 1 + inp.below(12) as u8;
            t.retry_cnt = inp.u8() & 7;
            t.rnr_retry = inp.u8() & 7;
            t.min_rnr_timer = inp.u8() & 31;
            let psns = [inp.u24(), inp.u24()];
            for n in 0..2 {
                let other = &nodes[1 - n];
                let peer = if qp_type == QpType::Ud {
                    Peer::Datagram
                } else {
                    Peer::Connected { ip: other.ip, qpn: other.qps[i].qpn }
                };
                let link = LinkSpec {
                    peer,
                    access: EVERYTHING,
                    qkey: 0x1111_1111 * (n as u32 + 1),
                    sq_psn: psns[n],
                    rq_psn: psns[1 - n],
                    tuning: t,
                };
                nodes[n].connect(i, link);
            }
        }
        for n in 0..2 {
            let (other, own) = (nodes[1 - n].ip, nodes[n].ip);
            nodes[n].add_ah(Gid::from(other), 1);
            nodes[n].add_ah(Gid::from(own), 1);
        }
        let mut rings = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            let mut add =
                |kind, desc| rings.push(RingRef { node: n, kind, desc, producer: 0, live: true });
            for (qi, q) in node.qps.iter().enumerate() {
                add(RingKind::Sq(qi), q.sq);
                if let Some(rq) = q.rq {
                    add(RingKind::Rq(qi), rq);
                }
            }
            if let Some((_, desc)) = node.srq {
                add(RingKind::Srq, desc);
            }
            for (ci, cq) in node.cqs.iter().enumerate() {
                add(RingKind::Cq(ci), cq.ring);
            }
        }
        let mut run =
            Wqes { fabric, nodes, rings, seq: 0, completions: BTreeMap::new(), ran_ns: 0 };
        // Receives to start with, posted properly.
        for r in 0..run.rings.len() {
            if matches!(run.rings[r].kind, RingKind::Rq(_) | RingKind::Srq) {
                for _ in 0..2 {
                    let slot = run.recv_slot(&mut Input::new(&[]), r);
                    run.publish_next(r, &slot);
                }
            }
        }
        run
    }

    pub(super) fn now(&self) -> Instant {
        self.fabric.now()
    }

    pub(super) fn doorbell(&self, n: usize, doorbell: Doorbell) {
        let now = self.now();
        self.nodes[n].hca.borrow_mut().doorbell(now, doorbell);
    }
}

impl Wqes {
    /// Polls CQ `ci` of node `n`: whatever the application did to the
    /// indices, the device writes only well-formed completions of its own
    /// QPs.
    pub(super) fn poll_cq(&mut self, n: usize, ci: usize, max: usize) {
        let node = &self.nodes[n];
        let cqes = node.cqs[ci].cq.poll(max).unwrap_or_else(|e| panic!("node {n} CQ {ci}: {e}"));
        for cqe in cqes {
            // A slot the device never wrote reads as zeros (QPN 0).
            if cqe.qp_num.value() != 0 {
                assert!(
                    node.all_qpns.contains(&cqe.qp_num),
                    "node {n} CQ {ci}: completion of unknown QP: {cqe:?}"
                );
            }
            *self.completions.entry(format!("{:?}", cqe.status)).or_default() += 1;
        }
    }

    /// QP state changes: to ERR, a properly reconnected pair, or a random
    /// modification.
    pub(super) fn qp_action(&mut self, inp: &mut Input<'_>) {
        let n = inp.below(2);
        let qi = inp.below(self.nodes[n].qps.len());
        let qpn = self.nodes[n].qps[qi].qpn;
        match inp.below(4) {
            0 => {
                let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
                let _ = self.nodes[n].cmd(Command::ModifyQp { qpn, attr, mask: AttrMask::STATE });
            }
            1 => self.reconnect(inp, qi),
            _ => {
                let attr = random_attr(inp, &self.nodes[n], &self.nodes[1 - n]);
                let mask =
                    AttrMask(inp.u32() & if inp.one_in(4) { u32::MAX } else { AttrMask::ALL.0 });
                let _ = self.nodes[n].cmd(Command::ModifyQp { qpn, attr, mask });
            }
        }
    }

    /// Resets pair `qi` on both nodes and connects it again, properly.
    pub(super) fn reconnect(&mut self, inp: &mut Input<'_>, qi: usize) {
        let psns = [inp.u24(), inp.u24()];
        let mtu = inp.pick(&[Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096]);
        for n in 0..2 {
            let Some(qp) = self.nodes[n].qps[qi].qp.as_ref() else { return };
            let attr = QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() };
            if qp.modify(&attr, AttrMask::STATE).is_err() {
                return;
            }
            for ring in self.rings.iter_mut() {
                if ring.node == n
                    && matches!(ring.kind, RingKind::Sq(q) | RingKind::Rq(q) if q == qi)
                {
                    ring.producer = 0;
                }
            }
        }
        for n in 0..2 {
            let q = &self.nodes[n].qps[qi];
            let other = &self.nodes[1 - n];
            let peer = match q.peer {
                Peer::Datagram => Peer::Datagram,
                Peer::Connected { .. } => Peer::Connected { ip: other.ip, qpn: other.qps[qi].qpn },
            };
            let link = LinkSpec {
                peer,
                access: EVERYTHING,
                qkey: q.qkey,
                sq_psn: psns[n],
                rq_psn: psns[1 - n],
                tuning: tuning(mtu),
            };
            self.nodes[n].connect(qi, link);
        }
    }

    pub(super) fn finish(mut self) -> RunReport {
        // Everything to ERR, and let the fabric settle.
        for node in &self.nodes {
            for q in node.qps.iter().filter(|q| q.qp.is_some()) {
                let attr = QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() };
                let _ = node.cmd(Command::ModifyQp { qpn: q.qpn, attr, mask: AttrMask::STATE });
            }
        }
        self.fabric.set_faults(uroce_sim::FaultConfig::NONE);
        let until = self.now().plus_nanos(50_000_000);
        self.fabric.run_until_idle(until);
        for n in 0..2 {
            self.nodes[n].drain_events();
            for ci in 0..self.nodes[n].cqs.len() {
                self.poll_cq(n, ci, 1 << 12);
            }
        }
        // The device still answers commands...
        for node in &self.nodes {
            assert!(matches!(node.cmd(Command::QueryDevice), Ok(Reply::Device(_))), "QueryDevice");
            assert!(matches!(node.cmd(Command::QueryPort), Ok(Reply::Port(_))), "QueryPort");
        }
        // ...and a fresh connection still works.
        self.fresh_connection();
        let c = self.nodes[0].hca.borrow().counters().clone();
        let sent: u64 = self.fabric.endpoints().iter().map(|e| e.sent).sum();
        RunReport {
            counters: c,
            fed: self.fabric.counters().delivered,
            sent,
            completions: self.completions,
            checked_accesses: self.nodes.iter().map(|n| n.guard.checked()).sum(),
            actions: 0,
        }
    }

    /// A new CQ, region and RC QP on each node, connected: a 3000-byte SEND
    /// and a 2000-byte READ from node 0 must complete and move the bytes.
    pub(super) fn fresh_connection(&mut self) {
        let mut ends = Vec::new();
        for node in self.nodes.iter_mut() {
            node.guard.set_mode(AllocKind::Ring);
            let cq = node.ctx.create_cq(16).expect("a fresh CQ");
            let (base, _) = *node.guard.take_recent().last().expect("CQ ring allocation");
            node.cqs.push(CqInfo {
                cq,
                ring: RingDesc { base, ..cq_ring_shape(16) },
                overrun: false,
            });
            let ci = node.cqs.len() - 1;
            let qi = node.add_qp(QpType::Rc, ci, false, cap(4, 1, 0));
            let mr = node.register(0, None).expect("a fresh region");
            ends.push((ci, qi, mr));
        }
        for n in 0..2 {
            let (_, qi, _) = ends[n];
            let peer = Peer::Connected {
                ip: self.nodes[1 - n].ip,
                qpn: self.nodes[1 - n].qps[ends[1 - n].1].qpn,
            };
            let link = LinkSpec {
                peer,
                access: EVERYTHING,
                qkey: 0,
                sq_psn: 7 + n as u32,
                rq_psn: 8 - n as u32,
                tuning: tuning(Mtu::Mtu1024),
            };
            self.nodes[n].connect(qi, link);
        }
        let (mr_a, mr_b) =
            (self.nodes[0].mrs[ends[0].2].clone(), self.nodes[1].mrs[ends[1].2].clone());
        let qp_a = self.nodes[0].qps[ends[0].1].qp.as_ref().expect("fresh QP");
        let qp_b = self.nodes[1].qps[ends[1].1].qp.as_ref().expect("fresh QP");
        let recv = RecvWr {
            wr_id: 1,
            sg_list: vec![Sge { addr: mr_b.iova, length: 3000, lkey: Lkey(mr_b.key) }],
        };
        qp_b.post_recv(&[recv]).expect("post a fresh receive");
        let mut send = SendWr::new(2, WrOpcode::Send);
        send.sg_list = vec![Sge { addr: mr_a.iova, length: 3000, lkey: Lkey(mr_a.key) }];
        let mut read = SendWr::new(3, WrOpcode::RdmaRead);
        read.sg_list = vec![Sge { addr: mr_a.iova + 4000, length: 2000, lkey: Lkey(mr_a.key) }];
        read.remote = RemoteTarget { addr: mr_b.iova + 4000, rkey: Rkey(mr_b.key) };
        qp_a.post_send(&[send, read]).expect("post fresh sends");
        let deadline = self.now().plus_nanos(200_000_000);
        let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
        while (at_a.len() < 2 || at_b.is_empty()) && self.now() < deadline {
            let until = self.now().plus_nanos(100_000);
            self.fabric.run_until(until);
            at_a.extend(self.nodes[0].cqs[ends[0].0].cq.poll(4).expect("poll the fresh CQ"));
            at_b.extend(self.nodes[1].cqs[ends[1].0].cq.poll(4).expect("poll the fresh CQ"));
        }
        let summary = |c: &[Cqe]| c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
        assert_eq!(
            summary(&at_a),
            [(2, WcStatus::Success), (3, WcStatus::Success)],
            "fresh sender"
        );
        assert_eq!(summary(&at_b), [(1, WcStatus::Success)], "fresh receiver");
        assert_eq!(at_b[0].byte_len, 3000);
        let read_back = |node: &Node, addr: u64, len: usize| {
            let mut v = vec![0; len];
            node.guard.inner().read(addr, &mut v).expect("read a fresh region");
            v
        };
        assert_eq!(
            read_back(&self.nodes[1], mr_b.host, 3000),
            read_back(&self.nodes[0], mr_a.host, 3000),
            "SEND data"
        );
        assert_eq!(
            read_back(&self.nodes[0], mr_a.host + 4000, 2000),
            read_back(&self.nodes[1], mr_b.host + 4000, 2000),
            "READ data"
        );
    }
}

/// QP attributes from the input, near what a real modify would carry.
pub(super) fn random_attr(inp: &mut Input<'_>, own: &Node, other: &Node) -> QpAttr {
    let state = |inp: &mut Input<'_>| QpState::from_raw(inp.u8() % 8);
    let dgid = match inp.below(4) {
        0 => Gid::from(own.ip),
        1 => Gid::from_ip(IpAddr::V6(other.ip6)),
        2 => Gid(inp.u64().to_le_bytes().repeat(2).try_into().expect("16 bytes")),
        _ => Gid::from(other.ip),
    };
    let small = |inp: &mut Input<'_>| if inp.one_in(4) { inp.u8() } else { inp.u8() % 8 };
    QpAttr {
        qp_state: state(inp),
        cur_qp_state: state(inp),
        path_mtu: Mtu::from_raw(inp.u8() % 7),
        qkey: inp.u32(),
        rq_psn: inp.u32(),
        sq_psn: inp.u32(),
        dest_qp_num: if inp.bool() {
            other.all_qpns[inp.below(other.all_qpns.len())].value()
        } else {
            inp.u32()
        },
        qp_access_flags: Access(if inp.one_in(4) { inp.u32() } else { u32::from(inp.u8() & 0x1f) }),
        cap: QpCap::default(),
        ah_attr: AhAttr {
            dgid,
            sgid_index: inp.u8() % 3,
            flow_label: inp.u32() & 0xfffff,
            hop_limit: inp.u8(),
            traffic_class: inp.u8(),
            sl: inp.u8() & 0xf,
            port_num: if inp.one_in(8) { inp.u8() } else { 1 },
        },
        pkey_index: if inp.one_in(8) { inp.u16() } else { 0 },
        en_sqd_async_notify: inp.bool(),
        max_rd_atomic: small(inp),
        max_dest_rd_atomic: small(inp),
        min_rnr_timer: small(inp),
        port_num: if inp.one_in(8) { inp.u8() } else { 1 },
        timeout: small(inp),
        retry_cnt: small(inp),
        rnr_retry: small(inp),
    }
}
