//! What IPv4 and IPv6 have in common for RoCEv2: addresses, the DSCP/ECN byte, hop limit.

use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;
use core::net::IpAddr;

/// The 2-bit ECN codepoint (RFC 3168) of the IPv4 ToS / IPv6 traffic class byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Ecn {
    /// 00: not ECN-capable transport.
    #[default]
    NotEct,
    /// 01: ECT(1).
    Ect1,
    /// 10: ECT(0). What RoCEv2 senders set to allow marking.
    Ect0,
    /// 11: congestion experienced.
    Ce,
}

impl Ecn {
    /// From the low two bits of a ToS / traffic class byte.
    pub const fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// The two-bit value.
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

/// The IP layer of a RoCEv2 frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpRepr {
    /// IPv4 (RoCEv2 with an IPv4-mapped GID).
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src_addr),
            IpRepr::V6(r) => IpAddr::V6(r.src_addr),
        }
    }
    /// Destination address.
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst_addr),
            IpRepr::V6(r) => IpAddr::V6(r.dst_addr),
        }
    }
    /// Header length (20 or 40; RoCEv2 uses neither IPv4 options nor IPv6 extension headers).
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => crate::ipv4::HEADER_LEN,
            IpRepr::V6(_) => crate::ipv6::HEADER_LEN,
        }
    }
    /// The ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }
    /// Set the ECN codepoint (e.g. a simulated switch marking CE).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        match self {
            IpRepr::V4(r) => r.ecn = ecn,
            IpRepr::V6(r) => r.ecn = ecn,
        }
    }
    /// The DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }
    /// Bytes after the IP header (IPv4 total length - 20, IPv6 payload length).
    pub fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }
    /// Set the length of what follows the IP header.
    pub fn set_payload_len(&mut self, len: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = len,
            IpRepr::V6(r) => r.payload_len = len,
        }
    }
}
