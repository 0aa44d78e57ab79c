//! Reading and writing packet captures, and checking the RoCEv2 frames in them.
//!
//! Wireshark shows the ICRC but never checks it; [`check_capture`] (behind `uroce pcap`) is
//! how a user checks a capture from a peer: every UDP/4791 frame is decoded with
//! `uroce-wire` and its ICRC recomputed.
//!
//! Reading accepts pcap and pcapng with Ethernet, Linux cooked (SLL, SLL2) and raw IP link
//! types. Whether a frame is "UDP to port 4791" is decided independently of `uroce-wire`
//! (by `etherparse`'s lax parser), so a frame our decoder rejects is counted as undecodable
//! rather than silently as "not RoCE".

use anyhow::{bail, Context, Result};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;
use uroce_wire::{parse_frame, parse_ip, Error as WireError, ParsedFrame, ROCE_V2_PORT};

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Capture timestamp (since the epoch).
    pub timestamp: Duration,
    /// Link type of `data`.
    pub linktype: DataLink,
    /// The bytes, starting with the link-layer header.
    pub data: Vec<u8>,
}

/// Read every frame of a pcap or pcapng file.
pub fn read_capture(path: &Path) -> Result<Vec<Captured>> {
    let mut f = BufReader::new(std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?);
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).with_context(|| format!("read {}", path.display()))?;
    let f = std::io::Cursor::new(magic).chain(f);
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).with_context(|| format!("{}: bad pcapng header", path.display()))?;
        let mut links: Vec<DataLink> = Vec::new();
        while let Some(block) = r.next_block() {
            let block = block.with_context(|| format!("{}: bad pcapng block", path.display()))?;
            match block {
                // A new section restarts interface numbering.
                Block::SectionHeader(_) => links.clear(),
                Block::InterfaceDescription(i) => links.push(i.linktype),
                Block::EnhancedPacket(p) => {
                    let linktype =
                        *links.get(p.interface_id as usize).context("pcapng packet refers to an unknown interface")?;
                    out.push(Captured { timestamp: p.timestamp, linktype, data: p.data.into_owned() });
                }
                Block::SimplePacket(p) => {
                    let linktype = links.first().copied().unwrap_or(DataLink::ETHERNET);
                    out.push(Captured { timestamp: Duration::ZERO, linktype, data: p.data.into_owned() });
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(f).with_context(|| format!("{}: not a pcap or pcapng file", path.display()))?;
        let linktype = r.header().datalink;
        while let Some(p) = r.next_packet() {
            let p = p.with_context(|| format!("{}: bad pcap record", path.display()))?;
            out.push(Captured { timestamp: p.timestamp, linktype, data: p.data.into_owned() });
        }
    }
    Ok(out)
}

/// Writes Ethernet frames to a pcap file (nanosecond timestamps).
pub struct CaptureWriter<W: Write> {
    w: PcapWriter<W>,
}

impl<W: Write> CaptureWriter<W> {
    /// Start a pcap stream of Ethernet frames.
    pub fn new(w: W) -> Result<Self> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            snaplen: 65535,
            ..Default::default()
        };
        Ok(CaptureWriter { w: PcapWriter::with_header(w, header)? })
    }

    /// Append a frame.
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<()> {
        self.w.write_packet(&PcapPacket::new(timestamp, frame.len() as u32, frame))?;
        Ok(())
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(self) -> W {
        self.w.into_writer()
    }
}

/// What a captured frame turned out to be.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a short-lived return value, never stored in bulk
pub enum Decoded<'a> {
    /// Not UDP to port 4791 (ARP, TCP, the perftest exchange, ...).
    NotRoce,
    /// A RoCEv2 frame; `icrc` says whether its ICRC verified.
    Roce {
        /// The decoded frame.
        frame: ParsedFrame<'a>,
        /// `Ok` or the ICRC mismatch.
        icrc: std::result::Result<(), WireError>,
    },
    /// UDP to port 4791 that does not decode as RoCEv2.
    Undecodable(WireError),
}

/// Where the IP packet starts for a link type (and its EtherType when the link says).
fn network_layer(linktype: DataLink, data: &[u8]) -> Option<(usize, Option<u16>)> {
    match linktype {
        DataLink::ETHERNET => Some((0, None)), // handled by parse_frame
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some((0, None)),
        // Linux cooked capture v1: 16-byte header, protocol in bytes 14..16.
        DataLink::LINUX_SLL if data.len() >= 16 => Some((16, Some(u16::from_be_bytes([data[14], data[15]])))),
        // v2: 20-byte header, protocol in bytes 0..2.
        DataLink::LINUX_SLL2 if data.len() >= 20 => Some((20, Some(u16::from_be_bytes([data[0], data[1]])))),
        _ => None,
    }
}

