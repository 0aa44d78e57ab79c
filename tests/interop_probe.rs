//! `uroce probe` against the real Linux soft-RoCE driver (`rdma_rxe`) in QEMU guests, both
//! Debian kernels: the default `write_lat` and `read_lat` plans against the guest's stock
//! `ib_write_lat`/`ib_read_lat` servers on rxe0 — rxe's responder, requester and READ
//! responder each faced with targeted faults (a lost middle or last packet, a bad ICRC, a
//! reordered, duplicated or CE-marked packet, a lost ACK each way) — and rxe's own counters
//! before and after.
//!
//! Checked: perftest exits 0 on both sides, every fault was applied, no retransmitted packet
//! carried other bytes than its first transmission, and each row shows what rxe is known to do
//! (`RXE_ROWS`: IBTA's behaviour everywhere except the CE mark, since rxe runs no notification
//! point). The reports are printed, and appended to `UROCE_IX_REPORT` when set.
//!
//! Needs root, QEMU and the guest images (`rxe-compat/interop/`); skips with a printed reason,
//! or fails under `CI=1`.

#[path = "common/ix.rs"]
mod ix;

use ix::Proc;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uroce::netns::BridgePort;
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, GuestSpec, Lab};

const GUEST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 31);
const UROCE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 7);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x07];
const RUN_LIMIT: u64 = 120;
const HW_COUNTERS: &str = "/sys/class/infiniband/rxe0/ports/1/hw_counters";

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

use uroce::probe::report::parse_rows as rows;

/// What rxe does about each fault of the default plans: (fault, the start of the observation).
/// Every row conforms but the CE mark's: rxe has no notification point.
const RXE_ROWS: &[(&str, &str)] = &[
    ("out:drop@m3.2", "NAK PsnSequenceError PSN"),
    ("out:icrc@m6.2", "NAK PsnSequenceError PSN"),
    ("out:reorder1@m9.2", "NAK PsnSequenceError PSN"),
    ("out:dup@m12.2", "no NAK"),
    ("out:dup@m15.4", ""),
    ("out:ce@m18.1", "no CNP"),
    ("in:drop@m21.2", "resent from PSN"),
    ("in:drop@m24.4", "resent from PSN"),
    ("out:drop@ack27", ""),
    ("in:drop@ack30", "re-ACKed PSN"),
    ("out:drop@m33.4", "silent until our retransmission"),
    ("in:drop@m3.2", "resent from PSN"),
    ("in:drop@m6.4", "resent from PSN"),
    ("in:drop@m9.1", "resent from PSN"),
    ("out:drop@m12.1", "silent until our retransmission"),
    ("out:dup@m15.1", "answered"),
];

