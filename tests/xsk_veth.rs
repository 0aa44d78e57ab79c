//! AF_XDP end to end over a veth pair between two private network namespaces.
//!
//! Topology (per test, names carry a tag and the test process' pid; both namespaces are
//! deleted on drop, also when a test panics — deleting a namespace removes its veth end):
//!
//! ```text
//!   netns uxa<tag><pid>                         netns uxb<tag><pid>
//!   va  02:00:00:00:0a:01                       vb  02:00:00:00:0b:01
//!   10.99.0.1/24  fd00:99::1/64  <-- veth -->   10.99.0.2/24  fd00:99::2/64
//!   XDP program + AF_XDP socket (queue 0)       AF_XDP TX socket / kernel sockets
//! ```
//!
//! How code runs inside a namespace: a dedicated thread calls `setns(CLONE_NEWNET)` on
//! `/run/netns/<name>` (network namespaces are per thread) and then does everything — load
//! and attach the program, bind sockets, send, receive — on that thread. This keeps the
//! test a single process (no helper binary, results come back through `JoinHandle`s and
//! channels, panics propagate) while `ip netns add` provides named, easily cleaned-up
//! namespaces.
//!
//! Requires root (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW) and `ip`; the kernel-sender test also
//! needs `ethtool`. Missing prerequisites: skipped with a message, or a failure with `CI=1`.
//!
//! The `measure_*` test is `#[ignore]`d: it prints rough packet rates and asserts nothing
//! but delivery; run it with `cargo test --release --test xsk_veth -- --ignored --nocapture`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;
use netns::{ip, ip_out, join, prerequisites, spawn_in, IP6_A, IP6_B, IP_A, IP_B, MAC_A, MAC_B};

use uroce_io::xsk::{BindMode, XskConfig, XskError, XskSocket, XskStep};
use uroce_xdp_prog::{AttachMode, AttachedMode, ProgramConfig, XdpSteering};

const ROCE_PORT: u16 = 4791;
const DEADLINE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Prerequisites and namespaces

/// (major, minor) of the running kernel.
fn kernel_version() -> (u32, u32) {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

// ---------------------------------------------------------------------------------------
// Frames

fn csum_add(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
        sum += u32::from(w);
    }
    sum
}

fn csum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn udp_segment(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// Ethernet/IPv4/UDP frame with a correct IP checksum and, if `udp_csum`, UDP checksum.
fn udp4_frame(
    src: ([u8; 6], Ipv4Addr),
    dst: ([u8; 6], Ipv4Addr),
    dport: u16,
    payload: &[u8],
    udp_csum: bool,
) -> Vec<u8> {
    let mut udp = udp_segment(49152, dport, payload);
    if udp_csum {
        let mut s = csum_add(0, &src.1.octets());
        s = csum_add(s, &dst.1.octets());
        s = csum_add(s, &[0, 17]);
        s = csum_add(s, &(udp.len() as u16).to_be_bytes());
        let c = csum_fold(csum_add(s, &udp));
        udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    }
    let total = (20 + udp.len()) as u16;
    let mut f = Vec::with_capacity(14 + total as usize);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut h = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[12..16].copy_from_slice(&src.1.octets());
    h[16..20].copy_from_slice(&dst.1.octets());
    let c = csum_fold(csum_add(0, &h));
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&udp);
    f
}

/// Ethernet/IPv6/UDP frame with a correct UDP checksum (mandatory over IPv6).
fn udp6_frame(src: ([u8; 6], Ipv6Addr), dst: ([u8; 6], Ipv6Addr), dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut udp = udp_segment(49152, dport, payload);
    let mut s = csum_add(0, &src.1.octets());
    s = csum_add(s, &dst.1.octets());
    s = csum_add(s, &(udp.len() as u32).to_be_bytes());
    s = csum_add(s, &[0, 0, 0, 17]);
    let c = csum_fold(csum_add(s, &udp));
    udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    let mut f = Vec::with_capacity(54 + udp.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(udp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&src.1.octets());
    f.extend_from_slice(&dst.1.octets());
    f.extend_from_slice(&udp);
    f
}

/// True if an Ethernet/IPv4/UDP frame's UDP checksum verifies (0 = none counts as valid).
fn udp4_checksum_ok(frame: &[u8]) -> bool {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let udp = &frame[14 + ihl..];
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if u16::from_be_bytes([udp[6], udp[7]]) == 0 {
        return true;
    }
    let mut s = csum_add(0, &frame[26..34]);
    s = csum_add(s, &[0, 17]);
    s = csum_add(s, &(len as u16).to_be_bytes());
    csum_fold(csum_add(s, &udp[..len])) == 0
}

/// Deterministic payload: sequence number then a pattern depending on it.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p = seq.to_be_bytes().to_vec();
    p.extend((0..len.saturating_sub(4)).map(|i| (i as u32).wrapping_mul(31).wrapping_add(seq) as u8));
    p.truncate(len.max(4));
    p
}

