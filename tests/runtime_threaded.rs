//! The threaded runtime: each port on its own progress thread, application threads posting
//! work through `Runtime::with` and reading completions from the lock-free CQ queues, over
//! AF_XDP between two network namespaces; and an idle device does not burn a core.
//!
//! Needs root and `ip`; skips loudly without them (fails with `CI=1`).

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};
use uroce::netns::{self, End, NetPair, PairConfig};
use uroce_io::netif;
use uroce_io::runtime::{BackendKind, Port, PortConfig, Runtime};
use uroce_transport::connect::{connect_rc, RcRemote};
use uroce_transport::*;
use uroce_wire::EthernetAddress;

const LEN: usize = 8 << 20;

/// The tests run one at a time: the idle-CPU check measures this whole process.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and `ip`"))
}

struct Side {
    rt: Runtime,
    pd: PdHandle,
    cq: CqHandle,
    qpn: u32,
    mr: MrInfo,
    gid: Gid,
    gid_index: u8,
    peer_mac: EthernetAddress,
}

fn open(end: &End, peer: &End) -> Side {
    let (ifname, ip, peer_ip) = (end.ifname.clone(), end.ip(), peer.ip());
    let (mut port, peer_mac) = netns::spawn_in(&end.ns, move || -> anyhow::Result<(Port, EthernetAddress)> {
        let port = Port::open(PortConfig {
            ifname: Some(ifname.clone()),
            local_ip: ip,
            backend: BackendKind::Xdp(Default::default()),
            seed: Some(match ip {
                IpAddr::V4(v) => u32::from(v) as u64,
                IpAddr::V6(_) => 6,
            }),
            pcap: None,
            inject: None,
            tweak: None,
            cc: Default::default(),
        })?;
        Ok((port, netif::resolve_mac(&ifname, peer_ip, Duration::from_secs(5))?))
    })
    .join()
    .unwrap()
    .unwrap()
    .unwrap();
    let gid_index = port.gid_index();
    let dev = port.device();
    let gid = dev.config().gids[gid_index as usize];
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(8192).unwrap();
    let cap = QpCap { max_send_wr: 512, max_recv_wr: 512, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qpn = dev
        .create_qp(pd, &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None })
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = dev.reg_mr(pd, vec![0u8; LEN].into_boxed_slice(), access).unwrap();
    let rt = Runtime::start(port).unwrap();
    rt.watch_cq(cq, 4096);
    Side { rt, pd, cq, qpn, mr, gid, gid_index, peer_mac }
}

fn connect(me: &Side, peer: &Side) {
    let local = common::runtime_rc_local(me.gid_index);
    let remote = RcRemote { qpn: peer.qpn, psn: 100, gid: peer.gid, mac: me.peer_mac };
    let qpn = me.qpn;
    me.rt.with(|d| connect_rc(d, qpn, &local, &remote).unwrap());
}

/// Wait (lock-free) for `n` completions on `s`'s CQ; all must succeed.
fn wait_wcs(s: &Side, n: usize, what: &str) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 64];
    while out.len() < n {
        let k = s.rt.poll_cq(s.cq, &mut buf);
        out.extend_from_slice(&buf[..k]);
        assert!(Instant::now() < deadline, "{what}: {} of {n} completions", out.len());
        if k == 0 {
            std::thread::yield_now();
        }
    }
    for w in &out {
        assert_eq!(w.status, WcStatus::Success, "{what}: {w:?}");
    }
    out
}

fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the valid struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn app_threads_over_progress_threads() {
    if !prereq("app_threads_over_progress_threads") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = NetPair::create(&PairConfig { subnet: 95, ..PairConfig::new("rt", 1500) }).unwrap();
    let a = open(&net.a, &net.b);
    let b = open(&net.b, &net.a);
    connect(&a, &b);
    connect(&b, &a);

    // 1. A WRITEs 8 MiB in 64 KiB pieces from an application thread, then READs it back into
    //    the second half: both sides' memory checked byte for byte.
    let pattern: Vec<u8> = (0..LEN / 2).map(|i| (i * 7 + i / 4096) as u8).collect();
    let lkey = a.mr.lkey;
    a.rt.with(|d| d.mr_mut(lkey).unwrap().as_mut_slice()[..LEN / 2].copy_from_slice(&pattern));
    let pieces = (LEN / 2) / 65536;
    let writer = std::thread::scope(|sc| {
        sc.spawn(|| {
            post_write_pieces(&a, &b, pieces);
            wait_wcs(&a, pieces, "writes")
        })
        .join()
        .unwrap()
    });
    let ids: Vec<u64> = writer.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..pieces as u64).collect::<Vec<_>>(), "completions in posting order");
    check_and_read_back(&a, &b, &pattern, 7, "read back");

    // 2. SEND/RECV ping-pong between two application threads, one per side.
    let rounds = 200;
    std::thread::scope(|sc| {
        for (me, first) in [(&a, true), (&b, false)] {
            sc.spawn(move || {
                let (lkey, addr, qpn) = (me.mr.lkey, me.mr.addr, me.qpn);
                for r in 0..rounds {
                    let rsg = [Sge { addr, length: 4096, lkey }];
                    me.rt.with(|d| d.post_recv(qpn, &RecvWr { wr_id: 1000 + r, sg_list: &rsg })).unwrap();
                    let send = |tag: u64| {
                        me.rt.with(|d| {
                            d.mr_mut(lkey).unwrap().as_mut_slice()[4096..4104].copy_from_slice(&tag.to_le_bytes())
                        });
                        let sg = [Sge { addr: addr + 4096, length: 8, lkey }];
                        let wr = SendWr {
                            wr_id: 2000 + r,
                            sg_list: &sg,
                            opcode: WrOpcode::Send,
                            send_flags: SendFlags::SIGNALED,
                            ..Default::default()
                        };
                        me.rt.with(|d| d.post_send(qpn, &wr)).unwrap();
                    };
                    if first {
                        send(r);
                    }
                    // Our receive, and (if we sent) our send: two completions, any order.
                    let want = if first { 2 } else { 1 };
                    let wcs = wait_wcs(me, want, "ping-pong");
                    let recv = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).expect("a receive");
                    assert_eq!(recv.byte_len, 8);
                    let got =
                        me.rt.with(|d| u64::from_le_bytes(d.mr(lkey).unwrap().as_slice()[..8].try_into().unwrap()));
                    assert_eq!(got, r, "round {r}");
                    if !first {
                        send(r);
                        wait_wcs(me, 1, "pong send");
                    }
                }
            });
        }
    });

    // 3. Idle: two progress threads with nothing to do use (almost) no CPU.
    std::thread::sleep(Duration::from_millis(300));
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    eprintln!("idle CPU use of two progress threads: {:.2}% of one core", used * 100.0);
    assert!(used < 0.05, "idle progress threads use {:.1}% of a core", used * 100.0);

    let pa = a.rt.stop().expect("port back");
    assert_eq!(pa.device_ref().counters().icrc_err, 0);
    let _ = b.rt.stop();
}

/// A two-queue veth on each side: the runtime starts a progress thread per queue, both queues
/// carry RoCE frames (each thread transmits on its own queue's socket, and veth delivers a
/// frame on the peer's queue of the same index), and the transfer is exact.
#[test]
fn a_progress_thread_per_queue() {
    if !prereq("a_progress_thread_per_queue") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = NetPair::create(&PairConfig { subnet: 96, queues: 2, ..PairConfig::new("rq", 1500) }).unwrap();
    let a = open(&net.a, &net.b);
    let b = open(&net.b, &net.a);
    assert_eq!((a.rt.progress_threads(), b.rt.progress_threads()), (2, 2), "one progress thread per queue");
    connect(&a, &b);
    connect(&b, &a);
    // Which thread transmits a frame depends on which one holds the engine when it is ready:
    // repeat the transfer (each round checked in full) until every queue has carried frames.
    let mut rounds = 0;
    let (qa, qb) = loop {
        rounds += 1;
        transfer_over_two_queues(&a, &b, rounds);
        let (qa, qb) = (a.rt.with_port(|p| p.queue_rx_frames()), b.rt.with_port(|p| p.queue_rx_frames()));
        if rounds == 10 || qa.iter().chain(&qb).all(|&n| n > 0) {
            break (qa, qb);
        }
    };
    eprintln!("frames received per queue after {rounds} round(s): A {qa:?}, B {qb:?}");
    assert_eq!((qa.len(), qb.len()), (2, 2));
    assert!(qb.iter().all(|&n| n > 0), "B received on both queues: {qb:?}");
    assert!(qa.iter().all(|&n| n > 0), "A received on both queues: {qa:?}");
    let pa = a.rt.stop().expect("port back");
    assert_eq!(pa.device_ref().counters().icrc_err, 0);
    let _ = b.rt.stop();
}

/// Post `pieces` signaled 64 KiB RDMA WRITEs from the start of A's region to the start of B's
/// (WR ids 0..pieces), retrying while the send queue is full (it is 512 deep: 64 pieces fit).
fn post_write_pieces(a: &Side, b: &Side, pieces: usize) {
    let (lkey, addr, qpn, rkey, raddr) = (a.mr.lkey, a.mr.addr, a.qpn, b.mr.rkey, b.mr.addr);
    for i in 0..pieces {
        let off = (i * 65536) as u64;
        let sg = [Sge { addr: addr + off, length: 65536, lkey }];
        let wr = SendWr {
            wr_id: i as u64,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            remote_addr: raddr + off,
            rkey,
            ..Default::default()
        };
        while a.rt.with(|d| d.post_send(qpn, &wr)).is_err() {
            std::thread::yield_now();
        }
    }
}

