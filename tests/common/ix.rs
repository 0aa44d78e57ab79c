//! Helpers of the rxe interop suite (`tests/interop_rxe.rs`): the `uroce` CLI as a child process
//! in a network namespace (killed on drop or when its deadline passes), perftest's result tables,
//! capture cross-checks (`uroce pcap` against tshark), nftables loss/duplication on the lab
//! bridge's ports, and counter snapshots of both sides.
//!
//! Use with `#[path = "common/ix.rs"] mod ix;` (independent of `common/mod.rs`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The `uroce` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_uroce");

/// A child process with its stdout/stderr collected by threads; SIGKILLed on drop.
pub struct Proc {
    child: Option<Child>,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    /// The command line, for messages.
    pub what: String,
    started: Instant,
}

/// What a finished (or killed) [`Proc`] left.
#[derive(Debug)]
pub struct Done {
    /// Exit status; `None` when it was killed at its deadline.
    pub status: Option<ExitStatus>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Time from spawn to exit.
    pub elapsed: Duration,
}

impl Done {
    /// Exit code 0?
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
    /// stdout + stderr, for failure messages.
    pub fn text(&self) -> String {
        format!("status {:?}\n--- stdout\n{}--- stderr\n{}", self.status, self.stdout, self.stderr)
    }
}

fn collect(r: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    r.map(|mut r| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    })
}

impl Proc {
    /// Spawns `argv` inside namespace `ns` (`ip netns exec`, which execs: the PID is the
    /// program's).
    pub fn spawn_in(ns: &str, argv: &[&str]) -> Proc {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(argv);
        let what = argv.join(" ");
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn `{what}` in {ns}: {e}"));
        let out = collect(child.stdout.take());
        let err = collect(child.stderr.take());
        Proc { child: Some(child), out, err, what, started: Instant::now() }
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Still running?
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Waits until it exits or `timeout` passes (then it is killed: `status` None).
    pub fn wait(mut self, timeout: Duration) -> Done {
        let mut child = self.child.take().expect("not waited yet");
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let elapsed = self.started.elapsed();
        let text = |h: Option<JoinHandle<Vec<u8>>>| {
            String::from_utf8_lossy(&h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()).into_owned()
        };
        Done { status, stdout: text(self.out.take()), stderr: text(self.err.take()), elapsed }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Is process `pid` (in its own network namespace) listening on TCP `port`? Reads
/// `/proc/<pid>/net/tcp{,6}`, which show the namespace of that process.
pub fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
            })
        })
    })
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One result line of a perftest table (ours or stock perftest's).
#[derive(Clone, Debug, PartialEq)]
pub struct ResultLine {
    /// `#bytes`.
    pub bytes: u64,
    /// `#iterations`.
    pub iters: u64,
    /// The figures after them: bw: peak, average, msg rate; lat: t_min, t_max, t_typical,
    /// t_avg, t_stdev, 99%, 99.9%.
    pub figures: Vec<f64>,
}

/// The first result line after the table header (`#bytes ...`) whose first column is `size`.
/// Units in the header differ between versions (`MB/sec` in perftest 4.5 and uroce, `MiB/sec`
/// in 25.01); only the numbers are read.
pub fn result_line(out: &str, size: u64) -> Option<ResultLine> {
    let mut on = false;
    for line in out.lines() {
        let t = line.trim();
        if t.starts_with("#bytes") {
            on = true;
            continue;
        }
        if !on {
            continue;
        }
        let cols: Vec<&str> = t.split_whitespace().collect();
        if cols.len() < 5 || cols[0].parse::<u64>() != Ok(size) {
            continue;
        }
        let iters = cols[1].parse().ok()?;
        let figures: Option<Vec<f64>> = cols[2..].iter().map(|c| c.parse().ok()).collect();
        return Some(ResultLine { bytes: size, iters, figures: figures? });
    }
    None
}

/// Checks a result line: `iters` iterations and finite, non-negative figures.
/// * bw (`BW peak, BW average, MsgRate`): the message rate must be > 0, and so must the average
///   bandwidth from 64-byte messages on. perftest prints MB/s with two decimals, so 1-byte
///   messages at TCG speed (~2,000/s = 0.002 MB/s) print 0.00; and perftest's `ib_send_bw`
///   *server* never fills the posting timestamps the peak comes from, so its peak is 0.00.
/// * lat (`t_min t_max t_typical t_avg t_stdev 99% 99.9%`): all > 0 except the standard
///   deviation, which may be 0.
pub fn check_result(r: &ResultLine, iters: u64, bw: bool) -> Result<(), String> {
    if r.iters != iters {
        return Err(format!("#iterations {} != {iters}", r.iters));
    }
    let want = if bw { 3 } else { 7 };
    if r.figures.len() < want {
        return Err(format!("{} figures, want at least {want}", r.figures.len()));
    }
    for (i, f) in r.figures.iter().enumerate() {
        let must_be_positive = if bw { i == 2 || (i == 1 && r.bytes >= 64) } else { i != 4 };
        if !f.is_finite() || *f < 0.0 || (*f == 0.0 && must_be_positive) {
            return Err(format!("figure {i} is {f}"));
        }
    }
    Ok(())
}

/// One RoCE frame of a capture as a decoder saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameKey {
    /// BTH opcode.
    pub opcode: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
}

