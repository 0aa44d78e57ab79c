//! Pacing: a QP with a rate limit sends each request packet `bits / rate` after the previous
//! one, to the nanosecond on the simulated clock; `poll_timeout` names each departure; the data
//! arrives whole.

mod common;

use common::*;
use std::cell::RefCell;
use std::rc::Rc;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::{parse_frame, EthernetAddress};

/// `(time, length, is_request)` of every frame node 0 (MAC `mac(1)`) puts on the wire.
type Log = Rc<RefCell<Vec<(Instant, usize, bool)>>>;

fn tap(net: &mut uroce_transport::sim::Network) -> Log {
    let log: Log = Rc::default();
    let l = log.clone();
    let me = mac(1);
    net.set_tap(move |t, f| {
        if EthernetAddress(f[6..12].try_into().unwrap()) != me {
            return;
        }
        let p = parse_frame(f).expect("the engine sends well-formed frames");
        let req = p.roce.bth.opcode.info().is_some_and(|i| i.is_request());
        l.borrow_mut().push((t, f.len(), req));
    });
    log
}

/// A pair with a `len`-byte source on node 0 and destination on node 1, node 0's QP limited to
/// `rate` bit/s (`None`: unlimited), and one signaled `len`-byte RDMA WRITE posted; returns the
/// network, node 0's QP, the destination region and node 0's frame log.
fn posted_write(rate: Option<u64>, len: usize, mtu: Mtu) -> (Network, QpEnd, MrInfo, Log) {
    let o = QpOptions { mtu, ..Default::default() };
    let (mut net, a, b) = pair(7, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, len, ALL_ACCESS, |i| pattern(1, i));
    let dst = reg(&mut net, 1, b.pd, len, ALL_ACCESS, |_| 0);
    net.dev(0).set_rate_limit(a.qpn, rate).unwrap();
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().rate_limit(), rate);
    let log = tap(&mut net);
    post_rdma(&mut net, &a, 1, WrOpcode::RdmaWrite, &src, len, &dst);
    (net, a, dst, log)
}

/// Run one `len`-byte RDMA WRITE from node 0 with the QP limited to `rate` bit/s; returns the
/// request frames' departures and lengths.
fn paced_write(rate: u64, len: usize, mtu: Mtu) -> Vec<(Instant, usize)> {
    // Driven by hand for the first packets: the device names each departure as its timeout.
    let (mut net, ..) = posted_write(Some(rate), len, mtu);
    let mut buf = vec![0u8; 9300];
    let t0 = Instant::from_nanos(1_000);
    let d = net.dev(0);
    let n0 = d.poll_transmit(t0, &mut buf).expect("the first packet leaves at once");
    assert_eq!(d.poll_transmit(t0, &mut buf), None, "the second waits for its departure");
    let due = t0 + core::time::Duration::from_nanos((n0 as u128 * 8 * 1_000_000_000 / rate as u128) as u64);
    assert_eq!(d.poll_timeout(), Some(due), "poll_timeout names the departure");
    let early = Instant::from_nanos(due.as_nanos() - 1);
    d.handle_timeout(early);
    assert_eq!(d.poll_transmit(early, &mut buf), None, "not a nanosecond early");
    d.handle_timeout(due);
    assert!(d.poll_transmit(due, &mut buf).is_some(), "and at the departure it goes");

    // A fresh pair for the logged run, driven by the simulator.
    let (mut net, a, dst, log) = posted_write(Some(rate), len, mtu);
    let wcs = wait_wcs(&mut net, &a, 1, 1_000_000);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(mr_bytes(&mut net, 1, &dst), (0..len).map(|i| pattern(1, i)).collect::<Vec<_>>());
    let all = log.borrow().clone();
    all.into_iter().filter(|f| f.2).map(|f| (f.0, f.1)).collect()
}

/// Each departure is the previous one plus the previous frame's bits at `rate`, with the
/// remainders carried: `t_k = t_0 + floor(sum_{i<k} bits_i * 1e9 / rate)`.
fn check_spacing(frames: &[(Instant, usize)], rate: u64) {
    let t0 = frames[0].0.as_nanos();
    let mut bits: u128 = 0;
    for (k, &(t, _)) in frames.iter().enumerate() {
        let want = t0 + (bits * 1_000_000_000 / rate as u128) as u64;
        assert_eq!(t.as_nanos(), want, "frame {k} of {}: departure", frames.len());
        bits += frames[k].1 as u128 * 8;
    }
}

#[test]
fn a_rate_limited_write_departs_on_schedule() {
    // 1 Gbit/s: a 1082-byte WRITE MIDDLE frame at MTU 1024 (Ethernet, IPv4, UDP, BTH, payload, ICRC) is 8656 ns.
    let frames = paced_write(1_000_000_000, 64 * 1024, Mtu::Mtu1024);
    assert_eq!(frames.len(), 64);
    check_spacing(&frames, 1_000_000_000);
    let gaps: Vec<u64> = frames.windows(2).map(|w| w[1].0.as_nanos() - w[0].0.as_nanos()).collect();
    assert_eq!(gaps[1], 1082 * 8, "MIDDLE frames at 1 Gbit/s");
    assert_eq!(gaps[0], (1082 + 16) * 8, "the FIRST carries a RETH");
}

#[test]
fn an_uneven_rate_carries_its_remainders() {
    // 3 Gbit/s does not divide a frame's bits into whole nanoseconds: the schedule still has
    // no drift over 256 frames.
    let frames = paced_write(3_000_000_000, 256 * 4096, Mtu::Mtu4096);
    assert_eq!(frames.len(), 256);
    check_spacing(&frames, 3_000_000_000);
}

#[test]
fn without_a_limit_a_window_leaves_at_once() {
    let (mut net, a, _, log) = posted_write(None, 16 * 1024, Mtu::Mtu1024);
    let d = net.dev(0);
    assert_eq!(d.set_rate_limit(a.qpn, Some(0)), Err(VerbsError::InvalidArgument("rate limit 0")));
    d.set_rate_limit(a.qpn, Some(1_000_000)).unwrap();
    d.set_rate_limit(a.qpn, None).unwrap();
    assert_eq!(wait_wcs(&mut net, &a, 1, 100_000)[0].status, WcStatus::Success);
    let reqs: Vec<Instant> = log.borrow().iter().filter(|f| f.2).map(|f| f.0).collect();
    assert_eq!(reqs.len(), 16);
    assert!(reqs.iter().all(|t| *t == reqs[0]), "unpaced: all 16 at one instant, {reqs:?}");
}
