//! `uroce pingpong`: rdma-core's `ibv_rc_pingpong` (`libibverbs/examples/rc_pingpong.c`) over
//! uroce, so the stock tool can be the peer, in either role.
//!
//! # Contract
//!
//! One process is one side: a server (no host) waits on TCP port 18515 (`-p`) for one client.
//! Everything on the wire and on the terminal follows rc_pingpong (rdma-core 44 .. 56.1 and
//! master 691953d8 agree):
//!
//! * **Setup** (`pp_init_ctx`): one buffer of `-s` bytes filled with `0x7b`, one CQ of
//!   `rx_depth + 1` entries, one RC QP (`max_send_wr` 1, `max_recv_wr` = `-r`), moved to INIT
//!   with `qp_access_flags = 0`; `rx_depth` receives of the whole buffer (`wr_id`
//!   `PINGPONG_RECV_WRID` = 1) are posted *before* the exchange.
//! * **Exchange**: [`uroce_rxe_compat::pingpong`] (52-byte address messages, `"done"`); the
//!   server connects its QP before it replies, the client after. The path MTU (`-m`, default
//!   1024) is not exchanged: both sides must be given the same.
//! * **Connection** (`pp_connect_ctx`): RTR with `max_dest_rd_atomic` 1, `min_rnr_timer` 12, a
//!   GRH with `hop_limit` 1 and `sgid_index` = `-g`; RTS with `timeout` 14, `retry_cnt` 7,
//!   `rnr_retry` 7, `max_rd_atomic` 1. A peer GID with a zero interface id (stock run without
//!   `-g`) gets no GRH in rc_pingpong, which RoCE cannot carry: refused with an explanation.
//! * **Traffic** (`parse_single_wc`): signalled SENDs of the whole buffer (`wr_id`
//!   `PINGPONG_SEND_WRID` = 2); the client posts the first. A side posts its next SEND when its
//!   previous SEND completed *and* one message arrived (the `pending` bit mask), until it has
//!   sent `-n`; it stops once it sent and received `-n`. Receives are refilled up to `rx_depth`
//!   when at most one is left. Any completion error prints `Failed status <str> (<n>) for wr_id
//!   <id>` and fails the run (exit 1).
//! * **Output**: the `local address:` / `remote address:` lines, then `<bytes> bytes in <s>
//!   seconds = <r> Mbit/sec` and `<n> iters in <s> seconds = <t> usec/iter`, with rc_pingpong's
//!   arithmetic (`bytes = size * iters * 2`, time from the client's first post / the server's
//!   connect to the last completion).
//!
//! # `-c` (validate the buffer)
//!
//! rc_pingpong's check is narrow, and uroce matches it exactly, then adds its own:
//!
//! * stock: the *client* sets `buf[i] = i / page_size % sizeof(char)` at every page start
//!   before its first send (`% sizeof(char)` is `% 1`: always **0**); the *server* checks the
//!   byte at every page start of its buffer once the run is over and prints `invalid data in
//!   page <p>` for each one that is not 0 — and still exits 0. Every message is echoed (both
//!   sides send their buffer, into which the last message arrived), so the stock client's
//!   messages are all alike: 0 at page starts, `0x7b` elsewhere.
//! * uroce, as the client: message `k` (1-based) is [`fill_message`]: 0 at every page start
//!   (so a stock server's check passes) and a pseudo-random byte stream seeded by `k`
//!   elsewhere; every echo is compared byte for byte with what was sent. Any echoing server
//!   (stock or uroce) is checked this way.
//! * uroce, as the server: every message is compared byte for byte with what a client of
//!   either kind sends — [`fill_message`]`(k)` from a uroce client, the stock content from a
//!   stock client (the first message that tells them apart decides which) — and the stock
//!   page-start check runs at the end.
//! * Unlike rc_pingpong, any invalid data makes the run fail (exit 1) after it completed (so
//!   the peer is not left hanging); the stock `invalid data in page` lines are printed as is.
//!
//! # Differences from rc_pingpong (none visible to the peer)
//!
//! `-d` names a network interface, not an RDMA device; without `-g` the interface's IPv4
//! address is used (stock sends a zero GID then, which does not work on RoCE); `-e` sleeps on
//! the backend's descriptor when idle (there is no completion channel to sleep on);
//! `-o`/`-O`/`-P`, `-t` and `-j` are refused; the client retries its TCP connection for
//! `connect_timeout`; the server listens before it prints its address (a readiness signal);
//! a side with no completion for `stall_timeout` gives up instead of waiting forever; a
//! finished side keeps its QP for [`LINGER`] to re-acknowledge a retransmitted last message;
//! a client whose last SEND is unacknowledged after the server's last reply arrived (which
//! proves delivery: the server replies to message k only after receiving it) finishes after
//! [`PEER_GONE_GRACE`] with a warning — the ACK was lost and the server has gone (seen
//! against rxe at 5 % loss; rc_pingpong itself would hang or fail).
//! `retry_cnt` 7 means 7 retries (IBTA, ConnectX) unless `retry_forever` asks for rxe's
//! reading ("forever"); with a stock rxe peer that stalls longer than 8 x 67 ms (a starved
//! emulated guest) only the latter survives, as rxe-to-rxe would.

