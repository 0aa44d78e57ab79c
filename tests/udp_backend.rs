//! The kernel-UDP backend (`uroce_io::udp`): frames over real sockets.
//!
//! * Loopback (no privileges): two backends on two 127/8 addresses exchange frames built
//!   with `uroce_wire` (byte-identical IP packets come out), one IPv6 backend on `::1` talks
//!   to itself, two engines run RDMA WRITE (1 MiB), SEND and READ over two backends, and
//!   corrupt or foreign datagrams are dropped and counted.
//! * A veth pair between two private namespaces (root; skipped with a message outside CI,
//!   a failure with `CI=1`): what the kernel really puts on the wire (captured with an
//!   AF_PACKET socket) — IP ID 0 with DF, UDP checksum 0, the engine's ToS and TTL, so the
//!   captured frame is byte for byte the engine's frame and its ICRC verifies; IPv6 zero
//!   checksums need `UDP_NO_CHECK6_RX`; an rxe-like sender's nonzero IP ID is recovered;
//!   GSO batches are valid on the wire (segment IDs 0, 1, 2 with patched ICRCs) and through
//!   a GRO receiver; the engines again over IPv6 and over IPv4 with GSO + GRO.
//! * `measure_loopback_rates` (ignored): packet rates with and without GSO/GRO, printed.
//!   `cargo test --release --test udp_backend -- --ignored --nocapture`
//!
//! Loopback addresses carry the pid (127.<test>.<pid % 251>.<host>) so concurrent runs do
//! not collide; the IPv6 loopback tests share `[::1]:4791` and take a lock.

#[path = "common/netns.rs"]
mod netns;
#[path = "common/packet.rs"]
mod raw_packet;
use raw_packet::packet_socket;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use uroce_io::udp::{UdpBackend, UdpCounters, UdpOptions, PEER_MAC};
use uroce_io::{netif, Backend};
use uroce_transport::connect::{connect_rc, RcLocal, RcRemote};
use uroce_transport::{
    AccessFlags, CqHandle, Device, DeviceConfig, Gid, Instant, Mtu, PdHandle, QpCap, QpInitAttr, QpType, RecvWr,
    SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use uroce_wire::*;

const DEADLINE: Duration = Duration::from_secs(30);
const PORT: u16 = 4791;
static V6_LOOPBACK: Mutex<()> = Mutex::new(());

fn lo4(test: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, test, (std::process::id() % 251) as u8, host)
}

// ---------------------------------------------------------------------------------------
// Frames

fn write_only(qpn: u32, psn: u32, len: usize) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: packet::pad_for(len),
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(qpn),
            ack_req: true,
            psn: Psn::new(psn),
        },
        ext: ExtHeaders {
            reth: Some(RethRepr { va: 0x7f00_0000_1000, rkey: 0x1234_5678, dma_len: len as u32 }),
            ..Default::default()
        },
        payload_len: len,
    }
}

fn write_middle(qpn: u32, psn: u32, len: usize) -> RoceRepr {
    let mut r = write_only(qpn, psn, len);
    r.bth.opcode = Opcode::RC_RDMA_WRITE_MIDDLE;
    r.bth.ack_req = false;
    r.ext = ExtHeaders::default();
    r
}

fn ack(qpn: u32, psn: u32) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(qpn),
            ack_req: false,
            psn: Psn::new(psn),
        },
        ext: ExtHeaders {
            aeth: Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: Msn::new(3) }),
            ..Default::default()
        },
        payload_len: 0,
    }
}

/// A whole frame from `src` to `dst` with traffic class `tos`, hop limit `ttl`, IPv4 `ident`.
fn frame(src: SocketAddr, dst: SocketAddr, tos: u8, ttl: u8, ident: u16, roce: RoceRepr, seed: u8) -> Vec<u8> {
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            ident,
            dont_frag: true,
            ttl,
            protocol: 17,
            payload_len: 0,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            flow_label: 0x5_4321,
            hop_limit: ttl,
            next_header: 17,
            payload_len: 0,
        }),
        _ => panic!("mixed IP versions"),
    };
    let repr = FrameRepr {
        eth: EthernetRepr {
            src_addr: EthernetAddress(netns::MAC_A),
            dst_addr: EthernetAddress(netns::MAC_B),
            vlan: None,
            ethertype: EtherType::IPV4,
        },
        ip,
        udp: UdpRepr { src_port: src.port(), dst_port: dst.port() },
        roce,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr
        .emit(&mut buf, UdpChecksum::Zero, |p| {
            p.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8).wrapping_mul(7).wrapping_add(seed))
        })
        .expect("emit");
    buf.truncate(n);
    buf
}

fn l3(f: &[u8]) -> &[u8] {
    &f[14..]
}

// ---------------------------------------------------------------------------------------
// Backend helpers

fn backend(ip: IpAddr, opts: UdpOptions) -> UdpBackend {
    // A test that re-binds the port right after dropping a backend can lose a race with a
    // process another test is spawning at that moment: the forked child holds a copy of the
    // (CLOEXEC) socket until its exec, so the port stays bound for a few microseconds.
    let mut tries = 0;
    loop {
        match UdpBackend::new(ip, PORT, opts.clone()) {
            Ok(b) => return b,
            Err(e) if tries < 50 && e.to_string().contains("Address already in use") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("UdpBackend on {ip}:{PORT}: {e}"),
        }
    }
}

