//! The fabric with the real engine: flows complete, data crosses switches, PFC and ECN act.

use core::time::Duration;
use uroce_sim::fabric::{FlowSpec, HostConfig, LinkSpec};
use uroce_sim::switch::SwitchConfig;
use uroce_sim::topology;
use uroce_transport::cc::dcqcn::Params;
use uroce_transport::cc::{Algorithm, CongestionConfig, NpConfig};
use uroce_transport::Instant;

const G100: u64 = 100_000_000_000;

fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

fn link() -> LinkSpec {
    LinkSpec::new(G100, us(1))
}

#[test]
fn one_flow_across_a_dumbbell_runs_at_line_rate() {
    let t = topology::dumbbell(1, 1, HostConfig::default(), SwitchConfig::default(), link(), link());
    let mut f = t.fabric;
    f.add_flow(FlowSpec { src: 0, dst: 1, bytes: Some(8 << 20), start: Duration::ZERO, msg: 64 << 10, window: 16 })
        .unwrap();
    f.run_until(Instant::from_nanos(5_000_000));
    let fl = &f.flows()[0];
    assert_eq!(fl.errors, 0);
    let done = fl.done_at.expect("8 MiB written");
    assert!(f.flow_data_intact(0), "the destination holds the source's bytes");
    // 8 MiB at 100 Gbit/s of frames (4096 payload in 4158 bytes on the wire with gap) plus a
    // few µs of path: about 700 µs.
    let ideal = (8u64 << 20) as f64 * 8.0 / 1e11 * (4096.0 + 62.0 + 24.0) / 4096.0;
    let took = done.as_nanos() as f64 / 1e9;
    assert!(took > ideal && took < ideal * 1.1 + 20e-6, "took {took} s, ideal {ideal} s");
}

#[test]
fn incast_without_cc_pauses_with_pfc_and_loses_nothing() {
    let t = topology::incast(2, 8, HostConfig::default(), SwitchConfig::default(), link());
    let mut f = t.fabric;
    for s in 0..8 {
        f.add_flow(FlowSpec { src: s, dst: 8, bytes: Some(2 << 20), start: Duration::ZERO, msg: 64 << 10, window: 16 })
            .unwrap();
    }
    f.run_until(Instant::from_nanos(20_000_000));
    for fl in f.flows() {
        assert!(fl.done_at.is_some() && fl.errors == 0, "{fl:?}");
    }
    let sw = f.switch(t.watch[0].0).stats();
    assert!(sw.pause_sent > 0, "{sw:?}");
    assert_eq!(sw.drop_headroom + sw.drop_buffer, 0, "{sw:?}");
    let retrans: u64 = (0..9).map(|h| f.host(h).dev.counters().retransmitted_pkts).sum();
    assert_eq!(retrans, 0, "lossless");
}

#[test]
fn incast_with_dcqcn_marks_notifies_and_slows_down() {
    let cc = CongestionConfig {
        ecn: true,
        np: Some(NpConfig { min_time_between_cnps: us(50), ..NpConfig::default() }),
        rp: Some(Algorithm::Dcqcn(Params::paper(G100))),
    };
    let host = HostConfig { cc, ..HostConfig::default() };
    let t = topology::incast(3, 8, host, SwitchConfig::default(), link());
    let mut f = t.fabric;
    for s in 0..8 {
        f.add_flow(FlowSpec { src: s, dst: 8, bytes: None, start: Duration::ZERO, msg: 64 << 10, window: 16 }).unwrap();
    }
    f.sample_every(us(50), &t.watch);
    f.run_until(Instant::from_nanos(5_000_000));
    let sw = f.switch(t.watch[0].0).stats();
    assert!(sw.ecn_marked > 0, "{sw:?}");
    let cnps = f.host(8).dev.counters().np_cnp_sent;
    let handled: u64 = (0..8).map(|h| f.host(h).dev.counters().rp_cnp_handled).sum();
    assert!(cnps > 0 && handled > 0 && handled <= cnps, "{cnps} {handled}");
    // The start's burst fills the queue past Kmax and PFC pauses; DCQCN (the paper's
    // profile, CNPs 50 µs apart) cuts every flow, and from 0.7 ms on the queue stays below
    // Kmax, no pause is sent, and every flow's rate climbs back.
    let s = f.samples();
    let at = |t: u64| s.iter().position(|x| x.t >= Instant::from_nanos(t)).unwrap();
    let kmax = SwitchConfig::default().red.unwrap().kmax;
    assert!(s[0].ports[0].0 > kmax, "the burst: {:?}", s[0]);
    assert!(s[at(700_000)..].iter().all(|x| x.ports[0].0 < kmax), "{s:?}");
    assert_eq!(s[at(700_000)].pauses, s.last().unwrap().pauses, "no pauses after convergence");
    let (mid, end) = (&s[at(700_000)].flows, &s.last().unwrap().flows);
    assert!(mid.iter().zip(end).all(|(m, e)| m.0 < 50.0 && e.0 > m.0), "{mid:?} → {end:?}");
}

#[test]
fn corrupted_frames_are_dropped_by_the_nic_and_recovered_by_go_back_n() {
    // one bit flipped in 2 % of the frames on the bottleneck link
    let bad = LinkSpec { corrupt: 0.02, ..link() };
    let t = topology::dumbbell(1, 1, HostConfig::default(), SwitchConfig::default(), link(), bad);
    let mut f = t.fabric;
    f.add_flow(FlowSpec { src: 0, dst: 1, bytes: Some(4 << 20), start: Duration::ZERO, msg: 64 << 10, window: 4 })
        .unwrap();
    f.run_until(Instant::from_nanos(200_000_000));
    let fl = &f.flows()[0];
    assert!(fl.done_at.is_some() && fl.errors == 0, "{fl:?}");
    assert!(f.flow_data_intact(0), "the destination holds the source's bytes");
    let corrupted: u64 =
        f.switches().iter().flat_map(|&s| (0..2).map(move |p| (s, p))).map(|(s, p)| f.port_stats(s, p).corrupted).sum();
    let dropped: u64 = (0..2).map(|h| f.host(h).rx_icrc_dropped).sum();
    let refused: u64 = (0..2).map(|h| f.host(h).rx_refused).sum();
    let retrans = f.host(0).dev.counters().retransmitted_pkts;
    assert!(corrupted > 10, "{corrupted} frames corrupted");
    // Nearly every flipped bit is caught by the ICRC; one in a field it masks (ECN, TTL, ...)
    // or outside it (Ethernet header) is not, and then the engine decides.
    assert!(
        dropped > 0 && dropped + refused <= corrupted,
        "corrupted {corrupted}, NIC drops {dropped}, refused {refused}"
    );
    assert!(retrans > 0, "Go-Back-N resent what was dropped");
    assert_eq!(f.host(1).dev.counters().icrc_err, 0, "the engine never saw a bad ICRC");
}
