//! Shared receive queues: two RC QPs (and a UD QP) of one device receive from one SRQ. Each
//! message lands in its own WQE even when two QPs' multi-packet SENDs interleave, in the
//! order the messages start; an empty SRQ gets the sender an RNR NAK and the retry lands; the
//! armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED once; a QP going to the error state flushes
//! the WQE it holds and leaves the SRQ's others; the verbs refuse what they must.

mod common;

use common::*;
use uroce_transport::connect::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

struct Setup {
    net: Network,
    /// Two senders on node 0.
    tx: [QpEnd; 2],
    /// Two receivers on node 1, both on `srq`, one CQ.
    rx: [QpEnd; 2],
    srq: SrqHandle,
}

fn setup(srq_attr: SrqAttr) -> Setup {
    let o = QpOptions::default();
    let mut net = Network::new(5, LinkConfig::default());
    net.add(device(1, 5));
    net.add(device(2, 6));
    let pd1 = net.dev(1).alloc_pd();
    let srq = net.dev(1).create_srq(pd1, &srq_attr).unwrap();
    let cq1 = net.dev(1).create_cq(256).unwrap();
    let mut rx = Vec::new();
    for _ in 0..2 {
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq1,
            recv_cq: cq1,
            cap: o.cap,
            sq_sig_all: false,
            srq: Some(srq),
        };
        let qpn = net.dev(1).create_qp(pd1, &init).unwrap();
        rx.push(QpEnd { node: 1, pd: pd1, cq: cq1, qpn });
    }
    let pd0 = net.dev(0).alloc_pd();
    let tx = [create_in(&mut net, 0, pd0, &o).unwrap(), create_in(&mut net, 0, pd0, &o).unwrap()];
    for i in 0..2 {
        connect_ends(&mut net, &tx[i], &rx[i], &o).unwrap();
    }
    Setup { net, tx, rx: [rx[0], rx[1]], srq }
}

fn send(net: &mut Network, q: &QpEnd, wr_id: u64, sg: &[Sge]) {
    let wr =
        SendWr { wr_id, opcode: WrOpcode::Send, sg_list: sg, send_flags: SendFlags::SIGNALED, ..Default::default() };
    net.dev(q.node).post_send(q.qpn, &wr).unwrap();
}

#[test]
fn interleaved_sends_of_two_qps_each_land_in_their_own_wqe() {
    let mut s = setup(SrqAttr { max_wr: 16, max_sge: 2, srq_limit: 0 });
    let src = reg(&mut s.net, 0, s.tx[0].pd, 16384, ALL_ACCESS, |i| pattern(1, i));
    let dst = reg(&mut s.net, 1, s.rx[0].pd, 16384, ALL_ACCESS, |_| 0);
    for k in 0..4u64 {
        let sg = [sge(&dst, k as usize * 4096, 4096)];
        s.net.dev(1).post_srq_recv(s.srq, &RecvWr { wr_id: 100 + k, sg_list: &sg }).unwrap();
    }
    assert_eq!(s.net.dev(1).srq_len(s.srq), Some(4));
    // Two 3000-byte SENDs (3 packets each at MTU 1024) from each sender, posted alternately:
    // the packets of the two QPs' messages interleave on the wire.
    for k in 0..2 {
        let (a, b) = (s.tx[0], s.tx[1]);
        send(&mut s.net, &a, 10 + k, &[sge(&src, k as usize * 3000, 3000)]);
        send(&mut s.net, &b, 20 + k, &[sge(&src, 6000 + k as usize * 3000, 3000)]);
    }
    let rx = s.rx[0];
    let wcs = wait_wcs(&mut s.net, &rx, 4, 100_000);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 3000), "{wcs:?}");
    let d = mr_bytes(&mut s.net, 1, &dst);
    let srcb = mr_bytes(&mut s.net, 0, &src);
    // Each completion's WQE holds exactly one message, whole, from the QP it names.
    let mut seen = Vec::new();
    for w in &wcs {
        let slot = (w.wr_id - 100) as usize * 4096;
        let got = &d[slot..slot + 3000];
        let which = [0usize, 3000, 6000, 9000].into_iter().find(|&o| &srcb[o..o + 3000] == got);
        let which = which.unwrap_or_else(|| panic!("WQE {} holds no single message", w.wr_id));
        let from = if which < 6000 { s.tx[0].qpn } else { s.tx[1].qpn };
        assert_eq!(w.src_qp, from);
        assert!(s.rx.iter().any(|r| r.qpn == w.qp_num));
        seen.push(which);
    }
    seen.sort();
    assert_eq!(seen, [0, 3000, 6000, 9000]);
    assert_eq!(s.net.dev(1).srq_len(s.srq), Some(0));
}

