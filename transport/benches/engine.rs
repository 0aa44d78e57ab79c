//! The RC engine back to back in memory on one core: two devices, frames handed from one
//! `poll_transmit` straight to the other's `handle_frame`, no network in between. Beside each
//! workload, a plain copy + CRC-32 loop over the same bytes (what any RoCE stack must at least
//! do per byte: copy the payload once and CRC it once) in the same run, and the engine's own
//! per-byte kernels without the engine (`data_path_only_…`). The 1 MiB baseline runs twice:
//! over two fresh buffers, and over the engine's own two regions (`baseline_mr_…`: the very
//! pages the WRITE moves). The baseline's speed moves by up to ~15 % from one process to the
//! next (page placement, the host's clock); the second one at least shares the engine's pages.
//! `benches/ratio.rs` times the WRITE and both baselines interleaved.
//!
//! `cargo bench -p uroce-transport --bench engine`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant as StdInstant};
use uroce_transport::sim::b2b::BackToBack;
use uroce_transport::*;

/// The baseline: copy `bytes` once and CRC them once, per packet of `pkt` bytes.
fn copy_crc(src: &[u8], dst: &mut [u8], pkt: usize) -> u32 {
    let mut c = 0;
    for (s, d) in src.chunks(pkt).zip(dst.chunks_mut(pkt)) {
        d.copy_from_slice(s);
        c ^= crc32fast::hash(d);
    }
    c
}

/// The engine's own per-byte work without the engine, per packet of `pkt` bytes: the sender's
/// one pass (payload into a frame with the ICRC, prefetching the next packet's source), the
/// receiver's ICRC check (prefetching the destination) and copy out. What a 1 MiB WRITE would
/// cost if the engine's per-packet bookkeeping were free; the gap to `write_1MiB_mtu4096` is
/// that bookkeeping.
fn data_path(src: &[u8], dst: &mut [u8], frame: &mut [u8], pkt: usize) -> u32 {
    const H: usize = 40; // IPv4 + UDP + BTH: a WRITE MIDDLE packet's headers
                         // Placed as the engine's frames are (`BackToBack`): the IP header on a cache line.
    let l3 = &mut uroce_wire::copy::ip_aligned(frame)[14..14 + H + pkt + 4];
    l3[0] = 0x45;
    let mut c = 0;
    for (i, d) in dst.chunks_mut(pkt).enumerate() {
        let s = &src[i * pkt..(i + 1) * pkt];
        let next = src.get((i + 1) * pkt..(i + 2) * pkt).unwrap_or(&[]);
        let icrc = uroce_wire::icrc::copy_payload_icrc(&mut l3[..H + pkt], H, s, next).expect("a one-pass kernel");
        l3[H + pkt..].copy_from_slice(&icrc.to_le_bytes());
        assert!(uroce_wire::icrc::verify_prefetching(l3, 0, d).is_ok());
        uroce_wire::copy::bulk_copy(d, &l3[H..H + pkt]);
        c ^= icrc;
    }
    c
}

fn bench(c: &mut Criterion) {
    const MIB: usize = 1 << 20;
    eprintln!("ICRC kernels: {}", uroce_wire::icrc::kernels());
    let mut g = c.benchmark_group("engine");
    g.measurement_time(Duration::from_secs(5));

    // 1 MiB RDMA WRITEs at 4096 MTU: payload throughput.
    g.throughput(Throughput::Bytes(MIB as u64));
    // At most 64 outstanding, every 16th signaled.
    let mut w = BackToBack::new(Mtu::Mtu4096, MIB);
    g.bench_function("write_1MiB_mtu4096", |b| {
        b.iter_custom(|iters| {
            let t = StdInstant::now();
            w.run(WrOpcode::RdmaWrite, MIB, iters, 64, 16);
            t.elapsed()
        })
    });
    let src = vec![7u8; MIB];
    let mut dst = vec![0u8; MIB];
    g.bench_function("baseline_copy_crc_1MiB_in_4096B_packets", |b| {
        b.iter(|| copy_crc(black_box(&src), &mut dst, 4096))
    });
    {
        // The same loop over the regions the WRITE reads and writes.
        let s = w.a.mr(w.src.lkey).expect("source MR").as_slice();
        let d = w.b.mr_mut(w.dst.lkey).expect("destination MR").as_mut_slice();
        g.bench_function("baseline_mr_copy_crc_1MiB_in_4096B_packets", |b| b.iter(|| copy_crc(black_box(s), d, 4096)));
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("vpclmulqdq")
        && (std::is_x86_feature_detected!("avx512bw") || std::is_x86_feature_detected!("avx2"))
    {
        let mut frame = vec![0u8; 9216 + 64];
        g.bench_function("data_path_only_1MiB_in_4096B_packets", |b| {
            b.iter(|| data_path(black_box(&src), &mut dst, &mut frame, 4096))
        });
    }

    // 64-byte messages: packets (= messages) per second.
    g.throughput(Throughput::Elements(1));
    for op in [WrOpcode::RdmaWrite, WrOpcode::Send] {
        let mut s = BackToBack::new(Mtu::Mtu1024, 64);
        g.bench_function(format!("{op:?}_64B"), |b| {
            b.iter_custom(|iters| {
                let t = StdInstant::now();
                s.run(op, 64, iters, 64, 16);
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
