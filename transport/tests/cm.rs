//! The communication manager as scenarios between two CMs on a simulated clock: connection
//! setup and release, every lost-message case the protocol recovers from, the timeouts it gives
//! up after, simultaneous disconnects, refusals, SIDR, and hostile MADs that must change nothing.

use std::net::IpAddr;
use std::time::Duration;
use uroce_transport::cm::{
    cm_time, AcceptParams, Cm, CmConfig, CmDrop, CmError, CmEvent, CmId, CmState, ConnectParams, MadAddr, OutMad,
};
use uroce_transport::time::Instant;
use uroce_transport::QpType;
use uroce_wire::cm::ip::{service_id, PortSpace};
use uroce_wire::cm::{AttrId, CmMessage, PathRepr, RejReason};
use uroce_wire::mad::Mad;

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn msg(m: &OutMad) -> CmMessage<'_> {
    CmMessage::parse(&Mad::parse(&m.mad[..], 0).unwrap(), 0).unwrap()
}

fn tid(m: &OutMad) -> u64 {
    Mad::parse(&m.mad[..], 0).unwrap().header.tid
}

/// Two CMs and the MADs between them; `drop` decides, per MAD in flight, whether it is lost.
struct Pair {
    now: Instant,
    a: Cm,
    b: Cm,
    /// Every MAD that left either side, in order: (sender is a, the MAD).
    wire: Vec<(bool, OutMad)>,
    ev_a: Vec<CmEvent>,
    ev_b: Vec<CmEvent>,
    drops: Vec<Result<(), CmDrop>>,
}

impl Pair {
    fn new() -> Pair {
        let cfg = |guid, hi| CmConfig { ca_guid: guid, hi_tid: hi, comm_id_seed: guid as u32, ..CmConfig::default() };
        let mut b = Cm::new(cfg(0xbbbb, 2));
        b.listen(sid()).unwrap();
        Pair {
            now: Instant::ZERO,
            a: Cm::new(cfg(0xaaaa, 1)),
            b,
            wire: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            drops: Vec::new(),
        }
    }

    /// Deliver everything queued (losing what `lose` picks) until both sides are quiet.
    fn run(&mut self, lose: &mut dyn FnMut(bool, &OutMad) -> bool) {
        loop {
            let mut moved = false;
            for from_a in [true, false] {
                let (src, dst) = if from_a { (A, B) } else { (B, A) };
                loop {
                    let sender = if from_a { &mut self.a } else { &mut self.b };
                    let Some(m) = sender.poll_transmit() else { break };
                    moved = true;
                    assert_eq!(m.to, MadAddr::gsi(ip(dst)));
                    let lost = lose(from_a, &m);
                    self.wire.push((from_a, m.clone()));
                    if !lost {
                        let receiver = if from_a { &mut self.b } else { &mut self.a };
                        self.drops.push(receiver.handle_mad(self.now, MadAddr::gsi(ip(src)), &m.mad[..]));
                    }
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.ev_b.push(e);
            }
            if !moved {
                return;
            }
        }
    }

    fn deliver(&mut self) {
        self.run(&mut |_, _| false);
    }

    /// Advance to the next deadline of either side and fire it.
    fn tick(&mut self) -> Option<Instant> {
        let t = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min()?;
        self.now = t;
        self.a.handle_timeout(t);
        self.b.handle_timeout(t);
        Some(t)
    }

    fn names(&self) -> Vec<(char, &'static str)> {
        self.wire.iter().map(|(a, m)| (if *a { 'a' } else { 'b' }, msg(m).attr_id().name())).collect()
    }

    fn connect(&mut self) -> CmId {
        self.a.connect(self.now, &params(&[1, 2, 3])).unwrap()
    }

    fn req_id(&self) -> CmId {
        match self.ev_b.iter().find(|e| matches!(e, CmEvent::ReqReceived { .. })) {
            Some(CmEvent::ReqReceived { id, .. }) => *id,
            _ => panic!("no REQ at b: {:?}", self.ev_b),
        }
    }

    /// Set up a connection with nothing lost: (a's ID, b's ID).
    fn established(&mut self) -> (CmId, CmId) {
        let ia = self.connect();
        self.deliver();
        let ib = self.req_id();
        self.b.accept(self.now, ib, &accept()).unwrap();
        self.deliver();
        self.a.send_rtu(ia, &[]).unwrap();
        self.deliver();
        assert_eq!((self.a.state(ia), self.b.state(ib)), (Some(CmState::Established), Some(CmState::Established)));
        (ia, ib)
    }
}

fn sid() -> u64 {
    service_id(PortSpace::Tcp, 18515)
}

fn path() -> PathRepr {
    PathRepr {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: "::ffff:10.0.0.1".parse().unwrap(),
        remote_gid: "::ffff:10.0.0.2".parse().unwrap(),
        flow_label: 0x91a3c,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 17,
    }
}

fn params(private_data: &[u8]) -> ConnectParams<'_> {
    ConnectParams {
        peer: MadAddr::gsi(ip(B)),
        service_id: sid(),
        qp_type: QpType::Rc,
        local_qpn: 0x3d,
        starting_psn: 0x7c_c204,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        primary: path(),
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        private_data,
    }
}

