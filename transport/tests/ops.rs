//! Every operation over a clean simulated link, data checked byte for byte.

mod common;

use common::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::LinkConfig;
use uroce_transport::*;

#[test]
fn write_send_read_atomics_basic() {
    let o = QpOptions::default();
    let (mut net, a, b) = pair(1, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 8192, ALL_ACCESS, |i| pattern(1, i));
    let dst = reg(&mut net, 1, b.pd, 8192, ALL_ACCESS, |_| 0);

    // RDMA WRITE 3000 bytes (3 packets at MTU 1024).
    let s = [sge(&src, 0, 3000)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 1,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                remote_addr: dst.addr + 100,
                rkey: dst.rkey,
                ..Default::default()
            },
        )
        .unwrap();
    let wcs = wait_wcs(&mut net, &a, 1, 10_000);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].wr_id, 1);
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaWrite);
    let d = mr_bytes(&mut net, 1, &dst);
    assert_eq!(&d[100..3100], &mr_bytes(&mut net, 0, &src)[..3000]);
    assert!(d[..100].iter().all(|&x| x == 0) && d[3100..].iter().all(|&x| x == 0));

    // SEND with immediate 2500 bytes into a posted receive.
    let r = [sge(&dst, 4096, 4096)];
    net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: 77, sg_list: &r }).unwrap();
    let s = [sge(&src, 10, 2500)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 2,
                opcode: WrOpcode::SendWithImm,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                imm_data: 0xdead_beef,
                ..Default::default()
            },
        )
        .unwrap();
    let wa = wait_wcs(&mut net, &a, 1, 10_000);
    assert_eq!((wa[0].wr_id, wa[0].status, wa[0].opcode), (2, WcStatus::Success, WcOpcode::Send));
    let wb = wait_wcs(&mut net, &b, 1, 10_000);
    assert_eq!(wb[0].wr_id, 77);
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].opcode, WcOpcode::Recv);
    assert_eq!(wb[0].byte_len, 2500);
    assert_eq!(wb[0].imm_data, 0xdead_beef);
    assert!(wb[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wb[0].src_qp, a.qpn);
    assert_eq!(&mr_bytes(&mut net, 1, &dst)[4096..6596], &mr_bytes(&mut net, 0, &src)[10..2510]);

    // RDMA READ 5000 bytes back from B into A at offset 0.
    let s = [sge(&src, 0, 5000)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 3,
                opcode: WrOpcode::RdmaRead,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                remote_addr: dst.addr + 3000,
                rkey: dst.rkey,
                ..Default::default()
            },
        )
        .unwrap();
    let wa = wait_wcs(&mut net, &a, 1, 10_000);
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode, wa[0].byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaRead, 5000)
    );
    assert_eq!(&mr_bytes(&mut net, 0, &src)[..5000], &mr_bytes(&mut net, 1, &dst)[3000..8000]);

    // FETCH_ADD then COMPARE_SWAP on B's word at offset 8000.
    let before = u64::from_le_bytes(mr_bytes(&mut net, 1, &dst)[8000..8008].try_into().unwrap());
    let s = [sge(&src, 6000, 8)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 4,
                opcode: WrOpcode::AtomicFetchAndAdd,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                remote_addr: dst.addr + 8000,
                rkey: dst.rkey,
                compare_add: 5,
                ..Default::default()
            },
        )
        .unwrap();
    let wa = wait_wcs(&mut net, &a, 1, 10_000);
    assert_eq!((wa[0].status, wa[0].opcode, wa[0].byte_len), (WcStatus::Success, WcOpcode::FetchAdd, 8));
    assert_eq!(u64::from_le_bytes(mr_bytes(&mut net, 0, &src)[6000..6008].try_into().unwrap()), before);
    let after = u64::from_le_bytes(mr_bytes(&mut net, 1, &dst)[8000..8008].try_into().unwrap());
    assert_eq!(after, before.wrapping_add(5));
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 5,
                opcode: WrOpcode::AtomicCmpAndSwp,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                remote_addr: dst.addr + 8000,
                rkey: dst.rkey,
                compare_add: after,
                swap: 42,
                ..Default::default()
            },
        )
        .unwrap();
    let wa = wait_wcs(&mut net, &a, 1, 10_000);
    assert_eq!((wa[0].status, wa[0].opcode), (WcStatus::Success, WcOpcode::CompSwap));
    assert_eq!(u64::from_le_bytes(mr_bytes(&mut net, 1, &dst)[8000..8008].try_into().unwrap()), 42);
    assert_eq!(u64::from_le_bytes(mr_bytes(&mut net, 0, &src)[6000..6008].try_into().unwrap()), after);
    assert!(net.run_idle(1000));
    assert_eq!(net.dev(0).counters().retransmitted_pkts, 0);
}

