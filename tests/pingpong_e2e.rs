//! `uroce pingpong` against itself, through the built binary: a server in one network namespace,
//! a client in another, joined by veth (`uroce::netns::NetPair`, link MTU 9000).
//!
//! * `pairs_over_both_backends`: `-c` runs over AF_XDP, the kernel-UDP backend and a mixed pair,
//!   sizes 1, 4096, 9001 (odd, multi-packet) at rc_pingpong's default path MTU 1024 and 20000 at
//!   `-m 4096`, busy-polling and `-e`; both sides exit 0, print rc_pingpong's four lines, agree
//!   on each other's addresses and on `size * iters * 2` bytes, and report no invalid data.
//! * `check_detects_corrupt_data`: the `-c` check can fail. A side sends one corrupt message
//!   (hidden test hook `--debug-corrupt-send K@OFF`: one bit flipped in its buffer after the
//!   fill, before the post — the transport then delivers it faithfully, which is exactly what
//!   `-c` must catch since the ICRC cannot): the receiving side reports the message and byte and
//!   exits 1; a flipped page-start byte in the last message trips rc_pingpong's own check
//!   (`invalid data in page 1`); without `-c` the same corruption goes unnoticed (exit 0); a
//!   server with `-c` fails a client without it, as stock does.
//! * `wire_corruption_is_stopped_by_the_icrc`: bit flips on received frames (`--inject
//!   corrupt=`) over AF_XDP are dropped by the engine's ICRC check and repaired by
//!   retransmission: `-c` passes and the counters show both the flips and the ICRC drops.
//! * `retry_count_is_the_specs_unless_told`: a client that hears nothing fails after the
//!   IBTA's 7 retries (`retry_cnt` 7, rc_pingpong's) with `transport retry counter exceeded`;
//!   with `--retry-forever` (Linux rxe's reading of 7) it keeps retrying until its stall limit.
//! * `failures_exit_non_zero`: mismatched `-s` gives rc_pingpong's `Failed status local length
//!   error (1) for wr_id 1` at the server and `remote invalid request error (9) for wr_id 2` at
//!   the client, both exiting 1; refused options exit 1 without touching the network.
//!
//! Needs root and `ip`; skips with a printed reason, or fails under `CI=1`.

mod common;
#[path = "common/ix.rs"]
mod ix;
#[path = "common/pp.rs"]
mod pp;

use ix::{Done, Proc, BIN};
use std::sync::Mutex;
use std::time::Duration;
use uroce::netns::{self, NetPair, PairConfig};

/// The tests spin two busy-polling processes each: one at a time on a small machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
const LIMIT: Duration = Duration::from_secs(90);

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and ip(8)"))
}

fn pair(tag: &str) -> NetPair {
    let mut c = PairConfig::new(tag, 9000);
    c.subnet = 88;
    NetPair::create(&c).expect("namespaces")
}

/// Runs a server in A with `server_args` and a client in B with `client_args` (the interface,
/// and for the client the server's address, are added); returns (server, client).
fn run(net: &NetPair, server_args: &[&str], client_args: &[&str]) -> (Done, Done) {
    let mut sa = vec![BIN, "pingpong", "-d", net.a.ifname.as_str()];
    sa.extend_from_slice(server_args);
    let server_ip = net.a.ip4.to_string();
    let mut ca = vec![BIN, "pingpong", "-d", net.b.ifname.as_str()];
    ca.extend_from_slice(client_args);
    ca.push(&server_ip);
    let mut s = Proc::spawn_in(&net.a.ns, &sa);
    let pid = s.pid();
    assert!(
        ix::poll_until(Duration::from_secs(20), || ix::listening(pid, 18515) || !s.running()),
        "server not listening:\n{}",
        s.wait(Duration::ZERO).text()
    );
    let c = Proc::spawn_in(&net.b.ns, &ca).wait(LIMIT);
    let s = s.wait(LIMIT);
    (s, c)
}

fn both_ok(s: &Done, c: &Done, what: &str) {
    assert!(s.ok() && c.ok(), "{what}:\n=== server\n{}\n=== client\n{}", s.text(), c.text());
}