fn accept() -> AcceptParams<'static> {
    AcceptParams {
        local_qpn: 0x3b,
        starting_psn: 0x72_7d6d,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"rep",
    }
}

/// rdma_cm's REQ timeout: 2 · packet lifetime (16: 256 ms) + response timeout (20: 4096 ms).
const REQ_TIMEOUT: Duration = Duration::from_millis(2 * 256 + 4096);

#[test]
fn timeouts_are_linuxs_cm_convert_to_ms() {
    assert_eq!(cm_time(20), Duration::from_millis(4096));
    assert_eq!(cm_time(16), Duration::from_millis(256));
    assert_eq!(cm_time(3), Duration::from_millis(1));
    assert_eq!(cm_time(0), Duration::from_millis(1));
}

#[test]
fn a_connection_is_set_up_and_released_as_rxe_does_it() {
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let (ib, req) = match &p.ev_b[..] {
        [CmEvent::ReqReceived { id, listen, peer, req }] => {
            assert_eq!((*listen, *peer), (sid(), MadAddr::gsi(ip(A))));
            (*id, req.clone())
        }
        e => panic!("{e:?}"),
    };
    let CmMessage::Req(r) = req.message() else { panic!() };
    assert_eq!((r.local_comm_id, r.local_qpn, r.starting_psn, r.local_ca_guid), (ia.0, 0x3d, 0x7c_c204, 0xaaaa));
    assert_eq!(&req.private_data()[..4], &[1, 2, 3, 0]);
    assert_eq!(p.b.state(ib), Some(CmState::ReqRcvd));

    p.b.accept(p.now, ib, &accept()).unwrap();
    p.deliver();
    let rep = match &p.ev_a[..] {
        [CmEvent::RepReceived { id, rep }] if *id == ia => rep.clone(),
        e => panic!("{e:?}"),
    };
    let CmMessage::Rep(r) = rep.message() else { panic!() };
    assert_eq!((r.ids.local, r.ids.remote, r.local_qpn, r.starting_psn), (ib.0, ia.0, 0x3b, 0x72_7d6d));
    assert_eq!(&rep.private_data()[..3], b"rep");
    assert_eq!(p.a.state(ia), Some(CmState::RepRcvd));

    p.a.send_rtu(ia, &[]).unwrap();
    p.deliver();
    assert_eq!(p.ev_b.last(), Some(&CmEvent::RtuReceived { id: ib }));
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Established), Some(CmState::Established)));

    p.a.disconnect(p.now, ia, &[]).unwrap();
    p.deliver();
    assert!(matches!(p.ev_b.last(), Some(CmEvent::DreqReceived { id, .. }) if *id == ib));
    p.b.send_drep(p.now, ib, &[]).unwrap();
    p.deliver();
    assert_eq!(p.ev_a.last(), Some(&CmEvent::DrepReceived { id: ia }));
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Timewait), Some(CmState::Timewait)));
    assert_eq!(p.names(), [('a', "REQ"), ('b', "REP"), ('a', "RTU"), ('a', "DREQ"), ('b', "DREP")]);

    // Linux's TIDs: REP and RTU carry the REQ's, the DREP its DREQ's; the DREQ a new one.
    let t: Vec<u64> = p.wire.iter().map(|(_, m)| tid(m)).collect();
    assert_eq!((t[1], t[2]), (t[0], t[0]));
    assert_eq!(t[4], t[3]);
    assert_eq!(t[0] >> 32, 1, "a's TIDs carry its hi_tid");

    // Time wait: 4.096 µs · 2^(16 + 1) as Linux rounds it, 512 ms; then both are Idle.
    let t0 = p.now;
    assert_eq!(p.tick(), Some(t0 + Duration::from_millis(512)));
    p.deliver();
    assert_eq!(p.ev_a.last(), Some(&CmEvent::TimewaitExit { id: ia }));
    assert_eq!(p.ev_b.last(), Some(&CmEvent::TimewaitExit { id: ib }));
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Idle), Some(CmState::Idle)));
    assert_eq!(p.tick(), None, "nothing left to time");
    p.a.destroy(p.now, ia).unwrap();
    p.b.destroy(p.now, ib).unwrap();
    p.deliver();
    assert_eq!((p.a.ids_in_use(), p.b.ids_in_use()), (0, 0));
    assert_eq!(p.wire.len(), 5, "destroying Idle IDs sends nothing");
    assert!(p.drops.iter().all(|r| r.is_ok()), "{:?}", p.drops);
    let (ca, cb) = (p.a.counters(), p.b.counters());
    assert_eq!((ca.tx_msgs.req, ca.tx_msgs.rtu, ca.tx_msgs.dreq, ca.rx_msgs.rep, ca.rx_msgs.drep), (1, 1, 1, 1, 1));
    assert_eq!((cb.rx_msgs.req, cb.tx_msgs.rep, cb.rx_msgs.rtu, cb.rx_msgs.dreq, cb.tx_msgs.drep), (1, 1, 1, 1, 1));
}

