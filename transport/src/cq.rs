//! Completion queues.

use crate::verbs::WorkCompletion;
use std::collections::VecDeque;

/// A completion queue of `cqe` entries. Completions beyond the capacity are kept (never lost)
/// but flagged as an overflow, which verbs treats as a CQ error (`IBV_EVENT_CQ_ERR`).
#[derive(Debug)]
pub struct Cq {
    entries: VecDeque<WorkCompletion>,
    cqe: usize,
    overflowed: bool,
}

impl Cq {
    /// A CQ for `cqe` completions.
    pub fn new(cqe: usize) -> Cq {
        Cq { entries: VecDeque::with_capacity(cqe), cqe, overflowed: false }
    }
    /// Add a completion. Returns false on overflow (the entry is still kept).
    pub fn push(&mut self, wc: WorkCompletion) -> bool {
        self.entries.push_back(wc);
        if self.entries.len() > self.cqe {
            self.overflowed = true;
            false
        } else {
            true
        }
    }
    /// Move up to `out.len()` completions into `out`; returns how many (`ibv_poll_cq`).
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        let n = out.len().min(self.entries.len());
        for (o, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *o = wc;
        }
        n
    }
    /// Remove the waiting completions of QP `qpn` (a QP modified to RESET); returns how many.
    pub fn discard_qp(&mut self, qpn: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|w| w.qp_num != qpn);
        before - self.entries.len()
    }
    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// None waiting?
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.cqe
    }
    /// Has the CQ ever overflowed?
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}
