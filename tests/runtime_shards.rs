//! The sharded runtime (`uroce_io::runtime::ShardedRuntime`): two namespaces joined by a
//! 4-queue veth, both ends running N = 2 and N = 4 engine shards; QPs spread over every shard,
//! RDMA WRITE distinct data on every QP (checked byte for byte at the destination), every
//! shard's engine received frames. QPs connected within their QPN class: no shard received a
//! frame for another shard's QP. QPs connected across classes (each frame arrives on a queue
//! of a shard that does not own its QP, as a NIC's RSS would deliver it): every such frame is
//! relayed to its QP's shard, every shard relays and receives relayed frames. `bench_scaling` (ignored; `scripts/bench-scaling` runs it)
//! reports aggregate WRITE bandwidth for 1, 2 and 4 shards.
//!
//! Needs root and `ip`; skips loudly without them (fails with `CI=1`).

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};
use uroce::netns::{self, End, NetPair, PairConfig};
use uroce_io::netif;
use uroce_io::runtime::{BackendKind, PortConfig, ShardCq, ShardedConfig, ShardedRuntime};
use uroce_transport::connect::{connect_rc, RcRemote};
use uroce_transport::*;
use uroce_wire::EthernetAddress;

const QUEUES: u32 = 4;

/// One test at a time: they share the machine's two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn prereq(test: &str) -> bool {
    common::require(netns::is_root() && common::have("ip"), &format!("{test} needs root and `ip`"))
}

/// One QP of one side: its shard, CQ (read lock-free), and region.
struct Qp {
    shard: usize,
    qpn: u32,
    cq: ShardCq,
    mr: MrInfo,
}

struct Side {
    rt: ShardedRuntime,
    qps: Vec<Qp>,
    gid: Gid,
    gid_index: u8,
    peer_mac: EthernetAddress,
}

