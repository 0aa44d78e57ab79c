//! Failure paths: peer gone, receiver not ready, remote access violations, local errors.
//! Completion statuses, QP states, counters, and the responder's memory are all checked.

mod common;

use common::*;
use core::time::Duration;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::LinkConfig;
use uroce_transport::*;

fn write(net: &mut uroce_transport::sim::Network, a: &QpEnd, wr_id: u64, src: &MrInfo, len: usize, va: u64, rkey: u32) {
    let s = [sge(src, 0, len)];
    net.dev(a.node)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                remote_addr: va,
                rkey,
                ..Default::default()
            },
        )
        .unwrap();
}

#[test]
fn peer_gone_retry_exceeded_after_configured_retries() {
    // timeout 14 = 4.096 µs × 2^14 = 67.1 ms (perftest's default); retry_cnt 3.
    let o = QpOptions { timeout: 14, retry_cnt: 3, ..Default::default() };
    let (mut net, a, b) = pair(7, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |i| i as u8);
    let dst = reg(&mut net, 1, b.pd, 4096, ALL_ACCESS, |_| 0);
    net.down[1] = true;
    write(&mut net, &a, 1, &src, 3000, dst.addr, dst.rkey);
    write(&mut net, &a, 2, &src, 10, dst.addr, dst.rkey);
    let wcs = wait_wcs(&mut net, &a, 2, 100_000);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().state(), QpState::Err);
    // The first transmission plus retry_cnt retransmissions, each followed by a full timeout.
    let t = Duration::from_nanos(4096 << 14);
    let elapsed = Duration::from_nanos(net.now().as_nanos());
    assert!(elapsed >= t * 4 && elapsed < t * 4 + Duration::from_millis(1), "{elapsed:?}");
    let c = *net.dev(0).counters();
    assert_eq!(c.local_ack_timeout_err, 4);
    assert_eq!(c.retry_exceeded_err, 1);
    assert_eq!(c.completer_retry_err, 3);
    assert_eq!(net.dev(0).poll_event(), Some(AsyncEvent::QpFatal(a.qpn)));
    // Posting to the errored QP completes at once with a flush error.
    write(&mut net, &a, 3, &src, 10, dst.addr, dst.rkey);
    let w = drain_cq(&mut net, 0, a.cq);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn rnr_naks_then_success_once_a_receive_is_posted() {
    let o = QpOptions { rnr_retry: 7, min_rnr_timer: 14, ..Default::default() }; // 1.28 ms
    let (mut net, a, b) = pair(8, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |i| pattern(8, i));
    let dst = reg(&mut net, 1, b.pd, 4096, ALL_ACCESS, |_| 0);
    let s = [sge(&src, 0, 2000)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 9,
                opcode: WrOpcode::Send,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            },
        )
        .unwrap();
    // Run 10 ms with no receive posted: RNR NAKs every 1.28 ms, no completion.
    let deadline = Instant::from_nanos(10_000_000);
    net.run_until(1_000_000, |n| n.now() >= deadline);
    assert!(drain_cq(&mut net, 0, a.cq).is_empty());
    let naks = net.dev(0).counters().rcvd_rnr_err;
    assert!((6..=9).contains(&naks), "{naks} RNR NAKs in 10 ms at 1.28 ms each");
    assert_eq!(net.dev(1).counters().send_rnr_err, naks);
    let r = [sge(&dst, 0, 4096)];
    net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: 5, sg_list: &r }).unwrap();
    let w = wait_wcs(&mut net, &a, 1, 100_000);
    assert_eq!((w[0].wr_id, w[0].status), (9, WcStatus::Success));
    let w = wait_wcs(&mut net, &b, 1, 100_000);
    assert_eq!((w[0].wr_id, w[0].status, w[0].byte_len), (5, WcStatus::Success, 2000));
    assert_eq!(&mr_bytes(&mut net, 1, &dst)[..2000], &mr_bytes(&mut net, 0, &src)[..2000]);
}

