//! `uroce tool xsk-blast`, the raw AF_XDP blaster and sink behind `scripts/bench-datapath`'s
//! rows (a) and (a4096), run as the bench runs it: a sink process in one network namespace, a
//! blaster process in the other, joined by veth. Checks that the sink receives exactly the
//! frames the blaster sent, count for count, that every one is a well-formed RoCEv2 frame
//! (parsed, ICRC verified) of the requested size, and that no frame was dropped on the way —
//! at path-MTU-1024 frames (1082 B), with Ethernet padding, and at 4154 B (path MTU 4096 on a
//! 9000-byte link: multi-buffer AF_XDP on both sides), with and without the shared-memory
//! credit flow control. Speed is never asserted.
//!
//! Needs root and `ip`; skips loudly without them (fails with `CI=1`).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use uroce::netns::{self, NetPair, PairConfig};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and `ip`"))
}

fn mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// `key=value` fields of a result line.
fn fields(line: &str) -> HashMap<String, String> {
    line.split_whitespace().filter_map(|t| t.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn num(f: &HashMap<String, String>, k: &str, line: &str) -> u64 {
    f.get(k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no integer {k}= in {line:?}"))
}

fn spawn(ns: &str, args: &[String]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, BIN, "tool", "xsk-blast"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uroce tool xsk-blast")
}

/// Stdout lines of `c` as they come.
fn lines(c: &mut Child) -> mpsc::Receiver<String> {
    let out = c.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// The remaining lines of an exited process (up to its end of file: the reader thread may lag).
fn rest(rx: &mpsc::Receiver<String>) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(10)) {
        v.push(l);
    }
    v
}

/// Wait for `c` (killing it after `timeout`); its stderr, for failure messages.
fn finish(mut c: Child, what: &str, timeout: Duration) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(st) = c.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = c.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st, err);
        }
        if std::time::Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{what}: timed out");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One blast of `count` frames of `size` bytes from A to B; checks both sides' accounts.
