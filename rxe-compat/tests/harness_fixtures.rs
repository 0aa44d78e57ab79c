//! The project's own rxe-to-rxe capture fixtures (`rxe-compat/fixtures/*.pcap`).
//!
//! * `record_fixtures` (ignored; run on demand) boots two guests per flavour with this crate's
//!   harness, runs perftest scenarios between them while tcpdump records the bridge
//!   (`udp port 4791 or tcp port 18515`), counts the opcodes with tshark (an independent
//!   decoder) into `fixtures/opcodes.tsv`, and writes `fixtures/manifest.tsv` and `README.md`:
//!   `UROCE_RECORD_FIXTURES=1 cargo test -p uroce-rxe-compat --test harness_fixtures -- --ignored`
//!   (`UROCE_RECORD_ONLY=bookworm|trixie` and `UROCE_RECORD_SCENARIOS=write-v4,rnr-v4,...` re-record
//!   a subset and keep the other rows).
//! * `fixtures_decode_and_match_tshark` (always) parses every RoCEv2 frame of every fixture with
//!   uroce-wire, checks its ICRC and checks the per-opcode counts against `opcodes.tsv`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use uroce_rxe_compat::harness::{
    pair_run, perftest_pair_with, require_or_skip, verbs_tool, Flavour, Guest, GuestImage, GuestSpec, Lab, PairRun,
};

/// perftest's out-of-band port is 18515; uroce-verbs-ops (SEND with immediate/invalidate) uses 18516.
const FILTER: &str = "udp port 4791 or tcp port 18515 or tcp port 18516";
const TOOL: &str = "uroce-verbs-ops";
const SRV: (&str, &str) = ("10.77.0.11", "fd00:77::11");
const CLI: (&str, &str) = ("10.77.0.12", "fd00:77::12");

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Which rxe GID the scenario uses (perftest `-x`).
#[derive(Clone, Copy, Debug)]
enum GidSel {
    /// `::ffff:10.77.0.x` (RoCEv2 over IPv4).
    V4,
    /// `fd00:77::x` (RoCEv2 over IPv6, global address).
    V6,
    /// `fe80::...` from the MAC (RoCEv2 over IPv6, link-local).
    LinkLocal,
}

impl GidSel {
    fn label(self) -> &'static str {
        match self {
            GidSel::V4 => "IPv4-mapped GID (RoCEv2/IPv4)",
            GidSel::V6 => "IPv6 global GID fd00:77::/64 (RoCEv2/IPv6)",
            GidSel::LinkLocal => "IPv6 link-local GID fe80::/64 (RoCEv2/IPv6)",
        }
    }
    fn index(self, g: &Guest) -> u32 {
        let (v4, v6) = if g.name() == "srv" { SRV } else { CLI };
        match self {
            GidSel::V4 => g.gid_index(v4.parse().unwrap()),
            GidSel::V6 => g.gid_index(v6.parse().unwrap()),
            GidSel::LinkLocal => g.link_local_gid_index(),
        }
        .unwrap_or_else(|| panic!("{} has no {self:?} GID: {:?}", g.name(), g.gids()))
    }
}

