//! RDMA-CM against the real kernel rdma_cm and rxe in QEMU guests: Debian's `rping` over
//! uroce's drop-in `librdmacm.so.1`/`libibverbs.so.1` (in a namespace on the lab's bridge,
//! 10.77.0.6) against the guest's stock `rping` on rxe0 (10.77.0.21), both ways: uroce's client
//! to the guest's server, the guest's client to uroce's server. The connection is set up with
//! the IB CM on QP1 (REQ, REP, RTU) by one kernel-free side and one kernel, carries rping's
//! RDMA READs, WRITEs and SENDs with every ping's data checked (`-v`), and is released (DREQ,
//! DREP). Checked: both exit 0, both print all pings, and the bridge capture decodes cleanly
//! with every CM message in place.
//!
//! The guests' rping aborts at its very end (the images lack `libgcc_s.so.1`, which
//! `pthread_exit` loads): that one exit is accepted, the pings and the release checked.
//!
//! Needs root, QEMU, tcpdump and the guest images (`rxe-compat/interop/`); skips with a printed
//! reason, or fails under `CI=1`.

#[path = "common/ix.rs"]
mod ix;

use ix::Proc;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce::netns::BridgePort;
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, GuestSpec, Lab};

const GUEST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 21);
const UROCE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 6);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x06];
const PINGS: usize = 20;
const RUN_LIMIT: u64 = 180;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The pings a side printed (rping `-v`: `ping data: rdma-ping-N: ...`, the server's with
/// `server ` before it).
fn pings(out: &str) -> usize {
    out.lines().filter(|l| l.contains("ping data: rdma-ping-")).count()
}

fn rping(flavour: Flavour) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let test = format!("interop_rdma_cm::{flavour}_rping");
    if !require_or_skip(&test, &[flavour], true) {
        return;
    }
    let Some(dir) = ix::verbs_dir().filter(|d| d.join("librdmacm.so.1").exists()) else {
        harness::skip_or_fail(&format!("{test}: uroce's librdmacm.so.1 is not built (scripts/build-verbs)"));
        return;
    };
    let t0 = Instant::now();
    let lab = Lab::new(&test).expect("lab");
    let spec = GuestSpec::new(flavour)
        .name(&format!("cm-{flavour}"))
        .addr(&format!("{GUEST_V4}/24"))
        .hold()
        .kernel_arg("no_timer_check")
        .timeout(Duration::from_secs(3600));
    let guest = lab.boot(spec).expect("boot");
    let ns = format!("{}-c{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    let boot = guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[cm] {flavour} guest ready after {boot:?} ({:?} with the lab)", t0.elapsed());
    let console =
        |cmd: &str, t: u64| guest.console_run(cmd, Duration::from_secs(t)).unwrap_or_else(|e| panic!("console: {e}"));
    let lib = format!("LD_LIBRARY_PATH={}", dir.display());
    let opts = format!("-C {PINGS} -S 1024 -v");
    let tmp = std::env::temp_dir().join(format!("uroce-cm-{flavour}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for uroce_client in [true, false] {
        let way = if uroce_client { "uroce client -> rxe server" } else { "rxe client -> uroce server" };
        let pcap = tmp.join(format!("{}.pcap", if uroce_client { "c" } else { "s" }));
        let cap = lab.capture(&pcap, "udp port 4791").expect("capture");
        let (ours, theirs) = if uroce_client {
            let start = format!(
                "rm -f /tmp/s.out /tmp/s.rc; (timeout {RUN_LIMIT} rping -s -a {GUEST_V4} {opts} > /tmp/s.out 2>&1; \
                 echo $? > /tmp/s.rc) & true"
            );
            assert_eq!(console(&start, 30).0, 0, "start the guest's server");
            // Our client is refused (REJ "invalid service ID") until the guest listens: again.
            let deadline = Instant::now() + Duration::from_secs(60);
            let done = loop {
                let argv = ["env", &lib, "rping", "-c", "-a", &GUEST_V4.to_string(), "-C", "20", "-S", "1024", "-v"];
                let d = Proc::spawn_in(&port.ns, &argv).wait(Duration::from_secs(RUN_LIMIT));
                if d.ok() || !d.text().contains("REJECTED") || Instant::now() > deadline {
                    break d;
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; \
                           cat /tmp/s.out; echo \"==R\"\"C==$(cat /tmp/s.rc)\"";
            (done, console(collect, 90).1)
        } else {
            let argv = ["env", &lib, "rping", "-s", "-a", &UROCE_V4.to_string(), "-C", "20", "-S", "1024", "-v"];
            let server = Proc::spawn_in(&port.ns, &argv);
            // The guest's client is refused until our server listens: it tries again.
            let cmd = format!(
                "i=0; while [ $i -lt 100 ]; do timeout {RUN_LIMIT} rping -c -a {UROCE_V4} {opts} > /tmp/c.out 2>&1 \
                 && break; grep -q REJECTED /tmp/c.out || break; sleep 0.2; i=$((i+1)); done; \
                 cat /tmp/c.out; echo \"==R\"\"C==$?\""
            );
            let out = console(&cmd, RUN_LIMIT + 60).1;
            (server.wait(Duration::from_secs(60)), out)
        };
        let stats = cap.stop().expect("capture stop");
        // The guest images lack libgcc_s.so.1, which glibc loads for pthread_exit's unwinding:
        // rping aborts in its exit path (rc 134) after its last ping and its disconnect. That
        // exit, and only with the pings all printed and the disconnect seen, counts as a pass
        // until the images carry the library.
        let image_abort = theirs.contains("libgcc_s.so.1 must be installed for pthread_exit")
            && theirs.contains("==RC==134")
            && (theirs.contains("DISCONNECT EVENT") || !uroce_client);
        let rc_ok = theirs.contains("==RC==0") || image_abort;
        assert!(
            ours.ok() && rc_ok,
            "{flavour} {way}: uroce {:?}\n{}\n=== rxe side\n{theirs}",
            ours.status,
            ours.text()
        );
        assert_eq!(pings(&ours.stdout), PINGS, "{flavour} {way}: uroce's rping\n{}", ours.text());
        assert_eq!(pings(&theirs), PINGS, "{flavour} {way}: rxe's rping\n{theirs}");
        // The bridge saw a clean exchange: every frame decodes with a good ICRC, and the CM
        // messages of a connection's life are all there.
        let check = ix::check_capture(&pcap, 1).unwrap_or_else(|e| panic!("{flavour} {way}: capture: {e}"));
        let text = std::process::Command::new(ix::BIN).arg("pcap").arg(&pcap).output().expect("uroce pcap");
        let text = String::from_utf8_lossy(&text.stdout);
        for m in ["CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"] {
            assert!(text.contains(m), "{flavour} {way}: no {m} in the capture");
        }
        let cm = text.lines().filter(|l| l.contains(" CM ")).count();
        eprintln!(
            "[cm] {flavour} {way}: {PINGS} pings verified on both sides; {} RoCE frames [{}], {cm} CM MADs{}",
            check.roce,
            check.summary(),
            if stats.dropped_by_kernel == 0 {
                String::new()
            } else {
                format!(" (tcpdump dropped {})", stats.dropped_by_kernel)
            }
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    drop(port);
    drop(guest);
}

#[test]
fn bookworm_rping() {
    rping(Flavour::Bookworm);
}

#[test]
fn trixie_rping() {
    rping(Flavour::Trixie);
}
