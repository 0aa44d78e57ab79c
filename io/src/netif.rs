//! What the runtime needs to know about a network interface, and the peer's MAC from the
//! kernel's neighbour table — without spawning `ip`.
//!
//! # Contract
//!
//! * [`Interface::by_name`]: index (`if_nametoindex`), MAC, MTU and queue count from an
//!   rtnetlink `RTM_GETLINK` (`IFLA_ADDRESS`, `IFLA_MTU`, `IFLA_NUM_RX_QUEUES`), the active RX
//!   queue count from `ETHTOOL_GCHANNELS` where the driver reports channels, and the IPv4/IPv6
//!   addresses from `getifaddrs`. Everything goes through sockets, which answer for the
//!   network namespace of the *calling thread*. (`/sys/class/net` would not: sysfs shows the
//!   namespace of whoever mounted it, so a thread that entered another namespace with
//!   `setns` — the tests, or a runtime moved into a namespace — would read the wrong device.)
//! * [`resolve_mac`]: the neighbour entry for an on-link IP address (rtnetlink
//!   `RTM_GETNEIGH` dump: `NDA_DST`, `NDA_LLADDR`; usable states REACHABLE, STALE, DELAY,
//!   PROBE, PERMANENT, NOARP). If there is none it makes the kernel resolve one — a one-byte
//!   UDP datagram to the discard port (9) of the address, sent out of the interface
//!   (`SO_BINDTODEVICE`, or `IP_UNICAST_IF`/`IPV6_UNICAST_IF` without CAP_NET_RAW) — and
//!   waits for the table to change (a netlink socket subscribed to `RTMGRP_NEIGH` wakes it;
//!   it re-probes every 500 ms) until the timeout, then fails with `TimedOut`. ARP (IPv4) and ND (IPv6) both work, also while an XDP program is
//!   attached (it passes ARP/ND to the kernel).
//! * The address must be on-link: a routed peer's MAC is its gateway's, which this function
//!   does not look up.
//!
//! Every call opens its own short-lived sockets; nothing is cached. The rtnetlink messages are
//! built and parsed by `netlink-packet-route` (on `netlink-packet-core`), the netlink sockets
//! are `netlink-sys`'s; an answer the crate cannot parse is skipped, not fatal.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use netlink_packet_core::{NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use uroce_wire::EthernetAddress;

/// What the runtime needs about an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// Hardware address (all zero for interfaces without an Ethernet address).
    pub mac: EthernetAddress,
    /// MTU (bytes of IP packet).
    pub mtu: u32,
    /// IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// IPv6 addresses (link-local ones included).
    pub ipv6: Vec<Ipv6Addr>,
    /// Active RX queues (where the AF_XDP sockets bind).
    pub rx_queues: u32,
    /// RX queues the device has allocated (the most it can activate).
    pub max_rx_queues: u32,
}

impl Interface {
    /// Look an interface up in the calling thread's network namespace.
    pub fn by_name(name: &str) -> io::Result<Interface> {
        let index = ifindex(name)?;
        let link = get_link(index)?;
        let (ipv4, ipv6) = addresses(name)?;
        let rx_queues = match channels(name) {
            Ok(n) if n > 0 => n,
            _ => link.num_rx_queues.max(1),
        };
        Ok(Interface {
            name: name.to_string(),
            index,
            mac: link.mac,
            mtu: link.mtu,
            ipv4,
            ipv6,
            rx_queues,
            max_rx_queues: link.num_rx_queues.max(rx_queues),
        })
    }

    /// Every address, IPv4 first.
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.ipv4.iter().map(|a| IpAddr::V4(*a)).chain(self.ipv6.iter().map(|a| IpAddr::V6(*a))).collect()
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// `if_nametoindex`, as an error when there is no such interface.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface named {name}")));
    }
    Ok(idx)
}

// ---------------------------------------------------------------------------------------
// rtnetlink: messages built and parsed by `netlink-packet-route`, sockets from `netlink-sys`