/// One run: binary (a perftest `ib_*` or [`TOOL`]), arguments for both sides, arguments for
/// the server only.
struct Run(&'static str, &'static str, &'static str);

struct Scenario {
    name: &'static str,
    gid: GidSel,
    /// Flavours that can run it (e.g. `--write_with_imm` needs perftest 25.01).
    flavours: &'static [Flavour],
    /// false: an attempt whose outcome is only reported (e.g. provoking RNR NAKs).
    must_pass: bool,
    what: &'static str,
    runs: &'static [Run],
}

const BOTH: &[Flavour] = &[Flavour::Bookworm, Flavour::Trixie];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "write-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "RDMA WRITE of 1, 3, 1025 and 3000 bytes (path MTU 1024)",
        runs: &[
            Run("ib_write_bw", "-n 5 -s 1", ""),
            Run("ib_write_bw", "-n 5 -s 3", ""),
            Run("ib_write_bw", "-n 5 -s 1025", ""),
            Run("ib_write_bw", "-n 5 -s 3000", ""),
        ],
    },
    Scenario {
        name: "send-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "SEND of 1, 3, 1025 and 3000 bytes",
        runs: &[
            Run("ib_send_bw", "-n 5 -s 1", ""),
            Run("ib_send_bw", "-n 5 -s 3", ""),
            Run("ib_send_bw", "-n 5 -s 1025", ""),
            Run("ib_send_bw", "-n 5 -s 3000", ""),
        ],
    },
    Scenario {
        name: "read-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "RDMA READ of 1, 3, 1025 and 3000 bytes",
        runs: &[
            Run("ib_read_bw", "-n 5 -s 1", ""),
            Run("ib_read_bw", "-n 5 -s 3", ""),
            Run("ib_read_bw", "-n 5 -s 1025", ""),
            Run("ib_read_bw", "-n 5 -s 3000", ""),
        ],
    },
    Scenario {
        name: "atomic-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "ATOMIC fetch-and-add and compare-and-swap (8 bytes)",
        runs: &[Run("ib_atomic_bw", "-n 10 -A FETCH_AND_ADD", ""), Run("ib_atomic_bw", "-n 10 -A CMP_AND_SWAP", "")],
    },
    Scenario {
        name: "write-imm-v4",
        gid: GidSel::V4,
        flavours: &[Flavour::Trixie],
        must_pass: true,
        what: "RDMA WRITE with immediate of 3 and 3000 bytes (perftest 25.01 `--write_with_imm`)",
        runs: &[
            Run("ib_write_bw", "--write_with_imm -n 5 -s 3", ""),
            Run("ib_write_bw", "--write_with_imm -n 5 -s 3000", ""),
        ],
    },
    Scenario {
        name: "write-imm-v4",
        gid: GidSel::V4,
        flavours: &[Flavour::Bookworm],
        must_pass: true,
        what: "RDMA WRITE with immediate of 3 and 3000 bytes (perftest 4.5 has no `--write_with_imm`: \
               uroce-verbs-ops)",
        runs: &[Run(TOOL, "-o write_imm -n 5 -s 3", ""), Run(TOOL, "-o write_imm -n 5 -s 3000", "")],
    },
    Scenario {
        name: "send-imm-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "SEND with immediate of 3 and 3000 bytes (uroce-verbs-ops, `interop/verbs-ops.c`)",
        runs: &[Run(TOOL, "-o send_imm -n 5 -s 3", ""), Run(TOOL, "-o send_imm -n 5 -s 3000", "")],
    },
    Scenario {
        name: "send-inv-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: true,
        what: "SEND with invalidate of 3 and 3000 bytes, each invalidating a type-2 memory window \
               (uroce-verbs-ops)",
        runs: &[Run(TOOL, "-o send_inv -n 5 -s 3", ""), Run(TOOL, "-o send_inv -n 5 -s 3000", "")],
    },
    Scenario {
        name: "mixed-v6",
        gid: GidSel::V6,
        flavours: BOTH,
        must_pass: true,
        what: "WRITE 3000 B, SEND 1025 B, READ 3000 B, fetch-and-add over the IPv6 global GID",
        runs: &[
            Run("ib_write_bw", "-n 5 -s 3000", ""),
            Run("ib_send_bw", "-n 5 -s 1025", ""),
            Run("ib_read_bw", "-n 5 -s 3000", ""),
            Run("ib_atomic_bw", "-n 5 -A FETCH_AND_ADD", ""),
        ],
    },
    Scenario {
        name: "mixed-v6ll",
        gid: GidSel::LinkLocal,
        flavours: BOTH,
        must_pass: true,
        what: "WRITE 1025 B, SEND 3 B, READ 3 B over the IPv6 link-local GID (`-x 0`)",
        runs: &[
            Run("ib_write_bw", "-n 5 -s 1025", ""),
            Run("ib_send_bw", "-n 5 -s 3", ""),
            Run("ib_read_bw", "-n 5 -s 3", ""),
        ],
    },
    Scenario {
        name: "rnr-v4",
        gid: GidSel::V4,
        flavours: BOTH,
        must_pass: false,
        what: "SEND burst against a receiver with a 1-entry receive queue (`-r 1` on the server): RNR NAKs",
        runs: &[Run("ib_send_bw", "-n 20 -s 3", "-r 1")],
    },
];

