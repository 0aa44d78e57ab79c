//! Received MADs: parsed, matched to their communication ID (and checked to come from its peer),
//! checked against its state, and acted on. Every message that has no effect is a [`CmDrop`]
//! and a counter; none can change a connection it does not name exactly.

use super::{cm_time, Cm, CmDrop, CmEvent, CmId, CmState, CommIds, Conn, MadAddr, Received};
use crate::time::Instant;
use uroce_wire::cm::{
    sidr_status, AttrId, CmMessage, DreqRepr, MraRepr, MsgRef, RejReason, RejRepr, RepRepr, ReqRepr, SidrRepRepr,
    SidrReqRepr, SimpleRepr,
};
use uroce_wire::mad::{Mad, MAD_LEN};

impl Cm {
    /// Feed one MAD received on QP1 (`from`: the GRH's source GID and the DETH's source QP).
    pub fn handle_mad(&mut self, now: Instant, from: MadAddr, bytes: &[u8]) -> Result<(), CmDrop> {
        let r = self.dispatch(now, from, bytes);
        if let Err(d) = r {
            let c = &mut self.counters;
            match d {
                CmDrop::Malformed(_) | CmDrop::Unsupported => c.rx_malformed += 1,
                CmDrop::UnknownId => c.rx_unknown_id += 1,
                CmDrop::Mismatch => c.rx_mismatch += 1,
                CmDrop::OutOfState(_) => c.rx_out_of_state += 1,
                CmDrop::Stale => c.rej_stale += 1,
                CmDrop::NoListener => c.rej_no_listener += 1,
                CmDrop::NoResources => c.rej_no_resources += 1,
                CmDrop::Duplicate => {}
            }
            tracing::debug!(?d, "cm: MAD dropped");
        }
        r
    }

