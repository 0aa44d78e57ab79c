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
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        let c = spawn(&net.a.ns, dir, env, client).finish("client", Duration::from_secs(120));
        let refused = text(&c).contains("REJECTED");
        if c.status.success() || !refused || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let s = s.finish("server", Duration::from_secs(120));
    for (who, o) in [("client", &c), ("server", &s)] {
        let t = text(o);
        assert!(o.status.success(), "{client:?} {who} exited {:?}\n{}", o.status, &t[..t.len().min(4000)]);
    }
    (c, s)
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
