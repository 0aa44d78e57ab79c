//! What the application asks of the CM (Linux `ib_send_cm_*`, `ib_cm_listen`,
//! `ib_destroy_cm_id`): each checks the ID's state, sends its message and moves the state.

use super::{cm_time, Cm, CmError, CmId, CmState, Conn, MadAddr};
use crate::time::Instant;
use crate::verbs::QpType;
use uroce_wire::cm::{
    AttrId, CmMessage, CommIds, DreqRepr, MraRepr, MsgRef, PathRepr, RejReason, RejRepr, RepRepr, ReqRepr, SidrRepRepr,
    SidrReqRepr, SimpleRepr,
};

/// What the active side puts in its REQ (Linux `struct ib_cm_req_param`).
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams<'a> {
    /// The passive side's GSI.
    pub peer: MadAddr,
    /// The service to connect to.
    pub service_id: u64,
    /// RC or UC.
    pub qp_type: QpType,
    /// Our QP.
    pub local_qpn: u32,
    /// The "starting PSN": the PSN the passive side sends from, which our QP receives from
    /// (Linux `ib_cm_req_param.starting_psn`, the active side's `rq_psn`).
    pub starting_psn: u32,
    /// READ/atomic requests we accept at once.
    pub responder_resources: u8,
    /// READ/atomic requests we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// Path MTU (`enum ibv_mtu`).
    pub path_mtu: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// The path.
    pub primary: PathRepr,
    /// How long the passive side may take (IBA time; rdma_cm: 20).
    pub remote_cm_response_timeout: u8,
    /// How long we take (IBA time; rdma_cm: 20).
    pub local_cm_response_timeout: u8,
    /// How often the REQ is resent (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Private data (at most 92 bytes).
    pub private_data: &'a [u8],
}

/// What the passive side puts in its REP (Linux `struct ib_cm_rep_param`).
#[derive(Clone, Copy, Debug)]
pub struct AcceptParams<'a> {
    /// Our QP.
    pub local_qpn: u32,
    /// The "starting PSN": the PSN the active side sends from, which our QP receives from.
    pub starting_psn: u32,
    /// READ/atomic requests we accept at once.
    pub responder_resources: u8,
    /// READ/atomic requests we issue at once.
    pub initiator_depth: u8,
    /// Target ACK delay (IBA time).
    pub target_ack_delay: u8,
    /// RNR retries the active side should use.
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data (at most 196 bytes).
    pub private_data: &'a [u8],
}

