//! Stock verbs programs over uroce's drop-in `libibverbs.so.1` on both ends, each end a
//! separate process in its own network namespace (AF_XDP on its veth): Debian's
//! `ibv_rc_pingpong` (polling and with completion events, every received buffer checked),
//! `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`, perftest's RC tests (WRITE/READ/SEND/atomic
//! bandwidth and latency, several QPs, every size, a timed run, completion events,
//! `--run_infinitely`) and its UC and UD ones. Each program must exit 0 on both sides and print the
//! figures it prints on real RDMA hardware. And a program killed while it holds the device
//! leaves no XDP program attached.
//!
//! Needs the library (`scripts/build-verbs`, which `scripts/test-all` runs first), Debian's
//! `ibverbs-utils` and `perftest`, and root for the namespaces.

mod common;
#[path = "common/ix.rs"]
mod ix;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use uroce::netns::{NetPair, PairConfig};

/// The library, or None (a skip, or a failure under CI) when it, a tool or root is missing.
fn setup(test: &str, tools: &[&str]) -> Option<PathBuf> {
    if !common::require(uroce_netns::is_root(), &format!("{test}: root (network namespaces)")) {
        return None;
    }
    common::verbs_setup(test, ix::verbs_dir(), tools)
}

/// Start `argv` in namespace `ns` over the library in `dir` on `ifname` (`env`: more
/// `NAME=VALUE`s; `peer`: the server's address, for a client).
fn spawn(ns: &str, ifname: &str, dir: &Path, env: &[&str], argv: &[&str], peer: Option<String>) -> common::Watched {
    let mut c = uroce_netns::command_in(ns, "env");
    c.arg(format!("LD_LIBRARY_PATH={}", dir.display())).args(env).arg(argv[0]);
    c.args(["-d", &format!("uroce_{ifname}")]).args(&argv[1..]).args(peer);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    common::watch(c.spawn().expect("spawn"))
}