fn selected(sc: &Scenario, flavour: Flavour) -> bool {
    let only = std::env::var("UROCE_RECORD_SCENARIOS").unwrap_or_default();
    sc.flavours.contains(&flavour) && (only.is_empty() || only.split(',').any(|o| o == sc.name))
}

fn record_flavour(flavour: Flavour, manifest: &mut Vec<String>) {
    let image = GuestImage::locate(flavour).expect("image");
    let lab = Lab::new(&format!("fixtures-{flavour}")).expect("lab");
    let tool = verbs_tool().expect("uroce-verbs-ops missing: run `rxe-compat/interop/build-guests.sh tools`");
    let spec = |name: &str, (v4, v6): (&str, &str)| {
        GuestSpec::new(flavour)
            .name(name)
            .addr(&format!("{v4}/24"))
            .addr(&format!("{v6}/64"))
            .hold()
            .timeout(Duration::from_secs(1200))
            .file(&tool, &format!("/usr/bin/{TOOL}"))
            .expect("tool")
    };
    let srv = lab.boot(spec("srv", SRV)).expect("boot srv");
    let cli = lab.boot(spec("cli", CLI)).expect("boot cli");
    srv.wait_ready(Duration::from_secs(150)).unwrap_or_else(|e| panic!("{e}"));
    cli.wait_ready(Duration::from_secs(150)).unwrap_or_else(|e| panic!("{e}"));
    for sc in SCENARIOS.iter().filter(|s| selected(s, flavour)) {
        let (xs, xc) = (sc.gid.index(&srv), sc.gid.index(&cli));
        let file = format!("rxe-{flavour}-{}.pcap", sc.name);
        let tmp = lab.dir().join(&file);
        let cap = lab.capture(&tmp, FILTER).expect("capture");
        let mut cmds = Vec::new();
        let mut all_ok = true;
        for Run(bin, args, srv_only) in sc.runs {
            let t = Duration::from_secs(180);
            let (scmd, ccmd, run): (String, String, PairRun) = if *bin == TOOL {
                let (scmd, ccmd) = (format!("{bin} {args} -g {xs}"), format!("{bin} {args} -g {xc}"));
                let run = pair_run(&srv, &cli, &scmd, &format!("{ccmd} {}", SRV.0), "server waiting on tcp", t);
                (scmd, ccmd, run.unwrap_or_else(|e| panic!("{file}: {e}")))
            } else {
                let base = format!("{bin} -d rxe0 -F --report_gbits {args}");
                let scmd = format!("{base} -x {xs} {srv_only}").trim_end().to_string();
                let ccmd = format!("{base} -x {xc}");
                let run = perftest_pair_with(&srv, &cli, SRV.0, &scmd, &ccmd, t);
                (scmd, ccmd, run.unwrap_or_else(|e| panic!("{file}: {e}")))
            };
            eprintln!(
                "{file}: `{ccmd}`: server rc {} client rc {} ({:.1} s)",
                run.server_rc,
                run.client_rc,
                run.elapsed.as_secs_f64()
            );
            if !run.ok() {
                all_ok = false;
                assert!(!sc.must_pass, "{file}: {run:#?}");
                eprintln!("{file}: attempt failed (reported, not fatal):\n{}\n{}", run.server_out, run.client_out);
            }
            cmds.push(format!("server: `{scmd}`; client: `{ccmd} {}`", SRV.0));
        }
        let stats = cap.stop().expect("stop capture");
        std::fs::copy(&tmp, fixtures_dir().join(&file)).expect("copy pcap");
        manifest.push(
            [
                file,
                flavour.to_string(),
                image.info("kernel_version").to_string(),
                image.info("rdma_core").to_string(),
                image.info("perftest").to_string(),
                sc.gid.label().to_string(),
                format!("{xs}/{xc}"),
                sc.what.to_string(),
                if all_ok { "ok" } else { "attempt-failed" }.to_string(),
                stats.captured.to_string(),
                cmds.join(" | "),
            ]
            .join("\t"),
        );
    }
}

