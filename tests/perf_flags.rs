//! `uroce perf`'s perftest flags, uroce against uroce over the kernel-UDP backend on loopback
//! (no privileges needed): every test with `-a`, bidirectional runs (`-b`, `--report-both`),
//! post lists, inline, outstanding reads, events, `-N`, `-H`/`-U`, `--output`, `--cpu_util`,
//! `--use_hugepages`, `--mr_per_qp`, `--dont_xchg_versions`, the limits on what a user types,
//! and where the keys come from. Each test has its own loopback addresses and TCP port, so they
//! run in parallel. The flags that reach the wire or the exchange are also run against stock
//! perftest on rxe (`interop_rxe.rs`).

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn spawn(args: &[String]) -> Child {
    Command::new(BIN)
        .arg("perf")
        .args(args)
        .args(["--backend", "udp", "--no-progress"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uroce perf")
}

struct Side {
    ok: bool,
    out: String,
    err: String,
}

fn side(o: Output) -> Side {
    Side {
        ok: o.status.success(),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A server on 127.0.`net`.1 and a client on 127.0.`net`.2, TCP port 19100 + `net`, with the
/// same flags plus per-side extras. Returns (server, client).
fn pair_with(net: u8, test: &str, both: &[&str], server_extra: &[&str], client_extra: &[&str]) -> (Side, Side) {
    let port = (19100 + net as u16).to_string();
    let srv_ip = format!("127.0.{net}.1");
    let mut s: Vec<String> = vec![test.into(), "--local-ip".into(), srv_ip.clone(), "-p".into(), port.clone()];
    s.extend(both.iter().chain(server_extra).map(|a| a.to_string()));
    let mut c: Vec<String> =
        vec![test.into(), srv_ip, "--local-ip".into(), format!("127.0.{net}.2"), "-p".into(), port];
    c.extend(both.iter().chain(client_extra).map(|a| a.to_string()));
    let server = spawn(&s);
    let client = spawn(&c);
    let what = format!("{test} {both:?}");
    let co = common::finish(client, &format!("client {what}"), Duration::from_secs(90));
    let so = common::finish(server, &format!("server {what}"), Duration::from_secs(60));
    (side(so), side(co))
}

fn pair(net: u8, test: &str, both: &[&str]) -> (Side, Side) {
    let (s, c) = pair_with(net, test, both, &[], &[]);
    assert!(
        s.ok && c.ok,
        "{test} {both:?}: server ok {} client ok {}\n== server\n{}{}\n== client\n{}{}",
        s.ok,
        c.ok,
        s.out,
        s.err,
        c.out,
        c.err
    );
    (s, c)
}

/// The numbers of every result row (lines after a `#bytes` title, up to a rule).
fn rows(out: &str) -> Vec<Vec<f64>> {
    let mut v = Vec::new();
    let mut on = false;
    for line in out.lines() {
        if line.trim_start().starts_with("#bytes") {
            on = true;
        } else if line.starts_with("---") {
            on = false;
        } else if on {
            let nums: Vec<f64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            if nums.len() >= 5 {
                v.push(nums);
            }
        }
    }
    v
}

fn all_sizes() -> Vec<f64> {
    (1..=23).map(|k| (1u64 << k) as f64).collect()
}

/// Runs `uroce perf` alone (it must fail before connecting); returns (exit code, stderr).
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(BIN).arg("perf").args(args).args(["--backend", "udp"]).output().expect("run uroce");
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn every_bw_test_runs_every_size_with_a() {
    for (k, test) in ["write_bw", "read_bw", "send_bw"].into_iter().enumerate() {
        let (s, c) = pair(1 + k as u8, test, &["-a", "-n", "20"]);
        let sizes: Vec<f64> = rows(&c.out).iter().map(|r| r[0]).collect();
        assert_eq!(sizes, all_sizes(), "{test} -a client rows\n{}", c.out);
        // (2 B x 20 at loopback speed averages below 0.01 MiB/s: the message rate is the figure)
        assert!(rows(&c.out).iter().all(|r| r[1] == 20.0 && r[4] > 0.0), "{test}: 20 iterations each\n{}", c.out);
        let server_rows = rows(&s.out);
        if test == "send_bw" {
            // perftest's send_bw server measures and prints every size itself, peak 0.00.
            assert_eq!(server_rows.iter().map(|r| r[0]).collect::<Vec<_>>(), all_sizes(), "{}", s.out);
            assert!(server_rows.iter().all(|r| r[1] == 20.0 && r[2] == 0.0 && r[4] > 0.0), "{}", s.out);
        } else {
            // write/read: the server prints the client's last report only.
            assert_eq!(server_rows.len(), 1, "{}", s.out);
            assert_eq!(server_rows[0][0], 8388608.0);
        }
    }
    let (code, err) = refused(&["atomic_bw", "-a"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("Message size cannot be changed for Atomic tests"), "{err}");
}

#[test]
fn every_lat_test_runs_every_size_with_a() {
    for (k, test) in ["write_lat", "read_lat", "send_lat"].into_iter().enumerate() {
        let (s, c) = pair(11 + k as u8, test, &["-a", "-n", "10"]);
        let r = rows(&c.out);
        assert_eq!(r.iter().map(|r| r[0]).collect::<Vec<_>>(), all_sizes(), "{test} -a\n{}", c.out);
        assert!(r.iter().all(|r| r[1] == 10.0 && r[2] > 0.0 && r[2] <= r[4] && r[4] <= r[3]), "{}", c.out);
        // read_lat's server only answers; write_lat's and send_lat's measure too.
        let expect = if test == "read_lat" { 0 } else { 23 };
        assert_eq!(rows(&s.out).len(), expect, "{test} server\n{}", s.out);
    }
}

/// Engine counter `name` of a side run with `--counters`.
fn counter(side: &Side, name: &str) -> u64 {
    side.err
        .lines()
        .filter(|l| l.starts_with("uroce-counters engine:"))
        .flat_map(|l| l.split_whitespace())
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn bidirectional_runs_traffic_both_ways_and_prints_the_sum() {
    for (k, test) in ["write_bw", "read_bw", "send_bw", "atomic_bw"].into_iter().enumerate() {
        let n = 300u64;
        let (s, c) = pair(21 + k as u8, test, &["-b", "-n", "300", "--report-both", "--counters"]);
        for (who, side) in [("server", &s), ("client", &c)] {
            assert!(side.out.contains("Bidirectional BW Test"), "{test} {who} title\n{}", side.out);
            assert!(side.out.contains(" TX depth        :"), "{test} {who}: both sides send\n{}", side.out);
            // rows: the summed line, then --report-both's local and remote lines
            let r = rows(&side.out);
            assert_eq!(r.len(), 3, "{test} {who}: sum, local, remote\n{}", side.out);
            let (sum, local, remote) = (&r[0], &r[1], &r[2]);
            assert_eq!((sum[1], local[1], remote[1]), (n as f64, n as f64, n as f64), "{test} {who}\n{}", side.out);
            for col in [3, 4] {
                assert!((sum[col] - local[col] - remote[col]).abs() < 0.02, "{test} {who} col {col}\n{}", side.out);
            }
            assert!(side.out.contains(" Local results: ") && side.out.contains(" Remote results: "));
        }
        // Each side's local line is the other's remote line.
        assert_eq!(rows(&s.out)[1][3], rows(&c.out)[2][3], "{test}");
        assert_eq!(rows(&s.out)[0][3], rows(&c.out)[0][3], "{test}: both print the same sum");
        // Both sides sent requests: for write/send 64 KiB messages that is >= 16 packets each at
        // path MTU 4096; read/atomic: one request per message.
        let per_msg = if matches!(test, "write_bw" | "send_bw") { 16 } else { 1 };
        for (who, side) in [("server", &s), ("client", &c)] {
            assert!(counter(side, "sent_pkts") >= n * per_msg, "{test} {who} sent {}", counter(side, "sent_pkts"));
        }
    }
    let (code, err) = refused(&["write_lat", "-b"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("Bidirectional is only available in BW test"), "{err}");
}

#[test]
fn bidirectional_duration() {
    // send_bw -b -D: each side sends for its duration and keeps receiving until the other is
    // done too (no report exchange: each prints its own line); write_bw -b -D exchanges reports.
    for (k, test) in ["send_bw", "write_bw"].into_iter().enumerate() {
        let (s, c) = pair(33 + k as u8, test, &["-b", "-D", "2"]);
        for side in [&s, &c] {
            let r = rows(&side.out);
            assert_eq!(r.len(), 1, "{test}\n{}", side.out);
            assert!(r[0][1] > 0.0 && r[0][3] > 0.0 && r[0][2] == 0.0, "{test}: -D forces noPeak\n{}", side.out);
        }
    }
}

#[test]
fn bidirectional_all_sizes() {
    let (s, c) = pair(31, "send_bw", &["-b", "-a", "-n", "8"]);
    for side in [&s, &c] {
        assert_eq!(rows(&side.out).iter().map(|r| r[0]).collect::<Vec<_>>(), all_sizes(), "{}", side.out);
    }
    let (s, c) = pair(32, "write_bw", &["-b", "-a", "-n", "8"]);
    for side in [&s, &c] {
        assert_eq!(rows(&side.out).iter().map(|r| r[0]).collect::<Vec<_>>(), all_sizes(), "{}", side.out);
    }
}

#[test]
fn post_list_inline_and_outstanding_reads() {
    // -l: chains of 4, CQ moderation follows; -n must be a multiple.
    let (_, c) = pair(41, "write_bw", &["-l", "4", "-n", "400", "-s", "4096"]);
    assert!(c.out.contains("RDMA_Write Post List BW Test"), "{}", c.out);
    assert!(c.out.contains(" Post List       : 4\n") && c.out.contains(" CQ Moderation   : 4\n"), "{}", c.out);
    assert_eq!(rows(&c.out)[0][1], 400.0);
    assert!(c.err.contains("Post List requested - CQ moderation will be the size of the post list"));
    let (code, err) = refused(&["write_bw", "-l", "3", "-n", "10"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("Number of iterations must be a multiple of post list size"), "{err}");
    let (code, err) = refused(&["write_bw", "-l", "4", "-Q", "3"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("Post list size must be a multiple of CQ moderation"), "{err}");
    let (code, err) = refused(&["write_lat", "-l", "2"]);
    assert!(code == Some(2) && err.contains("Post list is supported in BW tests only"), "{err}");
    // -I: messages up to it go inline; the header says so, the defaults are perftest's.
    let (_, c) = pair(42, "send_bw", &["-I", "128", "-s", "100", "-n", "500"]);
    assert!(c.out.contains(" Max inline data : 128[B]"), "{}", c.out);
    let (_, c) = pair(43, "write_lat", &["-n", "50", "-s", "200"]);
    assert!(c.out.contains(" Max inline data : 220[B]"), "{}", c.out);
    let (code, err) = refused(&["read_bw", "-I", "64"]);
    assert!(code == Some(2) && err.contains("Inline feature not available on READ/Atomic verbs"), "{err}");
    let (code, _) = refused(&["write_bw", "-I", "2000"]);
    assert_eq!(code, Some(2), "-I above 1024");
    // -o: advertised crosswise; the header and the READ address line show it.
    let (s, c) = pair_with(44, "read_bw", &["-n", "300"], &[], &["-o", "4"]);
    assert!(s.ok && c.ok, "{}{}{}{}", s.out, s.err, c.out, c.err);
    assert!(c.out.contains(" Outstand reads  : 4\n"), "{}", c.out);
    assert!(
        c.out.contains(" local address: LID 0000 QPN")
            && c.out.lines().any(|l| l.contains("local") && l.contains(" OUT 0x04 ")),
        "{}",
        c.out
    );
    assert!(s.out.lines().any(|l| l.contains("remote address") && l.contains(" OUT 0x04 ")), "{}", s.out);
    assert!(
        s.out.lines().any(|l| l.contains("local address") && l.contains(" OUT 0x80 ")),
        "server default 128\n{}",
        s.out
    );
    let (code, err) = refused(&["write_bw", "-o", "4"]);
    assert!(code == Some(2) && err.contains("Setting Outstanding reads only available on READ verb"), "{err}");
}

#[test]
fn events_no_peak_and_output() {
    let (s, c) = pair(51, "send_bw", &["-e", "-n", "500", "-N"]);
    for side in [&s, &c] {
        assert!(side.out.contains(" Test with events. Using uroce_comp0"), "{}", side.out);
        assert_eq!(rows(&side.out)[0][2], 0.0, "-N: peak 0.00\n{}", side.out);
    }
    let (_, c) = pair(52, "read_lat", &["-e", "-n", "50"]);
    assert_eq!(rows(&c.out)[0][1], 50.0);
    let (code, err) = refused(&["write_bw", "-e"]);
    assert!(code == Some(2) && err.contains("Events feature not available on WRITE verb"), "{err}");
    // --output: one bare figure, nothing else on stdout.
    let (s, c) = pair(53, "write_bw", &["-n", "300", "--output", "bandwidth"]);
    for side in [&s, &c] {
        let lines: Vec<&str> = side.out.lines().collect();
        assert_eq!(lines.len(), 1, "{}", side.out);
        let v: f64 = lines[0].parse().expect("a number");
        assert!(v > 0.0 && lines[0].split_once('.').is_some_and(|(_, d)| d.len() == 6), "{}", lines[0]);
    }
    let (_, c) = pair(54, "send_lat", &["-n", "50", "--output", "latency"]);
    assert_eq!(c.out.lines().count(), 1, "{}", c.out);
    assert!(c.out.trim().parse::<f64>().is_ok_and(|v| v > 0.0), "{}", c.out);
    let (code, err) = refused(&["write_bw", "--output", "latency"]);
    assert!(code == Some(2) && err.contains("Output verbosity level for BW can be: bandwidth, message_rate"), "{err}");
}

#[test]
fn histogram_and_unsorted_samples() {
    let (_, c) = pair(61, "write_lat", &["-n", "20", "-H", "-U"]);
    let lists: Vec<Vec<f64>> = c
        .out
        .split("#, usec\n")
        .skip(1)
        .map(|chunk| {
            chunk.lines().map_while(|l| l.split_once(", ").and_then(|(_, v)| v.parse().ok())).collect::<Vec<f64>>()
        })
        .collect();
    assert_eq!(lists.len(), 2, "-U then -H\n{}", c.out);
    assert_eq!(lists[0].len(), 19, "-U: iters - 1 samples");
    assert_eq!(lists[1].len(), 17, "-H: the two largest dropped");
    assert!(lists[1].windows(2).all(|w| w[0] <= w[1]), "-H sorted");
    let mut u = lists[0].clone();
    u.sort_by(|a, b| a.total_cmp(b));
    assert_eq!(&u[..17], &lists[1][..], "the same samples");
    let r = &rows(&c.out)[0];
    // t_min is the smallest sample, t_max the largest kept + 1 (the second largest); the
    // samples print with %g's six digits and the table with two decimals: within 0.01.
    assert!((r[2] - u[0]).abs() <= 0.011 && (r[3] - u[17]).abs() <= 0.011, "t_min, t_max {r:?} vs {u:?}");
    let (code, err) = refused(&["write_bw", "-H"]);
    assert!(code == Some(2) && err.contains("latency tests"), "{err}");
}

#[test]
fn cpu_util_column_in_duration_mode() {
    let (s, c) = pair(71, "write_bw", &["-D", "2", "--cpu_util"]);
    assert!(c.out.contains("MsgRate[Mpps]    CPU_Util[%]"), "{}", c.out);
    let r = &rows(&c.out)[0];
    assert_eq!(r.len(), 6, "{}", c.out);
    assert!(r[5] > 0.0 && r[5] <= 100.0, "{}", c.out);
    assert!(s.ok);
    let (_, c) = pair(72, "write_bw", &["-n", "100", "--cpu_util"]);
    assert!(c.err.contains(" CPU Utilization works only with Duration mode."), "{}", c.err);
    assert!(!c.out.contains("CPU_Util"));
}

#[test]
fn buffer_layouts_and_huge_pages() {
    // One region for all QPs: one rkey, QP i advertises base + (N + i) * B (B = 64 KiB here).
    let (_, c) = pair(81, "write_bw", &["-q", "2", "-n", "200"]);
    let local: Vec<(u64, u64)> = c
        .out
        .lines()
        .filter(|l| l.starts_with(" local address"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let hex = |k: &str| {
                let v = w[w.iter().position(|x| *x == k).unwrap() + 1];
                u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
            };
            (hex("RKey"), hex("VAddr"))
        })
        .collect();
    assert_eq!(local.len(), 2);
    assert_eq!(local[0].0, local[1].0, "one rkey\n{}", c.out);
    assert_eq!(local[1].1 - local[0].1, 65536, "consecutive slices\n{}", c.out);
    let (_, c) = pair(82, "write_bw", &["-q", "2", "-n", "200", "--mr_per_qp"]);
    let rkeys: Vec<&str> = c
        .out
        .lines()
        .filter(|l| l.starts_with(" local address"))
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "RKey").nth(1))
        .collect();
    assert_eq!(rkeys.len(), 2);
    assert_ne!(rkeys[0], rkeys[1], "a region per QP\n{}", c.out);
    // --use_hugepages: the buffers in transparent huge pages (reported), the run as usual.
    let (_, c) = pair(83, "write_bw", &["-n", "200", "-s", "1M", "--use_hugepages"]);
    let line = c.out.lines().find(|l| l.starts_with(" Huge pages      :")).unwrap_or_else(|| panic!("{}", c.out));
    assert!(line.ends_with("KiB of the buffers in transparent huge pages"), "{line}");
    assert_eq!(rows(&c.out)[0][0], 1048576.0);
}

#[test]
fn without_version_exchange() {
    let (_, c) = pair(91, "write_bw", &["-n", "200", "--dont_xchg_versions"]);
    assert_eq!(rows(&c.out)[0][1], 200.0);
    // Only one side skipping it desynchronises the exchange: both fail, neither hangs.
    let (s, c) = pair_with(92, "write_bw", &["-n", "200"], &["--dont_xchg_versions"], &[]);
    assert!(!s.ok && !c.ok, "server {} client {}", s.err, c.err);
}

#[test]
fn limits_are_checked_before_anything_is_allocated() {
    for (args, msg) in [
        (&["write_bw", "-s", "99999999999"][..], "the message size must be between 1 and 2147483647 bytes"),
        (&["write_bw", "-s", "0"][..], "the message size must be between 1 and 2147483647 bytes"),
        (&["write_bw", "-s", "3G"][..], "is not a size"),
        (&["write_bw", "-q", "20000"][..], "20000"),
        (&["write_bw", "-t", "0"][..], "0"),
        (&["send_bw", "-r", "99999"][..], "99999"),
        (&["write_bw", "-n", "2"][..], "2"),
        (&["write_bw", "-Q", "5000"][..], "5000"),
        (&["write_bw", "-q", "16384", "-s", "2147483647"][..], "more than the"),
        (&["write_lat", "-q", "2"][..], "latency tests use one QP"),
    ] {
        let t0 = Instant::now();
        let (code, err) = refused(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{args:?} took {:?}", t0.elapsed());
    }
    // K and M suffixes as perftest's -s.
    let (_, c) = pair(95, "write_bw", &["-s", "8K", "-n", "100"]);
    assert_eq!(rows(&c.out)[0][0], 8192.0);
}

/// The QPN, PSN and RKey of the client's local address line.
fn client_keys(c: &Side) -> String {
    c.out
        .lines()
        .find(|l| l.starts_with(" local address"))
        .map(|l| l.split_whitespace().filter(|w| w.starts_with("0x")).take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[test]
fn keys_come_from_the_os_unless_seeded() {
    let run = |net: u8, seed: Option<&str>| {
        let extra: Vec<&str> = seed.map_or(vec![], |s| vec!["--seed", s]);
        let (_, c) = pair_with(net, "write_bw", &["-n", "100"], &extra, &extra);
        assert!(c.ok, "{}", c.err);
        client_keys(&c)
    };
    let (a, b) = (run(96, Some("7")), run(97, Some("7")));
    assert!(!a.is_empty());
    assert_eq!(a, b, "the same --seed: the same keys");
    let (a, b) = (run(98, None), run(99, None));
    assert_ne!(a, b, "no --seed: unrelated keys");
    assert!(a.split(' ').zip(b.split(' ')).all(|(x, y)| x != y), "every field differs: {a} / {b}");
}
