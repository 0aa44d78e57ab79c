//! The device: one RoCEv2 port's verbs objects and the engine's sans-IO entry points.
//!
//! # Calling convention (after quinn-proto's `Connection`)
//!
//! * **Commands** (verbs): `alloc_pd`, `reg_mr`, `create_cq`, `create_qp`, `modify_qp`,
//!   `post_send`, `post_recv`, `poll_cq`, ... — return at once.
//! * **Input**: [`Device::handle_frame`] with one received Ethernet frame and the current
//!   time; [`Device::handle_timeout`] when the time [`Device::poll_timeout`] named has come.
//!   Spurious calls are harmless.
//! * **Output**: call [`Device::poll_transmit`] until it returns `None` after every input or
//!   command, then re-read [`Device::poll_timeout`].
//!
//! Each call does bounded work: one frame in, one frame out, the timers that expired. The
//! device never reads a clock or the OS RNG; its randomness (QPNs, memory keys) comes from
//! `DeviceConfig::seed`.

use crate::counters::Counters;
use crate::cq::Cq;
use crate::mr::{MemoryRegion, MrTable};
use crate::qp::{icrc_ok, AsyncEvent, BadIcrc, Ctx, Icrc, Qp, TimerKind};
use crate::time::Instant;
use crate::verbs::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::{BTreeSet, VecDeque};
use std::net::IpAddr;
use uroce_wire::opcode::Transport;
use uroce_wire::*;

/// Deliberate deviations from the spec that some peers need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quirks {
    /// Treat `retry_cnt = 7` as "retry forever", as Linux rxe does (`rxe_comp.c`:
    /// `if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`). The spec gives 7 that meaning for
    /// the RNR retry count only.
    pub retry_cnt_7_infinite: bool,
}

/// Device configuration.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The port's MAC address.
    pub mac: EthernetAddress,
    /// GID table. [`DeviceConfig::new`] builds it as rxe does: index 0 the link-local GID from
    /// the MAC, then one GID per IP address (IPv4 → IPv4-mapped).
    pub gids: Vec<Gid>,
    /// 802.1Q VLAN id to tag frames with (the PCP then carries the AV's service level).
    pub vlan: Option<u16>,
    /// Largest path MTU (rxe: link MTU − 80, clamped to 4096).
    pub active_mtu: Mtu,
    /// Seed of every random choice (QPNs, memory keys).
    pub seed: u64,
    /// Largest `max_rd_atomic` / `max_dest_rd_atomic` (rxe `RXE_MAX_QP_RD_ATOM` = 128).
    pub max_qp_rd_atom: u8,
    /// PSNs a requester may have outstanding (rxe `RXE_MAX_UNACKED_PSNS` = 128).
    pub send_window: u32,
    /// AckReq after this many packets without one (rxe `RXE_MAX_PKT_PER_ACK` = 64).
    pub ack_req_interval: u32,
    /// UDP checksum on transmitted frames (rxe and ConnectX send 0).
    pub udp_checksum: UdpChecksum,
    /// Verify the ICRC of received frames (off only when the I/O layer already did).
    pub check_icrc: bool,
    /// Send every frame from this UDP source port instead of the per-QP port derived from the
    /// flow label (a kernel UDP socket backend can only send from its bound port).
    pub udp_sport: Option<u16>,
    /// IPv4 identification of transmitted frames (covered by the ICRC).
    pub ipv4_ident: Ipv4Ident,
    /// TTL / hop limit of every frame. The kernel resolves a RoCE address vector's hop limit
    /// from the route (`ib_resolve_unicast_gid_dmac`), so rxe and ConnectX under Linux send 64
    /// whatever the application asked (perftest 255, ibv_rc_pingpong 1); uroce does the same.
    pub hop_limit: u8,
    /// Peer quirks.
    pub quirks: Quirks,
    /// Take the receive fast path for the bulk of a large RDMA WRITE ([`Device::handle_frame`]);
    /// off, every frame goes through the general path (same effects, slower).
    pub rx_fast_path: bool,
    /// Build the MIDDLE packets of large SENDs and WRITEs on the transmit fast path; off, every
    /// packet is built by the general path (byte for byte the same frames, slower).
    pub tx_fast_path: bool,
}

