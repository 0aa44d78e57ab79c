//! RDMA-CM on the simulated network: a client connects to a server by IP address and port, the
//! QPs come up as librdmacm brings them up, data moves both ways, refusals arrive with their
//! reason and private data, and the connection is released; the REQ it sends is rxe's REQ for
//! the same inputs, byte for byte.

mod common;

use common::*;
use std::net::{IpAddr, SocketAddr};
use uroce_transport::cm::gsi::{Gsi, GsiConfig};
use uroce_transport::cm::CmConfig;
use uroce_transport::rdmacm::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::cm::ip::PortSpace;
use uroce_wire::cm::CmMessage;
use uroce_wire::mad::Mad;
use uroce_wire::{parse_frame, EthernetAddress};

struct Host {
    gsi: Gsi,
    cm: RdmaCm,
    events: Vec<Event>,
}

type Resolver = fn(IpAddr) -> Option<EthernetAddress>;

fn drive(net: &mut Network, hosts: &mut [Host], resolve: Resolver, mut done: impl FnMut(&[Host]) -> bool) {
    for _ in 0..100_000 {
        let now = net.now();
        let mut moved = false;
        for (i, h) in hosts.iter_mut().enumerate() {
            moved |= h.cm.progress(now, net.dev(i), &mut h.gsi, &mut |ip| resolve(ip));
            while let Some(e) = h.cm.poll_event() {
                h.events.push(e);
            }
        }
        if done(hosts) {
            return;
        }
        if !net.step() && !moved {
            let evs: Vec<_> = hosts.iter().map(|h| &h.events).collect();
            panic!("idle before done: {evs:?}");
        }
    }
    panic!("not done");
}

fn sim_resolve(ip: IpAddr) -> Option<EthernetAddress> {
    (1..=2u8).find(|&i| ip == IpAddr::V4(ipv4(i))).map(mac)
}

fn route(from: u8, to: u8) -> Route {
    Route { src: IpAddr::V4(ipv4(from)), dst: IpAddr::V4(ipv4(to)), sgid_index: 1, dmac: mac(to), mtu: Mtu::Mtu1024 }
}

fn hosts(net: &mut Network, guids: [u64; 2]) -> Vec<Host> {
    (0..2)
        .map(|i| Host {
            gsi: Gsi::open(net.dev(i), GsiConfig::default()).unwrap(),
            cm: RdmaCm::new(RdmaCmConfig {
                cm: CmConfig { ca_guid: guids[i], hi_tid: i as u32 + 1, ..CmConfig::default() },
                seed: 99 + i as u64,
                ..RdmaCmConfig::default()
            }),
            events: Vec::new(),
        })
        .collect()
}

fn param(private_data: &[u8]) -> ConnParam<'_> {
    ConnParam {
        private_data,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num: 0,
    }
}

fn kinds(h: &Host) -> Vec<EventKind> {
    h.events.iter().map(|e| e.kind).collect()
}

/// Two hosts on the simulated network, the second listening on `port` in port space `ps`:
/// (net, hosts, the listening ID).
fn listening(ps: PortSpace, port: u16) -> (Network, Vec<Host>, IdHandle) {
    let mut net = Network::new(3, LinkConfig::default());
    net.add(device(1, 3));
    net.add(device(2, 3));
    let mut h = hosts(&mut net, [0xa, 0xb]);
    let l = h[1].cm.create_id(ps).unwrap();
    h[1].cm.bind_addr(l, SocketAddr::new(IpAddr::V4([0, 0, 0, 0].into()), port)).unwrap();
    h[1].cm.listen(l).unwrap();
    (net, h, l)
}

/// A server listening on 7174 and a client whose REQ is out: (net, hosts, client ID, client QP, server listen ID).
fn started(o: &QpOptions, private: &[u8]) -> (Network, Vec<Host>, IdHandle, QpEnd, IdHandle) {
    let (mut net, mut h, l) = listening(PortSpace::Tcp, 7174);
    let c = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    let dst = SocketAddr::new(IpAddr::V4(ipv4(2)), 7174);
    h[0].cm.resolve_addr(c, dst, route(1, 2)).unwrap();
    h[0].cm.resolve_route(c).unwrap();
    let qa = create(&mut net, 0, o).unwrap();
    h[0].cm.set_qp(net.dev(0), c, qa.qpn).unwrap();
    h[0].cm.connect(net.now(), net.dev(0), c, &param(private)).unwrap();
    (net, h, c, qa, l)
}

