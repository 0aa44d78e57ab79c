//! `uroce sim dcqcn`: one saturated flow's DCQCN reaction point, CNPs at given times, every
//! RP event as a CSV row (`uroce_transport::cc::dcqcn::flow`).

use anyhow::{bail, Result};
use std::io::Write;
use std::process::ExitCode;
use uroce_transport::cc::dcqcn::flow::{self, Row};
use uroce_transport::cc::dcqcn::Params;
use uroce_transport::Instant;

/// Arguments of `uroce sim dcqcn`.
#[derive(clap::Args, Debug)]
pub struct DcqcnArgs {
    /// Parameter profile: `connectx` (firmware defaults) or `paper` (SIGCOMM 2015).
    #[arg(long, default_value = "connectx")]
    pub profile: String,
    /// Change a knob, by its ConnectX name and unit (e.g. `rpg_time_reset=55`); repeatable.
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    pub set: Vec<String>,
    /// Line rate in Gbit/s.
    #[arg(long, value_name = "GBPS", default_value_t = 100.0)]
    pub line_rate: f64,
    /// Packet size in bytes (the flow sends packets of this size back to back at its rate).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub mtu: usize,
    /// Times the flow receives a CNP, in µs, comma-separated.
    #[arg(long, value_name = "T1,T2,...", value_delimiter = ',')]
    pub cnp_at: Vec<f64>,
    /// End of the run, in µs.
    #[arg(long, value_name = "T")]
    pub until: f64,
}

/// Microseconds (fractions allowed) as an instant; `what` names the flag in errors.
fn micros(v: f64, what: &str) -> Result<Instant> {
    if !v.is_finite() || !(0.0..=1e12).contains(&v) {
        bail!("{what} must be a time in µs between 0 and 10^12, not {v}");
    }
    Ok(Instant::from_nanos((v * 1000.0).round() as u64))
}

pub fn run(a: &DcqcnArgs) -> Result<ExitCode> {
    if !a.line_rate.is_finite() || !(0.001..=100_000.0).contains(&a.line_rate) {
        bail!("--line-rate must be between 0.001 and 100000 Gbit/s");
    }
    if !(64..=65_536).contains(&a.mtu) {
        bail!("--mtu must be between 64 and 65536 bytes");
    }
    let mut p = Params::profile(&a.profile, (a.line_rate * 1e9).round() as u64)?;
    for kv in &a.set {
        p.set_assignment(kv)?;
    }
    let until = micros(a.until, "--until")?;
    let cnps = a.cnp_at.iter().map(|&t| micros(t, "--cnp-at")).collect::<Result<Vec<_>>>()?;
    // A simulated second at 100 Gbit/s is 3 million packets: fine; a simulated day is not.
    let packets = until.as_nanos() as f64 / 1e9 * a.line_rate * 1e9 / (a.mtu as f64 * 8.0);
    if packets > 1e9 {
        bail!("--until {} µs is {packets:.0} packets at line rate: at most 10^9", a.until);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "{}", Row::HEADER)?;
    let mut err = Ok(());
    flow::run(p, a.mtu, &cnps, until, |r| {
        if err.is_ok() {
            err = writeln!(out, "{}", r.csv());
        }
    });
    err?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
