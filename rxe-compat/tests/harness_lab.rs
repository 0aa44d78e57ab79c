//! The harness's own guarantees: the lab namespace and bridge exist while the `Lab` lives and
//! vanish on drop (also when the test panics, with qemu killed), host-side code in the namespace
//! reaches a guest over IPv4 and IPv6, and a stuck guest is killed by its wall-clock limit.
//! Needs root (+ QEMU and the bookworm image for the guest tests); skips otherwise (fails under CI).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce_rxe_compat::harness::{require_or_skip, Flavour, GuestSpec, HarnessError, Lab, BRIDGE, HOST_V4, HOST_V6};

fn ns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

#[test]
fn lab_namespace_lives_with_the_lab() {
    if !require_or_skip("harness_lab::namespace", &[], false) {
        return;
    }
    let lab = Lab::new("ns-check").expect("lab");
    let (ns, dir) = (lab.netns().to_string(), lab.dir().to_path_buf());
    assert!(ns_exists(&ns) && dir.is_dir());
    let out = lab.exec_host(&["ip", "-br", "addr", "show", BRIDGE], Duration::from_secs(10)).expect("ip");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{HOST_V4}/24")) && text.contains(&format!("{HOST_V6}/64")), "{text}");
    // a socket made in the namespace can bind the bridge address; the host namespace cannot
    let bound = lab.in_netns(|| std::net::UdpSocket::bind((HOST_V4, 0)).is_ok()).expect("in_netns");
    assert!(bound);
    assert!(std::net::UdpSocket::bind((HOST_V4, 0)).is_err(), "host namespace must not have {HOST_V4}");
    drop(lab);
    assert!(!ns_exists(&ns), "namespace {ns} left behind");
    assert!(!dir.exists(), "run dir {} left behind", dir.display());
}

fn connect_read(lab: &Lab, addr: SocketAddr, deadline: Instant) -> String {
    lab.in_netns(move || loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut s) => {
                let mut text = String::new();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let _ = s.read_to_string(&mut text);
                return text;
            }
            Err(e) if Instant::now() > deadline => panic!("connect {addr}: {e}"),
            // the guest's listener may not be up yet: poll with a deadline
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    })
    .expect("in_netns")
}

#[test]
fn panic_tears_down_guest_and_namespace_and_host_reaches_guest() {
    if !require_or_skip("harness_lab::panic", &[Flavour::Bookworm], false) {
        return;
    }
    let seen: Mutex<Option<(String, u32, std::path::PathBuf)>> = Mutex::new(None);
    let r = std::panic::catch_unwind(|| {
        let lab = Lab::new("panic-check").expect("lab");
        let g = lab
            .boot(
                GuestSpec::new(Flavour::Bookworm)
                    .addr("10.77.0.11/24")
                    .addr("fd00:77::11/64")
                    .timeout(Duration::from_secs(120))
                    .cmd("(echo hello-v4 | nc -l -p 7000) & (echo hello-v6 | nc -l -p 7001) & wait"),
            )
            .expect("boot");
        *seen.lock().unwrap() = Some((lab.netns().to_string(), g.pid(), lab.dir().to_path_buf()));
        g.wait_for("ROCE-CMD-START", Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        assert_eq!(connect_read(&lab, "10.77.0.11:7000".parse().unwrap(), deadline).trim(), "hello-v4");
        assert_eq!(connect_read(&lab, "[fd00:77::11]:7001".parse().unwrap(), deadline).trim(), "hello-v6");
        panic!("deliberate panic with a running guest");
    });
    assert!(r.is_err(), "the closure must have panicked");
    let (ns, pid, dir) = seen.lock().unwrap().take().expect("guest booted");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "qemu {pid} survived the panic");
    assert!(!ns_exists(&ns), "namespace {ns} survived the panic");
    // a panicking lab keeps its logs for inspection; this test removes them
    assert!(dir.join("g1.log").is_file());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stuck_guest_is_killed_at_its_wall_clock_limit() {
    if !require_or_skip("harness_lab::timeout", &[Flavour::Bookworm], false) {
        return;
    }
    let lab = Lab::new("timeout-check").expect("lab");
    let limit = Duration::from_secs(12);
    let t0 = Instant::now();
    let g = lab.boot(GuestSpec::new(Flavour::Bookworm).no_rxe().cmd("sleep 600").timeout(limit)).expect("boot");
    g.wait_exit(Duration::from_secs(60)).expect("qemu killed and reaped");
    let took = t0.elapsed();
    assert!(g.timed_out(), "not killed by the watchdog:\n{}", g.output());
    assert!(took >= limit && took < limit + Duration::from_secs(10), "killed after {took:?}");
    assert!(!Path::new(&format!("/proc/{}", g.pid())).exists());
    match g.exit_code(Duration::from_secs(1)) {
        Err(HarnessError::GuestExited { guest, .. }) => assert!(guest.contains("wall-clock"), "{guest}"),
        other => panic!("expected GuestExited, got {other:?}"),
    }
}

#[test]
fn a_dead_guest_link_is_told_from_a_live_one() {
    if !require_or_skip("harness_lab::link_dead", &[Flavour::Bookworm], false) {
        return;
    }
    let lab = Lab::new("link-check").expect("lab");
    let g = lab
        .boot(GuestSpec::new(Flavour::Bookworm).no_rxe().addr("10.77.0.12/24").hold().timeout(Duration::from_secs(180)))
        .expect("boot");
    g.wait_ready(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.link_dead(HOST_V4.parse().unwrap()), None, "{}", g.tail(20));
    // the guest transmits into nothing, as when its virtio-net queue stalled: the host side
    // of its tap goes down
    let out = lab.exec_host(&["ip", "link", "set", g.tap(), "down"], Duration::from_secs(10)).expect("ip");
    assert!(out.status.success());
    let why = g.link_dead(HOST_V4.parse().unwrap()).expect("a dead link");
    eprintln!("{why}");
    assert!(why.contains("eth0 tx_packets="), "{why}");
}

#[test]
fn once_more_only_for_the_failures_it_is_told() {
    use std::sync::atomic::{AtomicU32, Ordering};
    // a guest's failure the first time: run once more, and the second run's verdict stands
    let runs = AtomicU32::new(0);
    uroce_rxe_compat::harness::once_more_if(
        "t",
        "unreachable",
        |m| m.contains("No route to host"),
        || {
            if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("connect 10.77.0.11:18515: No route to host (os error 113)");
            }
        },
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // any other failure goes on at once
    let runs = AtomicU32::new(0);
    let r = std::panic::catch_unwind(|| {
        uroce_rxe_compat::harness::once_more_if(
            "t",
            "unreachable",
            |m| m.contains("No route to host"),
            || {
                runs.fetch_add(1, Ordering::SeqCst);
                panic!("assertion failed: the bytes differ");
            },
        )
    });
    assert!(r.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // and a second guest failure fails the test
    let r = std::panic::catch_unwind(|| {
        uroce_rxe_compat::harness::once_more_if("t", "unreachable", |m| m.contains("No route"), || panic!("No route"))
    });
    assert!(r.is_err());
}