fn send(b: &mut UdpBackend, frames: &[Vec<u8>]) {
    for f in frames {
        let queued = b
            .send_with(&mut |buf: &mut [u8]| {
                buf[..f.len()].copy_from_slice(f);
                Some(f.len())
            })
            .expect("send_with");
        assert!(queued);
    }
    b.flush().expect("flush");
    assert_eq!(b.tx_queued(), 0, "everything sent: {:?}", b.counters());
}

/// Receive until `n` frames arrived (or panic at the deadline).
fn recv_n(b: &mut UdpBackend, n: usize) -> Vec<Vec<u8>> {
    let deadline = StdInstant::now() + DEADLINE;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(StdInstant::now() < deadline, "got {} of {n} frames; {:?}", out.len(), b.counters());
        b.wait(Duration::from_millis(20)).expect("wait");
        b.recv(64, &mut |f: &[u8]| out.push(f.to_vec())).expect("recv");
    }
    out
}

/// Receive (keeping nothing) until `done(counters)`.
fn recv_until(b: &mut UdpBackend, done: impl Fn(&UdpCounters) -> bool) -> Vec<Vec<u8>> {
    let deadline = StdInstant::now() + DEADLINE;
    let mut out = Vec::new();
    while !done(b.counters()) {
        assert!(StdInstant::now() < deadline, "condition not met: {:?}", b.counters());
        b.wait(Duration::from_millis(20)).expect("wait");
        b.recv(64, &mut |f: &[u8]| out.push(f.to_vec())).expect("recv");
    }
    out
}

/// The IP packets are equal except the IPv6 flow label (the kernel picks its own).
fn assert_same_ip_packet(got: &[u8], sent: &[u8], what: &str) {
    let (g, s) = (l3(got), l3(sent));
    assert_eq!(g.len(), s.len(), "{what}: length");
    let flow = |i: usize| g[0] >> 4 == 6 && (1..4).contains(&i);
    for (i, (x, y)) in g.iter().zip(s).enumerate() {
        if flow(i) {
            let m = if i == 1 { 0x0f } else { 0xff };
            assert_eq!(x & !m, y & !m, "{what}: byte {i} (traffic class)");
        } else {
            assert_eq!(x, y, "{what}: byte {i} of the IP packet differs");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Loopback: frames

#[test]
fn loopback_ipv4_frames_arrive_byte_identical() {
    let (ia, ib) = (lo4(101, 1), lo4(101, 2));
    let mac_b = EthernetAddress([0x02, 0, 0, 0, 0xb, 0xb]);
    let mut a = backend(IpAddr::V4(ia), UdpOptions::default());
    let mut b = backend(IpAddr::V4(ib), UdpOptions { mac: mac_b, ..Default::default() });
    assert_eq!(a.fixed_udp_src_port(), Some(PORT));
    assert!(a.verifies_icrc());
    let (sa, sb) = (SocketAddr::new(IpAddr::V4(ia), PORT), SocketAddr::new(IpAddr::V4(ib), PORT));
    // DSCP 26 + ECT(0); odd payload length (pad 3).
    let w = frame(sa, sb, 0x6a, 64, 0, write_only(0x11, 100, 1001), 1);
    send(&mut a, std::slice::from_ref(&w));
    let got = recv_n(&mut b, 1);
    let g = &got[0];
    let p = parse_frame_verified(g).expect("synthesized headers parse, ICRC verifies");
    assert_same_ip_packet(g, &w, "WRITE_ONLY");
    assert_eq!(&g[0..6], &mac_b.0, "destination MAC = the local MAC option");
    assert_eq!(&g[6..12], &PEER_MAC.0);
    assert_eq!(p.roce, write_only(0x11, 100, 1001));
    assert_eq!(p.ip.src_addr(), IpAddr::V4(ia));
    assert_eq!(p.ip.dst_addr(), IpAddr::V4(ib));
    // And back: an ACK (no payload), ToS 0, TTL 17.
    let k = frame(sb, sa, 0, 17, 0, ack(0x22, 100), 0);
    send(&mut b, std::slice::from_ref(&k));
    let got = recv_n(&mut a, 1);
    parse_frame_verified(&got[0]).expect("ACK verifies");
    assert_same_ip_packet(&got[0], &k, "ACK");
    let (ca, cb) = (*a.counters(), *b.counters());
    assert_eq!((ca.tx_frames, ca.rx_frames, cb.tx_frames, cb.rx_frames), (1, 1, 1, 1));
    assert_eq!((ca.icrc_err, cb.icrc_err, cb.rx_id_recovered, cb.tx_bad_frames), (0, 0, 0, 0));
}

#[test]
fn loopback_ipv6_frames_to_itself() {
    let _g = V6_LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let me = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), PORT);
    let mut a = match UdpBackend::new(me.ip(), PORT, UdpOptions::default()) {
        Ok(a) => a,
        Err(e) => {
            uroce_rxe_compat::harness::skip_or_fail(&format!("loopback_ipv6_frames_to_itself: bind {me}: {e}"));
            return;
        }
    };
    let frames =
        vec![frame(me, me, 0xb8, 64, 0, write_only(0x33, 7, 4096), 2), frame(me, me, 0x01, 255, 0, ack(0x33, 7), 0)];
    send(&mut a, &frames);
    let got = recv_n(&mut a, 2);
    for (g, s) in got.iter().zip(&frames) {
        let p = parse_frame_verified(g).expect("IPv6 frame verifies");
        assert_same_ip_packet(g, s, "IPv6 to itself");
        assert_eq!(p.ip.src_addr(), me.ip());
    }
}

#[test]
fn corrupt_and_foreign_datagrams_are_dropped_and_counted() {
    let (ia, ib) = (lo4(102, 1), lo4(102, 2));
    let mut a = backend(IpAddr::V4(ia), UdpOptions::default());
    let mut b = backend(IpAddr::V4(ib), UdpOptions::default());
    let (sa, sb) = (SocketAddr::new(IpAddr::V4(ia), PORT), SocketAddr::new(IpAddr::V4(ib), PORT));
    let good = frame(sa, sb, 0, 64, 0, write_only(0x11, 1, 256), 3);
    for at in [14 + 20 + 8 + 28 + 100, 14 + 20 + 8 + 3, 14 + 12] {
        // A payload byte, a BTH byte (P_Key), the IPv4 source address in the frame (the socket
        // sends from its own address, so that one is refused on transmit instead).
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        let before = *b.counters();
        let before_a = *a.counters();
        send_maybe_refused(&mut a, &bad);
        if a.counters().tx_bad_frames > before_a.tx_bad_frames {
            continue; // refused before the wire, counted at the sender
        }
        recv_until(&mut b, |c| c.icrc_err > before.icrc_err);
        assert_eq!(b.counters().rx_frames, before.rx_frames, "corrupt frame (byte {at}) delivered");
    }
    assert_eq!(a.counters().tx_bad_frames, 1);
    assert_eq!(b.counters().icrc_err, 2);
    // A datagram that is not RoCE, a short one, and one to the wrong... all counted.
    let plain = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ia), 0)).expect("plain socket");
    plain.send_to(&[0u8; 3], sb).expect("send short");
    plain.send_to(&[0xffu8; 64], sb).expect("send junk (unknown opcode)");
    recv_until(&mut b, |c| c.rx_malformed + c.rx_not_roce >= 2);
    // The good frame still goes through after all that.
    send(&mut a, std::slice::from_ref(&good));
    let got = recv_n(&mut b, 1);
    assert_same_ip_packet(&got[0], &good, "good after bad");
    // A datagram larger than a receive slot is truncated by the kernel: counted, dropped.
    let big = vec![0u8; 9000];
    plain.send_to(&big, sb).expect("send big");
    recv_until(&mut b, |c| c.truncated == 1);
    assert_eq!(b.counters().rx_frames, 1);
}

