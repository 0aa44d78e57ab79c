//! Hostile GSI frames into RDMA-CM, librdmacm's layer above the CM (the IP CM header in a REQ's
//! private data, port spaces, SIDR for UD), on the simulated network: a server listening on 7174
//! (TCP port space) and 7177 (UDP), and a client connected to 7174 and resolving 7177 by SIDR.
//! Each step takes one of the GSI frames seen on the wire (REQ, REP, RTU, SIDR REQ/REP, DREQ,
//! ...) with fuzzer-chosen bytes of its MAD overwritten — private data and IP CM header
//! included — and hands it to either host, or raw bytes as the MAD, or advances the clock, or
//! has the server's application accept or reject what it is asked, or the client connect
//! again. Whatever arrives: nothing panics, and the server's listeners keep listening.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;
use uroce_transport::cm::gsi::{Gsi, GsiConfig};
use uroce_transport::rdmacm::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::cm::ip::PortSpace;
use uroce_wire::EthernetAddress;

struct Host {
    gsi: Gsi,
    cm: RdmaCm,
}

fn resolve(ip: IpAddr) -> Option<EthernetAddress> {
    (1..=2u8).find(|&i| ip == IpAddr::V4(ipv4(i))).map(mac)
}

fn route(from: u8, to: u8) -> Route {
    Route { src: IpAddr::V4(ipv4(from)), dst: IpAddr::V4(ipv4(to)), sgid_index: 1, dmac: mac(to), mtu: Mtu::Mtu1024 }
}

fn param(private_data: &[u8]) -> ConnParam<'_> {
    ConnParam { private_data, responder_resources: 1, initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, srq: false, qp_num: 0 }
}

/// A fresh QP of `t` on `node` (the application's, handed to its ID with `rdma_create_qp`).
fn qp(net: &mut Network, node: usize, t: QpType) -> Option<u32> {
    let d = net.dev(node);
    let (pd, cq) = (d.alloc_pd(), d.create_cq(64).ok()?);
    let a = QpInitAttr { qp_type: t, send_cq: cq, recv_cq: cq, cap: QpCap::default(), sq_sig_all: false, srq: None };
    d.create_qp(pd, &a).ok()
}

/// Where a GSI frame's MAD starts: Ethernet, IPv4, UDP, BTH, DETH.
const MAD_AT: usize = 14 + 20 + 8 + 12 + 8;

/// One round of progress on both hosts and one network step; the server's application answers
/// its requests as `answer` says (accept, reject, or leave them).
fn progress(net: &mut Network, h: &mut [Host], answer: u8) {
    for _ in 0..4 {
        let now = net.now();
        for (i, host) in h.iter_mut().enumerate() {
            if host.cm.poll_timeout().is_some_and(|t| t <= now) {
                host.cm.handle_timeout(now, net.dev(i));
            }
            host.cm.progress(now, net.dev(i), &mut host.gsi, &mut |ip| resolve(ip));
            while let Some(e) = host.cm.poll_event() {
                if i == 1 && e.kind == EventKind::ConnectRequest {
                    match answer % 3 {
                        0 => {
                            let t = if e.ud.is_some() { QpType::Ud } else { QpType::Rc };
                            if let Some(q) = qp(net, 1, t) {
                                let _ = host.cm.set_qp(net.dev(1), e.id, q);
                            }
                            let _ = host.cm.accept(now, net.dev(1), e.id, Some(&param(b"pong")));
                        }
                        1 => {
                            let _ = host.cm.reject(e.id, b"no");
                        }
                        _ => {}
                    }
                }
            }
        }
        net.step();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut net = Network::new(3, LinkConfig::default());
    net.add(device(1, 3));
    net.add(device(2, 3));
    let seen: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let tap = seen.clone();
    net.set_tap(move |_, f| {
        // GSI frames (to QP 1) only, the first 64
        let mut t = tap.borrow_mut();
        if f.len() >= MAD_AT + 256 && f[14 + 20 + 8 + 5..14 + 20 + 8 + 8] == [0, 0, 1] && t.len() < 64 {
            t.push(f.to_vec());
        }
    });
    let mut h: Vec<Host> = (0..2)
        .map(|i| Host {
            gsi: Gsi::open(net.dev(i), GsiConfig::default()).unwrap(),
            cm: RdmaCm::new(RdmaCmConfig { seed: 99 + i as u64, ..RdmaCmConfig::default() }),
        })
        .collect();
    let mut listeners = Vec::new();
    for (ps, port) in [(PortSpace::Tcp, 7174), (PortSpace::Udp, 7177)] {
        let l = h[1].cm.create_id(ps).unwrap();
        h[1].cm.bind_addr(l, SocketAddr::new(IpAddr::V4([0, 0, 0, 0].into()), port)).unwrap();
        h[1].cm.listen(l).unwrap();
        listeners.push(l);
    }
    // the client: an RC connection to 7174 and a UD ID resolving 7177
    let connect = |net: &mut Network, h: &mut [Host], ps: PortSpace, port: u16| {
        let c = h[0].cm.create_id(ps).ok()?;
        h[0].cm.resolve_addr(c, SocketAddr::new(IpAddr::V4(ipv4(2)), port), route(1, 2)).ok()?;
        h[0].cm.resolve_route(c).ok()?;
        let t = if ps == PortSpace::Udp { QpType::Ud } else { QpType::Rc };
        let q = qp(net, 0, t)?;
        h[0].cm.set_qp(net.dev(0), c, q).ok()?;
        h[0].cm.connect(net.now(), net.dev(0), c, &param(b"ping")).ok()
    };
    let _ = connect(&mut net, &mut h, PortSpace::Tcp, 7174);
    let _ = connect(&mut net, &mut h, PortSpace::Udp, 7177);
    for _ in 0..8 {
        progress(&mut net, &mut h, 0);
    }
    if seen.borrow().is_empty() {
        return;
    }
    for step in data.chunks(6) {
        let [op, x, y, z, ..] = *step else { break };
        match op % 6 {
            0..=2 => {
                let mut f = {
                    let s = seen.borrow();
                    s[x as usize % s.len()].clone()
                };
                f[MAD_AT + y as usize] = z;
                if op & 0x10 != 0 {
                    f[MAD_AT + (y as usize + 1) % 256] = step.get(4).copied().unwrap_or(0);
                }
                let to = usize::from(op & 0x20 != 0);
                let now = net.now();
                let _ = net.dev(to).handle_frame(now, &f);
            }
            3 => {
                // raw bytes as the MAD of a GSI frame
                let mut f = seen.borrow()[0].clone();
                for (d, s) in f[MAD_AT..].iter_mut().zip(step.iter().cycle()) {
                    *d = *s;
                }
                let now = net.now();
                let _ = net.dev(1).handle_frame(now, &f);
            }
            4 => {
                // the clock moves on: retries, timeouts
                net.advance(Duration::from_millis(u64::from(x) << (y % 12)));
            }
            _ => {
                let ps = if x & 1 == 0 { PortSpace::Tcp } else { PortSpace::Udp };
                let _ = connect(&mut net, &mut h, ps, if ps == PortSpace::Tcp { 7174 } else { 7177 });
            }
        }
        progress(&mut net, &mut h, z);
        for &l in &listeners {
            assert_eq!(h[1].cm.state(l), Some(IdState::Listen), "a listener stopped listening at step {step:?}");
        }
    }
});
