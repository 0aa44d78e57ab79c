//! Private network namespaces joined by veth pairs: the topology `uroce demo`, the end-to-end
//! tests and the datapath benchmark run on. Everything it creates is removed on drop.
//!
//! ```text
//!  direct:   ns A [a0 10.N.0.1] <-- veth --> [b0 10.N.0.2] ns B
//!
//!  bridged:  ns A [a0] <-veth-> [ma] ns M: bridge br0 [mb] <-veth-> [b0] ns B
//!                                      nftables bridge-family forward chain:
//!                                      numgen random drop / dup (real loss, both ways)
//! ```
//!
//! The namespaces themselves are `uroce-netns`'s ([`Netns`], re-exported here with its
//! helpers): code runs inside one on a thread that called `setns(CLONE_NEWNET)` ([`spawn_in`]),
//! so one process can hold both ends of a link, and nothing is left behind on any exit path
//! (drop, panic, or a fatal signal). Needs root and `ip` (iproute2); loss needs `nft`.

use anyhow::{bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
pub use uroce_netns::{enter, exec, have, ip, is_root, join, live_namespaces, run_in, spawn_in, Netns};

/// Loss and duplication in the middle namespace (percent, 0..100), both directions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathFaults {
    /// Drop this percentage of frames.
    pub drop_pct: u32,
    /// Duplicate this percentage of frames.
    pub dup_pct: u32,
}

/// How to build the pair.
#[derive(Clone, Debug)]
pub struct PairConfig {
    /// Short tag in the namespace names (with the pid, names are unique per process).
    pub tag: String,
    /// Link MTU of every interface.
    pub mtu: u32,
    /// Third octet of the 10.x.0.0/24 and fd00:x::/64 subnets.
    pub subnet: u8,
    /// Put a bridge namespace with nftables in the middle (needed for [`PathFaults`]).
    pub bridged: bool,
    /// Receive and transmit queues of each veth end of a direct pair (1 = the default).
    pub queues: u32,
}

impl PairConfig {
    /// A direct veth pair.
    pub fn new(tag: &str, mtu: u32) -> PairConfig {
        PairConfig { tag: tag.into(), mtu, subnet: 77, bridged: false, queues: 1 }
    }
}

/// One end of the pair.
#[derive(Clone, Debug)]
pub struct End {
    /// Namespace name.
    pub ns: String,
    /// Interface inside it.
    pub ifname: String,
    /// IPv4 address.
    pub ip4: Ipv4Addr,
    /// IPv6 (ULA) address.
    pub ip6: Ipv6Addr,
    /// MAC address.
    pub mac: [u8; 6],
}

impl End {
    /// The IPv4 address as an [`IpAddr`].
    pub fn ip(&self) -> IpAddr {
        IpAddr::V4(self.ip4)
    }
}

