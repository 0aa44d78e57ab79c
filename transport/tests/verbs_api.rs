//! The verbs surface: object lifetimes, attribute validation, keys and QP numbers, the QP
//! state machine through `modify_qp`.

mod common;

use std::collections::HashSet;
use uroce_transport::sim::setup::*;
use uroce_transport::*;

fn dev() -> Device {
    device(1, 42)
}

fn init(cq: CqHandle) -> QpInitAttr {
    QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap: QpCap::default(), sq_sig_all: false, srq: None }
}

#[test]
fn gid_table_like_rxe() {
    let d = dev();
    let g = &d.config().gids;
    assert_eq!(g[0].to_string(), "fe80::ff:fe00:1"); // EUI-64 of 02:00:00:00:00:01
    assert_eq!(g[1].to_string(), "::ffff:10.0.0.1");
    assert!(g[1].is_ipv4());
    assert_eq!(g[2].to_string(), "fd00::1");
}

#[test]
fn keys_are_random_and_unique_qpns_too() {
    let mut d = dev();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let mut keys = Vec::new();
    for _ in 0..200 {
        keys.push(d.reg_mr(pd, vec![0u8; 8].into_boxed_slice(), AccessFlags::LOCAL_WRITE).unwrap().rkey);
    }
    let set: HashSet<_> = keys.iter().collect();
    assert_eq!(set.len(), keys.len());
    // Not sequential: consecutive keys differ by more than a small stride almost always.
    let small_steps = keys.windows(2).filter(|w| w[1].wrapping_sub(w[0]) < 1024).count();
    assert!(small_steps < 3, "keys look sequential: {:x?}", &keys[..8]);
    let qpns: Vec<u32> = (0..100).map(|_| d.create_qp(pd, &init(cq)).unwrap()).collect();
    assert_eq!(qpns.iter().collect::<HashSet<_>>().len(), 100);
    assert!(qpns.iter().all(|&q| (0x11..=0xff_ffff).contains(&q)));
    // The same seed gives the same keys (deterministic), another seed others.
    let mut d2 = dev();
    let pd2 = d2.alloc_pd();
    assert_eq!(d2.reg_mr(pd2, vec![0u8; 8].into_boxed_slice(), AccessFlags::NONE).unwrap().rkey, keys[0]);
    let mut d3 = device(1, 43);
    let pd3 = d3.alloc_pd();
    assert_ne!(d3.reg_mr(pd3, vec![0u8; 8].into_boxed_slice(), AccessFlags::NONE).unwrap().rkey, keys[0]);
}

