//! `uroce perf`: perftest's tests over uroce, with perftest's flags, out-of-band exchange and
//! output, so RDMA engineers feel at home and a stock `ib_write_bw` & co. can be the peer.
//!
//! One process is one side: a server (no host) waits on TCP port 18515 for the client (with a
//! host). Both exchange perftest's key messages ([`uroce_rxe_compat::perftest`]), connect RC
//! QPs the way perftest does (`ctx_modify_qp_to_rtr/rts`: timeout 14 or `-u`, retry 7, rnr_retry 7,
//! min_rnr_timer 12, `max_rd_atomic` = the peer's `out_reads`), run the test on a [`Port`]
//! driven in this thread (run-to-completion), and print perftest's report.

mod bw;
mod lat;
mod report;
mod setup;

use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;
use uroce_io::runtime::{connect, BackendKind, Port, PortConfig};
use uroce_rxe_compat::perftest::{PerftestDest, PerftestSession, TestKind};
use uroce_transport::*;

pub use report::BwResult;

/// The tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Test {
    #[value(alias = "ib_write_bw")]
    WriteBw,
    #[value(alias = "ib_read_bw")]
    ReadBw,
    #[value(alias = "ib_send_bw")]
    SendBw,
    #[value(alias = "ib_atomic_bw")]
    AtomicBw,
    #[value(alias = "ib_write_lat")]
    WriteLat,
    #[value(alias = "ib_read_lat")]
    ReadLat,
    #[value(alias = "ib_send_lat")]
    SendLat,
}

impl Test {
    fn kind(self) -> TestKind {
        match self {
            Test::WriteBw => TestKind::WriteBw,
            Test::ReadBw => TestKind::ReadBw,
            Test::SendBw => TestKind::SendBw,
            Test::AtomicBw => TestKind::AtomicBw,
            Test::WriteLat => TestKind::WriteLat,
            Test::ReadLat => TestKind::ReadLat,
            Test::SendLat => TestKind::SendLat,
        }
    }
    pub(crate) fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw)
    }
    /// perftest's `testsStr` (the title's first word).
    fn verb(self) -> &'static str {
        match self {
            Test::WriteBw | Test::WriteLat => "RDMA_Write",
            Test::ReadBw | Test::ReadLat => "RDMA_Read",
            Test::SendBw | Test::SendLat => "Send",
            Test::AtomicBw => "Atomic",
        }
    }
    fn needs_reads(self) -> bool {
        matches!(self, Test::ReadBw | Test::AtomicBw | Test::ReadLat)
    }
}

/// Atomic operation of `atomic_bw` (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "verbatim")]
#[allow(non_camel_case_types, missing_docs)]
pub enum AtomicType {
    FETCH_AND_ADD,
    CMP_AND_SWAP,
}

