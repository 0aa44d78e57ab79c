//! uroce's AF_XDP datapath in **zero-copy** mode against Linux rxe, in two QEMU guests.
//!
//! Guest A (trixie, kernel 6.17 from trixie-backports, no rxe) has a virtio-net NIC with
//! `iommu_platform=on,disable-legacy=on`, whose stock driver binds AF_XDP sockets with
//! `XDP_ZEROCOPY` (see rxe-compat/interop/README.md). It runs this build's `uroce` binary
//! (put into its initramfs overlay; the `libgcc_s.so.1` it needs is in the image, from the
//! trixie image's own `libgcc-s1`). Guest B (trixie) runs stock rxe, perftest and `ibv_rc_pingpong`. Both sit on the lab
//! bridge; a tcpdump on the bridge records every RoCEv2 frame.
//!
//! Zero-copy evidence, three independent ways:
//! * every uroce run is started with `--xdp-mode zero-copy`, which binds with `XDP_ZEROCOPY`
//!   only (no fallback: the run would fail);
//! * `uroce perf` prints the backend line `af_xdp on eth0 (1 queue, zero-copy mode, Native
//!   XDP)`, the mode being what `getsockopt(XDP_OPTIONS)` reported after bind;
//! * the guest kernel's own count: virtio_net's `tx_xdp_tx` (frames sent by its AF_XDP
//!   zero-copy path, `virtnet_xsk_xmit`) grows by exactly the number of RoCEv2 frames A put on
//!   the bridge in the zero-copy phase, and not at all in the copy-mode phase, where the same
//!   traffic leaves as ordinary skbs; `rx_xdp_redirects` matches the frames to A in both.
//!
//! The phases, each with its own bridge capture (tcpdump, no frame lost):
//! 1. perftest, zero-copy: `uroce perf {write,read,send}_bw` as the client against stock
//!    `ib_*_bw` servers, and stock clients against `uroce perf` servers, at 4096 and 65536
//!    bytes: both sides exit 0 and report the size and iteration count asked for and a sane
//!    bandwidth.
//! 2. data, zero-copy: perftest does not look at the bytes, so `uroce pingpong -c` runs against
//!    stock `ibv_rc_pingpong -c`, both ways. As the client, uroce sends messages of
//!    pseudo-random bytes (a different stream per message) that the stock server echoes back,
//!    and compares every echo byte for byte with what it sent: each byte has gone out of A's
//!    UMEM (zero-copy TX), through rxe's memory and back into A's UMEM (zero-copy RX) and A's
//!    memory region. As the server, uroce compares every message with the stock client's
//!    known content. Any mismatch makes uroce exit 1 and print `invalid data`.
//! 3. copy mode on the same NIC: the perftest clients again with `--xdp-mode copy` (the
//!    figures of both modes are printed; TCG makes them indicative only).
//!
//! Both captures must decode completely with `uroce pcap -q`: every frame RoCEv2, no bad ICRC,
//! nothing undecodable. Guest A's kernel log must stay free of warnings.
//!
//! Needs root, QEMU, tcpdump, the trixie harness image and `dpkg-deb`; skips with a printed
//! reason outside CI and fails under CI (`harness::require_or_skip`). Build with `--release`:
//! the guest runs the test profile's `uroce` under TCG.

#[path = "common/ix.rs"]
mod ix;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use uroce_rxe_compat::harness::{
    pair_run, require_or_skip, Flavour, Guest, GuestImage, GuestSpec, HostProc, Lab, PairRun, PERFTEST_WAITING,
};

const TEST: &str = "interop_zerocopy";
/// Guest A: uroce on the zero-copy NIC.
const A_IP: &str = "10.77.0.11";
/// Guest B: rxe.
const B_IP: &str = "10.77.0.12";
/// The backend line of a zero-copy run (perf prints it in its header).
const ZC_BACKEND: &str = "af_xdp on eth0 (1 queue, zero-copy mode, Native XDP)";
const COPY_BACKEND: &str = "af_xdp on eth0 (1 queue, copy mode, Native XDP)";
/// Per run (boot excluded); TCG with other guests on 2 cores.
const RUN_TIMEOUT: Duration = Duration::from_secs(150);
/// Sizes and iterations of the perftest runs (TCG: a few MB per run).
const PERF_RUNS: [(usize, u64); 2] = [(4096, 200), (65536, 40)];
const PINGPONG_RUNS: [(usize, u32); 2] = [(8192, 40), (65536, 8)];

