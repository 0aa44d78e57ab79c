//! UC and UD queue pairs: bytes on the wire (opcodes, no AckReq, DETH, the UD UDP source
//! port), data byte for byte, completions, and what each does with loss, a wrong Q_Key, a
//! missing receive WQE and an oversized message. Two devices driven frame by frame, so that
//! exactly the chosen frame is lost.

mod common;

use common::*;
use uroce_transport::connect::*;
use uroce_transport::formulas::ud_udp_sport;
use uroce_transport::sim::setup::*;
use uroce_transport::*;
use uroce_wire::{parse_frame, Opcode};

const QKEY: u32 = 0x1111_1111;

struct Two {
    devs: [Device; 2],
    pd: [PdHandle; 2],
    cq: [CqHandle; 2],
    now: Instant,
}

impl Two {
    fn new() -> Two {
        // A 1500-byte link: IB MTU 1024, as rxe's port has.
        let mtu = |c: &mut DeviceConfig| c.active_mtu = Mtu::Mtu1024;
        let mut devs = [device_with(1, 11, mtu), device_with(2, 12, mtu)];
        let pd = [devs[0].alloc_pd(), devs[1].alloc_pd()];
        let cq = [devs[0].create_cq(256).unwrap(), devs[1].create_cq(256).unwrap()];
        Two { devs, pd, cq, now: Instant::from_nanos(1_000) }
    }
    fn qp(&mut self, i: usize, qp_type: QpType) -> u32 {
        let cap = QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
        let init = QpInitAttr { qp_type, send_cq: self.cq[i], recv_cq: self.cq[i], cap, sq_sig_all: false, srq: None };
        self.devs[i].create_qp(self.pd[i], &init).unwrap()
    }
    fn reg(&mut self, i: usize, len: usize, fill: impl Fn(usize) -> u8) -> MrInfo {
        let mem: Box<[u8]> = (0..len).map(fill).collect();
        self.devs[i].reg_mr(self.pd[i], mem, ALL_ACCESS).unwrap()
    }
    /// Move every frame until both are quiet; `keep(from, n, frame)` decides whether the n-th
    /// frame from device `from` arrives. Returns every frame sent, by device.
    fn run(&mut self, mut keep: impl FnMut(usize, usize, &[u8]) -> bool) -> [Vec<Vec<u8>>; 2] {
        let mut sent: [Vec<Vec<u8>>; 2] = Default::default();
        let mut buf = vec![0u8; 16384];
        loop {
            let mut moved = false;
            for (from, out) in sent.iter_mut().enumerate() {
                while let Some(n) = self.devs[from].poll_transmit(self.now, &mut buf) {
                    moved = true;
                    let f = buf[..n].to_vec();
                    if keep(from, out.len(), &f) {
                        let _ = self.devs[1 - from].handle_frame(self.now, &f);
                    }
                    out.push(f);
                }
            }
            self.now += core::time::Duration::from_micros(1);
            if !moved {
                return sent;
            }
        }
    }
    fn wcs(&mut self, i: usize) -> Vec<WorkCompletion> {
        let mut out = [WorkCompletion::default(); 64];
        let n = self.devs[i].poll_cq(self.cq[i], &mut out).unwrap();
        out[..n].to_vec()
    }
    fn bytes(&self, i: usize, mr: &MrInfo) -> Vec<u8> {
        self.devs[i].mr(mr.lkey).unwrap().as_slice().to_vec()
    }
    fn remote(&self, i: usize, qpn: u32, psn: u32) -> RcRemote {
        let cfg = self.devs[i].config();
        RcRemote { qpn, psn, gid: cfg.gids[1], mac: cfg.mac }
    }
    fn ah_to(&self, from: usize, to: usize) -> AddressHandle {
        let cfg = self.devs[to].config();
        let av = AddressVector { dgid: cfg.gids[1], sgid_index: 1, dmac: cfg.mac, ..Default::default() };
        self.devs[from].create_ah(self.pd[from], &av).unwrap()
    }
}