/// Everything a run needs (the CLI's flags).
#[derive(Clone, Debug)]
pub struct PerfConfig {
    /// The test.
    pub test: Test,
    /// Server host (client side); `None` = server.
    pub host: Option<String>,
    /// Interface.
    pub ifname: Option<String>,
    /// Local address (overrides the GID index).
    pub local_ip: Option<IpAddr>,
    /// GID index (`-x`).
    pub gid_index: Option<u8>,
    /// Message size (`-s`).
    pub size: usize,
    /// Iterations per QP (`-n`).
    pub iters: u64,
    /// Run for this long instead (`-D`).
    pub duration: Option<Duration>,
    /// QPs (`-q`).
    pub qps: usize,
    /// Path MTU (`-m`), before agreeing with the peer.
    pub mtu: Option<Mtu>,
    /// All sizes 2..2^23 (`-a`).
    pub all_sizes: bool,
    /// Report Gbit/s instead of MB/s.
    pub report_gbits: bool,
    /// TCP port (`-p`).
    pub port: u16,
    /// Send queue depth (`-t`).
    pub tx_depth: u32,
    /// Signal every n-th send (`-Q`).
    pub cq_mod: u32,
    /// `-Q` was given (perftest's `req_cq_mod`: large messages and post lists then keep it).
    pub cq_mod_given: bool,
    /// Receive queue depth (`-r`).
    pub rx_depth: u32,
    /// IP traffic class (`-T`).
    pub tclass: u8,
    /// Atomic type (`-A`).
    pub atomic: AtomicType,
    /// Backend.
    pub backend: BackendKind,
    /// Capture file.
    pub pcap: Option<std::path::PathBuf>,
    /// Fault injection.
    pub inject: Option<uroce_io::inject::FaultConfig>,
    /// Congestion control (`--ecn`, `--dcqcn`).
    pub cc: uroce_transport::cc::CongestionConfig,
    /// Seed of QPNs, keys and PSNs (`--seed`); `None`: from the operating system
    /// ([`uroce_io::random::key_seed`]), so that no key can be predicted from the clock or the pid.
    pub seed: Option<u64>,
    /// Print a progress line every second on long runs (only where stderr is a terminal; the
    /// line is erased before the result row is printed).
    pub progress: bool,
    /// Seconds to keep retrying the TCP connection (client).
    pub connect_timeout: Duration,
    /// Local ACK timeout exponent of the QPs (`-u`: 4.096 us * 2^n; perftest's default 14).
    pub qp_timeout: u8,
    /// Print the engine's non-zero counters, the port's stats and the injector's counters to
    /// stderr when the run ends (also when it fails).
    pub counters: bool,
    /// Both sides run the test at once (`-b`).
    pub bidirectional: bool,
    /// Messages up to this size are sent inline (`-I`); `None`: perftest's default for the test.
    pub inline_size: Option<u32>,
    /// Outstanding READs/atomics we accept and advertise (`-o`); `None`: the device's maximum.
    pub out_reads: Option<u16>,
    /// Send WRs posted per list (`-l`); `None`: one at a time.
    pub post_list: Option<u32>,
    /// Sleep until completions arrive instead of busy polling (`-e`).
    pub events: bool,
    /// No peak bandwidth (`-N`).
    pub no_peak: bool,
    /// Print every latency sample (`-H`).
    pub histogram: bool,
    /// ... unsorted (`-U`).
    pub unsorted: bool,
    /// Print one figure only (`--output`).
    pub output: Option<OutputKind>,
    /// Bidirectional: sent and received separately (`--report-both`).
    pub report_both: bool,
    /// CPU utilisation column (`--cpu_util`).
    pub cpu_util: bool,
    /// Buffers in huge pages (`--use_hugepages`).
    pub use_hugepages: bool,
    /// One memory region per QP (`--mr_per_qp`).
    pub mr_per_qp: bool,
    /// No version exchange (`--dont_xchg_versions`).
    pub dont_xchg_versions: bool,
}

/// `--output`: the one figure printed instead of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum OutputKind {
    /// Average bandwidth (bw tests).
    Bandwidth,
    /// Typical latency (lat tests).
    Latency,
    /// Average message rate (bw tests).
    MessageRate,
}

impl PerfConfig {
    /// perftest's defaults for `test`.
    pub fn new(test: Test) -> PerfConfig {
        let size = match test {
            Test::AtomicBw => 8,
            t if t.is_bw() => 65536,
            _ => 2,
        };
        PerfConfig {
            test,
            host: None,
            ifname: None,
            local_ip: None,
            gid_index: None,
            size,
            iters: if test.is_bw() { 5000 } else { 1000 },
            duration: None,
            qps: 1,
            mtu: None,
            all_sizes: false,
            report_gbits: false,
            port: uroce_rxe_compat::perftest::DEFAULT_PORT,
            tx_depth: 128,
            cq_mod: 100,
            cq_mod_given: false,
            rx_depth: 512,
            tclass: 0,
            atomic: AtomicType::FETCH_AND_ADD,
            backend: BackendKind::Xdp(Default::default()),
            pcap: None,
            inject: None,
            cc: Default::default(),
            seed: None,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            connect_timeout: Duration::from_secs(30),
            counters: false,
            qp_timeout: 14,
            bidirectional: false,
            inline_size: None,
            out_reads: None,
            post_list: None,
            events: false,
            no_peak: false,
            histogram: false,
            unsorted: false,
            output: None,
            report_both: false,
            cpu_util: false,
            use_hugepages: false,
            mr_per_qp: false,
            dont_xchg_versions: false,
        }
    }

