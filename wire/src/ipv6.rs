//! IPv6 (RFC 8200). RoCEv2 puts UDP directly after the fixed 40-byte header.
//!
//! ```text
//! 0-3 ver(4)|traffic class(8)|flow label(20)  4-5 payload length  6 next header  7 hop limit
//! 8-23 source  24-39 destination
//! ```
//! The ICRC masks the traffic class, the flow label and the hop limit (see [`crate::icrc`]).

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, get_u32, set_u16, set_u32};
use crate::ip::Ecn;
use core::net::Ipv6Addr;

/// Fixed header length.
pub const HEADER_LEN: usize = 40;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap without checking (emit path only).
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap and validate: length, version, payload length.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Ipv6Packet { buffer };
        p.check_len_at(0)?;
        Ok(p)
    }

    pub(crate) fn check_len_at(&self, off: usize) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need(Layer::Ipv6, off, HEADER_LEN, b.len())?;
        let version = b[0] >> 4;
        if version != 6 {
            return Err(Error::BadField { layer: Layer::Ipv6, offset: off, field: "version", value: version as u32 });
        }
        let plen = get_u16(b, field::PAYLOAD_LEN) as usize;
        if HEADER_LEN + plen > b.len() {
            return Err(Error::Length {
                layer: Layer::Ipv6,
                offset: off,
                field: "payload length",
                declared: plen,
                actual: b.len() - HEADER_LEN,
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn word0(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// IP version (6).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xf_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC..field::SRC + 16]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST..field::DST + 16]);
        Ipv6Addr::from(a)
    }
    /// The payload up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version 6, traffic class and flow label.
    pub fn set_ver_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | ((traffic_class as u32) << 20) | (flow_label & 0xf_ffff);
        set_u32(self.buffer.as_mut(), field::VER_TC_FLOW, w);
    }
    /// Set only the ECN bits of the traffic class.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let tc = (self.traffic_class() & !3) | ecn.bits();
        let fl = self.flow_label();
        self.set_ver_tc_flow(tc, fl);
    }
    /// Set the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, v)
    }
    /// Set the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Set the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a.octets());
    }
}

/// The meaning of an IPv6 header as RoCEv2 uses it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// DSCP (6 bits of the traffic class).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header (17 for RoCEv2).
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parse a checked packet.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Ipv6Repr {
        let tc = p.traffic_class();
        Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            dscp: tc >> 2,
            ecn: Ecn::from_bits(tc),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
            payload_len: p.payload_len() as usize,
        }
    }

    /// Header length (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) -> Result<(), Error> {
        if self.payload_len > u16::MAX as usize {
            return Err(Error::InvalidRepr { what: "IPv6 payload length over 65535" });
        }
        p.set_ver_tc_flow(((self.dscp & 0x3f) << 2) | self.ecn.bits(), self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HDR: [u8; 40] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40, // ver 6, tc 0xb8, flow 0x12345, plen 8, UDP, hop 64
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: "fe80::1".parse().unwrap(),
            dst_addr: "fe80::2".parse().unwrap(),
            dscp: 46,
            ecn: Ecn::NotEct,
            flow_label: 0x12345,
            hop_limit: 64,
            next_header: 17,
            payload_len: 8,
        }
    }

    #[test]
    fn test_deconstruct_parse() {
        let mut b = HDR.to_vec();
        b.extend_from_slice(&[0; 8]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(Ipv6Repr::parse(&p), repr());
    }

    #[test]
    fn test_construct_emit() {
        let mut b = [0xa5u8; 40];
        repr().emit(&mut Ipv6Packet::new_unchecked(&mut b[..])).unwrap();
        assert_eq!(&b[..], &HDR[..]);
    }

    #[test]
    fn test_impossible_len() {
        assert!(matches!(Ipv6Packet::new_checked(&HDR[..39]), Err(Error::Truncated { layer: Layer::Ipv6, .. })));
        // payload length 8 but no payload bytes
        assert!(matches!(
            Ipv6Packet::new_checked(&HDR[..]),
            Err(Error::Length { layer: Layer::Ipv6, declared: 8, actual: 0, .. })
        ));
        let mut bad = HDR.to_vec();
        bad[0] = 0x4b;
        assert!(matches!(Ipv6Packet::new_checked(&bad[..]), Err(Error::BadField { field: "version", value: 4, .. })));
    }
}
