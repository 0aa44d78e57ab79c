//! `uroce perf` as users run it: a server and a client process in two network namespaces,
//! perftest's flags, perftest's output; every test, both backends and a mixed pair, several
//! QPs, all sizes, duration mode, Gb/s reports, captures and fault injection.
//!
//! Needs root and `ip`; skips loudly without them (fails with `CI=1`).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use uroce::netns::{self, NetPair, PairConfig};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and `ip`"))
}

fn spawn(ns: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, BIN, "perf"])
        .args(args)
        .arg("--no-progress")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uroce perf")
}

/// The numbers of every result line (the lines after the `#bytes` header).
fn results(out: &str) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    let mut on = false;
    for line in out.lines() {
        if line.trim_start().starts_with("#bytes") {
            on = true;
            continue;
        }
        if on {
            let nums: Vec<f64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            if nums.len() >= 3 {
                rows.push(nums);
            } else if line.starts_with("---") {
                on = false;
            }
        }
    }
    rows
}

/// Run a server in A and a client in B with the same arguments (plus per-side extras);
/// returns both outputs after checking exit codes.
fn run(net: &NetPair, args: &[&str], server_extra: &[&str], client_extra: &[&str]) -> (String, String) {
    let mut s_args: Vec<&str> = vec!["-d", &net.a.ifname];
    s_args.extend_from_slice(args);
    s_args.extend_from_slice(server_extra);
    let mut server = common::watch(spawn(&net.a.ns, &s_args));
    let host = net.a.ip4.to_string();
    let mut c_args: Vec<&str> = vec![args[0], &host, "-d", &net.b.ifname];
    c_args.extend_from_slice(&args[1..]);
    c_args.extend_from_slice(client_extra);
    let client = spawn(&net.b.ns, &c_args);
    let what = args.join(" ");
    let c = common::finish(client, &format!("client {what}"), Duration::from_secs(60));
    if !c.status.success() {
        server.kill();
    }
    let s = server.finish(&format!("server {what}"), Duration::from_secs(30));
    let (so, co) = (String::from_utf8_lossy(&s.stdout).into_owned(), String::from_utf8_lossy(&c.stdout).into_owned());
    assert!(
        c.status.success() && s.status.success(),
        "{what}: client {:?} server {:?}\nclient:\n{co}{}\nserver:\n{so}{}",
        c.status,
        s.status,
        String::from_utf8_lossy(&c.stderr),
        String::from_utf8_lossy(&s.stderr)
    );
    (so, co)
}

fn check_bw(out: &str, size: f64, iters: f64, what: &str) {
    let r = results(out);
    assert_eq!(r.len(), 1, "{what}: one result line in\n{out}");
    let r = &r[0];
    assert_eq!((r[0], r[1]), (size, iters), "{what}: size and iterations\n{out}");
    if what.starts_with("send_bw") && what.ends_with("server") {
        // perftest forces noPeak on a one-way send_bw server: peak 0.00.
        assert!(r[2] == 0.0 && r[3] > 0.0 && r[4] > 0.0, "{what}: peak 0.00, avg > 0, rate > 0\n{out}");
    } else {
        assert!(
            r[2] > 0.0 && r[3] > 0.0 && r[3] <= r[2] * 1.0001 && r[4] > 0.0,
            "{what}: peak >= avg > 0, rate > 0\n{out}"
        );
    }
}

fn check_lat(out: &str, size: f64, iters: f64, what: &str) {
    let r = results(out);
    assert_eq!(r.len(), 1, "{what}: one result line in\n{out}");
    let r = &r[0];
    assert_eq!((r[0], r[1]), (size, iters), "{what}\n{out}");
    // t_min <= t_typical <= t_max, t_min > 0, percentiles within [min, max].
    assert!(r[2] > 0.0 && r[2] <= r[4] && r[4] <= r[3] && r[7] <= r[3] && r[8] <= r[3], "{what}\n{out}");
}

