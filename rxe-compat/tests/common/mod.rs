//! Shared helpers for the rxe-compat integration tests: where the real rxe captures are (the
//! project's fixtures and the public captures beside them), TCP stream reassembly from them,
//! and an in-memory stream that replays one side's bytes.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The public Linux rxe captures (third-party, copied into the repository with their origin and
/// licence: `fixtures/rxe-public/README.md`). Part of the repository, so never skipped.
pub fn public_captures() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/rxe-public");
    assert!(dir.join("README.md").is_file(), "{} is missing (it is part of the repository)", dir.display());
    dir
}

/// The project's own rxe-to-rxe fixtures (`fixtures/rxe-*.pcap`, recorded by its QEMU harness).
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// One link-layer frame's IP packet, whatever the capture's link type.
fn sliced(datalink: pcap_file::DataLink, data: &[u8]) -> Option<etherparse::SlicedPacket<'_>> {
    match datalink {
        pcap_file::DataLink::ETHERNET => etherparse::SlicedPacket::from_ethernet(data).ok(),
        pcap_file::DataLink::LINUX_SLL => etherparse::SlicedPacket::from_linux_sll(data).ok(),
        pcap_file::DataLink::RAW | pcap_file::DataLink::IPV4 | pcap_file::DataLink::IPV6 => {
            etherparse::SlicedPacket::from_ip(data).ok()
        }
        other => panic!("unsupported capture link type {other:?}"),
    }
}

/// Frames of a pcap file with its link type.
pub fn read_pcap(path: &Path) -> (pcap_file::DataLink, Vec<Vec<u8>>) {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let dl = r.header().datalink;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    (dl, out)
}

/// Direction of a TCP segment relative to the side that listens on `server_port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

/// The reassembled TCP conversation on `server_port`.
#[derive(Debug, Default)]
pub struct TcpConversation {
    /// Client IPv4 address.
    pub client_ip: [u8; 4],
    /// Server IPv4 address.
    pub server_ip: [u8; 4],
    /// New payload of every segment, in capture order (retransmitted bytes dropped).
    pub segments: Vec<(Dir, Vec<u8>)>,
    /// All client-to-server bytes in order.
    pub client: Vec<u8>,
    /// All server-to-client bytes in order.
    pub server: Vec<u8>,
    /// Indices (in the capture) from the connection's first frame to its last.
    pub frames: std::ops::Range<usize>,
}