use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpStream};
use std::time::{Duration, Instant};
use uroce_io::runtime::connect::{self, RcLocal, RcRemote};
use uroce_io::runtime::{BackendKind, Port, PortConfig};
use uroce_rxe_compat::pingpong::{self as oob, PingpongDest};
use uroce_transport::*;

/// How long a finished side keeps its QP to re-acknowledge a retransmitted last message.
pub const LINGER: Duration = Duration::from_millis(250);

/// How long a finished client waits for the ACK of its last SEND once the server's last reply
/// proved the SEND's delivery (5 retransmissions at rc_pingpong's 67 ms ACK timeout).
pub const PEER_GONE_GRACE: Duration = Duration::from_millis(350);

/// `PINGPONG_RECV_WRID`.
pub const RECV_WRID: u64 = 1;
/// `PINGPONG_SEND_WRID`.
pub const SEND_WRID: u64 = 2;

/// Everything a run needs (the CLI's flags).
#[derive(Clone, Debug)]
pub struct PingpongConfig {
    /// Server to connect to (client side); `None` = server.
    pub host: Option<String>,
    /// TCP port of the exchange (`-p`).
    pub port: u16,
    /// Interface (`-d`).
    pub ifname: Option<String>,
    /// Local address (overrides `-g`).
    pub local_ip: Option<IpAddr>,
    /// GID index (`-g`); `None` = the interface's IPv4 address.
    pub gid_index: Option<u8>,
    /// Message size (`-s`).
    pub size: u32,
    /// Path MTU (`-m`).
    pub mtu: Mtu,
    /// Receives kept posted (`-r`).
    pub rx_depth: u32,
    /// Exchanges (`-n`).
    pub iters: u32,
    /// Service level (`-l`).
    pub sl: u8,
    /// Validate the buffer (`-c`).
    pub validate: bool,
    /// Sleep when idle (`-e`, rc_pingpong's "sleep on CQ events"): block on the backend's
    /// descriptor instead of busy-polling, as the default does (like rc_pingpong's
    /// `ibv_poll_cq` loop).
    pub events: bool,
    /// Backend.
    pub backend: BackendKind,
    /// Capture file.
    pub pcap: Option<std::path::PathBuf>,
    /// Fault injection on received frames.
    pub inject: Option<uroce_io::inject::FaultConfig>,
    /// Seed of QPNs, keys and the PSN (`--seed`): `None` (the default) draws it from the
    /// operating system when the run starts ([`uroce_io::random::key_seed`]), so nothing a peer
    /// sees predicts it; `Some` makes the run's key material reproducible.
    pub seed: Option<u64>,
    /// How long the client retries its TCP connection.
    pub connect_timeout: Duration,
    /// Give up when no completion arrives for this long.
    pub stall_timeout: Duration,
    /// Print the engine's, port's and injector's counters to stderr at the end, as `uroce
    /// perf --counters` does ([`crate::perf::counters_report`]).
    pub counters: bool,
    /// Treat `retry_cnt` 7 as "retry forever", as Linux rxe does (`rxe_comp.c`; the engine's
    /// `Quirks::retry_cnt_7_infinite`), instead of the spec's 7 retries (0.54 s of silence at
    /// rc_pingpong's `timeout` 14), e.g. against a peer that may stall (an emulated guest).
    pub retry_forever: bool,
    /// Test hook: flip bit 0 of byte `.1` of outgoing message `.0` (1-based) after it was
    /// filled, i.e. send corrupt data as a faulty peer would, to show the receiver's check.
    pub corrupt_send: Option<(u32, usize)>,
}