#[test]
fn every_test_both_backends() {
    if !prereq("every_test_both_backends") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 101, ..PairConfig::new("pc", 9000) }).unwrap();
    for backend in ["xdp", "udp"] {
        for (test, size, iters) in [
            ("write_bw", "65536", "2000"),
            ("read_bw", "5000", "2000"),
            ("send_bw", "4097", "2000"),
            ("atomic_bw", "8", "2000"),
            ("write_lat", "2", "500"),
            ("read_lat", "4096", "500"),
            ("send_lat", "1000", "500"),
        ] {
            let what = format!("{test} {backend}");
            let args = [test, "-s", size, "-n", iters, "--backend", backend];
            let (so, co) = run(&net, &args, &[], &[]);
            let (s, n) = (size.parse().unwrap(), iters.parse().unwrap());
            if test.ends_with("_bw") {
                check_bw(&co, s, n, &format!("{what} client"));
                // The server prints a result too (the client's, for write/read/atomic).
                check_bw(&so, s, n, &format!("{what} server"));
            } else {
                check_lat(&co, s, n, &format!("{what} client"));
                if test != "read_lat" {
                    check_lat(&so, s, n, &format!("{what} server"));
                }
            }
            assert!(co.contains("Mtu             : 4096[B]"), "{what}: path MTU 4096 over a 9000-byte link\n{co}");
        }
    }
}

#[test]
fn mixed_backends_several_qps_and_flags() {
    if !prereq("mixed_backends_several_qps_and_flags") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 102, ..PairConfig::new("pm", 1500) }).unwrap();
    // AF_XDP server, kernel-UDP client, 4 QPs, MTU forced down to 1024, Gb/s.
    let (_, co) = run(
        &net,
        &["write_bw", "-q", "4", "-m", "1024", "-n", "500", "--report_gbits"],
        &["--backend", "xdp"],
        &["--backend", "udp"],
    );
    check_bw(&co, 65536.0, 2000.0, "4 QPs");
    assert!(
        co.contains("BW peak[Gb/sec]")
            && co.contains("Number of qps   : 4")
            && co.contains("Mtu             : 1024[B]"),
        "{co}"
    );
    assert_eq!(co.matches("local address:").count(), 4, "{co}");
    // All sizes 2 .. 2^23.
    let (_, co) = run(&net, &["write_bw", "-a", "-n", "20"], &[], &[]);
    let rows = results(&co);
    assert_eq!(
        rows.iter().map(|r| r[0] as u64).collect::<Vec<_>>(),
        (1..=23).map(|k| 1u64 << k).collect::<Vec<_>>(),
        "{co}"
    );
    // Duration mode: runs about 2 seconds, however many iterations that is.
    let t = Instant::now();
    let (_, co) = run(&net, &["write_bw", "-D", "2", "-s", "4096"], &[], &[]);
    let rows = results(&co);
    assert_eq!(rows.len(), 1, "{co}");
    assert!(
        rows[0][1] > 100.0 && t.elapsed() >= Duration::from_secs(2) && t.elapsed() < Duration::from_secs(15),
        "{co}"
    );
    // Compare-and-swap atomics.
    let (_, co) = run(&net, &["atomic_bw", "-A", "CMP_AND_SWAP", "-n", "300"], &[], &[]);
    check_bw(&co, 8.0, 300.0, "CMP_AND_SWAP");
}

