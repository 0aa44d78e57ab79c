//! `uroce attack` against the real Linux soft-RoCE driver (`rdma_rxe`, Debian trixie's 6.17
//! kernel) in a QEMU guest: an `ib_write_bw` connection between the guest and uroce on the
//! lab's bridge, and an attacker in a third namespace whose bridge port mirrors both ends'
//! ports. rxe as the responder faces invalid requests from the requester's address with the
//! attacker's MAC, from another UDP port, and fully spoofed; rxe as the requester faces blind
//! and on-path error NAKs. rxe checks only addresses (`check_addr`) and a NAK's PSN, so every
//! one of them ends its connection, where uroce (`tests/attack_cli.rs`) drops the first three
//! kinds. The NAK rows race uroce's real ACKs into a slow (TCG) guest, so they are reported,
//! not asserted. Blind PSN guessing is reported; a QPN scan from 0x11 finds rxe's live QP
//! (its QPNs count up), answered by its PSN-sequence NAK. rxe's QPNs are seen to come one
//! after another (predictable). On `ib_read_bw` connections: READs with guessed R_Keys end
//! the connection at the first that lands, the sniffed key reads rxe's memory, and the keys of
//! the two regions before predict the next one's to 8 bits (its pool index counts up); a
//! replayed READ request makes rxe send the READ's bytes again (reported). A guest that dies under an attack is a finding (the kernel's
//! words and the console log are kept; once, trixie's rxe died of a double fault in
//! `rxe_requester` under the blind NAK flood), and the table goes on with a new guest. The
//! rows are printed, and appended to `UROCE_IX_REPORT` when set.
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

/// A field of an attack line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(&format!(" {name}=")).nth(1).and_then(|s| s.split_whitespace().next()).unwrap_or("?")
}

/// The R_Keys an attack line saw (`rkeys_seen=[a5a6a002, ...]`).
fn rkeys_seen(line: &str) -> Vec<u32> {
    let list = line.split("rkeys_seen=[").nth(1).and_then(|s| s.split(']').next()).unwrap_or("");
    list.split(", ").filter_map(|k| u32::from_str_radix(k.trim(), 16).ok()).collect()
}

