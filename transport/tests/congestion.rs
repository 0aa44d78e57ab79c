//! Congestion control end to end in the engine (simulated wire, simulated clock): data frames
//! leave ECT(0), a CE-marked data frame makes its receiver (the notification point) send a
//! CNP in ConnectX's layout at most once per `min_time_between_cnps`, and the QP it reaches
//! (the reaction point) slows down to DCQCN's rate, enforced by its pacer — for WRITEs (the
//! responder is the NP) and READs (the requester is). Off, uroce's frames stay rxe's.

mod common;

use common::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use uroce_transport::cc::dcqcn::{Dcqcn, Params};
use uroce_transport::cc::{Algorithm, CongestionConfig, NpConfig};
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::opcode::Operation;
use uroce_wire::*;

const LINE: u64 = 10_000_000_000;

/// A frame on the wire: when it was sent, by which node (0 or 1), its bytes.
type Log = Rc<RefCell<Vec<(Instant, usize, Vec<u8>)>>>;

fn tap(net: &mut Network) -> Log {
    let log: Log = Rc::default();
    let l = log.clone();
    net.set_tap(move |t, f| {
        let from = if f[6..12] == mac(1).0 { 0 } else { 1 };
        l.borrow_mut().push((t, from, f.to_vec()));
    });
    log
}

/// Two nodes with congestion configs `cc0` and `cc1`, every ECN-capable frame marked CE on
/// the wire with probability `ce`, one RC QP pair at MTU 1024.
fn cc_pair(cc0: CongestionConfig, cc1: CongestionConfig, ce: f64) -> (Network, QpEnd, QpEnd, Log) {
    let link = LinkConfig { ce_mark: ce, rate_bps: LINE, ..LinkConfig::default() };
    let mut net = Network::new(3, link);
    net.add(device_with(1, 3, |c| c.cc = cc0));
    net.add(device_with(2, 3, |c| c.cc = cc1));
    let o = QpOptions { mtu: Mtu::Mtu1024, ..Default::default() };
    let (a, b) = connect(&mut net, 0, 1, &o).expect("connect");
    let log = tap(&mut net);
    (net, a, b, log)
}

fn np(us: u64) -> CongestionConfig {
    CongestionConfig {
        ecn: true,
        np: Some(NpConfig { min_time_between_cnps: Duration::from_micros(us), ..NpConfig::default() }),
        rp: None,
    }
}

fn dcqcn(p: Params) -> CongestionConfig {
    CongestionConfig { rp: Some(Algorithm::Dcqcn(p)), ..np(50) }
}

/// `len` bytes from node `from` to node `to` by `op` (WRITE: `from` writes; READ: `from`
/// reads `to`'s region), checked byte for byte.
fn transfer(net: &mut Network, ends: (&QpEnd, &QpEnd), op: WrOpcode, len: usize) {
    let (me, peer) = ends;
    let local = reg(net, me.node, me.pd, len, ALL_ACCESS, |i| if op == WrOpcode::RdmaRead { 0 } else { pattern(5, i) });
    let remote =
        reg(net, peer.node, peer.pd, len, ALL_ACCESS, |i| if op == WrOpcode::RdmaRead { pattern(5, i) } else { 0 });
    let s = [sge(&local, 0, len)];
    let wr = SendWr {
        wr_id: 9,
        opcode: op,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED,
        remote_addr: remote.addr,
        rkey: remote.rkey,
        ..Default::default()
    };
    net.dev(me.node).post_send(me.qpn, &wr).unwrap();
    let wcs = wait_wcs(net, me, 1, 10_000_000);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let got = if op == WrOpcode::RdmaRead { mr_bytes(net, me.node, &local) } else { mr_bytes(net, peer.node, &remote) };
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(5, i)), "data intact");
}

/// When each frame node `from` sent arrived: its link serialises at LINE (preamble, FCS and
/// gap add 24 bytes), then the wire's delay.
fn arrivals(log: &[(Instant, usize, Vec<u8>)], from: usize) -> Vec<(Instant, &[u8])> {
    let mut free = Instant::ZERO;
    let mut out = Vec::new();
    for (t, n, f) in log {
        if *n == from {
            let start = (*t).max(free);
            free = start + Duration::from_nanos((f.len() as u64 + 24) * 8 * 1_000_000_000 / LINE);
            out.push((free + LinkConfig::default().delay, &f[..]));
        }
    }
    out
}