/// tshark's opcode counts: (opcode, AETH syndrome class) -> count, where the class is
/// "" for non-ACK opcodes and ACK/RNR-NAK/NAK for ACKs by the syndrome's top bits.
fn tshark_counts(pcap: &Path) -> BTreeMap<(u8, &'static str), u64> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "infiniband", "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "infiniband.aeth.syndrome"])
        .output()
        .expect("tshark");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let mut m = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = l.split('\t');
        let op: u8 = f.next().and_then(|x| x.trim().parse().ok()).expect("opcode");
        let syn = f.next().and_then(|x| x.split(',').next()).and_then(|x| x.trim().parse::<u8>().ok());
        *m.entry((op, aeth_class(op, syn))).or_insert(0) += 1;
    }
    m
}

fn aeth_class(op: u8, syn: Option<u8>) -> &'static str {
    match (op, syn) {
        // IBTA 9.7.5.2.1: AETH syndrome bits 6:5 = 00 ACK, 01 RNR NAK, 11 NAK
        (0x11, Some(s)) => match (s >> 5, s & 0x1f) {
            (0, _) => "ACK",
            (1, _) => "RNR-NAK",
            // IBTA table 46 (NAK codes)
            (3, 0) => "NAK-PSN-SEQUENCE-ERROR",
            (3, 1) => "NAK-INVALID-REQUEST",
            (3, 2) => "NAK-REMOTE-ACCESS-ERROR",
            (3, 3) => "NAK-REMOTE-OPERATIONAL-ERROR",
            (3, 4) => "NAK-INVALID-RD-REQUEST",
            _ => "reserved",
        },
        _ => "",
    }
}

fn opcode_name(op: u8) -> String {
    uroce_wire::Opcode(op).name().map_or_else(|| format!("opcode 0x{op:02x}"), str::to_string)
}