/// What a capture held, after both decoders agreed.
#[derive(Clone, Debug, Default)]
pub struct CaptureCheck {
    /// RoCE frames.
    pub roce: u64,
    /// Frames per opcode name.
    pub opcodes: BTreeMap<String, u64>,
}

impl CaptureCheck {
    /// `RC_RDMA_WRITE_ONLY x200, ACKNOWLEDGE x2, ...` in a short form.
    pub fn summary(&self) -> String {
        self.opcodes.iter().map(|(k, v)| format!("{}:{v}", k.trim_start_matches("RC_"))).collect::<Vec<_>>().join(" ")
    }
}

fn opcode_code(name: &str) -> Option<u8> {
    (0..=255u8).find(|&c| uroce::wire::opcode::Opcode(c).name() == Some(name))
}

fn hex_or_dec(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `uroce pcap -q path`: (roce frames, icrc_bad, undecodable).
pub fn quick_check(path: &std::path::Path) -> Result<(u64, u64, u64), String> {
    let p = path.to_str().ok_or("capture path not UTF-8")?;
    let q = Command::new(BIN).args(["pcap", "-q", p]).output().map_err(|e| format!("uroce pcap -q: {e}"))?;
    let summary = String::from_utf8_lossy(&q.stdout).into_owned();
    let field = |k: &str| -> Option<u64> {
        let mut it = summary.split_whitespace();
        it.find(|w| *w == format!("{k}:"))?;
        it.next()?.parse().ok()
    };
    match (field("roce"), field("icrc_bad"), field("undecodable")) {
        (Some(r), Some(b), Some(u)) => Ok((r, b, u)),
        _ => Err(format!("uroce pcap -q {p}: {} (exit {:?})", summary.trim(), q.status.code())),
    }
}

/// Cross-checks capture `path`: `uroce pcap -q` must report no bad ICRC and nothing
/// undecodable; `uroce pcap` (per frame) and tshark (`-d udp.port==4791,infiniband`) must
/// decode the same RoCE frames, in the same order, with the same opcode, destination QP and
/// PSN. `min_roce` guards against an empty or truncated capture.
pub fn check_capture(path: &std::path::Path, min_roce: u64) -> Result<CaptureCheck, String> {
    let p = path.to_str().ok_or("capture path not UTF-8")?;
    let (roce, bad, undecodable) = quick_check(path)?;
    if bad != 0 || undecodable != 0 {
        return Err(format!("uroce pcap -q {p}: {roce} RoCE frames, icrc_bad {bad}, undecodable {undecodable}"));
    }
    if roce < min_roce {
        return Err(format!("{p}: only {roce} RoCE frames, expected at least {min_roce}"));
    }
    // uroce's per-frame lines: `N t src -> dst OPCODE qp 0x.. psn 0x.. ... icrc ok`
    let v = Command::new(BIN).args(["pcap", p]).output().map_err(|e| format!("uroce pcap: {e}"))?;
    let mut ours = Vec::new();
    let mut check = CaptureCheck { roce, ..Default::default() };
    for line in String::from_utf8_lossy(&v.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let Some(qi) = w.iter().position(|x| *x == "qp") else { continue };
        if qi < 1 || w.len() < qi + 4 || w[qi + 2] != "psn" {
            return Err(format!("unparsable `uroce pcap` line: {line}"));
        }
        let name = w[qi - 1];
        let opcode = opcode_code(name).ok_or_else(|| format!("unknown opcode name {name} in: {line}"))?;
        let (Some(dest_qp), Some(psn)) = (hex_or_dec(w[qi + 1]), hex_or_dec(w[qi + 3])) else {
            return Err(format!("unparsable qp/psn in: {line}"));
        };
        *check.opcodes.entry(name.to_string()).or_default() += 1;
        ours.push(FrameKey { opcode, dest_qp, psn });
    }
    if ours.len() as u64 != roce {
        return Err(format!("uroce pcap listed {} frames, its summary says {roce}", ours.len()));
    }
    let t = Command::new("tshark")
        .args(["-r", p, "-d", "udp.port==4791,infiniband", "-Y", "infiniband", "-T", "fields"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output()
        .map_err(|e| format!("tshark: {e}"))?;
    if !t.status.success() {
        return Err(format!("tshark -r {p}: {}", String::from_utf8_lossy(&t.stderr)));
    }
    let mut theirs = Vec::new();
    for line in String::from_utf8_lossy(&t.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        let parsed = (c.len() == 3)
            .then(|| Some(FrameKey { opcode: c[0].parse().ok()?, dest_qp: hex_or_dec(c[1])?, psn: c[2].parse().ok()? }))
            .flatten();
        theirs.push(parsed.ok_or_else(|| format!("unparsable tshark line {line:?}"))?);
    }
    if theirs.len() != ours.len() {
        return Err(format!("{p}: tshark decoded {} RoCE frames, uroce pcap {}", theirs.len(), ours.len()));
    }
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
        return Err(format!("{p}: RoCE frame {} differs: uroce {:?}, tshark {:?}", i + 1, ours[i], theirs[i]));
    }
    Ok(check)
}

/// The CM MADs of a capture as tshark's InfiniBand CM dissector reads them must be the ones
/// `uroce pcap` prints: the same messages in the same order, and each REQ's and REP's QP and
/// starting PSN the same. Returns the messages' names (`REQ`, `SIDR_REP`, ...).
#[allow(dead_code)]
pub fn check_cm_with_tshark(path: &std::path::Path) -> Result<Vec<String>, String> {
    let p = path.to_str().ok_or("capture path not UTF-8")?;
    let v = Command::new(BIN).args(["pcap", p]).output().map_err(|e| format!("uroce pcap: {e}"))?;
    // `... CM REQ comm=.. sid=.. qpn=0x.. psn=0x.. ...`
    let field = |w: &[&str], k: &str| w.iter().find_map(|x| x.strip_prefix(k)).and_then(hex_or_dec);
    let mut ours = Vec::new();
    for line in String::from_utf8_lossy(&v.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let Some(ci) = w.iter().position(|x| *x == "CM") else { continue };
        let Some(name) = w.get(ci + 1) else { return Err(format!("unparsable CM line: {line}")) };
        let qp_psn = matches!(*name, "REQ" | "REP").then(|| (field(&w, "qpn="), field(&w, "psn=")));
        ours.push((name.to_string(), qp_psn.unwrap_or((None, None))));
    }
    let t = Command::new("tshark")
        .args(["-r", p, "-d", "udp.port==4791,infiniband", "-Y", "infiniband.mad.mgmtclass==0x07", "-T", "fields"])
        .args([
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "infiniband.cm.req.localqpn",
            "-e",
            "infiniband.cm.req.startpsn",
        ])
        .args(["-e", "infiniband.cm.rep.localqpn", "-e", "infiniband.cm.rep.startpsn", "-e", "_ws.malformed"])
        .output()
        .map_err(|e| format!("tshark: {e}"))?;
    if !t.status.success() {
        return Err(format!("tshark -r {p}: {}", String::from_utf8_lossy(&t.stderr)));
    }
    const NAMES: [&str; 9] = ["REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"];
    let mut theirs = Vec::new();
    for line in String::from_utf8_lossy(&t.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        if c.len() != 6 || !c[5].is_empty() {
            return Err(format!("{p}: tshark: a malformed or unparsable CM MAD: {line:?}"));
        }
        let attr = hex_or_dec(c[0]).ok_or_else(|| format!("tshark attribute {:?}", c[0]))?;
        let name = attr.checked_sub(0x10).and_then(|k| NAMES.get(k as usize)).ok_or(format!("attribute {attr:#x}"))?;
        let (q, s) = if *name == "REP" { (c[3], c[4]) } else { (c[1], c[2]) };
        theirs.push((name.to_string(), (hex_or_dec(q), hex_or_dec(s))));
    }
    if ours != theirs {
        return Err(format!("{p}: CM MADs differ:\n  uroce pcap {ours:?}\n  tshark     {theirs:?}"));
    }
    Ok(ours.into_iter().map(|(n, _)| n).collect())
}

/// `name=value` pairs of `uroce perf --counters` lines (`uroce-counters <group>: k=v ...`),
/// keyed `group.name`.
pub fn uroce_counters(stderr: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in stderr.lines() {
        let Some(rest) = line.trim().strip_prefix("uroce-counters ") else { continue };
        let Some((group, kvs)) = rest.split_once(':') else { continue };
        for kv in kvs.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                if let Ok(v) = v.parse() {
                    m.insert(format!("{group}.{k}"), v);
                }
            }
        }
    }
    m
}

