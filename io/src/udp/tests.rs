//! Unit tests of the pieces that need no peer: header synthesis, control-message parsing,
//! transmit-frame validation. Traffic tests are in `tests/udp_backend.rs`.

use super::*;
use std::net::{SocketAddrV4, SocketAddrV6};
use uroce_wire::*;

fn entry(src: SocketAddr, dst: IpAddr, tos: u8, ttl: u8) -> RxEntry {
    RxEntry { slot: 0, len: 0, src, dst, tos, ttl, seg: 0 }
}

/// A RoCE UDP payload (BTH .. ICRC) as `src` → `dst` would send it, and the whole frame.
fn payload_for(src: SocketAddr, dst: SocketAddr, tos: u8, ident: u16) -> (Vec<u8>, Vec<u8>) {
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            ident,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            flow_label: 7,
            hop_limit: 64,
            next_header: 17,
            payload_len: 0,
        }),
        _ => unreachable!("same family"),
    };
    let repr = FrameRepr {
        eth: EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 9]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 8]),
            vlan: None,
            ethertype: EtherType::IPV4,
        },
        ip,
        udp: UdpRepr { src_port: src.port(), dst_port: dst.port() },
        roce: RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_ONLY,
                solicited: false,
                mig_req: false,
                pad_count: packet::pad_for(37),
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x1234),
                ack_req: true,
                psn: Psn::new(77),
            },
            ext: ExtHeaders { reth: Some(RethRepr { va: 0x1000, rkey: 0xabcd, dma_len: 37 }), ..Default::default() },
            payload_len: 37,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf, UdpChecksum::Zero, |p| p.fill(0x5a)).expect("emit");
    buf.truncate(n);
    let l4 = 14 + repr.ip.header_len() + 8;
    (buf[l4..].to_vec(), buf)
}

/// Put `payload` behind the headroom of a buffer, synthesize headers, return the frame.
fn synthesize(payload: &[u8], e: &RxEntry, dport: u16) -> Vec<u8> {
    let mut buf = vec![0xeeu8; RX_HEADROOM + payload.len()];
    buf[RX_HEADROOM..].copy_from_slice(payload);
    let ip_hl = if e.src.is_ipv4() { 20 } else { 40 };
    let start = RX_HEADROOM - 8 - ip_hl - 14;
    write_headers(&mut buf[start..], &EthernetAddress([2, 0, 0, 0, 0, 8]), e, dport, payload.len());
    buf[start..].to_vec()
}

#[test]
fn synthesized_ipv4_headers_reproduce_the_senders_icrc() {
    let src = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4791));
    let dst = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 4791));
    let (payload, sent) = payload_for(src, dst, 0x6a, 0);
    let frame = synthesize(&payload, &entry(src, dst.ip(), 0x6a, 61), 4791);
    let p = parse_frame_verified(&frame).expect("parses, IPv4 checksum and ICRC verify");
    let IpRepr::V4(v4) = p.ip else { panic!("v4") };
    assert_eq!((v4.ident, v4.dont_frag, v4.ttl, v4.dscp, v4.ecn), (0, true, 61, 0x1a, Ecn::Ect0));
    assert_eq!(p.udp, UdpRepr { src_port: 4791, dst_port: 4791 });
    // Everything from the IP header on equals what the sender built, except the TTL and
    // header checksum (the sender's TTL was 64).
    let (a, b) = (&frame[14..], &sent[14..]);
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if ![8, 10, 11].contains(&i) {
            assert_eq!(x, y, "byte {i}");
        }
    }
}

#[test]
fn synthesized_ipv6_headers_reproduce_the_senders_icrc() {
    let src = SocketAddr::V6(SocketAddrV6::new("fd00::1".parse().expect("ip"), 50000, 0, 0));
    let dst = SocketAddr::V6(SocketAddrV6::new("fd00::2".parse().expect("ip"), 4791, 0, 0));
    let (payload, _) = payload_for(src, dst, 0x02, 0);
    let frame = synthesize(&payload, &entry(src, dst.ip(), 0x03, 5), 4791);
    let p = parse_frame_verified(&frame).expect("parses, ICRC verifies");
    let IpRepr::V6(v6) = p.ip else { panic!("v6") };
    assert_eq!((v6.ecn, v6.hop_limit, v6.flow_label), (Ecn::Ce, 5, 0));
    assert_eq!(p.udp.src_port, 50000);
    assert_eq!(p.payload(), &[0x5a; 37][..]);
}

#[test]
fn a_nonzero_sender_id_is_recovered_exactly() {
    let src = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 49441));
    let dst = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 4791));
    let (payload, _) = payload_for(src, dst, 0, 0xbeef);
    let frame = synthesize(&payload, &entry(src, dst.ip(), 0, 64), 4791);
    let Err(Error::IcrcMismatch { computed, found, .. }) = parse_frame_verified(&frame) else {
        panic!("ID 0 header must not verify")
    };
    let mut s = IdSolver::new(true);
    let total = frame.len() - 14;
    assert_eq!(s.solve(total, computed, found), Some(IdDf { ident: 0xbeef, dont_frag: true }));
    assert_eq!(IdSolver::new(false).solve(total, computed, found), None);
}

fn cmsg(level: i32, ty: i32, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let mut off = 0;
    assert!(sys::put_cmsg(&mut b, &mut off, level, ty, data));
    b.truncate(off);
    b
}