/// Is this frame UDP with destination port 4791? Decided by etherparse, independently of
/// `uroce-wire`, tolerating truncation.
fn is_udp_4791(linktype: DataLink, data: &[u8]) -> bool {
    use etherparse::{LaxSlicedPacket, TransportSlice};
    let sliced = match linktype {
        DataLink::ETHERNET => LaxSlicedPacket::from_ethernet(data).ok(),
        _ => match network_layer(linktype, data) {
            Some((off, Some(t))) => Some(LaxSlicedPacket::from_ether_type(etherparse::EtherType(t), &data[off..])),
            Some((off, None)) => LaxSlicedPacket::from_ip(&data[off..]).ok(),
            None => None,
        },
    };
    matches!(sliced.and_then(|s| s.transport), Some(TransportSlice::Udp(u)) if u.destination_port() == ROCE_V2_PORT)
}

/// Decode one captured frame.
pub fn decode(linktype: DataLink, data: &[u8]) -> Decoded<'_> {
    let parsed = match linktype {
        DataLink::ETHERNET => parse_frame(data),
        _ => match network_layer(linktype, data) {
            Some((off, _)) => parse_ip(&data[off..]),
            None => return Decoded::NotRoce,
        },
    };
    let candidate = is_udp_4791(linktype, data);
    match parsed {
        Ok(frame) => {
            let icrc = if cfg!(fuzzing) { Ok(()) } else { frame.check_icrc() };
            Decoded::Roce { frame, icrc }
        }
        Err(e) if candidate => Decoded::Undecodable(e),
        Err(_) => Decoded::NotRoce,
    }
}

/// Totals over a set of captures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CheckSummary {
    /// Frames read.
    pub packets: u64,
    /// RoCEv2 frames decoded.
    pub roce: u64,
    /// ... whose ICRC verified.
    pub icrc_ok: u64,
    /// ... whose ICRC did not.
    pub icrc_bad: u64,
    /// UDP/4791 frames that did not decode.
    pub undecodable: u64,
}

impl CheckSummary {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.icrc_bad == 0 && self.undecodable == 0
    }
}

impl std::fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "packets: {} roce: {} icrc_ok: {} icrc_bad: {} undecodable: {}",
            self.packets, self.roce, self.icrc_ok, self.icrc_bad, self.undecodable
        )
    }
}

/// Check every frame of `paths`, writing one line per RoCEv2 (or undecodable) frame to `out`
/// unless `quiet`. Returns the totals.
pub fn check_capture(paths: &[impl AsRef<Path>], out: &mut dyn Write, quiet: bool) -> Result<CheckSummary> {
    let mut s = CheckSummary::default();
    for path in paths {
        let path = path.as_ref();
        let frames = read_capture(path)?;
        if paths.len() > 1 && !quiet {
            writeln!(out, "# {}", path.display())?;
        }
        let t0 = frames.first().map(|f| f.timestamp).unwrap_or_default();
        for (i, c) in frames.iter().enumerate() {
            s.packets += 1;
            let t = c.timestamp.saturating_sub(t0).as_secs_f64();
            match decode(c.linktype, &c.data) {
                Decoded::NotRoce => {}
                Decoded::Roce { frame, icrc } => {
                    s.roce += 1;
                    let ok = icrc.is_ok();
                    if ok {
                        s.icrc_ok += 1;
                    } else {
                        s.icrc_bad += 1;
                    }
                    if !quiet {
                        writeln!(
                            out,
                            "{:>6} {t:>11.6} {} icrc {}",
                            i + 1,
                            uroce_wire::pretty::Summary(&frame),
                            if ok { "ok" } else { "BAD" }
                        )?;
                    }
                }
                Decoded::Undecodable(e) => {
                    s.undecodable += 1;
                    if !quiet {
                        writeln!(out, "{:>6} {t:>11.6} UNDECODABLE: {e}", i + 1)?;
                    }
                }
            }
        }
    }
    Ok(s)
}

/// Fail unless the summary is clean (used by tests and tools that gate on a capture).
pub fn require_clean(s: &CheckSummary) -> Result<()> {
    if !s.is_clean() {
        bail!("capture check failed: {s}");
    }
    Ok(())
}

/// A pcap file being written that can be flushed without closing it (a capture running as
/// long as a port or a test does). `Send`, so a port that captures can move to its thread.
pub struct CaptureFile {
    w: CaptureWriter<SharedFile>,
    file: std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>,
}

struct SharedFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl Write for SharedFile {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl CaptureFile {
    /// Create (truncate) `path` and write the pcap header.
    pub fn create(path: &Path) -> Result<CaptureFile> {
        let f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        let file = std::sync::Arc::new(std::sync::Mutex::new(std::io::BufWriter::new(f)));
        Ok(CaptureFile { w: CaptureWriter::new(SharedFile(file.clone()))?, file })
    }

    /// Append a frame.
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<()> {
        self.w.write(timestamp, frame)
    }

    /// Push buffered frames to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.file.lock().unwrap_or_else(|e| e.into_inner()).flush()?;
        Ok(())
    }
}