/// Open `shards` shards on `end` with `per_shard` QPs each (a PD, CQ and `len`-byte region
/// per QP).
fn open(end: &End, peer: &End, shards: u32, per_shard: usize, len: usize) -> Side {
    let (ifname, ip, peer_ip) = (end.ifname.clone(), end.ip(), peer.ip());
    let cpus = (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    let (rt, peer_mac) = netns::spawn_in(&end.ns, move || -> anyhow::Result<(ShardedRuntime, EthernetAddress)> {
        let rt = ShardedRuntime::open(&ShardedConfig {
            port: PortConfig {
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
            },
            shards,
            cpus: Some(cpus),
        })?;
        Ok((rt, netif::resolve_mac(&ifname, peer_ip, Duration::from_secs(5))?))
    })
    .join()
    .unwrap()
    .unwrap()
    .unwrap();
    let (gid, gid_index) = rt.with(0, |p| {
        let i = p.gid_index();
        (p.device_ref().config().gids[i as usize], i)
    });
    let mut qps = Vec::new();
    for s in 0..shards as usize {
        for _ in 0..per_shard {
            let (qpn, cq, mr) = rt.with(s, move |p| {
                let dev = p.device();
                let pd = dev.alloc_pd();
                let cq = dev.create_cq(4096).unwrap();
                let cap =
                    QpCap { max_send_wr: 256, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
                let init =
                    QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
                let qpn = dev.create_qp(pd, &init).unwrap();
                let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
                let mr = dev.reg_mr(pd, vec![0u8; len].into_boxed_slice(), access).unwrap();
                (qpn, cq, mr)
            });
            assert_eq!(rt.shard_of(qpn), s, "QPN {qpn:#x} created on shard {s}");
            let cq = rt.watch_cq(s, cq, 4096);
            qps.push(Qp { shard: s, qpn, cq, mr });
        }
    }
    Side { rt, qps, gid, gid_index, peer_mac }
}

/// Connect `me.qps[i]` to `peer.qps[j]` for each `(i, j)` of `pairs`.
fn connect_pairs(me: &Side, peer: &Side, pairs: &[(usize, usize)]) {
    for &(i, j) in pairs {
        let (q, p) = (&me.qps[i], &peer.qps[j]);
        let local = common::runtime_rc_local(me.gid_index);
        let remote = RcRemote { qpn: p.qpn, psn: 100, gid: peer.gid, mac: me.peer_mac };
        let qpn = q.qpn;
        me.rt.with(q.shard, move |port| connect_rc(port.device(), qpn, &local, &remote).unwrap());
    }
}

/// Connect `me.qps[i]` to `peer.qps[i]` (same shard index on both sides, so the QPNs are of
/// the same class).
fn connect(me: &Side, peer: &Side) {
    let n = me.rt.shards() as u32;
    for (q, p) in me.qps.iter().zip(&peer.qps) {
        assert_eq!(q.qpn % n, p.qpn % n);
    }
    connect_pairs(me, peer, &(0..me.qps.len()).map(|i| (i, i)).collect::<Vec<_>>());
}

/// Post `count` signaled WRITEs of `size` bytes on QP `i` of `a` from the first half of its
/// region to the second half of QP `j`'s region on `b`, offsets cycling through the half;
/// returns how many were accepted (the send queue may be full).
fn post_writes_to(a: &Side, b: &Side, (i, j): (usize, usize), first: u64, count: usize, size: usize) -> usize {
    let (q, p) = (&a.qps[i], &b.qps[j]);
    let (lkey, addr, qpn, rkey, len) = (q.mr.lkey, q.mr.addr, q.qpn, p.mr.rkey, q.mr.length / 2);
    let raddr = p.mr.addr + len as u64;
    a.rt.with(q.shard, move |port| {
        let dev = port.device();
        let slots = (len / size).max(1) as u64;
        let mut n = 0;
        for k in 0..count as u64 {
            let off = ((first + k) % slots) * size as u64;
            let sg = [Sge { addr: addr + off, length: size as u32, lkey }];
            let wr = SendWr {
                wr_id: first + k,
                sg_list: &sg,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                remote_addr: raddr + off,
                rkey,
                ..Default::default()
            };
            if dev.post_send(qpn, &wr).is_err() {
                break;
            }
            n += 1;
        }
        n
    })
}

/// Wait (lock-free) for `n` successful completions on `q`.
fn wait_wcs(q: &Qp, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    let mut buf = [WorkCompletion::default(); 64];
    while got < n {
        let k = q.cq.poll(&mut buf);
        for w in &buf[..k] {
            assert_eq!(w.status, WcStatus::Success, "{what}: {w:?}");
        }
        got += k;
        assert!(Instant::now() < deadline, "{what}: {got} of {n} completions");
        if k == 0 {
            std::thread::yield_now();
        }
    }
}

fn pattern(side: u8, qp: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 997 + qp * 101 + side as usize * 53) as u8).collect()
}

/// How the test pairs QPs: within their class (QP `i` with the peer's QP `i`, same shard
/// index), or across (QP `i` with the peer's QP on the next shard).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pairing {
    SameClass,
    Crossed,
}

