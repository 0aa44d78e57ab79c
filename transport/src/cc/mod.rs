//! Congestion control: ECN marking, the notification point that answers CE marks with CNPs,
//! and the reaction point that paces a QP by them.
//!
//! RoCEv2's congestion control (IBTA Annex A17 "RoCEv2", A17.9) as ConnectX runs it: a switch
//! marks CE on ECN-capable frames when its egress queue builds; the receiver of a CE-marked
//! data frame — the **notification point** ([`Np`]) — sends a CNP to the QP that sent it, at
//! most one per `min_time_between_cnps`; that QP — the **reaction point** — lowers its rate
//! and recovers by an algorithm behind [`CongestionControl`] (DCQCN today, [`dcqcn`]). The
//! rate is enforced by the QP's pacer (its departure time), so every driver of the engine (the
//! AF_XDP runtime, the simulator, the fuzzers) gets it for free.
//!
//! Linux rxe does none of this (it never marks ECT, ignores CE and drops CNPs; rxe-compat's
//! quirk table): [`CongestionConfig::default`] is off, and uroce's frames are then rxe's
//! byte for byte.

pub mod dcqcn;

use crate::time::Instant;
use core::fmt;
use core::time::Duration;

/// A reaction-point algorithm, one instance per QP. The engine tells it what happened and
/// enforces the rate it names; adding an algorithm (window- or delay-based) means another
/// implementation and an [`Algorithm`] variant, nothing in the requester.
pub trait CongestionControl: fmt::Debug + Send {
    /// The algorithm's name, for counters and logs.
    fn name(&self) -> &'static str;
    /// A CNP for this QP arrived.
    fn on_cnp(&mut self, now: Instant);
    /// A packet of `bytes` (the whole Ethernet frame) left the QP under its pacing: a request,
    /// or a READ response it sent as responder.
    fn on_sent(&mut self, now: Instant, bytes: usize);
    /// When [`CongestionControl::on_timeout`] is next due.
    fn next_timeout(&self) -> Option<Instant>;
    /// The time [`CongestionControl::next_timeout`] named has come (spurious calls are
    /// harmless).
    fn on_timeout(&mut self, now: Instant);
    /// The rate to pace at, bits per second of Ethernet frame (`None`: unlimited).
    fn rate(&self) -> Option<u64>;
}

/// Which algorithm a reaction point runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Algorithm {
    /// DCQCN with these parameters.
    Dcqcn(dcqcn::Params),
}

impl Algorithm {
    /// A fresh instance for one QP.
    pub fn instantiate(&self) -> Box<dyn CongestionControl> {
        match self {
            Algorithm::Dcqcn(p) => Box::new(dcqcn::Dcqcn::new(*p)),
        }
    }
}

/// The notification point's knobs (ConnectX's `roce_np` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpConfig {
    /// At most one CNP per QP in this time (`min_time_between_cnps`; ConnectX firmware
    /// default 2 µs in an `mlxconfig` dump, the paper's N = 50 µs; 0: one per CE mark).
    pub min_time_between_cnps: Duration,
    /// DSCP of CNPs (`cnp_dscp`, default 48).
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs on a VLAN (`cnp_802p_prio`, default 6).
    pub cnp_802p_prio: u8,
}

impl Default for NpConfig {
    fn default() -> Self {
        NpConfig {
            min_time_between_cnps: Duration::from_micros(2),
            cnp_dscp: uroce_wire::cnp::CNP_DSCP,
            cnp_802p_prio: uroce_wire::cnp::CNP_PRIO,
        }
    }
}

/// A device's congestion control (`DeviceConfig::cc`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CongestionConfig {
    /// Send data frames ECN-capable, ECT(0) (an address vector whose traffic class has ECN
    /// bits set makes its QP's frames ECN-capable either way).
    pub ecn: bool,
    /// Answer CE-marked data frames with CNPs (`None`: count them, send nothing).
    pub np: Option<NpConfig>,
    /// The reaction point each QP runs (`None`: CNPs are counted as ignored).
    pub rp: Option<Algorithm>,
}

impl CongestionConfig {
    /// Everything on, as a ConnectX port with DCQCN enabled: ECT(0), the NP and a DCQCN RP
    /// with the firmware defaults, at `line_rate` bits per second.
    pub fn connectx(line_rate: u64) -> CongestionConfig {
        CongestionConfig {
            ecn: true,
            np: Some(NpConfig::default()),
            rp: Some(Algorithm::Dcqcn(dcqcn::Params::connectx(line_rate))),
        }
    }

    /// The one reading of ConnectX-style settings, shared by `uroce perf`'s flags and the
    /// libibverbs library's environment: `ecn` sends ECT(0) and answers CE with CNPs (`np`);
    /// `dcqcn`, a profile name (`connectx`, `paper`), adds DCQCN's reaction point at
    /// `line_rate` bits per second with `knobs` (`NAME=VALUE`, ConnectX's names) applied in
    /// order, and implies `ecn`.
    pub fn from_settings<S: AsRef<str>>(
        ecn: bool,
        dcqcn: Option<&str>,
        line_rate: u64,
        knobs: &[S],
        np: NpConfig,
    ) -> Result<CongestionConfig, dcqcn::ParamError> {
        let rp = match dcqcn {
            None => None,
            Some(profile) => {
                let mut p = dcqcn::Params::profile(profile, line_rate)?;
                for kv in knobs {
                    p.set_assignment(kv.as_ref())?;
                }
                Some(Algorithm::Dcqcn(p))
            }
        };
        let on = ecn || rp.is_some();
        Ok(CongestionConfig { ecn: on, np: on.then_some(np), rp })
    }
}

/// A QP's notification point: when it last sent a CNP, and whether one is due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Np {
    last_cnp: Option<Instant>,
    /// A CNP waits to be sent.
    pub pending: bool,
}

impl Np {
    /// A CE-marked data frame arrived at `now`: whether a CNP is to be sent (at most one per
    /// `min_time_between_cnps`, the first at once; SIGCOMM 2015 §3.1 NP, ConnectX
    /// `min_time_between_cnps`).
    pub fn on_ce(&mut self, now: Instant, cfg: &NpConfig) -> bool {
        if self.pending || self.last_cnp.is_some_and(|t| now < t + cfg.min_time_between_cnps) {
            return false;
        }
        self.pending = true;
        self.last_cnp = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn np_sends_at_most_one_cnp_per_interval() {
        let cfg = NpConfig { min_time_between_cnps: Duration::from_micros(50), ..NpConfig::default() };
        let mut np = Np::default();
        let us = |v: u64| Instant::from_nanos(v * 1000);
        assert!(np.on_ce(us(10), &cfg));
        np.pending = false;
        assert!(!np.on_ce(us(11), &cfg));
        assert!(!np.on_ce(us(59), &cfg));
        assert!(np.on_ce(us(60), &cfg));
        // While one waits to be sent, a second is not queued.
        assert!(!np.on_ce(us(200), &cfg));
        np.pending = false;
        assert!(np.on_ce(us(200), &cfg));
        // 0: one per CE mark.
        let every = NpConfig { min_time_between_cnps: Duration::ZERO, ..cfg };
        np.pending = false;
        assert!(np.on_ce(us(200), &every));
    }
}
