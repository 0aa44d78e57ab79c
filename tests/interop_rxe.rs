//! perftest interop against the real Linux soft-RoCE driver (`rdma_rxe`) in QEMU guests, through
//! the `uroce` CLI: uroce runs in its own network namespace plugged into the interop lab's bridge
//! (`uroce::netns::BridgePort`), like a host with a NIC; the guest runs stock perftest on rxe0.
//!
//! * `<flavour>_perftest_matrix`: every perftest test (write/read/send bw, atomic bw with
//!   FETCH_AND_ADD and CMP_AND_SWAP, write/read/send lat) in both directions (uroce client ->
//!   stock server in the guest; stock client in the guest -> uroce server), RoCEv2 over IPv4, path
//!   MTU 1024, sizes 1, 5000 (odd, multi-MTU) and 65536 (atomics: 8), AF_XDP backend; then
//!   write/read/send bw over the kernel-UDP backend, then at path MTU 4096 (link MTU 9000 on the
//!   guest NIC, tap, bridge and our veth); then the perftest flags that reach the wire or the
//!   exchange, both directions: `-b` (write/read/send bw), `-I 128` (write/send bw, 100 B),
//!   `-o 4` (read bw) and `-l 4` (write bw); then Debian's perftest itself on uroce's side, over
//!   uroce's drop-in `libibverbs.so.1`, against Debian's perftest on rxe: every test both ways
//!   (64 KiB; atomics 8 B), `ib_write_bw -q 4`, and `-c UD` (send bw and lat) and `-c UC`
//!   (write and send, bw and lat) (labels end in `stock-on-uroce`; the
//!   library's `UROCE_PCAP` capture stands in for `--counters` in the frame checks).
//! * `<flavour>_loss`: write/read/send bw both ways with nftables on the bridge ports dropping
//!   1 % then 5 % of UDP/4791 and duplicating 1 %, plus uroce's injector reordering 1 % of what
//!   it receives; both sides' counters are recorded.
//!
//! Every run is checked the same way:
//! * both sides exit 0 (uroce's run and the stock tool's, each under a deadline; a failing uroce
//!   gets the stock side killed at once, a stock side that exited leaves uroce 20 s). A stock
//!   tool that dies of a signal (SIGSEGV, ...) is the peer's bug: it is reported (`PEER CRASH`,
//!   with the guest's dmesg line and the captures kept) and the case runs once more; a run that
//!   failed because the TCG guest's own link died under it (`Guest::link_dead`: it cannot ping
//!   uroce's namespace) runs once more on a fresh guest (at most two per test);
//! * both print perftest's result line with the requested #iterations and finite figures (see
//!   `ix::check_result`: latencies > 0; bandwidth: message rate > 0 and average > 0 from 64 B
//!   on, since perftest prints 2-decimal MB/s and its send_bw server prints a 0.00 peak).
//!   perftest's `ib_read_lat` server prints no result line, and neither does ours: there only
//!   the exit status counts;
//! * the bridge capture of the run (tcpdump on br0) decodes cleanly (`uroce pcap -q`: no bad
//!   ICRC, nothing undecodable), tshark decodes the same RoCE frames in the same order with the
//!   same opcode, destination QP and PSN, and, with nothing on the path, it holds exactly the
//!   frames uroce's port moved; uroce's own `--pcap` holds every frame its port sent and received,
//!   all valid; uroce's engine counted no ICRC error and no malformed frame (`--counters`).
//!
//! uroce runs with `-u 18` (1.07 s local ACK timeout) in the matrix and `-u 16` under loss: see
//! [`MATRIX_QP_TIMEOUT`].
//!
//! Needs root, QEMU, tcpdump, tshark, nft and the guest images (`rxe-compat/interop/`); skips
//! with a printed reason, or fails under `CI=1`. Knobs:
//! * `UROCE_IX_FILTER=a,b`: run only the cases whose label contains `a` or `b` (labels look
//!   like `trixie read_lat r->u 5000B n200 mtu1024 xdp`);
//! * `UROCE_IX_KEEP=1`: keep every run's captures (they are kept anyway when a run failed);
//! * `UROCE_IX_REPORT=F`: append the markdown result table to F.

#[path = "common/ix.rs"]
mod ix;

use ix::Proc;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce::netns::BridgePort;
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, Guest, GuestSpec, Lab};

const GUEST_IP: &str = "10.77.0.11";
const UROCE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 5);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x05];
/// Wall-clock limit of one perftest/uroce side (both are killed after it).
const RUN_LIMIT: u64 = 120;
/// How long uroce may run on once the stock side has exited.
const UROCE_GRACE: Duration = Duration::from_secs(20);
/// uroce's QP timeout (`-u`) in the matrix: 4.096 us * 2^18 = 1.07 s, so 8 tries span 8.6 s.
/// uroce runs in real time while the TCG guests stall for a second or more when the host is
/// busy (seen: rxe silent for 1.1 s mid-run); perftest's default 14 (67 ms, 0.54 s for all 8
/// tries) then ends the run with RETRY_EXC_ERR although nothing is wrong. rxe's own timers run
/// in guest time, so the stock side keeps its default.
const MATRIX_QP_TIMEOUT: u8 = 18;
/// In the loss runs, timeouts recover tail losses, so they stay shorter: 268 ms (2.1 s in all).
const LOSS_QP_TIMEOUT: u8 = 16;
/// rxe's port counters in the guest.
const HW_COUNTERS: &str = "/sys/class/infiniband/rxe0/ports/1/hw_counters";