/// `struct nlmsghdr`.
const NETLINK_HEADER_LEN: usize = 16;
/// `RTMGRP_NEIGH`: the multicast group of neighbour-table changes.
const RTMGRP_NEIGH: u32 = 4;

/// Neighbour states (`NUD_*`).
pub mod nud {
    /// Resolution in progress.
    pub const INCOMPLETE: u16 = 0x01;
    /// Confirmed reachable.
    pub const REACHABLE: u16 = 0x02;
    /// Known, not recently confirmed.
    pub const STALE: u16 = 0x04;
    /// Waiting before probing.
    pub const DELAY: u16 = 0x08;
    /// Being probed.
    pub const PROBE: u16 = 0x10;
    /// Resolution failed.
    pub const FAILED: u16 = 0x20;
    /// No resolution needed.
    pub const NOARP: u16 = 0x40;
    /// Static entry.
    pub const PERMANENT: u16 = 0x80;
    /// States whose link-layer address can be used.
    pub const USABLE: u16 = REACHABLE | STALE | DELAY | PROBE | PERMANENT | NOARP;
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A NETLINK_ROUTE socket, optionally subscribed to multicast `groups`.
fn netlink_socket(groups: u32) -> io::Result<Socket> {
    let mut s = Socket::new(NETLINK_ROUTE)?;
    s.bind(&SocketAddr::new(0, groups))?;
    // A kernel that never answers must not hang us.
    let tv = libc::timeval { tv_sec: 2, tv_usec: 0 };
    // SAFETY: `tv` is a timeval of the size given; the descriptor is the socket's, open.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

fn recv_some(s: &Socket, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        match s.recv(&mut &mut buf[..], flags) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Send one request and collect the answers until `NLMSG_DONE` (`dump`) or the first answer.
/// An answer the crate cannot parse is skipped (and logged), not fatal: the kernel may know
/// attributes the crate does not.
fn request(msg: RouteNetlinkMessage, dump: bool) -> io::Result<Vec<RouteNetlinkMessage>> {
    let s = netlink_socket(0)?;
    let seq: u32 = 1;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
    header.sequence_number = seq;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
    req.finalize();
    let mut bytes = vec![0u8; req.header.length as usize];
    req.serialize(&mut bytes);
    s.send_to(&bytes, &SocketAddr::new(0, 0), 0)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = recv_some(&s, &mut buf, 0)?;
        let mut off = 0;
        while off < n {
            let frame = NetlinkBuffer::new_checked(&buf[off..n]).map_err(|e| invalid(format!("netlink: {e}")))?;
            let len = frame.length() as usize;
            if len < NETLINK_HEADER_LEN {
                return Err(invalid("netlink: bad message length"));
            }
            let (mseq, bytes) = (frame.sequence_number(), &buf[off..off + len]);
            off += align4(len);
            if mseq != seq {
                continue;
            }
            let m = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(error = %e, "netlink: answer not parsed, skipped");
                    continue;
                }
            };
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => match e.code {
                    // An ACK.
                    None if !dump => return Ok(out),
                    None => {}
                    Some(code) => return Err(io::Error::from_raw_os_error(-code.get())),
                },
                NetlinkPayload::InnerMessage(m) => {
                    out.push(m);
                    if !dump {
                        return Ok(out);
                    }
                }
                _ => {}
            }
        }
    }
}

struct Link {
    mac: EthernetAddress,
    mtu: u32,
    num_rx_queues: u32,
}

