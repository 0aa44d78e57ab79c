//! The engine's memory per idle QP: a counting global allocator measures what creating and
//! connecting 10,000 RC QP pairs allocates (the QP objects, their tables and frame templates,
//! the device's maps and queues), with send and receive queues of one WQE of one SGE. Target:
//! at most 4 KiB per QP, queues included.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use uroce_transport::sim::many::ManyQps;
use uroce_transport::*;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards every call unchanged to the system allocator; the counter is a static atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as i64 - l.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn an_idle_qp_costs_under_4_kib() {
    const N: usize = 10_000;
    // The fixed part: two devices, their CQs and 64-byte regions, and no QPs.
    let base0 = LIVE.load(Ordering::Relaxed);
    let zero = ManyQps::new(0, Mtu::Mtu1024, 64, 1).unwrap();
    let fixed = LIVE.load(Ordering::Relaxed) - base0;
    drop(zero);
    let base = LIVE.load(Ordering::Relaxed);
    let m = ManyQps::new(N, Mtu::Mtu1024, 64, 1).unwrap();
    let total = LIVE.load(Ordering::Relaxed) - base - fixed;
    // The harness's bookkeeping vectors (QPNs, PSNs) are not the engine's.
    let harness = (m.qa.capacity() + m.qb.capacity()) * 4 + m.psns.capacity() * 8;
    let per_qp = (total - harness as i64) as f64 / (2 * N) as f64;
    println!("engine memory per idle RC QP (queues of 1 WQE / 1 SGE included): {per_qp:.0} bytes");
    assert!(per_qp > 300.0, "the measurement sees the QPs ({per_qp:.0} bytes)");
    assert!(per_qp <= 4096.0, "{per_qp:.0} bytes per idle QP");
}