#[test]
fn a_lost_rep_is_resent_and_the_repeated_req_is_ignored() {
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.accept(p.now, ib, &accept()).unwrap();
    let mut first = true;
    p.run(&mut |from_a, m| !from_a && msg(m).attr_id() == AttrId::REP && std::mem::take(&mut first));
    // b's REP waits 2 · 256 ms + 4096 ms (a's local response timeout 20) before it goes again;
    // a's REQ is due at the same time and reaches b in RepSent: a duplicate, ignored.
    assert_eq!(p.tick(), Some(Instant::ZERO + REQ_TIMEOUT));
    p.deliver();
    assert_eq!(p.a.state(ia), Some(CmState::RepRcvd));
    assert_eq!(p.ev_a.iter().filter(|e| matches!(e, CmEvent::RepReceived { .. })).count(), 1);
    assert_eq!(p.names(), [('a', "REQ"), ('b', "REP"), ('a', "REQ"), ('b', "REP")]);
    assert_eq!((p.b.counters().rx_duplicates.req, p.b.counters().tx_retries.rep), (1, 1));
    assert_eq!(p.a.counters().tx_retries.req, 1);
    p.a.send_rtu(ia, &[]).unwrap();
    p.deliver();
    assert_eq!(p.b.state(ib), Some(CmState::Established));
    assert_eq!(p.ev_b.iter().filter(|e| matches!(e, CmEvent::ReqReceived { .. })).count(), 1);
}

#[test]
fn a_lost_rtu_is_repeated_when_the_rep_comes_again() {
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.accept(p.now, ib, &accept()).unwrap();
    p.deliver();
    p.a.send_rtu(ia, &[]).unwrap();
    p.run(&mut |from_a, m| from_a && msg(m).attr_id() == AttrId::RTU);
    assert_eq!(p.b.state(ib), Some(CmState::RepSent));
    p.tick();
    p.deliver();
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Established), Some(CmState::Established)));
    assert_eq!(p.names(), [('a', "REQ"), ('b', "REP"), ('a', "RTU"), ('b', "REP"), ('a', "RTU")]);
    assert_eq!(p.a.counters().rx_duplicates.rep, 1);
    assert_eq!(p.ev_a.iter().filter(|e| matches!(e, CmEvent::RepReceived { .. })).count(), 1);
    assert_eq!(p.ev_b.iter().filter(|e| matches!(e, CmEvent::RtuReceived { .. })).count(), 1);
}

#[test]
fn the_passive_side_may_start_on_its_first_packet_before_the_rtu() {
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.accept(p.now, ib, &accept()).unwrap();
    p.deliver();
    p.b.establish(ib).unwrap();
    assert_eq!(p.b.poll_timeout(), None, "the REP is no longer resent");
    p.a.send_rtu(ia, &[]).unwrap();
    p.deliver();
    assert_eq!(p.b.counters().rx_duplicates.rtu, 1);
    assert_eq!(p.b.establish(ib), Err(CmError::InvalidState(CmState::Established)));
}