fn send_maybe_refused(b: &mut UdpBackend, f: &[u8]) {
    b.send_with(&mut |buf: &mut [u8]| {
        buf[..f.len()].copy_from_slice(f);
        Some(f.len())
    })
    .expect("send_with");
    b.flush().expect("flush");
}

// ---------------------------------------------------------------------------------------
// Engines over backends

struct Node {
    dev: Device,
    be: UdpBackend,
    pd: PdHandle,
    cq: CqHandle,
    qpn: u32,
    ip: IpAddr,
}

impl Node {
    fn new(be: UdpBackend, mac: EthernetAddress, seed: u64) -> Node {
        let ip = be.local_addr().ip();
        let mut cfg = DeviceConfig::new(mac, &[ip]);
        cfg.udp_sport = be.fixed_udp_src_port();
        cfg.check_icrc = !be.verifies_icrc();
        // As `Port` does: the socket hides the Ethernet header, so no source-MAC guard.
        cfg.guards.src_mac = be.delivers_link_headers();
        cfg.seed = seed;
        let mut dev = Device::new(cfg);
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096).expect("cq");
        let cap = QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 };
        let qpn = dev
            .create_qp(
                pd,
                &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None },
            )
            .expect("qp");
        Node { dev, be, pd, cq, qpn, ip }
    }

    fn connect(&mut self, peer_qpn: u32, peer_ip: IpAddr, peer_mac: EthernetAddress, psns: (u32, u32), mtu: Mtu) {
        let local = RcLocal {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            sgid_index: 1,
            path_mtu: mtu,
            sq_psn: psns.0,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            min_rnr_timer: 12,
            timeout: 16, // 0.27 s: a loaded CI machine must not exhaust the retries
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            traffic_class: 0x6a,
            ..RcLocal::default()
        };
        let remote = RcRemote { qpn: peer_qpn, psn: psns.1, gid: Gid::from_ip(peer_ip), mac: peer_mac };
        connect_rc(&mut self.dev, self.qpn, &local, &remote).expect("RESET -> RTS");
    }

    /// One round: receive, timers, transmit everything. True if anything happened.
    fn step(&mut self, t0: StdInstant) -> bool {
        let now = Instant::from_nanos(t0.elapsed().as_nanos() as u64);
        let Node { dev, be, .. } = self;
        let mut work = false;
        let n = be
            .recv(64, &mut |f: &[u8]| {
                let _ = dev.handle_frame(now, f);
            })
            .expect("recv");
        work |= n > 0;
        if dev.poll_timeout().is_some_and(|t| t <= now) {
            dev.handle_timeout(now);
            work = true;
        }
        loop {
            match be.send_with(&mut |buf: &mut [u8]| dev.poll_transmit(now, buf)) {
                Ok(true) => work = true,
                Ok(false) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("send_with: {e}"),
            }
        }
        be.flush().expect("flush");
        work
    }

    fn completions(&mut self) -> Vec<WorkCompletion> {
        let mut wc = [WorkCompletion::default(); 64];
        let n = self.dev.poll_cq(self.cq, &mut wc).expect("poll_cq");
        wc[..n].to_vec()
    }
}

