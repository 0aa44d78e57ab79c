//! `uroce fuzz` against uroce itself: rounds of a `uroce perf write_bw` server in one
//! namespace and `uroce fuzz write_bw` in another, each from its own seed. Every round the
//! target must survive: it exits by itself (no hang) without a panic or a signal, its engine
//! counted the hostile frames with typed counters (each bad ICRC in `icrc_err`, frames for
//! other QPs in `dropped_unknown_qp`, ...), and the fuzzer's own side exits 0. Then the same
//! seed must make the same hostile frames again (a finding replays from its seed).
//!
//! Needs root and `ip`; skips loudly without them (fails with `CI=1`).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;
use uroce::netns::{self, NetPair, PairConfig};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and `ip`"))
}

/// One round: (the fuzzer's summary line, the server's stderr, the fuzz.log).
fn round(net: &NetPair, seed: u64, kinds: &str) -> (String, String, String) {
    round_of(net, "write_bw", &["-s", "4096", "-n", "1000"], seed, kinds, &[])
}

/// A round of perftest `test` with `flags` on both ends, `extra` flags for the fuzzer.
fn round_of(
    net: &NetPair,
    test: &str,
    flags: &[&str],
    seed: u64,
    kinds: &str,
    extra: &[&str],
) -> (String, String, String) {
    let mut s = Command::new("ip");
    s.args(["netns", "exec", &net.a.ns, BIN, "perf", test, "-d", &net.a.ifname])
        .args(flags)
        .args(["--no-progress", "--counters"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let server = common::watch(s.spawn().expect("spawn server"));
    // one directory per round: tests run in parallel, and two may use the same seed
    static ROUND: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("uroce-fuzz-cli-{seed}-{}-{n}", std::process::id()));
    let (host, dir_s, seed_s) = (net.a.ip4.to_string(), dir.display().to_string(), seed.to_string());
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &net.b.ns, BIN, "fuzz", test, &host, "-d", &net.b.ifname])
        .args(flags)
        .args(["--no-progress", "--every", "8", "--fuzz-seed", &seed_s, "--out", &dir_s])
        .args(if kinds.is_empty() { vec![] } else { vec!["--kinds", kinds] })
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::finish(c.spawn().expect("spawn fuzz"), "uroce fuzz", Duration::from_secs(60));
    let so = server.finish("the fuzzed uroce server (a hang is a finding)", Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let server_err = String::from_utf8_lossy(&so.stderr).to_string();
    // exit 3: the liveness probe died (a finding, judged by the caller)
    let probe_dead = out.status.code() == Some(3) && stdout.contains(" probe=dead(");
    assert!(
        out.status.success() || probe_dead,
        "seed {seed}: uroce fuzz failed\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(so.status.code().is_some(), "seed {seed}: the server died of a signal: {:?}\n{server_err}", so.status);
    assert!(!server_err.contains("panicked"), "seed {seed}: the server panicked\n{server_err}");
    let log = std::fs::read_to_string(dir.join("fuzz.log")).expect("fuzz.log");
    let summary = stdout.lines().find(|l| l.starts_with("uroce-fuzz:")).expect("summary").to_string();
    let _ = std::fs::remove_dir_all(&dir);
    (summary, server_err, log)
}

fn field(summary: &str, k: &str) -> u64 {
    summary
        .split(&format!("{k}="))
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn uroce_survives_a_fuzz_campaign() {
    if !prereq("uroce_survives_a_fuzz_campaign") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 125, ..PairConfig::new("fz", 1500) }).unwrap();
    let mut total = 0;
    for seed in 1..=6 {
        let (summary, server, _) = round(&net, seed, "");
        let injected = field(&summary, "injected");
        assert!(injected > 0, "seed {seed}: nothing injected: {summary}");
        total += injected;
        // every bad ICRC was counted as one, by the engine that saw it
        let bad_icrc = field(&summary, "bad_icrc");
        let counted = common::counter(&server, "uroce-counters engine:", "icrc_err");
        assert!(counted >= bad_icrc, "seed {seed}: {bad_icrc} bad ICRCs sent, {counted} counted\n{summary}\n{server}");
        eprintln!("[fuzz] seed {seed}: {summary}");
        eprintln!(
            "[fuzz]   target: {}",
            server.lines().find(|l| l.starts_with("uroce-counters engine:")).unwrap_or("")
        );
    }
    assert!(total >= 30, "{total} hostile frames in all");
    // frames for other QPs only: the flow survives, each one counted as for an unknown QP
    let (summary, server, _) = round(&net, 9, "wrong_qp");
    assert!(summary.ends_with("legit=completed"), "{summary}");
    let n = field(&summary, "wrong_qp");
    assert!(
        n > 0 && common::counter(&server, "uroce-counters engine:", "dropped_unknown_qp") >= n,
        "{summary}\n{server}"
    );
}

