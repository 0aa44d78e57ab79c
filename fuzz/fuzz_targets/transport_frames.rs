//! Arbitrary frame sequences into a device whose RC QP (0x11) and UC QP (0x12) are connected
//! to one peer, with a UD QP (0x13) on a shared receive queue beside them, and registered
//! memory regions surrounded by guard regions at adjacent addresses. Whatever arrives:
//! * nothing panics;
//! * no byte outside a region that allows the access changes: the guard regions (no remote
//!   access), a region in another protection domain, and a read-only region stay intact;
//! * no work request completes twice, and no more complete than were posted.
//!
//! The input drives a small program: each step either feeds a frame (built from fuzzer-chosen
//! header fields with a valid ICRC, so the responder and completer logic is reached, or raw
//! bytes), advances the clock, posts a send or receive WR, or drains the transmit queue.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use uroce_transport::sim::setup::{ipv4, mac};
use uroce_transport::*;
use uroce_wire::*;

const GUARD: u8 = 0xa5;
// (checked with one slice comparison: a byte loop is a traced comparison per byte under
// `-fsanitize-coverage`, which took 40 % of the executions' time)
const BASE: u64 = 0x10_0000;
const PAGE: usize = 4096;

const QKEY: u32 = 0x1111_1111;

struct Rig {
    dev: Device,
    qpn: u32,
    uc: u32,
    ud: u32,
    srq: SrqHandle,
    ah: AddressHandle,
    cq: CqHandle,
    keys: [u32; 6],
    posted: HashSet<u64>,
    completed: HashSet<u64>,
    next_wr: u64,
}

fn rig() -> Rig {
    let mut cfg = DeviceConfig::new(mac(2), &[ipv4(2).into()]);
    cfg.seed = 7;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd();
    let other_pd = dev.alloc_pd();
    let cq = dev.create_cq(256).unwrap();
    let cap = QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 16 };
    let qpn = dev.create_qp_with_qpn(pd, &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: true, srq: None }, 0x11).unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let guard = || vec![GUARD; PAGE].into_boxed_slice();
    // Contiguous addresses: guard | target | guard | read-only | other-PD | local buffer.
    let k0 = dev.reg_mr_with_key(pd, guard(), BASE, AccessFlags::NONE, 0x100).unwrap().rkey;
    let k1 = dev.reg_mr_with_key(pd, vec![0u8; PAGE].into_boxed_slice(), BASE + PAGE as u64, all, 0x200).unwrap().rkey;
    let k2 = dev.reg_mr_with_key(pd, guard(), BASE + 2 * PAGE as u64, AccessFlags::NONE, 0x300).unwrap().rkey;
    let k3 = dev
        .reg_mr_with_key(pd, vec![GUARD; PAGE].into_boxed_slice(), BASE + 3 * PAGE as u64, AccessFlags::REMOTE_READ, 0x400)
        .unwrap()
        .rkey;
    let k4 = dev.reg_mr_with_key(other_pd, vec![GUARD; PAGE].into_boxed_slice(), BASE + 4 * PAGE as u64, all, 0x500).unwrap().rkey;
    let k5 = dev.reg_mr_with_key(pd, vec![0u8; PAGE].into_boxed_slice(), BASE + 5 * PAGE as u64, AccessFlags::LOCAL_WRITE, 0x600).unwrap().lkey;
    let local = connect::RcLocal {
        access: all,
        path_mtu: Mtu::Mtu256,
        sq_psn: 500,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 1,
        retry_cnt: 2,
        rnr_retry: 2,
        hop_limit: 0,
        ..Default::default()
    };
    let remote = connect::RcRemote { qpn: 0x22, psn: 100, gid: Gid::from(ipv4(1)), mac: mac(1) };
    connect::connect_rc(&mut dev, qpn, &local, &remote).unwrap();
    let uc_init = QpInitAttr { qp_type: QpType::Uc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: true, srq: None };
    let uc = dev.create_qp_with_qpn(pd, &uc_init, 0x12).unwrap();
    connect::connect_uc(&mut dev, uc, &local, &remote).unwrap();
    let srq = dev.create_srq(pd, &SrqAttr { max_wr: 64, max_sge: 2, srq_limit: 4 }).unwrap();
    let ud_init = QpInitAttr { qp_type: QpType::Ud, srq: Some(srq), ..uc_init };
    let ud = dev.create_qp_with_qpn(pd, &ud_init, 0x13).unwrap();
    connect::ud_ready(&mut dev, ud, QKEY, 0).unwrap();
    let av = AddressVector { dgid: Gid::from(ipv4(1)), sgid_index: 1, dmac: mac(1), ..Default::default() };
    let ah = dev.create_ah(pd, &av).unwrap();
    let keys = [k0, k1, k2, k3, k4, k5];
    Rig { dev, qpn, uc, ud, srq, ah, cq, keys, posted: HashSet::new(), completed: HashSet::new(), next_wr: 0 }
}