impl Default for PingpongConfig {
    /// rc_pingpong's defaults.
    fn default() -> Self {
        PingpongConfig {
            host: None,
            port: oob::DEFAULT_PORT,
            ifname: None,
            local_ip: None,
            gid_index: None,
            size: oob::DEFAULT_SIZE,
            mtu: Mtu::Mtu1024,
            rx_depth: oob::DEFAULT_RX_DEPTH,
            iters: oob::DEFAULT_ITERS,
            sl: oob::DEFAULT_SL,
            validate: false,
            events: false,
            backend: BackendKind::Xdp(Default::default()),
            pcap: None,
            inject: None,
            seed: None,
            connect_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
            counters: false,
            retry_forever: false,
            corrupt_send: None,
        }
    }
}

/// The first invalid byte of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadByte {
    /// Message number (1-based).
    pub message: u32,
    /// Offset in the message.
    pub offset: usize,
    /// What was expected there.
    pub expected: u8,
    /// What arrived.
    pub got: u8,
}

/// What a completed run measured and found.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// This side's address.
    pub local: PingpongDest,
    /// The peer's address.
    pub remote: PingpongDest,
    /// `size * iters * 2`.
    pub bytes: u64,
    /// Microseconds from start to the last completion.
    pub usec: f64,
    /// Pages whose first byte failed rc_pingpong's server check (server with `-c`).
    pub invalid_pages: Vec<usize>,
    /// Messages that failed uroce's byte-for-byte check (`-c`).
    pub bad_messages: u32,
    /// The first invalid byte found.
    pub first_bad: Option<BadByte>,
}

impl Summary {
    /// True when `-c` found nothing wrong.
    pub fn data_ok(&self) -> bool {
        self.invalid_pages.is_empty() && self.bad_messages == 0
    }
}

/// `sysconf(_SC_PAGESIZE)`, as rc_pingpong's `page_size`.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// rc_pingpong's `-c` value for page start `i`: `i / page_size % sizeof(char)`, i.e. 0.
const fn stock_page_byte(i: usize, page: usize) -> u8 {
    (i / page % core::mem::size_of::<u8>()) as u8
}

/// The stock client's buffer with `-c` (`memset 0x7b`, then its page-start bytes), which is
/// also every message it sends: each one is the echo of the previous.
pub fn stock_client_content(buf: &mut [u8], page: usize) {
    buf.fill(oob::BUFFER_FILL);
    for i in (0..buf.len()).step_by(page) {
        buf[i] = stock_page_byte(i, page);
    }
}

/// uroce's `-c` message `k` (1-based): rc_pingpong's page-start bytes, and elsewhere a
/// SplitMix64 byte stream seeded by `k` (different for every message and every offset, so a
/// stale, shifted or truncated message cannot pass).
pub fn fill_message(buf: &mut [u8], k: u32, page: usize) {
    let mut state = 0x7552_6f43_4550_5000u64 ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in buf.chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
    for i in (0..buf.len()).step_by(page) {
        buf[i] = stock_page_byte(i, page);
    }
}

/// rc_pingpong's server check: the pages whose first byte is not what the client wrote.
pub fn stock_check(buf: &[u8], page: usize) -> Vec<usize> {
    (0..buf.len()).step_by(page).filter(|&i| buf[i] != stock_page_byte(i, page)).map(|i| i / page).collect()
}

/// The first byte where `got` differs from `want`.
fn first_diff(message: u32, got: &[u8], want: &[u8]) -> Option<BadByte> {
    got.iter().zip(want).position(|(a, b)| a != b).map(|offset| BadByte {
        message,
        offset,
        expected: want[offset],
        got: got[offset],
    })
}

/// `inet_ntop(AF_INET6, gid)` as glibc prints it (`::a.b.c.d` for IPv4-compatible GIDs, where
/// Rust would print hex groups).
pub fn ntop_gid(gid: &[u8; 16]) -> String {
    let v6 = Ipv6Addr::from(*gid);
    let s = v6.segments();
    if s[..6].iter().all(|&w| w == 0) && s[6] != 0 {
        return format!("::{}", Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]));
    }
    v6.to_string()
}

/// rc_pingpong's address line (`local` or `remote`).
pub fn address_line(local: bool, d: &PingpongDest) -> String {
    let (what, pad) = if local { ("local", " ") } else { ("remote", "") };
    format!(
        "  {what} address: {pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        ntop_gid(&d.gid)
    )
}

