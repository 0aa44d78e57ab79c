//! The receive fast path (RDMA WRITE FIRST, MIDDLE, LAST and ONLY packets placed without a
//! `ParsedFrame`) against the general path. Two responders built alike, one with the fast path
//! and one without, are fed the same frames of a multi-packet WRITE and of a run of small
//! (single-packet, and one empty) WRITEs — as sent, and mutated: bits flipped, PSN, QPN, opcode,
//! P_Key, RETH, source address, QP access or state changed, frames cut, duplicated, dropped or
//! swapped, with the checksums and ICRC made right again or not. After every frame they must
//! agree on `handle_frame`'s result and on every counter (the fast path's own count aside);
//! at the end on every byte of the destination region, every frame they send back and the QP's
//! attributes.

use proptest::prelude::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::{seal_ip, UdpChecksum};

const IOVA: u64 = 0x7000_0000;
const LEN: usize = 24 * 1024 + 300;

/// A requester and a responder connected at 1024 MTU; the responder's region (at `IOVA`) is
/// `LEN + 8192` bytes of 0x5a, the requester's holds `LEN` bytes of a pattern.
struct Pair {
    a: Device,
    b: Device,
    qa: QpEnd,
    qb: QpEnd,
    src: MrInfo,
    dst: MrInfo,
}

fn pair(fast: bool) -> Pair {
    let mut net = Network::new(5, LinkConfig::default());
    net.add(device(1, 9));
    net.add(device(2, 9));
    let o = QpOptions { mtu: Mtu::Mtu1024, ..Default::default() };
    let (qa, qb) = connect(&mut net, 0, 1, &o).expect("connect");
    let src = reg(&mut net, 0, qa.pd, LEN, ALL_ACCESS, |i| (i * 7 + i / 251) as u8);
    let mem = vec![0x5au8; LEN + 8192].into_boxed_slice();
    let dst = net.dev(1).reg_mr_iova(qb.pd, mem, IOVA, ALL_ACCESS).expect("reg_mr_iova");
    let mut d = net.into_devices().into_iter();
    let (a, mut b) = (d.next().expect("A"), d.next().expect("B"));
    b.set_rx_fast_path(fast);
    Pair { a, b, qa, qb, src, dst }
}

