//! `uroce fuzz <test> HOST [perftest flags] [--fuzz-seed S] [--every N] [--kinds K,..]`: a
//! perftest run to the target with hostile frames mixed into one QP's flow ([`crate::fuzz`]).

use super::perf_cmd::{self, PerfArgs};
use crate::fuzz::{FuzzConfig, FuzzTap, Kind};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `uroce fuzz`'s flags: perftest's, plus what to inject and where the record goes.
#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// The perftest run carrying the flow (any test; HOST, the target's perftest server, is
    /// required) and its flags, as for `uroce perf`.
    #[command(flatten)]
    perf: PerfArgs,
    /// Seed of the mutations (a campaign is replayed by its seed).
    #[arg(long, default_value_t = 1)]
    fuzz_seed: u64,
    /// On average one hostile frame after every N requests of the fuzzed QP.
    #[arg(long, default_value_t = 8)]
    every: u32,
    /// Mutation kinds, comma-separated (default: all): any_opcode, opcode_sequence, psn_jump,
    /// pad, reth, atomic, truncated, over_long, corrupt, bad_icrc, wrong_qp.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// At most this many hostile frames.
    #[arg(long)]
    max: Option<u64>,
    /// The share of hostile frames aimed at exactly the PSN the peer expects (0..=1); the
    /// others land just ahead of it or just behind it (duplicates).
    #[arg(long, default_value_t = 0.25)]
    in_window: f64,
    /// Write `injected.pcap` (the hostile frames), `wire.pcap` (everything uroce's port moved)
    /// and `fuzz.log` (one line per hostile frame, then the summary) here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn kinds(names: &[String]) -> Result<Vec<Kind>> {
    if names.is_empty() {
        return Ok(Kind::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| {
            Kind::ALL.iter().copied().find(|k| k.name() == n).with_context(|| {
                let all: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown mutation kind `{n}` (known: {})", all.join(", "))
            })
        })
        .collect()
}

/// `uroce fuzz`.
pub fn run(a: &FuzzArgs) -> Result<ExitCode> {
    let mut cfg = perf_cmd::config(&a.perf)?;
    if cfg.host.is_none() {
        bail!("uroce fuzz needs HOST: the target's perftest server");
    }
    if !(0.0..=1.0).contains(&a.in_window) {
        bail!("--in-window must be between 0 and 1");
    }
    let fc =
        FuzzConfig { seed: a.fuzz_seed, every: a.every, kinds: kinds(&a.kinds)?, max: a.max, in_window: a.in_window };
    let injected = match &a.out {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
            if cfg.pcap.is_none() {
                cfg.pcap = Some(d.join("wire.pcap"));
            }
            Some(d.join("injected.pcap"))
        }
        None => None,
    };
    let (tap, log) = FuzzTap::new(fc, injected.as_deref())?;
    let outcome = crate::perf::run_tapped(cfg, Box::new(std::io::stderr()), Some(Box::new(tap)));
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    let legit = match &outcome {
        Ok(_) => "legit=completed".to_string(),
        Err(e) => format!("legit=failed ({e:#})"),
    };
    let summary = format!("{} {legit}", log.summary(a.fuzz_seed));
    println!("{summary}");
    if let Some(d) = &a.out {
        let mut text = String::new();
        for i in &log.injected {
            let _ = writeln!(
                text,
                "{} t_ns={} kind={} aimed_psn={:#08x} len={}",
                i.n,
                i.t_ns,
                i.kind.name(),
                i.expected.value(),
                i.len
            );
        }
        let _ = writeln!(text, "{summary}");
        std::fs::write(d.join("fuzz.log"), text).with_context(|| format!("write {}", d.join("fuzz.log").display()))?;
    }
    // A QP the target moved to ERR for an invalid request is IBTA's rule, not a failure of
    // the run: the campaign goes on with a new connection.
    Ok(ExitCode::SUCCESS)
}