#[test]
fn capture_and_injected_faults() {
    if !prereq("capture_and_injected_faults") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 103, ..PairConfig::new("pf", 1500) }).unwrap();
    let dir = std::env::temp_dir().join(format!("uroce-perf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("client.pcap");
    let pcap_s = pcap.to_str().unwrap().to_string();
    // 2% of the frames the client receives are dropped, 1% reordered: the run still completes.
    let (_, co) = run(
        &net,
        &["read_bw", "-s", "16384", "-n", "500"],
        &["--inject", "drop=0.02,reorder=0.01,seed=3"],
        &["--pcap", &pcap_s, "--inject", "drop=0.02,seed=4"],
    );
    check_bw(&co, 16384.0, 500.0, "read_bw with faults");
    let out = Command::new(BIN).args(["pcap", "-q", &pcap_s]).output().unwrap();
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{summary}");
    let field = |k: &str| -> u64 {
        summary.split_whitespace().skip_while(|w| *w != format!("{k}:")).nth(1).and_then(|v| v.parse().ok()).unwrap()
    };
    // Every READ request and every response (with retransmissions) is in the capture.
    assert!(field("roce") >= 500 * 16 + 500, "{summary}");
    assert_eq!((field("icrc_bad"), field("undecodable")), (0, 0), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's run command: `uroce demo` (as root: AF_XDP between two fresh namespaces; as an
/// unprivileged user: kernel UDP on loopback, saying why).
#[test]
fn demo_as_root_and_as_nobody() {
    if !prereq("demo_as_root_and_as_nobody") {
        return;
    }
    let out = Command::new(BIN).args(["demo", "-n", "3000"]).output().unwrap();
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{so}{se}");
    assert!(so.contains("RDMA_Write BW Test") && so.contains("af_xdp on b0"), "{so}");
    check_bw(&so, 65536.0, 3000.0, "demo");
    if !common::require(common::have("setpriv"), "setpriv (util-linux) for the unprivileged demo") {
        return;
    }
    // A copy nobody can execute wherever the checkout lives.
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("uroce-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("uroce");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["demo", "-n", "3000"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{so}{se}");
    assert!(se.contains("not root") && se.contains("kernel-UDP backend on loopback"), "{se}");
    assert!(so.contains("kernel UDP socket 127.0.0.2:4791"), "{so}");
    check_bw(&so, 65536.0, 3000.0, "demo as nobody");
}

#[test]
fn a_thousand_qps_over_af_xdp() {
    if !prereq("a_thousand_qps_over_af_xdp") {
        return;
    }
    // perftest's own out-of-band exchange, one message per QP each way, then WRITEs on all
    // 1,000 QPs over AF_XDP between the namespaces (issue 13: 10,000 QPs per device).
    let net = NetPair::create(&PairConfig { subnet: 104, ..PairConfig::new("pq", 1500) }).unwrap();
    let args = ["write_bw", "-q", "1000", "-n", "5", "-s", "4096", "--backend", "xdp"];
    let (so, co) = run(&net, &args, &[], &[]);
    check_bw(&co, 4096.0, 5000.0, "1000 QPs");
    check_bw(&so, 4096.0, 5000.0, "1000 QPs server");
    assert!(co.contains("Number of qps   : 1000") && co.contains("af_xdp"), "{co}");
    assert_eq!(co.matches("local address:").count(), 1000, "{co}");
    assert_eq!(co.matches("remote address:").count(), 1000, "{co}");
}

fn engine_counter(err: &str, name: &str) -> u64 {
    common::counter(err, "uroce-counters engine:", name)
}

/// Congestion control on real frames over AF_XDP: the server marks 5 % of what it receives CE
/// (its fault injector standing in for a switch), its notification point answers with CNPs,
/// and the client's DCQCN reaction point acts on them; the data still arrives whole.
#[test]
fn ecn_cnps_and_dcqcn_on_real_frames() {
    if !prereq("ecn_cnps_and_dcqcn_on_real_frames") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 106, ..PairConfig::new("pe", 1500) }).unwrap();
    let args = ["write_bw", "-s", "65536", "-n", "2000", "--counters"];
    let mut s_args = vec!["-d", &net.a.ifname, "--ecn", "--min-time-between-cnps", "50"];
    s_args.extend_from_slice(&args);
    s_args.extend_from_slice(&["--inject", "ce=0.05,seed=5"]);
    let mut server = common::watch(spawn(&net.a.ns, &s_args));
    let host = net.a.ip4.to_string();
    let mut c_args = vec![args[0], &host, "-d", &net.b.ifname, "--dcqcn", "--line-rate", "10"];
    c_args.extend_from_slice(&args[1..]);
    let c = common::finish(spawn(&net.b.ns, &c_args), "client", Duration::from_secs(60));
    if !c.status.success() {
        server.kill();
    }
    let s = server.finish("server", Duration::from_secs(30));
    let (se, ce) = (String::from_utf8_lossy(&s.stderr), String::from_utf8_lossy(&c.stderr));
    assert!(c.status.success() && s.status.success(), "client:\n{ce}\nserver:\n{se}");
    check_bw(&String::from_utf8_lossy(&c.stdout), 65536.0, 2000.0, "write_bw with DCQCN");
    let marked = engine_counter(&se, "np_ecn_marked_roce_packets");
    let sent = engine_counter(&se, "np_cnp_sent");
    let handled = engine_counter(&ce, "rp_cnp_handled");
    // 2000 × 16 request frames, 5 % marked; CNPs at most one per 50 µs.
    assert!(marked > 1000, "marked {marked}\n{se}");
    assert!(sent > 0 && sent <= marked, "sent {sent} of {marked}\n{se}");
    assert!(handled > 0 && handled <= sent, "client handled {handled} of {sent}\n{ce}");
    assert_eq!(engine_counter(&ce, "rp_cnp_ignored"), 0);
    eprintln!("CE-marked {marked}, CNPs sent {sent}, handled {handled}");
}

fn port_counter(err: &str, name: &str) -> u64 {
    common::counter(err, "uroce-counters port:", name)
}

/// 802.1Qbb PFC on the AF_XDP port: while PAUSE frames for priority 3 (RoCE at DSCP 26, `-T
/// 104`) reach the client's interface, it holds its frames back; when they stop (a final
/// zero-time PAUSE resumes it) it sends them and the run completes, data intact.
#[test]
fn pfc_pause_frames_hold_an_af_xdp_sender() {
    if !prereq("pfc_pause_frames_hold_an_af_xdp_sender") {
        return;
    }
    let net = NetPair::create(&PairConfig { subnet: 105, ..PairConfig::new("pp", 1500) }).unwrap();
    // A local ACK timeout of 4.3 s (`-u 20`): the pause is not mistaken for loss (with
    // perftest's 67 ms, seven timeouts during a long pause exhaust the retries, as they would
    // on a NIC).
    let args = ["write_bw", "-s", "65536", "-D", "3", "-T", "104", "-u", "20", "--counters"];
    let mut s_args = vec!["-d", &net.a.ifname];
    s_args.extend_from_slice(&args);
    let mut server = common::watch(spawn(&net.a.ns, &s_args));
    let host = net.a.ip4.to_string();
    let mut c_args = vec![args[0], &host, "-d", &net.b.ifname];
    c_args.extend_from_slice(&args[1..]);
    let client = spawn(&net.b.ns, &c_args);
    // From A's end of the veth: a PAUSE for priority 3 every millisecond for half a second
    // (65535 quanta at veth's 10 Gbit/s last 3.4 ms, so the pause is continuous), then a resume. A
    // frame that arrives before the client's socket exists goes to its kernel, which ignores it.
    let (ifname, mac) = (net.a.ifname.clone(), uroce_wire::EthernetAddress([2, 0, 0, 0, 0, 0x55]));
    let pauser = uroce::netns::spawn_in(&net.a.ns, move || {
        let fd = common::packet::packet_socket(&ifname);
        let mut f = [0u8; 60];
        let mut sent = 0u64;
        for i in 0..=500 {
            let q = if i == 500 { 0 } else { 0xffff };
            uroce_wire::pfc::PfcRepr::one(3, q).emit(mac, &mut f).unwrap();
            common::packet::send_raw(&fd, &f);
            sent += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        sent
    });
    let c = common::finish(client, "client", Duration::from_secs(60));
    if !c.status.success() {
        server.kill();
    }
    let s = server.finish("server", Duration::from_secs(30));
    let sent = uroce::netns::join(pauser).unwrap();
    let ce = String::from_utf8_lossy(&c.stderr).into_owned();
    assert!(c.status.success() && s.status.success(), "client:\n{ce}\nserver:\n{}", String::from_utf8_lossy(&s.stderr));
    let r = results(&String::from_utf8_lossy(&c.stdout));
    assert_eq!(r.len(), 1, "one result line");
    assert!(r[0][3] > 0.0, "data moved once resumed: {:?}", r[0]);
    let (rx, held) = (port_counter(&ce, "pause_rx"), port_counter(&ce, "tx_held"));
    eprintln!("PFC frames sent {sent}, received by the client's port {rx}, frames held {held}");
    assert!(rx > sent / 2 && rx <= sent, "{rx} of {sent} PFC frames reached the port\n{ce}");
    assert!(held > 0, "frames were held while paused\n{ce}");
}