impl DeviceConfig {
    /// A configuration for a port with `mac` and IP addresses `ips`.
    pub fn new(mac: EthernetAddress, ips: &[IpAddr]) -> DeviceConfig {
        let mut gids = vec![Gid::link_local(mac)];
        gids.extend(ips.iter().map(|ip| Gid::from_ip(*ip)));
        DeviceConfig {
            mac,
            gids,
            vlan: None,
            active_mtu: Mtu::Mtu4096,
            seed: 0,
            max_qp_rd_atom: 128,
            send_window: 128,
            ack_req_interval: 64,
            udp_checksum: UdpChecksum::Zero,
            check_icrc: true,
            udp_sport: None,
            hop_limit: 64,
            ipv4_ident: Ipv4Ident::Counter,
            quirks: Quirks::default(),
            rx_fast_path: true,
            tx_fast_path: true,
        }
    }
}

/// How transmitted IPv4 frames are identified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Ipv4Ident {
    /// As the kernel does for rxe (`__ip_select_ident`): one counter per (source, destination)
    /// pair shared by every QP, +1 per frame (retransmissions included), starting at a value
    /// drawn from the device seed.
    #[default]
    Counter,
    /// Always 0: a kernel UDP socket with DF set sends 0, and the ICRC covers the field, so the
    /// kernel-UDP backend needs the engine to build exactly that.
    Zero,
}

/// The headers of every frame a QP sends, fixed when its path is set.
#[derive(Clone, Debug)]
pub(crate) struct FrameTemplate {
    /// The rendered headers, stamped into every frame.
    hdr: HeaderTemplate,
    pub(crate) peer: IpAddr,
    pub(crate) local: IpAddr,
    /// Slot of this (source, destination) pair's IPv4 identification counter in
    /// `Device::idents` (shared by the pair's QPs).
    ident: Option<u32>,
}

/// rdma-core / kernel `rdma_calc_flow_label`: a flow label from the two QPNs.
pub fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// Kernel `rdma_get_udp_sport` (used by rxe since 5.x and by mlx5): the UDP source port from
/// the flow label, or from the QPNs when there is none. Symmetric in the two QPNs.
pub fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label != 0 { flow_label } else { calc_flow_label(lqpn, rqpn) };
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

impl FrameTemplate {
    pub(crate) fn new(
        cfg: &DeviceConfig,
        av: &AddressVector,
        lqpn: u32,
        rqpn: u32,
    ) -> Result<FrameTemplate, VerbsError> {
        let sgid = *cfg.gids.get(av.sgid_index as usize).ok_or(VerbsError::InvalidArgument("sgid_index"))?;
        let (local, peer) = (sgid.to_ip(), av.dgid.to_ip());
        // The route's hop limit, not the AV's (see `DeviceConfig::hop_limit`).
        let hop = cfg.hop_limit;
        let ip = match (local, peer) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                dscp: av.traffic_class >> 2,
                ecn: Ecn::from_bits(av.traffic_class),
                ident: 0,
                dont_frag: true,
                ttl: hop,
                protocol: ipv4::PROTOCOL_UDP,
                payload_len: 0,
            }),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                dscp: av.traffic_class >> 2,
                ecn: Ecn::from_bits(av.traffic_class),
                // rxe `prepare_ipv6_hdr` writes 0; the AV's flow label only feeds the UDP source
                // port (`rdma_get_udp_sport`).
                flow_label: 0,
                hop_limit: hop,
                next_header: ipv4::PROTOCOL_UDP,
                payload_len: 0,
            }),
            _ => return Err(VerbsError::InvalidArgument("source and destination GIDs of different IP versions")),
        };
        let frame = FrameRepr {
            eth: EthernetRepr {
                src_addr: cfg.mac,
                dst_addr: av.dmac,
                vlan: cfg.vlan.map(|vid| VlanTag { pcp: av.sl & 7, dei: false, vid }),
                ethertype: EtherType::IPV4,
            },
            ip,
            udp: UdpRepr {
                src_port: cfg.udp_sport.unwrap_or_else(|| udp_sport(av.flow_label, lqpn, rqpn)),
                dst_port: ROCE_V2_PORT,
            },
            roce: RoceRepr {
                bth: BthRepr {
                    opcode: Opcode::RC_ACKNOWLEDGE,
                    solicited: false,
                    mig_req: false,
                    pad_count: 0,
                    pkey: bth::DEFAULT_PKEY,
                    fecn: false,
                    becn: false,
                    dest_qp: Qpn::new(rqpn),
                    ack_req: false,
                    psn: Psn::new(0),
                },
                ext: ExtHeaders::default(),
                payload_len: 0,
            },
        };
        let hdr = HeaderTemplate::new(&frame.eth, &frame.ip, &frame.udp, &frame.roce.bth, cfg.udp_checksum)
            .map_err(|_| VerbsError::InvalidArgument("address vector"))?;
        Ok(FrameTemplate { hdr, peer, local, ident: None })
    }

    /// Emit a whole frame of this QP: headers from the template, the BTH fields and extension
    /// headers given, the payload appended by `fill` through a [`PayloadWriter`] (copy and ICRC
    /// in one pass for large payloads); `fill` returns `false` when it could not supply it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn emit_copy(
        &self,
        buf: &mut [u8],
        idents: &mut [u16],
        opcode: Opcode,
        psn: Psn,
        ack_req: bool,
        solicited: bool,
        ext: &ExtHeaders,
        payload_len: usize,
        fill: impl FnOnce(&mut PayloadWriter<'_>) -> bool,
    ) -> Option<usize> {
        let ident = self.next_ident(idents);
        let f = PacketFields { ident, opcode, solicited, ack_req, psn };
        self.hdr.emit_copy(buf, f, ext, payload_len, fill).ok()
    }

    /// The IPv4 identification of the next frame (and count it).
    #[inline]
    fn next_ident(&self, idents: &mut [u16]) -> u16 {
        match self.ident.and_then(|i| idents.get_mut(i as usize)) {
            Some(c) => {
                let v = *c;
                *c = c.wrapping_add(1);
                v
            }
            None => 0,
        }
    }
}

