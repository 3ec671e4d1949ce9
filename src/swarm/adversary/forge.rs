//! Forging: replays, stale responses and stale requests built from the
//! captured sample, each judged stale against its target QP's real state
//! when it is built.

use super::watch::Expect;
use super::*;

impl Adversary {
    /// The state of QP `qpn` on node `node`.
    pub(super) fn target(&mut self, node: usize, qpn: u32) -> Target {
        let hca = self.hcas[node].borrow();
        let destroyed = self.destroyed.contains(&(node, qpn));
        let live = hca.qp(Qpn::new(qpn));
        if destroyed && live.is_some() {
            drop(hca);
            self.violation(format!(
                "node{node}: QPN {qpn:#x} of a destroyed QP names a live QP again"
            ));
            return Target::Orphan { slot_reused: true };
        }
        if let Some(qp) = live.filter(|qp| qp.can_receive()) {
            return Target::Live { comp: qp.comp.psn, next: qp.req.next_psn, epsn: qp.resp.epsn };
        }
        let slot = |q: u32| q.wrapping_sub(FIRST_QPN) % self.max_qp;
        let slot_reused = self
            .qpns
            .range((node, 0)..(node + 1, 0))
            .any(|&(_, q)| q != qpn && slot(q) == slot(qpn) && hca.qp(Qpn::new(q)).is_some());
        Target::Orphan { slot_reused }
    }

    /// Builds the next packet; `None` when nothing is captured yet.
    pub(super) fn forge(&mut self) -> Option<(Vec<u8>, IpAddr)> {
        for _ in 0..4 {
            let group = self.rng.below(100);
            let built = match group {
                0..=24 => self.replay(),
                25..=64 => self.stale_response(),
                _ => self.stale_request(),
            };
            if let Some((bytes, record)) = built {
                let Classified::Roce(frame) = classify(&bytes, Link::RawIp) else {
                    unreachable!("the adversary built a frame it cannot read")
                };
                debug_assert!(frame.integrity_ok());
                let destination = frame.ip.destination();
                self.stats.injected += 1;
                self.stats.by_kind[record.kind.index()] += 1;
                self.remember(Fnv64::digest(&bytes), record);
                return Some((bytes, destination));
            }
        }
        self.stats.skipped += 1;
        None
    }

    pub(super) fn remember(&mut self, digest: u64, mut record: Record) {
        let seq = self.next_record;
        self.next_record += 1;
        if let Some((old, old_seq)) = self.records.remove(&digest) {
            self.record_order.remove(&old_seq);
            record.expect = old.expect.merge(record.expect);
        } else if self.records.len() >= MAX_RECORDS {
            if let Some((_, oldest)) = self.record_order.pop_first() {
                self.records.remove(&oldest);
            }
        }
        self.record_order.insert(seq, digest);
        self.records.insert(digest, (record, seq));
    }

    pub(super) fn count_orphan(&mut self, slot_reused: bool) {
        self.stats.orphans += 1;
        if slot_reused {
            self.stats.orphans_slot_reused += 1;
        }
    }