/// Wait until something in `ns` listens on TCP `port` (perftest's client does not retry).
fn wait_listening(ns: &str, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let listening = format!(":{port} ");
    while !uroce_netns::exec(ns, &["ss", "-ltnH"])
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&listening))
    {
        assert!(Instant::now() < deadline, "{what} server not listening on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start `argv` as server (in B) and client (in A, with B's address appended), each over the
/// library in `dir` on its namespace's veth; the client starts once the server listens on
/// TCP `port` (the programs' out-of-band exchange). Returns (client, server).
fn start_pair(net: &NetPair, dir: &Path, argv: &[&str], port: u16) -> (common::Watched, common::Watched) {
    let server = spawn(&net.b.ns, &net.b.ifname, dir, &[], argv, None);
    wait_listening(&net.b.ns, port, argv[0]);
    (spawn(&net.a.ns, &net.a.ifname, dir, &[], argv, Some(net.b.ip4.to_string())), server)
}

/// [`start_pair`], then both must exit 0. Returns (client, server) output.
fn pair(net: &NetPair, dir: &Path, argv: &[&str], port: u16) -> (Output, Output) {
    let (client, server) = start_pair(net, dir, argv, port);
    let c = client.finish("client", Duration::from_secs(120));
    let s = server.finish("server", Duration::from_secs(120));
    for (who, o) in [("client", &c), ("server", &s)] {
        assert!(
            o.status.success(),
            "{argv:?} {who} exited {:?}\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    (c, s)
}

/// Stock `ibv_rc_pingpong` on both ends: 500 round trips of 4 KiB, every received buffer
/// checked (`-c`), first polling, then sleeping on a completion channel (`-e`:
/// `ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`).
#[test]
fn stock_ibv_rc_pingpong_between_two_uroce_processes() {
    let Some(dir) = setup("verbs_programs::rc_pingpong", &["ibv_rc_pingpong"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 131, ..PairConfig::new("vp", 1500) }).expect("veth pair");
    for mode in ["-c", "-e"] {
        let argv = ["ibv_rc_pingpong", "-g", "1", "-s", "4096", "-n", "500", "-c", mode];
        let (c, s) = pair(&net, &dir, &argv, 18515);
        for (who, o) in [("client", &c), ("server", &s)] {
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("500 iters in") && out.contains("4096000 bytes in"), "{mode} {who}:\n{out}");
            assert!(out.contains("local address:") && out.contains("remote address:"), "{mode} {who}:\n{out}");
            eprintln!("[verbs] stock ibv_rc_pingpong {mode} {who} on uroce:\n{out}");
        }
    }
}

/// Stock `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong` on both ends, every
/// received buffer checked (`-c`): UC's unacknowledged SENDs, UD's datagrams with their GRH
/// area and address handles, 16 RC QPs receiving from one SRQ (polling and with `-e`).
#[test]
fn stock_ibv_uc_ud_and_srq_pingpong_between_two_uroce_processes() {
    let tools = ["ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"];
    let Some(dir) = setup("verbs_programs::uc_ud_srq_pingpong", &tools) else { return };
    let net = NetPair::create(&PairConfig { subnet: 136, ..PairConfig::new("vu", 1500) }).expect("veth pair");
    // ud_pingpong's largest size is the MTU (1024 on a 1500-byte link)
    let runs = [
        ("ibv_uc_pingpong", "4096", "-c"),
        ("ibv_ud_pingpong", "1024", "-c"),
        ("ibv_srq_pingpong", "4096", "-c"),
        ("ibv_srq_pingpong", "4096", "-e"),
    ];
    for (tool, size, mode) in runs {
        let argv = [tool, "-g", "1", "-s", size, "-n", "500", "-c", mode];
        let (c, s) = pair(&net, &dir, &argv, 18515);
        let bytes = format!("{} bytes in", 500 * 2 * size.parse::<u64>().unwrap());
        for (who, o) in [("client", &c), ("server", &s)] {
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("500 iters in") && out.contains(&bytes), "{tool} {who}:\n{out}");
            eprintln!("[verbs] stock {tool} {who} on uroce:\n{out}");
        }
    }
}

/// perftest's result rows: the lines of the table under its `#bytes` header, as columns.
fn rows(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .map(|l| l.split_whitespace().map_while(|w| w.parse::<f64>().ok()).collect::<Vec<_>>())
        .filter(|r| r.len() >= 3)
        .collect()
}

/// One perftest run: its arguments, the sizes of the rows it prints, the iterations of each
/// row (None: a timed run), and a column that must be positive (bandwidth or typical latency).
type Case<'a> = (Vec<&'a str>, Vec<f64>, Option<f64>, usize);

/// Run each perftest case on both ends: the client's table has one row per expected size,
/// the iterations asked for (or some work, for a timed run), and a positive column `col`.
fn run_cases(net: &NetPair, dir: &Path, cases: Vec<Case>) {
    for (args, sizes, iters, col) in cases {
        let mut argv = args.clone();
        argv.extend(["-x", "1", "-F"]);
        let (c, _) = pair(net, dir, &argv, 18515);
        let out = String::from_utf8_lossy(&c.stdout);
        let table = rows(&out);
        let got: Vec<f64> = table.iter().map(|r| r[0]).collect();
        assert_eq!(got, sizes, "{args:?}: one row per size:\n{out}");
        for r in &table {
            if let Some(n) = iters {
                assert_eq!(r[1], n, "{args:?}: iterations:\n{out}");
            } else {
                assert!(r[1] > 0.0, "{args:?}: a timed run does work:\n{out}");
            }
            assert!(r[col] > 0.0, "{args:?}: column {col} positive:\n{out}");
        }
        eprintln!(
            "[verbs] {args:?} on uroce, both ends:\n{}",
            table.iter().map(|r| format!("{r:?}")).collect::<Vec<_>>().join("\n")
        );
    }
}

/// Debian's perftest on both ends, over RC: each test's client prints its table with one row
/// per message size, the iterations it was asked for, and a positive bandwidth or latency.
#[test]
fn stock_perftest_between_two_uroce_processes() {
    let tools =
        ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"];
    let Some(dir) = setup("verbs_programs::perftest", &tools) else { return };
    let net = NetPair::create(&PairConfig { subnet: 132, ..PairConfig::new("vf", 1500) }).expect("veth pair");
    let pow2: Vec<f64> = (1..=23).map(|k| (1u64 << k) as f64).collect();
    let cases: Vec<Case> = vec![
        (vec!["ib_write_bw", "-n", "2000"], vec![65536.0], Some(2000.0), 3),
        (vec!["ib_read_bw", "-n", "2000", "-o", "16"], vec![65536.0], Some(2000.0), 3),
        (vec!["ib_send_bw", "-n", "2000"], vec![65536.0], Some(2000.0), 3),
        (vec!["ib_send_bw", "-n", "2000", "-e"], vec![65536.0], Some(2000.0), 3),
        (vec!["ib_atomic_bw", "-n", "2000"], vec![8.0], Some(2000.0), 3),
        (vec!["ib_atomic_bw", "-n", "2000", "-A", "FETCH_AND_ADD"], vec![8.0], Some(2000.0), 3),
        (vec!["ib_write_bw", "-n", "1000", "-q", "4"], vec![65536.0], Some(4000.0), 3),
        (vec!["ib_write_bw", "-n", "100", "-a"], pow2.clone(), Some(100.0), 3),
        (vec!["ib_read_bw", "-n", "100", "-a"], pow2, Some(100.0), 3),
        (vec!["ib_write_bw", "-D", "2"], vec![65536.0], None, 3),
        (vec!["ib_write_lat", "-n", "2000"], vec![2.0], Some(2000.0), 2),
        (vec!["ib_read_lat", "-n", "2000"], vec![2.0], Some(2000.0), 2),
        (vec!["ib_send_lat", "-n", "2000"], vec![2.0], Some(2000.0), 2),
        (vec!["ib_send_lat", "-n", "2000", "-e", "-s", "4096"], vec![4096.0], Some(2000.0), 2),
    ];
    run_cases(&net, &dir, cases);
}

/// Debian's perftest over UC and UD on both ends (`-c UC`, `-c UD`): each client prints its
/// table, one row per size, the iterations it was asked for, a positive figure.
#[test]
fn stock_perftest_uc_and_ud_between_two_uroce_processes() {
    let tools = ["ib_write_bw", "ib_send_bw", "ib_write_lat", "ib_send_lat"];
    let Some(dir) = setup("verbs_programs::perftest_uc_ud", &tools) else { return };
    let net = NetPair::create(&PairConfig { subnet: 137, ..PairConfig::new("vd", 1500) }).expect("veth pair");
    // SEND bandwidth over UC and UD has no flow control: a message that finds no receive WQE
    // is dropped, and the server then waits for it forever (perftest counts receives). At most
    // `rx_depth` (512) iterations per QP, every receive WQE is posted before the first SEND.
    let cases: Vec<Case> = vec![
        (vec!["ib_send_bw", "-c", "UD", "-n", "500"], vec![1024.0], Some(500.0), 3),
        (vec!["ib_send_bw", "-c", "UD", "-n", "500", "-q", "2"], vec![1024.0], Some(1000.0), 3),
        (vec!["ib_send_lat", "-c", "UD", "-n", "2000"], vec![2.0], Some(2000.0), 2),
        (vec!["ib_write_bw", "-c", "UC", "-n", "2000"], vec![65536.0], Some(2000.0), 3),
        // One-packet UC SENDs: a 64-packet message loses one now and then on a loaded
        // machine (the receiving socket's ring overflows), and a lost UC message is never resent.
        (vec!["ib_send_bw", "-c", "UC", "-n", "500", "-s", "1024"], vec![1024.0], Some(500.0), 3),
        (vec!["ib_write_lat", "-c", "UC", "-n", "2000"], vec![2.0], Some(2000.0), 2),
        (vec!["ib_send_lat", "-c", "UC", "-n", "2000"], vec![2.0], Some(2000.0), 2),
    ];
    run_cases(&net, &dir, cases);
}

/// `--run_infinitely -D 1`: perftest reports every second until it is stopped; both sides
/// keep running and the client's reports stay positive.
#[test]
fn stock_perftest_runs_infinitely() {
    let Some(dir) = setup("verbs_programs::run_infinitely", &["ib_write_bw"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 135, ..PairConfig::new("vi", 1500) }).expect("veth pair");
    let argv = ["ib_write_bw", "--run_infinitely", "-D", "1", "-x", "1", "-F"];
    let (mut client, mut server) = start_pair(&net, &dir, &argv, 18515);
    // the run's length is the test: 6 s, four reports or so, then both are stopped
    std::thread::sleep(Duration::from_secs(6));
    let running = (client.running(), server.running());
    client.kill();
    server.kill();
    let c = client.finish("client", Duration::from_secs(5));
    let _ = server.finish("server", Duration::from_secs(5));
    let out = String::from_utf8_lossy(&c.stdout);
    assert_eq!(running, (true, true), "both still running after 6 s:\n{out}");
    let table = rows(&out);
    assert!(table.len() >= 2, "a report per second:\n{out}");
    for r in &table {
        assert_eq!(r[0], 65536.0, "{out}");
        assert!(r[1] > 0.0 && r[3] > 0.0, "iterations and BW average positive:\n{out}");
    }
    eprintln!("[verbs] ib_write_bw --run_infinitely -D 1 on uroce, both ends: {} reports", table.len());
}

/// A program killed with SIGKILL while it holds the device (its engine started, AF_XDP socket
/// open, XDP program attached through a BPF link the broker holds) leaves nothing behind: the
/// kernel closes its connection to the broker, which, left with no process, exits and so
/// releases the link, the map and the shared UMEM; nothing is pinned. The next program
/// attaches again.
#[test]
fn a_killed_program_leaves_no_xdp_program_behind() {
    let Some(dir) = setup("verbs_programs::killed", &["ibv_rc_pingpong", "ss"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 134, ..PairConfig::new("vk", 1500) }).expect("veth pair");
    let (ns, ifname) = (&net.b.ns, &net.b.ifname);
    let attached = || {
        let o = uroce_netns::exec(ns, &["ip", "-d", "link", "show", "dev", ifname]).expect("ip link");
        String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
    };
    assert!(!attached(), "nothing attached before");
    let mut c = uroce_netns::command_in(ns, "env");
    c.arg(format!("LD_LIBRARY_PATH={}", dir.display()));
    c.args(["ibv_rc_pingpong", "-d", &format!("uroce_{ifname}"), "-g", "1"]);
    c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut server = c.spawn().expect("spawn ibv_rc_pingpong");
    // rc_pingpong creates its QP (so the engine runs) before it listens
    let deadline = Instant::now() + Duration::from_secs(20);
    while !uroce_netns::exec(ns, &["ss", "-ltnH"]).is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(":18515 "))
    {
        assert!(Instant::now() < deadline, "ibv_rc_pingpong server not listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(attached(), "uroce's XDP program is attached while the program runs");
    // The program shares the interface (the default): the broker holds the XDP link, and
    // leaves when its last process has gone.
    let brokers = brokers_in(ns);
    assert_eq!(brokers.len(), 1, "one broker holds the shared objects");
    server.kill().expect("SIGKILL");
    server.wait().expect("reap");
    assert!(exits(brokers[0]), "the broker leaves with the killed process, its last");
    assert!(!attached(), "the XDP program went with the process");
    // and the interface is free for the next program: a pair runs on it at once
    let (c, _) = pair(&net, &dir, &["ibv_rc_pingpong", "-g", "1", "-n", "10", "-c"], 18515);
    assert!(String::from_utf8_lossy(&c.stdout).contains("10 iters in"));
}

/// The pids of the `uroce-broker` processes in network namespace `ns`.
fn brokers_in(ns: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(format!("/run/netns/{ns}")).expect("netns").ino();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let net = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino());
        if comm.trim_end() == "uroce-broker" && net.is_ok_and(|i| i == target) {
            pids.push(pid);
        }
    }
    pids
}