fn write_readme(manifest: &[String], opcodes: &BTreeMap<String, BTreeMap<(u8, &'static str), u64>>) {
    let mut s = String::new();
    s.push_str(
        "# rxe-to-rxe capture fixtures (recorded by this project's harness)\n\n\
         Every file here was recorded by uroce's own QEMU interop harness (`rxe-compat/src/harness.rs`,\n\
         test `record_fixtures` in `rxe-compat/tests/harness_fixtures.rs`): two guests of one flavour\n\
         (server 10.77.0.11 / fd00:77::11, client 10.77.0.12 / fd00:77::12, eth MTU 1500 so rxe's path MTU\n\
         is 1024) ran perftest against each other on a bridge in a private network namespace while\n\
         `tcpdump -i br0 'udp port 4791 or tcp port 18515 or tcp port 18516'` recorded it, so they\n\
         include perftest's TCP 18515 out-of-band exchange. SEND with immediate / with invalidate (which\n\
         perftest cannot send) come from `uroce-verbs-ops` (`rxe-compat/interop/verbs-ops.c`, built by\n\
         `build-guests.sh tools`), whose own fixed-format exchange uses TCP 18516.\n\
         They are the project's own data (no third-party captures; the public rxe captures the tests\n\
         also read are in `rxe-public/`, with their origin and licence).\n\
         Re-record (root, QEMU, tshark, `build-guests.sh all tools`; ~80 s):\n\n\
         ```sh\n\
         UROCE_RECORD_FIXTURES=1 cargo test -p uroce-rxe-compat --test harness_fixtures -- --ignored --nocapture\n\
         ```\n\n\
         `opcodes.tsv` holds tshark's per-opcode counts (`tshark -r F -Y infiniband -T fields -e\n\
         infiniband.bth.opcode -e infiniband.aeth.syndrome`); `fixtures_decode_and_match_tshark` checks that\n\
         uroce-wire decodes every RoCEv2 frame with a valid ICRC and finds the same counts.\n\
         Every perftest command also had `-d rxe0 -F --report_gbits` and `-x <GID index>` (server/client).\n\n",
    );
    // coverage: which fixture holds which opcode / ACK syndrome class
    let mut cover: BTreeMap<(u8, &str), Vec<&str>> = BTreeMap::new();
    for (file, counts) in opcodes {
        for (k, _) in counts.iter() {
            cover.entry(*k).or_default().push(file.trim_start_matches("rxe-").trim_end_matches(".pcap"));
        }
    }
    s.push_str("## Coverage\n\n| opcode | name | fixtures (flavour-scenario) |\n| --- | --- | --- |\n");
    for ((op, class), files) in &cover {
        let name = if class.is_empty() { opcode_name(*op) } else { format!("{} ({class})", opcode_name(*op)) };
        let _ = writeln!(s, "| 0x{op:02x} | {name} | {} |", files.join(", "));
    }
    s.push_str(
        "\nNot produced: RC FLUSH (0x1c) and ATOMIC WRITE (0x1d) (rxe has them since Linux 6.2, but neither\n\
         perftest nor uroce-verbs-ops issues them yet), and RESYNC / the remaining NAK codes (invalid request,\n\
         remote access/operational error, invalid RD request), which need a misbehaving peer.\n\n",
    );
    for row in manifest {
        let f: Vec<&str> = row.split('\t').collect();
        let [file, flavour, kernel, rdma, perftest, gid, idx, what, status, frames, cmds] = f[..] else { continue };
        let size = std::fs::metadata(fixtures_dir().join(file)).map(|m| m.len()).unwrap_or(0);
        let _ = writeln!(s, "## `{file}`\n");
        let _ = writeln!(s, "* flavour: {flavour} (kernel {kernel}, rdma-core {rdma}, perftest {perftest})");
        let _ = writeln!(s, "* {what}; {gid}, GID index {idx} (server/client)");
        let _ = writeln!(
            s,
            "* {frames} frames, {size} bytes{}",
            if status == "ok" { "" } else { "; perftest did not finish cleanly (an attempt; see counts)" }
        );
        let _ = writeln!(s, "* commands: {}", cmds.replace(" | ", "; "));
        let _ = writeln!(s, "\n| opcode | name | count |\n| --- | --- | --- |");
        for ((op, class), n) in opcodes.get(file).into_iter().flatten() {
            let name = if class.is_empty() { opcode_name(*op) } else { format!("{} ({class})", opcode_name(*op)) };
            let _ = writeln!(s, "| 0x{op:02x} | {name} | {n} |");
        }
        s.push('\n');
    }
    std::fs::write(fixtures_dir().join("README.md"), s).expect("README");
}

#[test]
#[ignore = "records the fixtures: UROCE_RECORD_FIXTURES=1 cargo test --test harness_fixtures -- --ignored"]
fn record_fixtures() {
    assert!(
        std::env::var("UROCE_RECORD_FIXTURES").as_deref() == Ok("1"),
        "set UROCE_RECORD_FIXTURES=1 to overwrite rxe-compat/fixtures"
    );
    let only = std::env::var("UROCE_RECORD_ONLY").ok();
    let flavours: Vec<Flavour> =
        Flavour::ALL.into_iter().filter(|f| only.as_deref().is_none_or(|o| o == f.as_str())).collect();
    assert!(require_or_skip("record_fixtures", &flavours, true), "prerequisites missing");
    std::fs::create_dir_all(fixtures_dir()).unwrap();
    // keep the rows of fixtures not re-recorded now
    let redo: Vec<String> = flavours
        .iter()
        .flat_map(|&f| {
            SCENARIOS.iter().filter(move |s| selected(s, f)).map(move |s| format!("rxe-{f}-{}.pcap", s.name))
        })
        .collect();
    let mpath = fixtures_dir().join("manifest.tsv");
    let mut manifest: Vec<String> = std::fs::read_to_string(&mpath)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !redo.iter().any(|r| l.split('\t').next() == Some(r.as_str())))
        .map(String::from)
        .collect();
    for &f in &flavours {
        record_flavour(f, &mut manifest);
    }
    manifest.sort();
    let header = "#file\tflavour\tkernel\trdma-core\tperftest\tgid\tgid-index(srv/cli)\twhat\tstatus\tframes\tcommands";
    std::fs::write(&mpath, format!("{header}\n{}\n", manifest.join("\n"))).unwrap();
    let mut opcodes = BTreeMap::new();
    let mut tsv = String::from("#file\topcode\taeth-class\tcount (tshark)\n");
    for row in &manifest {
        let file = row.split('\t').next().unwrap().to_string();
        let counts = tshark_counts(&fixtures_dir().join(&file));
        for ((op, class), n) in &counts {
            let _ = writeln!(tsv, "{file}\t0x{op:02x}\t{class}\t{n}");
        }
        opcodes.insert(file, counts);
    }
    std::fs::write(fixtures_dir().join("opcodes.tsv"), tsv).unwrap();
    write_readme(&manifest, &opcodes);
}

