//! `uroce switch` with real frames: two uroce hosts in namespaces writing through a switch
//! namespace, whose `uroce switch` forwards on AF_XDP with a 1 Gbit/s egress limit, out of
//! one port toward the two receivers (2:1 on that port's queue). Three runs, the counters proving each
//! step:
//!
//! * DCQCN on (switch ECN on, PFC off): CE marks → CNPs → each sender slows to about its
//!   share, the switch drops (almost) nothing;
//! * DCQCN off, PFC on: no drops, but PAUSE frames toward the senders, which hold their frames;
//! * both off: the buffer overflows, frames drop, Go-Back-N retransmits.
//!
//! Needs root, `ip` and `ethtool`; skips loudly without them (fails with `CI=1`).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use uroce::netns::{self, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

struct Lab {
    _ns: Vec<Netns>,
    sw: String,
    hosts: Vec<String>,
}

/// Senders in `swt-1`, `swt-2` (veth `swt-hN`, 10.77.0.N/24) on switch ports 1 and 2
/// (`swt-pN` in `swt-s`); the switch's port 3 (`swt-p3`) leads to a Linux bridge in `swt-b`
/// that joins the receivers `swt-3`, `swt-4` (10.77.0.3, .4): both flows cross the switch's
/// port 3, its egress queue is the shared bottleneck. (Two receivers in their own namespaces,
/// because two uroce processes cannot share one interface yet.)
/// A veth pair: `a` in namespace `na`, `b` in `nb`.
fn veth(a: &str, na: &str, b: &str, nb: &str) {
    netns::ip(&["link", "add", a, "netns", na, "type", "veth", "peer", "name", b, "netns", nb]).unwrap();
}

fn lab() -> Lab {
    let sw = Netns::create("swt-s").unwrap();
    let br = Netns::create("swt-b").unwrap();
    br.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    br.ip(&["link", "set", "br0", "up"]).unwrap();
    veth("swt-p3", sw.name(), "swt-b0", br.name());
    sw.ip(&["link", "set", "swt-p3", "up"]).unwrap();
    br.ip(&["link", "set", "swt-b0", "master", "br0", "up"]).unwrap();
    let mut ns = vec![];
    let mut hosts = vec![];
    for i in 1..=4 {
        let h = Netns::create(&format!("swt-{i}")).unwrap();
        let hv = format!("swt-h{i}");
        if i <= 2 {
            let pv = format!("swt-p{i}");
            veth(&hv, h.name(), &pv, sw.name());
            sw.ip(&["link", "set", &pv, "up"]).unwrap();
        } else {
            let bv = format!("swt-b{i}");
            veth(&hv, h.name(), &bv, br.name());
            br.ip(&["link", "set", &bv, "master", "br0", "up"]).unwrap();
        }
        h.ip(&["addr", "add", &format!("10.77.0.{i}/24"), "dev", &hv]).unwrap();
        h.ip(&["link", "set", &hv, "up"]).unwrap();
        // A veth leaves TCP checksums to "hardware" (CHECKSUM_PARTIAL); a frame that crosses
        // the switch's AF_XDP sockets reaches the other kernel with them unfilled. Hosts
        // compute them instead (the out-of-band exchange is TCP).
        netns::exec(h.name(), &["ethtool", "-K", &hv, "tx", "off"]).unwrap();
        hosts.push(h.name().to_string());
        ns.push(h);
    }
    let swn = sw.name().to_string();
    ns.push(sw);
    ns.push(br);
    Lab { _ns: ns, sw: swn, hosts }
}

fn spawn(ns: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, BIN])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uroce")
}

/// The Gbit/s of the one result line of a perftest-style bandwidth report.
fn gbps(out: &str) -> f64 {
    let mut on = false;
    for l in out.lines() {
        if l.trim_start().starts_with("#bytes") {
            on = true;
            continue;
        }
        let n: Vec<f64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if on && n.len() >= 4 {
            return n[3] * 8.0 / 1000.0;
        }
    }
    panic!("no result in\n{out}");
}

struct Run {
    switch: String,
    clients: Vec<(String, String)>,
}

