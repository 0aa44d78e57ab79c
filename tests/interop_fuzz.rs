//! A short `uroce fuzz` campaign against the real Linux soft-RoCE driver (`rdma_rxe`, Debian
//! trixie's 6.17 kernel) in a QEMU guest: one `ib_write_bw` connection per round (every other
//! round an `ibv_rc_pingpong` exchange, where rxe's requester gets forged ACKs too), hostile
//! frames mixed into its flow from a round's own seed, and after each round the detectors —
//! the guest's kernel log (`BUG`, `WARNING`, `Oops`, `general protection`, `KASAN`,
//! `refcount_t`, `hung task`, `soft lockup`), whether the guest still answers on its console,
//! whether its perftest exited, and rxe's counters. A round with a finding keeps its record
//! (`injected.pcap`, `wire.pcap`, `fuzz.log`, the kernel lines) and replays with one command
//! (`uroce fuzz write_bw <guest> --fuzz-seed S ...`), and each distinct finding is minimised
//! by delta debugging over its hostile frames, every replay on a fresh guest (a `WARN_ON_ONCE`
//! fires once per boot), down to the `--only` frames that still bring the same signature back;
//! after a finding the campaign goes on with a fresh guest. Finally a clean run must still
//! complete: rxe survived the campaign. Every round runs a liveness probe beside the fuzzed
//! flow (`--probe`: a second connection to its own `ib_write_bw` server on the guest); one that
//! stops completing is a finding. `the_rxe_completer_warn_reproduces_and_minimises` replays the
//! WARN this found in rxe from its recorded seed on every run.
//!
//! uroce's own side must never fail: `uroce fuzz` exits 0 every round (the connection it
//! carries may end: a QP that received an invalid request goes to ERR, as IBTA says).
//! Findings in rxe are reported, not failures of this test. Knobs: `UROCE_FUZZ_ROUNDS` (10),
//! `UROCE_FUZZ_MINIMISE=0` (keep findings unminimised),
//! `UROCE_FUZZ_EVERY` (16), `UROCE_FUZZ_KINDS` (all), `UROCE_FUZZ_FLAVOUR=bookworm` (the 6.1 guest instead),
//! `UROCE_IX_REPORT=F` appends the campaign table to F.
//!
//! Needs root, QEMU and the guest images (`rxe-compat/interop/`); skips with a printed reason,
//! or fails under `CI=1`.

#[path = "common/ix.rs"]
mod ix;

use ix::Proc;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use uroce::netns::BridgePort;
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, Guest, GuestSpec, Lab};

const GUEST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 41);
const UROCE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 8);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x08];
const RUN_LIMIT: u64 = 90;
const HW_COUNTERS: &str = "/sys/class/infiniband/rxe0/ports/1/hw_counters";
/// uroce's side of every round's flow (and of the clean run after), matching `perftest`.
/// The liveness probe's perftest flags (both sides), on its own port.
const PROBE: &str = "-p 18516 -D 5 -s 64 -t 2 -u 18";
/// The guest waits for the probe's server to listen.
const PROBE_WAIT_LISTEN: &str = "i=0; while ! ss -ltn 2>/dev/null | grep -q ':18516 ' && [ $i -lt 300 ]; do \
                                 sleep 0.1; i=$((i+1)); done; ss -ltn | grep -q ':18516 '";
const FLOW: [&str; 10] = ["-d", "eth0", "-m", "1024", "-s", "4096", "-n", "400", "-u", "18"];
/// Kernel log lines that are findings.
const SPLATS: &str = "BUG|WARNING|Oops|general protection|KASAN|refcount_t|hung task|soft lockup|Call Trace";

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn boot(lab: &Lab, flavour: Flavour, n: u32) -> Guest {
    let spec = GuestSpec::new(flavour)
        .name(&format!("fz-{flavour}-{n}"))
        .addr(&format!("{GUEST_V4}/24"))
        .hold()
        .timeout(Duration::from_secs(3600));
    let g = lab.boot(spec).expect("boot");
    g.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    g
}

