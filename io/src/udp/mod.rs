//! The kernel-UDP fallback datapath: a [`Backend`] over one UDP socket bound to port 4791, for
//! hosts without AF_XDP (no root, no driver support). The engine and the wire format are the
//! same as over AF_XDP; a peer cannot tell the two apart, with the limits listed below.
//!
//! # Contract
//!
//! * **Construction** ([`UdpBackend::new`]): a non-blocking IPv4 or IPv6 socket (by the
//!   address) with DF (`IP_MTU_DISCOVER = IP_PMTUDISC_DO` / `IPV6_MTU_DISCOVER`), UDP checksum
//!   0 on transmit (`SO_NO_CHECK` / `UDP_NO_CHECK6_TX`, as rxe and ConnectX send),
//!   zero-checksum acceptance over IPv6 (`UDP_NO_CHECK6_RX`), packet info, ToS and TTL on
//!   receive, large socket buffers. [`Backend::fixed_udp_src_port`] is the bound port: the
//!   ICRC covers the UDP source port, so the engine must build every frame with it
//!   (`DeviceConfig::udp_sport`).
//! * **Transmit** ([`Backend::send_with`]): the engine writes a whole Ethernet frame into a
//!   queue slot; the backend keeps the UDP payload (BTH .. ICRC) where it is and remembers the
//!   destination, ToS and TTL; [`Backend::flush`] hands the queue to `sendmmsg` (one syscall
//!   per `batch` datagrams), each with `IP_TOS`/`IPV6_TCLASS` and `IP_TTL`/`IPV6_HOPLIMIT`
//!   control messages so the DSCP/ECN the engine chose go on the wire. `EAGAIN` keeps the
//!   queue; `send_with` answers `WouldBlock` only when the queue is full even after a flush.
//!   Frames the socket cannot send as built (wrong IP version, source address or source
//!   port; IPv4 options) are dropped and counted in `tx_bad_frames`.
//! * **Receive** ([`Backend::recv`]): `recvmmsg` into slots with 62 bytes (14 + 40 + 8) of
//!   headroom; the backend writes Ethernet + IP + UDP headers in front of each payload — no
//!   payload copy — reproducing what the sender's ICRC covered: IPv4 version/IHL 5, total
//!   length, ID 0, DF, protocol 17, addresses (destination from `IP_PKTINFO`), UDP ports and
//!   length; ToS and TTL from the control messages (masked by the ICRC anyway); a correct
//!   IPv4 header checksum; UDP checksum 0. IPv6: payload length, next header 17, addresses,
//!   traffic class and hop limit. Ethernet: destination [`UdpOptions::mac`], source
//!   [`PEER_MAC`].
//! * **ICRC**: verified here ([`Backend::verifies_icrc`] is true; run the engine with
//!   `check_icrc = false`). An IPv4 mismatch is first explained, if possible, by the IPv4
//!   identification and DF bit the socket hides (see *IPv4 identification* below); frames
//!   that still fail are dropped and counted in `rx_icrc_err`.
//! * **Counters**: [`UdpCounters`].
//!
//! # IPv4 identification
//!
//! The ICRC covers the IPv4 ID and flags, and a UDP socket neither reports the ID of what it
//! receives nor lets the sender pick it. What is known, verified on this kernel (6.18) by the
//! capture test in `tests/udp_backend.rs`:
//!
//! * an *unconnected* UDP socket with DF sends **ID 0** (`ip_select_ident_segs`: DF set and no
//!   connected destination → `iph->id = 0`); so do uroce's AF_XDP backend and engine. With
//!   those peers the synthesized (ID 0, DF) header is exact.
//! * Linux rxe sends IDs from the kernel's generator (`__ip_select_ident`), different for
//!   every packet; a sender with UDP GSO numbers its segments 0, 1, 2, ...
//!
//! The ICRC is affine in the header bits, so the (ID, DF) a sender used can be solved for
//! exactly from the mismatch between the received ICRC and the one computed for (0, DF): 17
//! unknowns in 32 equations ([`ipid`]; measured in release builds on this VM: 1.3 µs the
//! first time a packet length is seen, 8 ns after that — lengths are cached, and a WRITE
//! burst is a run of one length). With [`UdpOptions::recover_ipv4_id`] (the default) the
//! backend does that and writes the recovered ID and DF into the synthesized header
//! (`rx_id_recovered`), so it also interoperates with rxe over IPv4 (tested with rxe-like
//! frames injected on veth, not against rxe itself: no RDMA in this kernel). The cost is
//! integrity: a random corruption passes as an ID with probability 2^-15 instead of 2^-32 (the
//! Ethernet FCS still checks every hop). With recovery off only "DF clear" is tried, and frames
//! with a nonzero ID fail the check and are dropped (counted). IPv6 has no ID: it works with
//! every peer either way.
//!
//! # GSO / GRO (measured; off in [`UdpOptions::default`], on in the CLI)
//!
//! RoCE packets are independent datagrams, but a WRITE burst is a run of equal-size datagrams
//! to one peer: what `UDP_SEGMENT` batches into one super-datagram that the kernel segments
//! late — or not at all on loopback/veth, where the receiving socket segments it or, with
//! `UDP_GRO`, takes it whole. Measured with this backend over loopback on this 2-core VM
//! (`tests/udp_backend.rs` `measure_loopback_rates`, release, sender and receiver on two
//! threads, 400 000 WRITE_MIDDLE frames in bursts of 32, median of 3 runs):
//!
//! | options | 1024 B payload | 4096 B payload |
//! |---|---|---|
//! | default (`sendmmsg` / `recvmmsg`, batch 64) | 0.57 Mpps, 4.7 Gbit/s | 0.48 Mpps, 15.6 Gbit/s |
//! | `gso` | 1.07 Mpps, 8.7 Gbit/s | 0.87 Mpps, 28 Gbit/s |
//! | `gso` + `gro` | 3.56 Mpps, 29 Gbit/s | 1.41 Mpps, 46 Gbit/s |
//!
//! End to end (`scripts/bench-datapath`, `uroce perf write_bw` 64 KiB messages between two
//! namespaces on veth, pinned, median of 3): 3.99 Gbit/s without, 17.8 Gbit/s with GSO + GRO
//! on both ends, at 0.89 instead of 3.93 CPU s/GB. So the CLI (`uroce perf`, `pingpong`,
//! `demo`) turns both on unless told `--no-udp-gso` / `--no-udp-gro`.
//!
//! It helps (×1.8 with GSO, ×3–6 with GSO + GRO), so [`UdpOptions::gso`] and
//! [`UdpOptions::gro`] are implemented: runs of up to 64 datagrams to one destination with the
//! same ToS/TTL and equal sizes (the last may be shorter), at most 65 000 bytes, go out as one
//! `sendmmsg` entry with a `UDP_SEGMENT` control message; a GRO receiver splits
//! super-datagrams by their `UDP_GRO` segment size, writing each segment's headers over the
//! tail of the previous, already delivered, segment (still no payload copy). They stay off by
//! default because of what they do on the wire:
//!
//! * the kernel refuses `UDP_SEGMENT` on a socket without transmit checksums (`EINVAL`), so a
//!   GSO socket sends computed UDP checksums instead of 0 (valid; the ICRC masks them);
//! * IPv4 segments carry IDs 0, 1, 2, ... (verified by capture after software segmentation
//!   on veth), so the backend patches each datagram's ICRC for the ID it will get ([`ipid`]);
//!   a NIC whose hardware USO numbered segments differently would break them;
//! * over veth the super-datagram crosses into the peer namespace unsegmented: a kernel
//!   socket segments it on receive (this backend: tested; rxe's tunnel socket should, by
//!   `udp_unexpected_gso`: not tested). An AF_XDP peer with *native* XDP on veth is safe:
//!   attaching native XDP strips `NETIF_F_GSO_SOFTWARE` from the veth peer, so the kernel
//!   segments before the veth (tested: `uroce perf` udp+GSO -> xdp, 128 000 frames, every ICRC
//!   good). **An AF_XDP peer in generic XDP mode on veth would see one oversized frame**;
//!   on a real NIC the segments are cut before the wire;
//! * the receiver must recover the segment IDs, so a GSO peer over IPv4 needs
//!   [`UdpOptions::recover_ipv4_id`] on the receiving side.
//!
//! # Limitations
//!
//! * No 802.1Q: a VLAN tag or PCP the engine writes is lost (the kernel routes the datagram).
//! * The IPv6 flow label on the wire is the kernel's (`net.ipv6.auto_flowlabels`), not the
//!   engine's; the ICRC masks it, so only ECMP hashing notices.
//! * IPv4 options cannot be seen on receive; a sender using them fails the ICRC check.
//! * The Ethernet addresses of received frames are placeholders; nothing in the engine
//!   depends on them.
//! * No flow control below the engine: a full receive buffer drops datagrams (the kernel
//!   counts them in `UdpRcvbufErrors`), and RoCE retransmission recovers them.
//! * One socket, one thread: the kernel picks the source interface by route.

