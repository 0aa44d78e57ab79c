//! QP1 end to end on the simulated network: two devices, each with its GSI agent and CM, set up
//! an RC connection through REQ/REP/RTU carried as UD datagrams on QP1, move data over it, and
//! release it — and every MAD frame on the wire has the shape of rxe's (`rdma_cm.pcap`).

mod common;

use common::*;
use std::net::IpAddr;
use uroce_transport::cm::gsi::{Gsi, GsiConfig};
use uroce_transport::cm::{AcceptParams, Cm, CmConfig, CmEvent, CmId, CmState, ConnectParams, MadAddr};
use uroce_transport::connect::RcRemote;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::cm::ip::{service_id, PortSpace};
use uroce_wire::cm::{CmMessage, PathRepr};
use uroce_wire::mad::{Mad, GSI_QKEY};
use uroce_wire::{parse_frame, Opcode};

struct Host {
    gsi: Gsi,
    cm: Cm,
    events: Vec<CmEvent>,
}

fn resolve(ip: IpAddr) -> Option<uroce_wire::EthernetAddress> {
    (1..=2u8).find(|&i| ip == IpAddr::V4(ipv4(i))).map(mac)
}

/// Run the network and both agents until `done` or nothing moves.
fn drive(net: &mut Network, hosts: &mut [Host; 2], mut done: impl FnMut(&[Host; 2]) -> bool) {
    for _ in 0..100_000 {
        let now = net.now();
        let mut moved = false;
        for (i, h) in hosts.iter_mut().enumerate() {
            moved |= h.gsi.progress(now, net.dev(i), &mut h.cm, &mut resolve);
            while let Some(e) = h.cm.poll_event() {
                h.events.push(e);
            }
        }
        if done(hosts) {
            return;
        }
        if !net.step() && !moved {
            panic!("idle before done: {:?} / {:?}", hosts[0].events, hosts[1].events);
        }
    }
    panic!("not done");
}

fn gid(i: u8) -> IpAddr {
    IpAddr::V4(ipv4(i))
}

