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

use crate::io::netif;
use crate::runtime::{BackendKind, Port, PortConfig};
use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant as StdInstant};
use uroce_rxe_compat::perftest::{IbMtu, PerftestDest, PerftestSession, SessionConfig, TestKind};
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
    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw)
    }
    /// perftest's title ("RDMA_Write BW Test").
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::AtomicBw => "Atomic BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
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
    pub inject: Option<crate::io::inject::FaultConfig>,
    /// Seed of QPNs, keys and PSNs (`--seed`); `None`: from the operating system
    /// ([`crate::random::key_seed`]), so that no key can be predicted from the clock or the pid.
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
            rx_depth: 512,
            tclass: 0,
            atomic: AtomicType::FETCH_AND_ADD,
            backend: BackendKind::Xdp(Default::default()),
            pcap: None,
            inject: None,
            seed: None,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            connect_timeout: Duration::from_secs(30),
            counters: false,
            qp_timeout: 14,
        }
    }
}

/// One connected QP of a run.
pub(crate) struct Conn {
    pub qpn: u32,
    pub cq: CqHandle,
    pub mr: MrInfo,
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
    pub buf_size: usize,
    pub out: Box<dyn std::io::Write>,
}

fn ib_mtu(m: Mtu) -> IbMtu {
    IbMtu::from_enum(m as u8).unwrap_or(IbMtu::Mtu1024)
}

fn pick_local_ip(cfg: &PerfConfig) -> Result<(IpAddr, Option<u8>)> {
    if let Some(ip) = cfg.local_ip {
        return Ok((ip, None));
    }
    let name = cfg.ifname.as_deref().context("give the interface with -d, or a local address with --local-ip")?;
    let i = netif::Interface::by_name(name).with_context(|| format!("interface {name}"))?;
    let ips = i.addresses();
    // The GID table in rxe's order (see runtime::Port): link-local, IPv4, other IPv6.
    let ll = |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    let mut order: Vec<IpAddr> = ips.iter().filter(|ip| ll(ip)).copied().collect();
    order.extend(ips.iter().filter(|ip| ip.is_ipv4()));
    order.extend(ips.iter().filter(|ip| ip.is_ipv6() && !ll(ip)));
    match cfg.gid_index {
        Some(x) => {
            order.get(x as usize).map(|ip| (*ip, Some(x))).with_context(|| format!("{name} has no GID index {x}"))
        }
        // perftest on RoCE is usually run with the IPv4-mapped GID; default to it.
        None => order
            .iter()
            .find(|ip| ip.is_ipv4())
            .or(order.first())
            .map(|ip| (*ip, None))
            .with_context(|| format!("{name} has no IP address")),
    }
}