/// The response kinds: in a latency test both ends send, and uroce's ACKs to the target's
/// requester are forged (error and RNR NAKs, ACKs of what was never sent, unsolicited READ
/// and atomic responses, duplicate-ACK floods). The target survives every round (it exits by
/// itself, no panic, no signal) and counts what it dropped.
#[test]
fn uroce_survives_forged_acknowledgements() {
    if !prereq("uroce_survives_forged_acknowledgements") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 129, ..PairConfig::new("fa", 1500) }).unwrap();
    let kinds = "forged_nak,rnr_nak,ack_psn,unsolicited,ack_flood";
    let (mut injected, mut dropped) = (0, 0);
    for seed in 1..=4 {
        let (summary, server, _) =
            round_of(&net, "write_lat", &["-s", "64", "-n", "2000"], seed, kinds, &["--max", "24"]);
        assert!(field(&summary, "acks") > 0, "seed {seed}: no ACK of uroce's went through: {summary}");
        let n: u64 = kinds.split(',').map(|k| field(&summary, k)).sum();
        assert_eq!(n, field(&summary, "injected"), "seed {seed}: only response kinds: {summary}");
        injected += n;
        let engine = server.lines().find(|l| l.starts_with("uroce-counters engine:")).unwrap_or("").to_string();
        dropped += ["dropped_stale_response", "dropped_bad_opcode", "dropped_bad_nak_msn", "rcvd_rnr_err"]
            .iter()
            .map(|c| common::counter(&server, "uroce-counters engine:", c))
            .sum::<u64>();
        eprintln!("[fuzz] responses seed {seed}: {summary}\n[fuzz]   target: {engine}");
    }
    assert!(injected >= 8, "{injected} forged acknowledgements in all");
    assert!(dropped > 0, "the target's requester counted none of them");
}