fn is_cnp(f: &[u8]) -> bool {
    parse_frame(f).is_ok_and(|p| p.roce.bth.opcode == Opcode::CNP)
}

/// The NP's rule applied to a log of CE-marked data arrivals: the first at once, then at most
/// one per `gap`.
fn expected_cnps(arrivals: &[Instant], gap: Duration) -> Vec<Instant> {
    let mut out: Vec<Instant> = Vec::new();
    for &t in arrivals {
        if out.last().is_none_or(|&l| t >= l + gap) {
            out.push(t);
        }
    }
    out
}

#[test]
fn ect0_on_every_frame_and_a_cnp_per_interval_in_connectx_layout() {
    let (mut net, a, b, log) = cc_pair(np(20), np(20), 1.0);
    transfer(&mut net, (&a, &b), WrOpcode::RdmaWrite, 256 * 1024);
    let log = log.borrow();
    // Every frame uroce sent left ECN-capable (what the wire marked is not in the tap).
    for (_, _, f) in log.iter() {
        assert_eq!(parse_frame(f).unwrap().ip.ecn(), Ecn::Ect0);
    }
    // Node 1 received node 0's 256 requests CE-marked (5 µs later); its CNPs follow the rule.
    let arrivals: Vec<Instant> = arrivals(&log, 0)
        .into_iter()
        .filter(|(_, f)| parse_frame(f).unwrap().roce.bth.opcode.info().unwrap().is_request())
        .map(|(t, _)| t)
        .collect();
    assert_eq!(arrivals.len(), 256);
    let cnps: Vec<&(Instant, usize, Vec<u8>)> = log.iter().filter(|(_, _, f)| is_cnp(f)).collect();
    let sent: Vec<Instant> = cnps.iter().map(|c| c.0).collect();
    assert_eq!(sent, expected_cnps(&arrivals, Duration::from_micros(20)));
    assert!(sent.len() >= 5, "{} CNPs", sent.len());
    for (_, from, f) in &cnps {
        assert_eq!(*from, 1);
        let p = parse_frame(f).unwrap();
        p.check_icrc().expect("ICRC");
        let IpRepr::V4(ip) = p.ip else { panic!("IPv4 path") };
        assert_eq!((ip.dscp, ip.ecn, ip.ttl, ip.dont_frag, ip.payload_len + 20), (48, Ecn::Ect0, 64, true, 60));
        assert_eq!(p.udp.dst_port, 4791);
        let bth = p.roce.bth;
        assert_eq!((bth.becn, bth.fecn, bth.ack_req, bth.psn.value(), bth.pkey), (true, false, false, 0, 0xffff));
        assert_eq!(bth.dest_qp.value(), a.qpn, "aimed at the sender's QP");
        assert_eq!(&f[f.len() - 20..f.len() - 4], &[0u8; 16], "16 reserved bytes");
        assert_eq!(f.len(), 14 + 60);
    }
    let (c0, c1) = (*net.dev(0).counters(), *net.dev(1).counters());
    assert_eq!(c1.np_ecn_marked_roce_packets, 256, "every request, the fast path's included");
    assert_eq!(c1.np_cnp_sent, sent.len() as u64);
    assert_eq!((c0.rcvd_cnp, c0.rp_cnp_ignored, c0.rp_cnp_handled), (sent.len() as u64, sent.len() as u64, 0));
    assert_eq!(c0.np_ecn_marked_roce_packets, 0, "ACKs are not data");
}

/// `cnp_dscp` and `cnp_802p_prio` (ConnectX's knobs) set what a CNP carries: on a VLAN its
/// 802.1p priority, in its IP header its DSCP; the data frames keep their own.
#[test]
fn a_cnps_dscp_and_vlan_priority_are_configurable() {
    let mut cc = np(20);
    cc.np = cc.np.map(|n| NpConfig { cnp_dscp: 26, cnp_802p_prio: 3, ..n });
    let link = LinkConfig { ce_mark: 1.0, rate_bps: LINE, ..LinkConfig::default() };
    let mut net = Network::new(3, link);
    for i in 1..=2 {
        net.add(device_with(i, 3, |c| {
            c.cc = cc;
            c.vlan = Some(100);
        }));
    }
    let (a, b) = connect(&mut net, 0, 1, &QpOptions { mtu: Mtu::Mtu1024, ..Default::default() }).expect("connect");
    let log = tap(&mut net);
    transfer(&mut net, (&a, &b), WrOpcode::RdmaWrite, 16 * 1024);
    let log = log.borrow();
    let mut cnps = 0;
    for (_, _, f) in log.iter() {
        let p = parse_frame(f).unwrap();
        let tag = p.eth.and_then(|e| e.vlan).expect("tagged");
        assert_eq!(tag.vid, 100);
        let IpRepr::V4(ip) = p.ip else { panic!("IPv4 path") };
        if p.roce.bth.opcode == Opcode::CNP {
            cnps += 1;
            assert_eq!((tag.pcp, ip.dscp, ip.ecn), (3, 26, Ecn::Ect0));
            p.check_icrc().expect("ICRC");
        } else {
            assert_eq!((tag.pcp, ip.dscp), (0, 0), "data frames keep the QP's class");
        }
    }
    assert!(cnps > 0);
    assert_eq!(net.dev(1).counters().np_cnp_sent, cnps);
}