pub mod ipid;
mod sys;

use std::collections::VecDeque;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use uroce_wire::{EtherType, EthernetAddress, EthernetFrame, Ipv4Packet, Ipv6Packet, ICRC_LEN};

use self::ipid::{IdDf, IdSolver};
use super::{Backend, MAX_FRAME};

/// Bytes reserved in front of every received payload for the synthesized headers: Ethernet
/// (14) + IPv6 (40, the larger IP header) + UDP (8).
pub const RX_HEADROOM: usize = 14 + 40 + 8;

/// Source MAC of synthesized received frames (the socket does not reveal the peer's).
pub const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0]);

/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 128 since 5.x, 64
/// before).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send (IPv4 UDP payload limit 65507, with room to spare).
const GSO_MAX_BYTES: usize = 65_000;
/// Largest UDP payload (what a GRO receive slot must hold).
const MAX_UDP_PAYLOAD: usize = 65_535;
/// Control buffer bytes per message (PKTINFO + ToS + TTL + segment size/GRO, with room).
const CTRL_LEN: usize = 128;

/// How to open a [`UdpBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpOptions {
    /// The local MAC: destination of synthesized received frames (and nothing else).
    pub mac: EthernetAddress,
    /// Bind to this interface (`SO_BINDTODEVICE`, needs CAP_NET_RAW) and use its index as the
    /// scope of IPv6 link-local addresses.
    pub interface: Option<String>,
    /// `SO_REUSEADDR` (lets the socket coexist with a wildcard socket on the same port; two
    /// uroce processes on one address would then steal each other's datagrams).
    pub reuse_addr: bool,
    /// `SO_RCVBUF` / `SO_SNDBUF` bytes (the `FORCE` variants are tried first, which bypass
    /// `rmem_max` with CAP_NET_ADMIN). 0 leaves the defaults.
    pub socket_buffer: usize,
    /// Datagrams per `sendmmsg` / `recvmmsg` (1..=1024).
    pub batch: usize,
    /// Datagrams the transmit queue holds before `send_with` answers `WouldBlock` (1..=16384;
    /// each slot is [`MAX_FRAME`] bytes).
    pub tx_queue: usize,
    /// Recover the IPv4 identification from the ICRC (see the module docs). Off: only a clear
    /// DF bit is tried.
    pub recover_ipv4_id: bool,
    /// Batch equal-size runs with `UDP_SEGMENT` (see the module docs; sends UDP checksums).
    pub gso: bool,
    /// Accept coalesced datagrams (`UDP_GRO`); receive slots grow to 64 KiB each.
    pub gro: bool,
    /// Share the address and port with other uroce processes (`SO_REUSEPORT`): this process
    /// gets a block of QP numbers, and the kernel gives each datagram to the process owning
    /// its destination QP ([`crate::share`], `uroce_xdp_prog::reuseport`). Needs `CAP_BPF`
    /// (root).
    pub shared: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions {
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0]),
            interface: None,
            reuse_addr: false,
            socket_buffer: 16 << 20,
            batch: 64,
            tx_queue: 1024,
            recover_ipv4_id: true,
            gso: false,
            gro: false,
            shared: false,
        }
    }
}