#[test]
fn a_client_connects_by_address_moves_data_and_disconnects() {
    let o = QpOptions::default();
    let (mut net, mut h, c, qa, l) = started(&o, b"ping");
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    assert_eq!(kinds(&h[0]), [EventKind::AddrResolved, EventKind::RouteResolved]);
    let req = h[1].events[0].clone();
    assert_eq!((req.kind, req.listen_id), (EventKind::ConnectRequest, Some(l)));
    assert_eq!(&req.private_data[..4], b"ping");
    assert_eq!(req.private_data.len(), 56);
    assert_eq!(req.param.qp_num, qa.qpn);
    assert_eq!((req.param.responder_resources, req.param.initiator_depth, req.param.retry_count), (1, 1, 7));
    let s = req.id;
    let (local, peer) = h[1].cm.addrs(s).unwrap();
    assert_eq!(local, Some(SocketAddr::new(IpAddr::V4(ipv4(2)), 7174)));
    let (client_local, _) = h[0].cm.addrs(c).unwrap();
    assert_eq!(peer, client_local, "the server sees the client's address and port");
    assert!((32768..=60999).contains(&client_local.unwrap().port()));

    let qb = create(&mut net, 1, &o).unwrap();
    h[1].cm.set_qp(net.dev(1), s, qb.qpn).unwrap();
    h[1].cm.accept(net.now(), net.dev(1), s, Some(&param(b"pong"))).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3 && h[1].events.len() == 2);
    let est = &h[0].events[2];
    assert_eq!((est.kind, est.param.qp_num, &est.private_data[..4]), (EventKind::Established, qb.qpn, &b"pong"[..]));
    assert_eq!(h[1].events[1].kind, EventKind::Established);
    assert_eq!(net.dev(0).query_qp(qa.qpn).unwrap().qp_state, QpState::Rts);
    assert_eq!(net.dev(1).query_qp(qb.qpn).unwrap().qp_state, QpState::Rts);
    let (a, b) = (net.dev(0).query_qp(qa.qpn).unwrap(), net.dev(1).query_qp(qb.qpn).unwrap());
    assert_eq!((a.dest_qp_num, b.dest_qp_num), (qb.qpn, qa.qpn));
    assert_eq!((a.sq_psn, a.rq_psn), (b.rq_psn, b.sq_psn), "each sends from the PSN the other receives from");
    assert_eq!((a.timeout, b.timeout, a.min_rnr_timer), (17, 17, 0));

    // WRITE a → b and SEND b → a over it.
    let src = reg(&mut net, 0, qa.pd, 8192, ALL_ACCESS, |i| pattern(1, i));
    let dst = reg(&mut net, 1, qb.pd, 8192, ALL_ACCESS, |_| 0);
    let sg = [sge(&src, 0, 8192)];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &sg,
        send_flags: SendFlags::SIGNALED,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    net.dev(0).post_send(qa.qpn, &wr).unwrap();
    assert_eq!(wait_wcs(&mut net, &qa, 1, 100_000)[0].status, WcStatus::Success);
    assert_eq!(mr_bytes(&mut net, 1, &dst), mr_bytes(&mut net, 0, &src));
    let rbuf = reg(&mut net, 0, qa.pd, 4096, ALL_ACCESS, |_| 0);
    net.dev(0).post_recv(qa.qpn, &RecvWr { wr_id: 7, sg_list: &[sge(&rbuf, 0, 4096)] }).unwrap();
    let sg = [sge(&dst, 0, 100)];
    let send = SendWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        sg_list: &sg,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    net.dev(1).post_send(qb.qpn, &send).unwrap();
    let got = wait_wcs(&mut net, &qa, 1, 100_000);
    assert_eq!((got[0].wr_id, got[0].byte_len, got[0].status), (7, 100, WcStatus::Success));

    // The client disconnects; the server hears it and answers; both QPs are in ERR.
    h[0].cm.disconnect(net.now(), net.dev(0), c).unwrap();
    assert_eq!(net.dev(0).query_qp(qa.qpn).unwrap().qp_state, QpState::Err);
    drive(&mut net, &mut h, sim_resolve, |h| h[1].events.len() == 3);
    assert_eq!(h[1].events[2].kind, EventKind::Disconnected);
    h[1].cm.disconnect(net.now(), net.dev(1), s).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 4);
    assert_eq!(kinds(&h[0])[3], EventKind::Disconnected);
    assert_eq!(net.dev(1).query_qp(qb.qpn).unwrap().qp_state, QpState::Err);
    assert_eq!(h[0].cm.disconnect(net.now(), net.dev(0), c).map_err(|e| e.errno()), Err(22));
    for (i, id) in [(0, c), (1, s), (1, l)] {
        h[i].cm.destroy_id(net.now(), id).unwrap();
    }
    assert_eq!(h[1].cm.destroy_id(net.now(), l), Err(RdmaCmError::UnknownId));
}

