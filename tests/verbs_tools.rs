//! uroce's drop-in `libibverbs.so.1` (the `verbs-abi` crate, linked by `scripts/build-verbs`)
//! under Debian's own binaries:
//!
//! * its exports are exactly the default-version symbols of Debian's `libibverbs.so.1`, at the
//!   same versions, and its SONAME is `libibverbs.so.1`;
//! * every `IBVERBS_*` symbol that Debian's `ibverbs-utils`, `perftest` and the provider
//!   libraries perftest links (`libmlx5.so.1`, `libefa.so.1`) import resolves in it, and each of
//!   those binaries loads against it with every symbol bound at start (`LD_BIND_NOW`);
//! * in a network namespace with one veth, stock `ibv_devices` and `ibv_devinfo -v` show that
//!   interface as a RoCEv2 device: its name, GUID (the MAC's EUI-64), port ACTIVE on Ethernet,
//!   the path MTU rxe would give, and the GID table with the link-local and IPv4-mapped GIDs.
//!
//! Needs the library (`scripts/build-verbs`, which `scripts/test-all` runs first), `objdump`,
//! Debian's `ibverbs-utils` and `perftest`, and root for the namespace.

mod common;
#[path = "common/ix.rs"]
mod ix;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use uroce::netns::{NetPair, PairConfig};

/// The library, or None (a skip, or a failure under CI) when it or a tool is missing.
fn setup(test: &str, tools: &[&str]) -> Option<PathBuf> {
    common::verbs_setup(test, ix::verbs_dir(), tools)
}

/// `objdump -T` of `file`: (exported default-version symbols, imported versioned symbols),
/// each as `name@VERSION` for the `IBVERBS` versions.
fn dynsyms(file: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new("objdump").arg("-T").arg(file).output().expect("objdump");
    assert!(out.status.success(), "objdump -T {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    let (mut exports, mut imports) = (BTreeSet::new(), BTreeSet::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let (ver, name) = (f[f.len() - 2], f[f.len() - 1]);
        if !ver.trim_matches(['(', ')']).starts_with("IBVERBS") || ver == name {
            continue;
        }
        if line.contains("*UND*") {
            imports.insert(format!("{name}@{}", ver.trim_matches(['(', ')'])));
        } else if !ver.starts_with('(') {
            exports.insert(format!("{name}@{ver}"));
        }
    }
    (exports, imports)
}

/// Debian's binaries and libraries that use libibverbs.
const CONSUMERS: [&str; 15] = [
    "/usr/bin/ibv_devices",
    "/usr/bin/ibv_devinfo",
    "/usr/bin/ibv_rc_pingpong",
    "/usr/bin/ibv_uc_pingpong",
    "/usr/bin/ibv_ud_pingpong",
    "/usr/bin/ibv_srq_pingpong",
    "/usr/bin/ib_write_bw",
    "/usr/bin/ib_read_bw",
    "/usr/bin/ib_send_bw",
    "/usr/bin/ib_atomic_bw",
    "/usr/bin/ib_write_lat",
    "/usr/bin/ib_read_lat",
    "/usr/bin/ib_send_lat",
    "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
    "/usr/lib/x86_64-linux-gnu/libefa.so.1",
];

