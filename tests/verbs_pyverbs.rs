//! rdma-core's own tests (Debian's `python3-pyverbs`: pyverbs and the suite it ships under
//! `/usr/share/doc/rdma-core/tests/`) over uroce's drop-in `libibverbs.so.1`, on a veth in a
//! namespace: `run_tests.py --dev uroce_<if>` for the modules issue 15 names that rdma-core 44
//! ships (`test_srq` is not among them). Every module must end `OK`: the tests that run pass,
//! and the others skip because pyverbs found a feature absent (extended QPs and
//! CQs, ODP, memory windows, ...) — the skip reasons are printed. The traffic tests connect
//! two QPs of one process to each other over the device's own GID (loopback in the engine),
//! between two contexts that share the device's engine.
//!
//! Needs root, the library (`scripts/build-verbs`) and `python3-pyverbs` (`scripts/setup`).

mod common;
#[path = "common/ix.rs"]
mod ix;

use std::collections::BTreeMap;
use std::path::Path;
use uroce::netns::{NetPair, PairConfig};

/// The modules, and whether at least one of their tests must pass (not only skip) today.
const MODULES: [(&str, bool); 9] = [
    ("test_device", true),
    ("test_pd", true),
    ("test_mr", true),
    ("test_cq", true),
    ("test_cq_events", true),
    ("test_cqex", true),
    ("test_qp", true),
    ("test_qpex", true),
    ("test_atomic", true),
];

const SUITE: &str = "/usr/share/doc/rdma-core/tests";

/// `unittest`'s summary of one module: (ran, skipped, failed + errors, OK).
fn summary(out: &str) -> (u32, u32, u32, bool) {
    let num = |key: &str| -> u32 {
        out.lines()
            .rev()
            .find_map(|l| l.split(key).nth(1).and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()))
            .unwrap_or(0)
    };
    let ran = out.lines().rev().find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok()).unwrap_or(0);
    let ok = out.lines().rev().any(|l| l == "OK" || l.starts_with("OK ("));
    (ran, num("skipped="), num("failures=") + num("errors="), ok)
}

/// The suite, copied to `dir` with its gzipped modules unpacked (Debian compresses the larger
/// ones).
fn unpack(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(SUITE).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        std::fs::copy(&p, dir.join(&name)).unwrap();
        if name.ends_with(".gz") {
            let st = std::process::Command::new("gzip").args(["-df"]).arg(dir.join(&name)).status().unwrap();
            assert!(st.success(), "gzip -d {name}");
        }
    }
}

/// Run a module's command; its output (stdout then stderr, where unittest reports) and status.
fn run(mut c: std::process::Command, m: &str) -> (String, std::process::Output) {
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let o = common::watch(c.spawn().expect("spawn run_tests.py")).finish(m, std::time::Duration::from_secs(300));
    (format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), o)
}

/// pyverbs finds a device's IP address through sysfs (`/sys/class/infiniband/<dev>/device/net/`
/// names its interface: `base.py` `_get_ip_mac`), which a userspace device cannot have. In a
/// mount namespace of its own, this script puts a tmpfs over `/sys/class` with every class
/// bound back and that one directory added, then runs its arguments.
const SYSFS_SHIM: &str = r#"set -e
orig=$1; dev=$2; ifname=$3; shift 3
mount --bind /sys/class "$orig"
mount -t tmpfs uroce-sysclass /sys/class
for c in "$orig"/*; do mkdir "/sys/class/${c##*/}"; mount --bind "$c" "/sys/class/${c##*/}"; done
mkdir -p "/sys/class/infiniband/$dev/device/net/$ifname"
exec "$@""#;

/// `test_rdmacm`: each test forks a passive and an active process from one that has the device
/// open, and they connect through RDMA-CM to the interface's own address — two uroce processes
/// sharing the interface, each getting the MADs its CM messages name (kernel UDP: the
/// reuseport steering; AF_XDP's program does not read MADs yet). Every test that runs must
/// pass; only the multicast ones may skip (uroce has no multicast).
#[test]
fn rdma_cores_rdmacm_tests_pass_between_two_processes() {
    if !common::require(uroce_netns::is_root(), "verbs_pyverbs: root (network namespaces)") {
        return;
    }
    let Some(lib) = common::verbs_setup("verbs_pyverbs", ix::verbs_dir(), &["gzip", "unshare"]) else { return };
    let have_suite = Path::new(SUITE).join("test_rdmacm.py").exists() && Path::new("/usr/bin/python3").exists();
    if !common::require(have_suite, "verbs_pyverbs: Debian's python3-pyverbs (apt-get install python3-pyverbs)") {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("uroce-pyverbs-cm-{}", std::process::id()));
    unpack(&tmp);
    let orig = tmp.join("sysclass");
    std::fs::create_dir_all(&orig).unwrap();
    let net = NetPair::create(&PairConfig { subnet: 146, ..PairConfig::new("vc", 1500) }).expect("veth pair");
    let dev = format!("uroce_{}", net.a.ifname);
    let mut c = uroce_netns::command_in(&net.a.ns, "unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", SYSFS_SHIM, "sysfs-shim"])
        .args([&orig.to_string_lossy(), dev.as_str(), net.a.ifname.as_str()])
        .args(["env", &format!("LD_LIBRARY_PATH={}", lib.display()), "UROCE_BACKEND=udp"])
        .args(["/usr/bin/python3", &tmp.join("run_tests.py").to_string_lossy(), "--dev", &dev, "-v", "test_rdmacm"]);
    let (out, o) = run(c, "test_rdmacm");
    let (ran, skipped, failed, ok) = summary(&out);
    let passed = ran.saturating_sub(skipped + failed);
    eprintln!("[pyverbs] test_rdmacm over uroce ({dev}, kernel UDP): {ran} run, {passed} passed, {skipped} skipped");
    let _ = std::fs::remove_dir_all(&tmp);
    let odd_skips: Vec<&str> =
        out.lines().filter(|l| l.contains("... skipped ") && !l.contains("Multicast is not supported")).collect();
    assert!(
        ok && o.status.success() && failed == 0 && passed >= 7 && odd_skips.is_empty(),
        "test_rdmacm: {ran} run, {passed} passed, {skipped} skipped, {failed} failed; skips other than multicast: \
         {odd_skips:?}\n{out}"
    );
}

