//! A QP's path: the headers of every frame it sends (`FrameTemplate`; the UDP source port
//! from [`crate::formulas::rc_udp_sport`]), and the IPv4 identification counters shared by the
//! QPs of one (source, destination) pair.

use crate::config::{DeviceConfig, Guards, Ipv4Ident};
use crate::formulas::{rc_udp_sport, ud_udp_sport};
use crate::verbs::{AddressVector, VerbsError};
use std::net::IpAddr;
use uroce_wire::*;

/// The headers of every frame a QP sends, fixed when its path is set.
#[derive(Clone, Debug)]
pub(crate) struct FrameTemplate {
    /// The rendered headers, stamped into every frame.
    hdr: HeaderTemplate,
    pub(crate) peer: IpAddr,
    pub(crate) local: IpAddr,
    /// The peer is one of this device's own GIDs: the device delivers the QP's frames to
    /// itself instead of transmitting them (rxe's `rxe_xmit_packet` → `rxe_loopback`).
    pub(crate) loopback: bool,
    /// The source MAC of the peer's frames: the one this QP sends to (the peer's, or the next
    /// hop's), or this port's own when the peer is local.
    peer_mac: EthernetAddress,
    /// The peer's UDP source port, once a frame from it was accepted ([`Guards::udp_sport`]).
    peer_sport: Option<u16>,
    /// Slot of this (source, destination) pair's IPv4 identification counter in [`Idents`]
    /// (shared by the pair's QPs).
    ident: Option<u32>,
}

/// The IPv4 identification counters ([`Ipv4Ident::Counter`]), one per (source, destination)
/// pair, shared by the pair's QPs as the kernel's `ip_idents` buckets are.
#[derive(Debug, Default)]
pub(crate) struct Idents {
    counters: Vec<u16>,
    slots: std::collections::HashMap<(IpAddr, IpAddr), u32>,
}

impl Idents {
    /// The slot of the pair `(local, peer)`, created on first use with a start drawn from the
    /// device seed and the pair (like the kernel's hashed bucket).
    fn slot(&mut self, seed: u64, local: IpAddr, peer: IpAddr) -> u32 {
        if let Some(&i) = self.slots.get(&(local, peer)) {
            return i;
        }
        let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
        for b in format!("{local}{peer}").bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        self.counters.push((h >> 32) as u16);
        let i = (self.counters.len() - 1) as u32;
        self.slots.insert((local, peer), i);
        i
    }
}

/// The headers of QP `lqpn`'s frames to `rqpn` along `av` (per-packet fields left zero), and
/// the path's local and peer addresses: the one place a QP's path becomes headers.
fn path_repr(
    cfg: &DeviceConfig,
    av: &AddressVector,
    lqpn: u32,
    rqpn: u32,
) -> Result<(FrameRepr, IpAddr, IpAddr), VerbsError> {
    let sgid = *cfg.gids.get(av.sgid_index as usize).ok_or(VerbsError::InvalidArgument("sgid_index"))?;
    let (local, peer) = (sgid.to_ip(), av.dgid.to_ip());
    // The route's hop limit, not the AV's (see `DeviceConfig::hop_limit`).
    let hop = cfg.hop_limit;
    let dscp = av.traffic_class >> 2;
    // ECN-capable when the device's congestion control says so, or the AV's traffic class
    // (perftest `--tclass`) already asks for it; rxe sends the traffic class unchanged.
    let ecn = match Ecn::from_bits(av.traffic_class) {
        Ecn::NotEct if cfg.cc.ecn => Ecn::Ect0,
        e => e,
    };
    let ip = match (local, peer) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            dscp,
            ecn,
            ident: 0,
            dont_frag: true,
            ttl: hop,
            protocol: ipv4::PROTOCOL_UDP,
            payload_len: 0,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            dscp,
            ecn,
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
            src_port: cfg.udp_sport.unwrap_or_else(|| rc_udp_sport(av.flow_label, lqpn, rqpn)),
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
    Ok((frame, local, peer))
}

/// Emit a UD datagram of QP `lqpn` to `rqpn` along `av` into `buf` (per packet: a UD QP has
/// no fixed path): the path's headers as a connected QP's (`path_repr`), the UD QP's UDP
/// source port ([`ud_udp_sport`]), the pair's IPv4 identification counter, the BTH fields and
/// extension headers given, `payload_len` bytes from `fill` (`false`: it could not supply
/// them). Returns the frame length and whether the destination is one of this device's GIDs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_datagram(
    cfg: &DeviceConfig,
    idents: &mut Idents,
    av: &AddressVector,
    (lqpn, rqpn): (u32, u32),
    (opcode, psn, solicited): (Opcode, Psn, bool),
    ext: &ExtHeaders,
    payload_len: usize,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> bool,
) -> Option<(usize, bool)> {
    let (mut frame, local, peer) = path_repr(cfg, av, lqpn, rqpn).ok()?;
    frame.udp.src_port = cfg.udp_sport.unwrap_or_else(|| ud_udp_sport(lqpn));
    if let IpRepr::V4(v4) = &mut frame.ip {
        if cfg.ipv4_ident == Ipv4Ident::Counter {
            let i = idents.slot(cfg.seed, local, peer) as usize;
            let c = &mut idents.counters[i];
            v4.ident = *c;
            *c = c.wrapping_add(1);
        }
    }
    let bth = &mut frame.roce.bth;
    (bth.opcode, bth.psn, bth.solicited) = (opcode, psn, solicited);
    bth.ack_req = crate::formulas::datagram_ack_req(lqpn);
    bth.pad_count = uroce_wire::packet::pad_for(payload_len);
    frame.roce.ext = *ext;
    frame.roce.payload_len = payload_len;
    let mut ok = true;
    let len = frame.emit(buf, cfg.udp_checksum, |dst| ok = fill(dst)).ok()?;
    let looped = cfg.delivers_locally(peer, rqpn);
    ok.then_some((len, looped))
}

