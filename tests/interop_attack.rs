//! `uroce attack` against the real Linux soft-RoCE driver (`rdma_rxe`, Debian trixie's 6.17
//! kernel) in a QEMU guest: an `ib_write_bw` connection between the guest and uroce on the
//! lab's bridge, and an attacker in a third namespace whose bridge port mirrors both ends'
//! ports. rxe as the responder faces invalid requests from the requester's address with the
//! attacker's MAC, from another UDP port, and fully spoofed; rxe as the requester faces blind
//! and on-path error NAKs. rxe checks only addresses (`check_addr`) and a NAK's PSN, so every
//! one of them ends its connection, where uroce (`tests/attack_cli.rs`) drops the first three
//! kinds. The NAK rows race uroce's real ACKs into a slow (TCG) guest, so they are reported,
//! not asserted. rxe's QPNs are seen to come one after another (predictable). The rows are
//! printed, and appended to `UROCE_IX_REPORT` when set.
//!
//! Needs root, QEMU, `nft` and the guest images (`rxe-compat/interop/`); skips with a printed
//! reason, or fails under `CI=1`.

#[path = "common/ix.rs"]
mod ix;

use ix::Proc;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use uroce::netns::{self, BridgePort};
use uroce_rxe_compat::harness::{self, require_or_skip, Flavour, GuestSpec, Lab};

const GUEST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 51);
const UROCE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 9);
const UROCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x09];
const ATTACKER_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 66);
const ATTACKER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x66];
const PERF: &str = "-d rxe0 -x 1 -F -m 1024 -s 4096 -D 8";

fn outcome(line: &str) -> &str {
    line.split("outcome=").nth(1).and_then(|s| s.split_whitespace().next()).unwrap_or("?")
}