fn opcodes(frames: &[Vec<u8>]) -> Vec<Opcode> {
    frames.iter().map(|f| parse_frame(f).unwrap().roce.bth.opcode).collect()
}

fn uc_pair(t: &mut Two) -> (u32, u32) {
    let (qa, qb) = (t.qp(0, QpType::Uc), t.qp(1, QpType::Uc));
    let local = |psn| RcLocal { access: ALL_ACCESS, sq_psn: psn, ..Default::default() };
    let (ra, rb) = (t.remote(1, qb, 0x200), t.remote(0, qa, 0x100));
    connect_uc(&mut t.devs[0], qa, &local(0x100), &ra).unwrap();
    connect_uc(&mut t.devs[1], qb, &local(0x200), &rb).unwrap();
    (qa, qb)
}

fn send_wr(wr_id: u64, opcode: WrOpcode, sg: &[Sge]) -> SendWr<'_> {
    SendWr { wr_id, opcode, sg_list: sg, send_flags: SendFlags::SIGNALED, ..Default::default() }
}

#[test]
fn uc_send_and_write_arrive_unacknowledged_and_complete_when_sent() {
    let mut t = Two::new();
    let (qa, qb) = uc_pair(&mut t);
    let src = t.reg(0, 8192, |i| pattern(3, i));
    let dst = t.reg(1, 8192, |_| 0);
    let rbuf = t.reg(1, 4096, |_| 0);
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 70, sg_list: &[sge(&rbuf, 0, 4096)] }).unwrap();
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 71, sg_list: &[sge(&rbuf, 0, 4096)] }).unwrap();
    let s = [sge(&src, 0, 2500)];
    t.devs[0].post_send(qa, &send_wr(1, WrOpcode::Send, &s)).unwrap();
    let w = [sge(&src, 100, 3000)];
    let mut wr = send_wr(2, WrOpcode::RdmaWriteWithImm, &w);
    (wr.remote_addr, wr.rkey, wr.imm_data) = (dst.addr + 7, dst.rkey, 0xfeed_f00d);
    t.devs[0].post_send(qa, &wr).unwrap();
    // The sender completes both as soon as their last packets leave: nothing comes back.
    let sent = t.run(|_, _, _| true);
    assert!(sent[1].is_empty(), "a UC responder sent {:?}", opcodes(&sent[1]));
    assert_eq!(
        opcodes(&sent[0]),
        [0x20, 0x21, 0x22, 0x26, 0x27, 0x29].map(Opcode),
        "UC SEND FIRST/MIDDLE/LAST, WRITE FIRST/MIDDLE/LAST WITH IMM"
    );
    for (i, f) in sent[0].iter().enumerate() {
        let p = parse_frame(f).unwrap();
        assert!(!p.roce.bth.ack_req, "UC packet {i} asks for an ACK");
        assert_eq!(p.roce.bth.psn.value(), 0x100 + i as u32);
    }
    let wa = t.wcs(0);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::Send), (2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    let wb = t.wcs(1);
    assert_eq!(wb.len(), 2);
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].byte_len, wb[0].src_qp), (70, WcStatus::Success, 2500, qa));
    assert_eq!(
        (wb[1].wr_id, wb[1].opcode, wb[1].imm_data, wb[1].wc_flags),
        (71, WcOpcode::RecvRdmaWithImm, 0xfeed_f00d, WcFlags::WITH_IMM)
    );
    assert_eq!(t.bytes(1, &rbuf)[..2500], t.bytes(0, &src)[..2500]);
    assert_eq!(t.bytes(1, &dst)[7..3007], t.bytes(0, &src)[100..3100]);
    assert_eq!(t.devs[0].counters().sent_pkts, 6);
    assert_eq!(t.devs[0].qp(qa).unwrap().state(), QpState::Rts);
}

