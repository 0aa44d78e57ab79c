//! The states of a communication ID and the transitions between them (IBTA Vol. 1 §12.9,
//! Figures 146–149 for the active and passive sides of connection establishment and release;
//! Linux `enum ib_cm_state`, `drivers/infiniband/core/cm.c`), as one table that every state
//! change is checked against.
//!
//! ```text
//!  active:  Idle -REQ-> ReqSent -MRA-> MraReqRcvd -REP-> RepRcvd -RTU-> Established
//!                          |------------REP-------------^   |-MRA-> MraRepSent -RTU-^
//!  passive: (listen) -REQ-> ReqRcvd -MRA-> MraReqSent -REP-> RepSent -MRA-> MraRepRcvd
//!                             |-----------REP---------------^   |---RTU/COMM_EST---> Established
//!  release: Established -DREQ-> DreqSent -DREP-> Timewait -timer-> Idle
//!           Established <-DREQ- DreqRcvd -DREP-^     (DreqSent + DREQ in: DreqRcvd)
//!  any establishing state -REJ/timeout-> Idle
//! ```

/// A communication ID's state (the names of Linux's `enum ib_cm_state`, without `IB_CM_`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmState {
    /// Not connected (after a REJ, a timeout, or the end of time wait).
    Idle,
    /// Active: the REQ is out.
    ReqSent,
    /// Passive: a REQ arrived; the application has not answered.
    ReqRcvd,
    /// Passive: the application sent an MRA for the REQ.
    MraReqSent,
    /// Active: the passive side sent an MRA for our REQ.
    MraReqRcvd,
    /// Passive: the REP is out.
    RepSent,
    /// Active: a REP arrived; the application has not sent the RTU yet.
    RepRcvd,
    /// Active: the application sent an MRA for the REP.
    MraRepSent,
    /// Passive: the active side sent an MRA for our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// Our DREQ is out.
    DreqSent,
    /// A DREQ arrived; the application has not sent the DREP yet.
    DreqRcvd,
    /// Disconnected; stray messages of the old connection are still answered.
    Timewait,
    /// Our SIDR_REQ is out.
    SidrReqSent,
    /// A SIDR_REQ arrived; the application has not answered.
    SidrReqRcvd,
}

use CmState::*;

/// Every allowed transition (from, to). A transition not listed here is a bug in the CM,
/// never something a peer can cause: received messages are checked against the state first.
pub const TRANSITIONS: &[(CmState, CmState)] = &[
    // Active establishment.
    (Idle, ReqSent),
    (ReqSent, MraReqRcvd),
    (ReqSent, RepRcvd),
    (MraReqRcvd, RepRcvd),
    (RepRcvd, MraRepSent),
    (RepRcvd, Established),
    (MraRepSent, Established),
    // Passive establishment.
    (Idle, ReqRcvd),
    (ReqRcvd, MraReqSent),
    (ReqRcvd, RepSent),
    (MraReqSent, RepSent),
    (RepSent, MraRepRcvd),
    (RepSent, Established),
    (MraRepRcvd, Established),
    // Rejects and timeouts while establishing.
    (ReqSent, Idle),
    (MraReqRcvd, Idle),
    (ReqRcvd, Idle),
    (MraReqSent, Idle),
    (RepSent, Idle),
    (MraRepRcvd, Idle),
    (RepRcvd, Idle),
    (MraRepSent, Idle),
    // Release (a DREQ may also arrive before the RTU: IBTA §12.9.7).
    (Established, DreqSent),
    (Established, DreqRcvd),
    (RepSent, DreqRcvd),
    (MraRepRcvd, DreqRcvd),
    (DreqSent, DreqRcvd),
    (DreqSent, Timewait),
    (DreqRcvd, Timewait),
    (Timewait, Idle),
    // Service ID resolution.
    (Idle, SidrReqSent),
    (SidrReqSent, Idle),
    (Idle, SidrReqRcvd),
    (SidrReqRcvd, Idle),
];

/// Whether `from → to` is in the table.
pub fn allowed(from: CmState, to: CmState) -> bool {
    TRANSITIONS.iter().any(|&(f, t)| f == from && t == to)
}

impl CmState {
    /// Still setting up: a REJ may end it, and destroying it sends one.
    pub const fn is_establishing(self) -> bool {
        matches!(self, ReqSent | ReqRcvd | MraReqSent | MraReqRcvd | RepSent | RepRcvd | MraRepSent | MraRepRcvd)
    }

    /// Holds a peer's connection (counts for the stale-connection check, C12-22).
    pub const fn holds_qp(self) -> bool {
        matches!(self, RepSent | RepRcvd | MraRepSent | MraRepRcvd | Established | DreqSent | DreqRcvd | Timewait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_no_duplicates_and_every_state_is_reachable() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            assert!(!TRANSITIONS[i + 1..].contains(a), "{a:?} twice");
        }
        for s in [
            ReqSent,
            ReqRcvd,
            MraReqSent,
            MraReqRcvd,
            RepSent,
            RepRcvd,
            MraRepSent,
            MraRepRcvd,
            Established,
            DreqSent,
            DreqRcvd,
            Timewait,
            SidrReqSent,
            SidrReqRcvd,
        ] {
            assert!(TRANSITIONS.iter().any(|&(_, t)| t == s), "{s:?} unreachable");
            assert!(TRANSITIONS.iter().any(|&(f, _)| f == s), "{s:?} is a dead end");
        }
        assert!(!allowed(Idle, Established));
        assert!(!allowed(Timewait, Established));
    }
}