/// rc_pingpong's two result lines.
pub fn result_lines(size: u32, iters: u32, usec: f64) -> [String; 2] {
    let bytes = size as u64 * iters as u64 * 2;
    let usec = usec.max(1.0);
    [
        format!("{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec", usec / 1e6, bytes as f64 * 8.0 / usec),
        format!("{iters} iters in {:.2} seconds = {:.2} usec/iter", usec / 1e6, usec / iters.max(1) as f64),
    ]
}

/// The local address: `--local-ip`, or `-g`'s GID of `-d` (rc_pingpong's wording when the
/// index is not there), or the IPv4-mapped one.
fn pick_local_ip(cfg: &PingpongConfig) -> Result<IpAddr> {
    connect::choose_local_ip(cfg.ifname.as_deref(), cfg.local_ip, cfg.gid_index).map_err(|e| match e {
        // `ibv_query_gid` failing: "can't read sgid of index %d".
        connect::GidChoiceError::NoIndex { name, index } => anyhow!("can't read sgid of index {index} ({name})"),
        e => anyhow!(e),
    })
}

/// rc_pingpong's `pp_client_exch_dest` connect, waiting up to `timeout` for the server.
fn connect_tcp(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    connect::connect_tcp(host, port, timeout, || {}).map_err(|e| match e {
        connect::TcpConnectError::Resolve(e) => anyhow!(e).context(format!("resolve {host}")),
        connect::TcpConnectError::Timeout(_) => anyhow!("Couldn't connect to {host}:{port}"),
    })
}

/// The QP and its buffer.
struct Ctx {
    port: Port,
    qpn: u32,
    cq: CqHandle,
    mr: MrInfo,
    size: u32,
}

impl Ctx {
    fn buf(&self) -> &[u8] {
        let m = self.port.device_ref().mr(self.mr.lkey).map_or(&[][..], |m| m.as_slice());
        &m[..(self.size as usize).min(m.len())]
    }

    fn buf_mut(&mut self) -> &mut [u8] {
        let size = self.size as usize;
        match self.port.device().mr_mut(self.mr.lkey) {
            Some(m) => {
                let s = m.as_mut_slice();
                let n = size.min(s.len());
                &mut s[..n]
            }
            None => &mut [],
        }
    }

    fn sge(&self) -> [Sge; 1] {
        [Sge { addr: self.mr.addr, length: self.size, lkey: self.mr.lkey }]
    }

    /// `pp_post_recv`: post `n` receives, return how many went in.
    fn post_recv(&mut self, n: u32) -> u32 {
        let sg = self.sge();
        let qpn = self.qpn;
        let dev = self.port.device();
        (0..n).take_while(|_| dev.post_recv(qpn, &RecvWr { wr_id: RECV_WRID, sg_list: &sg }).is_ok()).count() as u32
    }

    /// `pp_post_send`.
    fn post_send(&mut self) -> Result<()> {
        let sg = self.sge();
        let wr = SendWr {
            wr_id: SEND_WRID,
            sg_list: &sg,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        let qpn = self.qpn;
        self.port.device().post_send(qpn, &wr).map_err(|e| anyhow!("Couldn't post send: {e:?}"))
    }
}

/// Which content a `-c` server expects from its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Not known yet (nothing distinguished the two so far).
    Either,
    /// A stock rc_pingpong client.
    Stock,
    /// A uroce client ([`fill_message`]).
    Uroce,
}

/// The `-c` bookkeeping of one side.
struct Checker {
    page: usize,
    client: bool,
    expect: Expect,
    stock: Vec<u8>,
    want: Vec<u8>,
    bad_messages: u32,
    first_bad: Option<BadByte>,
}

impl Checker {
    fn new(size: usize, client: bool) -> Checker {
        let page = page_size();
        let mut stock = vec![0; size];
        stock_client_content(&mut stock, page);
        Checker { page, client, expect: Expect::Either, stock, want: vec![0; size], bad_messages: 0, first_bad: None }
    }

    /// What message `k` of ours contains (before any test corruption).
    fn ours(&mut self, k: u32) -> &[u8] {
        fill_message(&mut self.want, k, self.page);
        &self.want
    }