#[test]
fn uc_loss_drops_the_message_and_the_next_one_arrives() {
    let mut t = Two::new();
    let (qa, qb) = uc_pair(&mut t);
    let src = t.reg(0, 8192, |i| pattern(4, i));
    let rbuf = t.reg(1, 8192, |_| 0);
    for id in 0..2 {
        t.devs[1].post_recv(qb, &RecvWr { wr_id: 80 + id, sg_list: &[sge(&rbuf, id as usize * 4096, 4096)] }).unwrap();
    }
    // Three SENDs of 3 packets; the MIDDLE of the first is lost.
    for (i, off) in [0usize, 3000, 6000].iter().enumerate() {
        let s = [sge(&src, *off, 2100)];
        t.devs[0].post_send(qa, &send_wr(i as u64, WrOpcode::Send, &s)).unwrap();
    }
    t.run(|from, n, _| !(from == 0 && n == 1));
    // Every send completes at the sender; the receiver gets the 2nd and 3rd messages, the
    // first receive WQE reused from its start for the 2nd.
    assert_eq!(
        t.wcs(0).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(0, WcStatus::Success), (1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let wb = t.wcs(1);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(80, WcStatus::Success, 2100), (81, WcStatus::Success, 2100)]
    );
    let (r, s) = (t.bytes(1, &rbuf), t.bytes(0, &src));
    assert_eq!(r[..2100], s[3000..5100]);
    assert_eq!(r[4096..4096 + 2100], s[6000..8100]);
    let c = t.devs[1].counters();
    assert_eq!((c.out_of_seq_request, c.dropped_uc_msg, c.send_seq_err, c.sent_pkts), (1, 1, 0, 0));
    assert_eq!(t.devs[1].qp(qb).unwrap().state(), QpState::Rts);
}

#[test]
fn uc_refuses_reads_and_atomics_and_drops_what_it_cannot_take() {
    let mut t = Two::new();
    let (qa, qb) = uc_pair(&mut t);
    let src = t.reg(0, 4096, |i| pattern(5, i));
    let s = [sge(&src, 0, 8)];
    for op in [WrOpcode::RdmaRead, WrOpcode::AtomicFetchAndAdd, WrOpcode::SendWithInv] {
        let mut wr = send_wr(9, op, &s);
        (wr.remote_addr, wr.rkey) = (0x1000, 1);
        assert_eq!(t.devs[0].post_send(qa, &wr).map_err(|e| e.errno()), Err(22), "{op:?}");
    }
    // No receive WQE, then a bad R_Key: both dropped silently, the QP stays up, and a good
    // SEND after them arrives.
    let one = [sge(&src, 0, 100)];
    t.devs[0].post_send(qa, &send_wr(1, WrOpcode::Send, &one)).unwrap();
    let mut wr = send_wr(2, WrOpcode::RdmaWrite, &one);
    (wr.remote_addr, wr.rkey) = (0x10, 0xdead);
    t.devs[0].post_send(qa, &wr).unwrap();
    t.run(|_, _, _| true);
    let rbuf = t.reg(1, 4096, |_| 0);
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 90, sg_list: &[sge(&rbuf, 0, 64)] }).unwrap();
    // Too long for the WQE: LOC_LEN_ERR at the receiver (class D), QP still up.
    t.devs[0].post_send(qa, &send_wr(3, WrOpcode::Send, &one)).unwrap();
    t.run(|_, _, _| true);
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 91, sg_list: &[sge(&rbuf, 0, 4096)] }).unwrap();
    t.devs[0].post_send(qa, &send_wr(4, WrOpcode::Send, &one)).unwrap();
    let sent = t.run(|_, _, _| true);
    assert!(sent[1].is_empty());
    assert_eq!(t.wcs(0).len(), 4);
    let wb = t.wcs(1);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(90, WcStatus::LocLenErr), (91, WcStatus::Success)]
    );
    assert_eq!(t.bytes(1, &rbuf)[..100], t.bytes(0, &src)[..100]);
    assert_eq!(t.devs[1].counters().dropped_uc_msg, 3);
    assert_eq!(t.devs[1].qp(qb).unwrap().state(), QpState::Rts);
}

