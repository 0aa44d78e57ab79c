//! `uroce switch`: forward real frames between interfaces through the simulator's switch
//! model (`crate::switch`).

use anyhow::{bail, Result};
use std::process::ExitCode;
use std::time::Duration;
use uroce_sim::switch::{PfcConfig, Red, SwitchConfig};

/// Arguments of `uroce switch`.
#[derive(clap::Args, Debug)]
pub struct SwitchArgs {
    /// An interface to switch between (two or more).
    #[arg(long = "port", value_name = "IF", required = true)]
    pub ports: Vec<String>,
    /// Each port's egress rate, Gbit/s (the bottleneck a queue builds on).
    #[arg(long, value_name = "GBPS", default_value_t = 1.0)]
    pub rate: f64,
    /// Shared buffer, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub buffer: u64,
    /// WRED/ECN marking at egress: `KMIN,KMAX,PMAX` (bytes, bytes, probability), or `off`.
    #[arg(long, default_value = "20000,100000,0.2")]
    pub ecn: String,
    /// PFC for priority `--pfc-priority`: `XOFF,XON,HEADROOM` (bytes held per ingress port),
    /// or `off` (lossy: drops when the buffer is full).
    #[arg(long, default_value = "off")]
    pub pfc: String,
    /// The lossless priority PFC protects (RoCE at DSCP 26 travels in 3).
    #[arg(long, default_value_t = 3)]
    pub pfc_priority: u8,
    /// Run this many seconds, then print the counters (`uroce-switch: key=value ...`) and exit.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub duration: f64,
}

fn triple(s: &str, what: &str) -> Result<Option<[f64; 3]>> {
    if s == "off" {
        return Ok(None);
    }
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("{what}: `{s}` is not three numbers or `off`"))?;
    match v[..] {
        [a, b, c] if a >= 0.0 && b >= 0.0 && c >= 0.0 => Ok(Some([a, b, c])),
        _ => bail!("{what}: `{s}` is not three non-negative numbers, or `off`"),
    }
}

pub fn run(a: &SwitchArgs) -> Result<ExitCode> {
    if a.ports.len() < 2 {
        bail!("a switch needs two --port interfaces or more");
    }
    if !a.rate.is_finite() || !(0.001..=1000.0).contains(&a.rate) || !(0.0..=86_400.0).contains(&a.duration) {
        bail!("--rate must be 0.001 to 1000 Gbit/s, --duration 0 to 86400 s");
    }
    let red = triple(&a.ecn, "--ecn")?;
    if red.is_some_and(|[kmin, kmax, _]| kmax < kmin) {
        bail!("--ecn: KMAX must not be below KMIN");
    }
    let red = red.map(|[kmin, kmax, pmax]| Red { kmin: kmin as u64, kmax: kmax as u64, pmax: pmax.min(1.0) });
    let pfc = triple(&a.pfc, "--pfc")?.map(|[xoff, xon, headroom]| PfcConfig {
        priorities: 1 << (a.pfc_priority & 7),
        xoff: xoff as u64,
        xon: (xon as u64).min(xoff as u64),
        headroom: headroom as u64,
    });
    let run = crate::switch::SwitchRun {
        ports: a.ports.clone(),
        rate_bps: (a.rate * 1e9) as u64,
        model: SwitchConfig { buffer: a.buffer, red, pfc, watchdog: None },
        duration: Duration::from_secs_f64(a.duration),
        seed: 1,
    };
    let r = crate::switch::run(&run)?;
    eprintln!("{}", r.line());
    Ok(ExitCode::SUCCESS)
}
