//! DCQCN's parameters, named and scaled as ConnectX's knobs are.
//!
//! Every field is a ConnectX reaction-point knob by its MLNX_OFED sysfs name
//! (`/sys/class/net/<if>/ecn/roce_rp/params/<knob>`; the PRM's
//! `mlx5_ifc_cong_control_r_roce_ecn_rp_bits` uses the same names), in the knob's own unit, so
//! that `--set rpg_time_reset=55` means what it means on a NIC. Two profiles:
//!
//! * [`Params::connectx`]: the firmware defaults (an `mlxconfig -q` dump and NVIDIA's DOCA
//!   "DCQCN CC Parameters" page agree on every value; `../shared/docs/protocol.md` §4).
//! * [`Params::paper`]: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//!   SIGCOMM 2015, expressed in the same knobs (the values the paper's testbed and the
//!   authors' ns-3, `bobzhuyb/ns3-rdma` `mix/config.txt`, use).
//!
//! The notification point's knob (`min_time_between_cnps`) lives with the NP
//! ([`crate::cc::NpConfig`]).

use core::fmt;
use core::time::Duration;

/// DCQCN reaction-point parameters (ConnectX knob names and units).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// The port's line rate in bits per second: the rate before the first CNP, and the ceiling
    /// when `rpg_max_rate` is 0. Not a ConnectX knob (the NIC knows its link speed).
    pub line_rate: u64,
    /// Rate-increase timer period T, µs.
    pub rpg_time_reset: u32,
    /// Byte counter B: bytes sent between byte-counter increase events (0: no byte counter).
    pub rpg_byte_reset: u32,
    /// F: increase events (of the timer, or of the byte counter) that fast recovery lasts;
    /// additive increase follows, hyper increase once both have reached it.
    pub rpg_threshold: u32,
    /// Ceiling of the target rate, Mb/s (0: the line rate).
    pub rpg_max_rate: u32,
    /// Additive increase R_AI, Mb/s.
    pub rpg_ai_rate: u32,
    /// Hyper increase step R_HAI, Mb/s.
    pub rpg_hai_rate: u32,
    /// Decrease gain: a CNP cuts the rate by `rate · α_1024 / 2^rpg_gd`, α in 1/1024 units, so
    /// 11 is the paper's `RC · α / 2`.
    pub rpg_gd: u32,
    /// The smallest factor one CNP may leave the rate at, percent (1–100; 50: at most halved).
    pub rpg_min_dec_fac: u32,
    /// The floor of the rate, Mb/s.
    pub rpg_min_rate: u32,
    /// The rate a QP is set to on its first CNP, Mb/s (0: the normal decrease instead).
    pub rate_to_set_on_first_cnp: u32,
    /// α's EWMA weight, in 1/1024: on a CNP `α = (g·α + (1024 − g)) / 1024`, each update period
    /// without one `α = g·α / 1024`. 1020 is the paper's g = 1/256.
    pub dce_tcp_g: u32,
    /// α's update period K, µs (the paper's "α timer", 55 µs).
    pub dce_tcp_rtt: u32,
    /// The shortest time between two rate decreases, µs (CNPs in between are folded into the
    /// next decrease; 0: every CNP decreases at once, as in the paper).
    pub rate_reduce_monitor_period: u32,
    /// α on the first CNP, in 1/1024 (1024: α = 1, the paper's start).
    pub initial_alpha_value: u32,
    /// Set the target rate to the current rate on every CNP (the paper's `RT = RC`).
    pub clamp_tgt_rate: bool,
    /// …and also (with `clamp_tgt_rate` off) on a CNP that follows a timer-driven increase.
    pub clamp_tgt_rate_after_time_inc: bool,
}

impl Params {
    /// ConnectX firmware defaults (protocol.md §4: NVCONFIG `RPG_*`, `DCE_TCP_*`,
    /// `RATE_REDUCE_MONITOR_PERIOD`, `INITIAL_ALPHA_VALUE`, `CLAMP_TGT_RATE*`).
    pub const fn connectx(line_rate: u64) -> Params {
        Params {
            line_rate,
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
        }
    }

