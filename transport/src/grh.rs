//! The 40-byte GRH area at the start of every UD receive buffer (IBTA §11.4.1.2), as a RoCEv2
//! device fills it and as a receiver reads it back: written by the responder, read by the GSI
//! agent and by `ibv_init_ah_from_wc`. RoCEv2 has no GRH on the wire; rxe (`rxe_resp.c`
//! `copy_data` of the `roce4grh` union) puts the IPv6 header there, or 20 zero bytes and the
//! IPv4 header, and rdma-core (`verbs.c` `get_grh_header_version`) tells the two apart.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uroce_wire::ParsedFrame;

/// The GRH area's length.
pub const GRH_LEN: usize = 40;

/// The GRH area of a received datagram: its IP header, placed as rxe places it.
pub fn fill(p: &ParsedFrame<'_>) -> [u8; GRH_LEN] {
    let mut grh = [0u8; GRH_LEN];
    let hdr = p.bytes().get(p.offsets.l3..p.offsets.udp).unwrap_or(&[]);
    let at = if p.ip.src_addr().is_ipv4() { GRH_LEN - 20 } else { 0 };
    let n = hdr.len().min(GRH_LEN - at);
    grh[at..at + n].copy_from_slice(&hdr[..n]);
    grh
}

/// The IP version of the header in a GRH area (rdma-core `get_grh_header_version`): IPv6 when
/// its first word says 6, unless the last 20 bytes are an IPv4 header with a right checksum.
pub fn version(grh: &[u8; GRH_LEN]) -> Option<u8> {
    let v4 = &grh[20..40];
    if grh[0] >> 4 != 6 {
        return (v4[0] >> 4 == 4).then_some(4);
    }
    if v4[0] & 0xf != 5 {
        return Some(6);
    }
    let mut sum = 0u32;
    for (i, w) in v4.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let check = !(sum as u16);
    Some(if check == u16::from_be_bytes([v4[10], v4[11]]) { 4 } else { 6 })
}

/// What a GRH area says of its datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GrhInfo {
    /// The sender's address.
    pub src: IpAddr,
    /// The address it was sent to.
    pub dst: IpAddr,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// ToS / traffic class.
    pub traffic_class: u8,
    /// Flow label (IPv6; 0 for IPv4, whose area starts with zeros).
    pub flow_label: u32,
}

/// Why a GRH area does not describe a RoCEv2 datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GrhError {
    /// Neither an IPv4 nor an IPv6 header.
    Version,
    /// IPv6 whose next header is not UDP (an IB GRH: 0x1b).
    NotUdp(u8),
}

/// Read a GRH area (rdma-core `ibv_init_ah_from_wc`'s reading of it).
pub fn parse(b: &[u8; GRH_LEN]) -> Result<GrhInfo, GrhError> {
    let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    match version(b) {
        Some(4) => {
            let ip = &b[20..40];
            let v4 = |a: &[u8]| IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]));
            Ok(GrhInfo {
                src: v4(&ip[12..16]),
                dst: v4(&ip[16..20]),
                hop_limit: ip[8],
                traffic_class: ip[1],
                flow_label: word & 0xf_ffff,
            })
        }
        Some(_) => {
            if b[6] != 17 {
                return Err(GrhError::NotUdp(b[6]));
            }
            let v6 = |a: &[u8]| {
                let mut g = [0u8; 16];
                g.copy_from_slice(a);
                IpAddr::V6(Ipv6Addr::from(g))
            };
            Ok(GrhInfo {
                src: v6(&b[8..24]),
                dst: v6(&b[24..40]),
                hop_limit: b[7],
                traffic_class: ((word >> 20) & 0xff) as u8,
                flow_label: word & 0xf_ffff,
            })
        }
        None => Err(GrhError::Version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_rdma_cores() {
        let mut g = [0u8; 40];
        // 20 zero bytes, then an IPv4 header with its checksum (RFC 1071 example header).
        let ip = [0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7];
        g[20..].copy_from_slice(&ip);
        assert_eq!(version(&g), Some(4));
        let info = parse(&g).unwrap();
        assert_eq!((info.src.to_string(), info.dst.to_string()), ("192.168.0.1".into(), "192.168.0.199".into()));
        assert_eq!((info.hop_limit, info.traffic_class), (0x40, 0));
        g[0] = 0x60;
        // version 6 in the first word and a valid IPv4 header behind it: IPv4 wins
        assert_eq!(version(&g), Some(4));
        g[30] ^= 1; // the checksum no longer holds: IPv6
        assert_eq!(version(&g), Some(6));
        assert_eq!(parse(&g), Err(GrhError::NotUdp(0)));
        g[0] = 0;
        g[20] = 0x55;
        assert_eq!(version(&g), None);
        assert_eq!(parse(&g), Err(GrhError::Version));
    }
}
