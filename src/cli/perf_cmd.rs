//! `uroce perf <test> [host]`: perftest's flags mapped onto [`crate::perf::PerfConfig`].

use crate::perf::{self, AtomicType, PerfConfig, Test};
use crate::runtime::BackendKind;
use anyhow::{bail, Result};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use uroce_transport::Mtu;

/// Backend choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// AF_XDP sockets on the interface (needs root / CAP_NET_ADMIN + CAP_BPF).
    Xdp,
    /// A kernel UDP socket on port 4791 (no privileges; the fallback).
    Udp,
}

/// AF_XDP bind mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpModeArg {
    /// Zero-copy when the driver supports it, else copy.
    Auto,
    /// Zero-copy only.
    ZeroCopy,
    /// Copy only.
    Copy,
}

/// The I/O backend options `uroce perf` and `uroce pingpong` share.
#[derive(clap::Args, Debug)]
pub struct BackendArgs {
    /// I/O backend.
    #[arg(long, value_enum, default_value = "xdp")]
    backend: BackendArg,
    /// UDP port the udp backend binds (4791 unless two instances share an address).
    #[arg(long, default_value_t = 4791)]
    udp_port: u16,
    /// udp backend: do not batch equal-size frames with UDP GSO (on by default: 4x the
    /// throughput on veth; see `io::udp`).
    #[arg(long)]
    no_udp_gso: bool,
    /// udp backend: do not accept GRO-coalesced datagrams (on by default).
    #[arg(long)]
    no_udp_gro: bool,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    xdp_mode: XdpModeArg,
}

impl BackendArgs {
    /// The runtime's backend choice.
    pub fn kind(&self) -> BackendKind {
        match self.backend {
            BackendArg::Udp => BackendKind::Udp { port: self.udp_port, gso: !self.no_udp_gso, gro: !self.no_udp_gro },
            BackendArg::Xdp => {
                use crate::io::xsk::BindMode;
                let bind = match self.xdp_mode {
                    XdpModeArg::Auto => BindMode::Auto,
                    XdpModeArg::ZeroCopy => BindMode::ZeroCopy,
                    XdpModeArg::Copy => BindMode::Copy,
                };
                BackendKind::Xdp(crate::io::xdp::XdpOptions { bind, ..Default::default() })
            }
        }
    }
}

/// perftest's flags (same letters and long names) plus uroce's own.
#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    /// The test (`write_bw` = `ib_write_bw`, ...).
    #[arg(value_enum)]
    test: Test,
    /// The server to connect to; without it, this side is the server and waits.
    host: Option<String>,
    /// Network interface (perftest: the IB device; uroce runs on a plain netdev).
    #[arg(short = 'd', long = "ib-dev")]
    dev: Option<String>,
    /// Message size in bytes.
    #[arg(short = 's', long)]
    size: Option<usize>,
    /// Iterations.
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: usize,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (capped by the link's MTU and the peer's).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Run sizes 2 .. 2^23.
    #[arg(short = 'a', long)]
    all: bool,
    /// Accepted for perftest compatibility (uroce measures with the monotonic clock).
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Report Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = uroce_rxe_compat::perftest::DEFAULT_PORT)]
    port: u16,
    /// GID index (default: the interface's IPv4 address).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u8>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<u64>,
    /// Send queue depth.
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// QP timeout: the local ACK timeout is 4.096 us * 2^N (perftest's `-u`).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// Generate a completion every N sends.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Receive queue depth.
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,
    /// IP traffic class (TOS).
    #[arg(short = 'T', long = "tos", default_value_t = 0)]
    tos: u8,
    /// Atomic operation of atomic_bw.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value = "FETCH_AND_ADD")]
    atomic: AtomicType,
    /// perftest's RDMA-CM connection (-R) is not supported yet.
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    #[command(flatten)]
    io: BackendArgs,
    /// Local IP address (instead of -d/-x); with the udp backend no interface is needed.
    #[arg(long)]
    local_ip: Option<IpAddr>,
    /// Capture every frame sent and received into this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Inject faults on received frames, e.g. `drop=0.01,seed=7` (see `io::inject`).
    #[arg(long)]
    inject: Option<crate::io::inject::FaultConfig>,
    /// Seed of QPNs, keys and PSNs, for a reproducible run (default: from the operating system,
    /// unpredictable).
    #[arg(long)]
    seed: Option<u64>,
    /// No progress line on stderr (there is one only when stderr is a terminal).
    #[arg(long)]
    no_progress: bool,
    /// At exit, print the engine's non-zero counters, the port's stats and the fault
    /// injector's counters to stderr (`uroce-counters <group>: name=value ...`).
    #[arg(long)]
    counters: bool,
}

fn mtu_of(v: u32) -> Result<Mtu> {
    Ok(match v {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => bail!("-m must be one of 256, 512, 1024, 2048, 4096"),
    })
}

/// Build the run's configuration from the flags.
pub fn config(a: &PerfArgs) -> Result<PerfConfig> {
    if a.rdma_cm {
        bail!("-R (RDMA-CM) is not supported yet; run without it (perftest's Ethernet exchange)");
    }
    let mut c = PerfConfig::new(a.test);
    c.host = a.host.clone();
    c.ifname = a.dev.clone();
    c.local_ip = a.local_ip;
    c.gid_index = a.gid_index;
    if let Some(s) = a.size {
        if s == 0 || s > 1 << 31 {
            bail!("-s must be between 1 and 2^31");
        }
        if a.test == Test::AtomicBw && s != 8 {
            bail!("atomic_bw messages are 8 bytes");
        }
        c.size = s;
    }
    if let Some(n) = a.iters {
        if n < 5 && !matches!(a.test, Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw) {
            bail!("-n must be at least 5 for latency tests");
        }
        c.iters = n.max(1);
    }
    if a.qps == 0 || a.qps > 1024 {
        bail!("-q must be between 1 and 1024");
    }
    c.qps = a.qps;
    c.mtu = a.mtu.map(mtu_of).transpose()?;
    c.all_sizes = a.all;
    c.report_gbits = a.report_gbits;
    c.port = a.port;
    c.duration = a.duration.map(Duration::from_secs);
    if let Some(t) = a.tx_depth {
        c.tx_depth = t.clamp(1, 16384);
    } else if !matches!(a.test, Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw) {
        c.tx_depth = 1;
    }
    c.cq_mod = a.cq_mod.clamp(1, 1024);
    if let Some(r) = a.rx_depth {
        c.rx_depth = r.clamp(1, 16384);
    }
    c.tclass = a.tos;
    c.atomic = a.atomic;
    c.backend = a.io.kind();
    c.pcap = a.pcap.clone();
    c.inject = a.inject.clone();
    c.seed = a.seed;
    c.progress &= !a.no_progress;
    c.counters = a.counters;
    if a.qp_timeout > 31 {
        bail!("-u must be between 0 and 31");
    }
    c.qp_timeout = a.qp_timeout;
    Ok(c)
}

/// `uroce perf`.
pub fn run(a: &PerfArgs) -> Result<ExitCode> {
    let _ = a.cpu_freq;
    let cfg = config(a)?;
    perf::run(cfg, Box::new(std::io::stdout()))?;
    Ok(ExitCode::SUCCESS)
}