/// Runs `cmd` on the console; `None` when the guest does not answer (dead, hung).
fn console(g: &Guest, cmd: &str, t: u64) -> Option<(i32, String)> {
    g.console_run(cmd, Duration::from_secs(t)).ok()
}

/// One guest test at a time: TCG guests on a small machine, and timing matters.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The stock server of an `ib_write_bw` round, and of a pingpong round.
const PERFTEST: &str = "ib_write_bw -d rxe0 -x 1 -F -m 1024 -s 4096 -n 400";
const PINGPONG: &str = "ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -n 400 -c";

/// One round's flow: an `ib_write_bw` connection, or (`pp`) an `ibv_rc_pingpong` exchange —
/// both ends send there, so rxe's requester meets forged acknowledgements too — with hostile
/// frames from `seed`.
struct Flow {
    pp: bool,
    seed: u64,
    every: String,
    kinds: Option<String>,
}

impl Flow {
    fn stock(&self) -> &'static str {
        if self.pp {
            PINGPONG
        } else {
            PERFTEST
        }
    }

    /// `uroce fuzz`'s arguments after the program's name.
    fn args(&self) -> Vec<String> {
        let g = GUEST_V4.to_string();
        let mut v: Vec<String> = if self.pp {
            ["fuzz", "pingpong", &g, "-d", "eth0", "-s", "4096", "-n", "400", "-c"].map(String::from).to_vec()
        } else {
            let mut v: Vec<String> = ["fuzz", "write_bw", &g].map(String::from).to_vec();
            v.extend(FLOW.map(String::from));
            v.push("--no-progress".into());
            v
        };
        v.extend(["--fuzz-seed", &self.seed.to_string(), "--every", &self.every].map(String::from));
        v.extend(["--probe".to_string(), format!("write_bw {PROBE}")]);
        if let Some(k) = &self.kinds {
            v.extend(["--kinds".to_string(), k.clone()]);
        }
        v
    }

    /// The round again, one command (against the stock server and the probe's, started on
    /// the guest as below).
    fn replay(&self, only: Option<&[u64]>) -> String {
        let mut a = self.args();
        if let Some(o) = only {
            a.extend(["--only".to_string(), o.iter().map(u64::to_string).collect::<Vec<_>>().join(",")]);
        }
        let quoted: Vec<String> =
            a.iter().map(|x| if x.contains(' ') { format!("\"{x}\"") } else { x.clone() }).collect();
        format!("uroce {}", quoted.join(" "))
    }
}

/// What a round did.
struct Round {
    summary: String,
    /// The probe's state: `alive(...)` or `dead(...)`.
    probe: String,
    /// rxe's counters that moved.
    delta: String,
    finding: Option<String>,
}

impl Round {
    fn field(&self, k: &str) -> Option<String> {
        self.summary.split(&format!("{k}=")).nth(1).map(|s| s.split_whitespace().next().unwrap_or("").to_string())
    }
}