/// The console lines of one side that mention the backend.
fn backend_line(out: &str) -> Option<&str> {
    out.lines().find(|l| l.contains("af_xdp on ") || l.contains("Backend"))
}

fn rc_text(run: &PairRun) -> String {
    format!(
        "server rc {} / client rc {}\n--- server:\n{}\n--- client:\n{}",
        run.server_rc, run.client_rc, run.server_out, run.client_out
    )
}

/// A uroce server command that prints `UROCE-LISTEN` once TCP 18515 (0x4853) listens: the
/// stock perftest client does not retry its connection. The command's exit code is uroce's.
fn uroce_server(cmd: &str) -> String {
    format!(
        "{cmd} & p=$!; i=0; until grep -q ':4853 00000000:0000 0A' /proc/net/tcp || [ $i -ge 1200 ]; \
         do sleep 0.1; i=$((i+1)); done; echo UROCE-\"\"LISTEN; wait $p"
    )
}

/// tcpdump on the lab bridge with a 64 MiB buffer. `Lab::capture`'s default 2 MiB buffer
/// loses a quarter of the frames here: two TCG guests and tcpdump's immediate mode share two
/// cores, and perftest bursts outrun it.
struct BridgeCapture {
    proc: HostProc,
    path: PathBuf,
}

impl BridgeCapture {
    fn start(lab: &Lab, path: &Path) -> BridgeCapture {
        let mut c = lab.command("tcpdump");
        // --immediate-mode + -U: nothing waits in an unretired block or in stdio at SIGINT.
        c.args(["-i", lab.bridge(), "-n", "--immediate-mode", "-U", "-B", "65536", "-Z", "root", "-w"]);
        c.arg(path).args(["udp", "port", "4791"]);
        let proc = lab.spawn_host(c).expect("spawn tcpdump");
        // The file header is written once the capture is open.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(path).map_or(0, |m| m.len()) < 24 {
            assert!(Instant::now() < deadline, "tcpdump did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        BridgeCapture { proc, path: path.to_path_buf() }
    }

    /// Stops tcpdump once the file has stopped growing, and counts what it holds.
    fn stop(mut self) -> Frames {
        let size = || std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let deadline = Instant::now() + Duration::from_secs(5);
        let (mut last, mut since) = (size(), Instant::now());
        while Instant::now() < deadline && since.elapsed() < Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(50));
            if size() != last {
                (last, since) = (size(), Instant::now());
            }
        }
        // SAFETY: kill(2) on our own child, not reaped yet (HostProc reaps in wait_output).
        unsafe { libc::kill(self.proc.pid() as libc::pid_t, libc::SIGINT) };
        let out = self.proc.wait_output(Duration::from_secs(20)).expect("tcpdump to exit");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let num = |suffix: &str| -> u64 {
            err.lines()
                .find(|l| l.trim_end().ends_with(suffix))
                .and_then(|l| l.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("tcpdump printed no `{suffix}`: {err}"))
        };
        let (from_a, to_a) = roce_frames_of_a(&self.path);
        Frames { captured: num("packets captured"), dropped: num("packets dropped by kernel"), from_a, to_a }
    }
}

/// What one capture holds.
#[derive(Debug)]
struct Frames {
    /// Frames tcpdump wrote.
    captured: u64,
    /// Frames the kernel dropped before tcpdump read them.
    dropped: u64,
    /// RoCEv2 (UDP/4791 over IPv4) frames from guest A.
    from_a: u64,
    /// RoCEv2 frames to guest A.
    to_a: u64,
}

/// Counts the RoCEv2 frames (IPv4, UDP destination port 4791) from and to guest A.
fn roce_frames_of_a(path: &Path) -> (u64, u64) {
    let a: [u8; 4] = A_IP.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (mut from, mut to) = (0, 0);
    while let Some(p) = r.next_packet() {
        let d = p.unwrap_or_else(|e| panic!("{}: {e}", path.display())).data;
        // Ethernet, then IPv4 with its header length, then UDP.
        if d.len() < 34 || d[12..14] != [0x08, 0x00] || d[23] != 17 {
            continue;
        }
        let udp = 14 + usize::from(d[14] & 0x0f) * 4;
        if d.len() < udp + 8 || d[udp + 2..udp + 4] != 4791u16.to_be_bytes() {
            continue;
        }
        from += u64::from(d[26..30] == a);
        to += u64::from(d[30..34] == a);
    }
    (from, to)
}