    /// The SIGCOMM 2015 paper's values in ConnectX's knobs: T = 55 µs, B = 10 MB, F = 5,
    /// g = 1/256, K = 55 µs, R_AI = 40 Mb/s, R_HAI = 200 Mb/s (the authors' ns-3
    /// `mix/config.txt`: `RATE_HAI 200Mb/s`, `RATE_AI 40Mb/s`, `DCTCP_GAIN 0.00390625`,
    /// `FAST_RECOVERY_TIMES 5`, `ALPHA_RESUME_INTERVAL 55`, `CLAMP_TARGET_RATE 1`), α = 1 at
    /// the start, `RT = RC` on every CNP, no monitor period (the NP's 50 µs spacing of CNPs
    /// does that job), a 100 Mb/s floor (ns-3 `MinRate`).
    pub const fn paper(line_rate: u64) -> Params {
        Params {
            line_rate,
            rpg_time_reset: 55,
            rpg_byte_reset: 10_000_000,
            rpg_threshold: 5,
            rpg_max_rate: 0,
            rpg_ai_rate: 40,
            rpg_hai_rate: 200,
            rpg_gd: 11,
            // α ≤ 1 and `rpg_gd` 11 cut at most by half already: the paper has no such limit.
            rpg_min_dec_fac: 50,
            rpg_min_rate: 100,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 55,
            rate_reduce_monitor_period: 0,
            initial_alpha_value: 1024,
            clamp_tgt_rate: true,
            clamp_tgt_rate_after_time_inc: true,
        }
    }

    /// A profile by name: `connectx` or `paper`.
    pub fn profile(name: &str, line_rate: u64) -> Result<Params, ParamError> {
        match name {
            "connectx" => Ok(Params::connectx(line_rate)),
            "paper" => Ok(Params::paper(line_rate)),
            _ => Err(ParamError::UnknownProfile(name.into())),
        }
    }

    /// The knobs by name, in ConnectX's order.
    pub const KNOBS: [&'static str; 16] = [
        "clamp_tgt_rate",
        "clamp_tgt_rate_after_time_inc",
        "rpg_time_reset",
        "rpg_byte_reset",
        "rpg_threshold",
        "rpg_max_rate",
        "rpg_ai_rate",
        "rpg_hai_rate",
        "rpg_gd",
        "rpg_min_dec_fac",
        "rpg_min_rate",
        "rate_to_set_on_first_cnp",
        "dce_tcp_g",
        "dce_tcp_rtt",
        "rate_reduce_monitor_period",
        "initial_alpha_value",
    ];

    /// Set knob `name` to `value` (an integer in the knob's unit; 0/1 for the clamps), with
    /// the range the NIC accepts.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        let bad = || ParamError::BadValue { knob: name.into(), value: value.into() };
        let v: u32 = value.trim().parse().map_err(|_| bad())?;
        let flag = |v: u32| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad()),
        };
        let ranged = |lo: u32, hi: u32| if (lo..=hi).contains(&v) { Ok(v) } else { Err(bad()) };
        match name {
            "clamp_tgt_rate" => self.clamp_tgt_rate = flag(v)?,
            "clamp_tgt_rate_after_time_inc" => self.clamp_tgt_rate_after_time_inc = flag(v)?,
            "rpg_time_reset" => self.rpg_time_reset = ranged(1, u32::MAX)?,
            "rpg_byte_reset" => self.rpg_byte_reset = v,
            "rpg_threshold" => self.rpg_threshold = ranged(1, 31)?,
            "rpg_max_rate" => self.rpg_max_rate = v,
            "rpg_ai_rate" => self.rpg_ai_rate = v,
            "rpg_hai_rate" => self.rpg_hai_rate = v,
            "rpg_gd" => self.rpg_gd = ranged(1, 15)?,
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = ranged(1, 100)?,
            "rpg_min_rate" => self.rpg_min_rate = v,
            "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp = v,
            "dce_tcp_g" => self.dce_tcp_g = ranged(0, 1024)?,
            "dce_tcp_rtt" => self.dce_tcp_rtt = ranged(1, u32::MAX)?,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period = v,
            "initial_alpha_value" => self.initial_alpha_value = ranged(0, 1024)?,
            _ => return Err(ParamError::UnknownKnob(name.into())),
        }
        Ok(())
    }

    /// Apply `KNOB=VALUE`.
    pub fn set_assignment(&mut self, kv: &str) -> Result<(), ParamError> {
        let (k, v) = kv.split_once('=').ok_or_else(|| ParamError::NotAnAssignment(kv.into()))?;
        self.set(k.trim(), v)
    }

    // Derived quantities in the model's units (bits per second, fractions, durations).

    /// The rate ceiling, bits per second.
    pub fn max_rate(&self) -> f64 {
        match self.rpg_max_rate {
            0 => self.line_rate as f64,
            m => (mbps(m)).min(self.line_rate as f64),
        }
    }
    /// The rate floor, bits per second (never above the ceiling).
    pub fn min_rate(&self) -> f64 {
        mbps(self.rpg_min_rate).min(self.max_rate())
    }
    /// α's EWMA gain g (the paper's symbol): `(1024 − dce_tcp_g) / 1024`.
    pub fn g(&self) -> f64 {
        (1024 - self.dce_tcp_g.min(1024)) as f64 / 1024.0
    }
    /// α on the first CNP.
    pub fn initial_alpha(&self) -> f64 {
        self.initial_alpha_value.min(1024) as f64 / 1024.0
    }
    /// The fraction of the rate a CNP removes at α: `α · 2^(10 − rpg_gd)`, capped so that
    /// at least `rpg_min_dec_fac` % remains.
    pub fn cut(&self, alpha: f64) -> f64 {
        let f = alpha * 2f64.powi(10 - self.rpg_gd as i32);
        f.min(1.0 - self.rpg_min_dec_fac.clamp(1, 100) as f64 / 100.0)
    }
    /// The rate-increase timer period T.
    pub fn increase_period(&self) -> Duration {
        us(self.rpg_time_reset.max(1))
    }
    /// α's update period K.
    pub fn alpha_period(&self) -> Duration {
        us(self.dce_tcp_rtt.max(1))
    }
    /// The shortest time between two decreases.
    pub fn monitor_period(&self) -> Duration {
        us(self.rate_reduce_monitor_period)
    }
}