fn u32_at(d: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([d.get(i).copied().unwrap_or(0), d.get(i + 1).copied().unwrap_or(0), d.get(i + 2).copied().unwrap_or(0), d.get(i + 3).copied().unwrap_or(0)])
}

/// A frame from the peer with fuzzer-chosen transport fields (valid ICRC).
fn crafted(r: &Rig, d: &[u8]) -> Option<Vec<u8>> {
    // Bits 5-6: the transport (RC, UC, UD, UD); bit 7: to another QP than its transport's.
    let b0 = *d.first()?;
    let (prefix, qp) = match (b0 >> 5) & 3 {
        0 => (0x00, 0x11),
        1 => (0x20, 0x12),
        _ => (0x60, 0x13),
    };
    let qp = if b0 & 0x80 != 0 { 0x11 + (qp - 0x10) % 3 } else { qp };
    let opcode = Opcode(prefix | (b0 & 0x1f));
    let info = opcode.info()?;
    let psn_off = (d.get(1).copied().unwrap_or(0) as i8) as i32;
    let key = r.keys[(d.get(2).copied().unwrap_or(0) % 6) as usize];
    let va = BASE + (u32_at(d, 3) % (7 * PAGE as u32)) as u64 - PAGE as u64 / 2;
    let len = u32_at(d, 7) % 1200;
    let payload_len = if info.has_payload { (d.get(11).copied().unwrap_or(0) as usize * 2).min(256) } else { 0 };
    let h = info.headers;
    use uroce_wire::opcode::HeaderKind as K;
    let syndrome = Syndrome::from_byte(d.get(12).copied().unwrap_or(0));
    let qkey = if d.get(14).is_some_and(|b| b & 1 == 1) { u32_at(d, 15) } else { QKEY };
    let ext = ExtHeaders {
        deth: h.contains(K::Deth).then_some(DethRepr { qkey, src_qp: Qpn::new(0x22) }),
        feth: h.contains(K::Feth).then_some(FethRepr::default()),
        reth: h.contains(K::Reth).then_some(RethRepr { va, rkey: key, dma_len: len }),
        atomic_eth: h.contains(K::AtomicEth).then_some(AtomicEthRepr { va, rkey: key, swap_add: 1, compare: 0 }),
        aeth: h.contains(K::Aeth).then_some(AethRepr { syndrome, msn: Msn::new(d.get(19).copied().unwrap_or(0) as u32 % 8) }),
        atomic_ack_eth: h.contains(K::AtomicAckEth).then_some(AtomicAckEthRepr { orig: 9 }),
        immdt: h.contains(K::ImmDt).then_some(1),
        ieth: h.contains(K::Ieth).then_some(key),
    };
    let psn_base = if info.is_request() { 100 } else { 500 };
    let f = FrameRepr {
        eth: EthernetRepr { src_addr: mac(1), dst_addr: mac(2), vlan: None, ethertype: EtherType::IPV4 },
        ip: IpRepr::V4(Ipv4Repr { src_addr: ipv4(1), dst_addr: ipv4(2), dscp: 0, ecn: Ecn::NotEct, ident: 0, dont_frag: true, ttl: 64, protocol: 17, payload_len: 0 }),
        udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT },
        roce: RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: packet::pad_for(payload_len),
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(qp),
                ack_req: d.get(13).is_some_and(|b| b & 1 == 1),
                psn: Psn::new((psn_base + psn_off) as u32),
            },
            ext,
            payload_len,
        },
    };
    let mut buf = vec![0u8; f.buffer_len()];
    let n = f.emit(&mut buf, UdpChecksum::Zero, |p| p.fill(0x5a)).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn check(r: &mut Rig) {
    // Guards, the read-only region and the other PD's region never change.
    for key in [r.keys[0], r.keys[2], r.keys[3], r.keys[4]] {
        let mr = r.dev.mr(key).expect("regions are never removed");
        assert!(mr.as_slice() == &[GUARD; PAGE][..], "region {key:#x} was written");
    }
    let mut wc = [WorkCompletion::default(); 64];
    loop {
        let n = r.dev.poll_cq(r.cq, &mut wc).unwrap();
        for w in &wc[..n] {
            if w.opcode == WcOpcode::Recv || w.opcode == WcOpcode::RecvRdmaWithImm {
                assert!(r.completed.insert(w.wr_id | 1 << 63), "receive {} completed twice", w.wr_id);
            } else {
                assert!(r.posted.contains(&w.wr_id), "completion for a WR never posted");
                assert!(r.completed.insert(w.wr_id), "send {} completed twice", w.wr_id);
            }
        }
        if n < wc.len() {
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = rig();
    let mut now = 0u64;
    let mut buf = vec![0u8; 9000];
    let mut chunks = data.split(|&b| b == 0xff);
    for _ in 0..64 {
        let Some(c) = chunks.next() else { break };
        let Some((&kind, rest)) = c.split_first() else { continue };
        match kind % 8 {
            0..=3 => {
                if let Some(f) = crafted(&r, rest) {
                    let _ = r.dev.handle_frame(uroce_transport::Instant::from_nanos(now), &f);
                }
            }
            4 => {
                let _ = r.dev.handle_frame(uroce_transport::Instant::from_nanos(now), rest);
            }
            5 => {
                now += (u32_at(rest, 0) as u64) << 8;
                r.dev.handle_timeout(uroce_transport::Instant::from_nanos(now));
            }
            6 => {
                let id = r.next_wr;
                r.next_wr += 1;
                let op = match rest.first().copied().unwrap_or(0) % 6 {
                    0 => WrOpcode::Send,
                    1 => WrOpcode::RdmaWrite,
                    2 => WrOpcode::RdmaRead,
                    3 => WrOpcode::AtomicFetchAndAdd,
                    4 => WrOpcode::SendWithImm,
                    _ => WrOpcode::AtomicCmpAndSwp,
                };
                let len = if op.is_atomic() { 8 } else { u32_at(rest, 1) % 700 };
                let s = [Sge { addr: BASE + 5 * PAGE as u64, length: len, lkey: r.keys[5] }];
                let ud = Some(UdDest { ah: r.ah, remote_qpn: 0x22, remote_qkey: QKEY });
                let wr = SendWr { wr_id: id, opcode: op, sg_list: &s, send_flags: SendFlags::SIGNALED, remote_addr: 0x8000, rkey: 1, ud, ..Default::default() };
                let qp = [r.qpn, r.qpn, r.uc, r.ud][(rest.get(5).copied().unwrap_or(0) % 4) as usize];
                if r.dev.post_send(qp, &wr).is_ok() {
                    r.posted.insert(id);
                }
            }
            _ => {
                let s = [Sge { addr: BASE + PAGE as u64, length: (u32_at(rest, 0) % 5000), lkey: r.keys[1] }];
                let id = r.next_wr;
                r.next_wr += 1;
                let wr = RecvWr { wr_id: id, sg_list: &s };
                let _ = match rest.get(4).copied().unwrap_or(0) % 3 {
                    0 => r.dev.post_recv(r.qpn, &wr),
                    1 => r.dev.post_recv(r.uc, &wr),
                    _ => r.dev.post_srq_recv(r.srq, &wr),
                };
            }
        }
        while r.dev.poll_transmit(uroce_transport::Instant::from_nanos(now), &mut buf).is_some() {}
        check(&mut r);
    }
    // Drain every timer: retries run out, everything posted completes exactly once.
    for _ in 0..64 {
        let Some(t) = r.dev.poll_timeout() else { break };
        now = now.max(t.as_nanos());
        r.dev.handle_timeout(uroce_transport::Instant::from_nanos(now));
        while r.dev.poll_transmit(uroce_transport::Instant::from_nanos(now), &mut buf).is_some() {}
    }
    check(&mut r);
});