#[test]
fn rnr_retry_exhausted() {
    let o = QpOptions { rnr_retry: 2, min_rnr_timer: 1, ..Default::default() };
    let (mut net, a, _b) = pair(9, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 64, ALL_ACCESS, |_| 1);
    let s = [sge(&src, 0, 8)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 1,
                opcode: WrOpcode::Send,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            },
        )
        .unwrap();
    let w = wait_wcs(&mut net, &a, 1, 100_000);
    assert_eq!(w[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(net.dev(0).counters().rcvd_rnr_err, 3); // the first try and two retries
    assert_eq!(net.dev(0).counters().retry_rnr_exceeded_err, 1);
}

/// A remote access violation: the requester completes with REM_ACCESS_ERR, both QPs end in
/// ERR, later WRs are flushed, and not one byte of the responder's memory changed.
fn remote_access_violation(case: &str, mutate: impl FnOnce(&mut u64, &mut u32, &mut usize), dst_access: AccessFlags) {
    let (mut net, a, b) = pair(10, LinkConfig::default(), &QpOptions::default());
    let src = reg(&mut net, 0, a.pd, 8192, ALL_ACCESS, |i| pattern(10, i));
    let dst = reg(&mut net, 1, b.pd, 4096, dst_access, |i| pattern(11, i));
    let before = mr_bytes(&mut net, 1, &dst);
    let (mut va, mut rkey, mut len) = (dst.addr, dst.rkey, 3000usize);
    mutate(&mut va, &mut rkey, &mut len);
    write(&mut net, &a, 1, &src, len, va, rkey);
    write(&mut net, &a, 2, &src, 8, dst.addr, dst.rkey);
    let w = wait_wcs(&mut net, &a, 2, 100_000);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::RemAccessErr), "{case}");
    assert_eq!(w[0].vendor_err, 0x62, "{case}: the NAK syndrome");
    assert_eq!((w[1].wr_id, w[1].status), (2, WcStatus::WrFlushErr), "{case}");
    assert_eq!(mr_bytes(&mut net, 1, &dst), before, "{case}: responder memory changed");
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().state(), QpState::Err, "{case}");
    assert_eq!(net.dev(1).qp(b.qpn).unwrap().state(), QpState::Err, "{case}");
    assert_eq!(net.dev(1).counters().send_err, 1, "{case}");
}

#[test]
fn bad_rkey() {
    remote_access_violation("bad rkey", |_, k, _| *k ^= 0x55, ALL_ACCESS);
}

#[test]
fn out_of_bounds() {
    remote_access_violation("past the end", |va, _, _| *va += 2000, ALL_ACCESS);
    remote_access_violation("before the start", |va, _, _| *va -= 1, ALL_ACCESS);
    remote_access_violation("too long", |_, _, len| *len = 4097, ALL_ACCESS);
}

#[test]
fn missing_access_flag() {
    remote_access_violation("no REMOTE_WRITE", |_, _, _| {}, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
}

#[test]
fn read_and_atomic_access_errors() {
    for (op, access) in [
        (WrOpcode::RdmaRead, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        (WrOpcode::AtomicFetchAndAdd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
    ] {
        let (mut net, a, b) = pair(12, LinkConfig::default(), &QpOptions::default());
        let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |_| 0xee);
        let dst = reg(&mut net, 1, b.pd, 4096, access, |i| pattern(12, i));
        let before_src = mr_bytes(&mut net, 0, &src);
        let before = mr_bytes(&mut net, 1, &dst);
        let s = [sge(&src, 0, 8)];
        net.dev(0)
            .post_send(
                a.qpn,
                &SendWr {
                    wr_id: 1,
                    opcode: op,
                    sg_list: &s,
                    send_flags: SendFlags::SIGNALED,
                    remote_addr: dst.addr,
                    rkey: dst.rkey,
                    compare_add: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        let w = wait_wcs(&mut net, &a, 1, 100_000);
        assert_eq!(w[0].status, WcStatus::RemAccessErr, "{op:?}");
        assert_eq!(mr_bytes(&mut net, 1, &dst), before, "{op:?}");
        assert_eq!(mr_bytes(&mut net, 0, &src), before_src, "{op:?}: nothing was scattered locally");
    }
}

#[test]
fn qp_without_remote_write_is_an_invalid_request() {
    let o = QpOptions { access: AccessFlags::REMOTE_READ, ..Default::default() };
    let (mut net, a, b) = pair(13, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 64, ALL_ACCESS, |_| 1);
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    write(&mut net, &a, 1, &src, 8, dst.addr, dst.rkey);
    let w = wait_wcs(&mut net, &a, 1, 100_000);
    assert_eq!((w[0].status, w[0].vendor_err), (WcStatus::RemInvReqErr, 0x61));
    assert!(mr_bytes(&mut net, 1, &dst).iter().all(|&x| x == 0));
}

#[test]
fn send_larger_than_the_receive_buffer() {
    let (mut net, a, b) = pair(14, LinkConfig::default(), &QpOptions::default());
    let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |_| 7);
    let dst = reg(&mut net, 1, b.pd, 4096, ALL_ACCESS, |_| 0);
    let r = [sge(&dst, 0, 1000)];
    net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: 77, sg_list: &r }).unwrap();
    let s = [sge(&src, 0, 3000)];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 1,
                opcode: WrOpcode::Send,
                sg_list: &s,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            },
        )
        .unwrap();
    let w = wait_wcs(&mut net, &a, 1, 100_000);
    assert_eq!(w[0].status, WcStatus::RemInvReqErr);
    let w = wait_wcs(&mut net, &b, 1, 100_000);
    assert_eq!((w[0].wr_id, w[0].status), (77, WcStatus::LocLenErr));
}

