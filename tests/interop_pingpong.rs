//! `uroce pingpong` against the stock `ibv_rc_pingpong` on the real Linux soft-RoCE driver
//! (`rdma_rxe`) in QEMU guests, through the built binary: uroce runs in its own network
//! namespace plugged into the interop lab's bridge (`uroce::netns::BridgePort`, 10.77.0.6) like
//! a host with a NIC; the guest (10.77.0.21) runs rdma-core's tool on rxe0 (bookworm: rdma-core
//! 44; trixie: 56.1).
//!
//! `<flavour>_pingpong`, for each case both ways — stock server in the guest ← `uroce pingpong`
//! client, and `uroce pingpong` server ← stock client in the guest — all with `-c` on both
//! sides, path MTU 1024 (rc_pingpong's default; the guest's link MTU is 1500):
//!
//! * sizes 1, 4096 and 9001 (odd, 9 packets) over AF_XDP with RoCEv2/IPv4 GIDs (`-g 1` in the
//!   guest); 4096 over the kernel-UDP backend; 4096 with IPv6 GIDs (ULA addresses; the TCP
//!   exchange to a stock server still goes over IPv4: it binds the first `getaddrinfo(NULL,
//!   AI_PASSIVE)` result, 0.0.0.0, and is not reachable over IPv6).
//! * under loss, data still checked: 4096 B x 200 with nftables on the bridge dropping 1 % and
//!   then 5 % of the RoCE frames each way and duplicating 1 %, plus 1 % reordering by uroce's
//!   injector (rxe's ACK of uroce-as-server's last reply is spared: see `Bench::run`).
//! * Checked per run: both sides exit 0; both print rc_pingpong's `local address` / `remote
//!   address` lines, and each one's remote is the other's local (QPN, PSN, GID); both print
//!   `size * iters * 2 bytes in ...` and `iters iters in ...`; nobody prints `invalid data`
//!   (the stock server checks page starts; uroce checks every byte of every message); the
//!   bridge capture decodes cleanly (`uroce pcap -q`: no bad ICRC, nothing undecodable), tshark
//!   agrees frame by frame, and (unless tcpdump reports kernel drops, as on a loaded machine)
//!   it holds at least one packet per MTU of every message each way; uroce's engine counted no
//!   ICRC error or malformed frame.
//! * Debian's `ibv_rc_pingpong` itself on uroce's side, over uroce's drop-in `libibverbs.so.1`
//!   (4096 B x 200, both ways, the same checks but uroce's counters), polling and with `-e` on
//!   both sides (completion channels): an unmodified verbs program on uroce talking to rxe. And
//!   the same with `ibv_uc_pingpong` (4096 B), `ibv_ud_pingpong` (1024 B, the MTU) and
//!   `ibv_srq_pingpong` (4096 B, 16 QPs on one SRQ).
//! * The check can fail: the uroce client flips page-start byte 0 of its last message
//!   (hidden test hook `--debug-corrupt-send N@0`): the stock server must print `invalid data in
//!   page 0` (and, being rc_pingpong, still exit 0) — so the "no invalid data" assertion above
//!   is live.
//!
//! * A TCG guest's own link can die under a run (its virtio-net transmit queue stopped for good
//!   mid-burst once, in a CI run: every run after it failed). After a failed run the guest is
//!   asked to ping uroce's namespace; if it cannot, the run is repeated once on a fresh guest
//!   (at most [`MAX_FRESH_GUESTS`] per flavour), and the log says so. A run that fails with the
//!   guest's link alive fails the test.
//!
//! Needs root, QEMU, tcpdump, tshark and the guest images (`rxe-compat/interop/`); skips with a
//! printed reason, or fails under `CI=1`. Knobs: `UROCE_PP_ITERS` (default 1000, rc_pingpong's
//! default), `UROCE_PP_FILTER=<substring>` runs only the cases whose label contains it,
//! `UROCE_PP_CUT_LINK=<substring>` cuts the guest's link before those cases (the recovery, shown).