#[test]
fn refusals_reach_the_client_with_reason_and_private_data() {
    let o = QpOptions::default();
    let (mut net, mut h, c, _, _) = started(&o, &[]);
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    let s = h[1].events[0].id;
    h[1].cm.reject(s, b"full").unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3);
    let e = &h[0].events[2];
    assert_eq!((e.id, e.kind, e.status, &e.private_data[..4]), (c, EventKind::Rejected, 28, &b"full"[..]));

    // Nobody listens on 7175: REJ "invalid service ID" (8), from the CM itself.
    let c2 = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    h[0].cm.resolve_addr(c2, SocketAddr::new(IpAddr::V4(ipv4(2)), 7175), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c2).unwrap();
    let q = create(&mut net, 0, &o).unwrap();
    h[0].cm.set_qp(net.dev(0), c2, q.qpn).unwrap();
    h[0].cm.connect(net.now(), net.dev(0), c2, &param(&[])).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 6);
    let e = &h[0].events[5];
    assert_eq!((e.id, e.kind, e.status), (c2, EventKind::Rejected, 8));

    // Misuse gets errors, not effects.
    assert_eq!(h[0].cm.connect(net.now(), net.dev(0), c2, &param(&[])).map_err(|e| e.errno()), Err(22));
    assert_eq!(h[0].cm.connect(net.now(), net.dev(0), c, &param(&[0; 57])).map_err(|e| e.errno()), Err(22));
    let x = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    let port = h[0].cm.addrs(c).unwrap().0.unwrap();
    assert_eq!(h[0].cm.bind_addr(x, port), Err(RdmaCmError::AddrInUse));
    assert_eq!(h[0].cm.listen(x).map_err(|e| e.errno()), Err(22));
}

type Frames = std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>;

/// One host with rxe's address and MAC from `rdma_cm.pcap`, its GSI and RDMA-CM, and a tap
/// on what it sends.
fn rxe_twin(me: IpAddr, my_mac: EthernetAddress) -> (Network, Frames, Gsi, RdmaCm) {
    let mut net = Network::new(1, LinkConfig::default());
    net.add(Device::new(DeviceConfig::new(my_mac, &[me])));
    let frames = Frames::default();
    let tap = frames.clone();
    net.set_tap(move |_, f| tap.borrow_mut().push(f.to_vec()));
    let guid = u64::from_be_bytes(formulas::node_guid(my_mac.0));
    let gsi = Gsi::open(net.dev(0), GsiConfig::default()).unwrap();
    let cm =
        RdmaCm::new(RdmaCmConfig { cm: CmConfig { ca_guid: guid, ..CmConfig::default() }, ..RdmaCmConfig::default() });
    (net, frames, gsi, cm)
}

/// An RC QP numbered `qpn` (as in the capture).
fn rc_qp_numbered(net: &mut Network, qpn: u32) -> u32 {
    let pd = net.dev(0).alloc_pd();
    let cq = net.dev(0).create_cq(16).unwrap();
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
    net.dev(0).create_qp_with_qpn(pd, &init, qpn).unwrap()
}