/// Counters of guest A's NIC, read between runs.
#[derive(Clone, Copy, Debug, Default)]
struct Nic {
    /// virtio_net `tx_xdp_tx` (`ethtool -S` in A): frames sent through the driver's AF_XDP
    /// zero-copy transmit path (`virtnet_xsk_xmit`); copy-mode transmits are ordinary skbs.
    tx_xdp_tx: u64,
    /// virtio_net `rx_xdp_redirects`: frames the XDP program redirected to the socket.
    rx_xdp_redirects: u64,
    /// A's tap on the host: frames from A the host dropped before the bridge (`rx_dropped`)
    /// and frames to A it dropped after the bridge (`tx_dropped`).
    tap_rx_dropped: u64,
    tap_tx_dropped: u64,
}

impl Nic {
    fn read(lab: &Lab, a: &Guest) -> Nic {
        let (rc, out) = a.console_run("ethtool -S eth0", RUN_TIMEOUT).unwrap_or_else(|e| panic!("ethtool: {e}"));
        assert_eq!(rc, 0, "ethtool -S eth0:\n{out}");
        let get = |k: &str| -> u64 {
            out.lines()
                .filter_map(|l| l.trim().split_once(": "))
                .find(|(name, _)| *name == k)
                .map_or(0, |(_, v)| v.trim().parse().unwrap_or_else(|_| panic!("{k}: {out}")))
        };
        let tap = |k: &str| -> u64 {
            let f = format!("/sys/class/net/{}/statistics/{k}", a.tap());
            let o = lab.exec_host(&["cat", &f], RUN_TIMEOUT).unwrap_or_else(|e| panic!("{f}: {e}"));
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("{f}: {o:?}"))
        };
        Nic {
            tx_xdp_tx: get("tx_xdp_tx"),
            rx_xdp_redirects: get("rx_xdp_redirects"),
            tap_rx_dropped: tap("rx_dropped"),
            tap_tx_dropped: tap("tx_dropped"),
        }
    }

    /// Counts from `self` to `later`.
    fn delta(&self, later: &Nic) -> Nic {
        Nic {
            tx_xdp_tx: later.tx_xdp_tx - self.tx_xdp_tx,
            rx_xdp_redirects: later.rx_xdp_redirects - self.rx_xdp_redirects,
            tap_rx_dropped: later.tap_rx_dropped - self.tap_rx_dropped,
            tap_tx_dropped: later.tap_tx_dropped - self.tap_tx_dropped,
        }
    }
}

struct Figure {
    what: String,
    mode: &'static str,
    size: usize,
    iters: u64,
    mb_s: f64,
    secs: f64,
}

fn check_bw(run: &PairRun, size: usize, iters: u64, uroce_is_client: bool, backend: &str) -> f64 {
    assert!(run.ok(), "{}: {}", run.cmd, rc_text(run));
    let u_out = if uroce_is_client { &run.client_out } else { &run.server_out };
    let line = backend_line(u_out).unwrap_or_else(|| panic!("uroce printed no backend line:\n{u_out}"));
    assert!(line.contains(backend), "uroce's backend is not {backend:?}: {line}");
    // The client measures; perftest's and uroce's write/read servers print the client's report,
    // the send servers measure their own.
    let send = run.cmd.contains("send_bw") || run.client_out.contains("send_bw");
    let client_row = ix::bw_row(&run.client_out).unwrap_or_else(|| panic!("no client result row:\n{}", rc_text(run)));
    let server_row = ix::bw_row(&run.server_out).unwrap_or_else(|| panic!("no server result row:\n{}", rc_text(run)));
    for (who, row, by_uroce) in [
        ("client", &client_row, uroce_is_client),
        ("server", &server_row, if send { !uroce_is_client } else { uroce_is_client }),
    ] {
        assert_eq!(row[0], size as f64, "{who} size: {}", rc_text(run));
        assert_eq!(row[1], iters as f64, "{who} iterations: {}", rc_text(run));
        // MB/s: more than nothing, less than a TCG guest could ever move (10 GB/s). perftest
        // 25.01 prints 0.00 when it cannot calibrate its cycle counter ("Correlation
        // coefficient r^2: ... < 0.9", common under TCG); uroce measures with the monotonic
        // clock, so its own figures must never be 0.
        let uncalibrated = !by_uroce
            && row[3] == 0.0
            && (run.client_out.contains(ix::PERFTEST_UNCLOCKED) || run.server_out.contains(ix::PERFTEST_UNCLOCKED));
        assert!(
            row[3].is_finite() && (row[3] > 0.0 || uncalibrated) && row[3] < 10_000.0,
            "{who} BW average {} (measured by {}): {}",
            row[3],
            if by_uroce { "uroce" } else { "perftest" },
            rc_text(run)
        );
    }
    // uroce's own figure where it measured, else the stock client's.
    if uroce_is_client || !send {
        client_row[3]
    } else {
        server_row[3]
    }
}

