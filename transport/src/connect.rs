//! Bringing an RC QP from RESET to RTS against a known peer: the one place that states the
//! INIT → RTR → RTS attribute masks (IBTA §11.2.4.2, `ibv_modify_qp`'s required attributes).
//!
//! Every application that connects an RC QP (perftest, `ibv_rc_pingpong`, the simulator, the
//! tests) does the same three `ibv_modify_qp` calls after its out-of-band exchange; only the
//! values differ. [`RcLocal`] holds what this side chooses, [`RcRemote`] what the peer told
//! it, and [`connect_rc`] makes the three calls through [`Device::modify_qp`] alone. The steps
//! are also public ([`to_init`], [`to_rtr`], [`to_rts`]) for an application that posts receives
//! in INIT before its exchange, as `ibv_rc_pingpong` does.
//!
//! The masks are the required attributes of the RC column of the QP state table (IBTA
//! §11.2.4.2 "Modify Queue Pair", table 91; the kernel's `qp_state_table`), as the
//! `ibv_modify_qp(3)` man page lists them for RC:
//!
//! | transition | required |
//! |---|---|
//! | RESET → INIT | `STATE`, `PKEY_INDEX`, `PORT`, `ACCESS_FLAGS` |
//! | INIT → RTR | `STATE`, `AV`, `PATH_MTU`, `DEST_QPN`, `RQ_PSN`, `MAX_DEST_RD_ATOMIC`, `MIN_RNR_TIMER` |
//! | RTR → RTS | `STATE`, `TIMEOUT`, `RETRY_CNT`, `RNR_RETRY`, `SQ_PSN`, `MAX_QP_RD_ATOMIC` |

use crate::device::Device;
use crate::verbs::{AccessFlags, AddressVector, Gid, Mtu, QpAttr, QpAttrMask as M, QpState, VerbsError};
use uroce_wire::EthernetAddress;

/// RESET → INIT: `IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS`.
pub const INIT_MASK: M = M(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0);

/// INIT → RTR: `IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
/// IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER`.
pub const RTR_MASK: M = M(M::STATE.0
    | M::AV.0
    | M::PATH_MTU.0
    | M::DEST_QPN.0
    | M::RQ_PSN.0
    | M::MAX_DEST_RD_ATOMIC.0
    | M::MIN_RNR_TIMER.0);

/// RTR → RTS: `IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
/// IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC`.
pub const RTS_MASK: M =
    M(M::STATE.0 | M::TIMEOUT.0 | M::RETRY_CNT.0 | M::RNR_RETRY.0 | M::SQ_PSN.0 | M::MAX_QP_RD_ATOMIC.0);

/// What this side chooses for its QP (`struct ibv_qp_attr` fields and its half of the AV).
///
/// The default is perftest's and `ibv_rc_pingpong`'s common choice where they agree (timeout
/// 14, retry 7, RNR retry 7, RNR timer 12, path MTU 1024, one outstanding READ each way, GID
/// index 1, hop limit 64, no remote access); callers set what they choose differently.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RcLocal {
    /// Remote access the QP allows (INIT's `qp_access_flags`).
    pub access: AccessFlags,
    /// Source GID index of the AV.
    pub sgid_index: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// PSN of the first request this QP sends (the peer's `rq_psn`).
    pub sq_psn: u32,
    /// READs/atomics this QP accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// READs/atomics this QP may have outstanding as requester.
    pub max_rd_atomic: u8,
    /// RNR NAK timer code this QP sends.
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// IPv4 TTL / IPv6 hop limit of the AV.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN) of the AV.
    pub traffic_class: u8,
    /// IPv6 flow label of the AV (0: derive the UDP source port from the QPNs).
    pub flow_label: u32,
    /// Service level of the AV.
    pub sl: u8,
}

impl Default for RcLocal {
    fn default() -> Self {
        RcLocal {
            access: AccessFlags::NONE,
            sgid_index: 1,
            path_mtu: Mtu::Mtu1024,
            sq_psn: 0,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
        }
    }
}