/// `uroce fuzz pingpong`: an rc_pingpong exchange carries the hostile frames (both ends send:
/// requests and forged acknowledgements); the target, `uroce pingpong`, survives every round.
#[test]
fn uroce_survives_fuzzing_over_pingpong() {
    if !prereq("uroce_survives_fuzzing_over_pingpong") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 145, ..PairConfig::new("fp", 1500) }).unwrap();
    let mut injected = 0;
    for seed in 1..=3u64 {
        let mut s = Command::new("ip");
        s.args(["netns", "exec", &net.a.ns, BIN, "pingpong", "-d", &net.a.ifname, "-s", "4096", "-n", "400", "-c"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let server = common::watch(s.spawn().expect("spawn server"));
        let (host, seed_s) = (net.a.ip4.to_string(), seed.to_string());
        let out = Command::new("ip")
            .args(["netns", "exec", &net.b.ns, BIN, "fuzz", "pingpong", &host, "-d", &net.b.ifname, "-s", "4096"])
            .args(["-n", "400", "-c", "--every", "16", "--fuzz-seed", &seed_s])
            .output()
            .expect("uroce fuzz pingpong");
        let so = server.finish("the fuzzed uroce pingpong (a hang is a finding)", Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let server_err = String::from_utf8_lossy(&so.stderr).to_string();
        assert!(out.status.success(), "seed {seed}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(so.status.code().is_some(), "seed {seed}: the server died of a signal\n{server_err}");
        assert!(!server_err.contains("panicked"), "seed {seed}: the server panicked\n{server_err}");
        let summary = stdout.lines().find(|l| l.starts_with("uroce-fuzz:")).expect("summary").to_string();
        assert!(field(&summary, "requests") > 0 && field(&summary, "acks") > 0, "seed {seed}: {summary}");
        injected += field(&summary, "injected");
        eprintln!("[fuzz] pingpong seed {seed}: {summary}");
    }
    assert!(injected >= 5, "{injected} hostile frames in all");
}

#[test]
fn a_seed_replays_the_same_hostile_frames() {
    if !prereq("a_seed_replays_the_same_hostile_frames") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 126, ..PairConfig::new("fr", 1500) }).unwrap();
    // harmless kinds, so that both runs carry the whole flow and draw the same numbers
    let kinds = "bad_icrc,wrong_qp";
    let seq = |log: &str| -> Vec<String> {
        log.lines().filter(|l| l.contains(" kind=")).map(|l| l.split_whitespace().nth(2).unwrap().to_string()).collect()
    };
    let (s1, _, l1) = round(&net, 77, kinds);
    let (s2, _, l2) = round(&net, 77, kinds);
    assert!(s1.ends_with("legit=completed") && s2.ends_with("legit=completed"), "{s1}\n{s2}");
    assert_eq!(seq(&l1), seq(&l2), "the same seed drew other mutations");
    assert_eq!(field(&s1, "injected"), field(&s2, "injected"));
    let (_, _, l3) = round(&net, 78, kinds);
    assert_ne!(seq(&l1), seq(&l3), "another seed drew the same mutations");
}

#[test]
fn a_finding_minimises_to_the_frame_that_kills_the_qp_and_replays_with_one_command() {
    if !prereq("a_finding_minimises_to_the_frame_that_kills_the_qp_and_replays_with_one_command") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 127, ..PairConfig::new("fm", 1500) }).unwrap();
    let dir = std::env::temp_dir().join(format!("uroce-fuzz-min-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pidfile = dir.with_extension("pid");
    // before each replay: the previous server gone, a fresh one started
    let before = format!(
        "p={pid}; [ -f $p ] && while kill -0 $(cat $p) 2>/dev/null; do sleep 0.05; done; \
         ip netns exec {ns} {BIN} perf write_bw -d {ifname} -s 4096 -n 1000 --no-progress >/dev/null 2>&1 & echo $! > $p",
        pid = pidfile.display(),
        ns = net.a.ns,
        ifname = net.a.ifname
    );
    // the "finding": the legitimate flow ended (a hostile frame at the expected PSN was invalid)
    let check = r#"grep -q "legit=failed" "$UROCE_REPLAY_DIR/fuzz.log""#;
    let sh = |cmd: &str| assert!(Command::new("sh").args(["-c", cmd]).status().unwrap().success(), "{cmd}");
    sh(&before);
    let (host, dir_s) = (net.a.ip4.to_string(), dir.display().to_string());
    let rec = Command::new("ip")
        .args(["netns", "exec", &net.b.ns, BIN, "fuzz", "write_bw", &host, "-d", &net.b.ifname, "-s", "4096"])
        .args(["-n", "1000", "--no-progress", "--every", "4", "--fuzz-seed", "5", "--out", &dir_s])
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&rec.stdout).to_string();
    assert!(summary.contains("legit=failed"), "the recorded run should have ended the flow: {summary}");
    let recorded = field(&summary, "injected");
    let replay = |extra: &[&str]| {
        let o = Command::new("ip")
            .args(["netns", "exec", &net.b.ns, BIN, "replay", &dir_s, "--before", &before, "--check", check])
            .args(extra)
            .output()
            .unwrap();
        (o.status, String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr))
    };
    let (st, out) = replay(&["--minimise"]);
    assert!(st.success(), "{out}");
    let line = out.lines().find(|l| l.starts_with("uroce-replay: minimal")).unwrap_or_else(|| panic!("{out}"));
    let k: usize = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!((1..=2).contains(&k) && (k as u64) < recorded, "{recorded} hostile frames minimised to {k}: {line}");
    let list = std::fs::read_to_string(dir.join("minimal")).unwrap().trim().to_string();
    eprintln!("[fuzz] {recorded} hostile frames minimised to {k} ({list}): {line}");
    // the one command reproduces it, sending only those frames
    let (st, out) = replay(&["--only", &list]);
    assert!(st.success() && out.contains("uroce-replay: reproduced"), "{out}");
    let tag = list.replace(',', "_");
    let log = std::fs::read_to_string(dir.join(format!("replay-{tag}")).join("fuzz.log")).unwrap();
    assert_eq!(log.lines().filter(|l| l.contains(" kind=")).count(), k, "{log}");
    sh(&format!("p={}; while kill -0 $(cat $p) 2>/dev/null; do sleep 0.05; done", pidfile.display()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&pidfile);
}

