//! Receive routing: a frame in, parsed and checked (RoCEv2, ICRC, destination, opcode, P_Key,
//! QP, source), then handed to its QP's requester side (requests) or completer (responses);
//! and the receive fast path for the bulk of a large RDMA WRITE.

use super::Device;
use crate::counters::Counters;
use crate::path::{FrameSource, NotPeer};
use crate::qp::congestion::CnpOutcome;
use crate::qp::{icrc_ok, BadIcrc, Icrc};
use crate::time::Instant;
use crate::verbs::QpType;
use std::net::IpAddr;
use uroce_wire::opcode::{Operation, Transport};
use uroce_wire::*;

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
    /// The peer's address, but not the MAC the QP sends to ([`crate::Guards::src_mac`]).
    BadSourceMac,
    /// The peer's address, but not the UDP source port it uses ([`crate::Guards::udp_sport`]).
    BadSourcePort,
    /// P_Key mismatch.
    BadPkey,
    /// Opcode not for an RC QP / not supported.
    BadOpcode,
    /// QP state does not receive.
    QpState,
    /// The destination QP is another shard's (`DeviceConfig::qpn_shard`): nothing of the frame
    /// was checked here (not even its ICRC) and nothing changed; the I/O layer may hand it to
    /// the shard that owns the QP, whose engine checks it as any frame
    /// (`uroce_io::runtime::ShardedRuntime`'s relay). Counted in `dropped_wrong_shard`.
    OtherShard(u32),
}

