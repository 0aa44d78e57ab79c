//! The QP state machine (IBTA Vol. 1 §10.3.1, Figure 124 "QP State Transitions"), as the
//! table Linux checks modify_qp against (`ib_modify_qp_is_ok`, `drivers/infiniband/core/verbs.c`).
//!
//! ```text
//!            modify             modify           modify
//!   RESET ----------> INIT ----------> RTR ----------> RTS <-----> SQD
//!     ^  (any state)                                     |  error    (SQE: UC/UD only)
//!     +---------- modify to RESET; modify/errors to ERR -+--------> ERR
//! ```
//! Each allowed transition names the attributes it *requires* and those it *accepts*; any
//! other attribute in the mask is an error (EINVAL), as in the kernel.

use crate::verbs::{QpAttr, QpAttrMask as M, QpState, QpType, VerbsError};

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Transition {
    /// From.
    pub from: QpState,
    /// To.
    pub to: QpState,
    /// Attributes that must be in the mask.
    pub required: M,
    /// Attributes that may be in the mask.
    pub optional: M,
}

const fn t(from: QpState, to: QpState, required: M, optional: M) -> Transition {
    Transition { from, to, required, optional }
}

const fn or(a: M, b: M) -> M {
    M(a.0 | b.0)
}

use QpState::{Err as Error, Init, Reset, Rtr, Rts, Sqd, Sqe};

/// The RC transition table (kernel `qp_state_table`, IB_QPT_RC columns).
pub const RC_TRANSITIONS: &[Transition] = &[
    t(Reset, Reset, M::NONE, M::NONE),
    t(Reset, Init, or(or(M::PKEY_INDEX, M::PORT), M::ACCESS_FLAGS), M::NONE),
    t(Init, Init, M::NONE, or(or(M::PKEY_INDEX, M::PORT), M::ACCESS_FLAGS)),
    t(
        Init,
        Rtr,
        or(or(or(M::AV, M::PATH_MTU), or(M::DEST_QPN, M::RQ_PSN)), or(M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER)),
        or(or(M::ALT_PATH, M::ACCESS_FLAGS), M::PKEY_INDEX),
    ),
    t(
        Rtr,
        Rts,
        or(or(or(M::TIMEOUT, M::RETRY_CNT), or(M::RNR_RETRY, M::SQ_PSN)), M::MAX_QP_RD_ATOMIC),
        or(or(or(M::CUR_STATE, M::ALT_PATH), or(M::ACCESS_FLAGS, M::MIN_RNR_TIMER)), M::PATH_MIG_STATE),
    ),
    t(
        Rts,
        Rts,
        M::NONE,
        or(or(or(M::CUR_STATE, M::ACCESS_FLAGS), or(M::ALT_PATH, M::PATH_MIG_STATE)), M::MIN_RNR_TIMER),
    ),
    t(Rts, Sqd, M::NONE, M::EN_SQD_ASYNC_NOTIFY),
    t(
        Sqd,
        Rts,
        M::NONE,
        or(or(or(M::CUR_STATE, M::ALT_PATH), or(M::ACCESS_FLAGS, M::MIN_RNR_TIMER)), M::PATH_MIG_STATE),
    ),
    t(
        Sqd,
        Sqd,
        M::NONE,
        or(
            or(or(or(M::PKEY_INDEX, M::AV), or(M::ALT_PATH, M::ACCESS_FLAGS)), or(M::MIN_RNR_TIMER, M::PATH_MIG_STATE)),
            or(
                or(or(M::TIMEOUT, M::RETRY_CNT), or(M::RNR_RETRY, M::MAX_QP_RD_ATOMIC)),
                or(M::MAX_DEST_RD_ATOMIC, M::PORT),
            ),
        ),
    ),
    t(Sqe, Rts, M::NONE, M::CUR_STATE),
    t(Error, Error, M::NONE, M::NONE),
];

/// The UC transition table (kernel `qp_state_table`, IB_QPT_UC columns).
pub const UC_TRANSITIONS: &[Transition] = &[
    t(Reset, Reset, M::NONE, M::NONE),
    t(Reset, Init, or(or(M::PKEY_INDEX, M::PORT), M::ACCESS_FLAGS), M::NONE),
    t(Init, Init, M::NONE, or(or(M::PKEY_INDEX, M::PORT), M::ACCESS_FLAGS)),
    t(
        Init,
        Rtr,
        or(or(M::AV, M::PATH_MTU), or(M::DEST_QPN, M::RQ_PSN)),
        or(or(M::ALT_PATH, M::ACCESS_FLAGS), M::PKEY_INDEX),
    ),
    t(Rtr, Rts, M::SQ_PSN, or(or(M::CUR_STATE, M::ALT_PATH), or(M::ACCESS_FLAGS, M::PATH_MIG_STATE))),
    t(Rts, Rts, M::NONE, or(or(M::CUR_STATE, M::ACCESS_FLAGS), or(M::ALT_PATH, M::PATH_MIG_STATE))),
    t(Rts, Sqd, M::NONE, M::EN_SQD_ASYNC_NOTIFY),
    t(Sqd, Rts, M::NONE, or(or(M::CUR_STATE, M::ALT_PATH), or(M::ACCESS_FLAGS, M::PATH_MIG_STATE))),
    t(Sqd, Sqd, M::NONE, or(or(M::AV, M::ALT_PATH), or(M::ACCESS_FLAGS, M::PATH_MIG_STATE))),
    t(Sqe, Rts, M::NONE, or(M::CUR_STATE, M::ACCESS_FLAGS)),
    t(Error, Error, M::NONE, M::NONE),
];