/// Why a received frame was dropped (each also counts in [`Counters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxDrop {
    /// Not a RoCEv2 frame at all (not IP/UDP/4791).
    NotRoce,
    /// Malformed RoCEv2.
    Malformed(uroce_wire::Error),
    /// Bad ICRC.
    Icrc,
    /// Not addressed to a local GID.
    WrongDestination,
    /// No such QP.
    UnknownQp(u32),
    /// Source address is not the QP's connected peer.
    BadSource,
    /// P_Key mismatch.
    BadPkey,
    /// Opcode not for an RC QP / not supported.
    BadOpcode,
    /// QP state does not receive.
    QpState,
}

/// Identifies a registered memory region to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: usize,
}

/// One RoCEv2 port: verbs objects and the protocol engine.
pub struct Device {
    cfg: DeviceConfig,
    rng: ChaCha8Rng,
    pds: Vec<bool>,
    mrs: MrTable,
    cqs: Vec<Option<Cq>>,
    qps: crate::mr::U32Map<Qp>,
    ready: VecDeque<u32>,
    timers: BTreeSet<(Instant, u32, TimerKind)>,
    counters: Counters,
    events: VecDeque<AsyncEvent>,
    /// IPv4 identification counters ([`Ipv4Ident::Counter`]), one per (source, destination)
    /// pair; `ident_slots` finds a pair's slot.
    idents: Vec<u16>,
    ident_slots: std::collections::HashMap<(IpAddr, IpAddr), u32>,
    /// The GID table's addresses (what a received frame's destination must be one of).
    local_ips: Vec<IpAddr>,
}