/// What the peer sent in the out-of-band exchange, and its MAC (from the neighbour table).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RcRemote {
    /// The peer's QP number (`dest_qp_num`).
    pub qpn: u32,
    /// The PSN the peer sends from (`rq_psn`).
    pub psn: u32,
    /// The peer's GID (the AV's `dgid`).
    pub gid: Gid,
    /// The peer's MAC (the AV's `dmac`).
    pub mac: EthernetAddress,
}

/// The INIT attributes: port 1, P_Key index 0, `access`.
pub fn init_attr(access: AccessFlags) -> QpAttr {
    QpAttr { qp_state: QpState::Init, port_num: 1, pkey_index: 0, qp_access_flags: access, ..Default::default() }
}

/// The RTR attributes (the AV, path MTU, the peer's QPN and PSN, responder resources).
pub fn rtr_attr(local: &RcLocal, remote: &RcRemote) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: local.path_mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: local.max_dest_rd_atomic,
        min_rnr_timer: local.min_rnr_timer,
        ah_attr: AddressVector {
            dgid: remote.gid,
            sgid_index: local.sgid_index,
            hop_limit: local.hop_limit,
            traffic_class: local.traffic_class,
            flow_label: local.flow_label,
            sl: local.sl,
            dmac: remote.mac,
        },
        ..Default::default()
    }
}

/// The RTS attributes (timers, retries, our send PSN, initiator depth).
pub fn rts_attr(local: &RcLocal) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        timeout: local.timeout,
        retry_cnt: local.retry_cnt,
        rnr_retry: local.rnr_retry,
        sq_psn: local.sq_psn,
        max_rd_atomic: local.max_rd_atomic,
        ..Default::default()
    }
}

/// RESET → INIT with `access`.
pub fn to_init(dev: &mut Device, qpn: u32, access: AccessFlags) -> Result<(), VerbsError> {
    dev.modify_qp(qpn, &init_attr(access), INIT_MASK)
}

/// INIT → RTR towards `remote`.
pub fn to_rtr(dev: &mut Device, qpn: u32, local: &RcLocal, remote: &RcRemote) -> Result<(), VerbsError> {
    dev.modify_qp(qpn, &rtr_attr(local, remote), RTR_MASK)
}

/// RTR → RTS.
pub fn to_rts(dev: &mut Device, qpn: u32, local: &RcLocal) -> Result<(), VerbsError> {
    dev.modify_qp(qpn, &rts_attr(local), RTS_MASK)
}

/// RESET → INIT → RTR → RTS: connect `qpn` to `remote`.
pub fn connect_rc(dev: &mut Device, qpn: u32, local: &RcLocal, remote: &RcRemote) -> Result<(), VerbsError> {
    to_init(dev, qpn, local.access)?;
    to_rtr(dev, qpn, local, remote)?;
    to_rts(dev, qpn, local)?;
    tracing::debug!(qpn, dest_qpn = remote.qpn, sq_psn = local.sq_psn, rq_psn = remote.psn, "RC QP connected");
    Ok(())
}

/// A UC QP's RTR and RTS masks: RC's without the responder resources, timers and retries
/// (kernel `qp_state_table`, IB_QPT_UC).
pub const UC_RTR_MASK: M = M(M::STATE.0 | M::AV.0 | M::PATH_MTU.0 | M::DEST_QPN.0 | M::RQ_PSN.0);
/// See [`UC_RTR_MASK`].
pub const UC_RTS_MASK: M = M(M::STATE.0 | M::SQ_PSN.0);
/// A UD QP's INIT mask: a Q_Key instead of access flags (IB_QPT_UD).
pub const UD_INIT_MASK: M = M(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::QKEY.0);

