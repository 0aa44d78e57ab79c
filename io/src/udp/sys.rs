//! Socket setup and the `libc` details of the UDP backend: options, socket addresses, control
//! messages. Every `unsafe` block here wraps one syscall or one read/write of a C struct.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::UdpOptions;

// Kernel ABI values (include/uapi/linux/udp.h, in.h, in6.h, socket.h): stable since the
// releases that introduced them; spelled out so the build does not depend on which of them a
// given `libc` version exports for this target.
pub(super) const SOL_UDP: libc::c_int = 17;
pub(super) const UDP_NO_CHECK6_TX: libc::c_int = 101;
pub(super) const UDP_NO_CHECK6_RX: libc::c_int = 102;
pub(super) const UDP_SEGMENT: libc::c_int = 103;
pub(super) const UDP_GRO: libc::c_int = 104;
const SO_NO_CHECK: libc::c_int = 11;
const SO_RCVBUFFORCE: libc::c_int = 33;
const SO_SNDBUFFORCE: libc::c_int = 32;
const IP_MTU_DISCOVER: libc::c_int = 10;
const IP_PMTUDISC_DO: libc::c_int = 2;
const IPV6_MTU_DISCOVER: libc::c_int = 23;
const IPV6_PMTUDISC_DO: libc::c_int = 2;
pub(super) const IP_PKTINFO: libc::c_int = 8;
pub(super) const IP_TOS: libc::c_int = 1;
pub(super) const IP_TTL: libc::c_int = 2;
const IP_RECVTTL: libc::c_int = 12;
const IP_RECVTOS: libc::c_int = 13;
const IPV6_RECVPKTINFO: libc::c_int = 49;
pub(super) const IPV6_PKTINFO: libc::c_int = 50;
const IPV6_RECVHOPLIMIT: libc::c_int = 51;
pub(super) const IPV6_HOPLIMIT: libc::c_int = 52;
const IPV6_RECVTCLASS: libc::c_int = 66;
pub(super) const IPV6_TCLASS: libc::c_int = 67;

/// `setsockopt` with an `int` value.
pub(super) fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its exact size is passed; `fd` is a socket
    // owned by the caller (a bad fd only makes the call fail).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt` that names the option in its error.
fn set_named(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int, what: &str) -> io::Result<()> {
    set_int(fd, level, name, value).map_err(|e| io::Error::new(e.kind(), format!("setsockopt {what}: {e}")))
}

