//! Connecting a QP to a peer: the steps every application (`uroce perf`, `uroce pingpong`, the
//! tests, the coming C ABI) takes around its out-of-band exchange, written once.
//!
//! * the local GID: [`gid_order`] is the GID table rxe builds for a netdev (the order
//!   [`Port`](super::Port) uses), [`choose_local_ip`] picks the entry an application asked for
//!   (`-x` / `-g`) or the IPv4-mapped one;
//! * the TCP connection the exchange runs over: [`listen_tcp`] and [`connect_tcp`] (a client
//!   waits for a server that is not up yet);
//! * the peer's MAC: [`peer_mac`], from the kernel's neighbour table (the kernel does ARP/ND);
//! * the QP itself, RESET → INIT → RTR → RTS with IBTA's masks: [`connect_rc`] and its steps,
//!   re-exported from [`uroce_transport::connect`].

pub use uroce_transport::connect::*;

use crate::netif;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use uroce_wire::EthernetAddress;

/// The GID table rxe builds for a netdev: IPv6 link-local first, then IPv4 (as IPv4-mapped),
/// then the other IPv6 addresses.
pub fn gid_order(ips: &[IpAddr]) -> Vec<IpAddr> {
    let ll = |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    let mut out: Vec<IpAddr> = ips.iter().filter(|ip| ll(ip)).copied().collect();
    out.extend(ips.iter().filter(|ip| ip.is_ipv4()));
    out.extend(ips.iter().filter(|ip| ip.is_ipv6() && !ll(ip)));
    out
}

/// The GID table a port presents for an interface with `mac` and `ips`: the addresses in
/// [`gid_order`], with the MAC's link-local GID first when the interface has no IPv6
/// link-local address (so index 0 is link-local, as rxe's is).
pub fn gid_table(mac: EthernetAddress, ips: &[IpAddr]) -> Vec<uroce_transport::verbs::Gid> {
    use uroce_transport::verbs::Gid;
    let ips = gid_order(ips);
    let mut gids: Vec<Gid> = ips.iter().map(|ip| Gid::from_ip(*ip)).collect();
    if gids.is_empty() || !ips.first().is_some_and(|ip| ip.is_ipv6()) {
        gids.insert(0, Gid::link_local(mac));
    }
    gids
}

/// Why no local address could be chosen.
#[derive(Debug)]
pub enum GidChoiceError {
    /// Neither an interface nor a local address was given.
    NoInterface,
    /// The interface could not be read.
    Interface {
        /// Its name.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// The GID table has no entry `index`.
    NoIndex {
        /// The interface.
        name: String,
        /// The index asked for.
        index: u8,
    },
    /// The interface has no address at all.
    NoAddress {
        /// The interface.
        name: String,
    },
}

impl fmt::Display for GidChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidChoiceError::NoInterface => {
                f.write_str("give the interface with -d, or a local address with --local-ip")
            }
            GidChoiceError::Interface { name, source } => write!(f, "interface {name}: {source}"),
            GidChoiceError::NoIndex { name, index } => write!(f, "{name} has no GID index {index}"),
            GidChoiceError::NoAddress { name } => write!(f, "{name} has no IP address"),
        }
    }
}