/// Every operation, every path MTU, IPv4 and IPv6, sizes from 0 B to 4 MiB around every
/// MTU boundary; each transfer checked byte for byte, each completion's fields checked.
#[test]
fn every_operation_every_mtu_every_size() {
    const MIB: usize = 1 << 20;
    let ops = [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::SendWithInv,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
    ];
    for mtu in [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
        for ipv6 in [false, true] {
            let m = mtu.bytes();
            let mut sizes = vec![0, 1, 3, m - 1, m, m + 1, 2 * m, 3 * m + 5, 65536, MIB + 7];
            if mtu == Mtu::Mtu256 || mtu == Mtu::Mtu4096 {
                sizes.push(4 * MIB);
            }
            let o = QpOptions { mtu, ipv6, ..Default::default() };
            let (mut net, a, b) = pair(100 + m as u64, LinkConfig::default(), &o);
            let src = reg(&mut net, 0, a.pd, 4 * MIB + 64, ALL_ACCESS, |i| pattern(m as u64, i));
            let dst = reg(&mut net, 1, b.pd, 4 * MIB + 64, ALL_ACCESS, |i| pattern(7 + m as u64, i));
            let mut id = 0u64;
            for &size in &sizes {
                for op in ops {
                    id += 1;
                    // Fresh contents each time so a stale byte cannot pass.
                    let tag = id * 1000 + size as u64;
                    for (node, mr) in [(0, &src), (1, &dst)] {
                        let t = tag + node as u64;
                        net.dev(node)
                            .mr_mut(mr.lkey)
                            .unwrap()
                            .as_mut_slice()
                            .iter_mut()
                            .take(size + 64)
                            .enumerate()
                            .for_each(|(i, x)| *x = pattern(t, i));
                    }
                    let off = 13; // an odd offset inside each region
                    let recv = matches!(
                        op,
                        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWriteWithImm
                    );
                    if recv {
                        let r = [sge(&dst, off, size + 50)];
                        net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: id, sg_list: &r }).unwrap();
                    }
                    let s = [sge(&src, off, size)];
                    net.dev(0)
                        .post_send(
                            a.qpn,
                            &SendWr {
                                wr_id: id,
                                opcode: op,
                                sg_list: &s,
                                send_flags: SendFlags::SIGNALED,
                                imm_data: id as u32,
                                invalidate_rkey: 0x1234,
                                remote_addr: dst.addr + off as u64,
                                rkey: dst.rkey,
                                ..Default::default()
                            },
                        )
                        .unwrap();
                    let w = wait_wcs(&mut net, &a, 1, 10_000_000);
                    let ctx = format!("{mtu:?} v6={ipv6} {op:?} size {size}");
                    assert_eq!(
                        (w[0].wr_id, w[0].status, w[0].opcode),
                        (id, WcStatus::Success, op.wc_opcode()),
                        "{ctx}"
                    );
                    let sbytes = mr_bytes(&mut net, 0, &src);
                    let dbytes = mr_bytes(&mut net, 1, &dst);
                    assert!(sbytes[off..off + size] == dbytes[off..off + size], "{ctx}: data differs");
                    // Nothing beyond the transfer was touched.
                    let (written, other) = if op == WrOpcode::RdmaRead { (&sbytes, tag) } else { (&dbytes, tag + 1) };
                    assert!(
                        written[off + size..off + size + 40]
                            .iter()
                            .enumerate()
                            .all(|(i, &x)| x == pattern(other, off + size + i)),
                        "{ctx}: wrote past the end"
                    );
                    assert!(
                        written[..off].iter().enumerate().all(|(i, &x)| x == pattern(other, i)),
                        "{ctx}: wrote before the start"
                    );
                    if recv {
                        let r = wait_wcs(&mut net, &b, 1, 1000);
                        let want_op =
                            if op == WrOpcode::RdmaWriteWithImm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
                        assert_eq!(
                            (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
                            (id, WcStatus::Success, want_op, size as u32),
                            "{ctx}"
                        );
                        match op {
                            WrOpcode::SendWithInv => {
                                assert_eq!((r[0].imm_data, r[0].wc_flags), (0x1234, WcFlags::WITH_INV), "{ctx}")
                            }
                            WrOpcode::Send => assert_eq!(r[0].wc_flags, WcFlags::NONE, "{ctx}"),
                            _ => assert_eq!((r[0].imm_data, r[0].wc_flags), (id as u32, WcFlags::WITH_IMM), "{ctx}"),
                        }
                    }
                }
            }
            assert_eq!(net.dev(0).counters().retransmitted_pkts, 0);
        }
    }
}