    /// Check received message `k` (client: the echo of our message `k`, which carried
    /// `corrupt` if the test hook flipped a bit of it).
    fn check(&mut self, k: u32, got: &[u8], corrupt: Option<(u32, usize)>) {
        let bad = if self.client {
            fill_message(&mut self.want, k, self.page);
            if let Some((m, off)) = corrupt {
                if m == k && off < self.want.len() {
                    self.want[off] ^= 1;
                }
            }
            first_diff(k, got, &self.want)
        } else {
            fill_message(&mut self.want, k, self.page);
            let vs_uroce = first_diff(k, got, &self.want);
            let vs_stock = first_diff(k, got, &self.stock);
            match (self.expect, vs_uroce, vs_stock) {
                (Expect::Either, None, Some(_)) => {
                    self.expect = Expect::Uroce;
                    None
                }
                (Expect::Either, Some(_), None) => {
                    self.expect = Expect::Stock;
                    None
                }
                (Expect::Either, None, None) => None,
                (Expect::Either, Some(u), Some(s)) => Some(if u.offset >= s.offset { u } else { s }),
                (Expect::Uroce, r, _) => r,
                (Expect::Stock, _, r) => r,
            }
        };
        if let Some(b) = bad {
            self.bad_messages += 1;
            self.first_bad.get_or_insert(b);
        }
    }
}

/// Run one side end to end; the address and result lines go to `out`.
pub fn run(cfg: &PingpongConfig, out: &mut dyn Write) -> Result<Summary> {
    run_tapped(cfg, out, None)
}

/// [`run`] with `tap` between the engine and the wire (`uroce fuzz pingpong`).
pub fn run_tapped(
    cfg: &PingpongConfig,
    out: &mut dyn Write,
    tap: Option<Box<dyn uroce_io::tap::Tap>>,
) -> Result<Summary> {
    let local_ip = pick_local_ip(cfg)?;
    let mut port = Port::open(PortConfig {
        ifname: cfg.ifname.clone(),
        local_ip,
        backend: cfg.backend.clone(),
        seed: cfg.seed,
        pcap: cfg.pcap.clone(),
        inject: cfg.inject.clone(),
        tweak: match cfg.retry_forever {
            true => Some(|c: &mut DeviceConfig| c.quirks.retry_cnt_7_infinite = true),
            false => None,
        },
        cc: Default::default(),
    })?;
    port.set_tap(tap);
    let active = port.device_ref().config().active_mtu;
    let mtu = if cfg.mtu > active {
        tracing::warn!(
            asked = cfg.mtu.bytes(),
            active = active.bytes(),
            "path MTU larger than the link carries; using the link's"
        );
        active
    } else {
        cfg.mtu
    };
    let gid_index = port.gid_index();
    let gid = port.device_ref().config().gids[gid_index as usize];

    // pp_init_ctx.
    let size = cfg.size;
    let dev = port.device();
    let pd = dev.alloc_pd();
    let mem = vec![oob::BUFFER_FILL; (size as usize).max(1)].into_boxed_slice();
    let mr = dev.reg_mr(pd, mem, AccessFlags::LOCAL_WRITE).map_err(|e| anyhow!("Couldn't register MR: {e:?}"))?;
    let cq = dev.create_cq(cfg.rx_depth as usize + 1).map_err(|e| anyhow!("Couldn't create CQ: {e:?}"))?;
    let cap = QpCap { max_send_wr: 1, max_recv_wr: cfg.rx_depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qpn = dev
        .create_qp(pd, &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None })
        .map_err(|e| anyhow!("Couldn't create QP: {e:?}"))?;
    connect::to_init(dev, qpn, AccessFlags::NONE).map_err(|e| anyhow!("Failed to modify QP to INIT: {e:?}"))?;
    let psn = dev.random_psn() & 0xff_ffff;
    let mut ctx = Ctx { port, qpn, cq, mr, size };
    let me = PingpongDest { lid: 0, qpn, psn, gid: gid.0 };
    let r = session(cfg, &mut ctx, mtu, gid_index, me, out);
    // The counters also (especially) when the run failed.
    if cfg.counters {
        eprint!("{}", crate::perf::counters_report(&ctx.port));
    }
    r
}

