//! `uroce probe` against uroce itself: a `uroce perf` server in one namespace, the probe in
//! another, the default plans of `write_lat` and `read_lat` (every fault applied once), and
//! the report's verdicts — uroce's responder, requester and READ responder react as IBTA
//! requires to every fault, and a CE mark gets a CNP exactly when the peer runs its
//! notification point (`--ecn`): without it the row says `no CNP` and `--strict` fails.
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

use uroce::probe::report::parse_rows as rows;

/// Server `perf <test>` in A (with `server_extra`), `probe <test>` in B; the probe's output.
fn probe(net: &NetPair, test: &str, server_extra: &[&str], probe_extra: &[&str]) -> (std::process::Output, String) {
    let mut s = Command::new("ip");
    s.args(["netns", "exec", &net.a.ns, BIN, "perf", test, "-d", &net.a.ifname, "-s", "4096", "-n", "40"])
        .args(server_extra)
        .arg("--no-progress")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let server = common::watch(s.spawn().expect("spawn server"));
    let dir = std::env::temp_dir().join(format!("uroce-probe-{test}-{}", std::process::id()));
    let host = net.a.ip4.to_string();
    let dir_s = dir.display().to_string();
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &net.b.ns, BIN, "probe", test, &host, "-d", &net.b.ifname, "--out", &dir_s])
        .args(probe_extra)
        .arg("--no-progress")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::finish(c.spawn().expect("spawn probe"), "uroce probe", Duration::from_secs(60));
    let so = server.finish("uroce perf server", Duration::from_secs(30));
    assert!(so.status.success(), "server failed: {}", String::from_utf8_lossy(&so.stderr));
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert_eq!(String::from_utf8_lossy(&out.stdout), report, "stdout and report.md differ");
    let pcap = dir.join("probe.pcap");
    let decoded = Command::new(BIN).args(["pcap", "-q"]).arg(&pcap).output().expect("uroce pcap");
    // the capture holds the one corrupted ICRC the plan sends (write_lat), nothing else bad
    let summary = String::from_utf8_lossy(&decoded.stdout).to_string();
    let bad_icrc = if test == "write_lat" { 1 } else { 0 };
    assert!(summary.contains(&format!("icrc_bad: {bad_icrc} undecodable: 0")), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
    (out, report)
}

#[test]
fn write_lat_plan_against_uroce() {
    if !prereq("write_lat_plan_against_uroce") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 123, ..PairConfig::new("pw", 1500) }).unwrap();
    let (out, report) = probe(&net, "write_lat", &["--ecn"], &["--strict"]);
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    let r = rows(&report);
    assert_eq!(r.len(), 11, "{report}");
    for (fault, observed, verdict) in &r {
        assert_eq!(verdict, "conforms", "{fault}: {observed}\n{report}");
    }
    let row = |f: &str| r.iter().find(|x| x.0 == f).unwrap_or_else(|| panic!("no {f} row:\n{report}")).1.clone();
    assert!(row("out:drop@m3.2").starts_with("NAK PsnSequenceError PSN"), "{report}");
    assert!(row("out:reorder1@m9.2").contains("(2 NAKs)"), "{report}");
    assert!(row("out:dup@m15.4").contains("ACK(s) covering the PSN, no NAK"), "{report}");
    assert!(row("out:ce@m18.1").starts_with("CNP"), "{report}");
    assert!(row("in:drop@m21.2").contains("after our NAK"), "{report}");
    assert!(row("in:drop@m24.4").contains("4 packets, after its timeout"), "{report}");
    assert!(row("in:drop@ack30").starts_with("re-ACKed PSN"), "{report}");
    assert!(report.contains("differs 0 not_applied 0"), "{report}");
    assert!(report.contains("integrity_errors 0"), "{report}");
}

#[test]
fn read_lat_plan_against_uroce_and_a_missing_notification_point() {
    if !prereq("read_lat_plan_against_uroce_and_a_missing_notification_point") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 124, ..PairConfig::new("pr", 1500) }).unwrap();
    // no --ecn on the server: uroce then runs no notification point, as rxe
    let (out, report) = probe(&net, "read_lat", &[], &["--strict"]);
    assert_eq!(out.status.code(), Some(1), "--strict with a differing row:\n{report}");
    let r = rows(&report);
    assert_eq!(r.len(), 6, "{report}");
    for (fault, observed, verdict) in &r {
        let want = if fault.starts_with("out:ce") { "DIFFERS" } else { "conforms" };
        assert_eq!(verdict, want, "{fault}: {observed}\n{report}");
    }
    let row = |f: &str| r.iter().find(|x| x.0 == f).unwrap_or_else(|| panic!("no {f} row:\n{report}")).1.clone();
    assert_eq!(row("out:ce@m18.1"), "no CNP");
    assert!(row("in:drop@m3.2").contains("after our re-issued READ"), "{report}");
    assert!(row("out:dup@m15.1").contains("a whole response"), "{report}");
    // every re-executed READ response carried the bytes of the first
    assert!(report.contains("integrity_errors 0"), "{report}");
    assert!(!report.contains("integrity_compared 0/0"), "{report}");
}