fn hex(v: &str) -> u32 {
    u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {v}"))
}

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
    let ns = format!("{}-a{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let port = BridgePort::attach(lab.netns(), harness::BRIDGE, &ns, "eth0", (UROCE_V4, 24), None, 1500, UROCE_MAC)
        .expect("attach uroce's namespace to the lab bridge");
    let ans = format!("{}-x{}", lab.netns(), &flavour.as_str()[..1]);
    #[rustfmt::skip]
    let attacker = BridgePort::attach(lab.netns(), harness::BRIDGE, &ans, "eth0", (ATTACKER_V4, 24), None, 1500, ATTACKER_MAC)
        .expect("attach the attacker's namespace");
    // A guest, its tap mirrored to the attacker with uroce's port (again after a crash: the
    // new guest has a new tap).
    let boot = |n: u32| {
        let spec = GuestSpec::new(flavour)
            .name(&format!("at-{flavour}-{n}"))
            .addr(&format!("{GUEST_V4}/24"))
            .hold()
            .timeout(Duration::from_secs(3600));
        let guest = lab.boot(spec).expect("boot");
        guest.wait_ready(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
        let _ = netns::exec(
            lab.netns(),
            &["nft", "delete", "table", "netdev", &format!("mirror_{}", attacker.bridge_side)],
        );
        netns::mirror(lab.netns(), &[guest.tap(), &port.bridge_side], &attacker.bridge_side).expect("mirror port");
        guest
    };
    let mut boots = 0;
    let mut guest = boot(boots);
    eprintln!("[attack] {flavour} guest ready ({:?} with the lab)", t0.elapsed());
    // (attack, rxe's side, outcome, the attack's line, the guest it ran against)
    let mut rows: Vec<(String, bool, String, String, u32)> = Vec::new();
    let mut findings = Vec::new();
    // (attack, rxe's side, the connection's test) — rxe the responder (uroce the client), or
    // the requester. `@seen` is the R_Keys of the rows before in the same guest (regions its
    // ib_read_bw servers registered one after another).
    let table: [(&[&str], bool, &str); 11] = [
        (&["kill-qp", "--spoof", "own-mac"], true, "write_bw"),
        (&["kill-qp", "--spoof", "other-port"], true, "write_bw"),
        (&["kill-qp", "--spoof", "full"], true, "write_bw"),
        (&["nak-flood", "--count", "300000"], false, "write_bw"),
        (&["nak-on-path"], false, "write_bw"),
        (&["psn-guess", "--count", "20000"], true, "write_bw"),
        (&["qpn-scan", "--count", "256", "--probe-us", "20000", "--passes", "3"], true, "write_bw"),
        (&["rkey-guess", "--guess", "sequential"], true, "read_bw"),
        (&["rkey-guess", "--guess", "sniffed"], true, "read_bw"),
        (&["rkey-guess", "--guess", "predict", "--seen", "@seen"], true, "read_bw"),
        (&["read-replay", "--count", "1000", "--probe-us", "10"], true, "read_bw"),
    ];
    // the R_Keys of consecutive ib_read_bw servers in the current guest
    let mut seen_keys: Vec<String> = Vec::new();
    // UROCE_ATTACK_CRASH_ROW=N crashes the guest (sysrq) during row N: how the crash path is
    // checked, a real rxe crash being rare
    let crash_row: Option<usize> = std::env::var("UROCE_ATTACK_CRASH_ROW").ok().and_then(|v| v.parse().ok());
    for (i, (args, rxe_responds, test)) in table.into_iter().enumerate() {
        // UROCE_ATTACK_ONLY=WORD runs only the rows whose attack contains WORD (a bisecting aid)
        if std::env::var("UROCE_ATTACK_ONLY").is_ok_and(|w| !args.join(" ").contains(&w)) {
            continue;
        }
        let seen_arg = seen_keys.join(",");
        let args: Vec<&str> = args.iter().map(|a| if *a == "@seen" { seen_arg.as_str() } else { a }).collect();
        if args.contains(&"") {
            eprintln!("[attack] {args:?}: skipped, no R_Keys of earlier read_bw servers in this guest");
            continue;
        }
        let boots_before = boots;
        let console = |cmd: &str, t: u64| guest.console_run(cmd, Duration::from_secs(t)).ok();
        let collect = "i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i+1)); done; \
                       echo \"==R\"\"C==$(cat /tmp/s.rc)\"";
        let uroce_perf = |host: Option<String>| {
            let mut v: Vec<String> =
                [ix::BIN, "perf", test, "-d", "eth0", "-m", "1024", "-s", "4096", "-D", "8"].map(String::from).to_vec();
            v.extend(["-u", "18", "--no-progress", "--counters"].map(String::from));
            v.extend(host);
            v
        };
        let (uroce, guest_cmd) = if rxe_responds {
            (uroce_perf(Some(GUEST_V4.to_string())), format!("ib_{test} {PERF}"))
        } else {
            (uroce_perf(None), format!("ib_{test} {PERF} {UROCE_V4}"))
        };
        let start = format!("rm -f /tmp/s.rc; (timeout 60 {guest_cmd} > /tmp/s.out 2>&1; echo $? > /tmp/s.rc) & true");
        let argv: Vec<&str> = uroce.iter().map(String::as_str).collect();
        let p = if rxe_responds {
            assert_eq!(console(&start, 30).map(|o| o.0), Some(0), "{args:?}: the guest's console");
            assert_eq!(console(ix::GUEST_WAIT_LISTEN, 60).map(|o| o.0), Some(0), "ib_write_bw is not listening");
            Proc::spawn_in(&port.ns, &argv)
        } else {
            let mut p = Proc::spawn_in(&port.ns, &argv);
            let pid = p.pid();
            assert!(ix::poll_until(Duration::from_secs(30), || ix::listening(pid, 18515) || !p.running()));
            assert_eq!(console(&start, 30).map(|o| o.0), Some(0), "{args:?}: the guest's console");
            p
        };
        let mut a: Vec<&str> = vec![ix::BIN, "attack"];
        a.extend(&args);
        a.extend(["-i", "eth0", "--watch-ms", "1500", "--learn-timeout", "40"]);
        let attack = Proc::spawn_in(&attacker.ns, &a);
        if crash_row == Some(i) {
            std::thread::sleep(Duration::from_secs(2));
            let _ = guest.console_run("echo c > /proc/sysrq-trigger", Duration::from_secs(5));
        }
        let done = attack.wait(Duration::from_secs(120));
        let ours = p.wait(Duration::from_secs(90));
        let theirs = console(collect, 60).map(|o| o.1);
        let line = done.stdout.lines().find(|l| l.starts_with("uroce-attack:")).unwrap_or("").to_string();
        let side = if rxe_responds { "responder" } else { "requester" };
        // a guest that stopped answering: rxe (or its kernel) died under the attack — a finding,
        // with the kernel's own words; the table goes on with a new guest
        if theirs.is_none() || console("echo alive", 20).is_none() {
            let log = guest.output();
            let oops: Vec<&str> = log
                .lines()
                .filter(|l| {
                    ["Oops", "BUG", "panic", "general protection", "RIP:", "rxe_"].iter().any(|k| l.contains(k))
                })
                .take(12)
                .collect();
            let keep = std::env::temp_dir().join(format!("uroce-attack-finding-{flavour}-{i}.log"));
            let _ = std::fs::write(&keep, &log);
            let finding = format!(
                "`uroce attack {}` (rxe {side}): the guest died\n{}\n  console log: {}",
                args.join(" "),
                oops.join("\n"),
                keep.display()
            );
            eprintln!("[attack] FINDING {finding}");
            findings.push(finding);
            rows.push((args.join(" "), rxe_responds, "rxe crashed".into(), line, boots));
            guest.kill();
            boots += 1;
            guest = boot(boots);
            seen_keys.clear();
            continue;
        }
        // rxe wedged by an earlier row: its side never moved traffic for this one — a finding
        // too, and a new guest for the rows after
        if !done.ok() && done.text().contains("no RC connection with traffic both ways") {
            let finding = format!("`uroce attack {}` (rxe {side}): no traffic from rxe's connection", args.join(" "));
            eprintln!("[attack] FINDING {finding}");
            findings.push(finding);
            rows.push((args.join(" "), rxe_responds, "rxe wedged".into(), line, boots));
            guest.kill();
            boots += 1;
            guest = boot(boots);
            seen_keys.clear();
            continue;
        }
        assert!(done.ok(), "{args:?}: uroce attack failed\n{}", done.text());
        eprintln!("[attack] {flavour} {args:?} (rxe {side}): {line}");
        eprintln!(
            "[attack]   uroce's side exit {:?}; rxe's {}",
            ours.status.map(|s| s.code()),
            theirs.as_deref().and_then(|t| t.lines().last()).unwrap_or("")
        );
        if !ours.ok() {
            let tail: Vec<&str> = ours.stderr.lines().rev().take(8).collect();
            eprintln!(
                "[attack]   uroce's side said: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n[attack]     ")
            );
        }
        rows.push((args.join(" "), rxe_responds, outcome(&line).to_string(), line.clone(), boots));
        if test == "read_bw" && rxe_responds {
            seen_keys.extend(rkeys_seen(&line).first().map(|k| format!("{k:#x}")));
        }
        // rxe's program killed by its `timeout` (it hung after the attack): a finding, and a new
        // guest for the rows after (seen once after the blind NAK flood)
        if theirs.as_deref().is_some_and(|t| t.contains("==RC==143") || t.contains("==RC==124")) {
            let finding = format!("`uroce attack {}` (rxe {side}): rxe's ib_write_bw hung afterwards", args.join(" "));
            eprintln!("[attack] FINDING {finding}");
            findings.push(finding);
            guest.kill();
            boots += 1;
            guest = boot(boots);
        }
        if boots != boots_before {
            seen_keys.clear();
        }
    }
    // RDMA-CM connection-state exhaustion (off-path): REQs from the attacker's own address at
    // the guest's `rping -s`, never followed up; then the connection state rxe's kernel holds
    // (`rdma res show cm_id`) and whether rping survived
    {
        let start = "rm -f /tmp/s.out /tmp/s.rc; (timeout 60 rping -s -a 0.0.0.0 -C 3 -v > /tmp/s.out 2>&1; \
                     echo $? > /tmp/s.rc) & i=0; while ! rdma res show cm_id 2>/dev/null | grep -q LISTEN && \
                     [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; true";
        assert_eq!(guest.console_run(start, Duration::from_secs(60)).map(|o| o.0).ok(), Some(0), "rping -s");
        let target = GUEST_V4.to_string();
        #[rustfmt::skip]
        let flood = [ix::BIN, "attack", "cm-flood", "-i", "eth0", "--target", &target, "--port", "7174",
                     "--count", "1024", "--probe-us", "100", "--watch-ms", "3000"];
        let done = Proc::spawn_in(&attacker.ns, &flood).wait(Duration::from_secs(120));
        let line = done.stdout.lines().find(|l| l.starts_with("uroce-attack:")).unwrap_or("").to_string();
        assert!(done.ok(), "cm-flood: {}", done.text());
        let state = guest
            .console_run(
                "echo \"==H\"\"ELD $(rdma res show cm_id 2>/dev/null | grep -c .) ==\"; \
                 i=0; while [ ! -s /tmp/s.rc ] && [ $i -lt 650 ]; do sleep 0.1; i=$((i+1)); done; \
                 echo \"==R\"\"C==$(cat /tmp/s.rc)\"; tail -n 2 /tmp/s.out",
                Duration::from_secs(90),
            )
            .map(|o| o.1)
            .unwrap_or_default();
        let held = state.split("==HELD ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap_or("?").to_string();
        let state = state.split("==HELD ").nth(1).unwrap_or("").to_string();
        eprintln!(
            "[attack] cm-flood against rxe's rping -s: {line}\n[attack]   cm_ids held right after: {held}; {}",
            state.trim()
        );
        rows.push(("cm-flood --port 7174 (rping -s)".into(), true, format!("cm_ids held {held}"), line, boots));
    }
    let mut md =
        format!("\n### uroce attack against rxe ({flavour})\n\n| attack | rxe as | outcome |\n|---|---|---|\n");
    for (a, resp, o, _, _) in &rows {
        md += &format!("| `{a}` | {} | {o} |\n", if *resp { "responder" } else { "requester" });
    }
    for f in &findings {
        md += &format!("\nFinding: {f}\n");
    }
    eprintln!("[attack] {flavour}:{md}");
    if let Some(f) = std::env::var_os("UROCE_IX_REPORT").filter(|v| !v.is_empty()) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).expect("report file");
        let _ = f.write_all(md.as_bytes());
    }
    // rxe's QPNs, as the attacker saw them connection after connection: one apart (a
    // predictable sequence, where uroce draws them from the OS CSPRNG)
    let rxe_qpns: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| r.2 != "rxe crashed" && r.2 != "rxe wedged" && !r.0.starts_with("cm-flood"))
        .filter_map(|(_, resp, _, line, boot)| {
            let side = if *resp { "responder=" } else { "requester=" };
            let rest = line.split(side).nth(1)?;
            Some((*boot, u32::from_str_radix(rest.split("qp=0x").nth(1)?.split_whitespace().next()?, 16).ok()?))
        })
        .collect();
    eprintln!("[attack] rxe's QPNs (guest, QPN), one connection after another: {rxe_qpns:x?}");
    let failed_rows = rows.iter().filter(|r| r.2 == "rxe crashed" || r.2 == "rxe wedged").count();
    let cm_rows = rows.iter().filter(|r| r.0.starts_with("cm-flood")).count();
    assert_eq!(rxe_qpns.len() + failed_rows + cm_rows, rows.len());
    assert!(
        rxe_qpns.windows(2).all(|w| w[0].0 != w[1].0 || w[1].1 == w[0].1 + 1),
        "rxe's QPNs in one guest: {rxe_qpns:x?}"
    );
    // rxe checks addresses only: the attacker's MAC and another UDP port are not refused
    // (the NAK rows race the real ACKs through a slow guest: reported, not asserted)
    for (a, _, o, line, _) in rows.iter().filter(|r| r.2 != "rxe crashed" && r.2 != "rxe wedged") {
        if a.starts_with("kill-qp") {
            assert_eq!(o, "killed", "{a}: {line}");
        }
        // R_Keys: a guess lands and, wrong, ends the connection; the sniffed key reads rxe's
        // memory; the keys of the regions before predict all but 8 bits of the next one
        if a.starts_with("rkey-guess --guess sequential") {
            assert_eq!((o.as_str(), field(line, "leaked_bytes")), ("killed", "0"), "{a}: {line}");
        }
        if a.starts_with("rkey-guess --guess sniffed") {
            assert_eq!((o.as_str(), field(line, "leaked_bytes")), ("leaked", "64"), "{a}: {line}");
        }
        if a.starts_with("rkey-guess --guess predict") {
            let (base, mask) = field(line, "predicted").split_once('/').unwrap_or(("?", "?"));
            let actual = hex(field(line, "sniffed_rkey"));
            eprintln!(
                "[attack] rxe's next R_Key predicted {base}/{mask} ({} bits left), was {actual:#x}",
                field(line, "unknown_bits")
            );
            assert_eq!(field(line, "unknown_bits"), "8", "{line}");
            assert_eq!(actual & hex(mask), hex(base), "the index part predicted: {line}");
        }
        // rxe's QPNs count up from 0x11: a scan from there finds the live one, and it is the
        // responder's (uroce's, random in 24 bits, are not found: tests/attack_cli.rs)
        if a.starts_with("qpn-scan") {
            assert_eq!(o, "found", "{a}: {line}");
            let qp = line.split("responder=").nth(1).and_then(|r| r.split("qp=").nth(1)).unwrap_or("");
            assert!(line.contains(&format!("found_qp={}", qp.split_whitespace().next().unwrap_or("?"))), "{line}");
        }
    }
}