fn probe(flavour: Flavour) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let test = format!("interop_probe::{flavour}_probe");
    if !require_or_skip(&test, &[flavour], false) {
        return;
    }
    let t0 = Instant::now();
    let lab = Lab::new(&test).expect("lab");
    let spec = GuestSpec::new(flavour)
        .name(&format!("pr-{flavour}"))
        .addr(&format!("{GUEST_V4}/24"))
        .hold()
        .timeout(Duration::from_secs(3600));
    let guest = lab.boot(spec).expect("boot");
    let ns = format!("{}-p{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    let boot = guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[probe] {flavour} guest ready after {boot:?} ({:?} with the lab)", t0.elapsed());
    let console =
        |cmd: &str, t: u64| guest.console_run(cmd, Duration::from_secs(t)).unwrap_or_else(|e| panic!("console: {e}"));
    let counters = || ix::rxe_counters(&console(&format!("(cd {HW_COUNTERS} && grep . *)"), 30).1);
    let tmp = std::env::temp_dir().join(format!("uroce-probe-{flavour}-{}", std::process::id()));
    let peer = format!("rxe, Debian {flavour}");
    let mut all = String::new();
    for test in ["write_lat", "read_lat"] {
        let before = counters();
        let start = format!(
            "rm -f /tmp/s.out /tmp/s.rc; (timeout {RUN_LIMIT} ib_{test} -d rxe0 -x 1 -F -m 1024 -s 4096 -n 40 \
             > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true"
        );
        assert_eq!(console(&start, 30).0, 0, "start the guest's server");
        assert_eq!(console(ix::GUEST_WAIT_LISTEN, 60).0, 0, "{flavour}: ib_{test} is not listening");
        let out = tmp.join(test);
        let out_s = out.display().to_string();
        // -u 18: the TCG guest stalls for a second at times; uroce's own timer must not fire
        // in such a stall (its retransmissions would muddle the windows)
        let argv = [ix::BIN, "probe", test, &GUEST_V4.to_string(), "-d", "eth0", "-m", "1024", "-u", "18"];
        let mut argv: Vec<&str> = argv.to_vec();
        argv.extend(["--no-progress", "--peer-name", &peer, "--out", &out_s]);
        let done = Proc::spawn_in(&port.ns, &argv).wait(Duration::from_secs(RUN_LIMIT));
        let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; \
                       cat /tmp/s.out; echo \"==R\"\"C==$(cat /tmp/s.rc)\"";
        let theirs = console(collect, 90).1;
        let delta = ix::delta(&counters(), &before);
        let report = std::fs::read_to_string(out.join("report.md")).unwrap_or_default();
        eprintln!("[probe] {flavour} {test}:\n{report}[probe] rxe counters: {}", ix::kv(&delta));
        all.push_str(&format!("\n### {peer}: {test}\n\n{report}\nrxe counters: {}\n", ix::kv(&delta)));
        assert!(done.ok(), "{flavour} {test}: uroce probe failed\n{}\n=== rxe side\n{theirs}", done.text());
        assert!(theirs.contains("==RC==0"), "{flavour} {test}: rxe's ib_{test} failed\n{theirs}");
        assert!(report.contains("not_applied 0"), "{flavour} {test}: a fault was not applied\n{report}");
        assert!(report.contains("integrity_errors 0"), "{flavour} {test}\n{report}");
        let check = ix::quick_check(&out.join("probe.pcap")).unwrap_or_else(|e| panic!("{flavour} {test}: {e}"));
        // the wire: every frame decodes; the one bad ICRC is the plan's (write_lat)
        assert!(
            check.0 > 100 && check.1 == u64::from(test == "write_lat") && check.2 == 0,
            "{flavour} {test}: {check:?}"
        );
        for (fault, observed, verdict) in rows(&report) {
            let (_, want) =
                RXE_ROWS.iter().find(|r| r.0 == fault).unwrap_or_else(|| panic!("no expectation for {fault}"));
            assert!(
                observed.starts_with(want),
                "{flavour} {test} {fault}: rxe did `{observed}`, known `{want}…`\n{report}"
            );
            let conform = !fault.starts_with("out:ce");
            assert_eq!(verdict == "conforms", conform, "{flavour} {test} {fault}: {observed} ({verdict})\n{report}");
        }
        // the probe's faults reach rxe's own counters
        // (write_lat: one out-of-sequence request each for the drop and the bad ICRC, two for
        // the reorder; our one NAK; our NAK and two ACK timeouts retried by rxe's completer)
        if test == "write_lat" {
            let c = |k: &str| delta.get(k).copied().unwrap_or(0);
            assert!(c("out_of_seq_request") >= 4, "{flavour}: {}", ix::kv(&delta));
            assert!(c("duplicate_request") >= 2, "{flavour}: {}", ix::kv(&delta));
            assert!(c("rcvd_seq_err") >= 1, "{flavour}: {}", ix::kv(&delta));
            assert!(c("completer_retry_err") >= 3, "{flavour}: {}", ix::kv(&delta));
        }
    }
    if let Some(f) = std::env::var_os("UROCE_IX_REPORT").filter(|v| !v.is_empty()) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).expect("report file");
        let _ = f.write_all(all.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bookworm_probe() {
    probe(Flavour::Bookworm);
}

#[test]
fn trixie_probe() {
    probe(Flavour::Trixie);
}