fn get_link(index: u32) -> io::Result<Link> {
    let mut m = LinkMessage::default();
    m.header.index = index;
    let link = request(RouteNetlinkMessage::GetLink(m), false)?
        .into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(l),
            _ => None,
        })
        .ok_or_else(|| invalid("netlink: no RTM_NEWLINK answer"))?;
    let mut out = Link { mac: EthernetAddress([0; 6]), mtu: 0, num_rx_queues: 0 };
    for a in &link.attributes {
        match a {
            LinkAttribute::Address(v) if v.len() == 6 => out.mac.0.copy_from_slice(v),
            LinkAttribute::Mtu(v) => out.mtu = *v,
            LinkAttribute::NumRxQueues(v) => out.num_rx_queues = *v,
            _ => {}
        }
    }
    if out.mtu == 0 {
        return Err(invalid("netlink: link without IFLA_MTU"));
    }
    Ok(out)
}

/// A neighbour-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Interface index.
    pub ifindex: u32,
    /// The neighbour's IP address.
    pub ip: IpAddr,
    /// Its link-layer address, when the entry has a 6-byte one.
    pub mac: Option<EthernetAddress>,
    /// `NUD_*` state bits ([`nud`]).
    pub state: u16,
}

/// The entry an `RTM_NEWNEIGH` message describes, if it has an IP address.
fn neighbour_of(m: &NeighbourMessage) -> Option<Neighbour> {
    let mut ip = None;
    let mut mac = None;
    for a in &m.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => ip = Some(IpAddr::V4(*v4)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => ip = Some(IpAddr::V6(*v6)),
            NeighbourAttribute::LinkLayerAddress(v) if v.len() == 6 => {
                let mut a = [0u8; 6];
                a.copy_from_slice(v);
                mac = Some(EthernetAddress(a));
            }
            _ => {}
        }
    }
    Some(Neighbour { ifindex: m.header.ifindex, ip: ip?, mac, state: u16::from(m.header.state) })
}

/// Every neighbour entry of interface `ifindex` for the address family of `family_of`.
pub fn neighbours(ifindex: u32, family_of: IpAddr) -> io::Result<Vec<Neighbour>> {
    let mut m = NeighbourMessage::default();
    m.header.family = if family_of.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    m.header.ifindex = ifindex;
    Ok(request(RouteNetlinkMessage::GetNeighbour(m), true)?
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => neighbour_of(n),
            _ => None,
        })
        .filter(|n| n.ifindex == ifindex)
        .collect())
}

/// The usable MAC of `ip` on `ifindex`, if the table has one.
pub fn lookup_mac(ifindex: u32, ip: IpAddr) -> io::Result<Option<EthernetAddress>> {
    Ok(neighbours(ifindex, ip)?
        .into_iter()
        .find(|n| n.ip == ip && n.state & nud::USABLE != 0 && n.mac.is_some())
        .and_then(|n| n.mac))
}

