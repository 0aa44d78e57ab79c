//! Reading pcap and pcapng captures frame by frame, as they stream in: what `uroce pcap`
//! decodes and what the `capture_reader` fuzz target feeds hostile files to. A capture that is
//! cut short or malformed part-way delivers the frames before the problem, then a
//! [`CaptureError`] saying where.

use anyhow::Result;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

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

/// Why a capture file could not be read to its end. Frames before the problem were delivered
/// (as tshark shows the frames before a cut); this says what is wrong and where.
#[derive(Debug)]
pub struct CaptureError {
    /// The file.
    pub path: std::path::PathBuf,
    /// What is wrong.
    pub kind: CaptureErrorKind,
}

/// What is wrong with a capture file.
#[derive(Debug)]
pub enum CaptureErrorKind {
    /// It could not be opened.
    Open(std::io::Error),
    /// It could not be read.
    Io(std::io::Error),
    /// It has no bytes at all.
    Empty,
    /// Its first bytes are no pcap or pcapng magic number.
    NotACapture {
        /// The first (up to) four bytes.
        magic: Vec<u8>,
        /// The file's length.
        len: u64,
    },
    /// The file ends inside the file header (pcap) or the first section header (pcapng).
    TruncatedHeader {
        /// The file's length.
        len: u64,
    },
    /// The file ends inside a record (pcap) or block (pcapng) that starts at `offset`: the
    /// capture was cut short (a full disk, a killed tcpdump, a partial copy).
    Truncated {
        /// Byte offset of the incomplete record or block.
        offset: u64,
        /// Bytes of it the file holds.
        have: u64,
        /// Frames read before it.
        frames: u64,
    },
    /// A record or block at `offset` is malformed.
    Corrupt {
        /// Byte offset of the record or block.
        offset: u64,
        /// Frames read before it.
        frames: u64,
        /// What the parser said.
        reason: String,
    },
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path.display();
        match &self.kind {
            CaptureErrorKind::Open(e) => write!(f, "open {p}: {e}"),
            CaptureErrorKind::Io(e) => write!(f, "read {p}: {e}"),
            CaptureErrorKind::Empty => write!(f, "{p}: empty file (0 bytes), not a capture"),
            CaptureErrorKind::NotACapture { magic, len } => {
                let hex: String = magic.iter().map(|b| format!("{b:02x}")).collect();
                write!(f, "{p}: not a pcap or pcapng file (it starts with 0x{hex}; {len} bytes)")
            }
            CaptureErrorKind::TruncatedHeader { len } => {
                write!(f, "{p}: truncated at byte {len}: the file ends inside its header")
            }
            CaptureErrorKind::Truncated { offset, have, frames } => write!(
                f,
                "{p}: truncated at byte {}: cut short {have} bytes into the record at byte {offset}, after {frames} \
                 frame{}",
                offset + have,
                if *frames == 1 { "" } else { "s" }
            ),
            CaptureErrorKind::Corrupt { offset, frames, reason } => {
                write!(f, "{p}: bad record at byte {offset}, after {frames} frames: {reason}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// The largest record or block accepted (a corrupt length field must not make the reader
/// buffer gigabytes): 16 MiB, well above any snapshot length (tcpdump's is 256 KiB).
const MAX_RECORD: usize = 16 << 20;

/// A file read through a growing buffer that knows the file offset of what it holds.
struct Stream<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
}

/// The outcome of one parse attempt on the buffered bytes.
enum Next<T> {
    Item(T),
    /// Clean end of file: nothing left.
    End,
}

impl<R: Read> Stream<R> {
    fn new(r: R) -> Self {
        Stream { r, buf: vec![0; 1 << 20], start: 0, end: 0, base: 0 }
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Reads more bytes; `Ok(false)` at end of file or when a record outgrows [`MAX_RECORD`].
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_RECORD {
                return Ok(false);
            }
            self.buf.resize((self.buf.len() * 2).min(MAX_RECORD), 0);
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses the next item with `parse` (one of pcap-file's slice parsers), reading as much
    /// as it needs; the error says where the file ends or what is malformed.
    fn next<T>(
        &mut self,
        frames: u64,
        mut parse: impl FnMut(&[u8]) -> std::result::Result<(usize, T), pcap_file::PcapError>,
    ) -> std::result::Result<Next<T>, CaptureErrorKind> {
        loop {
            if self.data().is_empty() && !self.fill().map_err(CaptureErrorKind::Io)? {
                return Ok(Next::End);
            }
            match parse(self.data()) {
                Ok((used, item)) => {
                    self.start += used;
                    return Ok(Next::Item(item));
                }
                Err(pcap_file::PcapError::IncompleteBuffer) => {
                    let (offset, have) = (self.offset(), self.data().len() as u64);
                    if !self.fill().map_err(CaptureErrorKind::Io)? {
                        if have as usize >= MAX_RECORD {
                            return Err(CaptureErrorKind::Corrupt {
                                offset,
                                frames,
                                reason: format!("a record longer than {} MiB", MAX_RECORD >> 20),
                            });
                        }
                        return Err(CaptureErrorKind::Truncated { offset, have, frames });
                    }
                }
                Err(e) => {
                    return Err(CaptureErrorKind::Corrupt { offset: self.offset(), frames, reason: e.to_string() })
                }
            }
        }
    }
}

/// Calls `f` with every frame of a pcap or pcapng file, in order, as it reads them. A file
/// that is cut short or malformed part-way delivers the frames before the problem, then fails
/// with a [`CaptureError`] saying where; an error from `f` stops the reading and is returned.
pub fn for_each_frame(path: &Path, f: impl FnMut(Captured) -> Result<()>) -> Result<()> {
    let fail = |kind| anyhow::Error::new(CaptureError { path: path.to_path_buf(), kind });
    let file = std::fs::File::open(path).map_err(|e| fail(CaptureErrorKind::Open(e)))?;
    for_each_frame_in(path, file, f)
}

/// [`for_each_frame`] over any reader; `path` only names it in errors.
pub fn for_each_frame_in(path: &Path, r: impl Read, mut f: impl FnMut(Captured) -> Result<()>) -> Result<()> {
    let fail = |kind| anyhow::Error::new(CaptureError { path: path.to_path_buf(), kind });
    let mut st = Stream::new(r);
    while st.data().len() < 4 && st.fill().map_err(|e| fail(CaptureErrorKind::Io(e)))? {}
    let magic: Vec<u8> = st.data()[..st.data().len().min(4)].to_vec();
    let len = st.data().len() as u64;
    if magic.is_empty() {
        return Err(fail(CaptureErrorKind::Empty));
    }
    const PCAP_MAGICS: [[u8; 4]; 4] =
        [[0xa1, 0xb2, 0xc3, 0xd4], [0xd4, 0xc3, 0xb2, 0xa1], [0xa1, 0xb2, 0x3c, 0x4d], [0x4d, 0x3c, 0xb2, 0xa1]];
    const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
    let pcapng = magic == PCAPNG_MAGIC;
    if !pcapng && !PCAP_MAGICS.iter().any(|m| magic == m[..]) {
        if magic.len() < 4 && PCAP_MAGICS.iter().chain([&PCAPNG_MAGIC]).any(|m| m.starts_with(&magic)) {
            return Err(fail(CaptureErrorKind::TruncatedHeader { len }));
        }
        return Err(fail(CaptureErrorKind::NotACapture { magic, len }));
    }
    let header_err = |e: CaptureErrorKind| match e {
        CaptureErrorKind::Truncated { offset, have, .. } => CaptureErrorKind::TruncatedHeader { len: offset + have },
        e => e,
    };
    let mut frames = 0u64;
    if pcapng {
        let mut parser = match st.next(0, |b| PcapNgParser::new(b).map(|(rem, p)| (b.len() - rem.len(), p))) {
            Ok(Next::Item(p)) => p,
            Ok(Next::End) => return Err(fail(CaptureErrorKind::TruncatedHeader { len })),
            Err(e) => return Err(fail(header_err(e))),
        };
        let mut links: Vec<DataLink> = Vec::new();
        loop {
            let at = st.offset();
            let item = st.next(frames, |b| {
                parser.next_block(b).map(|(rem, block)| {
                    let owned = match block {
                        Block::SectionHeader(_) => NgItem::Section,
                        Block::InterfaceDescription(i) => NgItem::Interface(i.linktype),
                        Block::EnhancedPacket(p) => {
                            NgItem::Packet(Some(p.interface_id), p.timestamp, p.data.into_owned())
                        }
                        Block::SimplePacket(p) => NgItem::Packet(None, Duration::ZERO, p.data.into_owned()),
                        _ => NgItem::Other,
                    };
                    (b.len() - rem.len(), owned)
                })
            });
            match item.map_err(fail)? {
                Next::End => return Ok(()),
                // A new section restarts interface numbering.
                Next::Item(NgItem::Section) => links.clear(),
                Next::Item(NgItem::Interface(l)) => links.push(l),
                Next::Item(NgItem::Packet(iface, timestamp, data)) => {
                    let linktype = match iface {
                        Some(i) => match links.get(i as usize) {
                            Some(l) => *l,
                            None => {
                                let reason = format!("a packet of interface {i}, which no block described");
                                return Err(fail(CaptureErrorKind::Corrupt { offset: at, frames, reason }));
                            }
                        },
                        None => links.first().copied().unwrap_or(DataLink::ETHERNET),
                    };
                    frames += 1;
                    f(Captured { timestamp, linktype, data })?;
                }
                Next::Item(NgItem::Other) => {}
            }
        }
    } else {
        let parser = match st.next(0, |b| PcapParser::new(b).map(|(rem, p)| (b.len() - rem.len(), p))) {
            Ok(Next::Item(p)) => p,
            Ok(Next::End) => return Err(fail(CaptureErrorKind::TruncatedHeader { len })),
            Err(e) => return Err(fail(header_err(e))),
        };
        let linktype = parser.header().datalink;
        loop {
            let item = st.next(frames, |b| {
                parser.next_packet(b).map(|(rem, p)| (b.len() - rem.len(), (p.timestamp, p.data.into_owned())))
            });
            match item.map_err(fail)? {
                Next::End => return Ok(()),
                Next::Item((timestamp, data)) => {
                    frames += 1;
                    f(Captured { timestamp, linktype, data })?;
                }
            }
        }
    }
}

/// A pcapng block, owned.
enum NgItem {
    Section,
    Interface(DataLink),
    Packet(Option<u32>, Duration, Vec<u8>),
    Other,
}

/// Read every frame of a pcap or pcapng file ([`for_each_frame`] into a vector).
pub fn read_capture(path: &Path) -> Result<Vec<Captured>> {
    let mut out = Vec::new();
    for_each_frame(path, |c| {
        out.push(c);
        Ok(())
    })?;
    Ok(out)
}
