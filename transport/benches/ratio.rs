//! The 1 MiB RDMA WRITE against its copy + CRC-32 baseline, measured interleaved: each round
//! times a batch of engine messages, then the same number of baseline passes over fresh
//! buffers, then over the engine's own regions, and the ratio is taken per round. Criterion
//! (`benches/engine.rs`) measures one function for seconds and then the next, so a change in
//! the CPU's clock or in what else the host runs between the two moves their ratio; here both
//! sides of every ratio share the same half second.
//!
//! `cargo bench -p uroce-transport --bench ratio` (`-- ROUNDS MSGS`, default 40 rounds of 100)

use std::hint::black_box;
use std::time::Instant as StdInstant;
use uroce_transport::sim::b2b::BackToBack;
use uroce_transport::*;

const MIB: usize = 1 << 20;

/// The baseline: copy `src` into `dst` and CRC it, per packet of `pkt` bytes.
fn copy_crc(src: &[u8], dst: &mut [u8], pkt: usize) -> u32 {
    let mut c = 0;
    for (s, d) in src.chunks(pkt).zip(dst.chunks_mut(pkt)) {
        d.copy_from_slice(s);
        c ^= crc32fast::hash(d);
    }
    c
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are ours.
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = nums.first().copied().unwrap_or(40).max(1);
    let msgs = nums.get(1).copied().unwrap_or(100).max(1);

    let mut w = BackToBack::new(Mtu::Mtu4096, MIB);
    let src = vec![7u8; MIB];
    let mut dst = vec![0u8; MIB];
    // Warm up every side (page faults, caches, branch predictors).
    w.run(WrOpcode::RdmaWrite, MIB, msgs as u64, 64, 16);
    let mut sink = 0u32;
    for _ in 0..msgs {
        sink ^= copy_crc(black_box(&src), &mut dst, 4096);
    }

    let (mut engine, mut fresh, mut mr, mut r_fresh, mut r_mr) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let t = StdInstant::now();
        w.run(WrOpcode::RdmaWrite, MIB, msgs as u64, 64, 16);
        let e = t.elapsed().as_secs_f64() * 1e6 / msgs as f64;

        let t = StdInstant::now();
        for _ in 0..msgs {
            sink ^= copy_crc(black_box(&src), &mut dst, 4096);
        }
        let f = t.elapsed().as_secs_f64() * 1e6 / msgs as f64;

        let s = w.a.mr(w.src.lkey).expect("source MR").as_slice();
        let d = w.b.mr_mut(w.dst.lkey).expect("destination MR").as_mut_slice();
        let t = StdInstant::now();
        for _ in 0..msgs {
            sink ^= copy_crc(black_box(s), d, 4096);
        }
        let m = t.elapsed().as_secs_f64() * 1e6 / msgs as f64;

        engine.push(e);
        fresh.push(f);
        mr.push(m);
        r_fresh.push(100.0 * f / e);
        r_mr.push(100.0 * m / e);
    }
    black_box(sink);
    let lo = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let hi = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    println!("1 MiB RDMA WRITE, 4096 MTU, two engines on one core, vs copy + CRC-32 of the same bytes");
    println!("ICRC kernels: {}", uroce_wire::icrc::kernels());
    println!("interleaved: {rounds} rounds of {msgs} messages / passes each; medians (min .. max)");
    println!(
        "  engine              {:6.1} µs per MiB ({:.1} .. {:.1}) = {:.2} GiB/s",
        median(&mut engine.clone()),
        lo(&engine),
        hi(&engine),
        1e6 / median(&mut engine.clone()) / 1024.0
    );
    println!(
        "  baseline, fresh     {:6.1} µs per MiB ({:.1} .. {:.1})",
        median(&mut fresh.clone()),
        lo(&fresh),
        hi(&fresh)
    );
    println!("  baseline, same MRs  {:6.1} µs per MiB ({:.1} .. {:.1})", median(&mut mr.clone()), lo(&mr), hi(&mr));
    println!(
        "  engine / baseline:  {:.1} % against fresh buffers ({:.1} .. {:.1}), {:.1} % against the same regions ({:.1} .. {:.1})",
        median(&mut r_fresh.clone()),
        lo(&r_fresh),
        hi(&r_fresh),
        median(&mut r_mr.clone()),
        lo(&r_mr),
        hi(&r_mr)
    );
}