/// `credit`: flow control through a shared file; `sink_extra`/`tx_extra`: more flags.
fn blast(net: &NetPair, size: usize, count: u64, credit: bool, sink_extra: &[&str], tx_extra: &[&str]) {
    let what = format!("{size} B x {count}, credit {credit}, sink {sink_extra:?}, blaster {tx_extra:?}");
    let credit_file = std::env::temp_dir().join(format!("uroce-xsk-blast-test-{}-{size}", std::process::id()));
    let mut sink_args: Vec<String> =
        ["--dev", &net.b.ifname, "--rx", "--verify", "--wait-secs", "20", "--idle-ms", "3000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    sink_args.extend(["--expect".to_string(), count.to_string()]);
    let mut tx_args: Vec<String> = vec![
        "--dev".into(),
        net.a.ifname.clone(),
        "--tx".into(),
        "--dst-mac".into(),
        mac(net.b.mac),
        "--src-ip".into(),
        net.a.ip4.to_string(),
        "--dst-ip".into(),
        net.b.ip4.to_string(),
        "--frame-size".into(),
        size.to_string(),
        "--count".into(),
        count.to_string(),
    ];
    if credit {
        for a in [&mut sink_args, &mut tx_args] {
            a.extend(["--credit".to_string(), credit_file.display().to_string()]);
        }
    }
    sink_args.extend(sink_extra.iter().map(|s| s.to_string()));
    tx_args.extend(tx_extra.iter().map(|s| s.to_string()));

    let mut sink = spawn(&net.b.ns, &sink_args);
    let sink_out = lines(&mut sink);
    let ready = match sink_out.recv_timeout(Duration::from_secs(30)) {
        Ok(l) => l,
        Err(_) => {
            let (st, err) = finish(sink, "sink", Duration::from_secs(5));
            panic!("{what}: the sink never got ready ({st}): {err}");
        }
    };
    assert!(ready.starts_with("xsk-blast rx ready "), "{what}: {ready:?}");
    assert!(fields(&ready)["xdp_mode"] == "native" || fields(&ready)["xdp_mode"] == "generic", "{ready}");

    let mut blaster = spawn(&net.a.ns, &tx_args);
    let tx_out = lines(&mut blaster);
    let (tst, terr) = finish(blaster, "blaster", Duration::from_secs(60));
    let (rst, rerr) = finish(sink, "sink", Duration::from_secs(60));
    let _ = std::fs::remove_file(&credit_file);
    let (t, r) = (rest(&tx_out), rest(&sink_out));
    assert!(tst.success(), "{what}: blaster {tst}: {t:?} {terr}");
    assert!(rst.success(), "{what}: sink {rst}: {r:?} {rerr}");
    assert_eq!(t.len(), 1, "{what}: one blaster result line: {t:?}");
    assert_eq!(r.len(), 1, "{what}: one sink result line: {r:?}");
    let (tl, rl) = (&t[0], &r[0]);
    eprintln!("{what}:\n  {tl}\n  {rl}");
    assert!(tl.starts_with("xsk-blast tx ") && rl.starts_with("xsk-blast rx "), "{tl}\n{rl}");
    let (tf, rf) = (fields(tl), fields(rl));
    let payload = ((size - 58) & !3) as u64;

    // The blaster: exactly `count` frames queued, transmitted and completed.
    assert_eq!(num(&tf, "frames", tl), count, "{what}: frames completed\n{tl}");
    assert_eq!(num(&tf, "queued", tl), count, "{what}\n{tl}");
    assert_eq!(num(&tf, "drained", tl), 1, "{what}\n{tl}");
    assert_eq!(num(&tf, "frame_size", tl), size as u64, "{what}\n{tl}");
    assert_eq!(num(&tf, "bytes", tl), count * size as u64, "{what}\n{tl}");
    assert_eq!(num(&tf, "payload_bytes", tl), count * payload, "{what}\n{tl}");
    assert_eq!(num(&tf, "credit", tl), u64::from(credit), "{what}\n{tl}");
    assert!(tf.contains_key("cpu_user") && tf.contains_key("cpu_sys") && tf.contains_key("cpu_util"), "{tl}");

    // The sink: every one of them, each a valid RoCEv2 frame of that size, none dropped.
    assert_eq!(num(&rf, "frames", rl), count, "{what}: frames received\n{tl}\n{rl}");
    assert_eq!(num(&rf, "roce_ok", rl), count, "{what}: parsed with a correct ICRC\n{rl}");
    assert_eq!(num(&rf, "roce_bad", rl), 0, "{what}\n{rl}");
    assert_eq!((num(&rf, "min_len", rl), num(&rf, "max_len", rl)), (size as u64, size as u64), "{what}\n{rl}");
    assert_eq!(num(&rf, "bytes", rl), count * size as u64, "{what}\n{rl}");
    assert_eq!(num(&rf, "payload_bytes", rl), count * payload, "{what}\n{rl}");
    for k in ["rx_dropped", "rx_ring_full", "fill_ring_empty", "rx_invalid_descs"] {
        assert_eq!(num(&rf, k, rl), 0, "{what}: {k}\n{rl}");
    }
    assert!(rf.contains_key("cpu_util") && rf.contains_key("sleeps"), "{rl}");
}

#[test]
fn blaster_frames_reach_the_sink_count_for_count() {
    if !prereq("blaster_frames_reach_the_sink_count_for_count") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 111, ..PairConfig::new("xb", 1500) }).expect("veth pair");
    // A full RDMA WRITE MIDDLE at path MTU 1024, what `uroce perf write_bw` sends, with flow
    // control: more frames than the sink's fill ring holds (it would run dry without credits).
    blast(&net, 1082, 50_000, true, &[], &[]);
    // Open loop with fewer frames than the fill ring holds (nothing can run dry); a small
    // batch and TX ring, frames with 3 bytes of Ethernet padding, rewritten on every send.
    blast(&net, 1085, 3000, false, &["--rx-frames", "4096"], &["--batch", "7", "--tx-frames", "64", "--rewrite"]);
    // The smallest frame the tool builds; a TX ring smaller than the sink's credit window.
    blast(&net, 62, 20_000, true, &["--rx-frames", "512"], &["--tx-frames", "128"]);
}