#[test]
fn an_empty_srq_rnr_naks_and_the_limit_event_fires_once() {
    let mut s = setup(SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 2 });
    let src = reg(&mut s.net, 0, s.tx[0].pd, 4096, ALL_ACCESS, |i| pattern(2, i));
    let dst = reg(&mut s.net, 1, s.rx[0].pd, 4096, ALL_ACCESS, |_| 0);
    let tx = s.tx[0];
    send(&mut s.net, &tx, 1, &[sge(&src, 0, 100)]);
    // Nothing posted yet: RNR NAKs until a WQE comes.
    assert!(s.net.run_until(2_000, |n| n.dev(1).counters().send_rnr_err > 0));
    for k in 0..3u64 {
        let sg = [sge(&dst, k as usize * 1024, 1024)];
        s.net.dev(1).post_srq_recv(s.srq, &RecvWr { wr_id: k, sg_list: &sg }).unwrap();
    }
    let rx = s.rx[0];
    let w = wait_wcs(&mut s.net, &rx, 1, 1_000_000);
    assert_eq!((w[0].wr_id, w[0].status, w[0].byte_len), (0, WcStatus::Success, 100));
    // 3 → 2 WQEs: not below the limit of 2 yet.
    assert_eq!(s.net.dev(1).poll_event(), None);
    send(&mut s.net, &tx, 2, &[sge(&src, 0, 100)]);
    wait_wcs(&mut s.net, &rx, 1, 100_000);
    assert_eq!(s.net.dev(1).poll_event(), Some(AsyncEvent::SrqLimitReached(s.srq)));
    assert_eq!(s.net.dev(1).query_srq(s.srq).unwrap().srq_limit, 0, "the limit is disarmed");
    send(&mut s.net, &tx, 3, &[sge(&src, 0, 100)]);
    wait_wcs(&mut s.net, &rx, 1, 100_000);
    assert_eq!(s.net.dev(1).poll_event(), None, "once per arming");
    // Re-armed at 1 with 0 left: fires at the next take only (nothing to take now).
    s.net.dev(1).modify_srq(s.srq, &SrqAttr { srq_limit: 1, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(s.net.dev(1).query_srq(s.srq).unwrap().srq_limit, 1);
}

#[test]
fn a_failing_qp_flushes_only_the_wqe_it_holds() {
    let mut s = setup(SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 });
    let dst = reg(&mut s.net, 1, s.rx[0].pd, 8192, ALL_ACCESS, |_| 0);
    for k in 0..3u64 {
        let sg = [sge(&dst, k as usize * 2048, 2048)];
        s.net.dev(1).post_srq_recv(s.srq, &RecvWr { wr_id: k, sg_list: &sg }).unwrap();
    }
    let src = reg(&mut s.net, 0, s.tx[0].pd, 8192, ALL_ACCESS, |i| pattern(3, i));
    // A 3000-byte SEND into a 2048-byte WQE: the receiver's WQE completes with LOC_LEN_ERR,
    // the sender's with REM_INV_REQ_ERR, and the receiving QP goes to ERR with nothing else
    // of the SRQ's.
    let tx = s.tx[0];
    send(&mut s.net, &tx, 9, &[sge(&src, 0, 3000)]);
    let rx = s.rx[0];
    let w = wait_wcs(&mut s.net, &rx, 1, 100_000);
    assert_eq!((w[0].wr_id, w[0].status, w[0].qp_num), (0, WcStatus::LocLenErr, rx.qpn));
    let wa = wait_wcs(&mut s.net, &tx, 1, 100_000);
    assert_eq!(wa[0].status, WcStatus::RemInvReqErr);
    assert_eq!(s.net.dev(1).qp(rx.qpn).unwrap().state(), QpState::Err);
    assert_eq!(s.net.dev(1).srq_len(s.srq), Some(2), "the SRQ keeps its other WQEs");
    // The other QP still receives from it.
    let t1 = s.tx[1];
    send(&mut s.net, &t1, 10, &[sge(&src, 4000, 500)]);
    let r1 = s.rx[1];
    let w = wait_wcs(&mut s.net, &r1, 1, 100_000);
    assert_eq!((w[0].wr_id, w[0].status, w[0].qp_num, w[0].byte_len), (1, WcStatus::Success, r1.qpn, 500));
}

