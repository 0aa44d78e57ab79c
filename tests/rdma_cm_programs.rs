//! Stock RDMA-CM programs over uroce's drop-in `librdmacm.so.1` and `libibverbs.so.1` on both
//! ends, each end a process in its own network namespace: Debian's `rping` (RDMA READ, WRITE and
//! SEND, every ping's data checked with `-v`) over AF_XDP and over kernel UDP, and perftest's
//! bandwidth tests with `-R` (connection setup through RDMA-CM instead of perftest's TCP
//! exchange). Connections are set up with the IB CM's REQ/REP/RTU on QP1 and released with
//! DREQ/DREP, as between two kernels.
//!
//! Needs the libraries (`scripts/build-verbs`), Debian's `rdmacm-utils` and `perftest`, and root.

mod common;
#[path = "common/ix.rs"]
mod ix;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use uroce::netns::{NetPair, PairConfig};

fn setup(test: &str, tools: &[&str]) -> Option<PathBuf> {
    if !common::require(uroce_netns::is_root(), &format!("{test}: root (network namespaces)")) {
        return None;
    }
    let dir = common::verbs_setup(test, ix::verbs_dir(), tools)?;
    if !common::require(dir.join("librdmacm.so.1").exists(), &format!("{test}: librdmacm.so.1 (scripts/build-verbs)")) {
        return None;
    }
    Some(dir)
}

