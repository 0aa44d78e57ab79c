//! Device configuration: the port's addresses, limits, wire choices and peer quirks.

use crate::verbs::{Gid, Mtu};
use std::net::IpAddr;
use uroce_wire::{EthernetAddress, UdpChecksum};

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
    /// Take the receive fast path for RDMA WRITE packets without immediate data (every packet
    /// of a large WRITE, every small one: `Device::handle_frame`); off, every frame goes
    /// through the general path (same effects, slower).
    pub rx_fast_path: bool,
    /// Build the MIDDLE packets of large SENDs and WRITEs on the transmit fast path; off, every
    /// packet is built by the general path (byte for byte the same frames, slower).
    pub tx_fast_path: bool,
    /// Which QPNs this device hands out: `qpn % count == index`. A sharded runtime runs one
    /// device per shard and steers each frame to the shard `dest QPN % count` (the XDP
    /// program's `ProgramConfig::shards`), so a shard must own exactly its residue class.
    pub qpn_shard: QpnShard,
    /// Only QPNs whose top eight bits are this block (`qpn >> 16`): the share of the QPN space
    /// one of several processes on one interface owns, which the kernel's steering program
    /// reads to choose the process (`uroce_xdp_prog::reuseport`). `None`: the whole space.
    pub qpn_block: Option<u8>,
    /// A frame to the device's own address reaches another process on the interface through
    /// the wire ([`Self::delivers_locally`]): true over kernel UDP, whose stack loops it back
    /// to the steering; an AF_XDP frame leaves by the NIC and does not come back.
    pub own_address_via_wire: bool,
    /// Congestion control: ECN marking, CNPs, the reaction point (default: all off, as rxe).
    pub cc: crate::cc::CongestionConfig,
    /// What a connected QP checks beyond what rxe checks, against frames an attacker on the
    /// segment forges (default: all on).
    pub guards: Guards,
}

/// Checks against forged frames beyond rxe's (which checks a connected QP's source and
/// destination addresses only, `check_addr`): what an attacker who learned a connection's
/// addresses, QPNs, PSNs and keys (ReDMArk, USENIX Security '21: sniffed from the TCP exchange
/// perftest uses) can still not do. Each failure drops the frame and counts; none changes
/// what a legitimate peer sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guards {
    /// A connected QP's frames must come from the MAC it sends to (the peer's, or the router's
    /// on a routed path): `dropped_bad_src_mac`. Off where the I/O layer sees no Ethernet
    /// header (a kernel UDP socket: the backend writes a placeholder).
    pub src_mac: bool,
    /// A connected QP learns its peer's UDP source port from the first frame that moves it
    /// forward (an executed request, an acknowledgement) and drops frames from any other port (`dropped_bad_src_port`): rxe and uroce send all of a
    /// QP's packets from one port (`rdma_get_udp_sport` of its flow label and QPNs; pinned on
    /// rxe's captures by rxe-compat's `udp_source_port_is_rdma_get_udp_sport`). CNPs are
    /// exempt (ConnectX varies theirs).
    pub udp_sport: bool,
    /// An error NAK (remote access, invalid request, remote operational error: the ones that
    /// end a QP) must carry the MSN the responder has when it fails that request — the count
    /// of messages it has completed (rxe `execute`; a READ counts once accepted, C9-148) — or
    /// it is dropped (`dropped_bad_nak_msn`). The PSN alone lets a blind attacker kill a requester once per
    /// `2^24 / outstanding PSNs` frames; the MSN multiplies that by up to 2^24.
    pub nak_msn: bool,
    /// Duplicate READs (§9.7.5.1.3) re-executed per READ beyond the first
    /// [`READ_REPLAYS_FREE`] only once per this interval (`dup_read_limited` counts the ones
    /// dropped): a requester re-requests a READ once per retry, so a flood of replayed READ
    /// requests cannot make the responder send a READ's bytes again and again toward its peer.
    /// `None`: every duplicate is executed again, as rxe does.
    pub read_replay_interval: Option<core::time::Duration>,
}

/// Re-executions of one READ a responder grants before [`Guards::read_replay_interval`]
/// applies: one per transport retry a requester can make without progress (`retry_cnt` ≤ 7).
pub const READ_REPLAYS_FREE: u32 = 7;

impl Default for Guards {
    fn default() -> Self {
        Guards {
            src_mac: true,
            udp_sport: true,
            nak_msn: true,
            read_replay_interval: Some(core::time::Duration::from_millis(10)),
        }
    }
}

impl Guards {
    /// Every guard off: exactly rxe's checks.
    pub const NONE: Guards = Guards { src_mac: false, udp_sport: false, nak_msn: false, read_replay_interval: None };
}

/// A residue class of QP numbers (see [`DeviceConfig::qpn_shard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpnShard {
    /// This shard.
    pub index: u32,
    /// Shards in all (1: every QPN).
    pub count: u32,
}

impl Default for QpnShard {
    fn default() -> Self {
        QpnShard { index: 0, count: 1 }
    }
}

impl QpnShard {
    /// The shard of `count` that owns `qpn`: the one placement rule, used by the engine's
    /// receive check, the runtime's relay and its post routing (the XDP program's
    /// `dest_qpn % N` states it again in BPF, held to this by `tests/runtime_shards.rs`).
    #[inline]
    pub fn index_of(qpn: u32, count: u32) -> u32 {
        if count <= 1 {
            0
        } else {
            qpn % count
        }
    }

    /// Whether `qpn` belongs to this shard.
    #[inline]
    pub fn owns(&self, qpn: u32) -> bool {
        // Unsharded (every frame's check): no division.
        self.count <= 1 || Self::index_of(qpn, self.count) == self.index
    }
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
            qpn_shard: QpnShard::default(),
            qpn_block: None,
            own_address_via_wire: false,
            cc: crate::cc::CongestionConfig::default(),
            guards: Guards::default(),
        }
    }

    /// Whether a frame to QP `rqpn` at `peer` is this device's to receive (delivered to itself
    /// instead of sent: rxe's `rxe_xmit_packet` → `rxe_loopback`): one of its own GIDs, and —
    /// when the device is one of several processes on the interface ([`Self::qpn_block`]) and
    /// the wire brings such frames back ([`Self::own_address_via_wire`]) — a QP of its own
    /// block. Another process's QP on the same address (QP1 included, block 0) then gets the
    /// frame through the kernel, whose steering finds its owner.
    pub fn delivers_locally(&self, peer: IpAddr, rqpn: u32) -> bool {
        let own_block = || match self.qpn_block {
            Some(b) if self.own_address_via_wire => (rqpn >> 16) & 0xff == u32::from(b),
            _ => true,
        };
        self.gids.iter().any(|g| g.to_ip() == peer) && own_block()
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
