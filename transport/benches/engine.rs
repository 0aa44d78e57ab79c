//! The RC engine back to back in memory on one core: two devices, frames handed from one
//! `poll_transmit` straight to the other's `handle_frame`, no network in between. Beside each
//! workload, a plain copy + CRC-32 loop over the same bytes (what any RoCE stack must at least
//! do per byte: copy the payload once and CRC it once) in the same run.
//!
//! `cargo bench -p uroce-transport --bench engine`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant as StdInstant};
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

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
    B2b { a, b, qa, qb, src, dst, buf: vec![0u8; 9216], posted: 0, done: 0 }
}

impl B2b {
    /// Run `msgs` messages of `size` bytes with `op`, at most 64 outstanding, every 16th signaled.
    fn run(&mut self, op: WrOpcode, size: usize, msgs: u64) {
        let now = Instant::ZERO;
        let target = self.posted + msgs;
        let mut wc = [WorkCompletion::default(); 32];
        if op == WrOpcode::Send {
            while self.b.qp(self.qb.qpn).map_or(0, |_| 0) == 1 {}
        }
        while self.done < target {
            while self.posted < target && self.posted - self.done < 64 {
                if op == WrOpcode::Send {
                    let r = [Sge { addr: self.dst.addr, length: size as u32, lkey: self.dst.lkey }];
                    self.b.post_recv(self.qb.qpn, &RecvWr { wr_id: self.posted, sg_list: &r }).unwrap();
                }
                let s = [Sge { addr: self.src.addr, length: size as u32, lkey: self.src.lkey }];
                let flags = if self.posted % 16 == 15 || self.posted + 1 == target {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                };
                let wr = SendWr {
                    wr_id: self.posted,
                    opcode: op,
                    sg_list: &s,
                    send_flags: flags,
                    remote_addr: self.dst.addr,
                    rkey: self.dst.rkey,
                    ..Default::default()
                };
                self.a.post_send(self.qa.qpn, &wr).unwrap();
                self.posted += 1;
            }
            while let Some(n) = self.a.poll_transmit(now, &mut self.buf) {
                let _ = self.b.handle_frame(now, &self.buf[..n]);
            }
            while let Some(n) = self.b.poll_transmit(now, &mut self.buf) {
                let _ = self.a.handle_frame(now, &self.buf[..n]);
            }
            loop {
                let n = self.a.poll_cq(self.qa.cq, &mut wc).unwrap();
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success);
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

/// The baseline: copy `bytes` once and CRC them once, per packet of `pkt` bytes.
fn copy_crc(src: &[u8], dst: &mut [u8], pkt: usize) -> u32 {
    let mut c = 0;
    for (s, d) in src.chunks(pkt).zip(dst.chunks_mut(pkt)) {
        d.copy_from_slice(s);
        c ^= crc32fast::hash(d);
    }
    c
}

fn bench(c: &mut Criterion) {
    const MIB: usize = 1 << 20;
    let mut g = c.benchmark_group("engine");
    g.measurement_time(Duration::from_secs(5));

    // 1 MiB RDMA WRITEs at 4096 MTU: payload throughput.
    g.throughput(Throughput::Bytes(MIB as u64));
    let mut w = setup(Mtu::Mtu4096, MIB);
    g.bench_function("write_1MiB_mtu4096", |b| {
        b.iter_custom(|iters| {
            let t = StdInstant::now();
            w.run(WrOpcode::RdmaWrite, MIB, iters);
            t.elapsed()
        })
    });
    let src = vec![7u8; MIB];
    let mut dst = vec![0u8; MIB];
    g.bench_function("baseline_copy_crc_1MiB_in_4096B_packets", |b| {
        b.iter(|| copy_crc(black_box(&src), &mut dst, 4096))
    });

    // 64-byte messages: packets (= messages) per second.
    g.throughput(Throughput::Elements(1));
    for op in [WrOpcode::RdmaWrite, WrOpcode::Send] {
        let mut s = setup(Mtu::Mtu1024, 64);
        g.bench_function(format!("{op:?}_64B"), |b| {
            b.iter_custom(|iters| {
                let t = StdInstant::now();
                s.run(op, 64, iters);
                t.elapsed()
            })
        });
    }
    // One 64-byte payload frame (~122 bytes) copied and CRCed: the per-packet floor.
    let frame = vec![7u8; 122];
    let mut out = vec![0u8; 122];
    g.bench_function("baseline_copy_crc_122B_frame", |b| b.iter(|| copy_crc(black_box(&frame), &mut out, 122)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
