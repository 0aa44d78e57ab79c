//! Loopback: a QP connected to a GID of its own device (rxe's `rxe_loopback`; rdma-core's
//! tests and two ranks of one program rely on it). The device receives such a QP's frames
//! itself: nothing leaves it, and WRITE, SEND with immediate, READ and atomics complete with
//! the data in place, on one device and one CQ, while a QP to another device still transmits.

use uroce_transport::sim::setup::*;
use uroce_transport::*;

/// Run `dev` until it has nothing to send, checking that it never hands out a frame.
fn settle(dev: &mut Device, now: Instant) {
    let mut buf = vec![0u8; 16384];
    assert_eq!(dev.poll_transmit(now, &mut buf), None, "a looped-back frame left the device");
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
        assert_eq!(dev.poll_transmit(now, &mut buf), None);
    }
}

fn wcs(dev: &mut Device, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = [WorkCompletion::default(); 16];
    let n = dev.poll_cq(cq, &mut out).unwrap();
    out[..n].to_vec()
}

/// A device with a PD, a CQ, and the attributes of RC QPs on that CQ.
fn one_device() -> (Device, QpOptions, PdHandle, CqHandle, QpInitAttr) {
    let mut dev = device(1, 7);
    let o = QpOptions::default();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64).unwrap();
    let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap: o.cap, sq_sig_all: false, srq: None };
    (dev, o, pd, cq, init)
}

