//! `ibv_modify_qp`: the attribute checks and the transition (the state table itself is
//! [`crate::qp::state`]).

use super::{schedule, Device};
use crate::path::FrameTemplate;
use crate::time::Instant;
use crate::verbs::*;
use uroce_wire::Psn;

impl Device {
    /// Check the attribute values present in `mask`.
    fn validate_attr(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        use QpAttrMask as M;
        let bad = |w| Err(VerbsError::InvalidArgument(w));
        if mask.contains(M::PATH_MTU) && attr.path_mtu > self.cfg.active_mtu {
            return bad("path_mtu larger than the port's active MTU");
        }
        // The ranges `ibv_modify_qp` enforces (EINVAL), as a table: attribute, value, largest.
        let rd = u32::from(self.cfg.max_qp_rd_atom);
        let limits: [(QpAttrMask, u32, u32, &'static str); 10] = [
            (M::TIMEOUT, attr.timeout.into(), 31, "timeout"),
            (M::RETRY_CNT, attr.retry_cnt.into(), 7, "retry_cnt"),
            (M::RNR_RETRY, attr.rnr_retry.into(), 7, "rnr_retry"),
            (M::MIN_RNR_TIMER, attr.min_rnr_timer.into(), 31, "min_rnr_timer"),
            (M::MAX_QP_RD_ATOMIC, attr.max_rd_atomic.into(), rd, "max_rd_atomic"),
            (M::MAX_DEST_RD_ATOMIC, attr.max_dest_rd_atomic.into(), rd, "max_dest_rd_atomic"),
            (M::DEST_QPN, attr.dest_qp_num, 0xff_ffff, "dest_qp_num"),
            (M::RQ_PSN, attr.rq_psn, 0xff_ffff, "rq_psn"),
            (M::SQ_PSN, attr.sq_psn, 0xff_ffff, "sq_psn"),
            (M::PKEY_INDEX, attr.pkey_index.into(), 0, "pkey_index (the P_Key table holds one entry)"),
        ];
        if let Some(&(_, _, _, what)) = limits.iter().find(|(m, v, max, _)| mask.contains(*m) && v > max) {
            return bad(what);
        }
        if mask.contains(M::PORT) && attr.port_num != 1 {
            return bad("port_num");
        }
        let remote = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
        if mask.contains(M::ACCESS_FLAGS)
            && !attr.qp_access_flags.minus(remote | AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).is_empty()
        {
            return bad("qp_access_flags");
        }
        if mask.contains(M::AV) {
            self.validate_av(&attr.ah_attr)?;
        }
        Ok(())
    }

    /// Check an address vector (a QP's path, or an address handle).
    pub(super) fn validate_av(&self, av: &AddressVector) -> Result<(), VerbsError> {
        let sgid = self.cfg.gids.get(av.sgid_index as usize).ok_or(VerbsError::InvalidArgument("sgid_index"))?;
        if sgid.is_ipv4() != av.dgid.is_ipv4() {
            return Err(VerbsError::InvalidArgument("source and destination GIDs of different IP versions"));
        }
        if av.sl > 7 {
            return Err(VerbsError::InvalidArgument("sl"));
        }
        Ok(())
    }

    /// `ibv_modify_qp`: the state machine of [`crate::qp::state`] plus attribute checks.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        use QpAttrMask as M;
        let qp = self.qps.get(qpn).ok_or(VerbsError::NoSuchObject("QP"))?;
        let (cur, ty) = (qp.state, qp.qp_type);
        let to = crate::qp::state::check_transition_of(ty, cur, attr, mask)?;
        self.validate_attr(attr, mask)?;
        if to == QpState::Reset {
            let qp = self.qps.get_mut(qpn).expect("checked");
            qp.reset();
            // Its completions not yet polled go too, as mlx5 cleans the CQs of a QP moved to
            // RESET (`mlx5_modify_qp` → `mlx5_cq_clean`): a QP brought back up does not hand
            // the program the flush errors of its previous life.
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(Some(c)) = self.cqs.get_mut(cq.0 as usize) {
                    c.discard_qp(qpn);
                }
            }
            return Ok(());
        }
        if to == QpState::Err {
            self.with_qp(qpn, Instant::ZERO, |qp, ctx| qp.enter_error(ctx, false));
            return Ok(());
        }
        let Device { cfg, qps, idents, .. } = self;
        let qp = qps.get_mut(qpn).expect("checked");
        let a = &mut qp.attr;
        if mask.contains(M::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(M::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if mask.contains(M::PORT) {
            a.port_num = attr.port_num;
        }
        if mask.contains(M::QKEY) {
            a.qkey = attr.qkey;
        }
        if mask.contains(M::AV) {
            a.ah_attr = attr.ah_attr;
        }
        if mask.contains(M::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if mask.contains(M::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(M::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            qp.send.set_retry_cnt(attr.retry_cnt);
        }
        if mask.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            qp.send.set_rnr_retry(attr.rnr_retry);
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if mask.contains(M::RQ_PSN) {
            qp.resp.epsn = Psn::new(attr.rq_psn);
        }
        if mask.contains(M::SQ_PSN) {
            qp.send.set_sq_psn(Psn::new(attr.sq_psn));
        }
        // A connected QP's frames all take one path; a UD QP's take its WRs' address handles.
        let connected = ty.is_connected();
        if connected && (mask.intersects(M::AV | M::DEST_QPN) || (to == QpState::Rtr && qp.template.is_none())) {
            qp.template = Some(FrameTemplate::new(cfg, idents, &qp.attr.ah_attr, qpn, qp.attr.dest_qp_num)?);
        }
        qp.state = to;
        schedule::mark_ready(&mut self.ready, qp);
        Ok(())
    }
}
