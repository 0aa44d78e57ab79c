//! Two private network namespaces joined by a veth pair, for tests that need a real link.
//!
//! Use from a test file with `#[path = "common/netns.rs"] mod netns;` (it does not need
//! `common/mod.rs`). The namespaces are `uroce-netns`'s, as everywhere in uroce; this file
//! adds the fixed addresses these tests use and asserts instead of returning errors. Names
//! carry a tag and the test process' pid; both namespaces are deleted on drop, also when the
//! test panics (deleting a namespace removes its veth end).
//!
//! ```text
//!   netns <p>a<tag><pid>                    netns <p>b<tag><pid>
//!   va  02:00:00:00:0a:01                   vb  02:00:00:00:0b:01
//!   10.99.0.1/24 fd00:99::1/64  <-- veth --> 10.99.0.2/24 fd00:99::2/64
//! ```
//!
//! Code runs inside a namespace on a dedicated thread that calls `setns(CLONE_NEWNET)` on
//! `/run/netns/<name>` (network namespaces are per thread), so a test stays one process.
//! Sockets opened on that thread belong to the namespace; `/sys/class/net` does not follow
//! (sysfs shows the namespace it was mounted in).
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::thread::JoinHandle;
use uroce_netns::Netns;

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x0b, 0x01];
pub const IP_A: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
pub const IP_B: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
pub const IP6_A: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
pub const IP6_B: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);

/// True if the test can run (root and the `tools`); otherwise prints why and returns false,
/// or panics under `CI=1`.
pub fn prerequisites(test: &str, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !uroce_netns::is_root() {
        missing.push("root".to_string());
    }
    for t in tools {
        if !uroce_netns::have(t) {
            missing.push(format!("`{t}`"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    // The one rule: a failure under CI, a visible SKIP line elsewhere.
    uroce_rxe_compat::harness::skip_or_fail(&format!("{test}: needs {}", missing.join(", ")))
}

pub fn ip(args: &[&str]) {
    uroce_netns::ip(args).unwrap_or_else(|e| panic!("{e}"));
}

pub fn ip_out(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip(8)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run a command inside namespace `ns` (`ip netns exec`), asserting success.
pub fn exec_in(ns: &str, cmd: &[&str]) -> String {
    let out = uroce_netns::exec(ns, cmd).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{} failed: {}", cmd.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces joined by a veth pair (`va` in `a`, `vb` in `b`), deleted on drop (and on a
/// fatal signal: they are `uroce_netns::Netns`).
pub struct TestNet {
    pub a: String,
    pub b: String,
    _owned: [Netns; 2],
}

impl TestNet {
    /// `prefix` (2–3 letters, unique per test file) and `tag` (unique per test) name the
    /// namespaces; `mtu` is the veth MTU.
    pub fn new(prefix: &str, tag: &str, mtu: u32) -> TestNet {
        TestNet::with_queues(prefix, tag, mtu, 1)
    }

    /// [`TestNet::new`] with `queues` RX and TX queues allocated on each veth end.
    pub fn with_queues(prefix: &str, tag: &str, mtu: u32, queues: u32) -> TestNet {
        let pid = std::process::id();
        let (a, b) = (format!("{prefix}a{tag}{pid}"), format!("{prefix}b{tag}{pid}"));
        // A leftover from a killed run with a recycled pid is removed first.
        let create = |ns: &str| Netns::create(ns).unwrap_or_else(|e| panic!("{e}"));
        let net = TestNet { _owned: [create(&a), create(&b)], a, b };
        let mac = |m: [u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        let (mtu, q) = (mtu.to_string(), queues.to_string());
        #[rustfmt::skip]
        ip(&[
            "link", "add", "va", "address", &mac(MAC_A), "mtu", &mtu, "numtxqueues", &q, "numrxqueues", &q,
            "netns", &net.a, "type", "veth", "peer", "name", "vb", "address", &mac(MAC_B), "mtu", &mtu,
            "numtxqueues", &q, "numrxqueues", &q, "netns", &net.b,
        ]);
        for (ns, dev, v4, v6) in
            [(&net.a, "va", "10.99.0.1/24", "fd00:99::1/64"), (&net.b, "vb", "10.99.0.2/24", "fd00:99::2/64")]
        {
            ip(&["-n", ns, "addr", "add", v4, "dev", dev]);
            ip(&["-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        net.wait_up();
        net
    }

    /// Wait until both veth ends report operational state UP (carrier on both sides), so the
    /// first packets (ARP, ND) are not lost to a link still coming up.
    pub fn wait_up(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for (ns, dev) in [(&self.a, "va"), (&self.b, "vb")] {
            while !ip_out(&["-n", ns, "-o", "link", "show", "dev", dev]).contains("state UP") {
                assert!(std::time::Instant::now() < deadline, "{dev} in {ns} did not come up");
                std::thread::yield_now();
            }
        }
    }
}

/// Run `f` on a new thread inside namespace `ns` (a failed `setns` panics that thread).
pub fn spawn_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        uroce_netns::enter(&ns).unwrap_or_else(|e| panic!("{e}"));
        f()
    })
}

pub use uroce_netns::join;

/// Run `f` inside namespace `ns` and wait for its result.
pub fn run_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    join(spawn_in(ns, f))
}