// ---------------------------------------------------------------------------------------
// AF_XDP helpers

/// XDP program + AF_XDP socket on queue 0 of `dev`, registered in the XSKMAP.
fn xsk_receiver(dev: &str, mode: AttachMode, cfg: &XskConfig) -> (XdpSteering, XskSocket) {
    let steering = XdpSteering::install(dev, &ProgramConfig::default(), mode)
        .unwrap_or_else(|e| panic!("install XDP on {dev}: {e}"));
    let sock = XskSocket::bind_ifname(dev, 0, cfg).unwrap_or_else(|e| panic!("bind {dev}: {e}"));
    steering.register(0, sock.as_fd()).unwrap_or_else(|e| panic!("register: {e}"));
    (steering, sock)
}

/// Send every frame, never more than `window` ahead of `progress` (frames confirmed by the
/// receiver), so no ring in between can overflow. Gives up at the deadline.
fn send_frames(sock: &mut XskSocket, frames: &[Vec<u8>], progress: &AtomicUsize, window: usize) {
    let deadline = Instant::now() + DEADLINE;
    let mut i = 0;
    while i < frames.len() && Instant::now() < deadline {
        if i >= progress.load(Ordering::Acquire) + window {
            sock.tx_flush().expect("tx_flush");
            sock.reclaim();
            std::thread::yield_now();
            continue;
        }
        if sock.send(&frames[i]).expect("send") {
            i += 1;
            if i % 32 == 0 {
                sock.tx_flush().expect("tx_flush");
            }
        } else {
            sock.tx_flush().expect("tx_flush");
            sock.reclaim();
        }
    }
    assert!(sock.tx_drain(Duration::from_secs(10)).expect("tx_drain"), "TX did not complete");
}

/// Receive until `n` packets arrived or the deadline passed; returns them reassembled and
/// the number of multi-segment packets.
fn receive_frames(sock: &mut XskSocket, n: usize, progress: &AtomicUsize) -> (Vec<Vec<u8>>, usize) {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::with_capacity(n);
    let mut multi = 0;
    while got.len() < n && Instant::now() < deadline {
        let batch = sock.recv(64);
        if batch.is_empty() {
            drop(batch);
            sock.wait_rx(Some(Duration::from_millis(50))).expect("poll");
            continue;
        }
        for p in batch.iter() {
            if p.segment_count() > 1 {
                multi += 1;
            }
            got.push(p.to_vec());
        }
        progress.store(got.len(), Ordering::Release);
    }
    (got, multi)
}