/// The liveness probe: a second, clean connection (`--probe "write_bw -p PORT ..."`, its own
/// process on the interface) beside the fuzzed flow. Against a target that serves it, it
/// completes and reports its result; where nothing answers it, it is dead and the run says
/// so (exit 3).
#[test]
fn a_liveness_probe_runs_beside_the_fuzzed_flow() {
    if !prereq("a_liveness_probe_runs_beside_the_fuzzed_flow") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 126, ..PairConfig::new("fp", 1500) }).unwrap();
    let probe_server = probe_server(&net, "18516", "3");
    let probe = "write_bw -p 18516 -D 3 -s 64";
    // the target's two servers share its interface (each its own QPN block)
    let flags = ["-s", "4096", "-n", "1000", "--share"];
    let (summary, _, _) = round_of(&net, "write_bw", &flags, 5, "", &["--probe", probe]);
    eprintln!("[fuzz] with a probe: {summary}");
    assert!(summary.contains(" probe=alive(64 "), "{summary}");
    let ps = probe_server.finish("the probe's server", Duration::from_secs(60));
    assert!(ps.status.success(), "{}", String::from_utf8_lossy(&ps.stderr));
    // nothing serves the probe: dead
    let (summary, _, _) = round_of(&net, "write_bw", &flags, 5, "", &["--probe", "write_bw -p 18517 -D 1"]);
    eprintln!("[fuzz] probe unanswered: {summary}");
    assert!(summary.contains(" probe=dead(exit "), "{summary}");
}

/// The probe's server on the target's side: `uroce perf write_bw -p PORT -D SECS -s 64`,
/// sharing the interface.
fn probe_server(net: &NetPair, port: &str, secs: &str) -> common::Watched {
    let mut s = Command::new("ip");
    s.args(["netns", "exec", &net.a.ns, BIN, "perf", "write_bw", "-d", &net.a.ifname])
        .args(["-p", port, "-D", secs, "-s", "64", "--no-progress", "--share"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::watch(s.spawn().expect("spawn the probe's server"))
}

/// `uroce fuzz` aimed at uroce for `UROCE_FUZZ_MINUTES` (default 30): round after round, each
/// from its own seed, alternating the request kinds on a `write_bw` flow and the response
/// kinds on a `write_lat` flow (the target's requester gets forged ACKs), every round with a
/// liveness probe beside it. Every round the target exits by itself without a panic or a
/// signal, the fuzzer exits 0 and the probe completes: no crash, no hang, and the legitimate
/// QP beside the fuzzed one loses no completion. `cargo test --release --test fuzz_cli
/// uroce_against_uroce_for_a_while -- --ignored --nocapture`.
#[test]
#[ignore = "a long run: UROCE_FUZZ_MINUTES, default 30"]
fn uroce_against_uroce_for_a_while() {
    if !prereq("uroce_against_uroce_for_a_while") {
        return;
    }
    let minutes: u64 = std::env::var("UROCE_FUZZ_MINUTES").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let net = NetPair::create(&PairConfig { subnet: 127, ..PairConfig::new("fl", 1500) }).unwrap();
    let t0 = std::time::Instant::now();
    let (mut rounds, mut injected, mut killed) = (0u64, 0u64, 0u64);
    let responses = "forged_nak,rnr_nak,ack_psn,unsolicited,ack_flood";
    while t0.elapsed() < Duration::from_secs(minutes * 60) {
        let seed = 0x10_0000 + rounds;
        let ps = probe_server(&net, "18516", "2");
        let probe = ["--probe", "write_bw -p 18516 -D 2 -s 64"];
        let (summary, _, _) = if rounds % 2 == 0 {
            round_of(&net, "write_bw", &["-s", "4096", "-n", "1000", "--share"], seed, "", &probe)
        } else {
            let extra = [&probe[..], &["--max", "24"]].concat();
            round_of(&net, "write_lat", &["-s", "64", "-n", "2000", "--share"], seed, responses, &extra)
        };
        assert!(summary.contains(" probe=alive("), "seed {seed}: the probe died: {summary}");
        let o = ps.finish("the probe's server", Duration::from_secs(60));
        assert!(o.status.success(), "seed {seed}: the probe's server: {}", String::from_utf8_lossy(&o.stderr));
        rounds += 1;
        injected += field(&summary, "injected");
        killed += u64::from(!summary.ends_with("legit=completed"));
        if rounds % 50 == 0 {
            eprintln!("[fuzz] {rounds} rounds, {injected} hostile frames, {:?}", t0.elapsed());
        }
    }
    eprintln!(
        "[fuzz] uroce against uroce: {rounds} rounds in {:?}, {injected} hostile frames, {killed} fuzzed connections \
         ended by IBTA's rules (an invalid request or error NAK), every probe alive, no panic, signal or hang",
        t0.elapsed()
    );
    assert!(rounds > 0 && injected > 0);
}
