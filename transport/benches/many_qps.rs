//! 10,000 QP pairs against one, in the same run: RDMA WRITEs spread round-robin over 10,000
//! connected RC QP pairs (consecutive messages on different QPs, so each finds its QP's state
//! cold) against the same WRITEs on a single pair, at most 64 outstanding in all, every one
//! signaled, two engines back to back on one core. Measured interleaved, a round of each side
//! in turn, and the ratio taken per round (as `benches/ratio.rs` does): a change in the CPU's
//! clock or the host's load between rounds moves both sides.
//!
//! `cargo bench -p uroce-transport --bench many_qps` (`-- ROUNDS QPS`, default 15 rounds of
//! 10,000 QPs)

use std::time::Instant as StdInstant;
use uroce_transport::sim::many::ManyQps;
use uroce_transport::*;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = nums.first().copied().unwrap_or(15).max(1);
    let n = nums.get(1).copied().unwrap_or(10_000).max(1);
    let t = StdInstant::now();
    let mut many = ManyQps::new(n, Mtu::Mtu4096, 1 << 16, 4).expect("QP pairs");
    println!("set up {n} connected QP pairs in {:.2} s", t.elapsed().as_secs_f64());
    println!("ICRC kernels: {}", uroce_wire::icrc::kernels());
    let mut one = ManyQps::new(1, Mtu::Mtu4096, 1 << 16, 256).expect("one QP pair");
    println!("{:>8} {:>10} {:>14} {:>14} {:>8}", "size", "msgs/round", "1 QP", format!("{n} QPs"), "ratio");
    for size in [64usize, 4096, 1 << 16] {
        // Every QP gets at least one message per round; rounds of at least ~50 ms.
        let msgs = (n as u64).max(((64 << 20) / size as u64).min(400_000));
        // Warm-up: every QP's queues and every table at working size.
        one.run(size, msgs, 64);
        many.run(size, msgs, 64);
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = StdInstant::now();
            one.run(size, msgs, 64);
            let t1 = t.elapsed().as_secs_f64();
            let t = StdInstant::now();
            many.run(size, msgs, 64);
            let tn = t.elapsed().as_secs_f64();
            a.push(msgs as f64 / t1);
            b.push(msgs as f64 / tn);
            r.push(t1 / tn);
        }
        let (a, b, r) = (median(&mut a), median(&mut b), median(&mut r));
        let unit = |rate: f64| {
            if size >= 4096 {
                format!("{:.2} GiB/s", rate * size as f64 / (1u64 << 30) as f64)
            } else {
                format!("{:.2} M msg/s", rate / 1e6)
            }
        };
        println!("{size:>8} {msgs:>10} {:>14} {:>14} {r:>8.3}", unit(a), unit(b));
    }
}