    fn dispatch(&mut self, now: Instant, from: MadAddr, bytes: &[u8]) -> Result<(), CmDrop> {
        let mad = Mad::parse(bytes, 0).map_err(CmDrop::Malformed)?;
        let msg = match CmMessage::parse(&mad, 0) {
            Ok(m) => m,
            Err(uroce_wire::Error::Unsupported { .. }) => return Err(CmDrop::Unsupported),
            Err(e) => return Err(CmDrop::Malformed(e)),
        };
        let Ok(whole) = <&[u8; MAD_LEN]>::try_from(bytes) else {
            return Err(CmDrop::Malformed(uroce_wire::Error::InvalidRepr { what: "MAD length" }));
        };
        self.counters.rx_msgs.bump(msg.attr_id());
        let tid = mad.header.tid;
        match msg {
            CmMessage::Req(r) => self.on_req(from, tid, &r, whole),
            CmMessage::Mra(m) => self.on_mra(now, from, &m),
            CmMessage::Rej(m) => self.on_rej(from, &m, whole),
            CmMessage::Rep(m) => self.on_rep(from, &m, whole),
            CmMessage::Rtu(m) => self.on_rtu(from, &m),
            CmMessage::Dreq(m) => self.on_dreq(from, tid, &m, whole),
            CmMessage::Drep(m) => self.on_drep(now, from, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(from, tid, &m, whole),
            CmMessage::SidrRep(m) => self.on_sidr_rep(from, &m, whole),
        }
    }

    /// The ID a message names as ours (`ours`), when it comes from that ID's peer and, once the
    /// peer's ID is known, names it (`theirs`).
    fn named(&self, from: MadAddr, ours: u32, theirs: Option<u32>) -> Result<(u32, CmState), CmDrop> {
        let c = self.conns.get(&ours).ok_or(CmDrop::UnknownId)?;
        if c.peer.gid != from.gid {
            return Err(CmDrop::Mismatch);
        }
        if let Some(t) = theirs {
            if c.ids.remote != 0 && c.ids.remote != t {
                return Err(CmDrop::Mismatch);
            }
        }
        Ok((ours, c.state))
    }

    fn duplicate(&mut self, a: AttrId) -> Result<(), CmDrop> {
        self.counters.rx_duplicates.bump(a);
        Err(CmDrop::Duplicate)
    }

    /// Send the answer kept for a repeated request (MRA, RTU), if any.
    fn repeat_answer(&mut self, id: u32, attr: AttrId) {
        if let Some(c) = self.conns.get(&id) {
            if let Some(m) = c.last_answer.clone() {
                let to = c.peer;
                self.send(to, m, attr, true);
            }
        }
    }

    /// A REJ for a REQ that gets no connection (`cm_issue_rej`): it names the REQ's ID only.
    fn refuse_req(
        &mut self,
        from: MadAddr,
        tid: u64,
        theirs: u32,
        reason: RejReason,
        why: CmDrop,
    ) -> Result<(), CmDrop> {
        let rej = RejRepr {
            ids: CommIds { local: 0, remote: theirs },
            message: MsgRef::Req,
            ari_len: 0,
            reason,
            ari: &[],
            private_data: &[],
        };
        if let Ok(mad) = Cm::build(&CmMessage::Rej(rej), tid) {
            self.send(from, mad, AttrId::REJ, false);
        }
        Err(why)
    }

    fn on_req(&mut self, from: MadAddr, tid: u64, r: &ReqRepr<'_>, whole: &[u8; MAD_LEN]) -> Result<(), CmDrop> {
        // A repeat of a REQ we hold (`cm_dup_req_handler`).
        let held = self.by_remote.get(&(from.gid, r.local_comm_id)).and_then(|&id| Some((id, self.conns.get(&id)?)));
        if let Some((id, c)) = held {
            if c.remote_ca_guid == r.local_ca_guid {
                match c.state {
                    CmState::MraReqSent => self.repeat_answer(id, AttrId::MRA),
                    CmState::Timewait => {
                        let ours = c.ids.local;
                        let rej = RejRepr {
                            ids: CommIds { local: ours, remote: r.local_comm_id },
                            message: MsgRef::Req,
                            ari_len: 0,
                            reason: RejReason::STALE_CONN,
                            ari: &[],
                            private_data: &[],
                        };
                        if let Ok(mad) = Cm::build(&CmMessage::Rej(rej), tid) {
                            self.send(from, mad, AttrId::REJ, false);
                        }
                    }
                    _ => {}
                }
                return self.duplicate(AttrId::REQ);
            }
        }
        // A REQ from a QP that holds a connection here already (IBTA §12.4.1, C12-22; Linux
        // `cm_insert_remote_qpn`): stale.
        if let Some(&id) = self.by_qp.get(&(from.gid, r.local_qpn)) {
            if self.conns.get(&id).is_some_and(|c| c.state.holds_qp() && c.remote_ca_guid == r.local_ca_guid) {
                return self.refuse_req(from, tid, r.local_comm_id, RejReason::STALE_CONN, CmDrop::Stale);
            }
        }
        let Some(&held) = self.listeners.get(&r.service_id) else {
            return self.refuse_req(from, tid, r.local_comm_id, RejReason::INVALID_SERVICE_ID, CmDrop::NoListener);
        };
        if held >= self.cfg.backlog {
            return self.refuse_req(from, tid, r.local_comm_id, RejReason::NO_RESOURCES, CmDrop::NoResources);
        }
        let Ok(id) = self.alloc_id() else {
            return self.refuse_req(from, tid, r.local_comm_id, RejReason::NO_RESOURCES, CmDrop::NoResources);
        };
        let life = cm_time(self.cfg.packet_life_time);
        self.insert(Conn {
            state: CmState::Idle,
            ids: CommIds { local: id, remote: r.local_comm_id },
            peer: from,
            remote_ca_guid: r.local_ca_guid,
            local_qpn: 0,
            remote_qpn: r.local_qpn,
            service_id: r.service_id,
            tid,
            pending: None,
            last_answer: None,
            deadline: None,
            response_timeout: life * 2 + cm_time(r.local_cm_response_timeout),
            max_retries: r.max_cm_retries,
            timewait: cm_time(self.cfg.packet_life_time + 1),
            listen: Some(r.service_id),
            destroyed: false,
        });
        if let Some(n) = self.listeners.get_mut(&r.service_id) {
            *n += 1;
        }
        self.enter(id, CmState::ReqRcvd);
        self.events.push_back(CmEvent::ReqReceived {
            id: CmId(id),
            listen: r.service_id,
            peer: from,
            req: Received::new(whole),
        });
        Ok(())
    }

    fn on_mra(&mut self, now: Instant, from: MadAddr, m: &MraRepr<'_>) -> Result<(), CmDrop> {
        let (id, state) = self.named(from, m.ids.remote, Some(m.ids.local))?;
        let next = match (m.message, state) {
            (MsgRef::Req, CmState::ReqSent) => CmState::MraReqRcvd,
            (MsgRef::Rep, CmState::RepSent) => CmState::MraRepRcvd,
            (MsgRef::Req, CmState::MraReqRcvd) | (MsgRef::Rep, CmState::MraRepRcvd) => {
                return self.duplicate(AttrId::MRA)
            }
            _ => return Err(CmDrop::OutOfState(state)),
        };
        // Wait the time the peer asked for, plus the packet lifetime (`cm_mra_handler`).
        let wait = cm_time(m.service_timeout) + cm_time(self.cfg.packet_life_time);
        if let Some(c) = self.conns.get_mut(&id) {
            if let Some(p) = c.pending.as_mut() {
                p.timeout = wait;
            }
            if m.message == MsgRef::Req {
                c.ids.remote = m.ids.local;
            }
        }
        self.enter(id, next);
        self.arm(id, Some(now + wait));
        self.events.push_back(CmEvent::MraReceived { id: CmId(id), service_timeout: m.service_timeout });
        Ok(())
    }

    fn on_rej(&mut self, from: MadAddr, m: &RejRepr<'_>, whole: &[u8; MAD_LEN]) -> Result<(), CmDrop> {
        // An active side that gives up on its REQ does not know our ID: it names its own, and
        // its CA GUID in the ARI (`cm_acquire_rejected_id`).
        let ours = if m.reason == RejReason::TIMEOUT && m.ids.remote == 0 {
            let id = *self.by_remote.get(&(from.gid, m.ids.local)).ok_or(CmDrop::UnknownId)?;
            let guid = m.ari.first_chunk::<8>().map(|g| u64::from_be_bytes(*g));
            if m.ari_len < 8 || guid != self.conns.get(&id).map(|c| c.remote_ca_guid) {
                return Err(CmDrop::Mismatch);
            }
            id
        } else {
            m.ids.remote
        };
        let (id, state) = self.named(from, ours, Some(m.ids.local).filter(|&l| l != 0))?;
        if !state.is_establishing() {
            return Err(CmDrop::OutOfState(state));
        }
        self.reset_to_idle(id);
        self.events.push_back(CmEvent::RejReceived { id: CmId(id), reason: m.reason, rej: Received::new(whole) });
        Ok(())
    }

    fn on_rep(&mut self, from: MadAddr, m: &RepRepr<'_>, whole: &[u8; MAD_LEN]) -> Result<(), CmDrop> {
        let (id, state) = self.named(from, m.ids.remote, Some(m.ids.local))?;
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            // Our RTU (or MRA) was lost: say it again (`cm_dup_rep_handler`).
            CmState::Established => {
                self.repeat_answer(id, AttrId::RTU);
                return self.duplicate(AttrId::REP);
            }
            CmState::MraRepSent => {
                self.repeat_answer(id, AttrId::MRA);
                return self.duplicate(AttrId::REP);
            }
            CmState::RepRcvd => return self.duplicate(AttrId::REP),
            s => return Err(CmDrop::OutOfState(s)),
        }
        self.arm(id, None);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
            c.ids.remote = m.ids.local;
            c.remote_qpn = m.local_qpn;
            c.remote_ca_guid = m.local_ca_guid;
        }
        self.index(id);
        self.enter(id, CmState::RepRcvd);
        self.events.push_back(CmEvent::RepReceived { id: CmId(id), rep: Received::new(whole) });
        Ok(())
    }

    fn on_rtu(&mut self, from: MadAddr, m: &SimpleRepr<'_>) -> Result<(), CmDrop> {
        let (id, state) = self.named(from, m.ids.remote, Some(m.ids.local))?;
        match state {
            CmState::RepSent | CmState::MraRepRcvd => {}
            CmState::Established => return self.duplicate(AttrId::RTU),
            s => return Err(CmDrop::OutOfState(s)),
        }
        self.arm(id, None);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
        }
        self.enter(id, CmState::Established);
        self.events.push_back(CmEvent::RtuReceived { id: CmId(id) });
        Ok(())
    }

    fn on_dreq(&mut self, from: MadAddr, tid: u64, m: &DreqRepr<'_>, whole: &[u8; MAD_LEN]) -> Result<(), CmDrop> {
        let drep = |ids: CommIds| Cm::build(&CmMessage::Drep(SimpleRepr { ids, private_data: &[] }), tid).ok();
        let named = self.named(from, m.ids.remote, Some(m.ids.local));
        let (id, state) = match named {
            Ok(x) => x,
            Err(CmDrop::UnknownId) => {
                // Gone already (our time wait is over): a DREP lets the peer finish
                // (`cm_issue_drep`).
                if let Some(mad) = drep(CommIds { local: m.ids.remote, remote: m.ids.local }) {
                    self.send(from, mad, AttrId::DREP, false);
                }
                return Err(CmDrop::UnknownId);
            }
            Err(e) => return Err(e),
        };
        // It must name our QP too, so that a DREQ meant for an older connection through the same
        // IDs cannot close this one (`cm_dreq_handler`).
        let ids = match self.conns.get(&id) {
            Some(c) if c.local_qpn == m.remote_qpn && c.ids.remote == m.ids.local => c.ids,
            _ => return Err(CmDrop::Mismatch),
        };
        match state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd | CmState::DreqSent => {}
            // Time wait, or over (the ID not yet destroyed): the peer's DREP was lost.
            CmState::Timewait | CmState::Idle => {
                if let Some(mad) = drep(ids) {
                    self.send(from, mad, AttrId::DREP, true);
                }
                return self.duplicate(AttrId::DREQ);
            }
            CmState::DreqRcvd => return self.duplicate(AttrId::DREQ),
            s => return Err(CmDrop::OutOfState(s)),
        }
        self.arm(id, None);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
            c.tid = tid;
        }
        self.enter(id, CmState::DreqRcvd);
        self.events.push_back(CmEvent::DreqReceived { id: CmId(id), dreq: Received::new(whole) });
        Ok(())
    }

    fn on_drep(&mut self, now: Instant, from: MadAddr, m: &SimpleRepr<'_>) -> Result<(), CmDrop> {
        let (id, state) = self.named(from, m.ids.remote, Some(m.ids.local))?;
        match state {
            CmState::DreqSent | CmState::DreqRcvd => {}
            CmState::Timewait => return self.duplicate(AttrId::DREP),
            s => return Err(CmDrop::OutOfState(s)),
        }
        self.enter_timewait(now, id);
        self.events.push_back(CmEvent::DrepReceived { id: CmId(id) });
        Ok(())
    }

    fn on_sidr_req(
        &mut self,
        from: MadAddr,
        tid: u64,
        m: &SidrReqRepr<'_>,
        whole: &[u8; MAD_LEN],
    ) -> Result<(), CmDrop> {
        if self.by_remote.contains_key(&(from.gid, m.request_id)) {
            return self.duplicate(AttrId::SIDR_REQ);
        }
        let refuse = |cm: &mut Cm, status: u8, why: CmDrop| {
            let rep = SidrRepRepr {
                request_id: m.request_id,
                status,
                add_info_len: 0,
                qpn: 0,
                service_id: m.service_id,
                qkey: 0,
                additional_info: &[],
                private_data: &[],
            };
            if let Ok(mad) = Cm::build(&CmMessage::SidrRep(rep), tid) {
                cm.send(from, mad, AttrId::SIDR_REP, false);
            }
            Err(why)
        };
        let Some(&held) = self.listeners.get(&m.service_id) else {
            return refuse(self, sidr_status::UNSUPPORTED, CmDrop::NoListener);
        };
        if held >= self.cfg.backlog {
            return refuse(self, sidr_status::REJECT, CmDrop::NoResources);
        }
        let Ok(id) = self.alloc_id() else {
            return refuse(self, sidr_status::REJECT, CmDrop::NoResources);
        };
        self.insert(Conn {
            state: CmState::Idle,
            ids: CommIds { local: id, remote: m.request_id },
            peer: from,
            remote_ca_guid: 0,
            local_qpn: 0,
            remote_qpn: 0,
            service_id: m.service_id,
            tid,
            pending: None,
            last_answer: None,
            deadline: None,
            response_timeout: Default::default(),
            max_retries: 0,
            timewait: Default::default(),
            listen: Some(m.service_id),
            destroyed: false,
        });
        if let Some(n) = self.listeners.get_mut(&m.service_id) {
            *n += 1;
        }
        self.enter(id, CmState::SidrReqRcvd);
        self.events.push_back(CmEvent::SidrReqReceived {
            id: CmId(id),
            listen: m.service_id,
            peer: from,
            req: Received::new(whole),
        });
        Ok(())
    }

    fn on_sidr_rep(&mut self, from: MadAddr, m: &SidrRepRepr<'_>, whole: &[u8; MAD_LEN]) -> Result<(), CmDrop> {
        let (id, state) = self.named(from, m.request_id, None)?;
        if state != CmState::SidrReqSent {
            return Err(CmDrop::OutOfState(state));
        }
        self.reset_to_idle(id);
        self.events.push_back(CmEvent::SidrRepReceived { id: CmId(id), rep: Some(Received::new(whole)) });
        Ok(())
    }
}
