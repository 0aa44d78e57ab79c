//! A short `uroce fuzz` campaign against the real Linux soft-RoCE driver (`rdma_rxe`, Debian
//! trixie's 6.17 kernel) in a QEMU guest: one `ib_write_bw` connection per round (every other
//! round an `ibv_rc_pingpong` exchange, where rxe's requester gets forged ACKs too), hostile
//! frames mixed into its flow from a round's own seed, and after each round the detectors —
//! the guest's kernel log (`BUG`, `WARNING`, `Oops`, `general protection`, `KASAN`,
//! `refcount_t`, `hung task`, `soft lockup`), whether the guest still answers on its console,
//! whether its perftest exited, and rxe's counters. A round with a finding keeps its record
//! (`injected.pcap`, `wire.pcap`, `fuzz.log`, the kernel lines) and replays with one command
//! (`uroce fuzz write_bw <guest> --fuzz-seed S ...`); a dead guest is booted again and the
//! campaign goes on. Finally a clean run must still complete: rxe survived the campaign.
//!
//! uroce's own side must never fail: `uroce fuzz` exits 0 every round (the connection it
//! carries may end: a QP that received an invalid request goes to ERR, as IBTA says).
//! Findings in rxe are reported, not failures of this test. Knobs: `UROCE_FUZZ_ROUNDS` (10),
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