fn ud_pair(t: &mut Two) -> (u32, u32) {
    let (qa, qb) = (t.qp(0, QpType::Ud), t.qp(1, QpType::Ud));
    ud_ready(&mut t.devs[0], qa, QKEY, 0x10).unwrap();
    ud_ready(&mut t.devs[1], qb, QKEY, 0x20).unwrap();
    (qa, qb)
}

fn ud_wr<'a>(wr_id: u64, sg: &'a [Sge], ah: AddressHandle, qpn: u32, qkey: u32) -> SendWr<'a> {
    SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        sg_list: sg,
        send_flags: SendFlags::SIGNALED,
        ud: Some(UdDest { ah, remote_qpn: qpn, remote_qkey: qkey }),
        ..Default::default()
    }
}

#[test]
fn ud_datagram_lands_after_the_grh_with_its_source() {
    let mut t = Two::new();
    let (qa, qb) = ud_pair(&mut t);
    let src = t.reg(0, 4096, |i| pattern(6, i));
    let rbuf = t.reg(1, 4096, |_| 0xee);
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 5, sg_list: &[sge(&rbuf, 0, 1024 + 40)] }).unwrap();
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 6, sg_list: &[sge(&rbuf, 2048, 1024 + 40)] }).unwrap();
    let ah = t.ah_to(0, 1);
    let s = [sge(&src, 0, 999)];
    t.devs[0].post_send(qa, &ud_wr(1, &s, ah, qb, QKEY)).unwrap();
    let mut wr = ud_wr(2, &s, ah, qb, 0x8000_0000);
    (wr.opcode, wr.imm_data) = (WrOpcode::SendWithImm, 0x0102_0304);
    t.devs[0].post_send(qa, &wr).unwrap();
    let sent = t.run(|_, _, _| true);
    assert!(sent[1].is_empty());
    assert_eq!(opcodes(&sent[0]), [Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE]);
    for (i, f) in sent[0].iter().enumerate() {
        let p = parse_frame(f).unwrap();
        let d = p.roce.ext.deth.unwrap();
        // The high bit of the WR's Q_Key means the QP's own (C10-15).
        assert_eq!((d.qkey, d.src_qp.value()), (QKEY, qa));
        assert_eq!(
            (p.roce.bth.dest_qp.value(), p.roce.bth.psn.value(), p.roce.bth.ack_req),
            (qb, 0x10 + i as u32, false)
        );
        assert_eq!(p.udp.src_port, ud_udp_sport(qa));
    }
    assert_eq!(
        t.wcs(0).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let wb = t.wcs(1);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status, w.byte_len, w.src_qp, w.wc_flags)).collect::<Vec<_>>(),
        [
            (5, WcStatus::Success, 1039, qa, WcFlags::GRH),
            (6, WcStatus::Success, 1039, qa, WcFlags::GRH | WcFlags::WITH_IMM)
        ]
    );
    assert_eq!(wb[1].imm_data, 0x0102_0304);
    let r = t.bytes(1, &rbuf);
    // The GRH area of an IPv4 datagram: 20 zero bytes, then its IPv4 header as received.
    let ip = &sent[0][0][14..34];
    assert_eq!(r[..20], [0u8; 20]);
    assert_eq!(&r[20..40], ip);
    assert_eq!(r[40..1039], t.bytes(0, &src)[..999]);
    assert_eq!(r[1039], 0xee, "nothing past the datagram");
    assert_eq!(r[2048 + 40..2048 + 1039], t.bytes(0, &src)[..999]);
}

