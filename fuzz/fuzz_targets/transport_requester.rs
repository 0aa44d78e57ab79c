//! The requester and completer against an adversarial responder: an RC QP (0x11, path MTU
//! 256) posts WRITEs, READs, SENDs and atomics; every request it transmits is recorded, and
//! the fuzzer answers them the way a broken or hostile responder would — ACKs and NAKs of
//! every syndrome at the request's PSN or off it, READ responses of any position and length,
//! atomic ACKs, replays of earlier answers, raw bytes — while the clock moves and more WRs are
//! posted. Whatever it answers:
//! * nothing panics;
//! * the guard regions around the local buffer never change;
//! * a READ that completes successfully holds exactly the bytes its responses carried for
//!   its offsets (`pattern`);
//! * no WR completes twice or without having been posted, and once the responder falls
//!   silent and the timers run out, every posted WR has completed (nothing is lost).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use uroce_transport::sim::setup::{ipv4, mac};
use uroce_transport::*;
use uroce_wire::*;

const GUARD: u8 = 0xa5;
// (checked with one slice comparison: a byte loop is a traced comparison per byte under
// `-fsanitize-coverage`, which took 40 % of the executions' time)
const BASE: u64 = 0x20_0000;
const PAGE: usize = 4096;
const MTU: usize = 256;

/// The byte a READ response carries at offset `o` of its READ.
fn pattern(o: usize) -> u8 {
    (o.wrapping_mul(7) + 3) as u8
}

/// A request uroce sent: its PSN, opcode and (READ) length.
#[derive(Clone, Copy)]
struct Sent {
    psn: u32,
    opcode: u8,
    len: u32,
}

struct Rig {
    dev: Device,
    qpn: u32,
    cq: CqHandle,
    guards: [u32; 2],
    buf_key: u32,
    posted: HashSet<u64>,
    completed: HashSet<u64>,
    /// wr_id -> (READ length, destination offset in the buffer) for posted READs.
    reads: Vec<(u64, u32, u64)>,
    sent: Vec<Sent>,
    answers: Vec<Vec<u8>>,
    next_wr: u64,
}

fn rig() -> Rig {
    let mut cfg = DeviceConfig::new(mac(2), &[ipv4(2).into()]);
    cfg.seed = 11;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 12).unwrap();
    let cap = QpCap { max_send_wr: 32, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: true, srq: None };
    let qpn = dev.create_qp_with_qpn(pd, &init, 0x11).unwrap();
    let lw = AccessFlags::LOCAL_WRITE;
    // guard | buffer (4 pages) | guard, at adjacent addresses
    let g0 =
        dev.reg_mr_with_key(pd, vec![GUARD; PAGE].into_boxed_slice(), BASE, AccessFlags::NONE, 0x100).unwrap().lkey;
    let buf =
        dev.reg_mr_with_key(pd, vec![0u8; 4 * PAGE].into_boxed_slice(), BASE + PAGE as u64, lw, 0x200).unwrap().lkey;
    let g1 = dev
        .reg_mr_with_key(pd, vec![GUARD; PAGE].into_boxed_slice(), BASE + 5 * PAGE as u64, AccessFlags::NONE, 0x300)
        .unwrap()
        .lkey;
    let local = connect::RcLocal {
        access: lw,
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
    Rig {
        dev,
        qpn,
        cq,
        guards: [g0, g1],
        buf_key: buf,
        posted: HashSet::new(),
        completed: HashSet::new(),
        reads: Vec::new(),
        sent: Vec::new(),
        answers: Vec::new(),
        next_wr: 0,
    }
}

fn u32_at(d: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([0, 1, 2, 3].map(|k| d.get(i + k).copied().unwrap_or(0)))
}

