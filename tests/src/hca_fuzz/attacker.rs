//! The WQE attacker of [`hca_wqes`](super::hca_wqes): arbitrary and
//! well-formed-looking WQEs and ring indices written where the application
//! may write, doorbells for anything, and what the fabric does between.

use super::*;

impl Wqes {
    /// A ring of the given sort: `want` picks SQs, RQs/SRQs or any WQE ring.
    pub(super) fn pick_ring(
        &self,
        inp: &mut Input<'_>,
        want: fn(RingKind) -> bool,
    ) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.rings.len())
            .filter(|&r| self.rings[r].live && want(self.rings[r].kind))
            .collect();
        (!candidates.is_empty()).then(|| candidates[inp.below(candidates.len())])
    }

    /// The QP (node, index) a ring belongs to.
    pub(super) fn owner(&self, r: usize) -> (usize, Option<usize>) {
        let ring = &self.rings[r];
        match ring.kind {
            RingKind::Sq(qi) | RingKind::Rq(qi) => (ring.node, Some(qi)),
            RingKind::Srq | RingKind::Cq(_) => (ring.node, None),
        }
    }

    /// The doorbell that tells the device about new entries in ring `r`.
    pub(super) fn ring_doorbell(&self, r: usize) {
        let ring = self.rings[r];
        let node = &self.nodes[ring.node];
        let doorbell = match ring.kind {
            RingKind::Sq(qi) => Doorbell::SendQueue(node.qps[qi].qpn),
            RingKind::Rq(qi) => Doorbell::RecvQueue(node.qps[qi].qpn),
            RingKind::Srq => Doorbell::Srq(0),
            RingKind::Cq(ci) => Doorbell::ArmCq { cq: ci as u32, solicited_only: false },
        };
        self.doorbell(ring.node, doorbell);
    }

    /// Writes `bytes` at byte `offset` of slot `slot` of ring `r`, as the
    /// application (no guard: it is the application's memory).
    pub(super) fn write_slot(&self, r: usize, slot: u32, offset: usize, bytes: &[u8]) {
        let ring = &self.rings[r];
        let at = ring.desc.entry_addr(slot) + offset as u64;
        let room = (ring.desc.stride as usize).saturating_sub(offset);
        let _ = self.nodes[ring.node].guard.inner().write(at, &bytes[..bytes.len().min(room)]);
    }

    pub(super) fn write_index(&self, r: usize, offset: u64, value: u32) {
        let ring = &self.rings[r];
        let _ =
            self.nodes[ring.node].guard.inner().store_release_u32(ring.desc.base + offset, value);
    }

    /// Writes a slot at the producer index, publishes it and rings.
    pub(super) fn publish_next(&mut self, r: usize, slot: &[u8]) {
        let producer = self.rings[r].producer;
        self.write_slot(r, producer, 0, slot);
        let producer = producer.wrapping_add(1);
        self.rings[r].producer = producer;
        self.write_index(r, PRODUCER_OFFSET, producer);
        self.ring_doorbell(r);
    }

    pub(super) fn next_wr_id(&mut self) -> u64 {
        self.seq += 1;
        0xbad0_0000_0000_0000 | self.seq
    }

    /// A send WQE for SQ ring `r`: a well-formed one (as [`send_wr`]
    /// builds it), then, unless `legit`, with up to four fields broken.
    pub(super) fn send_slot(&mut self, inp: &mut Input<'_>, r: usize, legit: bool) -> Vec<u8> {
        let (n, qi) = self.owner(r);
        let qi = qi.expect("an SQ has a QP");
        let wr_id = self.next_wr_id();
        let stride = self.rings[r].desc.stride as usize;
        let (wr, hint) =
            send_wr(inp, wr_id, &self.nodes[n].qps[qi], &self.nodes[n], &self.nodes[1 - n]);
        if let Some(hint) = hint.filter(|_| self.nodes[n].key_hints.len() < 16) {
            self.nodes[n].key_hints.push(hint);
        }
        let wqe = wr.to_wqe();
        let mut slot = vec![0u8; stride];
        if wqe.encoded_len() <= stride {
            wqe.encode(&mut slot);
        }
        if !legit {
            for _ in 0..inp.below(5) {
                let word = inp.u64().to_le_bytes();
                match inp.below(12) {
                    0 => slot[8] = inp.u8(),
                    1 => slot[9] = inp.u8(),
                    2 => slot[10] = inp.u8(),
                    3 => slot[28..32].copy_from_slice(&word[..4]),
                    4 => slot[16..24].copy_from_slice(&word),
                    5 => slot[24..28].copy_from_slice(&word[..4]),
                    6 => slot[32..40].copy_from_slice(&word),
                    7 => slot[40..48].copy_from_slice(&word),
                    8 => slot[48..52].copy_from_slice(&word[..4]),
                    9 => slot[52..56].copy_from_slice(&word[..4]),
                    10 => slot[12..16].copy_from_slice(&word[..4]),
                    _ => {
                        let at = inp.below(stride);
                        slot[at] = inp.u8();
                    }
                }
            }
        }
        slot
    }

    /// A receive WQE for RQ/SRQ ring `r` (an empty input gives one whole
    /// page of the local region).
    pub(super) fn recv_slot(&mut self, inp: &mut Input<'_>, r: usize) -> Vec<u8> {
        let node = &self.nodes[self.rings[r].node];
        let stride = self.rings[r].desc.stride as usize;
        let sges = if inp.is_empty() {
            let local = &node.mrs[2];
            vec![Sge { addr: local.iova, length: 4096, lkey: Lkey(local.key) }]
        } else {
            (0..inp.below(4)).map(|_| node.pick_sge(inp)).collect()
        };
        let wr_id = self.next_wr_id();
        let wqe = RecvWqe { wr_id, sges };
        let mut slot = vec![0u8; stride];
        if wqe.encoded_len() <= stride {
            wqe.encode(&mut slot);
        }
        if !inp.is_empty() && inp.one_in(3) {
            match inp.below(3) {
                0 => slot[8] = inp.u8(),
                1 => {
                    let at = inp.below(stride);
                    slot[at] = inp.u8();
                }
                _ => {
                    let at = RECV_HEADER_LEN + inp.below(stride - RECV_HEADER_LEN);
                    let word = inp.u64().to_le_bytes();
                    let end = (at + 8).min(stride);
                    slot[at..end].copy_from_slice(&word[..end - at]);
                }
            }
        }
        slot
    }

    pub(super) fn step(&mut self, inp: &mut Input<'_>) {
        match inp.u8() {
            0..=49 => {
                // A broken send WQE where the next one goes, published.
                if let Some(r) = self.pick_ring(inp, |k| matches!(k, RingKind::Sq(_))) {
                    let slot = self.send_slot(inp, r, false);
                    self.publish_next(r, &slot);
                }
            }
            50..=69 => {
                if let Some(r) =
                    self.pick_ring(inp, |k| matches!(k, RingKind::Rq(_) | RingKind::Srq))
                {
                    let slot = self.recv_slot(inp, r);
                    self.publish_next(r, &slot);
                }
            }
            70..=84 => {
                // Raw bytes anywhere in a slot, published or not.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let slot = inp.u8() as u32;
                    let offset = inp.below(self.rings[r].desc.stride as usize);
                    let n = inp.below(64);
                    let bytes = inp.bytes(n).to_vec();
                    self.write_slot(r, slot, offset, &bytes);
                }
            }
            85..=109 => {
                // A producer index: one more, a jump, a step back, anything.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let ring = self.rings[r];
                    let value = match inp.below(6) {
                        0..=2 => ring.producer.wrapping_add(1),
                        3 => ring
                            .producer
                            .wrapping_add(inp.below(2 * ring.desc.entries as usize + 2) as u32),
                        4 => ring.producer.wrapping_sub(1 + inp.below(4) as u32),
                        _ => inp.u32(),
                    };
                    self.rings[r].producer = value;
                    self.write_index(r, PRODUCER_OFFSET, value);
                    if inp.u8() < 200 {
                        self.ring_doorbell(r);
                    }
                }
            }
            110..=119 => {
                // An index the device owns: a consumer index, or a CQ's
                // producer index.
                if let Some(r) = self.pick_ring(inp, |_| true) {
                    let offset = if inp.bool() { CONSUMER_OFFSET } else { PRODUCER_OFFSET };
                    let offset = if matches!(self.rings[r].kind, RingKind::Cq(_)) {
                        offset
                    } else {
                        CONSUMER_OFFSET
                    };
                    let value = if inp.bool() { self.rings[r].producer } else { inp.u32() };
                    self.write_index(r, offset, value);
                }
            }
            120..=134 => {
                // A doorbell for anything.
                let n = inp.below(2);
                let qpns = &self.nodes[n].all_qpns;
                let qpn =
                    if inp.one_in(4) { Qpn::new(inp.u24()) } else { qpns[inp.below(qpns.len())] };
                let doorbell = match inp.below(4) {
                    0 => Doorbell::SendQueue(qpn),
                    1 => Doorbell::RecvQueue(qpn),
                    2 => Doorbell::Srq(u32::from(inp.u8() % 3)),
                    _ => {
                        Doorbell::ArmCq { cq: u32::from(inp.u8() % 4), solicited_only: inp.bool() }
                    }
                };
                self.doorbell(n, doorbell);
            }
            135..=159 => {
                // Proper work, so that hostile and normal WQEs mix.
                if let Some(r) = self.pick_ring(inp, |k| !matches!(k, RingKind::Cq(_))) {
                    let slot = match self.rings[r].kind {
                        RingKind::Sq(_) => self.send_slot(inp, r, true),
                        _ => self.recv_slot(&mut Input::new(&[]), r),
                    };
                    self.publish_next(r, &slot);
                }
            }
            160..=194 => {
                let delta = inp.pick(&[2_000, 10_000, 100_000, 1_000_000, 20_000_000]);
                let delta = delta.min(MAX_RUN_NS - self.ran_ns);
                self.ran_ns += delta;
                let until = self.now().plus_nanos(delta);
                self.fabric.run_until(until);
            }
            195..=209 => {
                let n = inp.below(2);
                let ci = inp.below(self.nodes[n].cqs.len());
                let max = 1 + inp.below(32);
                self.poll_cq(n, ci, max);
            }
            210..=229 => self.qp_action(inp),
            230..=241 => {
                let n = inp.below(2);
                let i = inp.below(self.nodes[n].mrs.len());
                let node = &mut self.nodes[n];
                if node.mrs[i].live {
                    node.deregister(i);
                } else if node.mrs.len() < 32 {
                    let (spec, host) = (node.mrs[i].spec, node.mrs[i].host);
                    node.register(spec, Some(host - MR_SPECS[spec].offset));
                }
            }
            242..=245 => {
                // Destroy a QP: its rings are freed, and the device may not
                // touch them again.
                let n = inp.below(2);
                let qi = inp.below(self.nodes[n].qps.len());
                if let Some(qp) = self.nodes[n].qps[qi].qp.take() {
                    if qp.destroy().is_ok() {
                        for ring in self.rings.iter_mut() {
                            if ring.node == n
                                && matches!(ring.kind, RingKind::Sq(q) | RingKind::Rq(q) if q == qi)
                            {
                                ring.live = false;
                            }
                        }
                    }
                }
            }
            _ => {
                for n in 0..2 {
                    self.nodes[n].drain_events();
                }
            }
        }
    }
}
