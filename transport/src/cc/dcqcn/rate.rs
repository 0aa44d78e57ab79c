//! The rate decrease: what a CNP does to the current rate RC and the target rate RT.
//!
//! SIGCOMM 2015 §3.1: `RT ← RC; RC ← RC·(1 − α/2)`, with the α of before this CNP (the paper's
//! order, which htsim's `dcqcn.cpp` keeps; the authors' ns-3 raises α first). ConnectX's knobs
//! generalise each part:
//!
//! * the cut is `α · 2^(10 − rpg_gd)` of the rate (11: α/2), leaving at least
//!   `rpg_min_dec_fac` %, never below `rpg_min_rate` ([`super::Params::cut`]);
//! * RT follows RC only when `clamp_tgt_rate` is set, or the rate was increased by the byte
//!   counter since the last decrease, or by the timer with `clamp_tgt_rate_after_time_inc`
//!   (`bobzhuyb/ns3-rdma` `QbbNetDevice::rpr_cnm_received`, the same three cases); otherwise
//!   RT stays where it was, so a burst of CNPs with no recovery in between does not drag it
//!   down;
//! * a QP's first CNP (one at line rate, unlimited) may set a fixed rate instead
//!   (`rate_to_set_on_first_cnp`, Mb/s; 0: the normal cut).

use super::Params;

/// RC and RT, bits per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// The current rate RC: what the pacer enforces.
    pub current: f64,
    /// The target rate RT that increases move RC towards.
    pub target: f64,
}

/// Increase events since the last decrease, by source (the stage counters `T` and `BC`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stages {
    /// Timer events.
    pub timer: u32,
    /// Byte-counter events.
    pub bytes: u32,
}

impl Rates {
    /// Both at `rate`.
    pub fn at(rate: f64) -> Rates {
        Rates { current: rate, target: rate }
    }

    /// The first CNP of a QP sending at line rate: a fixed rate if the knob says so, else the
    /// normal cut at α = `initial_alpha_value`.
    pub fn first_cnp(&mut self, p: &Params, alpha: f64) {
        match p.rate_to_set_on_first_cnp {
            0 => self.decrease(p, alpha, Stages::default(), true),
            r => *self = Rates::at((r as f64 * 1e6).clamp(p.min_rate(), p.max_rate())),
        }
    }

    /// A decrease at `alpha`, after the increases `since` of the last one. `first`: the QP
    /// was at line rate (RT starts there).
    pub fn decrease(&mut self, p: &Params, alpha: f64, since: Stages, first: bool) {
        let clamp =
            first || p.clamp_tgt_rate || since.bytes != 0 || (p.clamp_tgt_rate_after_time_inc && since.timer != 0);
        if clamp {
            self.target = self.current;
        }
        self.current = (self.current * (1.0 - p.cut(alpha))).max(p.min_rate());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G40: u64 = 40_000_000_000;

    #[test]
    fn paper_cut_is_alpha_over_two_and_clamps_the_target() {
        let p = Params::paper(G40);
        let mut r = Rates::at(40e9);
        r.first_cnp(&p, 1.0);
        assert_eq!(r, Rates { current: 20e9, target: 40e9 });
        r.decrease(&p, 0.5, Stages::default(), false);
        assert_eq!(r, Rates { current: 15e9, target: 20e9 }, "RT = RC, RC = 20·(1 − 0.25)");
    }

    #[test]
    fn connectx_keeps_the_target_unless_an_increase_came_between() {
        let p = Params::connectx(G40);
        let a = 1023.0 / 1024.0;
        let mut r = Rates::at(40e9);
        r.first_cnp(&p, a);
        let c1 = 40e9 * (1.0 - a / 2.0);
        assert_eq!(r, Rates { current: c1, target: 40e9 });
        // A second CNP with no increase between: RT stays at 40.
        r.decrease(&p, 0.5, Stages::default(), false);
        assert_eq!(r, Rates { current: c1 * 0.75, target: 40e9 });
        // After a timer increase (clamp_tgt_rate_after_time_inc = 1): RT = RC.
        r.decrease(&p, 0.5, Stages { timer: 1, bytes: 0 }, false);
        assert_eq!(r, Rates { current: c1 * 0.75 * 0.75, target: c1 * 0.75 });
        // Without that knob only a byte-counter increase clamps.
        let mut q = p;
        q.clamp_tgt_rate_after_time_inc = false;
        let mut r = Rates { current: 10e9, target: 30e9 };
        r.decrease(&q, 0.5, Stages { timer: 3, bytes: 0 }, false);
        assert_eq!(r.target, 30e9);
        r.decrease(&q, 0.5, Stages { timer: 0, bytes: 1 }, false);
        assert_eq!(r.target, 7.5e9);
    }

    #[test]
    fn floor_min_dec_fac_gd_and_first_cnp_rate() {
        let mut p = Params::connectx(G40);
        p.rpg_min_dec_fac = 80;
        let mut r = Rates::at(10e9);
        r.decrease(&p, 1.0, Stages::default(), false);
        assert_eq!(r.current, 8e9, "at most 20 % off");
        p.rpg_min_dec_fac = 50;
        p.rpg_gd = 12;
        let mut r = Rates::at(10e9);
        r.decrease(&p, 1.0, Stages::default(), false);
        assert_eq!(r.current, 7.5e9, "rpg_gd 12: α/4");
        p.rpg_gd = 11;
        let mut r = Rates::at(1.5e6);
        r.decrease(&p, 1.0, Stages::default(), false);
        assert_eq!(r.current, 1e6, "rpg_min_rate 1 Mb/s");
        p.rate_to_set_on_first_cnp = 2000;
        let mut r = Rates::at(40e9);
        r.first_cnp(&p, 1.0);
        assert_eq!(r, Rates::at(2e9));
    }
}
