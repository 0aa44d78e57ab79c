//! `uroce perf <test> [host]`: perftest's flags mapped onto [`crate::perf::PerfConfig`].

use super::limits;
use crate::perf::{self, AtomicType, PerfConfig, Test};
use anyhow::{bail, Result};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use uroce_io::runtime::BackendKind;
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
    /// Share the interface with other uroce processes (the verbs library's default: each
    /// owns a block of QP numbers) instead of taking it alone.
    #[arg(long)]
    share: bool,
}

impl BackendArgs {
    /// The runtime's backend choice.
    pub fn kind(&self) -> BackendKind {
        let k = self.alone();
        if self.share {
            k.shared()
        } else {
            k
        }
    }

    fn alone(&self) -> BackendKind {
        match self.backend {
            BackendArg::Udp => {
                BackendKind::Udp { port: self.udp_port, gso: !self.no_udp_gso, gro: !self.no_udp_gro, shared: false }
            }
            BackendArg::Xdp => {
                use uroce_io::xsk::BindMode;
                let bind = match self.xdp_mode {
                    XdpModeArg::Auto => BindMode::Auto,
                    XdpModeArg::ZeroCopy => BindMode::ZeroCopy,
                    XdpModeArg::Copy => BindMode::Copy,
                };
                BackendKind::Xdp(uroce_io::xdp::XdpOptions { bind, ..Default::default() })
            }
        }
    }
}