/// Where a received frame says it comes from, as [`FrameTemplate::check_peer`] judges it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameSource {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The Ethernet source (`None`: the frame came without its Ethernet header).
    pub mac: Option<EthernetAddress>,
    pub sport: u16,
}

/// Why [`FrameTemplate::check_peer`] says a frame is not from the QP's peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotPeer {
    /// Another source or destination address.
    Address,
    /// The peer's address from another MAC.
    Mac,
    /// The peer's address from another UDP source port.
    Port,
}

impl FrameTemplate {
    /// The template of QP `lqpn` talking to `rqpn` along `av`; an IPv4 path takes its pair's
    /// identification counter from `idents`.
    pub(crate) fn new(
        cfg: &DeviceConfig,
        idents: &mut Idents,
        av: &AddressVector,
        lqpn: u32,
        rqpn: u32,
    ) -> Result<FrameTemplate, VerbsError> {
        let (frame, local, peer) = path_repr(cfg, av, lqpn, rqpn)?;
        let hdr = HeaderTemplate::new(&frame.eth, &frame.ip, &frame.udp, &frame.roce.bth, cfg.udp_checksum)
            .map_err(|_| VerbsError::InvalidArgument("address vector"))?;
        let ident =
            (cfg.ipv4_ident == Ipv4Ident::Counter && peer.is_ipv4()).then(|| idents.slot(cfg.seed, local, peer));
        let loopback = cfg.delivers_locally(peer, rqpn);
        let peer_mac = if loopback { frame.eth.src_addr } else { frame.eth.dst_addr };
        Ok(FrameTemplate { hdr, peer, local, loopback, peer_mac, peer_sport: None, ident })
    }

    /// Emit a CNP from QP `lqpn` to its peer `rqpn` along `av` (the QP's path, as
    /// [`FrameTemplate::new`] built it) into `buf`: ConnectX's layout (`uroce_wire::cnp`), with
    /// the NP's DSCP and 802.1p priority, ECT(0), the path's IPv4 identification counter.
    /// CNPs are rare (at most one per `min_time_between_cnps` per QP), so the frame is built
    /// by the general emitter rather than a template of its own.
    pub(crate) fn emit_cnp(
        &self,
        cfg: &DeviceConfig,
        idents: &mut Idents,
        np: &crate::cc::NpConfig,
        av: &AddressVector,
        (lqpn, rqpn): (u32, u32),
        buf: &mut [u8],
    ) -> Option<usize> {
        let (mut frame, _, _) = path_repr(cfg, av, lqpn, rqpn).ok()?;
        let ident = self.next_ident(idents);
        match &mut frame.ip {
            IpRepr::V4(v4) => {
                (v4.dscp, v4.ecn, v4.ident) = (np.cnp_dscp, Ecn::Ect0, ident);
            }
            IpRepr::V6(v6) => (v6.dscp, v6.ecn) = (np.cnp_dscp, Ecn::Ect0),
        }
        if let Some(tag) = &mut frame.eth.vlan {
            tag.pcp = np.cnp_802p_prio & 7;
        }
        frame.roce = uroce_wire::cnp::cnp(Qpn::new(rqpn));
        frame.emit(buf, cfg.udp_checksum, |_| {}).ok()
    }

    /// Whether a frame `from` comes from this QP's peer along its path: its addresses (rxe
    /// `check_addr`: only the connected peer may talk to a QP), and as `guards` ask, the MAC
    /// this QP sends to and the UDP source port the peer has used. A CNP is not held to the
    /// port (ConnectX varies its CNPs' source ports). Both receive paths ask here.
    #[inline]
    pub(crate) fn check_peer(&self, guards: &Guards, from: &FrameSource, cnp: bool) -> Result<(), NotPeer> {
        if self.peer != from.src || self.local != from.dst {
            return Err(NotPeer::Address);
        }
        if guards.src_mac && from.mac.is_some_and(|m| m != self.peer_mac) {
            return Err(NotPeer::Mac);
        }
        if guards.udp_sport && !cnp && self.peer_sport.is_some_and(|p| p != from.sport) {
            return Err(NotPeer::Port);
        }
        Ok(())
    }

    /// A frame from the peer (not a CNP) was accepted: from now on its source port is the
    /// peer's ([`Guards::udp_sport`]).
    #[inline]
    pub(crate) fn heard(&mut self, sport: u16) {
        if self.peer_sport.is_none() {
            self.peer_sport = Some(sport);
        }
    }

    /// Emit a whole frame of this QP: headers from the template, the BTH fields and extension
    /// headers given, the payload appended by `fill` through a [`PayloadWriter`] (copy and ICRC
    /// in one pass for large payloads); `fill` returns `false` when it could not supply it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn emit_copy(
        &self,
        buf: &mut [u8],
        idents: &mut Idents,
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
    fn next_ident(&self, idents: &mut Idents) -> u16 {
        match self.ident.and_then(|i| idents.counters.get_mut(i as usize)) {
            Some(c) => {
                let v = *c;
                *c = c.wrapping_add(1);
                v
            }
            None => 0,
        }
    }
}