    /// The largest message of the run.
    pub fn max_size(&self) -> usize {
        if self.all_sizes && self.test != Test::AtomicBw {
            1 << 23
        } else {
            self.size
        }
    }

    /// Check the combination of flags and derive what perftest derives
    /// (`perftest_parameters.c`: the parser's checks and `force_dependecies`, same in 4.5 and
    /// 25.01), then check that the buffers fit in memory, before anything is allocated. Refusals
    /// carry perftest's messages; notices go to stderr as perftest prints them.
    pub fn resolve(&mut self) -> Result<()> {
        let t = self.test;
        let bw = t.is_bw();
        if self.size == 0 {
            bail!("the message size must be at least 1 byte");
        }
        if self.qps == 0 || self.iters == 0 {
            bail!("at least one QP and one iteration");
        }
        if self.bidirectional && !bw {
            bail!("Bidirectional is only available in BW test (-b)");
        }
        if self.inline_size.is_some() && t.needs_reads() {
            bail!("Inline feature not available on READ/Atomic verbs (-I)");
        }
        if self.out_reads.is_some() && !t.needs_reads() {
            bail!("Setting Outstanding reads only available on READ verb (-o: read_bw, read_lat, atomic_bw)");
        }
        if self.events && matches!(t, Test::WriteBw | Test::WriteLat) {
            bail!("Events feature not available on WRITE verb (-e)");
        }
        if self.events && self.duration.is_some() {
            bail!("Duration mode doesn't work with events (-e with -D)");
        }
        if self.no_peak && !bw {
            bail!("NoPeak only valid for BW tests (-N)");
        }
        if (self.histogram || self.unsorted) && bw {
            bail!("-H / -U are available only on latency tests");
        }
        match (self.output, bw) {
            (Some(OutputKind::Latency), true) => bail!("Output verbosity level for BW can be: bandwidth, message_rate"),
            (Some(OutputKind::Bandwidth | OutputKind::MessageRate), false) => {
                bail!("Output verbosity level for LAT can be: latency")
            }
            _ => {}
        }
        if self.all_sizes && t == Test::AtomicBw {
            bail!("Message size cannot be changed for Atomic tests (-a)");
        }
        if self.all_sizes && self.duration.is_some() {
            bail!("Duration mode currently doesn't support running on all sizes (-a with -D)");
        }
        if self.cpu_util && self.duration.is_none() {
            eprintln!(" CPU Utilization works only with Duration mode.");
        }
        if bw {
            self.tx_depth = self.tx_depth.min(u32::try_from(self.iters).unwrap_or(u32::MAX)).max(1);
            if t == Test::SendBw {
                self.rx_depth = self.rx_depth.min(u32::try_from(self.iters).unwrap_or(u32::MAX)).max(1);
            }
            // Large messages: a completion per message (MSG_SIZE_CQ_MOD_LIMIT), unless -a, -e or -Q.
            if self.size > 8192 && !self.all_sizes && !self.events && !self.cq_mod_given {
                self.cq_mod = 1;
            }
            self.cq_mod = self.cq_mod.min(self.tx_depth).max(1);
            let peak_forced = self.duration.is_some() || (self.duration.is_none() && self.iters > 20000);
            if peak_forced && !self.no_peak {
                self.no_peak = true;
                if self.duration.is_none() {
                    eprintln!(" WARNING: BW peak won't be measured in this run.");
                }
            }
        }
        if let Some(l) = self.post_list.filter(|&l| l > 1) {
            if !bw {
                bail!("Post list is supported in BW tests only (-l)");
            }
            if self.duration.is_none() && !self.iters.is_multiple_of(l as u64) {
                bail!("Number of iterations must be a multiple of post list size (-n {} -l {l})", self.iters);
            }
            if l > self.tx_depth {
                // perftest would post nothing and spin forever.
                bail!("Post list size (-l {l}) must not exceed the TX depth (-t {})", self.tx_depth);
            }
            if !self.cq_mod_given {
                self.cq_mod = l;
                eprintln!("Post List requested - CQ moderation will be the size of the post list");
            } else if l % self.cq_mod != 0 {
                bail!("Post list size must be a multiple of CQ moderation (-l {l} -Q {})", self.cq_mod);
            }
        }
        let what = format!("the buffers ({} QP(s) x 2 x {} B)", self.qps, self.max_size().max(4096));
        crate::cli::limits::fits_in_memory(&what, self.buffer_bytes())
            .map_err(|e| anyhow!("{e}: use a smaller -s or -q"))?;
        Ok(())
    }