/// The frames of one `LEN`-byte WRITE (FIRST, MIDDLEs, LAST), as the requester sends them.
fn write_frames(p: &mut Pair) -> Vec<Vec<u8>> {
    let s = [Sge { addr: p.src.addr, length: LEN as u32, lkey: p.src.lkey }];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED,
        remote_addr: IOVA + 100,
        rkey: p.dst.rkey,
        ..Default::default()
    };
    p.a.post_send(p.qa.qpn, &wr).expect("post_send");
    let mut out = Vec::new();
    let mut buf = vec![0u8; 9216];
    while let Some(n) = p.a.poll_transmit(time::Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// The sizes of [`small_write_frames`]' WRITEs: one packet each at 1024 MTU, one empty.
const SMALL: [usize; 7] = [64, 1, 1024, 0, 300, 8, 1000];

/// The frames of one WRITE ONLY per size in [`SMALL`], each to its own place in the region.
fn small_write_frames(p: &mut Pair) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 9216];
    let mut at = 0u64;
    for (k, &len) in SMALL.iter().enumerate() {
        let s = [Sge { addr: p.src.addr + k as u64 * 13, length: len as u32, lkey: p.src.lkey }];
        let wr = SendWr {
            wr_id: k as u64,
            opcode: WrOpcode::RdmaWrite,
            sg_list: &s[..(len > 0) as usize],
            send_flags: SendFlags::SIGNALED,
            remote_addr: IOVA + 40 + at,
            rkey: p.dst.rkey,
            ..Default::default()
        };
        at += len as u64 + 3;
        p.a.post_send(p.qa.qpn, &wr).expect("post_send");
        while let Some(n) = p.a.poll_transmit(time::Instant::ZERO, &mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

/// IPv4 header checksum and ICRC recomputed for the frame as it now is (if it is still long
/// enough to have them).
fn reseal(f: &mut [u8]) {
    if f.len() < 14 + 20 + 8 + 12 + 4 {
        return;
    }
    let total = u16::from_be_bytes([f[16], f[17]]) as usize;
    f[24..26].fill(0);
    let c = uroce_wire::ipv4::internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    if 14 + total <= f.len() && total >= 44 {
        let _ = seal_ip(&mut f[14..14 + total], UdpChecksum::Zero);
    }
}

#[derive(Clone, Debug)]
enum Edit {
    /// Flip bit `bit` of frame `i`.
    Flip { i: usize, bit: usize },
    /// Add `d` to the PSN of frame `i`.
    Psn { i: usize, d: i32 },
    /// XOR the destination QPN of frame `i` with `x`.
    Qpn { i: usize, x: u32 },
    /// Give frame `i` opcode `op`.
    Opcode { i: usize, op: u8 },
    /// Give frame `i` P_Key `k`.
    Pkey { i: usize, k: u16 },
    /// Set AckReq on frame `i`.
    AckReq { i: usize },
    /// XOR byte `at` of frame `i`'s IPv4 source (0..4) or destination (4..8) address with `x`.
    Addr { i: usize, at: usize, x: u8 },
    /// XOR byte `at` of the 16 after frame `i`'s BTH (a FIRST or ONLY packet's RETH: VA,
    /// R_Key, DMA length; payload otherwise) with `x`.
    Reth { i: usize, at: usize, x: u8 },
    /// Cut frame `i` to `n` bytes.
    Cut { i: usize, n: usize },
    /// Send frame `i` twice.
    Dup { i: usize },
    /// Do not send frame `i`.
    Drop { i: usize },
    /// Swap frames `i` and `j`.
    Swap { i: usize, j: usize },
    /// Before frame `i`, take REMOTE_WRITE from the responder's QP.
    NoRemoteWrite { i: usize },
    /// Before frame `i`, move the responder's QP to the error state.
    Error { i: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = 0usize..26;
    prop_oneof![
        (i.clone(), 0usize..8 * 1100).prop_map(|(i, bit)| Edit::Flip { i, bit }),
        (i.clone(), -3i32..4).prop_map(|(i, d)| Edit::Psn { i, d }),
        (i.clone(), 1u32..4).prop_map(|(i, x)| Edit::Qpn { i, x }),
        (i.clone(), prop::sample::select(vec![0x06u8, 0x07, 0x08, 0x09, 0x0a, 0x00, 0x01, 0x24]))
            .prop_map(|(i, op)| Edit::Opcode { i, op }),
        (i.clone(), prop::sample::select(vec![0xffffu16, 0x7fff, 0x8001, 0x1234]))
            .prop_map(|(i, k)| Edit::Pkey { i, k }),
        (i.clone(), 0usize..8, 1u8..=255).prop_map(|(i, at, x)| Edit::Addr { i, at, x }),
        (i.clone(), 0usize..16, prop::sample::select(vec![1u8, 0x10, 0x80, 0xff])).prop_map(|(i, at, x)| Edit::Reth {
            i,
            at,
            x
        }),
        i.clone().prop_map(|i| Edit::AckReq { i }),
        (i.clone(), 0usize..1100).prop_map(|(i, n)| Edit::Cut { i, n }),
        i.clone().prop_map(|i| Edit::Dup { i }),
        i.clone().prop_map(|i| Edit::Drop { i }),
        (i.clone(), 0usize..26).prop_map(|(i, j)| Edit::Swap { i, j }),
        i.clone().prop_map(|i| Edit::NoRemoteWrite { i }),
        i.prop_map(|i| Edit::Error { i }),
    ]
}

/// What happens to the responders before a frame, by frame position in the (edited) stream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Before {
    NoRemoteWrite,
    Error,
}

/// Ethernet + IPv4 + UDP + BTH: the bytes the field edits below touch.
const HEADERS: usize = 14 + 20 + 8 + 12;

/// The edited stream: frames, and per frame what to do to the responders first.
fn apply(frames: &[Vec<u8>], edits: &[Edit], reseal_them: bool) -> Vec<(Option<Before>, Vec<u8>)> {
    let mut s: Vec<(Option<Before>, Vec<u8>)> = frames.iter().map(|f| (None, f.clone())).collect();
    for e in edits {
        let n = s.len();
        if n == 0 {
            break;
        }
        let fix = |f: &mut Vec<u8>| {
            if reseal_them {
                reseal(f)
            }
        };
        match *e {
            Edit::Flip { i, bit } => {
                let f = &mut s[i % n].1;
                if bit / 8 < f.len() {
                    f[bit / 8] ^= 1 << (bit % 8);
                }
                fix(f);
            }
            Edit::Psn { i, d } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                let psn = u32::from_be_bytes([0, f[51], f[52], f[53]]).wrapping_add_signed(d) & 0xff_ffff;
                f[51..54].copy_from_slice(&psn.to_be_bytes()[1..]);
                fix(f);
            }
            Edit::Qpn { i, x } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                f[47] ^= x as u8;
                fix(f);
            }
            Edit::Opcode { i, op } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                f[42] = op;
                fix(f);
            }
            Edit::Pkey { i, k } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                f[44..46].copy_from_slice(&k.to_be_bytes());
                fix(f);
            }
            Edit::AckReq { i } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                f[50] |= 0x80;
                fix(f);
            }
            Edit::Addr { i, at, x } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS {
                    continue; // cut short by an earlier edit: no such field any more
                }
                f[26 + at] ^= x;
                fix(f);
            }
            Edit::Reth { i, at, x } => {
                let f = &mut s[i % n].1;
                if f.len() < HEADERS + 16 {
                    continue; // no such bytes
                }
                f[HEADERS + at] ^= x;
                fix(f);
            }
            Edit::Cut { i, n: m } => {
                let f = &mut s[i % n].1;
                f.truncate(m);
            }
            Edit::Dup { i } => {
                let f = s[i % n].clone();
                s.insert(i % n, f);
            }
            Edit::Drop { i } => {
                s.remove(i % n);
            }
            Edit::Swap { i, j } => s.swap(i % n, j % n),
            Edit::NoRemoteWrite { i } => s[i % n].0 = Some(Before::NoRemoteWrite),
            Edit::Error { i } => s[i % n].0 = Some(Before::Error),
        }
    }
    s
}