#[test]
fn srq_verbs_check_their_arguments() {
    let mut s = setup(SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 });
    let d = s.net.dev(1);
    let pd = s.rx[0].pd;
    let bad = |a: SrqAttr| SrqAttr { max_wr: 4, max_sge: 1, ..a };
    for a in [
        SrqAttr { max_wr: 0, ..bad(Default::default()) },
        SrqAttr { max_sge: 0, ..bad(Default::default()) },
        SrqAttr { max_sge: 99, ..bad(Default::default()) },
        SrqAttr { srq_limit: 4, ..bad(Default::default()) },
    ] {
        assert_eq!(d.create_srq(pd, &a).map_err(|e| e.errno()), Err(22), "{a:?}");
    }
    // A QP on an SRQ takes no receive WRs of its own.
    let sg = [Sge::default()];
    assert_eq!(d.post_recv(s.rx[0].qpn, &RecvWr { wr_id: 1, sg_list: &sg }).map_err(|e| e.errno()), Err(22));
    // Full, too many SGEs, resize, busy.
    let two = [Sge::default(); 2];
    assert_eq!(d.post_srq_recv(s.srq, &RecvWr { wr_id: 1, sg_list: &two }).map_err(|e| e.errno()), Err(22));
    for k in 0..4 {
        d.post_srq_recv(s.srq, &RecvWr { wr_id: k, sg_list: &sg }).unwrap();
    }
    assert_eq!(d.post_srq_recv(s.srq, &RecvWr { wr_id: 5, sg_list: &sg }), Err(VerbsError::QueueFull));
    let a = SrqAttr { max_wr: 8, ..Default::default() };
    assert_eq!(d.modify_srq(s.srq, &a, SrqAttrMask::MAX_WR).map_err(|e| e.errno()), Err(22));
    assert_eq!(d.destroy_srq(s.srq).map_err(|e| e.errno()), Err(16));
    assert_eq!(d.dealloc_pd(pd).map_err(|e| e.errno()), Err(16));
    // An SRQ of another PD cannot back a QP.
    let pd2 = d.alloc_pd();
    let cq = d.create_cq(4).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
        srq: Some(s.srq),
    };
    assert_eq!(d.create_qp(pd2, &init).map_err(|e| e.errno()), Err(22));
    for r in s.rx {
        d.destroy_qp(r.qpn).unwrap();
    }
    d.destroy_srq(s.srq).unwrap();
    assert_eq!(d.destroy_srq(s.srq).map_err(|e| e.errno()), Err(2));
}

#[test]
fn a_ud_qp_receives_datagrams_from_an_srq() {
    let mut net = Network::new(9, LinkConfig::default());
    net.add(device(1, 9));
    net.add(device(2, 10));
    let (pd0, pd1) = (net.dev(0).alloc_pd(), net.dev(1).alloc_pd());
    let srq = net.dev(1).create_srq(pd1, &SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    let (cq0, cq1) = (net.dev(0).create_cq(16).unwrap(), net.dev(1).create_cq(16).unwrap());
    let cap = QpCap::default();
    let i0 = QpInitAttr { qp_type: QpType::Ud, send_cq: cq0, recv_cq: cq0, cap, sq_sig_all: false, srq: None };
    let i1 = QpInitAttr { srq: Some(srq), send_cq: cq1, recv_cq: cq1, ..i0 };
    let (qa, qb) = (net.dev(0).create_qp(pd0, &i0).unwrap(), net.dev(1).create_qp(pd1, &i1).unwrap());
    ud_ready(net.dev(0), qa, 7, 0).unwrap();
    ud_ready(net.dev(1), qb, 7, 0).unwrap();
    let dst = reg(&mut net, 1, pd1, 4096, ALL_ACCESS, |_| 0);
    net.dev(1).post_srq_recv(srq, &RecvWr { wr_id: 42, sg_list: &[sge(&dst, 0, 4096)] }).unwrap();
    let src = reg(&mut net, 0, pd0, 4096, ALL_ACCESS, |i| pattern(4, i));
    let cfg = net.dev(1).config().clone();
    let av = AddressVector { dgid: cfg.gids[1], sgid_index: 1, dmac: cfg.mac, ..Default::default() };
    let ah = net.dev(0).create_ah(pd0, &av).unwrap();
    let sg = [sge(&src, 0, 700)];
    let ud = Some(UdDest { ah, remote_qpn: qb, remote_qkey: 7 });
    net.dev(0).post_send(qa, &SendWr { wr_id: 1, sg_list: &sg, ud, ..Default::default() }).unwrap();
    let end = QpEnd { node: 1, pd: pd1, cq: cq1, qpn: qb };
    let w = wait_wcs(&mut net, &end, 1, 10_000);
    assert_eq!((w[0].wr_id, w[0].byte_len, w[0].src_qp), (42, 740, qa));
    assert_eq!(mr_bytes(&mut net, 1, &dst)[40..740], mr_bytes(&mut net, 0, &src)[..700]);
}