fn assert_same_frames(got: &[Vec<u8>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len(), "frame count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w,
            "frame {i} differs: got {} bytes, want {} bytes; first diff at {:?}",
            g.len(),
            w.len(),
            g.iter().zip(w.iter()).position(|(a, b)| a != b)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Tests

/// AF_XDP TX in B → XDP redirect → AF_XDP RX in A: every UDP/4791 frame (IPv4 and IPv6,
/// 60..1400 bytes) arrives byte for byte and in order; interleaved UDP/5555 frames go to
/// the kernel instead. Run in native and generic mode.
#[test]
fn afxdp_to_afxdp_is_byte_exact() {
    if !prerequisites("afxdp_to_afxdp_is_byte_exact", &["ip"]) {
        return;
    }
    for (tag, mode, want_mode) in
        [("n", AttachMode::Native, AttachedMode::Native), ("g", AttachMode::Generic, AttachedMode::Generic)]
    {
        let net = netns::TestNet::new("ux", tag, 1500);
        let n = 3000usize;
        let mut want = Vec::new();
        let mut all = Vec::new();
        for seq in 0..n as u32 {
            let len = 18 + (seq as usize * 37) % 1382;
            let f = if seq % 3 == 2 {
                udp6_frame((MAC_B, IP6_B), (MAC_A, IP6_A), ROCE_PORT, &payload(seq, len))
            } else {
                udp4_frame((MAC_B, IP_B), (MAC_A, IP_A), ROCE_PORT, &payload(seq, len), seq % 2 == 0)
            };
            want.push(f.clone());
            all.push(f);
            if seq % 10 == 0 {
                all.push(udp4_frame((MAC_B, IP_B), (MAC_A, IP_A), 5555, &payload(seq, 64), true));
            }
        }
        let progress = Arc::new(AtomicUsize::new(0));
        let (ready_tx, ready_rx) = mpsc::channel();
        let p = progress.clone();
        let rx = spawn_in(&net.a, move || {
            let (steering, mut sock) = xsk_receiver("va", mode, &XskConfig::default());
            assert_eq!(steering.attachment().mode(), want_mode);
            ready_tx.send(()).unwrap();
            let (got, _) = receive_frames(&mut sock, n, &p);
            // Nothing else may trickle in: the 5555 frames went to the kernel.
            let extra = sock.recv(64).len();
            (got, extra, sock.statistics().unwrap(), sock.is_zero_copy())
        });
        ready_rx.recv_timeout(DEADLINE).expect("receiver ready");
        let p = progress.clone();
        let tx = spawn_in(&net.b, move || {
            let mut sock = XskSocket::bind_ifname("vb", 0, &XskConfig::default()).unwrap();
            // The window counts only 4791 frames, all is ~10% larger: stay well below 2048.
            send_frames(&mut sock, &all, &p, 1024);
            sock.counters()
        });
        let counters = join(tx);
        let (got, extra, stats, zc) = join(rx);
        assert!(!zc, "veth has no zero-copy support");
        assert_eq!(extra, 0);
        assert_same_frames(&got, &want);
        assert_eq!(stats.rx_dropped, 0, "{stats:?}");
        assert_eq!(stats.rx_invalid_descs, 0);
        assert_eq!(counters.tx_packets as usize, n + n.div_ceil(10));
        assert_eq!(counters.tx_completed, counters.tx_descs);
    }
}

/// AF_XDP TX in A → kernel UDP sockets (IPv4 and IPv6) in B: payloads arrive byte for byte.
/// IPv4 alternates a full UDP checksum and checksum 0; IPv6 always carries one.
#[test]
fn afxdp_tx_reaches_kernel_udp_sockets() {
    if !prerequisites("afxdp_tx_reaches_kernel_udp_sockets", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("ux", "t", 1500);
    let n = 2000u32;
    let progress = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready_rx) = mpsc::channel();
    let p = progress.clone();
    let rx = spawn_in(&net.b, move || {
        let s4 = UdpSocket::bind((IP_B, ROCE_PORT)).unwrap();
        let s6 = UdpSocket::bind((IP6_B, ROCE_PORT)).unwrap();
        for s in [&s4, &s6] {
            s.set_nonblocking(true).unwrap();
            set_rcvbuf(s, 8 << 20);
        }
        ready_tx.send(()).unwrap();
        let deadline = Instant::now() + DEADLINE;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        while got.len() < n as usize && Instant::now() < deadline {
            let mut any = false;
            for s in [&s4, &s6] {
                if let Ok((len, from)) = s.recv_from(&mut buf) {
                    got.push((buf[..len].to_vec(), from));
                    any = true;
                }
            }
            if !any {
                poll_readable(&[s4.as_fd(), s6.as_fd()], 50);
            }
            p.store(got.len(), Ordering::Release);
        }
        // /proc/thread-self: this thread's namespace (/proc/self follows the main thread).
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap_or_default();
        let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
        (got, udp.join("\n"))
    });
    ready_rx.recv_timeout(DEADLINE).expect("receiver ready");
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|seq| {
            let pl = payload(seq, 1 + (seq as usize * 53) % 1400);
            if seq % 4 == 3 {
                udp6_frame((MAC_A, IP6_A), (MAC_B, IP6_B), ROCE_PORT, &pl)
            } else {
                udp4_frame((MAC_A, IP_A), (MAC_B, IP_B), ROCE_PORT, &pl, seq % 2 == 0)
            }
        })
        .collect();
    let p = progress.clone();
    let tx = spawn_in(&net.a, move || {
        let mut sock = XskSocket::bind_ifname("va", 0, &XskConfig::default()).unwrap();
        send_frames(&mut sock, &frames, &p, 64);
        sock.statistics().unwrap()
    });
    let stats = join(tx);
    let (got, snmp) = join(rx);
    assert_eq!(stats.tx_invalid_descs, 0);
    assert_eq!(got.len(), n as usize, "datagrams received; receiver's {snmp}");
    // Each socket preserves order; merge by sequence number.
    let mut by_seq: Vec<Option<(Vec<u8>, SocketAddr)>> = vec![None; n as usize];
    for (data, from) in got {
        // Every payload starts with its 4-byte sequence number (see `payload`).
        let seq = u32::from_be_bytes(data[..4].try_into().unwrap());
        assert!(by_seq[seq as usize].is_none(), "duplicate {seq}");
        by_seq[seq as usize] = Some((data, from));
    }
    for seq in 0..n {
        let (data, from) = by_seq[seq as usize].as_ref().expect("every datagram");
        let want = payload(seq, 1 + (seq as usize * 53) % 1400);
        assert_eq!(data, &want, "datagram {seq}");
        let want_from: SocketAddr = if seq % 4 == 3 { (IP6_A, 49152).into() } else { (IP_A, 49152).into() };
        assert_eq!(from, &want_from);
    }
}

/// SO_RCVBUFFORCE (root): room for the whole send window of ~1.4 KB datagrams.
fn set_rcvbuf(s: &UdpSocket, bytes: libc::c_int) {
    // SAFETY: setsockopt with a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}

fn poll_readable(fds: &[std::os::fd::BorrowedFd<'_>], ms: i32) {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: `pfds` is a valid array of pollfd of the given length.
    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
}

/// A kernel UDP sender in B (with TX checksum offload off, so checksums are final) → the
/// AF_XDP socket in A. A kernel socket bound to A:4791 sees nothing while the AF_XDP
/// socket is registered, and gets the traffic once it is unregistered (fallback XDP_PASS).
#[test]
fn kernel_sender_to_afxdp_and_fallback_to_kernel() {
    if !prerequisites("kernel_sender_to_afxdp_and_fallback_to_kernel", &["ip", "ethtool"]) {
        return;
    }
    let net = netns::TestNet::new("ux", "k", 1500);
    let out = Command::new("ip").args(["netns", "exec", &net.b, "ethtool", "-K", "vb", "tx", "off"]).output().unwrap();
    assert!(out.status.success(), "ethtool: {}", String::from_utf8_lossy(&out.stderr));
    let n = 1000u32;
    let progress = Arc::new(AtomicUsize::new(0));
    let phase2 = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (unreg_tx, unreg_rx) = mpsc::channel();
    let (p, ph) = (progress.clone(), phase2.clone());
    let rx = spawn_in(&net.a, move || {
        let kernel = UdpSocket::bind((IP_A, ROCE_PORT)).unwrap();
        kernel.set_nonblocking(true).unwrap();
        let (steering, mut sock) = xsk_receiver("va", AttachMode::Auto, &XskConfig::default());
        ready_tx.send(()).unwrap();
        let (got, _) = receive_frames(&mut sock, n as usize, &p);
        let mut buf = [0u8; 2048];
        let kernel_during = std::iter::from_fn(|| kernel.recv_from(&mut buf).ok()).count();
        // Phase 2: unregister; the same traffic now reaches the kernel socket.
        steering.unregister(0).unwrap();
        ph.store(true, Ordering::Release);
        unreg_tx.send(()).unwrap();
        kernel.set_nonblocking(false).unwrap();
        kernel.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (len, _) = kernel.recv_from(&mut buf).expect("fallback datagram");
        let fallback = buf[..len].to_vec();
        let xsk_after = sock.recv(64).len();
        (got, kernel_during, fallback, xsk_after)
    });
    ready_rx.recv_timeout(DEADLINE).expect("receiver ready");
    let p = progress.clone();
    let tx = spawn_in(&net.b, move || {
        let s = UdpSocket::bind((IP_B, 40000)).unwrap();
        let deadline = Instant::now() + DEADLINE;
        let mut seq = 0u32;
        while seq < n && Instant::now() < deadline {
            if seq as usize >= p.load(Ordering::Acquire) + 256 {
                std::thread::yield_now();
                continue;
            }
            s.send_to(&payload(seq, 20 + seq as usize % 1000), (IP_A, ROCE_PORT)).unwrap();
            seq += 1;
        }
        unreg_rx.recv_timeout(DEADLINE).expect("unregistered");
        s.send_to(b"after-unregister", (IP_A, ROCE_PORT)).unwrap();
    });
    join(tx);
    let (got, kernel_during, fallback, xsk_after) = join(rx);
    assert!(phase2.load(Ordering::Acquire));
    assert_eq!(got.len(), n as usize);
    for (seq, f) in got.iter().enumerate() {
        let want = payload(seq as u32, 20 + seq % 1000);
        assert_eq!(&f[..6], &MAC_A);
        assert_eq!(&f[6..12], &MAC_B);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(&f[14 + 20 + 8..], &want[..], "frame {seq} payload");
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), ROCE_PORT);
        assert!(udp4_checksum_ok(f), "frame {seq}: UDP checksum");
    }
    assert_eq!(kernel_during, 0, "kernel socket must see nothing while registered");
    assert_eq!(fallback, b"after-unregister");
    assert_eq!(xsk_after, 0);
}

/// ICMP echo over IPv4 and IPv6 between the namespaces with neighbour caches flushed
/// first (so ARP and ND must go through the XDP program), and kernel UDP on another port,
/// all while the program is attached and an AF_XDP socket is registered.
#[test]
fn kernel_traffic_still_works_while_attached() {
    if !prerequisites("kernel_traffic_still_works_while_attached", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("ux", "p", 1500);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let holder = spawn_in(&net.a, move || {
        let (steering, mut sock) = xsk_receiver("va", AttachMode::Native, &XskConfig::default());
        let udp = UdpSocket::bind((IP_A, 5555)).unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        let (len, _) = udp.recv_from(&mut buf).expect("kernel UDP on 5555");
        let got = buf[..len].to_vec();
        done_rx.recv_timeout(DEADLINE).expect("pinger done");
        let stray = sock.recv(64).len();
        drop(steering);
        (got, stray)
    });
    ready_rx.recv_timeout(DEADLINE).expect("holder ready");
    ip(&["-n", &net.a, "neigh", "flush", "all"]);
    ip(&["-n", &net.b, "neigh", "flush", "all"]);
    let pinger = spawn_in(&net.b, || {
        let v4 = icmp_echo(IpVersion::V4);
        let v6 = icmp_echo(IpVersion::V6);
        let udp = UdpSocket::bind((IP_B, 0)).unwrap();
        udp.send_to(b"kernel-udp", (IP_A, 5555)).unwrap();
        (v4, v6)
    });
    let (v4, v6) = join(pinger);
    done_tx.send(()).unwrap();
    let (got, stray) = join(holder);
    assert!(v4, "ICMP echo over IPv4 (needs ARP)");
    assert!(v6, "ICMPv6 echo (needs ND)");
    assert_eq!(got, b"kernel-udp");
    assert_eq!(stray, 0, "nothing but UDP/4791 reaches the AF_XDP socket");
    let neigh = ip_out(&["-n", &net.b, "neigh", "show", "dev", "vb"]);
    assert!(neigh.contains("10.99.0.1") && neigh.contains("02:00:00:00:0a:01"), "{neigh}");
    assert!(neigh.contains("fd00:99::1"), "{neigh}");
}

#[derive(Clone, Copy)]
enum IpVersion {
    V4,
    V6,
}

/// Send ICMP echo requests from a raw socket until a matching reply arrives (3 tries,
/// 2 s each). Runs in the calling thread's namespace.
fn icmp_echo(v: IpVersion) -> bool {
    let (domain, proto) = match v {
        IpVersion::V4 => (libc::AF_INET, libc::IPPROTO_ICMP),
        IpVersion::V6 => (libc::AF_INET6, libc::IPPROTO_ICMPV6),
    };
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let id = (std::process::id() & 0xffff) as u16;
    for attempt in 0..3u16 {
        let mut req = vec![0u8; 8 + 16];
        req[0] = match v {
            IpVersion::V4 => 8,
            IpVersion::V6 => 128,
        };
        req[4..6].copy_from_slice(&id.to_be_bytes());
        req[6..8].copy_from_slice(&attempt.to_be_bytes());
        req[8..].copy_from_slice(b"uroce-xdp-ping!!");
        if let IpVersion::V4 = v {
            let c = csum_fold(csum_add(0, &req));
            req[2..4].copy_from_slice(&c.to_be_bytes());
        } // ICMPv6 raw sockets: the kernel computes the checksum.
        let rc = match v {
            IpVersion::V4 => {
                let sa = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: 0,
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(IP_A.octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: valid buffer and sockaddr_in of the stated sizes.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        req.as_ptr().cast(),
                        req.len(),
                        0,
                        (&sa as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as u32,
                    )
                }
            }
            IpVersion::V6 => {
                // SAFETY: sockaddr_in6 is plain data; zero is valid.
                let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
                sa.sin6_family = libc::AF_INET6 as u16;
                sa.sin6_addr.s6_addr = IP6_A.octets();
                // SAFETY: valid buffer and sockaddr_in6 of the stated sizes.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        req.as_ptr().cast(),
                        req.len(),
                        0,
                        (&sa as *const libc::sockaddr_in6).cast(),
                        std::mem::size_of::<libc::sockaddr_in6>() as u32,
                    )
                }
            }
        };
        assert!(rc > 0, "sendto: {}", std::io::Error::last_os_error());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            poll_readable(&[fd.as_fd()], 200);
            let mut buf = [0u8; 1500];
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n <= 0 {
                continue;
            }
            let icmp = match v {
                IpVersion::V4 => &buf[usize::from(buf[0] & 0x0f) * 4..n as usize],
                IpVersion::V6 => &buf[..n as usize],
            };
            let reply_type = match v {
                IpVersion::V4 => 0,
                IpVersion::V6 => 129,
            };
            if icmp.len() >= 24
                && icmp[0] == reply_type
                && icmp[4..6] == id.to_be_bytes()
                && &icmp[8..24] == b"uroce-xdp-ping!!"
            {
                return true;
            }
        }
    }
    false
}

