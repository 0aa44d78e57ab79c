//! Helpers that build devices and connect RC QPs the way an application (perftest,
//! ibv_rc_pingpong) does: RESET → INIT → RTR → RTS with the peer's QPN, PSN and GID.

use super::Network;
use crate::connect::{connect_rc, RcLocal, RcRemote};
use crate::device::{Device, DeviceConfig, MrInfo};
use crate::verbs::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uroce_wire::EthernetAddress;

/// MAC of simulated node `i`.
pub fn mac(i: u8) -> EthernetAddress {
    EthernetAddress([0x02, 0, 0, 0, 0, i])
}

/// IPv4 address of simulated node `i` (10.0.0.i); GID index 1.
pub fn ipv4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, i)
}

/// IPv6 address of simulated node `i` (fd00::i); GID index 2.
pub fn ipv6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16)
}

/// A device for node `i` with GIDs [link-local, 10.0.0.i, fd00::i].
pub fn device(i: u8, seed: u64) -> Device {
    device_with(i, seed, |_| {})
}

/// [`device`] with its configuration changed by `f` first (congestion control, quirks, ...).
pub fn device_with(i: u8, seed: u64, f: impl FnOnce(&mut DeviceConfig)) -> Device {
    let mut cfg = DeviceConfig::new(mac(i), &[IpAddr::V4(ipv4(i)), IpAddr::V6(ipv6(i))]);
    cfg.seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i as u64);
    f(&mut cfg);
    Device::new(cfg)
}

/// How to connect a QP pair.
#[derive(Clone, Copy, Debug)]
pub struct QpOptions {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR timer code each side NAKs with.
    pub min_rnr_timer: u8,
    /// max_rd_atomic and max_dest_rd_atomic.
    pub rd_atomic: u8,
    /// Remote access both QPs allow.
    pub access: AccessFlags,
    /// Queue sizes.
    pub cap: QpCap,
    /// Use the IPv6 GIDs (index 2) instead of the IPv4-mapped ones (index 1).
    pub ipv6: bool,
    /// Initial PSNs (A's send PSN, B's send PSN); `None` draws them from the devices' RNGs.
    pub psns: Option<(u32, u32)>,
    /// Traffic class (DSCP << 2 | ECN) of both paths.
    pub traffic_class: u8,
}

impl Default for QpOptions {
    fn default() -> Self {
        QpOptions {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 16,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            cap: QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 },
            ipv6: false,
            psns: None,
            traffic_class: 0,
        }
    }
}

impl QpOptions {
    /// What one side sets on its QP with these options: GID index `sgid_index`, sending from
    /// `sq_psn`, hop limit 64.
    pub fn rc_local(&self, sgid_index: u8, sq_psn: u32) -> RcLocal {
        RcLocal {
            access: self.access,
            sgid_index,
            path_mtu: self.mtu,
            sq_psn,
            max_dest_rd_atomic: self.rd_atomic,
            max_rd_atomic: self.rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            hop_limit: 64,
            traffic_class: self.traffic_class,
            flow_label: 0,
            sl: 0,
        }
    }
}

/// One side of a connected QP pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEnd {
    /// Network node.
    pub node: usize,
    /// Protection domain.
    pub pd: PdHandle,
    /// CQ for both send and receive completions.
    pub cq: CqHandle,
    /// QP number.
    pub qpn: u32,
}

/// Create a PD, a CQ and an RC QP on `node`.
pub fn create(net: &mut Network, node: usize, o: &QpOptions) -> Result<QpEnd, VerbsError> {
    let pd = net.dev(node).alloc_pd();
    create_in(net, node, pd, o)
}

/// Create a CQ and an RC QP on `node` in an existing PD.
pub fn create_in(net: &mut Network, node: usize, pd: PdHandle, o: &QpOptions) -> Result<QpEnd, VerbsError> {
    let d = net.dev(node);
    let cq = d.create_cq(1 << 16)?;
    let qpn = d.create_qp(
        pd,
        &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap: o.cap, sq_sig_all: false, srq: None },
    )?;
    Ok(QpEnd { node, pd, cq, qpn })
}

/// Move `me` to RTS, connected to `peer` (which sends from `peer_psn`), sending from `my_psn`.
pub fn connect_one(
    net: &mut Network,
    me: &QpEnd,
    peer: &QpEnd,
    my_psn: u32,
    peer_psn: u32,
    o: &QpOptions,
) -> Result<(), VerbsError> {
    let sgid_index = if o.ipv6 { 2 } else { 1 };
    let peer_cfg = net.dev(peer.node).config().clone();
    let local = o.rc_local(sgid_index, my_psn);
    let remote = RcRemote { qpn: peer.qpn, psn: peer_psn, gid: peer_cfg.gids[sgid_index as usize], mac: peer_cfg.mac };
    connect_rc(net.dev(me.node), me.qpn, &local, &remote)
}

/// Create and connect an RC QP pair between nodes `a` and `b`.
pub fn connect(net: &mut Network, a: usize, b: usize, o: &QpOptions) -> Result<(QpEnd, QpEnd), VerbsError> {
    let qa = create(net, a, o)?;
    let qb = create(net, b, o)?;
    connect_ends(net, &qa, &qb, o)?;
    Ok((qa, qb))
}

/// Connect two created QPs (e.g. from [`create_in`], to share a PD with other QPs).
pub fn connect_ends(net: &mut Network, qa: &QpEnd, qb: &QpEnd, o: &QpOptions) -> Result<(), VerbsError> {
    let (a, b) = (qa.node, qb.node);
    let (pa, pb) = match o.psns {
        Some(p) => p,
        None => (net.dev(a).random_psn(), net.dev(b).random_psn()),
    };
    connect_one(net, qa, qb, pa, pb, o)?;
    connect_one(net, qb, qa, pb, pa, o)
}

/// Register `len` bytes filled by `fill(i)` on `node`'s PD `pd`.
pub fn reg(
    net: &mut Network,
    node: usize,
    pd: PdHandle,
    len: usize,
    access: AccessFlags,
    fill: impl Fn(usize) -> u8,
) -> MrInfo {
    let mem: Box<[u8]> = (0..len).map(fill).collect();
    net.dev(node).reg_mr(pd, mem, access).expect("reg_mr")
}

/// Every access right.
pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// Poll every completion of `cq` on `node`.
pub fn drain_cq(net: &mut Network, node: usize, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 64];
    loop {
        let n = net.dev(node).poll_cq(cq, &mut wc).expect("poll_cq");
        out.extend_from_slice(&wc[..n]);
        if n < wc.len() {
            return out;
        }
    }
}
