//! RDMA-CM's use of the CM (IBTA Vol. 1 Annex A11, "RDMA IP CM Service"): the service IDs
//! that name an IP port space and port, and the 36-byte header at the start of a REQ's (and a
//! SIDR_REQ's) private data that carries the IP addresses and the source port. Linux
//! `drivers/infiniband/core/cma.c` (`struct cma_hdr`, `cma_get_service_id`) and
//! `include/rdma/rdma_cm.h` (`RDMA_IB_IP_PS_*`).
//!
//! ```text
//! byte 0      MajV(0xf0) | MinV(0x0f)      Linux CMA_VERSION: 0x00
//! byte 1      IPV(0xf0: 4 or 6) | resv
//! bytes 2-3   source port
//! bytes 4-19  source IP (IPv4: in bytes 16-19, the rest zero)
//! bytes 20-35 destination IP (IPv4: in bytes 32-35)
//! bytes 36-   the application's private data (REQ: 56 bytes)
//! ```

use crate::error::{Error, Layer};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The header's length.
pub const HEADER_LEN: usize = 36;
/// The version byte Linux sends and accepts (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// The service IDs of one port space share these bits (`RDMA_IB_IP_PS_MASK`).
pub const PS_MASK: u64 = 0xffff_ffff_ffff_0000;
/// The Q_Key RDMA-CM gives UD QPs in the UDP and IPoIB port spaces (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// An RDMA-CM port space (`enum rdma_ucm_port_space`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PortSpace {
    /// `RDMA_PS_TCP` (0x0106): RC connections.
    Tcp,
    /// `RDMA_PS_UDP` (0x0111): UD, through SIDR.
    Udp,
    /// `RDMA_PS_IPOIB` (0x0002).
    Ipoib,
    /// `RDMA_PS_IB` (0x013f): any QP type.
    Ib,
}

impl PortSpace {
    /// The port space's number (`enum rdma_ucm_port_space`).
    pub const fn number(self) -> u16 {
        match self {
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ipoib => 0x0002,
            PortSpace::Ib => 0x013f,
        }
    }

    /// The port space a number names.
    pub const fn from_number(n: u16) -> Option<PortSpace> {
        match n {
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x0002 => Some(PortSpace::Ipoib),
            0x013f => Some(PortSpace::Ib),
            _ => None,
        }
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortSpace::Tcp => "TCP",
            PortSpace::Udp => "UDP",
            PortSpace::Ipoib => "IPoIB",
            PortSpace::Ib => "IB",
        })
    }
}

/// The service ID of `port` in `space` (`cma_get_service_id`: `ps << 16 | port`, under the
/// IETF-assigned prefix 0x0000000001).
pub const fn service_id(space: PortSpace, port: u16) -> u64 {
    ((space.number() as u64) << 16) | port as u64
}

/// The port space and port a service ID names, when it is an RDMA IP CM one.
pub const fn port_of(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    match PortSpace::from_number((sid >> 16) as u16) {
        Some(ps) => Some((ps, sid as u16)),
        None => None,
    }
}

/// The private-data header's meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpCmHeader {
    /// Major and minor version (Linux: 0x00).
    pub version: u8,
    /// The active side's port.
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The address the active side connected to.
    pub dst: IpAddr,
}

impl IpCmHeader {
    /// Parse the header at the start of `private_data` (`off`: where that is in the frame).
    /// The IP version must be 4 or 6 and both addresses of that family; the version byte is
    /// returned as found (the CM layer rejects what it does not speak, as `cma_check_req_qp_type`
    /// and `cma_save_ip_info` do).
    pub fn parse(p: &[u8], off: usize) -> Result<IpCmHeader, Error> {
        let Some(h) = p.first_chunk::<HEADER_LEN>() else {
            return Err(Error::Truncated { layer: Layer::CmIp, offset: off, need: HEADER_LEN, have: p.len() });
        };
        let addr16 = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[at..at + 16]);
            a
        };
        let (src, dst) = match h[1] >> 4 {
            4 => {
                let v4 = |a: [u8; 16]| IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]));
                (v4(addr16(4)), v4(addr16(20)))
            }
            6 => (IpAddr::V6(Ipv6Addr::from(addr16(4))), IpAddr::V6(Ipv6Addr::from(addr16(20)))),
            v => {
                return Err(Error::BadField { layer: Layer::CmIp, offset: off, field: "IP version", value: v as u32 });
            }
        };
        Ok(IpCmHeader { version: h[0], src_port: u16::from_be_bytes([h[2], h[3]]), src, dst })
    }

    /// Write the 36 bytes (`cma_format_hdr`). Both addresses must be of one family.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), Error> {
        let Some(h) = out.first_chunk_mut::<HEADER_LEN>() else {
            return Err(Error::BufferTooSmall { need: HEADER_LEN, have: out.len() });
        };
        h.fill(0);
        h[0] = self.version;
        h[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h[1] = 4 << 4;
                h[16..20].copy_from_slice(&s.octets());
                h[32..36].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                h[1] = 6 << 4;
                h[4..20].copy_from_slice(&s.octets());
                h[20..36].copy_from_slice(&d.octets());
            }
            _ => return Err(Error::InvalidRepr { what: "RDMA-CM header with addresses of two families" }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_linuxs() {
        // rdma_cm.pcap frame 1: rping's default port 18515 in the TCP port space.
        assert_eq!(service_id(PortSpace::Tcp, 18515), 0x0000_0000_0106_4853);
        assert_eq!(port_of(0x0000_0000_0106_4853), Some((PortSpace::Tcp, 18515)));
        assert_eq!(port_of(service_id(PortSpace::Udp, 7)), Some((PortSpace::Udp, 7)));
        assert_eq!(port_of(0x0000_0001_0106_4853), None);
        assert_eq!(port_of(0x0000_0000_0107_0001), None);
    }

    #[test]
    fn header_round_trips_and_rejects() {
        let v4 = IpCmHeader {
            version: 0,
            src_port: 0xccf7,
            src: IpAddr::V4(Ipv4Addr::new(10, 1, 16, 62)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 1, 16, 61)),
        };
        let mut b = [0xffu8; 40];
        v4.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[0x00, 0x40, 0xcc, 0xf7]);
        assert_eq!(&b[4..16], &[0; 12]);
        assert_eq!(&b[16..20], &[10, 1, 16, 62]);
        assert_eq!(&b[32..36], &[10, 1, 16, 61]);
        assert_eq!(&b[36..], &[0xff; 4], "nothing past the header is touched");
        assert_eq!(IpCmHeader::parse(&b, 0), Ok(v4));

        let v6 = IpCmHeader { src: "fd00::1".parse().unwrap(), dst: "fd00::2".parse().unwrap(), ..v4 };
        v6.emit(&mut b).unwrap();
        assert_eq!(b[1], 0x60);
        assert_eq!(IpCmHeader::parse(&b, 0), Ok(v6));

        b[1] = 0x50;
        assert!(matches!(
            IpCmHeader::parse(&b, 7),
            Err(Error::BadField { field: "IP version", value: 5, offset: 7, .. })
        ));
        assert!(matches!(IpCmHeader::parse(&b[..35], 0), Err(Error::Truncated { need: 36, have: 35, .. })));
        let mixed = IpCmHeader { dst: "fd00::2".parse().unwrap(), ..v4 };
        assert!(matches!(mixed.emit(&mut b), Err(Error::InvalidRepr { .. })));
        assert!(matches!(v4.emit(&mut b[..35]), Err(Error::BufferTooSmall { need: 36, have: 35 })));
    }
}