fn run_shards(n: u32, subnet: u8, pairing: Pairing) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net =
        NetPair::create(&PairConfig { subnet, queues: QUEUES, ..PairConfig::new(&format!("sh{n}"), 1500) }).unwrap();
    const LEN: usize = 256 << 10;
    const PER_SHARD: usize = 3;
    let a = open(&net.a, &net.b, n, PER_SHARD, 2 * LEN);
    let b = open(&net.b, &net.a, n, PER_SHARD, 2 * LEN);
    let total = a.qps.len();
    // (A's QP, B's QP)
    let pairs: Vec<(usize, usize)> = (0..total)
        .map(|i| match pairing {
            Pairing::SameClass => (i, i),
            Pairing::Crossed => (i, (i + PER_SHARD) % total),
        })
        .collect();
    let reversed: Vec<(usize, usize)> = pairs.iter().map(|&(i, j)| (j, i)).collect();
    if pairing == Pairing::SameClass {
        connect(&a, &b);
        connect(&b, &a);
    } else {
        for &(i, j) in &pairs {
            assert_ne!(a.qps[i].shard, b.qps[j].shard, "QP {i} crosses classes");
        }
        connect_pairs(&a, &b, &pairs);
        connect_pairs(&b, &a, &reversed);
    }
    // Each side fills the first half of each QP's region with its own pattern and WRITEs it,
    // in 16 KiB pieces, into the second half of the region of the peer's QP it is connected
    // to: both directions, every QP, at once.
    for (side, (me, peer, links)) in [(&a, &b, &pairs), (&b, &a, &reversed)].into_iter().enumerate() {
        for &(i, j) in links.iter() {
            let data = pattern(side as u8, i, LEN);
            let lkey = me.qps[i].mr.lkey;
            me.rt.with(me.qps[i].shard, move |p| {
                p.device().mr_mut(lkey).unwrap().as_mut_slice()[..LEN].copy_from_slice(&data)
            });
            let pieces = LEN / 16384;
            assert_eq!(post_writes_to(me, peer, (i, j), 0, pieces, 16384), pieces);
        }
    }
    for (me, what) in [(&a, "A's writes"), (&b, "B's writes")] {
        for q in &me.qps {
            wait_wcs(q, LEN / 16384, what);
        }
    }
    for (side, (dest, links)) in [(&b, &pairs), (&a, &reversed)].into_iter().enumerate() {
        for &(i, j) in links.iter() {
            let lkey = dest.qps[j].mr.lkey;
            let got =
                dest.rt.with(dest.qps[j].shard, move |p| p.device_ref().mr(lkey).unwrap().as_slice()[LEN..].to_vec());
            assert!(
                got == pattern(side as u8, i, LEN),
                "QP {j} of side {} holds what the peer's QP {i} wrote",
                1 - side
            );
        }
    }
    for (me, name) in [(&a, "A"), (&b, "B")] {
        let (mut out, mut into) = (0, 0);
        for s in 0..n as usize {
            let st = me.rt.stats(s);
            let p = &st.port;
            eprintln!(
                "{name} shard {s}/{n}: rcvd_pkts {} sent_pkts {} rx_frames {} wrong_shard {} relayed {} relay_full {} \
                 relayed_in {} per socket {:?}",
                st.rcvd_pkts,
                st.sent_pkts,
                p.rx_frames,
                p.wrong_shard,
                p.relayed,
                p.relay_full,
                p.relayed_in,
                st.queue_rx_frames
            );
            assert!(st.rcvd_pkts > 0 && st.sent_pkts > 0, "{name} shard {s} carried traffic: {st:?}");
            assert_eq!(st.queue_rx_frames.len(), (QUEUES / n) as usize, "{name} shard {s}: one socket per own queue");
            // Every frame for another shard's QP went to the relay, and only a full inbox
            // (none expected, but a wire may lose frames too) lost one.
            assert_eq!(p.wrong_shard, p.relayed + p.relay_full, "{name} shard {s}: {p:?}");
            assert_eq!(p.rx_dropped, p.relay_full, "{name} shard {s} dropped frames: {st:?}");
            match pairing {
                Pairing::SameClass => {
                    assert_eq!(p.wrong_shard, 0, "{name} shard {s} received another shard's frames");
                    assert_eq!(p.relayed_in, 0, "{name} shard {s}: nothing to relay");
                }
                Pairing::Crossed => {
                    assert!(p.relayed > 0 && p.relayed_in > 0, "{name} shard {s} relays both ways: {p:?}");
                    // Its engine took nothing but what other shards relayed to it.
                    assert!(st.rcvd_pkts <= p.relayed_in, "{name} shard {s}: {st:?}");
                }
            }
            out += p.relayed;
            into += p.relayed_in;
        }
        assert_eq!(out, into, "{name}: every relayed frame reached its shard");
    }
    // Idle: 2N shard threads with nothing to do sleep on their sockets (almost no CPU).
    std::thread::sleep(Duration::from_millis(300));
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    eprintln!("idle CPU use of {} shard threads: {:.2}% of one core", 2 * n, used * 100.0);
    assert!(used < 0.05, "idle shard threads use {:.1}% of a core", used * 100.0);
    // `post` (not waiting) runs on the shard's thread in order with later commands.
    let (tx, rx) = std::sync::mpsc::channel();
    for s in 0..n as usize {
        let tx = tx.clone();
        a.rt.post(s, move |p| tx.send((s, p.device_ref().config().qpn_shard.index)).unwrap());
    }
    let mut seen: Vec<(usize, u32)> = (0..n).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
    seen.sort();
    assert_eq!(seen, (0..n).map(|s| (s as usize, s)).collect::<Vec<_>>(), "each post ran on its own shard");
    for side in [a, b] {
        let ports = side.rt.stop();
        assert_eq!(ports.len(), n as usize, "every shard's port back");
        for p in &ports {
            assert_eq!(p.device_ref().counters().icrc_err, 0);
        }
    }
}