/// Run a test end to end; the report goes to `out`.
pub fn run(cfg: PerfConfig, out: Box<dyn std::io::Write>) -> Result<Option<BwResult>> {
    let (local_ip, _) = pick_local_ip(&cfg)?;
    let port = Port::open(PortConfig {
        ifname: cfg.ifname.clone(),
        local_ip,
        backend: cfg.backend.clone(),
        seed: crate::random::key_seed(cfg.seed)?,
        pcap: cfg.pcap.clone(),
        inject: cfg.inject.clone(),
        tweak: None,
    })?;
    let stream = match &cfg.host {
        Some(h) => connect_tcp(h, cfg.port, cfg.connect_timeout)?,
        None => {
            let l = TcpListener::bind(("0.0.0.0", cfg.port))
                .or_else(|_| TcpListener::bind(("::", cfg.port)))
                .with_context(|| format!("listen on TCP port {}", cfg.port))?;
            let (s, peer) = l.accept().context("accept the perftest connection")?;
            tracing::info!(%peer, "perftest client connected");
            s
        }
    };
    stream.set_nodelay(true).ok();
    let mut run = setup(cfg, port, stream, out)?;
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
        "uroce-counters port: rx_frames={} tx_frames={} rx_dropped={} tx_full={} idle_polls={} link_down={}\n",
        s.rx_frames, s.tx_frames, s.rx_dropped, s.tx_full, s.idle_polls, s.link_down
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
    let addrs: Vec<SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).with_context(|| format!("resolve {host}"))?.collect();
    let start = StdInstant::now();
    let mut last_err = None;
    let mut told = false;
    loop {
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(s) => return Ok(s),
                Err(e) => last_err = Some(e),
            }
        }
        if !told {
            told = true;
            eprintln!(
                "uroce perf: waiting for a perftest server at {host}:{port} (up to {} s; start `uroce perf <test>` \
                 or `ib_<test>` there without a host)",
                timeout.as_secs()
            );
        }
        if start.elapsed() >= timeout {
            let why = last_err.map_or_else(String::new, |e| format!(": {e}"));
            bail!("no perftest server at {host}:{port} after {} s{why}", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Create the QPs, exchange keys, connect.
fn setup(cfg: PerfConfig, mut port: Port, stream: TcpStream, out: Box<dyn std::io::Write>) -> Result<Run> {
    let active = port.device_ref().config().active_mtu;
    let my_mtu = cfg.mtu.map_or(active, |m| m.min(active));
    let mut scfg = SessionConfig::new(cfg.test.kind());
    scfg.mtu = ib_mtu(my_mtu);
    scfg.num_qps = cfg.qps;
    let mut session = match cfg.host {
        Some(_) => PerftestSession::client(stream, scfg),
        None => PerftestSession::server(stream, scfg),
    }
    .map_err(|e| anyhow!(e))?;
    let agreed = session.agreed();
    let mtu = Mtu::from_enum(agreed.mtu as u8).unwrap_or(Mtu::Mtu1024).min(active);
    let max_size = if cfg.all_sizes { 1 << 23 } else { cfg.size };
    let buf_size = max_size.max(agreed.cycle_buffer as usize).max(64);
    let gid_index = port.gid_index();
    let gid = port.device_ref().config().gids[gid_index as usize];
    let out_reads: u16 = if cfg.test.needs_reads() { port.device_ref().config().max_qp_rd_atom as u16 } else { 1 };
    let mut conns = Vec::new();
    let dev = port.device();
    let pd = dev.alloc_pd();
    for _ in 0..cfg.qps {
        let cq = dev.create_cq(16384)?;
        let cap = QpCap {
            max_send_wr: cfg.tx_depth.max(1),
            max_recv_wr: cfg.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qpn =
            dev.create_qp(pd, &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false })?;
        // Two halves, as perftest lays out latency buffers: the peer writes into the first
        // (the advertised address), we send from the second. Latency tests poll the last byte
        // of a message in the first half, so it starts zeroed.
        let fill = |i: usize| if cfg.test.is_bw() { (i % 251) as u8 } else { 0 };
        let mem: Box<[u8]> = (0..2 * buf_size).map(fill).collect();
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = dev.reg_mr(pd, mem, access)?;
        let me = PerftestDest {
            lid: 0,
            out_reads,
            qpn,
            psn: dev.random_psn(),
            rkey: mr.rkey,
            vaddr: mr.addr,
            gid: gid.0,
            ..Default::default()
        };
        conns.push(Conn { qpn, cq, mr, me, peer: PerftestDest::default() });
    }
    let mine: Vec<PerftestDest> = conns.iter().map(|c| c.me).collect();
    let peers = session.exchange_keys(&mine).map_err(|e| anyhow!(e))?;
    for (c, p) in conns.iter_mut().zip(peers) {
        c.peer = p;
    }
    // Connect like perftest's ctx_modify_qp_to_rtr / _rts.
    let peer_ip = Gid(conns[0].peer.gid).to_ip();
    let dmac = match &cfg.ifname {
        Some(name) => netif::resolve_mac(name, peer_ip, Duration::from_secs(5))
            .with_context(|| format!("resolve the MAC of {peer_ip} on {name}"))?,
        None => uroce_wire::EthernetAddress([0x02, 0, 0, 0, 0, 0x02]),
    };
    for c in &conns {
        connect_qp(port.device(), c, &cfg, mtu, gid_index, dmac)?;
    }
    session.connected().map_err(|e| anyhow!(e))?;
    let mut run = Run { cfg, port, conns, session: Some(session), mtu, buf_size, out };
    report::header(&mut run)?;
    Ok(run)
}

fn connect_qp(
    dev: &mut Device,
    c: &Conn,
    cfg: &PerfConfig,
    mtu: Mtu,
    sgid_index: u8,
    dmac: uroce_wire::EthernetAddress,
) -> Result<()> {
    use QpAttrMask as M;
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mut a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access, ..Default::default() };
    dev.modify_qp(c.qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)?;
    a.qp_state = QpState::Rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = c.peer.qpn;
    a.rq_psn = c.peer.psn;
    a.max_dest_rd_atomic = c.me.out_reads.min(255) as u8;
    a.min_rnr_timer = 12;
    a.ah_attr = AddressVector {
        dgid: Gid(c.peer.gid),
        sgid_index,
        hop_limit: 0xff,
        traffic_class: cfg.tclass,
        dmac,
        ..Default::default()
    };
    dev.modify_qp(
        c.qpn,
        &a,
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
    )?;
    a.qp_state = QpState::Rts;
    a.timeout = cfg.qp_timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = c.me.psn;
    a.max_rd_atomic = c.peer.out_reads.clamp(1, 128) as u8;
    dev.modify_qp(c.qpn, &a, M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC)?;
    Ok(())
}

impl Run {
    /// The out-of-band session (taken by `finish`).
    pub(crate) fn session(&mut self) -> Result<&mut PerftestSession<TcpStream>> {
        self.session.as_mut().context("the perftest session is already closed")
    }

    /// Finish the out-of-band exchange while the port keeps running (the peer may still need
    /// our ACKs or READ responses until it has finished).
    pub(crate) fn finish(
        &mut self,
        report: Option<uroce_rxe_compat::perftest::BwReport>,
    ) -> Result<uroce_rxe_compat::perftest::Finished> {
        let session = self.session.take().context("the perftest session is already closed")?;
        let h = std::thread::spawn(move || session.finish(report.as_ref()));
        while !h.is_finished() {
            self.port.drive(Duration::from_millis(5), |_| false)?;
        }
        h.join().map_err(|_| anyhow!("perftest exchange thread panicked"))?.map_err(|e| anyhow!(e))
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
