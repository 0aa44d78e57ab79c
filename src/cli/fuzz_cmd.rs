//! `uroce fuzz <test> HOST [perftest flags] [--fuzz-seed S] [--every N] [--kinds K,..]`: a
//! perftest run to the target with hostile frames mixed into one QP's flow ([`crate::fuzz`]);
//! `uroce fuzz pingpong HOST [rc_pingpong flags] [...]`: the same over an `ibv_rc_pingpong`
//! exchange.

use super::perf_cmd::{self, PerfArgs};
use super::pingpong_cmd::{self, PingpongArgs};
use crate::fuzz::{FuzzConfig, FuzzTap, Kind};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `uroce fuzz`'s flags: perftest's (or, after `pingpong`, rc_pingpong's), plus what to inject
/// and where the record goes.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct FuzzArgs {
    /// `uroce fuzz pingpong HOST [rc_pingpong flags] [fuzz flags]`: the flow is an
    /// `ibv_rc_pingpong` exchange with the target's stock server (both ends send, so uroce's
    /// ACKs to its requester carry the response kinds too).
    #[command(subcommand)]
    carrier: Option<Carrier>,
    /// The perftest run carrying the flow (any test; HOST, the target's perftest server, is
    /// required) and its flags, as for `uroce perf` (unused after `pingpong`).
    #[command(flatten)]
    perf: PerfArgs,
    #[command(flatten)]
    opts: FuzzOpts,
}

/// Another carrier than perftest.
#[derive(clap::Subcommand, Debug)]
pub enum Carrier {
    /// An `ibv_rc_pingpong` exchange with the target's server (its flags, as `uroce pingpong`).
    Pingpong {
        #[command(flatten)]
        pp: PingpongArgs,
        #[command(flatten)]
        opts: FuzzOpts,
    },
}

/// What to inject, and where the record goes.
#[derive(clap::Args, Debug)]
pub struct FuzzOpts {
    /// Seed of the mutations (a campaign is replayed by its seed).
    #[arg(long, default_value_t = 1)]
    fuzz_seed: u64,
    /// On average one hostile frame after every N requests of the fuzzed QP.
    #[arg(long, default_value_t = 8)]
    every: u32,
    /// Mutation kinds, comma-separated (default: all): of requests any_opcode,
    /// opcode_sequence, psn_jump, pad, reth, atomic, truncated, over_long, corrupt, bad_icrc,
    /// wrong_qp; of uroce's ACKs to the target's requester (a latency test or pingpong, where
    /// both ends send) forged_nak, rnr_nak, ack_psn, unsolicited, ack_flood.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// At most this many hostile frames.
    #[arg(long)]
    max: Option<u64>,
    /// The share of hostile frames aimed at exactly the PSN the peer expects (0..=1); the
    /// others land just ahead of it or just behind it (duplicates).
    #[arg(long, default_value_t = 0.25)]
    in_window: f64,
    /// Send only the hostile frames with these ordinals (as numbered in `fuzz.log`); the
    /// others are drawn the same way and not sent. What a minimised finding replays.
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<u64>>,
    /// A liveness probe: a second, clean connection to the target beside the fuzzed flow, run
    /// as `uroce perf PROBE HOST` (the interface from `-d`), e.g. `--probe "write_bw -p 18516
    /// -D 5 -s 64 -t 2 -u 18"` against `ib_write_bw -p 18516 -D 5 -s 64 -t 2` on the target.
    /// A target that stops completing the probe's requests is hung or dead: `probe=dead` in
    /// the summary, and the exit status is 3.
    #[arg(long, value_name = "\"TEST [FLAGS]\"")]
    probe: Option<String>,
    /// Write `injected.pcap` (the hostile frames), `wire.pcap` (everything uroce's port moved)
    /// and `fuzz.log` (one line per hostile frame, then the summary) here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Files of a fuzz run's directory: its arguments (one per line) and its target.
const ARGV: &str = "argv";
const TARGET: &str = "target";

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
    match &a.carrier {
        Some(Carrier::Pingpong { pp, opts }) => {
            let mut cfg = pingpong_cmd::config(pp)?;
            if opts.probe.is_some() {
                // the probe is a second process on the interface
                cfg.backend = cfg.backend.shared();
            }
            if cfg.host.is_none() {
                bail!("uroce fuzz pingpong needs HOST: the target's ibv_rc_pingpong server");
            }
            let host = cfg.host.clone().unwrap_or_default();
            fuzz(opts, &host, pp.dev.as_deref(), |tap, wire| {
                cfg.pcap = cfg.pcap.take().or(wire);
                let mut out = std::io::stderr();
                crate::pingpong::run_tapped(&cfg, &mut out, Some(tap)).map(|_| ())
            })
        }
        None => {
            let mut cfg = perf_cmd::config(&a.perf)?;
            if a.opts.probe.is_some() {
                // the probe is a second process on the interface
                cfg.backend = cfg.backend.shared();
            }
            if cfg.host.is_none() {
                bail!("uroce fuzz needs HOST: the target's perftest server");
            }
            let host = cfg.host.clone().unwrap_or_default();
            fuzz(&a.opts, &host, a.perf.dev.as_deref(), |tap, wire| {
                cfg.pcap = cfg.pcap.take().or(wire);
                crate::perf::run_tapped(cfg, Box::new(std::io::stderr()), Some(tap)).map(|_| ())
            })
        }
    }
}