#[test]
fn an_rc_connection_set_up_over_qp1_carries_data_and_is_released() {
    let mut net = Network::new(7, LinkConfig::default());
    net.add(device(1, 7));
    net.add(device(2, 7));
    let frames = std::rc::Rc::new(std::cell::RefCell::new(Vec::<Vec<u8>>::new()));
    let tap = frames.clone();
    net.set_tap(move |_, f| tap.borrow_mut().push(f.to_vec()));
    let cfg = |guid| CmConfig { ca_guid: guid, hi_tid: guid as u32, ..CmConfig::default() };
    let mut hosts = [0u64, 1].map(|i| Host {
        gsi: Gsi::open(net.dev(i as usize), GsiConfig::default()).unwrap(),
        cm: Cm::new(cfg(0xa0 + i)),
        events: Vec::new(),
    });
    let sid = service_id(PortSpace::Tcp, 7174);
    hosts[1].cm.listen(sid).unwrap();
    let o = QpOptions::default();
    let (qa, qb) = (create(&mut net, 0, &o).unwrap(), create(&mut net, 1, &o).unwrap());
    let (pa, pb) = (0x12_3456, 0x65_4321);

    // a asks for b's service with its QP and PSN; the path is IPv4 (GID index 1).
    let path = PathRepr {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: ipv4(1).to_ipv6_mapped(),
        remote_gid: ipv4(2).to_ipv6_mapped(),
        hop_limit: 64,
        local_ack_timeout: 14,
        ..PathRepr::NONE
    };
    let peer = MadAddr { sgid_index: 1, ..MadAddr::gsi(gid(2)) };
    let params = ConnectParams {
        peer,
        service_id: sid,
        qp_type: QpType::Rc,
        local_qpn: qa.qpn,
        starting_psn: pa,
        responder_resources: 16,
        initiator_depth: 16,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        primary: path,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        private_data: b"hello",
    };
    let ia = hosts[0].cm.connect(net.now(), &params).unwrap();
    drive(&mut net, &mut hosts, |h| !h[1].events.is_empty());

    // b: the REQ names a's QP and PSN; b brings its QP up towards them and answers.
    let (ib, req) = match &hosts[1].events[0] {
        CmEvent::ReqReceived { id, req, peer, .. } => {
            assert_eq!((peer.gid, peer.qpn, peer.sgid_index), (gid(1), 1, 1));
            (*id, req.clone())
        }
        e => panic!("{e:?}"),
    };
    let CmMessage::Req(r) = req.message() else { panic!() };
    assert_eq!((r.local_qpn, r.starting_psn, &req.private_data()[..5]), (qa.qpn, pa, &b"hello"[..]));
    let up = |net: &mut Network, me: &QpEnd, peer: usize, qpn: u32, my: u32, theirs: u32| {
        let cfg = net.dev(peer).config().clone();
        let remote = RcRemote { qpn, psn: theirs, gid: cfg.gids[1], mac: cfg.mac };
        connect::connect_rc(net.dev(me.node), me.qpn, &o.rc_local(1, my), &remote).unwrap();
    };
    // A starting PSN is its sender's receive PSN: b sends from the REQ's, receives from its REP's.
    up(&mut net, &qb, 0, r.local_qpn, r.starting_psn, pb);
    let accept = AcceptParams {
        local_qpn: qb.qpn,
        starting_psn: pb,
        responder_resources: 16,
        initiator_depth: 16,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        private_data: &[],
    };
    hosts[1].cm.accept(net.now(), ib, &accept).unwrap();
    drive(&mut net, &mut hosts, |h| !h[0].events.is_empty());

    // a: the REP names b's QP and PSN; a's QP goes up, then the RTU.
    let rep = match &hosts[0].events[0] {
        CmEvent::RepReceived { id, rep } if *id == ia => rep.clone(),
        e => panic!("{e:?}"),
    };
    let CmMessage::Rep(p) = rep.message() else { panic!() };
    assert_eq!((p.local_qpn, p.starting_psn), (qb.qpn, pb));
    up(&mut net, &qa, 1, p.local_qpn, p.starting_psn, pa);
    hosts[0].cm.send_rtu(ia, &[]).unwrap();
    drive(&mut net, &mut hosts, |h| h[1].events.len() == 2);
    assert_eq!(hosts[1].events[1], CmEvent::RtuReceived { id: ib });

    // Data over the connection the CM set up.
    let src = reg(&mut net, 0, qa.pd, 4096, ALL_ACCESS, |i| pattern(5, i));
    let dst = reg(&mut net, 1, qb.pd, 4096, ALL_ACCESS, |_| 0);
    let sg = [sge(&src, 0, 4096)];
    let wr = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &sg,
        send_flags: SendFlags::SIGNALED,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    net.dev(0).post_send(qa.qpn, &wr).unwrap();
    let wcs = wait_wcs(&mut net, &qa, 1, 100_000);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::Success));
    assert_eq!(mr_bytes(&mut net, 1, &dst), mr_bytes(&mut net, 0, &src));

    // Release.
    hosts[0].cm.disconnect(net.now(), ia, &[]).unwrap();
    drive(&mut net, &mut hosts, |h| h[1].events.len() == 3);
    assert!(matches!(hosts[1].events[2], CmEvent::DreqReceived { id, .. } if id == ib));
    hosts[1].cm.send_drep(net.now(), ib, &[]).unwrap();
    drive(&mut net, &mut hosts, |h| h[0].events.len() == 2);
    assert_eq!(hosts[0].events[1], CmEvent::DrepReceived { id: ia });
    assert_eq!(
        (hosts[0].cm.state(ia), hosts[1].cm.state(CmId(ib.0))),
        (Some(CmState::Timewait), Some(CmState::Timewait))
    );

    // Every MAD frame as rxe sends one: UD SEND ONLY to QP1 with the GSI Q_Key from QP1, AckReq,
    // UDP source port 55410, a 256-byte payload, 322 bytes in all over IPv4.
    let mads: Vec<Vec<u8>> = frames
        .borrow()
        .iter()
        .filter(|f| parse_frame(f).is_ok_and(|p| p.roce.bth.dest_qp.value() == 1))
        .cloned()
        .collect();
    let mut names = Vec::new();
    for f in &mads {
        let p = parse_frame(f).unwrap();
        let d = p.roce.ext.deth.unwrap();
        assert_eq!(p.roce.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!((d.qkey, d.src_qp.value(), p.roce.bth.ack_req, p.udp.src_port), (GSI_QKEY, 1, true, 55410));
        assert_eq!((p.roce.payload_len, f.len()), (256, 322));
        let m = Mad::parse(p.payload(), 0).unwrap();
        names.push(CmMessage::parse(&m, 0).unwrap().attr_id().name());
    }
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    for h in &hosts {
        let c = h.gsi.counters();
        assert_eq!((c.rx_errors, c.tx_errors, c.tx_no_route), (0, 0, 0));
    }
    assert_eq!((hosts[0].gsi.counters().tx_mads, hosts[1].gsi.counters().rx_mads), (3, 3));
}