#[test]
fn exports_and_imports_match_debians_libibverbs() {
    let Some(dir) = setup("verbs_tools::exports", &["objdump", "ibv_devinfo", "ib_write_bw"]) else { return };
    let ours = dir.join("libibverbs.so.1");
    let (mine, _) = dynsyms(&ours);
    let (debian, _) = dynsyms(Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1"));
    let missing: Vec<_> = debian.difference(&mine).collect();
    let extra: Vec<_> = mine.difference(&debian).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}\nextra {extra:?}");
    assert_eq!(mine.len(), 146, "rdma-core 44's default-version symbols");
    // the SONAME, and nothing else global (Rust's and the dependencies' symbols stay local)
    let dynamic = Command::new("objdump").arg("-p").arg(&ours).output().expect("objdump -p");
    assert!(String::from_utf8_lossy(&dynamic.stdout).contains("SONAME               libibverbs.so.1"));
    let all = Command::new("objdump").arg("-T").arg(&ours).output().expect("objdump -T");
    let globals: Vec<String> = String::from_utf8_lossy(&all.stdout)
        .lines()
        .filter(|l| !l.contains("*UND*") && (l.contains(" g ") || l.contains(" w ")))
        .filter(|l| !l.contains("IBVERBS") && !l.contains("UROCE_RDMACM_1"))
        .map(str::to_string)
        .collect();
    assert!(globals.is_empty(), "unversioned exports: {globals:#?}");
    let mut checked = 0;
    for c in CONSUMERS.iter().map(Path::new).filter(|p| p.exists()) {
        let (_, wants) = dynsyms(c);
        let unresolved: Vec<_> = wants.difference(&mine).collect();
        assert!(unresolved.is_empty(), "{} imports {unresolved:?}", c.display());
        checked += 1;
    }
    assert!(checked >= 13, "only {checked} of Debian's binaries found");
}

/// `objdump -T` of `file`: its exported default-version `RDMACM_*` symbols.
fn rdmacm_exports(file: &Path) -> BTreeSet<String> {
    let out = Command::new("objdump").arg("-T").arg(file).output().expect("objdump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, name) = (*f.get(f.len().checked_sub(2)?)?, *f.last()?);
            (ver.starts_with("RDMACM") && ver != name).then(|| format!("{name}@{ver}"))
        })
        .collect()
}

/// The generated `librdmacm.so.1` exports what Debian's does, at the same versions, needs our
/// `libibverbs.so.1`, and every RDMA-CM program Debian ships finds its symbols in it.
#[test]
fn librdmacm_exports_match_debians() {
    let Some(dir) = setup("verbs_tools::rdmacm_exports", &["objdump", "rping"]) else { return };
    let ours = dir.join("librdmacm.so.1");
    let debian = Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    let (mine, theirs) = (rdmacm_exports(&ours), rdmacm_exports(debian));
    assert_eq!(mine, theirs, "librdmacm.so.1's exports");
    assert_eq!(mine.len(), 68, "rdma-core 44's librdmacm symbols");
    let p = Command::new("objdump").arg("-p").arg(&ours).output().expect("objdump -p");
    let p = String::from_utf8_lossy(&p.stdout);
    assert!(
        p.contains("SONAME               librdmacm.so.1") && p.contains("NEEDED               libibverbs.so.1"),
        "{p}"
    );
    for bin in [
        "/usr/bin/rping",
        "/usr/bin/ucmatose",
        "/usr/bin/udaddy",
        "/usr/bin/rdma_server",
        "/usr/bin/rdma_client",
        "/usr/bin/ib_write_bw",
    ] {
        if !Path::new(bin).exists() {
            continue;
        }
        let out = Command::new("objdump").arg("-T").arg(bin).output().expect("objdump");
        let wants: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("*UND*") && l.contains("(RDMACM"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some(format!("{}@{}", f.last()?, f.get(f.len() - 2)?.trim_matches(['(', ')'])))
            })
            .collect();
        let missing: Vec<_> = wants.difference(&mine).collect();
        assert!(missing.is_empty(), "{bin} imports {missing:?}");
    }
}

#[test]
fn stock_binaries_load_with_every_symbol_bound() {
    let Some(dir) = setup("verbs_tools::load", &["ibv_devinfo", "ib_write_bw"]) else { return };
    for bin in CONSUMERS.iter().filter(|b| b.starts_with("/usr/bin/") && Path::new(b).exists()) {
        let out = Command::new(bin)
            .arg("--help")
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .env("UROCE_IFACES", "lo-none")
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("symbol lookup error") && !err.contains("not found") && out.status.code() != Some(127),
            "{bin}: {err}"
        );
        // the binary ran main(): it printed its usage (ibv_devices takes no options: its table)
        let text = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
        let ran = text.to_lowercase().contains("usage") || (bin.ends_with("ibv_devices") && text.contains("node GUID"));
        assert!(ran, "{bin} did not run: {text}");
    }
}

