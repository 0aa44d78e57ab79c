//! Mutations of a live RC request frame, or of an ACK uroce's responder sent (aimed at the
//! peer's requester: forged NAKs, RNR NAKs, ACKs of what was never sent, unsolicited READ and
//! atomic responses, duplicate-ACK floods): each takes the frame uroce just sent (so addresses,
//! QPN, PSN, R_Key and VA are the connection's own) and makes one hostile variant of it, with
//! IP and UDP lengths, the IPv4 checksum and the ICRC made consistent again unless the
//! mutation is a bad ICRC — so that it passes the peer's IP and UDP stacks and reaches its
//! RoCE code (rxe: `rxe_rcv` → `rxe_icrc_check`, `hdr_check`, the responder's `check_*`).
//! IPv4 without VLAN only (the frame layout is read from the frame).

use uroce_wire::{Ipv4Packet, Psn};

/// The kinds of mutation, each aimed at one class of check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Any opcode byte (reserved, UC, UD, RD, XRC, CNP, vendor) on an RC QP, headers as they were.
    AnyOpcode,
    /// An RC request opcode that breaks the message sequence or does not match the headers
    /// (MIDDLE without FIRST, LAST after ONLY, a READ without its RETH, ...), at the expected PSN.
    OpcodeSequence,
    /// The PSN moved: duplicate, ahead in the window, behind it, half the space away.
    PsnJump,
    /// The BTH pad count changed (the payload length no longer matches).
    Pad,
    /// RETH VA / R_Key / DMA length out of range or overflowing (VA + length past 2^64).
    Reth,
    /// An atomic (CMP_SWAP or FETCH_ADD) with a misaligned or wild VA, at the expected PSN.
    Atomic,
    /// The frame cut short inside the transport headers or the payload (lengths consistent).
    Truncated,
    /// Bytes appended to the payload (longer than the path MTU, lengths consistent).
    OverLong,
    /// Random bytes of the transport headers changed, ICRC made good again.
    Corrupt,
    /// Bytes changed and the ICRC left stale: the peer must drop it before looking further.
    BadIcrc,
    /// Another destination QPN.
    WrongQp,
    /// Toward the peer's requester, from an ACK uroce's responder sent: an error NAK (any of
    /// IBTA's codes, or a reserved one) or a reserved syndrome class, with the ACK's MSN.
    ForgedNak,
    /// An RNR NAK with any timer (0 is 655 ms), where an ACK was.
    RnrNak,
    /// An ACK whose PSN acknowledges what was never sent, is stale, or is anywhere; its MSN
    /// kept or jumped.
    AckPsn,
    /// A response to nothing asked: a READ response (FIRST, MIDDLE, ONLY) or an atomic
    /// acknowledge where an ACK was.
    Unsolicited,
    /// The ACK again, 16 to 256 times (a duplicate-ACK flood).
    AckFlood,
}

impl Kind {
    /// Every kind, in the order the generator weighs them.
    pub const ALL: [Kind; 16] = [
        Kind::AnyOpcode,
        Kind::OpcodeSequence,
        Kind::PsnJump,
        Kind::Pad,
        Kind::Reth,
        Kind::Atomic,
        Kind::Truncated,
        Kind::OverLong,
        Kind::Corrupt,
        Kind::BadIcrc,
        Kind::WrongQp,
        Kind::ForgedNak,
        Kind::RnrNak,
        Kind::AckPsn,
        Kind::Unsolicited,
        Kind::AckFlood,
    ];

    /// Whether it mutates an acknowledgement uroce's responder sent (aimed at the peer's
    /// requester) rather than a request (aimed at its responder).
    pub fn on_response(self) -> bool {
        matches!(self, Kind::ForgedNak | Kind::RnrNak | Kind::AckPsn | Kind::Unsolicited | Kind::AckFlood)
    }

