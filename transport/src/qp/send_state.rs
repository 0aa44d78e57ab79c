//! The send side's sequence state, with one owner: the PSN window (oldest unacknowledged,
//! next new), the send cursor, the AckReq cadence, the READ/atomic budget, the retry budgets
//! and the retry under way. The requester and the completer read it and report events to it
//! (`on_*`); only this module writes it. The deadlines that go with it (local ACK timeout, RNR
//! wait) are the QP's timers ([`crate::timer::TimerTable`]).
//!
//! Loss recovery — where to resume after a loss — is a [`Recovery`] strategy inside this
//! type: Go-Back-N (IBTA §9.7.5.1.1) today; a selective-repeat strategy between uroce peers
//! plugs in beside it without touching the completer.

use super::SendQueue;
use crate::formulas::{retry_step, send_window_allows, AckReqCadence, RetryStep};
use uroce_wire::{Msn, Psn};

/// Why a retry starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RetryCause {
    /// NAK PSN sequence error.
    SeqNak,
    /// An ACK or response past a READ/atomic that got no response.
    Implicit,
    /// Local ACK timeout.
    Timeout,
}

/// What the completer does about a loss ([`SendState::on_nak`], [`SendState::on_timeout`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Retry {
    /// Resending from this PSN: the cursor has been moved there.
    Resend(Psn),
    /// The same retry is already under way: this is the old flight arriving.
    Stale,
    /// No retries left: the head WQE fails with RETRY_EXC_ERR.
    Exhausted,
}

/// What the completer does about an RNR NAK ([`SendState::on_rnr`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Rnr {
    /// Wait the RNR timer, then resend from the NAKed PSN ([`SendState::on_rnr_timeout`]).
    Wait,
    /// No RNR retries left: the head WQE fails with RNR_RETRY_EXC_ERR.
    Exhausted,
}

/// How the send cursor moves after a packet ([`SendState::on_sent`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Advance {
    /// The WQE is done: on to the next.
    NextWqe,
    /// The WQE continues at this byte offset.
    Offset(u32),
}

/// Where to resume sending after a loss.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum Recovery {
    /// Go-Back-N (IBTA §9.7.5.1.1; rxe `req_retry`): the WQE holding the lost PSN restarts at
    /// the packet with that PSN (SEND/WRITE skip the bytes already acknowledged, a READ
    /// resumes at the byte offset already received), and every later WQE is sent again.
    #[default]
    GoBackN,
}

impl Recovery {
    /// The cursor `(wqe, byte offset)` to resume at for a loss at `psn`, if a sent WQE holds it.
    fn resume_point(self, sq: &SendQueue, cur: u64, psn: Psn, mtu: u32) -> Option<(u64, u32)> {
        match self {
            Recovery::GoBackN => {
                let mut i = sq.head;
                while i < sq.tail && i <= cur {
                    let w = sq.get(i);
                    if !w.psn_assigned {
                        return None;
                    }
                    if psn.within(w.first_psn, w.last_psn) {
                        let off = if w.opcode.is_atomic() { 0 } else { psn.diff(w.first_psn) as u32 * mtu };
                        return Some((i, off));
                    }
                    i += 1;
                }
                None
            }
        }
    }
}

/// The send side's sequence state (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct SendState {
    /// Oldest unacknowledged PSN.
    una: Psn,
    /// Messages given PSNs so far: the MSN the responder has before the next new WQE (it
    /// counts each request message once, from 0 at RESET).
    msn: Msn,
    /// One past the last PSN ever used: where the next new WQE starts. A packet of a WQE
    /// that already has PSNs derives its PSN from the WQE and the byte offset, so a rewind or
    /// a completion that moves the cursor can never desynchronise PSNs from packets.
    next_psn: Psn,
    /// SQ index of the WQE being sent (`sq.tail` when idle).
    cur: u64,
    /// Bytes of `cur` already sent, or the offset a retried READ resumes at.
    cur_off: u32,
    /// Packets sent since the last AckReq.
    cadence: AckReqCadence,
    /// READ/atomic WQEs sent and not completed.
    rd_atomic_inflight: u32,
    /// The QP's `retry_cnt` and `rnr_retry`: what forward progress restores.
    retry_cnt: u8,
    rnr_retry: u8,
    /// Transport retries left before RETRY_EXC_ERR.
    retry_left: u8,
    /// RNR retries left before RNR_RETRY_EXC_ERR.
    rnr_left: u8,
    /// PSN to resume at when the RNR wait ends.
    rnr_psn: Psn,
    /// A retry from this PSN is under way (rxe `started_retry`): responses past it are from the
    /// old flight and do not start another retry until the stream is back in order.
    retrying_from: Option<Psn>,
    recovery: Recovery,
}