impl Device {
    /// Feed one received Ethernet frame.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Result<(), RxDrop> {
        if self.cfg.rx_fast_path {
            if let Some(b) = parse_bare_ipv4(frame) {
                if self.fast_write(now, &b) {
                    return Ok(());
                }
            }
        }
        match &parse_frame(frame) {
            Ok(p) => {
                self.owned(p)?;
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

    /// The receive fast path ("header prediction", as TCP's): an RDMA WRITE packet without
    /// immediate data (FIRST, MIDDLE, LAST or ONLY: the bulk of a large transfer, and every
    /// small WRITE), at the expected PSN of a receiving RC QP, from the QP's peer to its
    /// address, with the default P_Key and a right ICRC. It is placed with exactly the effects
    /// the general path (`deliver` → `handle_request` → `exec_write`) would have, without
    /// building a [`ParsedFrame`]; `false`, with no effect at all, for anything else, which the
    /// general path then handles (drops and NAKs included). `tests/rx_fast_path.rs` holds the
    /// two paths to the same results on mutated traffic.
    fn fast_write(&mut self, now: Instant, b: &BareFrame<'_>) -> bool {
        // A CE-marked frame goes the general way, where the notification point sees it.
        let rc = b.bth.opcode.info().is_some_and(|i| i.transport == Transport::Rc);
        if !rc || !pkey_matches(b.bth.pkey) || b.ecn() == Ecn::Ce {
            return false;
        }
        let placed = self.lend_qp(b.bth.dest_qp.value(), now, |qp, ctx, ready| {
            if !transport_fits(qp.qp_type, Transport::Rc) {
                return false;
            }
            // From the QP's peer along its path; its local address is one of the GID table's,
            // so `deliver`'s destination check holds too.
            let from =
                FrameSource { src: IpAddr::V4(b.src), dst: IpAddr::V4(b.dst), mac: Some(b.src_mac), sport: b.src_port };
            if qp.template.as_ref().is_none_or(|t| t.check_peer(&ctx.cfg.guards, &from, false).is_err()) {
                return false;
            }
            if !qp.place_write(ctx.mrs, ctx.counters, b, ctx.cfg.check_icrc) {
                return false;
            }
            // The frame made progress (the next PSN): it teaches the peer's port, as in
            // `deliver`.
            if let Some(t) = qp.template.as_mut() {
                t.heard(b.src_port);
            }
            super::schedule::mark_ready(ready, qp);
            true
        });
        if placed != Some(true) {
            return false;
        }
        self.counters.rcvd_pkts += 1;
        self.counters.rcvd_in_seq_requests += 1;
        self.counters.rx_fast_path_pkts += 1;
        true
    }

    /// Feed one received frame that is already parsed and whose ICRC the caller verified (or
    /// chose not to: an I/O layer that reconstructs headers a UDP socket does not deliver).
    pub fn handle_parsed(&mut self, now: Instant, p: &ParsedFrame<'_>) -> Result<(), RxDrop> {
        self.owned(p)?;
        self.deliver(now, p, Icrc::Checked)
    }

    /// The shard rule: a frame whose destination QPN is outside this device's class
    /// ([`crate::QpnShard::owns`]) is another shard's, handed back before any check of its own
    /// (the owner checks it all, ICRC included, so a relayed frame costs one ICRC, not two).
    #[inline]
    fn owned(&mut self, p: &ParsedFrame<'_>) -> Result<(), RxDrop> {
        let qpn = p.roce.bth.dest_qp.value();
        if self.cfg.qpn_shard.owns(qpn) {
            return Ok(());
        }
        self.counters.dropped_wrong_shard += 1;
        Err(RxDrop::OtherShard(qpn))
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
        let cnp = match info.transport {
            Transport::Rc | Transport::Uc | Transport::Ud => false,
            Transport::Cnp => {
                self.counters.rcvd_cnp += 1;
                true
            }
        };
        if !pkey_matches(bth.pkey) {
            return drop_frame(&mut self.counters, p, icrc, RxDrop::BadPkey);
        }
        let qpn = bth.dest_qp.value();
        let r = self.with_qp(qpn, now, |qp, ctx| {
            let ty = qp.qp_type;
            if !transport_fits(ty, info.transport) {
                return Err(RxDrop::BadOpcode);
            }
            // A connected QP hears only its peer, along its path (rxe `check_addr`, and the
            // guards); a UD QP anyone who knows its number and Q_Key.
            if ty.is_connected() {
                let from = FrameSource {
                    src: p.ip.src_addr(),
                    dst,
                    mac: p.eth.as_ref().map(|e| e.src_addr),
                    sport: p.udp.src_port,
                };
                match &qp.template {
                    Some(t) => t.check_peer(&ctx.cfg.guards, &from, cnp).map_err(|e| match e {
                        NotPeer::Address => RxDrop::BadSource,
                        NotPeer::Mac => RxDrop::BadSourceMac,
                        NotPeer::Port => RxDrop::BadSourcePort,
                    })?,
                    None => return Err(RxDrop::QpState),
                }
            }
            if cnp {
                // A CNP is keyed on its destination QP only (ConnectX's source port varies).
                match qp.on_cnp(ctx) {
                    CnpOutcome::Handled => ctx.counters.rp_cnp_handled += 1,
                    CnpOutcome::Ignored => ctx.counters.rp_cnp_ignored += 1,
                }
                return Ok(());
            }
            // Where the QP stands, to tell whether this frame moves it forward.
            let progress = (qp.send.una(), qp.resp.epsn);
            let r = if info.is_request() {
                qp.handle_request(ctx, p, icrc)
            } else if icrc == Icrc::Checked || icrc_ok(p) {
                qp.handle_response(ctx, p);
                Ok(())
            } else {
                Err(BadIcrc)
            };
            if r.is_ok() {
                // Only a frame that made progress teaches the peer's port: one a blind
                // attacker can send (out of window, stale) cannot pin a port of its own.
                if (qp.send.una(), qp.resp.epsn) != progress {
                    if let Some(t) = qp.template.as_mut().filter(|_| ty.is_connected()) {
                        t.heard(p.udp.src_port);
                    }
                }
                if qp.resp.epsn != progress.1 {
                    ctx.counters.rcvd_in_seq_requests += 1;
                }
                qp.on_received(ctx, p, info);
            }
            r.map_err(|BadIcrc| RxDrop::Icrc)
        });
        match r {
            Some(Ok(())) => {
                self.counters.rcvd_pkts += 1;
                Ok(())
            }
            Some(Err(RxDrop::Icrc)) => {
                self.counters.icrc_err += 1;
                Err(RxDrop::Icrc)
            }
            Some(Err(why)) => drop_frame(&mut self.counters, p, icrc, why),
            None => drop_frame(&mut self.counters, p, icrc, RxDrop::UnknownQp(qpn)),
        }
    }
}

/// The transport rule, for both receive paths: each QP takes its own transport's opcodes
/// (rxe `check_type_state`), a CNP only a connected one.
#[inline]
fn transport_fits(ty: QpType, t: Transport) -> bool {
    match t {
        Transport::Rc => ty == QpType::Rc,
        Transport::Uc => ty == QpType::Uc,
        Transport::Ud => ty == QpType::Ud,
        Transport::Cnp => ty.is_connected(),
    }
}

/// The P_Key rule, for both receive paths: the P_Key table holds the default key, and limited
/// (0x7fff) and full (0xffff) membership both match it (IBTA §10.9.3, C10-25).
#[inline]
fn pkey_matches(pkey: u16) -> bool {
    pkey & 0x7fff == 0x7fff
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
        RxDrop::BadSourceMac => &mut counters.dropped_bad_src_mac,
        RxDrop::BadSourcePort => &mut counters.dropped_bad_src_port,
        RxDrop::BadPkey => &mut counters.dropped_bad_pkey,
        RxDrop::BadOpcode => &mut counters.dropped_bad_opcode,
        RxDrop::QpState => &mut counters.dropped_qp_state,
        RxDrop::Malformed(_) => &mut counters.malformed_pkts,
        RxDrop::OtherShard(_) => &mut counters.dropped_wrong_shard,
        RxDrop::NotRoce => return Err(why),
    };
    *c += 1;
    Err(why)
}