#[test]
fn pairs_over_both_backends() {
    if !prereq("pairs_over_both_backends") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = pair("ppp");
    /// (server backend, client backend, size, iters, server extra flags, client extra flags)
    type Case<'a> = (&'a str, &'a str, u64, u32, &'a [&'a str], &'a [&'a str]);
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ("xdp", "xdp", 1, 1000, &[], &[]),
        ("xdp", "xdp", 4096, 1000, &[], &[]),
        ("xdp", "xdp", 9001, 500, &["-e"], &[]),
        ("xdp", "xdp", 20000, 300, &["-m", "4096"], &["-m", "4096"]),
        ("udp", "udp", 1, 1000, &[], &[]),
        ("udp", "udp", 4096, 1000, &[], &["-e"]),
        ("udp", "udp", 9001, 500, &[], &[]),
        ("xdp", "udp", 9001, 500, &[], &[]),
        ("udp", "xdp", 4096, 500, &["-m", "2048"], &["-m", "2048"]),
    ];
    for &(sb, cb, size, iters, sx, cx) in cases {
        let (size_s, iters_s) = (size.to_string(), iters.to_string());
        let base = ["-c", "-s", &size_s, "-n", &iters_s];
        let mut sa: Vec<&str> = vec!["--backend", sb];
        sa.extend(base);
        sa.extend_from_slice(sx);
        let mut ca: Vec<&str> = vec!["--backend", cb];
        ca.extend(base);
        ca.extend_from_slice(cx);
        let what = format!("server {sa:?} client {ca:?}");
        let (s, c) = run(&net, &sa, &ca);
        both_ok(&s, &c, &what);
        let (so, co) = pp::check_pair(&s.stdout, &c.stdout, size, iters).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(so.local.gid, format!("::ffff:{}", net.a.ip4), "{what}");
        assert_eq!(co.local.gid, format!("::ffff:{}", net.b.ip4), "{what}");
        eprintln!("{what}: ok, client {:.2} usec/iter, {:.2} Mbit/sec", co.usec_per_iter, co.mbit);
    }
}

#[test]
fn check_detects_corrupt_data() {
    if !prereq("check_detects_corrupt_data") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = pair("ppc");
    let base = ["-c", "-s", "9001", "-n", "200"];
    let with =
        |extra: &[&'static str]| -> Vec<&'static str> { base.iter().copied().chain(extra.iter().copied()).collect() };

    // The client corrupts its message 120 (byte 1234, not a page start): the server's check.
    let (s, c) = run(&net, &base, &with(&["--debug-corrupt-send", "120@1234"]));
    assert!(c.ok(), "the client's echoes match what it sent:\n{}", c.text());
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "server must fail:\n{}", s.text());
    assert!(s.stdout.contains("invalid data in 1 of 200 messages; first: message 120 byte 1234"), "{}", s.text());
    assert!(!s.stdout.contains("invalid data in page"), "byte 1234 is not a page start:\n{}", s.text());

    // The server corrupts its echo of message 17: the client's check.
    let (s, c) = run(&net, &with(&["--debug-corrupt-send", "17@5000"]), &base);
    assert!(s.ok(), "{}", s.text());
    assert_eq!(c.status.and_then(|s| s.code()), Some(1), "client must fail:\n{}", c.text());
    assert!(c.stdout.contains("first: echo of message 17 byte 5000"), "{}", c.text());

    // A page-start byte of the last message: rc_pingpong's own check fires too.
    let (s, c) = run(&net, &base, &with(&["--debug-corrupt-send", "200@4096"]));
    assert!(c.ok(), "{}", c.text());
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.text());
    assert!(s.stdout.lines().any(|l| l == "invalid data in page 1"), "{}", s.text());

    // Without -c nobody looks: the same corruption passes.
    let plain = ["-s", "9001", "-n", "200"];
    let (s, c) = run(&net, &plain, &["-s", "9001", "-n", "200", "--debug-corrupt-send", "200@4096"]);
    both_ok(&s, &c, "no -c");
    pp::check_pair(&s.stdout, &c.stdout, 9001, 200).unwrap();

    // A -c server and a client without -c (all 0x7b): rc_pingpong's check fails every page.
    let (s, c) = run(&net, &base, &plain);
    assert!(c.ok(), "{}", c.text());
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.text());
    for p in 0..3 {
        assert!(s.stdout.lines().any(|l| l == format!("invalid data in page {p}")), "{}", s.text());
    }
}