#[test]
fn rdma_cores_pyverbs_tests_pass_or_skip() {
    if !common::require(uroce_netns::is_root(), "verbs_pyverbs: root (network namespaces)") {
        return;
    }
    let Some(lib) = common::verbs_setup("verbs_pyverbs", ix::verbs_dir(), &["gzip"]) else { return };
    let have_suite = Path::new(SUITE).join("run_tests.py").exists() && Path::new("/usr/bin/python3").exists();
    if !common::require(have_suite, "verbs_pyverbs: Debian's python3-pyverbs (apt-get install python3-pyverbs)") {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("uroce-pyverbs-{}", std::process::id()));
    unpack(&tmp);
    let net = NetPair::create(&PairConfig { subnet: 133, ..PairConfig::new("vy", 1500) }).expect("veth pair");
    let dev = format!("uroce_{}", net.a.ifname);
    let mut report = Vec::new();
    let mut bad = Vec::new();
    let mut skips: BTreeMap<String, u32> = BTreeMap::new();
    for (m, must_pass) in MODULES {
        let mut c = uroce_netns::command_in(&net.a.ns, "env");
        c.arg(format!("LD_LIBRARY_PATH={}", lib.display())).args([
            "/usr/bin/python3",
            &tmp.join("run_tests.py").to_string_lossy(),
            "--dev",
            &dev,
            "-v",
            m,
        ]);
        let (out, o) = run(c, m);
        let (ran, skipped, failed, ok) = summary(&out);
        for l in out.lines().filter_map(|l| l.split("... skipped ").nth(1)) {
            *skips.entry(l.trim_matches('\'').to_string()).or_default() += 1;
        }
        let passed = ran.saturating_sub(skipped + failed);
        report.push(format!("{m}: {ran} run, {passed} passed, {skipped} skipped, {failed} failed"));
        if !ok || failed > 0 || ran == 0 || (must_pass && passed == 0) || !o.status.success() {
            bad.push(format!("{m}: {ran} run, {passed} passed, {skipped} skipped, {failed} failed\n{out}"));
        }
    }
    eprintln!("[pyverbs] over uroce ({dev}):\n  {}", report.join("\n  "));
    eprintln!("[pyverbs] skip reasons:");
    for (why, n) in &skips {
        eprintln!("  {n:3} x {why}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(bad.is_empty(), "pyverbs modules that did not pass:\n{}", bad.join("\n"));
}

#[test]
fn the_summary_parser_reads_unittest() {
    assert_eq!(summary("...\nRan 22 tests in 0.009s\n\nOK (skipped=9)\n"), (22, 9, 0, true));
    assert_eq!(summary("Ran 4 tests in 0.1s\n\nFAILED (failures=1, errors=2, skipped=1)\n"), (4, 1, 3, false));
    assert_eq!(summary("Ran 4 tests in 0.008s\n\nOK\n"), (4, 0, 0, true));
}