fn mbps(v: u32) -> f64 {
    v as f64 * 1e6
}

fn us(v: u32) -> Duration {
    Duration::from_micros(v as u64)
}

/// A parameter that could not be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamError {
    /// Not `connectx` or `paper`.
    UnknownProfile(String),
    /// Not one of [`Params::KNOBS`].
    UnknownKnob(String),
    /// Not an integer in the knob's range.
    BadValue {
        /// The knob.
        knob: String,
        /// What was given.
        value: String,
    },
    /// Not `KNOB=VALUE`.
    NotAnAssignment(String),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::UnknownProfile(p) => write!(f, "unknown DCQCN profile `{p}` (known: connectx, paper)"),
            ParamError::UnknownKnob(k) => write!(f, "unknown DCQCN knob `{k}` (known: {})", Params::KNOBS.join(", ")),
            ParamError::BadValue { knob, value } => write!(f, "bad value `{value}` for DCQCN knob `{knob}`"),
            ParamError::NotAnAssignment(s) => write!(f, "`{s}` is not KNOB=VALUE"),
        }
    }
}

impl std::error::Error for ParamError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_values_of_both_profiles() {
        let c = Params::connectx(100_000_000_000);
        assert_eq!(c.g(), 5.0 / 1024.0);
        assert_eq!(c.initial_alpha(), 1023.0 / 1024.0);
        assert_eq!(c.cut(1.0), 0.5, "rpg_gd 11: α/2");
        assert_eq!(c.max_rate(), 1e11);
        assert_eq!(c.min_rate(), 1e6);
        assert_eq!(c.monitor_period(), Duration::from_micros(4));
        let p = Params::paper(40_000_000_000);
        assert_eq!(p.g(), 1.0 / 256.0);
        assert_eq!(p.initial_alpha(), 1.0);
        assert_eq!(p.cut(0.5), 0.25);
        assert_eq!(p.increase_period(), Duration::from_micros(55));
        assert_eq!(p.monitor_period(), Duration::ZERO);
    }

    #[test]
    fn knobs_set_by_name_with_ranges() {
        let mut p = Params::connectx(1);
        for k in Params::KNOBS {
            p.set(k, "1").unwrap_or_else(|e| panic!("{k}: {e}"));
        }
        p.set_assignment("rpg_time_reset=55").unwrap();
        assert_eq!(p.rpg_time_reset, 55);
        p.set_assignment("rpg_max_rate=20000").unwrap();
        assert_eq!(p.max_rate(), 1.0, "never above the line rate");
        assert_eq!(p.set("rpg_gd", "0"), Err(ParamError::BadValue { knob: "rpg_gd".into(), value: "0".into() }));
        assert_eq!(
            p.set("clamp_tgt_rate", "2").unwrap_err().to_string(),
            "bad value `2` for DCQCN knob `clamp_tgt_rate`"
        );
        assert!(matches!(p.set("rpg_fast", "1"), Err(ParamError::UnknownKnob(_))));
        assert!(matches!(p.set_assignment("rpg_gd"), Err(ParamError::NotAnAssignment(_))));
        assert!(matches!(Params::profile("hpcc", 1), Err(ParamError::UnknownProfile(_))));
    }
}