impl TcpConversation {
    /// Sizes of the segments in one direction.
    pub fn sizes(&self, d: Dir) -> Vec<usize> {
        self.segments.iter().filter(|(x, _)| *x == d).map(|(_, p)| p.len()).collect()
    }
    /// The whole exchange as "C16 S16 ..." (for failure messages).
    pub fn shape(&self) -> String {
        self.segments
            .iter()
            .map(|(d, p)| format!("{}{}", if *d == Dir::ToServer { 'C' } else { 'S' }, p.len()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Reassemble both directions of the (single) IPv4 TCP connection to `server_port`,
/// in sequence-number order; panics on a gap (an incomplete capture) or on more than one
/// connection.
pub fn tcp_conversation(path: &Path, server_port: u16) -> TcpConversation {
    let mut v = tcp_conversations(path, server_port);
    assert_eq!(v.len(), 1, "{}: {} TCP connections to port {server_port}", path.display(), v.len());
    v.remove(0)
}

/// Every IPv4 TCP connection to `server_port` in a capture (one per client port, in the order
/// of their SYNs), each reassembled as [`tcp_conversation`] does.
pub fn tcp_conversations(path: &Path, server_port: u16) -> Vec<TcpConversation> {
    let (dl, frames) = read_pcap(path);
    // client port -> (index into `convs`, next expected sequence number per direction)
    let mut by_port: std::collections::HashMap<u16, (usize, [Option<u32>; 2])> = Default::default();
    let mut convs: Vec<TcpConversation> = Vec::new();
    for (no, f) in frames.iter().enumerate() {
        let Some(s) = sliced(dl, f) else { continue };
        let (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Tcp(tcp))) = (&s.net, &s.transport)
        else {
            continue;
        };
        let (dir, client_port) = if tcp.destination_port() == server_port {
            (Dir::ToServer, tcp.source_port())
        } else if tcp.source_port() == server_port {
            (Dir::ToClient, tcp.destination_port())
        } else {
            continue;
        };
        let (ci, next) = by_port.entry(client_port).or_insert_with(|| {
            convs.push(TcpConversation { frames: no..no + 1, ..Default::default() });
            (convs.len() - 1, [None, None])
        });
        let conv = &mut convs[*ci];
        conv.frames.end = no + 1;
        if dir == Dir::ToServer {
            conv.client_ip = ip.header().source();
            conv.server_ip = ip.header().destination();
        }
        let i = dir as usize;
        let seq = tcp.sequence_number();
        if tcp.syn() {
            next[i] = Some(seq.wrapping_add(1));
            continue;
        }
        let payload = tcp.payload();
        if payload.is_empty() {
            continue;
        }
        let expect = next[i].unwrap_or_else(|| panic!("{}: data before the SYN", path.display()));
        let ahead = seq.wrapping_sub(expect) as i32;
        assert!(ahead <= 0, "{}: gap of {ahead} bytes in the TCP stream", path.display());
        let skip = (-ahead) as usize;
        if skip >= payload.len() {
            continue; // a pure retransmission
        }
        let new = &payload[skip..];
        next[i] = Some(expect.wrapping_add(new.len() as u32));
        match dir {
            Dir::ToServer => conv.client.extend_from_slice(new),
            Dir::ToClient => conv.server.extend_from_slice(new),
        }
        conv.segments.push((dir, new.to_vec()));
    }
    convs
}

/// RoCEv2 frames (UDP 4791) of an Ethernet capture: (index of the frame in the capture,
/// IPv4 or IPv6 source address, frame).
pub fn roce_frames_indexed(path: &Path) -> Vec<(usize, std::net::IpAddr, Vec<u8>)> {
    let (dl, frames) = read_pcap(path);
    assert_eq!(dl, pcap_file::DataLink::ETHERNET, "uroce_wire::parse_frame needs Ethernet frames");
    frames
        .into_iter()
        .enumerate()
        .filter_map(|(no, f)| {
            let src = {
                let s = sliced(dl, &f)?;
                match (&s.net, &s.transport) {
                    (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Udp(u)))
                        if u.destination_port() == 4791 =>
                    {
                        std::net::IpAddr::from(ip.header().source())
                    }
                    (Some(etherparse::NetSlice::Ipv6(ip)), Some(etherparse::TransportSlice::Udp(u)))
                        if u.destination_port() == 4791 =>
                    {
                        std::net::IpAddr::from(ip.header().source())
                    }
                    _ => return None,
                }
            };
            Some((no, src, f))
        })
        .collect()
}

/// RoCEv2 frames (UDP 4791) of a capture with their IPv4 source address.
pub fn roce_frames(path: &Path) -> Vec<([u8; 4], Vec<u8>)> {
    let (dl, frames) = read_pcap(path);
    assert_eq!(dl, pcap_file::DataLink::ETHERNET, "uroce_wire::parse_frame needs Ethernet frames");
    frames
        .into_iter()
        .filter_map(|f| {
            let src = {
                let s = sliced(dl, &f)?;
                match (&s.net, &s.transport) {
                    (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Udp(u)))
                        if u.destination_port() == 4791 =>
                    {
                        ip.header().source()
                    }
                    _ => return None,
                }
            };
            Some((src, f))
        })
        .collect()
}

/// An in-memory peer: reads return the recorded bytes of the other side (in small, varying
/// chunks, to exercise partial reads), then EOF; writes are recorded, one entry per call.
#[derive(Debug)]
pub struct ReplayStream {
    incoming: VecDeque<u8>,
    chunk: usize,
    /// Everything written.
    pub written: Vec<u8>,
    /// Size of every `write` call.
    pub writes: Vec<usize>,
}

impl ReplayStream {
    /// A stream whose reads yield `incoming`.
    pub fn new(incoming: &[u8]) -> Self {
        ReplayStream { incoming: incoming.iter().copied().collect(), chunk: 0, written: Vec::new(), writes: Vec::new() }
    }
    /// Bytes not read yet.
    pub fn unread(&self) -> usize {
        self.incoming.len()
    }
}

impl Read for ReplayStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // 1, 2, ..., 13, 1, 2, ... bytes per call.
        self.chunk = self.chunk % 13 + 1;
        let n = buf.len().min(self.chunk).min(self.incoming.len());
        for b in buf.iter_mut().take(n) {
            *b = self.incoming.pop_front().unwrap_or(0);
        }
        Ok(n)
    }
}

impl Write for ReplayStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written.extend_from_slice(buf);
        self.writes.push(buf.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