impl std::error::Error for GidChoiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GidChoiceError::Interface { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The local address to run on: `local_ip` when given; else the address of `ifname` whose GID
/// is `gid_index` in rxe's order ([`gid_order`]); else the IPv4-mapped GID (what perftest and
/// `ibv_rc_pingpong` are usually run with on RoCE), else the first.
pub fn choose_local_ip(
    ifname: Option<&str>,
    local_ip: Option<IpAddr>,
    gid_index: Option<u8>,
) -> Result<IpAddr, GidChoiceError> {
    if let Some(ip) = local_ip {
        return Ok(ip);
    }
    let name = ifname.ok_or(GidChoiceError::NoInterface)?;
    let i = netif::Interface::by_name(name)
        .map_err(|source| GidChoiceError::Interface { name: name.to_string(), source })?;
    let order = gid_order(&i.addresses());
    match gid_index {
        Some(index) => {
            order.get(index as usize).copied().ok_or(GidChoiceError::NoIndex { name: name.to_string(), index })
        }
        None => order
            .iter()
            .find(|ip| ip.is_ipv4())
            .or(order.first())
            .copied()
            .ok_or(GidChoiceError::NoAddress { name: name.to_string() }),
    }
}

/// Listen for the exchange on every address of TCP `port`: the IPv6 wildcard first (which also
/// takes IPv4 unless `bindv6only`) when `ipv6_first`, else `0.0.0.0` first; the other when the
/// first cannot be bound.
pub fn listen_tcp(port: u16, ipv6_first: bool) -> io::Result<TcpListener> {
    let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
    let (first, second) = if ipv6_first { (v6, v4) } else { (v4, v6) };
    TcpListener::bind(first).or_else(|_| TcpListener::bind(second))
}

/// Why [`connect_tcp`] gave up.
#[derive(Debug)]
pub enum TcpConnectError {
    /// The host name did not resolve.
    Resolve(io::Error),
    /// No server accepted before the deadline; the last refusal, if any.
    Timeout(Option<io::Error>),
}

impl fmt::Display for TcpConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpConnectError::Resolve(e) => write!(f, "resolve: {e}"),
            TcpConnectError::Timeout(Some(e)) => write!(f, "no server: {e}"),
            TcpConnectError::Timeout(None) => f.write_str("no server"),
        }
    }
}

impl std::error::Error for TcpConnectError {}

/// How often [`connect_tcp`] tries again after a refusal.
pub const CONNECT_RETRY: Duration = Duration::from_millis(100);

/// Connect to `host:port`, trying every address it resolves to until one accepts or `timeout`
/// has passed (a stock tool gives up at once; uroce waits, so a client may start first).
/// `waiting` is called once, after the first round of refusals, to tell the user.
pub fn connect_tcp(
    host: &str,
    port: u16,
    timeout: Duration,
    mut waiting: impl FnMut(),
) -> Result<TcpStream, TcpConnectError> {
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs().map_err(TcpConnectError::Resolve)?.collect();
    let deadline = Instant::now() + timeout;
    let mut last = None;
    let mut told = false;
    loop {
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if !told {
            told = true;
            waiting();
        }
        if Instant::now() >= deadline {
            return Err(TcpConnectError::Timeout(last));
        }
        std::thread::sleep(CONNECT_RETRY);
    }
}

/// How long [`peer_mac`] waits for the kernel to resolve a neighbour.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The MAC the AV needs for `peer` (`ibv_modify_qp` asks the kernel the same): from `ifname`'s
/// neighbour table, resolving it if needed; without an interface (kernel UDP on loopback, where
/// the kernel builds the Ethernet header) a placeholder the backend ignores.
pub fn peer_mac(ifname: Option<&str>, peer: IpAddr) -> anyhow::Result<EthernetAddress> {
    use anyhow::Context;
    match ifname {
        Some(name) => netif::resolve_mac(name, peer, RESOLVE_TIMEOUT)
            .with_context(|| format!("resolve the MAC of {peer} on {name}")),
        None => Ok(EthernetAddress([0x02, 0, 0, 0, 0, 0x02])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_order_is_rxes() {
        let ll: IpAddr = "fe80::1".parse().unwrap();
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(gid_order(&[v6, v4, ll]), vec![ll, v4, v6]);
        assert_eq!(gid_order(&[v4]), vec![v4]);
    }

    #[test]
    fn a_given_local_address_wins_and_no_interface_is_an_error() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(choose_local_ip(None, Some(ip), Some(3)).unwrap(), ip);
        assert!(matches!(choose_local_ip(None, None, None), Err(GidChoiceError::NoInterface)));
    }
}
