//! `uroce pcap` and `uroce gen-pcap`.

use crate::pcap::{check_into, decode, for_each_frame, CaptureError, CaptureWriter, CheckSummary, Decoded};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `uroce pcap --extract DIR`: every RoCEv2 frame of Ethernet captures, one file each.
pub fn extract(files: &[PathBuf], dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for file in files {
        let stem = file.file_stem().map_or("capture".into(), |s| s.to_string_lossy().into_owned());
        let mut n = 0u64;
        // a capture cut short: the frames before the cut are extracted, the check reports it
        let _ = for_each_frame(file, |c| {
            if c.linktype == pcap_file::DataLink::ETHERNET
                && matches!(decode(c.linktype, &c.data), Decoded::Roce { .. })
            {
                let p = dir.join(format!("{stem}-{n}.bin"));
                std::fs::write(&p, &c.data).with_context(|| format!("write {}", p.display()))?;
                n += 1;
            }
            Ok(())
        });
    }
    Ok(())
}

/// `uroce pcap`: one line per RoCEv2 frame as it is read, then the summary line. A capture that
/// is cut short or malformed part-way still shows every frame before the problem and the
/// summary of those, then fails with what is wrong and where, as tshark does (exit status 2;
/// 1 when a frame is bad, 0 when all is well).
/// With `flows`, the per-flow report ([`crate::flows`]) takes the per-frame lines' place
/// (and `plot` writes each flow's PSN graph).
pub fn check(files: &[PathBuf], quiet: bool, flows: bool, plot: Option<&Path>) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut s = CheckSummary::default();
    let r = check_into(files, &mut out, quiet || flows, &mut s);
    if flows && !quiet {
        let mut f = crate::flows::Flows::default();
        for file in files {
            // A capture cut short was reported above; its frames before the cut still count.
            let _ = for_each_frame(file, |c| {
                if let Decoded::Roce { frame, .. } = decode(c.linktype, &c.data) {
                    f.add(c.timestamp, &frame);
                }
                Ok(())
            });
        }
        f.write(&mut out)?;
        if let Some(dir) = plot {
            for p in crate::flows::plot(&f, dir).with_context(|| format!("write plots into {}", dir.display()))? {
                writeln!(out, "wrote {}", p.display())?;
            }
        }
    }
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