#[test]
fn object_lifetimes() {
    let mut d = dev();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let mem: Box<[u8]> = vec![7u8; 100].into_boxed_slice();
    let ptr = mem.as_ptr() as u64;
    let mr = d.reg_mr(pd, mem, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    assert_eq!(mr.addr, ptr, "the MR's address is the buffer's, as ibv_reg_mr");
    assert_eq!(mr.lkey, mr.rkey);
    let qpn = d.create_qp(pd, &init(cq)).unwrap();
    assert_eq!(d.dealloc_pd(pd), Err(VerbsError::Busy("PD")));
    assert_eq!(d.destroy_cq(cq), Err(VerbsError::Busy("CQ")));
    d.destroy_qp(qpn).unwrap();
    assert_eq!(d.destroy_cq(cq), Ok(()));
    assert_eq!(d.dealloc_pd(pd), Err(VerbsError::Busy("PD")));
    let back = d.dereg_mr(mr.lkey).unwrap();
    assert_eq!(back.as_ptr() as u64, ptr);
    assert_eq!(&back[..], &[7u8; 100][..], "dereg_mr hands the memory back intact");
    assert_eq!(d.dealloc_pd(pd), Ok(()));
    assert_eq!(d.dereg_mr(mr.lkey), Err(VerbsError::NoSuchObject("MR")));
    assert_eq!(VerbsError::Busy("PD").errno(), 16);
}

#[test]
fn reg_mr_validation() {
    let mut d = dev();
    let pd = d.alloc_pd();
    let m = || vec![0u8; 8].into_boxed_slice();
    assert!(matches!(d.reg_mr(pd, m(), AccessFlags::REMOTE_WRITE), Err(VerbsError::InvalidArgument(_))));
    assert!(matches!(d.reg_mr(pd, m(), AccessFlags::REMOTE_ATOMIC), Err(VerbsError::InvalidArgument(_))));
    assert!(d.reg_mr(pd, m(), AccessFlags::REMOTE_READ).is_ok());
    assert_eq!(d.reg_mr(PdHandle(9), m(), AccessFlags::NONE), Err(VerbsError::NoSuchObject("PD")));
    assert!(d.reg_mr_iova(pd, m(), u64::MAX - 3, AccessFlags::NONE).is_err());
    let a = d.reg_mr_with_key(pd, m(), 0x1000, AccessFlags::NONE, 0x247).unwrap();
    assert_eq!((a.rkey, a.addr), (0x247, 0x1000));
    assert!(d.reg_mr_with_key(pd, m(), 0x1000, AccessFlags::NONE, 0x247).is_err());
}

#[test]
fn create_qp_validation() {
    let mut d = dev();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    for ty in [QpType::Uc, QpType::Ud] {
        let mut a = init(cq);
        a.qp_type = ty;
        let q = d.create_qp(pd, &a).unwrap();
        assert_eq!(d.qp(q).unwrap().qp_type(), ty);
    }
    let mut a = init(cq);
    a.cap.max_send_wr = 0;
    assert!(d.create_qp(pd, &a).is_err());
    let mut a = init(cq);
    a.cap.max_send_sge = 99;
    assert!(d.create_qp(pd, &a).is_err());
    let mut a = init(cq);
    a.send_cq = CqHandle(77);
    assert_eq!(d.create_qp(pd, &a), Err(VerbsError::NoSuchObject("CQ")));
    assert_eq!(d.create_qp_with_qpn(pd, &init(cq), 0x11), Ok(0x11));
    assert!(d.create_qp_with_qpn(pd, &init(cq), 0x11).is_err());
}

/// Walk a QP through every state with `modify_qp` and check illegal moves and attributes.
#[test]
fn modify_qp_state_machine_and_attribute_checks() {
    use QpAttrMask as M;
    let mut d = dev();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let q = d.create_qp(pd, &init(cq)).unwrap();
    let mut a = QpAttr { qp_state: QpState::Rts, ..Default::default() };
    assert_eq!(
        d.modify_qp(q, &a, M::STATE),
        Err(VerbsError::InvalidTransition { from: QpState::Reset, to: QpState::Rts })
    );
    // Posting before RTS is refused; receives are refused in RESET.
    assert_eq!(d.post_send(q, &SendWr::default()), Err(VerbsError::InvalidState(QpState::Reset)));
    assert_eq!(d.post_recv(q, &RecvWr::default()), Err(VerbsError::InvalidState(QpState::Reset)));
    a.qp_state = QpState::Init;
    a.port_num = 2;
    assert!(matches!(d.modify_qp(q, &a, connect::INIT_MASK), Err(VerbsError::InvalidArgument(_))));
    a.port_num = 1;
    d.modify_qp(q, &a, connect::INIT_MASK).unwrap();
    assert_eq!(d.qp(q).unwrap().state(), QpState::Init);
    assert_eq!(d.post_recv(q, &RecvWr::default()), Ok(()));
    let rtr = connect::RTR_MASK;
    a.qp_state = QpState::Rtr;
    a.ah_attr = AddressVector { dgid: Gid::from(ipv4(2)), sgid_index: 1, dmac: mac(2), ..Default::default() };
    a.dest_qp_num = 0x123;
    a.path_mtu = Mtu::Mtu4096;
    for (bad, what) in [
        (QpAttr { rq_psn: 1 << 24, ..a }, "rq_psn"),
        (QpAttr { min_rnr_timer: 32, ..a }, "min_rnr_timer"),
        (QpAttr { max_dest_rd_atomic: 200, ..a }, "max_dest_rd_atomic"),
        (QpAttr { dest_qp_num: 1 << 24, ..a }, "dest_qp_num"),
        (QpAttr { ah_attr: AddressVector { sgid_index: 9, ..a.ah_attr }, ..a }, "sgid_index"),
        (QpAttr { ah_attr: AddressVector { dgid: Gid::from(ipv6(2)), ..a.ah_attr }, ..a }, "v4 sgid, v6 dgid"),
    ] {
        assert!(matches!(d.modify_qp(q, &bad, rtr), Err(VerbsError::InvalidArgument(_))), "{what}");
        assert_eq!(d.qp(q).unwrap().state(), QpState::Init, "{what}: a failed modify changes nothing");
    }
    assert_eq!(d.modify_qp(q, &a, rtr.minus(M::RQ_PSN)), Err(VerbsError::MissingAttribute { missing: M::RQ_PSN }));
    d.modify_qp(q, &a, rtr).unwrap();
    let rts = connect::RTS_MASK;
    a.qp_state = QpState::Rts;
    a.retry_cnt = 8;
    assert!(matches!(d.modify_qp(q, &a, rts), Err(VerbsError::InvalidArgument("retry_cnt"))));
    a.retry_cnt = 7;
    a.timeout = 14;
    a.sq_psn = 0xabcdef;
    d.modify_qp(q, &a, rts).unwrap();
    let got = d.query_qp(q).unwrap();
    assert_eq!(
        (got.qp_state, got.sq_psn, got.timeout, got.path_mtu, got.dest_qp_num),
        (QpState::Rts, 0xabcdef, 14, Mtu::Mtu4096, 0x123)
    );
    // RTS -> SQD -> RTS, RTS -> RTS with an allowed attribute, then ERR and RESET.
    d.modify_qp(q, &QpAttr { qp_state: QpState::Sqd, ..a }, M::STATE).unwrap();
    d.modify_qp(q, &QpAttr { qp_state: QpState::Rts, ..a }, M::STATE).unwrap();
    d.modify_qp(q, &QpAttr { min_rnr_timer: 3, ..a }, M::MIN_RNR_TIMER).unwrap();
    assert!(d.modify_qp(q, &a, M::PATH_MTU).is_err());
    d.modify_qp(q, &QpAttr { qp_state: QpState::Err, ..a }, M::STATE).unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(d.poll_cq(cq, &mut wc).unwrap(), 1, "the posted receive is flushed");
    assert_eq!(wc[0].status, WcStatus::WrFlushErr);
    d.modify_qp(q, &QpAttr { qp_state: QpState::Reset, ..a }, M::STATE).unwrap();
    assert_eq!(d.query_qp(q).unwrap().qp_state, QpState::Reset);
}

#[test]
fn path_mtu_is_bounded_by_the_port() {
    let mut cfg = device(1, 1).config().clone();
    cfg.active_mtu = Mtu::for_link_mtu(1500);
    assert_eq!(cfg.active_mtu, Mtu::Mtu1024, "rxe: 1500-byte link -> IB MTU 1024");
    assert_eq!(Mtu::for_link_mtu(9000), Mtu::Mtu4096);
    let mut d = Device::new(cfg);
    let pd = d.alloc_pd();
    let cq = d.create_cq(4).unwrap();
    let q = d.create_qp(pd, &init(cq)).unwrap();
    connect::to_init(&mut d, q, AccessFlags::NONE).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu2048,
        ah_attr: AddressVector { dgid: Gid::from(ipv4(2)), sgid_index: 1, ..Default::default() },
        ..Default::default()
    };
    let rtr = connect::RTR_MASK;
    assert!(matches!(d.modify_qp(q, &a, rtr), Err(VerbsError::InvalidArgument(_))));
}