/// Make the kernel resolve `ip` on `ifname`: send one byte to its discard port from a socket
/// tied to the interface. Errors are ignored by the caller (the point is the side effect).
fn probe(ifname: &str, ifindex: u32, ip: IpAddr) -> io::Result<()> {
    let family = if ip.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let s = fd.as_raw_fd();
    let name = ifname.as_bytes();
    // SAFETY: the option value is the interface name's bytes, with its exact length.
    let bound =
        unsafe { libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_BINDTODEVICE, name.as_ptr().cast(), name.len() as _) }
            == 0;
    if !bound {
        // Without CAP_NET_RAW: choose the outgoing interface per datagram instead.
        let (level, opt, v) = if ip.is_ipv4() {
            // IP_UNICAST_IF takes the index in network byte order.
            (libc::IPPROTO_IP, libc::IP_UNICAST_IF, (ifindex as i32).to_be())
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_IF, ifindex as i32)
        };
        // SAFETY: `v` is an int of the size given.
        let rc =
            unsafe { libc::setsockopt(s, level, opt, (&v as *const i32).cast(), size_of::<i32>() as libc::socklen_t) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: sockaddr_storage is plain old data.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match ip {
        IpAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 9u16.to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 9u16.to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.octets() },
                sin6_scope_id: if a.segments()[0] & 0xffc0 == 0xfe80 { ifindex } else { 0 },
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    let byte = [0u8; 1];
    // SAFETY: `byte` and `ss` are valid for the lengths given.
    let rc =
        unsafe { libc::sendto(s, byte.as_ptr().cast(), 1, 0, (&ss as *const libc::sockaddr_storage).cast(), len as _) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How often an unresolved neighbour is probed again.
const REPROBE: Duration = Duration::from_millis(500);

/// The MAC of on-link `ip` on interface `ifname`, from the kernel's neighbour table, making
/// the kernel resolve it (ARP / ND) if needed; `TimedOut` if nothing usable appears within
/// `timeout`.
pub fn resolve_mac(ifname: &str, ip: IpAddr, timeout: Duration) -> io::Result<EthernetAddress> {
    // One of the interface's own addresses (another process on it, or this one): its own MAC,
    // as the kernel's rdma_cm resolves a local address (`rdma_resolve_ip` → the device's).
    if let Ok(me) = Interface::by_name(ifname) {
        if me.addresses().contains(&ip) {
            return Ok(me.mac);
        }
    }
    let index = ifindex(ifname)?;
    let deadline = Instant::now() + timeout;
    // Subscribe before the first lookup so no update between lookup and wait is missed.
    let monitor = netlink_socket(RTMGRP_NEIGH)?;
    let mut next_probe = Instant::now();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if let Some(mac) = lookup_mac(index, ip)? {
            return Ok(mac);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no neighbour entry for {ip} on {ifname} after {timeout:?}"),
            ));
        }
        if now >= next_probe {
            if let Err(e) = probe(ifname, index, ip) {
                tracing::debug!(error = %e, %ip, ifname, "neighbour probe");
            }
            next_probe = now + REPROBE;
        }
        // Sleep until a neighbour event, the next probe or the deadline.
        let wake = deadline.min(next_probe);
        let ms = wake.saturating_duration_since(Instant::now()).as_millis().clamp(1, 1000) as libc::c_int;
        let mut pfd = libc::pollfd { fd: monitor.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r > 0 {
            // Drain the events; the table is read again above.
            while recv_some(&monitor, &mut buf, libc::MSG_DONTWAIT).is_ok_and(|n| n > 0) {}
        }
    }
}

/// Active RX queues from `ETHTOOL_GCHANNELS` (`rx_count + combined_count`).
fn channels(name: &str) -> io::Result<u32> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined, rx_count,
    // tx_count, other_count, combined_count.
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= ifr.ifr_name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = ch.as_mut_ptr().cast();
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `ifr` names the interface and points at `ch`, a 36-byte ethtool_channels the
    // kernel fills; both outlive the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ch[5] + ch[8])
}

/// One IP address of an interface, from `getifaddrs`.
struct IfAddr {
    name: String,
    flags: i32,
    ip: IpAddr,
}

/// Every IPv4 and IPv6 address of every interface (`getifaddrs`, in the calling thread's
/// network namespace).
fn if_addrs() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family field is readable.
        let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = if fam == libc::AF_INET {
            // SAFETY: the family says it is a sockaddr_in.
            let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
            IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()))
        } else if fam == libc::AF_INET6 {
            // SAFETY: the family says it is a sockaddr_in6.
            let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
            IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
        } else {
            continue;
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        out.push(IfAddr { name, flags: ifa.ifa_flags as i32, ip });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Interfaces that are UP, not loopback and have an IPv4 or IPv6 address, in interface-index
/// order (in the calling thread's network namespace).
pub fn up_interfaces() -> io::Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for a in if_addrs()? {
        if a.flags & libc::IFF_UP != 0 && a.flags & libc::IFF_LOOPBACK == 0 && !names.contains(&a.name) {
            names.push(a.name);
        }
    }
    let mut indexed: Vec<(u32, String)> = names.into_iter().filter_map(|n| ifindex(&n).ok().map(|i| (i, n))).collect();
    indexed.sort();
    Ok(indexed.into_iter().map(|(_, n)| n).collect())
}

