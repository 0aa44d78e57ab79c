//! Forged frames from an attacker on the segment who knows a connection's addresses, QPNs,
//! PSNs and keys (ReDMArk, USENIX Security '21; they are in the clear in perftest's TCP
//! exchange), every frame with a good ICRC: what the [`Guards`] stop, what rxe's checks alone
//! (`Guards::NONE`) let through, and the figures before and after. Each scenario runs both
//! ways, so each guard is shown to be what stops its attack.

mod common;

use common::*;
use core::time::Duration;
use uroce_transport::formulas::rc_udp_sport;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{cnp_frame, LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::*;

/// Nodes 0 and 1 (sim devices 1 and 2, both with `guards`) and one connected QP pair, A
/// sending from PSN 100 and B from 200.
fn guarded_pair(seed: u64, guards: Guards) -> (Network, QpEnd, QpEnd) {
    let mut net = Network::new(seed, LinkConfig::default());
    net.add(device_with(1, seed, |c| c.guards = guards));
    net.add(device_with(2, seed, |c| c.guards = guards));
    let o = QpOptions { psns: Some((100, 200)), ..Default::default() };
    let (a, b) = connect(&mut net, 0, 1, &o).expect("connect");
    (net, a, b)
}

/// A WRITE_ONLY of four `byte`s at `dst`, as A would send it to B at `psn`.
fn write_to_b(b: &QpEnd, dst: &MrInfo, psn: u32, byte: u8) -> Forged {
    let mut f = Forged::from_peer(1, 2, b.qpn, psn, Opcode::RC_RDMA_WRITE_ONLY);
    f.ext.reth = Some(RethRepr { va: dst.addr, rkey: dst.rkey, dma_len: 4 });
    f.payload = vec![byte; 4];
    f
}

/// The peer's IP address from another MAC, or from another UDP source port than the one it
/// uses: rxe's address check takes both (and writes); the guards drop and count them, and
/// the peer's own frames — and its CNPs, from any port — still get through.
#[test]
fn a_forged_mac_or_source_port_is_dropped_and_counted() {
    for guards in [Guards::default(), Guards::NONE] {
        let on = guards != Guards::NONE;
        let (mut net, _a, b) = guarded_pair(41, guards);
        let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
        let now = Instant::ZERO;
        let mem = |net: &mut Network| mr_bytes(net, 1, &dst)[..4].to_vec();
        // The peer's first frame: accepted; its source port (0xc000) is the peer's from now on.
        assert_eq!(net.dev(1).handle_frame(now, &write_to_b(&b, &dst, 100, 1).emit()), Ok(()));
        let mut spoofed_mac = write_to_b(&b, &dst, 101, 2);
        spoofed_mac.src_mac = mac(9);
        // (Without the guards the spoofed-MAC frame took PSN 101.)
        let mut other_port = write_to_b(&b, &dst, if on { 101 } else { 102 }, 3);
        other_port.sport = 0xc001;
        if on {
            assert_eq!(net.dev(1).handle_frame(now, &spoofed_mac.emit()), Err(RxDrop::BadSourceMac));
            assert_eq!(net.dev(1).handle_frame(now, &other_port.emit()), Err(RxDrop::BadSourcePort));
            assert_eq!(mem(&mut net), [1; 4], "no forged byte landed");
            let c = *net.dev(1).counters();
            assert_eq!((c.dropped_bad_src_mac, c.dropped_bad_src_port, c.rcvd_pkts), (1, 1, 1));
            // The peer carries on.
            assert_eq!(net.dev(1).handle_frame(now, &write_to_b(&b, &dst, 101, 4).emit()), Ok(()));
            assert_eq!(mem(&mut net), [4; 4]);
        } else {
            assert_eq!(net.dev(1).handle_frame(now, &spoofed_mac.emit()), Ok(()));
            assert_eq!(mem(&mut net), [2; 4], "rxe's checks alone: the forged WRITE is placed");
            assert_eq!(net.dev(1).handle_frame(now, &other_port.emit()), Ok(()));
            assert_eq!(mem(&mut net), [3; 4]);
        }
        // A CNP is keyed on its QP only: from another port it still counts (no RP configured).
        let cnp = cnp_frame((mac(1), ipv4(1)), (mac(2), ipv4(2)), b.qpn);
        assert_eq!(net.dev(1).handle_frame(now, &cnp), Ok(()));
        assert_eq!(net.dev(1).counters().rp_cnp_ignored, 1);
        let bad_cnp = cnp_frame((mac(9), ipv4(1)), (mac(2), ipv4(2)), b.qpn);
        let want = if on { Err(RxDrop::BadSourceMac) } else { Ok(()) };
        assert_eq!(net.dev(1).handle_frame(now, &bad_cnp), want);
    }
}

/// A forged frame the QP drops does not teach it a source port: only a frame that moves the
/// QP forward (an executed request, an acknowledged one) does, so a blind attacker cannot pin
/// a port of its own before the peer's first frame and shut the peer out.
#[test]
fn only_a_frame_that_makes_progress_pins_the_source_port() {
    let (mut net, _a, b) = guarded_pair(42, Guards::default());
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    let now = Instant::ZERO;
    // Out of sequence (NAKed) and duplicate (re-ACKed) frames from port 0xdead: no progress.
    for psn in [105, 99] {
        let mut f = write_to_b(&b, &dst, psn, 7);
        f.sport = 0xdead;
        assert_eq!(net.dev(1).handle_frame(now, &f.emit()), Ok(()));
    }
    // The peer's real port still works, and now it is the only one.
    assert_eq!(net.dev(1).handle_frame(now, &write_to_b(&b, &dst, 100, 1).emit()), Ok(()));
    let mut f = write_to_b(&b, &dst, 101, 2);
    f.sport = 0xdead;
    assert_eq!(net.dev(1).handle_frame(now, &f.emit()), Err(RxDrop::BadSourcePort));
    assert_eq!(mr_bytes(&mut net, 1, &dst)[..4], [1; 4]);
}

/// Post `n` one-packet WRITEs on A (PSNs 100..100+n) and put them on the wire to nowhere: A
/// waits for their ACKs with `n` PSNs outstanding.
fn outstanding_writes(net: &mut Network, a: &QpEnd, b: &QpEnd, n: u64) {
    let src = reg(net, 0, a.pd, 64, ALL_ACCESS, |i| i as u8);
    let dst = reg(net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    for i in 0..n {
        post_rdma(net, a, i, WrOpcode::RdmaWrite, &src, 4, &dst);
    }
    let mut buf = [0u8; 9000];
    let mut sent = 0;
    while net.dev(0).poll_transmit(Instant::ZERO, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, n, "every WRITE left");
}

/// An error NAK as B would send it to A, from B's real port.
fn nak_to_a(a: &QpEnd, b: &QpEnd, psn: u32, code: NakCode, msn: u32) -> Vec<u8> {
    let mut f = Forged::from_peer(2, 1, a.qpn, psn, Opcode::RC_ACKNOWLEDGE);
    f.sport = rc_udp_sport(0, b.qpn, a.qpn);
    f.ext.aeth = Some(AethRepr { syndrome: Syndrome::Nak(code), msn: Msn::new(msn) });
    f.emit()
}

/// An error NAK ends a requester QP (§9.7.5.2). The guard holds it to the MSN the responder
/// would have: for the third of four outstanding WRITEs, 2. With the wrong MSN the NAK is
/// dropped and A carries on; with the right one it does what IBTA says (the residual: an
/// attacker who knows the MSN too).
#[test]
fn an_error_nak_must_carry_the_responders_msn() {
    let (mut net, a, b) = guarded_pair(43, Guards::default());
    outstanding_writes(&mut net, &a, &b, 4);
    for wrong in [0, 1, 3, 0x00ff_ffff] {
        let f = nak_to_a(&a, &b, 102, NakCode::RemoteAccessError, wrong);
        assert_eq!(net.dev(0).handle_frame(Instant::ZERO, &f), Ok(()));
    }
    assert_eq!(net.dev(0).counters().dropped_bad_nak_msn, 4);
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().state(), QpState::Rts);
    assert!(drain_cq(&mut net, 0, a.cq).is_empty(), "nothing completed");
    let f = nak_to_a(&a, &b, 102, NakCode::RemoteAccessError, 2);
    net.dev(0).handle_frame(Instant::ZERO, &f).unwrap();
    let wcs: Vec<_> = drain_cq(&mut net, 0, a.cq).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        wcs,
        [(0, WcStatus::Success), (1, WcStatus::Success), (2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr)]
    );
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().state(), QpState::Err);
}