#[path = "common/ix.rs"]
mod ix;
#[path = "common/pp.rs"]
mod pp;

use ix::{Done, Proc};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce::netns::BridgePort;
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, Guest, GuestSpec, Lab};

const GUEST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 21);
const GUEST_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x21);
const UROCE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 6);
const UROCE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 6);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x06];
/// rdma-core's RC ping-pong (the default tool).
const RC: &str = "ibv_rc_pingpong";

/// Wall-clock limit of one side of one run (both are killed after it).
const RUN_LIMIT: u64 = 240;

/// Fresh guests one test may boot in place of one whose link died, before it gives up.
const MAX_FRESH_GUESTS: u32 = 2;

/// The guests are slow (TCG) and the machine small: one flavour at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// `uroce pingpong` client -> stock server in the guest.
    UroceClient,
    /// stock client in the guest -> `uroce pingpong` server.
    GuestClient,
}

#[derive(Clone, Debug)]
struct Case {
    dir: Dir,
    size: u64,
    iters: u32,
    backend: &'static str,
    v6: bool,
    /// Flip page-start byte 0 of the uroce client's last message (the check must fire).
    corrupt_last: bool,
    /// Drop this many percent of the RoCE frames on the bridge, both ways (plus 1 %
    /// duplication there and 1 % reordering by uroce's injector); 0: a clean path.
    loss: u32,
    /// uroce's side is Debian's own `ibv_rc_pingpong`, unmodified, over uroce's drop-in
    /// `libibverbs.so.1` (`scripts/build-verbs`) instead of `uroce pingpong`.
    stock_on_uroce: bool,
    /// Both programs sleep on completion channels (`ibv_rc_pingpong -e`) instead of polling.
    events: bool,
    /// The rdma-core program on both sides: `ibv_rc_pingpong`, or (with `stock_on_uroce`)
    /// `ibv_uc_pingpong` / `ibv_ud_pingpong`.
    tool: &'static str,
}

impl Case {
    fn label(&self) -> String {
        format!(
            "{} {}B n{} {} {}{}{}",
            match (self.dir, self.stock_on_uroce) {
                (Dir::UroceClient, false) => "uroce->stock-server",
                (Dir::GuestClient, false) => "stock->uroce-server",
                (Dir::UroceClient, true) => "stock-on-uroce->stock-server",
                (Dir::GuestClient, true) => "stock->stock-on-uroce-server",
            },
            self.size,
            self.iters,
            self.backend,
            if self.v6 { "ipv6" } else { "ipv4" },
            if self.corrupt_last { " corrupt-last" } else { "" },
            if self.loss > 0 { format!(" loss{}%", self.loss) } else { String::new() },
        ) + if self.events { " -e" } else { "" }
            + if self.tool == RC { String::new() } else { format!(" {}", self.tool) }.as_str()
    }
}

/// One flavour's lab. Fields drop in order: the guest and our namespace before the lab.
struct Bench {
    flavour: Flavour,
    guest: Guest,
    port: BridgePort,
    lab: Lab,
    gid_v4: u32,
    gid_v6: u32,
    dir: PathBuf,
    seq: u32,
    /// Guests booted so far (a fresh one replaces a guest whose link died).
    boots: u32,
}

/// The guest: both addresses, a console shell, `n`th of this test (the first is `pp-<flavour>`).
fn guest_spec(flavour: Flavour, n: u32) -> GuestSpec {
    let name = if n == 1 { format!("pp-{flavour}") } else { format!("pp-{flavour}-{n}") };
    GuestSpec::new(flavour)
        .name(&name)
        .addr(&format!("{GUEST_V4}/24"))
        .addr(&format!("{GUEST_V6}/64"))
        .hold()
        // Under TCG on a loaded host the kernel's IO-APIC timer check can fail and panic
        // ("IO-APIC + timer doesn't work!", seen once on bookworm): skip it, as VMs do.
        .kernel_arg("no_timer_check")
        .timeout(Duration::from_secs(3600))
}

fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Splits the console text of the collect command into (stock output, rc).
fn sections(console: &str) -> (String, Option<i32>) {
    let (mut out, mut rc, mut inside) = (String::new(), None, false);
    for line in console.lines() {
        let l = line.trim();
        if l == "==OUT==" {
            inside = true;
        } else if let Some(r) = l.strip_prefix("==RC==") {
            rc = r.trim().parse().ok();
            inside = false;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    (out, rc)
}

/// Guest shell: wait (with a deadline) for the stock side's rc file, then print its output and
/// rc between markers (split in the command so the console's echo does not match).
fn collect_cmd(wait_secs: u64) -> String {
    format!(
        "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt {} ]; do sleep 0.1; i=$((i+1)); done; \
         echo \"==O\"\"UT==\"; cat /tmp/s.out; echo \"==R\"\"C==$(cat /tmp/s.rc 2>/dev/null)\"",
        wait_secs * 10
    )
}

impl Bench {
    fn up(flavour: Flavour) -> Option<Bench> {
        let test = format!("interop_pingpong::{flavour}_pingpong");
        if !require_or_skip(&test, &[flavour], true) {
            return None;
        }
        if !have("tshark") {
            harness::skip_or_fail(&format!("{test}: needs tshark on PATH"));
            return None;
        }
        let t0 = Instant::now();
        let lab = Lab::new(&test).expect("lab");
        let guest = lab.boot(guest_spec(flavour, 1)).expect("boot");
        // named like the lab's namespace, so a killed test's leftovers are swept with it
        let ns = format!("{}-p{}", lab.netns(), &flavour.as_str()[..1]);
        #[rustfmt::skip]
        let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), Some(UROCE_V6), 1500,
                                      UROCE_MAC)
            .expect("attach uroce's namespace to the lab bridge");
        let boot = guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
        let image = harness::GuestImage::locate(flavour).map(|i| i.describe()).unwrap_or_default();
        eprintln!("[pp] {image}; ready after {boot:?} ({:?} with the lab)", t0.elapsed());
        let gid = |ip: IpAddr| guest.gid_index(ip).unwrap_or_else(|| panic!("no GID for {ip}: {:?}", guest.gids()));
        let (gid_v4, gid_v6) = (gid(IpAddr::V4(GUEST_V4)), gid(IpAddr::V6(GUEST_V6)));
        let dir = std::env::temp_dir().join(format!("uroce-pp-{flavour}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("artifact dir");
        Some(Bench { flavour, guest, port, lab, gid_v4, gid_v6, dir, seq: 0, boots: 1 })
    }

    /// The guest's link died (see `Guest::link_dead`): a fresh guest in its place, the same
    /// addresses and GID table.
    fn fresh_guest(&mut self) {
        self.guest.kill();
        self.boots += 1;
        self.guest = self.lab.boot(guest_spec(self.flavour, self.boots)).expect("boot");
        self.guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
        let gid = |ip: IpAddr| self.guest.gid_index(ip);
        assert_eq!(
            (gid(IpAddr::V4(GUEST_V4)), gid(IpAddr::V6(GUEST_V6))),
            (Some(self.gid_v4), Some(self.gid_v6)),
            "a fresh guest, another GID table"
        );
    }

    fn console(&self, cmd: &str, timeout: u64) -> (i32, String) {
        self.guest.console_run(cmd, Duration::from_secs(timeout)).unwrap_or_else(|e| panic!("guest console: {e}"))
    }

    fn stock_cmd(&self, c: &Case) -> String {
        let g = if c.v6 { self.gid_v6 } else { self.gid_v4 };
        let mut s = format!("{} -d rxe0 -g {g} -c -s {} -n {}", c.tool, c.size, c.iters);
        if c.events {
            s += " -e";
        }
        if c.dir == Dir::GuestClient {
            s += &format!(" {}", if c.v6 { IpAddr::V6(UROCE_V6) } else { IpAddr::V4(UROCE_V4) });
        }
        s
    }

    fn uroce_args(&self, c: &Case) -> Vec<String> {
        // A TCG guest on a loaded 2-core host stalls now and then: rxe went silent for 0.8 and
        // 1.2 s in two runs, longer than the 8 x 67 ms rc_pingpong's QP attributes (retry_cnt 7,
        // timeout 14) allow, and uroce's SEND failed with RETRY_EXC_ERR as the spec says it must.
        // rxe itself retries forever at retry_cnt 7, so uroce stands in for rxe here:
        // `--retry-forever`. `-e`: sleep when idle, leaving the guest its CPU (the busy-polling
        // default and the spec's retry count are covered by tests/pingpong_e2e.rs).
        let mut a: Vec<String> =
            ["pingpong", "-d", "eth0", "-e", "--retry-forever", "-c", "--counters", "--backend", c.backend]
                .into_iter()
                .map(String::from)
                .collect();
        a.extend(["-s".into(), c.size.to_string(), "-n".into(), c.iters.to_string()]);
        a.extend(["--local-ip".into(), if c.v6 { UROCE_V6.to_string() } else { UROCE_V4.to_string() }]);
        a.extend(["--seed".into(), (0x99_5eed + self.seq as u64).to_string()]);
        if c.corrupt_last {
            a.extend(["--debug-corrupt-send".into(), format!("{}@0", c.iters)]);
        }
        if c.loss > 0 {
            a.extend(["--inject".into(), format!("reorder=0.01,seed={}", self.seq)]);
        }
        if c.dir == Dir::UroceClient {
            // The stock server listens on IPv4 only (it binds the first `getaddrinfo(NULL,
            // AI_PASSIVE)` result, 0.0.0.0): the exchange goes over IPv4 whatever the GIDs.
            a.push(GUEST_V4.to_string());
        }
        a
    }

    /// Debian's `ibv_rc_pingpong` on uroce's device (`uroce_eth0`; GID 1 is the IPv4-mapped
    /// address, 2 the ULA one: the table rxe builds), through `env` so the library path and
    /// the rxe quirk that stands in for `--retry-forever` reach it.
    fn stock_on_uroce_args(&self, c: &Case) -> Result<Vec<String>, String> {
        let dir = ix::verbs_dir().ok_or("uroce's libibverbs.so.1 is not built (scripts/build-verbs)")?;
        let mut a: Vec<String> = vec![
            "env".into(),
            format!("LD_LIBRARY_PATH={}", dir.display()),
            "UROCE_QUIRKS=retry_cnt_7_infinite".into(),
            c.tool.into(),
            "-d".into(),
            "uroce_eth0".into(),
            "-g".into(),
            if c.v6 { "2" } else { "1" }.into(),
            "-c".into(),
        ];
        a.extend(["-s".into(), c.size.to_string(), "-n".into(), c.iters.to_string()]);
        if c.events {
            a.push("-e".into());
        }
        if c.dir == Dir::UroceClient {
            a.push(GUEST_V4.to_string());
        }
        Ok(a)
    }

    /// Runs `c`; returns a one-line summary, or why it failed (with both sides' output).
    fn run(&mut self, c: &Case) -> Result<String, String> {
        self.seq += 1;
        let pcap = self.dir.join(format!("{:02}.pcap", self.seq));
        let cap = self.lab.capture(&pcap, "udp port 4791").map_err(|e| format!("capture: {e}"))?;
        let fault_ports = [self.guest.tap().to_string(), self.port.bridge_side.clone()];
        if c.loss > 0 {
            // With uroce as the server, rxe's ACK of uroce's last reply is spared: rc_pingpong's
            // client exits once it has that reply, so a lost ACK could never be repeated and no
            // server can tell (rc_pingpong would hang on rxe, fail on ConnectX). Everything else
            // is dropped at random, ACKs included (uroce as the client copes with losing the
            // last one: `uroce::pingpong::PEER_GONE_GRACE`).
            let spare = (c.dir == Dir::GuestClient).then_some(fault_ports[0].as_str());
            ix::set_faults_sparing_acks(self.lab.netns(), [&fault_ports[0], &fault_ports[1]], c.loss, 1, spare)?;
        } else {
            // a failed lossy run returns early: its rules must not outlive it
            ix::clear_faults(self.lab.netns())?;
        }
        let args = if c.stock_on_uroce { self.stock_on_uroce_args(c)? } else { self.uroce_args(c) };
        let mut argv: Vec<&str> = if c.stock_on_uroce { vec![] } else { vec![ix::BIN] };
        argv.extend(args.iter().map(String::as_str));
        let stock = self.stock_cmd(c);
        let t0 = Instant::now();
        let (done, console): (Done, String) = match c.dir {
            Dir::UroceClient => {
                let start = format!(
                    "rm -f /tmp/s.out /tmp/s.rc /tmp/s.pid; (timeout {RUN_LIMIT} {stock} > /tmp/s.out 2>&1 & \
                     echo $! > /tmp/s.pid; wait $!; echo $? > /tmp/s.rc) & true"
                );
                let (rc, out) = self.console(&start, 30);
                if rc != 0 {
                    return Err(format!("starting `{stock}` in the guest: rc {rc}\n{out}"));
                }
                if c.stock_on_uroce {
                    // Debian's client does not retry its connection: wait for the server
                    if self.console(ix::GUEST_WAIT_LISTEN, 60).0 != 0 {
                        return Err(format!(
                            "the stock server in the guest is not listening:\n{}",
                            self.console("cat /tmp/s.out", 30).1
                        ));
                    }
                }
                // the client retries its connection until the stock server listens
                let done = Proc::spawn_in(&self.port.ns, &argv).wait(Duration::from_secs(RUN_LIMIT));
                if !done.ok() {
                    // do not wait for a server that will never hear from us: end it (its
                    // `timeout`, by the PID saved above)
                    self.console("[ -s /tmp/s.pid ] && kill $(cat /tmp/s.pid); true", 30);
                }
                let (_, out) = self.console(&collect_cmd(RUN_LIMIT + 15), RUN_LIMIT + 60);
                (done, out)
            }
            Dir::GuestClient => {
                let mut p = Proc::spawn_in(&self.port.ns, &argv);
                let pid = p.pid();
                if !ix::poll_until(Duration::from_secs(30), || ix::listening(pid, 18515) || !p.running()) {
                    return Err(format!("uroce server not listening after 30 s:\n{}", p.wait(Duration::ZERO).text()));
                }
                let cmd = format!(
                    "rm -f /tmp/s.out /tmp/s.rc; timeout {RUN_LIMIT} {stock} > /tmp/s.out 2>&1; \
                     echo $? > /tmp/s.rc; {}",
                    collect_cmd(5)
                );
                let (_, out) = self.console(&cmd, RUN_LIMIT + 60);
                (p.wait(Duration::from_secs(30)), out)
            }
        };
        let wall = t0.elapsed();
        let mut faults = String::new();
        if c.loss > 0 {
            for (p, d, u) in ix::fault_counts(self.lab.netns()) {
                let who = if p == fault_ports[0] { "from-rxe" } else { "from-uroce" };
                faults += &format!("{who}: dropped {d} duplicated {u}; ");
            }
            ix::clear_faults(self.lab.netns())?;
        }
        let stats = cap.stop().map_err(|e| format!("capture stop: {e}"))?;
        let (stock_out, stock_rc) = sections(&console);
        let diag = |what: String| -> String {
            format!(
                "{what}\n=== uroce {}\n{}\n=== stock: {stock}\n{console}\n=== capture {}",
                args.join(" "),
                done.text(),
                pcap.display()
            )
        };
        if !done.ok() {
            return Err(diag(format!("uroce exited {:?}", done.status)));
        }
        if stock_rc != Some(0) {
            return Err(diag(format!("stock {} exited {stock_rc:?}", c.tool)));
        }
        let (server, client) = match c.dir {
            Dir::UroceClient => (&stock_out, &done.stdout),
            Dir::GuestClient => (&done.stdout, &stock_out),
        };
        if c.corrupt_last {
            // rc_pingpong's own check, in the stock server, must see the flipped page start.
            if !stock_out.lines().any(|l| l.trim_end_matches('\r') == "invalid data in page 0") {
                return Err(diag("the stock server did not report `invalid data in page 0`".into()));
            }
            pp::parse(server).and_then(|_| pp::parse(client)).map_err(diag)?;
        } else {
            pp::check_pair(server, client, c.size, c.iters).map_err(diag)?;
        }
        let ctr = ix::uroce_counters(&done.stderr);
        for k in ["engine.icrc_err", "engine.malformed_pkts"] {
            if ctr.get(k).copied().unwrap_or(0) != 0 {
                return Err(diag(format!("uroce counted {k} = {}", ctr[k])));
            }
        }
        // (a stock binary on uroce's library prints no counters: the capture checks below hold)
        if !c.stock_on_uroce && !ctr.contains_key("port.rx_frames") {
            return Err(diag("no --counters output from uroce".into()));
        }
        // Every frame in the capture must decode the same in uroce and tshark; if tcpdump lost
        // some (a loaded machine), the file cannot hold them all, so the count is not checked.
        // The capture stops once both programs have exited, so the very last frame may still
        // be on its way to it (a UC exchange has no ACK after it to give slack): one short.
        let packets = c.size.div_ceil(1024).max(1);
        let min = if stats.dropped_by_kernel == 0 && c.loss == 0 { 2 * c.iters as u64 * packets - 1 } else { 1 };
        let check = ix::check_capture(&pcap, min).map_err(|e| diag(format!("capture: {e}")))?;
        let _ = std::fs::remove_file(&pcap);
        let parsed = pp::parse(client).map_err(diag)?;
        // Both sides' own words, for the log (libtest shows them with --nocapture).
        eprintln!(
            "[pp] --- uroce {}\n{}{}[pp] --- stock: {stock}\n{}",
            args.join(" "),
            done.stdout,
            done.stderr,
            stock_out.trim_end()
        );
        Ok(format!(
            "{:.1}s wall; client: {} bytes in {:.2} s = {:.2} Mbit/sec, {:.2} usec/iter; {} RoCE frames [{}]{}; \
             uroce retransmitted {}{}",
            wall.as_secs_f64(),
            parsed.bytes,
            parsed.secs,
            parsed.mbit,
            parsed.usec_per_iter,
            check.roce,
            check.summary(),
            if stats.dropped_by_kernel == 0 {
                String::new()
            } else {
                format!(" (tcpdump dropped {})", stats.dropped_by_kernel)
            },
            ctr.get("engine.retransmitted_pkts").copied().unwrap_or(0),
            if c.loss > 0 {
                let k =
                    ["engine.rcvd_seq_err", "engine.out_of_sequence", "engine.duplicate_request", "inject.reordered"];
                let more: Vec<String> = k.iter().filter_map(|k| ctr.get(*k).map(|v| format!("{k}={v}"))).collect();
                format!("; {} bridge {faults}", more.join(" "))
            } else {
                String::new()
            }
        ))
    }
}

fn pingpong(flavour: Flavour) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let Some(mut b) = Bench::up(flavour) else { return };
    let iters: u32 = std::env::var("UROCE_PP_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let filter = std::env::var("UROCE_PP_FILTER").ok().filter(|s| !s.is_empty());
    // cut the guest's link before the runs whose label has this in it (the dead-link recovery)
    let cut_link = std::env::var("UROCE_PP_CUT_LINK").ok().filter(|s| !s.is_empty());
    let mut cases = Vec::new();
    for dir in [Dir::UroceClient, Dir::GuestClient] {
        let case = |size, backend, v6| Case {
            dir,
            size,
            iters,
            backend,
            v6,
            corrupt_last: false,
            loss: 0,
            stock_on_uroce: false,
            events: false,
            tool: RC,
        };
        cases.extend([case(1, "xdp", false), case(4096, "xdp", false), case(9001, "xdp", false)]);
        cases.extend([case(4096, "udp", false), case(4096, "xdp", true)]);
        // Data checked under loss: 1 % and 5 % drops + 1 % duplication on the bridge, 1 %
        // reordering into uroce; both Go-Back-N implementations must recover every message.
        for loss in [1, 5] {
            cases.push(Case { iters: iters.min(200), loss, ..case(4096, "xdp", false) });
        }
    }
    cases.push(Case {
        dir: Dir::UroceClient,
        size: 4096,
        iters: iters.min(100),
        backend: "xdp",
        v6: false,
        corrupt_last: true,
        loss: 0,
        stock_on_uroce: false,
        events: false,
        tool: RC,
    });
    // Debian's ibv_rc_pingpong itself on the host, over uroce's libibverbs.so.1, against
    // Debian's ibv_rc_pingpong on rxe, both ways, polling and sleeping on completion events.
    for dir in [Dir::UroceClient, Dir::GuestClient] {
        for events in [false, true] {
            cases.push(Case {
                dir,
                size: 4096,
                iters: iters.min(200),
                backend: "xdp",
                v6: false,
                corrupt_last: false,
                loss: 0,
                stock_on_uroce: true,
                events,
                tool: RC,
            });
        }
        // ibv_uc_pingpong (unacknowledged SENDs), ibv_ud_pingpong (datagrams of at most the
        // MTU, 1024 on the guest's 1500-byte link; address handles, the GRH area) and
        // ibv_srq_pingpong (16 RC QPs on one SRQ), stock on both sides. A clean path: UC and
        // UD do not recover a lost message, and neither program retries one.
        for (tool, size) in [("ibv_uc_pingpong", 4096), ("ibv_ud_pingpong", 1024), ("ibv_srq_pingpong", 4096)] {
            cases.push(Case {
                dir,
                size,
                iters: iters.min(200),
                backend: "xdp",
                v6: false,
                corrupt_last: false,
                loss: 0,
                stock_on_uroce: true,
                events: false,
                tool,
            });
        }
    }
    let mut failures = Vec::new();
    let mut passed = 0;
    for c in cases.iter().filter(|c| filter.as_ref().is_none_or(|f| c.label().contains(f.as_str()))) {
        let label = format!("{} {}", b.flavour, c.label());
        if cut_link.as_ref().is_some_and(|f| c.label().contains(f.as_str())) {
            // the recovery below, exercised: the guest transmits into nothing from here on
            let out = b.lab.exec_host(&["ip", "link", "set", b.guest.tap(), "down"], Duration::from_secs(10));
            assert!(out.is_ok_and(|o| o.status.success()), "cutting the guest's link");
        }
        let mut result = b.run(c);
        if result.is_err() && b.boots <= MAX_FRESH_GUESTS {
            // a failed run: the guest's own link may have died under it (TCG), which says
            // nothing of either side: on a fresh guest, the same run once more
            if let Some(why) = b.guest.link_dead(IpAddr::V4(UROCE_V4)) {
                eprintln!("[pp] {label}: the guest's link is dead ({why}); a fresh guest, the run again");
                b.fresh_guest();
                result = b.run(c);
            }
        }
        match result {
            Ok(s) => {
                passed += 1;
                eprintln!("[pp] PASS {label}: {s}");
            }
            Err(e) => {
                eprintln!("[pp] FAIL {label}: {e}");
                failures.push(format!("{label}: {}", e.lines().next().unwrap_or_default()));
            }
        }
    }
    eprintln!("[pp] {flavour}: {passed} passed, {} failed, {:.0} s", failures.len(), t0.elapsed().as_secs_f64());
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&b.dir);
    }
    assert!(failures.is_empty(), "{} run(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn bookworm_pingpong() {
    pingpong(Flavour::Bookworm);
}

#[test]
fn trixie_pingpong() {
    pingpong(Flavour::Trixie);
}
