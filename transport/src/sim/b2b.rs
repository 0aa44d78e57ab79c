//! Two engines back to back in memory on one thread: frames handed from one
//! `poll_transmit` straight to the other's `handle_frame`, no network in between, and no
//! clock unless one is asked for ([`BackToBack::set_clock`]). The engine benchmarks
//! (`benches/engine.rs`, `ratio`, `dcqcn`) and the steady-state allocation test
//! (`tests/no_alloc.rs`) drive the engine this way.

use super::setup::{connect, device_with, reg, QpEnd, QpOptions, ALL_ACCESS};
use super::{LinkConfig, Network};
use crate::config::DeviceConfig;
use crate::device::{Device, MrInfo};
use crate::time::Instant;
use crate::verbs::*;
use std::net::IpAddr;

/// A connected RC QP pair, A → B, with a source MR on A and a destination MR on B.
pub struct BackToBack {
    /// The requester's device.
    pub a: Device,
    /// The responder's device.
    pub b: Device,
    /// A's end of the QP pair.
    pub qa: QpEnd,
    /// B's end.
    pub qb: QpEnd,
    /// A's region (filled with `i as u8`).
    pub src: MrInfo,
    /// B's region (zeroed).
    pub dst: MrInfo,
    buf: Vec<u8>,
    /// Work requests posted so far.
    pub posted: u64,
    /// Work requests completed so far.
    pub done: u64,
    /// Frames handed across so far (both directions).
    pub frames: u64,
    /// Frames a device refused (`handle_frame` errors).
    pub rejected: u64,
    /// The simulated time, and the rate (bits/s) at which A's frames advance it (0: frozen).
    now: Instant,
    clock_rate: u64,
}

impl BackToBack {
    /// Connect a QP pair at path MTU `mtu`, with regions of `size` bytes (at least 64).
    pub fn new(mtu: Mtu, size: usize) -> BackToBack {
        BackToBack::with_config(mtu, size, |_| {})
    }

    /// [`BackToBack::new`] with both devices' configuration changed by `f` first.
    pub fn with_config(mtu: Mtu, size: usize, f: impl Fn(&mut DeviceConfig)) -> BackToBack {
        let mut net = Network::new(1, LinkConfig::default());
        net.add(device_with(1, 1, &f));
        net.add(device_with(2, 1, &f));
        let cap = QpCap { max_send_wr: 256, max_recv_wr: 1024, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let o = QpOptions { mtu, cap, ..Default::default() };
        let (qa, qb) = connect(&mut net, 0, 1, &o).expect("connect a QP pair");
        let src = reg(&mut net, 0, qa.pd, size.max(64), ALL_ACCESS, |i| i as u8);
        let dst = reg(&mut net, 1, qb.pd, size.max(64), ALL_ACCESS, |_| 0);
        let mut d = net.into_devices().into_iter();
        let (a, b) = (d.next().expect("device A"), d.next().expect("device B"));
        let buf = vec![0u8; 9216 + 64];
        BackToBack {
            a,
            b,
            qa,
            qb,
            src,
            dst,
            buf,
            posted: 0,
            done: 0,
            frames: 0,
            rejected: 0,
            now: Instant::ZERO,
            clock_rate: 0,
        }
    }

    /// Let time pass: each frame A sends moves the clock on by its bits at `bits_per_sec`, as
    /// on a link of that rate, and both devices' timers fire when due (0: time stands still,
    /// the default). Pacing and congestion control need it.
    pub fn set_clock(&mut self, bits_per_sec: u64) {
        self.clock_rate = bits_per_sec;
    }

    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Hand A a CNP from B for A's QP (what B's notification point would send), at the
    /// current time.
    pub fn cnp_to_a(&mut self) -> Result<(), crate::RxDrop> {
        let (ca, cb) = (self.a.config(), self.b.config());
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (cb.gids[1].to_ip(), ca.gids[1].to_ip()) else {
            return Err(crate::RxDrop::WrongDestination);
        };
        let f = super::cnp_frame((cb.mac, src), (ca.mac, dst), self.qa.qpn);
        self.a.handle_frame(self.now, &f)
    }

    /// Run `msgs` messages of `size` bytes with `op` (atomics: 8 bytes, FETCH_ADD 1 /
    /// CMP_SWP 1 → 2), at most `window` outstanding, every `signal_every`-th signaled (and
    /// the last). SENDs get a receive posted on B first. Panics on a failed completion.
    #[inline]
    pub fn run(&mut self, op: WrOpcode, size: usize, msgs: u64, window: u64, signal_every: u64) {
        let target = self.posted + msgs;
        let mut wc = [WorkCompletion::default(); 32];
        while self.done < target {
            while self.posted < target && self.posted - self.done < window {
                if op == WrOpcode::Send {
                    let r = [Sge { addr: self.dst.addr, length: size as u32, lkey: self.dst.lkey }];
                    self.b.post_recv(self.qb.qpn, &RecvWr { wr_id: self.posted, sg_list: &r }).expect("post_recv");
                }
                let atomic = matches!(op, WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp);
                let len = if atomic { 8 } else { size as u32 };
                let s = [Sge { addr: self.src.addr, length: len, lkey: self.src.lkey }];
                let last = self.posted + 1 == target;
                let signaled = self.posted % signal_every == signal_every - 1 || last;
                let wr = SendWr {
                    wr_id: self.posted,
                    opcode: op,
                    sg_list: &s,
                    send_flags: if signaled { SendFlags::SIGNALED } else { SendFlags::NONE },
                    remote_addr: self.dst.addr,
                    rkey: self.dst.rkey,
                    compare_add: 1,
                    swap: 2,
                    ..Default::default()
                };
                self.a.post_send(self.qa.qpn, &wr).expect("post_send");
                self.posted += 1;
            }
            // Frames with their IP header on a cache line, as a runtime places them.
            let buf = uroce_wire::copy::ip_aligned(&mut self.buf);
            let moved = self.frames;
            while let Some(n) = self.a.poll_transmit(self.now, buf) {
                self.rejected += self.b.handle_frame(self.now, &buf[..n]).is_err() as u64;
                self.frames += 1;
                if let Some(ns) = (n as u64 * 8_000_000_000).checked_div(self.clock_rate) {
                    self.now += core::time::Duration::from_nanos(ns);
                }
            }
            let now = self.now;
            if self.clock_rate != 0 {
                for d in [&mut self.a, &mut self.b] {
                    if d.poll_timeout().is_some_and(|t| t <= now) {
                        d.handle_timeout(now);
                    }
                }
            }
            while let Some(n) = self.b.poll_transmit(now, buf) {
                self.rejected += self.a.handle_frame(now, &buf[..n]).is_err() as u64;
                self.frames += 1;
            }
            loop {
                let n = self.a.poll_cq(self.qa.cq, &mut wc).expect("poll_cq");
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    self.done = w.wr_id + 1;
                }
                if n < wc.len() {
                    break;
                }
            }
            while self.b.poll_cq(self.qb.cq, &mut wc).expect("poll_cq") == wc.len() {}
            if self.clock_rate != 0 && self.frames == moved {
                // Nothing could move (pacing): on to the next deadline.
                let next = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
                self.now = self.now.max(next.expect("a stalled pair has a timer running"));
            }
        }
    }
}