/// MTU 9000: the program is loaded with BPF_F_XDP_HAS_FRAGS (chosen by `install` from the
/// MTU), both sockets use XDP_USE_SG. Frames larger than a 4 KiB chunk leave B as
/// multi-descriptor TX chains and arrive in A as multi-segment packets, byte for byte.
#[test]
fn multi_buffer_frames_round_trip() {
    if !prerequisites("multi_buffer_frames_round_trip", &["ip"]) {
        return;
    }
    for (tag, mode) in [("mn", AttachMode::Native), ("mg", AttachMode::Generic)] {
        let net = netns::TestNet::new("ux", tag, 9000);
        let sizes = [100usize, 3000, 3900, 4096, 5000, 7000, 8900];
        let n = 300usize;
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let len = sizes[i % sizes.len()];
                udp4_frame((MAC_B, IP_B), (MAC_A, IP_A), ROCE_PORT, &payload(i as u32, len), true)
            })
            .collect();
        let cfg = XskConfig { multi_buffer: true, ..XskConfig::default() };
        let progress = Arc::new(AtomicUsize::new(0));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (p, c) = (progress.clone(), cfg.clone());
        let rx = spawn_in(&net.a, move || {
            let (steering, mut sock) = xsk_receiver("va", mode, &c);
            assert!(steering.program().config().frags);
            assert!(sock.is_multi_buffer());
            ready_tx.send(()).unwrap();
            let r = receive_frames(&mut sock, n, &p);
            (r, sock.statistics().unwrap())
        });
        ready_rx.recv_timeout(DEADLINE).expect("receiver ready");
        let (p, want) = (progress.clone(), frames.clone());
        let tx = spawn_in(&net.b, move || {
            let mut sock = XskSocket::bind_ifname("vb", 0, &cfg).unwrap();
            send_frames(&mut sock, &frames, &p, 128);
            (sock.counters(), sock.statistics().unwrap())
        });
        let (counters, txstats) = join(tx);
        let ((got, multi), stats) = join(rx);
        assert_eq!(txstats.tx_invalid_descs, 0, "{txstats:?}");
        assert!(counters.tx_descs > counters.tx_packets, "multi-descriptor TX used");
        assert_same_frames(&got, &want);
        assert!(multi > 0, "some frames arrived as several segments ({mode:?})");
        assert_eq!(stats.rx_dropped, 0, "{stats:?}");
    }
}