fn post(r: &mut Rig, d: &[u8]) {
    let id = r.next_wr;
    r.next_wr += 1;
    let op = match d.first().copied().unwrap_or(0) % 5 {
        0 => WrOpcode::RdmaWrite,
        1 | 2 => WrOpcode::RdmaRead,
        3 => WrOpcode::Send,
        _ => WrOpcode::AtomicFetchAndAdd,
    };
    let len = if op.is_atomic() { 8 } else { u32_at(d, 1) % 1200 };
    // a READ lands at one of a few offsets of the buffer, never past its end
    let off = (d.get(5).copied().unwrap_or(0) as u64 % 4) * 2048 % (4 * PAGE as u64 - 1200);
    let s = [Sge { addr: BASE + PAGE as u64 + off, length: len, lkey: r.buf_key }];
    let wr = SendWr {
        wr_id: id,
        opcode: op,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED,
        remote_addr: 0x9000,
        rkey: 7,
        ..Default::default()
    };
    if r.dev.post_send(r.qpn, &wr).is_ok() {
        r.posted.insert(id);
        if op == WrOpcode::RdmaRead {
            r.reads.push((id, len, off));
        }
    }
}

/// The fuzzer's answer to one of the requests sent.
fn answer(r: &Rig, d: &[u8]) -> Option<Vec<u8>> {
    let s = *r.sent.get(d.first().copied()? as usize % r.sent.len().max(1))?;
    let mode = d.get(1).copied().unwrap_or(0);
    let off = (d.get(2).copied().unwrap_or(0) as i8) as i32 / 16; // mostly 0, sometimes off
    let msn = Msn::new(u32_at(d, 3) % 64);
    let is_read = s.opcode & 0x1f == 0x0c;
    let (opcode, psn, payload) = match mode % 4 {
        // ACK/NAK of any syndrome
        0 | 1 => (Opcode::RC_ACKNOWLEDGE, s.psn as i32 + off, 0),
        // a READ response: packet k of the READ, any position, a plausible or any length
        2 if is_read => {
            let npkts = (s.len as usize).div_ceil(MTU).max(1) as u32;
            let k = u32_at(d, 7) % npkts;
            let pos = [
                Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                Opcode::RC_RDMA_READ_RESPONSE_LAST,
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            ];
            let natural = if npkts == 1 {
                3
            } else if k == 0 {
                0
            } else if k + 1 == npkts {
                2
            } else {
                1
            };
            let p = if d.get(11).is_some_and(|b| b & 3 == 0) { (d[11] >> 2) as usize % 4 } else { natural };
            let want = (s.len as usize).saturating_sub(k as usize * MTU).min(MTU);
            let len =
                if d.get(12).is_some_and(|b| b & 7 == 0) { d[12] as usize + (d[12] as usize & 1) * 256 } else { want };
            (pos[p], (s.psn + k) as i32 + off, len)
        }
        _ => (Opcode::RC_ATOMIC_ACKNOWLEDGE, s.psn as i32 + off, 0),
    };
    let info = opcode.info()?;
    use uroce_wire::opcode::HeaderKind as K;
    let ext = ExtHeaders {
        aeth: info.headers.contains(K::Aeth).then_some(AethRepr {
            syndrome: if mode % 4 == 1 {
                Syndrome::from_byte(d.get(13).copied().unwrap_or(0))
            } else {
                Syndrome::from_byte(0x1f)
            },
            msn,
        }),
        atomic_ack_eth: info
            .headers
            .contains(K::AtomicAckEth)
            .then_some(AtomicAckEthRepr { orig: u64::from(u32_at(d, 14)) }),
        ..ExtHeaders::default()
    };
    let psn = Psn::new(psn as u32 & 0xff_ffff);
    let k0 = psn.value().wrapping_sub(s.psn) as usize * MTU;
    let f = FrameRepr {
        eth: EthernetRepr { src_addr: mac(1), dst_addr: mac(2), vlan: None, ethertype: EtherType::IPV4 },
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: ipv4(1),
            dst_addr: ipv4(2),
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT },
        roce: RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: packet::pad_for(payload),
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: false,
                psn,
            },
            ext,
            payload_len: payload,
        },
    };
    let mut buf = vec![0u8; f.buffer_len()];
    let n = f
        .emit(&mut buf, UdpChecksum::Zero, |p| {
            for (i, b) in p.iter_mut().enumerate() {
                *b = pattern(k0.wrapping_add(i));
            }
        })
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