#[test]
fn an_unanswered_req_is_sent_sixteen_times_then_fails() {
    let mut p = Pair::new();
    let ia = p.connect();
    let mut times = Vec::new();
    loop {
        p.run(&mut |_, _| true);
        match p.tick() {
            Some(t) => times.push(t),
            None => break,
        }
    }
    p.deliver();
    assert_eq!(p.wire.len(), 16, "1 + max_cm_retries (15)");
    assert!(p.names().iter().all(|n| *n == ('a', "REQ")));
    assert_eq!(times.len(), 16);
    for (i, t) in times.iter().enumerate() {
        assert_eq!(*t, Instant::ZERO + REQ_TIMEOUT * (i as u32 + 1));
    }
    assert_eq!(p.ev_a, [CmEvent::ReqError { id: ia }]);
    assert_eq!(p.a.state(ia), Some(CmState::Idle));
    assert_eq!(p.a.counters().tx_retries.req, 15);
}

#[test]
fn an_mra_buys_the_time_it_asks_for() {
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.send_mra(ib, 24, &[]).unwrap();
    p.deliver();
    assert_eq!(p.a.state(ia), Some(CmState::MraReqRcvd));
    assert_eq!(p.ev_a, [CmEvent::MraReceived { id: ia, service_timeout: 24 }]);
    // cm_convert_to_ms(24) + cm_convert_to_ms(16): 65 536 + 256 ms, not the REQ's 4.6 s.
    assert_eq!(p.a.poll_timeout(), Some(Instant::ZERO + Duration::from_millis(65_536 + 256)));
    // The REQ comes again then; b answers with its MRA again.
    p.tick();
    p.deliver();
    assert_eq!(p.names(), [('a', "REQ"), ('b', "MRA"), ('a', "REQ"), ('b', "MRA")]);
    assert_eq!(p.b.counters().rx_duplicates.req, 1);
    p.b.accept(p.now, ib, &accept()).unwrap();
    p.deliver();
    p.a.send_rtu(ia, &[]).unwrap();
    p.deliver();
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Established), Some(CmState::Established)));
}

#[test]
fn refusals_carry_their_reason_and_private_data() {
    // No listener.
    let mut p = Pair::new();
    p.b.unlisten(sid()).unwrap();
    let ia = p.connect();
    p.deliver();
    assert!(
        matches!(&p.ev_a[..], [CmEvent::RejReceived { id, reason, .. }] if *id == ia && *reason == RejReason::INVALID_SERVICE_ID)
    );
    assert_eq!(p.a.state(ia), Some(CmState::Idle));
    assert_eq!((p.b.ids_in_use(), p.b.counters().rej_no_listener), (0, 1));
    assert_eq!(p.a.poll_timeout(), None, "the REQ is not resent");

    // The application refuses.
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.reject(ib, RejReason::CONSUMER_DEFINED, &[], b"busy").unwrap();
    p.deliver();
    match &p.ev_a[..] {
        [CmEvent::RejReceived { id, reason, rej }] => {
            assert_eq!((*id, *reason), (ia, RejReason::CONSUMER_DEFINED));
            assert_eq!(&rej.private_data()[..4], b"busy");
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.b.state(ib), Some(CmState::Idle));
    assert_eq!(p.b.accept(p.now, ib, &accept()), Err(CmError::InvalidState(CmState::Idle)));

    // The active side refuses the REP.
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.b.accept(p.now, ib, &accept()).unwrap();
    p.deliver();
    p.a.reject(ia, RejReason::CONSUMER_DEFINED, &[], &[]).unwrap();
    p.deliver();
    assert!(matches!(p.ev_b.last(), Some(CmEvent::RejReceived { id, .. }) if *id == ib));
    assert_eq!(p.b.poll_timeout(), None, "the REP is not resent");
}

#[test]
fn simultaneous_disconnects_both_finish() {
    // rdma_cm.pcap frames 91–94: both sides send a DREQ, both answer the other's.
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    p.b.disconnect(p.now, ib, &[]).unwrap();
    p.deliver();
    assert!(matches!(p.ev_a.last(), Some(CmEvent::DreqReceived { .. })));
    assert!(matches!(p.ev_b.last(), Some(CmEvent::DreqReceived { .. })));
    p.a.send_drep(p.now, ia, &[]).unwrap();
    p.b.send_drep(p.now, ib, &[]).unwrap();
    p.deliver();
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Timewait), Some(CmState::Timewait)));
    let tail: Vec<_> = p.names().split_off(3);
    assert_eq!(tail, [('a', "DREQ"), ('b', "DREQ"), ('a', "DREP"), ('b', "DREP")]);
    while p.tick().is_some() {
        p.deliver();
    }
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Idle), Some(CmState::Idle)));
    assert_eq!(p.wire.len(), 7, "no retransmissions");
}