/// Typed bind errors and modes on veth (copy mode only): zero-copy is refused with
/// EOPNOTSUPP, Auto falls back to copy, a queue the device does not have is refused.
#[test]
fn bind_modes_on_veth() {
    if !prerequisites("bind_modes_on_veth", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("ux", "z", 1500);
    join(spawn_in(&net.a, || {
        let zc = XskConfig { mode: BindMode::ZeroCopy, ..XskConfig::default() };
        match XskSocket::bind_ifname("va", 0, &zc) {
            Err(XskError::Bind { zero_copy: Some(e), copy: None }) => {
                assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}")
            }
            other => panic!("zero-copy bind on veth: {other:?}"),
        }
        let copy = XskConfig { mode: BindMode::Copy, ..XskConfig::default() };
        let s = XskSocket::bind_ifname("va", 0, &copy).unwrap();
        assert!(!s.is_zero_copy());
        assert!(!s.query_zero_copy().unwrap());
        let want_budget = (kernel_version() >= (6, 17)).then_some(256);
        assert_eq!(s.tx_budget(), want_budget, "XDP_MAX_TX_SKB_BUDGET exists from Linux 6.17");
        drop(s);
        // Rebinding right after a close: the kernel releases the queue asynchronously;
        // `busy_retry` covers that.
        let s = XskSocket::bind_ifname("va", 0, &XskConfig::default()).unwrap();
        assert!(!s.is_zero_copy(), "Auto fell back to copy mode");
        // A queue held by a live socket stays busy: typed EBUSY after `busy_retry`.
        let quick = XskConfig { busy_retry: Duration::from_millis(20), ..copy.clone() };
        match XskSocket::bind_ifname("va", 0, &quick) {
            Err(XskError::Bind { copy: Some(e), .. }) => {
                assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}")
            }
            other => panic!("second socket on a held queue: {other:?}"),
        }
        drop(s);
        match XskSocket::bind_ifname("va", 7, &copy) {
            Err(XskError::Bind { copy: Some(e), .. }) => {
                assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}")
            }
            other => panic!("bind to a missing queue: {other:?}"),
        }
        match XskSocket::bind_ifname("nope0", 0, &copy) {
            Err(XskError::Os { step: XskStep::Interface, .. }) => {}
            other => panic!("missing interface: {other:?}"),
        }
    }));
}