/// WRITE half of A's region to B in 64 KiB pieces, READ it back into the other half; both
/// checked byte for byte (the pattern changes with `round`).
fn transfer_over_two_queues(a: &Side, b: &Side, round: usize) {
    let pattern: Vec<u8> = (0..LEN / 2).map(|i| (i * 13 + i / 1024 + round) as u8).collect();
    let lkey = a.mr.lkey;
    a.rt.with(|d| d.mr_mut(lkey).unwrap().as_mut_slice()[..LEN / 2].copy_from_slice(&pattern));
    let pieces = (LEN / 2) / 65536;
    post_write_pieces(a, b, pieces);
    let wcs = wait_wcs(a, pieces, "writes over two queues");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    check_and_read_back(a, b, &pattern, 99, "read back over two queues");
}

/// B's region starts with `pattern` (what A wrote); READ it back into the second half of A's
/// region (WR id `wr_id`) and check the completion and every byte.
fn check_and_read_back(a: &Side, b: &Side, pattern: &[u8], wr_id: u64, what: &str) {
    let (lkey, addr, qpn, blkey, rkey, raddr) = (a.mr.lkey, a.mr.addr, a.qpn, b.mr.lkey, b.mr.rkey, b.mr.addr);
    assert!(b.rt.with(|d| d.mr(blkey).unwrap().as_slice()[..LEN / 2] == *pattern), "B holds what A wrote");
    let sg = [Sge { addr: addr + (LEN / 2) as u64, length: (LEN / 2) as u32, lkey }];
    let wr = SendWr {
        wr_id,
        sg_list: &sg,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        remote_addr: raddr,
        rkey,
        ..Default::default()
    };
    a.rt.with(|d| d.post_send(qpn, &wr)).unwrap();
    let w = wait_wcs(a, 1, what);
    assert_eq!(w[0].status, WcStatus::Success);
    assert!(a.rt.with(|d| d.mr(lkey).unwrap().as_slice()[LEN / 2..] == *pattern), "READ returned the data");
}

/// `ib_write_lat` between two application threads, one per side, over memory the application
/// reads itself (no library call while it waits for the peer): each writes message `n` into
/// the peer's region and polls its CQ for the completion, then looks at its own region once.
/// In a two-way exchange the poll lingers (`Runtime::set_linger`) until the peer's reply has
/// arrived. The peer here replies to some messages only after a pause far longer than the
/// ACK takes, so the poll must have waited for the reply: it is there when the poll returns,
/// and the poll took the pause. (A budget far above the default: what is tested is that a
/// poll lingers until the reply is placed, not how long a peer may take on a loaded machine.)
#[test]
fn a_poll_lingers_for_the_peers_reply() {
    if !prereq("a_poll_lingers_for_the_peers_reply") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = NetPair::create(&PairConfig { subnet: 89, ..PairConfig::new("rl", 1500) }).unwrap();
    let mut sides = Vec::new();
    for (end, peer) in [(&net.a, &net.b), (&net.b, &net.a)] {
        let mut s = open(end, peer);
        let mem = uroce_mem::SharedMemory::new(4096);
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let pd = s.pd;
        s.mr = s.rt.with(|d| d.reg_mr_app(pd, Box::new(mem.clone()), access)).unwrap();
        s.rt.set_linger(Duration::from_secs(1));
        sides.push((s, mem));
    }
    let (b, bmem) = sides.pop().unwrap();
    let (a, amem) = sides.pop().unwrap();
    connect(&a, &b);
    connect(&b, &a);
    const ROUNDS: u8 = 60;
    // B replies to every 10th message after this pause.
    const PAUSE: Duration = Duration::from_millis(3);
    let slow = |n: u8| n.is_multiple_of(10);
    std::thread::scope(|sc| {
        for (me, mine, peer, first) in [(&a, &amem, &b, true), (&b, &bmem, &a, false)] {
            sc.spawn(move || {
                let wait_for = |n: u8| {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let mut byte = [0u8];
                    loop {
                        mine.read(0, &mut byte).unwrap();
                        if byte[0] == n {
                            return;
                        }
                        assert!(Instant::now() < deadline, "message {n} never arrived");
                        std::hint::spin_loop();
                    }
                };
                for n in 1..=ROUNDS {
                    if !first {
                        wait_for(n);
                        if slow(n) {
                            std::thread::sleep(PAUSE);
                        }
                    }
                    let sg = [Sge { addr: me.mr.addr + 1024, length: 1, lkey: me.mr.lkey }];
                    let wr = SendWr {
                        wr_id: n as u64,
                        sg_list: &sg,
                        opcode: WrOpcode::RdmaWrite,
                        send_flags: SendFlags::SIGNALED,
                        remote_addr: peer.mr.addr,
                        rkey: peer.mr.rkey,
                        ..Default::default()
                    };
                    mine.write(1024, &[n]).unwrap();
                    me.rt.with(|d| d.post_send(me.qpn, &wr)).unwrap();
                    let polled = Instant::now();
                    wait_wcs(me, 1, "write");
                    if first {
                        let mut byte = [0u8];
                        mine.read(0, &mut byte).unwrap();
                        if slow(n) {
                            let took = polled.elapsed();
                            assert_eq!(byte[0], n, "message {n}: B's reply placed when A's poll returned");
                            assert!(took >= PAUSE, "message {n}: the poll returned after {took:?}");
                        }
                        wait_for(n);
                    }
                }
            });
        }
    });
}
