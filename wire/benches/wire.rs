//! Wire benchmarks: header parse and build, parse + ICRC verify, build + ICRC (from reprs, and
//! through a header template with the payload copied and CRC-ed in one pass), beside a plain
//! `crc32fast` pass over the same bytes in the same run (the ratio is what matters).
//!
//! `cargo bench -p uroce-wire`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::net::Ipv4Addr;
use uroce_wire::packet::pad_for;
use uroce_wire::*;

fn repr(payload_len: usize) -> FrameRepr {
    FrameRepr {
        eth: EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            vlan: None,
            ethertype: EtherType::IPV4,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr { src_port: 0xc121, dst_port: ROCE_V2_PORT },
        roce: RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_FIRST,
                solicited: false,
                mig_req: false,
                pad_count: pad_for(payload_len),
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: false,
                psn: Psn::new(0x9a611b),
            },
            ext: ExtHeaders {
                reth: Some(RethRepr { va: 0x5634_dca7_5000, rkey: 0x247, dma_len: 1 << 20 }),
                ..Default::default()
            },
            payload_len,
        },
    }
}

fn bench(c: &mut Criterion) {
    for &size in &[64usize, 1024, 4096] {
        let r = repr(size);
        let payload = vec![0x5au8; size];
        let mut frame = vec![0u8; r.buffer_len()];
        r.emit(&mut frame, UdpChecksum::Zero, |p| p.copy_from_slice(&payload)).unwrap();
        let l3 = 14;
        let icrc_span = frame.len() - l3 - 4; // the bytes the ICRC covers, minus the 8-byte LRH

        let mut g = c.benchmark_group(format!("wire/{size}B"));
        g.throughput(Throughput::Bytes(icrc_span as u64));
        g.bench_function(BenchmarkId::new("crc32fast_plain", size), |b| {
            b.iter(|| crc32fast::hash(black_box(&frame[l3..frame.len() - 4])))
        });
        g.bench_function(BenchmarkId::new("icrc_compute", size), |b| {
            b.iter(|| icrc::compute(black_box(&frame[l3..frame.len() - 4])).unwrap())
        });
        g.bench_function(BenchmarkId::new("parse_headers", size), |b| {
            b.iter(|| black_box(parse_frame(black_box(&frame)).unwrap().roce.bth.psn))
        });
        g.bench_function(BenchmarkId::new("parse_and_verify_icrc", size), |b| {
            b.iter(|| {
                let p = parse_frame(black_box(&frame)).unwrap();
                p.check_icrc().unwrap();
                black_box(p.roce.bth.psn)
            })
        });
        let mut out = vec![0u8; frame.len()];
        g.bench_function(BenchmarkId::new("build_headers", size), |b| {
            b.iter(|| {
                black_box(&r).emit_ip_unsealed(&mut out[14..], |_| {}).unwrap();
            })
        });
        g.bench_function(BenchmarkId::new("build_with_payload_and_icrc", size), |b| {
            b.iter(|| black_box(&r).emit(&mut out, UdpChecksum::Zero, |p| p.copy_from_slice(&payload)).unwrap())
        });
        // The transmit path the engine uses: the flow's headers rendered once, copied and
        // patched per packet; the payload copied and folded into the ICRC in one pass.
        let t = HeaderTemplate::new(&r.eth, &r.ip, &r.udp, &r.roce.bth, UdpChecksum::Zero).unwrap();
        let (op, ext) = (r.roce.bth.opcode, r.roce.ext);
        g.bench_function(BenchmarkId::new("template_build_with_payload_and_icrc", size), |b| {
            b.iter(|| {
                t.emit_copy(
                    &mut out,
                    PacketFields { ident: 7, opcode: op, solicited: false, ack_req: false, psn: Psn::new(0x9a611b) },
                    black_box(&ext),
                    size,
                    |w| w.copy(&payload),
                )
                .unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
