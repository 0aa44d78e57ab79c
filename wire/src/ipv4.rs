//! IPv4 (RFC 791). RoCEv2 uses a 20-byte header without options, never fragmented.
//!
//! ```text
//! 0 ver|ihl  1 DSCP|ECN  2-3 total length  4-5 identification  6-7 flags|fragment offset
//! 8 TTL      9 protocol  10-11 header checksum  12-15 source  16-19 destination
//! ```
//! The ICRC covers the identification, flags, total length, protocol and addresses; it masks
//! the ToS byte, the TTL and the checksum (see [`crate::icrc`]).

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, set_u16};
use crate::ip::Ecn;
use core::net::Ipv4Addr;

/// Header length without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// The Internet checksum (RFC 1071) of `data`, folded and complemented. Sums 32-bit words into
/// a 64-bit accumulator (ones'-complement addition is associative, so wider words fold to the
/// same result) — an IPv4 header is five loads.
#[inline]
pub fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    sum += u32::from_be_bytes(tail) as u64;
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap without checking (emit path only).
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap and validate: length, version, IHL, total length.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Ipv4Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// Validate that the fixed header is present, the version is 4, the IHL is at least 5 and
    /// the total length fits in the buffer. `offset` in errors is relative to this header.
    pub fn check_len(&self) -> Result<(), Error> {
        self.check_len_at(0)
    }

    pub(crate) fn check_len_at(&self, off: usize) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need(Layer::Ipv4, off, HEADER_LEN, b.len())?;
        let version = b[field::VER_IHL] >> 4;
        if version != 4 {
            return Err(Error::BadField { layer: Layer::Ipv4, offset: off, field: "version", value: version as u32 });
        }
        let ihl = (b[field::VER_IHL] & 0xf) as usize * 4;
        if ihl < HEADER_LEN {
            return Err(Error::BadField { layer: Layer::Ipv4, offset: off, field: "IHL", value: (ihl / 4) as u32 });
        }
        let total = get_u16(b, field::TOTAL_LEN) as usize;
        if total < ihl {
            return Err(Error::Length {
                layer: Layer::Ipv4,
                offset: off,
                field: "total length",
                declared: total,
                actual: ihl,
            });
        }
        if total > b.len() {
            return Err(Error::Length {
                layer: Layer::Ipv4,
                offset: off,
                field: "total length",
                declared: total,
                actual: b.len(),
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// IP version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::VER_IHL] & 0xf) as usize * 4
    }
    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::TOS] >> 2
    }
    /// ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[field::TOS])
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TOTAL_LEN)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }
    /// Fragment offset (in 8-byte units).
    pub fn frag_offset(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FRAG_OFFSET
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum as stored.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        internet_checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[field::SRC], b[field::SRC + 1], b[field::SRC + 2], b[field::SRC + 3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[field::DST], b[field::DST + 1], b[field::DST + 2], b[field::DST + 3])
    }
    /// The payload up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set version 4 and IHL 5.
    pub fn set_version_ihl(&mut self) {
        self.buffer.as_mut()[field::VER_IHL] = 0x45;
    }
    /// Set DSCP and ECN.
    pub fn set_tos(&mut self, dscp: u8, ecn: Ecn) {
        self.buffer.as_mut()[field::TOS] = (dscp << 2) | ecn.bits();
    }
    /// Set only the ECN bits (what a switch does when it marks CE; fix the checksum after).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let b = self.buffer.as_mut();
        b[field::TOS] = (b[field::TOS] & !3) | ecn.bits();
    }
    /// Set the total length.
    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::TOTAL_LEN, v)
    }
    /// Set the identification.
    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::IDENT, v)
    }
    /// Set the flags (DF only; MF clear) and a zero fragment offset.
    pub fn set_dont_frag(&mut self, df: bool) {
        set_u16(self.buffer.as_mut(), field::FLAGS_FRAG, if df { FLAG_DF } else { 0 })
    }
    /// Set the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Set the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Set the stored checksum.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    /// Compute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_len();
        let c = internet_checksum(&self.buffer.as_ref()[..len]);
        self.set_checksum(c);
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets());
    }
}