/// perftest's flags (same letters and long names) plus uroce's own. Every number is checked
/// against perftest's own limits (`perftest_parameters.h`) before anything is allocated.
#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    /// The test (`write_bw` = `ib_write_bw`, ...).
    #[arg(value_enum, required = true)]
    test: Option<Test>,
    /// The server to connect to; without it, this side is the server and waits.
    host: Option<String>,
    /// Network interface (perftest: the IB device; uroce runs on a plain netdev).
    #[arg(short = 'd', long = "ib-dev")]
    pub(crate) dev: Option<String>,
    /// Message size in bytes, 1 .. 2^31-1; a K or M suffix multiplies by 1024 or 1024^2.
    #[arg(short = 's', long, value_parser = limits::PERFTEST_SIZE.size_parser())]
    pub(super) size: Option<u64>,
    /// Iterations (5 .. 2^32).
    #[arg(short = 'n', long, value_parser = limits::PERFTEST_ITERS.parser())]
    pub(super) iters: Option<u64>,
    /// Number of QPs (1 .. 16384).
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = limits::PERFTEST_QPS.parser())]
    qps: u64,
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
    #[arg(short = 'x', long = "gid-index", value_parser = limits::PERFTEST_GID_INDEX.parser())]
    gid_index: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long, value_parser = limits::PERFTEST_DURATION.parser())]
    duration: Option<u64>,
    /// Send queue depth (1 .. 15000).
    #[arg(short = 't', long = "tx-depth", value_parser = limits::PERFTEST_TX_DEPTH.parser())]
    tx_depth: Option<u64>,
    /// QP timeout: the local ACK timeout is 4.096 us * 2^N (perftest's `-u`, 0 .. 31).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = limits::PERFTEST_QP_TIMEOUT.parser())]
    qp_timeout: u64,
    /// Generate a completion every N sends (1 .. 1024).
    #[arg(short = 'Q', long = "cq-mod", value_parser = limits::PERFTEST_CQ_MOD.parser())]
    cq_mod: Option<u64>,
    /// Receive queue depth (1 .. 16384).
    #[arg(short = 'r', long = "rx-depth", value_parser = limits::PERFTEST_RX_DEPTH.parser())]
    rx_depth: Option<u64>,
    /// IP traffic class (TOS).
    #[arg(short = 'T', long = "tos", default_value_t = 0)]
    tos: u8,
    /// Atomic operation of atomic_bw.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value = "FETCH_AND_ADD")]
    atomic: AtomicType,
    /// Bidirectional: both sides run the test at once (bw tests).
    #[arg(short = 'b', long = "bidirectional")]
    bidirectional: bool,
    /// Send messages up to this size inline (IBV_SEND_INLINE), 0 .. 1024; perftest's default:
    /// 220 for write_lat, 236 for send_lat, 0 otherwise.
    #[arg(short = 'I', long = "inline_size", value_parser = limits::PERFTEST_INLINE.parser())]
    inline_size: Option<u64>,
    /// Outstanding READs/atomics this side accepts as responder, advertised to the peer (the
    /// peer's `max_rd_atomic`); default: the device's maximum.
    #[arg(short = 'o', long = "outs", value_parser = limits::PERFTEST_OUTS.parser())]
    outs: Option<u64>,
    /// Post lists of this many send WRs at a time (bw tests; the CQ moderation becomes the
    /// list size unless -Q is given).
    #[arg(short = 'l', long = "post_list", value_parser = limits::PERFTEST_POST_LIST.parser())]
    post_list: Option<u64>,
    /// Sleep until a completion arrives instead of busy polling (perftest: completion events).
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Do not measure the peak bandwidth (printed as 0.00).
    #[arg(short = 'N', long = "noPeak")]
    no_peak: bool,
    /// Latency tests: print every sample after the table, sorted.
    #[arg(short = 'H', long = "report-histogram", alias = "report-histogrm")]
    histogram: bool,
    /// Latency tests: print every sample in the order measured (implies -H).
    #[arg(short = 'U', long = "report-unsorted")]
    unsorted: bool,
    /// Print only this figure: bandwidth, latency or message_rate.
    #[arg(long = "output", value_enum)]
    output: Option<perf::OutputKind>,
    /// Bidirectional tests: report what was sent and what was received separately.
    #[arg(long = "report-both")]
    report_both: bool,
    /// Add the CPU utilisation of the run (duration mode, -D).
    #[arg(long = "cpu_util")]
    cpu_util: bool,
    /// Allocate the buffers in huge pages.
    #[arg(long = "use_hugepages")]
    use_hugepages: bool,
    /// A memory region per QP (default: one region, a slice of it per QP).
    #[arg(long = "mr_per_qp")]
    mr_per_qp: bool,
    /// Skip perftest's version exchange (both sides must be given this flag).
    #[arg(long = "dont_xchg_versions")]
    dont_xchg_versions: bool,
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
    inject: Option<uroce_io::inject::FaultConfig>,
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
    /// Send ECN-capable frames and answer CE-marked ones with CNPs (the notification point);
    /// `--dcqcn` implies it.
    #[arg(long)]
    ecn: bool,
    /// React to CNPs with DCQCN (ConnectX's reaction point), with the `connectx` (firmware
    /// defaults) or `paper` (SIGCOMM 2015) profile.
    #[arg(long, value_name = "PROFILE", num_args = 0..=1, default_missing_value = "connectx")]
    dcqcn: Option<String>,
    /// Change a DCQCN knob by its ConnectX name (e.g. `rpg_time_reset=55`); repeatable.
    #[arg(long = "dcqcn-set", value_name = "KNOB=VALUE", requires = "dcqcn")]
    dcqcn_set: Vec<String>,
    /// The line rate DCQCN starts from and returns to, Gbit/s.
    #[arg(long, value_name = "GBPS", default_value_t = 100.0, requires = "dcqcn")]
    line_rate: f64,
    /// At most one CNP per QP in this many µs (ConnectX `min_time_between_cnps`).
    #[arg(long, value_name = "US", default_value_t = 2)]
    min_time_between_cnps: u32,
    /// DSCP of the CNPs this side sends (ConnectX `cnp_dscp`).
    #[arg(long, value_name = "DSCP", default_value_t = uroce_wire::cnp::CNP_DSCP,
          value_parser = clap::value_parser!(u8).range(0..=63))]
    cnp_dscp: u8,
    /// 802.1p priority of the CNPs this side sends on a VLAN (ConnectX `cnp_802p_prio`).
    #[arg(long = "cnp-802p-prio", value_name = "PRIO", default_value_t = uroce_wire::cnp::CNP_PRIO,
          value_parser = clap::value_parser!(u8).range(0..=7))]
    cnp_802p_prio: u8,
}

impl PerfArgs {
    /// The test. (An `Option` only so that `uroce fuzz pingpong`, which flattens these
    /// arguments beside its subcommand, can leave it out; clap requires it everywhere else.)
    pub(super) fn test(&self) -> Test {
        self.test.unwrap_or(Test::WriteBw)
    }
}