/// Two namespaces joined by veth (optionally through a bridge namespace); removed on drop.
pub struct NetPair {
    /// Side A.
    pub a: End,
    /// Side B.
    pub b: End,
    /// The middle namespace, when bridged.
    pub mid: Option<String>,
    /// The namespaces, removed on drop.
    owned: Vec<Netns>,
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl NetPair {
    /// Create the namespaces and links and bring everything up.
    pub fn create(cfg: &PairConfig) -> Result<NetPair> {
        if !is_root() {
            bail!("network namespaces need root");
        }
        let pid = std::process::id();
        let s = cfg.subnet;
        let end = |side: u8, ns: String| End {
            ns,
            ifname: if side == 1 { "a0".into() } else { "b0".into() },
            ip4: Ipv4Addr::new(10, s, 0, side),
            ip6: Ipv6Addr::new(0xfd00, s as u16, 0, 0, 0, 0, 0, side as u16),
            mac: [0x02, 0x75, s, 0, 0, side],
        };
        let mut pair = NetPair {
            a: end(1, format!("ua{}{pid}", cfg.tag)),
            b: end(2, format!("ub{}{pid}", cfg.tag)),
            mid: cfg.bridged.then(|| format!("um{}{pid}", cfg.tag)),
            owned: Vec::new(),
        };
        // From here on, drop cleans up whatever was made.
        let mut all = vec![pair.a.ns.clone(), pair.b.ns.clone()];
        all.extend(pair.mid.clone());
        for ns in &all {
            pair.owned.push(Netns::create(ns)?);
        }
        let mtu = cfg.mtu.to_string();
        match &pair.mid {
            None => {
                let q = cfg.queues.max(1).to_string();
                #[rustfmt::skip]
                ip(&["link", "add", "name", "a0", "address", &mac_str(pair.a.mac), "mtu", &mtu, "netns", &pair.a.ns,
                     "numtxqueues", &q, "numrxqueues", &q,
                     "type", "veth", "peer", "name", "b0", "address", &mac_str(pair.b.mac), "mtu", &mtu,
                     "numtxqueues", &q, "numrxqueues", &q, "netns", &pair.b.ns])?;
            }
            Some(m) => {
                #[rustfmt::skip]
                ip(&["link", "add", "name", "a0", "address", &mac_str(pair.a.mac), "mtu", &mtu, "netns", &pair.a.ns,
                     "type", "veth", "peer", "name", "ma", "mtu", &mtu, "netns", m])?;
                #[rustfmt::skip]
                ip(&["link", "add", "name", "b0", "address", &mac_str(pair.b.mac), "mtu", &mtu, "netns", &pair.b.ns,
                     "type", "veth", "peer", "name", "mb", "mtu", &mtu, "netns", m])?;
                ip(&["-n", m, "link", "add", "name", "br0", "mtu", &mtu, "type", "bridge"])?;
                for d in ["ma", "mb"] {
                    ip(&["-n", m, "link", "set", "dev", d, "master", "br0"])?;
                    ip(&["-n", m, "link", "set", "dev", d, "up"])?;
                }
                ip(&["-n", m, "link", "set", "dev", "br0", "up"])?;
            }
        }
        for e in [&pair.a, &pair.b] {
            ip(&["-n", &e.ns, "addr", "add", &format!("{}/24", e.ip4), "dev", &e.ifname])?;
            ip(&["-n", &e.ns, "addr", "add", &format!("{}/64", e.ip6), "dev", &e.ifname, "nodad"])?;
            ip(&["-n", &e.ns, "link", "set", "dev", &e.ifname, "up"])?;
        }
        Ok(pair)
    }

    /// Set loss and duplication on the path (replaces earlier rules). The rules sit on the
    /// ingress hook of both bridge ports (netdev family: the bridge family cannot `dup`), match
    /// only RoCE (UDP/4791, so ARP/ND and the out-of-band TCP stay clean), and count what they
    /// did ([`NetPair::fault_counts`]).
    pub fn set_faults(&self, f: PathFaults) -> Result<()> {
        let m = self.mid.as_deref().context("faults need a bridged pair")?;
        let mut rules = String::from("table netdev uroce\ndelete table netdev uroce\ntable netdev uroce {\n");
        for (i, o) in [("ma", "mb"), ("mb", "ma")] {
            rules +=
                &format!(" chain in_{i} {{\n  type filter hook ingress device \"{i}\" priority 0; policy accept;\n");
            if f.drop_pct > 0 {
                rules +=
                    &format!("  udp dport 4791 numgen random mod 100 < {} counter drop comment \"drop\"\n", f.drop_pct);
            }
            if f.dup_pct > 0 {
                // The copy leaves straight out of the other port; the original is bridged.
                rules += &format!(
                    "  udp dport 4791 numgen random mod 100 < {} counter dup to \"{o}\" comment \"dup\"\n",
                    f.dup_pct
                );
            }
            rules += " }\n";
        }
        rules += "}\n";
        let path = std::env::temp_dir().join(format!("uroce-nft-{m}.nft"));
        std::fs::write(&path, rules)?;
        let out = exec(m, &["nft", "-f", path.to_str().unwrap_or_default()])?;
        let _ = std::fs::remove_file(&path);
        if !out.status.success() {
            bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// (frames dropped, frames duplicated) by the path's rules so far.
    pub fn fault_counts(&self) -> Result<(u64, u64)> {
        let m = self.mid.as_deref().context("not bridged")?;
        let out = exec(m, &["nft", "list", "table", "netdev", "uroce"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (mut drops, mut dups) = (0, 0);
        for line in text.lines() {
            let Some(i) = line.find("counter packets ") else { continue };
            let n: u64 = line[i + 16..].split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
            if line.contains("comment \"drop\"") {
                drops += n;
            } else if line.contains("comment \"dup\"") {
                dups += n;
            }
        }
        Ok((drops, dups))
    }

    /// A third host on the bridge that sees every frame between A and B, as a mirror (SPAN)
    /// port on a switch shows them: namespace `uc<tag><pid>` with interface `c0` (10.s.0.3),
    /// and nftables on both bridge ports copying what enters them to its port. Removed with
    /// the pair. What an attacker on the segment sees (`uroce attack`).
    pub fn add_monitor(&mut self, tag: &str) -> Result<End> {
        let m = self.mid.clone().context("a monitor needs a bridged pair")?;
        let s = self.a.ip4.octets()[1];
        let end = End {
            ns: format!("uc{tag}{}", std::process::id()),
            ifname: "c0".into(),
            ip4: Ipv4Addr::new(10, s, 0, 3),
            ip6: Ipv6Addr::new(0xfd00, s as u16, 0, 0, 0, 0, 0, 3),
            mac: [0x02, 0x75, s, 0, 0, 3],
        };
        self.owned.push(Netns::create(&end.ns)?);
        #[rustfmt::skip]
        ip(&["link", "add", "name", "c0", "address", &mac_str(end.mac), "netns", &end.ns,
             "type", "veth", "peer", "name", "mc", "netns", &m])?;
        ip(&["-n", &m, "link", "set", "dev", "mc", "master", "br0"])?;
        ip(&["-n", &m, "link", "set", "dev", "mc", "up"])?;
        ip(&["-n", &end.ns, "addr", "add", &format!("{}/24", end.ip4), "dev", "c0"])?;
        ip(&["-n", &end.ns, "link", "set", "dev", "c0", "up"])?;
        mirror(&m, &["ma", "mb"], "mc")?;
        Ok(end)
    }

    /// Delete a namespace now (a peer that vanishes mid-transfer).
    pub fn delete_ns(ns: &str) {
        uroce_netns::delete(ns);
    }
}

/// Makes bridge port `dst` (in namespace `ns`) a mirror (SPAN) port: nftables on the ingress
/// of each of `sources` copies what enters them to `dst`, and the bridge stops learning MACs
/// on `dst` (frames sent from it with another host's MAC must not move that MAC there).
pub fn mirror(ns: &str, sources: &[&str], dst: &str) -> Result<()> {
    ip(&["-n", ns, "link", "set", "dev", dst, "type", "bridge_slave", "learning", "off"])?;
    let mut rules = format!("table netdev mirror_{dst} {{\n");
    for i in sources {
        rules += &format!(
            " chain in_{i} {{\n  type filter hook ingress device \"{i}\" priority -10; policy accept;\n  dup to \"{dst}\"\n }}\n"
        );
    }
    rules += "}\n";
    let path = std::env::temp_dir().join(format!("uroce-nft-mirror-{ns}-{dst}.nft"));
    std::fs::write(&path, rules)?;
    let out = exec(ns, &["nft", "-f", path.to_str().unwrap_or_default()])?;
    let _ = std::fs::remove_file(&path);
    if !out.status.success() {
        bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A namespace of its own plugged into an existing bridge by a veth pair: how a uroce instance
/// joins the interop lab's bridge (where the rxe guests' taps are) like a host with a NIC.
/// The namespace (and with it both veth ends) is removed on drop.
pub struct BridgePort {
    /// The new namespace.
    pub ns: String,
    /// The interface inside it.
    pub ifname: String,
    /// Its IPv4 address.
    pub ip4: Ipv4Addr,
    /// Its IPv6 address, if one was given.
    pub ip6: Option<Ipv6Addr>,
    /// The bridge-side end (in the bridge's namespace), e.g. for nftables rules.
    pub bridge_side: String,
    /// The namespace, removed on drop.
    _owned: Netns,
}

impl BridgePort {
    /// Create namespace `ns` with interface `ifname` (`mtu`, `mac`) carrying `ip4`/`prefix4`
    /// (and `ip6`/64), its peer plugged into `bridge` inside `bridge_ns`.
    #[allow(clippy::too_many_arguments)]
    pub fn attach(
        bridge_ns: &str,
        bridge: &str,
        ns: &str,
        ifname: &str,
        (ip4, prefix4): (Ipv4Addr, u8),
        ip6: Option<Ipv6Addr>,
        mtu: u32,
        mac: [u8; 6],
    ) -> Result<BridgePort> {
        if !is_root() {
            bail!("network namespaces need root");
        }
        let owned = Netns::create(ns)?;
        let port = BridgePort {
            ns: ns.into(),
            ifname: ifname.into(),
            ip4,
            ip6,
            bridge_side: format!("v{}", &ns[ns.len().saturating_sub(12)..]),
            _owned: owned,
        };
        let mtu = mtu.to_string();
        #[rustfmt::skip]
        ip(&["-n", bridge_ns, "link", "add", "name", &port.bridge_side, "mtu", &mtu, "type", "veth", "peer", "name",
             ifname, "address", &mac_str(mac), "mtu", &mtu, "netns", ns])?;
        ip(&["-n", bridge_ns, "link", "set", "dev", &port.bridge_side, "master", bridge])?;
        ip(&["-n", bridge_ns, "link", "set", "dev", &port.bridge_side, "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{ip4}/{prefix4}"), "dev", ifname])?;
        if let Some(v6) = ip6 {
            ip(&["-n", ns, "addr", "add", &format!("{v6}/64"), "dev", ifname, "nodad"])?;
        }
        ip(&["-n", ns, "link", "set", "dev", ifname, "up"])?;
        // Like a NIC without UDP segmentation offload: the kernel cuts a UDP GSO batch (the udp
        // backend's default) into wire frames before this veth, so a capture on the bridge
        // holds real frames, each with its own ICRC, and not 64 KB super-datagrams.
        let o = uroce_netns::command_in(ns, "ethtool")
            .args(["-K", ifname, "tx-udp-segmentation", "off"])
            .output()
            .context("ethtool (Debian package ethtool)")?;
        if !o.status.success() {
            bail!("ethtool -K {ifname} tx-udp-segmentation off: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(port)
    }
}