const MAX_QP_WR: u32 = 16384; // rxe RXE_MAX_QP_WR
const MAX_INLINE: u32 = 4096;
const MAX_CQE: usize = 1 << 20;

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Device {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let local_ips = cfg.gids.iter().map(|g| g.to_ip()).collect();
        Device {
            local_ips,
            cfg,
            rng,
            pds: Vec::new(),
            mrs: MrTable::default(),
            cqs: Vec::new(),
            qps: Default::default(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            counters: Counters::default(),
            idents: Vec::new(),
            ident_slots: Default::default(),
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Counters since creation.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The next asynchronous event, if any (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// A random 24-bit PSN from the device's seeded RNG (perftest uses `lrand48() & 0xffffff`).
    pub fn random_psn(&mut self) -> u32 {
        (self.rng.next_u64() & 0xff_ffff) as u32
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdHandle {
        if let Some(i) = self.pds.iter().position(|used| !used) {
            self.pds[i] = true;
            return PdHandle(i as u32);
        }
        self.pds.push(true);
        PdHandle(self.pds.len() as u32 - 1)
    }

    fn pd_ok(&self, pd: PdHandle) -> bool {
        self.pds.get(pd.0 as usize).copied().unwrap_or(false)
    }

    /// `ibv_dealloc_pd`: fails with EBUSY while MRs or QPs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        if self.mrs.count_in_pd(pd) > 0 || self.qps.values().any(|q| q.pd == pd) {
            return Err(VerbsError::Busy("PD"));
        }
        self.pds[pd.0 as usize] = false;
        Ok(())
    }

    /// `ibv_reg_mr`: register `memory` (moved in; its address is the region's address).
    pub fn reg_mr(&mut self, pd: PdHandle, memory: Box<[u8]>, access: AccessFlags) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, memory, None, access)
    }

    /// `ibv_reg_mr_iova`: register `memory` at virtual address `iova`.
    pub fn reg_mr_iova(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, memory, Some(iova), access)
    }

    /// Register `memory` at `iova` under a chosen key (L_Key = R_Key = `key`), for replaying
    /// captured traffic and for crafting traffic at another implementation. Normal code uses
    /// [`Device::reg_mr`], whose keys are random.
    pub fn reg_mr_with_key(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: u64,
        access: AccessFlags,
        key: u32,
    ) -> Result<MrInfo, VerbsError> {
        if key == 0 || self.mrs.get(key).is_some() {
            return Err(VerbsError::Busy("memory key"));
        }
        let mut once = Some(key);
        self.reg_mr_keyed(pd, memory, Some(iova), access, &mut || once.take().unwrap_or(0))
    }

    fn reg_mr_inner(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        // Random 32-bit keys (eight candidates: a collision with a live key is vanishingly rare).
        let mut keys = [0u32; 8];
        keys.iter_mut().for_each(|k| *k = self.rng.next_u32());
        let mut it = keys.into_iter();
        self.reg_mr_keyed(pd, memory, iova, access, &mut || it.next().unwrap_or(0))
    }

    fn reg_mr_keyed(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: Option<u64>,
        access: AccessFlags,
        next_key: &mut dyn FnMut() -> u32,
    ) -> Result<MrInfo, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        // verbs: remote write and remote atomic require local write (ibv_reg_mr → EINVAL).
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE"));
        }
        if let Some(va) = iova {
            if va.checked_add(memory.len() as u64).is_none() {
                return Err(VerbsError::InvalidArgument("iova + length overflows"));
            }
        }
        let length = memory.len();
        let (key, addr) =
            self.mrs.insert(pd, memory, iova, access, next_key).ok_or(VerbsError::Exhausted("memory keys"))?;
        Ok(MrInfo { lkey: key, rkey: key, addr, length })
    }

    /// `ibv_dereg_mr`: the memory comes back.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Box<[u8]>, VerbsError> {
        self.mrs.remove(lkey).ok_or(VerbsError::NoSuchObject("MR"))
    }

    /// A registered region.
    pub fn mr(&self, lkey: u32) -> Option<&MemoryRegion> {
        self.mrs.get(lkey)
    }

    /// A registered region, writable (the application filling or checking its buffers).
    pub fn mr_mut(&mut self, lkey: u32) -> Option<&mut MemoryRegion> {
        self.mrs.get_mut(lkey)
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: usize) -> Result<CqHandle, VerbsError> {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe"));
        }
        let cq = Cq::new(cqe);
        if let Some(i) = self.cqs.iter().position(Option::is_none) {
            self.cqs[i] = Some(cq);
            return Ok(CqHandle(i as u32));
        }
        self.cqs.push(Some(cq));
        Ok(CqHandle(self.cqs.len() as u32 - 1))
    }

    /// `ibv_destroy_cq`: fails with EBUSY while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbsError> {
        if !matches!(self.cqs.get(cq.0 as usize), Some(Some(_))) {
            return Err(VerbsError::NoSuchObject("CQ"));
        }
        if self.qps.values().any(|q| q.send_cq == cq || q.recv_cq == cq) {
            return Err(VerbsError::Busy("CQ"));
        }
        self.cqs[cq.0 as usize] = None;
        Ok(())
    }

    /// `ibv_poll_cq`: move up to `out.len()` completions into `out`.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        match self.cqs.get_mut(cq.0 as usize) {
            Some(Some(q)) => Ok(q.poll(out)),
            _ => Err(VerbsError::NoSuchObject("CQ")),
        }
    }

    /// The CQ object (depth, overflow state).
    pub fn cq(&self, cq: CqHandle) -> Option<&Cq> {
        self.cqs.get(cq.0 as usize).and_then(Option::as_ref)
    }

    /// `ibv_create_qp`. QP numbers are drawn at random from the device's RNG (not
    /// sequential: a peer cannot guess another connection's QPN), above the 16 rxe reserves.
    pub fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<u32, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        if init.qp_type != QpType::Rc {
            return Err(VerbsError::Unsupported("only RC QPs today"));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if self.cq(cq).is_none() {
                return Err(VerbsError::NoSuchObject("CQ"));
            }
        }
        let c = &init.cap;
        if c.max_send_wr == 0 || c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
            return Err(VerbsError::InvalidArgument("max_send_wr / max_recv_wr"));
        }
        if c.max_send_sge as usize > crate::qp::MAX_SGE || c.max_recv_sge as usize > crate::qp::MAX_SGE {
            return Err(VerbsError::InvalidArgument("max_send_sge / max_recv_sge"));
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(VerbsError::InvalidArgument("max_inline_data"));
        }
        if self.qps.len() >= 1 << 20 {
            return Err(VerbsError::Exhausted("QP numbers"));
        }
        let qpn = loop {
            let q = (self.rng.next_u32() & 0xff_ffff).max(0x11);
            if !self.qps.contains_key(&q) {
                break q;
            }
        };
        self.qps.insert(qpn, Qp::new(Qpn::new(qpn), pd, init));
        Ok(qpn)
    }

    /// `ibv_create_qp` with a chosen QP number (replaying captures, crafting traffic).
    pub fn create_qp_with_qpn(&mut self, pd: PdHandle, init: &QpInitAttr, qpn: u32) -> Result<u32, VerbsError> {
        if qpn == 0 || qpn > 0xff_ffff || self.qps.contains_key(&qpn) {
            return Err(VerbsError::InvalidArgument("QP number in use or out of range"));
        }
        let q = self.create_qp(pd, init)?;
        let mut qp = self.qps.remove(&q).expect("just created");
        qp.qpn = Qpn::new(qpn);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::NoSuchObject("QP"))?;
        for (k, d) in qp.armed.iter().enumerate() {
            if let Some(d) = d {
                self.timers.remove(&(*d, qpn, if k == 0 { TimerKind::Retransmit } else { TimerKind::Rnr }));
            }
        }
        Ok(())
    }

    /// A QP, for inspection.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn)
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        self.qps.get(&qpn).map(Qp::attr).ok_or(VerbsError::NoSuchObject("QP"))
    }

    /// Check the attribute values present in `mask`.
    fn validate_attr(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        use QpAttrMask as M;
        let bad = |w| Err(VerbsError::InvalidArgument(w));
        if mask.contains(M::PATH_MTU) && attr.path_mtu > self.cfg.active_mtu {
            return bad("path_mtu larger than the port's active MTU");
        }
        if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
            return bad("timeout");
        }
        if mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
            return bad("retry_cnt");
        }
        if mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
            return bad("rnr_retry");
        }
        if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return bad("min_rnr_timer");
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > self.cfg.max_qp_rd_atom {
            return bad("max_rd_atomic");
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > self.cfg.max_qp_rd_atom {
            return bad("max_dest_rd_atomic");
        }
        if mask.contains(M::DEST_QPN) && attr.dest_qp_num > 0xff_ffff {
            return bad("dest_qp_num");
        }
        if mask.contains(M::RQ_PSN) && attr.rq_psn > 0xff_ffff {
            return bad("rq_psn");
        }
        if mask.contains(M::SQ_PSN) && attr.sq_psn > 0xff_ffff {
            return bad("sq_psn");
        }
        if mask.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
            return bad("pkey_index (the P_Key table holds one entry)");
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
            let av = &attr.ah_attr;
            let sgid = self.cfg.gids.get(av.sgid_index as usize).ok_or(VerbsError::InvalidArgument("sgid_index"))?;
            if sgid.is_ipv4() != av.dgid.is_ipv4() {
                return bad("source and destination GIDs of different IP versions");
            }
            if av.sl > 7 {
                return bad("sl");
            }
        }
        Ok(())
    }

    /// `ibv_modify_qp`: the state machine of [`crate::qp::state`] plus attribute checks.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        use QpAttrMask as M;
        let cur = self.qps.get(&qpn).ok_or(VerbsError::NoSuchObject("QP"))?.state;
        let to = crate::qp::state::check_transition(cur, attr, mask)?;
        self.validate_attr(attr, mask)?;
        let Device { cfg, qps, mrs, cqs, counters, events, idents, .. } = self;
        let qp = qps.get_mut(&qpn).expect("checked");
        let mut ctx = Ctx { now: Instant::ZERO, cfg, mrs, cqs, counters, events, idents };
        if to == QpState::Reset {
            qp.reset();
            self.sync_timers(qpn);
            return Ok(());
        }
        if to == QpState::Err {
            qp.enter_error(&mut ctx, false);
            self.sync_timers(qpn);
            return Ok(());
        }
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
            qp.req.retry_left = attr.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            qp.req.rnr_left = attr.rnr_retry;
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
            let p = Psn::new(attr.sq_psn);
            qp.req.una = p;
            qp.req.high_psn = p;
        }
        if mask.intersects(M::AV | M::DEST_QPN) || (to == QpState::Rtr && qp.template.is_none()) {
            let mut tpl = FrameTemplate::new(cfg, &qp.attr.ah_attr, qpn, qp.attr.dest_qp_num)?;
            if cfg.ipv4_ident == Ipv4Ident::Counter && tpl.peer.is_ipv4() {
                let key = (tpl.local, tpl.peer);
                let slot = match self.ident_slots.get(&key) {
                    Some(&i) => i,
                    None => {
                        // A start drawn from the seed and the pair, like the kernel's hashed bucket.
                        let mut h = cfg.seed ^ 0x9e37_79b9_7f4a_7c15;
                        for b in format!("{}{}", tpl.local, tpl.peer).bytes() {
                            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
                        }
                        self.idents.push((h >> 32) as u16);
                        let i = (self.idents.len() - 1) as u32;
                        self.ident_slots.insert(key, i);
                        i
                    }
                };
                tpl.ident = Some(slot);
            }
            qp.template = Some(tpl);
        }
        qp.state = to;
        self.mark_ready(qpn);
        Ok(())
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let Device { cfg, qps, mrs, cqs, counters, events, idents, .. } = self;
        let qp = qps.get_mut(&qpn).ok_or(VerbsError::NoSuchObject("QP"))?;
        let mut ctx = Ctx { now: Instant::ZERO, cfg, mrs, cqs, counters, events, idents };
        qp.post_send(&mut ctx, wr)?;
        self.mark_ready(qpn);
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let Device { cfg, qps, mrs, cqs, counters, events, idents, .. } = self;
        let qp = qps.get_mut(&qpn).ok_or(VerbsError::NoSuchObject("QP"))?;
        let mut ctx = Ctx { now: Instant::ZERO, cfg, mrs, cqs, counters, events, idents };
        qp.post_recv(&mut ctx, wr)
    }

    fn mark_ready(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            mark_qp_ready(&mut self.ready, qp);
        }
    }

    /// Bring the device's timer set in line with what the QP wants.
    fn sync_timers(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            sync_qp_timers(&mut self.timers, qp);
        }
    }

    /// Switch the receive fast path on or off ([`DeviceConfig::rx_fast_path`]), e.g. to hold
    /// it to the general path in a test.
    pub fn set_rx_fast_path(&mut self, on: bool) {
        self.cfg.rx_fast_path = on;
    }

    /// Switch the transmit fast path on or off ([`DeviceConfig::tx_fast_path`]).
    pub fn set_tx_fast_path(&mut self, on: bool) {
        self.cfg.tx_fast_path = on;
    }

    /// Feed one received Ethernet frame.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Result<(), RxDrop> {
        if self.cfg.rx_fast_path {
            if let Some(b) = parse_bare_ipv4(frame) {
                if self.fast_write_middle(&b) {
                    return Ok(());
                }
            }
        }
        match &parse_frame(frame) {
            Ok(p) => {
                // The ICRC after the headers (`parse_frame_verified`'s order), before anything
                // acts on the frame; an RDMA WRITE's is checked by the responder just before
                // placement, still before any effect ([`Icrc`]).
                let icrc = if !self.cfg.check_icrc {
                    Icrc::Checked
                } else if defers_icrc(p) {
                    Icrc::Pending
                } else if icrc_ok(p) {
                    Icrc::Checked
                } else {
                    self.counters.icrc_err += 1;
                    return Err(RxDrop::Icrc);
                };
                self.deliver(now, p, icrc)
            }
            Err(e) if e.is_not_roce() => Err(RxDrop::NotRoce),
            Err(e) => {
                self.counters.malformed_pkts += 1;
                Err(RxDrop::Malformed(*e))
            }
        }
    }

    /// The receive fast path ("header prediction", as TCP's): an RDMA WRITE MIDDLE packet, the
    /// bulk of a large transfer, at the expected PSN of a WRITE in progress on a receiving RC
    /// QP, from the QP's peer to its address, with the default P_Key and a right ICRC. It is
    /// placed with exactly the effects the general path (`deliver` → `handle_request` →
    /// `exec_write`) would have, without building a [`ParsedFrame`]; `false`, with no effect at
    /// all, for anything else, which the general path then handles (drops and NAKs included).
    /// `tests/rx_fast_path.rs` holds the two paths to the same results on mutated traffic.
    fn fast_write_middle(&mut self, b: &BareFrame<'_>) -> bool {
        // As in `deliver`: the P_Key table holds the default key (IBTA §10.9.3).
        if b.bth.opcode != Opcode::RC_RDMA_WRITE_MIDDLE || b.bth.pkey & 0x7fff != 0x7fff {
            return false;
        }
        let Device { cfg, qps, mrs, counters, timers, ready, .. } = self;
        let Some(qp) = qps.get_mut(&b.bth.dest_qp.value()) else { return false };
        // The QP's path (rxe `check_addr`); its local address is one of the GID table's, so
        // `deliver`'s destination check holds too.
        match &qp.template {
            Some(t) if t.peer == IpAddr::V4(b.src) && t.local == IpAddr::V4(b.dst) => {}
            _ => return false,
        }
        if !qp.place_write_middle(mrs, counters, b, cfg.check_icrc) {
            return false;
        }
        sync_qp_timers(timers, qp);
        mark_qp_ready(ready, qp);
        counters.rcvd_pkts += 1;
        counters.rx_fast_path_pkts += 1;
        true
    }

    /// Feed one received frame that is already parsed and whose ICRC the caller verified (or
    /// chose not to: an I/O layer that reconstructs headers a UDP socket does not deliver).
    pub fn handle_parsed(&mut self, now: Instant, p: &ParsedFrame<'_>) -> Result<(), RxDrop> {
        self.deliver(now, p, Icrc::Checked)
    }

    fn deliver(&mut self, now: Instant, p: &ParsedFrame<'_>, icrc: Icrc) -> Result<(), RxDrop> {
        let dst = p.ip.dst_addr();
        if !self.local_ips.contains(&dst) {
            return drop_frame(&mut self.counters, p, icrc, RxDrop::WrongDestination);
        }
        let bth = &p.roce.bth;
        let Some(info) = bth.opcode.info() else {
            return drop_frame(&mut self.counters, p, icrc, RxDrop::BadOpcode);
        };
        match info.transport {
            Transport::Rc => {}
            Transport::Cnp => {
                self.counters.rcvd_cnp += 1;
                return Ok(());
            }
            _ => return drop_frame(&mut self.counters, p, icrc, RxDrop::BadOpcode),
        }
        // P_Key: the table holds the default key; limited (0x7fff) and full (0xffff)
        // membership both match it (IBTA §10.9.3).
        if bth.pkey & 0x7fff != 0x7fff {
            return drop_frame(&mut self.counters, p, icrc, RxDrop::BadPkey);
        }
        let qpn = bth.dest_qp.value();
        let Device { cfg, qps, mrs, cqs, counters, events, idents, timers, ready, .. } = self;
        let Some(qp) = qps.get_mut(&qpn) else {
            return drop_frame(counters, p, icrc, RxDrop::UnknownQp(qpn));
        };
        // Only the connected peer may talk to a QP: frames whose source or destination address
        // is not the QP's path are dropped (rxe `check_addr`).
        match &qp.template {
            Some(t) if t.peer == p.ip.src_addr() && t.local == dst => {}
            Some(_) => return drop_frame(counters, p, icrc, RxDrop::BadSource),
            None => return drop_frame(counters, p, icrc, RxDrop::QpState),
        }
        let mut ctx = Ctx { now, cfg, mrs, cqs, counters, events, idents };
        let r = if info.is_request() {
            qp.handle_request(&mut ctx, p, icrc)
        } else if icrc == Icrc::Checked || icrc_ok(p) {
            qp.handle_response(&mut ctx, p);
            Ok(())
        } else {
            Err(BadIcrc)
        };
        sync_qp_timers(timers, qp);
        mark_qp_ready(ready, qp);
        match r {
            Ok(()) => {
                counters.rcvd_pkts += 1;
                Ok(())
            }
            Err(BadIcrc) => {
                counters.icrc_err += 1;
                Err(RxDrop::Icrc)
            }
        }
    }

    /// Fire every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(when, qpn, kind)) = self.timers.first() {
            if when > now {
                break;
            }
            self.timers.pop_first();
            let Device { cfg, qps, mrs, cqs, counters, events, idents, .. } = self;
            let Some(qp) = qps.get_mut(&qpn) else { continue };
            let idx = kind as usize;
            if qp.armed[idx] != Some(when) {
                continue;
            }
            qp.armed[idx] = None;
            if qp.deadline(kind) != Some(when) {
                continue;
            }
            let mut ctx = Ctx { now, cfg, mrs, cqs, counters, events, idents };
            match kind {
                TimerKind::Retransmit => qp.on_retransmit_timeout(&mut ctx),
                TimerKind::Rnr => qp.on_rnr_timeout(&mut ctx),
            }
            self.sync_timers(qpn);
            self.mark_ready(qpn);
        }
    }

    /// When [`Device::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|t| t.0)
    }

    /// The largest frame this device can send: the active MTU of payload plus the largest
    /// header stack (802.1Q, IPv6, UDP, BTH, RETH + ImmDt or AtomicETH), pad and ICRC.
    pub fn max_frame_len(&self) -> usize {
        self.cfg.active_mtu.bytes() + 18 + 40 + 8 + 12 + 28 + 3 + 4
    }

    /// Write the next frame to send into `buf`, which must hold [`Device::max_frame_len`]
    /// bytes (a smaller buffer gets nothing). Responses go before new requests; QPs take turns.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < self.max_frame_len() {
            tracing::warn!(have = buf.len(), need = self.max_frame_len(), "poll_transmit: buffer too small");
            return None;
        }
        let n = self.ready.len();
        for _ in 0..n {
            let qpn = self.ready.pop_front()?;
            let Device { cfg, qps, mrs, cqs, counters, events, idents, timers, ready, .. } = self;
            let Some(qp) = qps.get_mut(&qpn) else { continue };
            qp.in_ready = false;
            let mut ctx = Ctx { now, cfg, mrs, cqs, counters, events, idents };
            let out = qp.poll_response(&mut ctx, buf).or_else(|| qp.poll_request(&mut ctx, buf));
            sync_qp_timers(timers, qp);
            if let Some(len) = out {
                mark_qp_ready(ready, qp);
                return Some(len);
            }
        }
        None
    }
}