/// One fuzz run: `carry` runs the legitimate flow with the fuzz tap, capturing into the
/// record's `wire.pcap` (the path it is given) unless a capture was asked for.
fn fuzz(
    a: &FuzzOpts,
    host: &str,
    dev: Option<&str>,
    carry: impl FnOnce(Box<dyn uroce_io::tap::Tap>, Option<PathBuf>) -> Result<()>,
) -> Result<ExitCode> {
    if !(0.0..=1.0).contains(&a.in_window) {
        bail!("--in-window must be between 0 and 1");
    }
    let fc = FuzzConfig {
        seed: a.fuzz_seed,
        every: a.every,
        kinds: kinds(&a.kinds)?,
        max: a.max,
        in_window: a.in_window,
        only: a.only.as_ref().map(|v| v.iter().copied().collect()),
    };
    let (injected, wire) = match &a.out {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
            // what `uroce replay DIR` runs again: these arguments, this target
            let argv: Vec<String> = std::env::args().skip(1).collect();
            std::fs::write(d.join(ARGV), argv.join("\n") + "\n").with_context(|| format!("write {}", d.display()))?;
            std::fs::write(d.join(TARGET), format!("{host}\n")).with_context(|| format!("write {}", d.display()))?;
            (Some(d.join("injected.pcap")), Some(d.join("wire.pcap")))
        }
        None => (None, None),
    };
    let (tap, log) = FuzzTap::new(fc, injected.as_deref())?;
    let probe = a.probe.as_deref().map(|p| Probe::start(p, host, dev)).transpose()?;
    let outcome = carry(Box::new(tap), wire);
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    let legit = match &outcome {
        Ok(()) => "legit=completed".to_string(),
        Err(e) => format!("legit=failed ({e:#})"),
    };
    let probe = probe.map(Probe::finish);
    let dead = probe.as_ref().is_some_and(|p| p.starts_with("probe=dead"));
    let summary = format!("{} {}{legit}", log.summary(a.fuzz_seed), probe.map_or(String::new(), |p| p + " "));
    println!("{summary}");
    if let Some(d) = &a.out {
        let mut text = format!("# replay: uroce replay {}\n", d.display());
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
    // the run: the campaign goes on with a new connection. A dead probe is a finding.
    Ok(if dead { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// The liveness probe: `uroce perf PROBE HOST` as a child process (a second process on the
/// interface, as any verbs program beside another), its own QP.
struct Probe {
    child: std::process::Child,
}

/// How long a probe may go on after the fuzzed flow ended (its own duration, a slow target's
/// exchange).
const PROBE_GRACE: std::time::Duration = std::time::Duration::from_secs(90);

impl Probe {
    fn start(probe: &str, host: &str, dev: Option<&str>) -> Result<Probe> {
        let exe = std::env::current_exe().context("this program's path")?;
        let args: Vec<&str> = probe.split_whitespace().collect();
        if args.is_empty() {
            bail!("--probe needs a perftest test and its flags, e.g. \"write_bw -p 18516 -D 5\"");
        }
        let mut c = std::process::Command::new(exe);
        c.arg("perf").args(&args).args([host, "--no-progress", "--share"]);
        if let Some(d) = dev.filter(|_| !args.iter().any(|a| *a == "-d" || a.starts_with("--ib-dev"))) {
            c.args(["-d", d]);
        }
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        Ok(Probe { child: c.spawn().context("start the liveness probe")? })
    }

    /// Waits for the probe and says how it went: `probe=alive(<its result line>)`, or
    /// `probe=dead(...)` when it failed or gave no result in [`PROBE_GRACE`].
    fn finish(mut self) -> String {
        let until = std::time::Instant::now() + PROBE_GRACE;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    break None;
                }
            }
        };
        let out = self.child.wait_with_output().map(|o| (o.stdout, o.stderr)).unwrap_or_default();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.0), String::from_utf8_lossy(&out.1));
        // perftest's result line: the last that starts with a number
        let result = stdout.lines().rfind(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()));
        match (status, result) {
            (Some(s), Some(r)) if s.success() => {
                format!("probe=alive({})", r.split_whitespace().collect::<Vec<_>>().join(" "))
            }
            (Some(s), _) => format!(
                "probe=dead(exit {}: {})",
                s.code().map_or("signal".to_string(), |c| c.to_string()),
                stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").trim()
            ),
            (None, _) => format!("probe=dead(no result {} s after the fuzzed flow)", PROBE_GRACE.as_secs()),
        }
    }
}