impl From<EthernetAddress> for UdpOptions {
    /// The default options with this local MAC.
    fn from(mac: EthernetAddress) -> Self {
        UdpOptions { mac, ..UdpOptions::default() }
    }
}

/// What the backend did, since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// Datagrams the kernel accepted.
    pub tx_frames: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
    /// Datagrams dropped because `sendmmsg` failed for them (EMSGSIZE, unreachable, ...).
    pub tx_errors: u64,
    /// Frames from the engine this socket cannot send as built (dropped).
    pub tx_bad_frames: u64,
    /// Frames whose ICRC was patched for the ID/DF the kernel will send.
    pub tx_icrc_patched: u64,
    /// `sendmmsg` calls that found the socket buffer full (frames kept queued).
    pub tx_would_block: u64,
    /// `sendmmsg` calls.
    pub tx_syscalls: u64,
    /// GSO super-datagrams sent.
    pub tx_gso_sends: u64,
    /// Frames delivered to the engine.
    pub rx_frames: u64,
    /// Their UDP payload bytes.
    pub rx_bytes: u64,
    /// Frames dropped for a bad ICRC.
    pub icrc_err: u64,
    /// Datagrams larger than a receive slot (dropped).
    pub truncated: u64,
    /// Datagrams on the port that are not RoCEv2 (dropped).
    pub rx_not_roce: u64,
    /// Malformed RoCEv2 datagrams (dropped).
    pub rx_malformed: u64,
    /// IPv4 frames whose sender's nonzero ID or clear DF was recovered from the ICRC.
    pub rx_id_recovered: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub rx_syscalls: u64,
    /// Received datagrams that carried several GRO segments.
    pub rx_gro_batches: u64,
}

/// A queued transmit datagram: the payload stays in its frame slot.
#[derive(Clone, Copy, Debug)]
struct TxEntry {
    slot: usize,
    /// UDP payload range within the slot.
    off: usize,
    len: usize,
    dst: SocketAddr,
    /// Frame source address (used as the packet-info source when bound to a wildcard).
    src: IpAddr,
    tos: u8,
    ttl: u8,
    /// IPv4: the (ID, DF) the payload's ICRC currently matches.
    applied: IdDf,
}

/// A received datagram waiting to be delivered (possibly several GRO segments).
#[derive(Clone, Copy, Debug)]
struct RxEntry {
    slot: usize,
    len: usize,
    src: SocketAddr,
    dst: IpAddr,
    tos: u8,
    ttl: u8,
    seg: usize,
}

/// The `mmsghdr`/`iovec` arrays handed to the kernel. They hold raw pointers into the
/// backend's own buffers and are rebuilt before every syscall, never used in between.
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the raw pointers in `Scratch` are only written and then handed to one syscall
// within a `&mut self` method of `UdpBackend`; they never outlive that call in any meaningful
// way (stale values are overwritten before the next use), so moving the backend to another
// thread cannot make anything dereference them.
unsafe impl Send for Scratch {}

const NO_ID: IdDf = IdDf { ident: 0, dont_frag: true };

use uroce_xdp_prog::ReuseportSteering;

/// Join the processes sharing `local` and steer this process's QPN block to `fd`.
fn join_shared(fd: &OwnedFd, local: SocketAddr) -> io::Result<(crate::share::Tenancy, ReuseportSteering)> {
    let t = crate::share::join(&format!("udp/{local}"), || {
        let s = ReuseportSteering::create()?;
        s.fds().iter().map(|f| f.try_clone_to_owned()).collect::<io::Result<Vec<_>>>()
    })?;
    let fds = <[OwnedFd; 3]>::try_from(t.fds.iter().map(|f| f.try_clone()).collect::<io::Result<Vec<_>>>()?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "shared UDP steering needs three fds"))?;
    let steering = ReuseportSteering::from_fds(fds);
    steering.attach(fd.as_fd())?;
    steering.insert(u32::from(t.block), fd.as_fd())?;
    tracing::info!(%local, block = t.block, "sharing the UDP port: this process owns QPNs {:#04x}xxxx", t.block);
    Ok((t, steering))
}