/// RESET → INIT → RTR → RTS: connect UC QP `qpn` to `remote` (of `local`, what UC uses:
/// access, the AV, path MTU, the PSNs).
pub fn connect_uc(dev: &mut Device, qpn: u32, local: &RcLocal, remote: &RcRemote) -> Result<(), VerbsError> {
    to_init(dev, qpn, local.access)?;
    dev.modify_qp(qpn, &rtr_attr(local, remote), UC_RTR_MASK)?;
    dev.modify_qp(qpn, &rts_attr(local), UC_RTS_MASK)?;
    tracing::debug!(qpn, dest_qpn = remote.qpn, "UC QP connected");
    Ok(())
}

/// RESET → INIT → RTR → RTS: make UD QP `qpn` ready to receive datagrams with Q_Key `qkey` and
/// to send from `sq_psn` (perftest's and `ibv_ud_pingpong`'s bring-up).
pub fn ud_ready(dev: &mut Device, qpn: u32, qkey: u32, sq_psn: u32) -> Result<(), VerbsError> {
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, pkey_index: 0, qkey, ..Default::default() };
    dev.modify_qp(qpn, &init, UD_INIT_MASK)?;
    dev.modify_qp(qpn, &QpAttr { qp_state: QpState::Rtr, ..Default::default() }, M::STATE)?;
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn, ..Default::default() };
    dev.modify_qp(qpn, &rts, M(M::STATE.0 | M::SQ_PSN.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;
    use crate::verbs::{QpCap, QpInitAttr, QpType};
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn masks_are_the_state_tables_required_attributes() {
        let rc = crate::qp::state::RC_TRANSITIONS;
        let req = |from, to| rc.iter().find(|t| t.from == from && t.to == to).map(|t| t.required).unwrap();
        assert_eq!(INIT_MASK.minus(M::STATE), req(QpState::Reset, QpState::Init));
        assert_eq!(RTR_MASK.minus(M::STATE), req(QpState::Init, QpState::Rtr));
        assert_eq!(RTS_MASK.minus(M::STATE), req(QpState::Rtr, QpState::Rts));
        let uc = crate::qp::state::UC_TRANSITIONS;
        let req = |from, to| uc.iter().find(|t| t.from == from && t.to == to).map(|t| t.required).unwrap();
        assert_eq!(INIT_MASK.minus(M::STATE), req(QpState::Reset, QpState::Init));
        assert_eq!(UC_RTR_MASK.minus(M::STATE), req(QpState::Init, QpState::Rtr));
        assert_eq!(UC_RTS_MASK.minus(M::STATE), req(QpState::Rtr, QpState::Rts));
        let ud = crate::qp::state::UD_TRANSITIONS;
        let req = |from, to| ud.iter().find(|t| t.from == from && t.to == to).map(|t| t.required).unwrap();
        assert_eq!(UD_INIT_MASK.minus(M::STATE), req(QpState::Reset, QpState::Init));
    }

    #[test]
    fn connect_rc_reaches_rts_with_the_given_values() {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let mut d = Device::new(DeviceConfig::new(EthernetAddress([2, 0, 0, 0, 0, 1]), &[ip]));
        let pd = d.alloc_pd();
        let cq = d.create_cq(4).unwrap();
        let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
        let q = d.create_qp(pd, &init).unwrap();
        let local = RcLocal { sq_psn: 0x123, timeout: 18, max_rd_atomic: 4, ..Default::default() };
        let peer_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let remote = RcRemote { qpn: 0x77, psn: 0x456, gid: Gid::from_ip(peer_ip), mac: EthernetAddress([2; 6]) };
        connect_rc(&mut d, q, &local, &remote).unwrap();
        let a = d.query_qp(q).unwrap();
        assert_eq!(
            (a.qp_state, a.sq_psn, a.rq_psn, a.dest_qp_num, a.timeout, a.max_rd_atomic),
            (QpState::Rts, 0x123, 0x456, 0x77, 18, 4)
        );
        assert_eq!(
            connect_rc(&mut d, q, &local, &remote),
            Err(VerbsError::InvalidTransition { from: QpState::Rts, to: QpState::Init })
        );
    }
}
