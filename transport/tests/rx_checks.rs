//! Hostile input at the device boundary: every frame that must not reach a QP is dropped and
//! counted — bad ICRC, unknown QP, wrong source, wrong destination, bad P_Key, wrong opcode
//! class — and a correct frame still gets through afterwards.

mod common;

use common::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::LinkConfig;
use uroce_transport::*;
use uroce_wire::*;

#[allow(clippy::too_many_arguments)]
/// Build a WRITE_ONLY frame from `from` to `to`'s QP as if from the connected peer.
fn frame(
    src_ip: std::net::Ipv4Addr,
    dst_ip: std::net::Ipv4Addr,
    qpn: u32,
    psn: u32,
    va: u64,
    rkey: u32,
    pkey: u16,
    opcode: Opcode,
) -> Vec<u8> {
    let info = opcode.info().unwrap();
    let mut f = Forged::from_peer(1, 2, qpn, psn, opcode);
    (f.src_ip, f.dst_ip, f.bth.pkey, f.payload) = (src_ip, dst_ip, pkey, vec![1, 2, 3, 4]);
    f.ext.reth = Some(RethRepr { va, rkey, dma_len: 4 });
    if info.headers.contains(uroce_wire::opcode::HeaderKind::Deth) {
        f.ext.deth = Some(DethRepr { qkey: 1, src_qp: Qpn::new(1) });
        f.ext.reth = None;
    }
    f.emit()
}

