//! DCQCN's reaction point, per QP (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015; ConnectX's firmware implementation and knobs).
//!
//! | file | sub-model |
//! |---|---|
//! | [`params`] | the knobs (ConnectX names and units) and the `connectx` / `paper` profiles |
//! | [`alpha`] | α: raised by each CNP, decayed each K without one |
//! | [`rate`] | the decrease: RC cut by α, RT clamped or kept, the first CNP, the floor |
//! | [`increase`] | fast recovery, additive and hyper increase |
//! | [`timers`] | the increase timer (T) and byte counter (B) |
//! | [`flow`] | one saturated flow driven by given CNP times (`uroce sim dcqcn`) |
//! | here | [`Dcqcn`]: the state machine that ties them together, and the monitor period |
//!
//! A QP starts unlimited, at line rate. Its first CNP starts the rate limiter (α at
//! `initial_alpha_value`, the first cut); every later CNP raises α and cuts the rate, at most
//! once per `rate_reduce_monitor_period` (a CNP inside that period is folded into a decrease at
//! its end, with α as it stands then); increase events move it back up; once RC and RT are
//! both back at line rate the limiter is released and the QP is unlimited again.
//!
//! Each method takes an observer that sees every RP event with the state right after it (a
//! `cnp` with α updated, a `decrease` with the rate cut): the engine passes one that does
//! nothing, `uroce sim dcqcn` ([`flow`]) prints them.

pub mod alpha;
pub mod flow;
pub mod increase;
pub mod params;
pub mod rate;
pub mod timers;

pub use params::{ParamError, Params};

use crate::time::Instant;
use alpha::Alpha;
use rate::{Rates, Stages};
use timers::IncreaseTimers;

/// A reaction-point event (`uroce sim dcqcn`'s `event` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpEvent {
    /// A CNP arrived.
    Cnp,
    /// An α update period ended without a CNP (α decayed).
    AlphaTimer,
    /// The rate-increase timer expired (an increase event).
    RateTimer,
    /// The byte counter expired (an increase event).
    ByteCounter,
    /// The rate was cut.
    Decrease,
}

impl RpEvent {
    /// The CSV name.
    pub fn name(self) -> &'static str {
        match self {
            RpEvent::Cnp => "cnp",
            RpEvent::AlphaTimer => "alpha_timer",
            RpEvent::RateTimer => "rate_timer",
            RpEvent::ByteCounter => "byte_counter",
            RpEvent::Decrease => "decrease",
        }
    }
}

/// The state an observer sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RpState {
    /// Current rate RC, bits per second (line rate when unlimited).
    pub rc: f64,
    /// Target rate RT, bits per second.
    pub rt: f64,
    /// α (0 when unlimited).
    pub alpha: f64,
    /// Whether the rate limiter is active.
    pub limited: bool,
}

/// The state of a rate-limited QP.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Limited {
    rates: Rates,
    alpha: Alpha,
    /// Increase events since the last decrease.
    stages: Stages,
    timers: IncreaseTimers,
    last_decrease: Instant,
    /// A CNP came inside the monitor period: decrease at its end.
    pending_decrease: bool,
}

/// One QP's DCQCN reaction point.
#[derive(Clone, Debug, PartialEq)]
pub struct Dcqcn {
    p: Params,
    /// `None`: unlimited (no CNP yet, or fully recovered).
    lim: Option<Limited>,
}