/// rc_pingpong's `main` after `pp_init_ctx`: receives, the exchange, the connection, the
/// ping-pong and the report.
fn session(
    cfg: &PingpongConfig,
    ctx: &mut Ctx,
    mtu: Mtu,
    gid_index: u8,
    me: PingpongDest,
    out: &mut dyn Write,
) -> Result<Summary> {
    let client = cfg.host.is_some();
    let size = cfg.size;
    let mut routs = ctx.post_recv(cfg.rx_depth);
    if routs < cfg.rx_depth {
        bail!("Couldn't post receive ({routs})");
    }
    // The server listens before it prints its address, so the line means "ready".
    let listener = match client {
        true => None,
        false => {
            Some(connect::listen_tcp(cfg.port, true).with_context(|| format!("Couldn't listen to port {}", cfg.port))?)
        }
    };
    writeln!(out, "{}", address_line(true, &me))?;
    out.flush()?;

    let dmac = |peer: &PingpongDest| connect::peer_mac(cfg.ifname.as_deref(), Gid(peer.gid).to_ip());
    let remote = match (&cfg.host, listener) {
        (Some(host), _) => {
            let s = connect_tcp(host, cfg.port, cfg.connect_timeout)?;
            s.set_read_timeout(Some(Duration::from_secs(60))).ok();
            s.set_nodelay(true).ok();
            let peer = oob::client_exchange(&s, &me).context("Couldn't read/write remote address")?;
            drop(s);
            peer
        }
        (None, Some(l)) => {
            let (s, from) = l.accept().context("accept() failed")?;
            drop(l);
            tracing::info!(%from, "pingpong client connected");
            s.set_read_timeout(Some(Duration::from_secs(60))).ok();
            s.set_nodelay(true).ok();
            let (peer, pending) = oob::server_accept(&s).context("Couldn't read remote address")?;
            connect(ctx, cfg, mtu, gid_index, &me, &peer, dmac(&peer)?).context("Couldn't connect to remote QP")?;
            pending.reply(&me).context("Couldn't send/recv local address")?;
            peer
        }
        (None, None) => unreachable!("a server has a listener"),
    };
    writeln!(out, "{}", address_line(false, &remote))?;
    out.flush()?;
    if client {
        connect(ctx, cfg, mtu, gid_index, &me, &remote, dmac(&remote)?)?;
    }

    // The ping-pong (rc_pingpong's main loop and parse_single_wc).
    let mut check = cfg.validate.then(|| Checker::new(size as usize, client));
    let iters = cfg.iters;
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut pending = RECV_WRID;
    let post = |ctx: &mut Ctx, check: &mut Option<Checker>, k: u32| -> Result<()> {
        if let Some(c) = check.as_mut() {
            if client {
                let msg = c.ours(k).to_vec();
                ctx.buf_mut().copy_from_slice(&msg);
            }
        }
        if let Some((m, off)) = cfg.corrupt_send {
            if m == k {
                if let Some(b) = ctx.buf_mut().get_mut(off) {
                    *b ^= 1;
                }
            }
        }
        ctx.post_send()
    };
    if client {
        post(ctx, &mut check, 1)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let mut last_progress = start;
    let mut wc = [WorkCompletion::default(); 2];
    let mut idle = 0u32;
    while rcnt < iters || scnt < iters {
        let n = ctx.port.device().poll_cq(ctx.cq, &mut wc).map_err(|e| anyhow!("poll CQ failed {e:?}"))?;
        if n == 0 {
            if ctx.port.poll()? {
                idle = 0;
            } else {
                idle += 1;
                if client && rcnt == iters && scnt + 1 == iters && last_progress.elapsed() > PEER_GONE_GRACE {
                    // Only the ACK of our last SEND is missing, and the server's last reply has
                    // arrived: rc_pingpong's server sends reply k only after receiving message
                    // k, so message `iters` was delivered. The ACK was lost and the server,
                    // done, has destroyed its QP (retransmissions go unanswered). rc_pingpong
                    // would hang (rxe) or fail with RETRY_EXC_ERR (ConnectX); the data is
                    // complete, so finish and say so.
                    eprintln!(
                        "warning: the ACK of the last SEND was lost and the server has left; its last \
                         reply proves the message arrived"
                    );
                    break;
                }
                if last_progress.elapsed() > cfg.stall_timeout {
                    bail!(
                        "no completion for {:?} (sent {scnt}, received {rcnt} of {iters}): the peer stopped",
                        cfg.stall_timeout
                    );
                }
                if cfg.events && idle > 50 {
                    let cqh = ctx.cq;
                    ctx.port
                        .drive(Duration::from_millis(1), |p| p.device_ref().cq(cqh).is_some_and(|c| !c.is_empty()))?;
                }
            }
            continue;
        }
        last_progress = Instant::now();
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}\nparse WC failed {n}",
                    w.status.as_str(),
                    w.status as u8,
                    w.wr_id as i32
                );
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += ctx.post_recv(cfg.rx_depth - routs);
                        if routs < cfg.rx_depth {
                            bail!("Couldn't post receive ({routs})");
                        }
                    }
                    rcnt += 1;
                    if let Some(c) = check.as_mut() {
                        let got = ctx.buf().to_vec();
                        c.check(rcnt, &got, cfg.corrupt_send);
                    }
                }
                other => bail!("Completion for unknown wr_id {}", other as i32),
            }
            pending &= !w.wr_id;
            if scnt < iters && pending == 0 {
                post(ctx, &mut check, scnt + 1)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_micros() as f64;
    // Our last ACK must leave before the QP goes (the kernel sends it before the completion
    // is visible; the engine queues it): drive the port until it is idle, then stay long
    // enough to answer a retransmission, should that ACK have been lost: the peer retransmits
    // after its ACK timeout (rc_pingpong: 14, 67 ms), so [`LINGER`] covers three of them.
    let linger = Instant::now();
    while ctx.port.poll()? && linger.elapsed() < Duration::from_millis(100) {}
    ctx.port.drive(LINGER, |_| false)?;
    ctx.port.flush_capture();

    for l in result_lines(size, iters, usec) {
        writeln!(out, "{l}")?;
    }
    let mut summary = Summary {
        local: me,
        remote,
        bytes: size as u64 * iters as u64 * 2,
        usec,
        invalid_pages: Vec::new(),
        bad_messages: 0,
        first_bad: None,
    };
    if let Some(c) = check {
        if !client {
            // rc_pingpong's own check, with its output.
            summary.invalid_pages = stock_check(ctx.buf(), c.page);
            for p in &summary.invalid_pages {
                writeln!(out, "invalid data in page {p}")?;
            }
        }
        summary.bad_messages = c.bad_messages;
        summary.first_bad = c.first_bad;
        if let Some(b) = c.first_bad {
            let what = if client { "echo of message" } else { "message" };
            writeln!(
                out,
                "invalid data in {} of {iters} messages; first: {what} {} byte {}: expected 0x{:02x}, got 0x{:02x}",
                c.bad_messages, b.message, b.offset, b.expected, b.got
            )?;
        }
    }
    out.flush()?;
    Ok(summary)
}