/// The guests are slow (TCG) and the machine has 2 cores: one flavour's suite at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum T {
    WriteBw,
    ReadBw,
    SendBw,
    AtomicFaa,
    AtomicCas,
    WriteLat,
    ReadLat,
    SendLat,
}

impl T {
    const ALL: [T; 8] =
        [T::WriteBw, T::ReadBw, T::SendBw, T::AtomicFaa, T::AtomicCas, T::WriteLat, T::ReadLat, T::SendLat];

    fn uroce(self) -> &'static str {
        match self {
            T::WriteBw => "write_bw",
            T::ReadBw => "read_bw",
            T::SendBw => "send_bw",
            T::AtomicFaa | T::AtomicCas => "atomic_bw",
            T::WriteLat => "write_lat",
            T::ReadLat => "read_lat",
            T::SendLat => "send_lat",
        }
    }
    fn perftest(self) -> String {
        format!("ib_{}", self.uroce())
    }
    fn extra(self) -> &'static [&'static str] {
        match self {
            T::AtomicFaa => &["-A", "FETCH_AND_ADD"],
            T::AtomicCas => &["-A", "CMP_AND_SWAP"],
            _ => &[],
        }
    }
    fn label(self) -> &'static str {
        match self {
            T::AtomicFaa => "atomic_bw FETCH_AND_ADD",
            T::AtomicCas => "atomic_bw CMP_AND_SWAP",
            t => t.uroce(),
        }
    }
    fn is_bw(self) -> bool {
        !matches!(self, T::WriteLat | T::ReadLat | T::SendLat)
    }
    fn atomic(self) -> bool {
        matches!(self, T::AtomicFaa | T::AtomicCas)
    }
}

/// Who is the client (requester of the test's operations, except send: the sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// uroce client -> stock perftest server in the guest.
    UroceClient,
    /// stock perftest client in the guest -> uroce server.
    GuestClient,
}

impl Dir {
    fn label(self) -> &'static str {
        match self {
            Dir::UroceClient => "u->r",
            Dir::GuestClient => "r->u",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Xdp,
    Udp,
}

impl Backend {
    fn arg(self) -> &'static str {
        match self {
            Backend::Xdp => "xdp",
            Backend::Udp => "udp",
        }
    }
}

#[derive(Clone, Debug)]
struct Case {
    t: T,
    dir: Dir,
    size: u64,
    iters: u64,
    mtu: u32,
    backend: Backend,
    inject: Option<String>,
    /// uroce's `-u` (local ACK timeout 4.096 us * 2^n).
    qp_timeout: u8,
    /// perftest flags given to both sides (`-b`, `-I 128`, ...).
    flags: &'static [&'static str],
    /// uroce's side is Debian's own perftest, unmodified, over uroce's drop-in
    /// `libibverbs.so.1` (`scripts/build-verbs`) instead of `uroce perf`.
    lib: bool,
}

impl Case {
    fn new(t: T, dir: Dir, size: u64, iters: u64) -> Case {
        Case {
            t,
            dir,
            size,
            iters,
            mtu: 1024,
            backend: Backend::Xdp,
            inject: None,
            qp_timeout: MATRIX_QP_TIMEOUT,
            flags: &[],
            lib: false,
        }
    }
    /// The #iterations perftest prints: `-n` times the QPs of `-q`.
    fn printed_iters(&self) -> u64 {
        let qps = self.flags.iter().position(|f| *f == "-q").and_then(|i| self.flags.get(i + 1)?.parse().ok());
        self.iters * qps.unwrap_or(1)
    }

    fn label(&self) -> String {
        let mut s = format!(
            "{} {} {}B n{} mtu{} {}",
            self.t.label(),
            self.dir.label(),
            self.size,
            self.iters,
            self.mtu,
            self.backend.arg()
        );
        if let Some(i) = &self.inject {
            s += &format!(" inject:{i}");
        }
        if !self.flags.is_empty() {
            s += &format!(" {}", self.flags.join(" "));
        }
        if self.lib {
            s += " stock-on-uroce";
        }
        s
    }
}

/// What one passing run measured.
#[derive(Clone, Debug, Default)]
struct Row {
    case: Option<Case>,
    /// uroce's wall time (spawn to exit).
    uroce_secs: f64,
    /// The whole run including capture start/stop and checks.
    total_secs: f64,
    /// uroce's figure: bw average (MB/s) or typical latency (us).
    uroce_fig: Option<f64>,
    /// perftest's figure.
    stock_fig: Option<f64>,
    frames: u64,
    opcodes: String,
    uroce_ctr: BTreeMap<String, u64>,
    rxe_ctr: BTreeMap<String, u64>,
    faults: String,
    /// Frames tcpdump reported lost on the bridge capture.
    tcpdump_drops: u64,
}

/// One flavour's lab: the guest (holding a console shell), uroce's namespace on the bridge.
struct Bench {
    flavour: Flavour,
    guest: Guest,
    port: BridgePort,
    lab: Lab,
    dir: PathBuf,
    seq: u32,
    /// Guests booted so far (a fresh one replaces a guest whose link died).
    boots: u32,
    hw: BTreeMap<String, u64>,
    failures: Vec<String>,
    /// Stock-side crashes (killed by a signal): the peer's defect, reported; the run is retried.
    peer_crashes: Vec<String>,
    rows: Vec<Row>,
    filter: Option<String>,
}