#[test]
fn a_lost_drep_is_answered_again_from_time_wait_and_a_silent_peer_times_out() {
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    p.deliver();
    p.b.send_drep(p.now, ib, &[]).unwrap();
    p.run(&mut |from_a, _| !from_a);
    assert_eq!(p.a.state(ia), Some(CmState::DreqSent));
    // b's time wait (512 ms) ends before a's DREQ comes again (4.6 s); b still answers it.
    while p.a.state(ia) == Some(CmState::DreqSent) {
        p.tick();
        p.deliver();
    }
    assert_eq!(p.b.state(ib), Some(CmState::Idle));
    assert_eq!(p.a.state(ia), Some(CmState::Timewait));
    assert_eq!(p.b.counters().rx_duplicates.dreq, 1);
    assert_eq!(p.ev_a.iter().filter(|e| matches!(e, CmEvent::DrepReceived { .. })).count(), 1);

    // A peer that never answers: 16 DREQs, then time wait anyway.
    let mut p = Pair::new();
    let (ia, _) = p.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    while p.a.state(ia) == Some(CmState::DreqSent) {
        p.run(&mut |from_a, _| from_a);
        p.tick();
    }
    p.deliver();
    assert_eq!(p.a.state(ia), Some(CmState::Timewait));
    assert!(p.ev_a.contains(&CmEvent::DreqError { id: ia }));
    assert_eq!(p.a.counters().tx_msgs.dreq, 16);
}

#[test]
fn a_dreq_for_a_connection_gone_still_gets_a_drep() {
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    let dreq = p.a.poll_transmit().unwrap();
    // b forgets the connection entirely (destroy sends its own DREQ; lose it).
    p.b.destroy(p.now, ib).unwrap();
    while p.b.poll_transmit().is_some() {}
    while p.b.ids_in_use() > 0 {
        p.b.handle_timeout(p.b.poll_timeout().unwrap());
    }
    assert_eq!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &dreq.mad[..]), Err(CmDrop::UnknownId));
    let drep = p.b.poll_transmit().unwrap();
    let CmMessage::Drep(d) = msg(&drep) else { panic!("{:?}", msg(&drep)) };
    assert_eq!((d.ids.local, d.ids.remote), (ib.0, ia.0));
    assert_eq!(p.a.handle_mad(p.now, MadAddr::gsi(ip(B)), &drep.mad[..]), Ok(()));
    assert_eq!(p.a.state(ia), Some(CmState::Timewait));
}

#[test]
fn destroying_an_id_tells_the_peer_as_linux_does() {
    // While the REQ is out: REJ "timeout" carrying our CA GUID.
    let mut p = Pair::new();
    let ia = p.connect();
    p.deliver();
    let ib = p.req_id();
    p.a.destroy(p.now, ia).unwrap();
    p.deliver();
    match msg(&p.wire.last().unwrap().1) {
        CmMessage::Rej(r) => {
            assert_eq!((r.reason, r.ari_len, &r.ari[..8]), (RejReason::TIMEOUT, 8, &0xaaaau64.to_be_bytes()[..]))
        }
        m => panic!("{m:?}"),
    }
    assert_eq!(p.b.state(ib), Some(CmState::Idle));
    assert_eq!(p.a.state(ia), None);

    // Established: a DREQ, sent once, and time wait before the ID is gone.
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    p.a.destroy(p.now, ia).unwrap();
    p.deliver();
    assert!(matches!(p.ev_b.last(), Some(CmEvent::DreqReceived { .. })));
    assert_eq!(p.a.state(ia), Some(CmState::Timewait));
    assert_eq!(p.a.destroy(p.now, ia), Err(CmError::UnknownId), "gone for the application");
    p.b.send_drep(p.now, ib, &[]).unwrap();
    p.deliver();
    while p.tick().is_some() {
        p.deliver();
    }
    assert_eq!(p.a.ids_in_use(), 0);
    assert!(!p.ev_a.iter().any(|e| matches!(e, CmEvent::TimewaitExit { .. })), "{:?}", p.ev_a);
}

#[test]
fn a_req_from_a_connected_qp_is_stale_and_the_connection_stands() {
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    // The same QP (0x3d) asks again through a new ID, as after a crash and restart.
    let ia2 = p.connect();
    p.deliver();
    assert!(
        matches!(p.ev_a.last(), Some(CmEvent::RejReceived { id, reason, .. }) if *id == ia2 && *reason == RejReason::STALE_CONN)
    );
    assert_eq!((p.a.state(ia), p.b.state(ib)), (Some(CmState::Established), Some(CmState::Established)));
    assert_eq!(p.b.counters().rej_stale, 1);
    assert_eq!(p.b.ids_in_use(), 1);
}

