//! Connections: the REQ built from an ID's route, the QP brought up from the REQ and REP as
//! librdmacm brings it up (`ucma_modify_qp_rtr`/`_rts` with the kernel's
//! `ib_cm_init_qp_attr` values), and the CM's events as RDMA-CM's.

use super::*;
use crate::cm::{AcceptParams, CmEvent, ConnectParams, Received};
use crate::connect::{self, RcLocal, RcRemote};
use crate::formulas::rdma_cm_flow_label;
use crate::verbs::{AccessFlags, Gid, QpAttr, QpAttrMask, QpState, QpType};
use uroce_wire::cm::ip::{service_id, IpCmHeader, CMA_VERSION, HEADER_LEN as IP_HDR, UDP_QKEY};
use uroce_wire::cm::{CmMessage, RejReason};

/// `RDMA_MAX_INIT_DEPTH` / `RDMA_MAX_RESP_RES`: "as many as the device allows".
pub const MAX_RD_ATOMIC: u8 = 0xff;

/// Linux `cm_ack_timeout`: the local ACK timeout of a path from the CA's ACK delay and the
/// packet lifetime (`drivers/infiniband/core/cm.c`).
pub const fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = packet_life_time as u32 + 1;
    let d = ca_ack_delay as u32;
    if t >= d {
        t += (d + 1 >= t) as u32;
    } else {
        t = d + (t + 1 >= d) as u32;
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// The access a connected QP gets at INIT (`cma_ib_init_qp_attr`... rdma_cm gives local write
/// and remote read and write).
const QP_ACCESS: AccessFlags =
    AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);

