//! `uroce demo`: two uroce instances, a perftest run between them, on this machine.
//!
//! As root: two fresh network namespaces joined by a veth pair, a `perf` server in one and a
//! client in the other, both over AF_XDP (the XDP program attached to each veth end); the
//! namespaces are removed afterwards. Without root (or with `--backend udp`): the kernel-UDP
//! backend on loopback, 127.0.0.1 ↔ 127.0.0.2.

use crate::netns::{self, NetPair, PairConfig};
use crate::perf::{self, PerfConfig, Test};
use crate::runtime::BackendKind;
use anyhow::{anyhow, Context, Result};
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `uroce demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// The perftest test to run.
    #[arg(long, value_enum, default_value = "write_bw")]
    test: Test,
    /// Message size.
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// Iterations.
    #[arg(short = 'n', long, default_value_t = 20000)]
    iters: u64,
    /// Run all sizes 2 .. 2^23 (`-a`).
    #[arg(short = 'a', long)]
    all: bool,
    /// Link MTU of the veth pair (9000 gives a 4096-byte path MTU).
    #[arg(long, default_value_t = 9000)]
    link_mtu: u32,
    /// Backend: xdp (needs root) or udp (loopback, no privileges). Default: xdp as root.
    #[arg(long, value_enum)]
    backend: Option<super::perf_cmd::BackendArg>,
    /// Capture the client's frames to this pcap file.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
}

fn base(a: &DemoArgs, host: Option<String>) -> PerfConfig {
    let mut c = PerfConfig::new(a.test);
    if a.test != Test::AtomicBw {
        c.size = a.size;
    }
    c.iters = a.iters;
    c.all_sizes = a.all;
    c.host = host;
    c.connect_timeout = Duration::from_secs(20);
    c
}

/// `uroce demo`.
pub fn run(a: &DemoArgs) -> Result<ExitCode> {
    use super::perf_cmd::BackendArg;
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
    let net = NetPair::create(&PairConfig { subnet: 123, ..PairConfig::new("demo", a.link_mtu) })
        .context("create the demo namespaces (needs root and iproute2)")?;
    eprintln!(
        "uroce demo: namespaces {} ({} {}) and {} ({} {}) joined by veth, MTU {}; AF_XDP on both ends",
        net.a.ns, net.a.ifname, net.a.ip4, net.b.ns, net.b.ifname, net.b.ip4, a.link_mtu
    );
    let mut srv = base(a, None);
    srv.ifname = Some(net.a.ifname.clone());
    srv.backend = BackendKind::Xdp(Default::default());
    srv.progress = false;
    let mut cli = base(a, Some(net.a.ip4.to_string()));
    cli.ifname = Some(net.b.ifname.clone());
    cli.backend = BackendKind::Xdp(Default::default());
    cli.pcap = a.pcap.clone();
    let server = netns::spawn_in(&net.a.ns, move || perf::run(srv, Box::new(std::io::sink())));
    std::thread::sleep(Duration::from_millis(300));
    let client = netns::spawn_in(&net.b.ns, move || perf::run(cli, Box::new(std::io::stdout())));
    let c = client.join().map_err(|_| anyhow!("client thread panicked"))??;
    let s = server.join().map_err(|_| anyhow!("server thread panicked"))??;
    c.context("client")?;
    s.context("server")?;
    Ok(ExitCode::SUCCESS)
}

fn over_loopback(a: &DemoArgs) -> Result<ExitCode> {
    let (ip_s, ip_c) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let mut srv = base(a, None);
    srv.local_ip = Some(IpAddr::V4(ip_s));
    srv.backend = BackendKind::Udp { port: 4791, gso: true, gro: true };
    srv.progress = false;
    let mut cli = base(a, Some(ip_s.to_string()));
    cli.local_ip = Some(IpAddr::V4(ip_c));
    cli.backend = BackendKind::Udp { port: 4791, gso: true, gro: true };
    cli.pcap = a.pcap.clone();
    let server = std::thread::spawn(move || perf::run(srv, Box::new(std::io::sink())));
    std::thread::sleep(Duration::from_millis(300));
    let c = perf::run(cli, Box::new(std::io::stdout()));
    let s = server.join().map_err(|_| anyhow!("server thread panicked"))?;
    c.context("client")?;
    s.context("server")?;
    Ok(ExitCode::SUCCESS)
}