#[test]
fn the_req_is_rxes_byte_for_byte() {
    // rdma_cm.pcap frame 1: 10.1.16.62 (MAC 00:50:56:a7:7d:03) port 0xccf7, QP 0x3d, connects
    // to 10.1.16.61:18515 with responder resources and initiator depth 0, retries 7 and 7.
    let (me, peer): (IpAddr, IpAddr) = ("10.1.16.62".parse().unwrap(), "10.1.16.61".parse().unwrap());
    let my_mac = EthernetAddress([0x00, 0x50, 0x56, 0xa7, 0x7d, 0x03]);
    let peer_mac = EthernetAddress([0x00, 0x50, 0x56, 0xa7, 0x12, 0x9f]);
    assert_eq!(formulas::node_guid(my_mac.0), 0x0250_56ff_fea7_7d03u64.to_be_bytes(), "rxe's node GUID of that MAC");
    let (mut net, frames, mut gsi, mut cm) = rxe_twin(me, my_mac);
    let gids = net.dev(0).config().gids.clone();
    let sgid_index = gids.iter().position(|g| g.to_ip() == me).unwrap() as u8;
    let id = cm.create_id(PortSpace::Tcp).unwrap();
    cm.bind_addr(id, SocketAddr::new(me, 0xccf7)).unwrap();
    let r = Route { src: me, dst: peer, sgid_index, dmac: peer_mac, mtu: Mtu::Mtu1024 };
    cm.resolve_addr(id, SocketAddr::new(peer, 18515), r).unwrap();
    cm.resolve_route(id).unwrap();
    let qpn = rc_qp_numbered(&mut net, 0x3d);
    cm.set_qp(net.dev(0), id, qpn).unwrap();
    let p = ConnParam {
        private_data: &[],
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num: 0,
    };
    cm.connect(net.now(), net.dev(0), id, &p).unwrap();
    cm.progress(net.now(), net.dev(0), &mut gsi, &mut |ip| (ip == peer).then_some(peer_mac));
    net.step();
    let ours = frames.borrow()[0].clone();

    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public/rdma_cm.pcap");
    let mut rd = pcap_file::pcap::PcapReader::new(std::fs::File::open(fixture).unwrap()).unwrap();
    let theirs = rd.next_packet().unwrap().unwrap().data.into_owned();
    let (a, b) = (parse_frame(&ours).unwrap(), parse_frame(&theirs).unwrap());
    assert_eq!(ours.len(), theirs.len());
    // The headers: addresses, ports, QPs, Q_Key, AckReq (the PSN and IPv4 ID are per host).
    assert_eq!((a.ip.src_addr(), a.ip.dst_addr()), (b.ip.src_addr(), b.ip.dst_addr()));
    assert_eq!((a.udp.src_port, a.udp.dst_port), (b.udp.src_port, b.udp.dst_port));
    assert_eq!(
        (a.roce.bth.opcode, a.roce.bth.dest_qp, a.roce.bth.ack_req, a.roce.bth.pkey),
        (b.roce.bth.opcode, b.roce.bth.dest_qp, b.roce.bth.ack_req, b.roce.bth.pkey)
    );
    assert_eq!(a.roce.ext.deth, b.roce.ext.deth);
    // The MAD: all 256 bytes but the TID (8..16), the communication ID (24..28) and the
    // starting PSN (data 44..47), which both sides draw at random.
    let (mut x, mut y) = (a.payload().to_vec(), b.payload().to_vec());
    for m in [&mut x, &mut y] {
        m[8..16].fill(0);
        m[24..28].fill(0);
        m[24 + 44..24 + 47].fill(0);
    }
    let diff: Vec<usize> = (0..256).filter(|&i| x[i] != y[i]).collect();
    assert!(diff.is_empty(), "bytes {diff:?} differ:\nours   {:02x?}\ntheirs {:02x?}", &x[..], &y[..]);
}