    /// Messages up to this size are sent inline: `-I`, else perftest's default for the test.
    pub fn inline(&self) -> u32 {
        if self.test.needs_reads() {
            0
        } else {
            self.inline_size.unwrap_or_else(|| setup::default_inline(self.test))
        }
    }

    /// Bytes of buffer the run registers: each QP has a send and a receive half of the largest
    /// message (at least perftest's 4 KiB cycle buffer).
    pub fn buffer_bytes(&self) -> u64 {
        self.qps as u64 * 2 * self.max_size().max(4096) as u64
    }
}

/// One connected QP of a run (see [`setup`] for the buffer layout).
pub(crate) struct Conn {
    pub qpn: u32,
    pub cq: CqHandle,
    /// Local key of the region holding this QP's buffers.
    pub lkey: u32,
    /// Where this QP's messages are sent from (perftest's `buf[i]`).
    pub send_addr: u64,
    /// The address we advertise: the peer writes here and our receives land here.
    pub recv_addr: u64,
    pub me: PerftestDest,
    pub peer: PerftestDest,
}

/// A connected run: the port, the QPs, the out-of-band session.
pub(crate) struct Run {
    pub cfg: PerfConfig,
    pub port: Port,
    pub conns: Vec<Conn>,
    pub session: Option<PerftestSession<TcpStream>>,
    pub mtu: Mtu,
    /// perftest's `BUFF_SIZE(size, cycle_buffer)`: one QP's send (and receive) area.
    pub buf_size: usize,
    pub out: Box<dyn std::io::Write>,
    /// `--use_hugepages`: how much of the buffers the kernel backed with huge pages.
    pub huge_pages: Option<String>,
    /// `--cpu_util`: /proc/stat's user and idle jiffies at the start of the measurement.
    pub cpu: Option<(u64, u64)>,
}

/// Run a test end to end; the report goes to `out`.
pub fn run(cfg: PerfConfig, out: Box<dyn std::io::Write>) -> Result<Option<BwResult>> {
    run_tapped(cfg, out, None)
}