/// Runs `flow` against `guest` from uroce's namespace `ns`, recording into `out`, sending only
/// the hostile frames `only` (all when `None`), then the detectors: the guest's kernel log
/// (between markers: the console also carries the shell's job notices), whether the guest
/// still answers, whether the stock side exited, the liveness probe, rxe's counters.
fn run_round(guest: &Guest, ns: &str, flow: &Flow, out: &std::path::Path, only: Option<&[u64]>) -> Round {
    let (stock, limit) = if flow.pp { (PINGPONG, 30) } else { (PERFTEST, RUN_LIMIT) };
    let counters =
        |g: &Guest| console(g, &format!("(cd {HW_COUNTERS} && grep . *)"), 30).map(|o| ix::rxe_counters(&o.1));
    let before = counters(guest).unwrap_or_default();
    let start = format!(
        "dmesg -c >/dev/null; rm -f /tmp/s.out /tmp/s.rc; (timeout {limit} {stock} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & \
         (timeout {limit} ib_write_bw -d rxe0 -x 1 -F {PROBE} > /tmp/p.out 2>&1) & true"
    );
    assert_eq!(console(guest, &start, 30).map(|o| o.0), Some(0), "start the guest's server");
    assert_eq!(console(guest, ix::GUEST_WAIT_LISTEN, 60).map(|o| o.0), Some(0), "{stock} is not listening");
    assert_eq!(console(guest, PROBE_WAIT_LISTEN, 60).map(|o| o.0), Some(0), "the probe's server is not listening");
    let mut argv: Vec<String> = vec![ix::BIN.to_string()];
    argv.extend(flow.args());
    argv.extend(["--out".to_string(), out.display().to_string()]);
    if let Some(o) = only {
        argv.extend(["--only".to_string(), o.iter().map(u64::to_string).collect::<Vec<_>>().join(",")]);
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let done = Proc::spawn_in(ns, &argv).wait(Duration::from_secs(RUN_LIMIT + 30));
    let summary = done.stdout.lines().find(|l| l.starts_with("uroce-fuzz:")).unwrap_or("").to_string();
    // exit 3: the liveness probe stopped completing (a finding, below)
    let probe_dead = done.status.and_then(|s| s.code()) == Some(3) && summary.contains(" probe=dead(");
    assert!(done.ok() || probe_dead, "seed {}: uroce fuzz itself failed (uroce must not)\n{}", flow.seed, done.text());
    let probe =
        summary.split(" probe=").nth(1).and_then(|s| s.split(") ").next()).map_or("?".to_string(), |p| format!("{p})"));
    let legit = summary.split("legit=").nth(1).unwrap_or("?").to_string();
    let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
                   echo \"==R\"\"C==$(cat /tmp/s.rc 2>/dev/null)\"";
    let finding = match console(guest, collect, RUN_LIMIT + 40) {
        None => Some("the guest stopped answering its console".to_string()),
        Some((_, text)) => {
            let cmd = format!("dmesg | grep -E '{SPLATS}' | head -n 20 > /tmp/k; echo \"==K\"\"0==\"; cat /tmp/k; echo \"==K\"\"1==\"");
            let splat = console(guest, &cmd, 30)
                .map(|o| o.1.split("==K0==").nth(1).and_then(|s| s.split("==K1==").next()).unwrap_or("").to_string())
                .unwrap_or_else(|| "(no answer to dmesg)".to_string());
            if !splat.trim().is_empty() {
                Some(format!("kernel: {}", splat.trim()))
            } else if probe_dead {
                Some(format!("the liveness probe stopped completing: {probe}"))
            } else if (!text.contains("==RC==") || text.contains("==RC==124"))
                && (!flow.pp || legit.starts_with("completed"))
            {
                // (a pingpong server whose peer gave up waits for ever, rc_pingpong having no
                // timeout: a hang only when uroce's side completed)
                Some(format!("the stock {} did not exit (hang)", stock.split(' ').next().unwrap_or("")))
            } else {
                None
            }
        }
    };
    let after = counters(guest).unwrap_or_default();
    Round { summary, probe, delta: ix::kv(&ix::delta(&after, &before)), finding }
}

/// Delta-debugs a finding's hostile frames on fresh guests (rxe's `WARN_ON_ONCE`s fire once
/// per boot): each try boots a new guest and replays the round with `--only` a subset, which
/// reproduces when the same finding signature comes back. `None` when the whole round does not
/// reproduce on a fresh guest. The guest left running is a fresh one.
fn minimise(
    fresh: &mut dyn FnMut() -> Guest,
    guest: &mut Guest,
    ns: &str,
    flow: &Flow,
    dir: &std::path::Path,
    finding: &str,
) -> Option<(Vec<u64>, u32)> {
    let sig = ix::finding_signature(finding);
    let log = std::fs::read_to_string(dir.join("fuzz.log")).unwrap_or_default();
    let sent: Vec<u64> = log.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    let mut tries = 0u32;
    let mut reproduces = |only: Option<&[u64]>| {
        tries += 1;
        guest.kill();
        *guest = fresh();
        let r = run_round(guest, ns, flow, &dir.join(format!("min-{tries}")), only);
        let same = r.finding.as_deref().is_some_and(|f| ix::finding_signature(f) == sig);
        eprintln!("[fuzz]   minimise try {tries} {only:?}: {}", if same { "reproduced" } else { "not reproduced" });
        same
    };
    if sent.is_empty() || !reproduces(None) {
        return None;
    }
    let minimal = uroce::fuzz::ddmin(sent, |s| reproduces(Some(s)));
    Some((minimal, tries))
}

/// The guest flavour (`UROCE_FUZZ_FLAVOUR=bookworm`: 6.1; default trixie's 6.17) and the test's
/// name with it; `None` when the test is skipped.
fn flavour_for(what: &str) -> Option<(Flavour, String)> {
    let flavour = match std::env::var("UROCE_FUZZ_FLAVOUR").as_deref() {
        Ok("bookworm") => Flavour::Bookworm,
        _ => Flavour::Trixie,
    };
    let test = format!("interop_fuzz::{flavour}_{what}");
    require_or_skip(&test, &[flavour], false).then_some((flavour, test))
}

#[test]
fn trixie_fuzz_campaign() {
    let Some((flavour, test)) = flavour_for("fuzz_campaign") else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rounds = env_u64("UROCE_FUZZ_ROUNDS", 10);
    let every = env_u64("UROCE_FUZZ_EVERY", 16).to_string();
    // UROCE_FUZZ_KINDS=unsolicited,...: only these mutation kinds (a finding's reproducer)
    let only_kinds = std::env::var("UROCE_FUZZ_KINDS").ok().filter(|k| !k.is_empty());
    // UROCE_FUZZ_MINIMISE=0: keep findings as found (default: each distinct one minimised)
    let minimise_on = env_u64("UROCE_FUZZ_MINIMISE", 1) != 0;
    let t0 = Instant::now();
    let lab = Lab::new(&test).expect("lab");
    let mut boots = 0;
    let mut guest = boot(&lab, flavour, boots);
    let ns = format!("{}-f{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    eprintln!("[fuzz] {flavour} guest ready ({:?} with the lab)", t0.elapsed());
    let dir = std::env::temp_dir().join(format!("uroce-fuzz-{flavour}-{}", std::process::id()));
    let mut table = String::from("| round | seed | injected (by kind) | rxe's NAKs | legitimate flow | probe | rxe counters | finding |\n|---|---|---|---|---|---|---|---|\n");
    let mut findings = Vec::new();
    let mut minimised: std::collections::BTreeSet<String> = Default::default();
    let mut total_injected = 0u64;
    for round in 0..rounds {
        // every other round rides an ibv_rc_pingpong exchange
        let flow = Flow { pp: round % 2 == 1, seed: 0xf022 + round, every: every.clone(), kinds: only_kinds.clone() };
        let out = dir.join(format!("round-{round}"));
        let r = run_round(&guest, &port.ns, &flow, &out, None);
        let injected: u64 = r.field("injected").and_then(|v| v.parse().ok()).unwrap_or(0);
        total_injected += injected;
        let kinds = r.summary.split('[').nth(1).and_then(|s| s.split(']').next()).unwrap_or("").to_string();
        let naks = r.summary.split("peer_naks=[").nth(1).and_then(|s| s.split(']').next()).unwrap_or("").to_string();
        let legit = r.summary.split("legit=").nth(1).unwrap_or("?").to_string();
        let _ = writeln!(
            table,
            "| {round} | {} | {injected} ({kinds}) | {naks} | {} | {} | {} | {} |",
            flow.seed,
            legit.chars().take(90).collect::<String>(),
            r.probe.chars().take(60).collect::<String>(),
            r.delta,
            r.finding.as_deref().unwrap_or("none")
        );
        eprintln!(
            "[fuzz] round {round} seed {}: {}\n[fuzz]   rxe counters: {}; probe: {}; finding: {:?}",
            flow.seed, r.summary, r.delta, r.probe, r.finding
        );
        let Some(f) = r.finding else {
            let _ = std::fs::remove_dir_all(&out);
            continue;
        };
        let mut entry = format!(
            "round {round}: {f}\n  replay (against `{}` and `ib_write_bw -d rxe0 -x 1 -F {PROBE}` on the guest): {}\n  record: {}",
            flow.stock(),
            flow.replay(None),
            out.display()
        );
        // each distinct finding minimised once, on fresh guests
        if minimise_on && minimised.insert(ix::finding_signature(&f)) {
            let mut fresh = || {
                boots += 1;
                boot(&lab, flavour, boots)
            };
            match minimise(&mut fresh, &mut guest, &port.ns, &flow, &out, &f) {
                Some((m, tries)) => {
                    let _ = std::fs::write(out.join("minimal"), format!("{}\n", flow.replay(Some(&m))));
                    let _ = write!(
                        entry,
                        "\n  minimised ({tries} replays on fresh guests) to {} hostile frame(s): {}",
                        m.len(),
                        flow.replay(Some(&m))
                    );
                }
                None => entry += "\n  not reproduced on a fresh guest (flaky: timing)",
            }
        }
        // a fresh guest after any finding: a dead one must go, and a kernel that warned once
        // (`WARN_ON_ONCE`) would not say it again
        guest.kill();
        boots += 1;
        guest = boot(&lab, flavour, boots);
        eprintln!("[fuzz] guest booted again after round {round}");
        findings.push(entry);
    }
    // liveness: a clean connection after the campaign
    let start =
        format!("rm -f /tmp/s.rc; (timeout {RUN_LIMIT} {PERFTEST} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true");
    assert_eq!(console(&guest, &start, 30).map(|o| o.0), Some(0));
    assert_eq!(console(&guest, ix::GUEST_WAIT_LISTEN, 60).map(|o| o.0), Some(0));
    let guest_ip = GUEST_V4.to_string();
    let mut argv = vec![ix::BIN, "perf", "write_bw", &guest_ip];
    argv.extend(FLOW);
    argv.push("--no-progress");
    let clean = Proc::spawn_in(&port.ns, &argv).wait(Duration::from_secs(RUN_LIMIT));
    assert!(clean.ok(), "rxe after the campaign: a clean run failed\n{}", clean.text());
    assert!(
        only_kinds.is_some() || total_injected >= rounds * 3,
        "the campaign injected only {total_injected} frames:\n{table}"
    );
    eprintln!(
        "[fuzz] {flavour}: {rounds} rounds, {total_injected} hostile frames, {} findings, {boots} reboots, {:?}\n{table}",
        findings.len(),
        t0.elapsed()
    );
    for f in &findings {
        eprintln!("[fuzz] FINDING {f}");
    }
    // the same bug found in several rounds counts once: by its kernel signature
    let mut distinct: std::collections::BTreeMap<String, Vec<&String>> = Default::default();
    for f in &findings {
        distinct.entry(ix::finding_signature(f)).or_default().push(f);
    }
    for (sig, fs) in &distinct {
        eprintln!(
            "[fuzz] distinct finding ({} rounds): {sig}\n  first: {}",
            fs.len(),
            fs[0].lines().next().unwrap_or("")
        );
    }
    if let Some(f) = std::env::var_os("UROCE_IX_REPORT").filter(|v| !v.is_empty()) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).expect("report file");
        let _ = writeln!(
            f,
            "\n### uroce fuzz against rxe ({flavour}): {rounds} rounds\n\n{table}\nfindings: {} ({} distinct)\n",
            findings.len(),
            distinct.len()
        );
        for (sig, fs) in &distinct {
            let _ = writeln!(f, "- distinct: `{sig}` ({} rounds)", fs.len());
        }
        for x in &findings {
            let _ = writeln!(f, "- {x}");
        }
    }
    if findings.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The finding in rxe (6.17 here; `UROCE_FUZZ_FLAVOUR=bookworm` for 6.1), from its recorded
/// seed, on a fresh guest: an unsolicited ATOMIC ACKNOWLEDGE where rxe's requester waits for a
/// SEND's ACK makes `rxe_completer` WARN. It must still reproduce with one command, and the
/// harness minimises it on fresh guests to the frame(s) that do it.
#[test]
fn the_rxe_completer_warn_reproduces_and_minimises() {
    let Some((flavour, test)) = flavour_for("completer_warn") else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let lab = Lab::new(&test).expect("lab");
    let mut boots = 0;
    let mut guest = boot(&lab, flavour, boots);
    let ns = format!("{}-w{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    let dir = std::env::temp_dir().join(format!("uroce-fuzz-warn-{flavour}-{}", std::process::id()));
    let flow = Flow { pp: true, seed: 61477, every: "4".into(), kinds: Some("unsolicited".into()) };
    let r = run_round(&guest, &port.ns, &flow, &dir, None);
    eprintln!("[fuzz] {}\n[fuzz]   finding: {:?}", r.summary, r.finding);
    let f = r.finding.expect("the recorded seed no longer makes rxe WARN");
    assert!(f.contains("WARNING") && f.contains("rxe_comp"), "{f}");
    let mut fresh = || {
        boots += 1;
        boot(&lab, flavour, boots)
    };
    let (m, tries) = minimise(&mut fresh, &mut guest, &port.ns, &flow, &dir, &f).expect("reproduces on a fresh guest");
    eprintln!("[fuzz] minimised in {tries} replays on fresh guests to {} frame(s): {}", m.len(), flow.replay(Some(&m)));
    assert_eq!(m.len(), 1, "one frame does it");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Findings of one bug in different rounds share a signature; another bug has another.
#[test]
fn findings_are_counted_once_per_signature() {
    let a = "round 3: kernel: [   15.477172] traps: PANIC: double fault, error_code: 0x0\n\
             [   15.478488] Oops: double fault: 0000 [#1] SMP NOPTI\n\
             [   15.486824]  rxe_init_packet+0xa0/0x150 [rdma_rxe]\n[   15.486916]  rxe_requester+0x2ef/0x10a0 [rdma_rxe]";
    let b = "round 7: kernel: [  201.000001] traps: PANIC: double fault, error_code: 0x0\n\
             [  201.100002] Oops: double fault: 0000 [#1] SMP NOPTI\n\
             [  201.200003]  rxe_init_packet+0xb0/0x150 [rdma_rxe]";
    let c = "round 9: kernel: [    9.1] BUG: kernel NULL pointer dereference, address: 0000000000000008\n\
             [    9.2]  rxe_completer+0x41/0xe80 [rdma_rxe]";
    let oops = ix::finding_signature("[   15.478488] Oops: double fault: 0000 [#1] SMP NOPTI");
    assert_eq!(oops, "Oops: double fault: # [##] SMP NOPTI");
    let (sa, sb, sc) = (ix::finding_signature(a), ix::finding_signature(b), ix::finding_signature(c));
    assert_eq!(sa, sb);
    assert_eq!(sa, "traps: PANIC: double fault, error_code: # in rxe_init_packet");
    assert_ne!(sa, sc);
    assert_eq!(sc, "BUG: kernel NULL pointer dereference, address: # in rxe_completer");
    let hang = ix::finding_signature("round 2: the stock ib_write_bw did not exit (hang)");
    assert_eq!(hang, "round #: the stock ib_write_bw did not exit (hang)");
    assert_eq!(hang, ix::finding_signature("round 5: the stock ib_write_bw did not exit (hang)"));
}