fn v4_mapped(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

impl RdmaCm {
    /// `rdma_create_qp`'s part here: the ID uses QP `qpn` (created by the caller) and moves it
    /// from now on. A connected QP goes to INIT (librdmacm `ucma_init_conn_qp`); a UD QP
    /// straight to RTS with the port space's Q_Key and send PSN 0 (`ucma_init_ud_qp`).
    pub fn set_qp(&mut self, dev: &mut Device, id: IdHandle, qpn: u32) -> Result<(), RdmaCmError> {
        let ps = self.id_mut(id)?.ps;
        let ty = dev.qp(qpn).map(|q| q.qp_type).ok_or(RdmaCmError::Verbs(VerbsError::NoSuchObject("QP")))?;
        if is_ud(ps) {
            if ty != QpType::Ud {
                return Err(RdmaCmError::Invalid("the UDP port space takes UD QPs"));
            }
            connect::ud_ready(dev, qpn, UDP_QKEY, 0).map_err(RdmaCmError::Verbs)?;
        } else {
            if ty != QpType::Rc && ty != QpType::Uc {
                return Err(RdmaCmError::Invalid("only RC and UC QPs connect through the CM"));
            }
            let (attr, mask) = self.init_qp_attr(id, QpState::Init)?;
            dev.modify_qp(qpn, &attr, mask).map_err(RdmaCmError::Verbs)?;
        }
        self.id_mut(id)?.qpn = Some(qpn);
        Ok(())
    }

    /// `rdma_init_qp_attr`: the attributes and mask that take the ID's QP to `state` (INIT,
    /// RTR or RTS) on this connection, as the kernel's `rdma_init_qp_attr` gives them
    /// (`cma_ib_init_qp_attr` for INIT, `ib_cm_init_qp_attr` after it) — for a program that
    /// moves its own QP (no `rdma_create_qp`), and what [`RdmaCm::set_qp`] and the QPs this
    /// layer brings up use. RTR and RTS need the peer's QP: after the REQ (passive side) or
    /// the REP (active side).
    pub fn init_qp_attr(&self, id: IdHandle, state: QpState) -> Result<(QpAttr, QpAttrMask), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let link = i.link.filter(|l| l.peer_qpn != 0);
        match (state, link) {
            (QpState::Init, _) if is_ud(i.ps) => Ok((
                QpAttr { qp_state: QpState::Init, port_num: 1, pkey_index: 0, qkey: UDP_QKEY, ..Default::default() },
                connect::UD_INIT_MASK,
            )),
            (QpState::Init, _) => Ok((connect::init_attr(QP_ACCESS), connect::INIT_MASK)),
            (QpState::Rtr, Some(l)) => {
                let (local, remote) = self.qp_params(&l);
                Ok((connect::rtr_attr(&local, &remote), connect::RTR_MASK))
            }
            (QpState::Rts, Some(l)) => Ok((connect::rts_attr(&self.qp_params(&l).0), connect::RTS_MASK)),
            (QpState::Rtr | QpState::Rts, None) => {
                Err(RdmaCmError::InvalidState("rdma_init_qp_attr: RTR and RTS need the peer's REQ or REP"))
            }
            _ => Err(RdmaCmError::Invalid("rdma_init_qp_attr: INIT, RTR or RTS")),
        }
    }

    fn new_psn(&mut self) -> u32 {
        loop {
            let p = self.random() & 0x00ff_ffff;
            if self.used_psns.insert(p) || self.used_psns.len() > 4096 {
                if self.used_psns.len() > 4096 {
                    self.used_psns.clear();
                }
                return p;
            }
        }
    }

    /// `rdma_connect`: the REQ goes out; `Established` (or `Rejected`, `Unreachable`) follows.
    pub fn connect(
        &mut self,
        now: Instant,
        dev: &mut Device,
        id: IdHandle,
        p: &ConnParam<'_>,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        if is_ud(i.ps) {
            return self.connect_ud(now, id, p);
        }
        let (IdState::RouteResolved, Some(route), Some(src), Some(dst)) = (i.state, i.route, i.src, i.dst) else {
            return Err(RdmaCmError::InvalidState("rdma_connect needs a resolved route"));
        };
        let ps = i.ps;
        let (qpn, managed) = match i.qpn {
            Some(q) => (q, true),
            None if p.qp_num != 0 => (p.qp_num, false),
            None => {
                return Err(RdmaCmError::InvalidState("rdma_connect needs a QP (rdma_create_qp, or conn_param.qp_num)"))
            }
        };
        if p.private_data.len() > uroce_wire::cm::private_len::REQ - IP_HDR {
            return Err(RdmaCmError::Invalid("REQ private data longer than 56 bytes"));
        }
        let mut private = [0u8; uroce_wire::cm::private_len::REQ];
        IpCmHeader { version: CMA_VERSION, src_port: src.port(), src: route.src, dst: route.dst }
            .emit(&mut private)
            .map_err(|_| RdmaCmError::Invalid("addresses of two families"))?;
        private[IP_HDR..IP_HDR + p.private_data.len()].copy_from_slice(p.private_data);
        let life = self.cfg.cm.packet_life_time;
        let path = PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: v4_mapped(route.src),
            remote_gid: v4_mapped(route.dst),
            flow_label: rdma_cm_flow_label(src.port(), dst.port()),
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: HOP_LIMIT,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: cm_ack_timeout(self.cfg.ca_ack_delay, life),
        };
        let psn = self.new_psn();
        let qp_type = dev.qp(qpn).map(|q| q.qp_type).unwrap_or(QpType::Rc);
        // MAX_RD_ATOMIC: the device's most (librdmacm `rdma_connect`).
        let max = self.cfg.max_rd_atomic;
        let cap = |v: u8| if v == MAX_RD_ATOMIC { max } else { v };
        let (responder_resources, initiator_depth) = (cap(p.responder_resources), cap(p.initiator_depth));
        let peer = MadAddr { gid: route.dst, qpn: 1, pkey_index: 0, sgid_index: route.sgid_index };
        let cp = ConnectParams {
            peer,
            service_id: service_id(ps, dst.port()),
            qp_type,
            local_qpn: qpn,
            starting_psn: psn,
            responder_resources,
            initiator_depth,
            retry_count: p.retry_count & 7,
            rnr_retry_count: p.rnr_retry_count & 7,
            path_mtu: route.mtu as u8,
            srq: p.srq,
            primary: path,
            remote_cm_response_timeout: self.cfg.cm_response_timeout,
            local_cm_response_timeout: self.cfg.cm_response_timeout,
            max_cm_retries: self.cfg.max_cm_retries,
            private_data: &private,
        };
        let cm = self.cm.connect(now, &cp).map_err(RdmaCmError::Cm)?;
        self.by_cm.insert(cm, id.0);
        let ack_timeout = self.ids.get(&id.0).and_then(|i| i.ack_timeout);
        let link = Link {
            cm,
            peer,
            path,
            qpn,
            psn,
            peer_qpn: 0,
            peer_psn: 0,
            mtu: route.mtu,
            dmac: route.dmac,
            sgid_index: route.sgid_index,
            responder_resources,
            initiator_depth,
            retry_count: p.retry_count & 7,
            rnr_retry_count: p.rnr_retry_count & 7,
            disconnected: false,
            managed,
            ack_timeout,
        };
        let i = self.id_mut(id)?;
        i.link = Some(link);
        i.state = IdState::Connect;
        Ok(())
    }

    /// RTR then RTS from what both sides agreed (`ib_cm_init_qp_attr`): the peer's QP, the
    /// path, our resources, minimum RNR timer 0, the path's ACK timeout; we receive from the PSN
    /// we announced and send from the one the peer announced (a REQ's or REP's "starting PSN" is
    /// its sender's receive PSN: Linux `cm_req_handler` takes the REQ's as the passive side's
    /// `sq_psn`, and `rdma_cm.pcap` shows each side sending from the other's).
    fn bring_up(&self, dev: &mut Device, l: &Link) -> Result<(), RdmaCmError> {
        let (local, remote) = self.qp_params(l);
        connect::to_rtr(dev, l.qpn, &local, &remote).map_err(RdmaCmError::Verbs)?;
        connect::to_rts(dev, l.qpn, &local).map_err(RdmaCmError::Verbs)
    }

    /// The QP's side of a connection, and the peer's (see [`RdmaCm::bring_up`]).
    fn qp_params(&self, l: &Link) -> (RcLocal, RcRemote) {
        let local = RcLocal {
            access: QP_ACCESS,
            sgid_index: l.sgid_index,
            path_mtu: l.mtu,
            sq_psn: l.peer_psn,
            max_dest_rd_atomic: l.responder_resources,
            max_rd_atomic: l.initiator_depth,
            min_rnr_timer: 0,
            timeout: l.ack_timeout.unwrap_or(l.path.local_ack_timeout),
            retry_cnt: l.retry_count,
            rnr_retry: l.rnr_retry_count,
            hop_limit: l.path.hop_limit,
            traffic_class: l.path.traffic_class,
            flow_label: l.path.flow_label,
            sl: l.path.sl,
        };
        let remote = RcRemote { qpn: l.peer_qpn, psn: l.psn, gid: Gid::from_ip(l.peer.gid), mac: l.dmac };
        (local, remote)
    }

    /// `rdma_accept` of a `ConnectRequest` ID with a QP: the QP goes to RTR and RTS, the REP
    /// out; `Established` follows the RTU. `None` (librdmacm's NULL `conn_param`), or
    /// [`MAX_RD_ATOMIC`] in a field, takes what the request asked for, at most
    /// [`RdmaCmConfig::max_rd_atomic`], with retries 7 and 7 (`rdma_accept`,
    /// `ucma_copy_conn_param_to_kern`).
    pub fn accept(
        &mut self,
        now: Instant,
        dev: &mut Device,
        id: IdHandle,
        p: Option<&ConnParam<'_>>,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        if is_ud(i.ps) {
            return self.accept_ud(id, p);
        }
        let (IdState::Connect, Some(mut l), Some(_)) = (i.state, i.link, i.req.as_ref()) else {
            return Err(RdmaCmError::InvalidState("rdma_accept needs a connection request"));
        };
        let (qpn, managed) = match (i.qpn, p.map_or(0, |p| p.qp_num)) {
            (Some(q), _) => (q, true),
            (None, q) if q != 0 => (q, false),
            _ => {
                return Err(RdmaCmError::InvalidState("rdma_accept needs a QP (rdma_create_qp, or conn_param.qp_num)"))
            }
        };
        let max = self.cfg.max_rd_atomic;
        let pick = |asked: Option<u8>, requested: u8| match asked {
            Some(v) if v != MAX_RD_ATOMIC => v,
            _ => requested.min(max),
        };
        let default = ConnParam {
            private_data: &[],
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        };
        let p = p.unwrap_or(&default);
        l.qpn = qpn;
        l.managed = managed;
        l.responder_resources = pick(Some(p.responder_resources), l.responder_resources);
        l.initiator_depth = pick(Some(p.initiator_depth), l.initiator_depth);
        if managed {
            self.bring_up(dev, &l)?;
        }
        let ap = AcceptParams {
            local_qpn: qpn,
            starting_psn: l.psn,
            responder_resources: l.responder_resources,
            initiator_depth: l.initiator_depth,
            target_ack_delay: self.cfg.ca_ack_delay,
            rnr_retry_count: p.rnr_retry_count & 7,
            srq: p.srq,
            private_data: p.private_data,
        };
        self.cm.accept(now, l.cm, &ap).map_err(RdmaCmError::Cm)?;
        let i = self.id_mut(id)?;
        i.link = Some(l);
        i.req = None;
        Ok(())
    }

    /// `rdma_reject` of a `ConnectRequest` ID (REJ "consumer defined" with the private data).
    pub fn reject(&mut self, id: IdHandle, private_data: &[u8]) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        if is_ud(i.ps) {
            return self.reject_ud(id, private_data);
        }
        let (Some(l), Some(_)) = (i.link, i.req.as_ref()) else {
            return Err(RdmaCmError::InvalidState("rdma_reject needs a connection request"));
        };
        self.cm.reject(l.cm, RejReason::CONSUMER_DEFINED, &[], private_data).map_err(RdmaCmError::Cm)?;
        let i = self.id_mut(id)?;
        i.req = None;
        i.state = IdState::Disconnect;
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR (librdmacm `ucma_modify_qp_err`), then a DREQ — or the
    /// DREP, when the peer's DREQ came first.
    pub fn disconnect(&mut self, now: Instant, dev: &mut Device, id: IdHandle) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let Some(l) = i.link else { return Err(RdmaCmError::InvalidState("rdma_disconnect: not connected")) };
        if l.managed {
            to_err(dev, l.qpn);
        }
        use crate::cm::CmState as S;
        match self.cm.state(l.cm) {
            Some(S::Established) => self.cm.disconnect(now, l.cm, &[]).map_err(RdmaCmError::Cm)?,
            Some(S::DreqRcvd) => self.cm.send_drep(now, l.cm, &[]).map_err(RdmaCmError::Cm)?,
            _ => return Err(RdmaCmError::InvalidState("rdma_disconnect: not connected")),
        }
        self.id_mut(id)?.state = IdState::Disconnect;
        Ok(())
    }

    /// `rdma_destroy_id`: the CM tells the peer what it must (REJ, DREQ or DREP).
    pub fn destroy_id(&mut self, now: Instant, id: IdHandle) -> Result<(), RdmaCmError> {
        let i = self.ids.remove(&id.0).ok_or(RdmaCmError::UnknownId)?;
        for cm in i.link.map(|l| l.cm).into_iter().chain(i.sidr) {
            self.by_cm.remove(&cm);
            let _ = self.cm.destroy(now, cm);
        }
        if let Some(src) = i.src {
            if self.bound.get(&(i.ps, src.port())) == Some(&id.0) {
                self.bound.remove(&(i.ps, src.port()));
            }
            if i.state == IdState::Listen {
                let sid = service_id(i.ps, src.port());
                let _ = self.cm.unlisten(sid);
                self.listeners.remove(&sid);
            }
        }
        Ok(())
    }

    /// The CM's events, as RDMA-CM's (and the QP work librdmacm does on them).
    pub(super) fn translate_with(
        &mut self,
        dev: &mut Device,
        resolve: &mut dyn FnMut(IpAddr) -> Option<EthernetAddress>,
    ) -> bool {
        let mut moved = false;
        while let Some(e) = self.cm.poll_event() {
            moved = true;
            match e {
                CmEvent::ReqReceived { id, listen, peer, req } => self.on_req(id, listen, peer, req, resolve),
                CmEvent::RepReceived { id, rep } => self.on_rep(dev, id, &rep),
                CmEvent::RtuReceived { id } => self.with_link(id, |s, h, _| {
                    s.id_mut(h).map(|i| i.state = IdState::Established).ok();
                    s.event(h, None, EventKind::Established, 0);
                }),
                CmEvent::RejReceived { id, reason, rej } => self.with_link(id, |s, h, l| {
                    s.id_mut(h).map(|i| i.state = IdState::Disconnect).ok();
                    if l.managed {
                        to_err(dev, l.qpn);
                    }
                    s.events.push_back(Event {
                        id: h,
                        listen_id: None,
                        kind: EventKind::Rejected,
                        status: i32::from(reason.0),
                        private_data: rej.private_data().to_vec(),
                        param: PeerParam::default(),
                        ud: None,
                    });
                }),
                CmEvent::ReqError { id } | CmEvent::RepError { id } => self.with_link(id, |s, h, _| {
                    s.id_mut(h).map(|i| i.state = IdState::Disconnect).ok();
                    s.event(h, None, EventKind::Unreachable, -110);
                }),
                CmEvent::DreqReceived { id, .. } | CmEvent::DrepReceived { id } | CmEvent::DreqError { id } => self
                    .with_link(id, |s, h, l| {
                        if !l.disconnected {
                            if let Some(Some(link)) = s.ids.get_mut(&h.0).map(|i| i.link.as_mut()) {
                                link.disconnected = true;
                            }
                            s.event(h, None, EventKind::Disconnected, 0);
                        }
                    }),
                CmEvent::TimewaitExit { id } => {
                    self.with_link(id, |s, h, _| s.event(h, None, EventKind::TimewaitExit, 0))
                }
                CmEvent::SidrReqReceived { id, listen, req, .. } => self.on_sidr_req(id, listen, &req),
                CmEvent::SidrRepReceived { id, rep } => self.on_sidr_rep(id, rep.as_ref()),
                CmEvent::MraReceived { .. } => {}
            }
        }
        moved
    }

    fn with_link(&mut self, cm: CmId, f: impl FnOnce(&mut RdmaCm, IdHandle, Link)) {
        let Some(&h) = self.by_cm.get(&cm) else { return };
        let Some(l) = self.ids.get(&h).and_then(|i| i.link) else { return };
        f(self, IdHandle(h), l);
    }

    fn on_req(
        &mut self,
        cm: CmId,
        listen: u64,
        peer: MadAddr,
        req: Received,
        resolve: &mut dyn FnMut(IpAddr) -> Option<EthernetAddress>,
    ) {
        let CmMessage::Req(r) = req.message() else { return };
        let parent = self.listeners.get(&listen).copied();
        // A REQ RDMA-CM cannot serve (a header it does not speak, no route back): refused as
        // the kernel refuses it, by destroying the CM ID (REJ "consumer defined").
        let hdr = IpCmHeader::parse(r.private_data, 0).ok().filter(|h| h.version == CMA_VERSION);
        let dmac = resolve(peer.gid);
        let (Some(parent), Some(hdr), Some(dmac)) = (parent, hdr, dmac) else {
            let _ = self.cm.reject(cm, RejReason::CONSUMER_DEFINED, &[], &[]);
            return;
        };
        let link = Link {
            cm,
            peer,
            path: r.primary,
            qpn: 0,
            psn: self.new_psn(),
            peer_qpn: r.local_qpn,
            peer_psn: r.starting_psn,
            mtu: Mtu::from_enum(r.path_mtu).unwrap_or(Mtu::Mtu1024),
            dmac,
            sgid_index: peer.sgid_index,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            disconnected: false,
            managed: false,
            ack_timeout: None,
        };
        let param = PeerParam {
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.e2e_flow_control as u8,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        let private_data = r.private_data[IP_HDR..].to_vec();
        let req = req.clone();
        let Some(child) = self.new_request(cm, parent, listen, &hdr, |i| {
            i.link = Some(link);
            i.req = Some(req);
        }) else {
            tracing::debug!("rdma_cm: no ID left for a connect request: refused");
            let _ = self.cm.reject(cm, RejReason::CONSUMER_DEFINED, &[], &[]);
            return;
        };
        self.request_event(child, parent, private_data, param, None);
    }

    /// A request's new ID (Linux `cma_ib_new_conn_id`, `cma_ib_new_udp_id`): in the listener's
    /// port space, connecting, its addresses from RDMA-CM's header, found by its CM ID; `fill`
    /// gives it what its kind of request needs.
    pub(super) fn new_request(
        &mut self,
        cm: CmId,
        parent: u32,
        listen: u64,
        hdr: &IpCmHeader,
        fill: impl FnOnce(&mut Id),
    ) -> Option<IdHandle> {
        let ps = self.ids.get(&parent).map_or(PortSpace::Tcp, |p| p.ps);
        let child = self.create_id(ps).ok()?;
        let port = (listen & 0xffff) as u16;
        if let Some(i) = self.ids.get_mut(&child.0) {
            i.state = IdState::Connect;
            i.src = Some(SocketAddr::new(hdr.dst, port));
            i.dst = Some(SocketAddr::new(hdr.src, hdr.src_port));
            fill(i);
        }
        self.by_cm.insert(cm, child.0);
        Some(child)
    }

    /// The `ConnectRequest` of a request's new ID, for its listener.
    pub(super) fn request_event(
        &mut self,
        child: IdHandle,
        parent: u32,
        private_data: Vec<u8>,
        param: PeerParam,
        ud: Option<UdParam>,
    ) {
        self.events.push_back(Event {
            id: child,
            listen_id: Some(IdHandle(parent)),
            kind: EventKind::ConnectRequest,
            status: 0,
            private_data,
            param,
            ud,
        });
    }

    fn on_rep(&mut self, dev: &mut Device, cm: CmId, rep: &Received) {
        let CmMessage::Rep(p) = rep.message() else { return };
        let Some(&h) = self.by_cm.get(&cm) else { return };
        let Some(mut l) = self.ids.get(&h).and_then(|i| i.link) else { return };
        l.peer_qpn = p.local_qpn;
        l.peer_psn = p.starting_psn;
        l.rnr_retry_count = p.rnr_retry_count;
        // The active side's ACK timeout from the passive side's target ACK delay (`cm_rep_handler`).
        l.path.local_ack_timeout = cm_ack_timeout(p.target_ack_delay, l.path.local_ack_timeout.saturating_sub(1));
        let param = PeerParam {
            responder_resources: p.initiator_depth,
            initiator_depth: p.responder_resources,
            flow_control: p.e2e_flow_control as u8,
            retry_count: l.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            qp_num: p.local_qpn,
        };
        if !l.managed {
            // The program moves its own QP: it gets the REP as `ConnectResponse` and answers with
            // `rdma_establish` (the kernel's `cma_ib_handler` without a QP).
            if let Some(i) = self.ids.get_mut(&h) {
                i.link = Some(l);
            }
            self.events.push_back(Event {
                id: IdHandle(h),
                listen_id: None,
                kind: EventKind::ConnectResponse,
                status: 0,
                private_data: p.private_data.to_vec(),
                param,
                ud: None,
            });
            return;
        }
        let up = self.bring_up(dev, &l);
        let ok = up.is_ok() && self.cm.send_rtu(cm, &[]).is_ok();
        if let Some(i) = self.ids.get_mut(&h) {
            i.link = Some(l);
            i.state = if ok { IdState::Established } else { IdState::Disconnect };
        }
        if !ok {
            let _ = self.cm.reject(cm, RejReason::CONSUMER_DEFINED, &[], &[]);
            self.event(IdHandle(h), None, EventKind::ConnectError, -22);
            return;
        }
        self.events.push_back(Event {
            id: IdHandle(h),
            listen_id: None,
            kind: EventKind::Established,
            status: 0,
            private_data: p.private_data.to_vec(),
            param,
            ud: None,
        });
    }

    /// `rdma_establish`: an active ID whose program moves its own QP confirms the REP it got as
    /// `ConnectResponse` (the RTU goes out; no event follows, as with the kernel's).
    pub fn establish(&mut self, id: IdHandle) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let Some(l) =
            i.link.filter(|l| !l.managed && l.peer_qpn != 0 && i.req.is_none() && i.state == IdState::Connect)
        else {
            return Err(RdmaCmError::InvalidState("rdma_establish: no connect response to confirm"));
        };
        self.cm.send_rtu(l.cm, &[]).map_err(RdmaCmError::Cm)?;
        self.id_mut(id)?.state = IdState::Established;
        Ok(())
    }
}

/// librdmacm `ucma_modify_qp_err`: a connection going down takes its QP to ERR (a QP that is
/// gone already is no error).
fn to_err(dev: &mut Device, qpn: u32) {
    let _ = dev.modify_qp(qpn, &QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE);
}

#[cfg(test)]
mod tests {
    use super::cm_ack_timeout;

    #[test]
    fn ack_timeout_is_linuxs() {
        // rxe: CA ACK delay 15, RoCE packet lifetime 16 → 17 (rdma_cm.pcap's REQ).
        assert_eq!(cm_ack_timeout(15, 16), 17);
        assert_eq!(cm_ack_timeout(15, 10), 15);
        assert_eq!(cm_ack_timeout(20, 10), 20);
        assert_eq!(cm_ack_timeout(0, 40), 31);
    }
}