/// [`run`] with `tap` between the engine and the wire (`uroce probe`).
pub fn run_tapped(
    cfg: PerfConfig,
    out: Box<dyn std::io::Write>,
    tap: Option<Box<dyn uroce_io::tap::Tap>>,
) -> Result<Option<BwResult>> {
    let local_ip = connect::choose_local_ip(cfg.ifname.as_deref(), cfg.local_ip, cfg.gid_index)?;
    let mut port = Port::open(PortConfig {
        ifname: cfg.ifname.clone(),
        local_ip,
        backend: cfg.backend.clone(),
        seed: cfg.seed,
        pcap: cfg.pcap.clone(),
        inject: cfg.inject.clone(),
        tweak: None,
        cc: cfg.cc,
    })?;
    port.set_tap(tap);
    let stream = match &cfg.host {
        Some(h) => connect_tcp(h, cfg.port, cfg.connect_timeout)?,
        None => {
            let l = connect::listen_tcp(cfg.port, false).with_context(|| format!("listen on TCP port {}", cfg.port))?;
            let (s, peer) = l.accept().context("accept the perftest connection")?;
            tracing::info!(%peer, "perftest client connected");
            s
        }
    };
    stream.set_nodelay(true).ok();
    let mut run = setup::setup(cfg, port, stream, out)?;
    let r = if run.cfg.test.is_bw() { bw::run(&mut run) } else { lat::run(&mut run) };
    run.port.flush_capture();
    if run.cfg.counters {
        eprint!("{}", counters_report(&run.port));
    }
    r
}

/// `--counters`: the engine's non-zero counters (rxe's `hw_counters` names), the port's stats
/// and the fault injector's counters, one `uroce-counters <group>: k=v ...` line each.
pub fn counters_report(port: &Port) -> String {
    let engine: Vec<String> =
        port.device_ref().counters().iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
    let s = port.stats();
    let mut out = format!("uroce-counters engine: {}\n", engine.join(" "));
    out += &format!(
        "uroce-counters port: rx_frames={} tx_frames={} rx_dropped={} tx_full={} idle_polls={} link_down={} pause_rx={} tx_held={}\n",
        s.rx_frames, s.tx_frames, s.rx_dropped, s.tx_full, s.idle_polls, s.link_down, s.pause_rx, s.tx_held
    );
    if let Some(i) = port.injector() {
        let c = i.counters();
        out += &format!(
            "uroce-counters inject: processed={} delivered={} dropped={} duplicated={} reordered={} delayed={} \
             corrupted={} ce_marked={} overflow={}\n",
            c.processed,
            c.delivered,
            c.dropped,
            c.duplicated,
            c.reordered,
            c.delayed,
            c.corrupted,
            c.ce_marked,
            c.overflow
        );
    }
    out
}

/// Connect to the server, retrying (perftest's client gives up at once; uroce's waits, so a
/// client may start first) and saying so on stderr after the first refusal.
fn connect_tcp(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    let waiting = || {
        eprintln!(
            "uroce perf: waiting for a perftest server at {host}:{port} (up to {} s; start `uroce perf <test>` \
             or `ib_<test>` there without a host)",
            timeout.as_secs()
        )
    };
    connect::connect_tcp(host, port, timeout, waiting).map_err(|e| match e {
        connect::TcpConnectError::Resolve(e) => anyhow!(e).context(format!("resolve {host}")),
        connect::TcpConnectError::Timeout(last) => {
            let why = last.map_or_else(String::new, |e| format!(": {e}"));
            anyhow!("no perftest server at {host}:{port} after {} s{why}", timeout.as_secs())
        }
    })
}

