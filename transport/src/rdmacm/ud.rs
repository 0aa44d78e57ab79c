//! UD IDs (the UDP port space): no connection, a service ID resolution instead (IBTA §12.11,
//! SIDR) — `rdma_connect` sends a SIDR_REQ with RDMA-CM's address header, the passive side's
//! `rdma_accept` answers with a SIDR_REP naming its UD QP and Q_Key, and the active side's
//! `Established` carries the peer's QP, Q_Key and the address vector to reach it (Linux
//! `cma_resolve_ib_udp`, `cma_ib_req_handler` for `IB_CM_SIDR_REQ_RECEIVED`,
//! `cma_send_sidr_rep`, `cma_sidr_rep_handler`).

use super::*;
use crate::cm::Received;
use crate::formulas::rdma_cm_flow_label;
use crate::verbs::{AddressVector, Gid};
use uroce_wire::cm::ip::{service_id, IpCmHeader, CMA_VERSION, HEADER_LEN as IP_HDR, UDP_QKEY};
use uroce_wire::cm::{private_len, sidr_status, CmMessage};

impl RdmaCm {
    /// `rdma_connect` on a UD ID: the SIDR_REQ (private data after RDMA-CM's 36-byte header, at
    /// most 180 bytes); `Established` with the peer's QP follows, or `Unreachable`.
    pub(super) fn connect_ud(&mut self, now: Instant, id: IdHandle, p: &ConnParam<'_>) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let (IdState::RouteResolved, Some(route), Some(src), Some(dst)) = (i.state, i.route, i.src, i.dst) else {
            return Err(RdmaCmError::InvalidState("rdma_connect needs a resolved route"));
        };
        if p.private_data.len() > private_len::SIDR_REQ - IP_HDR {
            return Err(RdmaCmError::Invalid("SIDR_REQ private data longer than 180 bytes"));
        }
        let ps = i.ps;
        let mut private = vec![0u8; IP_HDR + p.private_data.len()];
        IpCmHeader { version: CMA_VERSION, src_port: src.port(), src: route.src, dst: route.dst }
            .emit(&mut private)
            .map_err(|_| RdmaCmError::Invalid("addresses of two families"))?;
        private[IP_HDR..].copy_from_slice(p.private_data);
        let peer = MadAddr { gid: route.dst, qpn: 1, pkey_index: 0, sgid_index: route.sgid_index };
        let sid = service_id(ps, dst.port());
        let (timeout, retries) = (self.cfg.cm_response_timeout, self.cfg.max_cm_retries);
        let cm = self.cm.sidr_request(now, peer, sid, timeout, retries, &private).map_err(RdmaCmError::Cm)?;
        self.by_cm.insert(cm, id.0);
        let i = self.id_mut(id)?;
        i.sidr = Some(cm);
        i.state = IdState::Connect;
        Ok(())
    }

    /// A SIDR_REQ for a UD listener: a new ID and its `ConnectRequest`. One RDMA-CM cannot
    /// serve (no such listener here, a header it does not speak) is refused with status
    /// REJECT, as the kernel's CM answers a SIDR_REQ whose handler failed.
    pub(super) fn on_sidr_req(&mut self, cm: CmId, listen: u64, req: &Received) {
        let CmMessage::SidrReq(r) = req.message() else { return };
        let parent = self.listeners.get(&listen).copied();
        let hdr = IpCmHeader::parse(r.private_data, 0).ok().filter(|h| h.version == CMA_VERSION);
        let (Some(parent), Some(hdr)) = (parent, hdr) else {
            let _ = self.cm.sidr_reply(cm, sidr_status::REJECT, 0, 0, &[]);
            return;
        };
        let Some(child) = self.new_request(cm, parent, listen, &hdr, |i| i.sidr = Some(cm)) else {
            let _ = self.cm.sidr_reply(cm, sidr_status::REJECT, 0, 0, &[]);
            return;
        };
        let private = r.private_data.get(IP_HDR..).unwrap_or(&[]).to_vec();
        let ud = UdParam { ah: AddressVector::default(), qp_num: 0, qkey: 0 };
        self.request_event(child, parent, private, PeerParam::default(), Some(ud));
    }

    /// `rdma_accept` of a UD `ConnectRequest`: the SIDR_REP names the QP (the ID's, or
    /// `conn_param.qp_num`) and the port space's Q_Key. No event follows on this side.
    pub(super) fn accept_ud(&mut self, id: IdHandle, p: Option<&ConnParam<'_>>) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let (IdState::Connect, Some(cm)) = (i.state, i.sidr) else {
            return Err(RdmaCmError::InvalidState("rdma_accept needs a connection request"));
        };
        let Some(qpn) = i.qpn.or(p.map(|p| p.qp_num).filter(|q| *q != 0)) else {
            return Err(RdmaCmError::InvalidState("rdma_accept needs a QP (rdma_create_qp, or conn_param.qp_num)"));
        };
        let private = p.map_or(&[][..], |p| p.private_data);
        if private.len() > private_len::SIDR_REP {
            return Err(RdmaCmError::Invalid("SIDR_REP private data longer than 136 bytes"));
        }
        self.cm.sidr_reply(cm, sidr_status::SUCCESS, qpn, UDP_QKEY, private).map_err(RdmaCmError::Cm)?;
        self.by_cm.remove(&cm);
        let i = self.id_mut(id)?;
        i.sidr = None;
        i.state = IdState::Established;
        Ok(())
    }

    /// `rdma_reject` of a UD `ConnectRequest`: SIDR_REP status REJECT.
    pub(super) fn reject_ud(&mut self, id: IdHandle, private_data: &[u8]) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let (IdState::Connect, Some(cm)) = (i.state, i.sidr) else {
            return Err(RdmaCmError::InvalidState("rdma_reject needs a connection request"));
        };
        if private_data.len() > private_len::SIDR_REP {
            return Err(RdmaCmError::Invalid("SIDR_REP private data longer than 136 bytes"));
        }
        self.cm.sidr_reply(cm, sidr_status::REJECT, 0, 0, private_data).map_err(RdmaCmError::Cm)?;
        self.by_cm.remove(&cm);
        let i = self.id_mut(id)?;
        i.sidr = None;
        i.state = IdState::Disconnect;
        Ok(())
    }

    /// The SIDR_REP (or none in time): `Established` with the peer's QP, Q_Key and the path's
    /// address vector; `Unreachable` with the SIDR status, `-EINVAL` for a Q_Key that is not
    /// the port space's, `-ETIMEDOUT` for no answer (`cma_sidr_rep_handler`).
    pub(super) fn on_sidr_rep(&mut self, cm: CmId, rep: Option<&Received>) {
        let Some(h) = self.by_cm.remove(&cm) else { return };
        let Some(i) = self.ids.get_mut(&h) else { return };
        i.sidr = None;
        let (route, src, dst) = (i.route, i.src, i.dst);
        let answer = match rep.map(|r| r.message()) {
            Some(CmMessage::SidrRep(r)) if r.status != sidr_status::SUCCESS => Err(i32::from(r.status)),
            Some(CmMessage::SidrRep(r)) if r.qkey != UDP_QKEY => Err(-22),
            Some(CmMessage::SidrRep(r)) => Ok(r),
            _ => Err(-110),
        };
        let (Ok(r), Some(route), Some(src), Some(dst)) = (answer, route, src, dst) else {
            i.state = IdState::Disconnect;
            let status = answer.err().unwrap_or(-22);
            self.event(IdHandle(h), None, EventKind::Unreachable, status);
            return;
        };
        i.state = IdState::Established;
        let ah = AddressVector {
            dgid: Gid::from_ip(route.dst),
            sgid_index: route.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            flow_label: rdma_cm_flow_label(src.port(), dst.port()),
            sl: 0,
            dmac: route.dmac,
        };
        self.events.push_back(Event {
            id: IdHandle(h),
            listen_id: None,
            kind: EventKind::Established,
            status: 0,
            private_data: r.private_data.to_vec(),
            param: PeerParam { qp_num: r.qpn, ..PeerParam::default() },
            ud: Some(UdParam { ah, qp_num: r.qpn, qkey: r.qkey }),
        });
    }
}