/// Two queues: one AF_XDP socket per queue on A (`open_queues`), both in the XSKMAP; B
/// transmits from queue 0 and queue 1. veth delivers a frame sent on TX queue q to RX
/// queue q of the peer, so each socket must receive exactly its queue's frames, byte for
/// byte.
#[test]
fn one_socket_per_queue() {
    if !prerequisites("one_socket_per_queue", &["ip"]) {
        return;
    }
    let net = netns::TestNet::with_queues("ux", "q", 1500, 2);
    let n = 500usize;
    let frames_for = |q: u32| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut pl = payload(i as u32, 100 + i % 700);
                pl.push(q as u8);
                udp4_frame((MAC_B, IP_B), (MAC_A, IP_A), ROCE_PORT, &pl, true)
            })
            .collect()
    };
    let progress: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let (ready_tx, ready_rx) = mpsc::channel();
    let p = progress.clone();
    let rx = spawn_in(&net.a, move || {
        let steering = XdpSteering::install("va", &ProgramConfig::default(), AttachMode::Native).unwrap();
        let ifindex = uroce_xdp_prog::ifindex("va").unwrap();
        let mut socks = XskSocket::open_queues(ifindex, 0..2, &XskConfig::default()).unwrap();
        for s in &socks {
            steering.register(s.queue_id(), s.as_fd()).unwrap();
        }
        ready_tx.send(()).unwrap();
        let deadline = Instant::now() + DEADLINE;
        let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        while got.iter().map(Vec::len).sum::<usize>() < 2 * n && Instant::now() < deadline {
            let mut any = false;
            for (q, s) in socks.iter_mut().enumerate() {
                let b = s.recv(64);
                any |= !b.is_empty();
                got[q].extend(b.iter().map(|p| p.to_vec()));
                p[q].store(got[q].len(), Ordering::Release);
            }
            if !any {
                socks[0].wait_rx(Some(Duration::from_millis(5))).unwrap();
            }
        }
        got
    });
    ready_rx.recv_timeout(DEADLINE).expect("receiver ready");
    let senders: Vec<_> = (0..2u32)
        .map(|q| {
            let frames = frames_for(q);
            let p = progress.clone();
            spawn_in(&net.b, move || {
                let mut s = XskSocket::bind_ifname("vb", q, &XskConfig::default()).unwrap();
                send_frames(&mut s, &frames, &p[q as usize], 512);
            })
        })
        .collect();
    for s in senders {
        join(s);
    }
    let got = join(rx);
    for q in 0..2u32 {
        assert_same_frames(&got[q as usize], &frames_for(q));
    }
}