/// Drive both nodes until `a` has a completion (returned) — or panic at the deadline.
fn run_until_completion(a: &mut Node, b: &mut Node, t0: StdInstant, b_wcs: &mut Vec<WorkCompletion>) -> WorkCompletion {
    let deadline = StdInstant::now() + DEADLINE;
    loop {
        let w = a.step(t0) | b.step(t0);
        b_wcs.extend(b.completions());
        if let Some(wc) = a.completions().first() {
            return *wc;
        }
        assert!(
            StdInstant::now() < deadline,
            "no completion; A {:?} / {:?}; B {:?} / {:?}",
            a.be.counters(),
            a.dev.counters(),
            b.be.counters(),
            b.dev.counters()
        );
        if !w {
            a.be.wait(Duration::from_micros(200)).expect("wait");
        }
    }
}

fn pattern(len: usize, seed: u32) -> Box<[u8]> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect()
}

/// Connect `a` and `b` and run WRITE (1 MiB), SEND (3000 B) and READ (64 KiB + 5) between
/// them, checking the data byte for byte.
fn exercise(mut a: Node, mut b: Node, mtu: Mtu) -> (UdpCounters, UdpCounters) {
    const LEN: usize = 1 << 20;
    let (mac_a, mac_b) = (EthernetAddress(netns::MAC_A), EthernetAddress(netns::MAC_B));
    let (qa, qb) = (a.qpn, b.qpn);
    a.connect(qb, b.ip, mac_b, (1000, 0xff_fff0), mtu);
    b.connect(qa, a.ip, mac_a, (0xff_fff0, 1000), mtu);
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let src = pattern(LEN, 1);
    let mra = a.dev.reg_mr(a.pd, src.clone(), all).expect("reg A");
    let mrb = b.dev.reg_mr(b.pd, vec![0u8; LEN].into_boxed_slice(), all).expect("reg B");
    let t0 = StdInstant::now();
    let mut b_wcs = Vec::new();

    // RDMA WRITE of 1 MiB.
    let sge = [Sge { addr: mra.addr, length: LEN as u32, lkey: mra.lkey }];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &sge,
        send_flags: SendFlags::SIGNALED,
        remote_addr: mrb.addr,
        rkey: mrb.rkey,
        ..Default::default()
    };
    a.dev.post_send(qa, &wr).expect("post WRITE");
    let wc = run_until_completion(&mut a, &mut b, t0, &mut b_wcs);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite),
        "A {:?} / {:?}; B {:?} / {:?}",
        a.be.counters(),
        a.dev.counters(),
        b.be.counters(),
        b.dev.counters()
    );
    assert!(b.dev.mr(mrb.lkey).expect("MR B").as_slice() == &src[..], "WRITE data differs");

    // SEND of 3000 bytes into a posted receive (offset 8 of B's region).
    let rsge = [Sge { addr: mrb.addr + 8, length: 4096, lkey: mrb.lkey }];
    b.dev.post_recv(qb, &RecvWr { wr_id: 7, sg_list: &rsge }).expect("post_recv");
    let ssge = [Sge { addr: mra.addr + 100, length: 3000, lkey: mra.lkey }];
    let wr = SendWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        sg_list: &ssge,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    a.dev.post_send(qa, &wr).expect("post SEND");
    let wc = run_until_completion(&mut a, &mut b, t0, &mut b_wcs);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::Send));
    let deadline = StdInstant::now() + DEADLINE;
    while !b_wcs.iter().any(|w| w.wr_id == 7) {
        assert!(StdInstant::now() < deadline, "no receive completion");
        a.step(t0);
        b.step(t0);
        b_wcs.extend(b.completions());
    }
    let rwc = b_wcs.iter().find(|w| w.wr_id == 7).expect("recv wc");
    assert_eq!((rwc.status, rwc.opcode, rwc.byte_len), (WcStatus::Success, WcOpcode::Recv, 3000));
    assert_eq!(&b.dev.mr(mrb.lkey).expect("MR B").as_slice()[8..3008], &src[100..3100], "SEND data differs");

    // RDMA READ of 64 KiB + 5 from B (fresh pattern) into A's region at offset 0.
    const RLEN: usize = 65_536 + 5;
    let fresh = pattern(RLEN, 99);
    b.dev.mr_mut(mrb.lkey).expect("MR B").as_mut_slice()[..RLEN].copy_from_slice(&fresh);
    let sge = [Sge { addr: mra.addr, length: RLEN as u32, lkey: mra.lkey }];
    let wr = SendWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaRead,
        sg_list: &sge,
        send_flags: SendFlags::SIGNALED,
        remote_addr: mrb.addr,
        rkey: mrb.rkey,
        ..Default::default()
    };
    a.dev.post_send(qa, &wr).expect("post READ");
    let wc = run_until_completion(&mut a, &mut b, t0, &mut b_wcs);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (3, WcStatus::Success, WcOpcode::RdmaRead));
    assert!(a.dev.mr(mra.lkey).expect("MR A").as_slice()[..RLEN] == fresh[..], "READ data differs");
    assert_eq!(a.dev.counters().icrc_err + b.dev.counters().icrc_err, 0);
    (*a.be.counters(), *b.be.counters())
}

#[test]
fn engines_over_loopback_write_send_read() {
    let (ia, ib) = (lo4(103, 1), lo4(103, 2));
    let a = Node::new(backend(IpAddr::V4(ia), UdpOptions::default()), EthernetAddress(netns::MAC_A), 1);
    let b = Node::new(backend(IpAddr::V4(ib), UdpOptions::default()), EthernetAddress(netns::MAC_B), 2);
    let (ca, cb) = exercise(a, b, Mtu::Mtu4096);
    for c in [ca, cb] {
        assert_eq!((c.icrc_err, c.tx_bad_frames, c.tx_errors, c.rx_id_recovered), (0, 0, 0, 0), "{c:?}");
    }
    assert!(ca.tx_frames >= 256, "{ca:?}");
}