#[test]
fn the_rep_to_rxes_req_is_rxes_rep_byte_for_byte() {
    // rdma_cm.pcap frames 1 and 2: 10.1.16.61 (MAC 00:50:56:a7:12:9f) listens on 18515 and
    // answers rxe's REQ with QP 0x3b, responder resources and initiator depth 0, RNR retry 7.
    let (me, peer): (IpAddr, IpAddr) = ("10.1.16.61".parse().unwrap(), "10.1.16.62".parse().unwrap());
    let my_mac = EthernetAddress([0x00, 0x50, 0x56, 0xa7, 0x12, 0x9f]);
    let peer_mac = EthernetAddress([0x00, 0x50, 0x56, 0xa7, 0x7d, 0x03]);
    let (mut net, frames, mut gsi, mut cm) = rxe_twin(me, my_mac);
    let l = cm.create_id(PortSpace::Tcp).unwrap();
    cm.bind_addr(l, SocketAddr::new(me, 18515)).unwrap();
    cm.listen(l).unwrap();

    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public/rdma_cm.pcap");
    let mut rd = pcap_file::pcap::PcapReader::new(std::fs::File::open(fixture).unwrap()).unwrap();
    let req = rd.next_packet().unwrap().unwrap().data.into_owned();
    let rep = rd.next_packet().unwrap().unwrap().data.into_owned();
    let mut resolve = |ip: IpAddr| (ip == peer).then_some(peer_mac);
    let now = net.now();
    net.dev(0).handle_frame(now, &req).unwrap();
    cm.progress(net.now(), net.dev(0), &mut gsi, &mut resolve);
    let e = cm.poll_event().unwrap();
    assert_eq!((e.kind, e.param.qp_num), (EventKind::ConnectRequest, 0x3d));
    let qpn = rc_qp_numbered(&mut net, 0x3b);
    cm.set_qp(net.dev(0), e.id, qpn).unwrap();
    let p = ConnParam {
        private_data: &[],
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num: 0,
    };
    cm.accept(net.now(), net.dev(0), e.id, Some(&p)).unwrap();
    cm.progress(net.now(), net.dev(0), &mut gsi, &mut resolve);
    net.step();
    let ours =
        frames.borrow().iter().find(|f| parse_frame(f).is_ok_and(|p| p.roce.bth.dest_qp.value() == 1)).unwrap().clone();
    let (a, b) = (parse_frame(&ours).unwrap(), parse_frame(&rep).unwrap());
    assert_eq!((a.ip.src_addr(), a.ip.dst_addr(), a.udp.src_port), (b.ip.src_addr(), b.ip.dst_addr(), b.udp.src_port));
    assert_eq!(a.roce.ext.deth, b.roce.ext.deth);
    // All 256 bytes but our communication ID (data 0..4) and starting PSN (data 20..23): the
    // TID and the remote communication ID are rxe's REQ's.
    let (mut x, mut y) = (a.payload().to_vec(), b.payload().to_vec());
    for m in [&mut x, &mut y] {
        m[24..28].fill(0);
        m[24 + 20..24 + 23].fill(0);
    }
    let diff: Vec<usize> = (0..256).filter(|&i| x[i] != y[i]).collect();
    assert!(diff.is_empty(), "bytes {diff:?} differ:\nours   {:02x?}\ntheirs {:02x?}", &x[..], &y[..]);
    // The QP went to RTS towards rxe's QP: it sends from the REQ's starting PSN and receives
    // from the one our REP announced — as the capture shows rxe's passive side doing (its first
    // SEND carries the REQ's PSN, the active side's the REP's).
    let q = net.dev(0).query_qp(qpn).unwrap();
    let CmMessage::Rep(our_rep) = CmMessage::parse(&Mad::parse(a.payload(), 0).unwrap(), 0).unwrap() else { panic!() };
    assert_eq!((q.qp_state, q.dest_qp_num), (QpState::Rts, 0x3d));
    assert_eq!((q.sq_psn, q.rq_psn), (0x7c_c204, our_rep.starting_psn));
    let mut first_send = std::collections::HashMap::new();
    while let Some(f) = rd.next_packet() {
        let f = f.unwrap().data.into_owned();
        if let Ok(p) = parse_frame(&f) {
            if p.roce.bth.opcode == uroce_wire::Opcode::RC_SEND_ONLY {
                first_send.entry(p.ip.src_addr()).or_insert(p.roce.bth.psn.value());
            }
        }
    }
    assert_eq!(first_send[&me], 0x7c_c204, "rxe's passive side sends from the REQ's starting PSN");
    assert_eq!(first_send[&peer], 0x72_7d6d, "rxe's active side sends from the REP's starting PSN");
}