/// The kernel-UDP backend.
pub struct UdpBackend {
    fd: OwnedFd,
    /// This process's QPN block and the shared steering, when sharing the port.
    share: Option<(crate::share::Tenancy, ReuseportSteering)>,
    local: SocketAddr,
    scope_id: u32,
    opts: UdpOptions,
    counters: UdpCounters,
    solver: IdSolver,
    // Transmit: `tx_queue` slots of MAX_FRAME bytes.
    tx_buf: Vec<u8>,
    tx_free: Vec<usize>,
    tx_q: VecDeque<TxEntry>,
    tx_names: Vec<libc::sockaddr_storage>,
    tx_ctrl: Vec<[u64; CTRL_LEN / 8]>,
    // Receive: `batch` slots of `rx_stride` bytes.
    rx_buf: Vec<u8>,
    rx_stride: usize,
    rx_names: Vec<libc::sockaddr_storage>,
    rx_ctrl: Vec<[u64; CTRL_LEN / 8]>,
    rx_pending: VecDeque<RxEntry>,
    /// Offset of the next segment within the front pending datagram.
    rx_seg_off: usize,
    scratch: Scratch,
}

impl std::fmt::Debug for UdpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpBackend").field("local", &self.local).field("counters", &self.counters).finish()
    }
}