/// `ibv_rereg_mr`: a region's PD, access and memory change under the same keys; what
/// `ibv_reg_mr` refuses is refused, and then nothing changed.
#[test]
fn rereg_mr_keeps_the_keys_and_checks_like_reg_mr() {
    let mut d = dev();
    let (pd, pd2) = (d.alloc_pd(), d.alloc_pd());
    let mr = d.reg_mr(pd, vec![7u8; 64].into_boxed_slice(), AccessFlags::LOCAL_WRITE).unwrap();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    assert!(d.rereg_mr(mr.lkey, Some(pd2), Some(rw), None).unwrap().is_none());
    let r = d.mr(mr.lkey).unwrap();
    assert_eq!((r.pd, r.access, r.rkey, r.addr), (pd2, rw, mr.rkey, mr.addr));
    assert_eq!(d.dealloc_pd(pd2), Err(VerbsError::Busy("PD")), "the region moved to pd2");
    d.dealloc_pd(pd).unwrap();
    // new memory, same keys; the old comes back
    let mem = MrMemory::Owned(vec![9u8; 128].into_boxed_slice());
    let old = d.rereg_mr(mr.lkey, None, None, Some((mem, Some(0x1000)))).unwrap().unwrap();
    assert_eq!(old.bytes(), &[7u8; 64][..]);
    let r = d.mr(mr.lkey).unwrap();
    assert_eq!((r.addr, r.len(), r.as_slice()[127], r.access), (0x1000, 128, 9, rw));
    // refused: remote write without local write, a dead PD, a wrapping range, no such MR
    let bad = AccessFlags::REMOTE_WRITE;
    assert_eq!(d.rereg_mr(mr.lkey, None, Some(bad), None).map(|_| ()).map_err(|e| e.errno()), Err(22));
    assert_eq!(d.rereg_mr(mr.lkey, Some(pd), None, None).map(|_| ()).map_err(|e| e.errno()), Err(2));
    let mem = MrMemory::Owned(vec![0u8; 16].into_boxed_slice());
    assert!(d.rereg_mr(mr.lkey, None, None, Some((mem, Some(u64::MAX - 4)))).is_err());
    assert!(d.rereg_mr(mr.lkey ^ 1, None, None, None).is_err());
    let r = d.mr(mr.lkey).unwrap();
    assert_eq!((r.pd, r.access, r.addr, r.len()), (pd2, rw, 0x1000, 128), "unchanged by the refusals");
}