// ---------------------------------------------------------------------------------------
// AF_PACKET helpers (root)

/// UDP destination port of an Ethernet frame carrying IPv4/IPv6 + UDP (no options).
fn udp_dport(f: &[u8]) -> Option<u16> {
    let (et, ip) = (u16::from_be_bytes([*f.get(12)?, *f.get(13)?]), f.get(14..)?);
    let udp = match et {
        0x0800 if ip.first()? & 0x0f == 5 && *ip.get(9)? == 17 => ip.get(20..)?,
        0x86dd if *ip.get(6)? == 17 => ip.get(40..)?,
        _ => return None,
    };
    Some(u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]))
}

/// On a thread in `ns`: capture incoming frames to UDP port 4791 on `ifname` until `n` (or
/// the deadline). The receiver is ready when the function returns.
fn capture(ns: &str, ifname: &'static str, n: usize) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    let h = netns::spawn_in(ns, move || {
        let fd = packet_socket(ifname);
        tx.send(()).expect("ready");
        let deadline = StdInstant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        let mut buf = vec![0u8; 70_000];
        while out.len() < n && StdInstant::now() < deadline {
            // SAFETY: sockaddr_ll is plain old data.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf`, `from` and `flen` are valid for writes of the sizes given.
            let r = unsafe {
                libc::recvfrom(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut flen,
                )
            };
            if r <= 0 || from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let f = &buf[..r as usize];
            if udp_dport(f) == Some(PORT) {
                out.push(f.to_vec());
            }
        }
        out
    });
    rx.recv().expect("capture thread ready");
    h
}

/// Send raw Ethernet frames out of `ifname` (on the calling thread's namespace).
fn inject_raw(ifname: &str, frames: &[Vec<u8>]) {
    let fd = packet_socket(ifname);
    for f in frames {
        // SAFETY: `f` is valid for reads of its length; the socket is bound to the interface.
        let r = unsafe { libc::send(fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        assert_eq!(r as usize, f.len(), "raw send: {}", std::io::Error::last_os_error());
    }
}

fn ethtool(ns: &str, args: &[&str]) {
    let mut cmd = vec!["ethtool"];
    cmd.extend_from_slice(args);
    netns::exec_in(ns, &cmd);
}

fn sa(ip: impl Into<IpAddr>) -> SocketAddr {
    SocketAddr::new(ip.into(), PORT)
}

// ---------------------------------------------------------------------------------------
// veth (root)

#[test]
fn wire_ipv4_id_0_df_zero_checksum_tos_ttl() {
    if !netns::prerequisites("wire_ipv4_id_0_df_zero_checksum_tos_ttl", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("uud", "w4", 1500);
    let frames = vec![
        frame(sa(netns::IP_A), sa(netns::IP_B), 0x6a, 64, 0, write_only(0x11, 1, 1024), 1),
        frame(sa(netns::IP_A), sa(netns::IP_B), 0x00, 17, 0, ack(0x11, 1), 0),
        frame(sa(netns::IP_A), sa(netns::IP_B), 0xb9, 3, 0, write_only(0x11, 2, 1), 2),
    ];
    let cap = capture(&net.b, "vb", frames.len());
    let sent = frames.clone();
    netns::run_in(&net.a, move || {
        let mut a = backend(IpAddr::V4(netns::IP_A), UdpOptions::default());
        send(&mut a, &sent);
    });
    let got = netns::join(cap);
    assert_eq!(got.len(), frames.len(), "captured");
    for (g, s) in got.iter().zip(&frames) {
        let p = parse_frame_verified(g).expect("the frame on the wire verifies");
        let IpRepr::V4(v4) = p.ip else { panic!("IPv4") };
        assert_eq!((v4.ident, v4.dont_frag), (0, true), "Linux sends ID 0 with DF from an unconnected socket");
        assert_eq!(&g[14 + 20 + 6..14 + 20 + 8], &[0, 0], "UDP checksum 0 (SO_NO_CHECK)");
        assert_eq!((&g[0..6], &g[6..12]), (&netns::MAC_B[..], &netns::MAC_A[..]));
        // ID, DF, ToS, TTL, checksum 0: the IP packet is exactly the engine's.
        assert_same_ip_packet(g, s, "captured IPv4");
    }
}

#[test]
fn wire_ipv6_zero_checksum_and_no_check6_rx() {
    if !netns::prerequisites("wire_ipv6_zero_checksum_and_no_check6_rx", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("uud", "w6", 1500);
    let frames = vec![
        frame(sa(netns::IP6_A), sa(netns::IP6_B), 0x6a, 64, 0, write_only(0x11, 1, 1200), 1),
        frame(sa(netns::IP6_A), sa(netns::IP6_B), 0x01, 9, 0, ack(0x11, 1), 0),
    ];
    // 1. On the wire: checksum 0, traffic class and hop limit as the engine built them.
    let cap = capture(&net.b, "vb", frames.len());
    let sent = frames.clone();
    netns::run_in(&net.a, move || {
        let mut a = backend(IpAddr::V6(netns::IP6_A), UdpOptions::default());
        send(&mut a, &sent);
    });
    let got = netns::join(cap);
    assert_eq!(got.len(), frames.len());
    for (g, s) in got.iter().zip(&frames) {
        parse_frame_verified(g).expect("the frame on the wire verifies");
        assert_eq!(&g[14 + 40 + 6..14 + 40 + 8], &[0, 0], "UDP checksum 0 (UDP_NO_CHECK6_TX)");
        assert_same_ip_packet(g, s, "captured IPv6");
    }
    // 2. A backend receives zero-checksum IPv6 (UDP_NO_CHECK6_RX); a plain socket does not:
    //    the kernel counts it in Udp6InCsumErrors instead.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let rx = netns::spawn_in(&net.b, move || {
        let mut b = backend(IpAddr::V6(netns::IP6_B), UdpOptions::default());
        let plain = UdpSocket::bind(SocketAddr::new(IpAddr::V6(netns::IP6_B), 5000)).expect("plain v6 socket");
        plain.set_nonblocking(true).expect("nonblocking");
        let errs0 = udp6_csum_errors();
        ready_tx.send(()).expect("ready");
        let got = recv_n(&mut b, 2);
        go_rx.recv().expect("plain datagram sent");
        let deadline = StdInstant::now() + DEADLINE;
        while udp6_csum_errors() == errs0 {
            assert!(StdInstant::now() < deadline, "the zero-checksum datagram never arrived");
            std::thread::yield_now();
        }
        let mut buf = [0u8; 64];
        let plain_got = plain.recv_from(&mut buf).is_ok();
        (got, plain_got, *b.counters())
    });
    ready_rx.recv().expect("receiver ready");
    let sent = frames.clone();
    netns::run_in(&net.a, move || {
        let mut a = backend(IpAddr::V6(netns::IP6_A), UdpOptions::default());
        send(&mut a, &sent);
        // The same zero checksum to a socket without UDP_NO_CHECK6_RX.
        let s = UdpSocket::bind(SocketAddr::new(IpAddr::V6(netns::IP6_A), 0)).expect("socket");
        let one: libc::c_int = 1;
        // SAFETY: an int option of the size given on a socket we own.
        let rc = unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_UDP, 101, (&one as *const libc::c_int).cast(), 4) };
        assert_eq!(rc, 0, "UDP_NO_CHECK6_TX");
        s.send_to(b"zero checksum", SocketAddr::new(IpAddr::V6(netns::IP6_B), 5000)).expect("send");
    });
    go_tx.send(()).expect("go");
    let (got, plain_got, cb) = netns::join(rx);
    for (g, s) in got.iter().zip(&frames) {
        parse_frame_verified(g).expect("verifies");
        assert_same_ip_packet(g, s, "IPv6 through the backend");
    }
    assert_eq!(cb.rx_frames, 2);
    assert!(!plain_got, "a socket without UDP_NO_CHECK6_RX accepted a zero UDP checksum over IPv6");
}