impl UdpBackend {
    /// Bind a UDP socket to (`local_ip`, `port`) — port 4791 normally; 0 picks one — and set
    /// it up as the module docs describe. `opts` may be just the local MAC.
    pub fn new(local_ip: IpAddr, port: u16, opts: impl Into<UdpOptions>) -> io::Result<UdpBackend> {
        let opts = opts.into();
        if opts.batch == 0 || opts.batch > 1024 || opts.tx_queue == 0 || opts.tx_queue > 16_384 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "batch must be 1..=1024, tx_queue 1..=16384"));
        }
        let scope_id = match &opts.interface {
            Some(name) => {
                let c = std::ffi::CString::new(name.as_str())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
                // SAFETY: `c` is a NUL-terminated string that outlives the call.
                let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
                if idx == 0 {
                    return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}")));
                }
                idx
            }
            None => 0,
        };
        let (fd, local) = sys::open(SocketAddr::new(local_ip, port), &opts, scope_id)?;
        let share = if opts.shared { Some(join_shared(&fd, local)?) } else { None };
        let rx_payload = if opts.gro { MAX_UDP_PAYLOAD } else { MAX_FRAME };
        let rx_stride = (RX_HEADROOM + rx_payload).next_multiple_of(64);
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let zero_ss: libc::sockaddr_storage = unsafe { zeroed() };
        let batch = opts.batch;
        let tx_n = opts.tx_queue;
        Ok(UdpBackend {
            fd,
            share,
            local,
            scope_id,
            solver: IdSolver::new(opts.recover_ipv4_id),
            counters: UdpCounters::default(),
            tx_buf: vec![0; tx_n * MAX_FRAME],
            tx_free: (0..tx_n).rev().collect(),
            tx_q: VecDeque::with_capacity(tx_n),
            tx_names: vec![zero_ss; batch],
            tx_ctrl: vec![[0; CTRL_LEN / 8]; batch],
            rx_buf: vec![0; batch * rx_stride],
            rx_stride,
            rx_names: vec![zero_ss; batch],
            rx_ctrl: vec![[0; CTRL_LEN / 8]; batch],
            rx_pending: VecDeque::with_capacity(batch),
            rx_seg_off: 0,
            scratch: Scratch {
                // SAFETY: mmsghdr is plain old data; all-zero is valid.
                hdrs: vec![unsafe { zeroed() }; batch],
                iovs: Vec::with_capacity(batch * GSO_MAX_SEGMENTS),
            },
            opts,
        })
    }

    /// The QPN block this process owns on a shared port ([`UdpOptions::shared`]).
    pub fn qpn_block(&self) -> Option<u8> {
        self.share.as_ref().map(|(t, _)| t.block)
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Counters since opening.
    pub fn counters(&self) -> &UdpCounters {
        &self.counters
    }

    /// The options the backend was opened with.
    pub fn options(&self) -> &UdpOptions {
        &self.opts
    }

    /// Datagrams queued for transmission.
    pub fn tx_queued(&self) -> usize {
        self.tx_q.len()
    }

    /// The socket's descriptor (for an external poll loop).
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Validate a frame the engine built in slot `slot` and describe the datagram it becomes.
    fn classify(&mut self, slot: usize, len: usize) -> Result<TxEntry, &'static str> {
        let base = slot * MAX_FRAME;
        let frame = &mut self.tx_buf[base..base + len];
        let eth = EthernetFrame::new_checked(&*frame).map_err(|_| "short Ethernet header")?;
        let (l3, ethertype) = (eth.header_len(), eth.ethertype());
        let (src, dst, tos, ttl, ip_hl, total) = match ethertype {
            EtherType::IPV4 => {
                let p = Ipv4Packet::new_checked(&frame[l3..]).map_err(|_| "bad IPv4 header")?;
                if p.header_len() != uroce_wire::ipv4::HEADER_LEN {
                    return Err("IPv4 options");
                }
                if p.protocol() != uroce_wire::ipv4::PROTOCOL_UDP || p.more_frags() || p.frag_offset() != 0 {
                    return Err("not an unfragmented UDP packet");
                }
                let t = p.total_len() as usize;
                let b = &frame[l3..];
                (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()), b[1], p.ttl(), 20, t)
            }
            EtherType::IPV6 => {
                let p = Ipv6Packet::new_checked(&frame[l3..]).map_err(|_| "bad IPv6 header")?;
                if p.next_header() != uroce_wire::ipv4::PROTOCOL_UDP {
                    return Err("not UDP");
                }
                let t = 40 + p.payload_len() as usize;
                (IpAddr::V6(p.src_addr()), IpAddr::V6(p.dst_addr()), p.traffic_class(), p.hop_limit(), 40, t)
            }
            _ => return Err("not IP"),
        };
        if dst.is_ipv4() != self.local.is_ipv4() {
            return Err("IP version differs from the socket's");
        }
        if !self.local.ip().is_unspecified() && src != self.local.ip() {
            return Err("source address is not the socket's");
        }
        let udp = l3 + ip_hl;
        let end = l3 + total;
        if end > frame.len() || total < ip_hl + 8 + ICRC_LEN {
            return Err("IP length");
        }
        let u = &frame[udp..udp + 8];
        let (sport, dport) = (u16::from_be_bytes([u[0], u[1]]), u16::from_be_bytes([u[2], u[3]]));
        if usize::from(u16::from_be_bytes([u[4], u[5]])) != total - ip_hl {
            return Err("UDP length");
        }
        if sport != self.local.port() {
            // The ICRC covers the source port; the kernel sends from the bound port.
            return Err("UDP source port is not the socket's (set DeviceConfig::udp_sport)");
        }
        let mut applied = NO_ID;
        if dst.is_ipv4() {
            let b = &frame[l3..];
            let have = IdDf { ident: u16::from_be_bytes([b[4], b[5]]), dont_frag: b[6] & 0x40 != 0 };
            if have != NO_ID {
                // The kernel sends ID 0 with DF: make the ICRC match that header.
                let d = self.solver.delta(total, have, NO_ID);
                let ic = &mut frame[end - ICRC_LEN..end];
                let v = u32::from_le_bytes([ic[0], ic[1], ic[2], ic[3]]) ^ d;
                ic.copy_from_slice(&v.to_le_bytes());
                self.counters.tx_icrc_patched += 1;
            }
            applied = NO_ID;
        }
        Ok(TxEntry {
            slot,
            off: udp + 8,
            len: end - (udp + 8),
            dst: SocketAddr::new(dst, dport),
            src,
            tos,
            ttl,
            applied,
        })
    }

    /// Patch the ICRC of queued entry `i` for IPv4 ID `ident` (GSO segment numbering).
    fn set_ident(&mut self, i: usize, ident: u16) {
        let Some(e) = self.tx_q.get(i).copied() else { return };
        if !e.dst.is_ipv4() || e.applied.ident == ident {
            return;
        }
        let want = IdDf { ident, dont_frag: true };
        let total = 20 + 8 + e.len;
        let d = self.solver.delta(total, e.applied, want);
        let at = e.slot * MAX_FRAME + e.off + e.len - ICRC_LEN;
        let ic = &mut self.tx_buf[at..at + ICRC_LEN];
        let v = u32::from_le_bytes([ic[0], ic[1], ic[2], ic[3]]) ^ d;
        ic.copy_from_slice(&v.to_le_bytes());
        if let Some(e) = self.tx_q.get_mut(i) {
            e.applied = want;
        }
    }

    /// How many queued datagrams from `start` form one GSO send.
    fn gso_run(&self, start: usize) -> usize {
        let Some(first) = self.tx_q.get(start) else { return 0 };
        if !self.opts.gso {
            return 1;
        }
        let mut n = 1;
        let mut bytes = first.len;
        while let Some(e) = self.tx_q.get(start + n) {
            if n == GSO_MAX_SEGMENTS
                || e.dst != first.dst
                || e.tos != first.tos
                || e.ttl != first.ttl
                || e.src != first.src
                || e.len > first.len
                || bytes + e.len > GSO_MAX_BYTES
            {
                break;
            }
            n += 1;
            bytes += e.len;
            if e.len < first.len {
                break; // a shorter datagram ends the run
            }
        }
        n
    }

    /// One `sendmmsg` over the head of the queue. Returns false when the socket is full.
    fn send_batch(&mut self) -> io::Result<bool> {
        let v6 = !self.local.is_ipv4();
        let wildcard = self.local.ip().is_unspecified();
        // Plan the messages: (first queue index, datagrams).
        let mut plan: [(usize, usize); 1024] = [(0, 0); 1024];
        let mut msgs = 0;
        let mut q = 0;
        while msgs < self.opts.batch && q < self.tx_q.len() {
            let n = self.gso_run(q);
            plan[msgs] = (q, n);
            msgs += 1;
            q += n;
        }
        if msgs == 0 {
            return Ok(true);
        }
        // Fix the ICRCs for the IDs the kernel will give (0 for a single datagram, 0..n for
        // the segments of a GSO send).
        for &(first, n) in &plan[..msgs] {
            for k in 0..n {
                self.set_ident(first + k, if n > 1 { k as u16 } else { 0 });
            }
        }
        self.scratch.iovs.clear();
        for &(first, n) in &plan[..msgs] {
            for k in 0..n {
                let e = self.tx_q[first + k];
                let at = e.slot * MAX_FRAME + e.off;
                // SAFETY: pointer arithmetic inside `tx_buf` (`at + len <= tx_buf.len()` by
                // construction of the entry); the kernel only reads through it.
                let base = unsafe { self.tx_buf.as_mut_ptr().add(at) };
                self.scratch.iovs.push(libc::iovec { iov_base: base.cast(), iov_len: e.len });
            }
        }
        let mut iov_at = 0;
        for (m, &(first, n)) in plan[..msgs].iter().enumerate() {
            let e = self.tx_q[first];
            let (ss, sl) = sys::to_c(e.dst, self.scope_id);
            self.tx_names[m] = ss;
            let ctrl = &mut self.tx_ctrl[m];
            // SAFETY: reinterpreting a u64 array as bytes of the same size.
            let cb: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(ctrl.as_mut_ptr().cast(), CTRL_LEN) };
            let mut off = 0;
            let ok = if v6 {
                let mut ok =
                    sys::put_cmsg(cb, &mut off, libc::IPPROTO_IPV6, sys::IPV6_TCLASS, &i32::from(e.tos).to_ne_bytes());
                if e.ttl != 0 {
                    ok &= sys::put_cmsg(
                        cb,
                        &mut off,
                        libc::IPPROTO_IPV6,
                        sys::IPV6_HOPLIMIT,
                        &i32::from(e.ttl).to_ne_bytes(),
                    );
                }
                if wildcard {
                    if let IpAddr::V6(s) = e.src {
                        let mut pi = [0u8; 20];
                        pi[..16].copy_from_slice(&s.octets());
                        ok &= sys::put_cmsg(cb, &mut off, libc::IPPROTO_IPV6, sys::IPV6_PKTINFO, &pi);
                    }
                }
                ok
            } else {
                let mut ok =
                    sys::put_cmsg(cb, &mut off, libc::IPPROTO_IP, sys::IP_TOS, &i32::from(e.tos).to_ne_bytes());
                if e.ttl != 0 {
                    ok &= sys::put_cmsg(cb, &mut off, libc::IPPROTO_IP, sys::IP_TTL, &i32::from(e.ttl).to_ne_bytes());
                }
                if wildcard {
                    if let IpAddr::V4(s) = e.src {
                        // in_pktinfo: ifindex 0, ipi_spec_dst = the source address to use.
                        let mut pi = [0u8; 12];
                        pi[4..8].copy_from_slice(&s.octets());
                        ok &= sys::put_cmsg(cb, &mut off, libc::IPPROTO_IP, sys::IP_PKTINFO, &pi);
                    }
                }
                ok
            };
            let ok = if n > 1 {
                ok && sys::put_cmsg(cb, &mut off, sys::SOL_UDP, sys::UDP_SEGMENT, &(e.len as u16).to_ne_bytes())
            } else {
                ok
            };
            debug_assert!(ok, "control buffer too small");
            let h = &mut self.scratch.hdrs[m];
            h.msg_len = 0;
            h.msg_hdr.msg_name = (&mut self.tx_names[m] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = sl;
            // SAFETY: `iov_at + n <= iovs.len()`: the iovecs were pushed above in plan order.
            h.msg_hdr.msg_iov = unsafe { self.scratch.iovs.as_mut_ptr().add(iov_at) };
            h.msg_hdr.msg_iovlen = n as _;
            h.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = off as _;
            h.msg_hdr.msg_flags = 0;
            iov_at += n;
        }
        let sent = loop {
            // SAFETY: `hdrs[..msgs]` point at live names, iovecs (into `tx_buf`) and control
            // buffers owned by `self`, none of which is touched until the call returns.
            let r = unsafe {
                libc::sendmmsg(self.fd.as_raw_fd(), self.scratch.hdrs.as_mut_ptr(), msgs as _, libc::MSG_DONTWAIT)
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    self.counters.tx_would_block += 1;
                    return Ok(false);
                }
                Some(libc::EBADF) | Some(libc::ENOTSOCK) | Some(libc::EFAULT) => return Err(e),
                _ => {
                    // The first message failed (EMSGSIZE, unreachable, ...): drop it, go on.
                    let (_, n) = plan[0];
                    tracing::debug!(error = %e, dst = %self.tx_q[0].dst, datagrams = n, "udp send failed");
                    self.counters.tx_errors += n as u64;
                    self.counters.tx_syscalls += 1;
                    self.pop_tx(n);
                    return Ok(true);
                }
            }
        };
        self.counters.tx_syscalls += 1;
        let mut done = 0;
        for &(_, n) in &plan[..sent] {
            if n > 1 {
                self.counters.tx_gso_sends += 1;
            }
            done += n;
        }
        for e in self.tx_q.iter().take(done) {
            self.counters.tx_bytes += e.len as u64;
        }
        self.counters.tx_frames += done as u64;
        self.pop_tx(done);
        Ok(sent > 0)
    }

    fn pop_tx(&mut self, n: usize) {
        for _ in 0..n {
            if let Some(e) = self.tx_q.pop_front() {
                self.tx_free.push(e.slot);
            }
        }
    }

    /// One `recvmmsg` of up to `want` datagrams into the receive slots. Returns how many.
    fn recv_batch(&mut self, want: usize) -> io::Result<usize> {
        let want = want.clamp(1, self.opts.batch);
        self.scratch.iovs.clear();
        for i in 0..want {
            let at = i * self.rx_stride + RX_HEADROOM;
            // SAFETY: `at + (rx_stride - RX_HEADROOM) <= rx_buf.len()` for every slot i < batch.
            let base = unsafe { self.rx_buf.as_mut_ptr().add(at) };
            self.scratch.iovs.push(libc::iovec { iov_base: base.cast(), iov_len: self.rx_stride - RX_HEADROOM });
        }
        for i in 0..want {
            let h = &mut self.scratch.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = (&mut self.rx_names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
            // SAFETY: `i < iovs.len()`.
            h.msg_hdr.msg_iov = unsafe { self.scratch.iovs.as_mut_ptr().add(i) };
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.rx_ctrl[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = CTRL_LEN as _;
            h.msg_hdr.msg_flags = 0;
        }
        let n = loop {
            // SAFETY: `hdrs[..want]` point at live, writable names, slot buffers and control
            // buffers owned by `self` with the lengths given; nothing else touches them during
            // the call.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    self.scratch.hdrs.as_mut_ptr(),
                    want as _,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                // An ICMP error queued on the socket (a peer's port unreachable): not ours to
                // act on; reading it cleared it.
                Some(libc::ECONNREFUSED) | Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => return Ok(0),
                _ => return Err(e),
            }
        };
        if n > 0 {
            self.counters.rx_syscalls += 1;
        }
        for i in 0..n {
            let h = &self.scratch.hdrs[i];
            let len = h.msg_len as usize;
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.counters.truncated += 1;
                continue;
            }
            let Some(src) = sys::from_c(&self.rx_names[i], h.msg_hdr.msg_namelen) else {
                self.counters.rx_malformed += 1;
                continue;
            };
            // SAFETY: reinterpreting a u64 array as bytes of the same size.
            let cb: &[u8] = unsafe { std::slice::from_raw_parts(self.rx_ctrl[i].as_ptr().cast(), CTRL_LEN) };
            // msg_controllen is size_t (glibc) or socklen_t (musl).
            #[allow(clippy::unnecessary_cast)]
            let info = sys::parse_cmsgs(cb, h.msg_hdr.msg_controllen as usize);
            let seg = match info.gso_size {
                Some(s) if s < len => {
                    self.counters.rx_gro_batches += 1;
                    s
                }
                _ => len,
            };
            self.rx_pending.push_back(RxEntry {
                slot: i,
                len,
                src,
                dst: info.dst.unwrap_or(self.local.ip()),
                tos: info.tos,
                ttl: info.ttl.unwrap_or(64),
                seg: seg.max(1),
            });
        }
        self.rx_seg_off = 0;
        Ok(n)
    }

    /// Deliver up to `limit` pending segments. Returns how many were delivered (dropped ones
    /// are consumed but not counted).
    fn deliver_pending(&mut self, limit: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut delivered = 0;
        while delivered < limit {
            let Some(e) = self.rx_pending.front().copied() else { break };
            let off = self.rx_seg_off;
            let seg_len = e.seg.min(e.len - off);
            let start = e.slot * self.rx_stride + RX_HEADROOM + off;
            if self.deliver_one(&e, start, seg_len, f) {
                delivered += 1;
            }
            self.rx_seg_off += seg_len;
            if self.rx_seg_off >= e.len {
                self.rx_pending.pop_front();
                self.rx_seg_off = 0;
            }
        }
        delivered
    }

    /// Synthesize the headers in front of the payload at `rx_buf[payload..payload + len]`,
    /// verify and deliver. True if delivered.
    fn deliver_one(&mut self, e: &RxEntry, payload: usize, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let ip_hl = if e.src.is_ipv4() { 20 } else { 40 };
        let udp_len = 8 + len;
        let total = ip_hl + udp_len;
        if total > usize::from(u16::MAX) + if e.src.is_ipv4() { 0 } else { 40 } {
            self.counters.rx_malformed += 1;
            return false;
        }
        let start = payload - 8 - ip_hl - 14;
        let end = payload + len;
        let frame = &mut self.rx_buf[start..end];
        write_headers(frame, &self.opts.mac, e, self.local.port(), len);
        match uroce_wire::parse_frame_verified(frame) {
            Ok(_) => {}
            Err(uroce_wire::Error::IcrcMismatch { computed, found, .. }) if e.src.is_ipv4() => {
                match self.solver.solve(total, computed, found) {
                    Some(idf) => {
                        let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..14 + 20]);
                        ip.set_ident(idf.ident);
                        ip.set_dont_frag(idf.dont_frag);
                        ip.fill_checksum();
                        debug_assert!(uroce_wire::parse_frame_verified(frame).is_ok());
                        self.counters.rx_id_recovered += 1;
                    }
                    None => {
                        self.counters.icrc_err += 1;
                        return false;
                    }
                }
            }
            Err(uroce_wire::Error::IcrcMismatch { .. }) => {
                self.counters.icrc_err += 1;
                return false;
            }
            Err(err) if err.is_not_roce() => {
                self.counters.rx_not_roce += 1;
                return false;
            }
            Err(_) => {
                self.counters.rx_malformed += 1;
                return false;
            }
        }
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += len as u64;
        f(frame);
        true
    }
}