impl Cm {
    /// Listen on a service ID (exact match; Linux's masks are for IB service ranges RDMA-CM
    /// does not use).
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceIdInUse);
        }
        if self.listeners.len() >= self.cfg.max_listeners {
            return Err(CmError::ListenersExhausted);
        }
        self.listeners.insert(service_id, 0);
        Ok(())
    }

    /// Stop listening (REQs it delivered stay the application's).
    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        self.listeners.remove(&service_id).map(|_| ()).ok_or(CmError::UnknownId)
    }

    /// Send a REQ (`ib_send_cm_req`): a new ID in `ReqSent`, resent every
    /// 2·packet-lifetime + remote response timeout, `max_cm_retries` times (`cm_send_req`).
    pub fn connect(&mut self, now: Instant, p: &ConnectParams<'_>) -> Result<CmId, CmError> {
        let transport = match p.qp_type {
            QpType::Rc => 0,
            QpType::Uc => 1,
            QpType::Ud => return Err(CmError::Message(uroce_wire::Error::InvalidRepr { what: "a REQ for a UD QP" })),
        };
        let id = self.alloc_id()?;
        let tid = self.tid_of(id);
        let req = ReqRepr {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport,
            e2e_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: 0xffff,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport: 0,
            primary: p.primary,
            alternate: PathRepr::NONE,
            private_data: p.private_data,
        };
        let mad = Cm::build(&CmMessage::Req(req), tid)?;
        let life = cm_time(self.cfg.packet_life_time);
        self.insert(Conn {
            state: CmState::Idle,
            ids: CommIds { local: id, remote: 0 },
            peer: p.peer,
            remote_ca_guid: 0,
            local_qpn: p.local_qpn,
            remote_qpn: 0,
            service_id: p.service_id,
            tid,
            pending: None,
            last_answer: None,
            deadline: None,
            response_timeout: life * 2 + cm_time(p.remote_cm_response_timeout),
            max_retries: p.max_cm_retries,
            timewait: cm_time(self.cfg.packet_life_time + 1),
            listen: None,
            destroyed: false,
        });
        self.enter(id, CmState::ReqSent);
        self.send_request(now, id, mad, AttrId::REQ);
        Ok(CmId(id))
    }

    fn conn(&self, id: CmId, allowed: &[CmState]) -> Result<&Conn, CmError> {
        let c = self.conns.get(&id.0).filter(|c| !c.destroyed).ok_or(CmError::UnknownId)?;
        if allowed.contains(&c.state) {
            Ok(c)
        } else {
            Err(CmError::InvalidState(c.state))
        }
    }

    /// Answer a REQ with a REP (`ib_send_cm_rep`): `RepSent`, resent until the RTU comes.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &AcceptParams<'_>) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::ReqRcvd, CmState::MraReqSent])?;
        let rep = RepRepr {
            ids: c.ids,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            e2e_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.ca_guid,
            private_data: p.private_data,
        };
        let mad = Cm::build(&CmMessage::Rep(rep), c.tid)?;
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.local_qpn = p.local_qpn;
            c.last_answer = None;
        }
        self.enter(id.0, CmState::RepSent);
        self.send_request(now, id.0, mad, AttrId::REP);
        Ok(())
    }

    /// Refuse a REQ (passive) or a REP (active) (`ib_send_cm_rej`): the ID is `Idle`.
    pub fn reject(&mut self, id: CmId, reason: RejReason, ari: &[u8], private_data: &[u8]) -> Result<(), CmError> {
        use CmState::*;
        let c = self.conn(id, &[ReqRcvd, MraReqSent, RepRcvd, MraRepSent])?;
        let message = if matches!(c.state, ReqRcvd | MraReqSent) { MsgRef::Req } else { MsgRef::Rep };
        let rej = RejRepr { ids: c.ids, message, ari_len: ari.len().min(72) as u8, reason, ari, private_data };
        let (peer, mad) = (c.peer, Cm::build(&CmMessage::Rej(rej), c.tid)?);
        self.send(peer, mad, AttrId::REJ, false);
        self.reset_to_idle(id.0);
        Ok(())
    }

    /// Ask for more time (`ib_send_cm_mra`): for a REQ (`MraReqSent`) or a REP (`MraRepSent`).
    pub fn send_mra(&mut self, id: CmId, service_timeout: u8, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::ReqRcvd, CmState::RepRcvd])?;
        let (message, next) = if c.state == CmState::ReqRcvd {
            (MsgRef::Req, CmState::MraReqSent)
        } else {
            (MsgRef::Rep, CmState::MraRepSent)
        };
        let mra = MraRepr { ids: c.ids, message, service_timeout, private_data };
        let (peer, mad) = (c.peer, Cm::build(&CmMessage::Mra(mra), c.tid)?);
        self.send(peer, mad.clone(), AttrId::MRA, false);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.last_answer = Some(mad);
        }
        self.enter(id.0, next);
        Ok(())
    }

    /// Confirm a REP (`ib_send_cm_rtu`): established. The RTU is kept: a repeated REP (ours
    /// was lost) gets it again.
    pub fn send_rtu(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::RepRcvd, CmState::MraRepSent])?;
        let rtu = SimpleRepr { ids: c.ids, private_data };
        let (peer, mad) = (c.peer, Cm::build(&CmMessage::Rtu(rtu), c.tid)?);
        self.send(peer, mad.clone(), AttrId::RTU, false);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.last_answer = Some(mad);
        }
        self.enter(id.0, CmState::Established);
        Ok(())
    }

    /// The passive side's QP received its first packet before the RTU (IBV_EVENT_COMM_EST,
    /// `ib_cm_notify`): established.
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        self.conn(id, &[CmState::RepSent, CmState::MraRepRcvd])?;
        self.arm(id.0, None);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.pending = None;
        }
        self.enter(id.0, CmState::Established);
        Ok(())
    }

    /// Disconnect (`ib_send_cm_dreq`): `DreqSent`, resent until the DREP comes; then time wait.
    pub fn disconnect(&mut self, now: Instant, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::Established])?;
        let dreq = DreqRepr { ids: c.ids, remote_qpn: c.remote_qpn, private_data };
        // A DREQ opens an exchange of our own: our TID, also on the passive side (Linux
        // `cm_form_tid`; rdma_cm.pcap frame 92).
        let mad = Cm::build(&CmMessage::Dreq(dreq), self.tid_of(id.0))?;
        self.enter(id.0, CmState::DreqSent);
        self.send_request(now, id.0, mad, AttrId::DREQ);
        Ok(())
    }

    /// Answer a DREQ (`ib_send_cm_drep`): time wait.
    pub fn send_drep(&mut self, now: Instant, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::DreqRcvd])?;
        let (peer, tid) = (c.peer, c.tid);
        let drep = SimpleRepr { ids: c.ids, private_data };
        let mad = Cm::build(&CmMessage::Drep(drep), tid)?;
        self.send(peer, mad.clone(), AttrId::DREP, false);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.last_answer = Some(mad);
        }
        self.enter_timewait(now, id.0);
        Ok(())
    }

    /// Release an ID (`ib_destroy_cm_id`), telling the peer as Linux does: a REJ while
    /// establishing (timeout, with our CA GUID, for our own REQ; consumer-defined otherwise), a
    /// DREQ when established (sent once: no answer is awaited), a DREP for a DREQ we hold. An
    /// ID in or entering time wait stays until time wait ends, to answer its stragglers.
    pub fn destroy(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        use CmState::*;
        let c = self.conns.get(&id.0).filter(|c| !c.destroyed).ok_or(CmError::UnknownId)?;
        let (state, ids, peer, tid) = (c.state, c.ids, c.peer, c.tid);
        let rej = |reason, ari: &[u8], message| -> Result<_, CmError> {
            let r = RejRepr { ids, message, ari_len: ari.len() as u8, reason, ari, private_data: &[] };
            Cm::build(&CmMessage::Rej(r), tid)
        };
        match state {
            ReqSent | MraReqRcvd => {
                let guid = self.cfg.ca_guid.to_be_bytes();
                let mad = rej(RejReason::TIMEOUT, &guid, MsgRef::Req)?;
                self.send(peer, mad, AttrId::REJ, false);
            }
            ReqRcvd | MraReqSent => {
                let mad = rej(RejReason::CONSUMER_DEFINED, &[], MsgRef::Req)?;
                self.send(peer, mad, AttrId::REJ, false);
            }
            RepSent | MraRepRcvd | RepRcvd | MraRepSent => {
                let mad = rej(RejReason::CONSUMER_DEFINED, &[], MsgRef::Rep)?;
                self.send(peer, mad, AttrId::REJ, false);
            }
            Established => {
                let c = &self.conns[&id.0];
                let dreq = DreqRepr { ids, remote_qpn: c.remote_qpn, private_data: &[] };
                let mad = Cm::build(&CmMessage::Dreq(dreq), self.tid_of(id.0))?;
                self.send(peer, mad, AttrId::DREQ, false);
                self.enter(id.0, DreqSent);
                self.enter_timewait(now, id.0);
            }
            DreqRcvd => {
                self.send_drep(now, id, &[])?;
            }
            DreqSent | Timewait => {
                if state == DreqSent {
                    self.enter_timewait(now, id.0);
                }
            }
            Idle | SidrReqSent | SidrReqRcvd => {}
        }
        let timewait = self.conns.get(&id.0).is_some_and(|c| c.state == Timewait);
        if timewait {
            if let Some(c) = self.conns.get_mut(&id.0) {
                c.destroyed = true;
            }
        } else {
            self.remove(id.0);
        }
        Ok(())
    }

    /// Resolve a service ID to a UD QP (`ib_send_cm_sidr_req`): `SidrReqSent` until the
    /// SIDR_REP comes, resent like a REQ.
    pub fn sidr_request(
        &mut self,
        now: Instant,
        peer: MadAddr,
        service_id: u64,
        timeout: u8,
        max_retries: u8,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let id = self.alloc_id()?;
        let tid = self.tid_of(id);
        let req = SidrReqRepr { request_id: id, pkey: 0xffff, service_id, private_data };
        let mad = Cm::build(&CmMessage::SidrReq(req), tid)?;
        let life = cm_time(self.cfg.packet_life_time);
        self.insert(Conn {
            state: CmState::Idle,
            ids: CommIds { local: id, remote: 0 },
            peer,
            remote_ca_guid: 0,
            local_qpn: 0,
            remote_qpn: 0,
            service_id,
            tid,
            pending: None,
            last_answer: None,
            deadline: None,
            response_timeout: life * 2 + cm_time(timeout),
            max_retries,
            timewait: cm_time(self.cfg.packet_life_time + 1),
            listen: None,
            destroyed: false,
        });
        self.enter(id, CmState::SidrReqSent);
        self.send_request(now, id, mad, AttrId::SIDR_REQ);
        Ok(CmId(id))
    }

    /// Answer a SIDR_REQ (`ib_send_cm_sidr_rep`); the ID is released.
    pub fn sidr_reply(
        &mut self,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id, &[CmState::SidrReqRcvd])?;
        let rep = SidrRepRepr {
            request_id: c.ids.remote,
            status,
            add_info_len: 0,
            qpn,
            service_id: c.service_id,
            qkey,
            additional_info: &[],
            private_data,
        };
        let (peer, mad) = (c.peer, Cm::build(&CmMessage::SidrRep(rep), c.tid)?);
        self.send(peer, mad, AttrId::SIDR_REP, false);
        self.enter(id.0, CmState::Idle);
        self.remove(id.0);
        Ok(())
    }

    /// Stop everything an ID waits for and make it `Idle` (it stays until destroyed).
    pub(super) fn reset_to_idle(&mut self, id: u32) {
        self.arm(id, None);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
        }
        self.enter(id, CmState::Idle);
    }

    /// Enter time wait (`cm_enter_timewait`): only the time-wait deadline runs.
    pub(super) fn enter_timewait(&mut self, now: Instant, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        c.pending = None;
        let at = now + c.timewait;
        self.enter(id, CmState::Timewait);
        self.arm(id, Some(at));
    }

    /// Forget an ID (and its index entries, where they are still its own).
    pub(super) fn remove(&mut self, id: u32) {
        self.arm(id, None);
        if let Some(c) = self.conns.remove(&id) {
            if let Some(n) = c.listen.and_then(|l| self.listeners.get_mut(&l)) {
                *n = n.saturating_sub(1);
            }
            for (map, key) in [(&mut self.by_remote, c.ids.remote), (&mut self.by_qp, c.remote_qpn)] {
                if map.get(&(c.peer.gid, key)) == Some(&id) {
                    map.remove(&(c.peer.gid, key));
                }
            }
        }
    }
}