/// Udp6InCsumErrors of the calling thread's namespace.
fn udp6_csum_errors() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/net/snmp6").expect("snmp6");
    s.lines()
        .find_map(|l| l.strip_prefix("Udp6InCsumErrors"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Udp6InCsumErrors")
}

#[test]
fn rxe_like_ipv4_ids_are_recovered() {
    if !netns::prerequisites("rxe_like_ipv4_ids_are_recovered", &["ip"]) {
        return;
    }
    let net = netns::TestNet::new("uud", "id", 1500);
    // rxe: IDs from the kernel generator, DF set, source port 0xc000 | hash; one with DF clear.
    let frames: Vec<Vec<u8>> = vec![
        frame(SocketAddr::new(netns::IP_A.into(), 49441), sa(netns::IP_B), 0, 64, 0x8c71, write_only(0x11, 5, 600), 5),
        frame(SocketAddr::new(netns::IP_A.into(), 49441), sa(netns::IP_B), 0, 64, 0x8c72, ack(0x11, 5), 0),
        {
            let mut f = frame(sa(netns::IP_A), sa(netns::IP_B), 0, 64, 0, write_only(0x11, 6, 64), 6);
            let mut p = Ipv4Packet::new_unchecked(&mut f[14..34]);
            p.set_dont_frag(false);
            p.fill_checksum();
            let n = f.len();
            let c = uroce_wire::icrc::compute(&f[14..n - 4]).expect("icrc");
            f[n - 4..].copy_from_slice(&c.to_le_bytes());
            f
        },
    ];
    for recover in [true, false] {
        let (ready_tx, ready_rx) = mpsc::channel();
        let rx = netns::spawn_in(&net.b, move || {
            let opts = UdpOptions { recover_ipv4_id: recover, ..Default::default() };
            let mut b = backend(IpAddr::V4(netns::IP_B), opts);
            ready_tx.send(()).expect("ready");
            let got = recv_until(&mut b, |c| c.rx_frames + c.icrc_err == 3);
            (got, *b.counters())
        });
        ready_rx.recv().expect("ready");
        let f = frames.clone();
        netns::run_in(&net.a, move || inject_raw("va", &f));
        let (got, c) = netns::join(rx);
        if recover {
            assert_eq!((c.rx_frames, c.rx_id_recovered, c.icrc_err), (3, 3, 0), "{c:?}");
            for (g, s) in got.iter().zip(&frames) {
                parse_frame_verified(g).expect("recovered header verifies");
                assert_same_ip_packet(g, s, "recovered");
            }
        } else {
            // Without recovery only the DF-clear frame (ID 0) passes.
            assert_eq!((c.rx_frames, c.icrc_err), (1, 2), "{c:?}");
            assert_same_ip_packet(&got[0], &frames[2], "DF clear");
        }
    }
}

#[test]
fn gso_batches_are_valid_on_the_wire_and_through_gro() {
    if !netns::prerequisites("gso_batches_are_valid_on_the_wire_and_through_gro", &["ip", "ethtool"]) {
        return;
    }
    let net = netns::TestNet::new("uud", "gs", 1500);
    // A WRITE burst: 12 equal MIDDLE packets and a shorter one, then an ACK elsewhere-shaped.
    let mut frames: Vec<Vec<u8>> = (0..12)
        .map(|i| frame(sa(netns::IP_A), sa(netns::IP_B), 0x6a, 64, 0, write_middle(0x11, i, 1024), i as u8))
        .collect();
    frames.push(frame(sa(netns::IP_A), sa(netns::IP_B), 0x6a, 64, 0, write_middle(0x11, 12, 500), 12));
    frames.push(frame(sa(netns::IP_A), sa(netns::IP_B), 0, 64, 0, ack(0x11, 12), 0));
    let n = frames.len();
    // 1. Software segmentation at the sending veth: every segment on the wire verifies with
    //    the ID the kernel gave it (0, 1, 2, ...), and a plain receiver recovers them.
    ethtool(&net.a, &["-K", "va", "tx-udp-segmentation", "off"]);
    let cap = capture(&net.b, "vb", n);
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx = netns::spawn_in(&net.b, move || {
        let mut b = backend(IpAddr::V4(netns::IP_B), UdpOptions::default());
        ready_tx.send(()).expect("ready");
        let got = recv_n(&mut b, n);
        (got, *b.counters())
    });
    ready_rx.recv().expect("ready");
    let sent = frames.clone();
    let ca = netns::run_in(&net.a, move || {
        let mut a = backend(IpAddr::V4(netns::IP_A), UdpOptions { gso: true, ..Default::default() });
        send(&mut a, &sent);
        *a.counters()
    });
    assert_eq!((ca.tx_frames, ca.tx_gso_sends), (n as u64, 1), "{ca:?}");
    let wire = netns::join(cap);
    assert_eq!(wire.len(), n);
    let ids: Vec<u16> = wire.iter().map(|g| u16::from_be_bytes([g[18], g[19]])).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0], "GSO segments are numbered from 0");
    for g in &wire {
        parse_frame_verified(g).expect("each segment's patched ICRC verifies on the wire");
    }
    let (got, cb) = netns::join(rx);
    assert_eq!((cb.rx_frames, cb.icrc_err, cb.rx_id_recovered), (n as u64, 0, 12), "{cb:?}");
    for (g, s) in got.iter().zip(&frames) {
        // Equal up to the ICRC, which the sender patched for each segment's ID.
        assert_eq!(&g[14 + 28..g.len() - 4], &s[14 + 28..s.len() - 4], "RoCE bytes");
        parse_frame_verified(g).expect("verifies with the recovered ID");
    }
    // 2. Offload on (veth passes the super-datagram to the peer namespace whole): a GRO
    //    receiver gets it in one piece and splits it; a plain one has the kernel split it.
    ethtool(&net.a, &["-K", "va", "tx-udp-segmentation", "on"]);
    for gro in [true, false] {
        let (ready_tx, ready_rx) = mpsc::channel();
        let rx = netns::spawn_in(&net.b, move || {
            let mut b = backend(IpAddr::V4(netns::IP_B), UdpOptions { gro, ..Default::default() });
            ready_tx.send(()).expect("ready");
            let got = recv_n(&mut b, n);
            (got, *b.counters())
        });
        ready_rx.recv().expect("ready");
        let sent = frames.clone();
        netns::run_in(&net.a, move || {
            let mut a = backend(IpAddr::V4(netns::IP_A), UdpOptions { gso: true, ..Default::default() });
            send(&mut a, &sent);
        });
        let (got, cb) = netns::join(rx);
        assert_eq!((cb.rx_frames, cb.icrc_err), (n as u64, 0), "gro {gro}: {cb:?}");
        if gro {
            assert_eq!(cb.rx_gro_batches, 1, "{cb:?}");
        }
        for (g, s) in got.iter().zip(&frames) {
            parse_frame_verified(g).expect("verifies");
            assert_eq!(&g[14 + 28..g.len() - 4], &s[14 + 28..s.len() - 4], "RoCE bytes (gro {gro})");
        }
    }
}