/// Write Ethernet + IP + UDP headers into `frame[..14 + ip + 8]`, in front of a UDP payload
/// of `len` bytes that fills the rest of `frame`.
fn write_headers(frame: &mut [u8], mac: &EthernetAddress, e: &RxEntry, dport: u16, len: usize) {
    let udp_len = (8 + len) as u16;
    frame[0..6].copy_from_slice(&mac.0);
    frame[6..12].copy_from_slice(&PEER_MAC.0);
    let l4 = match (e.src.ip(), e.dst) {
        (IpAddr::V4(s), d) => {
            let d = match d {
                IpAddr::V4(d) => d,
                IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
            };
            frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let mut p = Ipv4Packet::new_unchecked(&mut frame[14..34]);
            p.set_version_ihl();
            p.set_total_len(20 + udp_len);
            p.set_ident(0);
            p.set_dont_frag(true);
            p.set_ttl(e.ttl);
            p.set_protocol(uroce_wire::ipv4::PROTOCOL_UDP);
            p.set_src_addr(s);
            p.set_dst_addr(d);
            let b = p.into_inner();
            b[1] = e.tos;
            b[6] &= 0x40; // DF only: no MF, fragment offset 0
            b[7] = 0;
            Ipv4Packet::new_unchecked(&mut *b).fill_checksum();
            34
        }
        (IpAddr::V6(s), d) => {
            let d = match d {
                IpAddr::V6(d) => d,
                IpAddr::V4(_) => Ipv6Addr::UNSPECIFIED,
            };
            frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let mut p = Ipv6Packet::new_unchecked(&mut frame[14..54]);
            p.set_ver_tc_flow(e.tos, 0);
            p.set_payload_len(udp_len);
            p.set_next_header(uroce_wire::ipv4::PROTOCOL_UDP);
            p.set_hop_limit(e.ttl);
            p.set_src_addr(s);
            p.set_dst_addr(d);
            54
        }
    };
    let u = &mut frame[l4..l4 + 8];
    u[0..2].copy_from_slice(&e.src.port().to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
}

impl Backend for UdpBackend {
    fn describe(&self) -> String {
        format!(
            "kernel UDP socket {} ({}, sendmmsg/recvmmsg batch {}, GSO {}, GRO {}, IPv4 ID recovery {})",
            self.local,
            if self.local.is_ipv4() { "IPv4" } else { "IPv6" },
            self.opts.batch,
            if self.opts.gso { "on" } else { "off" },
            if self.opts.gro { "on" } else { "off" },
            if self.opts.recover_ipv4_id { "on" } else { "off" },
        )
    }

    fn recv(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        // Whatever a previous call left (GRO segments beyond its `max`) goes first. Invariant
        // on return: frames are still held here only if `max` were delivered, so a caller that
        // sleeps on the socket after a short batch never sleeps on held frames.
        let mut delivered = self.deliver_pending(max, f);
        // Bounded work per call: a few batches at most, even when most datagrams are dropped.
        for _ in 0..4 {
            if delivered >= max {
                break;
            }
            let want = (max - delivered).min(self.opts.batch);
            let n = self.recv_batch(want)?;
            if n == 0 {
                break;
            }
            delivered += self.deliver_pending(max - delivered, f);
            if n < want {
                break; // the socket is drained
            }
        }
        Ok(delivered)
    }

    fn send_with(&mut self, build: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> io::Result<bool> {
        if self.tx_free.is_empty() {
            self.flush()?;
        }
        let Some(&slot) = self.tx_free.last() else {
            return Err(io::Error::from(io::ErrorKind::WouldBlock));
        };
        let base = slot * MAX_FRAME;
        let Some(len) = build(&mut self.tx_buf[base..base + MAX_FRAME]) else { return Ok(false) };
        match self.classify(slot, len.min(MAX_FRAME)) {
            Ok(entry) => {
                self.tx_free.pop();
                self.tx_q.push_back(entry);
            }
            Err(why) => {
                // Usually a misconfigured engine (e.g. `udp_sport` not set): say so once.
                if self.counters.tx_bad_frames == 0 {
                    tracing::warn!(why, local = %self.local, "udp backend: dropping a frame it cannot send");
                } else {
                    tracing::debug!(why, "udp backend: dropping a frame it cannot send");
                }
                self.counters.tx_bad_frames += 1;
            }
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        while !self.tx_q.is_empty() {
            if !self.send_batch()? {
                break;
            }
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if !self.rx_pending.is_empty() {
            return Ok(());
        }
        let mut events = libc::POLLIN;
        if !self.tx_q.is_empty() {
            events |= libc::POLLOUT;
        }
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events, revents: 0 };
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    fn verifies_icrc(&self) -> bool {
        true
    }

    fn delivers_link_headers(&self) -> bool {
        false
    }

    /// The socket: readable when datagrams wait. Frames the backend holds itself (GRO
    /// segments beyond a `recv`'s `max`) do not make it readable, but they exist only after a
    /// `recv` that delivered its full `max`, so a loop that waits only after a short batch
    /// never waits on them.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn fixed_udp_src_port(&self) -> Option<u16> {
        Some(self.local.port())
    }

    fn qpn_block(&self) -> Option<u8> {
        UdpBackend::qpn_block(self)
    }

    fn reaches_own_address(&self) -> bool {
        true
    }

    fn cm_services(&self) -> Option<(&uroce_xdp_prog::ServiceMap, u8)> {
        self.share.as_ref().map(|(t, steering)| (steering.services(), t.block))
    }
}

#[cfg(test)]
mod tests;