    /// A captured packet, verbatim.
    pub(super) fn replay(&mut self) -> Option<(Vec<u8>, Record)> {
        let responses = self.rng.chance(Probability::from_percent(50));
        let pool = if responses { &self.responses } else { &self.requests };
        let pool = if pool.is_empty() {
            if responses {
                &self.requests
            } else {
                &self.responses
            }
        } else {
            pool
        };
        let c = pool.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let packet = frame.packet().ok()?;
        let (qpn, psn) = (packet.bth().dest_qpn().value(), packet.bth().psn());
        let is_response = packet.info().is(Mask::RESP);
        let kind = if is_response { Kind::ReplayResponse } else { Kind::ReplayRequest };
        let (expect, window) = match self.target(c.to, qpn) {
            Target::Live { comp, next, epsn } => (Expect::Any, window(comp, next, epsn)),
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                (Expect::Unknown, orphan(slot_reused))
            }
        };
        Some((c.bytes, Record { kind, expect, qpn, psn, window }))
    }

    /// How far back from a base PSN a stale one goes.
    pub(super) fn back(&mut self) -> u32 {
        let r = &mut self.rng;
        match r.below(100) {
            0..=39 => 0,
            40..=69 => r.range_inclusive(1, 4) as u32,
            70..=89 => r.range_inclusive(5, u64::from(FAR)) as u32,
            _ => FAR,
        }
    }

    /// A captured response turned into a stale ACK, NAK, READ response or
    /// atomic ACK.
    pub(super) fn stale_response(&mut self) -> Option<(Vec<u8>, Record)> {
        let c = self.responses.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let packet = frame.packet().ok()?;
        let bth = packet.bth();
        let (qpn, captured_psn) = (bth.dest_qpn(), bth.psn());
        let msn = packet.aeth().map_or(0, |a| a.msn());
        let back = self.back();
        let (psn, expect, window) = match self.target(c.to, qpn.value()) {
            Target::Live { comp, next, epsn } => {
                let just_behind = comp - 1;
                let seen = self.acked.get(&(c.to, qpn.value())).copied();
                let base = match seen {
                    Some(a) if self.rng.chance(Probability::from_percent(60)) => {
                        if outside(a - back, comp, next) {
                            a
                        } else {
                            self.stats.in_window_avoided += 1;
                            just_behind
                        }
                    }
                    _ => just_behind,
                };
                let mut psn = base - back;
                if !outside(psn, comp, next) {
                    psn = just_behind - back;
                }
                if !outside(psn, comp, next) {
                    return None;
                }
                (psn, Expect::Ghost, window(comp, next, epsn))
            }
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                (captured_psn - back, Expect::Unknown, orphan(slot_reused))
            }
        };
        let r = &mut self.rng;
        let ack = Syndrome::from_u8(aeth::SYNDROME_ACK_NO_CREDITS);
        let (kind, syndrome) = match r.below(8) {
            0 => {
                let credits = if r.chance(Probability::from_percent(50)) {
                    ack
                } else {
                    Syndrome::from_u8(r.below(32) as u8)
                };
                (Kind::StaleAck, credits)
            }
            1 => (Kind::StaleSeqNak, Syndrome::Nak(NakCode::PsnSequenceError)),
            2 => {
                let timer_code =
                    if r.chance(Probability::from_percent(30)) { 0 } else { r.below(32) as u8 };
                (Kind::StaleRnrNak, Syndrome::RnrNak { timer_code })
            }
            3 => (Kind::StaleInvalidRequest, Syndrome::Nak(NakCode::InvalidRequest)),
            4 => (Kind::StaleAccessError, Syndrome::Nak(NakCode::RemoteAccessError)),
            5 => (Kind::StaleOperationalError, Syndrome::Nak(NakCode::RemoteOperationalError)),
            6 => (Kind::StaleReadResponse, ack),
            _ => (Kind::StaleAtomicAck, ack),
        };
        let aeth = aeth::Repr { syndrome, msn };
        let garbage: Vec<u8>;
        let (opcode, ext, payload): (Opcode, roce::ExtHeaders, &[u8]) = match kind {
            Kind::StaleReadResponse => {
                let captured = bth.opcode();
                let is_read = packet.info().is(Mask::READ);
                let (opcode, len) = if is_read {
                    (captured, packet.payload().len())
                } else {
                    (Opcode::RC_RDMA_READ_RESPONSE_ONLY, r.below(257) as usize)
                };
                garbage = crate::swarm::arena::random_bytes(r, len);
                let with_aeth = opcode.info().is_some_and(|i| i.is(Mask::AETH));
                let ext = roce::ExtHeaders {
                    aeth: with_aeth.then_some(aeth),
                    ..roce::ExtHeaders::default()
                };
                (opcode, ext, &garbage)
            }
            Kind::StaleAtomicAck => {
                let ext = roce::ExtHeaders {
                    aeth: Some(aeth),
                    atomic_ack_eth: Some(atomic_ack_eth::Repr { orig: r.next_u64() }),
                    ..roce::ExtHeaders::default()
                };
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, ext, &[])
            }
            _ => {
                let ext = roce::ExtHeaders { aeth: Some(aeth), ..roce::ExtHeaders::default() };
                (Opcode::RC_ACKNOWLEDGE, ext, &[])
            }
        };
        let repr =
            roce::Repr { bth: bth::Repr::new(opcode, qpn, psn, payload.len()), ext, payload };
        let bytes = emit_like(&frame, repr)?;
        let record = Record { kind, expect, qpn: qpn.value(), psn, window };
        Some((bytes, record))
    }

    /// A captured request with its PSN moved behind the responder's.
    pub(super) fn stale_request(&mut self) -> Option<(Vec<u8>, Record)> {
        let c = self.requests.pick(&mut self.rng)?.clone();
        let Classified::Roce(frame) = classify(&c.bytes, Link::RawIp) else { return None };
        let mut repr = frame.repr().ok()?;
        let info = repr.roce.bth.opcode.info()?;
        let kind = if info.is(Mask::READ) {
            Kind::DupRead
        } else if info.is(Mask::ATOMIC) {
            Kind::DupAtomic
        } else if info.is(Mask::WRITE) {
            Kind::DupWrite
        } else {
            Kind::DupSend
        };
        let qpn = repr.roce.bth.dest_qpn.value();
        let captured_psn = repr.roce.bth.psn;
        let (psn, expect, window) = match self.target(c.to, qpn) {
            Target::Live { comp, next, epsn } => {
                let own = captured_psn.distance_to(epsn);
                let r = &mut self.rng;
                let distance = match r.below(100) {
                    0..=34 if (1..=FAR as i32 + 1).contains(&own) => own as u32,
                    0..=49 => 1,
                    50..=79 => r.range_inclusive(2, 5) as u32,
                    _ => r.range_inclusive(6, u64::from(FAR) + 1) as u32,
                };
                (epsn - distance, Expect::Duplicate, window(comp, next, epsn))
            }
            Target::Orphan { slot_reused } => {
                self.count_orphan(slot_reused);
                let back = self.back();
                (captured_psn - back, Expect::Unknown, orphan(slot_reused))
            }
        };
        repr.roce.bth.psn = psn;
        let mut bytes = vec![0; repr.buffer_len()];
        repr.emit(&mut bytes).ok()?;
        Some((bytes, Record { kind, expect, qpn, psn, window }))
    }
}