/// Whether `p`'s ICRC is left to the responder ([`Icrc::Pending`]): RC RDMA WRITE packets with
/// a payload, whose destination the responder can request from memory before the check.
#[inline]
fn defers_icrc(p: &ParsedFrame<'_>) -> bool {
    p.roce.payload_len > 0
        && p.roce.bth.opcode.info().is_some_and(|i| {
            i.transport == Transport::Rc && matches!(i.operation, Operation::Write | Operation::WriteWithImm)
        })
}

/// Drop a frame for `why`, counted; a frame whose ICRC was still pending is checked first,
/// and if it is wrong that is the reason (a corrupt frame is an ICRC error and nothing else).
fn drop_frame(counters: &mut Counters, p: &ParsedFrame<'_>, icrc: Icrc, why: RxDrop) -> Result<(), RxDrop> {
    let why = if icrc == Icrc::Pending && !icrc_ok(p) { RxDrop::Icrc } else { why };
    let c = match why {
        RxDrop::Icrc => &mut counters.icrc_err,
        RxDrop::WrongDestination => &mut counters.dropped_wrong_dst,
        RxDrop::UnknownQp(_) => &mut counters.dropped_unknown_qp,
        RxDrop::BadSource => &mut counters.dropped_bad_src,
        RxDrop::BadPkey => &mut counters.dropped_bad_pkey,
        RxDrop::BadOpcode => &mut counters.dropped_bad_opcode,
        RxDrop::QpState => &mut counters.dropped_qp_state,
        RxDrop::Malformed(_) => &mut counters.malformed_pkts,
        RxDrop::NotRoce => return Err(why),
    };
    *c += 1;
    Err(why)
}

/// Queue `qp` for [`Device::poll_transmit`] if it has something to send and is not queued.
#[inline]
fn mark_qp_ready(ready: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.in_ready && qp.has_output() {
        qp.in_ready = true;
        ready.push_back(qp.qpn.value());
    }
}

/// Bring the device's timer set in line with what `qp` wants (no work when nothing changed,
/// the common case on the per-packet path).
#[inline]
fn sync_qp_timers(timers: &mut BTreeSet<(Instant, u32, TimerKind)>, qp: &mut Qp) {
    let qpn = qp.qpn.value();
    for (i, kind) in [TimerKind::Retransmit, TimerKind::Rnr].into_iter().enumerate() {
        let want = qp.deadline(kind);
        if qp.armed[i] != want {
            if let Some(old) = qp.armed[i] {
                timers.remove(&(old, qpn, kind));
            }
            if let Some(new) = want {
                timers.insert((new, qpn, kind));
            }
            qp.armed[i] = want;
        }
    }
}