#[test]
fn control_messages_parse() {
    let mut c = Vec::new();
    let mut pi = [0u8; 12];
    pi[8..12].copy_from_slice(&[127, 0, 0, 2]);
    c.extend(cmsg(libc::IPPROTO_IP, sys::IP_PKTINFO, &pi));
    c.extend(cmsg(libc::IPPROTO_IP, sys::IP_TOS, &[0x8a]));
    c.extend(cmsg(libc::IPPROTO_IP, sys::IP_TTL, &17i32.to_ne_bytes()));
    c.extend(cmsg(sys::SOL_UDP, sys::UDP_GRO, &1100i32.to_ne_bytes()));
    let i = sys::parse_cmsgs(&c, c.len());
    assert_eq!(i.dst, Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));
    assert_eq!((i.tos, i.ttl, i.gso_size), (0x8a, Some(17), Some(1100)));

    let mut c = Vec::new();
    let mut pi6 = [0u8; 20];
    pi6[15] = 1;
    c.extend(cmsg(libc::IPPROTO_IPV6, sys::IPV6_PKTINFO, &pi6));
    c.extend(cmsg(libc::IPPROTO_IPV6, sys::IPV6_TCLASS, &0xb8i32.to_ne_bytes()));
    c.extend(cmsg(libc::IPPROTO_IPV6, sys::IPV6_HOPLIMIT, &1000i32.to_ne_bytes()));
    let i = sys::parse_cmsgs(&c, c.len());
    assert_eq!(i.dst, Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert_eq!((i.tos, i.ttl, i.gso_size), (0xb8, Some(255), None));
}

#[test]
fn hostile_control_messages_do_not_panic() {
    let mut c = cmsg(libc::IPPROTO_IP, sys::IP_PKTINFO, &[1; 12]);
    c.extend(cmsg(sys::SOL_UDP, sys::UDP_GRO, &[0xff; 4]));
    for cut in 0..=c.len() {
        let _ = sys::parse_cmsgs(&c[..cut], cut);
        let _ = sys::parse_cmsgs(&c, cut);
    }
    for i in 0..c.len() {
        for v in [0u8, 1, 0x7f, 0xff] {
            let mut d = c.clone();
            d[i] = v;
            let _ = sys::parse_cmsgs(&d, d.len());
            let _ = sys::parse_cmsgs(&d, usize::MAX);
        }
    }
    // A negative GRO size is ignored.
    let i = sys::parse_cmsgs(&c, c.len());
    assert_eq!(i.gso_size, None);
}

fn send(b: &mut UdpBackend, f: &[u8]) -> bool {
    b.send_with(&mut |buf: &mut [u8]| {
        buf[..f.len()].copy_from_slice(f);
        Some(f.len())
    })
    .expect("send_with")
}

#[test]
fn transmit_frames_are_validated() {
    let local = Ipv4Addr::new(127, 91, (std::process::id() >> 8) as u8, std::process::id() as u8);
    let mut b = match UdpBackend::new(IpAddr::V4(local), 0, UdpOptions { tx_queue: 4, ..Default::default() }) {
        Ok(b) => b,
        Err(e) => panic!("bind {local}: {e}"),
    };
    let port = b.fixed_udp_src_port().expect("fixed port");
    assert_eq!(b.local_addr().port(), port);
    let me = SocketAddr::V4(SocketAddrV4::new(local, port));
    let peer = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 91, 0, 1), 4791));
    let (_, good) = payload_for(me, peer, 0, 0);
    assert!(send(&mut b, &good));
    assert_eq!((b.tx_queued(), b.counters().tx_bad_frames), (1, 0));
    // Wrong source port (the engine was not told the fixed port).
    let (_, wrong_port) = payload_for(SocketAddr::V4(SocketAddrV4::new(local, 49152)), peer, 0, 0);
    assert!(send(&mut b, &wrong_port));
    // Wrong source address, IPv6 on an IPv4 socket, junk, nothing at all.
    let (_, wrong_src) = payload_for(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), port)), peer, 0, 0);
    assert!(send(&mut b, &wrong_src));
    let v6 = |a: &str, p| SocketAddr::V6(SocketAddrV6::new(a.parse().expect("ip"), p, 0, 0));
    let (_, wrong_family) = payload_for(v6("fd00::1", port), v6("fd00::2", 4791), 0, 0);
    assert!(send(&mut b, &wrong_family));
    assert!(send(&mut b, &[0u8; 3]));
    assert!(send(&mut b, &good[..good.len() - 10]));
    assert_eq!((b.tx_queued(), b.counters().tx_bad_frames), (1, 5));
    assert!(!b.send_with(&mut |_| None).expect("nothing to send"));
    // A frame built with a nonzero IP ID gets its ICRC patched for ID 0.
    let (_, id7) = payload_for(me, peer, 0, 7);
    assert!(send(&mut b, &id7));
    assert_eq!(b.counters().tx_icrc_patched, 1);
    let e = b.tx_q[1];
    let mut patched = id7.clone();
    patched[14 + 4..14 + 6].copy_from_slice(&[0, 0]);
    Ipv4Packet::new_unchecked(&mut patched[14..34]).fill_checksum();
    let at = e.slot * MAX_FRAME;
    let n = patched.len();
    patched[n - 4..].copy_from_slice(&b.tx_buf[at + n - 4..at + n]);
    parse_frame_verified(&patched).expect("patched ICRC matches the ID-0 header");
    // Queue full (nobody listens on the peer address, but loopback sends succeed): flush
    // makes room; the sends themselves succeed on loopback.
    for _ in 0..8 {
        assert!(send(&mut b, &good));
    }
    b.flush().expect("flush");
    assert_eq!(b.tx_queued(), 0);
    assert!(b.counters().tx_frames >= 9, "{:?}", b.counters());
    assert!(b.describe().contains("kernel UDP socket"));
}