/// The UD transition table (kernel `qp_state_table`, IB_QPT_UD columns).
pub const UD_TRANSITIONS: &[Transition] = &[
    t(Reset, Reset, M::NONE, M::NONE),
    t(Reset, Init, or(or(M::PKEY_INDEX, M::PORT), M::QKEY), M::NONE),
    t(Init, Init, M::NONE, or(or(M::PKEY_INDEX, M::PORT), M::QKEY)),
    t(Init, Rtr, M::NONE, or(M::PKEY_INDEX, M::QKEY)),
    t(Rtr, Rts, M::SQ_PSN, or(M::CUR_STATE, M::QKEY)),
    t(Rts, Rts, M::NONE, or(M::CUR_STATE, M::QKEY)),
    t(Rts, Sqd, M::NONE, M::EN_SQD_ASYNC_NOTIFY),
    t(Sqd, Rts, M::NONE, or(M::CUR_STATE, M::QKEY)),
    t(Sqd, Sqd, M::NONE, or(M::PKEY_INDEX, M::QKEY)),
    t(Sqe, Rts, M::NONE, or(M::CUR_STATE, M::QKEY)),
    t(Error, Error, M::NONE, M::NONE),
];

/// The table of a QP type.
pub const fn transitions(ty: QpType) -> &'static [Transition] {
    match ty {
        QpType::Rc => RC_TRANSITIONS,
        QpType::Uc => UC_TRANSITIONS,
        QpType::Ud => UD_TRANSITIONS,
    }
}

/// Check a modify_qp call on an RC QP against the table. Returns the target state.
pub fn check_transition(cur: QpState, attr: &QpAttr, mask: M) -> Result<QpState, VerbsError> {
    check_transition_of(QpType::Rc, cur, attr, mask)
}