#[test]
fn trixie_fuzz_campaign() {
    let flavour = match std::env::var("UROCE_FUZZ_FLAVOUR").as_deref() {
        Ok("bookworm") => Flavour::Bookworm,
        _ => Flavour::Trixie,
    };
    let test = format!("interop_fuzz::{flavour}_fuzz_campaign");
    if !require_or_skip(&test, &[flavour], false) {
        return;
    }
    let rounds = env_u64("UROCE_FUZZ_ROUNDS", 10);
    let every = env_u64("UROCE_FUZZ_EVERY", 16).to_string();
    // UROCE_FUZZ_KINDS=unsolicited,...: only these mutation kinds (a finding's reproducer)
    let only_kinds = std::env::var("UROCE_FUZZ_KINDS").ok().filter(|k| !k.is_empty());
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
    let mut total_injected = 0u64;
    let perftest = "ib_write_bw -d rxe0 -x 1 -F -m 1024 -s 4096 -n 400";
    // every other round rides an ibv_rc_pingpong exchange instead: both ends send there, so
    // rxe's requester meets forged acknowledgements too
    let pingpong = "ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -n 400 -c";
    // the liveness probe: a second, clean connection beside every round's flow (its own
    // ib_write_bw server on the guest, its own uroce process on uroce's side)
    let probe_server = format!("ib_write_bw -d rxe0 -x 1 -F {PROBE}");
    for round in 0..rounds {
        let seed = 0xf022 + round;
        let pp = round % 2 == 1;
        let (stock, limit) = if pp { (pingpong, 30) } else { (perftest, RUN_LIMIT) };
        let counters =
            |g: &Guest| console(g, &format!("(cd {HW_COUNTERS} && grep . *)"), 30).map(|o| ix::rxe_counters(&o.1));
        let before = counters(&guest).unwrap_or_default();
        let start = format!(
            "dmesg -c >/dev/null; rm -f /tmp/s.out /tmp/s.rc; (timeout {limit} {stock} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & \
             (timeout {limit} {probe_server} > /tmp/p.out 2>&1) & true"
        );
        assert_eq!(console(&guest, &start, 30).map(|o| o.0), Some(0), "start the guest's server");
        assert_eq!(console(&guest, ix::GUEST_WAIT_LISTEN, 60).map(|o| o.0), Some(0), "{stock} is not listening");
        assert_eq!(console(&guest, PROBE_WAIT_LISTEN, 60).map(|o| o.0), Some(0), "the probe's server is not listening");
        let out = dir.join(format!("round-{round}"));
        let out_s = out.display().to_string();
        let seed_s = seed.to_string();
        let guest_ip = GUEST_V4.to_string();
        let mut argv = if pp {
            vec![ix::BIN, "fuzz", "pingpong", &guest_ip, "-d", "eth0", "-s", "4096", "-n", "400", "-c"]
        } else {
            let mut v = vec![ix::BIN, "fuzz", "write_bw", &guest_ip];
            v.extend(FLOW);
            v.push("--no-progress");
            v
        };
        let probe = format!("write_bw {PROBE}");
        argv.extend(["--fuzz-seed", &seed_s, "--every", &every, "--out", &out_s, "--probe", &probe]);
        if let Some(k) = &only_kinds {
            argv.extend(["--kinds", k]);
        }
        let done = Proc::spawn_in(&port.ns, &argv).wait(Duration::from_secs(RUN_LIMIT + 30));
        let summary = done.stdout.lines().find(|l| l.starts_with("uroce-fuzz:")).unwrap_or("").to_string();
        // exit 3: the liveness probe stopped completing (a finding, below)
        let probe_dead = done.status.and_then(|s| s.code()) == Some(3) && summary.contains(" probe=dead(");
        assert!(done.ok() || probe_dead, "round {round}: uroce fuzz itself failed (uroce must not)\n{}", done.text());
        let probe = summary.split(" probe=").nth(1).and_then(|s| s.split(") ").next()).unwrap_or("?").to_string();
        let field = |k: &str| {
            summary.split(&format!("{k}=")).nth(1).map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        };
        let injected: u64 = field("injected").and_then(|v| v.parse().ok()).unwrap_or(0);
        total_injected += injected;
        let kinds = summary.split('[').nth(1).and_then(|s| s.split(']').next()).unwrap_or("").to_string();
        let naks = summary.split("peer_naks=[").nth(1).and_then(|s| s.split(']').next()).unwrap_or("").to_string();
        let legit = summary.split("legit=").nth(1).unwrap_or("?").to_string();
        // the detectors: the kernel log, the console, the stock side's exit
        let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
                       echo \"==R\"\"C==$(cat /tmp/s.rc 2>/dev/null)\"";
        let finding = match console(&guest, collect, RUN_LIMIT + 40) {
            None => Some("the guest stopped answering its console".to_string()),
            Some((_, text)) => {
                // between markers: the console also carries the shell's job notices
                let cmd = format!("dmesg | grep -E '{SPLATS}' | head -n 20 > /tmp/k; echo \"==K\"\"0==\"; cat /tmp/k; echo \"==K\"\"1==\"");
                let splat = console(&guest, &cmd, 30)
                    .map(|o| {
                        o.1.split("==K0==").nth(1).and_then(|s| s.split("==K1==").next()).unwrap_or("").to_string()
                    })
                    .unwrap_or_else(|| "(no answer to dmesg)".to_string());
                if !splat.trim().is_empty() {
                    Some(format!("kernel: {}", splat.trim()))
                } else if probe_dead {
                    Some(format!("the liveness probe stopped completing: {probe})"))
                } else if (!text.contains("==RC==") || text.contains("==RC==124"))
                    && (!pp || legit.starts_with("completed"))
                {
                    // (a pingpong server whose peer gave up waits for ever, rc_pingpong having no
                    // timeout: a hang only when uroce's side completed)
                    Some(format!("the stock {} did not exit (hang)", stock.split(' ').next().unwrap_or("")))
                } else {
                    None
                }
            }
        };
        let after = counters(&guest).unwrap_or_default();
        let delta = ix::kv(&ix::delta(&after, &before));
        let _ = writeln!(
            table,
            "| {round} | {seed} | {injected} ({kinds}) | {naks} | {} | {}) | {delta} | {} |",
            legit.chars().take(90).collect::<String>(),
            probe.chars().take(60).collect::<String>(),
            finding.as_deref().unwrap_or("none")
        );
        eprintln!("[fuzz] round {round} seed {seed}: {summary}\n[fuzz]   rxe counters: {delta}; finding: {finding:?}");
        // (the probe's line: alive with its perftest result, or dead)
        eprintln!("[fuzz]   probe: {probe})");
        if let Some(f) = finding {
            let only = only_kinds.as_ref().map_or(String::new(), |k| format!(" --kinds {k}"));
            let replay = if pp {
                format!(
                    "uroce fuzz pingpong {GUEST_V4} -d eth0 -s 4096 -n 400 -c --fuzz-seed {seed} --every {every}{only} --probe \"write_bw {PROBE}\""
                )
            } else {
                format!("uroce fuzz write_bw {GUEST_V4} -d eth0 -m 1024 -s 4096 -n 400 -u 18 --fuzz-seed {seed} --every {every}{only} --probe \"write_bw {PROBE}\"")
            };
            findings.push(format!(
                "round {round}: {f}\n  replay (against `{stock}` on the guest): {replay}\n  record: {out_s}"
            ));
            if console(&guest, "echo alive", 30).is_none() {
                guest.kill();
                boots += 1;
                guest = boot(&lab, flavour, boots);
                eprintln!("[fuzz] guest booted again after round {round}");
            }
        } else {
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    // liveness: a clean connection after the campaign
    let start =
        format!("rm -f /tmp/s.rc; (timeout {RUN_LIMIT} {perftest} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true");
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
