//! Boots one rxe guest of each flavour and checks that the kernel's rxe device is up:
//! `ibv_devinfo -d rxe0` shows PORT_ACTIVE, `rdma link` lists rxe0 on eth0, the GID table
//! holds the link-local, IPv4-mapped and IPv6 GIDs, and the NIC options reach the guest.
//! Needs root + QEMU + built images (see rxe-compat/interop/README.md); skips otherwise
//! (fails under CI).

use std::net::IpAddr;
use std::time::{Duration, Instant};
use uroce_rxe_compat::harness::{require_or_skip, Flavour, GuestImage, GuestSpec, Lab};

const V4: &str = "10.77.0.11";
const V6: &str = "fd00:77::11";

fn boot_and_check(flavour: Flavour, zero_copy_nic: bool) {
    let test = format!("harness_boot::{flavour}");
    if !require_or_skip(&test, &[flavour], false) {
        return;
    }
    let image = GuestImage::locate(flavour).expect("checked above");
    let lab = Lab::new(&test).expect("lab");
    let mut spec = GuestSpec::new(flavour)
        .name("rxe11")
        .addr(&format!("{V4}/24"))
        .addr(&format!("{V6}/64"))
        .timeout(Duration::from_secs(180))
        .cmd(
            "cat /etc/uroce-guest-info; uname -r; ibv_devinfo -d rxe0; rdma link show; \
             echo NIC-FEATURES=$(cat /sys/class/net/eth0/device/features)",
        );
    if zero_copy_nic {
        spec = spec.zero_copy_nic();
    }
    let t0 = Instant::now();
    let g = lab.boot(spec).expect("boot");
    let boot = g.wait_ready(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let rc = g.exit_code(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    g.wait_exit(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let total = t0.elapsed();
    let out = g.output();
    assert_eq!(rc, 0, "guest command failed:\n{out}");
    eprintln!(
        "{}: boot to ROCE-READY {:.2} s, boot+command+poweroff {:.2} s",
        image.describe(),
        boot.as_secs_f64(),
        total.as_secs_f64()
    );

    // the right kernel booted
    let kver = image.info("kernel_version");
    assert!(out.lines().any(|l| l.trim() == kver), "kernel {kver} not reported:\n{out}");
    // ibv_devinfo: rxe0's port is active
    let devinfo = out.split("hca_id:").nth(1).unwrap_or_else(|| panic!("no ibv_devinfo output:\n{out}"));
    assert!(devinfo.trim_start().starts_with("rxe0"), "{devinfo}");
    assert!(devinfo.contains("PORT_ACTIVE"), "rxe0 port not active:\n{out}");
    let field = |k: &str| devinfo.lines().find_map(|l| l.trim().strip_prefix(k)).map(str::trim);
    assert_eq!(field("link_layer:"), Some("Ethernet"), "{devinfo}");
    assert_eq!(field("active_mtu:"), Some("1024 (3)"), "{devinfo}");
    assert!(!out.contains("couldn't load driver"), "provider warnings:\n{out}");
    // rdma link: rxe0 port 1 on eth0
    let link = out
        .lines()
        .find(|l| l.starts_with("link rxe0/1"))
        .unwrap_or_else(|| panic!("`rdma link show` lists no rxe0:\n{out}"));
    assert!(link.contains("state ACTIVE") && link.contains("netdev eth0"), "{link}");
    // GIDs: link-local (from the MAC), IPv4-mapped and IPv6 global, all RoCE v2
    let gids = g.gids();
    assert_eq!(g.link_local_gid_index(), Some(0), "{gids:?}");
    let v4 = g.gid_index(V4.parse::<IpAddr>().unwrap()).unwrap_or_else(|| panic!("no IPv4 GID: {gids:?}"));
    let v6 = g.gid_index(V6.parse::<IpAddr>().unwrap()).unwrap_or_else(|| panic!("no IPv6 GID: {gids:?}"));
    assert_ne!(v4, v6);
    assert!(gids.iter().all(|x| x.kind.contains("v2")), "{gids:?}");
    assert_eq!(gids.len(), 3, "{gids:?}");
    // NIC features: bit 33 = VIRTIO_F_ACCESS_PLATFORM, only with iommu_platform=on
    let feats =
        out.lines().find_map(|l| l.strip_prefix("NIC-FEATURES=")).unwrap_or_else(|| panic!("no NIC features:\n{out}"));
    assert_eq!(feats.as_bytes().get(33) == Some(&b'1'), zero_copy_nic, "features {feats}");
}

#[test]
fn bookworm_guest_has_active_rxe0() {
    boot_and_check(Flavour::Bookworm, false);
}

#[test]
fn trixie_guest_has_active_rxe0_on_zero_copy_nic() {
    boot_and_check(Flavour::Trixie, true);
}