/// rxe's port counters from `grep . *` in `.../ports/1/hw_counters` (`name:value` lines).
pub fn rxe_counters(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            let k = k.rsplit('/').next()?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .filter(|(k, _): &(String, u64)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// `after - before` for every key, non-zero entries only.
pub fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v != 0)
        .collect()
}

/// `k=v k=v` of a map.
pub fn kv(m: &BTreeMap<String, u64>) -> String {
    m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// nftables netdev-family ingress chains on bridge ports `ports` (in namespace `ns`) dropping
/// `drop_pct` % and duplicating `dup_pct` % of the UDP/4791 frames entering the bridge there;
/// the copy leaves straight out of the other port (as `uroce::netns::NetPair::set_faults`:
/// the bridge family cannot `dup`). Replaces earlier rules; counters start at 0.
pub fn set_faults(ns: &str, ports: [&str; 2], drop_pct: u32, dup_pct: u32) -> Result<(), String> {
    set_faults_sparing_acks(ns, ports, drop_pct, dup_pct, None)
}

/// [`set_faults`], except that ACKs (BTH opcode 0x11, the first byte of the UDP payload)
/// entering through `spare_acks_from` are never dropped.
pub fn set_faults_sparing_acks(
    ns: &str,
    ports: [&str; 2],
    drop_pct: u32,
    dup_pct: u32,
    spare_acks_from: Option<&str>,
) -> Result<(), String> {
    let mut rules = String::from("table netdev uroce_ix\ndelete table netdev uroce_ix\ntable netdev uroce_ix {\n");
    for (i, o) in [(ports[0], ports[1]), (ports[1], ports[0])] {
        rules += &format!(" chain in_{i} {{\n  type filter hook ingress device \"{i}\" priority 0; policy accept;\n");
        if drop_pct > 0 {
            let spare = if spare_acks_from == Some(i) { "@ih,0,8 != 0x11 " } else { "" };
            rules +=
                &format!("  udp dport 4791 {spare}numgen random mod 100 < {drop_pct} counter drop comment \"drop\"\n");
        }
        if dup_pct > 0 {
            rules +=
                &format!("  udp dport 4791 numgen random mod 100 < {dup_pct} counter dup to \"{o}\" comment \"dup\"\n");
        }
        rules += " }\n";
    }
    rules += "}\n";
    nft(ns, &rules)
}

/// Removes the rules of [`set_faults`].
pub fn clear_faults(ns: &str) -> Result<(), String> {
    nft(ns, "table netdev uroce_ix\ndelete table netdev uroce_ix\n")
}

fn nft(ns: &str, rules: &str) -> Result<(), String> {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    c.stdin.take().map(|mut i| i.write_all(rules.as_bytes())).transpose().map_err(|e| format!("nft stdin: {e}"))?;
    let o = c.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if !o.status.success() {
        return Err(format!("nft: {}\n{rules}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(())
}

/// (dropped, duplicated) frames per port since [`set_faults`]: `[(port, drops, dups)]`.
pub fn fault_counts(ns: &str) -> Vec<(String, u64, u64)> {
    let o = Command::new("ip").args(["netns", "exec", ns, "nft", "list", "table", "netdev", "uroce_ix"]).output();
    let text = o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let mut out: Vec<(String, u64, u64)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("chain in_") {
            out.push((rest.trim_end_matches(" {").to_string(), 0, 0));
            continue;
        }
        let Some(i) = line.find("counter packets ") else { continue };
        let n: u64 = line[i + 16..].split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
        if let Some(last) = out.last_mut() {
            if line.contains("comment \"drop\"") {
                last.1 += n;
            } else if line.contains("comment \"dup\"") {
                last.2 += n;
            }
        }
    }
    out
}

/// tcpdump on an interface of namespace `ns` with a large kernel buffer (`-B`: the guest and
/// uroce keep both cores busy, and tcpdump's default 2 MiB ring overflows at full rate).
/// Stopped by [`Tcpdump::stop`] (SIGINT once the file stops growing) or killed on drop.
pub struct Tcpdump {
    child: Option<Child>,
    path: std::path::PathBuf,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Tcpdump {
    /// Starts it and returns once it listens.
    pub fn start(ns: &str, iface: &str, path: &std::path::Path, filter: &str) -> Result<Tcpdump, String> {
        use std::io::BufRead;
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nice", "-n", "-10", "tcpdump", "-i", iface, "-n", "--immediate-mode"])
            .args(["-U", "-B", "65536", "-Z", "root", "-w"])
            .arg(path)
            .args(filter.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn tcpdump: {e}"))?;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take();
        let l = lines.clone();
        let reader = std::thread::spawn(move || {
            let Some(err) = err else { return };
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
                l.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let mut t = Tcpdump { child: Some(child), path: path.to_path_buf(), lines, reader: Some(reader) };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            t.halt();
            return Err(format!(
                "tcpdump did not start: {}",
                t.lines.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
            ));
        }
        Ok(t)
    }

    fn halt(&mut self) {
        if let Some(mut c) = self.child.take() {
            // the last frames (e.g. the final ACK) must reach the file: wait until it has not
            // grown for 300 ms (at most 5 s), then SIGINT
            let size = || std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
            let (mut last, mut since, deadline) = (size(), Instant::now(), Instant::now() + Duration::from_secs(5));
            while Instant::now() < deadline && since.elapsed() < Duration::from_millis(300) {
                std::thread::sleep(Duration::from_millis(50));
                if size() != last {
                    (last, since) = (size(), Instant::now());
                }
            }
            // SAFETY: kill(2) on our own unreaped child (`ip netns exec` execs tcpdump, same
            // PID): the PID cannot have been reused.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Stops it; returns (captured, dropped by kernel) as tcpdump reported them.
    pub fn stop(mut self) -> Result<(u64, u64), String> {
        self.halt();
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let num = |suffix: &str| {
            lines.iter().find(|l| l.ends_with(suffix)).and_then(|l| l.split_whitespace().next()?.parse().ok())
        };
        let captured = num("packets captured").ok_or_else(|| format!("tcpdump: {}", lines.join("\n")))?;
        Ok((captured, num("packets dropped by kernel").unwrap_or(0)))
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Where `scripts/build-verbs` put uroce's libibverbs.so.1 (`UROCE_VERBS_DIR` overrides).
pub fn verbs_dir() -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let d = std::env::var_os("UROCE_VERBS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("verbs")
    });
    d.join("libibverbs.so.1").exists().then_some(d)
}

/// A guest shell command that waits (up to 30 s) until a stock server listens on perftest's
/// and rc_pingpong's port 18515, and fails if it never does: Debian's clients do not retry
/// their connection.
pub const GUEST_WAIT_LISTEN: &str = "i=0; while ! ss -ltn 2>/dev/null | grep -q ':18515 ' && [ $i -lt 300 ]; do \
                                     sleep 0.1; i=$((i+1)); done; ss -ltn | grep -q ':18515 '";

/// cmtime's (rdma-core 44's) microseconds per connection of a step, from its table
/// (`connect      :  total ms  max ms  min us  us / conn`).
#[allow(dead_code)]
pub fn cmtime_step(out: &str, name: &str) -> Option<f64> {
    let l = out.lines().find(|l| l.split(':').next().map(str::trim) == Some(name))?;
    l.split(':').nth(1)?.split_whitespace().last()?.parse().ok()
}

/// What stock perftest prints when its sampled cycle counter does not track time (`get_clock.c`
/// `sample_get_cpu_mhz`: r² of the samples' fit below 0.9; its MHz is then 0 and its figures 0.00,
/// or inf for a latency). A TCG guest's clock on a loaded host sometimes does not: the
/// measurement failed, not the transfer.
#[allow(dead_code)]
pub const PERFTEST_UNCLOCKED: &str = "Correlation coefficient r^2";

/// perftest's (or uroce perf's) `#bytes #iterations BW-peak BW-average MsgRate` result row.
#[allow(dead_code)]
pub fn bw_row(out: &str) -> Option<Vec<f64>> {
    let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next()?;
    lines.map(|l| l.split_whitespace().map_while(|x| x.parse().ok()).collect::<Vec<f64>>()).find(|v| v.len() >= 4)
}

/// What two findings share when they are the same bug, to count them once: the kernel's first
/// splat line (`BUG`, `WARNING`, `Oops`, `general protection`, `KASAN`, `refcount_t`, `hung
/// task`, `soft lockup`, a panic) with its timestamp, addresses, offsets and numbers blanked,
/// then the first rxe function of the trace; without a splat, the finding's first line so
/// blanked (a hang, a silent console).
pub fn finding_signature(text: &str) -> String {
    const SPLATS: [&str; 10] = [
        "BUG",
        "WARNING",
        "Oops",
        "general protection",
        "KASAN",
        "refcount_t",
        "hung task",
        "soft lockup",
        "panic",
        "double fault",
    ];
    let blank = |line: &str| -> String {
        // what follows a "[   15.478488]" timestamp (wherever it is), then blank every token
        // that is or holds a number
        let mut line = line;
        while let Some((_, rest)) = line.split_once('[') {
            match rest.split_once(']') {
                Some((t, after)) if t.trim().parse::<f64>().is_ok() => line = after,
                _ => break,
            }
        }
        line.split_whitespace()
            .map(|w| {
                let hexlike = w.trim_start_matches("0x").len() >= 6
                    && w.trim_start_matches("0x").chars().all(|c| c.is_ascii_hexdigit());
                if hexlike || w.starts_with("0x") {
                    "#".to_string()
                } else {
                    // "rxe_requester+0x2ef/0x10a0" keeps its name; "#1" and "12" become "#"
                    let name = w.split('+').next().unwrap_or(w);
                    let mut out = String::new();
                    let mut digits = false;
                    for c in name.chars() {
                        if c.is_ascii_digit() {
                            if !digits {
                                out.push('#');
                            }
                            digits = true;
                        } else {
                            out.push(c);
                            digits = false;
                        }
                    }
                    out
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let splat = text.lines().find(|l| SPLATS.iter().any(|s| l.contains(s)));
    let rxe = text
        .lines()
        .flat_map(str::split_whitespace)
        .find(|w| w.starts_with("rxe_") && w.contains('+'))
        .and_then(|w| w.split('+').next());
    match (splat, rxe) {
        (Some(s), Some(f)) => format!("{} in {f}", blank(s)),
        (Some(s), None) => blank(s),
        _ => blank(text.lines().next().unwrap_or("")),
    }
}