/// Fresh guests one test may boot in place of one whose link died, before it gives up.
const MAX_FRESH_GUESTS: u32 = 2;

/// The guest: an address and a console shell, `n`th of this test (the first is `ix-<flavour>`).
fn guest_spec(flavour: Flavour, n: u32) -> GuestSpec {
    let name = if n == 1 { format!("ix-{flavour}") } else { format!("ix-{flavour}-{n}") };
    GuestSpec::new(flavour).name(&name).addr(&format!("{GUEST_IP}/24")).hold().timeout(Duration::from_secs(3600))
}

/// How a run's error starts when the stock tool died of a signal (see [`crash_signal`]).
const PEER_CRASH: &str = "stock peer crashed";

/// The signal behind a shell exit status of 128+N, when it is a crash. 124 (our `timeout`) and
/// 143 (SIGTERM, our `pkill`) are the harness's own doing.
fn crash_signal(rc: i32) -> Option<&'static str> {
    match rc {
        132 => Some("SIGILL"),
        134 => Some("SIGABRT"),
        135 => Some("SIGBUS"),
        136 => Some("SIGFPE"),
        139 => Some("SIGSEGV"),
        _ => None,
    }
}

/// Splits the console text of a collect command into (perftest output, hw counters, rc).
fn sections(console: &str) -> (String, String, Option<i32>) {
    let (mut out, mut hw, mut rc) = (String::new(), String::new(), None);
    let mut at = 0;
    for line in console.lines() {
        match line.trim() {
            "==OUT==" => at = 1,
            "==HW==" => at = 2,
            l if l.starts_with("==RC==") => {
                rc = l[6..].trim().parse().ok();
                at = 3;
            }
            _ if at == 1 => {
                out.push_str(line);
                out.push('\n');
            }
            _ if at == 2 => {
                hw.push_str(line);
                hw.push('\n');
            }
            _ => {}
        }
    }
    (out, hw, rc)
}

/// Guest shell: wait (polling, with a deadline) for the stock side's rc file, then print its
/// output, rxe's counters and the rc between markers (split so the tty echo does not match).
fn collect_cmd(wait_secs: u64) -> String {
    format!(
        "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt {} ]; do sleep 0.1; i=$((i+1)); done; echo \"==O\"\"UT==\"; \
         cat /tmp/s.out; echo \"==H\"\"W==\"; (cd {HW_COUNTERS} && grep . *); echo \"==R\"\"C==$(cat /tmp/s.rc 2>/dev/null)\"",
        wait_secs * 10
    )
}