#[test]
fn listeners_and_ids_are_bounded() {
    let mut b = Cm::new(CmConfig { max_listeners: 1, max_ids: 2, backlog: 8, ..CmConfig::default() });
    b.listen(1).unwrap();
    assert_eq!(b.listen(1), Err(CmError::ServiceIdInUse));
    assert_eq!(b.listen(2), Err(CmError::ListenersExhausted));
    assert_eq!(CmError::ListenersExhausted.errno(), 12);
    let mut a = Cm::new(CmConfig::default());
    b.unlisten(1).unwrap();
    b.listen(sid()).unwrap();
    for i in 0..4u32 {
        a.connect(Instant::ZERO, &ConnectParams { local_qpn: 0x100 + i, ..params(&[]) }).unwrap();
    }
    let mut answers = Vec::new();
    while let Some(m) = a.poll_transmit() {
        answers.push(b.handle_mad(Instant::ZERO, MadAddr::gsi(ip(A)), &m.mad[..]));
    }
    assert_eq!(answers, [Ok(()), Ok(()), Err(CmDrop::NoResources), Err(CmDrop::NoResources)]);
    assert_eq!(b.ids_in_use(), 2);
    let mut reasons = Vec::new();
    while let Some(m) = b.poll_transmit() {
        if let CmMessage::Rej(r) = msg(&m) {
            reasons.push(r.reason);
        }
    }
    assert_eq!(reasons, [RejReason::NO_RESOURCES; 2]);
    let full = Cm::new(CmConfig { max_ids: 0, ..CmConfig::default() }).connect(Instant::ZERO, &params(&[]));
    assert_eq!(full, Err(CmError::IdsExhausted));
}

#[test]
fn a_req_flood_stops_at_the_backlog_and_answers_each_with_a_rej() {
    let mut b = Cm::new(CmConfig { backlog: 16, ..CmConfig::default() });
    b.listen(sid()).unwrap();
    let mut a = Cm::new(CmConfig::default());
    for i in 0..1000u32 {
        a.connect(Instant::ZERO, &ConnectParams { local_qpn: 0x1000 + i, ..params(&[]) }).unwrap();
    }
    let mut n = 0;
    while let Some(m) = a.poll_transmit() {
        let _ = b.handle_mad(Instant::ZERO, MadAddr::gsi(ip(A)), &m.mad[..]);
        n += 1;
    }
    assert_eq!(n, 1000);
    assert_eq!(b.ids_in_use(), 16);
    assert_eq!(b.counters().rej_no_resources, 984);
    let mut events = 0;
    while b.poll_event().is_some() {
        events += 1;
    }
    assert_eq!(events, 16);
}

#[test]
fn spoofed_and_stray_messages_change_nothing() {
    let mut p = Pair::new();
    let (ia, ib) = p.established();
    // A real DREQ for this connection, from a host that is not a's peer.
    let mut q = Pair::new();
    let _ = q.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    let dreq = p.a.poll_transmit().unwrap();
    let evil = MadAddr::gsi(ip("10.0.0.66"));
    assert_eq!(p.b.handle_mad(p.now, evil, &dreq.mad[..]), Err(CmDrop::Mismatch));
    // The same DREQ naming another QP of b's.
    let mut other = *dreq.mad;
    other[24 + 8..24 + 11].copy_from_slice(&[0, 0, 0x99]);
    assert_eq!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &other[..]), Err(CmDrop::Mismatch));
    // A REJ, an RTU and a REP for IDs that do not exist.
    for attr in [AttrId::REJ, AttrId::RTU, AttrId::REP, AttrId::DREP] {
        let mut m = *dreq.mad;
        m[16..18].copy_from_slice(&attr.0.to_be_bytes());
        m[24..32].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04]);
        assert_eq!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &m[..]), Err(CmDrop::UnknownId), "{attr:?}");
    }
    // Garbage, and a LAP.
    assert!(matches!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &[0u8; 100]), Err(CmDrop::Malformed(_))));
    let mut lap = *dreq.mad;
    lap[17] = 0x19;
    assert_eq!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &lap[..]), Err(CmDrop::Unsupported));
    assert_eq!(p.b.state(ib), Some(CmState::Established));
    assert_eq!(p.b.poll_transmit(), None, "none of it was answered");
    let c = p.b.counters();
    assert_eq!((c.rx_mismatch, c.rx_unknown_id, c.rx_malformed), (2, 4, 2));
    // The real DREQ still works.
    assert_eq!(p.b.handle_mad(p.now, MadAddr::gsi(ip(A)), &dreq.mad[..]), Ok(()));
}

