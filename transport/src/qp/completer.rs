//! The completer: ACKs, NAKs, READ responses and atomic ACKs → completed send WQEs, in order.
//!
//! * An ACK for PSN `a` acknowledges every request up to `a` (IBTA §9.7.5.1.2: ACKs are
//!   cumulative; coalesced ACKs are just ACKs for later PSNs).
//! * READ responses and atomic ACKs implicitly acknowledge earlier SEND/WRITE requests; an
//!   ACK or response *past* a READ/atomic whose response has not arrived is an implicit NAK
//!   (§9.7.5.1.4; rxe `check_psn`): that READ/atomic is retried.
//! * NAK PSN sequence error for `n`: everything before `n` is acknowledged, resend from `n`
//!   (Go-Back-N, §9.7.5.1.1), counting against `retry_cnt`.
//! * RNR NAK: wait the RNR timer (Table 45), resend from its PSN, counting against
//!   `rnr_retry` (7 = infinite, §9.7.5.2.8).
//! * Other NAKs complete the WQE with the matching error and move the QP to ERR (§9.7.5.2).
//! * Local ACK timeout: resend from the oldest unacknowledged PSN (§9.7.6.1.3), counting
//!   against `retry_cnt`. Retry counters reset on forward progress (rxe `reset_retry_counters`).

use super::requester::scatter;
use super::send_state::{Retry, RetryCause, Rnr};
use super::{Ctx, Qp};
use crate::time::local_ack_timeout;
use crate::timer::Timer;
use crate::verbs::*;
use uroce_wire::opcode::Operation;
use uroce_wire::{Msn, NakCode, ParsedFrame, Psn, RnrTimer, Syndrome};

impl Qp {
    /// Whether retry_cnt 7 means "forever" here (the peer quirk; rnr_retry 7 always does).
    fn retry_infinite(&self, ctx: &Ctx<'_>) -> bool {
        ctx.cfg.quirks.retry_cnt_7_infinite
    }

    /// Complete the oldest WQE with `status`.
    fn complete_head(&mut self, ctx: &mut Ctx<'_>, status: WcStatus, vendor_err: u32) {
        let head = self.sq.head;
        let w = self.sq.get(head);
        // IBTA 10.7.3.1: an errored WR always completes, even when unsignaled.
        if status != WcStatus::Success || w.signaled {
            let wc = WorkCompletion {
                wr_id: w.wr_id,
                status,
                opcode: w.opcode.wc_opcode(),
                vendor_err,
                byte_len: if w.opcode.is_atomic() { 8 } else { w.length },
                qp_num: self.qpn.value(),
                ..Default::default()
            };
            ctx.complete(self.send_cq, wc);
        }
        let done_through = w.last_psn.add(1);
        let assigned = w.psn_assigned;
        let rd_atomic_sent = w.opcode.is_read_or_atomic() && assigned;
        self.sq.head += 1;
        self.send.on_wqe_completed(self.sq.head, rd_atomic_sent);
        // A completed WQE's PSNs are all acknowledged: the oldest unacknowledged PSN is at
        // least the next WQE's first.
        if status == WcStatus::Success && assigned {
            self.advance_una(ctx, done_through);
        }
    }

    /// Complete the head WQE with an error and move the QP to ERR (flushing the rest).
    fn fail_head(&mut self, ctx: &mut Ctx<'_>, status: WcStatus, vendor_err: u32) {
        if self.sq.head != self.sq.tail {
            self.complete_head(ctx, status, vendor_err);
        }
        self.enter_error(ctx, true);
    }

    /// UC/UD: the head WQE's last packet has been sent, which completes it (there is nothing to
    /// wait for: no ACK comes).
    pub(crate) fn complete_sent_head(&mut self, ctx: &mut Ctx<'_>) {
        if self.sq.head != self.sq.tail {
            self.complete_head(ctx, WcStatus::Success, 0);
        }
    }

    /// The head WQE failed a local check before sending (bad SGE).
    pub(crate) fn complete_local_error(&mut self, ctx: &mut Ctx<'_>) {
        let st = self.sq.get(self.sq.head).local_err.unwrap_or(WcStatus::LocQpOpErr);
        self.fail_head(ctx, st, 0);
    }

