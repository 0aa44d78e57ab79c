//! Reading and writing packet captures, and checking the RoCEv2 frames in them (reading and
//! writing are `uroce_io::capture`'s, re-exported here: a port captures what it moves, and the
//! fuzzers read hostile captures without the CLI).
//!
//! Wireshark shows the ICRC but never checks it; [`check_capture`] (behind `uroce pcap`) is
//! how a user checks a capture from a peer: every UDP/4791 frame is decoded with
//! `uroce-wire` and its ICRC recomputed.
//!
//! Reading accepts pcap and pcapng with Ethernet, Linux cooked (SLL, SLL2) and raw IP link
//! types. Whether a frame is "UDP to port 4791" is decided independently of `uroce-wire`
//! (by `etherparse`'s lax parser), so a frame our decoder rejects is counted as undecodable
//! rather than silently as "not RoCE".

use anyhow::{bail, Result};
use pcap_file::DataLink;
use std::io::Write;
use std::path::Path;
pub use uroce_io::capture::{CaptureFile, CaptureWriter};
use uroce_wire::{parse_frame, parse_ip, Error as WireError, ParsedFrame, ROCE_V2_PORT};

pub use uroce_io::capture::read::{
    for_each_frame, for_each_frame_in, read_capture, CaptureError, CaptureErrorKind, Captured,
};

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
    check_into(paths, out, quiet, &mut s)?;
    Ok(s)
}

/// [`check_capture`] into `s`, streaming: each frame's line is written as the frame is read, so
/// a capture cut short shows every frame before the cut, then fails with the [`CaptureError`]
/// (`s` holds the totals up to there).
pub fn check_into(paths: &[impl AsRef<Path>], out: &mut dyn Write, quiet: bool, s: &mut CheckSummary) -> Result<()> {
    for path in paths {
        let path = path.as_ref();
        if paths.len() > 1 && !quiet {
            writeln!(out, "# {}", path.display())?;
        }
        let (mut i, mut t0) = (0u64, None);
        for_each_frame(path, |c| {
            i += 1;
            s.packets += 1;
            let t = c.timestamp.saturating_sub(*t0.get_or_insert(c.timestamp)).as_secs_f64();
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
                            "{i:>6} {t:>11.6} {} icrc {}",
                            uroce_wire::pretty::Summary(&frame),
                            if ok { "ok" } else { "BAD" }
                        )?;
                    }
                }
                Decoded::Undecodable(e) => {
                    s.undecodable += 1;
                    if !quiet {
                        writeln!(out, "{i:>6} {t:>11.6} UNDECODABLE: {e}")?;
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Fail unless the summary is clean (used by tests and tools that gate on a capture).
pub fn require_clean(s: &CheckSummary) -> Result<()> {
    if !s.is_clean() {
        bail!("capture check failed: {s}");
    }
    Ok(())
}