/// Rough AF_XDP → AF_XDP rates (not a pass/fail benchmark; see the module docs).
#[test]
#[ignore]
fn measure_afxdp_to_afxdp_rates() {
    if !prerequisites("measure_afxdp_to_afxdp_rates", &["ip"]) {
        return;
    }
    for (tag, mode) in [("bn", AttachMode::Native), ("bg", AttachMode::Generic)] {
        for pl in [64usize, 1100] {
            let net = netns::TestNet::new("ux", tag, 1500);
            let frame = udp4_frame((MAC_B, IP_B), (MAC_A, IP_A), ROCE_PORT, &payload(0, pl), false);
            let secs = 2.0;
            let stop = Arc::new(AtomicBool::new(false));
            let (ready_tx, ready_rx) = mpsc::channel();
            let s = stop.clone();
            let rx = spawn_in(&net.a, move || {
                let (_steering, mut sock) = xsk_receiver("va", mode, &XskConfig::default());
                ready_tx.send(()).unwrap();
                let mut count = 0u64;
                let mut first = None;
                let mut last = Instant::now();
                let mut idle_since = None::<Instant>;
                loop {
                    let b = sock.recv(256);
                    if b.is_empty() {
                        drop(b);
                        if s.load(Ordering::Acquire) {
                            let t = *idle_since.get_or_insert_with(Instant::now);
                            if t.elapsed() > Duration::from_millis(200) {
                                break;
                            }
                        }
                        sock.wait_rx(Some(Duration::from_millis(10))).unwrap();
                        continue;
                    }
                    idle_since = None;
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    count += b.len() as u64;
                }
                let span = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
                (count, span, sock.statistics().unwrap())
            });
            ready_rx.recv_timeout(DEADLINE).unwrap();
            let s = stop.clone();
            let tx = spawn_in(&net.b, move || {
                let mut sock = XskSocket::bind_ifname("vb", 0, &XskConfig::default()).unwrap();
                let start = Instant::now();
                let mut sent = 0u64;
                while start.elapsed().as_secs_f64() < secs {
                    for _ in 0..64 {
                        match sock.tx_alloc() {
                            Some(mut f) => {
                                sock.tx_buf(&f)[..frame.len()].copy_from_slice(&frame);
                                f.set_len(frame.len());
                                if let Err(f) = sock.tx_enqueue(f) {
                                    sock.tx_free(f);
                                    break;
                                }
                                sent += 1;
                            }
                            None => break,
                        }
                    }
                    sock.tx_flush().unwrap();
                }
                sock.tx_drain(Duration::from_secs(5)).unwrap();
                s.store(true, Ordering::Release);
                (sent, start.elapsed().as_secs_f64())
            });
            let (sent, tx_secs) = join(tx);
            let (count, span, stats) = join(rx);
            println!(
                "RATE mode={mode:?} payload={pl}B sent={sent} ({:.0} pps) received={count} \
                 ({:.0} pps, {:.2} Gbit/s payload) loss={:.3}% fill_empty={}",
                sent as f64 / tx_secs,
                count as f64 / span.max(1e-9),
                count as f64 * pl as f64 * 8.0 / span.max(1e-9) / 1e9,
                100.0 * (sent - count.min(sent)) as f64 / sent.max(1) as f64,
                stats.rx_fill_ring_empty_descs,
            );
            assert!(count > 0);
        }
    }
}