/// Whether `psn` is outside the requester's window `[comp, next)`.
pub(super) fn outside(psn: Psn, comp: Psn, next: Psn) -> bool {
    let outstanding = comp.distance_to(next).max(0) as u32;
    psn.value().wrapping_sub(comp.value()) & Psn::MASK >= outstanding
}

pub(super) fn window(comp: Psn, next: Psn, epsn: Psn) -> String {
    format!(
        "requester window [{}, {}), responder expects {}",
        comp.value(),
        next.value(),
        epsn.value()
    )
}

pub(super) fn orphan(slot_reused: bool) -> String {
    if slot_reused {
        "no such QP; its slot holds another".into()
    } else {
        "no QP that can receive".into()
    }
}

/// Emits `roce` with the IP addresses, IP ID and UDP source port of
/// `frame`, and a fresh ICRC.
pub(super) fn emit_like(frame: &RoceFrame<'_>, roce: roce::Repr<'_>) -> Option<Vec<u8>> {
    let sport = frame.udp.source_port;
    let repr = match &frame.ip {
        IpHeader::V4(h) => {
            FrameRepr::ipv4((h.source.into(), h.destination.into()), h.identification, sport, roce)
        }
        IpHeader::V6(h) => FrameRepr::ipv6((h.source.into(), h.destination.into()), sport, roce),
    }
    .ok()?;
    let mut bytes = vec![0; repr.buffer_len()];
    repr.emit(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_edges() {
        let (c, n) = (Psn::new(10), Psn::new(14));
        assert!(outside(Psn::new(9), c, n));
        assert!(!outside(Psn::new(10), c, n));
        assert!(!outside(Psn::new(13), c, n));
        assert!(outside(Psn::new(14), c, n));
        assert!(outside(Psn::new(10) - FAR, c, n));
        // Nothing outstanding: every PSN is outside.
        assert!(outside(Psn::new(10), c, c));
        // Across the wrap.
        let (c, n) = (Psn::new(0xff_fffe), Psn::new(2));
        assert!(!outside(Psn::new(0), c, n));
        assert!(outside(Psn::new(0xff_fffd), c, n));
        assert!(outside(Psn::new(2), c, n));
    }
}