#[test]
fn hostile_frames_are_dropped_and_counted() {
    let o = QpOptions { psns: Some((100, 200)), ..Default::default() };
    let (mut net, _a, b) = pair(31, LinkConfig::default(), &o);
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    let now = Instant::ZERO;
    let (peer, me) = (ipv4(1), ipv4(2));
    let ok = frame(peer, me, b.qpn, 100, dst.addr, dst.rkey, 0xffff, Opcode::RC_RDMA_WRITE_ONLY);

    let mut bad_icrc = ok.clone();
    let n = bad_icrc.len();
    bad_icrc[n - 2] ^= 0x10;
    let cases: Vec<(&str, Vec<u8>, RxDrop)> = vec![
        ("bad ICRC", bad_icrc, RxDrop::Icrc),
        (
            "unknown QP",
            frame(peer, me, b.qpn ^ 1, 100, dst.addr, dst.rkey, 0xffff, Opcode::RC_RDMA_WRITE_ONLY),
            RxDrop::UnknownQp(b.qpn ^ 1),
        ),
        (
            "wrong source",
            frame(ipv4(9), me, b.qpn, 100, dst.addr, dst.rkey, 0xffff, Opcode::RC_RDMA_WRITE_ONLY),
            RxDrop::BadSource,
        ),
        (
            "wrong destination",
            frame(peer, ipv4(7), b.qpn, 100, dst.addr, dst.rkey, 0xffff, Opcode::RC_RDMA_WRITE_ONLY),
            RxDrop::WrongDestination,
        ),
        (
            "bad P_Key",
            frame(peer, me, b.qpn, 100, dst.addr, dst.rkey, 0x1234, Opcode::RC_RDMA_WRITE_ONLY),
            RxDrop::BadPkey,
        ),
        ("UD opcode to an RC QP", frame(peer, me, b.qpn, 100, 0, 0, 0xffff, Opcode::UD_SEND_ONLY), RxDrop::BadOpcode),
        ("truncated", ok[..ok.len() - 9].to_vec(), RxDrop::Malformed(parse_frame(&ok[..ok.len() - 9]).unwrap_err())),
    ];
    for (what, f, want) in &cases {
        assert_eq!(net.dev(1).handle_frame(now, f), Err(*want), "{what}");
        assert!(net.dev(1).poll_transmit(now, &mut [0u8; 9000]).is_none(), "{what}: nothing answers it");
    }
    let c = *net.dev(1).counters();
    assert_eq!(
        (
            c.icrc_err,
            c.dropped_unknown_qp,
            c.dropped_bad_src,
            c.dropped_wrong_dst,
            c.dropped_bad_pkey,
            c.dropped_bad_opcode,
            c.malformed_pkts,
            c.rcvd_pkts
        ),
        (1, 1, 1, 1, 1, 1, 1, 0)
    );
    assert!(mr_bytes(&mut net, 1, &dst).iter().all(|&x| x == 0), "no frame wrote memory");
    // The QP is unharmed: the good frame is executed and acknowledged.
    assert_eq!(net.dev(1).handle_frame(now, &ok), Ok(()));
    assert_eq!(&mr_bytes(&mut net, 1, &dst)[..4], &[1, 2, 3, 4]);
    let mut buf = [0u8; 9000];
    let n = net.dev(1).poll_transmit(now, &mut buf).expect("an ACK");
    let p = parse_frame(&buf[..n]).unwrap();
    assert_eq!(p.roce.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(p.roce.bth.psn, Psn::new(100));
    assert_eq!(p.roce.ext.aeth.unwrap().syndrome, Syndrome::ACK_UNLIMITED);
}

#[test]
fn out_of_sequence_gets_one_nak_then_silence() {
    let o = QpOptions { psns: Some((100, 200)), ..Default::default() };
    let (mut net, _a, b) = pair(32, LinkConfig::default(), &o);
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    let mut buf = [0u8; 9000];
    let f = |psn| frame(ipv4(1), ipv4(2), b.qpn, psn, dst.addr, dst.rkey, 0xffff, Opcode::RC_RDMA_WRITE_ONLY);
    // PSNs 101, 102, 103 while 100 is expected: one NAK PSN sequence error for 100.
    for psn in [101, 102, 103] {
        net.dev(1).handle_frame(Instant::ZERO, &f(psn)).unwrap();
    }
    let n = net.dev(1).poll_transmit(Instant::ZERO, &mut buf).unwrap();
    let p = parse_frame(&buf[..n]).unwrap();
    assert_eq!(p.roce.ext.aeth.unwrap().syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(p.roce.bth.psn, Psn::new(100));
    assert!(net.dev(1).poll_transmit(Instant::ZERO, &mut buf).is_none(), "only one NAK per gap (C9-110)");
    assert_eq!(net.dev(1).counters().out_of_seq_request, 3);
    assert_eq!(net.dev(1).counters().send_seq_err, 1);
    // A duplicate (behind the expected PSN) is re-acknowledged, not executed again.
    net.dev(1).handle_frame(Instant::ZERO, &f(100)).unwrap();
    let _ = net.dev(1).poll_transmit(Instant::ZERO, &mut buf).unwrap();
    net.dev(1).mr_mut(dst.lkey).unwrap().as_mut_slice()[..4].fill(0);
    net.dev(1).handle_frame(Instant::ZERO, &f(100)).unwrap();
    let n = net.dev(1).poll_transmit(Instant::ZERO, &mut buf).unwrap();
    let p = parse_frame(&buf[..n]).unwrap();
    assert_eq!((p.roce.bth.opcode, p.roce.bth.psn), (Opcode::RC_ACKNOWLEDGE, Psn::new(100)));
    assert!(mr_bytes(&mut net, 1, &dst)[..4].iter().all(|&x| x == 0), "duplicate executed again");
    assert_eq!(net.dev(1).counters().duplicate_request, 1);
}

/// Flip one payload bit (the last payload byte, just before the ICRC): the ICRC no longer
/// matches, every header is as sent.
fn corrupt(mut f: Vec<u8>) -> Vec<u8> {
    let n = f.len();
    f[n - 5] ^= 0x01;
    f
}

/// A corrupt frame is an ICRC error and nothing else, whatever else is wrong with it. An RDMA
/// WRITE's ICRC is checked late (by the responder, after its lookups, just before placement),
/// so this holds it to that: no other counter moves, nothing answers, no byte lands, and the QP
/// carries on as if the frame never came.
#[test]
fn corrupt_writes_are_icrc_errors_whatever_else_is_wrong() {
    let o = QpOptions { psns: Some((100, 200)), ..Default::default() };
    let (mut net, _a, b) = pair(33, LinkConfig::default(), &o);
    let dst = reg(&mut net, 1, b.pd, 64, ALL_ACCESS, |_| 0);
    let other = reg(&mut net, 1, b.pd, 64, AccessFlags::LOCAL_WRITE, |_| 0);
    let now = Instant::ZERO;
    let (peer, me) = (ipv4(1), ipv4(2));
    let w =
        |src, to, qpn: u32, psn, va, rkey, pkey| frame(src, to, qpn, psn, va, rkey, pkey, Opcode::RC_RDMA_WRITE_ONLY);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("in sequence", w(peer, me, b.qpn, 100, dst.addr, dst.rkey, 0xffff)),
        ("future PSN (would be NAKed)", w(peer, me, b.qpn, 105, dst.addr, dst.rkey, 0xffff)),
        ("duplicate PSN (would be re-ACKed)", w(peer, me, b.qpn, 99, dst.addr, dst.rkey, 0xffff)),
        ("bad R_Key (would be NAKed)", w(peer, me, b.qpn, 100, dst.addr, dst.rkey ^ 0x100, 0xffff)),
        ("no REMOTE_WRITE (would be NAKed)", w(peer, me, b.qpn, 100, other.addr, other.rkey, 0xffff)),
        ("out of bounds (would be NAKed)", w(peer, me, b.qpn, 100, dst.addr + 62, dst.rkey, 0xffff)),
        ("unknown QP", w(peer, me, b.qpn ^ 1, 100, dst.addr, dst.rkey, 0xffff)),
        ("wrong source", w(ipv4(9), me, b.qpn, 100, dst.addr, dst.rkey, 0xffff)),
        ("wrong destination", w(peer, ipv4(7), b.qpn, 100, dst.addr, dst.rkey, 0xffff)),
        ("bad P_Key", w(peer, me, b.qpn, 100, dst.addr, dst.rkey, 0x1234)),
    ];
    for (what, f) in &cases {
        // Each uncorrupted frame really is handled differently (so the ICRC error is not
        // just what happens to all of them): only the in-sequence one would be executed.
        assert_eq!(parse_frame(f).unwrap().check_icrc(), Ok(()), "{what}");
        assert_eq!(net.dev(1).handle_frame(now, &corrupt(f.clone())), Err(RxDrop::Icrc), "{what}");
        assert!(net.dev(1).poll_transmit(now, &mut [0u8; 9000]).is_none(), "{what}: nothing answers it");
    }
    let want = Counters { icrc_err: cases.len() as u64, ..Default::default() };
    assert_eq!(*net.dev(1).counters(), want, "only ICRC errors are counted");
    assert!(mr_bytes(&mut net, 1, &dst).iter().all(|&x| x == 0), "no corrupt frame wrote memory");
    assert_eq!(net.dev(1).query_qp(b.qpn).unwrap().qp_state, QpState::Rts);
    // The QP still expects PSN 100 and executes it.
    assert_eq!(net.dev(1).handle_frame(now, &cases[0].1), Ok(()));
    assert_eq!(&mr_bytes(&mut net, 1, &dst)[..4], &[1, 2, 3, 4]);
    let mut buf = [0u8; 9000];
    let n = net.dev(1).poll_transmit(now, &mut buf).expect("an ACK");
    let p = parse_frame(&buf[..n]).unwrap();
    assert_eq!((p.roce.bth.opcode, p.roce.bth.psn), (Opcode::RC_ACKNOWLEDGE, Psn::new(100)));
    assert_eq!(net.dev(1).counters().rcvd_pkts, 1, "corrupt frames are not received packets");
}

/// A corrupt MIDDLE packet of a multi-packet WRITE, between good packets: dropped before any
/// of its bytes land, the responder's place in the message unchanged; the retransmitted
/// packet completes the message with every byte right.
#[test]
fn corrupt_middle_packet_lands_nothing_and_the_message_completes() {
    let o = QpOptions { mtu: Mtu::Mtu256, psns: Some((100, 200)), ..Default::default() };
    let (mut net, a, b) = pair(34, LinkConfig::default(), &o);
    let src = reg(&mut net, 0, a.pd, 768, ALL_ACCESS, |i| pattern(34, i));
    let dst = reg(&mut net, 1, b.pd, 768, ALL_ACCESS, |_| 0);
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &[sge(&src, 0, 768)],
        send_flags: SendFlags::SIGNALED,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    net.dev(0).post_send(a.qpn, &wr).unwrap();
    let now = Instant::ZERO;
    let mut frames = Vec::new();
    let mut buf = [0u8; 9000];
    while let Some(n) = net.dev(0).poll_transmit(now, &mut buf) {
        frames.push(buf[..n].to_vec());
    }
    let ops: Vec<Opcode> = frames.iter().map(|f| parse_frame(f).unwrap().roce.bth.opcode).collect();
    assert_eq!(ops, [Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST]);
    let b_dev = 1;
    assert_eq!(net.dev(b_dev).handle_frame(now, &frames[0]), Ok(()));
    assert_eq!(net.dev(b_dev).handle_frame(now, &corrupt(frames[1].clone())), Err(RxDrop::Icrc));
    let got = mr_bytes(&mut net, b_dev, &dst);
    assert_eq!(&got[..256], &mr_bytes(&mut net, 0, &src)[..256], "the first packet landed");
    assert!(got[256..].iter().all(|&x| x == 0), "the corrupt middle packet landed nothing");
    // The LAST packet now is out of sequence (the responder still expects the MIDDLE's PSN):
    // one PSN-sequence-error NAK, nothing placed.
    assert_eq!(net.dev(b_dev).handle_frame(now, &frames[2]), Ok(()));
    assert!(mr_bytes(&mut net, b_dev, &dst)[256..].iter().all(|&x| x == 0));
    let n = net.dev(b_dev).poll_transmit(now, &mut buf).expect("a NAK");
    let p = parse_frame(&buf[..n]).unwrap();
    assert_eq!(p.roce.ext.aeth.unwrap().syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(p.roce.bth.psn, parse_frame(&frames[1]).unwrap().roce.bth.psn);
    // The retransmitted MIDDLE and LAST complete the message, byte for byte.
    assert_eq!(net.dev(b_dev).handle_frame(now, &frames[1]), Ok(()));
    assert_eq!(net.dev(b_dev).handle_frame(now, &frames[2]), Ok(()));
    assert_eq!(mr_bytes(&mut net, b_dev, &dst), mr_bytes(&mut net, 0, &src));
    let c = net.dev(b_dev).counters();
    assert_eq!((c.icrc_err, c.rcvd_pkts, c.out_of_seq_request), (1, 4, 1));
}