    /// Short name (counters, logs).
    pub fn name(self) -> &'static str {
        match self {
            Kind::AnyOpcode => "any_opcode",
            Kind::OpcodeSequence => "opcode_sequence",
            Kind::PsnJump => "psn_jump",
            Kind::Pad => "pad",
            Kind::Reth => "reth",
            Kind::Atomic => "atomic",
            Kind::Truncated => "truncated",
            Kind::OverLong => "over_long",
            Kind::Corrupt => "corrupt",
            Kind::BadIcrc => "bad_icrc",
            Kind::WrongQp => "wrong_qp",
            Kind::ForgedNak => "forged_nak",
            Kind::RnrNak => "rnr_nak",
            Kind::AckPsn => "ack_psn",
            Kind::Unsolicited => "unsolicited",
            Kind::AckFlood => "ack_flood",
        }
    }
}

/// xorshift64* from a seed (never the OS RNG: a campaign is replayed from its seed).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// From `seed`.
    pub fn new(seed: u64) -> Rng {
        // SplitMix64's finaliser: every seed its own nonzero state
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)).max(1))
    }

    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform below `n` (> 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// One of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Where a frame's layers start: (IP, BTH); `None` unless it is IPv4/UDP without VLAN with
/// at least `transport` bytes after the UDP header.
fn layout(f: &[u8], transport: usize) -> Option<(usize, usize)> {
    if f.len() < 14 + 20 + 8 + transport || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[23] != 17 {
        return None;
    }
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let bth = 14 + ihl + 8;
    (ihl >= 20 && f.len() >= bth + transport).then_some((14, bth))
}

/// Lengths, IPv4 checksum and (when `icrc`) the ICRC made consistent with the frame's bytes.
pub fn reseal(f: &mut [u8], icrc: bool) -> bool {
    // a truncated frame may end inside its BTH: one byte and the ICRC after the UDP header
    let Some((l3, bth)) = layout(f, 1 + 4) else { return false };
    let ip_len = f.len() - l3;
    f[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    let udp = bth - 8;
    let udp_len = (f.len() - udp) as u16;
    f[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    f[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    let ihl = bth - 8 - l3;
    Ipv4Packet::new_unchecked(&mut f[l3..l3 + ihl]).fill_checksum();
    // (a frame cut inside its BTH has no ICRC anyone could compute: it keeps the bytes it has)
    if icrc {
        let n = f.len();
        if let Ok(c) = uroce_wire::icrc::compute(&f[l3..n - 4]) {
            f[n - 4..].copy_from_slice(&c.to_le_bytes());
        }
    }
    true
}

fn set_psn(f: &mut [u8], bth: usize, p: Psn) {
    f[bth + 9..bth + 12].copy_from_slice(&p.value().to_be_bytes()[1..]);
}

/// The RC request opcodes a sequence can be broken with.
const RC_REQUESTS: [u8; 16] =
    [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x16];

/// One mutation of `base` (an RC request uroce just sent; `expected` the peer's next PSN) of
/// kind `k`. `None` when `base` is not an IPv4 RoCE frame.
pub fn mutate(base: &[u8], expected: Psn, k: Kind, rng: &mut Rng) -> Option<Vec<u8>> {
    let (_, bth) = layout(base, 12 + 4)?;
    let mut f = base.to_vec();
    let body = bth + 12; // after the BTH
    let opcode = f[bth];
    let has_reth = matches!(opcode, 0x06 | 0x0a | 0x0b | 0x0c);
    match k {
        Kind::AnyOpcode => {
            f[bth] = rng.next_u64() as u8;
            set_psn(&mut f, bth, expected);
        }
        Kind::OpcodeSequence => {
            f[bth] = rng.pick(&RC_REQUESTS);
            set_psn(&mut f, bth, expected);
        }
        Kind::PsnJump => {
            let d = rng.pick(&[0u32, 1, 2, 3, 64, 127, 128, 1 << 22, (1 << 23) - 1, 1 << 23, (1 << 24) - 1]);
            let p = match rng.below(3) {
                0 => expected.add(d),
                1 => expected.sub(d.max(1)),
                _ => Psn::new(rng.next_u64() as u32 & 0x00ff_ffff),
            };
            set_psn(&mut f, bth, p);
        }
        Kind::Pad => {
            f[bth + 1] = (f[bth + 1] & !0x30) | ((rng.below(4) as u8) << 4);
            set_psn(&mut f, bth, expected);
        }
        Kind::Reth => {
            if !has_reth {
                // make it a WRITE_ONLY with the RETH bytes it lacks: whatever follows the BTH
                f[bth] = 0x0a;
            }
            let va = u64::from_be_bytes(f.get(body..body + 8)?.try_into().ok()?);
            let len = u32::from_be_bytes(f.get(body + 12..body + 16)?.try_into().ok()?);
            match rng.below(6) {
                0 => f[body..body + 8].copy_from_slice(&(u64::MAX - rng.below(64)).to_be_bytes()),
                1 => f[body..body + 8].copy_from_slice(&va.wrapping_add(u64::from(len)).to_be_bytes()),
                2 => f[body..body + 8].copy_from_slice(&rng.next_u64().to_be_bytes()),
                3 => f[body + 8..body + 12].copy_from_slice(&(rng.next_u64() as u32).to_be_bytes()),
                4 => f[body + 8] ^= 1 << rng.below(8),
                _ => f[body + 12..body + 16].copy_from_slice(
                    &rng.pick(&[0u32, len.wrapping_add(1), 1 << 31, u32::MAX, len.wrapping_sub(1)]).to_be_bytes(),
                ),
            }
            set_psn(&mut f, bth, expected);
        }
        Kind::Atomic => {
            // BTH + AtomicETH (VA, R_Key, swap/add, compare) and nothing else
            let rkey: [u8; 4] = if has_reth { f[body + 8..body + 12].try_into().ok()? } else { [0; 4] };
            let va = if has_reth { u64::from_be_bytes(f[body..body + 8].try_into().ok()?) } else { 0 };
            f.truncate(body);
            f[bth] = rng.pick(&[0x13u8, 0x14]);
            f[bth + 1] &= !0x30;
            let wild = match rng.below(3) {
                0 => va | (1 + rng.below(7)),
                1 => u64::MAX - rng.below(16),
                _ => rng.next_u64(),
            };
            f.extend_from_slice(&wild.to_be_bytes());
            f.extend_from_slice(&rkey);
            f.extend_from_slice(&rng.next_u64().to_be_bytes());
            f.extend_from_slice(&rng.next_u64().to_be_bytes());
            f.extend_from_slice(&[0; 4]);
            set_psn(&mut f, bth, expected);
        }
        Kind::Truncated => {
            let cut = bth + 1 + rng.below((f.len() - 4 - bth - 1) as u64) as usize;
            f.truncate(cut);
            f.extend_from_slice(&[0; 4]);
            if cut >= bth + 12 {
                set_psn(&mut f, bth, expected);
            }
        }
        Kind::OverLong => {
            let n = f.len() - 4;
            let extra = 1 + rng.below(4200) as usize;
            let fill = rng.next_u64() as u8;
            f.splice(n..n, std::iter::repeat_n(fill, extra));
            set_psn(&mut f, bth, expected);
        }
        Kind::Corrupt | Kind::BadIcrc => {
            let end = f.len() - 4;
            for _ in 0..1 + rng.below(4) {
                let i = bth + rng.below((end - bth) as u64) as usize;
                f[i] ^= 1 << rng.below(8);
            }
            if k == Kind::BadIcrc {
                reseal(&mut f, false);
                let n = f.len();
                f[n - 1] ^= 0x5a;
                return Some(f);
            }
        }
        Kind::WrongQp => {
            let q = (rng.next_u64() as u32) & 0x00ff_ffff;
            f[bth + 5..bth + 8].copy_from_slice(&q.to_be_bytes()[1..]);
            set_psn(&mut f, bth, expected);
        }
        Kind::ForgedNak | Kind::RnrNak | Kind::AckPsn | Kind::Unsolicited | Kind::AckFlood => return None,
    }
    reseal(&mut f, true).then_some(f)
}

/// One mutation of `ack` (an RC ACKNOWLEDGE uroce's responder just sent: BTH, AETH, ICRC) of
/// response kind `k`, and how many times to send it. `None` when `ack` is not an IPv4 RC
/// ACK or `k` is a request kind. The AETH (IBTA 9.3.5, Table 45): syndrome bits 7..5 are 000
/// ACK, 001 RNR NAK (bits 4..0 the timer), 011 NAK (bits 4..0 the code: 0 PSN sequence error,
/// 1 invalid request, 2 remote access error, 3 remote operational error, 4 invalid RD
/// request), 010 reserved; then the 24-bit MSN.
pub fn mutate_response(ack: &[u8], k: Kind, rng: &mut Rng) -> Option<(Vec<u8>, u32)> {
    let (_, bth) = layout(ack, 12 + 4 + 4)?;
    if ack[bth] != 0x11 || !k.on_response() {
        return None;
    }
    let mut f = ack.to_vec();
    let aeth = bth + 12;
    let psn = Psn::new(u32::from_be_bytes([0, f[bth + 9], f[bth + 10], f[bth + 11]]));
    let msn = u32::from_be_bytes([0, f[aeth + 1], f[aeth + 2], f[aeth + 3]]);
    let set_msn = |f: &mut [u8], m: u32| f[aeth + 1..aeth + 4].copy_from_slice(&(m & 0xff_ffff).to_be_bytes()[1..]);
    let mut copies = 1;
    match k {
        Kind::ForgedNak => {
            f[aeth] = match rng.below(4) {
                0 => 0x40 | rng.below(32) as u8,
                1 => 0x60 | rng.below(32) as u8,
                _ => 0x60 | rng.below(5) as u8,
            };
            match rng.below(3) {
                // a NAK of the request this ACK answers carries the MSN from before it
                0 => set_msn(&mut f, msn.wrapping_sub(1)),
                1 => set_psn(&mut f, bth, psn.add(1)),
                _ => {}
            }
        }
        Kind::RnrNak => {
            f[aeth] = 0x20 | rng.below(32) as u8;
            if rng.below(2) == 0 {
                set_psn(&mut f, bth, psn.add(1));
            }
        }
        Kind::AckPsn => {
            let d = rng.pick(&[1u32, 2, 8, 64, 127, 128, 1 << 22, (1 << 23) - 1, 1 << 23]);
            let p = match rng.below(3) {
                0 => psn.add(d),
                1 => psn.sub(d),
                _ => Psn::new(rng.next_u64() as u32 & 0x00ff_ffff),
            };
            set_psn(&mut f, bth, p);
            if rng.below(2) == 0 {
                let wild = rng.next_u64() as u32;
                set_msn(&mut f, msn.wrapping_add(rng.pick(&[1u32, 2, 1000, 1 << 23, wild])));
            }
        }
        Kind::Unsolicited => {
            let n = f.len() - 4;
            match rng.below(4) {
                // READ response ONLY / FIRST: AETH, then payload
                0 | 1 => {
                    f[bth] = if rng.below(2) == 0 { 0x10 } else { 0x0d };
                    let len = 4 * rng.below(65) as usize;
                    let fill = rng.next_u64() as u8;
                    f.splice(n..n, std::iter::repeat_n(fill, len));
                }
                // READ response MIDDLE: no AETH, payload only
                2 => {
                    f[bth] = 0x0e;
                    f.truncate(aeth);
                    let fill = rng.next_u64() as u8;
                    f.extend(std::iter::repeat_n(fill, 256));
                    f.extend_from_slice(&[0; 4]);
                }
                // ATOMIC ACKNOWLEDGE: AETH and an AtomicAckETH (the original value)
                _ => {
                    f[bth] = 0x12;
                    f.splice(n..n, rng.next_u64().to_be_bytes());
                }
            }
        }
        Kind::AckFlood => copies = 16 + rng.below(241) as u32,
        _ => return None,
    }
    reseal(&mut f, true).then_some((f, copies))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RC WRITE_ONLY of 64 bytes, as a connection sends it.
    fn base() -> Vec<u8> {
        let r = crate::sample::frame_repr(uroce_wire::Opcode::RC_RDMA_WRITE_ONLY, 64, false, 4);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b, uroce_wire::UdpChecksum::Zero, |p| p.fill(0xab)).unwrap();
        b
    }

    /// An RC ACK with PSN 0x100 and MSN 7.
    fn ack() -> Vec<u8> {
        let r = crate::sample::frame_repr(uroce_wire::Opcode::RC_ACKNOWLEDGE, 0, false, 0x100);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b, uroce_wire::UdpChecksum::Zero, |_| {}).unwrap();
        b
    }

    #[test]
    fn response_kinds_make_valid_frames_of_their_class() {
        let a = ack();
        let mut rng = Rng::new(11);
        for k in Kind::ALL.into_iter().filter(|k| k.on_response()) {
            assert!(mutate(&base(), Psn::new(5), k, &mut rng).is_none(), "{k:?} is not for requests");
            for _ in 0..200 {
                let (f, copies) = mutate_response(&a, k, &mut rng).unwrap_or_else(|| panic!("{k:?}: no frame"));
                let p = uroce_wire::parse_frame_verified(&f).unwrap_or_else(|e| panic!("{k:?}: {e:?}"));
                let (op, aeth) = (p.roce.bth.opcode, p.roce.ext.aeth);
                match k {
                    Kind::ForgedNak => assert!(!matches!(aeth.unwrap().syndrome, uroce_wire::Syndrome::Ack(_))),
                    Kind::RnrNak => assert!(matches!(aeth.unwrap().syndrome, uroce_wire::Syndrome::RnrNak(_))),
                    Kind::AckPsn => assert!(f != a),
                    Kind::Unsolicited => assert_ne!(op, uroce_wire::Opcode::RC_ACKNOWLEDGE),
                    _ => assert_eq!((f.as_slice(), (16..=256).contains(&copies)), (a.as_slice(), true)),
                }
                assert!(k == Kind::AckFlood || copies == 1);
            }
        }
        assert!(mutate_response(&base(), Kind::ForgedNak, &mut rng).is_none(), "only ACKs are mutated");
    }

    #[test]
    fn every_kind_makes_a_frame_whose_icrc_is_good_but_for_bad_icrc() {
        let b = base();
        let mut rng = Rng::new(7);
        for k in Kind::ALL.into_iter().filter(|k| !k.on_response()) {
            for _ in 0..200 {
                let f = mutate(&b, Psn::new(5), k, &mut rng).unwrap_or_else(|| panic!("{k:?}: no frame"));
                // (a PSN jump may make an exact duplicate of the request: one of its cases)
                assert!(f != b || k == Kind::PsnJump, "{k:?} changed nothing");
                let good = uroce_wire::icrc::verify(&f[14..], f.len() - 4).is_ok();
                let whole_bth = f.len() >= 14 + 20 + 8 + 12 + 4;
                assert!(good == (k != Kind::BadIcrc) || !whole_bth, "{k:?}");
                // lengths consistent: the IP total length is the frame's
                assert_eq!(usize::from(u16::from_be_bytes([f[16], f[17]])), f.len() - 14, "{k:?}");
            }
        }
    }

    #[test]
    fn the_same_seed_makes_the_same_frames() {
        let b = base();
        let run = |seed| {
            let mut rng = Rng::new(seed);
            Kind::ALL
                .iter()
                .filter(|k| !k.on_response())
                .map(|&k| mutate(&b, Psn::new(9), k, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        // (neighbouring seeds too: a campaign numbers its rounds' seeds)
        assert_ne!(run(3), run(2));
        assert_ne!(run(3), run(4));
    }
}