#[test]
fn trixie_attacks() {
    let flavour = Flavour::Trixie;
    let test = format!("interop_attack::{flavour}_attacks");
    if !require_or_skip(&test, &[flavour], false) {
        return;
    }
    let t0 = Instant::now();
    let lab = Lab::new(&test).expect("lab");
    let spec = GuestSpec::new(flavour)
        .name(&format!("at-{flavour}"))
        .addr(&format!("{GUEST_V4}/24"))
        .hold()
        .timeout(Duration::from_secs(3600));
    let guest = lab.boot(spec).expect("boot");
    let ns = format!("{}-a{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    let ans = format!("{}-x{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let attacker = BridgePort::attach(lab.netns(), harness::BRIDGE, &ans, "eth0", (ATTACKER_V4, 24), None, 1500, ATTACKER_MAC)
        .expect("attach the attacker's namespace");
    guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    netns::mirror(lab.netns(), &[guest.tap(), &port.bridge_side], &attacker.bridge_side).expect("mirror port");
    eprintln!("[attack] {flavour} guest ready ({:?} with the lab)", t0.elapsed());
    let console =
        |cmd: &str, t: u64| guest.console_run(cmd, Duration::from_secs(t)).unwrap_or_else(|e| panic!("console: {e}"));
    let mut rows = Vec::new();
    // (attack, rxe's side) — rxe the responder (uroce the client), or the requester
    let table: [(&[&str], bool); 5] = [
        (&["kill-qp", "--spoof", "own-mac"], true),
        (&["kill-qp", "--spoof", "other-port"], true),
        (&["kill-qp", "--spoof", "full"], true),
        (&["nak-flood", "--count", "300000"], false),
        (&["nak-on-path"], false),
    ];
    for (args, rxe_responds) in table {
        let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i+1)); done; \
                       echo \"==R\"\"C==$(cat /tmp/s.rc)\"";
        let uroce_perf = |host: Option<String>| {
            let mut v: Vec<String> = [ix::BIN, "perf", "write_bw", "-d", "eth0", "-m", "1024", "-s", "4096", "-D", "8"]
                .map(String::from)
                .to_vec();
            v.extend(["-u", "18", "--no-progress", "--counters"].map(String::from));
            v.extend(host);
            v
        };
        let (uroce, guest_cmd) = if rxe_responds {
            (uroce_perf(Some(GUEST_V4.to_string())), format!("ib_write_bw {PERF}"))
        } else {
            (uroce_perf(None), format!("ib_write_bw {PERF} {UROCE_V4}"))
        };
        let start = format!("rm -f /tmp/s.rc; (timeout 60 {guest_cmd} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true");
        let argv: Vec<&str> = uroce.iter().map(String::as_str).collect();
        let p = if rxe_responds {
            assert_eq!(console(&start, 30).0, 0);
            assert_eq!(console(ix::GUEST_WAIT_LISTEN, 60).0, 0, "ib_write_bw is not listening");
            Proc::spawn_in(&port.ns, &argv)
        } else {
            let mut p = Proc::spawn_in(&port.ns, &argv);
            let pid = p.pid();
            assert!(ix::poll_until(Duration::from_secs(30), || ix::listening(pid, 18515) || !p.running()));
            assert_eq!(console(&start, 30).0, 0);
            p
        };
        let mut a: Vec<&str> = vec![ix::BIN, "attack"];
        a.extend(args);
        a.extend(["-i", "eth0", "--watch-ms", "1500", "--learn-timeout", "40"]);
        let done = Proc::spawn_in(&attacker.ns, &a).wait(Duration::from_secs(120));
        let ours = p.wait(Duration::from_secs(90));
        let theirs = console(collect, 60).1;
        assert!(done.ok(), "{args:?}: uroce attack failed\n{}", done.text());
        let line = done.stdout.lines().find(|l| l.starts_with("uroce-attack:")).unwrap_or("").to_string();
        eprintln!("[attack] {flavour} {args:?} (rxe {}): {line}", if rxe_responds { "responder" } else { "requester" });
        eprintln!(
            "[attack]   uroce's side exit {:?}; rxe's {}",
            ours.status.map(|s| s.code()),
            theirs.lines().last().unwrap_or("")
        );
        rows.push((args.join(" "), rxe_responds, outcome(&line).to_string(), line));
    }
    let mut md =
        format!("\n### uroce attack against rxe ({flavour})\n\n| attack | rxe as | outcome |\n|---|---|---|\n");
    for (a, resp, o, _) in &rows {
        md += &format!("| `{a}` | {} | {o} |\n", if *resp { "responder" } else { "requester" });
    }
    eprintln!("[attack] {flavour}:{md}");
    if let Some(f) = std::env::var_os("UROCE_IX_REPORT").filter(|v| !v.is_empty()) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).expect("report file");
        let _ = f.write_all(md.as_bytes());
    }
    // rxe's QPNs, as the attacker saw them connection after connection: one apart (a
    // predictable sequence, where uroce draws them from the OS CSPRNG)
    let rxe_qpns: Vec<u32> = rows
        .iter()
        .filter_map(|(_, resp, _, line)| {
            let side = if *resp { "responder=" } else { "requester=" };
            let rest = line.split(side).nth(1)?;
            u32::from_str_radix(rest.split("qp=0x").nth(1)?.split_whitespace().next()?, 16).ok()
        })
        .collect();
    eprintln!("[attack] rxe's QPNs, one connection after another: {rxe_qpns:x?}");
    assert_eq!(rxe_qpns.len(), rows.len());
    assert!(rxe_qpns.windows(2).all(|w| w[1] == w[0] + 1), "rxe's QPNs: {rxe_qpns:x?}");
    // rxe checks addresses only: the attacker's MAC and another UDP port are not refused
    // (the NAK rows race the real ACKs through a slow guest: reported, not asserted)
    for (a, _, o, line) in &rows {
        if a.starts_with("kill-qp") {
            assert_eq!(o, "killed", "{a}: {line}");
        }
    }
}