    /// Acknowledge every request up to and including `a`. `Err(psn)` = implicit NAK: a READ or
    /// atomic before `a` is missing its response, resend from `psn`.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, a: Psn) -> Result<(), Psn> {
        let mtu = self.mtu() as u32;
        let mut una = a.add(1);
        while self.sq.head != self.sq.tail && self.state != QpState::Err {
            let w = self.sq.get(self.sq.head);
            if w.local_err.is_some() && !w.psn_assigned {
                self.complete_local_error(ctx);
                return Ok(());
            }
            if !w.psn_assigned {
                break;
            }
            if w.opcode.is_read_or_atomic() {
                // The first response PSN this READ/atomic still waits for.
                let needed = w.first_psn.add(w.read_rcvd / mtu);
                if !w.last_psn.after(a) {
                    // Everything before the missing response is acknowledged.
                    self.advance_una(ctx, needed);
                    return Err(needed);
                }
                // `a` falls inside it: nothing past its missing responses is acknowledged.
                if una.after(needed) {
                    una = needed;
                }
                break;
            }
            if w.last_psn.after(a) {
                break;
            }
            self.complete_head(ctx, WcStatus::Success, 0);
        }
        self.advance_una(ctx, una);
        Ok(())
    }

    /// Move the oldest-unacknowledged PSN forward to `to` if that is progress.
    fn advance_una(&mut self, ctx: &mut Ctx<'_>, to: Psn) {
        if !self.send.on_ack(to) {
            return;
        }
        self.rearm_retransmit(ctx);
        if self.state == QpState::Sqd && !self.send.outstanding() && self.sq.head == self.sq.tail {
            ctx.events.push_back(super::AsyncEvent::SqDrained(self.qpn.value()));
        }
    }

    /// Restart the local ACK timer if requests are outstanding, else stop it.
    fn rearm_retransmit(&mut self, ctx: &mut Ctx<'_>) {
        match local_ack_timeout(self.attr.timeout) {
            Some(t) if self.send.outstanding() => self.arm(ctx, Timer::Retransmit, ctx.now + t),
            _ => self.timers.stop(Timer::Retransmit),
        }
    }

    /// Act on what the send state decided about a loss.
    fn on_retry(&mut self, ctx: &mut Ctx<'_>, r: Retry) {
        match r {
            Retry::Stale => ctx.counters.dropped_stale_response += 1,
            Retry::Exhausted => {
                ctx.counters.retry_exceeded_err += 1;
                self.fail_head(ctx, WcStatus::RetryExcErr, 0);
            }
            Retry::Resend(_) => {
                ctx.counters.completer_retry_err += 1;
                self.rearm_retransmit(ctx);
            }
        }
    }

    /// Start a retry from `psn` (Go-Back-N, or whatever the send state's recovery is), or
    /// fail the QP when the retries are used up.
    fn retry(&mut self, ctx: &mut Ctx<'_>, psn: Psn, cause: RetryCause) {
        let infinite = self.retry_infinite(ctx);
        let r = self.send.on_nak(&self.sq, self.mtu() as u32, psn, cause, infinite);
        self.on_retry(ctx, r);
    }

    /// The local ACK timer fired.
    pub(crate) fn on_retransmit_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.state != QpState::Rts && self.state != QpState::Sqd {
            return;
        }
        let infinite = self.retry_infinite(ctx);
        if let Some(r) = self.send.on_timeout(&self.sq, self.mtu() as u32, infinite) {
            ctx.counters.local_ack_timeout_err += 1;
            self.on_retry(ctx, r);
        }
    }

    /// The RNR wait ended: resend from the NAKed PSN.
    pub(crate) fn on_rnr_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.state != QpState::Rts && self.state != QpState::Sqd {
            return;
        }
        self.send.on_rnr_timeout(&self.sq, self.mtu() as u32);
        self.rearm_retransmit(ctx);
    }

    /// A response (ACK, NAK, READ response, atomic ACK) arrived for this QP.
    pub(crate) fn handle_response(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            ctx.counters.dropped_qp_state += 1;
            return;
        }
        let r = p.roce.bth.psn;
        let info = p.roce.bth.opcode.info().expect("parse_frame only returns known opcodes");
        // A response for a PSN never sent, or for one already acknowledged: stale.
        if !self.send.awaits(r) {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        match info.operation {
            Operation::Acknowledge => self.on_ack(ctx, p, r),
            Operation::AtomicAcknowledge => self.on_atomic_ack(ctx, p, r),
            Operation::ReadResponse => self.on_read_response(ctx, p, r),
            _ => ctx.counters.dropped_bad_opcode += 1,
        }
    }

    fn on_ack(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, r: Psn) {
        let Some(aeth) = p.roce.ext.aeth else { return };
        match aeth.syndrome {
            Syndrome::Ack(_) => {
                if let Err(psn) = self.ack_through(ctx, r) {
                    self.retry(ctx, psn, RetryCause::Implicit);
                }
            }
            Syndrome::RnrNak(t) => {
                ctx.counters.rcvd_rnr_err += 1;
                if let Err(psn) = self.ack_through(ctx, r.sub(1)) {
                    return self.retry(ctx, psn, RetryCause::Implicit);
                }
                self.on_rnr_nak(ctx, r, t);
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                ctx.counters.rcvd_seq_err += 1;
                // "A NAK implicitly acknowledges all packets with PSNs before it."
                let psn = match self.ack_through(ctx, r.sub(1)) {
                    Err(earlier) => earlier,
                    Ok(()) => r,
                };
                if self.state != QpState::Err {
                    self.retry(ctx, psn, RetryCause::SeqNak);
                }
            }
            Syndrome::Nak(code) => {
                if ctx.cfg.guards.nak_msn && !self.nak_msn_fits(r, aeth.msn) {
                    ctx.counters.dropped_bad_nak_msn += 1;
                    return;
                }
                let _ = self.ack_through(ctx, r.sub(1));
                let status = match code {
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                    NakCode::PsnSequenceError | NakCode::Reserved(_) => WcStatus::BadRespErr,
                };
                if self.state != QpState::Err {
                    self.fail_head(ctx, status, aeth.syndrome.to_byte() as u32);
                }
            }
            Syndrome::Reserved(_) => ctx.counters.dropped_stale_response += 1,
        }
    }

    /// Whether an error NAK for PSN `r` carries the MSN its responder has when it fails the
    /// request holding `r` ([`crate::Guards::nak_msn`]): the messages before that request
    /// (rxe counts a message at its end, `execute`), or for a READ also one more — accepted
    /// READs count before their responses go out (C9-148), so one that fails while responding
    /// (its region deregistered, rxe `read_reply` → remote access error) is NAKed after it.
    fn nak_msn_fits(&self, r: Psn, msn: Msn) -> bool {
        let mut i = self.sq.head;
        while i != self.sq.tail {
            let w = self.sq.get(i);
            if !w.psn_assigned {
                break;
            }
            if r.within(w.first_psn, w.last_psn) {
                return msn == w.msn || (w.opcode == WrOpcode::RdmaRead && msn == w.msn.add(1));
            }
            i += 1;
        }
        false
    }

    fn on_rnr_nak(&mut self, ctx: &mut Ctx<'_>, r: Psn, t: RnrTimer) {
        if self.state == QpState::Err {
            return;
        }
        match self.send.on_rnr(&self.sq, self.mtu() as u32, r) {
            Rnr::Exhausted => {
                ctx.counters.retry_rnr_exceeded_err += 1;
                self.fail_head(ctx, WcStatus::RnrRetryExcErr, 0);
            }
            Rnr::Wait => {
                let at = ctx.now + core::time::Duration::from_micros(t.micros() as u64);
                self.arm(ctx, Timer::Rnr, at);
                self.timers.stop(Timer::Retransmit);
            }
        }
    }

    fn on_atomic_ack(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, r: Psn) {
        if let Err(psn) = self.ack_through(ctx, r.sub(1)) {
            return self.retry(ctx, psn, RetryCause::Implicit);
        }
        if self.sq.head == self.sq.tail {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        let w = self.sq.get(self.sq.head);
        if !(w.opcode.is_atomic() && w.psn_assigned && w.first_psn == r) {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        let orig = p.roce.ext.atomic_ack_eth.map_or(0, |a| a.orig);
        // The original value lands in the local buffer in host (little-endian) order, as rxe
        // stores it.
        let st = scatter(ctx.mrs, self.pd, self.sq.sges(self.sq.head), 0, &orig.to_le_bytes());
        match st {
            Ok(()) => {
                self.complete_head(ctx, WcStatus::Success, 0);
                self.advance_una(ctx, r.add(1));
            }
            Err(e) => self.fail_head(ctx, e, 0),
        }
    }

    fn on_read_response(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, r: Psn) {
        if let Err(psn) = self.ack_through(ctx, r.sub(1)) {
            return self.retry(ctx, psn, RetryCause::Implicit);
        }
        if self.sq.head == self.sq.tail || self.state == QpState::Err {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        let mtu = self.mtu() as u32;
        let w = self.sq.get(self.sq.head);
        if w.opcode != WrOpcode::RdmaRead || !w.psn_assigned || !r.within(w.first_psn, w.last_psn) {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        let expected = w.first_psn.add(w.read_rcvd / mtu);
        if r.after(expected) {
            // Responses before this one were lost: implicit NAK.
            return self.retry(ctx, expected, RetryCause::Implicit);
        }
        if r.before(expected) {
            ctx.counters.dropped_stale_response += 1;
            return;
        }
        let payload = p.payload();
        let remaining = w.length - w.read_rcvd;
        let end = p.roce.bth.opcode.info().is_some_and(|i| i.position.is_end());
        // C9-92 on the requester side: non-final responses carry exactly the PMTU, the final
        // one the rest.
        let len_ok =
            if end { payload.len() as u32 == remaining } else { payload.len() as u32 == mtu && remaining > mtu };
        if !len_ok {
            return self.fail_head(ctx, WcStatus::BadRespErr, 0);
        }
        let off = w.read_rcvd as u64;
        if let Err(e) = scatter(ctx.mrs, self.pd, self.sq.sges(self.sq.head), off, payload) {
            return self.fail_head(ctx, e, 0);
        }
        let head = self.sq.head;
        let w = self.sq.get_mut(head);
        w.read_rcvd += payload.len() as u32;
        let done = w.read_rcvd == w.length;
        if done {
            self.complete_head(ctx, WcStatus::Success, 0);
        }
        self.advance_una(ctx, r.add(1));
    }
}
