//! What DCQCN costs the engine per packet: 1 MiB RDMA WRITEs with a QP whose DCQCN limiter is
//! running (started by a CNP; its rate far above the link's, so it never holds a packet back,
//! but every packet goes through the pacer and the byte counter, and the rate-increase timer
//! fires) against the same WRITEs with congestion control off, both with a simulated 100 Gbit/s
//! clock, timed interleaved, ratio per round (target: ≤ 5 % more time).
//!
//! `cargo bench -p uroce-transport --bench dcqcn` (`-- ROUNDS MSGS`, default 30 rounds of 50)

use std::time::Instant as StdInstant;
use uroce_transport::cc::dcqcn::Params;
use uroce_transport::cc::{Algorithm, CongestionConfig, NpConfig};
use uroce_transport::sim::b2b::BackToBack;
use uroce_transport::*;

const MIB: usize = 1 << 20;
const CLOCK: u64 = 100_000_000_000;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = nums.first().copied().unwrap_or(30).max(1);
    let msgs = nums.get(1).copied().unwrap_or(50).max(1) as u64;

    let mut off = BackToBack::new(Mtu::Mtu4096, MIB);
    off.set_clock(CLOCK);
    // A line rate of 20 Tbit/s under a 10 Tbit/s ceiling: the limiter, once started, stays
    // (it is released only at line rate) and paces at ≥ 5 Tbit/s, 50 times the clock's link.
    let mut p = Params::connectx(20_000_000_000_000);
    p.rpg_max_rate = 10_000_000;
    let cc = CongestionConfig { ecn: true, np: Some(NpConfig::default()), rp: Some(Algorithm::Dcqcn(p)) };
    let mut on = BackToBack::with_config(Mtu::Mtu4096, MIB, |c| c.cc = cc);
    on.set_clock(CLOCK);
    on.cnp_to_a().expect("the CNP is accepted");
    let rate0 = on.a.qp(on.qa.qpn).and_then(|q| q.cc_rate()).expect("limited");
    for w in [&mut off, &mut on] {
        w.run(WrOpcode::RdmaWrite, MIB, msgs, 64, 16);
    }
    let (mut t_off, mut t_on, mut ratio) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        let t = StdInstant::now();
        off.run(WrOpcode::RdmaWrite, MIB, msgs, 64, 16);
        let a = t.elapsed().as_secs_f64() * 1e6 / msgs as f64;
        let t = StdInstant::now();
        on.run(WrOpcode::RdmaWrite, MIB, msgs, 64, 16);
        let b = t.elapsed().as_secs_f64() * 1e6 / msgs as f64;
        t_off.push(a);
        t_on.push(b);
        ratio.push(b / a);
    }
    let rate1 = on.a.qp(on.qa.qpn).and_then(|q| q.cc_rate()).expect("still limited");
    let c = *on.a.counters();
    assert_eq!(c.rp_cnp_handled, 1);
    assert!(rate1 > rate0, "the limiter ran its increases");
    let lo = ratio.iter().copied().fold(f64::MAX, f64::min);
    let hi = ratio.iter().copied().fold(f64::MIN, f64::max);
    println!("1 MiB RDMA WRITE, 4096 MTU, two engines on one core, simulated 100 Gbit/s clock");
    println!("interleaved: {rounds} rounds of {msgs} messages each; medians");
    println!("  congestion control off     {:6.1} µs per MiB", median(&mut t_off));
    println!(
        "  DCQCN limiter running      {:6.1} µs per MiB (rate {:.2} → {:.2} Tbit/s over {:.1} ms simulated)",
        median(&mut t_on),
        rate0 as f64 / 1e12,
        rate1 as f64 / 1e12,
        on.now().as_nanos() as f64 / 1e6
    );
    println!("  on / off: {:.3} (min {lo:.3}, max {hi:.3}); target ≤ 1.05", median(&mut ratio));
}