/// `pp_connect_ctx`: RTR then RTS.
fn connect(
    ctx: &mut Ctx,
    cfg: &PingpongConfig,
    mtu: Mtu,
    sgid_index: u8,
    me: &PingpongDest,
    peer: &PingpongDest,
    dmac: uroce_wire::EthernetAddress,
) -> Result<()> {
    // rc_pingpong: `if (dest->gid.global.interface_id)` the AH gets a GRH; RoCE needs one.
    if peer.gid[8..].iter().all(|&b| b == 0) {
        bail!(
            "Failed to modify QP to RTR: the peer sent GID {} (no interface id, so rc_pingpong would use no GRH, \
             which RoCE cannot do); give the peer a GID index with -g (e.g. -g 1 on rxe)",
            ntop_gid(&peer.gid)
        );
    }
    // pp_connect_ctx's other values (no remote access, one READ each way, RNR timer 12,
    // timeout 14, retry 7, RNR retry 7) are RcLocal's defaults, which are rc_pingpong's.
    let local = RcLocal {
        sgid_index,
        path_mtu: mtu,
        sq_psn: me.psn,
        hop_limit: oob::HOP_LIMIT,
        sl: cfg.sl,
        ..RcLocal::default()
    };
    let remote = RcRemote { qpn: peer.qpn, psn: peer.psn, gid: Gid(peer.gid), mac: dmac };
    let qpn = ctx.qpn;
    let dev = ctx.port.device();
    connect::to_rtr(dev, qpn, &local, &remote).map_err(|e| anyhow!("Failed to modify QP to RTR: {e:?}"))?;
    connect::to_rts(dev, qpn, &local).map_err(|e| anyhow!("Failed to modify QP to RTS: {e:?}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lines_match_rc_pingpong() {
        let d = PingpongDest {
            lid: 0,
            qpn: 0x11,
            psn: 0x59dfd7,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 6],
        };
        assert_eq!(
            address_line(true, &d),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x59dfd7, GID ::ffff:10.77.0.6"
        );
        assert_eq!(
            address_line(false, &d),
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0x59dfd7, GID ::ffff:10.77.0.6"
        );
        // glibc's inet_ntop forms.
        assert_eq!(ntop_gid(&[0; 16]), "::");
        let mut compat = [0u8; 16];
        compat[12..].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(ntop_gid(&compat), "::10.0.0.1");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(ntop_gid(&one), "::1");
        let ll = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x77, 0, 0x0b];
        assert_eq!(ntop_gid(&ll), "fe80::5054:ff:fe77:b");
    }

    #[test]
    fn result_lines_use_rc_pingpong_arithmetic() {
        // 4096 * 1000 * 2 bytes in 0.5 s.
        let [a, b] = result_lines(4096, 1000, 500_000.0);
        assert_eq!(a, "8192000 bytes in 0.50 seconds = 131.07 Mbit/sec");
        assert_eq!(b, "1000 iters in 0.50 seconds = 500.00 usec/iter");
    }

    #[test]
    fn stock_check_looks_at_page_starts_only() {
        let page = 4096;
        let mut buf = vec![0u8; 9001];
        stock_client_content(&mut buf, page);
        assert_eq!(buf[0], 0);
        assert_eq!(buf[4096], 0);
        assert_eq!(buf[8192], 0);
        assert_eq!(buf[1], 0x7b);
        assert_eq!(buf.iter().filter(|&&b| b == 0).count(), 3);
        assert!(stock_check(&buf, page).is_empty());
        buf[1] = 0; // not a page start: the stock check does not see it
        assert!(stock_check(&buf, page).is_empty());
        buf[8192] = 0x7b;
        assert_eq!(stock_check(&buf, page), vec![2]);
        // A buffer no message reached (the initial 0x7b) fails every page.
        assert_eq!(stock_check(&[0x7b; 9001], page), vec![0, 1, 2]);
    }

    #[test]
    fn uroce_pattern_passes_the_stock_check_and_differs_per_message() {
        let page = 4096;
        let (mut a, mut b) = (vec![0u8; 9001], vec![0u8; 9001]);
        fill_message(&mut a, 1, page);
        fill_message(&mut b, 2, page);
        assert!(stock_check(&a, page).is_empty());
        assert!(a != b);
        // Nearly every non-page-start byte differs between messages.
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 9001 / 64, "{same}");
        let mut stock = vec![0u8; 9001];
        stock_client_content(&mut stock, page);
        assert_ne!(a, stock);
    }

    #[test]
    fn server_check_tells_clients_apart_and_catches_bad_bytes() {
        let page = page_size();
        let size = 5000;
        let mut msg = vec![0u8; size];
        // A stock client: every message is the stock content.
        let mut c = Checker::new(size, false);
        stock_client_content(&mut msg, page);
        for k in 1..=3 {
            c.check(k, &msg, None);
        }
        assert_eq!(c.bad_messages, 0);
        assert_eq!(c.expect, Expect::Stock);
        // ... and then a uroce message is wrong.
        fill_message(&mut msg, 4, page);
        c.check(4, &msg, None);
        assert_eq!(c.bad_messages, 1);
        // A uroce client: message k must be fill_message(k), exactly.
        let mut c = Checker::new(size, false);
        for k in 1..=3 {
            fill_message(&mut msg, k, page);
            c.check(k, &msg, None);
        }
        assert_eq!((c.bad_messages, c.expect), (0, Expect::Uroce));
        fill_message(&mut msg, 3, page); // a stale message
        c.check(4, &msg, None);
        fill_message(&mut msg, 5, page);
        msg[4999] ^= 0x80;
        c.check(5, &msg, None);
        assert_eq!(c.bad_messages, 2);
        assert_eq!(c.first_bad.map(|b| b.message), Some(4));
        // A client without -c (all 0x7b) is neither.
        let mut c = Checker::new(size, false);
        c.check(1, &[0x7b; 5000], None);
        assert_eq!(c.bad_messages, 1);
        assert_eq!(c.first_bad.unwrap().offset, 0);
    }

    #[test]
    fn client_check_compares_the_echo_with_what_was_sent() {
        let page = page_size();
        let mut msg = vec![0u8; 100];
        let mut c = Checker::new(100, true);
        fill_message(&mut msg, 1, page);
        c.check(1, &msg, None);
        assert_eq!(c.bad_messages, 0);
        // We corrupted byte 7 of message 2 on purpose: its echo carries it.
        fill_message(&mut msg, 2, page);
        msg[7] ^= 1;
        c.check(2, &msg, Some((2, 7)));
        assert_eq!(c.bad_messages, 0);
        // An echo that differs from what was sent.
        c.check(3, &msg, None);
        assert_eq!(c.bad_messages, 1);
        // size 1: only the page-start byte, 0.
        let mut c = Checker::new(1, true);
        c.check(1, &[0], None);
        c.check(2, &[0x7b], None);
        assert_eq!(c.bad_messages, 1);
    }
}