#[test]
fn ibv_devinfo_shows_the_interface_as_a_roce_device() {
    if !common::require(uroce_netns::is_root(), "verbs_tools::devinfo: root (network namespaces)") {
        return;
    }
    let Some(dir) = setup("verbs_tools::devinfo", &["ibv_devinfo", "ibv_devices"]) else { return };
    let net = NetPair::create(&PairConfig { subnet: 130, ..PairConfig::new("vt", 1500) }).expect("veth pair");
    let run = |args: &[&str]| -> String {
        let mut c = uroce_netns::command_in(&net.a.ns, "env");
        c.arg(format!("LD_LIBRARY_PATH={}", dir.display())).args(args);
        let out = c.output().expect("spawn in the namespace");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let m = net.a.mac;
    let guid = format!("{:02x}{:02x}{:02x}fffe{:02x}{:02x}{:02x}", m[0] ^ 2, m[1], m[2], m[3], m[4], m[5]);
    let devices = run(&["ibv_devices"]);
    let name = format!("uroce_{}", net.a.ifname);
    assert!(
        devices.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [name.as_str(), guid.as_str()]),
        "ibv_devices:\n{devices}"
    );
    assert_eq!(devices.lines().filter(|l| l.contains("uroce_")).count(), 1, "loopback is not a device:\n{devices}");
    let info = run(&["ibv_devinfo", "-v", "-d", &name]);
    let guid_colons = format!("{}:{}:{}:{}", &guid[0..4], &guid[4..8], &guid[8..12], &guid[12..16]);
    for want in [
        format!("hca_id:\t{name}"),
        "transport:\t\t\tInfiniBand (0)".to_string(),
        format!("node_guid:\t\t\t{guid_colons}"),
        "vendor_id:\t\t\t0xffffff".to_string(),
        "phys_port_cnt:\t\t\t1".to_string(),
        "state:\t\t\tPORT_ACTIVE (4)".to_string(),
        "max_mtu:\t\t4096 (5)".to_string(),
        "active_mtu:\t\t1024 (3)".to_string(),
        "link_layer:\t\tEthernet".to_string(),
        format!("GID[  1]:\t\t::ffff:{}, RoCE v2", net.a.ip4),
        "max_qp_rd_atom:\t\t\t128".to_string(),
        "num_comp_vectors:\t\t1".to_string(),
    ] {
        assert!(info.contains(&want), "ibv_devinfo -v lacks {want:?}:\n{info}");
    }
    assert!(info.contains("GID[  0]:\t\tfe80::"), "the link-local GID:\n{info}");
}

/// `uroce verbs` names the built library's directory (beside the binary), and `env $(uroce
/// verbs) ibv_devices` lists uroce's devices.
#[test]
fn uroce_verbs_prints_where_the_library_is() {
    let Some(dir) = setup("verbs_tools::uroce_verbs", &["ibv_devices"]) else { return };
    let o = Command::new(ix::BIN).args(["verbs", "--dir"]).env_remove("UROCE_VERBS_DIR").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert_eq!(printed.canonicalize().unwrap(), dir.canonicalize().unwrap());
    let o = Command::new(ix::BIN)
        .arg("verbs")
        .env_remove("UROCE_VERBS_DIR")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let value = line.strip_prefix("LD_LIBRARY_PATH=").expect("LD_LIBRARY_PATH=...");
    let d = Command::new("ibv_devices").env("LD_LIBRARY_PATH", value).env("UROCE_IFACES", "lo").output().unwrap();
    assert!(String::from_utf8_lossy(&d.stdout).contains("uroce_lo"), "{}", String::from_utf8_lossy(&d.stdout));
    let o = Command::new(ix::BIN).arg("verbs").env("UROCE_VERBS_DIR", "/nonexistent").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no libibverbs.so.1"));
}
