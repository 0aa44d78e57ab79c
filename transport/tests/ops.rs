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