#[test]
fn wire_corruption_is_stopped_by_the_icrc() {
    if !prereq("wire_corruption_is_stopped_by_the_icrc") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = pair("ppw");
    let base = ["-c", "-s", "4096", "-n", "300", "--counters"];
    let corrupt: Vec<&str> = base.iter().copied().chain(["--inject", "corrupt=0.03,seed=11"]).collect();
    let (s, c) = run(&net, &corrupt, &corrupt);
    both_ok(&s, &c, "corrupt=0.03 both ways");
    pp::check_pair(&s.stdout, &c.stdout, 4096, 300).unwrap();
    let mut flips = 0;
    let mut icrc = 0;
    for d in [&s, &c] {
        let k = ix::uroce_counters(&d.stderr);
        flips += k.get("inject.corrupted").copied().unwrap_or(0);
        icrc += k.get("engine.icrc_err").copied().unwrap_or(0);
    }
    eprintln!("corrupted {flips} frames, {icrc} dropped by the ICRC check");
    assert!(flips >= 10, "the injector flipped too few bits to mean anything: {flips}\n{}\n{}", s.stderr, c.stderr);
    assert!(icrc >= 1, "no ICRC drop counted:\n{}\n{}", s.stderr, c.stderr);
}

#[test]
fn retry_count_is_the_specs_unless_told() {
    if !prereq("retry_count_is_the_specs_unless_told") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = pair("ppr");
    let ctr = |d: &Done, k: &str| ix::uroce_counters(&d.stderr).get(k).copied().unwrap_or(0);
    // The client hears nothing (its injector drops every frame it receives), so its first SEND
    // is never acknowledged. IBTA: retry_cnt 7 = 7 retries, 4.096 us << 14 = 67 ms apart, then
    // RETRY_EXC_ERR. The server's echo is never acknowledged either.
    let (s, c) = run(&net, &["-s", "1", "-n", "10"], &["-s", "1", "-n", "10", "--inject", "drop=1", "--counters"]);
    assert_eq!(c.status.and_then(|s| s.code()), Some(1), "{}", c.text());
    assert!(c.stderr.contains("Failed status transport retry counter exceeded (12) for wr_id 2"), "{}", c.text());
    assert_eq!(ctr(&c, "engine.retransmitted_pkts"), 7, "{}", c.text());
    assert_eq!(ctr(&c, "engine.retry_exceeded_err"), 1, "{}", c.text());
    assert!(c.elapsed >= Duration::from_millis(8 * 67), "gave up too early: {:?}", c.elapsed);
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.text());
    assert!(s.stderr.contains("Failed status transport retry counter exceeded (12) for wr_id 2"), "{}", s.text());
    // `--retry-forever` (rxe's reading of retry_cnt 7): still retrying when its own stall
    // limit (3 s) ends the run.
    let (s, c) = run(
        &net,
        &["-s", "1", "-n", "10"],
        &["-s", "1", "-n", "10", "--inject", "drop=1", "--counters", "--retry-forever", "--stall-timeout", "3"],
    );
    assert_eq!(c.status.and_then(|s| s.code()), Some(1), "{}", c.text());
    assert!(c.stderr.contains("no completion for 3s"), "{}", c.text());
    assert!(ctr(&c, "engine.retransmitted_pkts") > 20, "{}", c.text());
    assert_eq!(ctr(&c, "engine.retry_exceeded_err"), 0, "{}", c.text());
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.text());
}

#[test]
fn failures_exit_non_zero() {
    // Refused options need neither root nor a network.
    for flag in ["-o", "-t", "-j"] {
        let out = std::process::Command::new(BIN).args(["pingpong", flag]).output().expect("run uroce");
        assert_eq!(out.status.code(), Some(1), "{flag}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not supported"), "{flag}: {out:?}");
    }
    if !prereq("failures_exit_non_zero") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = pair("ppf");
    let (s, c) = run(&net, &["-s", "4096", "-n", "10"], &["-s", "8192", "-n", "10"]);
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.text());
    assert!(s.stderr.contains("Failed status local length error (1) for wr_id 1"), "{}", s.text());
    assert_eq!(c.status.and_then(|s| s.code()), Some(1), "{}", c.text());
    assert!(c.stderr.contains("Failed status remote invalid request error (9) for wr_id 2"), "{}", c.text());
}
