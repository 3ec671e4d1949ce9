//! The UDP source port a RoCEv2 packet carries, as Linux rxe picks it.
//!
//! The destination port is always 4791; the source port only spreads flows
//! over ECMP paths, so it is a hash of the QP numbers. rxe uses two rules:
//!
//! * RC and UC QPs connected through `modify_qp` hash the flow label of the
//!   pair (`rdma_calc_flow_label(lqpn, rqpn)`, or the flow label of the
//!   address vector when it is not zero) into 14 bits;
//! * UD QPs (QP1 included) hash their own QPN: `0xC000 + hash_32(qpn, 14)`.

use crate::Qpn;

/// The first port of the range RoCEv2 source ports are taken from.
pub const SPORT_BASE: u16 = 0xc000;

/// The kernel's `GOLDEN_RATIO_32`, used by `hash_32`.
const GOLDEN_RATIO_32: u32 = 0x61c8_8647;

/// The kernel's `hash_32(value, bits)`: multiplicative hashing.
pub const fn hash_32(value: u32, bits: u32) -> u32 {
    value.wrapping_mul(GOLDEN_RATIO_32) >> (32 - bits)
}

/// The kernel's `rdma_calc_flow_label(lqpn, rqpn)`: a 20-bit flow label
/// from the two QP numbers, the same in both directions.
pub const fn flow_label(local: Qpn, remote: Qpn) -> u32 {
    let mut v = local.value() as u64 * remote.value() as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0x000f_ffff) as u32
}

/// The kernel's `rdma_flow_label_to_udp_sport`: folds a 20-bit flow label
/// into 14 bits above 0xC000.
pub const fn flow_label_to_sport(flow_label: u32) -> u16 {
    let low = flow_label & 0x3fff;
    let high = (flow_label & 0xf_c000) >> 14;
    ((low ^ high) as u16) | SPORT_BASE
}

/// Source port of a connected (RC or UC) QP. `av_flow_label` is the flow
/// label of the QP's address vector; when it is zero, as with
/// `ibv_modify_qp` from the perftest and pingpong tools, the label is
/// computed from the QP numbers.
pub const fn connected_sport(local: Qpn, remote: Qpn, av_flow_label: u32) -> u16 {
    let label = if av_flow_label & 0xf_ffff != 0 {
        av_flow_label & 0xf_ffff
    } else {
        flow_label(local, remote)
    };
    flow_label_to_sport(label)
}

/// Source port of a UD QP (and of QP1).
pub const fn datagram_sport(qpn: Qpn) -> u16 {
    SPORT_BASE + (hash_32(qpn.value(), 14) & 0x3fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_seen_on_real_rxe() {
        // ../shared/golden: QPs 0x11 <-> 0x11 use 49441 both ways; UD QP
        // 0x11 uses 57236 and QP1 uses 55410.
        assert_eq!(connected_sport(Qpn::new(0x11), Qpn::new(0x11), 0), 49441);
        assert_eq!(datagram_sport(Qpn::new(0x11)), 57236);
        assert_eq!(datagram_sport(Qpn::GSI), 55410);
    }

    #[test]
    fn connected_port_is_symmetric() {
        for (a, b) in [(0x11, 0x12), (0x1234, 0x99), (0xff_ffff, 0x10)] {
            assert_eq!(
                connected_sport(Qpn::new(a), Qpn::new(b), 0),
                connected_sport(Qpn::new(b), Qpn::new(a), 0)
            );
        }
    }

    #[test]
    fn explicit_flow_label_wins() {
        assert_eq!(connected_sport(Qpn::new(0x11), Qpn::new(0x11), 0x3fff), 0xc000 | 0x3fff);
        assert_eq!(flow_label_to_sport(0xf_c000), 0xc000 | 0x3f);
    }
}
