//! Flows as a device's port sees them: per (local QPN, direction, request
//! or response), the first PSN, the high-water mark and the messages
//! counted; and the device's QPs numbered by first packet seen. Bounded:
//! at most [`MAX_FLOWS`] flows (least recently used evicted) and
//! [`MAX_QPS`] numbered QPs.

use super::Dir;
use std::collections::BTreeMap;
use uroce_wire::{Psn, Qpn};

/// Flows kept at most.
pub const MAX_FLOWS: usize = 4096;
/// QPs numbered at most (later ones have no ordinal).
pub const MAX_QPS: usize = 4096;

/// Requests or responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Request,
    Response,
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    first_psn: Psn,
    high_psn: Psn,
    messages: u64,
    last_used: u64,
}

/// What the flow says about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct FlowFacts {
    /// The local QP's ordinal (1-based), if numbered.
    pub qp: Option<u32>,
    /// PSN minus the flow's first PSN.
    pub psn_offset: Option<u32>,
    /// The message this packet belongs to (first transmissions only).
    pub message: Option<u64>,
    /// Whether the PSN is not past the high-water mark.
    pub retransmit: Option<bool>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Flows {
    flows: BTreeMap<(u32, Dir, Kind), Flow>,
    qps: BTreeMap<u32, u32>,
    clock: u64,
}

impl Flows {
    /// The ordinal of a local QP, numbering it if new. QP0, QP1 (the CM's
    /// MADs come first in an `rdma_cm` program) and the multicast QPN are
    /// not numbered: `qp = 1` is the program's first connection.
    pub fn qp_ordinal(&mut self, qpn: Qpn) -> Option<u32> {
        if qpn.value() <= 1 || qpn.value() == Psn::MASK {
            return None;
        }
        if let Some(&k) = self.qps.get(&qpn.value()) {
            return Some(k);
        }
        if self.qps.len() >= MAX_QPS {
            return None;
        }
        let k = self.qps.len() as u32 + 1;
        self.qps.insert(qpn.value(), k);
        Some(k)
    }

    /// The QPN numbered `k`.
    pub fn qpn_of(&self, k: u32) -> Option<Qpn> {
        self.qps.iter().find(|&(_, &o)| o == k).map(|(&q, _)| Qpn::new(q))
    }

    /// Counts a packet of a flow. `starts` = the opcode starts a message.
    pub fn observe(&mut self, qpn: Qpn, dir: Dir, kind: Kind, psn: Psn, starts: bool) -> FlowFacts {
        let qp = self.qp_ordinal(qpn);
        self.clock += 1;
        let key = (qpn.value(), dir, kind);
        if !self.flows.contains_key(&key) && self.flows.len() >= MAX_FLOWS {
            let oldest = self.flows.iter().min_by_key(|(_, f)| f.last_used).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.flows.remove(&oldest);
            }
        }
        let clock = self.clock;
        let flow = self.flows.entry(key).or_insert(Flow {
            first_psn: psn,
            high_psn: psn.wrapping_sub(1),
            messages: 0,
            last_used: clock,
        });
        flow.last_used = clock;
        let new = psn.is_after(flow.high_psn);
        if new {
            flow.high_psn = psn;
            if starts || flow.messages == 0 {
                flow.messages += 1;
            }
        }
        let offset = psn.value().wrapping_sub(flow.first_psn.value()) & Psn::MASK;
        FlowFacts {
            qp,
            psn_offset: Some(offset),
            message: new.then_some(flow.messages),
            retransmit: Some(!new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_high_water_mark_and_ordinals() {
        let mut flows = Flows::default();
        let q = Qpn::new(0x11);
        let out = |f: &mut Flows, psn: u32, starts: bool| {
            f.observe(q, Dir::Out, Kind::Request, Psn::new(psn), starts)
        };
        let a = out(&mut flows, 100, true);
        assert_eq!(
            a,
            FlowFacts {
                qp: Some(1),
                psn_offset: Some(0),
                message: Some(1),
                retransmit: Some(false)
            }
        );
        assert_eq!(out(&mut flows, 101, false).message, Some(1)); // a middle packet
        assert_eq!(out(&mut flows, 102, true).message, Some(2));
        let again = out(&mut flows, 101, false);
        assert_eq!(
            (again.message, again.retransmit, again.psn_offset),
            (None, Some(true), Some(1))
        );
        // Another QP gets the next ordinal; another kind is another flow.
        let b = flows.observe(Qpn::new(7), Dir::In, Kind::Response, Psn::new(0xff_ffff), true);
        assert_eq!((b.qp, b.message), (Some(2), Some(1)));
        let wrap = flows.observe(Qpn::new(7), Dir::In, Kind::Response, Psn::new(0), true);
        assert_eq!((wrap.psn_offset, wrap.message), (Some(1), Some(2)));
        assert_eq!(flows.qpn_of(2), Some(Qpn::new(7)));
        assert_eq!(flows.qpn_of(3), None);
        for special in [0, 1, 0xff_ffff] {
            let facts = flows.observe(Qpn::new(special), Dir::In, Kind::Request, Psn::new(0), true);
            assert_eq!((facts.qp, facts.message), (None, Some(1)));
        }
        assert_eq!(flows.qp_ordinal(Qpn::new(8)), Some(3));
    }

    #[test]
    fn bounded() {
        let mut flows = Flows::default();
        for q in 2..(MAX_FLOWS as u32 + 12) {
            flows.observe(Qpn::new(q), Dir::In, Kind::Request, Psn::new(0), true);
        }
        assert_eq!(flows.flows.len(), MAX_FLOWS);
        assert_eq!(flows.qps.len(), MAX_QPS);
        assert_eq!(flows.qp_ordinal(Qpn::new(0xfff_fff)), None);
    }
}