impl Bench {
    fn up(flavour: Flavour, name: &str) -> Option<Bench> {
        let test = format!("interop_rxe::{flavour}_{name}");
        if !require_or_skip(&test, &[flavour], true) {
            return None;
        }
        let missing: Vec<&str> = ["tshark", "nft"].into_iter().filter(|t| !have(t)).collect();
        if !missing.is_empty() {
            harness::skip_or_fail(&format!("{test}: needs {missing:?} on PATH"));
            return None;
        }
        let t0 = Instant::now();
        let lab = Lab::new(&test).expect("lab");
        let guest = lab.boot(guest_spec(flavour, 1)).expect("boot");
        // our namespace is named like the lab's, so a killed test's leftovers are swept too
        let ns = format!("{}-u{}", lab.netns(), &flavour.as_str()[..1]);
        #[rustfmt::skip]
        let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_IP, 24), None, 1500, UROCE_MAC)
            .expect("attach uroce's namespace to the lab bridge");
        let boot = guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
        let image = harness::GuestImage::locate(flavour).map(|i| i.describe()).unwrap_or_default();
        eprintln!("[ix] {image}; ready after {boot:?} ({:?} with the lab)", t0.elapsed());
        let dir = std::env::temp_dir().join(format!("uroce-ix-{flavour}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("artifact dir");
        let mut b = Bench {
            flavour,
            guest,
            port,
            lab,
            dir,
            seq: 0,
            boots: 1,
            hw: BTreeMap::new(),
            failures: Vec::new(),
            peer_crashes: Vec::new(),
            rows: Vec::new(),
            filter: std::env::var("UROCE_IX_FILTER").ok().filter(|s| !s.is_empty()),
        };
        b.read_hw();
        Some(b)
    }

    /// rxe's counters now: the baseline of the next run's deltas.
    fn read_hw(&mut self) {
        let (rc, out) = self.console(&format!("(cd {HW_COUNTERS} && grep . *)"), 30);
        assert_eq!(rc, 0, "no rxe hw_counters in the guest:\n{out}");
        self.hw = ix::rxe_counters(&out);
        assert!(self.hw.contains_key("sent_pkts"), "rxe counters: {out}");
    }

    /// The guest's link died (see `Guest::link_dead`): a fresh guest in its place.
    fn fresh_guest(&mut self) {
        self.guest.kill();
        self.boots += 1;
        self.guest = self.lab.boot(guest_spec(self.flavour, self.boots)).expect("boot");
        self.guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
        self.read_hw();
    }

    fn console(&self, cmd: &str, timeout: u64) -> (i32, String) {
        self.guest.console_run(cmd, Duration::from_secs(timeout)).unwrap_or_else(|e| panic!("guest console: {e}"))
    }

    fn wanted(&self, c: &Case) -> bool {
        let label = format!("{} {}", self.flavour, c.label());
        self.filter.as_ref().is_none_or(|f| f.split(',').any(|f| label.contains(f)))
    }

    /// Runs `c`; a failure is recorded (and its artifacts kept), not raised.
    fn run(&mut self, c: &Case, faults: bool) {
        if !self.wanted(c) {
            return;
        }
        let label = format!("{} {}", self.flavour, c.label());
        let t0 = Instant::now();
        let mut result = self.try_run(c, faults);
        if let Err(e) = &result {
            // perftest calibrates its cycle counter against the clock at start-up; in a TCG
            // guest on a loaded host that can fail ("Correlation coefficient r^2 ... < 0.9"),
            // and then it reports 0.00 for a transfer that completed (both sides print the
            // client's figures), or inf for a latency (cycles over a zero clock rate: seen in
            // CI on bookworm's write_lat). The measurement failed, not the transfer: run it once
            // more.
            if e.contains(ix::PERFTEST_UNCLOCKED) && (e.contains(" is 0") || e.contains(" is inf")) {
                eprintln!("[ix] RETRY {label}: perftest's clock calibration failed in the guest (figures 0.00 or inf)");
                result = self.try_run(c, faults);
            } else if e.starts_with(PEER_CRASH) {
                // Stock perftest on rxe died of a signal (seen once in CI: ib_send_bw SIGSEGV
                // under 1 % bridge loss, rxe mid-window, no error completion, every uroce frame
                // valid). That is the peer's bug: it is reported with its dmesg line and the
                // captures, and the case runs once more, since uroce's part was not measured.
                let first = e.lines().next().unwrap_or_default().to_string();
                eprintln!("[ix] RETRY {label}: {first}");
                self.peer_crashes.push(format!("{label}: {first}"));
                result = self.try_run(c, faults);
            } else if self.boots <= MAX_FRESH_GUESTS {
                // the guest's own link may have died under the run (TCG), which says nothing
                // of either side: on a fresh guest, the same run once more
                if let Some(why) = self.guest.link_dead(IpAddr::V4(UROCE_IP)) {
                    eprintln!("[ix] RETRY {label}: the guest's link is dead ({why}); a fresh guest");
                    self.fresh_guest();
                    result = self.try_run(c, faults);
                }
            }
        }
        match result {
            Ok(mut row) => {
                row.total_secs = t0.elapsed().as_secs_f64();
                eprintln!(
                    "[ix] PASS {label}: {:.1}s (uroce {:.1}s) uroce {:?} stock {:?} frames {} [{}]{}{}",
                    row.total_secs,
                    row.uroce_secs,
                    row.uroce_fig,
                    row.stock_fig,
                    row.frames,
                    row.opcodes,
                    notes(&row),
                    if row.faults.is_empty() { String::new() } else { format!(" faults {}", row.faults) }
                );
                self.rows.push(row);
            }
            Err(e) => {
                eprintln!("[ix] FAIL {label} after {:.1}s: {e}", t0.elapsed().as_secs_f64());
                self.failures.push(format!("{label}: {}", e.lines().next().unwrap_or_default()));
            }
        }
    }

    fn uroce_args(&self, c: &Case, pcap: &Path) -> Vec<String> {
        if c.lib {
            return self.stock_on_uroce_args(c, pcap);
        }
        let mut a: Vec<String> = vec![ix::BIN.into(), "perf".into(), c.t.uroce().into()];
        if c.dir == Dir::UroceClient {
            a.push(GUEST_IP.into());
        }
        a.extend(["-d", "eth0", "-n"].map(String::from));
        a.push(c.iters.to_string());
        if !c.t.atomic() {
            a.extend(["-s".into(), c.size.to_string()]);
        }
        a.extend(["-m".into(), c.mtu.to_string(), "--backend".into(), c.backend.arg().into()]);
        a.extend(["-u".into(), c.qp_timeout.to_string()]);
        a.extend(["--no-progress", "--counters", "--seed"].map(String::from));
        a.push((0x1c5eed + self.seq as u64).to_string());
        a.extend(c.t.extra().iter().map(|s| s.to_string()));
        a.extend(c.flags.iter().map(|s| s.to_string()));
        if let Some(i) = &c.inject {
            a.extend(["--inject".into(), i.clone()]);
        }
        // uroce's own view too, for diagnosis (the bridge capture is what is checked)
        a.extend(["--pcap".into(), pcap.display().to_string()]);
        a
    }

    /// perftest's arguments for `c` on device `dev` (the peer's address last, for a client).
    fn perftest_args(c: &Case, dev: &str, peer: Option<String>) -> Vec<String> {
        let mut a: Vec<String> = vec![c.t.perftest()];
        a.extend(["-d", dev, "-x", "1", "-F", "-m"].map(String::from));
        a.extend([c.mtu.to_string(), "-n".into(), c.iters.to_string()]);
        if !c.t.atomic() {
            a.extend(["-s".into(), c.size.to_string()]);
        }
        a.extend(c.t.extra().iter().chain(c.flags).map(|e| e.to_string()));
        a.extend(peer);
        a
    }

    fn perftest_cmd(&self, c: &Case) -> String {
        Self::perftest_args(c, "rxe0", (c.dir == Dir::GuestClient).then(|| UROCE_IP.to_string())).join(" ")
    }

    /// Debian's perftest on uroce's device (`uroce_eth0`; GID 1 is the IPv4-mapped address, as
    /// on rxe), through `env` so the library path, its capture and the rxe quirk that stands in
    /// for `-u`'s patience reach it (`retry_cnt` 7 retries forever, as rxe reads it).
    fn stock_on_uroce_args(&self, c: &Case, pcap: &Path) -> Vec<String> {
        let dir = ix::verbs_dir().map(|d| d.display().to_string()).unwrap_or_else(|| "target/verbs".into());
        let mut a: Vec<String> = vec![
            "env".into(),
            format!("LD_LIBRARY_PATH={dir}"),
            "UROCE_QUIRKS=retry_cnt_7_infinite".into(),
            format!("UROCE_PCAP={}", pcap.display()),
        ];
        a.extend(Self::perftest_args(c, "uroce_eth0", (c.dir == Dir::UroceClient).then(|| GUEST_IP.to_string())));
        a
    }

    fn try_run(&mut self, c: &Case, faults: bool) -> Result<Row, String> {
        self.seq += 1;
        let tag = format!(
            "{:03}-{}-{}-{}-{}",
            self.seq,
            c.t.label().replace(' ', "_"),
            c.dir.label().replace("->", ""),
            c.size,
            c.mtu
        );
        let bridge_pcap = self.dir.join(format!("{tag}.pcap"));
        let own_pcap = self.dir.join(format!("{tag}.uroce.pcap"));
        let cap =
            ix::Tcpdump::start(self.lab.netns(), harness::BRIDGE, &bridge_pcap, "udp port 4791 or tcp port 18515")?;
        let args = self.uroce_args(c, &own_pcap);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let pt = self.perftest_cmd(c);
        // The stock side runs in the background in the guest (its exit status goes to a file);
        // a uroce server listens before the stock client starts. If uroce fails, the stock
        // side is killed at once instead of waiting for its `timeout`.
        let background = |b: &Bench| -> Result<(), String> {
            let start = format!(
                "rm -f /tmp/s.out /tmp/s.rc; (timeout {RUN_LIMIT} {pt} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true"
            );
            match b.console(&start, 30) {
                (0, _) => Ok(()),
                (rc, out) => Err(format!("starting `{pt}` in the guest: rc {rc}\n{out}")),
            }
        };
        let done = match c.dir {
            Dir::UroceClient => {
                background(self)?;
                // `uroce perf` retries its connection; Debian's perftest does not.
                if c.lib && self.console(ix::GUEST_WAIT_LISTEN, 60).0 != 0 {
                    return Err(format!("the stock server in the guest is not listening: `{pt}`"));
                }
                let p = Proc::spawn_in(&self.port.ns, &argv);
                self.wait_uroce(p)
            }
            Dir::GuestClient => {
                let mut p = Proc::spawn_in(&self.port.ns, &argv);
                let pid = p.pid();
                if !ix::poll_until(Duration::from_secs(30), || ix::listening(pid, 18515) || !p.running()) {
                    return Err(format!("uroce server not listening after 30 s:\n{}", p.wait(Duration::ZERO).text()));
                }
                background(self)?;
                self.wait_uroce(p)
            }
        };
        if !done.ok() {
            self.console(&format!("pkill -f {} ; true", c.t.perftest()), 30);
        }
        let (_, console) = self.console(&collect_cmd(RUN_LIMIT + 15), RUN_LIMIT + 60);
        let (_, tcpdump_drops) = cap.stop()?;
        let (stock_out, hw, stock_rc) = sections(&console);
        let hw_now = ix::rxe_counters(&hw);
        let rxe_ctr = ix::delta(&hw_now, &self.hw);
        if !hw_now.is_empty() {
            self.hw = hw_now;
        }
        let diag = |what: String| -> String {
            let _ = std::fs::write(self.dir.join(format!("{tag}.uroce.txt")), done.text());
            let _ = std::fs::write(self.dir.join(format!("{tag}.stock.txt")), &console);
            format!(
                "{what}\n=== uroce {}\n{}\n=== stock: {pt}\n{console}\n=== rxe counters: {}\n=== artifacts in {}",
                argv.join(" "),
                done.text(),
                ix::kv(&rxe_ctr),
                self.dir.display()
            )
        };
        if let Some(sig) = stock_rc.and_then(crash_signal) {
            let (_, dmesg) = self.console("dmesg | grep -E 'segfault|traps:|general protection|Code:' | tail -n 4", 30);
            let dmesg: Vec<&str> = dmesg.lines().filter(|l| !l.contains("grep -E")).map(str::trim).collect();
            let _ = std::fs::write(self.dir.join(format!("{tag}.dmesg.txt")), dmesg.join("\n"));
            return Err(diag(format!(
                "{PEER_CRASH}: {} died of {sig}; guest dmesg: {}",
                c.t.perftest(),
                dmesg.join(" | ")
            )));
        }
        if !done.ok() {
            return Err(diag(format!("uroce exited {:?} after {:.1}s", done.status, done.elapsed.as_secs_f64())));
        }
        if stock_rc != Some(0) {
            return Err(diag(format!("stock {} exited {stock_rc:?}", c.t.perftest())));
        }
        // (the library prints no counters: its capture stands in for the port's count below)
        let uroce_ctr = if c.lib { BTreeMap::new() } else { ix::uroce_counters(&done.stderr) };
        for k in ["engine.icrc_err", "engine.malformed_pkts"] {
            if uroce_ctr.get(k).copied().unwrap_or(0) != 0 {
                return Err(diag(format!("uroce counted {k} = {}", uroce_ctr[k])));
            }
        }
        if !c.lib && !uroce_ctr.contains_key("port.rx_frames") {
            return Err(diag("no --counters output from uroce".into()));
        }
        // Result lines. perftest's read_lat server prints no table (it only answers READs),
        // and ours does the same.
        let read_lat_server = |side_is_server: bool| c.t == T::ReadLat && side_is_server;
        let mut figs = [None, None];
        for (i, (who, out, server)) in
            [("uroce", &done.stdout, c.dir == Dir::GuestClient), ("stock", &stock_out, c.dir == Dir::UroceClient)]
                .into_iter()
                .enumerate()
        {
            if read_lat_server(server) {
                if ix::result_line(out, c.size).is_some() {
                    return Err(diag(format!("{who} read_lat server printed a result line")));
                }
                continue;
            }
            let size = if c.t.atomic() { 8 } else { c.size };
            let r = ix::result_line(out, size).ok_or_else(|| diag(format!("{who}: no result line for {size} B")))?;
            ix::check_result(&r, c.printed_iters(), c.t.is_bw()).map_err(|e| diag(format!("{who}: {e}: {r:?}")))?;
            // bw: average; lat: typical
            figs[i] = Some(if c.t.is_bw() { r.figures[1] } else { r.figures[2] });
        }
        // uroce's own capture: every frame its port moved (sent and received), all valid
        let (own, bad, undecodable) = ix::quick_check(&own_pcap).map_err(|e| diag(format!("uroce's capture: {e}")))?;
        let port_frames = match c.lib {
            true => own,
            false => uroce_ctr["port.rx_frames"] + uroce_ctr.get("port.tx_frames").copied().unwrap_or(0),
        };
        if own != port_frames || bad != 0 || undecodable != 0 {
            return Err(diag(format!(
                "uroce's capture: {own} RoCE frames (icrc_bad {bad}, undecodable {undecodable}), its port moved {port_frames}"
            )));
        }
        // The bridge capture: at least one request per iteration crossed (two for ping-pong
        // latency), uroce pcap and tshark agree frame by frame; with no faults on the path and
        // nothing lost by tcpdump, it holds exactly the frames uroce's port moved.
        let min = if matches!(c.t, T::WriteLat | T::SendLat) { 2 * c.iters } else { c.iters };
        let check = ix::check_capture(&bridge_pcap, min.saturating_sub(tcpdump_drops))
            .map_err(|e| diag(format!("bridge capture: {e}")))?;
        let clean_path = !faults && c.inject.is_none();
        if clean_path && tcpdump_drops == 0 && check.roce != port_frames {
            return Err(diag(format!("the bridge saw {} RoCE frames, uroce's port moved {port_frames}", check.roce)));
        }
        if std::env::var_os("UROCE_IX_KEEP").is_none() {
            let _ = std::fs::remove_file(&bridge_pcap);
            let _ = std::fs::remove_file(&own_pcap);
        }
        Ok(Row {
            case: Some(c.clone()),
            uroce_secs: done.elapsed.as_secs_f64(),
            total_secs: 0.0,
            uroce_fig: figs[0],
            stock_fig: figs[1],
            frames: check.roce,
            opcodes: check.summary(),
            uroce_ctr,
            rxe_ctr,
            faults: String::new(),
            tcpdump_drops,
        })
    }

    /// Waits for uroce's side of a run. While it runs, the guest is asked every 2 s whether the
    /// stock side has exited; once it has, uroce gets [`UROCE_GRACE`] to finish (a peer that
    /// crashed would otherwise leave it waiting for the whole [`RUN_LIMIT`]).
    fn wait_uroce(&self, mut p: Proc) -> ix::Done {
        let deadline = Instant::now() + Duration::from_secs(RUN_LIMIT);
        let stock_exited = || self.console("test -s /tmp/s.rc", 30).0 == 0;
        let mut next_ask = Instant::now() + Duration::from_secs(2);
        let grace_from = loop {
            if !p.running() || Instant::now() >= deadline {
                break None;
            }
            if Instant::now() >= next_ask {
                if stock_exited() {
                    break Some(Instant::now());
                }
                next_ask = Instant::now() + Duration::from_secs(2);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let limit = match grace_from {
            Some(t) => (t + UROCE_GRACE).min(deadline),
            None => deadline,
        };
        p.wait(limit.saturating_duration_since(Instant::now()))
    }

    /// Sets the link MTU of the guest NIC, its tap, the bridge and both ends of our veth.
    fn link_mtu(&self, mtu: u32) -> String {
        let m = mtu.to_string();
        let ip = |args: &[&str]| {
            let o = std::process::Command::new("ip").args(args).output().expect("ip");
            assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        let (rc, out) = self.console(&format!("ip link set dev eth0 mtu {m} && ibv_devinfo -d rxe0 | grep -i mtu"), 60);
        assert_eq!(rc, 0, "guest MTU {m}:\n{out}");
        let lab = self.lab.netns();
        ip(&["-n", lab, "link", "set", "dev", self.guest.tap(), "mtu", &m]);
        ip(&["-n", lab, "link", "set", "dev", &self.port.bridge_side, "mtu", &m]);
        ip(&["-n", lab, "link", "set", "dev", harness::BRIDGE, "mtu", &m]);
        ip(&["-n", &self.port.ns, "link", "set", "dev", &self.port.ifname, "mtu", &m]);
        out
    }

    /// Prints the markdown rows and fails if any run failed; removes the artifacts if none did.
    fn finish(self, what: &str, t0: Instant) {
        let mut md = String::from(
            "| flavour | test | dir | bytes | iters | MTU | backend | inject | uroce s | run s | uroce result | stock result \
             | RoCE frames | counters (non-routine) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let _ = writeln!(md, "{}", md_row(self.flavour, r));
        }
        eprintln!(
            "[ix] {} {what}: {} passed, {} failed, {:.0}s\n{md}",
            self.flavour,
            self.rows.len(),
            self.failures.len(),
            t0.elapsed().as_secs_f64()
        );
        for crash in &self.peer_crashes {
            let _ = writeln!(md, "\nPeer crash (run retried): {crash}");
            eprintln!("[ix] PEER CRASH {crash} (artifacts kept in {})", self.dir.display());
        }
        if let Some(f) = std::env::var_os("UROCE_IX_REPORT") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).expect("report file");
            let _ = f.write_all(md.as_bytes());
        }
        if self.failures.is_empty() {
            if std::env::var_os("UROCE_IX_KEEP").is_none() && self.peer_crashes.is_empty() {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        } else {
            panic!(
                "{} {what}: {} of {} runs failed (artifacts in {}):\n  {}",
                self.flavour,
                self.failures.len(),
                self.failures.len() + self.rows.len(),
                self.dir.display(),
                self.failures.join("\n  ")
            );
        }
    }
}

/// Counters worth a note: anything about loss, order or errors, from either side.
fn notes(r: &Row) -> String {
    const QUIET: [&str; 7] =
        ["sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs", "ack_deferred", "rx_frames", "tx_frames"];
    let pick = |m: &BTreeMap<String, u64>| {
        m.iter()
            .filter(|(k, v)| {
                let n = k.rsplit('.').next().unwrap_or(k);
                **v != 0
                    && !QUIET.contains(&n)
                    && !k.starts_with("port.idle")
                    && !k.starts_with("inject.processed")
                    && !k.starts_with("inject.delivered")
            })
            .map(|(k, v)| format!("{}={v}", k.trim_start_matches("engine.")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (u, x) = (pick(&r.uroce_ctr), pick(&r.rxe_ctr));
    let mut s = String::new();
    if r.tcpdump_drops > 0 {
        s += &format!(" tcpdump-lost={}", r.tcpdump_drops);
    }
    if !u.is_empty() {
        s += &format!(" uroce[{u}]");
    }
    if !x.is_empty() {
        s += &format!(" rxe[{x}]");
    }
    s
}

fn md_row(f: Flavour, r: &Row) -> String {
    let c = r.case.as_ref().expect("case");
    let fig = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let unit = if c.t.is_bw() { "MB/s" } else { "us" };
    format!(
        "| {f} | {}{} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} {unit} | {} {unit} | {} | {} |",
        c.t.label(),
        if c.flags.is_empty() { String::new() } else { format!(" {}", c.flags.join(" ")) },
        c.dir.label(),
        if c.t.atomic() { 8 } else { c.size },
        c.iters,
        c.mtu,
        c.backend.arg(),
        c.inject.as_deref().unwrap_or("-"),
        r.uroce_secs,
        r.total_secs,
        fig(r.uroce_fig),
        fig(r.stock_fig),
        r.frames,
        format!("{}{}", r.faults, notes(r)).trim()
    )
}

fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Iterations per test and size: as many as TCG rxe finishes in a few seconds.
fn iters(t: T, size: u64) -> u64 {
    match (t.is_bw(), size) {
        (true, s) if s >= 65536 => 200,
        (true, s) if s >= 4096 => 300,
        (true, _) => 1000,
        (false, s) if s >= 65536 => 100,
        (false, _) => 200,
    }
}

fn matrix(flavour: Flavour) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let Some(mut b) = Bench::up(flavour, "perftest_matrix") else { return };
    for t in T::ALL {
        let sizes: &[u64] = if t.atomic() { &[8] } else { &[1, 5000, 65536] };
        for &size in sizes {
            for dir in [Dir::UroceClient, Dir::GuestClient] {
                b.run(&Case::new(t, dir, size, iters(t, size)), false);
            }
        }
    }
    for t in [T::WriteBw, T::ReadBw, T::SendBw] {
        for dir in [Dir::UroceClient, Dir::GuestClient] {
            b.run(&Case { backend: Backend::Udp, ..Case::new(t, dir, 5000, iters(t, 5000)) }, false);
        }
    }
    // The perftest flags that change what crosses the wire or the exchange: -b (both sides
    // send; the barrier moves before the traffic, both reports are real), -I (inline sends;
    // rxe's perftest disables its own inline, "Device not recognized"), -o (advertised
    // outstanding reads: the requester's max_rd_atomic), -l (post lists).
    let flagged: [(T, u64, &'static [&'static str]); 7] = [
        (T::WriteBw, 16384, &["-b"]),
        (T::ReadBw, 16384, &["-b"]),
        (T::SendBw, 16384, &["-b"]),
        (T::WriteBw, 100, &["-I", "128"]),
        (T::SendBw, 100, &["-I", "128"]),
        (T::ReadBw, 16384, &["-o", "4"]),
        (T::WriteBw, 5000, &["-l", "4"]),
    ];
    for (t, size, flags) in flagged {
        for dir in [Dir::UroceClient, Dir::GuestClient] {
            b.run(&Case { flags, ..Case::new(t, dir, size, iters(t, size)) }, false);
        }
    }
    // Debian's perftest itself on uroce's side, over uroce's libibverbs.so.1, against Debian's
    // perftest on rxe: every test both ways, and several QPs.
    for t in T::ALL {
        let size = if t.atomic() { 8 } else { 65536 };
        for dir in [Dir::UroceClient, Dir::GuestClient] {
            b.run(&Case { lib: true, ..Case::new(t, dir, size, iters(t, size)) }, false);
        }
    }
    for dir in [Dir::UroceClient, Dir::GuestClient] {
        b.run(&Case { lib: true, flags: &["-q", "4"], ..Case::new(T::WriteBw, dir, 65536, 100) }, false);
    }
    // The same over UD (datagrams of the MTU) and UC: no flow control there, so at most
    // perftest's receive depth (512) of SENDs, every receive posted before the first arrives.
    // UC SENDs of one packet: 64 KiB ones from uroce (80-110 MB/s) outrun rxe in the TCG guest,
    // which loses packets of them; a UC message that loses one is dropped (IBTA; no retry), and
    // perftest's server then waits for it forever (seen on both kernels). WRITEs are not
    // counted by the receiver, so 64 KiB is fine there.
    let unreliable: [(T, u64, &'static [&'static str]); 6] = [
        (T::SendBw, 1024, &["-c", "UD"]),
        (T::SendLat, 1024, &["-c", "UD"]),
        (T::WriteBw, 65536, &["-c", "UC"]),
        (T::SendBw, 1024, &["-c", "UC"]),
        (T::WriteLat, 2, &["-c", "UC"]),
        (T::SendLat, 2, &["-c", "UC"]),
    ];
    for (t, size, flags) in unreliable {
        for dir in [Dir::UroceClient, Dir::GuestClient] {
            b.run(&Case { lib: true, flags, ..Case::new(t, dir, size, iters(t, size).min(500)) }, false);
        }
    }
    let mtu4096: Vec<Case> = [T::WriteBw, T::ReadBw, T::SendBw]
        .into_iter()
        .flat_map(|t| {
            [Dir::UroceClient, Dir::GuestClient].map(|dir| Case { mtu: 4096, ..Case::new(t, dir, 10000, 300) })
        })
        .filter(|c| b.wanted(c))
        .collect();
    if !mtu4096.is_empty() {
        let devinfo = b.link_mtu(9000);
        assert!(devinfo.contains("4096"), "rxe0's active MTU did not follow the link MTU:\n{devinfo}");
        for c in &mtu4096 {
            b.run(c, false);
        }
    }
    b.finish("perftest matrix", t0);
}

fn loss(flavour: Flavour) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let Some(mut b) = Bench::up(flavour, "loss") else { return };
    let ports = [b.guest.tap().to_string(), b.port.bridge_side.clone()];
    let ns = b.lab.netns().to_string();
    let mut seed = 1;
    for drop in [1, 5] {
        for t in [T::WriteBw, T::ReadBw, T::SendBw] {
            for dir in [Dir::UroceClient, Dir::GuestClient] {
                let c = Case {
                    inject: Some(format!("reorder=0.01,seed={seed}")),
                    qp_timeout: LOSS_QP_TIMEOUT,
                    ..Case::new(t, dir, 16384, 200)
                };
                seed += 1;
                if !b.wanted(&c) {
                    continue;
                }
                ix::set_faults(&ns, [&ports[0], &ports[1]], drop, 1).expect("nft rules");
                let n = b.rows.len();
                b.run(&c, true);
                let counts = ix::fault_counts(&ns);
                let txt = counts
                    .iter()
                    .map(|(p, d, u)| {
                        let who = if *p == ports[0] { "from-rxe" } else { "from-uroce" };
                        format!("{who}: drop {d} dup {u}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                eprintln!("[ix]   bridge {drop}% drop / 1% dup: {txt}");
                if let Some(r) = b.rows.get_mut(n) {
                    r.faults = format!("bridge drop {drop}% dup 1% ({txt});");
                }
            }
        }
    }
    ix::clear_faults(&ns).expect("nft cleanup");
    b.finish("loss", t0);
}

#[test]
fn bookworm_perftest_matrix() {
    matrix(Flavour::Bookworm);
}

#[test]
fn trixie_perftest_matrix() {
    matrix(Flavour::Trixie);
}

#[test]
fn bookworm_loss() {
    loss(Flavour::Bookworm);
}

#[test]
fn trixie_loss() {
    loss(Flavour::Trixie);
}