/// Check a modify_qp call on a QP of type `ty` against its table. Returns the target state.
pub fn check_transition_of(ty: QpType, cur: QpState, attr: &QpAttr, mask: M) -> Result<QpState, VerbsError> {
    if mask.contains(M::CUR_STATE) {
        // Kernel: CUR_STATE is only meaningful from RTR, RTS, SQD and SQE.
        if !matches!(cur, Rtr | Rts | Sqd | Sqe) {
            return Err(VerbsError::UnexpectedAttribute { unexpected: M::CUR_STATE });
        }
        if attr.cur_qp_state != cur {
            return Err(VerbsError::StateMismatch { actual: cur, given: attr.cur_qp_state });
        }
    }
    let to = if mask.contains(M::STATE) { attr.qp_state } else { cur };
    // Any state may go to RESET or ERR with the state attribute alone.
    let row = if to == Reset || to == Error {
        Transition { from: cur, to, required: M::NONE, optional: M::NONE }
    } else {
        *transitions(ty)
            .iter()
            .find(|r| r.from == cur && r.to == to)
            .ok_or(VerbsError::InvalidTransition { from: cur, to })?
    };
    let given = mask.minus(M::STATE);
    let missing = row.required.minus(given);
    if !missing.is_empty() {
        return Err(VerbsError::MissingAttribute { missing });
    }
    let unexpected = given.minus(or(row.required, or(row.optional, M::CUR_STATE)));
    if !unexpected.is_empty() {
        return Err(VerbsError::UnexpectedAttribute { unexpected });
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(to: QpState) -> QpAttr {
        QpAttr { qp_state: to, ..Default::default() }
    }

    /// Every (from, to) pair with the minimal mask the table asks for: allowed exactly when the
    /// table (or the any→RESET/ERR rule) has the pair.
    #[test]
    fn table_driven_legal_and_illegal() {
        let mut legal = 0;
        for from in QpState::ALL {
            for to in QpState::ALL {
                let row = RC_TRANSITIONS.iter().find(|r| r.from == from && r.to == to);
                let any_to_reset_err = to == Reset || to == Error;
                let required = row.map_or(M::NONE, |r| r.required);
                let r = check_transition(from, &attr(to), M::STATE | required);
                if row.is_some() || any_to_reset_err {
                    assert_eq!(r, Ok(to), "{from:?} -> {to:?} should be legal");
                    legal += 1;
                } else {
                    assert_eq!(r, Err(VerbsError::InvalidTransition { from, to }), "{from:?} -> {to:?}");
                }
            }
        }
        // 7 states × (RESET, ERR), plus the 9 rows that go elsewhere.
        assert_eq!(legal, 14 + 9);
    }

    /// The UC and UD tables: the same legal pairs as RC (the kernel's table has the same rows
    /// for the three), their own attributes: a UD QP takes a Q_Key and no path, a UC QP a
    /// path and no READ/atomic or retry attributes.
    #[test]
    fn uc_and_ud_tables() {
        for ty in [QpType::Uc, QpType::Ud] {
            let tab = transitions(ty);
            for r in RC_TRANSITIONS {
                assert!(tab.iter().any(|u| (u.from, u.to) == (r.from, r.to)), "{ty:?} {:?}->{:?}", r.from, r.to);
            }
            assert_eq!(tab.len(), RC_TRANSITIONS.len());
        }
        let ud_init = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
        assert_eq!(check_transition_of(QpType::Ud, Reset, &attr(Init), ud_init), Ok(Init));
        assert_eq!(
            check_transition_of(QpType::Ud, Reset, &attr(Init), M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            Err(VerbsError::MissingAttribute { missing: M::QKEY })
        );
        assert_eq!(check_transition_of(QpType::Ud, Init, &attr(Rtr), M::STATE), Ok(Rtr));
        assert_eq!(
            check_transition_of(QpType::Ud, Init, &attr(Rtr), M::STATE | M::AV),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::AV })
        );
        assert_eq!(check_transition_of(QpType::Ud, Rtr, &attr(Rts), M::STATE | M::SQ_PSN), Ok(Rts));
        let uc_rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        assert_eq!(check_transition_of(QpType::Uc, Init, &attr(Rtr), uc_rtr), Ok(Rtr));
        assert_eq!(
            check_transition_of(QpType::Uc, Init, &attr(Rtr), uc_rtr | M::MAX_DEST_RD_ATOMIC),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::MAX_DEST_RD_ATOMIC })
        );
        assert_eq!(
            check_transition_of(QpType::Uc, Rtr, &attr(Rts), M::STATE | M::SQ_PSN | M::TIMEOUT),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::TIMEOUT })
        );
        // RC needs what UC does not.
        assert!(check_transition(Init, &attr(Rtr), uc_rtr).is_err());
    }

    #[test]
    fn required_attributes_are_required() {
        let rtr = RC_TRANSITIONS.iter().find(|r| r.from == Init && r.to == Rtr).unwrap();
        assert_eq!(check_transition(Init, &attr(Rtr), M::STATE | rtr.required), Ok(Rtr));
        let without_psn = rtr.required.minus(M::RQ_PSN);
        assert_eq!(
            check_transition(Init, &attr(Rtr), M::STATE | without_psn),
            Err(VerbsError::MissingAttribute { missing: M::RQ_PSN })
        );
    }

    #[test]
    fn unexpected_attributes_are_rejected() {
        let init = M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert_eq!(
            check_transition(Reset, &attr(Init), M::STATE | init | M::SQ_PSN),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::SQ_PSN })
        );
        // Attributes without a state change: RTS -> RTS accepts MIN_RNR_TIMER, not PATH_MTU.
        assert_eq!(check_transition(Rts, &attr(Rts), M::MIN_RNR_TIMER), Ok(Rts));
        assert_eq!(
            check_transition(Rts, &attr(Rts), M::PATH_MTU),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::PATH_MTU })
        );
        // Modify to ERR takes nothing but the state.
        assert_eq!(
            check_transition(Rts, &attr(Error), M::STATE | M::TIMEOUT),
            Err(VerbsError::UnexpectedAttribute { unexpected: M::TIMEOUT })
        );
    }

    #[test]
    fn cur_state_is_checked() {
        let rts = RC_TRANSITIONS.iter().find(|r| r.from == Rtr && r.to == Rts).unwrap();
        let mut a = attr(Rts);
        a.cur_qp_state = Init;
        assert_eq!(
            check_transition(Rtr, &a, M::STATE | M::CUR_STATE | rts.required),
            Err(VerbsError::StateMismatch { actual: Rtr, given: Init })
        );
        a.cur_qp_state = Rtr;
        assert_eq!(check_transition(Rtr, &a, M::STATE | M::CUR_STATE | rts.required), Ok(Rts));
        assert!(check_transition(Init, &a, M::CUR_STATE).is_err());
    }
}
