//! UDP (RFC 768). RoCEv2 is UDP with destination port 4791 (IBTA Annex A17).
//!
//! The ICRC masks the UDP checksum. Linux rxe sends checksum 0 (`prepare_udp_hdr`); a kernel
//! receiver verifies a non-zero checksum before rxe sees the packet, so a sender must write 0
//! (IPv4) or a correct checksum.

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, set_u16};
use core::net::IpAddr;

/// UDP destination port of RoCEv2 (IBTA Annex A17, A17.2.2).
pub const ROCE_V2_PORT: u16 = 4791;
/// Header length.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap without checking (emit path only).
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Wrap and validate the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = UdpPacket { buffer };
        p.check_len_at(0)?;
        Ok(p)
    }
    pub(crate) fn check_len_at(&self, off: usize) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need(Layer::Udp, off, HEADER_LEN, b.len())?;
        let len = get_u16(b, field::LENGTH) as usize;
        if len < HEADER_LEN || len > b.len() {
            return Err(Error::Length {
                layer: Layer::Udp,
                offset: off,
                field: "length",
                declared: len,
                actual: b.len(),
            });
        }
        Ok(())
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length (header + payload).
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() as usize == HEADER_LEN
    }
    /// Checksum as stored (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The payload up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
    /// Verify the checksum against the pseudo-header (a zero checksum over IPv4 passes).
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 && src.is_ipv4() {
            return true;
        }
        let b = &self.buffer.as_ref()[..self.len() as usize];
        fold(pseudo_sum(src, dst, b.len()) + sum_words(b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT, v)
    }
    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT, v)
    }
    /// Set the length field.
    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, v)
    }
    /// Set the stored checksum.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    /// Compute and store the checksum over the pseudo-header and the whole datagram
    /// (`len()` bytes, which must all be written already, ICRC included).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let len = self.len() as usize;
        let b = &self.buffer.as_ref()[..len];
        let c = !fold(pseudo_sum(src, dst, len) + sum_words(b));
        // RFC 768: a computed 0 is sent as all ones.
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

fn sum_words(b: &[u8]) -> u32 {
    let mut sum: u64 = 0;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        // Ones'-complement sums can be accumulated in wider words and folded at the end.
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        sum += (w >> 32) + (w & 0xffff_ffff);
    }
    let mut rest = chunks.remainder().chunks_exact(2);
    for c in &mut rest {
        sum += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = rest.remainder() {
        sum += (*last as u64) << 8;
    }
    while sum >> 32 != 0 {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    let s = sum as u32;
    (s >> 16) + (s & 0xffff)
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, len: usize) -> u32 {
    let mut sum: u32 = 17 + len as u32;
    let mut add = |o: &[u8]| {
        for c in o.chunks_exact(2) {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
        }
        (s, d) => {
            add(&ipv6_octets(s));
            add(&ipv6_octets(d));
        }
    }
    sum
}

fn ipv6_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The meaning of a UDP header. Length and checksum are derived on emit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UdpRepr {
    /// Source port (rxe: 0xC000 | hash of the QPNs; receivers accept any).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse a checked datagram.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> UdpRepr {
        UdpRepr { src_port: p.src_port(), dst_port: p.dst_port() }
    }
    /// Write ports and length; the checksum is left 0 (fill it after the payload if wanted).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>, payload_len: usize) -> Result<(), Error> {
        let len = HEADER_LEN + payload_len;
        if len > u16::MAX as usize {
            return Err(Error::InvalidRepr { what: "UDP length over 65535" });
        }
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len as u16);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    // UDP part of protocol.md vector B (scapy "RoCE layer"): 49152 -> 4791, len 44, csum 0xaca2.
    fn vector_b_udp() -> Vec<u8> {
        let hex = "c00012b7002caca22460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3";
        hex::decode(hex).unwrap()
    }

    #[test]
    fn test_deconstruct() {
        let b = vector_b_udp();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 49152);
        assert_eq!(p.dst_port(), ROCE_V2_PORT);
        assert_eq!(p.len(), 44);
        assert_eq!(p.checksum(), 0xaca2);
        let a = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 7));
        assert!(p.verify_checksum(a, a));
    }

    #[test]
    fn test_construct_checksum() {
        let want = vector_b_udp();
        let mut b = vec![0xa5; want.len()];
        b[8..].copy_from_slice(&want[8..]);
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        UdpRepr { src_port: 49152, dst_port: 4791 }.emit(&mut p, want.len() - 8).unwrap();
        let a = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 7));
        p.fill_checksum(a, a);
        assert_eq!(b, want);
    }

    #[test]
    fn test_impossible_len() {
        let b = vector_b_udp();
        assert!(matches!(UdpPacket::new_checked(&b[..7]), Err(Error::Truncated { .. })));
        assert!(matches!(UdpPacket::new_checked(&b[..43]), Err(Error::Length { declared: 44, actual: 43, .. })));
        let mut bad = b.clone();
        bad[5] = 7;
        assert!(matches!(UdpPacket::new_checked(&bad[..]), Err(Error::Length { declared: 7, .. })));
    }

    #[test]
    fn test_checksum_odd_length_ipv6_agrees_with_etherparse() {
        let src: core::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: core::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
        for plen in [0usize, 1, 7, 8, 9, 33, 1001] {
            let payload: Vec<u8> = (0..plen).map(|i| (i * 7 + 3) as u8).collect();
            let mut b = vec![0u8; 8 + plen];
            b[8..].copy_from_slice(&payload);
            let mut p = UdpPacket::new_unchecked(&mut b[..]);
            UdpRepr { src_port: 0xc001, dst_port: 4791 }.emit(&mut p, plen).unwrap();
            p.fill_checksum(IpAddr::V6(src), IpAddr::V6(dst));
            let h = etherparse::UdpHeader::with_ipv6_checksum(
                0xc001,
                4791,
                &etherparse::Ipv6Header {
                    source: src.octets(),
                    destination: dst.octets(),
                    next_header: etherparse::IpNumber::UDP,
                    payload_length: (8 + plen) as u16,
                    ..Default::default()
                },
                &payload,
            )
            .unwrap();
            assert_eq!(p.checksum(), h.checksum, "plen {plen}");
            assert!(p.verify_checksum(IpAddr::V6(src), IpAddr::V6(dst)));
        }
    }
}
