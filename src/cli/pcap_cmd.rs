//! `uroce pcap` and `uroce gen-pcap`.

use crate::pcap::{check_into, CaptureError, CaptureWriter, CheckSummary};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `uroce pcap`: one line per RoCEv2 frame as it is read, then the summary line. A capture that
/// is cut short or malformed part-way still shows every frame before the problem and the
/// summary of those, then fails with what is wrong and where, as tshark does (exit status 2;
/// 1 when a frame is bad, 0 when all is well).
pub fn check(files: &[PathBuf], quiet: bool) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut s = CheckSummary::default();
    let r = check_into(files, &mut out, quiet, &mut s);
    if let Err(e) = &r {
        // Writing failed (e.g. a closed pipe), or nothing was read at all (an empty file, not a
        // capture): no summary, just the error.
        if e.downcast_ref::<CaptureError>().is_none() || s.packets == 0 {
            return r.map(|()| ExitCode::SUCCESS);
        }
    }
    writeln!(out, "{s}")?;
    out.flush()?;
    r?;
    Ok(if s.is_clean() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub fn generate(file: &Path) -> Result<ExitCode> {
    let f = std::fs::File::create(file).with_context(|| format!("create {}", file.display()))?;
    let mut w = CaptureWriter::new(std::io::BufWriter::new(f))?;
    let frames = crate::sample::frames();
    for (i, fr) in frames.iter().enumerate() {
        w.write(Duration::from_micros(1_700_000_000_000_000 + i as u64 * 10), fr)?;
    }
    w.into_inner().flush()?;
    writeln!(std::io::stdout(), "wrote {} frames to {}", frames.len(), file.display())?;
    Ok(ExitCode::SUCCESS)
}
