//! `uroce probe <write_lat|read_lat> HOST [perftest flags] [--fault F]...`: a perftest run to
//! a peer with the probe's targeted faults on it, then the peer's reactions beside what IBTA
//! requires ([`crate::probe`]).

use super::perf_cmd::{self, PerfArgs};
use crate::probe::{report, Fault, ProbeTap, ProbeTest};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use uroce_transport::Mtu;

/// `uroce probe`'s flags: perftest's, plus the plan and where the results go.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The perftest run carrying the faults (`write_lat` or `read_lat`) and its flags, as for
    /// `uroce perf`; HOST (the peer's perftest server) is required. Defaults: `-s 4096`
    /// (4 packets at path MTU 1024), `-n 40`.
    #[command(flatten)]
    perf: PerfArgs,
    /// A fault instead of the default plan, repeatable: `DIR:ACTION@TARGET` with DIR `out`
    /// (frames uroce sends) or `in` (frames the peer sends), ACTION `drop`, `dup`, `ce`,
    /// `icrc`, `reorderN`, TARGET `mM.P` (packet P of data message M) or `ackM` (the ACK of
    /// the other direction's message M; drop only). E.g. `--fault out:drop@m3.2`.
    #[arg(long = "fault", value_name = "FAULT")]
    faults: Vec<Fault>,
    /// Write `probe.pcap` (the wire as uroce's port saw it) and `report.md` here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Name of the peer in the report (default: HOST).
    #[arg(long)]
    peer_name: Option<String>,
    /// Exit 1 when a fault's reaction differs from what IBTA requires.
    #[arg(long)]
    strict: bool,
}

/// `uroce probe`.
pub fn run(a: &ProbeArgs) -> Result<ExitCode> {
    let test = match a.perf.test() {
        crate::perf::Test::WriteLat => ProbeTest::WriteLat,
        crate::perf::Test::ReadLat => ProbeTest::ReadLat,
        t => bail!("uroce probe runs on write_lat or read_lat (one message at a time), not {t:?}"),
    };
    let mut cfg = perf_cmd::config(&a.perf)?;
    let Some(host) = cfg.host.clone() else { bail!("uroce probe needs HOST: the peer's perftest server") };
    if a.perf.size.is_none() {
        cfg.size = 4096;
    }
    if a.perf.iters.is_none() {
        cfg.iters = 40;
    }
    if a.faults.is_empty() && (cfg.iters < 40 || cfg.size < 2 * 256) {
        bail!("the default plan needs -n 40 or more and messages of two packets or more (-s); or give --fault");
    }
    // frames ECN-capable, so that a CE mark is one a switch could make
    cfg.cc.ecn = true;
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        if cfg.pcap.is_none() {
            cfg.pcap = Some(d.join("probe.pcap"));
        }
    }
    let mtu = match cfg.mtu {
        Some(m) => m,
        None => match cfg.ifname.as_deref().and_then(|n| uroce_io::netif::Interface::by_name(n).ok()) {
            Some(i) => Mtu::for_link_mtu(i.mtu as usize),
            None => Mtu::Mtu1024,
        },
    };
    let pkts = cfg.size.div_ceil(mtu.bytes()).max(1) as u32;
    let plan = if a.faults.is_empty() { test.default_plan(pkts) } else { a.faults.clone() };
    let (tap, log) = ProbeTap::new(plan);
    eprintln!(
        "uroce probe: {:?} to {host}, {} x {} B ({pkts} packets at path MTU {} unless the peer's is smaller), {} faults",
        a.perf.test(),
        cfg.iters,
        cfg.size,
        mtu.bytes(),
        log.lock().map_or(0, |l| l.plan.len())
    );
    let outcome = crate::perf::run_tapped(cfg, Box::new(std::io::stderr()), Some(Box::new(tap)));
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    // no frame crossed the tap (no server, a refused exchange): nothing to judge
    if log.seen.is_empty() {
        let _ = outcome.context("the perftest run under the probe")?;
        bail!("no RoCE frame crossed the probe: nothing to judge");
    }
    let r = report::analyse(&log);
    let md = r.to_markdown(a.peer_name.as_deref().unwrap_or(&host));
    print!("{md}");
    if let Some(d) = &a.out {
        std::fs::write(d.join("report.md"), &md).with_context(|| format!("write {}", d.join("report.md").display()))?;
    }
    outcome.context("the perftest run under the probe")?;
    if a.strict && r.count(report::Verdict::Differs) > 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