fn check(r: &mut Rig) {
    for key in r.guards {
        let mr = r.dev.mr(key).expect("regions stay");
        assert!(mr.as_slice() == &[GUARD; PAGE][..], "guard region {key:#x} was written");
    }
    let mut wc = [WorkCompletion::default(); 64];
    loop {
        let n = r.dev.poll_cq(r.cq, &mut wc).unwrap();
        for w in &wc[..n] {
            assert!(r.posted.contains(&w.wr_id), "completion for a WR never posted");
            assert!(r.completed.insert(w.wr_id), "WR {} completed twice", w.wr_id);
            if w.status == WcStatus::Success {
                if let Some(&(_, len, off)) = r.reads.iter().find(|x| x.0 == w.wr_id) {
                    let mr = r.dev.mr(r.buf_key).expect("buffer");
                    let got = &mr.as_slice()[off as usize..off as usize + len as usize];
                    assert!(
                        got.iter().enumerate().all(|(i, &b)| b == pattern(i)),
                        "READ {} completed with other bytes",
                        w.wr_id
                    );
                }
            }
        }
        if n < wc.len() {
            break;
        }
    }
}

fn drain_tx(r: &mut Rig, now: u64, buf: &mut [u8]) {
    while let Some(n) = r.dev.poll_transmit(uroce_transport::Instant::from_nanos(now), buf) {
        let Ok(p) = parse_frame(&buf[..n]) else { continue };
        let b = p.roce.bth;
        if b.opcode.info().is_some_and(|i| i.is_request()) && r.sent.len() < 256 {
            let len = p.roce.ext.reth.map_or(0, |x| x.dma_len);
            r.sent.push(Sent { psn: b.psn.value(), opcode: b.opcode.0, len });
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = rig();
    let mut now = 0u64;
    let mut buf = vec![0u8; 9000];
    let mut chunks = data.split(|&b| b == 0xff);
    // a first WR, so that there is something to answer
    post(&mut r, &[1, 0x10, 0x02, 0, 0, 0]);
    drain_tx(&mut r, now, &mut buf);
    for _ in 0..64 {
        let Some(c) = chunks.next() else { break };
        let Some((&kind, rest)) = c.split_first() else { continue };
        match kind % 8 {
            0..=3 => {
                if let Some(f) = answer(&r, rest) {
                    let _ = r.dev.handle_frame(uroce_transport::Instant::from_nanos(now), &f);
                    if r.answers.len() < 32 {
                        r.answers.push(f);
                    }
                }
            }
            4 => {
                // an earlier answer again (a duplicate, late and out of order), or raw bytes
                let i = rest.first().copied().unwrap_or(0) as usize;
                let f = if i < 0x80 { r.answers.get(i % r.answers.len().max(1)).cloned() } else { Some(rest.to_vec()) };
                if let Some(f) = f {
                    let _ = r.dev.handle_frame(uroce_transport::Instant::from_nanos(now), &f);
                }
            }
            5 => {
                now += (u32_at(rest, 0) as u64 % 100_000) * 16;
                r.dev.handle_timeout(uroce_transport::Instant::from_nanos(now));
            }
            _ => post(&mut r, rest),
        }
        drain_tx(&mut r, now, &mut buf);
        check(&mut r);
    }
    // The responder falls silent: retries run out, and everything posted completes.
    for _ in 0..10_000 {
        let Some(t) = r.dev.poll_timeout() else { break };
        now = now.max(t.as_nanos());
        r.dev.handle_timeout(uroce_transport::Instant::from_nanos(now));
        drain_tx(&mut r, now, &mut buf);
    }
    check(&mut r);
    let lost: Vec<&u64> = r.posted.difference(&r.completed).collect();
    assert!(lost.is_empty(), "posted but never completed: {lost:?}");
});