/// Two writers (hosts 1 and 2) to host 3 through the switch; `host` and `switch` extra flags.
fn run(lab: &Lab, host: &[&str], server: &[&str], switch: &[&str]) -> Run {
    let ports = ["--port", "swt-p1", "--port", "swt-p2", "--port", "swt-p3"];
    let mut sargs = vec!["switch", "--rate", "1", "--duration", "9"];
    sargs.extend_from_slice(&ports);
    sargs.extend_from_slice(switch);
    let sw = common::watch(spawn(&lab.sw, &sargs));
    let base = ["write_bw", "-s", "65536", "-D", "3", "-T", "104", "--counters", "--no-progress"];
    let mut servers = vec![];
    for i in 0..2 {
        let dev = format!("swt-h{}", i + 3);
        let mut a = vec!["perf", "-d", &dev];
        a.extend_from_slice(&base);
        a.extend_from_slice(server);
        servers.push(common::watch(spawn(&lab.hosts[i + 2], &a)));
    }
    let mut clients = vec![];
    for i in 0..2 {
        let (dev, peer) = (format!("swt-h{}", i + 1), format!("10.77.0.{}", i + 3));
        let mut a = vec!["perf", "write_bw", &peer, "-d", &dev];
        a.extend_from_slice(&base[1..]);
        a.extend_from_slice(host);
        clients.push(spawn(&lab.hosts[i], &a));
    }
    let mut outs = vec![];
    for (i, c) in clients.into_iter().enumerate() {
        let o = common::finish(c, &format!("client {i}"), Duration::from_secs(60));
        outs.push((
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ));
    }
    let failed = outs.iter().any(|o| !o.0);
    let mut sw = sw;
    for mut s in servers {
        if failed {
            s.kill();
        }
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.finish("server", Duration::from_secs(30))));
    }
    if failed {
        sw.kill();
    }
    let so = sw.finish("switch", Duration::from_secs(30));
    let switch = String::from_utf8_lossy(&so.stderr).into_owned();
    for (i, (ok, out, err)) in outs.iter().enumerate() {
        assert!(ok, "client {i} failed:\n{out}\n{err}\nswitch: {switch}");
    }
    Run { switch, clients: outs.into_iter().map(|(_, o, e)| (o, e)).collect() }
}

#[test]
fn dcqcn_pfc_and_neither_through_a_software_switch() {
    if !common::require(
        netns::is_root() && common::have("ip") && common::have("ethtool"),
        "switch_cli needs root, `ip` and `ethtool`",
    ) {
        return;
    }
    let lab = lab();
    // DCQCN on, PFC off.
    let r = run(
        &lab,
        &["--dcqcn", "--line-rate", "10", "-u", "20"],
        &["--ecn", "--min-time-between-cnps", "50"],
        &["--pfc", "off"],
    );
    let marked = common::counter(&r.switch, "uroce-switch:", "ecn_marked");
    let drops = common::counter(&r.switch, "uroce-switch:", "drop_buffer");
    let handled: Vec<u64> =
        r.clients.iter().map(|c| common::counter(&c.1, "uroce-counters engine:", "rp_cnp_handled")).collect();
    let bw: Vec<f64> = r.clients.iter().map(|c| gbps(&c.0)).collect();
    eprintln!("DCQCN: marked {marked}, drops {drops}, CNPs handled {handled:?}, Gbit/s {bw:?}\n{}", r.switch);
    assert!(marked > 0, "{}", r.switch);
    assert!(handled.iter().all(|&h| h > 0), "both senders reacted: {handled:?}");
    assert_eq!(drops, 0, "{}", r.switch);
    // Each sender near its share (CPU-bound here: both ends and the switch share two cores).
    let (lo, hi) = (bw[0].min(bw[1]), bw[0].max(bw[1]));
    assert!(lo > 0.4 * hi, "shares {bw:?}");
    // PFC, no DCQCN.
    // Headroom for what is in flight after XOFF: the senders' AF_XDP rings and the veths hold
    // megabytes (on a real link: the bandwidth-delay product).
    let r = run(&lab, &["-u", "20"], &[], &["--pfc", "65536,32768,8388608", "--ecn", "off"]);
    let pauses = common::counter(&r.switch, "uroce-switch:", "pause_sent");
    let drops_pfc = common::counter(&r.switch, "uroce-switch:", "drop_buffer")
        + common::counter(&r.switch, "uroce-switch:", "drop_headroom");
    let held: Vec<u64> = r.clients.iter().map(|c| common::counter(&c.1, "uroce-counters port:", "tx_held")).collect();
    let bw_pfc: Vec<f64> = r.clients.iter().map(|c| gbps(&c.0)).collect();
    eprintln!("PFC: pauses {pauses}, drops {drops_pfc}, held {held:?}, Gbit/s {bw_pfc:?}\n{}", r.switch);
    assert!(pauses > 0, "{}", r.switch);
    assert_eq!(drops_pfc, 0, "lossless: {}", r.switch);
    assert!(held.iter().any(|&h| h > 0), "the senders held frames: {held:?}");
    // Neither: a small buffer overflows, Go-Back-N resends.
    let r = run(&lab, &["-u", "14"], &[], &["--pfc", "off", "--ecn", "off", "--buffer", "131072"]);
    let drops_none = common::counter(&r.switch, "uroce-switch:", "drop_buffer");
    let retrans: u64 =
        r.clients.iter().map(|c| common::counter(&c.1, "uroce-counters engine:", "retransmitted_pkts")).sum();
    eprintln!("neither: drops {drops_none}, retransmissions {retrans}\n{}", r.switch);
    assert!(drops_none > 0 && retrans > 0, "{}", r.switch);
}
