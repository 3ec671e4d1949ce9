//! What the [`Port`](super::Port) reads from a packet, and whether a rule matches it.

use super::*;

impl Port {
    pub(super) fn facts(&mut self, dir: Dir, local_qpn: Option<Qpn>, packet: &[u8]) -> Facts {
        let mut facts = Facts {
            peer: None,
            roce: false,
            opcode: None,
            mask: None,
            syndrome: None,
            psn: None,
            local_qpn: None,
            kind: None,
            flow: FlowFacts::default(),
        };
        let Classified::Roce(frame) = classify(packet, Link::RawIp) else { return facts };
        facts.roce = true;
        facts.peer = Some(match dir {
            Dir::In => frame.ip.source(),
            Dir::Out => frame.ip.destination(),
        });
        let Ok(header) = bth::Packet::new_checked(frame.transport()) else { return facts };
        let opcode = header.opcode();
        facts.opcode = Some(opcode);
        facts.psn = Some(header.psn());
        facts.local_qpn = match dir {
            Dir::In => Some(header.dest_qpn()),
            Dir::Out => local_qpn,
        };
        let Some(info) = opcode.info() else { return facts };
        facts.mask = Some(info.mask);
        if let Some(offset) = info.offset(HeaderKind::Aeth) {
            let aeth =
                frame.transport().get(offset..).and_then(|b| aeth::Packet::new_checked(b).ok());
            facts.syndrome = aeth.map(|a| a.syndrome());
        }
        facts.kind = if info.mask.contains(Mask::REQ) {
            Some(Kind::Request)
        } else if info.mask.contains(Mask::RESP) {
            Some(Kind::Response)
        } else {
            None
        };
        if let (Some(qpn), Some(kind)) = (facts.local_qpn, facts.kind) {
            let starts =
                info.mask.contains(Mask::START) || !info.mask.intersects(Mask::MIDDLE | Mask::END);
            facts.flow = self.flows.observe(qpn, dir, kind, header.psn(), starts);
        } else if let Some(qpn) = facts.local_qpn {
            facts.flow.qp = self.flows.qp_ordinal(qpn);
        }
        facts
    }
}

/// Whether a rule's match part (and window) holds for a packet.
pub(super) fn matches(spec: &RuleSpec, now_ns: u64, dir: Dir, f: &Facts) -> bool {
    if !spec.window.contains(now_ns) || !spec.dir.matches(dir) {
        return false;
    }
    if spec.peer.is_some() && spec.peer != f.peer {
        return false;
    }
    if spec.matcher.opcode.is_some() && spec.matcher.opcode != f.opcode {
        return false;
    }
    if let Some(mask) = spec.matcher.opcode_mask {
        if !f.mask.is_some_and(|m| m.contains(mask)) {
            return false;
        }
    }
    if let Some(class) = spec.class {
        let ack_packet =
            f.mask.is_some_and(|m| !m.intersects(Mask::PAYLOAD | Mask::ATOMIC_ACK_ETH));
        let syndrome_ok = match class {
            Class::Ack => ack_packet && matches!(f.syndrome, Some(aeth::Syndrome::Ack { .. })),
            Class::Nak => {
                ack_packet
                    && matches!(
                        f.syndrome,
                        Some(aeth::Syndrome::Nak(_) | aeth::Syndrome::RnrNak { .. })
                    )
            }
            Class::RnrNak => {
                ack_packet && matches!(f.syndrome, Some(aeth::Syndrome::RnrNak { .. }))
            }
            Class::SeqNak => {
                ack_packet
                    && matches!(
                        f.syndrome,
                        Some(aeth::Syndrome::Nak(aeth::NakCode::PsnSequenceError))
                    )
            }
            _ => true,
        };
        if !syndrome_ok {
            return false;
        }
    }
    if let Some(position) = spec.position {
        if !f.mask.is_some_and(|m| position.matches(m)) {
            return false;
        }
    }
    if spec.qpn.is_some() && spec.qpn != f.local_qpn {
        return false;
    }
    let flow = &spec.flow;
    (flow.qp.is_none() || flow.qp == f.flow.qp)
        && (flow.psn_offset.is_none() || flow.psn_offset == f.flow.psn_offset)
        && (flow.message.is_none() || flow.message == f.flow.message)
        && (flow.retransmit.is_none() || flow.retransmit == f.flow.retransmit)
}

pub(super) fn summary_of(dir: Dir, f: &Facts, len: usize) -> PacketSummary {
    PacketSummary {
        dir,
        peer: f.peer,
        opcode: f.opcode,
        local_qpn: f.local_qpn,
        psn: f.psn,
        qp: f.flow.qp,
        psn_offset: f.flow.psn_offset,
        message: f.flow.message,
        len,
    }
}

/// FNV-1a 64.
pub(super) fn fnv64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
