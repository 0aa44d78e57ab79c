//! Rate increase: fast recovery, additive increase, hyper increase.
//!
//! SIGCOMM 2015 §3.1, after QCN: each increase event (the timer's or the byte counter's,
//! [`super::timers`]) moves RC halfway to RT, `RC ← (RT + RC)/2`; RT itself grows once the
//! flow has recovered. With `T` and `BC` the events of each source since the last decrease,
//! this one included, and F = `rpg_threshold` (as htsim's `dcqcn.cpp` states the paper's
//! rule):
//!
//! * fast recovery while `max(T, BC) ≤ F`: RT unchanged;
//! * additive increase once one of them passed F: `RT ← RT + R_AI`;
//! * hyper increase once both did: `RT ← RT + i·R_HAI`, `i = min(T, BC) − F`.
//!
//! RT never exceeds the ceiling (`rpg_max_rate`, else line rate; as the HPCC simulator's
//! `ActiveIncreaseMlx` caps it). Not modelled: QCN's "RT / 8 when RT > 10·RC" guard and the
//! halved timer and byte counter in hyper increase that the authors' ns-3 keeps from QCN; the
//! ConnectX knobs name neither.

use super::rate::{Rates, Stages};
use super::Params;

/// Which increase an event made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `RC ← (RT + RC)/2`.
    FastRecovery,
    /// `RT += R_AI` first.
    Additive,
    /// `RT += i·R_HAI` first.
    Hyper(u32),
}

/// The phase an increase event falls in, given the stage counters with it counted.
pub fn phase(p: &Params, s: Stages) -> Phase {
    let f = p.rpg_threshold;
    if s.timer.max(s.bytes) <= f {
        Phase::FastRecovery
    } else if s.timer.min(s.bytes) <= f {
        Phase::Additive
    } else {
        Phase::Hyper(s.timer.min(s.bytes) - f)
    }
}

impl Rates {
    /// Whether no further timer event can change these rates (until a CNP or the byte
    /// counter), given the rates `before` the timer event just made: that event changed
    /// nothing, the flow is past fast recovery, and RT can no longer grow (it is at the
    /// ceiling, or the phase's step is zero: R_AI = 0 in additive increase, R_HAI = 0 in hyper
    /// increase). Then every later event computes the same rates from the same rates: a fixed
    /// point, which lets a long-stalled engine skip expiries instead of walking them
    /// ([`super::timers::IncreaseTimers::skip_expired`]).
    pub fn settled(&self, before: &Rates, p: &Params, s: Stages) -> bool {
        let f = p.rpg_threshold;
        *self == *before
            && s.timer > f
            && (self.target >= p.max_rate()
                || match phase(p, s) {
                    Phase::FastRecovery => false,
                    Phase::Additive => p.rpg_ai_rate == 0 && s.bytes <= f,
                    Phase::Hyper(_) => p.rpg_hai_rate == 0,
                })
    }

    /// One increase event in stage `s` (counted): returns its phase.
    pub fn increase(&mut self, p: &Params, s: Stages) -> Phase {
        let ph = phase(p, s);
        let step = match ph {
            Phase::FastRecovery => 0.0,
            Phase::Additive => p.rpg_ai_rate as f64 * 1e6,
            Phase::Hyper(i) => i as f64 * p.rpg_hai_rate as f64 * 1e6,
        };
        self.target = (self.target + step).min(p.max_rate());
        self.current = ((self.target + self.current) / 2.0).min(p.max_rate());
        ph
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(timer: u32, bytes: u32) -> Stages {
        Stages { timer, bytes }
    }

    #[test]
    fn phases_of_the_paper_profile() {
        let p = Params::paper(40_000_000_000);
        // F = 5: five timer events of fast recovery, then additive, hyper once the byte
        // counter passes 5 too.
        for t in 1..=5 {
            assert_eq!(phase(&p, st(t, 0)), Phase::FastRecovery, "T {t}");
        }
        assert_eq!(phase(&p, st(6, 0)), Phase::Additive);
        assert_eq!(phase(&p, st(6, 5)), Phase::Additive);
        assert_eq!(phase(&p, st(6, 6)), Phase::Hyper(1));
        assert_eq!(phase(&p, st(9, 7)), Phase::Hyper(2));
    }

    #[test]
    fn steps_by_hand() {
        let p = Params::paper(40_000_000_000);
        let mut r = Rates { current: 10e9, target: 20e9 };
        assert_eq!(r.increase(&p, st(1, 0)), Phase::FastRecovery);
        assert_eq!(r, Rates { current: 15e9, target: 20e9 });
        assert_eq!(r.increase(&p, st(6, 0)), Phase::Additive);
        assert_eq!(r, Rates { current: (15e9 + 20.04e9) / 2.0, target: 20.04e9 });
        let mut r = Rates { current: 10e9, target: 20e9 };
        assert_eq!(r.increase(&p, st(8, 8)), Phase::Hyper(3));
        assert_eq!(r.target, 20e9 + 3.0 * 200e6);
        // ConnectX, F = 1: one event of fast recovery, then additive (5 Mb/s), then hyper
        // (50 Mb/s steps) once both sources passed 1.
        let c = Params::connectx(40_000_000_000);
        assert_eq!(phase(&c, st(1, 0)), Phase::FastRecovery);
        assert_eq!(phase(&c, st(2, 0)), Phase::Additive);
        assert_eq!(phase(&c, st(2, 2)), Phase::Hyper(1));
        let mut r = Rates { current: 39.99e9, target: 39.999e9 };
        r.increase(&c, st(3, 4));
        assert_eq!(r.target, 40e9, "capped at line rate");
        assert!(r.current <= 40e9);
    }
}