/// A socket address in C form.
pub(super) fn to_c(addr: SocketAddr, scope_id: u32) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let scope = if a.scope_id() != 0 {
                a.scope_id()
            } else if is_link_local(a.ip()) {
                scope_id
            } else {
                0
            };
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: scope,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A socket address from C form (`None` for other families or a short length).
pub(super) fn from_c(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in (the kernel wrote it), and
            // sockaddr_storage is aligned for it.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), 0, sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

pub(super) fn is_link_local(ip: &Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

/// Create, configure and bind the socket. Returns it and the address it is bound to.
pub(super) fn open(local: SocketAddr, opts: &UdpOptions, scope_id: u32) -> io::Result<(OwnedFd, SocketAddr)> {
    let v6 = local.is_ipv6();
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let s = fd.as_raw_fd();
    if v6 {
        // Only IPv6 datagrams: a v4-mapped sender would get IPv6 headers synthesized wrongly.
        set_named(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1, "IPV6_V6ONLY")?;
    }
    if opts.reuse_addr {
        set_named(s, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, "SO_REUSEADDR")?;
    }
    if opts.shared {
        set_named(s, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1, "SO_REUSEPORT")?;
    }
    if opts.socket_buffer > 0 {
        let n = opts.socket_buffer.min(i32::MAX as usize / 2) as libc::c_int;
        // The FORCE variants ignore rmem_max/wmem_max but need CAP_NET_ADMIN.
        if set_int(s, libc::SOL_SOCKET, SO_RCVBUFFORCE, n).is_err() {
            set_named(s, libc::SOL_SOCKET, libc::SO_RCVBUF, n, "SO_RCVBUF")?;
        }
        if set_int(s, libc::SOL_SOCKET, SO_SNDBUFFORCE, n).is_err() {
            set_named(s, libc::SOL_SOCKET, libc::SO_SNDBUF, n, "SO_SNDBUF")?;
        }
    }
    if let Some(ifname) = &opts.interface {
        let name = ifname.as_bytes();
        // SAFETY: the option value is the interface name's bytes, with its exact length.
        let rc = unsafe {
            libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_BINDTODEVICE, name.as_ptr().cast(), name.len() as _)
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("SO_BINDTODEVICE {ifname}: {e}")));
        }
    }
    if v6 {
        set_named(s, libc::IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER")?;
        set_named(s, libc::IPPROTO_IPV6, IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO")?;
        set_named(s, libc::IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")?;
        set_named(s, libc::IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT")?;
        // RFC 6935/6936 zero-checksum UDP over IPv6: rxe and ConnectX send checksum 0; without
        // UDP_NO_CHECK6_RX the kernel drops those as UDP6 InCsumErrors (verified on 6.18).
        set_named(s, SOL_UDP, UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX")?;
        if !opts.gso {
            // The kernel refuses UDP_SEGMENT on a socket without TX checksums (EINVAL).
            set_named(s, SOL_UDP, UDP_NO_CHECK6_TX, 1, "UDP_NO_CHECK6_TX")?;
        }
    } else {
        // DF set; with it an unconnected socket sends IP ID 0 (ip_select_ident_segs).
        set_named(s, libc::IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER")?;
        set_named(s, libc::IPPROTO_IP, IP_PKTINFO, 1, "IP_PKTINFO")?;
        set_named(s, libc::IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS")?;
        set_named(s, libc::IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL")?;
        if !opts.gso {
            // UDP checksum 0 on transmit, as rxe and ConnectX send.
            set_named(s, libc::SOL_SOCKET, SO_NO_CHECK, 1, "SO_NO_CHECK")?;
        }
    }
    if opts.gro {
        set_named(s, SOL_UDP, UDP_GRO, 1, "UDP_GRO")?;
    }
    let (ss, len) = to_c(local, scope_id);
    // SAFETY: `ss` holds a socket address of `len` bytes.
    if unsafe { libc::bind(s, (&ss as *const libc::sockaddr_storage).cast(), len) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("bind {local}: {e}")));
    }
    // SAFETY: sockaddr_storage is plain old data.
    let mut bound: libc::sockaddr_storage = unsafe { zeroed() };
    let mut blen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `bound`/`blen` are valid for writes; the kernel writes at most `blen` bytes.
    if unsafe { libc::getsockname(s, (&mut bound as *mut libc::sockaddr_storage).cast(), &mut blen) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let bound = from_c(&bound, blen).ok_or_else(|| io::Error::other("getsockname: unexpected address family"))?;
    Ok((fd, bound))
}

/// Append one control message (`level`, `ty`, `data`) at `*off` in `buf`; false if it does
/// not fit.
pub(super) fn put_cmsg(buf: &mut [u8], off: &mut usize, level: libc::c_int, ty: libc::c_int, data: &[u8]) -> bool {
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
    let (space, clen) = unsafe { (libc::CMSG_SPACE(data.len() as u32) as usize, libc::CMSG_LEN(data.len() as u32)) };
    // SAFETY: as above.
    let hdr_len = unsafe { libc::CMSG_LEN(0) } as usize;
    if *off + space > buf.len() {
        return false;
    }
    // SAFETY: cmsghdr is plain old data; all-zero is valid.
    let mut h: libc::cmsghdr = unsafe { zeroed() };
    h.cmsg_len = clen as _;
    h.cmsg_level = level;
    h.cmsg_type = ty;
    let at = &mut buf[*off..*off + space];
    at.fill(0);
    // SAFETY: `at` holds at least size_of::<cmsghdr>() bytes (CMSG_SPACE includes the
    // header); write_unaligned has no alignment requirement.
    unsafe { std::ptr::write_unaligned(at.as_mut_ptr().cast::<libc::cmsghdr>(), h) };
    at[hdr_len..hdr_len + data.len()].copy_from_slice(data);
    *off += space;
    true
}

/// What the control messages of a received datagram said.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RecvInfo {
    /// Destination address of the datagram (IP_PKTINFO `ipi_addr` / IPV6_PKTINFO).
    pub dst: Option<IpAddr>,
    /// ToS / traffic class byte.
    pub tos: u8,
    /// TTL / hop limit.
    pub ttl: Option<u8>,
    /// UDP GRO segment size.
    pub gso_size: Option<usize>,
}

/// Parse the control messages the kernel wrote into `ctrl[..len]`.
pub(super) fn parse_cmsgs(ctrl: &[u8], len: usize) -> RecvInfo {
    let mut info = RecvInfo::default();
    let len = len.min(ctrl.len());
    // SAFETY: pure arithmetic.
    let hdr_len = unsafe { libc::CMSG_LEN(0) } as usize;
    let mut off = 0usize;
    while off + hdr_len <= len {
        // SAFETY: `off + hdr_len <= ctrl.len()`: a whole cmsghdr is in bounds; read_unaligned
        // has no alignment requirement.
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(ctrl[off..].as_ptr().cast()) };
        let clen = h.cmsg_len as usize;
        if clen < hdr_len || off + clen > len {
            break;
        }
        let data = &ctrl[off + hdr_len..off + clen];
        let int = || data.get(..4).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        match (h.cmsg_level, h.cmsg_type) {
            (libc::IPPROTO_IP, IP_PKTINFO) if data.len() >= 12 => {
                // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
                info.dst = Some(IpAddr::V4(Ipv4Addr::new(data[8], data[9], data[10], data[11])));
            }
            (libc::IPPROTO_IP, IP_TOS) if !data.is_empty() => info.tos = data[0],
            (libc::IPPROTO_IP, IP_TTL) => info.ttl = int().map(|v| v.clamp(0, 255) as u8),
            (libc::IPPROTO_IPV6, IPV6_PKTINFO) if data.len() >= 16 => {
                // struct in6_pktinfo { in6_addr ipi6_addr; int ipi6_ifindex; }
                let mut a = [0u8; 16];
                a.copy_from_slice(&data[..16]);
                info.dst = Some(IpAddr::V6(Ipv6Addr::from(a)));
            }
            (libc::IPPROTO_IPV6, IPV6_TCLASS) => info.tos = int().map_or(0, |v| v.clamp(0, 255) as u8),
            (libc::IPPROTO_IPV6, IPV6_HOPLIMIT) => info.ttl = int().map(|v| v.clamp(0, 255) as u8),
            (SOL_UDP, UDP_GRO) => {
                // The kernel writes an int; accept a u16 too (both little-endian prefixes).
                let v = match data.len() {
                    n if n >= 4 => int().unwrap_or(0),
                    2 => i32::from(u16::from_ne_bytes([data[0], data[1]])),
                    _ => 0,
                };
                if v > 0 {
                    info.gso_size = Some(v as usize);
                }
            }
            _ => {}
        }
        // SAFETY: pure arithmetic.
        off += unsafe { libc::CMSG_SPACE((clen - hdr_len) as u32) } as usize;
    }
    info
}
