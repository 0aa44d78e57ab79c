//! IEEE 802.1Qbb priority flow control (PFC) frames, and the priority a frame travels in.
//!
//! A PFC frame is an 802.3 MAC control frame: destination 01:80:C2:00:00:01, EtherType
//! 0x8808, opcode 0x0101, a class-enable vector (bit p: priority p's time is valid), eight
//! 16-bit pause times in quanta of 512 bit times at the link's speed, padded to the 60-byte
//! minimum (IEEE 802.1Qbb-2011 clause 36; IEEE 802.3 Annex 31D). A time of 0 resumes the
//! priority at once. RoCEv2's lossless class is one of these priorities; the switch that runs
//! out of buffer for it sends PFC upstream instead of dropping.

use crate::error::{Error, Layer};
use crate::ethernet::EthernetAddress;

/// The PFC destination MAC (the MAC-control multicast address).
pub const DST: EthernetAddress = EthernetAddress([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
/// MAC control EtherType.
pub const ETHERTYPE: u16 = 0x8808;
/// The PFC opcode (plain 802.3x PAUSE is 0x0001).
pub const OPCODE: u16 = 0x0101;
/// Frame length without the FCS.
pub const LEN: usize = 60;
/// The longest pause a frame can ask for.
pub const MAX_QUANTA: u16 = 0xffff;
/// Bytes through the last pause time (Ethernet header, opcode, vector, 8 × 2).
const USED: usize = 34;

/// A PFC frame's content: the pause time of each enabled priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcRepr {
    /// Quanta per priority, `None` where the class-enable bit is clear.
    pub quanta: [Option<u16>; 8],
}

/// Whether `frame` is a MAC control frame (EtherType 0x8808, untagged as 802.3 sends them).
pub fn is_mac_control(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&ETHERTYPE.to_be_bytes()[..])
}

impl PfcRepr {
    /// Pause (or, with 0, resume) one priority.
    pub fn one(prio: u8, quanta: u16) -> PfcRepr {
        let mut q = [None; 8];
        q[(prio & 7) as usize] = Some(quanta);
        PfcRepr { quanta: q }
    }

    /// Decode `frame`: a typed error for a MAC control frame that is not PFC or is cut short.
    pub fn parse(frame: &[u8]) -> Result<PfcRepr, Error> {
        if frame.len() < USED {
            return Err(Error::Truncated { layer: Layer::MacControl, offset: 0, need: USED, have: frame.len() });
        }
        let field =
            |field, value: u16| Error::BadField { layer: Layer::MacControl, offset: 0, field, value: value as u32 };
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        if ethertype != ETHERTYPE {
            return Err(field("EtherType", ethertype));
        }
        let opcode = u16::from_be_bytes([frame[14], frame[15]]);
        if opcode != OPCODE {
            return Err(field("opcode", opcode));
        }
        let cev = u16::from_be_bytes([frame[16], frame[17]]);
        let mut quanta = [None; 8];
        for (p, q) in quanta.iter_mut().enumerate() {
            if cev & (1 << p) != 0 {
                *q = Some(u16::from_be_bytes([frame[18 + 2 * p], frame[19 + 2 * p]]));
            }
        }
        Ok(PfcRepr { quanta })
    }

    /// Write the frame from `src` into `buf` (at least [`LEN`] bytes); returns [`LEN`].
    pub fn emit(&self, src: EthernetAddress, buf: &mut [u8]) -> Result<usize, Error> {
        let Some(f) = buf.get_mut(..LEN) else {
            return Err(Error::BufferTooSmall { need: LEN, have: buf.len() });
        };
        f.fill(0);
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
        Ok(LEN)
    }
}

/// Nanoseconds that `quanta` pause a link of `rate_bps` (one quantum = 512 bit times).
pub fn pause_ns(quanta: u16, rate_bps: u64) -> u64 {
    (quanta as u64 * 512 * 1_000_000_000).checked_div(rate_bps).unwrap_or(0)
}

/// The priority a frame travels in: an 802.1Q tag's PCP, else its IP DSCP's class selector
/// (DSCP / 8: RoCE's customary DSCP 26 is priority 3, a CNP's 48 is 6), else 0.
pub fn priority(frame: &[u8]) -> u8 {
    let Some(t) = frame.get(12..14) else { return 0 };
    match u16::from_be_bytes([t[0], t[1]]) {
        0x8100 => frame.get(14).map_or(0, |b| b >> 5),
        0x0800 => frame.get(15).map_or(0, |tos| tos >> 5),
        0x86dd => match (frame.get(14), frame.get(15)) {
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
    fn round_trip_layout_and_errors() {
        let src = EthernetAddress([2, 0, 0, 0, 0, 9]);
        let mut p = PfcRepr::one(3, 0xffff);
        p.quanta[6] = Some(0);
        let mut f = [0u8; 64];
        assert_eq!(p.emit(src, &mut f), Ok(60));
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x48]);
        assert_eq!(&f[24..26], &[0xff, 0xff], "priority 3's time");
        assert!(is_mac_control(&f));
        assert_eq!(PfcRepr::parse(&f[..60]), Ok(p));
        assert!(matches!(PfcRepr::parse(&f[..20]), Err(Error::Truncated { layer: Layer::MacControl, .. })));
        f[14] = 0x00; // 802.3x PAUSE (opcode 0x0001), not PFC
        assert!(matches!(PfcRepr::parse(&f[..60]), Err(Error::BadField { field: "opcode", value: 0x0001, .. })));
        assert_eq!(p.emit(src, &mut [0u8; 59]), Err(Error::BufferTooSmall { need: 60, have: 59 }));
        assert_eq!(pause_ns(0xffff, 100_000_000_000), 335_539);
        assert_eq!(pause_ns(1, 0), 0);
    }

    #[test]
    fn priorities() {
        let mut v4 = [0u8; 40];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[15] = 26 << 2;
        assert_eq!(priority(&v4), 3);
        v4[15] = (48 << 2) | 2;
        assert_eq!(priority(&v4), 6);
        let mut tagged = [0u8; 40];
        tagged[12..15].copy_from_slice(&[0x81, 0x00, 5 << 5]);
        assert_eq!(priority(&tagged), 5);
        let mut v6 = [0u8; 60];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60 | (104 >> 4);
        v6[15] = (104 & 0xf) << 4;
        assert_eq!(priority(&v6), 3, "traffic class 104 = DSCP 26");
        assert_eq!(priority(&[1, 2, 3]), 0);
    }
}