fn engines_over_veth(tag: &str, v6: bool, opts: UdpOptions) {
    let (gso, gro) = (opts.gso, opts.gro);
    let net = netns::TestNet::new("uud", tag, 1500);
    let (ia, ib): (IpAddr, IpAddr) =
        if v6 { (netns::IP6_A.into(), netns::IP6_B.into()) } else { (netns::IP_A.into(), netns::IP_B.into()) };
    // Each backend is opened in its namespace; the engines then run on this thread (sockets
    // keep the namespace they were created in).
    // Resolve the neighbours first, as a runtime does: the engine's retransmission timer
    // (0.067 s here) is shorter than the kernel's ND retransmission (1 s).
    let mac_b = netns::run_in(&net.a, move || netif::resolve_mac("va", ib, DEADLINE).expect("resolve B"));
    let mac_a = netns::run_in(&net.b, move || netif::resolve_mac("vb", ia, DEADLINE).expect("resolve A"));
    assert_eq!((mac_a.0, mac_b.0), (netns::MAC_A, netns::MAC_B));
    let oa = opts.clone();
    let be_a = netns::run_in(&net.a, move || backend(ia, oa));
    let be_b = netns::run_in(&net.b, move || backend(ib, opts));
    let a = Node::new(be_a, EthernetAddress(netns::MAC_A), 3);
    let b = Node::new(be_b, EthernetAddress(netns::MAC_B), 4);
    let (ca, cb) = exercise(a, b, Mtu::Mtu1024);
    for c in [ca, cb] {
        assert_eq!((c.icrc_err, c.tx_bad_frames, c.tx_errors), (0, 0, 0), "{c:?}");
    }
    assert!(ca.tx_frames >= 1024, "{ca:?}");
    eprintln!("A: {ca:?}\nB: {cb:?}");
    if gso {
        // The WRITE burst went out in GSO batches, whose segment IDs B recovered.
        assert!(ca.tx_gso_sends > 0 && cb.rx_id_recovered > 0, "{ca:?} {cb:?}");
    }
    if gro {
        assert!(cb.rx_gro_batches > 0, "{cb:?}");
    }
}