/// CPU time used by this process so far.
fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of this plain-data struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the valid struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn two_shards_on_a_four_queue_veth() {
    if prereq("two_shards_on_a_four_queue_veth") {
        run_shards(2, 97, Pairing::SameClass);
    }
}

#[test]
fn four_shards_on_a_four_queue_veth() {
    if prereq("four_shards_on_a_four_queue_veth") {
        run_shards(4, 98, Pairing::SameClass);
    }
}

/// Every frame arrives on a queue of a shard that does not own its QP (QPs connected across
/// classes: what a NIC's RSS, which knows nothing of QPNs, does to most frames): relayed.
#[test]
fn frames_arriving_on_another_shards_queue_are_relayed() {
    if prereq("frames_arriving_on_another_shards_queue_are_relayed") {
        run_shards(2, 92, Pairing::Crossed);
        run_shards(4, 93, Pairing::Crossed);
    }
}

/// More shards than the interface has receive queues is refused (a shard's sockets cannot
/// share a queue with another shard's), and the error says so.
#[test]
fn more_shards_than_queues_is_refused() {
    if !prereq("more_shards_than_queues_is_refused") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = NetPair::create(&PairConfig { subnet: 94, queues: 2, ..PairConfig::new("shq", 1500) }).unwrap();
    let (ifname, ip) = (net.a.ifname.clone(), net.a.ip());
    let err = netns::spawn_in(&net.a.ns, move || {
        let cfg = ShardedConfig {
            port: PortConfig {
                ifname: Some(ifname),
                local_ip: ip,
                backend: BackendKind::Xdp(Default::default()),
                seed: Some(1),
                pcap: None,
                inject: None,
                tweak: None,
                cc: Default::default(),
            },
            shards: 4,
            cpus: None,
        };
        ShardedRuntime::open(&cfg).err().map(|e| format!("{e:#}"))
    })
    .join()
    .unwrap()
    .unwrap();
    let err = err.expect("4 shards on 2 queues refused");
    assert!(err.contains("4 shards need at least 4 receive queues"), "{err}");
}