#[test]
fn local_protection_error_completes_in_order() {
    let (mut net, a, b) = pair(15, LinkConfig::default(), &QpOptions::default());
    let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |_| 7);
    let dst = reg(&mut net, 1, b.pd, 4096, ALL_ACCESS, |_| 0);
    write(&mut net, &a, 1, &src, 100, dst.addr, dst.rkey);
    // An SGE past the end of its region.
    let bad = [Sge { addr: src.addr + 4000, length: 200, lkey: src.lkey }];
    net.dev(0)
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: 2,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &bad,
                send_flags: SendFlags::SIGNALED,
                remote_addr: dst.addr,
                rkey: dst.rkey,
                ..Default::default()
            },
        )
        .unwrap();
    write(&mut net, &a, 3, &src, 100, dst.addr, dst.rkey);
    let w = wait_wcs(&mut net, &a, 3, 100_000);
    let got: Vec<_> = w.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, vec![(1, WcStatus::Success), (2, WcStatus::LocProtErr), (3, WcStatus::WrFlushErr)]);
}

#[test]
fn unsignaled_writes_complete_silently_and_in_order() {
    let (mut net, a, b) = pair(16, LinkConfig::default(), &QpOptions::default());
    let src = reg(&mut net, 0, a.pd, 4096, ALL_ACCESS, |i| i as u8);
    let dst = reg(&mut net, 1, b.pd, 4096, ALL_ACCESS, |_| 0);
    for i in 0..10u64 {
        let s = [sge(&src, 0, 64)];
        let flags = if i == 9 { SendFlags::SIGNALED } else { SendFlags::NONE };
        net.dev(0)
            .post_send(
                a.qpn,
                &SendWr {
                    wr_id: i,
                    opcode: WrOpcode::RdmaWrite,
                    sg_list: &s,
                    send_flags: flags,
                    remote_addr: dst.addr + i * 64,
                    rkey: dst.rkey,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    let w = wait_wcs(&mut net, &a, 1, 100_000);
    assert_eq!(w.len(), 1);
    assert_eq!((w[0].wr_id, w[0].status), (9, WcStatus::Success));
    assert_eq!(&mr_bytes(&mut net, 1, &dst)[..640], &(0..640).map(|i| (i % 64) as u8).collect::<Vec<_>>()[..]);
}

#[test]
fn structural_post_errors_are_returned_not_completed() {
    let (mut net, a, b) = pair(17, LinkConfig::default(), &QpOptions::default());
    let src = reg(&mut net, 0, a.pd, 64, ALL_ACCESS, |_| 0);
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    let s = [sge(&src, 0, 8)];
    let misaligned = SendWr {
        opcode: WrOpcode::AtomicFetchAndAdd,
        sg_list: &s,
        remote_addr: dst.addr + 4,
        rkey: dst.rkey,
        ..Default::default()
    };
    assert!(matches!(net.dev(0).post_send(a.qpn, &misaligned), Err(VerbsError::InvalidArgument(_))));
    let s4 = [sge(&src, 0, 4)];
    let short = SendWr {
        opcode: WrOpcode::AtomicCmpAndSwp,
        sg_list: &s4,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    assert!(matches!(net.dev(0).post_send(a.qpn, &short), Err(VerbsError::InvalidArgument(_))));
    let many = [sge(&src, 0, 1); 5]; // max_send_sge is 4
    assert!(matches!(
        net.dev(0).post_send(a.qpn, &SendWr { sg_list: &many, ..Default::default() }),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert_eq!(net.dev(0).post_send(0x999, &SendWr::default()), Err(VerbsError::NoSuchObject("QP")));
    assert!(drain_cq(&mut net, 0, a.cq).is_empty());
}
