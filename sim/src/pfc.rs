//! IEEE 802.1Qbb priority flow control (PFC) frames, and the priority a frame travels in.
//!
//! A PFC frame is a MAC control frame: destination 01:80:C2:00:00:01, EtherType 0x8808,
//! opcode 0x0101, a class-enable vector (bit p: priority p's time is valid), eight 16-bit
//! pause times in quanta of 512 bit times at the link's speed, padded to the 60-byte minimum
//! (IEEE 802.1Qbb-2011 clause 36; 802.3 Annex 31D). A time of 0 resumes the priority at once.

use uroce_wire::EthernetAddress;

/// The PFC destination MAC (the MAC-control multicast address).
pub const DST: EthernetAddress = EthernetAddress([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
/// MAC control EtherType.
pub const ETHERTYPE: u16 = 0x8808;
/// The PFC opcode (plain PAUSE is 0x0001).
pub const OPCODE: u16 = 0x0101;
/// Frame length before the FCS.
pub const LEN: usize = 60;
/// The longest pause a frame can ask for.
pub const MAX_QUANTA: u16 = 0xffff;

/// A decoded PFC frame: the pause time of each enabled priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pfc {
    /// Quanta per priority, `None` where the class-enable bit is clear.
    pub quanta: [Option<u16>; 8],
}

impl Pfc {
    /// Pause (or with 0, resume) one priority.
    pub fn one(prio: u8, quanta: u16) -> Pfc {
        let mut q = [None; 8];
        q[(prio & 7) as usize] = Some(quanta);
        Pfc { quanta: q }
    }

    /// The frame from `src`.
    pub fn emit(&self, src: EthernetAddress) -> Vec<u8> {
        let mut f = vec![0u8; LEN];
        f[0..6].copy_from_slice(&DST.0);
        f[6..12].copy_from_slice(&src.0);
        f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        f[14..16].copy_from_slice(&OPCODE.to_be_bytes());
        let mut cev = 0u16;
        for (p, q) in self.quanta.iter().enumerate() {
            if let Some(q) = q {
                cev |= 1 << p;
                f[18 + 2 * p..20 + 2 * p].copy_from_slice(&q.to_be_bytes());
            }
        }
        f[16..18].copy_from_slice(&cev.to_be_bytes());
        f
    }

    /// Decode `f` if it is a PFC frame (`None` for anything else, however malformed).
    pub fn parse(f: &[u8]) -> Option<Pfc> {
        if f.len() < 34 || f[12..14] != ETHERTYPE.to_be_bytes() || f[14..16] != OPCODE.to_be_bytes() {
            return None;
        }
        let cev = u16::from_be_bytes([f[16], f[17]]);
        let mut quanta = [None; 8];
        for (p, q) in quanta.iter_mut().enumerate() {
            if cev & (1 << p) != 0 {
                *q = Some(u16::from_be_bytes([f[18 + 2 * p], f[19 + 2 * p]]));
            }
        }
        Some(Pfc { quanta })
    }
}

/// Nanoseconds that `quanta` pause at `rate_bps` (one quantum = 512 bit times).
pub fn pause_ns(quanta: u16, rate_bps: u64) -> u64 {
    (quanta as u64 * 512 * 1_000_000_000).checked_div(rate_bps.max(1)).unwrap_or(0)
}

/// The priority a frame travels in: an 802.1Q tag's PCP, else its IP DSCP's class selector
/// (DSCP / 8: RoCE's customary DSCP 26 is priority 3, a CNP's 48 is 6), else 0.
pub fn priority(f: &[u8]) -> u8 {
    let Some(t) = f.get(12..14) else { return 0 };
    let (tpid, l3) = (u16::from_be_bytes([t[0], t[1]]), 14);
    if tpid == 0x8100 {
        return f.get(14).map_or(0, |b| b >> 5);
    }
    match tpid {
        0x0800 => f.get(l3 + 1).map_or(0, |tos| tos >> 5),
        0x86dd => match (f.get(l3), f.get(l3 + 1)) {
            (Some(a), Some(b)) => (((a & 0x0f) << 4) | (b >> 4)) >> 5,
            _ => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let src = EthernetAddress([2, 0, 0, 0, 0, 9]);
        let mut p = Pfc::one(3, 0xffff);
        p.quanta[6] = Some(0);
        let f = p.emit(src);
        assert_eq!(f.len(), 60);
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x48]);
        assert_eq!(&f[24..26], &[0xff, 0xff], "priority 3's time");
        assert_eq!(Pfc::parse(&f), Some(p));
        assert_eq!(Pfc::parse(&f[..20]), None);
        assert_eq!(pause_ns(0xffff, 100_000_000_000), 335_539);
    }

    #[test]
    fn priorities() {
        let mut v4 = vec![0u8; 40];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[15] = 26 << 2;
        assert_eq!(priority(&v4), 3);
        v4[15] = (48 << 2) | 2;
        assert_eq!(priority(&v4), 6);
        let mut tagged = vec![0u8; 40];
        tagged[12..15].copy_from_slice(&[0x81, 0x00, 5 << 5]);
        assert_eq!(priority(&tagged), 5);
        assert_eq!(priority(&[1, 2, 3]), 0);
    }
}