/// IPv4 and IPv6 addresses of `name` (`getifaddrs`).
fn addresses(name: &str) -> io::Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for a in if_addrs()?.into_iter().filter(|a| a.name == name) {
        match a.ip {
            IpAddr::V4(x) => v4.push(x),
            IpAddr::V6(x) => v6.push(x),
        }
    }
    Ok((v4, v6))
}

#[cfg(test)]
mod tests {
    use super::*;

    use netlink_packet_core::Parseable;

    const NDA_DST: u16 = 1;
    const NDA_LLADDR: u16 = 2;

    /// Parse one `RTM_NEWNEIGH` message body (ndmsg + attributes) as `neighbours` does.
    fn parse_neighbour(m: &[u8]) -> Option<Neighbour> {
        neighbour_of(&NeighbourMessage::parse(m).ok()?)
    }

    fn rtattr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        a.resize(align4(a.len()), 0);
        a
    }

    fn ndmsg(family: u8, ifindex: i32, state: u16) -> Vec<u8> {
        let mut m = vec![family, 0, 0, 0];
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&state.to_ne_bytes());
        m.extend_from_slice(&[0, 1]);
        m
    }

    #[test]
    fn parses_neighbour_messages() {
        let mut m = ndmsg(libc::AF_INET as u8, 7, nud::REACHABLE);
        m.extend(rtattr(NDA_DST, &[10, 99, 0, 2]));
        m.extend(rtattr(NDA_LLADDR, &[2, 0, 0, 0, 0xb, 1]));
        let n = parse_neighbour(&m).expect("neighbour");
        assert_eq!(n.ifindex, 7);
        assert_eq!(n.ip, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)));
        assert_eq!(n.mac, Some(EthernetAddress([2, 0, 0, 0, 0xb, 1])));
        assert_eq!(n.state, nud::REACHABLE);

        let mut m = ndmsg(libc::AF_INET6 as u8, 3, nud::INCOMPLETE);
        m.extend(rtattr(NDA_DST, &Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2).octets()));
        let n = parse_neighbour(&m).expect("neighbour");
        assert_eq!(n.mac, None);
        assert_eq!(n.state & nud::USABLE, 0);
    }

    #[test]
    fn hostile_netlink_bytes_do_not_panic() {
        // Every prefix and some corruptions of a valid message.
        let mut m = ndmsg(libc::AF_INET as u8, 7, nud::STALE);
        m.extend(rtattr(NDA_DST, &[10, 0, 0, 2]));
        m.extend(rtattr(NDA_LLADDR, &[1, 2, 3, 4, 5, 6]));
        for cut in 0..m.len() {
            let _ = parse_neighbour(&m[..cut]);
        }
        for i in 0..m.len() {
            for v in [0u8, 1, 3, 4, 0x7f, 0xff] {
                let mut c = m.clone();
                c[i] = v;
                let _ = parse_neighbour(&c);
            }
        }
        // Attribute lengths that overrun, underrun, or are zero.
        for bad in [&[0u8, 0, 1, 0][..], &[200, 0, 1, 0, 1, 2], &[5, 0, 1, 0, 9]] {
            let mut c = ndmsg(libc::AF_INET as u8, 7, nud::STALE);
            c.extend_from_slice(bad);
            let _ = parse_neighbour(&c);
        }
    }

    #[test]
    fn loopback_is_described() {
        let lo = Interface::by_name("lo").expect("lo exists in every namespace");
        assert_eq!(lo.mac, EthernetAddress([0; 6]));
        assert!(lo.mtu >= 1280, "mtu {}", lo.mtu);
        assert!(lo.rx_queues >= 1);
        assert_eq!(lo.index, ifindex("lo").expect("index"));
        assert!(lo.ipv4.contains(&Ipv4Addr::LOCALHOST) || lo.ipv6.contains(&Ipv6Addr::LOCALHOST));
        let e = Interface::by_name("no-such-if0").expect_err("missing interface");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