proptest::proptest! {
    /// Any MAD bytes — mutations of the connection's own messages, from its peer or from
    /// elsewhere — never panic either side, and an established connection is only ever ended
    /// by a DREQ that names it exactly, from its peer.
    #[test]
    fn mutated_mads_never_break_an_established_connection(
        muts in proptest::collection::vec((0usize..4, 0usize..256, proptest::prelude::any::<u8>(), proptest::prelude::any::<bool>()), 1..64)
    ) {
        let mut p = Pair::new();
        let (ia, ib) = p.established();
        p.a.disconnect(p.now, ia, &[]).unwrap();
        let dreq = p.a.poll_transmit().unwrap();
        let seeds: Vec<[u8; 256]> = p.wire.iter().map(|(_, m)| *m.mad).chain([*dreq.mad]).collect();
        for (which, at, byte, spoof) in muts {
            let mut m = seeds[which];
            m[at] = byte;
            let from = if spoof { MadAddr::gsi(ip("10.9.9.9")) } else { MadAddr::gsi(ip(A)) };
            // What may end it: a DREQ from the peer with the connection's IDs and b's QPN, whatever
            // else (TID, status, private data) the mutation changed.
            let names_it = |m: &[u8; 256]| {
                let Ok(mad) = Mad::parse(&m[..], 0) else { return false };
                let want = CmMessage::parse(&Mad::parse(&dreq.mad[..], 0).unwrap(), 0).unwrap();
                match (CmMessage::parse(&mad, 0), want) {
                    (Ok(CmMessage::Dreq(d)), CmMessage::Dreq(w)) => d.ids == w.ids && d.remote_qpn == w.remote_qpn,
                    _ => false,
                }
            };
            let ends = !spoof && names_it(&m);
            let before = p.b.state(ib);
            let _ = p.b.handle_mad(p.now, from, &m[..]);
            let _ = p.a.handle_mad(p.now, MadAddr::gsi(ip(B)), &m[..]);
            if !ends && before == Some(CmState::Established) {
                proptest::prop_assert_eq!(p.b.state(ib), Some(CmState::Established));
            }
            while p.b.poll_transmit().is_some() {}
            while p.a.poll_transmit().is_some() {}
        }
    }
}

#[test]
fn sidr_resolves_a_service_to_a_ud_qp() {
    let mut p = Pair::new();
    let usid = service_id(PortSpace::Udp, 7174);
    p.b.listen(usid).unwrap();
    let ia = p.a.sidr_request(p.now, MadAddr::gsi(ip(B)), usid, 20, 3, b"hdr").unwrap();
    p.deliver();
    let ib = match &p.ev_b[..] {
        [CmEvent::SidrReqReceived { id, listen, req, .. }] => {
            assert_eq!((*listen, &req.private_data()[..3]), (usid, &b"hdr"[..]));
            *id
        }
        e => panic!("{e:?}"),
    };
    p.b.sidr_reply(ib, 0, 0x77, 0x0123_4567, &[]).unwrap();
    p.deliver();
    match &p.ev_a[..] {
        [CmEvent::SidrRepReceived { id, rep: Some(rep) }] => {
            assert_eq!(*id, ia);
            let CmMessage::SidrRep(r) = rep.message() else { panic!() };
            assert_eq!((r.status, r.qpn, r.qkey, r.service_id), (0, 0x77, 0x0123_4567, usid));
        }
        e => panic!("{e:?}"),
    }
    assert_eq!((p.a.state(ia), p.b.ids_in_use()), (Some(CmState::Idle), 0));

    // Nobody listens: status "unsupported" at once; nobody answers: `rep: None` after 4 tries.
    let ia = p.a.sidr_request(p.now, MadAddr::gsi(ip(B)), service_id(PortSpace::Udp, 1), 20, 3, &[]).unwrap();
    p.deliver();
    let rep = match p.ev_a.last() {
        Some(CmEvent::SidrRepReceived { id, rep: Some(rep) }) if *id == ia => rep.clone(),
        e => panic!("{e:?}"),
    };
    let CmMessage::SidrRep(r) = rep.message() else { panic!() };
    assert_eq!(r.status, uroce_wire::cm::sidr_status::UNSUPPORTED);
    let ia = p.a.sidr_request(p.now, MadAddr::gsi(ip(B)), usid, 20, 3, &[]).unwrap();
    loop {
        p.run(&mut |_, _| true);
        if p.tick().is_none() {
            break;
        }
    }
    p.deliver();
    assert_eq!(p.ev_a.last(), Some(&CmEvent::SidrRepReceived { id: ia, rep: None }));
    assert_eq!(p.a.counters().tx_msgs.sidr_req, 1 + 1 + 4);
}

