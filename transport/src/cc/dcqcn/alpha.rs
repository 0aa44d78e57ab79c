//! α: the reaction point's estimate of how congested the path is.
//!
//! SIGCOMM 2015 §3.1 (RP algorithm): on a CNP `α ← (1 − g)·α + g`; whenever K passes without
//! a CNP, `α ← (1 − g)·α`. ConnectX: K = `dce_tcp_rtt`, g = `(1024 − dce_tcp_g)/1024`, α starts
//! at `initial_alpha_value` on the first CNP.
//!
//! The decay is kept in closed form: α after n whole periods since the last CNP is
//! `α_cnp·(1 − g)^n`. So the engine runs no timer per K (1 µs on ConnectX: a million events a
//! second per QP for nothing, as α only matters at the next CNP), while `uroce sim dcqcn`
//! can still show each period's value as an `alpha_timer` event — the same formula either way.

use crate::time::Instant;
use core::time::Duration;

/// α and the time of the CNP it was last raised by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alpha {
    /// α right after the last CNP.
    at_cnp: f64,
    /// The last CNP's time: decay periods count from here.
    since: Instant,
}

impl Alpha {
    /// α set to `initial` at `now` (the first CNP).
    pub fn start(initial: f64, now: Instant) -> Alpha {
        Alpha { at_cnp: initial.clamp(0.0, 1.0), since: now }
    }

    /// Whole periods of `k` between the last CNP and `now`.
    fn periods(&self, now: Instant, k: Duration) -> u64 {
        let k = k.as_nanos().max(1) as u64;
        now.saturating_duration_since(self.since).as_nanos() as u64 / k
    }

    /// α at `now`: decayed once per whole period `k` since the last CNP.
    pub fn value(&self, now: Instant, g: f64, k: Duration) -> f64 {
        let n = self.periods(now, k).min(i32::MAX as u64) as i32;
        self.at_cnp * (1.0 - g).powi(n)
    }

    /// A CNP at `now`: `α ← (1 − g)·α + g` on the decayed value; periods restart.
    pub fn on_cnp(&mut self, now: Instant, g: f64, k: Duration) {
        let a = self.value(now, g, k);
        self.at_cnp = ((1.0 - g) * a + g).clamp(0.0, 1.0);
        self.since = now;
    }

    /// When the next decay period ends after `now` (an `alpha_timer` event for those who
    /// watch; the engine does not schedule it).
    pub fn next_period_end(&self, now: Instant, k: Duration) -> Instant {
        self.since + k * (self.periods(now, k) as u32 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: u64) -> Instant {
        Instant::from_nanos(v * 1000)
    }

    #[test]
    fn raised_on_cnp_and_decayed_per_whole_period() {
        // Paper: g = 1/256, K = 55 µs, α = 1 at the first CNP.
        let (g, k) = (1.0 / 256.0, Duration::from_micros(55));
        let mut a = Alpha::start(1.0, us(0));
        assert_eq!(a.value(us(54), g, k), 1.0);
        assert_eq!(a.value(us(55), g, k), 255.0 / 256.0);
        assert_eq!(a.value(us(110), g, k), (255.0f64 / 256.0).powi(2));
        assert_eq!(a.next_period_end(us(60), k), us(110));
        // A CNP at 120 µs: two periods decayed, then raised; periods count from 120.
        a.on_cnp(us(120), g, k);
        let decayed = (255.0f64 / 256.0).powi(2);
        assert_eq!(a.value(us(120), g, k), 255.0 / 256.0 * decayed + 1.0 / 256.0);
        assert_eq!(a.next_period_end(us(120), k), us(175));
    }

    #[test]
    fn stays_within_zero_and_one() {
        let (g, k) = (5.0 / 1024.0, Duration::from_micros(1));
        let mut a = Alpha::start(1023.0 / 1024.0, us(0));
        for t in 0..10_000 {
            a.on_cnp(us(t * 3), g, k);
            let v = a.value(us(t * 3 + 2), g, k);
            assert!((0.0..=1.0).contains(&v), "{v}");
        }
        assert!(a.value(us(100_000_000), g, k) >= 0.0);
    }
}