/// The meaning of an IPv4 header as RoCEv2 uses it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Identification (covered by the ICRC).
    pub ident: u16,
    /// Don't-fragment flag (rxe sets it).
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol (17 for RoCEv2).
    pub protocol: u8,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parse a checked packet. `off` is the packet's offset in the frame, for errors.
    /// Rejects options, fragments and (outside fuzzing builds) a bad header checksum.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>, off: usize) -> Result<Ipv4Repr, Error> {
        if p.header_len() != HEADER_LEN {
            return Err(Error::Unsupported { layer: Layer::Ipv4, offset: off, what: "IPv4 options" });
        }
        if p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Unsupported { layer: Layer::Ipv4, offset: off, what: "IPv4 fragment" });
        }
        if !cfg!(fuzzing) && !p.verify_checksum() {
            return Err(Error::BadField {
                layer: Layer::Ipv4,
                offset: off,
                field: "header checksum",
                value: p.checksum() as u32,
            });
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            payload_len: p.total_len() as usize - HEADER_LEN,
        })
    }

    /// Header length (20).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header, including total length and checksum, into `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) -> Result<(), Error> {
        let total = HEADER_LEN + self.payload_len;
        if total > u16::MAX as usize {
            return Err(Error::InvalidRepr { what: "IPv4 total length over 65535" });
        }
        p.set_version_ihl();
        p.set_tos(self.dscp & 0x3f, self.ecn);
        p.set_total_len(total as u16);
        p.set_ident(self.ident);
        p.set_dont_frag(self.dont_frag);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv4 header of the ConnectX-4 Lx CNP (protocol.md vector A).
    static HDR: [u8; 20] = [
        0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00,
        0x12, 0x01,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(0x3c, 0);
        v
    }

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 0, 17, 1),
            dst_addr: Ipv4Addr::new(10, 0, 18, 1),
            dscp: 48,
            ecn: Ecn::Ect0,
            ident: 0x718c,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 40,
        }
    }

    #[test]
    fn test_deconstruct() {
        let b = packet();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp(), 48);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0x718c);
        assert!(p.dont_frag());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.checksum(), 0x9161);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 40);
    }

    #[test]
    fn test_parse() {
        let b = packet();
        assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap(), 0).unwrap(), repr());
    }

    #[test]
    fn test_construct_emit() {
        let mut b = [0xa5u8; 20];
        repr().emit(&mut Ipv4Packet::new_unchecked(&mut b[..])).unwrap();
        assert_eq!(&b[..], &HDR[..]);
    }

    #[test]
    fn test_impossible_len() {
        let b = packet();
        assert!(matches!(Ipv4Packet::new_checked(&b[..19]), Err(Error::Truncated { layer: Layer::Ipv4, .. })));
        // total length larger than the buffer
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..59]),
            Err(Error::Length { layer: Layer::Ipv4, declared: 60, actual: 59, .. })
        ));
        let mut bad = b.clone();
        bad[0] = 0x44; // IHL 4
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::BadField { field: "IHL", .. })));
        bad[0] = 0x65; // version 6
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::BadField { field: "version", value: 6, .. })));
        let mut bad = b.clone();
        bad[2] = 0;
        bad[3] = 10; // total length < IHL
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::Length { .. })));
    }

    #[test]
    fn test_rejects_options_fragments_checksum() {
        let mut b = packet();
        b[6] = 0x20; // MF
        assert!(matches!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap(), 14),
            Err(Error::Unsupported { what: "IPv4 fragment", offset: 14, .. })
        ));
        let mut b = packet();
        b[8] = 63; // TTL changed, checksum now wrong
        assert!(matches!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap(), 0),
            Err(Error::BadField { field: "header checksum", .. })
        ));
        let mut b = packet();
        b[0] = 0x46;
        assert!(matches!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap(), 0),
            Err(Error::Unsupported { what: "IPv4 options", .. })
        ));
    }

    #[test]
    fn checksum_matches_the_rfc1071_definition() {
        // 16-bit ones'-complement sum, for every length including odd ones.
        fn rfc1071(d: &[u8]) -> u16 {
            let mut s: u32 = 0;
            for c in d.chunks(2) {
                s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
            }
            while s >> 16 != 0 {
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        }
        let data: Vec<u8> = (0..100u32).map(|i| (i * 97 + 13) as u8 | 0x80).collect();
        for n in 0..data.len() {
            assert_eq!(internet_checksum(&data[..n]), rfc1071(&data[..n]), "len {n}");
        }
        assert_eq!(internet_checksum(&[0xff; 20]), rfc1071(&[0xff; 20]));
    }

    #[test]
    fn test_checksum_agrees_with_etherparse() {
        let h = etherparse::Ipv4HeaderSlice::from_slice(&HDR).unwrap().to_header();
        assert_eq!(h.calc_header_checksum(), 0x9161);
    }
}