/// A tiny deterministic generator for the blind attacker.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

/// A blind attacker's spoofed error NAKs (random PSN, random MSN, B's addresses and port) at
/// a requester with 128 PSNs outstanding: how many frames until the QP dies, if it does
/// within `limit`.
fn frames_until_dead(guards: Guards, seed: u64, limit: u64) -> (Option<u64>, Counters) {
    let (mut net, a, b) = guarded_pair(seed, guards);
    outstanding_writes(&mut net, &a, &b, 128);
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for i in 0..limit {
        let f = nak_to_a(&a, &b, rng.next() & 0x00ff_ffff, NakCode::RemoteAccessError, rng.next() & 0x00ff_ffff);
        let _ = net.dev(0).handle_frame(Instant::ZERO, &f);
        if net.dev(0).qp(a.qpn).unwrap().state() == QpState::Err {
            return (Some(i + 1), *net.dev(0).counters());
        }
    }
    (None, *net.dev(0).counters())
}

/// The figure before and after: with rxe's checks a blind attacker kills the requester once
/// per about 2^24 / 128 = 131,072 frames (the PSN must only fall among the outstanding
/// ones); with the MSN guard no kill in 2^21 frames, though about 16 of them had a PSN in
/// the window and were dropped for their MSN alone (the odds per frame fall by 2^24).
#[test]
fn blind_error_naks_kill_a_requester_without_the_msn_guard_and_not_with_it() {
    let mut kills = Vec::new();
    for seed in 1..=4 {
        let (dead, _) = frames_until_dead(Guards::NONE, seed, 1 << 24);
        kills.push(dead.expect("rxe's checks alone: killed within 2^24 frames"));
    }
    let mean = kills.iter().sum::<u64>() / kills.len() as u64;
    eprintln!(
        "[forgery] blind error NAKs, rxe's checks: killed after {kills:?} frames (mean {mean}; 2^24/128 = 131072)"
    );
    assert!(mean < 1 << 20, "{kills:?}");
    let n = 1u64 << 21;
    let (dead, c) = frames_until_dead(Guards::default(), 5, n);
    eprintln!(
        "[forgery] blind error NAKs, guarded: {dead:?} after {n} frames; {} in-window PSNs dropped for their MSN",
        c.dropped_bad_nak_msn
    );
    assert_eq!(dead, None);
    assert!(c.dropped_bad_nak_msn > 0, "some PSNs hit the window and the MSN stopped them: {c:?}");
}