#[test]
fn ud_drops_wrong_qkey_no_wqe_and_too_long_and_skips_oversized_sends() {
    let mut t = Two::new();
    let (qa, qb) = ud_pair(&mut t);
    let src = t.reg(0, 4096, |i| pattern(7, i));
    let rbuf = t.reg(1, 4096, |_| 0);
    let ah = t.ah_to(0, 1);
    let s = [sge(&src, 0, 64)];
    t.devs[0].post_send(qa, &ud_wr(1, &s, ah, qb, QKEY)).unwrap(); // no WQE yet
    t.run(|_, _, _| true);
    t.devs[1].post_recv(qb, &RecvWr { wr_id: 5, sg_list: &[sge(&rbuf, 0, 100)] }).unwrap();
    t.devs[0].post_send(qa, &ud_wr(2, &s, ah, qb, 0x2222_2222)).unwrap(); // wrong Q_Key
    let big = [sge(&src, 0, 1025)];
    t.devs[0].post_send(qa, &ud_wr(3, &big, ah, qb, QKEY)).unwrap(); // larger than the MTU
    let long = [sge(&src, 0, 61)];
    t.devs[0].post_send(qa, &ud_wr(4, &long, ah, qb, QKEY)).unwrap(); // 61 + 40 > 100
    let fits = [sge(&src, 0, 60)];
    t.devs[0].post_send(qa, &ud_wr(5, &fits, ah, qb, QKEY)).unwrap();
    let sent = t.run(|_, _, _| true);
    // The oversized send never left, and used its PSN (C10-93.1.1).
    let psns: Vec<u32> = sent[0].iter().map(|f| parse_frame(f).unwrap().roce.bth.psn.value()).collect();
    assert_eq!(psns, [0x11, 0x13, 0x14]);
    let c = t.devs[1].counters();
    assert_eq!((c.dropped_ud_no_wqe, c.dropped_bad_qkey, c.dropped_ud_too_long, c.rdma_recvs), (1, 1, 1, 1));
    assert_eq!(t.devs[0].counters().ud_oversize_sends, 1);
    let wb = t.wcs(1);
    assert_eq!(wb.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(), [(5, WcStatus::Success, 100)]);
    let wa = t.wcs(0);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success),
            (5, WcStatus::Success)
        ]
    );
    assert_eq!(t.devs[0].qp(qa).unwrap().state(), QpState::Rts);
    // Posting checks: an AH is required, of the QP's PD; only SENDs.
    let (qc, pd2) = (t.qp(0, QpType::Ud), t.devs[0].alloc_pd());
    ud_ready(&mut t.devs[0], qc, QKEY, 0).unwrap();
    let no_ah = send_wr(4, WrOpcode::Send, &s);
    assert_eq!(t.devs[0].post_send(qc, &no_ah).map_err(|e| e.errno()), Err(22));
    let cfg = t.devs[1].config().clone();
    let av = AddressVector { dgid: cfg.gids[1], sgid_index: 1, dmac: cfg.mac, ..Default::default() };
    let other = t.devs[0].create_ah(pd2, &av).unwrap();
    assert_eq!(t.devs[0].post_send(qc, &ud_wr(5, &s, other, qb, QKEY)).map_err(|e| e.errno()), Err(22));
    let mut w = ud_wr(6, &s, ah, qb, QKEY);
    w.opcode = WrOpcode::RdmaWrite;
    assert_eq!(t.devs[0].post_send(qc, &w).map_err(|e| e.errno()), Err(22));
    // A UD QP hears datagrams only: a UC QP aimed at its number is dropped as a bad opcode.
    let uc = t.qp(0, QpType::Uc);
    let local = RcLocal { sq_psn: 0, ..Default::default() };
    let r = t.remote(1, qb, 0);
    connect_uc(&mut t.devs[0], uc, &local, &r).unwrap();
    t.devs[0].post_send(uc, &send_wr(7, WrOpcode::Send, &s)).unwrap();
    let before = *t.devs[1].counters();
    t.run(|_, _, _| true);
    let c = t.devs[1].counters().delta(&before);
    assert_eq!((c.dropped_bad_opcode, c.rcvd_pkts, c.rdma_recvs), (1, 0, 0));
}