/// `--ecn`, `--dcqcn ...`: the engine's congestion control.
fn congestion(a: &PerfArgs) -> Result<uroce_transport::cc::CongestionConfig> {
    use uroce_transport::cc::{CongestionConfig, NpConfig};
    let np = NpConfig {
        min_time_between_cnps: Duration::from_micros(a.min_time_between_cnps as u64),
        cnp_dscp: a.cnp_dscp,
        cnp_802p_prio: a.cnp_802p_prio,
    };
    if a.dcqcn.is_some() && (!a.line_rate.is_finite() || !(0.001..=100_000.0).contains(&a.line_rate)) {
        bail!("--line-rate must be between 0.001 and 100000 Gbit/s");
    }
    let line = (a.line_rate * 1e9).round() as u64;
    Ok(CongestionConfig::from_settings(a.ecn, a.dcqcn.as_deref(), line, &a.dcqcn_set, np)?)
}

/// Build the run's configuration from the flags.
pub fn config(a: &PerfArgs) -> Result<PerfConfig> {
    if a.rdma_cm {
        bail!("-R (RDMA-CM) is not supported yet; run without it (perftest's Ethernet exchange)");
    }
    let test = a.test();
    let bw = test.is_bw();
    let mut c = PerfConfig::new(test);
    c.host = a.host.clone();
    c.ifname = a.dev.clone();
    c.local_ip = a.local_ip;
    c.gid_index = a.gid_index.map(|x| x as u8);
    if let Some(s) = a.size {
        if test == Test::AtomicBw && s != 8 {
            bail!("atomic_bw messages are 8 bytes");
        }
        c.size = s as usize;
    }
    if let Some(n) = a.iters {
        c.iters = n;
    }
    c.qps = a.qps as usize;
    if !bw && c.qps != 1 {
        bail!("latency tests use one QP (-q 1)");
    }
    c.mtu = a
        .mtu
        .map(|v| {
            Mtu::from_bytes(v as usize).ok_or_else(|| anyhow::anyhow!("-m must be one of 256, 512, 1024, 2048, 4096"))
        })
        .transpose()?;
    c.all_sizes = a.all;
    c.report_gbits = a.report_gbits;
    c.port = a.port;
    c.duration = a.duration.map(Duration::from_secs);
    if let Some(t) = a.tx_depth {
        c.tx_depth = t as u32;
    } else if !bw {
        c.tx_depth = 1;
    }
    if let Some(q) = a.cq_mod {
        c.cq_mod = q as u32;
        c.cq_mod_given = true;
    }
    if let Some(r) = a.rx_depth {
        c.rx_depth = r as u32;
    }
    c.tclass = a.tos;
    c.atomic = a.atomic;
    c.backend = a.io.kind();
    c.pcap = a.pcap.clone();
    c.inject = a.inject.clone();
    c.cc = congestion(a)?;
    c.seed = a.seed;
    c.progress &= !a.no_progress;
    c.counters = a.counters;
    c.qp_timeout = a.qp_timeout as u8;
    c.bidirectional = a.bidirectional;
    c.inline_size = a.inline_size.map(|v| v as u32);
    c.out_reads = a.outs.map(|v| v as u16);
    c.post_list = a.post_list.map(|v| v as u32);
    c.events = a.events;
    c.no_peak = a.no_peak;
    c.histogram = a.histogram || a.unsorted;
    c.unsorted = a.unsorted;
    c.output = a.output;
    c.report_both = a.report_both;
    c.cpu_util = a.cpu_util;
    c.use_hugepages = a.use_hugepages;
    c.mr_per_qp = a.mr_per_qp;
    c.dont_xchg_versions = a.dont_xchg_versions;
    c.resolve()?;
    Ok(c)
}

/// `uroce perf`.
pub fn run(a: &PerfArgs) -> Result<ExitCode> {
    let _ = a.cpu_freq;
    let cfg = config(a)?;
    perf::run(cfg, Box::new(std::io::stdout()))?;
    Ok(ExitCode::SUCCESS)
}
