//! Transmit scheduling and timers: which QP sends next ([`Device::poll_transmit`]: responses
//! before new requests, QPs in turn), and which timers are due ([`Device::handle_timeout`],
//! [`Device::poll_timeout`], over the device's [`crate::timer::TimerQueue`]).

use super::Device;
use crate::qp::Qp;
use crate::time::Instant;
use crate::timer::Head;
use std::collections::VecDeque;

impl Device {
    /// Fire every timer due at `now`. Work is O(log n) per timer that fires or moved, never a
    /// scan over the QPs.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(qpn) = self.timers.head_qpn() {
            let table = self.qps.get_mut(qpn).map(|q| &mut q.timers);
            self.counters.timer_queue_checks += 1;
            match self.timers.examine(now, table) {
                Head::Due(qpn, t) => {
                    self.with_qp(qpn, now, |qp, ctx| qp.on_timer(ctx, t));
                }
                Head::Wait => break,
                Head::Again => {}
            }
        }
    }

    /// When [`Device::handle_timeout`] should next be called: the earliest running timer of
    /// any QP, exactly (stale queue entries at the head are settled first).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(qpn) = self.timers.head_qpn() {
            let table = self.qps.get_mut(qpn).map(|q| &mut q.timers);
            self.counters.timer_queue_checks += 1;
            match self.timers.settle(table) {
                Head::Again => {}
                _ => break,
            }
        }
        self.timers.next()
    }

    /// Entries in the timer queue, live and stale (at most one live entry per running timer;
    /// a stale one goes when it comes up).
    pub fn timer_queue_len(&self) -> usize {
        self.timers.len()
    }

    /// The largest frame this device can send: the active MTU of payload plus the largest
    /// header stack (802.1Q, IPv6, UDP, BTH, RETH + ImmDt or AtomicETH), pad and ICRC.
    pub fn max_frame_len(&self) -> usize {
        self.cfg.active_mtu.bytes() + 18 + 40 + 8 + 12 + 28 + 3 + 4
    }

    /// Write the next frame to send into `buf`, which must hold [`Device::max_frame_len`]
    /// bytes (a smaller buffer gets nothing). Responses go before new requests; QPs take turns.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < self.max_frame_len() {
            tracing::warn!(have = buf.len(), need = self.max_frame_len(), "poll_transmit: buffer too small");
            return None;
        }
        // Each QP queued now gets one turn; a frame looped back to this device (a QP connected
        // to one of its own GIDs) is received at once and gives every QP queued then a turn.
        let mut turns = self.ready.len();
        while turns > 0 {
            turns -= 1;
            let Some(qpn) = self.ready.pop_front() else { break };
            let out = self.lend_qp(qpn, now, |qp, ctx, ready| {
                qp.in_ready = false;
                let out = qp.poll_response(ctx, buf).or_else(|| qp.poll_request(ctx, buf));
                // A QP that could not send (window, pacing, RNR wait) is queued again by what
                // unblocks it: a response, a timer, a post.
                if out.is_some() {
                    mark_ready(ready, qp);
                }
                out.map(|n| (n, qp.sent_loopback()))
            });
            match out {
                Some(Some((len, false))) => return Some(len),
                Some(Some((len, true))) => {
                    self.counters.loopback_pkts += 1;
                    if self.handle_frame(now, &buf[..len]).is_err() {
                        tracing::debug!(qpn, "looped-back frame dropped");
                    }
                    turns = self.ready.len();
                }
                _ => {}
            }
        }
        None
    }
}

/// Queue `qp` for [`Device::poll_transmit`] if it has something to send and is not queued.
#[inline]
pub(super) fn mark_ready(ready: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.in_ready && qp.has_output() {
        qp.in_ready = true;
        ready.push_back(qp.qpn.value());
    }
}
