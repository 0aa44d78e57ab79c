//! Writing packet captures: what a [`Port`](crate::runtime::Port) moves, as a pcap file of
//! Ethernet frames with nanosecond timestamps that Wireshark, tshark and `uroce pcap` read.

pub mod read;

use anyhow::{Context, Result};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

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