#[test]
fn ud_to_a_gid_of_its_own_device_loops_back() {
    let mut t = Two::new();
    let (qa, _) = ud_pair(&mut t);
    let qc = t.qp(0, QpType::Ud);
    ud_ready(&mut t.devs[0], qc, QKEY, 0).unwrap();
    let src = t.reg(0, 4096, |i| pattern(8, i));
    let rbuf = t.reg(0, 4096, |_| 0);
    t.devs[0].post_recv(qc, &RecvWr { wr_id: 9, sg_list: &[sge(&rbuf, 0, 2000)] }).unwrap();
    let ah = t.ah_to(0, 0);
    let s = [sge(&src, 0, 500)];
    t.devs[0].post_send(qa, &ud_wr(1, &s, ah, qc, QKEY)).unwrap();
    let sent = t.run(|_, _, _| true);
    assert!(sent[0].is_empty(), "a looped-back datagram left the device");
    let w = t.wcs(0);
    assert_eq!(w.iter().map(|w| (w.wr_id, w.byte_len, w.src_qp)).collect::<Vec<_>>(), [(1, 500, 0), (9, 540, qa)]);
    assert_eq!(t.bytes(0, &rbuf)[40..540], t.bytes(0, &src)[..500]);
    assert_eq!(t.devs[0].counters().loopback_pkts, 1);
}

/// UC under loss, reordering and duplication (seeded): every SEND completes at the sender;
/// each receive that completes holds exactly one whole message, byte for byte, and messages
/// arrive in order, none twice — a lost packet costs its message and nothing else, and a
/// duplicated packet nothing.
#[test]
fn uc_under_loss_delivers_whole_messages_or_nothing() {
    use uroce_transport::sim::{LinkConfig, Network};
    let link = LinkConfig { loss: 0.05, dup: 0.05, reorder: 0.02, ..LinkConfig::default() };
    let mut net = Network::new(77, link);
    let mtu = |c: &mut DeviceConfig| c.active_mtu = Mtu::Mtu1024;
    net.add(device_with(1, 77, mtu));
    net.add(device_with(2, 78, mtu));
    let cap = QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let mut ends = Vec::new();
    for n in 0..2 {
        let pd = net.dev(n).alloc_pd();
        let cq = net.dev(n).create_cq(1024).unwrap();
        let init = QpInitAttr { qp_type: QpType::Uc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
        let qpn = net.dev(n).create_qp(pd, &init).unwrap();
        ends.push(QpEnd { node: n, pd, cq, qpn });
    }
    for (me, peer, psn, peer_psn) in [(0, 1, 10, 20), (1, 0, 20, 10)] {
        let cfg = net.dev(peer).config().clone();
        let local = RcLocal { access: ALL_ACCESS, sq_psn: psn, ..Default::default() };
        let remote = RcRemote { qpn: ends[peer].qpn, psn: peer_psn, gid: cfg.gids[1], mac: cfg.mac };
        connect_uc(net.dev(me), ends[me].qpn, &local, &remote).unwrap();
    }
    let (a, b) = (ends[0], ends[1]);
    const N: usize = 200;
    const SLOT: usize = 8192;
    // Half one packet (a duplicated SEND ONLY must not complete twice), half up to 7 packets.
    let sizes: Vec<usize> =
        (0..N).map(|i| if i % 2 == 0 { 1 + (i * 37) % 1024 } else { 1025 + (i * 2654435761) % 6000 }).collect();
    let src = reg(&mut net, 0, a.pd, N * SLOT, ALL_ACCESS, |i| pattern((i / SLOT) as u64, i % SLOT));
    let dst = reg(&mut net, 1, b.pd, N * SLOT, ALL_ACCESS, |_| 0);
    for i in 0..N {
        let sg = [sge(&dst, i * SLOT, SLOT)];
        net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: i as u64, sg_list: &sg }).unwrap();
    }
    for (i, &n) in sizes.iter().enumerate() {
        let sg = [sge(&src, i * SLOT, n)];
        let wr = SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::Send,
            sg_list: &sg,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        net.dev(0).post_send(a.qpn, &wr).unwrap();
        if i % 32 == 31 {
            net.run_idle(100_000);
        }
    }
    let sent = wait_wcs(&mut net, &a, N, 1_000_000);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
    net.run_idle(1_000_000);
    let got = drain_cq(&mut net, 1, b.cq);
    let (s, d) = (mr_bytes(&mut net, 0, &src), mr_bytes(&mut net, 1, &dst));
    let mut last = None;
    for w in &got {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        let slot = w.wr_id as usize * SLOT;
        let len = w.byte_len as usize;
        // Which message is it? The one whose bytes it holds (each message's pattern is its own).
        let m = (0..N).find(|&m| sizes[m] == len && d[slot..slot + len] == s[m * SLOT..m * SLOT + len]);
        let m = m.unwrap_or_else(|| panic!("receive {} holds no whole message ({len} bytes)", w.wr_id));
        assert!(last.is_none_or(|l| m > l), "message {m} after {last:?}: out of order or twice");
        last = Some(m);
    }
    let lost = N - got.len();
    assert!(lost > 0 && got.len() > N / 2, "{} of {N} arrived: the loss was not exercised", got.len());
    let c = *net.dev(1).counters();
    assert!(c.duplicate_request > 0, "duplication was not exercised");
    eprintln!(
        "UC at 5 % loss, 5 % duplication: {} of {N} messages arrived whole, {lost} dropped, {} duplicates dropped",
        got.len(),
        c.duplicate_request
    );
}

