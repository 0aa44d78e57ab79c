//! The CM's deadlines: one per ID (a request's retransmission, the extra time an MRA gave, or
//! the end of time wait), indexed by time so that the next is found in O(log n).

use super::{Cm, CmEvent, CmId, CmState};
use crate::time::Instant;

impl Cm {
    /// Set (or clear) an ID's deadline.
    pub(super) fn arm(&mut self, id: u32, at: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        if let Some(old) = c.deadline.take() {
            self.timers.remove(&(old, id));
        }
        if let Some(at) = at {
            c.deadline = Some(at);
            self.timers.insert((at, id));
        }
    }

    /// When [`Cm::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Fire every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.arm(id, None);
            self.expire(now, id);
        }
    }

    fn expire(&mut self, now: Instant, id: u32) {
        use CmState::*;
        let Some(c) = self.conns.get_mut(&id) else { return };
        let state = c.state;
        // A request with retries left goes again (the MAD layer's retry under `cm_send_req` and
        // friends; after an MRA, at the longer timeout it set, as `ib_modify_mad` leaves it).
        if let Some(p) = c.pending.as_mut().filter(|p| p.retries_left > 0) {
            p.retries_left -= 1;
            let (mad, attr, timeout, to) = (p.mad.clone(), p.attr, p.timeout, c.peer);
            self.send(to, mad, attr, true);
            self.arm(id, Some(now + timeout));
            return;
        }
        // Out of retries, out of the MRA's time, or time wait over (`cm_process_send_error`,
        // `cm_timewait_handler`).
        let cid = CmId(id);
        match state {
            ReqSent | MraReqRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::ReqError { id: cid });
            }
            RepSent | MraRepRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::RepError { id: cid });
            }
            DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::DreqError { id: cid });
            }
            SidrReqSent => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::SidrRepReceived { id: cid, rep: None });
            }
            Timewait => {
                if self.conns.get(&id).is_some_and(|c| c.destroyed) {
                    self.remove(id);
                } else {
                    self.enter(id, Idle);
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.last_answer = None;
                    }
                    self.events.push_back(CmEvent::TimewaitExit { id: cid });
                }
            }
            _ => {}
        }
    }
}