/// Aggregate RDMA WRITE bandwidth (64 KiB messages, one direction) for 1, 2 and 4 shards on
/// a 4-queue veth, with the same number of QPs in all (`UROCE_BENCH_QPS`, default 16, spread
/// evenly over the shards) so that only the sharding changes; run by `scripts/bench-scaling`.
#[test]
#[ignore]
fn bench_scaling() {
    if !prereq("bench_scaling") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let secs: f64 = std::env::var("UROCE_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    const SIZE: usize = 65536;
    const LEN: usize = 4 << 20;
    let qps: usize = std::env::var("UROCE_BENCH_QPS").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    const DEPTH: usize = 64;
    println!("cores: {}", std::thread::available_parallelism().map_or(1, |n| n.get()));
    println!(
        "{:>7} {:>8} {:>6} {:>10} {:>12} {:>10} {:>12} {:>10} {:>10}",
        "shards", "pairing", "QPs", "msgs", "MB/s", "Gb/s", "retransmits", "timeouts", "relayed"
    );
    let rows = [1u32, 2, 4].map(|n| (n, Pairing::SameClass)).into_iter().chain([2, 4].map(|n| (n, Pairing::Crossed)));
    for (n, pairing) in rows {
        let net = NetPair::create(&PairConfig {
            subnet: 99,
            queues: QUEUES,
            ..PairConfig::new(&format!("bs{n}{}", pairing as u8), 1500)
        })
        .unwrap();
        let per_shard = qps.div_ceil(n as usize).max(1);
        let a = open(&net.a, &net.b, n, per_shard, LEN);
        let b = open(&net.b, &net.a, n, per_shard, LEN);
        let total = a.qps.len();
        let peer = |i: usize| match pairing {
            Pairing::SameClass => i,
            Pairing::Crossed => (i + per_shard) % total,
        };
        let pairs: Vec<(usize, usize)> = (0..total).map(|i| (i, peer(i))).collect();
        connect_pairs(&a, &b, &pairs);
        connect_pairs(&b, &a, &pairs.iter().map(|&(i, j)| (j, i)).collect::<Vec<_>>());
        let mut posted = vec![0u64; a.qps.len()];
        let mut done = vec![0u64; a.qps.len()];
        let mut buf = [WorkCompletion::default(); 64];
        let mut measure = |dur: f64, posted: &mut [u64], done: &mut [u64]| -> u64 {
            let start = Instant::now();
            let base: u64 = done.iter().sum();
            while start.elapsed().as_secs_f64() < dur {
                for i in 0..a.qps.len() {
                    let k = a.qps[i].cq.poll(&mut buf);
                    for w in &buf[..k] {
                        assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    }
                    done[i] += k as u64;
                    let room = DEPTH - (posted[i] - done[i]) as usize;
                    if room >= DEPTH / 2 {
                        posted[i] += post_writes_to(&a, &b, (i, peer(i)), posted[i], room, SIZE) as u64;
                    }
                }
                std::thread::yield_now();
            }
            done.iter().sum::<u64>() - base
        };
        measure(0.5, &mut posted, &mut done);
        let t = Instant::now();
        let msgs = measure(secs, &mut posted, &mut done);
        let el = t.elapsed().as_secs_f64();
        let bytes = msgs as f64 * SIZE as f64;
        // The requesters' retransmissions and local ACK timeouts (frames lost on the way).
        let (mut retx, mut rto) = (0, 0);
        for s in 0..n as usize {
            let c = a.rt.with(s, |p| *p.device_ref().counters());
            retx += c.retransmitted_pkts;
            rto += c.local_ack_timeout_err;
        }
        let relayed: u64 = (0..n as usize).map(|s| b.rt.stats(s).port.relayed + a.rt.stats(s).port.relayed).sum();
        println!(
            "{:>7} {:>8} {:>6} {:>10} {:>12.1} {:>10.2} {:>12} {:>10} {:>10}",
            n,
            if pairing == Pairing::SameClass { "class" } else { "crossed" },
            a.qps.len(),
            msgs,
            bytes / el / 1e6,
            bytes * 8.0 / el / 1e9,
            retx,
            rto,
            relayed
        );
        if pairing == Pairing::SameClass {
            for s in 0..n as usize {
                assert_eq!(b.rt.stats(s).port.wrong_shard, 0);
            }
        }
        drop(a);
        drop(b);
    }
}