/// Modify to RESET removes the QP's unpolled completions from its CQs (as mlx5 does), and
/// only its own.
#[test]
fn reset_discards_the_qps_unpolled_completions() {
    let mut d = dev();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let (qa, qb) = (d.create_qp(pd, &init(cq)).unwrap(), d.create_qp(pd, &init(cq)).unwrap());
    let mr = d.reg_mr(pd, vec![0u8; 64].into_boxed_slice(), AccessFlags::LOCAL_WRITE).unwrap();
    let sg = [Sge { addr: mr.addr, length: 64, lkey: mr.lkey }];
    for q in [qa, qb] {
        connect::to_init(&mut d, q, AccessFlags::NONE).unwrap();
        d.post_recv(q, &RecvWr { wr_id: q as u64, sg_list: &sg }).unwrap();
        d.post_recv(q, &RecvWr { wr_id: q as u64, sg_list: &sg }).unwrap();
        d.modify_qp(q, &QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE).unwrap();
    }
    assert_eq!(d.cq(cq).unwrap().len(), 4, "two flushed receives each");
    d.modify_qp(qa, &QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE).unwrap();
    let mut out = [WorkCompletion::default(); 8];
    let n = d.poll_cq(cq, &mut out).unwrap();
    assert_eq!(
        out[..n].iter().map(|w| (w.qp_num, w.status)).collect::<Vec<_>>(),
        [(qb, WcStatus::WrFlushErr), (qb, WcStatus::WrFlushErr)]
    );
}