/// `uroce replay`'s flags.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// A `uroce fuzz --out` directory (a finding's record).
    dir: PathBuf,
    /// Aim at another target than the recorded one.
    #[arg(long)]
    target: Option<String>,
    /// Send only these hostile frames (ordinals of the recorded run).
    #[arg(long, value_delimiter = ',', conflicts_with = "minimise")]
    only: Option<Vec<u64>>,
    /// Delta-debug the hostile frames down to a minimal set that still reproduces the
    /// finding, as `--check` judges it; needs `--check`.
    #[arg(long, requires = "check")]
    minimise: bool,
    /// Shell command run before each replay (e.g. start the target's perftest server).
    #[arg(long, value_name = "CMD")]
    before: Option<String>,
    /// Shell command run after each replay; exit 0 means the finding reproduced. It sees
    /// `UROCE_REPLAY_DIR`, the replay's own record (its `fuzz.log` ends with the summary).
    #[arg(long, value_name = "CMD")]
    check: Option<String>,
}

fn shell(cmd: &str, dir: &std::path::Path) -> Result<bool> {
    let st = std::process::Command::new("sh")
        .args(["-c", cmd])
        .env("UROCE_REPLAY_DIR", dir)
        .status()
        .with_context(|| format!("run `{cmd}`"))?;
    Ok(st.success())
}