impl Run {
    /// Run one step of the out-of-band exchange on a helper thread while this thread keeps the
    /// port running: the peer may still need our ACKs or READ responses until it gets there.
    pub(crate) fn oob<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut PerftestSession<TcpStream>) -> Result<T, uroce_rxe_compat::perftest::PerftestError>
            + Send
            + 'static,
    ) -> Result<T> {
        let mut session = self.session.take().context("the perftest session is already closed")?;
        let h = std::thread::spawn(move || {
            let r = f(&mut session);
            (session, r)
        });
        while !h.is_finished() {
            self.port.drive(Duration::from_millis(5), |_| false)?;
        }
        let (session, r) = h.join().map_err(|_| anyhow!("perftest exchange thread panicked"))?;
        self.session = Some(session);
        r.map_err(|e| anyhow!(e))
    }

    /// Finish the out-of-band exchange (sync, report, close) while the port keeps running.
    pub(crate) fn finish(
        &mut self,
        report: Option<uroce_rxe_compat::perftest::BwReport>,
    ) -> Result<uroce_rxe_compat::perftest::Finished> {
        self.end(move |s| s.finish(report.as_ref()))
    }

    /// Only the close handshake (flows that did their own syncs and report exchange).
    pub(crate) fn close(&mut self) -> Result<uroce_rxe_compat::perftest::Finished> {
        self.end(|s| s.close())
    }

    fn end(
        &mut self,
        f: impl FnOnce(
                PerftestSession<TcpStream>,
            )
                -> Result<uroce_rxe_compat::perftest::Finished, uroce_rxe_compat::perftest::PerftestError>
            + Send
            + 'static,
    ) -> Result<uroce_rxe_compat::perftest::Finished> {
        let session = self.session.take().context("the perftest session is already closed")?;
        let h = std::thread::spawn(move || f(session));
        while !h.is_finished() {
            self.port.drive(Duration::from_millis(5), |_| false)?;
        }
        h.join().map_err(|_| anyhow!("perftest exchange thread panicked"))?.map_err(|e| anyhow!(e))
    }

    /// `--cpu_util` is in effect (perftest: duration mode only).
    pub(crate) fn cpu_util_enabled(&self) -> bool {
        self.cfg.cpu_util && self.cfg.duration.is_some()
    }

    /// Start the CPU measurement of `--cpu_util`.
    pub(crate) fn cpu_start(&mut self) {
        if self.cpu_util_enabled() {
            self.cpu = cpu_stat();
        }
    }

    /// perftest's `calc_cpu_util`: user jiffies / (user + idle) since [`Run::cpu_start`].
    pub(crate) fn cpu_end(&mut self) -> Option<f64> {
        let (u0, i0) = self.cpu.take()?;
        let (u1, i1) = cpu_stat()?;
        let (du, di) = (u1.saturating_sub(u0), i1.saturating_sub(i0));
        Some(if du + di == 0 { 0.0 } else { du as f64 / (du + di) as f64 * 100.0 })
    }
}

/// The first line of /proc/stat: (user, idle) jiffies, as perftest's `get_cpu_stats` reads them.
fn cpu_stat() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = s.lines().next()?.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
    Some((*f.first()?, *f.get(3)?))
}

/// One round of progress: busy polling, or with `-e` sleep on the port until a completion is
/// there (perftest's `ibv_req_notify_cq` + `ibv_get_cq_event`; ours sleeps on the backend's
/// descriptor, never past the engine's next timer). Returns whether anything happened.
pub(crate) fn progress(run: &mut Run) -> Result<bool> {
    if run.cfg.events {
        let cqs: Vec<CqHandle> = run.conns.iter().map(|c| c.cq).collect();
        Ok(run.port.drive(Duration::from_millis(100), |p| {
            cqs.iter().any(|&cq| p.device_ref().cq(cq).is_some_and(|c| !c.is_empty()))
        })?)
    } else {
        Ok(run.port.poll()?)
    }
}

/// Poll every CQ of the run, handing each completion to `f`; errors stop the run.
pub(crate) fn drain_cqs(run: &mut Run, mut f: impl FnMut(usize, &WorkCompletion)) -> Result<()> {
    let mut wc = [WorkCompletion::default(); 32];
    for (i, c) in run.conns.iter().enumerate() {
        loop {
            let n = run.port.device().poll_cq(c.cq, &mut wc)?;
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    bail!(
                        "completion with error on QP {:#x}: {} ({:?}, wr_id {}, vendor_err {:#x})",
                        c.qpn,
                        w.status.as_str(),
                        w.status,
                        w.wr_id,
                        w.vendor_err
                    );
                }
                f(i, w);
            }
            if n < wc.len() {
                break;
            }
        }
    }
    Ok(())
}