#[test]
fn engines_over_veth_ipv6() {
    if !netns::prerequisites("engines_over_veth_ipv6", &["ip"]) {
        return;
    }
    engines_over_veth("e6", true, UdpOptions::default());
}

#[test]
fn engines_over_veth_ipv4_gso_gro() {
    if !netns::prerequisites("engines_over_veth_ipv4_gso_gro", &["ip"]) {
        return;
    }
    engines_over_veth("e4", false, UdpOptions { gso: true, gro: true, ..Default::default() });
}

// ---------------------------------------------------------------------------------------
// Measurement

/// Packets per second from one backend to another on loopback, sender and receiver on two
/// threads: `frames` frames of `payload` bytes (WRITE_MIDDLE), in bursts of 32. Returns the
/// receive rate (first to last frame received), the fraction lost, and both counters.
fn rate(test: u8, payload: usize, opts: UdpOptions, frames: usize) -> (f64, f64, UdpCounters, UdpCounters) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (ia, ib) = (lo4(test, 1), lo4(test, 2));
    let (sa, sb) = (SocketAddr::new(IpAddr::V4(ia), PORT), SocketAddr::new(IpAddr::V4(ib), PORT));
    let burst: Vec<Vec<u8>> = (0..32).map(|i| frame(sa, sb, 0, 64, 0, write_middle(0x11, i, payload), 0)).collect();
    let mut b = backend(IpAddr::V4(ib), opts.clone());
    let mut a = backend(IpAddr::V4(ia), opts);
    let done = Arc::new(AtomicBool::new(false));
    let done_rx = done.clone();
    let rx = std::thread::spawn(move || {
        let mut n = 0usize;
        let (mut first, mut last) = (None, StdInstant::now());
        loop {
            b.wait(Duration::from_millis(5)).expect("wait");
            let got = b.recv(256, &mut |_f: &[u8]| {}).expect("recv");
            let now = StdInstant::now();
            if got > 0 {
                first.get_or_insert(now);
                last = now;
                n += got;
            } else if done_rx.load(Ordering::Acquire) && now - last > Duration::from_millis(200) {
                break;
            }
        }
        let span = first.map_or(Duration::ZERO, |f| last - f);
        (n, span, *b.counters())
    });
    let mut sent = 0;
    while sent < frames {
        for f in &burst {
            loop {
                let r = a.send_with(&mut |buf: &mut [u8]| {
                    buf[..f.len()].copy_from_slice(f);
                    Some(f.len())
                });
                match r {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        a.wait(Duration::from_millis(1)).expect("wait");
                        a.flush().expect("flush");
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        a.flush().expect("flush");
        sent += burst.len();
    }
    while a.tx_queued() > 0 {
        a.wait(Duration::from_millis(1)).expect("wait");
        a.flush().expect("flush");
    }
    done.store(true, Ordering::Release);
    let (n, span, cb) = rx.join().expect("rx thread");
    let pps = n as f64 / span.as_secs_f64().max(1e-9);
    (pps, 1.0 - n as f64 / sent as f64, *a.counters(), cb)
}

#[test]
#[ignore = "measurement: run with --release --ignored --nocapture"]
fn measure_loopback_rates() {
    for payload in [1024usize, 4096] {
        for (name, opts) in [
            ("sendmmsg/recvmmsg", UdpOptions::default()),
            ("GSO", UdpOptions { gso: true, ..Default::default() }),
            ("GSO + GRO", UdpOptions { gso: true, gro: true, ..Default::default() }),
        ] {
            let mut rates = Vec::new();
            let mut losses = Vec::new();
            for run in 0..3u8 {
                let (pps, loss, ca, cb) = rate(110 + run, payload, opts.clone(), 400_000);
                assert_eq!(cb.icrc_err, 0);
                rates.push(pps);
                losses.push(loss);
                if run == 0 {
                    eprintln!(
                        "  ({name}, {payload} B: tx syscalls {}, gso sends {}, rx syscalls {}, gro batches {}, \
                         id recovered {})",
                        ca.tx_syscalls, ca.tx_gso_sends, cb.rx_syscalls, cb.rx_gro_batches, cb.rx_id_recovered
                    );
                }
            }
            rates.sort_by(f64::total_cmp);
            eprintln!(
                "{name:>18}, payload {payload:>4} B: median {:.0} kpps (runs {:.0}..{:.0}), {:.2} Gbit/s payload, \
                 loss {:.1?} %",
                rates[1] / 1e3,
                rates[0] / 1e3,
                rates[2] / 1e3,
                rates[1] * payload as f64 * 8.0 / 1e9,
                losses.iter().map(|l| l * 100.0).collect::<Vec<_>>()
            );
        }
    }
}