#[test]
fn rxes_req_from_a_capture_is_answered_as_linux_would() {
    // rdma_cm.pcap frame 1: rxe (10.1.16.62) asks 10.1.16.61 for TCP port 18515.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public/rdma_cm.pcap");
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let frame = r.next_packet().unwrap().unwrap().data.into_owned();
    let p = uroce_wire::parse_frame(&frame).unwrap();
    let from = MadAddr::gsi(p.ip.src_addr());
    let mut b = Cm::new(CmConfig { ca_guid: 0x0250_56ff_fea7_129f, ..CmConfig::default() });
    b.listen(sid()).unwrap();
    b.handle_mad(Instant::ZERO, from, p.payload()).unwrap();
    let Some(CmEvent::ReqReceived { id, req, .. }) = b.poll_event() else { panic!() };
    let CmMessage::Req(r) = req.message() else { panic!() };
    assert_eq!((r.local_qpn, r.starting_psn, r.max_cm_retries), (0x3d, 0x7c_c204, 15));
    b.accept(Instant::ZERO, id, &accept()).unwrap();
    let rep = b.poll_transmit().unwrap();
    assert_eq!(rep.to, from);
    assert_eq!(tid(&rep), 0x0000_0002_6dc5_c064, "the REP carries rxe's REQ TID");
    let CmMessage::Rep(m) = msg(&rep) else { panic!() };
    assert_eq!((m.ids.remote, m.local_ca_guid), (0x64c0_c56d, 0x0250_56ff_fea7_129f));
    // rxe's REQ asks for answers within cm_convert_to_ms(20) = 4096 ms: our REP goes again
    // after 2 · 256 ms + 4096 ms, 15 times.
    assert_eq!(b.poll_timeout(), Some(Instant::ZERO + REQ_TIMEOUT));
    // The same REQ again (rxe's retry) is a duplicate, not a second connection.
    assert_eq!(b.handle_mad(Instant::ZERO, from, p.payload()), Err(CmDrop::Duplicate));
    assert_eq!(b.ids_in_use(), 1);
}

/// With a block (one process among several on an interface), every ID a CM allocates carries
/// it as its top byte, on both sides: what the kernel's steering reads in every message after
/// the REQ (`uroce_wire::cm::steer`).
#[test]
fn ids_carry_the_processes_block() {
    let mut p = Pair::new();
    p.a = Cm::new(CmConfig {
        ca_guid: 0xaaaa,
        hi_tid: 1,
        comm_id_seed: 0xaaaa,
        id_block: Some(3),
        ..CmConfig::default()
    });
    p.b = Cm::new(CmConfig {
        ca_guid: 0xbbbb,
        hi_tid: 2,
        comm_id_seed: 0xbbbb,
        id_block: Some(0xfe),
        ..CmConfig::default()
    });
    p.b.listen(sid()).unwrap();
    let (ia, ib) = p.established();
    p.a.disconnect(p.now, ia, &[]).unwrap();
    p.deliver();
    p.b.send_drep(p.now, ib, &[]).unwrap();
    p.deliver();
    assert_eq!(p.names(), [('a', "REQ"), ('b', "REP"), ('a', "RTU"), ('a', "DREQ"), ('b', "DREP")]);
    for (from_a, m) in &p.wire {
        let ids = msg(m).ids();
        let (sender, receiver) = if *from_a { (3, 0xfe) } else { (0xfe, 3) };
        assert_eq!(ids.local >> 24, sender, "{:?}", msg(m));
        if msg(m).attr_id() != uroce_wire::cm::AttrId::REQ {
            assert_eq!(ids.remote >> 24, receiver, "{:?}", msg(m));
        }
    }
    // Many IDs: all of the block, none repeated.
    let mut seen = std::collections::HashSet::new();
    let mut c = Cm::new(CmConfig { ca_guid: 1, comm_id_seed: 7, id_block: Some(9), ..CmConfig::default() });
    for _ in 0..500 {
        c.connect(p.now, &params(&[])).unwrap();
        let m = c.poll_transmit().unwrap();
        let id = msg(&m).ids().local;
        assert_eq!(id >> 24, 9);
        assert!(seen.insert(id), "{id:#x} twice");
    }
}