impl Dcqcn {
    /// A reaction point with parameters `p`, unlimited.
    pub fn new(p: Params) -> Dcqcn {
        Dcqcn { p, lim: None }
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// The state at `now`.
    pub fn state(&self, now: Instant) -> RpState {
        match &self.lim {
            None => {
                let r = self.p.max_rate();
                RpState { rc: r, rt: r, alpha: 0.0, limited: false }
            }
            Some(l) => RpState {
                rc: l.rates.current,
                rt: l.rates.target,
                alpha: l.alpha.value(now, self.p.g(), self.p.alpha_period()),
                limited: true,
            },
        }
    }

    /// The rate the pacer enforces, bits per second (`None`: unlimited).
    pub fn rate(&self) -> Option<f64> {
        self.lim.as_ref().map(|l| l.rates.current)
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Instant, obs: &mut impl FnMut(Instant, RpEvent, RpState)) {
        let p = self.p;
        let (g, k) = (p.g(), p.alpha_period());
        let Some(l) = &mut self.lim else {
            // The first CNP: the limiter starts at line rate with α = initial_alpha_value.
            let alpha = Alpha::start(p.initial_alpha(), now);
            self.lim = Some(Limited {
                rates: Rates::at(p.max_rate()),
                alpha,
                stages: Stages::default(),
                timers: IncreaseTimers::restart(&p, now),
                last_decrease: now,
                pending_decrease: false,
            });
            obs(now, RpEvent::Cnp, self.state(now));
            if let Some(l) = &mut self.lim {
                l.rates.first_cnp(&p, alpha.value(now, g, k));
            }
            obs(now, RpEvent::Decrease, self.state(now));
            return;
        };
        if now >= l.last_decrease + p.monitor_period() && !l.pending_decrease {
            // Cut with α of before this CNP, then raise it (the paper's order).
            let a = l.alpha.value(now, g, k);
            l.alpha.on_cnp(now, g, k);
            obs(now, RpEvent::Cnp, self.state(now));
            self.decrease(now, a, obs);
        } else {
            l.alpha.on_cnp(now, g, k);
            l.pending_decrease = true;
            obs(now, RpEvent::Cnp, self.state(now));
        }
    }

    fn decrease(&mut self, now: Instant, alpha: f64, obs: &mut impl FnMut(Instant, RpEvent, RpState)) {
        let p = self.p;
        let Some(l) = &mut self.lim else { return };
        l.rates.decrease(&p, alpha, l.stages, false);
        l.stages = Stages::default();
        l.timers = IncreaseTimers::restart(&p, now);
        l.last_decrease = now;
        l.pending_decrease = false;
        obs(now, RpEvent::Decrease, self.state(now));
    }

    /// `bytes` left the QP at `now` (the byte counter).
    pub fn on_sent(&mut self, now: Instant, bytes: usize, obs: &mut impl FnMut(Instant, RpEvent, RpState)) {
        let p = self.p;
        let Some(l) = &mut self.lim else { return };
        let mut expired = l.timers.count_bytes(&p, bytes as u64);
        while expired {
            let l = self.lim.as_mut().expect("limited");
            l.stages.bytes = l.stages.bytes.saturating_add(1);
            l.rates.increase(&p, l.stages);
            obs(now, RpEvent::ByteCounter, self.state(now));
            if self.release(now) {
                return;
            }
            expired = self.lim.as_mut().is_some_and(|l| l.timers.take_bytes(&p));
        }
    }

    /// When [`Dcqcn::on_timeout`] is next due (the increase timer, or a folded decrease).
    pub fn next_timeout(&self) -> Option<Instant> {
        let l = self.lim.as_ref()?;
        let dec = l.pending_decrease.then(|| l.last_decrease + self.p.monitor_period());
        Some(dec.map_or(l.timers.next_timer, |d| d.min(l.timers.next_timer)))
    }

    /// Handle what is due at `now`, earliest first.
    pub fn on_timeout(&mut self, now: Instant, obs: &mut impl FnMut(Instant, RpEvent, RpState)) {
        let p = self.p;
        while let Some(at) = self.next_timeout().filter(|&t| t <= now) {
            let l = self.lim.as_mut().expect("a timeout means limited");
            if l.pending_decrease && l.last_decrease + p.monitor_period() == at {
                let a = l.alpha.value(at, p.g(), p.alpha_period());
                self.decrease(at, a, obs);
            } else if l.timers.take_timer(&p, at) {
                l.stages.timer = l.stages.timer.saturating_add(1);
                let before = l.rates;
                l.rates.increase(&p, l.stages);
                obs(at, RpEvent::RateTimer, self.state(at));
                if self.release(at) {
                    return;
                }
                // When further timer events can change nothing (at a ceiling below line rate,
                // or with zero increase steps), a backlog of expiries (an engine not run for a
                // long while) is counted at once rather than walked one period at a time — up
                // to a pending decrease, which comes first and in its place.
                let l = self.lim.as_mut().expect("not released");
                if l.rates.settled(&before, &p, l.stages) {
                    let mut until = now;
                    if l.pending_decrease {
                        let dec = l.last_decrease + p.monitor_period();
                        until = until.min(Instant::from_nanos(dec.as_nanos().saturating_sub(1)));
                    }
                    if until.saturating_duration_since(l.timers.next_timer) > p.increase_period() * 1024 {
                        let n = l.timers.skip_expired(&p, until);
                        l.stages.timer = l.stages.timer.saturating_add(n.min(u32::MAX as u64) as u32);
                    }
                }
            }
        }
    }

    /// After an increase at `now`: back at line rate (within 1 bit/s), the limiter goes —
    /// not inside the monitor period (the next CNP would start a new limiter with a decrease
    /// closer than that), and not under a ceiling below line rate.
    fn release(&mut self, now: Instant) -> bool {
        let ceiling = self.p.max_rate();
        let Some(l) = &self.lim else { return true };
        let back = ceiling >= self.p.line_rate as f64
            && ceiling - l.rates.current < 1.0
            && ceiling - l.rates.target < 1.0
            && !l.pending_decrease
            && now >= l.last_decrease + self.p.monitor_period();
        if back {
            self.lim = None;
        }
        back
    }

    /// When α's current update period ends after `now` (for an observer that shows
    /// `alpha_timer` events; the engine does not schedule them, α being kept in closed form).
    pub fn next_alpha_period(&self, now: Instant) -> Option<Instant> {
        self.lim.as_ref().map(|l| l.alpha.next_period_end(now, self.p.alpha_period()))
    }
}

impl super::CongestionControl for Dcqcn {
    fn name(&self) -> &'static str {
        "dcqcn"
    }
    fn on_cnp(&mut self, now: Instant) {
        Dcqcn::on_cnp(self, now, &mut |_, _, _| {});
    }
    #[inline]
    fn on_sent(&mut self, now: Instant, bytes: usize) {
        if self.lim.is_some() {
            Dcqcn::on_sent(self, now, bytes, &mut |_, _, _| {});
        }
    }
    fn next_timeout(&self) -> Option<Instant> {
        Dcqcn::next_timeout(self)
    }
    fn on_timeout(&mut self, now: Instant) {
        Dcqcn::on_timeout(self, now, &mut |_, _, _| {});
    }
    fn rate(&self) -> Option<u64> {
        Dcqcn::rate(self).map(|r| (r.round() as u64).max(1))
    }
}

#[cfg(test)]
mod tests;
