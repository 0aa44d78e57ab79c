//! The two sources of increase events: the rate-increase timer and the byte counter.
//!
//! SIGCOMM 2015 §3.1 (after QCN): a timer of period T (`rpg_time_reset`) and a counter of
//! B bytes sent (`rpg_byte_reset`), both restarted by every rate decrease; each expiry is one
//! increase event of its source ([`super::increase`]). The timer keeps its period exactly:
//! the next expiry is T after the previous one, not after the moment it was handled.

use super::Params;
use crate::time::Instant;

/// The increase timer and the byte counter of a rate-limited QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncreaseTimers {
    /// When the timer next expires.
    pub next_timer: Instant,
    /// Bytes sent since the byte counter last expired (or the last decrease).
    bytes: u64,
}

impl IncreaseTimers {
    /// Both restarted at `now` (a decrease).
    pub fn restart(p: &Params, now: Instant) -> IncreaseTimers {
        IncreaseTimers { next_timer: now + p.increase_period(), bytes: 0 }
    }

    /// If the timer has expired by `now`: take the expiry and schedule the next.
    pub fn take_timer(&mut self, p: &Params, now: Instant) -> bool {
        if now < self.next_timer {
            return false;
        }
        self.next_timer += p.increase_period();
        true
    }

    /// Skip every expiry due by `now` at once; returns how many there were. For a limiter
    /// whose increases can no longer change anything (at its ceiling): an engine that was
    /// not run for a long while (a stopped process, a paused VM) catches up in one step
    /// instead of one per elapsed period, which could be billions.
    pub fn skip_expired(&mut self, p: &Params, now: Instant) -> u64 {
        if now < self.next_timer {
            return 0;
        }
        let period = p.increase_period().as_nanos().max(1) as u64;
        let n = (now - self.next_timer).as_nanos() as u64 / period + 1;
        self.next_timer = Instant::from_nanos(self.next_timer.as_nanos().saturating_add(n.saturating_mul(period)));
        n
    }

    /// Count `n` bytes sent; `true` once per B bytes (call again while it returns `true`:
    /// a packet larger than B is several expiries). A zero B never expires.
    pub fn count_bytes(&mut self, p: &Params, n: u64) -> bool {
        self.bytes += n;
        self.take_bytes(p)
    }

    /// Take one more byte-counter expiry, if the bytes counted so far hold one.
    pub fn take_bytes(&mut self, p: &Params) -> bool {
        let b = p.rpg_byte_reset as u64;
        if b == 0 || self.bytes < b {
            return false;
        }
        self.bytes -= b;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_keeps_its_period_and_bytes_expire_per_b() {
        let p = Params::paper(1);
        let mut t = IncreaseTimers::restart(&p, Instant::from_nanos(1000));
        assert_eq!(t.next_timer, Instant::from_nanos(56_000));
        assert!(!t.take_timer(&p, Instant::from_nanos(55_999)));
        // Handled late, at 60 µs: the next expiry is still 111 µs.
        assert!(t.take_timer(&p, Instant::from_nanos(60_000)));
        assert_eq!(t.next_timer, Instant::from_nanos(111_000));
        let mut q = p;
        q.rpg_byte_reset = 10_000;
        assert!(!t.count_bytes(&q, 9_999));
        assert!(t.count_bytes(&q, 25_001));
        assert!(t.take_bytes(&q));
        assert!(t.take_bytes(&q), "35,000 bytes: three expiries");
        assert!(!t.take_bytes(&q));
        q.rpg_byte_reset = 0;
        assert!(!t.count_bytes(&q, u32::MAX as u64));
    }
}
