//! The QP state machine: which transitions exist and which attributes
//! each requires or allows (IBA 11.2.4.2; the table Linux calls
//! `qp_state_table` in `ib_modify_qp_is_ok`).

use uroce_device::types::{AttrMask, QpState, QpType};

const STATE: AttrMask = AttrMask::STATE;

/// The required and optional attributes of a transition, or `None` when
/// the transition does not exist for this QP type.
pub fn transition_params(
    from: QpState,
    to: QpState,
    qp_type: QpType,
) -> Option<(AttrMask, AttrMask)> {
    use AttrMask as A;
    use QpState::*;
    use QpType::*;
    let none = A::EMPTY;
    let pick = |ud: AttrMask, uc: AttrMask, rc: AttrMask| match qp_type {
        Ud => ud,
        Uc => uc,
        Rc => rc,
    };
    let params = match (from, to) {
        (_, Reset) => (none, none),
        (Reset, Err) => return None,
        (_, Err) => (none, none),
        (Reset, Init) => (
            pick(
                A::PKEY_INDEX | A::PORT | A::QKEY,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
            ),
            none,
        ),
        (Init, Init) => (
            none,
            pick(
                A::PKEY_INDEX | A::PORT | A::QKEY,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
            ),
        ),
        (Init, Rtr) => (
            pick(
                none,
                A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN,
                A::AV
                    | A::PATH_MTU
                    | A::DEST_QPN
                    | A::RQ_PSN
                    | A::MAX_DEST_RD_ATOMIC
                    | A::MIN_RNR_TIMER,
            ),
            pick(
                A::PKEY_INDEX | A::QKEY,
                A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX,
                A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX,
            ),
        ),
        (Rtr, Rts) => (
            pick(
                A::SQ_PSN,
                A::SQ_PSN,
                A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC,
            ),
            pick(
                A::CUR_STATE | A::QKEY,
                A::CUR_STATE | A::ALT_PATH | A::ACCESS_FLAGS | A::PATH_MIG_STATE,
                A::CUR_STATE | A::ALT_PATH | A::ACCESS_FLAGS | A::MIN_RNR_TIMER | A::PATH_MIG_STATE,
            ),
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            pick(
                A::CUR_STATE | A::QKEY,
                A::CUR_STATE | A::ACCESS_FLAGS | A::ALT_PATH | A::PATH_MIG_STATE,
                A::CUR_STATE | A::ACCESS_FLAGS | A::ALT_PATH | A::PATH_MIG_STATE | A::MIN_RNR_TIMER,
            ),
        ),
        (Rts, Sqd) => (none, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            pick(
                A::PKEY_INDEX | A::QKEY,
                A::AV | A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX | A::PATH_MIG_STATE,
                A::PORT
                    | A::AV
                    | A::TIMEOUT
                    | A::RETRY_CNT
                    | A::RNR_RETRY
                    | A::MAX_QP_RD_ATOMIC
                    | A::MAX_DEST_RD_ATOMIC
                    | A::ALT_PATH
                    | A::ACCESS_FLAGS
                    | A::PKEY_INDEX
                    | A::MIN_RNR_TIMER
                    | A::PATH_MIG_STATE,
            ),
        ),
        (Sqe, Rts) => match qp_type {
            Rc => return None,
            Uc => (none, A::CUR_STATE | A::ACCESS_FLAGS),
            Ud => (none, A::CUR_STATE | A::QKEY),
        },
        _ => return None,
    };
    Some(params)
}

/// Whether a modify from `from` with `mask` (whose STATE bit asks for
/// `to`; without it the QP stays in `from`) is allowed: the
/// `ib_modify_qp_is_ok` rule.
pub fn modify_is_ok(from: QpState, to: QpState, qp_type: QpType, mask: AttrMask) -> bool {
    if mask.contains(AttrMask::CUR_STATE)
        && !matches!(from, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    {
        return false;
    }
    let Some((required, optional)) = transition_params(from, to, qp_type) else {
        return false;
    };
    mask.contains(required)
        && !mask.without(required | optional | STATE).intersects(AttrMask::ALL)
        && !mask.has_unknown_bits()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttrMask as A;
    use QpState::*;

    fn rc_init() -> AttrMask {
        A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS
    }

    #[test]
    fn the_usual_rc_path() {
        assert!(modify_is_ok(Reset, Init, QpType::Rc, rc_init()));
        let rtr = A::STATE
            | A::AV
            | A::PATH_MTU
            | A::DEST_QPN
            | A::RQ_PSN
            | A::MAX_DEST_RD_ATOMIC
            | A::MIN_RNR_TIMER;
        assert!(modify_is_ok(Init, Rtr, QpType::Rc, rtr));
        let rts =
            A::STATE | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC;
        assert!(modify_is_ok(Rtr, Rts, QpType::Rc, rts));
        assert!(modify_is_ok(Rts, Err, QpType::Rc, A::STATE));
        assert!(modify_is_ok(Err, Reset, QpType::Rc, A::STATE));
    }

    #[test]
    fn wrong_masks_and_transitions_are_refused() {
        // Missing a required attribute.
        assert!(!modify_is_ok(Reset, Init, QpType::Rc, A::STATE | A::PKEY_INDEX | A::PORT));
        // An attribute the transition does not allow.
        assert!(!modify_is_ok(Reset, Init, QpType::Rc, rc_init() | A::QKEY));
        // UD needs a Q_Key, not access flags.
        assert!(!modify_is_ok(Reset, Init, QpType::Ud, rc_init()));
        assert!(modify_is_ok(
            Reset,
            Init,
            QpType::Ud,
            A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY
        ));
        // Skipping states.
        assert!(!modify_is_ok(Reset, Rts, QpType::Rc, A::STATE));
        assert!(!modify_is_ok(Init, Rts, QpType::Ud, A::STATE | A::SQ_PSN));
        // RESET cannot go to ERR; SQE is not an RC state to leave to RTS.
        assert!(!modify_is_ok(Reset, Err, QpType::Rc, A::STATE));
        assert!(!modify_is_ok(Sqe, Rts, QpType::Rc, A::STATE));
        assert!(modify_is_ok(Sqe, Rts, QpType::Uc, A::STATE));
        // CUR_STATE only from RTR, RTS, SQD, SQE.
        assert!(!modify_is_ok(Init, Init, QpType::Rc, A::CUR_STATE));
        // Unknown bits.
        assert!(!modify_is_ok(Init, Init, QpType::Rc, AttrMask(1 << 30)));
    }

    #[test]
    fn ud_and_uc_need_less() {
        assert!(modify_is_ok(Init, Rtr, QpType::Ud, A::STATE));
        assert!(modify_is_ok(Rtr, Rts, QpType::Ud, A::STATE | A::SQ_PSN));
        assert!(modify_is_ok(
            Init,
            Rtr,
            QpType::Uc,
            A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN
        ));
        assert!(!modify_is_ok(Init, Rtr, QpType::Uc, A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN));
    }
}
