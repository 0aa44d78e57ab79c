//! `uroce_io::netif` in a pair of private network namespaces joined by veth (root; skipped
//! with a message outside CI, a failure with `CI=1`): interface facts read through sockets
//! from inside a namespace, neighbour resolution over ARP and ND from a flushed table, with
//! and without an XDP program attached, and the timeout for an address nobody answers.

#[path = "common/netns.rs"]
mod netns;

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use uroce_io::netif::{self, Interface};
use uroce_wire::EthernetAddress;

#[test]
fn interface_facts_from_inside_a_namespace() {
    if !netns::prerequisites("interface_facts_from_inside_a_namespace", &["ip", "ethtool"]) {
        return;
    }
    // 4 RX queues allocated, 2 of them active.
    let net = netns::TestNet::with_queues("uni", "if", 1400, 4);
    netns::exec_in(&net.a, &["ethtool", "-L", "va", "rx", "2", "tx", "2"]);
    // What `ip netns exec` sees in sysfs (it remounts /sys for the namespace): the reference.
    let sys_queues = netns::exec_in(&net.a, &["sh", "-c", "ls -d /sys/class/net/va/queues/rx-* | wc -l"]);
    let sys_queues: u32 = sys_queues.trim().parse().expect("queue count");
    let sys_index: u32 = netns::exec_in(&net.a, &["cat", "/sys/class/net/va/ifindex"]).trim().parse().expect("ifindex");
    let i = netns::run_in(&net.a, || Interface::by_name("va").expect("va"));
    assert_eq!(i.name, "va");
    assert_eq!(i.index, sys_index);
    assert_eq!(i.mac, EthernetAddress(netns::MAC_A));
    assert_eq!(i.mtu, 1400);
    assert_eq!(i.ipv4, vec![netns::IP_A]);
    assert!(i.ipv6.contains(&netns::IP6_A), "{:?}", i.ipv6);
    // The kernel adds a link-local address derived from the MAC (EUI-64).
    let ll: Ipv6Addr = "fe80::ff:fe00:a01".parse().expect("ll");
    assert!(i.ipv6.contains(&ll), "{:?}", i.ipv6);
    assert_eq!((i.rx_queues, sys_queues), (2, 2));
    assert_eq!(i.max_rx_queues, 4);
    let all = i.addresses();
    assert_eq!(all[0], IpAddr::V4(netns::IP_A));
    assert!(all.contains(&IpAddr::V6(netns::IP6_A)));
    // The same name in the other namespace is a different device; a missing one is NotFound.
    let e = netns::run_in(&net.b, || Interface::by_name("va").expect_err("no va in b"));
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let j = netns::run_in(&net.b, || Interface::by_name("vb").expect("vb"));
    assert_eq!((j.mac, j.mtu, j.ipv4.clone()), (EthernetAddress(netns::MAC_B), 1400, vec![netns::IP_B]));
}

/// Flush `ns`'s neighbour table and check the address is gone.
fn flush(ns: &str, dev: &'static str, ip: IpAddr) {
    netns::ip(&["-n", ns, "neigh", "flush", "all"]);
    let idx = netns::run_in(ns, move || netif::ifindex(dev).expect("index"));
    let left = netns::run_in(ns, move || netif::lookup_mac(idx, ip).expect("lookup"));
    assert_eq!(left, None, "{ip} still in the table after a flush");
}

fn resolve_both_families(tag: &str, with_xdp: bool) {
    let net = netns::TestNet::new("uni", tag, 1500);
    let _xdp = with_xdp.then(|| {
        // The project's XDP program on vb (the peer that must answer ARP/ND) and on va.
        let b = netns::run_in(&net.b, || {
            uroce_xdp_prog::XdpSteering::install(
                "vb",
                &uroce_xdp_prog::ProgramConfig::default(),
                uroce_xdp_prog::AttachMode::Generic,
            )
            .expect("XDP on vb")
        });
        let a = netns::run_in(&net.a, || {
            uroce_xdp_prog::XdpSteering::install(
                "va",
                &uroce_xdp_prog::ProgramConfig::default(),
                uroce_xdp_prog::AttachMode::Generic,
            )
            .expect("XDP on va")
        });
        (a, b)
    });
    for ip in [IpAddr::V4(netns::IP_B), IpAddr::V6(netns::IP6_B)] {
        flush(&net.a, "va", ip);
        let t = Instant::now();
        let mac = netns::run_in(&net.a, move || netif::resolve_mac("va", ip, Duration::from_secs(10)));
        let mac = mac.unwrap_or_else(|e| panic!("resolve {ip}: {e}"));
        assert_eq!(mac, EthernetAddress(netns::MAC_B), "{ip}");
        eprintln!("resolved {ip} in {:?} (xdp {with_xdp})", t.elapsed());
        // Now it is in the table, as a usable entry.
        let idx = netns::run_in(&net.a, || netif::ifindex("va").expect("index"));
        let n = netns::run_in(&net.a, move || netif::neighbours(idx, ip).expect("dump"));
        let e = n.iter().find(|e| e.ip == ip).expect("entry");
        assert_ne!(e.state & netif::nud::USABLE, 0, "state {:#x}", e.state);
    }
    // The link-local address of the peer, too (needs the interface's scope).
    let ll: Ipv6Addr = "fe80::ff:fe00:b01".parse().expect("ll");
    let mac = netns::run_in(&net.a, move || netif::resolve_mac("va", IpAddr::V6(ll), Duration::from_secs(10)));
    assert_eq!(mac.expect("resolve link-local"), EthernetAddress(netns::MAC_B));
}

#[test]
fn resolve_mac_over_arp_and_nd() {
    if !netns::prerequisites("resolve_mac_over_arp_and_nd", &["ip"]) {
        return;
    }
    resolve_both_families("rs", false);
}

#[test]
fn resolve_mac_with_xdp_attached() {
    if !netns::prerequisites("resolve_mac_with_xdp_attached", &["ip"]) {
        return;
    }
    resolve_both_families("rx", true);
}

#[test]
fn unknown_address_times_out() {
    if !netns::prerequisites("unknown_address_times_out", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("uni", "to", 1500);
    for ip in ["10.99.0.77".parse::<IpAddr>().expect("ip"), "fd00:99::77".parse().expect("ip")] {
        let limit = Duration::from_millis(700);
        let t = Instant::now();
        let r = netns::run_in(&net.a, move || netif::resolve_mac("va", ip, limit));
        let took = t.elapsed();
        let e = r.expect_err("nobody has this address");
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{ip}: {e}");
        assert!(e.to_string().contains(&ip.to_string()), "{e}");
        assert!(took >= limit && took < limit + Duration::from_secs(2), "{ip}: took {took:?}");
    }
    let e = netns::run_in(&net.a, || {
        netif::resolve_mac("nosuchif0", "10.99.0.2".parse().expect("ip"), Duration::from_secs(1))
    })
    .expect_err("no such interface");
    assert_eq!(e.kind(), ErrorKind::NotFound);
}
