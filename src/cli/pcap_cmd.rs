//! `uroce pcap` and `uroce gen-pcap`.

use crate::pcap::{check_capture, CaptureWriter};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub fn check(files: &[PathBuf], quiet: bool) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let s = check_capture(files, &mut out, quiet)?;
    writeln!(out, "{s}")?;
    out.flush()?;
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
    println!("wrote {} frames to {}", frames.len(), file.display());
    Ok(ExitCode::SUCCESS)
}