/// One replay of the run recorded in `a.dir` into `out`, sending `only` (all when `None`);
/// whether `--check` says it reproduced (true without `--check`).
fn replay_once(a: &ReplayArgs, out: &std::path::Path, only: Option<&[u64]>) -> Result<bool> {
    let argv = std::fs::read_to_string(a.dir.join(ARGV))
        .with_context(|| format!("{} is not a uroce fuzz record", a.dir.display()))?;
    let host = std::fs::read_to_string(a.dir.join(TARGET)).unwrap_or_default().trim().to_string();
    let mut args: Vec<String> = Vec::new();
    let mut it = argv.lines().map(str::to_string);
    let mut replaced = false;
    while let Some(x) = it.next() {
        if x == "--out" || x == "--only" {
            it.next();
            continue;
        }
        if x.starts_with("--out=") || x.starts_with("--only=") {
            continue;
        }
        match &a.target {
            Some(t) if x == host && !replaced => {
                replaced = true;
                args.push(t.clone());
            }
            _ => args.push(x),
        }
    }
    args.push("--out".into());
    args.push(out.display().to_string());
    if let Some(o) = only {
        args.push("--only".into());
        args.push(o.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
    }
    if let Some(b) = &a.before {
        shell(b, out)?;
    }
    let exe = std::env::current_exe().context("this program's path")?;
    let st = std::process::Command::new(exe).args(&args).status().context("run the replay")?;
    if !st.success() {
        bail!("the replay `uroce {}` failed: {st}", args.join(" "));
    }
    match &a.check {
        Some(c) => shell(c, out),
        None => Ok(true),
    }
}

/// `uroce replay`.
pub fn replay(a: &ReplayArgs) -> Result<ExitCode> {
    let out = |tag: &str| a.dir.join(format!("replay-{tag}"));
    if !a.minimise {
        let tag =
            a.only.as_ref().map_or("all".to_string(), |o| o.iter().map(u64::to_string).collect::<Vec<_>>().join("_"));
        let ok = replay_once(a, &out(&tag), a.only.as_deref())?;
        println!("uroce-replay: {} ({})", if ok { "reproduced" } else { "not reproduced" }, out(&tag).display());
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    let first = out("all");
    if !replay_once(a, &first, None)? {
        bail!("the recorded run does not reproduce the finding (see {})", first.display());
    }
    let log = std::fs::read_to_string(first.join("fuzz.log")).context("the replay's fuzz.log")?;
    let sent: Vec<u64> = log.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    let mut tries = 0u32;
    let mut err = None;
    let minimal = crate::fuzz::ddmin(sent.clone(), |s| {
        tries += 1;
        let tag = format!("try{tries}");
        match replay_once(a, &out(&tag), Some(s)) {
            Ok(r) => r,
            Err(e) => {
                err.get_or_insert(e);
                false
            }
        }
    });
    if let Some(e) = err {
        return Err(e.context("a replay while minimising"));
    }
    let list = minimal.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    std::fs::write(a.dir.join("minimal"), format!("{list}\n")).context("write minimal")?;
    println!(
        "uroce-replay: minimal {} of {} hostile frames after {tries} replays: {list}\nreplay it: uroce replay {} --only {list}",
        minimal.len(),
        sent.len(),
        a.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        a: FuzzArgs,
    }

    #[test]
    /// `uroce fuzz TEST HOST ...` (perftest) and `uroce fuzz pingpong HOST ...` both parse,
    /// each with its own fuzz flags.
    fn both_carriers_parse() {
        let c = Cli::try_parse_from(["fuzz", "write_bw", "10.0.0.1", "-s", "64", "--fuzz-seed", "3"]).unwrap();
        assert!(c.a.perf.test() == crate::perf::Test::WriteBw && c.a.carrier.is_none(), "{c:?}");
        assert_eq!(c.a.opts.fuzz_seed, 3);
        let c = Cli::try_parse_from(["fuzz", "read_bw", "10.0.0.1"]).unwrap();
        assert!(c.a.perf.test() == crate::perf::Test::ReadBw, "{c:?}");
        assert!(Cli::try_parse_from(["fuzz", "10.0.0.1"]).is_err(), "a test or pingpong is needed");
        let c = Cli::try_parse_from(["fuzz", "pingpong", "10.0.0.1", "-d", "eth0", "--fuzz-seed", "4"]).unwrap();
        assert!(matches!(&c.a.carrier, Some(Carrier::Pingpong { opts, .. }) if opts.fuzz_seed == 4), "{c:?}");
    }
}
