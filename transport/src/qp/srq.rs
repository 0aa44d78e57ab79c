//! Shared receive queues (`ibv_create_srq`, IBTA §10.2.9) and the receive WQE a message is
//! being placed into.
//!
//! A QP created with an SRQ takes its receive WQEs from it; a QP without one from its own
//! [`RecvQueue`]. Either way the responder takes the WQE out of its queue when a message
//! needs it (the first packet of a SEND, the last of a WRITE with immediate, a datagram) and
//! holds it ([`HeldWqe`]) until the message completes: the SRQ's other QPs must not see it.

use super::{RecvQueue, MAX_SGE};
use crate::verbs::*;

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: PdHandle,
    pub queue: RecvQueue,
    pub attr: SrqAttr,
}

impl Srq {
    pub fn new(pd: PdHandle, attr: SrqAttr) -> Srq {
        Srq { pd, queue: RecvQueue::new(attr.max_wr, attr.max_sge), attr }
    }

    /// Take the WQE at the front; `true` in the second place when that took the SRQ below its
    /// armed limit, which disarms it (IBTA §10.2.9.3, o10-9.1.1: the event fires once per
    /// arming; rxe `get_srq_wqe`).
    pub fn take(&mut self) -> Option<(HeldWqe, bool)> {
        let w = self.queue.front()?;
        let held = HeldWqe::of(&self.queue, &w);
        self.queue.pop_front();
        let limit = self.attr.srq_limit;
        let fired = limit > 0 && (self.queue.len() as u32) < limit;
        if fired {
            self.attr.srq_limit = 0;
        }
        Some((held, fired))
    }
}

/// A receive WQE taken out of its queue for the message being received.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldWqe {
    pub wr_id: u64,
    pub length: u64,
    sges: [Sge; MAX_SGE],
    n: usize,
}

impl HeldWqe {
    pub fn of(q: &RecvQueue, w: &super::RecvWqe) -> HeldWqe {
        let list = q.sges(w);
        let mut sges = [Sge::default(); MAX_SGE];
        sges[..list.len()].copy_from_slice(list);
        HeldWqe { wr_id: w.wr_id, length: w.length, sges, n: list.len() }
    }
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.n]
    }
}