#[test]
fn a_qp_connected_to_its_own_device_talks_to_itself() {
    let (mut dev, o, pd, cq, init) = one_device();
    let (qa, qb) = (dev.create_qp(pd, &init).unwrap(), dev.create_qp(pd, &init).unwrap());
    let cfg = dev.config().clone();
    let (pa, pb) = (dev.random_psn(), dev.random_psn());
    let remote = |qpn, psn| connect::RcRemote { qpn, psn, gid: cfg.gids[1], mac: cfg.mac };
    connect::connect_rc(&mut dev, qa, &o.rc_local(1, pa), &remote(qb, pb)).unwrap();
    connect::connect_rc(&mut dev, qb, &o.rc_local(1, pb), &remote(qa, pa)).unwrap();
    let src = dev.reg_mr(pd, (0..8192).map(|i| (i * 7 % 251) as u8).collect(), ALL_ACCESS).unwrap();
    let dst = dev.reg_mr(pd, vec![0u8; 8192].into_boxed_slice(), ALL_ACCESS).unwrap();
    let bytes = |dev: &Device, mr: &MrInfo| dev.mr(mr.lkey).unwrap().as_slice().to_vec();
    let now = Instant::from_nanos(1_000);
    fn wr<'a>(wr_id: u64, opcode: WrOpcode, sg: &'a [Sge], dst: &MrInfo) -> SendWr<'a> {
        SendWr {
            wr_id,
            opcode,
            sg_list: sg,
            send_flags: SendFlags::SIGNALED,
            remote_addr: dst.addr,
            rkey: dst.rkey,
            ..Default::default()
        }
    }

    // RDMA WRITE of 3000 bytes (3 packets at MTU 1024), A -> B.
    let s = [Sge { addr: src.addr, length: 3000, lkey: src.lkey }];
    dev.post_send(qa, &wr(1, WrOpcode::RdmaWrite, &s, &dst)).unwrap();
    settle(&mut dev, now);
    let w = wcs(&mut dev, cq);
    assert_eq!(w.len(), 1);
    assert_eq!((w[0].wr_id, w[0].status, w[0].opcode, w[0].qp_num), (1, WcStatus::Success, WcOpcode::RdmaWrite, qa));
    assert_eq!(bytes(&dev, &dst)[..3000], bytes(&dev, &src)[..3000]);
    assert!(bytes(&dev, &dst)[3000..].iter().all(|&b| b == 0));

    // SEND with immediate, B -> A, into A's receive: both completions on the one CQ.
    let r = [Sge { addr: dst.addr + 4096, length: 4096, lkey: dst.lkey }];
    dev.post_recv(qa, &RecvWr { wr_id: 20, sg_list: &r }).unwrap();
    let s = [Sge { addr: src.addr + 100, length: 2500, lkey: src.lkey }];
    dev.post_send(qb, &SendWr { imm_data: 0xfeed_f00d, ..wr(2, WrOpcode::SendWithImm, &s, &dst) }).unwrap();
    settle(&mut dev, now);
    let mut w = wcs(&mut dev, cq);
    w.sort_by_key(|w| w.wr_id);
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!((w[0].wr_id, w[0].status, w[0].opcode, w[0].qp_num), (2, WcStatus::Success, WcOpcode::Send, qb));
    assert_eq!((w[1].wr_id, w[1].status, w[1].opcode), (20, WcStatus::Success, WcOpcode::Recv));
    assert_eq!((w[1].qp_num, w[1].src_qp, w[1].byte_len, w[1].imm_data), (qa, qb, 2500, 0xfeed_f00d));
    assert_eq!(bytes(&dev, &dst)[4096..6596], bytes(&dev, &src)[100..2600]);

    // RDMA READ of 5000 bytes from B's view of dst back into src at 3000.
    let s = [Sge { addr: src.addr + 3000, length: 5000, lkey: src.lkey }];
    let before = bytes(&dev, &dst)[..5000].to_vec();
    dev.post_send(qb, &wr(3, WrOpcode::RdmaRead, &s, &dst)).unwrap();
    settle(&mut dev, now);
    let w = wcs(&mut dev, cq);
    assert_eq!((w.len(), w[0].wr_id, w[0].status, w[0].opcode), (1, 3, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(bytes(&dev, &src)[3000..8000], before[..]);

    // Fetch-and-add on dst's first 8 bytes: the old value comes back, the new one is in place.
    let old = u64::from_le_bytes(bytes(&dev, &dst)[..8].try_into().unwrap());
    let s = [Sge { addr: src.addr, length: 8, lkey: src.lkey }];
    dev.post_send(qa, &SendWr { compare_add: 5, ..wr(4, WrOpcode::AtomicFetchAndAdd, &s, &dst) }).unwrap();
    settle(&mut dev, now);
    let w = wcs(&mut dev, cq);
    assert_eq!((w.len(), w[0].wr_id, w[0].status), (1, 4, WcStatus::Success));
    assert_eq!(u64::from_le_bytes(bytes(&dev, &src)[..8].try_into().unwrap()), old);
    assert_eq!(u64::from_le_bytes(bytes(&dev, &dst)[..8].try_into().unwrap()), old.wrapping_add(5));

    let c = dev.counters();
    assert!(c.loopback_pkts >= 12, "{c:?}");
    assert_eq!(c.sent_pkts, c.loopback_pkts, "every frame sent was looped back");
    assert_eq!((c.icrc_err, c.malformed_pkts, c.dropped_wrong_dst), (0, 0, 0));
}

#[test]
fn a_qp_to_another_device_still_transmits() {
    let (mut dev, o, pd, _cq, init) = one_device();
    let q = dev.create_qp(pd, &init).unwrap();
    let other = device(2, 7).config().clone();
    let remote = connect::RcRemote { qpn: 0x77, psn: 1, gid: other.gids[1], mac: other.mac };
    connect::connect_rc(&mut dev, q, &o.rc_local(1, 1), &remote).unwrap();
    let mr = dev.reg_mr(pd, vec![1u8; 64].into_boxed_slice(), ALL_ACCESS).unwrap();
    let s = [Sge { addr: mr.addr, length: 64, lkey: mr.lkey }];
    let wr = SendWr { wr_id: 1, opcode: WrOpcode::RdmaWrite, sg_list: &s, rkey: 1, ..Default::default() };
    dev.post_send(q, &wr).unwrap();
    let mut buf = vec![0u8; 16384];
    assert!(dev.poll_transmit(Instant::from_nanos(1), &mut buf).is_some(), "the WRITE goes on the wire");
    assert_eq!(dev.counters().loopback_pkts, 0);
}
