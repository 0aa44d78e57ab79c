//! `uroce demo`: two uroce instances, a perftest run between them, on this machine.
//!
//! As root: two fresh network namespaces joined by a veth pair, a `perf` server in one and a
//! client in the other, both over AF_XDP (the XDP program attached to each veth end); the
//! namespaces are removed afterwards. Without root (or with `--backend udp`): the kernel-UDP
//! backend on loopback, 127.0.0.1 ↔ 127.0.0.2.

use super::limits;
use crate::netns::{self, NetPair, PairConfig};
use crate::perf::{self, PerfConfig, Test};
use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::Duration;
use uroce_io::runtime::BackendKind;

/// Flags of `uroce demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// The perftest test to run.
    #[arg(long, value_enum, default_value = "write_bw")]
    test: Test,
    /// Message size in bytes (1 .. 2^31-1, perftest's range).
    #[arg(short = 's', long, default_value_t = 65536, value_parser = limits::PERFTEST_SIZE.size_parser())]
    size: u64,
    /// Iterations (5 .. 2^32, perftest's range).
    #[arg(short = 'n', long, default_value_t = 20000, value_parser = limits::PERFTEST_ITERS.parser())]
    iters: u64,
    /// Run all sizes 2 .. 2^23 (`-a`).
    #[arg(short = 'a', long)]
    all: bool,
    /// Link MTU of the veth pair, 1280 .. 9000 (9000 gives a 4096-byte path MTU).
    #[arg(long, default_value_t = 9000, value_parser = limits::DEMO_LINK_MTU.parser())]
    link_mtu: u64,
    /// Backend: xdp (needs root) or udp (loopback, no privileges). Default: xdp as root.
    #[arg(long, value_enum)]
    backend: Option<super::perf_cmd::BackendArg>,
    /// Capture the client's frames to this pcap file.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
    /// Test hook: fail on purpose once the namespaces exist, to show they are removed anyway.
    #[arg(long, value_enum, hide = true)]
    debug_fail: Option<DebugFail>,
}

/// How `--debug-fail` fails.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum DebugFail {
    /// The server thread panics.
    ServerPanic,
    /// The client thread panics.
    ClientPanic,
    /// The main thread panics.
    MainPanic,
    /// The main thread returns an error.
    Error,
    /// The process aborts (as on an allocation failure).
    Abort,
}

/// Bytes the run allocates, both sides together (they share this process): each side
/// registers a send and a receive half of the largest message (at least perftest's 4 KiB
/// cycle buffer) and a latency test keeps a timestamp and a sample per iteration.
fn buffer_bytes(a: &DemoArgs) -> u64 {
    let largest = if a.all && a.test != Test::AtomicBw { 1 << 23 } else { a.size };
    let per_side = 2 * largest.max(4096) + if a.test.is_bw() { 0 } else { a.iters.saturating_mul(32) };
    2 * per_side
}

/// Checks what clap cannot check alone, before anything (namespaces, memory) is made.
fn check(a: &DemoArgs) -> Result<()> {
    let what = "the buffers of the two sides (both run in this process)";
    limits::fits_in_memory(what, buffer_bytes(a))
        .map_err(|e| anyhow!("{e}: use a smaller -s{}", if a.test.is_bw() { "" } else { " or -n" }))
}

/// One side's run, with perftest's derived values (`PerfConfig::resolve`).
fn base(a: &DemoArgs, host: Option<String>) -> Result<PerfConfig> {
    let mut c = PerfConfig::new(a.test);
    if a.test != Test::AtomicBw {
        c.size = a.size as usize;
    }
    c.iters = a.iters;
    c.all_sizes = a.all;
    c.host = host;
    c.connect_timeout = Duration::from_secs(20);
    c.resolve()?;
    Ok(c)
}