#[test]
fn off_by_default_frames_stay_not_ect_and_no_cnp_is_sent() {
    let (mut net, a, b, log) = cc_pair(CongestionConfig::default(), CongestionConfig::default(), 1.0);
    transfer(&mut net, (&a, &b), WrOpcode::RdmaWrite, 64 * 1024);
    assert!(log.borrow().iter().all(|(_, _, f)| parse_frame(f).unwrap().ip.ecn() == Ecn::NotEct));
    assert_eq!(net.stats().ce_marked, 0);
    // ECN on, NP off: marks are counted, nothing is sent.
    let off = CongestionConfig { ecn: true, ..CongestionConfig::default() };
    let (mut net, a, b, log) = cc_pair(off, off, 1.0);
    transfer(&mut net, (&a, &b), WrOpcode::RdmaWrite, 64 * 1024);
    assert!(!log.borrow().iter().any(|(_, _, f)| is_cnp(f)));
    assert_eq!(net.dev(1).counters().np_ecn_marked_roce_packets, 64);
    assert_eq!(net.dev(1).counters().np_cnp_sent, 0);
}

#[test]
fn a_cnp_slows_the_writer_to_dcqcns_rate() {
    let p = Params::paper(LINE);
    let (mut net, a, b, log) = cc_pair(dcqcn(p), np(50), 1.0);
    transfer(&mut net, (&a, &b), WrOpcode::RdmaWrite, 1024 * 1024);
    let c0 = *net.dev(0).counters();
    assert!(c0.rp_cnp_handled >= 3, "{c0:?}");
    assert_eq!(c0.rp_cnp_handled, net.dev(1).counters().np_cnp_sent);
    // Replay DCQCN along the CNPs' arrivals and node 0's requests: each request leaves no
    // sooner after the previous one than that one's bits at the rate in force when it leaves
    // (the pacer's rule: a new rate respaces the packet in flight), and exactly then while the
    // QP is backlogged.
    let log = log.borrow();
    let cnps: Vec<Instant> = arrivals(&log, 1).into_iter().filter(|(_, f)| is_cnp(f)).map(|(t, _)| t).collect();
    let reqs: Vec<(Instant, usize)> = log
        .iter()
        .filter(|(_, from, f)| *from == 0 && parse_frame(f).unwrap().roce.bth.opcode.info().unwrap().is_request())
        .map(|(t, _, f)| (*t, f.len()))
        .collect();
    let mut model = Dcqcn::new(p);
    let mut next_cnp = cnps.iter().peekable();
    let (mut exact, mut paced) = (0, 0);
    let mut prev: Option<(Instant, usize)> = None;
    for &(t, len) in &reqs {
        loop {
            let c = next_cnp.peek().map(|&&c| c).filter(|&c| c <= t);
            let to = model.next_timeout().filter(|&x| x <= t);
            match (c, to) {
                (Some(c), to) if to.is_none_or(|x| c <= x) => {
                    model.on_cnp(c, &mut |_, _, _| {});
                    next_cnp.next();
                }
                (_, Some(x)) => model.on_timeout(x, &mut |_, _, _| {}),
                _ => break,
            }
        }
        if let (Some((t0, len0)), Some(rate)) = (prev, model.rate()) {
            let gap = (t - t0).as_nanos() as f64;
            let want = len0 as f64 * 8.0 * 1e9 / rate.round();
            assert!(gap >= want - 1.0, "gap {gap} ns < {want} ns at {rate} bit/s (at {t:?})");
            paced += 1;
            if gap <= want + 1.0 {
                exact += 1;
            }
        }
        prev = Some((t, len));
        model.on_sent(t, len, &mut |_, _, _| {});
    }
    assert!(paced > 500 && exact > paced / 2, "{exact} of {paced} paced gaps exact");
    drop(log);
    // It recovers once the marks stop: eventually back to unlimited.
    net.link.ce_mark = 0.0;
    net.run_idle(10_000_000);
    assert_eq!(net.dev(0).qp(a.qpn).unwrap().cc_rate(), None, "released");
}