/// Duplicate READ replays: an attacker repeats a READ request it saw (74 bytes) and the
/// responder sends the READ's 64 KiB toward its peer again. rxe executes every duplicate;
/// the guard executes [`READ_REPLAYS_FREE`] and then one per `read_replay_interval`. Bytes B
/// sends for 1,000 duplicates 10 µs apart, then 10 more 20 ms apart (each one granted: what a
/// requester retrying through an outage needs, and what a slow attacker still gets).
#[test]
fn duplicate_read_replays_are_bounded() {
    const LEN: usize = 65536;
    let mut sent = Vec::new();
    for guards in [Guards::NONE, Guards::default()] {
        let (mut net, a, b) = guarded_pair(44, guards);
        let local = reg(&mut net, 0, a.pd, LEN, ALL_ACCESS, |_| 0);
        let remote = reg(&mut net, 1, b.pd, LEN, ALL_ACCESS, |i| pattern(7, i));
        post_rdma(&mut net, &a, 1, WrOpcode::RdmaRead, &local, LEN, &remote);
        let wcs = wait_wcs(&mut net, &a, 1, 100_000);
        assert_eq!(wcs[0].status, WcStatus::Success);
        let mut dup = Forged::from_peer(1, 2, b.qpn, 100, Opcode::RC_RDMA_READ_REQUEST);
        dup.sport = rc_udp_sport(0, a.qpn, b.qpn);
        dup.ext.reth = Some(RethRepr { va: remote.addr, rkey: remote.rkey, dma_len: LEN as u32 });
        let dup = dup.emit();
        let mut buf = [0u8; 9000];
        let mut replay = |net: &mut Network, count: u64, gap: Duration, t: &mut Instant| {
            let mut bytes = 0u64;
            for _ in 0..count {
                *t += gap;
                net.dev(1).handle_frame(*t, &dup).unwrap();
                while let Some(n) = net.dev(1).poll_transmit(*t, &mut buf) {
                    let p = parse_frame(&buf[..n]).unwrap();
                    bytes += p.payload().len() as u64;
                }
            }
            bytes
        };
        let mut t = net.now();
        let flood = replay(&mut net, 1000, Duration::from_micros(10), &mut t);
        let slow = replay(&mut net, 10, Duration::from_millis(20), &mut t);
        let c = *net.dev(1).counters();
        eprintln!(
            "[forgery] duplicate READs ({}): 1000 × {} B at 10 µs → {flood} B ({}×); 10 at 20 ms → {slow} B; dup_read_limited {}",
            if guards == Guards::NONE { "rxe's checks" } else { "guarded" },
            dup.len(),
            flood / (1000 * dup.len() as u64),
            c.dup_read_limited
        );
        sent.push((flood, slow, c.dup_read_limited));
    }
    let full = LEN as u64;
    assert_eq!(sent[0], (1000 * full, 10 * full, 0), "rxe's checks: every duplicate executed in full");
    assert_eq!(sent[1], (READ_REPLAYS_FREE as u64 * full, 10 * full, 1000 - READ_REPLAYS_FREE as u64));
}