/// Wait (up to 10 s) for process `pid` to exit: a pidfd turns readable when it does.
fn exits(pid: u32) -> bool {
    // SAFETY: pidfd_open(2) and poll(2) on our own descriptor.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
        if fd < 0 {
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        }
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let n = libc::poll(&mut p, 1, 10_000);
        libc::close(fd);
        n == 1
    }
}

/// The QPN perftest prints for its own side ("local address: LID 0000 QPN 0x01a2b3 ...").
fn local_qpn(out: &str) -> u32 {
    let l = out.lines().find(|l| l.contains("local address")).unwrap_or_else(|| panic!("no local address:\n{out}"));
    let hex = l.split("QPN").nth(1).and_then(|r| r.split_whitespace().next()).expect("QPN field");
    u32::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex QPN")
}

/// Two processes on one interface (two MPI ranks on one host): two `ib_write_bw` clients in
/// A, both on A's one address and veth, run at the same time to two servers in B that share
/// B's interface the same way. Each process owns a block of QP numbers, and the kernel gives
/// every frame to the process owning its destination QP — on kernel UDP an `SO_REUSEPORT`
/// program (all four on UDP port 4791), on AF_XDP the XDP program redirecting to each
/// process's own socket on the queue's shared UMEM. Both timed runs (3 s each, started
/// together) do work. One broker per namespace holds what is shared while they run and leaves
/// with the last of them.
fn two_pairs_at_once(test: &str, subnet: u8, prefix: &str, env: &[&str]) {
    let Some(dir) = setup(test, &["ib_write_bw", "ss"]) else { return };
    let net = NetPair::create(&PairConfig { subnet, ..PairConfig::new(prefix, 1500) }).expect("veth pair");
    let run = |port: &'static str| vec!["ib_write_bw", "-p", port, "-D", "3", "-s", "4096", "-x", "1", "-F"];
    let (r1, r2) = (run("18515"), run("18516"));
    let s1 = spawn(&net.b.ns, &net.b.ifname, &dir, env, &r1, None);
    let s2 = spawn(&net.b.ns, &net.b.ifname, &dir, env, &r2, None);
    wait_listening(&net.b.ns, 18515, "first");
    wait_listening(&net.b.ns, 18516, "second");
    let peer = || Some(net.b.ip4.to_string());
    let mut c1 = spawn(&net.a.ns, &net.a.ifname, &dir, env, &r1, peer());
    let mut c2 = spawn(&net.a.ns, &net.a.ifname, &dir, env, &r2, peer());
    // The engines (and with them the brokers) start when the programs create their QPs.
    let mut seen = (Vec::new(), Vec::new());
    while (seen.0.is_empty() || seen.1.is_empty()) && (c1.running() || c2.running()) {
        seen = (brokers_in(&net.a.ns), brokers_in(&net.b.ns));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!((seen.0.len(), seen.1.len()), (1, 1), "one broker per side while the programs run: {seen:?}");
    let outs: Vec<_> = [(c1, "client 1"), (c2, "client 2"), (s1, "server 1"), (s2, "server 2")]
        .into_iter()
        .map(|(w, who)| (w.finish(who, Duration::from_secs(120)), who))
        .collect();
    for (o, who) in &outs {
        assert!(
            o.status.success(),
            "{who} exited {:?}\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mut blocks = Vec::new();
    for (i, (o, who)) in outs.iter().enumerate() {
        let out = String::from_utf8_lossy(&o.stdout);
        blocks.push(local_qpn(&out) >> 16);
        if i < 2 {
            let table = rows(&out);
            assert_eq!(table.len(), 1, "{out}");
            assert_eq!(table[0][0], 4096.0, "size:\n{out}");
            assert!(table[0][1] > 1000.0, "iterations:\n{out}");
            assert!(table[0][3] > 0.0, "bandwidth:\n{out}");
            eprintln!("[verbs] two processes on one interface ({env:?}): {who}: {:?}", table[0]);
        }
    }
    // The two processes of each side own different blocks (neither 0: both share).
    assert!(blocks.iter().all(|&b| b != 0) && blocks[0] != blocks[1] && blocks[2] != blocks[3], "{blocks:?}");
    for pid in seen.0.into_iter().chain(seen.1) {
        assert!(exits(pid), "broker {pid} leaves with its last process");
    }
    assert!(brokers_in(&net.a.ns).is_empty() && brokers_in(&net.b.ns).is_empty());
}

#[test]
fn two_processes_on_one_interface_run_perftest_to_two_peers_at_once_over_udp() {
    two_pairs_at_once("verbs_programs::two_processes_udp", 138, "vs", &["UROCE_BACKEND=udp"]);
}

#[test]
fn two_processes_on_one_interface_run_perftest_to_two_peers_at_once_over_af_xdp() {
    two_pairs_at_once("verbs_programs::two_processes_xdp", 139, "vx", &["UROCE_BACKEND=xdp"]);
}

/// Congestion control from the environment, as `uroce perf --ecn --dcqcn` sets it by flags:
/// stock `ib_write_bw` whose server (`UROCE_ECN=1`) sees a quarter of its received frames
/// CE-marked (`UROCE_INJECT`, the marks a switch would make) answers them with CNPs, and the
/// client (`UROCE_DCQCN=connectx`, captured with `UROCE_PCAP`) sends every request ECT(0) and
/// receives those CNPs. A client without the variables sends Not-ECT, as rxe.
#[test]
fn stock_perftest_runs_dcqcn_set_by_the_environment() {
    let Some(dir) = setup("verbs_programs::dcqcn_env", &["ib_write_bw"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 138, ..PairConfig::new("vz", 1500) }).expect("veth pair");
    for on in [true, false] {
        let pcap = std::env::temp_dir().join(format!("uroce-vp-dcqcn-{on}-{}.pcap", std::process::id()));
        let cap = format!("UROCE_PCAP={}", pcap.display());
        let (senv, cenv): (Vec<&str>, Vec<&str>) = if on {
            (vec!["UROCE_ECN=1", "UROCE_INJECT=ce=0.25,seed=3"], vec!["UROCE_DCQCN=connectx", cap.as_str()])
        } else {
            (vec![], vec![cap.as_str()])
        };
        let argv = ["ib_write_bw", "-n", "500", "-s", "65536"];
        let server = spawn(&net.b.ns, &net.b.ifname, &dir, &senv, &argv, None);
        wait_listening(&net.b.ns, 18515, "ib_write_bw");
        let client = spawn(&net.a.ns, &net.a.ifname, &dir, &cenv, &argv, Some(net.b.ip4.to_string()));
        let c = client.finish("client", Duration::from_secs(120));
        let s = server.finish("server", Duration::from_secs(120));
        for (who, o) in [("client", &c), ("server", &s)] {
            assert!(o.status.success(), "{who}: {}", String::from_utf8_lossy(&o.stderr));
        }
        let (mut ect, mut not_ect, mut cnps) = (0u64, 0u64, 0u64);
        uroce_io::capture::read::for_each_frame(&pcap, |f| {
            let Ok(p) = uroce_wire::parse_frame(&f.data) else { return Ok(()) };
            if p.roce.bth.opcode == uroce_wire::Opcode::CNP {
                cnps += 1;
            } else if p.roce.bth.opcode.info().is_some_and(|i| i.is_request()) {
                if p.ip.ecn() == uroce_wire::Ecn::Ect0 {
                    ect += 1;
                } else {
                    not_ect += 1;
                }
            }
            Ok(())
        })
        .expect("the client's capture");
        std::fs::remove_file(&pcap).ok();
        eprintln!(
            "[verbs] ib_write_bw, congestion control {on}: requests ECT(0) {ect}, Not-ECT {not_ect}, CNPs {cnps}"
        );
        if on {
            assert!(ect >= 500 * 16 && not_ect == 0, "every request ECT(0): {ect} / {not_ect}");
            assert!(cnps > 0, "the server's CNPs reached the client");
        } else {
            assert!(not_ect >= 500 * 16 && ect == 0 && cnps == 0, "rxe's frames: {ect} / {not_ect} / {cnps}");
        }
    }
}