fn counters_but_fast(d: &Device) -> Counters {
    let mut c = *d.counters();
    c.rx_fast_path_pkts = 0;
    c
}

fn drain(d: &mut Device) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 9216];
    while let Some(n) = d.poll_transmit(time::Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Feed `stream` to a fast and a general responder; they must agree throughout. Returns how
/// many frames took the fast path.
fn agree(stream: &[(Option<Before>, Vec<u8>)]) -> Result<u64, TestCaseError> {
    let (mut fast, mut slow) = (pair(true), pair(false));
    for (k, (before, f)) in stream.iter().enumerate() {
        let change = |p: &mut Pair| match before {
            // RTS → RTS with the access flags changed (an ibv_modify_qp the spec allows).
            Some(Before::NoRemoteWrite) => {
                let attr =
                    QpAttr { qp_state: QpState::Rts, qp_access_flags: AccessFlags::LOCAL_WRITE, ..Default::default() };
                Some(p.b.modify_qp(p.qb.qpn, &attr, QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS))
            }
            Some(Before::Error) => {
                let attr = QpAttr { qp_state: QpState::Err, ..Default::default() };
                Some(p.b.modify_qp(p.qb.qpn, &attr, QpAttrMask::STATE))
            }
            None => None,
        };
        let (cf, cs) = (change(&mut fast), change(&mut slow));
        prop_assert_eq!(cf, cs);
        let (rf, rs) = (fast.b.handle_frame(time::Instant::ZERO, f), slow.b.handle_frame(time::Instant::ZERO, f));
        prop_assert_eq!(rf, rs, "frame {}: results differ", k);
        prop_assert_eq!(counters_but_fast(&fast.b), counters_but_fast(&slow.b), "frame {}: counters differ", k);
        prop_assert_eq!(drain(&mut fast.b), drain(&mut slow.b), "frame {}: responses differ", k);
    }
    let region = |p: &Pair| p.b.mr(p.dst.lkey).expect("region").as_slice().to_vec();
    prop_assert!(region(&fast) == region(&slow), "destination regions differ");
    let attr = |p: &Pair| format!("{:?}", p.b.query_qp(p.qb.qpn));
    prop_assert_eq!(attr(&fast), attr(&slow));
    Ok(fast.b.counters().rx_fast_path_pkts)
}

#[test]
fn unedited_write_takes_the_fast_path_for_every_packet() {
    let frames = write_frames(&mut pair(true));
    assert_eq!(frames.len(), LEN.div_ceil(1024));
    let stream: Vec<_> = frames.iter().map(|f| (None, f.clone())).collect();
    let fast = agree(&stream).expect("the paths agree");
    assert_eq!(fast, frames.len() as u64, "FIRST, MIDDLE and LAST take the fast path");
    // And the data landed, byte for byte.
    let mut p = pair(true);
    for f in &frames {
        p.b.handle_frame(time::Instant::ZERO, f).expect("accepted");
    }
    let got = p.b.mr(p.dst.lkey).expect("region").as_slice();
    let want: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    assert_eq!(&got[100..100 + LEN], &want[..]);
    assert!(got[..100].iter().chain(&got[100 + LEN..]).all(|&b| b == 0x5a));
    assert_eq!(p.b.counters().rx_fast_path_pkts, frames.len() as u64);
}

/// Single-packet WRITEs take the fast path, all but the empty one (no region is touched: the
/// general path's rule for it is not the fast path's to restate); the data lands byte for byte.
#[test]
fn small_writes_take_the_fast_path_but_the_empty_one() {
    let frames = small_write_frames(&mut pair(true));
    assert_eq!(frames.len(), SMALL.len());
    let stream: Vec<_> = frames.iter().map(|f| (None, f.clone())).collect();
    assert_eq!(agree(&stream).expect("the paths agree"), SMALL.len() as u64 - 1);
    let mut p = pair(true);
    for f in &frames {
        p.b.handle_frame(time::Instant::ZERO, f).expect("accepted");
    }
    let got = p.b.mr(p.dst.lkey).expect("region").as_slice();
    let pattern = |i: usize| (i * 7 + i / 251) as u8;
    let mut at = 40;
    for (k, &len) in SMALL.iter().enumerate() {
        let want: Vec<u8> = (k * 13..k * 13 + len).map(pattern).collect();
        assert_eq!(&got[at..at + len], &want[..], "WRITE {k}");
        assert!(got[at + len..at + len + 3].iter().all(|&b| b == 0x5a), "nothing past WRITE {k}");
        at += len + 3;
    }
    assert!(got[..40].iter().all(|&b| b == 0x5a));
    assert_eq!(p.b.counters().rcvd_in_seq_requests, SMALL.len() as u64);
}

#[test]
fn switched_off_nothing_takes_the_fast_path() {
    let mut p = pair(false);
    let frames = write_frames(&mut pair(true));
    for f in &frames {
        p.b.handle_frame(time::Instant::ZERO, f).expect("accepted");
    }
    assert_eq!(p.b.counters().rx_fast_path_pkts, 0);
    assert_eq!(p.b.counters().rcvd_pkts, frames.len() as u64);
}

/// A full-size MIDDLE packet where the message has fewer bytes left (it stands at the LAST
/// packet's PSN): more data than the RETH announced, an invalid request for both paths, and
/// not a byte written past the message.
#[test]
fn a_middle_packet_past_the_announced_length_is_refused_by_both() {
    let frames = write_frames(&mut pair(true));
    let n = frames.len();
    let mut stream: Vec<_> = frames[..n - 1].iter().map(|f| (None, f.clone())).collect();
    let mut extra = frames[n - 2].clone();
    extra[51..54].copy_from_slice(&frames[n - 1][51..54]);
    reseal(&mut extra);
    stream.push((None, extra));
    agree(&stream).expect("the paths agree");
    let mut p = pair(true);
    for (_, f) in &stream {
        let _ = p.b.handle_frame(time::Instant::ZERO, f);
    }
    assert_eq!(p.b.counters().send_err, 1, "NAK invalid request");
    let got = p.b.mr(p.dst.lkey).expect("region").as_slice();
    let end = 100 + LEN - 300;
    assert!(got[end..].iter().all(|&b| b == 0x5a), "nothing written past the MIDDLE packets");
}

/// Every bit pattern of a few flips in a FIRST or ONLY packet's RETH (VA, R_Key, DMA length:
/// past the region, past the largest message, shorter or longer than the data), ICRC made
/// right again: both paths agree, and the edits that break the rules keep the frame off the
/// fast path.
#[test]
fn reth_edits_are_judged_alike() {
    let big = write_frames(&mut pair(true));
    let small = small_write_frames(&mut pair(true));
    let mut refused = 0;
    for (frames, i) in [(&big, 0), (&small, 0), (&small, 2)] {
        for at in 0..16 {
            for x in [1u8, 0x10, 0x80, 0xff] {
                let mut stream: Vec<_> = frames.iter().map(|f| (None, f.clone())).collect();
                stream[i].1[HEADERS + at] ^= x;
                reseal(&mut stream[i].1);
                let fast = agree(&stream).expect("the paths agree");
                refused += (fast < frames.len() as u64 - (frames.len() == SMALL.len()) as u64) as u32;
            }
        }
    }
    assert!(refused >= 3 * 16 * 4 / 2, "most RETH edits break a rule: {refused}");
}

/// A MIDDLE packet asking for an ACK gets the same ACK from both paths.
#[test]
fn ack_requests_on_middle_packets_are_answered_alike() {
    let frames = write_frames(&mut pair(true));
    let mut stream: Vec<_> = frames[..5].iter().map(|f| (None, f.clone())).collect();
    for k in [2, 4] {
        stream[k].1[50] |= 0x80;
        reseal(&mut stream[k].1);
    }
    assert_eq!(agree(&stream).expect("the paths agree"), 5);
    let mut p = pair(true);
    let mut acks = 0;
    for (_, f) in &stream {
        p.b.handle_frame(time::Instant::ZERO, f).expect("accepted");
        acks += drain(&mut p.b).len();
    }
    assert_eq!(acks, 2);
}

/// Frames from another address (source or destination changed, checksums right) never take
/// the fast path, and the general path drops them.
#[test]
fn frames_from_elsewhere_take_the_general_path() {
    let frames = write_frames(&mut pair(true));
    for at in [0, 3, 4, 7] {
        let mut stream: Vec<_> = frames[..3].iter().map(|f| (None, f.clone())).collect();
        let mut f = frames[3].clone();
        f[26 + at] ^= 0x10;
        reseal(&mut f);
        stream.push((None, f));
        let fast = agree(&stream).expect("the paths agree");
        assert_eq!(fast, 3, "only the three unchanged packets");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn fast_and_general_paths_agree_on_edited_traffic(
        edits in proptest::collection::vec(edit(), 0..6),
        reseal_them in any::<bool>(),
    ) {
        let frames = write_frames(&mut pair(true));
        agree(&apply(&frames, &edits, reseal_them))?;
    }

    #[test]
    fn fast_and_general_paths_agree_on_edited_small_writes(
        edits in proptest::collection::vec(edit(), 0..6),
        reseal_them in any::<bool>(),
    ) {
        let frames = small_write_frames(&mut pair(true));
        agree(&apply(&frames, &edits, reseal_them))?;
    }
}