#[test]
fn uroce_zero_copy_against_rxe() {
    if !require_or_skip(TEST, &[Flavour::Trixie], true) {
        return;
    }
    // The rxe guest's kernel crashed under an ordinary `uroce perf write_bw` once (a clean-clone
    // CI rehearsal, 2026-12-05: a NULL dereference in `net_rx_action` after rxe's
    // `send_common_ack`, 6.17): the peer's bug, reported with its oops; the test runs once more
    // on fresh guests. Any other failure fails it at once.
    uroce_rxe_compat::harness::once_more_if(
        TEST,
        "PEER CRASH: the rxe guest's kernel oopsed (its console above)",
        |m| m.contains("guest rxe exited") && m.contains("end trace"),
        zero_copy_against_rxe,
    );
}

fn zero_copy_against_rxe() {
    let uroce = PathBuf::from(env!("CARGO_BIN_EXE_uroce"));
    if cfg!(debug_assertions) {
        eprintln!("{TEST}: note: a debug build of uroce runs in the TCG guest (use --release for speed)");
    }
    let image = GuestImage::locate(Flavour::Trixie).expect("checked above");
    let t0 = Instant::now();
    let lab = Lab::new(TEST).expect("lab");
    let spec_a = GuestSpec::new(Flavour::Trixie)
        .name("zc")
        .addr(&format!("{A_IP}/24"))
        .zero_copy_nic()
        .no_rxe()
        .hold()
        .timeout(Duration::from_secs(900))
        .file(&uroce, "/usr/bin/uroce")
        .expect("read the uroce binary");
    let spec_b = GuestSpec::new(Flavour::Trixie)
        .name("rxe")
        .addr(&format!("{B_IP}/24"))
        .hold()
        .timeout(Duration::from_secs(900));
    let a = lab.boot(spec_a).expect("boot guest A");
    let b = lab.boot(spec_b).expect("boot guest B");
    let ba = a.wait_ready(Duration::from_secs(240)).unwrap_or_else(|e| panic!("{e}"));
    let bb = b.wait_ready(Duration::from_secs(240)).unwrap_or_else(|e| panic!("{e}"));
    let booted = t0.elapsed();
    let b_gid = b.gid_index(B_IP.parse().unwrap()).expect("rxe IPv4 GID in guest B");
    eprintln!(
        "{TEST}: {}; boot A {:.1} s, B {:.1} s ({:.1} s wall)",
        image.describe(),
        ba.as_secs_f64(),
        bb.as_secs_f64(),
        booted.as_secs_f64()
    );

    // The binary runs in the guest, and the NIC is the zero-copy one (feature bits 33
    // ACCESS_PLATFORM and 40 RING_RESET negotiated).
    let (rc, out) = a.console_run("uroce --version && cat /sys/class/net/eth0/device/features", RUN_TIMEOUT).unwrap();
    assert_eq!(rc, 0, "uroce does not run in the guest:\n{out}");
    let features = out.lines().rev().find(|l| !l.is_empty() && l.chars().all(|c| c == '0' || c == '1')).unwrap_or("");
    assert!(features.as_bytes().get(33) == Some(&b'1'), "virtio ACCESS_PLATFORM not negotiated: {out}");

    let zc_pcap = lab.dir().join("zerocopy.pcap");
    let cap = BridgeCapture::start(&lab, &zc_pcap);
    let nic0 = Nic::read(&lab, &a);
    let mut figures: Vec<Figure> = Vec::new();
    // `-u 18` (1.07 s local ACK timeout), as in the other interop suites: rxe runs in a TCG
    // guest that can stall for longer than 8 x 67 ms (the default `-u 14` with retry_cnt 7),
    // and uroce would then give up with RETRY_EXC_ERR, as the spec says it must (seen once in
    // CI). rc_pingpong's QP attributes are fixed, so pingpong takes `--retry-forever` (rxe's
    // reading of retry_cnt 7) instead.
    let xdp = |mode: &str| format!("-d eth0 --backend xdp --xdp-mode {mode} --no-progress -u 18");

    // 1. perftest both ways, zero-copy.
    for test in ["write_bw", "read_bw", "send_bw"] {
        for (size, n) in PERF_RUNS {
            let stock = format!("ib_{test} -d rxe0 -x {b_gid} -F -s {size} -n {n}");
            let mine = format!("uroce perf {test} {} -s {size} -n {n}", xdp("zero-copy"));
            // uroce client -> stock server in B
            let client = || {
                pair_run(&b, &a, &stock, &format!("{mine} {B_IP}"), PERFTEST_WAITING, RUN_TIMEOUT)
                    .unwrap_or_else(|e| panic!("{mine} {B_IP}: {e}"))
            };
            let mut run = client();
            if run.client_rc != 0 && run.client_out.contains("transport retry counter exceeded") {
                // Seen once in CI (2026-12-03, the session's first run): no frame of the run
                // reached the bridge, as if the guest's zero-copy TX never started. The case
                // runs once more, loudly; a second failure fails the test.
                eprintln!("{TEST}: RETRY {mine}: transport retry counter exceeded\n{}", run.client_out);
                run = client();
            }
            let bw = check_bw(&run, size, n, true, ZC_BACKEND);
            figures.push(Figure {
                what: format!("uroce {test} client"),
                mode: "zero-copy",
                size,
                iters: n,
                mb_s: bw,
                secs: run.elapsed.as_secs_f64(),
            });
            // stock client in B -> uroce server
            let run = pair_run(&a, &b, &uroce_server(&mine), &format!("{stock} {A_IP}"), "UROCE-LISTEN", RUN_TIMEOUT)
                .unwrap_or_else(|e| panic!("{mine} (server): {e}"));
            let bw = check_bw(&run, size, n, false, ZC_BACKEND);
            figures.push(Figure {
                what: format!("uroce {test} server"),
                mode: "zero-copy",
                size,
                iters: n,
                mb_s: bw,
                secs: run.elapsed.as_secs_f64(),
            });
        }
    }

    // 2. data, byte for byte, both ways.
    for (size, n) in PINGPONG_RUNS {
        let stock = format!("ibv_rc_pingpong -d rxe0 -g {b_gid} -c -s {size} -n {n}");
        // No backend line here: `--xdp-mode zero-copy` cannot fall back (the bind fails), and the
        // NIC counters below account for every frame of this phase.
        let mine =
            format!("uroce pingpong -d eth0 --backend xdp --xdp-mode zero-copy --retry-forever -c -s {size} -n {n}");
        for uroce_client in [true, false] {
            let run = if uroce_client {
                pair_run(&b, &a, &stock, &format!("{mine} {B_IP}"), "local address", RUN_TIMEOUT)
            } else {
                pair_run(&a, &b, &mine, &format!("{stock} {A_IP}"), "local address", RUN_TIMEOUT)
            }
            .unwrap_or_else(|e| panic!("pingpong {size}x{n}: {e}"));
            assert!(run.ok(), "pingpong {size}x{n} (uroce client: {uroce_client}): {}", rc_text(&run));
            for out in [&run.client_out, &run.server_out] {
                assert!(!out.contains("invalid data"), "data mismatch: {}", rc_text(&run));
                let want = format!("{} iters in", n);
                assert!(out.contains(&want), "no `{want}` line: {}", rc_text(&run));
            }
            figures.push(Figure {
                what: format!("pingpong -c, uroce {}", if uroce_client { "client" } else { "server" }),
                mode: "zero-copy",
                size,
                iters: u64::from(n),
                mb_s: f64::NAN,
                secs: run.elapsed.as_secs_f64(),
            });
        }
    }

    let zc_frames = cap.stop();
    let nic1 = Nic::read(&lab, &a);

    // 3. copy mode on the same NIC, for comparison.
    let copy_pcap = lab.dir().join("copy.pcap");
    let cap = BridgeCapture::start(&lab, &copy_pcap);
    for test in ["write_bw", "read_bw", "send_bw"] {
        let (size, n) = PERF_RUNS[1];
        let stock = format!("ib_{test} -d rxe0 -x {b_gid} -F -s {size} -n {n}");
        let mine = format!("uroce perf {test} {} -s {size} -n {n} {B_IP}", xdp("copy"));
        let run =
            pair_run(&b, &a, &stock, &mine, PERFTEST_WAITING, RUN_TIMEOUT).unwrap_or_else(|e| panic!("{mine}: {e}"));
        let bw = check_bw(&run, size, n, true, COPY_BACKEND);
        figures.push(Figure {
            what: format!("uroce {test} client"),
            mode: "copy",
            size,
            iters: n,
            mb_s: bw,
            secs: run.elapsed.as_secs_f64(),
        });
    }
    let copy_frames = cap.stop();
    let nic2 = Nic::read(&lab, &a);

    // The guest kernel stayed clean through all the zero-copy binds and unbinds.
    let (_, dmesg) =
        a.console_run("dmesg | grep -E -i 'xdp|xsk|BU[G]:|WARNIN[G]:|Call Trac[e]' | tail -n 20", RUN_TIMEOUT).unwrap();
    for bad in ["BUG:", "WARNING:", "Call Trace"] {
        assert!(!dmesg.contains(bad), "guest A kernel: {bad}\n{dmesg}");
    }

    // 4. the captures: complete, every RoCEv2 frame decodes and carries a good ICRC.
    for (pcap, frames) in [(&zc_pcap, &zc_frames), (&copy_pcap, &copy_frames)] {
        assert_eq!(frames.dropped, 0, "{}: tcpdump lost frames: it does not show the whole run", pcap.display());
        let check = Command::new(&uroce).args(["pcap", "-q"]).arg(pcap).output().expect("run uroce pcap");
        let summary = String::from_utf8_lossy(&check.stdout).into_owned();
        assert!(
            check.status.success(),
            "uroce pcap -q {}: {summary}{}",
            pcap.display(),
            String::from_utf8_lossy(&check.stderr)
        );
        let field = |k: &str| -> u64 {
            summary
                .split_whitespace()
                .skip_while(|w| *w != format!("{k}:"))
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in `uroce pcap -q` output: {summary}"))
        };
        assert_eq!(field("icrc_bad"), 0, "{summary}");
        assert_eq!(field("undecodable"), 0, "{summary}");
        assert_eq!(field("roce"), frames.captured, "{}: {summary}", pcap.display());
        assert_eq!(field("icrc_ok"), frames.captured, "{}: {summary}", pcap.display());
        eprintln!(
            "{TEST}: {}: {} frames ({} from A, {} to A): {}",
            pcap.display(),
            frames.captured,
            frames.from_a,
            frames.to_a,
            summary.trim()
        );
    }

    // The kernel's side of the story (virtio_net's counters in A): zero-copy transmits go
    // through the driver's AF_XDP path, counted as `tx_xdp_tx` (virtnet_xsk_xmit); copy-mode
    // transmits are ordinary skbs. Every RoCEv2 frame A sent in the zero-copy phase is there,
    // none of the copy phase's. Every frame to A was redirected to the socket in both phases.
    let (zc, copy) = (nic0.delta(&nic1), nic1.delta(&nic2));
    eprintln!("{TEST}: guest A's NIC, zero-copy phase: {zc:?}; copy phase: {copy:?}");
    assert_eq!(
        zc.tx_xdp_tx,
        zc_frames.from_a + zc.tap_rx_dropped,
        "zero-copy phase: tx_xdp_tx vs RoCEv2 frames from A on the bridge (+ host drops)"
    );
    assert_eq!(
        zc.rx_xdp_redirects + zc.tap_tx_dropped,
        zc_frames.to_a,
        "zero-copy phase: rx_xdp_redirects (+ host drops) vs RoCEv2 frames to A on the bridge"
    );
    assert!(copy_frames.from_a > 0, "copy phase sent nothing");
    assert_eq!(copy.tx_xdp_tx, 0, "copy phase: transmits must not take the zero-copy path");
    assert_eq!(
        copy.rx_xdp_redirects + copy.tap_tx_dropped,
        copy_frames.to_a,
        "copy phase: rx_xdp_redirects (+ host drops) vs RoCEv2 frames to A on the bridge"
    );

    eprintln!("{TEST}: {:<34} {:>9} {:>7} {:>6} {:>10} {:>7}", "run", "mode", "size", "iters", "MB/s", "wall s");
    for f in &figures {
        eprintln!("{TEST}: {:<34} {:>9} {:>7} {:>6} {:>10.2} {:>7.2}", f.what, f.mode, f.size, f.iters, f.mb_s, f.secs);
    }
    eprintln!("{TEST}: total {:.1} s", t0.elapsed().as_secs_f64());
}