fn spawn(ns: &str, dir: &Path, env: &[&str], argv: &[String]) -> common::Watched {
    let mut c = uroce_netns::command_in(ns, "env");
    c.arg(format!("LD_LIBRARY_PATH={}", dir.display())).args(env).args(argv);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    common::watch(c.spawn().expect("spawn"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Run the server, then the client until the server listens (a client that comes first is
/// refused by the CM, REJ "invalid service ID", and exits: it is started again), then both
/// must exit 0. Returns (client, server) output.
fn pair(net: &NetPair, dir: &Path, env: &[&str], server: &[String], client: &[String]) -> (Output, Output) {
    let s = spawn(&net.b.ns, dir, env, server);
    let c = client_until_served(net, dir, env, client);
    let s = s.finish("server", Duration::from_secs(120));
    for (who, o) in [("client", &c), ("server", &s)] {
        let t = text(o);
        assert!(o.status.success(), "{client:?} {who} exited {:?}\n{}", o.status, &t[..t.len().min(4000)]);
    }
    (c, s)
}

/// Run the client until the server listens (see [`pair`]).
fn client_until_served(net: &NetPair, dir: &Path, env: &[&str], client: &[String]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = spawn(&net.a.ns, dir, env, client).finish("client", Duration::from_secs(120));
        let t = text(&c);
        let refused = t.contains("REJECTED") || t.contains("Connection refused") || t.contains("UNREACHABLE");
        if c.status.success() || !refused || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// rping: 50 pings of 4 KiB, each an RDMA READ of the client's buffer, an RDMA WRITE back and
/// SENDs, the data checked on both sides (`-v` prints each ping's data); then the disconnect.
#[test]
fn stock_rping_between_two_uroce_processes_over_af_xdp_and_udp() {
    let Some(dir) = setup("rdma_cm_programs::rping", &["rping"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 141, ..PairConfig::new("rc", 1500) }).expect("veth pair");
    let ip = net.b.ip4.to_string();
    for backend in ["xdp", "udp"] {
        let env = [format!("UROCE_BACKEND={backend}")];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let server = args(&["rping", "-s", "-a", &ip, "-C", "50", "-S", "4096", "-v"]);
        let client = args(&["rping", "-c", "-a", &ip, "-C", "50", "-S", "4096", "-v"]);
        let (c, s) = pair(&net, &dir, &env, &server, &client);
        let (ct, st) = (text(&c), text(&s));
        // The first lines only, in a failure's message: each ping prints 4 KiB.
        let head = |t: &str| t.lines().take(4).map(|l| &l[..l.len().min(120)]).collect::<Vec<_>>().join("\n");
        for k in [0, 17, 49] {
            let ping = format!("ping data: rdma-ping-{k}: ");
            assert!(ct.contains(&ping), "{backend} client, ping {k}:\n{}", head(&ct));
            assert!(st.contains(&format!("server {ping}")), "{backend} server, ping {k}:\n{}", head(&st));
        }
        assert_eq!(ct.matches("ping data: rdma-ping-").count(), 50, "{backend}:\n{}", head(&ct));
        assert!(st.contains("server DISCONNECT EVENT"), "{backend}: the server sees the DREQ:\n{}", head(&st));
        eprintln!("[rdma_cm] stock rping over {backend}, 50 pings of 4 KiB verified on both ends");
    }
}

/// Several RDMA-CM processes on one interface: two rping servers (ports 7471 and 7472) in one
/// namespace and two clients at once in the other, four uroce processes, two per interface,
/// sharing it; each process's CM gets the MADs its messages name (the XDP program or the
/// reuseport program read them), every ping's data checked on both ends.
#[test]
fn two_rping_pairs_at_once_with_two_processes_per_interface() {
    let Some(dir) = setup("rdma_cm_programs::shared", &["rping"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 147, ..PairConfig::new("rs", 1500) }).expect("veth pair");
    let ip = net.b.ip4.to_string();
    for backend in ["xdp", "udp"] {
        let env = [format!("UROCE_BACKEND={backend}")];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let ports = ["7471", "7472"];
        let servers: Vec<_> = ports
            .iter()
            .map(|p| {
                spawn(
                    &net.b.ns,
                    &dir,
                    &env,
                    &args(&["rping", "-s", "-a", &ip, "-p", p, "-C", "20", "-S", "1024", "-v"]),
                )
            })
            .collect();
        let clients: Vec<Output> = std::thread::scope(|sc| {
            let hs: Vec<_> = ports
                .iter()
                .map(|p| {
                    let client = args(&["rping", "-c", "-a", &ip, "-p", p, "-C", "20", "-S", "1024", "-v"]);
                    let (net, dir, env) = (&net, &dir, &env);
                    sc.spawn(move || client_until_served(net, dir, env, &client))
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("client thread")).collect()
        });
        for (i, (c, s)) in clients.iter().zip(servers).enumerate() {
            let s = s.finish("server", Duration::from_secs(120));
            let (ct, st) = (text(c), text(&s));
            let head = |t: &str| t.lines().take(6).map(|l| &l[..l.len().min(160)]).collect::<Vec<_>>().join("\n");
            assert!(c.status.success() && s.status.success(), "{backend} pair {i}:\n{}\n---\n{}", head(&ct), head(&st));
            assert_eq!(ct.matches("ping data: rdma-ping-").count(), 20, "{backend} pair {i}:\n{}", head(&ct));
            assert_eq!(st.matches("server ping data: rdma-ping-").count(), 20, "{backend} pair {i}:\n{}", head(&st));
        }
        eprintln!(
            "[rdma_cm] two rping pairs at once over {backend}, two processes per interface: 20 pings each verified"
        );
    }
}

/// perftest with `-R`: WRITE, READ and SEND bandwidth, 2000 iterations each, connected through
/// RDMA-CM; the client prints its row with the iterations asked for and a positive bandwidth.
#[test]
fn stock_perftest_over_rdma_cm_between_two_uroce_processes() {
    let tools = ["ib_write_bw", "ib_read_bw", "ib_send_bw"];
    let Some(dir) = setup("rdma_cm_programs::perftest", &tools) else { return };
    let net = NetPair::create(&PairConfig { subnet: 142, ..PairConfig::new("rq", 1500) }).expect("veth pair");
    for tool in tools {
        let server = args(&[tool, "-R", "-n", "2000", "-F"]);
        let mut client = server.clone();
        client.push(net.b.ip4.to_string());
        let (c, _) = pair(&net, &dir, &[], &server, &client);
        let out = String::from_utf8_lossy(&c.stdout);
        assert!(out.contains("rdma_cm QPs\t : ON") || out.contains("rdma_cm QPs : ON"), "{tool}:\n{out}");
        let row: Vec<f64> = out
            .lines()
            .skip_while(|l| !l.contains("#bytes"))
            .nth(1)
            .map(|l| l.split_whitespace().filter_map(|w| w.parse().ok()).collect())
            .unwrap_or_default();
        assert!(row.len() >= 4 && row[0] == 65536.0 && row[1] == 2000.0 && row[3] > 0.0, "{tool}: {row:?}\n{out}");
        eprintln!("[rdma_cm] stock {tool} -R on uroce: {} MB/s", row[3]);
    }
}

/// The other rdmacm-utils programs, each over AF_XDP and over kernel UDP: `ucmatose` (4
/// connections at once, 20 SENDs each way on each, and again with `-m`: every ID migrated to
/// a new event channel), `udaddy` (UD: the server's QP found by SIDR, 10 datagrams each way),
/// `rdma_server`/`rdma_client` (synchronous endpoints from `rdma_getaddrinfo`, `rdma_create_ep`
/// and `rdma_get_request`, a SEND each way on CQs librdmacm made with their completion
/// channels) and `cmtime` (100 connections whose QPs the program moves itself with
/// `rdma_init_qp_attr` and confirms with `rdma_establish`; its step timings printed).
#[test]
fn stock_ucmatose_udaddy_rdma_server_and_cmtime_between_two_uroce_processes() {
    let tools = ["ucmatose", "udaddy", "rdma_server", "rdma_client", "cmtime"];
    let Some(dir) = setup("rdma_cm_programs::others", &tools) else { return };
    let net = NetPair::create(&PairConfig { subnet: 143, ..PairConfig::new("ro", 1500) }).expect("veth pair");
    let ip = net.b.ip4.to_string();
    for backend in ["xdp", "udp"] {
        let env = [format!("UROCE_BACKEND={backend}")];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let runs: [(&[&str], &[&str], &[&str]); 4] = [
            (
                &["ucmatose", "-c", "4", "-C", "20"],
                &["ucmatose", "-s", &ip, "-c", "4", "-C", "20"],
                &["test complete", "return status 0"],
            ),
            (
                &["ucmatose", "-c", "4", "-C", "20", "-m"],
                &["ucmatose", "-s", &ip, "-c", "4", "-C", "20", "-m"],
                &["test complete", "return status 0"],
            ),
            (
                &["udaddy", "-C", "10"],
                &["udaddy", "-s", &ip, "-C", "10"],
                &["data transfers complete", "return status 0"],
            ),
            (&["rdma_server", "-s", &ip], &["rdma_client", "-s", &ip], &["end 0"]),
        ];
        for (server, client, done) in runs {
            let pcap = std::env::temp_dir().join(format!("uroce-rdma-cm-{}-{backend}.pcap", std::process::id()));
            // (AF_XDP frames pass tcpdump by on both ends: the kernel UDP run is the one seen.)
            let cap = (server[0] == "udaddy" && backend == "udp")
                .then(|| ix::Tcpdump::start(&net.a.ns, &net.a.ifname, &pcap, "udp port 4791").expect("tcpdump"));
            let (c, s) = pair(&net, &dir, &env, &args(server), &args(client));
            if let Some(cap) = cap {
                cap.stop().expect("tcpdump stop");
                udaddy_immediates_are_qp_numbers(&pcap, backend);
                let _ = std::fs::remove_file(&pcap);
            }
            for (who, o) in [("client", &c), ("server", &s)] {
                let t = text(o);
                for d in done {
                    assert!(t.contains(d), "{backend} {} {who}: no {d:?}\n{t}", server[0]);
                }
            }
            eprintln!("[rdma_cm] stock {} / {} over {backend}: both ends done", server[0], client[0]);
        }
        // cmtime's server serves until killed.
        let mut s = spawn(&net.b.ns, &dir, &env, &args(&["cmtime", "-c", "100"]));
        let c = client_until_served(&net, &dir, &env, &args(&["cmtime", "-s", &ip, "-c", "100"]));
        s.kill();
        let _ = s.finish("cmtime server", Duration::from_secs(10));
        let t = text(&c);
        assert!(c.status.success(), "{backend} cmtime exited {:?}:\n{t}", c.status);
        let (connect, disconnect) = (ix::cmtime_step(&t, "connect"), ix::cmtime_step(&t, "disconnect"));
        assert!(connect.is_some_and(|v| v > 0.0) && disconnect.is_some_and(|v| v > 0.0), "{backend} cmtime:\n{t}");
        eprintln!(
            "[rdma_cm] stock cmtime over {backend}, 100 connections: connect {:.1} us/conn, disconnect {:.1} us/conn",
            connect.unwrap_or(0.0),
            disconnect.unwrap_or(0.0)
        );
    }
}

/// udaddy sends its QP number as immediate data (`htobe32(qp_num)`), so on the wire every
/// datagram's ImmDt must equal its DETH source QP: `__be32` crosses the C ABI in network order.
fn udaddy_immediates_are_qp_numbers(pcap: &Path, backend: &str) {
    let o = std::process::Command::new(ix::BIN).arg("pcap").arg(pcap).output().expect("uroce pcap");
    let text = String::from_utf8_lossy(&o.stdout);
    let mut n = 0;
    for line in text.lines().filter(|l| l.contains("UD_SEND_ONLY_WITH_IMMEDIATE")) {
        let f = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).map(str::to_string);
        let (src, imm) = (f("srcqp=0x"), f("imm=0x"));
        let (Some(src), Some(imm)) = (src, imm) else { panic!("{backend}: unparsable: {line}") };
        assert_eq!(
            u32::from_str_radix(&imm, 16).ok(),
            u32::from_str_radix(&src, 16).ok(),
            "{backend}: udaddy's immediate is its QP number in network order: {line}"
        );
        n += 1;
    }
    assert!(n >= 20, "{backend}: {n} datagrams with immediate data in the capture:\n{text}");
}