#[test]
fn accepting_without_parameters_grants_what_the_request_asked_for() {
    // rping accepts with a NULL conn_param: librdmacm then answers with the request's resources
    // (as the passive side sees them) and retries 7 and 7.
    let o = QpOptions::default();
    let (mut net, mut h, c, qa, _) = started(&o, &[]);
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    let s = h[1].events[0].id;
    let qb = create(&mut net, 1, &o).unwrap();
    h[1].cm.set_qp(net.dev(1), s, qb.qpn).unwrap();
    h[1].cm.accept(net.now(), net.dev(1), s, None).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3);
    let e = &h[0].events[2];
    assert_eq!((e.id, e.kind), (c, EventKind::Established));
    // the client asked for 1 and 1 (`param`): the REP grants 1 and 1
    assert_eq!((e.param.responder_resources, e.param.initiator_depth, e.param.rnr_retry_count), (1, 1, 7));
    let (a, b) = (net.dev(0).query_qp(qa.qpn).unwrap(), net.dev(1).query_qp(qb.qpn).unwrap());
    assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic, b.max_rd_atomic, b.max_dest_rd_atomic), (1, 1, 1, 1));
}

#[test]
fn an_ack_timeout_set_on_an_id_is_its_qps() {
    // `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` (pyverbs' test_rdmacm_async_traffic sets 21
    // on both sides and reads it back with ibv_query_qp): before connect on the client, on the
    // request's ID before accept on the server; the path's 17 otherwise.
    let o = QpOptions::default();
    let (mut net, mut h, _) = listening(PortSpace::Tcp, 7174);
    let c = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    h[0].cm.resolve_addr(c, SocketAddr::new(IpAddr::V4(ipv4(2)), 7174), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c).unwrap();
    let qa = create(&mut net, 0, &o).unwrap();
    h[0].cm.set_qp(net.dev(0), c, qa.qpn).unwrap();
    h[0].cm.set_ack_timeout(c, 21).unwrap();
    h[0].cm.connect(net.now(), net.dev(0), c, &param(&[])).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    let s = h[1].events[0].id;
    let qb = create(&mut net, 1, &o).unwrap();
    h[1].cm.set_qp(net.dev(1), s, qb.qpn).unwrap();
    h[1].cm.set_ack_timeout(s, 19).unwrap();
    h[1].cm.accept(net.now(), net.dev(1), s, None).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3 && h[1].events.len() == 2);
    let (a, b) = (net.dev(0).query_qp(qa.qpn).unwrap(), net.dev(1).query_qp(qb.qpn).unwrap());
    assert_eq!((a.qp_state, b.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!((a.timeout, b.timeout), (21, 19));
}

/// cmtime's way: neither side calls `rdma_create_qp`. Each names its QP in `conn_param.qp_num`
/// and moves it with the attributes `init_qp_attr` gives; the client gets the REP as
/// `ConnectResponse` and confirms it with `establish` (the RTU), and the QPs end up as the
/// managed path leaves them: each sending from the PSN the other receives from.
#[test]
fn a_program_that_moves_its_own_qps_connects_with_init_qp_attr_and_establish() {
    let o = QpOptions::default();
    let (mut net, mut h, _) = listening(PortSpace::Tcp, 7176);
    let c = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    h[0].cm.resolve_addr(c, SocketAddr::new(IpAddr::V4(ipv4(2)), 7176), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c).unwrap();
    let (qa, qb) = (create(&mut net, 0, &o).unwrap(), create(&mut net, 1, &o).unwrap());
    let own = |net: &mut Network, node: usize, cm: &RdmaCm, id: IdHandle, qpn: u32, state: QpState| {
        let (attr, mask) = cm.init_qp_attr(id, state).unwrap();
        net.dev(node).modify_qp(qpn, &attr, mask).unwrap();
    };
    own(&mut net, 0, &h[0].cm, c, qa.qpn, QpState::Init);
    assert_eq!(h[0].cm.init_qp_attr(c, QpState::Rtr).map_err(|e| e.errno()), Err(22), "no peer yet");
    h[0].cm.connect(net.now(), net.dev(0), c, &ConnParam { qp_num: qa.qpn, ..param(&[]) }).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    let s = h[1].events[0].id;
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        own(&mut net, 1, &h[1].cm, s, qb.qpn, st);
    }
    h[1].cm.accept(net.now(), net.dev(1), s, Some(&ConnParam { qp_num: qb.qpn, ..param(&[]) })).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3);
    let resp = &h[0].events[2];
    assert_eq!((resp.kind, resp.param.qp_num), (EventKind::ConnectResponse, qb.qpn));
    assert_eq!(net.dev(0).query_qp(qa.qpn).unwrap().qp_state, QpState::Init, "the program moves its QP");
    for st in [QpState::Rtr, QpState::Rts] {
        own(&mut net, 0, &h[0].cm, c, qa.qpn, st);
    }
    h[0].cm.establish(c).unwrap();
    assert_eq!(h[0].cm.establish(c).map_err(|e| e.errno()), Err(22), "once");
    drive(&mut net, &mut h, sim_resolve, |h| h[1].events.len() == 2);
    assert_eq!(h[1].events[1].kind, EventKind::Established);
    assert_eq!(h[0].events.len(), 3, "no ESTABLISHED after rdma_establish, as with the kernel");
    let (a, b) = (net.dev(0).query_qp(qa.qpn).unwrap(), net.dev(1).query_qp(qb.qpn).unwrap());
    assert_eq!((a.qp_state, b.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!((a.dest_qp_num, b.dest_qp_num), (qb.qpn, qa.qpn));
    assert_eq!((a.sq_psn, a.rq_psn), (b.rq_psn, b.sq_psn));
    assert_eq!((a.timeout, b.timeout, b.min_rnr_timer), (17, 17, 0));
    // A disconnect leaves a program's own QP alone (librdmacm moves only the QP it made).
    h[0].cm.disconnect(net.now(), net.dev(0), c).unwrap();
    assert_eq!(net.dev(0).query_qp(qa.qpn).unwrap().qp_state, QpState::Rts);
}

/// A UD ID (the UDP port space): `connect` sends a SIDR_REQ; the server's `accept` answers with
/// its UD QP and RDMA-CM's Q_Key; the client's `Established` names them with the address vector
/// of the path, and a datagram sent with them arrives. A SIDR_REQ for a port nobody listens on
/// comes back `Unreachable`.
#[test]
fn a_ud_id_finds_the_servers_qp_by_sidr_and_a_datagram_reaches_it() {
    let (mut net, mut h, l) = listening(PortSpace::Udp, 7177);
    let ud_qp = |net: &mut Network, node: usize| {
        let d = net.dev(node);
        let (pd, cq) = (d.alloc_pd(), d.create_cq(64).unwrap());
        let a = QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap::default(),
            sq_sig_all: false,
            srq: None,
        };
        (pd, cq, d.create_qp(pd, &a).unwrap())
    };
    let (pa, _, qa) = ud_qp(&mut net, 0);
    let (pb, cb, qb) = ud_qp(&mut net, 1);
    let c = h[0].cm.create_id(PortSpace::Udp).unwrap();
    h[0].cm.resolve_addr(c, SocketAddr::new(IpAddr::V4(ipv4(2)), 7177), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c).unwrap();
    let rc = create(&mut net, 0, &QpOptions::default()).unwrap();
    assert_eq!(h[0].cm.set_qp(net.dev(0), c, rc.qpn).map_err(|e| e.errno()), Err(22), "a UD ID takes a UD QP");
    h[0].cm.set_qp(net.dev(0), c, qa).unwrap();
    let qa_attr = net.dev(0).query_qp(qa).unwrap();
    assert_eq!((qa_attr.qp_state, qa_attr.qkey), (QpState::Rts, 0x0123_4567), "ready at once, RDMA_UDP_QKEY");
    h[0].cm.connect(net.now(), net.dev(0), c, &param(b"hello")).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| !h[1].events.is_empty());
    let req = h[1].events[0].clone();
    assert_eq!((req.kind, req.listen_id, &req.private_data[..5]), (EventKind::ConnectRequest, Some(l), &b"hello"[..]));
    assert!(req.ud.is_some());
    h[1].cm.set_qp(net.dev(1), req.id, qb).unwrap();
    h[1].cm.accept(net.now(), net.dev(1), req.id, Some(&param(b"welcome"))).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3);
    let est = h[0].events[2].clone();
    assert_eq!((est.kind, &est.private_data[..7]), (EventKind::Established, &b"welcome"[..]));
    let ud = est.ud.expect("the peer's UD QP");
    assert_eq!((ud.qp_num, ud.qkey), (qb, 0x0123_4567));
    assert_eq!(
        (ud.ah.dgid, ud.ah.sgid_index, ud.ah.hop_limit, ud.ah.dmac),
        (Gid::from_ip(IpAddr::V4(ipv4(2))), 1, 64, mac(2))
    );
    assert_eq!(h[1].events.len(), 1, "no event on the passive side of a SIDR");

    // A datagram with what the event gave.
    let rbuf = reg(&mut net, 1, pb, 4096, ALL_ACCESS, |_| 0);
    net.dev(1).post_recv(qb, &RecvWr { wr_id: 9, sg_list: &[sge(&rbuf, 0, 4096)] }).unwrap();
    let sbuf = reg(&mut net, 0, pa, 64, ALL_ACCESS, |i| pattern(3, i));
    let ah = net.dev(0).create_ah(pa, &ud.ah).unwrap();
    let sg = [sge(&sbuf, 0, 64)];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: &sg,
        ud: Some(UdDest { ah, remote_qpn: ud.qp_num, remote_qkey: ud.qkey }),
        ..Default::default()
    };
    net.dev(0).post_send(qa, &wr).unwrap();
    let mut got = Vec::new();
    for _ in 0..10_000 {
        got.extend(drain_cq(&mut net, 1, cb));
        if !got.is_empty() || !net.step() {
            break;
        }
    }
    assert_eq!((got.len(), got[0].wr_id, got[0].byte_len, got[0].status), (1, 9, 40 + 64, WcStatus::Success));
    assert_eq!(mr_bytes(&mut net, 1, &rbuf)[40..104], mr_bytes(&mut net, 0, &sbuf)[..]);

    // Nobody on 7178.
    let c2 = h[0].cm.create_id(PortSpace::Udp).unwrap();
    h[0].cm.resolve_addr(c2, SocketAddr::new(IpAddr::V4(ipv4(2)), 7178), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c2).unwrap();
    let (_, _, q2) = ud_qp(&mut net, 0);
    h[0].cm.set_qp(net.dev(0), c2, q2).unwrap();
    h[0].cm.connect(net.now(), net.dev(0), c2, &param(&[])).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 6);
    let e = &h[0].events[5];
    assert_eq!((e.id, e.kind), (c2, EventKind::Unreachable));
    assert!(e.status > 0, "a SIDR status, not an errno: {}", e.status);
}