#[test]
fn for_a_read_the_requester_is_the_np_and_the_responder_slows() {
    let (mut net, a, b, log) = cc_pair(np(50), dcqcn(Params::connectx(LINE)), 1.0);
    // The first READ's responses all leave before its first CNP comes back; the second's are
    // paced by what those CNPs did.
    transfer(&mut net, (&a, &b), WrOpcode::RdmaRead, 256 * 1024);
    assert!(net.dev(1).qp(b.qpn).unwrap().cc_rate().is_some(), "the responder is rate-limited");
    transfer(&mut net, (&a, &b), WrOpcode::RdmaRead, 256 * 1024);
    let (c0, c1) = (*net.dev(0).counters(), *net.dev(1).counters());
    assert!(c0.np_ecn_marked_roce_packets >= 512, "READ responses are data: {c0:?}");
    assert!(c0.np_cnp_sent >= 1);
    assert_eq!(c1.rp_cnp_handled, c0.np_cnp_sent);
    let log = log.borrow();
    // Node 0 answers the marked READ responses, node 1 the marked READ requests.
    for (_, from, f) in log.iter().filter(|(_, _, f)| is_cnp(f)) {
        assert_eq!(parse_frame(f).unwrap().roce.bth.dest_qp.value(), if *from == 0 { b.qpn } else { a.qpn });
    }
    // The responder's READ responses were paced: some left further apart than the link needs.
    let resp: Vec<Instant> = log
        .iter()
        .filter(|(_, from, f)| {
            *from == 1 && parse_frame(f).unwrap().roce.bth.opcode.info().unwrap().operation == Operation::ReadResponse
        })
        .map(|(t, ..)| *t)
        .collect();
    let serial = (1082 + 24) * 8 * 1_000_000_000 / LINE;
    // (ConnectX: α ≈ 1 halves the rate at the first CNP: a gap of about twice the serial time.)
    assert!(resp.windows(2).filter(|w| (w[1] - w[0]).as_nanos() as u64 > serial * 3 / 2).count() > 100);
}

/// A CNP from `src` (node 1's MAC) to QP `dest_qp` of node 0.
fn cnp_frame(src: std::net::Ipv4Addr, dest_qp: u32) -> Vec<u8> {
    uroce_transport::sim::cnp_frame((mac(2), src), (mac(1), ipv4(1)), dest_qp)
}

#[test]
fn cnps_are_checked_like_any_frame() {
    let (mut net, a, _b, _) = cc_pair(dcqcn(Params::connectx(LINE)), np(50), 0.0);
    let t = Instant::from_nanos(1000);
    let d = net.dev(0);
    assert_eq!(d.handle_frame(t, &cnp_frame(ipv4(2), a.qpn ^ 1)), Err(RxDrop::UnknownQp(a.qpn ^ 1)));
    assert_eq!(d.handle_frame(t, &cnp_frame(ipv4(3), a.qpn)), Err(RxDrop::BadSource));
    let mut bad = cnp_frame(ipv4(2), a.qpn);
    let n = bad.len();
    bad[n - 1] ^= 1;
    assert_eq!(d.handle_frame(t, &bad), Err(RxDrop::Icrc));
    assert_eq!(d.qp(a.qpn).unwrap().cc_rate(), None);
    // The peer's CNP (any source port) starts the limiter at once.
    assert_eq!(d.handle_frame(t, &cnp_frame(ipv4(2), a.qpn)), Ok(()));
    assert_eq!(d.qp(a.qpn).unwrap().cc_rate(), Some(LINE - LINE * 1023 / 2048));
    assert_eq!(d.poll_timeout(), Some(t + Duration::from_micros(300)), "the rate-increase timer");
    let c = *d.counters();
    assert_eq!((c.rcvd_cnp, c.rp_cnp_handled, c.dropped_unknown_qp, c.dropped_bad_src, c.icrc_err), (3, 1, 1, 1, 1));
}