impl SendState {
    /// A fresh state whose cursor is at SQ index `cur` (RESET).
    pub fn new(cur: u64) -> SendState {
        SendState { cur, ..Default::default() }
    }

    // --- reads ---

    /// Oldest unacknowledged PSN.
    #[inline]
    pub fn una(&self) -> Psn {
        self.una
    }
    /// One past the last PSN used (`ibv_query_qp`'s `sq_psn`).
    #[inline]
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }
    /// The send cursor: SQ index and byte offset.
    #[inline]
    pub fn cursor(&self) -> (u64, u32) {
        (self.cur, self.cur_off)
    }
    /// READ/atomic WQEs outstanding.
    #[inline]
    pub fn rd_atomic_inflight(&self) -> u32 {
        self.rd_atomic_inflight
    }
    /// Whether requests are sent and not acknowledged.
    #[inline]
    pub fn outstanding(&self) -> bool {
        self.una.before(self.next_psn)
    }
    /// Whether a new WQE may take PSNs ([`send_window_allows`] for the next new PSN).
    #[inline]
    pub fn window_open(&self, window: u32) -> bool {
        send_window_allows(self.next_psn.diff(self.una), window)
    }
    /// Whether `psn` lies inside the send window.
    #[inline]
    pub fn in_window(&self, psn: Psn, window: u32) -> bool {
        send_window_allows(psn.diff(self.una), window)
    }
    /// Whether a response for PSN `r` is one the requester waits for: sent, not yet
    /// acknowledged (anything else is stale).
    #[inline]
    pub fn awaits(&self, r: Psn) -> bool {
        r.diff(self.next_psn) < 0 && !r.before(self.una)
    }
    /// The retry under way, if any.
    pub fn retrying_from(&self) -> Option<Psn> {
        self.retrying_from
    }
    /// Transport retries left.
    pub fn retry_left(&self) -> u8 {
        self.retry_left
    }

    /// Whether the next packet carries AckReq ([`AckReqCadence`]); the general and the
    /// transmit fast path both ask here.
    #[inline]
    pub fn ack_req_due(&self, end: bool, interval: u32) -> bool {
        self.cadence.due(end, interval)
    }

    // --- events from the QP's configuration ---

    /// `modify_qp` with RETRY_CNT: the budget, restored now and on every forward progress.
    pub fn set_retry_cnt(&mut self, n: u8) {
        self.retry_cnt = n;
        self.retry_left = n;
    }
    /// `modify_qp` with RNR_RETRY.
    pub fn set_rnr_retry(&mut self, n: u8) {
        self.rnr_retry = n;
        self.rnr_left = n;
    }
    /// `modify_qp` with SQ_PSN: the first PSN to send.
    pub fn set_sq_psn(&mut self, p: Psn) {
        self.una = p;
        self.next_psn = p;
    }

    // --- events from the requester ---

    /// A new WQE starts at the cursor: its first PSN, and the responder's MSN before it.
    pub fn begin_wqe(&mut self, rd_atomic: bool) -> (Psn, Msn) {
        if rd_atomic {
            self.rd_atomic_inflight += 1;
        }
        self.cur_off = 0;
        let msn = self.msn;
        self.msn = msn.add(1);
        (self.next_psn, msn)
    }

    /// A packet left: whether it asked for an ACK, the PSN after it (a READ request reserves
    /// every PSN of its responses), and where the cursor goes.
    #[inline]
    pub fn on_sent(&mut self, ack_req: bool, next: Psn, advance: Advance) {
        self.cadence.sent(ack_req);
        if next.after(self.next_psn) {
            self.next_psn = next;
        }
        match advance {
            Advance::NextWqe => {
                self.cur += 1;
                self.cur_off = 0;
            }
            Advance::Offset(off) => self.cur_off = off,
        }
    }

    // --- events from the completer ---

    /// The head WQE completed; `new_head` is the SQ's head after it. A READ/atomic that had
    /// been sent gives its slot back.
    pub fn on_wqe_completed(&mut self, new_head: u64, rd_atomic_sent: bool) {
        if rd_atomic_sent {
            self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
        }
        if self.cur < new_head {
            self.cur = new_head;
            self.cur_off = 0;
        }
    }

    /// Everything before `to` is acknowledged. Returns whether that is forward progress, which
    /// restores the retry budgets (rxe `reset_retry_counters`) and ends a retry that `to` has
    /// passed; the QP then restarts its local ACK timer.
    pub fn on_ack(&mut self, to: Psn) -> bool {
        if !to.after(self.una) || to.after(self.next_psn) {
            return false;
        }
        self.una = to;
        self.retry_left = self.retry_cnt;
        self.rnr_left = self.rnr_retry;
        if self.retrying_from.is_some_and(|r| to.after(r)) {
            self.retrying_from = None;
        }
        true
    }

    /// A loss at `psn` (a NAK PSN sequence error, an implicit NAK, or — through
    /// [`SendState::on_timeout`] — the local ACK timer): resend from `psn`, counting against
    /// `retry_cnt` ([`retry_step`]; `seven_is_infinite`: rxe's `retry_cnt = 7` quirk).
    pub fn on_nak(&mut self, sq: &SendQueue, mtu: u32, psn: Psn, cause: RetryCause, seven_is_infinite: bool) -> Retry {
        if cause != RetryCause::Timeout && self.retrying_from == Some(psn) {
            return Retry::Stale;
        }
        match retry_step(self.retry_left, seven_is_infinite) {
            RetryStep::Exhausted => Retry::Exhausted,
            RetryStep::Retry { left } => {
                self.retry_left = left;
                self.resume(sq, mtu, psn);
                Retry::Resend(psn)
            }
        }
    }

    /// The local ACK timer fired: resend from the oldest unacknowledged PSN (IBTA §9.7.6.1.3);
    /// `None` when nothing is outstanding.
    pub fn on_timeout(&mut self, sq: &SendQueue, mtu: u32, seven_is_infinite: bool) -> Option<Retry> {
        if !self.outstanding() {
            return None;
        }
        let una = self.una;
        Some(self.on_nak(sq, mtu, una, RetryCause::Timeout, seven_is_infinite))
    }

    /// An RNR NAK for `psn`: wait, counting against `rnr_retry` (7 = forever, IBTA
    /// §9.7.5.2.8). The cursor goes back to `psn` now, so nothing newer leaves meanwhile.
    pub fn on_rnr(&mut self, sq: &SendQueue, mtu: u32, psn: Psn) -> Rnr {
        match retry_step(self.rnr_left, true) {
            RetryStep::Exhausted => return Rnr::Exhausted,
            RetryStep::Retry { left } => self.rnr_left = left,
        }
        self.rnr_psn = psn;
        self.rewind(sq, mtu, psn);
        Rnr::Wait
    }

    /// The RNR wait ended: resend from the NAKed PSN.
    pub fn on_rnr_timeout(&mut self, sq: &SendQueue, mtu: u32) {
        let psn = self.rnr_psn;
        self.resume(sq, mtu, psn);
    }

    /// The QP flushed its send queue (ERR): the cursor at `tail`, nothing in flight.
    pub fn on_flush(&mut self, tail: u64) {
        self.cur = tail;
        self.cur_off = 0;
        self.rd_atomic_inflight = 0;
    }

    /// Resend from `psn`: move the cursor and mark the retry under way.
    fn resume(&mut self, sq: &SendQueue, mtu: u32, psn: Psn) {
        self.rewind(sq, mtu, psn);
        self.retrying_from = Some(psn);
    }

    /// Move the cursor to where the recovery strategy resumes for `psn`. rxe keeps counting
    /// packets without AckReq across a retry, so the cadence stays.
    fn rewind(&mut self, sq: &SendQueue, mtu: u32, psn: Psn) {
        if let Some((cur, off)) = self.recovery.resume_point(sq, self.cur, psn, mtu) {
            self.cur = cur;
            self.cur_off = off;
        }
    }
}
