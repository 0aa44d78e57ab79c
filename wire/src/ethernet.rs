//! Ethernet II with an optional 802.1Q tag (whose PCP carries the RoCE priority).
//!
//! ```text
//!  0      6      12        14       16        18
//! | dst  | src  | 0x8100  | TCI    | type    |   (tagged)
//! | dst  | src  | type    |                     (untagged)
//! TCI = PCP(3) | DEI(1) | VID(12)
//! ```

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, set_u16};
use core::fmt;

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// An EtherType. Open: unknown values round-trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IEEE 802.1Q VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
}

/// An 802.1Q tag control information.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits): the RoCE traffic priority.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// Decode a TCI.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag { pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }
    /// Encode as a TCI (out-of-range bits of `pcp`/`vid` are dropped).
    pub const fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

mod field {
    use crate::field::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const TYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;
}

/// Untagged header length.
pub const HEADER_LEN: usize = 14;
/// 802.1Q-tagged header length.
pub const VLAN_HEADER_LEN: usize = 18;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap without checking (emit path only).
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap and validate the length, including an 802.1Q tag when present.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let f = EthernetFrame { buffer };
        f.check_len()?;
        Ok(f)
    }

    /// Validate the length. Invalidated by `set_ethertype` (which can change tagging).
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need(Layer::Ethernet, 0, HEADER_LEN, b.len())?;
        if get_u16(b, field::TYPE) == EtherType::VLAN.0 {
            need(Layer::Vlan, 12, VLAN_HEADER_LEN - 12, b.len() - 12)?;
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        EthernetAddress(a)
    }

    /// Source address.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        EthernetAddress(a)
    }

    /// The 802.1Q tag, if the frame carries one.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (get_u16(b, field::TYPE) == EtherType::VLAN.0).then(|| VlanTag::from_tci(get_u16(b, field::TCI)))
    }

    /// The EtherType of the payload (after any 802.1Q tag).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buffer.as_ref();
        let t = get_u16(b, field::TYPE);
        if t == EtherType::VLAN.0 {
            EtherType(get_u16(b, field::INNER_TYPE))
        } else {
            EtherType(t)
        }
    }

    /// Header length: 14, or 18 with an 802.1Q tag.
    pub fn header_len(&self) -> usize {
        if get_u16(self.buffer.as_ref(), field::TYPE) == EtherType::VLAN.0 {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The payload (the IP packet).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// Write the type field(s): with a tag, 0x8100 + TCI + `ethertype`; without, `ethertype`.
    pub fn set_ethertype(&mut self, vlan: Option<VlanTag>, ethertype: EtherType) {
        let b = self.buffer.as_mut();
        match vlan {
            Some(tag) => {
                set_u16(b, field::TYPE, EtherType::VLAN.0);
                set_u16(b, field::TCI, tag.tci());
                set_u16(b, field::INNER_TYPE, ethertype.0);
            }
            None => set_u16(b, field::TYPE, ethertype.0),
        }
    }
}

/// The meaning of an Ethernet header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src_addr: EthernetAddress,
    /// Destination MAC.
    pub dst_addr: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parse a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        }
    }

    /// Header length this repr emits.
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header into the first `header_len()` bytes of `frame`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.vlan, self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static UNTAGGED: [u8; 14] = [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00];
    static TAGGED: [u8; 18] = [0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x81, 0x00, 0xd0, 0x64, 0x86, 0xdd];

    #[test]
    fn test_deconstruct() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), EthernetAddress([0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2]));
        assert_eq!(f.src_addr(), EthernetAddress([0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32]));
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.vlan(), None);
        assert_eq!(f.header_len(), 14);

        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.vlan(), Some(VlanTag { pcp: 6, dei: true, vid: 0x064 }));
        assert_eq!(f.ethertype(), EtherType::IPV6);
        assert_eq!(f.header_len(), 18);
    }

    #[test]
    fn test_construct() {
        for (bytes, repr) in [
            (&UNTAGGED[..], EthernetRepr::parse(&EthernetFrame::new_checked(&UNTAGGED[..]).unwrap())),
            (&TAGGED[..], EthernetRepr::parse(&EthernetFrame::new_checked(&TAGGED[..]).unwrap())),
        ] {
            let mut buf = vec![0xa5; repr.header_len()];
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
            assert_eq!(&buf[..], bytes);
        }
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Error::Truncated { layer: Layer::Ethernet, offset: 0, need: 14, have: 13 }
        );
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..17]).unwrap_err(),
            Error::Truncated { layer: Layer::Vlan, offset: 12, need: 6, have: 5 }
        );
    }
}