/// A UC QP in the middle of an RDMA WRITE does not take an RC WRITE MIDDLE from its peer at
/// the expected PSN: the receive fast path holds to the general path's transport rule.
#[test]
fn an_rc_opcode_is_not_placed_into_a_uc_write_by_the_fast_path() {
    use uroce_wire::{FrameRepr, UdpChecksum};
    let mut t = Two::new();
    assert!(t.devs[1].config().rx_fast_path);
    let (qa, _qb) = uc_pair(&mut t);
    let src = t.reg(0, 4096, |i| pattern(9, i));
    let dst = t.reg(1, 4096, |_| 0);
    let s = [sge(&src, 0, 3000)];
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, &s);
    (wr.remote_addr, wr.rkey) = (dst.addr, dst.rkey);
    t.devs[0].post_send(qa, &wr).unwrap();
    let sent = t.run(|_, _, _| false);
    t.devs[1].handle_frame(t.now, &sent[0][0]).unwrap(); // UC WRITE FIRST
    let p = parse_frame(&sent[0][1]).unwrap(); // UC WRITE MIDDLE, the expected PSN
    let mut roce = p.roce;
    roce.bth.opcode = Opcode::RC_RDMA_WRITE_MIDDLE;
    let f = FrameRepr { eth: p.eth.unwrap(), ip: p.ip, udp: p.udp, roce };
    let mut buf = vec![0u8; 2048];
    let n = f.emit(&mut buf, UdpChecksum::Zero, |b| b.fill(0x77)).unwrap();
    let before = t.devs[1].counters().dropped_bad_opcode;
    assert!(t.devs[1].handle_frame(t.now, &buf[..n]).is_err());
    assert_eq!(t.devs[1].counters().dropped_bad_opcode, before + 1);
    assert_eq!(t.devs[1].counters().rx_fast_path_pkts, 0);
    assert!(t.bytes(1, &dst)[1024..2048].iter().all(|&b| b == 0), "the RC frame was placed");
}