#[test]
fn multi_buffer_frames_at_path_mtu_4096_count_for_count() {
    if !prereq("multi_buffer_frames_at_path_mtu_4096_count_for_count") {
        return;
    }
    // 4154-byte frames (path MTU 4096 on a 9000-byte link, the bench's a4096 row) do not fit
    // one 4 KiB chunk: both sides move them as multi-buffer packets.
    let net = NetPair::create(&PairConfig { subnet: 112, ..PairConfig::new("xc", 9000) }).expect("veth pair");
    blast(&net, 4154, 20_000, true, &[], &[]);
    blast(&net, 4154, 1000, false, &["--rx-frames", "4096"], &["--batch", "5"]);
    blast(&net, 9000, 2000, true, &["--rx-frames", "1024"], &["--tx-frames", "64"]);
}

#[test]
fn credit_of_frames_lost_before_the_sink_is_written_off() {
    if !prereq("credit_of_frames_lost_before_the_sink_is_written_off") {
        return;
    }
    // 1600-byte frames on a 1500-byte link: veth drops every one before XDP sees it, where no
    // AF_XDP counter does. The blaster must not wait for their credit forever: with the sink
    // idle, it writes the frames in flight off and goes on (the sink's 1024 frames of
    // credit are spent several times over).
    let net = NetPair::create(&PairConfig { subnet: 113, ..PairConfig::new("xd", 1500) }).expect("veth pair");
    let credit = std::env::temp_dir().join(format!("uroce-xsk-blast-test-{}-lost", std::process::id()));
    let c = credit.display().to_string();
    let b = net.b.ifname.clone();
    let mut sink =
        spawn(&net.b.ns, &args(&["--dev", &b, "--rx", "--wait-secs", "3", "--rx-frames", "1024", "--credit", &c]));
    let sink_out = lines(&mut sink);
    let ready = sink_out.recv_timeout(Duration::from_secs(30)).expect("sink ready");
    assert!(ready.starts_with("xsk-blast rx ready "), "{ready}");
    let (dst, sip, dip) = (mac(net.b.mac), net.a.ip4.to_string(), net.b.ip4.to_string());
    let a = net.a.ifname.clone();
    #[rustfmt::skip]
    let mut blaster = spawn(&net.a.ns, &args(&["--dev", &a, "--tx", "--dst-mac", &dst, "--src-ip", &sip,
        "--dst-ip", &dip, "--frame-size", "1600", "--count", "5000", "--credit", &c]));
    let tx_out = lines(&mut blaster);
    let (tst, terr) = finish(blaster, "blaster", Duration::from_secs(30));
    let (rst, _) = finish(sink, "sink", Duration::from_secs(30));
    let _ = std::fs::remove_file(&credit);
    let (t, r) = (rest(&tx_out), rest(&sink_out));
    eprintln!("{t:?}\n{r:?}");
    assert!(tst.success(), "blaster {tst}: {t:?} {terr}");
    let tl = &t[0];
    let tf = fields(tl);
    // Every frame was handed to the kernel and completed; all but the last window's written off.
    assert_eq!(num(&tf, "frames", tl), 5000, "{tl}");
    let lost = num(&tf, "credit_lost", tl);
    assert!((5000 - 1024..=5000).contains(&lost), "written off: {tl}");
    assert_eq!(rst.code(), Some(1), "the sink received nothing: {r:?}");
    assert_eq!(num(&fields(&r[0]), "frames", &r[0]), 0, "{r:?}");
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}
