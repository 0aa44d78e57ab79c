//! "No allocation per packet in steady state": two engines back to back (as in the engine
//! benchmark), warmed up, then a counting global allocator must see zero allocations while
//! thousands of messages — 64-byte WRITEs and SENDs, 1 MiB WRITEs at 4096 MTU, READs and
//! atomics — are posted, segmented, sent, received, executed, acknowledged and completed.
//! The allocator counts per thread, so the test harness's other threads cannot disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
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

struct B2b {
    a: Device,
    b: Device,
    qa: QpEnd,
    qb: QpEnd,
    src: MrInfo,
    dst: MrInfo,
    buf: Vec<u8>,
    posted: u64,
    done: u64,
    frames: u64,
}

fn setup(mtu: Mtu, size: usize) -> B2b {
    let mut net = Network::new(1, LinkConfig::default());
    net.add(device(1, 1));
    net.add(device(2, 1));
    let cap = QpCap { max_send_wr: 256, max_recv_wr: 1024, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let o = QpOptions { mtu, cap, ..Default::default() };
    let (qa, qb) = connect(&mut net, 0, 1, &o).unwrap();
    let src = reg(&mut net, 0, qa.pd, size.max(64), ALL_ACCESS, |i| i as u8);
    let dst = reg(&mut net, 1, qb.pd, size.max(64), ALL_ACCESS, |_| 0);
    let mut d = net.into_devices().into_iter();
    let (a, b) = (d.next().unwrap(), d.next().unwrap());
    B2b { a, b, qa, qb, src, dst, buf: vec![0u8; 9216], posted: 0, done: 0, frames: 0 }
}

impl B2b {
    /// `msgs` messages of `size` bytes, at most 16 outstanding, every 8th signaled.
    fn run(&mut self, op: WrOpcode, size: usize, msgs: u64) {
        let now = Instant::ZERO;
        let target = self.posted + msgs;
        let mut wc = [WorkCompletion::default(); 32];
        while self.done < target {
            while self.posted < target && self.posted - self.done < 16 {
                if op == WrOpcode::Send {
                    let r = [Sge { addr: self.dst.addr, length: size as u32, lkey: self.dst.lkey }];
                    self.b.post_recv(self.qb.qpn, &RecvWr { wr_id: self.posted, sg_list: &r }).unwrap();
                }
                let atomic = matches!(op, WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp);
                let len = if atomic { 8 } else { size as u32 };
                let s = [Sge { addr: self.src.addr, length: len, lkey: self.src.lkey }];
                let last = self.posted + 1 == target;
                let flags = if self.posted % 8 == 7 || last { SendFlags::SIGNALED } else { SendFlags::NONE };
                let wr = SendWr {
                    wr_id: self.posted,
                    opcode: op,
                    sg_list: &s,
                    send_flags: flags,
                    remote_addr: self.dst.addr,
                    rkey: self.dst.rkey,
                    compare_add: 1,
                    swap: 2,
                    ..Default::default()
                };
                self.a.post_send(self.qa.qpn, &wr).unwrap();
                self.posted += 1;
            }
            while let Some(n) = self.a.poll_transmit(now, &mut self.buf) {
                self.b.handle_frame(now, &self.buf[..n]).unwrap();
                self.frames += 1;
            }
            while let Some(n) = self.b.poll_transmit(now, &mut self.buf) {
                self.a.handle_frame(now, &self.buf[..n]).unwrap();
                self.frames += 1;
            }
            loop {
                let n = self.a.poll_cq(self.qa.cq, &mut wc).unwrap();
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    self.done = w.wr_id + 1;
                }
                if n < wc.len() {
                    break;
                }
            }
            while self.b.poll_cq(self.qb.cq, &mut wc).unwrap() == wc.len() {}
        }
    }
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
        let mut p = setup(mtu, size);
        assert!(allocs() > at_start, "the counting allocator sees the setup's allocations");
        // Warm-up: queues, rings and tables reach their working sizes.
        p.run(op, size, msgs);
        let (before, frames) = (allocs(), p.frames);
        p.run(op, size, msgs);
        let n = allocs() - before;
        let f = p.frames - frames;
        assert!(f >= msgs, "{op:?}: only {f} frames for {msgs} messages");
        assert_eq!(n, 0, "{op:?} {size} B at {mtu:?}: {n} allocations over {msgs} messages / {f} frames");
    }
}