/// Minimal classic-pcap reader (the fixtures are written by tcpdump: LINKTYPE_ETHERNET).
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = pcap_file::pcap::PcapReader::new(&data[..]).expect("pcap header");
    assert_eq!(reader.header().datalink, pcap_file::DataLink::ETHERNET, "{}", path.display());
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet() {
        let p = p.expect("pcap record");
        assert_eq!(p.data.len() as u32, p.orig_len, "{}: truncated frame", path.display());
        frames.push(p.data.into_owned());
    }
    frames
}

fn is_roce_udp(frame: &[u8]) -> bool {
    // Ethernet II, IPv4/IPv6, UDP destination port 4791
    let (et, l3) = (u16::from_be_bytes([frame[12], frame[13]]), &frame[14..]);
    let udp = match et {
        0x0800 if l3[9] == 17 => &l3[usize::from(l3[0] & 0xf) * 4..],
        0x86dd if l3[6] == 17 => &l3[40..],
        _ => return false,
    };
    u16::from_be_bytes([udp[2], udp[3]]) == 4791
}

#[test]
fn fixtures_decode_and_match_tshark() {
    let dir = fixtures_dir();
    let tsv =
        std::fs::read_to_string(dir.join("opcodes.tsv")).expect("fixtures/opcodes.tsv (record the fixtures first)");
    let mut want: BTreeMap<String, BTreeMap<(u8, String), u64>> = BTreeMap::new();
    for l in tsv.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split('\t').collect();
        let op = u8::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap();
        want.entry(f[0].to_string()).or_default().insert((op, f[2].to_string()), f[3].parse().unwrap());
    }
    assert!(want.len() >= 19, "expected fixtures for both flavours, got {:?}", want.keys());
    let mut total = 0u64;
    for (file, counts) in &want {
        let path = dir.join(file);
        total += std::fs::metadata(&path).unwrap().len();
        let mut got: BTreeMap<(u8, String), u64> = BTreeMap::new();
        let mut oob = 0;
        for (i, frame) in pcap_frames(&path).iter().enumerate() {
            if !is_roce_udp(frame) {
                oob += 1;
                continue;
            }
            let p = uroce_wire::parse_frame(frame).unwrap_or_else(|e| panic!("{file} frame {}: {e:?}", i + 1));
            p.check_icrc().unwrap_or_else(|e| panic!("{file} frame {}: ICRC {e:?}", i + 1));
            let op = p.roce.bth.opcode.0;
            let syn = p.roce.ext.aeth.map(|a| a.syndrome.to_byte());
            *got.entry((op, aeth_class(op, syn).to_string())).or_default() += 1;
        }
        assert_eq!(&got, counts, "{file}: uroce-wire vs tshark opcode counts");
        assert!(oob > 0, "{file}: no TCP out-of-band frames");
    }
    assert!(total < 1024 * 1024, "fixtures are {total} bytes; keep them under 1 MiB");
}
