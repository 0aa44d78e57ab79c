//! "No allocation per packet in steady state": two engines back to back (as in the engine
//! benchmark), warmed up, then a counting global allocator must see zero allocations while
//! thousands of messages — 64-byte WRITEs and SENDs, 1 MiB WRITEs at 4096 MTU, READs and
//! atomics — are posted, segmented, sent, received, executed, acknowledged and completed.
//! The allocator counts per thread, so the test harness's other threads cannot disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use uroce_transport::sim::b2b::BackToBack;
use uroce_transport::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the thread-local counter is a
// `const`-initialised `Cell` (no allocation, no lazy initialisation inside the allocator).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn steady_state_allocates_nothing() {
    let cases: [(WrOpcode, Mtu, usize, u64); 6] = [
        (WrOpcode::RdmaWrite, Mtu::Mtu1024, 64, 5000),
        (WrOpcode::Send, Mtu::Mtu1024, 64, 5000),
        (WrOpcode::RdmaWrite, Mtu::Mtu4096, 1 << 20, 40),
        (WrOpcode::Send, Mtu::Mtu4096, 1 << 16, 200),
        (WrOpcode::RdmaRead, Mtu::Mtu1024, 5000, 1000),
        (WrOpcode::AtomicFetchAndAdd, Mtu::Mtu1024, 8, 2000),
    ];
    for (op, mtu, size, msgs) in cases {
        let at_start = allocs();
        let mut p = BackToBack::new(mtu, size);
        assert!(allocs() > at_start, "the counting allocator sees the setup's allocations");
        // Warm-up: queues, rings and tables reach their working sizes.
        p.run(op, size, msgs, 16, 8);
        let (before, frames) = (allocs(), p.frames);
        p.run(op, size, msgs, 16, 8);
        let n = allocs() - before;
        let f = p.frames - frames;
        assert!(f >= msgs, "{op:?}: only {f} frames for {msgs} messages");
        assert_eq!(n, 0, "{op:?} {size} B at {mtu:?}: {n} allocations over {msgs} messages / {f} frames");
        assert_eq!(p.rejected, 0, "{op:?}: frames refused");
    }
}
