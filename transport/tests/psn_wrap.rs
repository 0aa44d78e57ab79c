//! PSN wrap-around (2^24) in the middle of transfers, clean and lossy.

mod common;

use common::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::LinkConfig;
use uroce_transport::*;

#[test]
fn transfers_across_the_psn_wrap() {
    for loss in [0.0, 0.05] {
        let o = QpOptions { psns: Some((0xff_fff0, 0xff_fffa)), timeout: 10, ..Default::default() };
        let (mut net, a, b) = pair(21, LinkConfig { loss, ..Default::default() }, &o);
        let src = reg(&mut net, 0, a.pd, 1 << 20, ALL_ACCESS, |i| pattern(21, i));
        let dst = reg(&mut net, 1, b.pd, 1 << 20, ALL_ACCESS, |i| pattern(22, i));
        for k in 0..8u64 {
            // WRITE and SEND from A's first 16 KiB; READ into A's buffer at 512 KiB.
            let s = if k % 3 == 2 { [sge(&src, 512 * 1024, 16 * 1024)] } else { [sge(&src, 0, 16 * 1024)] };
            let r = [sge(&dst, 512 * 1024, 64 * 1024)];
            net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: k, sg_list: &r }).unwrap();
            let (op, va) = match k % 3 {
                0 => (WrOpcode::RdmaWrite, dst.addr + k * 16 * 1024),
                1 => (WrOpcode::Send, 0),
                _ => (WrOpcode::RdmaRead, dst.addr + 256 * 1024),
            };
            net.dev(0)
                .post_send(
                    a.qpn,
                    &SendWr {
                        wr_id: k,
                        opcode: op,
                        sg_list: &s,
                        send_flags: SendFlags::SIGNALED,
                        remote_addr: va,
                        rkey: dst.rkey,
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        let w = wait_wcs(&mut net, &a, 8, 1_000_000);
        assert!(w.iter().enumerate().all(|(i, w)| w.wr_id == i as u64 && w.status == WcStatus::Success), "{w:?}");
        // 8 × 16 packets at MTU 1024 from 0xfffff0: well past the wrap.
        let sq_psn = net.dev(0).query_qp(a.qpn).unwrap().sq_psn;
        assert_eq!(sq_psn, (0xff_fff0 + 8 * 16) & 0xff_ffff);
        let rq_psn = net.dev(1).query_qp(b.qpn).unwrap().rq_psn;
        assert_eq!(rq_psn, sq_psn);
        let d = mr_bytes(&mut net, 1, &dst);
        let s = mr_bytes(&mut net, 0, &src);
        for k in [0usize, 3, 6] {
            assert_eq!(&d[k * 16 * 1024..(k + 1) * 16 * 1024], &s[..16 * 1024], "WRITE {k}");
        }
        assert_eq!(&s[512 * 1024..528 * 1024], &d[256 * 1024..272 * 1024], "READ");
        assert_eq!(&d[512 * 1024..528 * 1024], &s[..16 * 1024], "SEND");
        if loss > 0.0 {
            assert!(net.dev(0).counters().retransmitted_pkts > 0);
        }
    }
}