/// `uroce demo`.
pub fn run(a: &DemoArgs) -> Result<ExitCode> {
    use super::perf_cmd::BackendArg;
    check(a)?;
    let root = netns::is_root();
    let backend = match a.backend {
        Some(b) => b,
        None if root && netns::have("ip") => BackendArg::Xdp,
        None => {
            eprintln!(
                "uroce demo: {} — falling back to the kernel-UDP backend on loopback (127.0.0.1 <-> 127.0.0.2).\n\
                 Run as root for AF_XDP between two network namespaces.",
                if root { "`ip` (iproute2) is not installed" } else { "not root, so no network namespaces or AF_XDP" }
            );
            BackendArg::Udp
        }
    };
    match backend {
        BackendArg::Xdp => over_veth(a),
        BackendArg::Udp => over_loopback(a),
    }
}

fn over_veth(a: &DemoArgs) -> Result<ExitCode> {
    let net = NetPair::create(&PairConfig { subnet: 123, ..PairConfig::new("demo", a.link_mtu as u32) })
        .context("create the demo namespaces (needs root and iproute2)")?;
    eprintln!(
        "uroce demo: namespaces {} ({} {}) and {} ({} {}) joined by veth, MTU {}; AF_XDP on both ends",
        net.a.ns, net.a.ifname, net.a.ip4, net.b.ns, net.b.ifname, net.b.ip4, a.link_mtu
    );
    match a.debug_fail {
        Some(DebugFail::MainPanic) => panic!("--debug-fail main-panic"),
        Some(DebugFail::Error) => bail!("--debug-fail error"),
        Some(DebugFail::Abort) => std::process::abort(),
        _ => {}
    }
    let mut srv = base(a, None)?;
    srv.ifname = Some(net.a.ifname.clone());
    srv.backend = BackendKind::Xdp(Default::default());
    srv.progress = false;
    let mut cli = base(a, Some(net.a.ip4.to_string()))?;
    cli.ifname = Some(net.b.ifname.clone());
    cli.backend = BackendKind::Xdp(Default::default());
    cli.pcap = a.pcap.clone();
    // Each side reports to the main thread when it ends, however it ends (a panic too); the
    // first failure ends the demo at once (the namespaces are removed when `net` drops), rather
    // than waiting for the other side to time out.
    let (tx, rx) = std::sync::mpsc::channel::<(&str, Result<()>)>();
    let fail = a.debug_fail;
    let side = |name: &'static str, ns: String, cfg: PerfConfig, out: fn() -> Box<dyn std::io::Write>, panics: bool| {
        let tx = tx.clone();
        std::thread::Builder::new().name(format!("demo-{name}")).spawn(move || {
            let r = netns::enter(&ns).map_err(anyhow::Error::from).and_then(|()| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if panics {
                        panic!("--debug-fail: the {name} panics");
                    }
                    perf::run(cfg, out()).map(|_| ())
                }))
                .unwrap_or_else(|_| Err(anyhow!("the {name} thread panicked")))
            });
            let _ = tx.send((name, r));
        })
    };
    side("server", net.a.ns.clone(), srv, || Box::new(std::io::sink()), fail == Some(DebugFail::ServerPanic))?;
    std::thread::sleep(Duration::from_millis(300));
    side("client", net.b.ns.clone(), cli, || Box::new(std::io::stdout()), fail == Some(DebugFail::ClientPanic))?;
    drop(tx);
    for _ in 0..2 {
        let (name, r) = rx.recv().map_err(|_| anyhow!("a demo thread ended without a result"))?;
        r.context(name)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn over_loopback(a: &DemoArgs) -> Result<ExitCode> {
    let (ip_s, ip_c) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let mut srv = base(a, None)?;
    srv.local_ip = Some(IpAddr::V4(ip_s));
    srv.backend = BackendKind::Udp { port: 4791, gso: true, gro: true, shared: false };
    srv.progress = false;
    let mut cli = base(a, Some(ip_s.to_string()))?;
    cli.local_ip = Some(IpAddr::V4(ip_c));
    cli.backend = BackendKind::Udp { port: 4791, gso: true, gro: true, shared: false };
    cli.pcap = a.pcap.clone();
    let server = std::thread::spawn(move || perf::run(srv, Box::new(std::io::sink())));
    std::thread::sleep(Duration::from_millis(300));
    let c = perf::run(cli, Box::new(std::io::stdout()));
    let s = server.join().map_err(|_| anyhow!("server thread panicked"))?;
    c.context("client")?;
    s.context("server")?;
    Ok(ExitCode::SUCCESS)
}
