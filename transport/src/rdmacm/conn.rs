//! Connections: the REQ built from an ID's route, the QP brought up from the REQ and REP as
//! librdmacm brings it up (`ucma_modify_qp_rtr`/`_rts` with the kernel's
//! `ib_cm_init_qp_attr` values), and the CM's events as RDMA-CM's.

use super::*;
use crate::cm::{AcceptParams, CmEvent, ConnectParams, Received};
use crate::connect::{self, RcLocal, RcRemote};
use crate::formulas::rdma_cm_flow_label;
use crate::verbs::{AccessFlags, Gid, QpAttr, QpAttrMask, QpState, QpType};
use uroce_wire::cm::ip::{service_id, IpCmHeader, CMA_VERSION, HEADER_LEN as IP_HDR};
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
    /// `rdma_create_qp`'s part here: the ID uses QP `qpn` (created by the caller), which goes to
    /// INIT (librdmacm `ucma_init_conn_qp`).
    pub fn set_qp(&mut self, dev: &mut Device, id: IdHandle, qpn: u32) -> Result<(), RdmaCmError> {
        self.id_mut(id)?;
        let ty = dev.qp(qpn).map(|q| q.qp_type).ok_or(RdmaCmError::Verbs(VerbsError::NoSuchObject("QP")))?;
        if ty != QpType::Rc && ty != QpType::Uc {
            return Err(RdmaCmError::Invalid("only RC and UC QPs connect through the CM"));
        }
        connect::to_init(dev, qpn, QP_ACCESS).map_err(RdmaCmError::Verbs)?;
        self.id_mut(id)?.qpn = Some(qpn);
        Ok(())
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
        let (IdState::RouteResolved, Some(route), Some(src), Some(dst), Some(qpn)) =
            (i.state, i.route, i.src, i.dst, i.qpn)
        else {
            return Err(RdmaCmError::InvalidState("rdma_connect needs a resolved route and a QP"));
        };
        let ps = i.ps;
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
            hop_limit: 64,
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
        let local = RcLocal {
            access: QP_ACCESS,
            sgid_index: l.sgid_index,
            path_mtu: l.mtu,
            sq_psn: l.peer_psn,
            max_dest_rd_atomic: l.responder_resources,
            max_rd_atomic: l.initiator_depth,
            min_rnr_timer: 0,
            timeout: l.path.local_ack_timeout,
            retry_cnt: l.retry_count,
            rnr_retry: l.rnr_retry_count,
            hop_limit: l.path.hop_limit,
            traffic_class: l.path.traffic_class,
            flow_label: l.path.flow_label,
            sl: l.path.sl,
        };
        let remote = RcRemote { qpn: l.peer_qpn, psn: l.psn, gid: Gid::from_ip(l.peer.gid), mac: l.dmac };
        connect::to_rtr(dev, l.qpn, &local, &remote).map_err(RdmaCmError::Verbs)?;
        connect::to_rts(dev, l.qpn, &local).map_err(RdmaCmError::Verbs)
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
        let (IdState::Connect, Some(mut l), Some(_), Some(qpn)) = (i.state, i.link, i.req.as_ref(), i.qpn) else {
            return Err(RdmaCmError::InvalidState("rdma_accept needs a connection request and a QP"));
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
        };
        let p = p.unwrap_or(&default);
        l.qpn = qpn;
        l.psn = self.new_psn();
        l.responder_resources = pick(Some(p.responder_resources), l.responder_resources);
        l.initiator_depth = pick(Some(p.initiator_depth), l.initiator_depth);
        self.bring_up(dev, &l)?;
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
        let _ = dev.modify_qp(l.qpn, &QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE);
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
        if let Some(l) = i.link {
            self.by_cm.remove(&l.cm);
            let _ = self.cm.destroy(now, l.cm);
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
                CmEvent::RejReceived { id, reason, rej } => self.with_link(id, |s, h, _| {
                    s.id_mut(h).map(|i| i.state = IdState::Disconnect).ok();
                    s.events.push_back(Event {
                        id: h,
                        listen_id: None,
                        kind: EventKind::Rejected,
                        status: i32::from(reason.0),
                        private_data: rej.private_data().to_vec(),
                        param: PeerParam::default(),
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
                CmEvent::MraReceived { .. } | CmEvent::SidrReqReceived { .. } | CmEvent::SidrRepReceived { .. } => {}
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
        let ps = self.ids.get(&parent).map_or(PortSpace::Tcp, |p| p.ps);
        let child = self.create_id(ps);
        let port = (listen & 0xffff) as u16;
        let link = Link {
            cm,
            peer,
            path: r.primary,
            qpn: 0,
            psn: 0,
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
        if let Some(i) = self.ids.get_mut(&child.0) {
            i.state = IdState::Connect;
            i.src = Some(SocketAddr::new(hdr.dst, port));
            i.dst = Some(SocketAddr::new(hdr.src, hdr.src_port));
            i.link = Some(link);
            i.req = Some(req.clone());
        }
        self.by_cm.insert(cm, child.0);
        self.events.push_back(Event {
            id: child,
            listen_id: Some(IdHandle(parent)),
            kind: EventKind::ConnectRequest,
            status: 0,
            private_data,
            param,
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
        });
    }
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