/// IDs are a bounded resource: past `max_ids` creating one fails with ENOMEM, and a connect
/// request that finds no ID left is refused (REJ "consumer defined"), not queued.
#[test]
fn ids_are_bounded_and_a_request_without_one_is_refused() {
    let mut net = Network::new(3, LinkConfig::default());
    net.add(device(1, 3));
    net.add(device(2, 3));
    let mut h = hosts(&mut net, [0xa, 0xb]);
    h[1].cm = RdmaCm::new(RdmaCmConfig {
        cm: CmConfig { ca_guid: 0xb, hi_tid: 2, ..CmConfig::default() },
        max_ids: 1,
        ..RdmaCmConfig::default()
    });
    let l = h[1].cm.create_id(PortSpace::Tcp).unwrap();
    assert_eq!(h[1].cm.create_id(PortSpace::Tcp).map_err(|e| e.errno()), Err(12));
    h[1].cm.bind_addr(l, "0.0.0.0:7179".parse().unwrap()).unwrap();
    h[1].cm.listen(l).unwrap();
    let c = h[0].cm.create_id(PortSpace::Tcp).unwrap();
    h[0].cm.resolve_addr(c, SocketAddr::new(IpAddr::V4(ipv4(2)), 7179), route(1, 2)).unwrap();
    h[0].cm.resolve_route(c).unwrap();
    let q = create(&mut net, 0, &QpOptions::default()).unwrap();
    h[0].cm.set_qp(net.dev(0), c, q.qpn).unwrap();
    h[0].cm.connect(net.now(), net.dev(0), c, &param(&[])).unwrap();
    drive(&mut net, &mut h, sim_resolve, |h| h[0].events.len() == 3);
    assert_eq!((h[0].events[2].kind, h[0].events[2].status), (EventKind::Rejected, 28));
    assert!(h[1].events.is_empty(), "no ConnectRequest without an ID for it");
    // Freed, the slot serves again.
    h[1].cm.destroy_id(net.now(), l).unwrap();
    assert!(h[1].cm.create_id(PortSpace::Tcp).is_ok());
}
