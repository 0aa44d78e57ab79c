//! `uroce sim soak`: the transport soak over the simulated network, as a command.

use super::limits;
use crate::pcap::CaptureWriter;
use anyhow::{anyhow, bail, Context, Result};
use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;
use uroce_transport::sim::soak::{run_with_tap, SoakConfig};
use uroce_transport::Mtu;

/// Arguments of `uroce sim soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Work requests to run (random mix of every operation and size), 1 .. 10^9.
    #[arg(long, default_value_t = 10_000, value_parser = limits::SOAK_OPS.parser())]
    pub ops: u64,
    /// Seed of the workload and the network.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Frame loss probability (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Frame reorder probability.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Frame duplication probability.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Single-bit corruption probability (the ICRC catches it).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Path MTU in bytes (256, 512, 1024, 2048, 4096).
    #[arg(long, default_value_t = 1024)]
    pub mtu: usize,
    /// RC QP pairs, 1 .. 1024.
    #[arg(long, default_value_t = 2, value_parser = limits::SOAK_QPS.parser())]
    pub qps: u64,
    /// Largest message in bytes, 0 .. 64 MiB (each QP pair keeps 3 x 16 slots of it in memory;
    /// all pairs together at most 4 GiB).
    #[arg(long, default_value_t = 64 * 1024, value_parser = limits::SOAK_MAX_SIZE.parser())]
    pub max_size: u64,
    /// Use IPv6 GIDs.
    #[arg(long)]
    pub ipv6: bool,
    /// Write every frame put on the simulated wire to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Print the counters of both devices after the summary line (to stderr).
    #[arg(long, short)]
    pub verbose: bool,
}

pub fn soak(a: &SoakArgs) -> Result<ExitCode> {
    let Some(mtu) = Mtu::from_bytes(a.mtu) else { bail!("--mtu must be 256, 512, 1024, 2048 or 4096") };
    for (name, p) in [("loss", a.loss), ("reorder", a.reorder), ("dup", a.dup), ("corrupt", a.corrupt)] {
        if !(0.0..1.0).contains(&p) {
            bail!("--{name} must be in [0, 1)");
        }
    }
    let cfg = SoakConfig {
        ops: a.ops,
        seed: a.seed,
        loss: a.loss,
        reorder: a.reorder,
        dup: a.dup,
        corrupt: a.corrupt,
        mtu,
        qps: a.qps as usize,
        max_size: a.max_size as usize,
        ipv6: a.ipv6,
        ..SoakConfig::default()
    };
    // Before anything is allocated: the engine's own bounds, then this machine's memory.
    cfg.check().map_err(|e| anyhow!("{e}"))?;
    limits::fits_in_memory("the soak's regions", cfg.region_bytes()).map_err(|e| anyhow!("{e}"))?;
    let writer = match &a.pcap {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("create {}", p.display()))?;
            Some(Rc::new(RefCell::new(CaptureWriter::new(std::io::BufWriter::new(f))?)))
        }
        None => None,
    };
    let tap = writer.clone().map(|w| {
        Box::new(move |t: uroce_transport::Instant, f: &[u8]| {
            let _ = w.borrow_mut().write(Duration::from_nanos(t.as_nanos()), f);
        }) as uroce_transport::sim::Tap
    });
    let r = run_with_tap(&cfg, tap);
    if let Some(w) = writer {
        if let Ok(w) = Rc::try_unwrap(w) {
            w.into_inner().into_inner().flush()?;
        }
    }
    writeln!(std::io::stdout(), "{}", r.summary())?;
    for e in &r.errors {
        eprintln!("error: {e}");
    }
    if a.verbose {
        eprintln!("wire: {:?}", r.wire);
        for (i, c) in r.counters.iter().enumerate() {
            let nonzero: Vec<String> = c.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
            eprintln!("node {i}: {}", nonzero.join(" "));
        }
    }
    Ok(if r.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
