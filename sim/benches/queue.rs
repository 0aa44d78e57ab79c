//! The event queue against a binary heap keyed by (time, sequence), on the classic "hold"
//! workload of discrete-event simulation: a steady population of pending events; each step
//! pops the earliest and pushes one a random delay later. The delays mimic a 100 Gbit/s
//! fabric: mostly 0.1–2 µs (serialisation, propagation), some 50 µs (congestion-control
//! timers), a few 60 ms (retransmission timers). Prints ns per hold for both and the ratio.
//!
//! `cargo bench -p uroce-sim --bench queue` (`-- POPULATION`, default 128)

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;
use uroce_sim::queue::EventQueue;

const HOLDS: u64 = 4_000_000;

fn delays(n: usize) -> Vec<u64> {
    let mut r = ChaCha8Rng::seed_from_u64(7);
    (0..n)
        .map(|_| match r.next_u32() % 100 {
            0 => 60_000_000,
            1..=4 => 50_000,
            _ => 100 + (r.next_u32() % 1900) as u64,
        })
        .collect()
}

fn wheel(pop: usize, d: &[u64]) -> (f64, u64) {
    let mut q = EventQueue::new();
    for (i, &x) in d.iter().take(pop).enumerate() {
        q.push(x, i as u32);
    }
    let t0 = Instant::now();
    let mut sum = 0u64;
    for i in 0..HOLDS {
        let (t, e) = q.pop_until(u64::MAX).expect("an event");
        sum = sum.wrapping_add(t ^ e as u64);
        q.push(t + d[(i as usize) % d.len()], e);
    }
    (t0.elapsed().as_nanos() as f64 / HOLDS as f64, sum)
}

fn heap(pop: usize, d: &[u64]) -> (f64, u64) {
    let mut h = BinaryHeap::new();
    let mut seq = 0u64;
    for (i, &x) in d.iter().take(pop).enumerate() {
        seq += 1;
        h.push(Reverse((x, seq, i as u32)));
    }
    let t0 = Instant::now();
    let mut sum = 0u64;
    for i in 0..HOLDS {
        let Reverse((t, _, e)) = h.pop().expect("an event");
        sum = sum.wrapping_add(t ^ e as u64);
        seq += 1;
        h.push(Reverse((t + d[(i as usize) % d.len()], seq, e)));
    }
    (t0.elapsed().as_nanos() as f64 / HOLDS as f64, sum)
}

fn main() {
    let pop = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(128usize);
    let d = delays(1 << 16);
    println!("hold model, {pop} pending events, {HOLDS} holds");
    for run in 0..3 {
        let (w, sw) = wheel(pop, &d);
        let (h, sh) = heap(pop, &d);
        assert_eq!(sw, sh, "the two queues popped different events");
        println!("  run {run}: wheel {w:.1} ns/hold, binary heap {h:.1} ns/hold, heap/wheel {:.2}", h / w);
    }
}
